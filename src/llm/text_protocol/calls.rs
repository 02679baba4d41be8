//! Call objects as written, in JSON or YAML, before they are checked against the tools.

use serde_json::{Map, Value};

use super::commonmark;
use super::issue::{FormatIssue, IssueKind};
use super::syntax::CallKeys;
use super::yaml::{self, Node};
use crate::llm::ToolFormat;

/// A call's arguments as written: JSON is typed already, YAML is typed by the tool's schema
/// once the tool is known.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum RawArgs {
    Json(Value),
    Yaml(Node),
}

#[derive(Clone, Debug, PartialEq)]
pub(super) struct RawCall {
    /// Empty when the call names no tool.
    pub(super) name: String,
    pub(super) uid: Option<String>,
    pub(super) args: RawArgs,
    /// The call as written, for messages.
    pub(super) quote: String,
}

/// The calls in the body of an action section: the body itself, or the fenced code blocks in
/// it (a ```` ```json ```` fence around the calls is fine; prose beside the fences is ignored).
pub(super) fn section_calls(
    body: &str,
    format: ToolFormat,
    keys: CallKeys,
    section_name: &str,
    issues: &mut Vec<FormatIssue>,
) -> Vec<RawCall> {
    if body.trim().is_empty() {
        issues.push(FormatIssue::new(
            IssueKind::EmptyCall,
            format!("the {section_name} section is empty"),
            "write the calls in it, or leave it out and give your answer",
        ));
        return Vec::new();
    }
    let fences = commonmark::fenced_blocks(body);
    if fences.is_empty() {
        return decode(body, format, keys, issues);
    }
    let mut calls = Vec::new();
    for fence in fences {
        if !fence.closed {
            issues.push(unclosed_fence(&fence.content));
            continue;
        }
        calls.extend(decode(&fence.content, format, keys, issues));
    }
    calls
}

pub(super) fn unclosed_fence(content: &str) -> FormatIssue {
    FormatIssue::new(
        IssueKind::UnclosedFence,
        "a code block is never closed, so the call in it may be cut off and was not run",
        "close every code block with the fence it opened with (```)",
    )
    .quoting(content)
}

/// Calls written in `format`: one call object, a list of them, or several one after another.
pub(super) fn decode(
    text: &str,
    format: ToolFormat,
    keys: CallKeys,
    issues: &mut Vec<FormatIssue>,
) -> Vec<RawCall> {
    match format {
        ToolFormat::Json => json_calls(text, keys, issues),
        ToolFormat::Yaml => yaml_calls(text, keys, issues),
    }
}

fn json_calls(text: &str, keys: CallKeys, issues: &mut Vec<FormatIssue>) -> Vec<RawCall> {
    let mut calls = Vec::new();
    for value in serde_json::Deserializer::from_str(text).into_iter::<Value>() {
        match value {
            Ok(Value::Array(items)) => {
                for item in items {
                    calls.extend(json_call(item, keys, issues));
                }
            }
            Ok(value) => calls.extend(json_call(value, keys, issues)),
            Err(error) => {
                let line = text
                    .lines()
                    .nth(error.line().saturating_sub(1))
                    .unwrap_or(text);
                issues.push(
                    FormatIssue::new(
                        IssueKind::Syntax,
                        format!("the calls are not valid JSON ({error})"),
                        format!(
                            "write each call as one JSON object with the keys {}, or several in \
                             a JSON array; strings in double quotes, no trailing commas, no comments",
                            keys.listed()
                        ),
                    )
                    .quoting(line),
                );
                break;
            }
        }
    }
    calls
}

