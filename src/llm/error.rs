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
