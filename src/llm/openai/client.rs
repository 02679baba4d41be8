//! The OpenAI-compatible provider: its configuration (`OPENAI_API_KEY`, `OPENAI_BASE_URL`), the
//! HTTP client that sends a turn to `/chat/completions`, and what it learns of the server:
//! its kind from the base URL, its window by asking a local one.

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderValue};
use tokio_util::sync::CancellationToken;

use super::stream::{read_turn, read_whole};
use super::wire::{BodyOptions, TokenLimitField, encode};
use crate::llm::answer_body::AnswerBody;
use crate::llm::http::{post, shared_client};
use crate::llm::server_window;
use crate::llm::wire_cache::{RequestBytes, WireCache};
use crate::llm::{
    AnswerLimits, ApiKey, AttemptFailure, ChatRequest, Endpoint, LlmError, LlmProvider,
    ProviderEvent, RetryPolicy, ServerKind, ServerWindow, ToolChoice, Turn, with_retries,
};

pub const BASE_URL_VARIABLE: &str = "OPENAI_BASE_URL";
pub const API_KEY_VARIABLE: &str = "OPENAI_API_KEY";

#[derive(Clone, Debug)]
pub struct OpenAiConfig {
    /// Up to and including the version, as the SDKs take it: `https://api.openai.com/v1`.
    pub base_url: String,
    /// None for local servers, which take no key.
    pub api_key: Option<ApiKey>,
    /// Sent with the tools when set.
    pub tool_choice: Option<ToolChoice>,
    /// Whether answers stream (SSE) or come whole (JSON).
    pub stream: bool,
    pub retry: RetryPolicy,
}

pub struct OpenAiClient {
    http: reqwest::Client,
    completions_url: reqwest::Url,
    headers: HeaderMap,
    endpoint: Endpoint,
    token_limit: TokenLimitField,
    config: OpenAiConfig,
    /// What earlier requests of this loop made of its messages.
    cache: WireCache,
}

impl OpenAiClient {
    pub fn new(config: OpenAiConfig) -> Result<OpenAiClient, LlmError> {
        let invalid = |name: &str, message: String| LlmError::InvalidConfig {
            name: name.to_owned(),
            message,
        };
        let base = config.base_url.trim_end_matches('/');
        let completions_url = reqwest::Url::parse(&format!("{base}/chat/completions"))
            .map_err(|err| invalid(BASE_URL_VARIABLE, format!("{base:?} is not a URL: {err}")))?;
        let mut headers = HeaderMap::new();
        let accept = if config.stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        headers.insert("accept", HeaderValue::from_static(accept));
        // An empty key is no key: a local server must not see `Bearer ` and refuse it.
        if let Some(key) = config
            .api_key
            .as_ref()
            .filter(|key| !key.expose().is_empty())
        {
            let mut bearer =
                HeaderValue::from_str(&format!("Bearer {}", key.expose())).map_err(|_| {
                    invalid(
                        API_KEY_VARIABLE,
                        "it contains characters not allowed in an HTTP header".to_owned(),
                    )
                })?;
            bearer.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, bearer);
        }
        let http = shared_client().map_err(|message| invalid("HTTP client", message))?;
        Ok(OpenAiClient {
            http,
            completions_url,
            headers,
            endpoint: Endpoint::new(
                base,
                BASE_URL_VARIABLE,
                ServerKind::of_openai_base_url(base),
            ),
            token_limit: TokenLimitField::for_base_url(base),
            config,
            cache: WireCache::default(),
        })
    }

    /// At most `limit` of the host's requests to this server at once; `None` keeps the
    /// server's default (one for a local server).
    pub fn with_max_parallel_requests(mut self, limit: Option<u32>) -> OpenAiClient {
        self.endpoint = self.endpoint.with_max_parallel_requests(limit);
        self
    }

    async fn attempt(
        &self,
        body: &RequestBytes,
        limits: AnswerLimits,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
    ) -> Result<Turn, AttemptFailure> {
        let response = post(
            &self.http,
            &self.completions_url,
            &self.headers,
            body,
            &limits,
        )
        .await?;
        // Also a server asked to stream may answer whole (some proxies and older servers).
        let whole = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|kind| kind.trim_start().starts_with("application/json"));
        if whole {
            // Nothing comes of a whole answer until it is done: the request timeout bounds it.
            let body = AnswerBody::new(response.bytes_stream(), limits)
                .read_all()
                .await?;
            return Ok(read_whole(&String::from_utf8_lossy(&body), on_event)?);
        }
        Ok(read_turn(response.bytes_stream(), limits, on_event).await?)
    }
}

