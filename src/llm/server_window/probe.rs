//! Asking a server over HTTP: each question bounded by a short timeout (connection, answer and
//! body together) and its answer by a size cap. A question the server does not know (a 4xx,
//! an answer of another shape) is answered "nothing"; one it cannot answer now (no connection,
//! too slow, a 5xx, as a server still loading its model sends) is a failure, asked again later.

use std::time::Duration;

use reqwest::header::{ACCEPT, HeaderMap, HeaderValue};
use serde_json::{Value, json};

use super::ServerReport;
use super::answers;
use crate::llm::answer_body::AnswerBody;
use crate::llm::http::send_failure;
use crate::llm::{AnswerLimits, AttemptFailure, ServerKind, StreamFailure};

/// How long one question may take: a local server answers these at once, also while it
/// writes an answer for someone else.
pub(super) const TIMEOUT: Duration = Duration::from_secs(5);
/// The most an answer may take: llama.cpp's `/props` carries the chat template, Ollama's
/// `/api/show` the license and the Modelfile, all far below it.
const BODY_LIMIT: u64 = 1024 * 1024;

/// The questions to one server.
pub struct Probe {
    http: reqwest::Client,
    headers: HeaderMap,
    timeout: Duration,
    body_limit: u64,
}

enum Answer {
    Json(Value),
    /// The server does not know the question.
    Nothing,
}

impl Probe {
    /// Questions sent with `authorization` (a proxy's key), if any.
    pub fn new(http: reqwest::Client, authorization: Option<HeaderValue>) -> Probe {
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        if let Some(authorization) = authorization {
            headers.insert(reqwest::header::AUTHORIZATION, authorization);
        }
        Probe {
            http,
            headers,
            timeout: TIMEOUT,
            body_limit: BODY_LIMIT,
        }
    }

    #[cfg(test)]
    fn bounded(mut self, timeout: Duration, body_limit: u64) -> Probe {
        self.timeout = timeout;
        self.body_limit = body_limit;
        self
    }

    /// An OpenAI-compatible server at `base_url` (up to its `/v1`), about `model`: llama.cpp's
    /// `/props`, then vLLM's `/v1/models`, then LM Studio's `/api/v0/models`, until one says.
    pub async fn ask_openai(&self, base_url: &str, model: &str) -> Result<ServerReport, String> {
        let base = base_url.trim_end_matches('/');
        let root = base.strip_suffix("/v1").unwrap_or(base);
        if let Answer::Json(props) = self.get(&format!("{root}/props")).await?
            && let Some(report) = answers::llama_cpp_props(&props)
        {
            return Ok(report);
        }
        if let Answer::Json(models) = self.get(&format!("{base}/models")).await?
            && let Some(report) = answers::vllm_models(&models, model)
        {
            return Ok(report);
        }
        if let Answer::Json(models) = self.get(&format!("{root}/api/v0/models")).await?
            && let Some(report) = answers::lm_studio_models(&models, model)
        {
            return Ok(report);
        }
        Ok(ServerReport::default())
    }

    /// Ollama at `base_url`, about `model`.
    pub async fn ask_ollama(&self, base_url: &str, model: &str) -> Result<ServerReport, String> {
        let url = format!("{}/api/show", base_url.trim_end_matches('/'));
        let request = self.http.post(&url).json(&json!({ "model": model }));
        match self.answer(request, &url).await? {
            Answer::Json(show) => Ok(answers::ollama_show(&show, model).unwrap_or_default()),
            Answer::Nothing => Ok(ServerReport::default()),
        }
    }

    async fn get(&self, url: &str) -> Result<Answer, String> {
        self.answer(self.http.get(url), url).await
    }

