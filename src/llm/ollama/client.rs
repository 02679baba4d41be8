//! The Ollama provider: its configuration (`OLLAMA_HOST` read as Ollama's own CLI reads it),
//! the HTTP client that sends a turn to `/api/chat`, and the hint for a server that was never
//! started.

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderValue};
use tokio_util::sync::CancellationToken;

use super::stream::read_turn;
use super::wire::{BodyOptions, encode};
use crate::llm::http::{post, shared_client};
use crate::llm::server_window;
use crate::llm::wire_cache::{RequestBytes, WireCache};
use crate::llm::{
    AnswerLimits, ApiKey, AttemptFailure, ChatRequest, Endpoint, LlmError, LlmProvider,
    ProviderEvent, RetryPolicy, ServerKind, ServerWindow, Turn, with_retries,
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

pub struct OllamaClient {
    http: reqwest::Client,
    chat_url: reqwest::Url,
    headers: HeaderMap,
    endpoint: Endpoint,
    config: OllamaConfig,
    /// What earlier requests of this loop made of its messages.
    cache: WireCache,
}

impl OllamaClient {
    pub fn new(config: OllamaConfig) -> Result<OllamaClient, LlmError> {
        let invalid = |name: &str, message: String| LlmError::InvalidConfig {
            name: name.to_owned(),
            message,
        };
        let base = config.base_url.trim_end_matches('/');
        let chat_url = reqwest::Url::parse(&format!("{base}/api/chat"))
            .map_err(|err| invalid(BASE_URL_VARIABLE, format!("{base:?} is not a URL: {err}")))?;
        let mut headers = HeaderMap::new();
        let accept = if config.stream {
            "application/x-ndjson"
        } else {
            "application/json"
        };
        headers.insert("accept", HeaderValue::from_static(accept));
        if let Some(key) = &config.api_key {
            let mut bearer =
                HeaderValue::from_str(&format!("Bearer {}", key.expose())).map_err(|_| {
                    invalid(
                        "api_key_env",
                        "the key contains characters not allowed in an HTTP header".to_owned(),
                    )
                })?;
            bearer.set_sensitive(true);
            headers.insert("authorization", bearer);
        }
        let http = shared_client().map_err(|message| invalid("HTTP client", message))?;
        Ok(OllamaClient {
            http,
            chat_url,
            headers,
            endpoint: Endpoint::new(base, BASE_URL_VARIABLE, ServerKind::Ollama),
            config,
            cache: WireCache::default(),
        })
    }

    /// At most `limit` of the host's requests to this server at once; `None` keeps the
    /// server's default (one for a local server).
    pub fn with_max_parallel_requests(mut self, limit: Option<u32>) -> OllamaClient {
        self.endpoint = self.endpoint.with_max_parallel_requests(limit);
        self
    }

    async fn attempt(
        &self,
        body: &RequestBytes,
        limits: AnswerLimits,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
    ) -> Result<Turn, AttemptFailure> {
        let response = post(&self.http, &self.chat_url, &self.headers, body, &limits)
            .await
            .map_err(with_serve_hint)?;
        Ok(read_turn(response.bytes_stream(), limits, on_event).await?)
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

/// Nothing listening is, for a local Ollama, most often a server that was never started.
fn with_serve_hint(failure: AttemptFailure) -> AttemptFailure {
    match failure {
        AttemptFailure::Unreachable(cause) if cause == "connection refused" => {
            AttemptFailure::Unreachable(format!("{cause}; is `ollama serve` running?"))
        }
        other => other,
    }
}

#[async_trait]
impl LlmProvider for OllamaClient {
    async fn complete(
        &self,
        request: &ChatRequest,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<Turn, LlmError> {
        let options = BodyOptions {
            num_ctx: self.config.num_ctx,
            stream: self.config.stream,
        };
        let body = encode(request, &self.cache, options)
            .map_err(|err| LlmError::Protocol(format!("encoding the request: {err}")))?;
        with_retries(
            self.config.retry,
            &self.endpoint,
            self.config.api_key.as_ref(),
            request.max_tokens,
            on_event,
            cancel,
            |limits| self.attempt(&body, limits, on_event),
        )
        .await
    }

    /// The model's maximum and its Modelfile's window, as `/api/show` says them; the window
    /// `num_ctx` sets is the settings' to apply, not the server's to say.
    async fn server_window(&self, model: &str) -> ServerWindow {
        server_window::ask(
            &self.http,
            self.headers.get(reqwest::header::AUTHORIZATION),
            &self.endpoint,
            model,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn client(base_url: &str, max_retries: u32) -> OllamaClient {
        OllamaClient::new(OllamaConfig {
            base_url: base_url.to_owned(),
            api_key: None,
            num_ctx: None,
            stream: true,
            retry: RetryPolicy {
                max_retries,
                request_timeout: Duration::from_secs(10),
                stream_idle_timeout: Duration::from_secs(10),
            },
        })
        .expect("client")
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
        let retries = std::sync::Mutex::new(Vec::new());
        let record = |event: ProviderEvent| {
            if let ProviderEvent::Retrying { reason, .. } = event {
                retries.lock().expect("retries").push(reason);
            }
        };
        let result = tokio::time::timeout(
            Duration::from_secs(30),
            client.complete(&request(), &record, &CancellationToken::new()),
        )
        .await
        .expect("the request ends");
        (result, retries.into_inner().expect("retries"))
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
            ..client(&format!("http://127.0.0.1:{port}"), 0).config
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
