//! How a model request fails (`LlmError`): missing configuration, an HTTP status, a server
//! out of reach, a stalled or broken stream, an answer ended early or timed out; whether a
//! server's report means a context overflow, and the words that say what to do next.

use std::time::Duration;

use super::ServerKind;

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("cancelled")]
    Cancelled,
    #[error(
        "{0} is not set; export it in the shell, or in Neovim run :let ${0} = '<value>' (or set \
         api_key_env to the variable that holds the key)"
    )]
    MissingEnv(String),
    #[error("invalid {name}: {message}")]
    InvalidConfig { name: String, message: String },
    #[error("HTTP {status} {error_type} from the model API: {message}{}", attempts_note(*attempts))]
    Http {
        status: u16,
        error_type: String,
        message: String,
        attempts: u32,
    },
    /// No connection could be made (refused, unresolvable host, TLS): the base URL, and the
    /// variable that sets it, are what the user can check.
    #[error("cannot reach the model API at {base_url} ({variable}): {cause}{}", attempts_note(*attempts))]
    Unreachable {
        base_url: String,
        variable: &'static str,
        cause: String,
        attempts: u32,
    },
    #[error("connection to the model API failed: {message}{}", attempts_note(*attempts))]
    Transport { message: String, attempts: u32 },
    #[error("the model API stream stalled: no data for {:.1}s{}", idle.as_secs_f64(), attempts_note(*attempts))]
    Stalled { idle: Duration, attempts: u32 },
    #[error("the model API reported {error_type} mid-stream: {message}{}", attempts_note(*attempts))]
    StreamError {
        error_type: String,
        message: String,
        attempts: u32,
    },
    #[error("the model API sent a malformed stream: {0}")]
    Protocol(String),
    /// The answer ended before the server said it was complete (no finish reason, no stop).
    #[error(
        "the model API ended its answer before it was complete: {detail}{}{}",
        attempts_note(*attempts),
        interruption_hint(*server)
    )]
    EndedEarly {
        detail: String,
        server: ServerKind,
        attempts: u32,
    },
    /// The server sent nothing of the answer, or nothing more of it, within the request
    /// timeout (keep-alives prove it alive, not that it answers).
    #[error("{}{}", timed_out(*waited, *started), attempts_note(*attempts))]
    TimedOut {
        waited: Duration,
        /// Whether the answer had begun.
        started: bool,
        attempts: u32,
    },
    /// The answer passed the cap on its size and was stopped; none of it is used.
    #[error(
        "the model API's answer passed {} and was stopped, far more than max_tokens allows (the \
         server may not honour max_tokens); none of it was used{}",
        size(*limit),
        attempts_note(*attempts)
    )]
    AnswerTooLong { limit: u64, attempts: u32 },
    /// The server found the request longer than the model's context window.
    #[error(
        "the request does not fit the model's context window: {message}{}. {}",
        attempts_note(*attempts),
        overflow_fix(*server)
    )]
    ContextOverflow {
        message: String,
        server: ServerKind,
        attempts: u32,
    },
    /// The server accepted the request, then closed the connection before any of the answer:
    /// llama-cpp-python's way of failing a streamed request, whose reason only its log has.
    #[error(
        "the model API closed the connection before it sent any of the answer ({cause}){}{}",
        attempts_note(*attempts),
        dropped_hint(*server)
    )]
    DroppedBeforeAnswer {
        cause: String,
        server: ServerKind,
        attempts: u32,
    },
}

/// Whether an error a server reported (its type, code or message) says the request is longer
/// than the model's context window: Anthropic's "prompt is too long", OpenAI's and
/// llama-cpp-python's `context_length_exceeded` ("maximum context length"), llama-cpp-python's
/// "Requested tokens (N) exceed context window of M", llama-server's
/// `exceed_context_size_error` ("the request exceeds the available context size") and its
/// older "Context size has been exceeded". Most come as a plain 400 or a generic error type:
/// the words are what tells.
pub fn is_overflow_report(texts: &[&str]) -> bool {
    const SIGNS: [&str; 7] = [
        "prompt is too long",
        "maximum context length",
        "context_length_exceeded",
        "exceed context window",
        "exceeds the available context size",
        "exceed_context_size_error",
        "context size has been exceeded",
    ];
    texts.iter().any(|text| {
        let text = text.to_ascii_lowercase();
        SIGNS.iter().any(|sign| text.contains(sign))
    })
}

impl LlmError {
    /// Whether the provider refused the request as longer than the model's context window
    /// (the turn engine then sends less).
    pub fn is_context_overflow(&self) -> bool {
        matches!(self, LlmError::ContextOverflow { .. })
    }

