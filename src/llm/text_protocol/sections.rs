//! The `xml` and `markdown` protocols: an answer cut into thinking, action and answer
//! sections, the calls read from the action sections, the final text from the answer ones.

use super::calls::{self, RawCall};
use super::commonmark;
use super::issue::{FormatIssue, IssueKind};
use super::reasoning;
use super::syntax::{SECTION_CALL_KEYS, Section};
use super::tags;
use super::validate::validate;
use super::{ParsedAnswer, TextCall};
use crate::llm::{ToolFormat, ToolProtocol, ToolSpec};

/// One section's content, and how the section is spelled for messages.
struct Found<'a> {
    section: Section,
    spelled: String,
    content: &'a str,
}

pub(super) fn parse_xml(text: &str, format: ToolFormat, tools: &[ToolSpec]) -> ParsedAnswer {
    let mut names: Vec<&str> = Section::ALL.iter().map(|s| s.name()).collect();
    names.extend(super::syntax::REASONING_WRAPPERS);
    names.dedup();
    let scan = tags::scan(text, &names);
    let mut issues = Vec::new();
    if let Some(unclosed) = &scan.unclosed {
        issues.push(reasoning::unclosed_section(
            &format!("<{}>", unclosed.name),
            &format!("</{}>", unclosed.name),
            &text[unclosed.open.start..],
        ));
    }
    let found = scan
        .sections
        .iter()
        .map(|tagged| Found {
            section: tagged.section,
            spelled: format!("<{}>", tagged.name),
            content: &text[tagged.content.clone()],
        })
        .collect();
    assemble(ToolProtocol::Xml, found, format, tools, issues)
}

pub(super) fn parse_markdown(text: &str, format: ToolFormat, tools: &[ToolSpec]) -> ParsedAnswer {
    let (text, unclosed) = reasoning::strip(text);
    let issues: Vec<FormatIssue> = unclosed.into_iter().collect();
    let headers: Vec<(Section, commonmark::Heading)> = commonmark::headings(&text)
        .into_iter()
        .filter_map(|heading| {
            let section = Section::ALL
                .into_iter()
                .find(|s| heading.text.trim().eq_ignore_ascii_case(s.name()))?;
            Some((section, heading))
        })
        .collect();
    let found = headers
        .iter()
        .enumerate()
        .map(|(index, (section, heading))| {
            let end = headers
                .get(index + 1)
                .map_or(text.len(), |(_, next)| next.range.start);
            Found {
                section: *section,
                spelled: section.header(),
                content: &text[heading.range.end..end],
            }
        })
        .collect();
    assemble(ToolProtocol::Markdown, found, format, tools, issues)
}

fn assemble(
    protocol: ToolProtocol,
    found: Vec<Found<'_>>,
    format: ToolFormat,
    tools: &[ToolSpec],
    mut issues: Vec<FormatIssue>,
) -> ParsedAnswer {
    // What follows the last call is the model's guess at the results (a made-up observation
    // or answer): never read.
    let last_action = found.iter().rposition(|f| f.section == Section::Action);
    let kept = match last_action {
        Some(index) => &found[..=index],
        None => &found[..],
    };
    let mut raw_calls: Vec<RawCall> = Vec::new();
    let mut answers: Vec<&str> = Vec::new();
    for section in kept {
        match section.section {
            Section::Thinking => {}
            Section::Action => raw_calls.extend(calls::section_calls(
                section.content,
                format,
                SECTION_CALL_KEYS,
                &section.spelled,
                &mut issues,
            )),
            Section::Answer => {
                if let Some(fence) = commonmark::fenced_blocks(section.content)
                    .into_iter()
                    .find(|fence| !fence.closed)
                {
                    issues.push(calls::unclosed_fence(&fence.content));
                }
                answers.push(section.content.trim());
            }
        }
    }
    if issues.is_empty() && !kept.iter().any(|f| f.section != Section::Thinking) {
        issues.push(nothing_to_do(protocol, kept.is_empty()));
    }
    let calls = raw_calls
        .into_iter()
        .enumerate()
        .filter_map(|(index, raw)| {
            let (name, input) = validate(raw, SECTION_CALL_KEYS, tools, &mut issues)?;
            Some(TextCall {
                id: format!("call_{}", index + 1),
                name,
                input,
            })
        })
        .collect();
    let answer = answers
        .into_iter()
        .filter(|text| !text.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n");
    ParsedAnswer {
        calls,
        answer: (!answer.is_empty()).then_some(answer),
        issues,
    }
}

fn nothing_to_do(protocol: ToolProtocol, no_sections: bool) -> FormatIssue {
    let (action, answer) = match protocol {
        ToolProtocol::Markdown => (Section::Action.header(), Section::Answer.header()),
        _ => (
            format!(
                "{}...{}",
                Section::Action.open_tag(),
                Section::Action.close_tag()
            ),
            format!(
                "{}...{}",
                Section::Answer.open_tag(),
                Section::Answer.close_tag()
            ),
        ),
    };
    let (kind, problem) = if no_sections {
        (IssueKind::NoSections, "your reply has no sections")
    } else {
        (
            IssueKind::NothingToDo,
            "your reply has neither tool calls nor an answer",
        )
    };
    FormatIssue::new(
        kind,
        problem,
        format!("call tools in {action}, or give your final answer in {answer}"),
    )
}
