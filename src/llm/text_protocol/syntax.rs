//! The spellings the instructions teach and the parsers read, defined once so the prompt and
//! the parser cannot drift apart.

/// The sections of the `xml` and `markdown` protocols.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Section {
    /// Reasoning; never read for calls.
    Thinking,
    /// Tool calls.
    Action,
    /// The final answer.
    Answer,
}

impl Section {
    pub(super) const ALL: [Section; 3] = [Section::Thinking, Section::Action, Section::Answer];

    /// The name as the instructions spell it (lower case; the parser ignores case).
    pub(super) fn name(self) -> &'static str {
        match self {
            Section::Thinking => "thinking",
            Section::Action => "action",
            Section::Answer => "answer",
        }
    }

    /// The section a tag or header name stands for: its own name, or one of the reasoning
    /// wrappers models write unasked, which count as thinking.
    pub(super) fn from_name(name: &str) -> Option<Section> {
        let name = name.trim().to_lowercase();
        if let Some(section) = Section::ALL.into_iter().find(|s| s.name() == name) {
            return Some(section);
        }
        REASONING_WRAPPERS
            .contains(&name.as_str())
            .then_some(Section::Thinking)
    }

    pub(super) fn open_tag(self) -> String {
        format!("<{}>", self.name())
    }

    pub(super) fn close_tag(self) -> String {
        format!("</{}>", self.name())
    }

    /// The Markdown header; any level is read, this one is taught.
    pub(super) fn header(self) -> String {
        let name = self.name();
        let mut title = name[..1].to_uppercase();
        title.push_str(&name[1..]);
        format!("# {title}")
    }
}

/// Tags some models wrap their reasoning in without being asked (`<think>` from reasoning
/// models, `<thinking>` from Claude-style prompting): never read for calls, in any protocol.
pub(super) const REASONING_WRAPPERS: [&str; 3] = ["think", "thinking", "reasoning"];

/// The heading of the `tool_calls` protocol's call section.
pub(super) const TOOL_CALLS_HEADING: &str = "Tool Calls";

/// The keys of one call object.
#[derive(Clone, Copy, Debug)]
pub(super) struct CallKeys {
    pub(super) name: &'static str,
    pub(super) args: &'static str,
    /// The call's id, where the protocol lets the model choose one.
    pub(super) uid: Option<&'static str>,
}

/// `{"tool": NAME, "args": {...}}` of the `xml` and `markdown` protocols.
pub(super) const SECTION_CALL_KEYS: CallKeys = CallKeys {
    name: "tool",
    args: "args",
    uid: None,
};

/// `{"uid": ID, "name": NAME, "arguments": {...}}` of the `tool_calls` protocol.
pub(super) const TOOL_CALLS_KEYS: CallKeys = CallKeys {
    name: "name",
    args: "arguments",
    uid: Some("uid"),
};

impl CallKeys {
    /// The keys as a reader is told them: `"tool", "args"`.
    pub(super) fn listed(self) -> String {
        let mut keys: Vec<String> = self.uid.iter().map(|uid| format!("\"{uid}\"")).collect();
        keys.push(format!("\"{}\"", self.name));
        keys.push(format!("\"{}\"", self.args));
        keys.join(", ")
    }
}
