//! One model request as a series of attempts, the same for every provider: each attempt's
//! answer is read within its bounds (`answer_body.rs`: the request timeout until it begins and
//! between its real pieces, the idle timeout for silence, a cap on its size), a retryable
//! failure waits (as the server asks, else with backoff) and tries again, a cancel ends it at
//! once, and what reaches the caller is one `LlmError` with the key redacted.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::answer_body::AnswerLimits;
use super::credentials::ApiKey;
use super::error::{interruption_hint, is_overflow_report, seconds};
use super::provider_event::ProviderEvent;
use super::retry::backoff_delay;
use super::stream_failure::StreamFailure;
use super::{Endpoint, LlmError, ServerKind, Turn};

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
            AttemptFailure::Status {
                retryable,
                error_type,
                message,
                ..
            } => *retryable && !is_overflow_report(&[error_type, message]),
            AttemptFailure::Stream(StreamFailure::ApiError {
                error_type,
                message,
                code,
            }) => !is_final_stream_error(error_type, message, code.as_deref()),
            AttemptFailure::Stream(StreamFailure::Protocol(_) | StreamFailure::TooLong { .. }) => {
                false
            }
            // A mid-stream failure discards the partial turn; the whole turn is sent again.
            AttemptFailure::Stream(_) | AttemptFailure::Unreachable(_) => true,
        }
    }

    fn server_delay(&self) -> Option<Duration> {
        match self {
            AttemptFailure::Status { server_delay, .. } => *server_delay,
            AttemptFailure::Stream(_) | AttemptFailure::Unreachable(_) => None,
        }
    }

    /// Why the attempt failed, for the log and the retry's event.
    pub(crate) fn summary(&self, server: ServerKind) -> String {
        match self {
            AttemptFailure::Status {
                status, error_type, ..
            } => format!("HTTP {status} {error_type}"),
            AttemptFailure::Stream(StreamFailure::Stalled(idle)) => {
                format!("stream stalled for {:.1}s", idle.as_secs_f64())
            }
            AttemptFailure::Stream(StreamFailure::NoProgress { waited, started }) => {
                let what = if *started {
                    "nothing more"
                } else {
                    "no answer"
                };
                format!("{what} within the request timeout of {}", seconds(*waited))
            }
            AttemptFailure::Unreachable(cause) => format!("cannot reach the model API: {cause}"),
            AttemptFailure::Stream(StreamFailure::Transport(message)) => message.clone(),
            AttemptFailure::Stream(StreamFailure::DroppedBeforeAnswer(cause)) => {
                format!("the connection closed before the answer began ({cause})")
            }
            AttemptFailure::Stream(StreamFailure::EndedEarly(detail)) => format!(
                "the server ended the answer before it was complete: {detail}{}",
                interruption_hint(server)
            ),
            AttemptFailure::Stream(StreamFailure::TooLong { limit }) => {
                format!("the answer passed {limit} bytes")
            }
            AttemptFailure::Stream(StreamFailure::ApiError { error_type, .. }) => {
                format!("{error_type} mid-stream")
            }
            AttemptFailure::Stream(StreamFailure::Protocol(message)) => message.clone(),
        }
    }

    fn into_error(self, endpoint: &Endpoint, attempts: u32) -> LlmError {
        let server = endpoint.server;
        match self {
            AttemptFailure::Unreachable(cause) => LlmError::Unreachable {
                base_url: super::url_to_show(&endpoint.base_url),
                variable: endpoint.variable,
                cause,
                attempts,
            },
            AttemptFailure::Status {
                error_type,
                message,
                ..
            } if is_overflow_report(&[&error_type, &message]) => LlmError::ContextOverflow {
                message,
                server,
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
            AttemptFailure::Stream(StreamFailure::NoProgress { waited, started }) => {
                LlmError::TimedOut {
                    waited,
                    started,
                    attempts,
                }
            }
            AttemptFailure::Stream(StreamFailure::Transport(message)) => {
                LlmError::Transport { message, attempts }
            }
            AttemptFailure::Stream(StreamFailure::DroppedBeforeAnswer(cause)) => {
                LlmError::DroppedBeforeAnswer {
                    cause,
                    server,
                    attempts,
                }
            }
            AttemptFailure::Stream(StreamFailure::EndedEarly(detail)) => LlmError::EndedEarly {
                detail,
                server,
                attempts,
            },
            AttemptFailure::Stream(StreamFailure::TooLong { limit }) => {
                LlmError::AnswerTooLong { limit, attempts }
            }
            AttemptFailure::Stream(StreamFailure::ApiError {
                error_type,
                message,
                code,
            }) if is_overflow_report(&[&error_type, &message, code.as_deref().unwrap_or("")]) => {
                LlmError::ContextOverflow {
                    message,
                    server,
                    attempts,
                }
            }
            AttemptFailure::Stream(StreamFailure::ApiError {
                error_type,
                message,
                ..
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

/// Whether an error reported in a stream will come again however often the request is sent:
/// the request is too long for the context, asks for what the server does not support, or is
/// refused as the client's fault (a 4xx code or type, but for timeouts, conflicts and rate
/// limits).
fn is_final_stream_error(error_type: &str, message: &str, code: Option<&str>) -> bool {
    let code = code.unwrap_or("");
    if is_overflow_report(&[error_type, message, code]) {
        return true;
    }
    let message = message.to_ascii_lowercase();
    if message.contains("not supported") || message.contains("unsupported") {
        return true;
    }
    if let Ok(status) = code.parse::<u16>() {
        return (400..500).contains(&status) && !matches!(status, 408 | 409 | 429);
    }
    matches!(
        error_type,
        "invalid_request_error"
            | "authentication_error"
            | "permission_error"
            | "not_found_error"
            | "billing_error"
            | "request_too_large"
            | "not_supported_error"
    )
}

/// How long attempts may take and how often to try.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    pub max_retries: u32,
    /// How long an attempt may wait for its answer to begin, and once it has, for each next
    /// piece of it; an answer that keeps coming is bounded by its size instead.
    pub request_timeout: Duration,
    /// How long a stream may stay silent before the attempt counts as stalled.
    pub stream_idle_timeout: Duration,
}

/// Runs `attempt` until it returns a turn, fails in a way not worth retrying, or the retries
/// are used up. Each attempt gets the bounds of its answer, room for `max_tokens` tokens.
/// Returns `LlmError::Cancelled` promptly once `cancel` fires, also while waiting to retry.
pub async fn with_retries<F, Fut>(
    policy: RetryPolicy,
    endpoint: &Endpoint,
    key: Option<&ApiKey>,
    max_tokens: u32,
    on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
    cancel: &CancellationToken,
    mut attempt: F,
) -> Result<Turn, LlmError>
where
    F: FnMut(AnswerLimits) -> Fut,
    Fut: Future<Output = Result<Turn, AttemptFailure>>,
{
    let redact = |text: &str| key.map_or_else(|| text.to_owned(), |key| key.redact(text));
    let mut attempts = 0;
    loop {
        attempts += 1;
        // The request waits for its server's turn; its bounds start once it has it.
        let turn = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(LlmError::Cancelled),
            turn = endpoint.take_turn() => turn,
        };
        let limits = AnswerLimits::starting_now(
            policy.stream_idle_timeout,
            policy.request_timeout,
            max_tokens,
        );
        let failure = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(LlmError::Cancelled),
            result = attempt(limits) => match result {
                Ok(turn) => return Ok(turn),
                Err(failure) => failure,
            },
        };
        // Others may go while this one waits to retry.
        drop(turn);
        let retries_so_far = attempts - 1;
        if !failure.is_retryable() || retries_so_far >= policy.max_retries {
            return Err(failure.into_error(endpoint, attempts).redacted(&redact));
        }
        let delay = failure
            .server_delay()
            .unwrap_or_else(|| backoff_delay(retries_so_far, fastrand::f64()));
        let reason = redact(&failure.summary(endpoint.server));
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
