//! One model request as a series of attempts, the same for every provider: each attempt is
//! bounded by the request timeout, a retryable failure waits (as the server asks, else with
//! backoff) and tries again, a cancel ends it at once, and what reaches the caller is one
//! `LlmError` with the key redacted.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::credentials::ApiKey;
use super::retry::backoff_delay;
use super::{LlmError, ProviderEvent, Turn};

/// Why a stream did not produce a turn.
#[derive(Debug, PartialEq)]
pub enum StreamFailure {
    /// No bytes arrived for the idle timeout.
    Stalled(Duration),
    /// The connection broke, or ended before the answer was complete.
    Transport(String),
    /// The server reported an error in the middle of the stream.
    ApiError { error_type: String, message: String },
    /// The server sent something that is not its protocol.
    Protocol(String),
}

/// Why one attempt failed.
#[derive(Debug)]
pub enum AttemptFailure {
    /// The server answered with an error status.
    Status {
        status: u16,
        retryable: bool,
        server_delay: Option<Duration>,
        error_type: String,
        message: String,
    },
    /// No connection was made; the cause in plain words.
    Unreachable(String),
    Stream(StreamFailure),
}

impl AttemptFailure {
    fn is_retryable(&self) -> bool {
        match self {
            AttemptFailure::Status { retryable, .. } => *retryable,
            AttemptFailure::Stream(StreamFailure::Protocol(_)) => false,
            // A mid-stream error discards the partial turn; the whole turn is sent again.
            AttemptFailure::Stream(_) | AttemptFailure::Unreachable(_) => true,
        }
    }

    fn server_delay(&self) -> Option<Duration> {
        match self {
            AttemptFailure::Status { server_delay, .. } => *server_delay,
            AttemptFailure::Stream(_) | AttemptFailure::Unreachable(_) => None,
        }
    }

    fn summary(&self) -> String {
        match self {
            AttemptFailure::Status {
                status, error_type, ..
            } => format!("HTTP {status} {error_type}"),
            AttemptFailure::Stream(StreamFailure::Stalled(idle)) => {
                format!("stream stalled for {:.1}s", idle.as_secs_f64())
            }
            AttemptFailure::Unreachable(cause) => format!("cannot reach the model API: {cause}"),
            AttemptFailure::Stream(StreamFailure::Transport(message)) => message.clone(),
            AttemptFailure::Stream(StreamFailure::ApiError { error_type, .. }) => {
                format!("{error_type} mid-stream")
            }
            AttemptFailure::Stream(StreamFailure::Protocol(message)) => message.clone(),
        }
    }

    fn into_error(self, endpoint: &Endpoint, attempts: u32) -> LlmError {
        match self {
            AttemptFailure::Unreachable(cause) => LlmError::Unreachable {
                base_url: endpoint.base_url.trim_end_matches('/').to_owned(),
                variable: endpoint.variable,
                cause,
                attempts,
            },
            AttemptFailure::Status {
                status,
                error_type,
                message,
                ..
            } => LlmError::Http {
                status,
                error_type,
                message,
                attempts,
            },
            AttemptFailure::Stream(StreamFailure::Stalled(idle)) => {
                LlmError::Stalled { idle, attempts }
            }
            AttemptFailure::Stream(StreamFailure::Transport(message)) => {
                LlmError::Transport { message, attempts }
            }
            AttemptFailure::Stream(StreamFailure::ApiError {
                error_type,
                message,
            }) => LlmError::StreamError {
                error_type,
                message,
                attempts,
            },
            AttemptFailure::Stream(StreamFailure::Protocol(message)) => LlmError::Protocol(message),
        }
    }
}

impl From<StreamFailure> for AttemptFailure {
    fn from(failure: StreamFailure) -> AttemptFailure {
        AttemptFailure::Stream(failure)
    }
}

/// Where requests go, and the variable that sets it (named when it cannot be reached).
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub base_url: String,
    pub variable: &'static str,
}

/// How long attempts may take and how often to try.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    pub max_retries: u32,
    /// Upper bound for one attempt, request to the end of the answer.
    pub request_timeout: Duration,
    /// How long a stream may stay silent before the attempt counts as stalled.
    pub stream_idle_timeout: Duration,
}

/// Runs `attempt` until it returns a turn, fails in a way not worth retrying, or the retries
/// are used up. Returns `LlmError::Cancelled` promptly once `cancel` fires, also while
/// waiting to retry.
pub async fn with_retries<F, Fut>(
    policy: RetryPolicy,
    endpoint: &Endpoint,
    key: Option<&ApiKey>,
    on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
    cancel: &CancellationToken,
    mut attempt: F,
) -> Result<Turn, LlmError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Turn, AttemptFailure>>,
{
    let redact = |text: &str| key.map_or_else(|| text.to_owned(), |key| key.redact(text));
    let mut attempts = 0;
    loop {
        attempts += 1;
        let bounded = tokio::time::timeout(policy.request_timeout, attempt());
        let failure = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(LlmError::Cancelled),
            result = bounded => match result {
                Ok(Ok(turn)) => return Ok(turn),
                Ok(Err(failure)) => failure,
                Err(_) => AttemptFailure::Stream(StreamFailure::Transport(format!(
                    "no complete answer within the request timeout of {}s",
                    policy.request_timeout.as_secs()
                ))),
            },
        };
        let retries_so_far = attempts - 1;
        if !failure.is_retryable() || retries_so_far >= policy.max_retries {
            return Err(failure.into_error(endpoint, attempts).redacted(&redact));
        }
        let delay = failure
            .server_delay()
            .unwrap_or_else(|| backoff_delay(retries_so_far, fastrand::f64()));
        let reason = redact(&failure.summary());
        tracing::warn!(attempt = attempts, ?delay, %reason, "retrying model request");
        on_event(ProviderEvent::Retrying {
            attempt: attempts,
            max_retries: policy.max_retries,
            delay,
            reason,
        });
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(LlmError::Cancelled),
            _ = tokio::time::sleep(delay) => {}
        }
    }
}
