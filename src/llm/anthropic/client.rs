use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};
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

/// The API key and endpoint: read when the host starts, replaced when the shell passes new
/// ones.
#[derive(Clone, Debug)]
pub struct AnthropicCredentials {
    api_key: Option<ApiKey>,
    base_url: String,
}

impl AnthropicCredentials {
    /// Blank values count as unset; without a base URL, `https://api.anthropic.com`.
    pub fn new(api_key: Option<String>, base_url: Option<String>) -> AnthropicCredentials {
        let api_key = api_key
            .filter(|key| !key.trim().is_empty())
            .map(ApiKey::new);
        let base_url = base_url
            .filter(|url| !url.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        AnthropicCredentials { api_key, base_url }
    }

    /// Reads `ANTHROPIC_API_KEY` and `ANTHROPIC_BASE_URL` and removes the key from this
    /// process's environment, so no command the host starts inherits it.
    ///
    /// # Safety
    /// Changes the process environment: call it before any other thread exists.
    pub unsafe fn take_from_env() -> AnthropicCredentials {
        let api_key = std::env::var("ANTHROPIC_API_KEY").ok();
        // SAFETY: the caller guarantees no other thread reads or writes the environment.
        unsafe { std::env::remove_var("ANTHROPIC_API_KEY") };
        AnthropicCredentials::new(api_key, std::env::var("ANTHROPIC_BASE_URL").ok())
    }

    pub fn has_api_key(&self) -> bool {
        self.api_key.is_some()
    }
}

/// The credentials loops get when they start. A shell replaces them when the user sets a key
/// while the host runs (in Neovim, `:let $ANTHROPIC_API_KEY = ...` changes only Neovim's
/// environment, not the host's); loops already running keep the client they have.
#[derive(Clone, Debug)]
pub struct SharedCredentials(Arc<RwLock<AnthropicCredentials>>);

impl SharedCredentials {
    pub fn new(credentials: AnthropicCredentials) -> SharedCredentials {
        SharedCredentials(Arc::new(RwLock::new(credentials)))
    }

