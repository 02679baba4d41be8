use std::time::Duration;

use nvim_rs::Neovim;
use nvim_rs::compat::tokio::Compat;
use tokio::sync::mpsc::UnboundedReceiver;

use super::dto::{EventMessage, to_value};
use crate::agent::LoopEvent;

const DISPATCH: &str = "return require('loopr.events').dispatch(...)";
/// A blocked Neovim (a hit-enter prompt, a long `:!`) must not hold events forever; the event
/// is dropped and the next one tried.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);

type Writer = Compat<tokio::fs::File>;

/// Delivers loop events to Lua in order, one at a time, until Neovim goes away.
pub async fn forward_events(neovim: Neovim<Writer>, mut events: UnboundedReceiver<LoopEvent>) {
    while let Some(event) = events.recv().await {
        let message = EventMessage::from(event);
        let value = match to_value(&message) {
            Ok(value) => value,
            Err(err) => {
                tracing::error!(error = %err, ?message, "encoding an event");
                continue;
            }
        };
        match tokio::time::timeout(DELIVERY_TIMEOUT, neovim.exec_lua(DISPATCH, vec![value])).await {
            Ok(Ok(_)) => {}
            Ok(Err(err)) if err.is_channel_closed() => break,
            Ok(Err(err)) => tracing::warn!(error = %err, "Neovim rejected an event"),
            Err(_) => tracing::warn!(?message, "Neovim did not take an event within 10s; dropped"),
        }
    }
}