    /// The same error with `redact` applied to every text that came from outside.
    pub fn redacted(self, redact: &impl Fn(&str) -> String) -> LlmError {
        match self {
            LlmError::Http {
                status,
                error_type,
                message,
                attempts,
            } => LlmError::Http {
                status,
                error_type: redact(&error_type),
                message: redact(&message),
                attempts,
            },
            LlmError::Unreachable {
                base_url,
                variable,
                cause,
                attempts,
            } => LlmError::Unreachable {
                base_url: redact(&base_url),
                variable,
                cause: redact(&cause),
                attempts,
            },
            LlmError::Transport { message, attempts } => LlmError::Transport {
                message: redact(&message),
                attempts,
            },
            LlmError::StreamError {
                error_type,
                message,
                attempts,
            } => LlmError::StreamError {
                error_type: redact(&error_type),
                message: redact(&message),
                attempts,
            },
            LlmError::Protocol(message) => LlmError::Protocol(redact(&message)),
            LlmError::EndedEarly {
                detail,
                server,
                attempts,
            } => LlmError::EndedEarly {
                detail: redact(&detail),
                server,
                attempts,
            },
            LlmError::ContextOverflow {
                message,
                server,
                attempts,
            } => LlmError::ContextOverflow {
                message: redact(&message),
                server,
                attempts,
            },
            LlmError::DroppedBeforeAnswer {
                cause,
                server,
                attempts,
            } => LlmError::DroppedBeforeAnswer {
                cause: redact(&cause),
                server,
                attempts,
            },
            LlmError::InvalidConfig { name, message } => LlmError::InvalidConfig {
                name,
                message: redact(&message),
            },
            other => other,
        }
    }
}

fn attempts_note(attempts: u32) -> String {
    if attempts > 1 {
        format!(" (after {attempts} attempts)")
    } else {
        String::new()
    }
}

/// `600s`, `1.5s`.
pub(crate) fn seconds(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{:.1}s", duration.as_secs_f64())
    }
}

/// `8 MiB`, `512 KiB`.
fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes.div_ceil(1 << 10))
    }
}

fn timed_out(waited: Duration, started: bool) -> String {
    let waited = seconds(waited);
    if started {
        format!(
            "the model API's answer stopped: nothing of it came for the request timeout of \
             {waited} (request_timeout_ms), only keep-alives or nothing"
        )
    } else {
        format!(
            "the model API sent no answer within the request timeout of {waited} \
             (request_timeout_ms), only keep-alives or nothing"
        )
    }
}

/// Why a local OpenAI-compatible server may have ended an answer early.
pub(crate) fn interruption_hint(server: ServerKind) -> &'static str {
    match server {
        ServerKind::Local => {
            "; another request to the same server may have interrupted it (llama.cpp's server \
             stops an answer when the next request arrives)"
        }
        ServerKind::Hosted | ServerKind::Ollama => "",
    }
}

/// What makes a conversation fit the model's context again.
fn overflow_fix(server: ServerKind) -> &'static str {
    match server {
        ServerKind::Local => {
            "Start the server with a larger context (llama.cpp's --ctx-size, llama-cpp-python's \
             --n_ctx), or lower context_budget (what is sent of a long conversation) and \
             max_tokens"
        }
        ServerKind::Ollama => {
            "Raise num_ctx (the context Ollama gives the model), or lower context_budget (what \
             is sent of a long conversation) and max_tokens"
        }
        ServerKind::Hosted => {
            "Lower context_budget (what is sent of a long conversation) or max_tokens"
        }
    }
}

fn dropped_hint(server: ServerKind) -> &'static str {
    match server {
        ServerKind::Local => {
            "; the server's log says why (llama-cpp-python fails a streamed request this way, \
             for one when the prompt is longer than its context window, n_ctx)"
        }
        ServerKind::Hosted | ServerKind::Ollama => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_longer_than_the_window_is_told_apart_from_other_refusals() {
        for (texts, overflow) in [
            (
                vec!["prompt is too long: 210000 tokens > 200000 maximum"],
                true,
            ),
            (
                vec![
                    "This model's maximum context length is 128000 tokens. However, your \
                     messages resulted in 130000 tokens.",
                ],
                true,
            ),
            (
                vec!["Requested tokens (2100) exceed context window of 2048"],
                true,
            ),
            (
                vec![
                    "exceed_context_size_error",
                    "the request exceeds the available context size, try increasing it",
                ],
                true,
            ),
            (
                vec!["server_error", "Context size has been exceeded."],
                true,
            ),
            (
                vec!["invalid_request_error", "max_tokens: must be at most 64000"],
                false,
            ),
            (
                vec!["Automatic streaming tool choice is not supported"],
                false,
            ),
        ] {
            assert_eq!(is_overflow_report(&texts), overflow, "{texts:?}");
        }
    }

    #[test]
    fn an_overflow_names_the_fix_for_its_server() {
        let overflow = |server| {
            LlmError::ContextOverflow {
                message: "Requested tokens (2100) exceed context window of 2048".to_owned(),
                server,
                attempts: 1,
            }
            .to_string()
        };
        assert!(overflow(ServerKind::Local).contains("--ctx-size"));
        assert!(overflow(ServerKind::Ollama).contains("Raise num_ctx"));
        let hosted = overflow(ServerKind::Hosted);
        assert!(
            hosted.contains("context_budget") && !hosted.contains("num_ctx"),
            "{hosted}"
        );
    }
}
