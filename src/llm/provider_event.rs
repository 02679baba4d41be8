//! What a provider reports while a turn is under way (`ProviderEvent`): told by the attempts
//! that read an answer and by each provider, heard by the loop's progress and transcript.

use std::time::Duration;

/// What a provider reports while a turn is under way, for progress display and the
/// transcript.
#[derive(Clone, Debug, PartialEq)]
pub enum ProviderEvent {
    /// Text of the answer as it streams in (never a call's input, never the model's
    /// reasoning). A failed attempt's text is followed by `Retrying`.
    TextDelta { text: String },
    /// The model started writing a tool call.
    ToolCallStarted { name: String },
    /// A piece of a tool call's input streamed in: its length in bytes only (the input is
    /// read whole, once the call is), for showing the answer grow.
    ToolInputDelta { bytes: usize },
    /// The attempt failed in a way worth retrying; the next one starts after `delay`.
    Retrying {
        attempt: u32,
        max_retries: u32,
        delay: Duration,
        reason: String,
    },
}