    async fn answer(&self, request: reqwest::RequestBuilder, url: &str) -> Result<Answer, String> {
        let asking = async {
            let response = request
                .headers(self.headers.clone())
                .send()
                .await
                .map_err(|err| words(&send_failure(&err)))?;
            let status = response.status();
            if status.is_server_error() {
                return Err(format!("HTTP {}", status.as_u16()));
            }
            if !status.is_success() {
                return Ok(Answer::Nothing);
            }
            let limits = AnswerLimits {
                idle: self.timeout,
                progress: self.timeout,
                start_by: tokio::time::Instant::now() + self.timeout,
                max_bytes: self.body_limit,
            };
            match AnswerBody::new(response.bytes_stream(), limits)
                .read_all()
                .await
            {
                Ok(body) => Ok(serde_json::from_slice(&body).map_or(Answer::Nothing, Answer::Json)),
                // Far larger than any answer to these questions: not a server that knows them.
                Err(StreamFailure::TooLong { .. }) => Ok(Answer::Nothing),
                Err(failure) => Err(words(&AttemptFailure::Stream(failure))),
            }
        };
        tokio::time::timeout(self.timeout, asking)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {}s", self.timeout.as_secs_f64())))
            .map_err(|why| format!("{}: {why}", crate::llm::url_to_show(url)))
    }
}

