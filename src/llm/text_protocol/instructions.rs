//! The system-prompt text of a protocol: how to answer, how a call is written, and the tools
//! with one example call each; and the feedback for an answer that had problems.

use serde_json::{Map, Value, json};

use super::issue::FormatIssue;
use super::render::render;
use super::syntax::{SECTION_CALL_KEYS, Section, TOOL_CALLS_HEADING, TOOL_CALLS_KEYS};
use crate::llm::{ToolFormat, ToolProtocol, ToolSpec};
use crate::schema::schema_issues;

pub(super) fn instructions(
    protocol: ToolProtocol,
    format: ToolFormat,
    tools: &[ToolSpec],
) -> String {
    let mut text = match protocol {
        ToolProtocol::Xml => sections_text(
            "Write every reply in sections, each between an opening and a closing tag:",
            |section| format!("{}...{}", section.open_tag(), section.close_tag()),
            format,
        ),
        ToolProtocol::Markdown => sections_text(
            "Write every reply in sections, each under a header on its own line:",
            |section| format!("`{}`", section.header()),
            format,
        ),
        ToolProtocol::ToolCalls | ToolProtocol::Native => tool_calls_text(),
    };
    text.push_str("\n\n");
    if tools.is_empty() {
        text.push_str("There are no tools: give your answer.\n");
        return text;
    }
    text.push_str("The tools (parameters as JSON Schema):\n");
    for tool in tools {
        let listed = json!({
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.input_schema,
        });
        text.push_str(&format!("\n{listed}\n"));
        let example = tool
            .example
            .clone()
            .or_else(|| example_arguments(&tool.input_schema));
        if let Some(args) = example {
            text.push_str(&format!(
                "Example:\n{}\n",
                render(protocol, format, &tool.name, &args)
            ));
        }
    }
    text
}

fn sections_text(intro: &str, spell: impl Fn(Section) -> String, format: ToolFormat) -> String {
    let call = match format {
        ToolFormat::Json => format!(
            "A call is one JSON object {{\"{}\": NAME, \"{}\": {{...}}}}; several calls are a \
             JSON array of them, run in order. A ```json fence around them is fine.",
            SECTION_CALL_KEYS.name, SECTION_CALL_KEYS.args
        ),
        ToolFormat::Yaml => format!(
            "A call is YAML: `{}: NAME` and `{}:` with the arguments indented under it; \
             several calls are a YAML list of them, run in order. Write multi-line text as a \
             literal block (`|`). A ```yaml fence around them is fine.",
            SECTION_CALL_KEYS.name, SECTION_CALL_KEYS.args
        ),
    };
    format!(
        "{intro}\n\
         - {} (optional): your reasoning. Nothing in it is run.\n\
         - {}: tool calls. End your reply after it: the results come in the next message.\n\
         - {}: your final answer, once you need no more tools.\n\
         Section names are case-insensitive; text outside sections is ignored, and so are \
         tags or headers inside code fences.\n{call}",
        spell(Section::Thinking),
        spell(Section::Action),
        spell(Section::Answer),
    )
}

fn tool_calls_text() -> String {
    let keys = TOOL_CALLS_KEYS;
    format!(
        "To call tools, end your reply with a `## {TOOL_CALLS_HEADING}` heading and one fenced \
         ```json code block per call under it, each one JSON object {{\"{}\": ID, \"{}\": NAME, \
         \"{}\": {{...}}}}; the ID is yours to choose, different for each call. Calls run in \
         order. End your reply after the last call: the results come in the next message. \
         Everything outside the {TOOL_CALLS_HEADING} section is commentary; when you need no \
         tool, just answer, without the heading. Nothing inside <think> or <thinking> is run.",
        keys.uid.unwrap_or("uid"),
        keys.name,
        keys.args
    )
}

/// One call's arguments for a tool that offers no example: the schema's own first
/// `examples` entry, else values made up from the schema (a string is `"example NAME"`,
/// never a `<NAME>` placeholder, which a model copies and the xml protocol reads as a tag);
/// `None` when what can be made up is not valid under it.
pub(super) fn example_arguments(schema: &Value) -> Option<Value> {
    let example = schema
        .get("examples")
        .and_then(|examples| examples.get(0))
        .cloned()
        .unwrap_or_else(|| example_value(schema, "value", 0));
    schema_issues(schema, &example)
        .is_empty()
        .then_some(example)
}

fn example_value(schema: &Value, name: &str, depth: usize) -> Value {
    const MAX_DEPTH: usize = 8;
    if let Some(value) = schema
        .get("examples")
        .and_then(|examples| examples.get(0))
        .or_else(|| schema.get("const"))
        .or_else(|| schema.get("default"))
        .or_else(|| schema.get("enum").and_then(|values| values.get(0)))
    {
        return value.clone();
    }
    if depth > MAX_DEPTH {
        return Value::Null;
    }
    if let Some(first) = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))
        .and_then(Value::as_array)
        .and_then(|alternatives| {
            alternatives
                .iter()
                .find(|alternative| alternative.get("type") != Some(&json!("null")))
        })
    {
        return example_value(first, name, depth + 1);
    }
    let kind = match schema.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|kind| *kind != "null")
            .unwrap_or("null"),
        _ if schema.get("properties").is_some() => "object",
        _ => "string",
    };
    match kind {
        "object" => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|names| names.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut object = Map::new();
            for (key, property) in properties.into_iter().flatten() {
                if required.is_empty() || required.contains(&key.as_str()) {
                    object.insert(key.clone(), example_value(property, key, depth + 1));
                }
            }
            Value::Object(object)
        }
        "array" => {
            let items = schema.get("items").cloned().unwrap_or(json!({}));
            let count = schema
                .get("minItems")
                .and_then(Value::as_u64)
                .unwrap_or(1)
                .max(1);
            let item = example_value(&items, name, depth + 1);
            Value::Array((0..count.min(3)).map(|_| item.clone()).collect())
        }
        "integer" => schema.get("minimum").cloned().unwrap_or(json!(1)),
        "number" => schema.get("minimum").cloned().unwrap_or(json!(1.5)),
        "boolean" => json!(true),
        "null" => Value::Null,
        _ => Value::String(format!("example {name}")),
    }
}

pub(super) fn feedback(protocol: ToolProtocol, issues: &[FormatIssue]) -> String {
    let count = issues.len();
    let mut text = format!(
        "Your last reply could not be used as written ({count} problem{}):\n",
        if count == 1 { "" } else { "s" }
    );
    for (index, issue) in issues.iter().enumerate() {
        text.push_str(&format!("{}. {issue}\n", index + 1));
    }
    let reminder = match protocol {
        ToolProtocol::Xml => format!(
            "tool calls go in {}...{}, your final answer in {}...{}",
            Section::Action.open_tag(),
            Section::Action.close_tag(),
            Section::Answer.open_tag(),
            Section::Answer.close_tag()
        ),
        ToolProtocol::Markdown => format!(
            "tool calls go under `{}`, your final answer under `{}`",
            Section::Action.header(),
            Section::Answer.header()
        ),
        ToolProtocol::ToolCalls | ToolProtocol::Native => {
            format!("tool calls go under `## {TOOL_CALLS_HEADING}`, one fenced JSON block each")
        }
    };
    text.push_str(&format!(
        "Write the whole reply again with these fixed ({reminder})."
    ));
    text
}