fn json_call(value: Value, keys: CallKeys, issues: &mut Vec<FormatIssue>) -> Option<RawCall> {
    // Quoted with its keys sorted, as the model's words are shown whatever order serde_json
    // keeps keys in.
    let quote = crate::schema::keys_sorted(value.clone()).to_string();
    let Value::Object(mut object) = value else {
        issues.push(not_a_call(&quote, keys));
        return None;
    };
    if let Some(issue) = unexpected_key(object.keys().map(String::as_str), keys, &quote) {
        issues.push(issue);
        return None;
    }
    let name = match object.remove(keys.name) {
        Some(Value::String(name)) => name,
        _ => String::new(),
    };
    let uid = keys.uid.and_then(|key| match object.remove(key) {
        Some(Value::String(uid)) if !uid.trim().is_empty() => Some(uid),
        Some(Value::Number(uid)) => Some(uid.to_string()),
        _ => None,
    });
    let args = match object.remove(keys.args) {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::Object(args)) => Value::Object(args),
        Some(other) => {
            issues.push(args_not_an_object(
                &name,
                &crate::schema::keys_sorted(other).to_string(),
                keys,
            ));
            return None;
        }
    };
    Some(RawCall {
        name,
        uid,
        args: RawArgs::Json(args),
        quote,
    })
}

fn yaml_calls(text: &str, keys: CallKeys, issues: &mut Vec<FormatIssue>) -> Vec<RawCall> {
    let documents = match yaml::documents(text) {
        Ok(documents) => documents,
        Err(issue) => {
            issues.push(issue);
            return Vec::new();
        }
    };
    let mut calls = Vec::new();
    for document in documents {
        match document {
            Node::Seq(items) => {
                for item in items {
                    calls.extend(yaml_call(item, text, keys, issues));
                }
            }
            node if node.is_null() => {}
            node => calls.extend(yaml_call(node, text, keys, issues)),
        }
    }
    calls
}

fn yaml_call(
    node: Node,
    text: &str,
    keys: CallKeys,
    issues: &mut Vec<FormatIssue>,
) -> Option<RawCall> {
    let Node::Map(entries) = node else {
        issues.push(not_a_call(text, keys));
        return None;
    };
    let key_texts: Vec<String> = entries
        .iter()
        .map(|(key, _)| key.text().to_owned())
        .collect();
    if let Some(issue) = unexpected_key(key_texts.iter().map(String::as_str), keys, text) {
        issues.push(issue);
        return None;
    }
    let mut name = String::new();
    let mut uid = None;
    let mut args = RawArgs::Json(Value::Object(Map::new()));
    for (key, value) in entries {
        let key = key.text();
        if key == keys.name {
            name = value.text().to_owned();
        } else if Some(key) == keys.uid {
            uid = Some(value.text().to_owned()).filter(|uid| !uid.trim().is_empty());
        } else if key == keys.args {
            match value {
                Node::Map(_) => args = RawArgs::Yaml(value),
                node if node.is_null() => {}
                other => {
                    issues.push(args_not_an_object(&name, other.text(), keys));
                    return None;
                }
            }
        }
    }
    Some(RawCall {
        name,
        uid,
        args,
        quote: text.to_owned(),
    })
}

fn unexpected_key<'a>(
    mut present: impl Iterator<Item = &'a str>,
    keys: CallKeys,
    quote: &str,
) -> Option<FormatIssue> {
    let unexpected =
        present.find(|key| *key != keys.name && *key != keys.args && Some(*key) != keys.uid)?;
    Some(
        FormatIssue::new(
            IssueKind::UnexpectedKey,
            format!("a call has the key \"{unexpected}\", which calls do not have"),
            format!(
                "write each call with only the keys {}; the arguments go inside \"{}\"",
                keys.listed(),
                keys.args
            ),
        )
        .quoting(quote),
    )
}

fn not_a_call(quote: &str, keys: CallKeys) -> FormatIssue {
    FormatIssue::new(
        IssueKind::NotACall,
        "this is not a call",
        format!(
            "write each call as an object with the keys {}",
            keys.listed()
        ),
    )
    .quoting(quote)
}

fn args_not_an_object(name: &str, quote: &str, keys: CallKeys) -> FormatIssue {
    FormatIssue::new(
        IssueKind::InvalidArguments,
        format!(
            "the \"{}\" of the call of \"{name}\" are not an object",
            keys.args
        ),
        format!(
            "write \"{}\" as an object of named arguments (not as a string holding JSON)",
            keys.args
        ),
    )
    .quoting(quote)
}
