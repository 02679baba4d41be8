//! What CommonMark makes of an answer: its fenced code blocks and its headings, with their
//! byte ranges, so that a header or tag inside a fence is content exactly as a Markdown
//! reader would see it.

use std::ops::Range;

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};

/// One fenced code block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Fence {
    /// From the opening fence to the end of the closing one.
    pub(super) range: Range<usize>,
    /// The info string (`json` in ```` ```json ````).
    pub(super) info: String,
    /// The text between the fences, with the fence's indentation removed.
    pub(super) content: String,
    /// Whether a closing fence ends it; an unclosed fence runs to the end of the text,
    /// which in an answer means it was cut off.
    pub(super) closed: bool,
}

/// One ATX or setext heading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Heading {
    pub(super) range: Range<usize>,
    pub(super) level: usize,
    pub(super) text: String,
}

pub(super) fn fenced_blocks(text: &str) -> Vec<Fence> {
    let mut fences = Vec::new();
    let mut open: Option<Fence> = None;
    for (event, range) in Parser::new_ext(text, Options::empty()).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                open = Some(Fence {
                    closed: fence_is_closed(&text[range.clone()]),
                    range,
                    info: info.trim().to_owned(),
                    content: String::new(),
                });
            }
            Event::Text(content) => {
                if let Some(fence) = open.as_mut() {
                    fence.content.push_str(&content);
                }
            }
            Event::End(TagEnd::CodeBlock) => fences.extend(open.take()),
            _ => {}
        }
    }
    fences
}

/// Whether the block's last line is a closing fence: the opening fence's character, at least
/// as many of it, nothing else.
fn fence_is_closed(block: &str) -> bool {
    let mut lines = block.trim_end_matches(['\n', '\r']).lines();
    let Some(opening) = lines.next() else {
        return false;
    };
    let opening = opening.trim_start();
    let Some(fence_char) = opening.chars().next() else {
        return false;
    };
    let length = opening.chars().take_while(|&c| c == fence_char).count();
    let Some(last) = lines.last() else {
        return false;
    };
    let last = last.trim();
    last.chars().count() >= length && last.chars().all(|c| c == fence_char)
}

pub(super) fn headings(text: &str) -> Vec<Heading> {
    let mut headings = Vec::new();
    let mut open: Option<Heading> = None;
    for (event, range) in Parser::new_ext(text, Options::empty()).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                open = Some(Heading {
                    range,
                    level: level as usize,
                    text: String::new(),
                });
            }
            Event::Text(content) | Event::Code(content) => {
                if let Some(heading) = open.as_mut() {
                    heading.text.push_str(&content);
                }
            }
            Event::End(TagEnd::Heading(_)) => headings.extend(open.take()),
            _ => {}
        }
    }
    headings
}

/// The fences' content ranges (inside the fence lines), where nothing is markup.
pub(super) fn fenced_ranges(text: &str) -> Vec<Range<usize>> {
    fenced_blocks(text)
        .into_iter()
        .map(|fence| {
            let block = &text[fence.range.clone()];
            let first_line_end = block.find('\n').map_or(block.len(), |i| i + 1);
            fence.range.start + first_line_end..fence.range.end
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_and_headings_are_read_as_commonmark_reads_them() {
        let text = "# One\n\n````md\n```\n# Not a heading\n```\n````\n\nTwo\n===\n\n~~~\nopen";
        let fences = fenced_blocks(text);
        assert_eq!(fences.len(), 2, "{fences:#?}");
        assert_eq!(fences[0].info, "md");
        assert_eq!(fences[0].content, "```\n# Not a heading\n```\n");
        assert!(fences[0].closed);
        assert_eq!(fences[1].content, "open");
        assert!(!fences[1].closed);
        let names: Vec<(usize, String)> = headings(text)
            .into_iter()
            .map(|h| (h.level, h.text))
            .collect();
        assert_eq!(names, vec![(1, "One".to_owned()), (1, "Two".to_owned())]);
    }
}
