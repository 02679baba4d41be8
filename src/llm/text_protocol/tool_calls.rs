//! The `tool_calls` protocol: calls under a `## Tool Calls` heading, one fenced JSON block per
//! call (`{"uid", "name", "arguments"}`); every other text is commentary, the answer.

use std::ops::Range;

use super::calls::{self, RawCall};
use super::commonmark;
use super::issue::{FormatIssue, IssueKind};
use super::reasoning;
use super::syntax::{TOOL_CALLS_HEADING, TOOL_CALLS_KEYS};
use super::validate::validate;
use super::{ParsedAnswer, TextCall};
use crate::llm::{ToolFormat, ToolSpec};

pub(super) fn parse(text: &str, tools: &[ToolSpec]) -> ParsedAnswer {
    let (text, unclosed) = reasoning::strip(text);
    let mut issues: Vec<FormatIssue> = unclosed.into_iter().collect();
    let headings = commonmark::headings(&text);
    let call_sections: Vec<Range<usize>> = headings
        .iter()
        .enumerate()
        .filter(|(_, heading)| heading.text.trim().eq_ignore_ascii_case(TOOL_CALLS_HEADING))
        .map(|(index, heading)| {
            let end = headings[index + 1..]
                .iter()
                .find(|next| next.level <= heading.level)
                .map_or(text.len(), |next| next.range.start);
            heading.range.start..end
        })
        .collect();
    let fences = commonmark::fenced_blocks(&text);

    let mut raw_calls: Vec<RawCall> = Vec::new();
    let mut last_call_end = None;
    for section in &call_sections {
        let in_section: Vec<&commonmark::Fence> = fences
            .iter()
            .filter(|fence| section.contains(&fence.range.start))
            .collect();
        if in_section.is_empty() {
            issues.push(
                FormatIssue::new(
                    IssueKind::NoCallBlocks,
                    format!("the {TOOL_CALLS_HEADING} heading has no code block under it"),
                    "write each call in its own fenced ```json code block under the heading",
                )
                .quoting(&text[section.clone()]),
            );
        }
        for fence in in_section {
            last_call_end = Some(fence.range.end);
            if !fence.closed {
                issues.push(calls::unclosed_fence(&fence.content));
                continue;
            }
            if fence.content.trim().is_empty() {
                issues.push(FormatIssue::new(
                    IssueKind::EmptyCall,
                    "a code block under the Tool Calls heading is empty",
                    "write one call in each block, or leave the block out",
                ));
                continue;
            }
            raw_calls.extend(calls::decode(
                &fence.content,
                ToolFormat::Json,
                TOOL_CALLS_KEYS,
                &mut issues,
            ));
        }
    }

    // Commentary is all text outside the call sections, up to the last call: what follows it
    // is the model's guess at the results.
    let read_until = last_call_end.unwrap_or(text.len());
    let mut commentary = Vec::new();
    let mut cursor = 0;
    for section in call_sections.iter().chain([&(read_until..read_until)]) {
        let end = section.start.min(read_until);
        if cursor < end {
            commentary.push(text[cursor..end].trim());
        }
        cursor = cursor.max(section.end);
    }
    let answer = commentary
        .into_iter()
        .filter(|piece| !piece.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n");

    let calls = identified(raw_calls, tools, &mut issues);
    ParsedAnswer {
        calls,
        answer: (!answer.is_empty()).then_some(answer),
        issues,
    }
}

/// Valid calls with their uids; a call without one gets a made-up one no other call has.
fn identified(
    raw_calls: Vec<RawCall>,
    tools: &[ToolSpec],
    issues: &mut Vec<FormatIssue>,
) -> Vec<TextCall> {
    let given: Vec<String> = raw_calls
        .iter()
        .filter_map(|call| call.uid.clone())
        .collect();
    let mut used: Vec<String> = Vec::new();
    let mut made_up = 0;
    let mut calls = Vec::new();
    for raw in raw_calls {
        let uid = raw.uid.clone();
        let quote = raw.quote.clone();
        let Some((name, input)) = validate(raw, TOOL_CALLS_KEYS, tools, issues) else {
            continue;
        };
        let id = match uid {
            Some(uid) if used.contains(&uid) => {
                issues.push(
                    FormatIssue::new(
                        IssueKind::DuplicateUid,
                        format!("two calls have the uid \"{uid}\""),
                        "give every call its own uid",
                    )
                    .quoting(&quote),
                );
                continue;
            }
            Some(uid) => uid,
            None => loop {
                made_up += 1;
                let candidate = format!("call_{made_up}");
                if !given.contains(&candidate) && !used.contains(&candidate) {
                    break candidate;
                }
            },
        };
        used.push(id.clone());
        calls.push(TextCall { id, name, input });
    }
    calls
}
