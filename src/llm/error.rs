use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("cancelled")]
    Cancelled,
    #[error("{0} is not set; export it in the shell, or in Neovim run :let ${0} = '<value>'")]
    MissingEnv(&'static str),
    #[error("invalid {name}: {message}")]
    InvalidConfig { name: &'static str, message: String },
    #[error("HTTP {status} {error_type} from the model API: {message}{}", attempts_note(*attempts))]
    Http {
        status: u16,
        error_type: String,
        message: String,
        attempts: u32,
    },
    /// No connection could be made (refused, unresolvable host, TLS): the base URL is what
    /// the user can check.
    #[error("cannot reach the model API at {base_url} (ANTHROPIC_BASE_URL): {cause}{}", attempts_note(*attempts))]
    Unreachable {
        base_url: String,
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

fn attempts_note(attempts: u32) -> String {
    if attempts > 1 {
        format!(" (after {attempts} attempts)")
    } else {
        String::new()
    }
}
