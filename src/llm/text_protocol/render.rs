//! How one call is written in each protocol and format: the examples the instructions show,
//! and what the parser reads back unchanged.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::syntax::{
    REASONING_WRAPPERS, SECTION_CALL_KEYS, Section, TOOL_CALLS_HEADING, TOOL_CALLS_KEYS,
};
use super::typing;
use crate::llm::{ToolFormat, ToolProtocol};

/// A section tag of the `xml` protocol; inside a call's text it would end or open a section,
/// so its `<` is written escaped there.
static SECTION_TAG: LazyLock<Option<Regex>> = LazyLock::new(|| {
    let mut names: Vec<&str> = Section::ALL.iter().map(|s| s.name()).collect();
    names.extend(REASONING_WRAPPERS);
    Regex::new(&format!(r"(?i)<(\s*/?\s*(?:{})\s*>)", names.join("|"))).ok()
});

pub(super) fn render(
    protocol: ToolProtocol,
    format: ToolFormat,
    name: &str,
    args: &Value,
) -> String {
    match protocol {
        ToolProtocol::Xml => format!(
            "{}\n{}\n{}",
            Section::Action.open_tag(),
            section_call(format, name, args, true),
            Section::Action.close_tag()
        ),
        ToolProtocol::Markdown => format!(
            "{}\n\n{}",
            Section::Action.header(),
            fenced(&section_call(format, name, args, false), format.as_str())
        ),
        ToolProtocol::ToolCalls | ToolProtocol::Native => {
            let body = format!(
                "{{\"{}\": \"call_1\", \"{}\": {}, \"{}\": {}}}",
                TOOL_CALLS_KEYS.uid.unwrap_or("uid"),
                TOOL_CALLS_KEYS.name,
                Value::String(name.to_owned()),
                TOOL_CALLS_KEYS.args,
                args
            );
            format!("## {TOOL_CALLS_HEADING}\n\n{}", fenced(&body, "json"))
        }
    }
}

fn section_call(format: ToolFormat, name: &str, args: &Value, in_xml: bool) -> String {
    let keys = SECTION_CALL_KEYS;
    match format {
        ToolFormat::Json => {
            let json = format!(
                "{{\"{}\": {}, \"{}\": {}}}",
                keys.name,
                Value::String(name.to_owned()),
                keys.args,
                args
            );
            match (in_xml, SECTION_TAG.as_ref()) {
                // In JSON a tag can only be inside a string, where `\u003c` means `<`.
                (true, Some(tag)) => tag.replace_all(&json, r"\u003c$1").into_owned(),
                _ => json,
            }
        }
        ToolFormat::Yaml => {
            let mut out = String::new();
            out.push_str(keys.name);
            out.push(':');
            yaml_after_key(&Value::String(name.to_owned()), 0, in_xml, &mut out);
            out.push_str(keys.args);
            out.push(':');
            yaml_after_key(args, 0, in_xml, &mut out);
            out.trim_end_matches('\n').to_owned()
        }
    }
}

/// `body` in a backtick fence longer than any backtick run inside it.
fn fenced(body: &str, info: &str) -> String {
    let fence = crate::markdown::fence_for(body);
    format!("{fence}{info}\n{body}\n{fence}")
}

/// The value of a `key:` already written at `indent`, with its line end.
fn yaml_after_key(value: &Value, indent: usize, in_xml: bool, out: &mut String) {
    let pad = |out: &mut String, width: usize| out.extend(std::iter::repeat_n(' ', width));
    match value {
        Value::Object(fields) if !fields.is_empty() => {
            out.push('\n');
            for (key, field) in fields {
                pad(out, indent + 2);
                out.push_str(&yaml_inline_string(key, in_xml));
                out.push(':');
                yaml_after_key(field, indent + 2, in_xml, out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            for item in items {
                pad(out, indent + 2);
                out.push('-');
                yaml_after_key(item, indent + 2, in_xml, out);
            }
        }
        Value::String(text) if literal_block_fits(text, in_xml) => {
            let body = text.strip_suffix('\n').unwrap_or(text);
            out.push_str(if body.len() < text.len() {
                " |\n"
            } else {
                " |-\n"
            });
            for line in body.split('\n') {
                if !line.is_empty() {
                    pad(out, indent + 2);
                    out.push_str(line);
                }
                out.push('\n');
            }
        }
        Value::String(text) => {
            out.push(' ');
            out.push_str(&yaml_inline_string(text, in_xml));
            out.push('\n');
        }
        Value::Object(_) => out.push_str(" {}\n"),
        Value::Array(_) => out.push_str(" []\n"),
        scalar => {
            out.push(' ');
            out.push_str(&scalar.to_string());
            out.push('\n');
        }
    }
}

/// Multi-line text reads best as a literal block (`|`), which holds it as written; text a
/// block cannot hold exactly goes in double quotes. Trailing blank lines (`|+`) are such text:
/// where the block ends its section, the section's end takes them.
fn literal_block_fits(text: &str, in_xml: bool) -> bool {
    let first_line = text.split('\n').find(|line| !line.is_empty());
    text.contains('\n')
        && !text.ends_with("\n\n")
        && first_line.is_some_and(|line| !line.starts_with([' ', '\t']))
        && text
            .chars()
            .all(|c| c == '\n' || c == '\t' || yaml_printable(c))
        && !(in_xml && (has_section_tag(text) || text.contains("```") || text.contains("~~~")))
}

/// A string on one line: plain where YAML reads it back as the same string whatever the
/// schema says, else double-quoted.
fn yaml_inline_string(text: &str, in_xml: bool) -> String {
    let plain = text.chars().next().is_some_and(char::is_alphanumeric)
        && text
            .chars()
            .all(|c| c.is_alphanumeric() || " _./-+()=,".contains(c))
        && !text.ends_with(' ')
        && typing::reads_as_string(text);
    if plain {
        return text.to_owned();
    }
    let escape_lt = in_xml && has_section_tag(text);
    let mut quoted = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\n' => quoted.push_str("\\n"),
            '\t' => quoted.push_str("\\t"),
            '\r' => quoted.push_str("\\r"),
            '<' if escape_lt => quoted.push_str("\\u003C"),
            c if !yaml_printable(c) && (c as u32) <= 0xFFFF => {
                quoted.push_str(&format!("\\u{:04X}", c as u32));
            }
            c if !yaml_printable(c) => quoted.push_str(&format!("\\U{:08X}", c as u32)),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

fn has_section_tag(text: &str) -> bool {
    SECTION_TAG.as_ref().is_some_and(|tag| tag.is_match(text))
}

/// YAML 1.2's printable characters, less the ones YAML 1.1 readers take as line breaks
/// (U+0085, U+2028, U+2029) and the byte order mark.
fn yaml_printable(c: char) -> bool {
    matches!(c as u32, 0x20..=0x7E | 0xA0..=0x2027 | 0x202A..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
        && c != '\u{FEFF}'
}
