//! Ollama's native chat API's client: its headers (a key only for a proxy in front), its body
//! (`options.num_ctx`) and its NDJSON answer, and what a bare `OLLAMA_HOST` means; the rest is
//! `ApiClient`'s.

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderValue};

use super::stream::read_turn;
use super::wire::{BodyOptions, encode};
use crate::llm::api_client::{ApiClient, ApiTarget, WireFormat, secret_header};
use crate::llm::wire_cache::{RequestBytes, WireCache};
use crate::llm::{
    AnswerLimits, ApiKey, AttemptFailure, ChatRequest, LlmError, ProviderEvent, RetryPolicy,
    ServerKind, Turn,
};

pub const BASE_URL_VARIABLE: &str = "OLLAMA_HOST";

#[derive(Clone, Debug)]
pub struct OllamaConfig {
    pub base_url: String,
    /// Ollama itself takes no key; a proxy in front of it may want one (`api_key_env`).
    pub api_key: Option<ApiKey>,
    /// The context window (`options.num_ctx`); unset, the server's default.
    pub num_ctx: Option<u32>,
    /// Whether answers stream (NDJSON) or come whole (one JSON object).
    pub stream: bool,
    pub retry: RetryPolicy,
}

/// `/api/chat`'s wire, with the body options of the loop's settings.
pub struct OllamaWire {
    options: BodyOptions,
}

pub type OllamaClient = ApiClient<OllamaWire>;

impl OllamaClient {
    pub fn new(config: OllamaConfig) -> Result<OllamaClient, LlmError> {
        let target = ApiTarget {
            base_url: &config.base_url,
            path: "/api/chat",
            base_url_variable: BASE_URL_VARIABLE,
            server: ServerKind::Ollama,
        };
        let wire = OllamaWire {
            options: BodyOptions {
                num_ctx: config.num_ctx,
                stream: config.stream,
            },
        };
        ApiClient::connect(target, config.api_key, config.retry, wire)
    }
}

#[async_trait]
impl WireFormat for OllamaWire {
    fn headers(&self, api_key: Option<&ApiKey>) -> Result<HeaderMap, LlmError> {
        let mut headers = HeaderMap::new();
        let accept = if self.options.stream {
            "application/x-ndjson"
        } else {
            "application/json"
        };
        headers.insert("accept", HeaderValue::from_static(accept));
        if let Some(key) = api_key {
            let bearer = format!("Bearer {}", key.expose());
            headers.insert(
                "authorization",
                secret_header(&bearer, "api_key_env", "the key")?,
            );
        }
        Ok(headers)
    }

    fn encode(&self, request: &ChatRequest, cache: &WireCache) -> serde_json::Result<RequestBytes> {
        encode(request, cache, self.options)
    }

    async fn read_answer(
        &self,
        response: reqwest::Response,
        limits: AnswerLimits,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
    ) -> Result<Turn, AttemptFailure> {
        Ok(read_turn(response.bytes_stream(), limits, on_event).await?)
    }

    /// Nothing listening is, for a local Ollama, most often a server that was never started.
    fn explain_send_failure(&self, failure: AttemptFailure) -> AttemptFailure {
        match failure {
            AttemptFailure::Unreachable(cause) if cause == "connection refused" => {
                AttemptFailure::Unreachable(format!("{cause}; is `ollama serve` running?"))
            }
            other => other,
        }
    }
}

