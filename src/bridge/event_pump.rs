//! The one queue of what the host sends Lua unasked (loop events and the answers to
//! asynchronous requests), delivered in order, one at a time, until Neovim goes away.

use std::time::Duration;

use futures::io::AsyncWrite;
use nvim_rs::compat::tokio::Compat;
use nvim_rs::error::CallError;
use nvim_rs::{Neovim, Value};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::dto::{EventMessage, to_value};
use super::lua_call::exec_lua_within;
use crate::agent::{EventSink, LoopEvent};

const DISPATCH: &str = "return require('loopr.events').dispatch(...)";
const REPLY: &str = "return require('loopr.host').reply(...)";
/// A blocked Neovim (a hit-enter prompt, a long `:!`) must not hold events forever; the event
/// is dropped and the next one tried.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);

type Writer = Compat<tokio::fs::File>;

/// What the host sends Lua unasked, in one queue so Lua sees it in the order it happened: a
/// loop's first events come before the answer to the request that started it.
pub enum Outgoing {
    Event(LoopEvent),
    Reply {
        token: i64,
        outcome: Result<Value, String>,
    },
}

/// The sending end of that queue: the core's event sink, and where asynchronous requests
/// answer.
#[derive(Clone)]
pub struct OutgoingQueue(UnboundedSender<Outgoing>);

impl OutgoingQueue {
    pub fn new() -> (OutgoingQueue, UnboundedReceiver<Outgoing>) {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        (OutgoingQueue(sender), receiver)
    }

    pub fn reply(&self, token: i64, outcome: Result<Value, String>) {
        // The receiver only goes away when the host shuts down; no one waits for answers then.
        let _ = self.0.send(Outgoing::Reply { token, outcome });
    }
}

impl EventSink for OutgoingQueue {
    fn emit(&self, event: LoopEvent) {
        let _ = self.0.send(Outgoing::Event(event));
    }
}

/// Delivers loop events and answers to Lua in order, one at a time, until Neovim goes away.
pub async fn forward_events(neovim: Neovim<Writer>, mut outgoing: UnboundedReceiver<Outgoing>) {
    while let Some(message) = outgoing.recv().await {
        let delivered = match message {
            Outgoing::Event(event) => deliver_event(&neovim, event).await,
            Outgoing::Reply { token, outcome } => deliver_reply(&neovim, token, outcome).await,
        };
        match delivered {
            Ok(()) => {}
            Err(Delivery::ChannelClosed) => break,
            Err(failure) => tracing::warn!(?failure, "delivering to Neovim"),
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
    call_lua(neovim, DISPATCH, vec![value]).await
}

/// Calls `require('loopr.host').reply(token, err, result)`: the answer to the asynchronous
/// request `token`, `err` a message (nil on success), `result` the reply (nil on error).
pub async fn deliver_reply<W>(
    neovim: &Neovim<W>,
    token: i64,
    outcome: Result<Value, String>,
) -> Result<(), Delivery>
where
    W: AsyncWrite + Send + Unpin + 'static,
{
    let (err, result) = match outcome {
        Ok(result) => (Value::Nil, result),
        Err(message) => (Value::from(message), Value::Nil),
    };
    call_lua(neovim, REPLY, vec![Value::from(token), err, result]).await
}

pub(super) async fn call_lua<W>(
    neovim: &Neovim<W>,
    code: &'static str,
    args: Vec<Value>,
) -> Result<(), Delivery>
where
    W: AsyncWrite + Send + Unpin + 'static,
{
    match exec_lua_within(neovim, code, args, DELIVERY_TIMEOUT).await {
        Some(Ok(_)) => Ok(()),
        Some(Err(err)) if err.is_channel_closed() => Err(Delivery::ChannelClosed),
        Some(Err(err)) => Err(Delivery::Rejected(err)),
        None => Err(Delivery::TimedOut),
    }
}
