use std::time::Duration;

use futures::io::AsyncWrite;
use nvim_rs::Neovim;
use nvim_rs::compat::tokio::Compat;
use nvim_rs::error::CallError;
use tokio::sync::mpsc::UnboundedReceiver;

use super::dto::{EventMessage, to_value};
use super::lua_call::exec_lua_within;
use crate::agent::LoopEvent;

const DISPATCH: &str = "return require('loopr.events').dispatch(...)";
/// A blocked Neovim (a hit-enter prompt, a long `:!`) must not hold events forever; the event
/// is dropped and the next one tried.
pub(super) const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);

type Writer = Compat<tokio::fs::File>;

/// Delivers loop events to Lua in order, one at a time, until Neovim goes away.
pub async fn forward_events(neovim: Neovim<Writer>, mut events: UnboundedReceiver<LoopEvent>) {
    while let Some(event) = events.recv().await {
        match deliver_event(&neovim, event).await {
            Ok(()) => {}
            Err(Delivery::ChannelClosed) => break,
            Err(failure) => tracing::warn!(?failure, "delivering an event to Neovim"),
        }
    }
}

#[derive(Debug)]
pub enum Delivery {
    Encoding(String),
    ChannelClosed,
    Rejected(Box<CallError>),
    TimedOut,
}

/// Calls `require('loopr.events').dispatch(event)` with the event as the host sends it.
pub async fn deliver_event<W>(neovim: &Neovim<W>, event: LoopEvent) -> Result<(), Delivery>
where
    W: AsyncWrite + Send + Unpin + 'static,
{
    let message = EventMessage::from(event);
    let value = to_value(&message).map_err(Delivery::Encoding)?;
    Delivery::outcome(exec_lua_within(neovim, DISPATCH, vec![value], DELIVERY_TIMEOUT).await)
}

impl Delivery {
    /// What became of a call into Lua, from `exec_lua_within`'s answer.
    pub(super) fn outcome<T>(answer: Option<Result<T, Box<CallError>>>) -> Result<(), Delivery> {
        match answer {
            Some(Ok(_)) => Ok(()),
            Some(Err(err)) if err.is_channel_closed() => Err(Delivery::ChannelClosed),
            Some(Err(err)) => Err(Delivery::Rejected(err)),
            None => Err(Delivery::TimedOut),
        }
    }
}
