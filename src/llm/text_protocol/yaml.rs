//! YAML read into untyped nodes that keep every scalar's text as written: whether `no`,
//! `1.10` or `007` is a string is decided later by the tool's schema, never by YAML 1.1
//! guessing.

use saphyr_parser::{Event, Parser, ScalarStyle};

use super::issue::{FormatIssue, IssueKind};

/// Deeper nesting than any tool's arguments need is refused rather than followed.
const MAX_DEPTH: usize = 64;

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Node {
    Scalar { text: String, style: ScalarStyle },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Node {
    /// A plain scalar YAML reads as null (`~`, `null`, nothing at all).
    pub(super) fn is_null(&self) -> bool {
        matches!(self, Node::Scalar { text, style: ScalarStyle::Plain }
            if matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL"))
    }

    /// A scalar's text; empty for a collection.
    pub(super) fn text(&self) -> &str {
        match self {
            Node::Scalar { text, .. } => text,
            _ => "",
        }
    }
}

enum Frame {
    Seq(Vec<Node>),
    Map {
        entries: Vec<(Node, Node)>,
        key: Option<Node>,
    },
}

/// The documents of `text` (usually one).
pub(super) fn documents(text: &str) -> Result<Vec<Node>, FormatIssue> {
    let mut documents = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    for event in Parser::new_from_str(text) {
        let (event, _) = event.map_err(|error| {
            let line = text
                .lines()
                .nth(error.marker().line().saturating_sub(1))
                .unwrap_or(text);
            FormatIssue::new(
                IssueKind::Syntax,
                format!(
                    "the calls are not valid YAML ({} at line {})",
                    error.info(),
                    error.marker().line()
                ),
                "write each call as `tool: NAME` and `args:` with the arguments indented under \
                 it; quote text that contains `: ` or ` #`, and write multi-line text as a block \
                 scalar (`|`)",
            )
            .quoting(line)
        })?;
        let node = match event {
            Event::Scalar(value, style, _, _) => Node::Scalar {
                text: value.into_owned(),
                style,
            },
            Event::SequenceStart(..) | Event::MappingStart(..) if stack.len() >= MAX_DEPTH => {
                return Err(FormatIssue::new(
                    IssueKind::Unsupported,
                    format!("the calls nest deeper than {MAX_DEPTH} levels"),
                    "write the arguments with less nesting",
                ));
            }
            Event::SequenceStart(..) => {
                stack.push(Frame::Seq(Vec::new()));
                continue;
            }
            Event::MappingStart(..) => {
                stack.push(Frame::Map {
                    entries: Vec::new(),
                    key: None,
                });
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(Frame::Seq(items)) => Node::Seq(items),
                Some(Frame::Map { entries, .. }) => Node::Map(entries),
                None => continue,
            },
            Event::Alias(_) => {
                // Following aliases can blow a small text up into a huge value.
                return Err(FormatIssue::new(
                    IssueKind::Unsupported,
                    "the calls use a YAML alias (`*name`)",
                    "write the value out in full instead of using anchors and aliases",
                ));
            }
            _ => continue,
        };
        match stack.last_mut() {
            None => documents.push(node),
            Some(Frame::Seq(items)) => items.push(node),
            Some(Frame::Map { entries, key }) => match key.take() {
                None => *key = Some(node),
                Some(key) => entries.push((key, node)),
            },
        }
    }
    Ok(documents)
}
