//! A loop's transcript: what the model wrote, each call and result, retries, review verdicts,
//! validation runs and the tokens of each turn, as markdown a person can follow live.
//! `render` words it (from journal entries, or piece by piece as a turn goes), `live` is a
//! running loop's side, and `hub` joins the stored part to the live one for each follower.

mod hub;
mod live;
mod render;

pub use hub::{TranscriptHub, TranscriptText};
pub(crate) use live::{LiveTranscript, emit_batch};
