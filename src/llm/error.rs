use std::time::Duration;

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
}

impl LlmError {
    /// Whether the provider refused the request as longer than the model's context window:
    /// Anthropic's "prompt is too long", OpenAI's `context_length_exceeded` ("maximum context
    /// length"). Only the message tells: both come as a plain 400 invalid request.
    pub fn is_context_overflow(&self) -> bool {
        match self {
            LlmError::Http {
                status: 400 | 413,
                message,
                ..
            } => {
                let message = message.to_ascii_lowercase();
                [
                    "prompt is too long",
                    "maximum context length",
                    "context_length_exceeded",
                ]
                .iter()
                .any(|sign| message.contains(sign))
            }
            _ => false,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16, message: &str) -> LlmError {
        LlmError::Http {
            status,
            error_type: "invalid_request_error".to_owned(),
            message: message.to_owned(),
            attempts: 1,
        }
    }

    #[test]
    fn a_prompt_longer_than_the_window_is_told_apart_from_other_refusals() {
        for (error, overflow) in [
            (
                http(400, "prompt is too long: 210000 tokens > 200000 maximum"),
                true,
            ),
            (
                http(
                    400,
                    "This model's maximum context length is 128000 tokens. However, your \
                     messages resulted in 130000 tokens.",
                ),
                true,
            ),
            (http(400, "max_tokens: must be at most 64000"), false),
            (http(529, "prompt is too long"), false),
            (LlmError::Protocol("prompt is too long".to_owned()), false),
        ] {
            assert_eq!(error.is_context_overflow(), overflow, "{error}");
        }
    }
}