    pub fn current(&self) -> AnthropicCredentials {
        // A writer that panicked left whole credentials behind: the value is still usable.
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn replace(&self, credentials: AnthropicCredentials) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = credentials;
    }
}

pub struct AnthropicClient {
    http: reqwest::Client,
    messages_url: reqwest::Url,
    headers: HeaderMap,
    config: AnthropicConfig,
}

/// The host's one HTTP client: every loop's requests share its connection pool, and its
/// TLS roots (about 150 certificate files) are read once, not for every loop. Nothing in it
/// depends on a loop's settings; per-loop timeouts are applied per request.
fn shared_http_client() -> Result<reqwest::Client, String> {
    static CLIENT: std::sync::OnceLock<Result<reqwest::Client, String>> =
        std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .user_agent(concat!("loopr/", env!("CARGO_PKG_VERSION")))
                .connect_timeout(Duration::from_secs(30))
                .build()
                .map_err(|err| err.to_string())
        })
        .clone()
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
        let http = shared_http_client().map_err(|message| invalid("HTTP client", message))?;
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
            .map_err(|err| send_failure(&err))?;
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
                let base_url = self.config.base_url.trim_end_matches('/');
                return Err(self.redact(failure.into_error(base_url, attempts)));
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
            LlmError::Unreachable {
                base_url,
                cause,
                attempts,
            } => LlmError::Unreachable {
                base_url: key.redact(&base_url),
                cause: key.redact(&cause),
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
            AttemptFailure::Status { status, error, .. } => {
                format!("HTTP {status} {}", error.error_type)
            }
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

    fn into_error(self, base_url: &str, attempts: u32) -> LlmError {
        match self {
            AttemptFailure::Unreachable(cause) => LlmError::Unreachable {
                base_url: base_url.to_owned(),
                cause,
                attempts,
            },
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

/// Why a request could not be sent, in words a user can act on. reqwest's own text ("error
/// sending request for url (...): client error (Connect): tcp connect error: ...") is written
/// for developers; the kind of the underlying I/O error says the same plainly.
fn send_failure(err: &reqwest::Error) -> AttemptFailure {
    let causes = error_chain(err);
    let io_words = causes.iter().find_map(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io_kind_words(io.kind()))
    });
    let innermost = causes
        .last()
        .map(ToString::to_string)
        .unwrap_or_else(|| err.to_string());
    if !err.is_connect() {
        return AttemptFailure::Stream(StreamFailure::Transport(
            io_words.map_or(innermost, str::to_owned),
        ));
    }
    if let Some(words) = io_words {
        return AttemptFailure::Unreachable(words.to_owned());
    }
    if err.is_timeout() {
        return AttemptFailure::Unreachable("the connection timed out".to_owned());
    }
    // hyper-util reports name resolution as "dns error"; there is no typed way to tell.
    let resolving = causes
        .iter()
        .any(|cause| cause.to_string().to_ascii_lowercase().contains("dns"));
    if resolving {
        return AttemptFailure::Unreachable("the host name could not be resolved".to_owned());
    }
    // TCP and name resolution are covered above; what fails after them on https is TLS.
    let https = err.url().is_some_and(|url| url.scheme() == "https");
    if https {
        return AttemptFailure::Unreachable(format!("the TLS handshake failed ({innermost})"));
    }
    AttemptFailure::Unreachable(innermost)
}

/// `err` and its causes. An `io::Error` wrapping another error reports the wrapped error's
/// source as its own, skipping the wrapped error (often the one that names the problem, such
/// as a TLS alert), so it is followed through `get_ref` instead.
fn error_chain(err: &reqwest::Error) -> Vec<&(dyn std::error::Error + 'static)> {
    let mut chain: Vec<&(dyn std::error::Error + 'static)> = Vec::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(cause) = next {
        chain.push(cause);
        let wrapped = cause
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .map(|inner| inner as &(dyn std::error::Error + 'static));
        next = wrapped.or_else(|| cause.source());
    }
    chain
}

fn io_kind_words(kind: std::io::ErrorKind) -> Option<&'static str> {
    use std::io::ErrorKind;
    Some(match kind {
        ErrorKind::ConnectionRefused => "connection refused",
        ErrorKind::ConnectionReset => "the connection was reset",
        ErrorKind::ConnectionAborted => "the connection was aborted",
        ErrorKind::TimedOut => "the connection timed out",
        ErrorKind::HostUnreachable => "the host is unreachable",
        ErrorKind::NetworkUnreachable => "the network is unreachable",
        ErrorKind::NetworkDown => "the network is down",
        ErrorKind::AddrNotAvailable => "the address is not available",
        _ => return None,
    })
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

    fn client(base_url: &str) -> AnthropicClient {
        AnthropicClient::new(AnthropicConfig {
            base_url: base_url.to_owned(),
            api_key: ApiKey::new("sk-ant-secret".to_owned()),
            max_retries: 1,
            request_timeout: Duration::from_secs(10),
            stream_idle_timeout: Duration::from_secs(10),
        })
        .expect("client")
    }

    async fn failure_of(base_url: &str) -> String {
        let request = ChatRequest {
            model: "m".to_owned(),
            max_tokens: 1,
            system: String::new(),
            messages: Vec::new(),
            tools: Vec::new(),
        };
        let retries = std::sync::Mutex::new(Vec::new());
        let record = |event: ProviderEvent| {
            if let ProviderEvent::Retrying { reason, .. } = event {
                retries.lock().expect("retries").push(reason);
            }
        };
        let err = tokio::time::timeout(
            Duration::from_secs(30),
            client(base_url).complete(&request, &record, &CancellationToken::new()),
        )
        .await
        .expect("the request ends")
        .expect_err("the request fails");
        let retries = retries.into_inner().expect("retries");
        assert_eq!(
            retries.len(),
            1,
            "a connection failure is retried: {retries:?}"
        );
        assert!(
            retries[0].starts_with("cannot reach the model API: "),
            "{retries:?}"
        );
        err.to_string()
    }

    /// A loopback port nothing listens on.
    fn closed_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address").port()
    }

    #[tokio::test]
    async fn a_refused_connection_names_the_base_url_in_plain_words() {
        let port = closed_port();
        let message = failure_of(&format!("http://127.0.0.1:{port}/")).await;
        assert_eq!(
            message,
            format!(
                "cannot reach the model API at http://127.0.0.1:{port} (ANTHROPIC_BASE_URL): \
                 connection refused (after 2 attempts)"
            )
        );
    }

    #[tokio::test]
    async fn a_server_that_does_not_speak_tls_is_a_failed_handshake() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("address").port();
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            while let Ok((mut socket, _)) = listener.accept().await {
                let _ = socket
                    .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        });
        let message = failure_of(&format!("https://127.0.0.1:{port}")).await;
        let expected = format!(
            "cannot reach the model API at https://127.0.0.1:{port} (ANTHROPIC_BASE_URL): the TLS \
             handshake failed ("
        );
        assert!(message.starts_with(&expected), "{message}");
        assert!(!message.contains("error sending request"), "{message}");
    }
}
