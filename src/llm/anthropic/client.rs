use std::fmt;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderValue};
use tokio_util::sync::CancellationToken;

use super::retry::{backoff_delay, is_retryable_status, server_requested_delay};
use super::stream::{StreamFailure, read_turn};
use super::wire::{ErrorBody, RequestBody};
use crate::llm::{ChatRequest, LlmError, LlmProvider, ProviderEvent, Turn};

pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
const API_VERSION: &str = "2023-06-01";

/// The API key. It is never printed: `Debug` is redacted, the header is marked sensitive and
/// error texts pass through `redact`.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: String) -> ApiKey {
        ApiKey(key)
    }

    /// Replaces every occurrence of the key in `text`.
    pub fn redact(&self, text: &str) -> String {
        if self.0.is_empty() {
            text.to_owned()
        } else {
            text.replace(&self.0, "[REDACTED]")
        }
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([REDACTED])")
    }
}

#[derive(Clone, Debug)]
pub struct AnthropicConfig {
    pub base_url: String,
    pub api_key: ApiKey,
    pub max_retries: u32,
    /// Upper bound for one attempt, headers to `message_stop`.
    pub request_timeout: Duration,
    /// How long the stream may stay silent before the attempt counts as stalled.
    pub stream_idle_timeout: Duration,
}

impl AnthropicConfig {
    pub fn new(
        credentials: &AnthropicCredentials,
        max_retries: u32,
        request_timeout: Duration,
        stream_idle_timeout: Duration,
    ) -> Result<AnthropicConfig, LlmError> {
        let api_key = credentials
            .api_key
            .clone()
            .ok_or(LlmError::MissingEnv("ANTHROPIC_API_KEY"))?;
        Ok(AnthropicConfig {
            base_url: credentials.base_url.clone(),
            api_key,
            max_retries,
            request_timeout,
            stream_idle_timeout,
        })
    }
}

/// The API key and endpoint, read once when the host starts.
#[derive(Clone, Debug)]
pub struct AnthropicCredentials {
    api_key: Option<ApiKey>,
    base_url: String,
}

