//! The options section of `doc/loopr.txt`: each option's tag, name, type and default come
//! from the settings' definitions; the words under them are the help's own, kept as written
//! (they name commands and other help tags, which the core may not). An option the help does
//! not describe yet gets its description from the definition.

use super::lua_literal::{Quote, inline, lua};
use super::options::{SetupOption, setup_options, setup_schema};
use super::shape::{Shape, number, quoted};
use anyhow::Context;

/// The column help tags end at, as the rest of the file has them.
const TAG_END: usize = 77;
/// How far code blocks are indented.
const CODE_INDENT: &str = "        ";
/// The widest line of text.
const TEXT_WIDTH: usize = 78;
const TAG_PREFIX: &str = "*loopr-option-";
/// Longest default shown on the line of the type; a longer one is a code block.
const INLINE_DEFAULT: usize = 50;

/// `doc/loopr.txt` with its options section generated: from the first option's tag to the
/// next tag that is not an option's.
pub fn help(current: Option<&str>) -> anyhow::Result<String> {
    let current = current.context("doc/loopr.txt is missing")?;
    let lines: Vec<&str> = current.lines().collect();
    let is_option_tag = |line: &str| line.trim_start().starts_with(TAG_PREFIX);
    let start = lines
        .iter()
        .position(|line| is_option_tag(line))
        .context("doc/loopr.txt has no *loopr-option-…* tag")?;
    let end = lines[start..]
        .iter()
        .position(|line| {
            let trimmed = line.trim();
            !is_option_tag(line) && trimmed.ends_with('*') && trimmed.contains("*loopr-")
        })
        .map_or(lines.len(), |offset| start + offset);
    let bodies = bodies(&lines[start..end]);
    let schema = setup_schema()?;
    let mut section = Vec::new();
    for option in setup_options(&schema)? {
        section.extend(head(&option));
        match bodies.iter().find(|(name, _)| *name == option.field.name) {
            Some((_, body)) => section.extend(body.iter().cloned()),
            None => {
                section.extend(wrap(option.field.description.as_deref().unwrap_or("")));
                section.push(String::new());
            }
        }
    }
    let mut text: Vec<String> = lines[..start].iter().map(|l| (*l).to_owned()).collect();
    text.extend(section);
    text.extend(lines[end..].iter().map(|l| (*l).to_owned()));
    Ok(text.join("\n") + "\n")
}

/// The generated lines of an option: its tag, its name, its type and default.
fn head(option: &SetupOption) -> Vec<String> {
    let name = &option.field.name;
    let tag = format!("{TAG_PREFIX}{name}*");
    let mut lines = vec![format!("{tag:>TAG_END$}"), format!("{name} ~")];
    let mut kind = doc_type(&option.field.shape);
    if option.default.is_none() && option.stdpath.is_none() {
        kind.push_str(" or nil");
    }
    match (&option.stdpath, &option.default) {
        (Some((what, file)), _) => {
            lines.push(format!(
                "    {kind}, default: `stdpath(\"{what}\") .. \"/{file}\"`"
            ));
        }
        (None, None) => lines.push(format!("    {kind}, default: nil")),
        (None, Some(default)) if inline(default, Quote::Double).len() <= INLINE_DEFAULT => {
            let default = inline(default, Quote::Double);
            lines.push(format!("    {kind}, default: `{default}`"));
        }
        (None, Some(default)) => {
            lines.push(format!("    {kind}, default: >lua"));
            let code = lua(default, 0, TEXT_WIDTH - CODE_INDENT.len(), Quote::Double);
            lines.extend(code.lines().map(|line| format!("{CODE_INDENT}{line}")));
            lines.push("<".to_owned());
        }
    }
    lines
}

/// How the help writes a type.
fn doc_type(shape: &Shape) -> String {
    match shape {
        Shape::Boolean => "`boolean`".to_owned(),
        Shape::Integer {
            min: Some(min),
            max: Some(max),
        } => format!("`integer` from {} to {}", number(min), number(max)),
        Shape::Integer { min: Some(min), .. } => format!("`integer >= {}`", number(min)),
        Shape::Integer { .. } => "`integer`".to_owned(),
        Shape::Number { .. } => "`number`".to_owned(),
        Shape::Text { .. } => "`string`".to_owned(),
        Shape::OneOf(values) => one_of(values),
        Shape::List(item) => match item.as_ref() {
            Shape::OneOf(values) => format!("list of {}", one_of(values)),
            Shape::Text { .. } => "`string[]`".to_owned(),
            _ => "list".to_owned(),
        },
        Shape::Record(record) if record.switch.is_some() => "`table` or `boolean`".to_owned(),
        Shape::Record(_) | Shape::Map { .. } => "`table`".to_owned(),
        Shape::Any => "any".to_owned(),
    }
}

fn one_of(values: &[String]) -> String {
    quoted(values, ", ")
        .split(", ")
        .map(|value| format!("`{value}`"))
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The hand-written words under each option's head in `region`, by option name.
fn bodies(region: &[&str]) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    let mut index = 0;
    while index < region.len() {
        let Some(name) = option_name(region[index]) else {
            index += 1;
            continue;
        };
        // The tag, the name, then the type and default (a code block where long).
        let mut at = index + 2;
        let mut body = Vec::new();
        if let Some(line) = region.get(at) {
            at += 1;
            if line.trim_end().ends_with('>') || line.trim_end().ends_with(">lua") {
                while let Some(code) = region.get(at) {
                    at += 1;
                    if let Some(rest) = code.trim_start().strip_prefix('<') {
                        if !rest.trim().is_empty() {
                            body.push(format!("    {}", rest.trim_start()));
                        }
                        break;
                    }
                }
            } else if line.trim_end().ends_with("default:") {
                at += 1;
            }
        }
        while let Some(line) = region.get(at).filter(|line| option_name(line).is_none()) {
            body.push((*line).to_owned());
            at += 1;
        }
        found.push((name, body));
        index = at;
    }
    found
}

fn option_name(line: &str) -> Option<String> {
    let rest = line.trim().strip_prefix(TAG_PREFIX)?;
    Some(rest.strip_suffix('*')?.to_owned())
}

/// A description as help text: indented by four, lines of at most 78 columns.
fn wrap(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::from("   ");
    for word in text.split_whitespace() {
        if line.len() + 1 + word.len() > TEXT_WIDTH {
            lines.push(line);
            line = String::from("   ");
        }
        line.push(' ');
        line.push_str(word);
    }
    lines.push(line);
    lines
}
