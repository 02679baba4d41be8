//! What a turn of a coding agent keeps, bounded: an agent may send without end, and all a
//! turn keeps is journaled, shown and sent back with the conversation. Its text is kept up to
//! `MAX_TEXT_BYTES`, its tool calls up to `MAX_CALLS` (each title to `MAX_TITLE_CHARS`), its
//! plan up to `MAX_PLAN_ENTRIES`; what is left out is marked `[... more not kept]`.

use agent_client_protocol::v1::schema::{PlanEntry, PlanEntryStatus, ToolCallStatus};

use super::{AgentTurn, ToolCallSeen, status_word};
use crate::agent::events::AgentPlanEntry;
use crate::agent::turn::Conversation;
use crate::llm::ContentBlock;

/// The agent's text a turn keeps (and shows): 1 MiB.
const MAX_TEXT_BYTES: usize = 1024 * 1024;
/// The tool calls a turn keeps.
const MAX_CALLS: usize = 2000;
/// A tool call's title, or a plan entry, as kept.
const MAX_TITLE_CHARS: usize = 300;
/// The entries of the agent's plan kept.
const MAX_PLAN_ENTRIES: usize = 200;
/// Where what was left out would be.
const NOT_KEPT: &str = "[... more not kept]";

/// What a turn kept of the agent's text, and what it left out.
#[derive(Debug, Default)]
pub(super) struct LeftOut {
    text_bytes: usize,
    text: bool,
    calls: bool,
}

/// `title` cut to `MAX_TITLE_CHARS`.
pub(super) fn title(title: &str) -> String {
    match title.char_indices().nth(MAX_TITLE_CHARS) {
        Some((end, _)) => format!("{}…", &title[..end]),
        None => title.to_owned(),
    }
}

/// The plan's first `MAX_PLAN_ENTRIES` entries, each cut like a title, with its status word.
pub(super) fn plan(
    entries: Vec<PlanEntry>,
    status_word: impl Fn(PlanEntryStatus) -> &'static str,
) -> Vec<AgentPlanEntry> {
    entries
        .into_iter()
        .take(MAX_PLAN_ENTRIES)
        .map(|entry| AgentPlanEntry {
            content: title(&entry.content),
            status: status_word(entry.status),
        })
        .collect()
}

impl AgentTurn {
    /// Keeps and shows `text`, while the turn's text is under its bound.
    pub(super) fn text(&mut self, conversation: &Conversation, text: &str) {
        let room = MAX_TEXT_BYTES.saturating_sub(self.left_out.text_bytes);
        let mut end = text.len().min(room);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        if end < text.len() {
            self.left_out.text = true;
        }
        let kept = &text[..end];
        self.left_out.text_bytes += kept.len();
        if kept.is_empty() {
            return;
        }
        conversation.agent_text(kept);
        match self.content.last_mut() {
            Some(ContentBlock::Text { text: last }) => last.push_str(kept),
            _ => self.content.push(ContentBlock::text(kept)),
        }
    }

    /// Whether tool call `id` is kept: one already seen, or a new one under the bound.
    pub(super) fn keeps_call(&mut self, id: &str) -> bool {
        let kept = self.calls.contains_key(id) || self.calls.len() < MAX_CALLS;
        self.left_out.calls |= !kept;
        kept
    }

    /// The turn ended: what was left out is marked, its plan joins its text, and its tool
    /// calls' results are known.
    pub(super) fn finish(&mut self, conversation: &Conversation) {
        let mut shown = String::new();
        if self.left_out.text {
            shown.push_str(&format!("\n\n{NOT_KEPT}: the agent's text past 1 MiB\n"));
        }
        if self.left_out.calls {
            shown.push_str(&format!(
                "\n\n{NOT_KEPT}: the agent's tool calls past {MAX_CALLS}\n"
            ));
        }
        if !self.plan.is_empty() {
            shown.push_str("\n\n**The agent's plan:**\n\n");
            for entry in &self.plan {
                let mark = match entry.status {
                    "completed" => "x",
                    "in_progress" => "~",
                    _ => " ",
                };
                shown.push_str(&format!("- [{mark}] {}\n", entry.content));
            }
        }
        if !shown.is_empty() {
            conversation.agent_text(&shown);
            self.content.push(ContentBlock::text(shown));
        }
        let mut calls: Vec<(&String, &ToolCallSeen)> = self.calls.iter().collect();
        calls.sort_by_key(|(_, seen)| seen.order);
        self.results = calls
            .into_iter()
            .map(|(id, seen)| ContentBlock::ToolResult {
                id: id.clone(),
                content: format!("{}: {}", seen.title, status_word(&seen.status)),
                is_error: seen.status == ToolCallStatus::Failed,
            })
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_title_is_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_TITLE_CHARS + 5);
        let cut = title(&long);
        assert_eq!(cut.chars().count(), MAX_TITLE_CHARS + 1, "{cut}");
        assert!(cut.ends_with('…'));
        assert_eq!(title("Read notes.txt"), "Read notes.txt");
    }
}
