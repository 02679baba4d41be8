//! Sections written as XML-style tags (`<action>...</action>`), read leniently: not XML, just
//! tags. Names are case-insensitive; a closing tag pairs with the nearest unused opening tag
//! of its name, so a literal `<answer>` mentioned in the reasoning stays content; a pair inside
//! another section is content of that section; tags inside fenced code blocks are content.

use std::collections::HashMap;
use std::ops::Range;

use regex::Regex;

use super::commonmark;
use super::syntax::{REASONING_WRAPPERS, Section};

/// One section found with both its tags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Tagged {
    /// The tag's name as written, lower-cased (`think`, `action`).
    pub(super) name: String,
    pub(super) section: Section,
    pub(super) open: Range<usize>,
    pub(super) content: Range<usize>,
    pub(super) close: Range<usize>,
}

/// An opening tag without its closing tag: everything after it is its content, cut off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Unclosed {
    pub(super) name: String,
    pub(super) section: Section,
    pub(super) open: Range<usize>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Scan {
    /// Where reading starts: after a closing reasoning tag whose opening tag came before the
    /// answer (templates that open `<think>` for the model), else 0.
    pub(super) start: usize,
    /// The top-level sections, in order.
    pub(super) sections: Vec<Tagged>,
    pub(super) unclosed: Option<Unclosed>,
}

struct Tag {
    name: String,
    closing: bool,
    range: Range<usize>,
}

/// The sections of `text` whose tag names are among `names` (lower case).
pub(super) fn scan(text: &str, names: &[&str]) -> Scan {
    let tags = find_tags(text, names);
    let (pairs, stray_closers, unpaired_openers) = pair(&tags);
    let start = stray_closers
        .iter()
        .map(|&i| &tags[i])
        .find(|tag| {
            REASONING_WRAPPERS.contains(&tag.name.as_str())
                && !pairs.iter().any(|&(o, c)| {
                    tags[o].range.start < tag.range.start && tag.range.end <= tags[c].range.start
                })
        })
        .map_or(0, |tag| tag.range.end);

    // Candidates in order of their opening tag; `None` marks an opening tag never closed.
    let mut candidates: Vec<(usize, Option<usize>)> = pairs
        .iter()
        .map(|&(open, close)| (open, Some(close)))
        .chain(unpaired_openers.iter().map(|&open| (open, None)))
        .filter(|&(open, _)| tags[open].range.start >= start)
        .collect();
    candidates.sort_by_key(|&(open, _)| tags[open].range.start);

    let mut scan = Scan {
        start,
        ..Scan::default()
    };
    let mut cursor = start;
    for (open, close) in candidates {
        let opening = &tags[open];
        if opening.range.start < cursor {
            continue;
        }
        let Some(section) = Section::from_name(&opening.name) else {
            continue;
        };
        match close {
            Some(close) => {
                let closing = &tags[close];
                scan.sections.push(Tagged {
                    name: opening.name.clone(),
                    section,
                    open: opening.range.clone(),
                    content: opening.range.end..closing.range.start,
                    close: closing.range.clone(),
                });
                cursor = closing.range.end;
            }
            None => {
                scan.unclosed = Some(Unclosed {
                    name: opening.name.clone(),
                    section,
                    open: opening.range.clone(),
                });
                break;
            }
        }
    }
    scan
}

/// Every tag of `names` outside fenced code blocks. Fences are found with the tags blanked
/// out, so that a tag line does not hide a fence from the Markdown reader (an HTML block
/// started by `<action>` would swallow a fence line that follows it).
fn find_tags(text: &str, names: &[&str]) -> Vec<Tag> {
    let alternatives: Vec<String> = names.iter().map(|name| regex::escape(name)).collect();
    let pattern = format!(r"(?i)<\s*(/?)\s*({})\s*>", alternatives.join("|"));
    let Ok(tag_pattern) = Regex::new(&pattern) else {
        return Vec::new();
    };
    let all: Vec<Tag> = tag_pattern
        .captures_iter(text)
        .filter_map(|captures| {
            let whole = captures.get(0)?;
            Some(Tag {
                name: captures.get(2)?.as_str().to_lowercase(),
                closing: !captures.get(1)?.as_str().is_empty(),
                range: whole.range(),
            })
        })
        .collect();
    let mut blanked = text.to_owned().into_bytes();
    for tag in &all {
        blanked[tag.range.clone()].fill(b' ');
    }
    // Only ASCII bytes of whole matches were replaced, so the text is still UTF-8.
    let blanked = String::from_utf8(blanked).unwrap_or_default();
    let fenced = commonmark::fenced_ranges(&blanked);
    all.into_iter()
        .filter(|tag| !fenced.iter().any(|fence| fence.contains(&tag.range.start)))
        .collect()
}

/// Pairs each closing tag with the nearest unused opening tag of its name before it.
/// Returns (pairs as (open, close) indices, stray closing tags, opening tags never closed).
fn pair(tags: &[Tag]) -> (Vec<(usize, usize)>, Vec<usize>, Vec<usize>) {
    let mut open_by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut pairs = Vec::new();
    let mut stray = Vec::new();
    for (index, tag) in tags.iter().enumerate() {
        let stack = open_by_name.entry(tag.name.as_str()).or_default();
        if !tag.closing {
            stack.push(index);
        } else if let Some(open) = stack.pop() {
            pairs.push((open, index));
        } else {
            stray.push(index);
        }
    }
    let mut unpaired: Vec<usize> = open_by_name.into_values().flatten().collect();
    unpaired.sort_unstable();
    (pairs, stray, unpaired)
}