#[async_trait]
impl LlmProvider for OpenAiClient {
    async fn complete(
        &self,
        request: &ChatRequest,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<Turn, LlmError> {
        let options = BodyOptions {
            token_limit: self.token_limit,
            tool_choice: self.config.tool_choice,
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

    /// Only a local server is asked (`ServerKind::of_openai_base_url`).
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
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use serde_json::{Value, json};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const KEY: &str = "sk-proj-secret-9c1f";

    /// A request as the server read it.
    #[derive(Debug, Clone)]
    struct Received {
        head: String,
        body: Value,
    }

    impl Received {
        fn header(&self, name: &str) -> Option<String> {
            self.head.lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                key.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| value.trim().to_owned())
            })
        }
    }

    /// A loopback HTTP/1.1 server answering each connection with the next scripted bytes,
    /// then closing it: enough to see what the client sends and how it reads what comes back.
    async fn serve(replies: Vec<Vec<u8>>) -> (String, Arc<Mutex<Vec<Received>>>) {
        let replies = Mutex::new(replies.into_iter());
        serve_with(move |_| {
            replies.lock().expect("replies").next().unwrap_or_else(|| {
                status_reply(500, &[], &json!({"error": {"message": "no reply left"}}))
            })
        })
        .await
    }

    /// The same server, answering each request with what `respond` makes of it.
    async fn serve_with(
        respond: impl Fn(&Received) -> Vec<u8> + Send + 'static,
    ) -> (String, Arc<Mutex<Vec<Received>>>) {
        serve_after(Duration::ZERO, respond).await
    }

