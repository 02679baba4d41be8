//! Rendering scripted turns as Ollama `/api/chat` NDJSON lines.

use super::TurnParts;

pub const CONTENT_TYPE: &str = "application/x-ndjson";

/// The NDJSON bytes of `turn`.
pub fn render_turn(turn: &TurnParts<'_>) -> Vec<u8> {
    let _ = turn;
    unimplemented!("the Ollama wire of the fake server is not written yet")
}
