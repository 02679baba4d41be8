//! The `LlmProvider` trait every language-model backend implements (one whole turn per call,
//! progress reported as `ProviderEvent`s), and how a provider sends the model's calls.

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::provider_event::ProviderEvent;
use super::{ChatRequest, LlmError, ServerWindow, Turn};

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