/// The base URL of an `OLLAMA_HOST` without a scheme, read as Ollama's own CLI reads it:
/// `http`, port 11434 unless one is given, `127.0.0.1` when only a port is.
pub fn base_url_of_bare_host(host_port: &str) -> String {
    const DEFAULT_PORT: u16 = 11434;
    let with_port = if let Some(bracketed) = host_port.strip_prefix('[') {
        // `[::1]:11434`, or `[::1]` alone.
        match bracketed.split_once(']') {
            Some((_, "")) | None => format!("{host_port}:{DEFAULT_PORT}"),
            Some(_) => host_port.to_owned(),
        }
    } else {
        match host_port.matches(':').count() {
            0 => format!("{host_port}:{DEFAULT_PORT}"),
            1 if host_port.starts_with(':') => format!("127.0.0.1{host_port}"),
            1 => host_port.to_owned(),
            // Several colons and no brackets: an IPv6 address alone.
            _ => format!("[{host_port}]:{DEFAULT_PORT}"),
        }
    };
    format!("http://{with_port}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::llm::provider_checks;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn client(base_url: &str, max_retries: u32) -> OllamaClient {
        OllamaClient::new(config(base_url, max_retries)).expect("client")
    }

    fn config(base_url: &str, max_retries: u32) -> OllamaConfig {
        OllamaConfig {
            base_url: base_url.to_owned(),
            api_key: None,
            num_ctx: None,
            stream: true,
            retry: RetryPolicy {
                max_retries,
                request_timeout: Duration::from_secs(10),
                stream_idle_timeout: Duration::from_secs(10),
            },
        }
    }

    fn request() -> ChatRequest {
        ChatRequest {
            model: "qwen3:8b".to_owned(),
            max_tokens: 64,
            system: String::new(),
            messages: crate::llm::shared(vec![crate::llm::Message::user_text("hi")]),
            tools: Vec::new().into(),
        }
    }

    async fn complete(client: &OllamaClient) -> (Result<Turn, LlmError>, Vec<String>) {
        let (result, retries) =
            provider_checks::complete_recording_retries(client, &request()).await;
        (
            result,
            retries.into_iter().map(|(reason, _)| reason).collect(),
        )
    }

    #[tokio::test]
    async fn a_refused_connection_names_ollama_host_and_asks_whether_ollama_serve_runs() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("address")
            .port();
        let (result, retries) = complete(&client(&format!("http://127.0.0.1:{port}/"), 1)).await;
        assert_eq!(retries.len(), 1, "a refused connection is retried");
        assert_eq!(
            result.expect_err("nothing listens").to_string(),
            format!(
                "cannot reach the model API at http://127.0.0.1:{port} (OLLAMA_HOST): connection \
                 refused; is `ollama serve` running? (after 2 attempts)"
            )
        );
    }

    /// Ollama asked for a whole answer sends it as one JSON object once it has made it, after
    /// a silence longer than any idle timeout that fits a stream.
    #[tokio::test]
    async fn with_stream_false_the_answer_comes_whole_after_a_silence_longer_than_the_idle_timeout()
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("address").port();
        let whole = concat!(
            "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-06-01T10:15:03.5Z\",",
            "\"message\":{\"role\":\"assistant\",\"content\":\"Reading it.\",",
            "\"tool_calls\":[{\"function\":{\"name\":\"read_file\",\"arguments\":{\"path\":\"a.rs\"}}}]},",
            "\"done\":true,\"done_reason\":\"stop\",\"prompt_eval_count\":31,\"eval_count\":12}"
        );
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("connection");
            let request = read_request(&mut socket).await;
            tokio::time::sleep(Duration::from_millis(600)).await;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: {}\r\n\r\n{whole}",
                whole.len()
            );
            socket.write_all(answer.as_bytes()).await.expect("write");
            request
        });
        let client = OllamaClient::new(OllamaConfig {
            stream: false,
            retry: RetryPolicy {
                max_retries: 0,
                request_timeout: Duration::from_secs(20),
                stream_idle_timeout: Duration::from_millis(100),
            },
            ..config(&format!("http://127.0.0.1:{port}"), 0)
        })
        .expect("client");
        let (result, retries) = complete(&client).await;
        let turn = result.expect("the whole answer");
        assert!(retries.is_empty(), "{retries:?}");
        assert_eq!(turn.text(), "Reading it.");
        assert_eq!(turn.tool_calls().len(), 1);
        assert_eq!(turn.usage.expect("usage").output_tokens, 12);
        let request = server.await.expect("server");
        let (head, body) = request.split_once("\r\n\r\n").expect("a request");
        assert!(
            head.to_ascii_lowercase()
                .contains("accept: application/json\r\n"),
            "{head}"
        );
        let body: serde_json::Value = serde_json::from_str(body).expect("JSON body");
        assert_eq!(body["stream"], false);
    }

    /// Reads one HTTP request (headers and a `content-length` body) from `socket`.
    async fn read_request(socket: &mut tokio::net::TcpStream) -> String {
        let mut received = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            let read = socket.read(&mut buffer).await.expect("read");
            assert!(read > 0, "the client sent a whole request");
            received.extend_from_slice(&buffer[..read]);
            let text = String::from_utf8_lossy(&received).to_ascii_lowercase();
            if let Some(end) = text.find("\r\n\r\n") {
                let length: usize = text
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length:"))
                    .and_then(|value| value.trim().parse().ok())
                    .unwrap_or_default();
                if received.len() >= end + 4 + length {
                    return String::from_utf8_lossy(&received).into_owned();
                }
            }
        }
    }

    /// A connection that breaks in the middle of the body (no closing chunk) is retried, and
    /// what the first attempt streamed is thrown away.
    #[tokio::test]
    async fn a_connection_dropped_mid_stream_is_retried_from_the_start() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("address").port();
        let first_line =
            "{\"message\":{\"role\":\"assistant\",\"content\":\"Partial\"},\"done\":false}\n";
        let whole = concat!(
            "{\"message\":{\"role\":\"assistant\",\"content\":\"Whole\"},\"done\":false}\n",
            "{\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\",\"prompt_eval_count\":3,\"eval_count\":1}\n",
        );
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("first connection");
            read_request(&mut socket).await;
            let head = "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n";
            let partial = format!("{head}{:x}\r\n{first_line}\r\n", first_line.len());
            socket.write_all(partial.as_bytes()).await.expect("write");
            drop(socket);
            let (mut socket, _) = listener.accept().await.expect("second connection");
            read_request(&mut socket).await;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ncontent-length: {}\r\n\r\n{whole}",
                whole.len()
            );
            socket.write_all(answer.as_bytes()).await.expect("write");
        });
        let (result, retries) = complete(&client(&format!("http://127.0.0.1:{port}"), 2)).await;
        let turn = result.expect("the retry succeeds");
        assert_eq!(
            turn.text(),
            "Whole",
            "nothing of the broken attempt is kept"
        );
        assert_eq!(retries.len(), 1, "{retries:?}");
        server.await.expect("server");
    }
}
