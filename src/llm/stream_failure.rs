//! Why a stream did not produce a turn (`StreamFailure`): what reading an answer's body finds
//! and what each attempt turns into a retry or an error.

use std::time::Duration;

/// Why a stream did not produce a turn.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamFailure {
    /// No bytes arrived for the idle timeout.
    Stalled(Duration),
    /// Nothing of the answer (or nothing more of it) came within the request timeout, though
    /// keep-alives may have.
    NoProgress { waited: Duration, started: bool },
    /// The connection broke in the middle of the answer.
    Transport(String),
    /// The connection broke after the server accepted the request, before any of the answer.
    DroppedBeforeAnswer(String),
    /// The body ended, or the server said it was done, before the answer was complete (no
    /// finish reason): what llama.cpp's server sends when another request interrupts it.
    EndedEarly(String),
    /// The answer passed the cap on its size.
    TooLong { limit: u64 },
    /// The server reported an error in the middle of the stream.
    ApiError {
        error_type: String,
        message: String,
        /// The error object's `code`, if it had one (an HTTP status, or a word).
        code: Option<String>,
    },
    /// The server sent something that is not its protocol.
    Protocol(String),
}
