//! The Anthropic provider: its configuration (`ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`) and the
//! HTTP client that sends a turn to the Messages API.

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderValue};
use tokio_util::sync::CancellationToken;

use super::stream::read_turn;
use super::wire::encode;
use crate::llm::http::{post, shared_client};
use crate::llm::wire_cache::{RequestBytes, WireCache};
use crate::llm::{
    AnswerLimits, ApiKey, AttemptFailure, ChatRequest, Endpoint, LlmError, LlmProvider,
    ProviderEvent, RetryPolicy, ServerKind, Turn, with_retries,
};

pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
pub const BASE_URL_VARIABLE: &str = "ANTHROPIC_BASE_URL";
pub const API_KEY_VARIABLE: &str = "ANTHROPIC_API_KEY";
const API_VERSION: &str = "2023-06-01";

#[derive(Clone, Debug)]
pub struct AnthropicConfig {
    pub base_url: String,
    pub api_key: ApiKey,
    pub retry: RetryPolicy,
}

pub struct AnthropicClient {
    http: reqwest::Client,
    messages_url: reqwest::Url,
    headers: HeaderMap,
    endpoint: Endpoint,
    config: AnthropicConfig,
    /// What earlier requests of this loop made of its messages.
    cache: WireCache,
}

impl AnthropicClient {
    pub fn new(config: AnthropicConfig) -> Result<AnthropicClient, LlmError> {
        let invalid = |name: &str, message: String| LlmError::InvalidConfig {
            name: name.to_owned(),
            message,
        };
        let base = config.base_url.trim_end_matches('/');
        let messages_url = reqwest::Url::parse(&format!("{base}/v1/messages"))
            .map_err(|err| invalid(BASE_URL_VARIABLE, format!("{base:?} is not a URL: {err}")))?;
        let mut key_header = HeaderValue::from_str(config.api_key.expose()).map_err(|_| {
            invalid(
                API_KEY_VARIABLE,
                "it contains characters not allowed in an HTTP header".to_owned(),
            )
        })?;
        key_header.set_sensitive(true);
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", key_header);
        headers.insert("anthropic-version", HeaderValue::from_static(API_VERSION));
        headers.insert("accept", HeaderValue::from_static("text/event-stream"));
        let http = shared_client().map_err(|message| invalid("HTTP client", message))?;
        Ok(AnthropicClient {
            http,
            messages_url,
            headers,
            endpoint: Endpoint::new(base, BASE_URL_VARIABLE, ServerKind::Hosted),
            config,
            cache: WireCache::default(),
        })
    }

    /// At most `limit` of the host's requests to this server at once; `None` keeps the
    /// server's default (one for a local server).
    pub fn with_max_parallel_requests(mut self, limit: Option<u32>) -> AnthropicClient {
        self.endpoint = self.endpoint.with_max_parallel_requests(limit);
        self
    }

    async fn attempt(
        &self,
        body: &RequestBytes,
        limits: AnswerLimits,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
    ) -> Result<Turn, AttemptFailure> {
        let response = post(&self.http, &self.messages_url, &self.headers, body, &limits).await?;
        Ok(read_turn(response.bytes_stream(), limits, on_event).await?)
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
        let body = encode(request, &self.cache)
            .map_err(|err| LlmError::Protocol(format!("encoding the request: {err}")))?;
        with_retries(
            self.config.retry,
            &self.endpoint,
            Some(&self.config.api_key),
            request.max_tokens,
            on_event,
            cancel,
            |limits| self.attempt(&body, limits, on_event),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
            retry: RetryPolicy {
                max_retries: 1,
                request_timeout: Duration::from_secs(10),
                stream_idle_timeout: Duration::from_secs(10),
            },
        })
        .expect("client")
    }

    async fn failure_of(base_url: &str) -> String {
        let request = ChatRequest {
            model: "m".to_owned(),
            max_tokens: 1,
            system: String::new(),
            messages: Vec::new(),
            tools: Vec::new().into(),
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
