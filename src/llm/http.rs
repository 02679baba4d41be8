//! The host's one HTTP client, and what a failed send means in words a user can act on.
//! Shared by every provider.

use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::answer_body::{AnswerBody, AnswerLimits};
use super::attempt::AttemptFailure;
use super::retry::{is_retryable_status, server_requested_delay};
use super::server_text::{server_message, server_word};
use super::stream_failure::StreamFailure;

/// Bytes of an error answer read; an error body is a few hundred bytes, and the rest of a
/// larger one is not read.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// The host's one HTTP client: every loop's requests share its connection pool, and its
/// TLS roots (about 150 certificate files) are read once, not for every loop. Nothing in it
/// depends on a loop's settings; per-loop timeouts are applied per request.
pub fn shared_client() -> Result<reqwest::Client, String> {
    static CLIENT: std::sync::OnceLock<Result<reqwest::Client, String>> =
        std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            install_tls_provider();
            reqwest::Client::builder()
                .user_agent(concat!("loopr/", env!("CARGO_PKG_VERSION")))
                .connect_timeout(Duration::from_secs(30))
                .build()
                .map_err(|err| err.to_string())
        })
        .clone()
}

/// Makes ring the process's TLS crypto provider, which every reqwest client uses: reqwest is
/// built without a provider of its own (see Cargo.toml) and panics when building a client
/// before one is installed. Call before building any client; later calls do nothing.
pub fn install_tls_provider() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // Fails only if a provider is already installed, which then serves just as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Why a request could not be sent, in words a user can act on. reqwest's own text ("error
/// sending request for url (...): client error (Connect): tcp connect error: ...") is written
/// for developers; the kind of the underlying I/O error says the same plainly.
pub fn send_failure(err: &reqwest::Error) -> AttemptFailure {
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

/// Posts a request body and returns the response once it says success: the wait for its head
/// bounded by the time the answer has to begin (a server may evaluate the whole prompt before
/// it answers at all), a failed send or an error status as the attempt's failure.
pub async fn post(
    http: &reqwest::Client,
    url: &reqwest::Url,
    headers: &reqwest::header::HeaderMap,
    body: &super::wire_cache::RequestBytes,
    limits: &AnswerLimits,
) -> Result<reqwest::Response, AttemptFailure> {
    let send = http
        .post(url.clone())
        .headers(headers.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_body())
        .send();
    let response = tokio::time::timeout(limits.until_start(), send)
        .await
        .map_err(|_| {
            AttemptFailure::Stream(StreamFailure::NoProgress {
                waited: limits.progress,
                started: false,
            })
        })?
        .map_err(|err| send_failure(&err))?;
    if !response.status().is_success() {
        return Err(status_failure(response, limits.idle).await);
    }
    Ok(response)
}

/// Reads an error answer: the status, whether it is worth retrying, the delay the server
/// asked for, and its error body (its first 64 KiB, all of it read within `idle`).
pub async fn status_failure(response: reqwest::Response, idle: Duration) -> AttemptFailure {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let limits = AnswerLimits {
        idle,
        progress: idle,
        start_by: tokio::time::Instant::now() + idle,
        max_bytes: u64::MAX,
    };
    let bytes = read_error_body(AnswerBody::new(response.bytes_stream(), limits)).await;
    let text = String::from_utf8_lossy(&bytes);
    let error = ErrorBody::parse(&text);
    AttemptFailure::Status {
        status,
        retryable: is_retryable_status(status, &headers, error.error_code.as_deref()),
        server_delay: server_requested_delay(&headers, SystemTime::now()),
        error_type: error.error_type,
        message: error.message,
    }
}

/// An error answer's body: its first 64 KiB, or what came of it by the body's deadline. Nothing
/// in it is progress, so a server trickling it a byte at a time still ends by that deadline.
async fn read_error_body<S, E>(mut body: AnswerBody<S>) -> Vec<u8>
where
    S: futures::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
    E: std::error::Error + 'static,
{
    let mut bytes = Vec::new();
    while bytes.len() < ERROR_BODY_LIMIT
        && let Ok(Some(chunk)) = body.next_chunk().await
    {
        bytes.extend_from_slice(&chunk);
    }
    bytes.truncate(ERROR_BODY_LIMIT);
    bytes
}

/// An error body, read leniently, as every provider (and any proxy in front of it) writes
/// one: Anthropic's `{"type":"error","error":{"type","message","details":{"error_code"}}}`,
/// OpenAI's `{"error":{"message","type","code"}}`, Ollama's `{"error":"..."}`, or anything.
#[derive(Debug, Default, PartialEq)]
pub struct ErrorBody {
    pub error_type: String,
    pub message: String,
    pub error_code: Option<String>,
}

impl ErrorBody {
    pub fn parse(body: &str) -> ErrorBody {
        let unknown = || ErrorBody {
            error_type: "unknown_error".to_owned(),
            message: summarize(body),
            error_code: None,
        };
        let Ok(json) = serde_json::from_str::<Value>(body) else {
            return unknown();
        };
        ErrorBody::from_json(&json).unwrap_or_else(unknown)
    }

    /// The error `json` carries, if it carries one.
    pub fn from_json(json: &Value) -> Option<ErrorBody> {
        let text = |value: Option<&Value>| {
            value.and_then(|value| match value {
                Value::String(text) => Some(text.clone()),
                Value::Number(number) => Some(number.to_string()),
                _ => None,
            })
        };
        let error = json.get("error")?;
        if let Some(message) = error.as_str() {
            return Some(ErrorBody {
                error_type: "error".to_owned(),
                message: server_message(message),
                error_code: None,
            });
        }
        Some(ErrorBody {
            error_type: text(error.get("type"))
                .map_or_else(|| "unknown_error".to_owned(), |kind| server_word(&kind)),
            message: text(error.get("message")).map_or_else(
                || summarize(&error.to_string()),
                |message| server_message(&message),
            ),
            error_code: text(error.pointer("/details/error_code"))
                .or_else(|| text(error.get("code")))
                .map(|code| server_word(&code)),
        })
    }
}

fn summarize(body: &str) -> String {
    const LIMIT: usize = 300;
    let trimmed = body.trim();
    if trimmed.is_empty() {
        return "(empty response body)".to_owned();
    }
    match trimmed.char_indices().nth(LIMIT) {
        Some((cut, _)) => server_message(&format!("{}…", &trimmed[..cut])),
        None => server_message(trimmed),
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_error_body_trickled_a_byte_at_a_time_ends_within_the_idle_timeout() {
        let idle = Duration::from_secs(10);
        // A byte every 8 s, under the idle timeout, for far longer than it.
        let trickle = Box::pin(futures::stream::iter(0..1000).then(|_| async {
            tokio::time::sleep(Duration::from_secs(8)).await;
            Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"x"))
        }));
        let limits = AnswerLimits {
            idle,
            progress: idle,
            start_by: tokio::time::Instant::now() + idle,
            max_bytes: u64::MAX,
        };
        let begin = tokio::time::Instant::now();
        let body = read_error_body(AnswerBody::new(trickle, limits)).await;
        assert_eq!(begin.elapsed(), idle, "read {} bytes", body.len());
        assert_eq!(body, b"x");
    }

    #[test]
    fn a_servers_error_text_is_one_line_and_capped_however_long_it_is() {
        let huge = serde_json::json!({"error": {
            "type": format!("bad\n{}", "t".repeat(10_000)),
            "message": format!("line one\nline two\r\n{}", "m".repeat(3_000_000)),
            "code": "c".repeat(10_000),
        }});
        let error = ErrorBody::parse(&huge.to_string());
        assert!(
            error.message.starts_with("line one line two "),
            "{}",
            &error.message[..40]
        );
        assert!(
            error.message.chars().count() <= 2_001,
            "{}",
            error.message.len()
        );
        assert!(error.error_type.starts_with("bad t") && error.error_type.chars().count() <= 101);
        assert!(
            error
                .error_code
                .is_some_and(|code| code.chars().count() <= 101)
        );
        for text in [&error.message, &error.error_type] {
            assert!(!text.contains(['\n', '\r']), "one line");
        }
        let plain = ErrorBody::parse(&format!("{{\"error\": \"{}\"}}", "e".repeat(50_000)));
        assert!(plain.message.chars().count() <= 2_001);
        let not_json = ErrorBody::parse("<html>\n<body>\nbusy\n</body>");
        assert_eq!(not_json.message, "<html> <body> busy </body>");
    }

    #[test]
    fn error_bodies_of_every_provider_are_read_leniently() {
        let anthropic = ErrorBody::parse(
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down","details":{"error_code":"enforced_spend_limit_reached"}}}"#,
        );
        assert_eq!(anthropic.error_type, "rate_limit_error");
        assert_eq!(anthropic.message, "slow down");
        assert_eq!(
            anthropic.error_code.as_deref(),
            Some("enforced_spend_limit_reached")
        );
        let openai = ErrorBody::parse(
            r#"{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
        );
        assert_eq!(openai.error_type, "requests");
        assert_eq!(openai.error_code.as_deref(), Some("rate_limit_exceeded"));
        let ollama =
            ErrorBody::parse(r#"{"error":"model \"qwen\" not found, try pulling it first"}"#);
        assert_eq!(
            ollama.message,
            "model \"qwen\" not found, try pulling it first"
        );
        let html = ErrorBody::parse("<html>bad gateway</html>");
        assert_eq!(html.error_type, "unknown_error");
        assert_eq!(html.message, "<html>bad gateway</html>");
    }
}
