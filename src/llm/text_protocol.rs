//! The text tool-call protocols, for models without (reliable) native tool calling: the
//! system-prompt text that teaches one, and the parser that reads an answer back into
//! validated calls, the final answer and every problem found, each worded for the model.
//! Pure functions: no I/O, nothing of loops or Neovim.
//!
//! - `xml` / `markdown`: `thinking`, `action` and `answer` sections, as tags or headers;
//!   calls in the action sections as JSON or YAML (`ToolFormat`).
//! - `tool_calls`: a `## Tool Calls` heading with one fenced JSON block per call.
//!
//! Broken JSON is not repaired: the model is told what is wrong instead (no well-kept
//! repair crate was worth its risk of guessing wrong).

mod calls;
mod commonmark;
mod instructions;
mod issue;
mod reasoning;
mod render;
mod sections;
mod syntax;
mod tags;
mod termination;
mod tool_calls;
mod typing;
mod validate;
mod yaml;

#[cfg(test)]
mod tests;

use serde_json::Value;

pub use issue::{FormatIssue, IssueKind};
pub use termination::JsonTermination;

use super::{ToolFormat, ToolProtocol, ToolSpec};

/// A text protocol and the format of its calls (the format matters to `xml` and `markdown`;
/// `tool_calls` is always JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextProtocol {
    protocol: ToolProtocol,
    format: ToolFormat,
}

impl TextProtocol {
    /// `None` for `ToolProtocol::Native`, which is not written in the text.
    pub fn new(protocol: ToolProtocol, format: ToolFormat) -> Option<TextProtocol> {
        protocol
            .is_text()
            .then_some(TextProtocol { protocol, format })
    }

    pub fn protocol(self) -> ToolProtocol {
        self.protocol
    }

    pub fn format(self) -> ToolFormat {
        match self.protocol {
            ToolProtocol::ToolCalls => ToolFormat::Json,
            _ => self.format,
        }
    }
}

/// One valid call read from an answer.
#[derive(Clone, Debug, PartialEq)]
pub struct TextCall {
    /// The model's uid (`tool_calls`), else made up; unique within the answer.
    pub id: String,
    pub name: String,
    pub input: Value,
}

/// What an answer says. Invalid calls are not in `calls`, only in `issues`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParsedAnswer {
    pub calls: Vec<TextCall>,
    /// The final answer (`xml`/`markdown`) or the commentary (`tool_calls`); never text that
    /// follows the last call.
    pub answer: Option<String>,
    pub issues: Vec<FormatIssue>,
}

/// The system-prompt text: how to answer, how a call is written, and each tool as
/// {"name", "description", "parameters"} with an example call (the tool's own example, else
/// the schema's first `examples` entry, else one made up from the schema).
pub fn instructions(p: &TextProtocol, tools: &[ToolSpec]) -> String {
    instructions::instructions(p.protocol, p.format(), tools)
}

/// How one call is written in this protocol, section or heading included.
pub fn render_call(p: &TextProtocol, name: &str, args: &Value) -> String {
    render::render(p.protocol, p.format(), name, args)
}

/// Reads an answer: the valid calls, the final answer text, and every problem.
pub fn parse(p: &TextProtocol, text: &str, tools: &[ToolSpec]) -> ParsedAnswer {
    match p.protocol {
        ToolProtocol::Xml => sections::parse_xml(text, p.format(), tools),
        ToolProtocol::Markdown => sections::parse_markdown(text, p.format(), tools),
        ToolProtocol::ToolCalls | ToolProtocol::Native => tool_calls::parse(text, tools),
    }
}

/// The message for a turn whose answer had problems: all of them, numbered, and how the
/// protocol wants calls and answers written.
pub fn feedback(p: &TextProtocol, issues: &[FormatIssue]) -> String {
    instructions::feedback(p.protocol, issues)
}
