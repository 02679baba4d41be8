//! The Anthropic Messages API's client: its headers (the key as `x-api-key`, the API version),
//! its body and its SSE answer; the rest is `ApiClient`'s.

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderValue};

use super::stream::read_turn;
use super::wire::encode;
use crate::llm::api_client::{ApiClient, ApiTarget, WireFormat, secret_header};
use crate::llm::wire_cache::{RequestBytes, WireCache};
use crate::llm::{
    AnswerLimits, ApiKey, AttemptFailure, ChatRequest, LlmError, ProviderEvent, RetryPolicy,
    ServerKind, Turn,
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

/// The Messages API's wire.
pub struct AnthropicWire;

pub type AnthropicClient = ApiClient<AnthropicWire>;

impl AnthropicClient {
    pub fn new(config: AnthropicConfig) -> Result<AnthropicClient, LlmError> {
        let target = ApiTarget {
            base_url: &config.base_url,
            path: "/v1/messages",
            base_url_variable: BASE_URL_VARIABLE,
            server: ServerKind::Hosted,
        };
        ApiClient::connect(target, Some(config.api_key), config.retry, AnthropicWire)
    }
}

#[async_trait]
impl WireFormat for AnthropicWire {
    fn headers(&self, api_key: Option<&ApiKey>) -> Result<HeaderMap, LlmError> {
        let key = api_key.map_or("", ApiKey::expose);
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", secret_header(key, API_KEY_VARIABLE, "it")?);
        headers.insert("anthropic-version", HeaderValue::from_static(API_VERSION));
        headers.insert("accept", HeaderValue::from_static("text/event-stream"));
        Ok(headers)
    }

    fn encode(&self, request: &ChatRequest, cache: &WireCache) -> serde_json::Result<RequestBytes> {
        encode(request, cache)
    }

    async fn read_answer(
        &self,
        response: reqwest::Response,
        limits: AnswerLimits,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
    ) -> Result<Turn, AttemptFailure> {
        Ok(read_turn(response.bytes_stream(), limits, on_event).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::llm::provider_checks;

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
        let (result, retries) =
            provider_checks::complete_recording_retries(&client(base_url), &request).await;
        let err = result.expect_err("the request fails");
        assert_eq!(
            retries.len(),
            1,
            "a connection failure is retried: {retries:?}"
        );
        assert!(
            retries[0].0.starts_with("cannot reach the model API: "),
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
