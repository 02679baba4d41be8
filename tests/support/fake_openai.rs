//! Rendering scripted turns as OpenAI chat-completion chunks (unnamed SSE events ending with
//! `data: [DONE]`).

use super::TurnParts;

/// The SSE bytes of `turn`.
pub fn render_turn(turn: &TurnParts<'_>) -> Vec<u8> {
    let _ = turn;
    unimplemented!("the OpenAI wire of the fake server is not written yet")
}
