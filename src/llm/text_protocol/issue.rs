//! What can be wrong with an answer, told to the model as the problem, the offending text and
//! the fix.

use std::fmt;

/// The kind of a problem, for callers that decide by it (and for tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IssueKind {
    /// A section (or a reasoning wrapper) was opened and never closed.
    UnclosedSection,
    /// A fenced code block was opened and never closed.
    UnclosedFence,
    /// The answer has no section the protocol knows.
    NoSections,
    /// The answer has sections, but neither calls nor a final answer.
    NothingToDo,
    /// An action section or a call block is empty.
    EmptyCall,
    /// The calls are not valid JSON or YAML.
    Syntax,
    /// A value where a call object was expected is something else.
    NotACall,
    /// A call object has a key the protocol does not define.
    UnexpectedKey,
    /// A call has no tool name, or an empty one.
    EmptyName,
    /// A call names a tool that does not exist.
    UnknownTool,
    /// A call's arguments do not match the tool's parameters.
    InvalidArguments,
    /// Two calls of one answer have the same uid.
    DuplicateUid,
    /// A `## Tool Calls` heading without a fenced block under it.
    NoCallBlocks,
    /// YAML the reader does not take (anchors and aliases, deep nesting, complex keys).
    Unsupported,
    /// A typed final answer that does not match its schema.
    InvalidAnswer,
}

/// One problem with an answer. Displayed, it is a message to the model: what is wrong, the
/// offending text (shortened) where there is one, and what to do instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatIssue {
    pub kind: IssueKind,
    pub problem: String,
    pub quote: Option<String>,
    pub fix: String,
}

impl FormatIssue {
    pub(super) fn new(kind: IssueKind, problem: impl Into<String>, fix: impl Into<String>) -> Self {
        FormatIssue {
            kind,
            problem: problem.into(),
            quote: None,
            fix: fix.into(),
        }
    }

    pub(super) fn quoting(mut self, text: &str) -> Self {
        let shortened = shorten(text);
        self.quote = (!shortened.is_empty()).then_some(shortened);
        self
    }
}

impl fmt::Display for FormatIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.problem)?;
        if let Some(quote) = &self.quote {
            write!(f, ": `{quote}`")?;
        }
        write!(f, ". {}", self.fix)
    }
}

/// `text` on one line, cut to a length that keeps a message readable.
pub(super) fn shorten(text: &str) -> String {
    const LIMIT: usize = 80;
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= LIMIT {
        return one_line;
    }
    let cut: String = one_line.chars().take(LIMIT).collect();
    format!("{cut}…")
}
