//! A loop's transcript: what the model wrote, each call and result, retries, review verdicts,
//! validation runs and the tokens of each turn, as markdown a person can follow live.
//! `render` words it (from journal entries, or piece by piece as a turn goes), `live` is a
//! running loop's side, and `hub` joins the stored part to the live one for each follower.

mod hub;
mod live;
mod render;

pub use hub::{TranscriptHub, TranscriptText};
pub(crate) use live::{LiveTranscript, emit_batch};

use crate::store::{LoopRecord, ProjectLayout};

/// The heading of loop `record`'s transcript.
pub fn title(record: &LoopRecord) -> String {
    format!("{} loop {}", record.loop_type.as_str(), record.id)
}

/// The transcript loop `record`'s journal holds, for a shell that only reads it (the CLI).
/// Blocking: reads the journal.
pub fn stored_transcript(
    layout: &ProjectLayout,
    record: &LoopRecord,
) -> Result<String, super::journal::JournalError> {
    let whole = super::journal::Journal::of(layout, &record.id).whole_entries()?;
    Ok(render::render_entries(&title(record), &whole.entries))
}
