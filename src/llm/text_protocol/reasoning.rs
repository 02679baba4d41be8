//! Reasoning wrappers (`<think>`, `<thinking>`, `<reasoning>`) taken out of an answer before
//! the `markdown` and `tool_calls` protocols read it: nothing in them is ever a call.

use super::issue::{FormatIssue, IssueKind};
use super::syntax::REASONING_WRAPPERS;
use super::tags;

/// `text` without its reasoning, and the problem if a wrapper is never closed (everything
/// after its opening tag is then reasoning).
pub(super) fn strip(text: &str) -> (String, Option<FormatIssue>) {
    let scan = tags::scan(text, &REASONING_WRAPPERS);
    let mut kept = String::with_capacity(text.len());
    let mut cursor = scan.start;
    for section in &scan.sections {
        kept.push_str(&text[cursor..section.open.start]);
        kept.push('\n');
        cursor = section.close.end;
    }
    let Some(unclosed) = scan.unclosed else {
        kept.push_str(&text[cursor..]);
        return (kept, None);
    };
    kept.push_str(&text[cursor..unclosed.open.start]);
    let issue = unclosed_section(
        &format!("<{}>", unclosed.name),
        &format!("</{}>", unclosed.name),
        &text[unclosed.open.start..],
    );
    (kept, Some(issue))
}

/// A section opened and never closed: its content may be cut off, and nothing after its
/// opening was used.
pub(super) fn unclosed_section(opening: &str, closing: &str, from_opening: &str) -> FormatIssue {
    FormatIssue::new(
        IssueKind::UnclosedSection,
        format!(
            "{opening} is never closed, so everything after it was read as part of it and \
             nothing after it was used"
        ),
        format!("close it with {closing} where it ends"),
    )
    .quoting(from_opening)
}