fn words(failure: &AttemptFailure) -> String {
    match failure {
        AttemptFailure::Unreachable(cause) => cause.clone(),
        AttemptFailure::Stream(
            StreamFailure::Stalled(waited) | StreamFailure::NoProgress { waited, .. },
        ) => format!("no answer within {}s", waited.as_secs_f64()),
        AttemptFailure::Status { status, .. } => format!("HTTP {status}"),
        // No model request was interrupted here: the words without a local server's hint.
        other => other.summary(ServerKind::Hosted),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A request as the server read it: its first line and its body.
    type Seen = Arc<Mutex<Vec<(String, String)>>>;

    /// A loopback server answering each request with what `answer` gives for its method and
    /// path: the status and the JSON body, or `None` to hold the connection open unanswered.
    async fn serve(
        answer: impl Fn(&str) -> Option<(u16, String)> + Send + 'static,
    ) -> (String, Seen) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("address").port();
        let seen: Seen = Arc::default();
        let record = Arc::clone(&seen);
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((mut socket, _)) = listener.accept().await {
                let (line, body) = read_request(&mut socket).await;
                let reply = answer(&line);
                record.lock().expect("seen").push((line, body));
                match reply {
                    Some((status, body)) => {
                        let reply = format!(
                            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = socket.write_all(reply.as_bytes()).await;
                        let _ = socket.shutdown().await;
                    }
                    None => held.push(socket),
                }
            }
        });
        (format!("http://127.0.0.1:{port}"), seen)
    }

    async fn read_request(socket: &mut tokio::net::TcpStream) -> (String, String) {
        let mut bytes = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            let read = socket.read(&mut buffer).await.unwrap_or(0);
            if read == 0 {
                break;
            }
            bytes.extend_from_slice(&buffer[..read]);
            let text = String::from_utf8_lossy(&bytes).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let length: usize = text
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                if bytes.len() >= end + 4 + length {
                    let line = text.lines().next().unwrap_or_default().to_owned();
                    return (line, text[end + 4..].to_owned());
                }
            }
        }
        (String::new(), String::new())
    }

    fn probe() -> Probe {
        Probe::new(crate::llm::http::shared_client().expect("client"), None)
    }

    const NOT_FOUND: (u16, &str) = (404, r#"{"detail":"Not Found"}"#);

    fn reply((status, body): (u16, &str)) -> Option<(u16, String)> {
        Some((status, body.to_owned()))
    }

    #[tokio::test]
    async fn llama_cpp_is_asked_at_the_root_beside_v1() {
        let (base, seen) = serve(|line| {
            if line.starts_with("GET /props ") {
                reply((200, r#"{"default_generation_settings":{"n_ctx":2048},"model_path":"/m/gemma.gguf"}"#))
            } else {
                reply(NOT_FOUND)
            }
        })
        .await;
        let report = probe()
            .ask_openai(&format!("{base}/v1"), "gemma3")
            .await
            .expect("answered");
        assert_eq!(report.context_window, Some(2048));
        assert_eq!(report.model.as_deref(), Some("gemma.gguf"));
        assert_eq!(seen.lock().expect("seen").len(), 1, "one question sufficed");
    }

    #[tokio::test]
    async fn a_server_that_knows_no_question_says_nothing_after_all_three() {
        // llama-cpp-python: no `/props`, models without a window, no LM Studio API.
        let (base, seen) = serve(|line| {
            if line.starts_with("GET /v1/models ") {
                reply((200, r#"{"object":"list","data":[{"id":"gemma3","object":"model","owned_by":"me","permissions":[]}]}"#))
            } else {
                reply(NOT_FOUND)
            }
        })
        .await;
        let report = probe()
            .ask_openai(&format!("{base}/v1/"), "gemma3")
            .await
            .expect("answered");
        assert_eq!(report, ServerReport::default());
        let asked: Vec<String> = seen
            .lock()
            .expect("seen")
            .iter()
            .map(|(line, _)| line.clone())
            .collect();
        assert_eq!(
            asked,
            vec![
                "GET /props HTTP/1.1",
                "GET /v1/models HTTP/1.1",
                "GET /api/v0/models HTTP/1.1"
            ]
        );
    }

    #[tokio::test]
    async fn vllm_answers_the_second_question() {
        let (base, _) = serve(|line| {
            if line.starts_with("GET /v1/models ") {
                reply((200, r#"{"object":"list","data":[{"id":"qwen","object":"model","max_model_len":32768}]}"#))
            } else {
                reply(NOT_FOUND)
            }
        })
        .await;
        let report = probe()
            .ask_openai(&format!("{base}/v1"), "qwen")
            .await
            .expect("answered");
        assert_eq!(report.context_window, Some(32768));
    }

    #[tokio::test]
    async fn ollama_is_asked_about_the_model_by_name() {
        let (base, seen) = serve(|line| {
            if line.starts_with("POST /api/show ") {
                reply((200, r#"{"parameters":"num_ctx 8192","model_info":{"general.architecture":"llama","llama.context_length":131072}}"#))
            } else {
                reply(NOT_FOUND)
            }
        })
        .await;
        let report = probe()
            .ask_ollama(&base, "llama3.1:8b")
            .await
            .expect("answered");
        assert_eq!(report.context_window, Some(8192));
        assert_eq!(report.model_max, Some(131072));
        let seen = seen.lock().expect("seen").clone();
        let body: Value = serde_json::from_str(&seen[0].1).expect("JSON");
        assert_eq!(body, json!({"model": "llama3.1:8b"}));
        // A model never pulled: Ollama's 404, nothing to report.
        let (base, _) = serve(|_| reply((404, r#"{"error":"model 'x' not found"}"#))).await;
        assert_eq!(
            probe().ask_ollama(&base, "x").await,
            Ok(ServerReport::default())
        );
    }

    #[tokio::test]
    async fn a_server_that_is_down_loading_or_silent_is_a_failure_named_with_its_address() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("address")
            .port();
        let down = probe()
            .ask_openai(&format!("http://127.0.0.1:{port}/v1"), "m")
            .await
            .expect_err("nothing listens");
        assert_eq!(
            down,
            format!("http://127.0.0.1:{port}/props: connection refused")
        );
        let (base, _) = serve(|_| reply((503, r#"{"error":{"message":"Loading model"}}"#))).await;
        let loading = probe()
            .ask_openai(&format!("{base}/v1"), "m")
            .await
            .expect_err("still loading");
        assert_eq!(loading, format!("{base}/props: HTTP 503"));
        let (base, _) = serve(|_| None).await;
        let silent = tokio::time::timeout(
            Duration::from_secs(10),
            probe()
                .bounded(Duration::from_millis(200), BODY_LIMIT)
                .ask_ollama(&base, "m"),
        )
        .await
        .expect("bounded by its own timeout")
        .expect_err("no answer");
        assert_eq!(silent, format!("{base}/api/show: no answer within 0.2s"));
    }

    #[tokio::test]
    async fn an_answer_larger_than_the_cap_is_no_answer() {
        let (base, _) = serve(|line| {
            if line.starts_with("GET /props ") {
                let padding = "x".repeat(4096);
                Some((
                    200,
                    format!(r#"{{"default_generation_settings":{{"n_ctx":2048}},"chat_template":"{padding}"}}"#),
                ))
            } else {
                reply(NOT_FOUND)
            }
        })
        .await;
        let report = probe()
            .bounded(TIMEOUT, 1024)
            .ask_openai(&format!("{base}/v1"), "m")
            .await
            .expect("answered");
        assert_eq!(report, ServerReport::default());
    }
}