    /// The same server, silent for `generating` before it answers, as a server is that sends
    /// an answer whole once it has made it.
    async fn serve_after(
        generating: Duration,
        respond: impl Fn(&Received) -> Vec<u8> + Send + 'static,
    ) -> (String, Arc<Mutex<Vec<Received>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("address").port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&received);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let Some(request) = read_request(&mut socket).await else {
                    continue;
                };
                let reply = respond(&request);
                record.lock().expect("requests").push(request);
                tokio::time::sleep(generating).await;
                let _ = socket.write_all(&reply).await;
                let _ = socket.shutdown().await;
            }
        });
        (format!("http://127.0.0.1:{port}/v1"), received)
    }

    async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<Received> {
        let mut bytes = Vec::new();
        let mut buffer = [0u8; 4096];
        let head_end = loop {
            let read = socket.read(&mut buffer).await.ok()?;
            if read == 0 {
                return None;
            }
            bytes.extend_from_slice(&buffer[..read]);
            if let Some(end) = bytes.windows(4).position(|window| window == b"\r\n\r\n") {
                break end + 4;
            }
        };
        let head = String::from_utf8_lossy(&bytes[..head_end]).into_owned();
        let length: usize = head
            .lines()
            .find_map(|line| {
                let (key, value) = line.split_once(':')?;
                key.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .unwrap_or(0);
        while bytes.len() < head_end + length {
            let read = socket.read(&mut buffer).await.ok()?;
            if read == 0 {
                return None;
            }
            bytes.extend_from_slice(&buffer[..read]);
        }
        let body = serde_json::from_slice(&bytes[head_end..]).unwrap_or(Value::Null);
        Some(Received { head, body })
    }

    fn status_reply(status: u16, headers: &[(&str, &str)], body: &Value) -> Vec<u8> {
        let body = body.to_string();
        let mut reply = format!(
            "HTTP/1.1 {status} Whatever\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
            body.len()
        );
        for (name, value) in headers {
            reply.push_str(&format!("{name}: {value}\r\n"));
        }
        reply.push_str("\r\n");
        reply.push_str(&body);
        reply.into_bytes()
    }

    /// 200 with `events` as the body, delimited by the connection's end.
    fn stream_reply(events: &[Value]) -> Vec<u8> {
        let mut reply = String::from(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
        );
        for event in events {
            reply.push_str(&format!("data: {event}\n\n"));
        }
        reply.into_bytes()
    }

    fn text_chunk(text: &str) -> Value {
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
    }

    fn stop_chunk() -> Value {
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    }

    fn answer(text: &str) -> Vec<u8> {
        let mut reply = stream_reply(&[text_chunk(text), stop_chunk()]);
        reply.extend_from_slice(b"data: [DONE]\n\n");
        reply
    }

    fn openai_error(message: &str, kind: &str, code: &str) -> Value {
        json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
    }

    fn client(base_url: &str, key: Option<&str>) -> OpenAiClient {
        OpenAiClient::new(OpenAiConfig {
            base_url: base_url.to_owned(),
            api_key: key.map(|key| ApiKey::new(key.to_owned())),
            tool_choice: None,
            stream: true,
            retry: RetryPolicy {
                max_retries: 2,
                request_timeout: Duration::from_secs(20),
                stream_idle_timeout: Duration::from_secs(10),
            },
        })
        .expect("client")
    }

    fn request() -> ChatRequest {
        ChatRequest {
            model: "gpt-test".to_owned(),
            max_tokens: 64,
            system: "sys".to_owned(),
            messages: crate::llm::shared(vec![crate::llm::Message::user_text("hi")]),
            tools: Vec::new().into(),
        }
    }

    /// Runs one request; returns its result and the retries reported (reason, delay).
    async fn complete(client: &OpenAiClient) -> (Result<Turn, LlmError>, Vec<(String, Duration)>) {
        complete_request(client, &request()).await
    }

    async fn complete_request(
        client: &OpenAiClient,
        request: &ChatRequest,
    ) -> (Result<Turn, LlmError>, Vec<(String, Duration)>) {
        let retries = Mutex::new(Vec::new());
        let record = |event: ProviderEvent| {
            if let ProviderEvent::Retrying { reason, delay, .. } = event {
                retries.lock().expect("retries").push((reason, delay));
            }
        };
        let result = tokio::time::timeout(
            Duration::from_secs(30),
            client.complete(request, &record, &CancellationToken::new()),
        )
        .await
        .expect("the request ends");
        (result, retries.into_inner().expect("retries"))
    }

    #[tokio::test]
    async fn a_429_waits_as_the_server_asks_then_succeeds() {
        let (base, received) = serve(vec![
            status_reply(
                429,
                &[("retry-after", "1")],
                &openai_error(
                    "Rate limit reached for gpt-test",
                    "requests",
                    "rate_limit_exceeded",
                ),
            ),
            answer("after the wait"),
        ])
        .await;
        let (result, retries) = complete(&client(&base, Some(KEY))).await;
        assert_eq!(result.expect("turn").text(), "after the wait");
        assert_eq!(
            retries,
            vec![("HTTP 429 requests".to_owned(), Duration::from_secs(1))]
        );
        let received = received.lock().expect("requests").clone();
        assert_eq!(received.len(), 2);
        assert_eq!(received[0].body, received[1].body, "the same request again");
        assert!(
            received[0].head.starts_with("POST /v1/chat/completions "),
            "{}",
            received[0].head
        );
        assert_eq!(received[0].body["max_tokens"], 64, "a local server");
        assert_eq!(received[0].body["stream"], true);
    }

    #[tokio::test]
    async fn a_5xx_is_retried() {
        let (base, received) = serve(vec![
            status_reply(
                503,
                &[],
                &openai_error("The server is overloaded", "server_error", "overloaded"),
            ),
            answer("recovered"),
        ])
        .await;
        let (result, retries) = complete(&client(&base, None)).await;
        assert_eq!(result.expect("turn").text(), "recovered");
        assert_eq!(retries.len(), 1, "{retries:?}");
        assert_eq!(retries[0].0, "HTTP 503 server_error");
        assert_eq!(received.lock().expect("requests").len(), 2);
    }

    #[tokio::test]
    async fn a_mid_stream_error_is_retried_and_the_partial_turn_thrown_away() {
        let (base, _) = serve(vec![
            stream_reply(&[
                text_chunk("half an answer that must vanish"),
                json!({"error": {"message": "model crashed", "type": "server_error"}}),
            ]),
            answer("the whole answer"),
        ])
        .await;
        let (result, retries) = complete(&client(&base, None)).await;
        let turn = result.expect("turn");
        assert_eq!(turn.text(), "the whole answer");
        assert_eq!(retries.len(), 1);
        assert_eq!(retries[0].0, "server_error mid-stream");
    }

    #[tokio::test]
    async fn a_connection_dropped_mid_stream_is_retried() {
        // The head promises more body than comes before the connection closes.
        let mut cut =
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 100000\r\n\r\n"
                .to_vec();
        cut.extend_from_slice(format!("data: {}\n\n", text_chunk("cut off")).as_bytes());
        let (base, _) = serve(vec![cut, answer("second try")]).await;
        let (result, retries) = complete(&client(&base, None)).await;
        assert_eq!(result.expect("turn").text(), "second try");
        assert_eq!(retries.len(), 1, "{retries:?}");
    }

    #[tokio::test]
    async fn the_key_goes_in_a_bearer_header_and_never_into_an_error_text() {
        let echo = openai_error(
            &format!(
                "Incorrect API key provided: {KEY}. You can find your API key at https://platform.openai.com/account/api-keys."
            ),
            "invalid_request_error",
            "invalid_api_key",
        );
        let (base, received) = serve(vec![status_reply(401, &[], &echo)]).await;
        let (result, retries) = complete(&client(&base, Some(KEY))).await;
        let message = result.expect_err("a 401 fails").to_string();
        assert!(retries.is_empty(), "a 401 is not retried: {retries:?}");
        assert!(!message.contains(KEY), "{message}");
        assert!(
            message.starts_with(
                "HTTP 401 invalid_request_error from the model API: Incorrect API key provided: [REDACTED]."
            ),
            "{message}"
        );
        let received = received.lock().expect("requests").clone();
        assert_eq!(
            received[0].header("authorization"),
            Some(format!("Bearer {KEY}"))
        );
    }

    #[tokio::test]
    async fn without_a_key_no_authorization_header_is_sent() {
        for key in [None, Some("")] {
            let (base, received) = serve(vec![answer("local")]).await;
            let (result, _) = complete(&client(&base, key)).await;
            assert_eq!(result.expect("turn").text(), "local");
            let received = received.lock().expect("requests").clone();
            assert_eq!(received[0].header("authorization"), None, "{key:?}");
        }
    }

    #[tokio::test]
    async fn an_answer_sent_whole_as_json_is_read() {
        let completion = json!({"id": "chatcmpl-2", "object": "chat.completion", "created": 1,
            "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "not streamed"}}]});
        let (base, _) = serve(vec![status_reply(200, &[], &completion)]).await;
        let (result, retries) = complete(&client(&base, None)).await;
        assert_eq!(result.expect("turn").text(), "not streamed");
        assert!(retries.is_empty(), "{retries:?}");
    }

    /// What llama-cpp-python 0.3.36 answers (recorded) to a request with an assistant message
    /// whose `content` is null, or missing: its validation refuses anything but a string.
    fn refused_like_llama_cpp_python(request: &Received) -> Option<Vec<u8>> {
        let refused = request.body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|message| message["role"] == "assistant" && !message["content"].is_string());
        refused.then(|| {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/llamacpp-openai/http500_on_null_content.json");
            let recorded = std::fs::read_to_string(&path)
                .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
            let body: Value = serde_json::from_str(&recorded).expect("recorded JSON");
            status_reply(500, &[], &body)
        })
    }

    #[tokio::test]
    async fn an_answer_that_only_called_tools_goes_back_in_a_form_llama_cpp_python_accepts() {
        let (base, received) = serve_with(|request| {
            refused_like_llama_cpp_python(request).unwrap_or_else(|| answer("read it"))
        })
        .await;
        let conversation = ChatRequest {
            messages: crate::llm::shared(vec![
                crate::llm::Message::user_text("read src/main.py"),
                crate::llm::Message {
                    role: crate::llm::Role::Assistant,
                    content: vec![crate::llm::ContentBlock::tool_call(
                        "call__0_read_file",
                        "read_file",
                        json!({"path": "src/main.py"}),
                    )],
                },
                crate::llm::Message {
                    role: crate::llm::Role::User,
                    content: vec![crate::llm::ContentBlock::ToolResult {
                        id: "call__0_read_file".to_owned(),
                        content: "print('hi')".to_owned(),
                        is_error: false,
                    }],
                },
            ]),
            ..request()
        };
        let client = OpenAiClient::new(OpenAiConfig {
            retry: RetryPolicy {
                max_retries: 0,
                request_timeout: Duration::from_secs(10),
                stream_idle_timeout: Duration::from_secs(10),
            },
            ..client(&base, None).config
        })
        .expect("client");
        let (result, _) = complete_request(&client, &conversation).await;
        assert_eq!(result.expect("the server accepts it").text(), "read it");
        let received = received.lock().expect("requests").clone();
        let calling = &received[0].body["messages"][2];
        assert_eq!(calling["role"], "assistant");
        assert_eq!(calling["content"], "", "{calling}");
    }

    fn whole_answer_client(base: &str, stream_idle_timeout: Duration) -> OpenAiClient {
        OpenAiClient::new(OpenAiConfig {
            tool_choice: Some(ToolChoice::Auto),
            stream: false,
            retry: RetryPolicy {
                max_retries: 0,
                request_timeout: Duration::from_secs(20),
                stream_idle_timeout,
            },
            ..client(base, None).config
        })
        .expect("client")
    }

    fn with_a_tool(request: ChatRequest) -> ChatRequest {
        ChatRequest {
            tools: vec![crate::llm::ToolSpec {
                name: "read_file".to_owned(),
                description: "Read a file".to_owned(),
                input_schema: json!({"type": "object"}),
                example: None,
            }]
            .into(),
            ..request
        }
    }

    /// A server asked for a whole answer is silent while it generates, longer than any idle
    /// timeout that fits a stream: only the request timeout bounds that wait.
    #[tokio::test]
    async fn with_stream_false_the_answer_comes_whole_after_a_silence_longer_than_the_idle_timeout()
    {
        let completion = json!({"id": "chatcmpl-3", "object": "chat.completion", "created": 1,
            "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "made slowly"}}]});
        let (base, received) = serve_after(Duration::from_millis(600), move |_| {
            status_reply(200, &[], &completion)
        })
        .await;
        let client = whole_answer_client(&base, Duration::from_millis(100));
        let (result, retries) = complete_request(&client, &with_a_tool(request())).await;
        assert_eq!(result.expect("turn").text(), "made slowly");
        assert!(retries.is_empty(), "{retries:?}");
        let received = received.lock().expect("requests").clone();
        assert_eq!(received[0].body["stream"], false);
        assert_eq!(received[0].body["tool_choice"], "auto");
        assert!(received[0].body.get("stream_options").is_none());
        assert_eq!(
            received[0].header("accept").as_deref(),
            Some("application/json")
        );
    }

    /// What the loops see of a turn (its blocks, stop reason, usage) and the progress they
    /// report (the text, the calls started) do not depend on how the answer came.
    #[tokio::test]
    async fn a_whole_answer_gives_the_turn_and_the_progress_a_streamed_one_does() {
        let recorded = {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/llamacpp-openai/tool_call_nonstreamed.json");
            std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
        };
        let recorded: Value = serde_json::from_str(&recorded).expect("recorded JSON");
        let call_id = "call__0_read_file_cmpl-148590bb-f0c1-4753-b72b-48256637e5aa";
        let chunk = |delta: Value, finish: Value| {
            json!({"id": "chatcmpl-2dca2138", "object": "chat.completion.chunk", "created": 1,
                   "model": "gemma3", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        };
        let streamed_call = {
            let mut reply = stream_reply(&[
                chunk(json!({"role": "assistant", "content": null}), Value::Null),
                chunk(
                    json!({"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                        "function": {"name": "read_file", "arguments": "{\"path\": \"src/main.py\", "}}]}),
                    Value::Null,
                ),
                chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"start_line\": 10000000}"}}]}),
                    Value::Null,
                ),
                chunk(json!({}), json!("tool_calls")),
                json!({"id": "chatcmpl-2dca2138", "object": "chat.completion.chunk", "created": 1,
                       "model": "gemma3", "choices": [],
                       "usage": {"prompt_tokens": 1707, "completion_tokens": 25, "total_tokens": 1732}}),
            ]);
            reply.extend_from_slice(b"data: [DONE]\n\n");
            reply
        };
        let whole_text = json!({"id": "chatcmpl-4", "object": "chat.completion", "created": 1,
            "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "Looking at it now."}}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}});
        let streamed_text = {
            let mut reply = stream_reply(&[
                text_chunk("Looking at "),
                text_chunk("it now."),
                stop_chunk(),
                json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                       "model": "m", "choices": [],
                       "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}}),
            ]);
            reply.extend_from_slice(b"data: [DONE]\n\n");
            reply
        };
        for (whole, streamed) in [(recorded, streamed_call), (whole_text, streamed_text)] {
            let (whole_base, _) = serve(vec![status_reply(200, &[], &whole)]).await;
            let (stream_base, _) = serve(vec![streamed]).await;
            let (whole_turn, whole_events) =
                progress(&whole_answer_client(&whole_base, Duration::from_secs(10))).await;
            let (streamed_turn, streamed_events) = progress(&client(&stream_base, None)).await;
            assert_eq!(whole_turn, streamed_turn);
            assert_eq!(whole_events, streamed_events);
            assert!(!whole_events.is_empty());
        }
    }

    /// The turn of one request, and its progress events with consecutive text and call input
    /// joined (a stream sends them in pieces, a whole answer at once).
    async fn progress(client: &OpenAiClient) -> (Turn, Vec<ProviderEvent>) {
        let events = Mutex::new(Vec::<ProviderEvent>::new());
        let record = |event: ProviderEvent| {
            let mut events = events.lock().expect("events");
            match (events.last_mut(), event) {
                (
                    Some(ProviderEvent::TextDelta { text }),
                    ProviderEvent::TextDelta { text: more },
                ) => text.push_str(&more),
                (
                    Some(ProviderEvent::ToolInputDelta { bytes }),
                    ProviderEvent::ToolInputDelta { bytes: more },
                ) => *bytes += more,
                (_, event) => events.push(event),
            }
        };
        let turn = client
            .complete(&with_a_tool(request()), &record, &CancellationToken::new())
            .await
            .expect("turn");
        (turn, events.into_inner().expect("events"))
    }

    /// An answer sent whole is read into memory: one bigger than any answer a model writes
    /// (4 MiB at least; a request's `max_tokens` here is small) is refused, not read to its end.
    #[tokio::test]
    async fn a_whole_answer_larger_than_the_limit_is_refused() {
        let huge = "x".repeat(4 << 20);
        let completion = json!({"id": "chatcmpl-5", "object": "chat.completion", "created": 1,
            "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": huge}}]});
        let (base, received) = serve(vec![status_reply(200, &[], &completion)]).await;
        let (result, retries) =
            complete(&whole_answer_client(&base, Duration::from_secs(10))).await;
        let message = result.expect_err("too large").to_string();
        assert!(
            message.contains("passed 4 MiB and was stopped")
                && message.contains("none of it was used"),
            "{message}"
        );
        assert!(retries.is_empty(), "not asked again: {retries:?}");
        assert_eq!(received.lock().expect("requests").len(), 1);
    }

    #[tokio::test]
    async fn a_local_server_is_asked_about_its_window_once_and_a_hosted_api_never() {
        let props = json!({"default_generation_settings": {"n_ctx": 4096},
                           "model_path": "/models/gemma-3-1b-it-Q4_K_M.gguf"});
        let (base, received) = serve_with(move |request| {
            if request.head.starts_with("GET /props ") {
                status_reply(200, &[], &props)
            } else {
                status_reply(404, &[], &json!({"detail": "Not Found"}))
            }
        })
        .await;
        let client = client(&base, Some(KEY));
        for _ in 0..2 {
            let window = client.server_window("gemma3").await;
            let report = window.report().expect("reported");
            assert_eq!(report.context_window, Some(4096), "{window:?}");
        }
        let received = received.lock().expect("requests").clone();
        assert_eq!(received.len(), 1, "asked once per host run");
        assert_eq!(
            received[0].header("authorization"),
            Some(format!("Bearer {KEY}")),
            "a proxy in front gets the key"
        );
        let hosted = self::client("https://api.openai.com/v1", Some(KEY));
        assert_eq!(
            hosted.server_window("gpt-4.1").await,
            ServerWindow::NotAsked
        );
    }

    #[tokio::test]
    async fn a_refused_connection_names_the_base_url_and_its_variable() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("address").port()
        };
        let client = OpenAiClient::new(OpenAiConfig {
            retry: RetryPolicy {
                max_retries: 0,
                request_timeout: Duration::from_secs(10),
                stream_idle_timeout: Duration::from_secs(10),
            },
            ..client(&format!("http://127.0.0.1:{port}/v1/"), None).config
        })
        .expect("client");
        let (result, _) = complete(&client).await;
        assert_eq!(
            result.expect_err("nothing listens").to_string(),
            format!(
                "cannot reach the model API at http://127.0.0.1:{port}/v1 (OPENAI_BASE_URL): \
                 connection refused"
            )
        );
    }
}