impl AnthropicCredentials {
    /// Reads `ANTHROPIC_API_KEY` and `ANTHROPIC_BASE_URL` (default `https://api.anthropic.com`)
    /// and removes the key from this process's environment, so no command the host starts
    /// inherits it.
    ///
    /// # Safety
    /// Changes the process environment: call it before any other thread exists.
    pub unsafe fn take_from_env() -> AnthropicCredentials {
        let api_key = std::env::var("ANTHROPIC_API_KEY")
            .ok()
            .filter(|key| !key.trim().is_empty())
            .map(ApiKey::new);
        // SAFETY: the caller guarantees no other thread reads or writes the environment.
        unsafe { std::env::remove_var("ANTHROPIC_API_KEY") };
        let base_url = std::env::var("ANTHROPIC_BASE_URL")
            .ok()
            .filter(|url| !url.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        AnthropicCredentials { api_key, base_url }
    }
}

pub struct AnthropicClient {
    http: reqwest::Client,
    messages_url: reqwest::Url,
    headers: HeaderMap,
    config: AnthropicConfig,
}

impl AnthropicClient {
    pub fn new(config: AnthropicConfig) -> Result<AnthropicClient, LlmError> {
        let invalid = |name, message: String| LlmError::InvalidConfig { name, message };
        let base = config.base_url.trim_end_matches('/');
        let messages_url = reqwest::Url::parse(&format!("{base}/v1/messages")).map_err(|err| {
            invalid(
                "ANTHROPIC_BASE_URL",
                format!("{base:?} is not a URL: {err}"),
            )
        })?;
        let mut key_header = HeaderValue::from_str(&config.api_key.0).map_err(|_| {
            invalid(
                "ANTHROPIC_API_KEY",
                "it contains characters not allowed in an HTTP header".to_owned(),
            )
        })?;
        key_header.set_sensitive(true);
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", key_header);
        headers.insert("anthropic-version", HeaderValue::from_static(API_VERSION));
        headers.insert("accept", HeaderValue::from_static("text/event-stream"));
        let http = reqwest::Client::builder()
            .user_agent(concat!("loopr/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(30))
            .build()
            .map_err(|err| invalid("HTTP client", err.to_string()))?;
        Ok(AnthropicClient {
            http,
            messages_url,
            headers,
            config,
        })
    }

    async fn attempt(
        &self,
        body: &RequestBody<'_>,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
    ) -> Result<Turn, AttemptFailure> {
        let idle = self.config.stream_idle_timeout;
        let send = self
            .http
            .post(self.messages_url.clone())
            .headers(self.headers.clone())
            .json(body)
            .send();
        let response = tokio::time::timeout(idle, send)
            .await
            .map_err(|_| AttemptFailure::Stream(StreamFailure::Stalled(idle)))?
            .map_err(|err| AttemptFailure::Stream(StreamFailure::Transport(describe(&err))))?;
        let status = response.status();
        if !status.is_success() {
            let headers = response.headers().clone();
            let text = tokio::time::timeout(idle, response.text())
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
            let error = ErrorBody::parse(&text);
            let retryable =
                is_retryable_status(status.as_u16(), &headers, error.error_code.as_deref());
            return Err(AttemptFailure::Status {
                status: status.as_u16(),
                retryable,
                server_delay: server_requested_delay(&headers, SystemTime::now()),
                error,
            });
        }
        read_turn(response.bytes_stream(), idle, on_event)
            .await
            .map_err(AttemptFailure::Stream)
    }
}

#[async_trait]
impl LlmProvider for AnthropicClient {
    async fn complete(
        &self,
        request: &ChatRequest,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<Turn, LlmError> {
        let body = RequestBody::streaming(request);
        let max_retries = self.config.max_retries;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let attempt =
                tokio::time::timeout(self.config.request_timeout, self.attempt(&body, on_event));
            let failure = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(LlmError::Cancelled),
                result = attempt => match result {
                    Ok(Ok(turn)) => return Ok(turn),
                    Ok(Err(failure)) => failure,
                    Err(_) => AttemptFailure::Stream(StreamFailure::Transport(format!(
                        "no complete answer within the request timeout of {}s",
                        self.config.request_timeout.as_secs()
                    ))),
                },
            };
            let retries_so_far = attempts - 1;
            if !failure.is_retryable() || retries_so_far >= max_retries {
                return Err(self.redact(failure.into_error(attempts)));
            }
            let delay = failure
                .server_delay()
                .unwrap_or_else(|| backoff_delay(retries_so_far, fastrand::f64()));
            tracing::warn!(attempt = attempts, ?delay, reason = %failure.summary(), "retrying model request");
            on_event(ProviderEvent::Retrying {
                attempt: attempts,
                max_retries,
                delay,
                reason: self.config.api_key.redact(&failure.summary()),
            });
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(LlmError::Cancelled),
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }
}

impl AnthropicClient {
    fn redact(&self, error: LlmError) -> LlmError {
        let key = &self.config.api_key;
        match error {
            LlmError::Http {
                status,
                error_type,
                message,
                attempts,
            } => LlmError::Http {
                status,
                error_type,
                message: key.redact(&message),
                attempts,
            },
            LlmError::Transport { message, attempts } => LlmError::Transport {
                message: key.redact(&message),
                attempts,
            },
            LlmError::StreamError {
                error_type,
                message,
                attempts,
            } => LlmError::StreamError {
                error_type,
                message: key.redact(&message),
                attempts,
            },
            LlmError::Protocol(message) => LlmError::Protocol(key.redact(&message)),
            other => other,
        }
    }
}

#[derive(Debug)]
enum AttemptFailure {
    Status {
        status: u16,
        retryable: bool,
        server_delay: Option<Duration>,
        error: ErrorBody,
    },
    Stream(StreamFailure),
}

impl AttemptFailure {
    fn is_retryable(&self) -> bool {
        match self {
            AttemptFailure::Status { retryable, .. } => *retryable,
            AttemptFailure::Stream(StreamFailure::Protocol(_)) => false,
            // A mid-stream error discards the partial turn; the whole turn is sent again.
            AttemptFailure::Stream(_) => true,
        }
    }

    fn server_delay(&self) -> Option<Duration> {
        match self {
            AttemptFailure::Status { server_delay, .. } => *server_delay,
            AttemptFailure::Stream(_) => None,
        }
    }

    fn summary(&self) -> String {
        match self {
            AttemptFailure::Status { status, error, .. } => {
                format!("HTTP {status} {}", error.error_type)
            }
            AttemptFailure::Stream(StreamFailure::Stalled(idle)) => {
                format!("stream stalled for {:.1}s", idle.as_secs_f64())
            }
            AttemptFailure::Stream(StreamFailure::Transport(message)) => message.clone(),
            AttemptFailure::Stream(StreamFailure::ApiError { error_type, .. }) => {
                format!("{error_type} mid-stream")
            }
            AttemptFailure::Stream(StreamFailure::Protocol(message)) => message.clone(),
        }
    }

    fn into_error(self, attempts: u32) -> LlmError {
        match self {
            AttemptFailure::Status { status, error, .. } => LlmError::Http {
                status,
                error_type: error.error_type,
                message: error.message,
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

/// reqwest's Display hides the underlying cause ("error sending request"); the chain says
/// what actually went wrong (connection refused, reset, ...).
fn describe(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_key_is_redacted_in_debug_and_text() {
        let key = ApiKey::new("sk-ant-secret".to_owned());
        assert_eq!(format!("{key:?}"), "ApiKey([REDACTED])");
        assert_eq!(key.redact("bad key sk-ant-secret!"), "bad key [REDACTED]!");
    }
}
