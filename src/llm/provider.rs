//! The `LlmProvider` trait every language-model backend implements (one whole turn per call,
//! progress reported as `ProviderEvent`s), and how a provider sends the model's calls.

use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::{ChatRequest, LlmError, ServerWindow, Turn};

/// What a provider reports while a turn is under way, for progress display and the
/// transcript.
#[derive(Clone, Debug, PartialEq)]
pub enum ProviderEvent {
    /// Text of the answer as it streams in (never a call's input, never the model's
    /// reasoning). A failed attempt's text is followed by `Retrying`.
    TextDelta { text: String },
    /// The model started writing a tool call.
    ToolCallStarted { name: String },
    /// A piece of a tool call's input streamed in: its length in bytes only (the input is
    /// read whole, once the call is), for showing the answer grow.
    ToolInputDelta { bytes: usize },
    /// The attempt failed in a way worth retrying; the next one starts after `delay`.
    Retrying {
        attempt: u32,
        max_retries: u32,
        delay: Duration,
        reason: String,
    },
}

/// A language-model backend. Implementations own transport, streaming and retries; callers see
/// only whole turns.
#[async_trait]
pub trait LlmProvider: Send + Sync {
    /// Sends the conversation and returns the model's complete answer. Returns
    /// `LlmError::Cancelled` promptly once `cancel` fires, also during a retry wait.
    async fn complete(
        &self,
        request: &ChatRequest,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<Turn, LlmError>;

    /// What the server says about the context window it runs `model` with, for settings left
    /// to be fitted to it. Asked at most once per server and model in a host run (a failure
    /// asked again), bounded in time, the wait for the server's turn included; `NotAsked`
    /// where there is nothing to ask (hosted APIs).
    async fn server_window(&self, _model: &str) -> ServerWindow {
        ServerWindow::NotAsked
    }

    /// How the calls of an answer go over the wire, for estimating what was sent when the
    /// server counts nothing.
    fn calls_sent(&self) -> CallsSent {
        CallsSent::AsBlocks
    }
}

/// How a provider sends the model's calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallsSent {
    /// As blocks of their own, beside the answer's text.
    AsBlocks,
    /// Only inside the answer's text, as the model wrote them (a text tool protocol): the
    /// calls read out of that text are not sent again.
    InTheText,
}
