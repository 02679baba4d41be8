//! A web page's HTML as readable text, in one pass over the input: tags are read only for
//! the line breaks, list bullets, headings and table cells they mean, and no tree is built.
//! An HTML parser's tree builder follows the standard's algorithms, which walk the stack of
//! open elements and the list of formatting elements for every tag: 100,000 nested `<div>`s
//! took minutes (`html5ever`, under `html2text`), and reopened formatting elements can make
//! a tree quadratic in the page. Here every byte is looked at a bounded number of times, the
//! output is capped, and the caller may stop the work between pieces of input.

use std::borrow::Cow;

/// Input read between two asks whether to go on.
const CHECK_EVERY: usize = 64 * 1024;
/// Lines are wrapped at this many characters (`pre` is left alone).
const WIDTH: usize = 100;
/// Deeper lists are indented no further.
const MAX_INDENTED_LISTS: usize = 8;
/// Longest character reference name (`&CounterClockwiseContourIntegral;`), `;` included.
const MAX_REFERENCE_NAME: usize = 32;

/// The text of a page, and whether it was cut at the size asked for.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct PageText {
    pub text: String,
    pub cut: bool,
}

/// The caller asked to stop (its cancel or its time limit).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Stopped;

/// `html` as text of at most about `max_bytes` bytes; `stop` is asked every 64 KiB of input.
pub(super) fn html_to_text(
    html: &str,
    max_bytes: usize,
    stop: &dyn Fn() -> bool,
) -> Result<PageText, Stopped> {
    let mut reader = Reader {
        html,
        at: 0,
        out: TextWriter::new(max_bytes),
    };
    let mut next_check = 0;
    while reader.at < html.len() && !reader.out.is_full() {
        if reader.at >= next_check {
            if stop() {
                return Err(Stopped);
            }
            next_check = reader.at + CHECK_EVERY;
        }
        reader.step();
    }
    Ok(reader.out.finish())
}

struct Reader<'a> {
    html: &'a str,
    at: usize,
    out: TextWriter,
}

impl<'a> Reader<'a> {
    fn rest(&self) -> &'a str {
        &self.html[self.at..]
    }

    /// Reads one piece: text up to the next `<`, or one tag, comment or declaration.
    fn step(&mut self) {
        let rest = self.rest();
        if !rest.starts_with('<') {
            let end = rest.find('<').unwrap_or(rest.len());
            let text = decode_references(&rest[..end]);
            self.out.text(&text);
            self.at += end;
            return;
        }
        let after = &rest.as_bytes()[1..];
        match after.first() {
            Some(b'!') if rest.starts_with("<!--") => {
                // `<!-->` and `<!--->` are whole comments too, hence the search from `<!`.
                self.skip_past(2, "-->");
            }
            Some(b'!' | b'?') => self.skip_past(1, ">"),
            Some(b'/') if after.get(1).is_some_and(u8::is_ascii_alphabetic) => {
                let name = self.read_tag(2);
                self.out.end_tag(&name);
            }
            Some(first) if first.is_ascii_alphabetic() => {
                let name = self.read_tag(1);
                self.start_tag(&name);
            }
            _ => {
                self.out.text("<");
                self.at += 1;
            }
        }
    }

    /// Moves past the first `end` found `from` bytes on, or to the end of the input.
    fn skip_past(&mut self, from: usize, end: &str) {
        let rest = self.rest();
        self.at += rest[from..]
            .find(end)
            .map_or(rest.len(), |found| from + found + end.len());
    }

    /// Reads a tag whose name starts `from` bytes on, and its attributes, which are skipped
    /// (quoted values may hold `>`).
    fn read_tag(&mut self, from: usize) -> TagName {
        let bytes = self.html.as_bytes();
        let start = self.at + from;
        let mut at = start;
        while at < bytes.len() && !is_space(bytes[at]) && bytes[at] != b'/' && bytes[at] != b'>' {
            at += 1;
        }
        let name = TagName::new(&bytes[start..at]);
        while at < bytes.len() {
            match bytes[at] {
                b'>' => {
                    at += 1;
                    break;
                }
                b'=' => {
                    at += 1;
                    while at < bytes.len() && is_space(bytes[at]) {
                        at += 1;
                    }
                    if let Some(&quote @ (b'"' | b'\'')) = bytes.get(at) {
                        at = self.html[at + 1..]
                            .find(char::from(quote))
                            .map_or(bytes.len(), |found| at + 1 + found + 1);
                    }
                }
                _ => at += 1,
            }
        }
        self.at = at;
        name
    }

    /// A start tag; a `/` before its `>` changes nothing (`<br/>` is `<br>`, `<div/>` opens
    /// a `div`), as in browsers.
    fn start_tag(&mut self, name: &TagName) {
        match name.as_str() {
            // Their content is not markup: it runs to the matching end tag.
            "script" | "style" | "title" | "iframe" | "noembed" | "noframes" => {
                self.raw_text(name.as_str());
            }
            "textarea" | "xmp" => {
                let content = self.raw_text(name.as_str());
                let content = if name.as_str() == "textarea" {
                    decode_references(content)
                } else {
                    Cow::Borrowed(content)
                };
                self.out.block(Break::Line);
                self.out.preformatted(&content);
                self.out.block(Break::Line);
            }
            "plaintext" => {
                let rest = self.rest();
                self.out.block(Break::Line);
                self.out.preformatted(rest);
                self.at = self.html.len();
            }
            other => self.out.start_tag(other),
        }
    }

    /// The content of a raw text element up to its end tag (or the end of the input), which
    /// is skipped too.
    fn raw_text(&mut self, name: &str) -> &'a str {
        let html = self.html;
        let content_start = self.at;
        let mut search = content_start;
        while let Some(found) = html[search..].find("</") {
            let candidate = search + found;
            let name_end = candidate + 2 + name.len();
            let closes = html
                .as_bytes()
                .get(candidate + 2..name_end)
                .is_some_and(|named| named.eq_ignore_ascii_case(name.as_bytes()))
                && html
                    .as_bytes()
                    .get(name_end)
                    .is_none_or(|&next| is_space(next) || next == b'/' || next == b'>');
            if closes {
                self.at = html[name_end..]
                    .find('>')
                    .map_or(html.len(), |end| name_end + end + 1);
                return &html[content_start..candidate];
            }
            search = candidate + 2;
        }
        self.at = html.len();
        &html[content_start..]
    }
}

/// A tag's name in lower case, if it is short enough to be one this reader knows (the
/// longest is 10 letters); longer names read as no name.
struct TagName {
    bytes: [u8; 12],
    len: usize,
}

impl TagName {
    fn new(raw: &[u8]) -> TagName {
        let mut name = TagName {
            bytes: [0; 12],
            len: 0,
        };
        if raw.len() <= name.bytes.len() {
            name.bytes[..raw.len()].copy_from_slice(raw);
            name.bytes[..raw.len()].make_ascii_lowercase();
            name.len = raw.len();
        }
        name
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

/// The breaks between blocks, weakest first: pending breaks merge into the strongest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Break {
    None,
    Line,
    Paragraph,
}

fn block_break(name: &str) -> Break {
    match name {
        "p" | "h1" | "h2" | "h3" | "h4" | "h5" | "h6" | "pre" | "blockquote" | "ul" | "ol"
        | "dl" | "table" | "section" | "article" | "header" | "footer" | "nav" | "aside"
        | "main" | "figure" | "form" | "fieldset" | "details" | "address" | "hr" | "hgroup"
        | "menu" => Break::Paragraph,
        "div" | "li" | "dt" | "dd" | "tr" | "option" | "caption" | "figcaption" | "summary"
        | "legend" | "center" | "body" | "tbody" | "thead" | "tfoot" => Break::Line,
        _ => Break::None,
    }
}

/// Writes words and breaks: spaces collapsed, lines wrapped, at most one blank line in a
/// row, nothing past the cap.
struct TextWriter {
    out: String,
    max_bytes: usize,
    cut: bool,
    pending: Break,
    pending_space: bool,
    /// Written before the next word of the line: a bullet, a heading's `#`s, a cell's `|`.
    pending_prefix: String,
    /// Characters on the current line.
    column: usize,
    /// Newlines the output ends with.
    trailing_newlines: usize,
    open_pre: usize,
    open_lists: usize,
    cells_in_row: usize,
}

impl TextWriter {
    fn new(max_bytes: usize) -> TextWriter {
        TextWriter {
            out: String::new(),
            max_bytes,
            cut: false,
            pending: Break::None,
            pending_space: false,
            pending_prefix: String::new(),
            column: 0,
            trailing_newlines: 0,
            open_pre: 0,
            open_lists: 0,
            cells_in_row: 0,
        }
    }

    fn is_full(&self) -> bool {
        self.cut
    }

    fn finish(mut self) -> PageText {
        let kept = self.out.trim_end().len();
        self.out.truncate(kept);
        PageText {
            text: self.out,
            cut: self.cut,
        }
    }

    fn start_tag(&mut self, name: &str) {
        match name {
            "br" => self.line_break(),
            "li" => {
                self.block(Break::Line);
                let depth = self.open_lists.clamp(1, MAX_INDENTED_LISTS);
                self.pending_prefix = format!("{}* ", "  ".repeat(depth - 1));
            }
            "h1" | "h2" | "h3" | "h4" | "h5" | "h6" => {
                self.block(Break::Paragraph);
                let level = usize::from(name.as_bytes()[1] - b'0');
                self.pending_prefix = format!("{} ", "#".repeat(level));
            }
            "td" | "th" => {
                if self.cells_in_row > 0 {
                    self.pending_prefix = " | ".to_owned();
                }
                self.cells_in_row += 1;
            }
            _ => {
                match name {
                    "pre" => self.open_pre += 1,
                    "ul" | "ol" | "menu" => self.open_lists += 1,
                    "tr" => self.cells_in_row = 0,
                    _ => {}
                }
                self.block(block_break(name));
            }
        }
    }

    fn end_tag(&mut self, name: &TagName) {
        let name = name.as_str();
        match name {
            "pre" => self.open_pre = self.open_pre.saturating_sub(1),
            "ul" | "ol" | "menu" => self.open_lists = self.open_lists.saturating_sub(1),
            // `</br>` is read as `<br>`, as browsers do.
            "br" => self.line_break(),
            _ => {}
        }
        self.block(block_break(name));
    }

    fn block(&mut self, wanted: Break) {
        if wanted > Break::None {
            self.pending = self.pending.max(wanted);
            self.pending_space = false;
        }
    }

    /// `<br>`: the line ends here, even an empty one.
    fn line_break(&mut self) {
        self.flush_break();
        if !self.out.is_empty() && self.trailing_newlines < 2 {
            self.push("\n");
        }
    }

    /// Text between tags: spaces collapse and lines wrap, but in `pre`.
    fn text(&mut self, text: &str) {
        if self.open_pre > 0 {
            self.preformatted(text);
            return;
        }
        for (index, word) in text.split(is_space_char).enumerate() {
            if index > 0 {
                self.pending_space = true;
            }
            if !word.is_empty() {
                self.word(word);
            }
        }
    }

    fn word(&mut self, word: &str) {
        self.flush_break();
        let width = word.chars().count();
        if !self.pending_prefix.is_empty() {
            let prefix = std::mem::take(&mut self.pending_prefix);
            self.push(&prefix);
        } else if self.pending_space && self.column > 0 {
            if self.column + 1 + width > WIDTH {
                self.push("\n");
            } else {
                self.push(" ");
            }
        }
        self.pending_space = false;
        self.push(word);
    }

    /// Text kept as it is, line ends made `\n`.
    fn preformatted(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.flush_break();
        self.pending_space = false;
        let prefix = std::mem::take(&mut self.pending_prefix);
        self.push(&prefix);
        for (index, line) in text.split('\n').enumerate() {
            if index > 0 {
                self.push("\n");
            }
            self.push(line.strip_suffix('\r').unwrap_or(line));
        }
    }

    fn flush_break(&mut self) {
        let wanted = match self.pending {
            Break::None => 0,
            Break::Line => 1,
            Break::Paragraph => 2,
        };
        self.pending = Break::None;
        if self.out.is_empty() {
            return;
        }
        for _ in self.trailing_newlines..wanted {
            self.push("\n");
        }
        if wanted > 0 {
            self.pending_space = false;
        }
    }

    fn push(&mut self, piece: &str) {
        if self.cut || piece.is_empty() {
            return;
        }
        let room = self.max_bytes.saturating_sub(self.out.len());
        let piece = if piece.len() > room {
            self.cut = true;
            let mut end = room;
            while !piece.is_char_boundary(end) {
                end -= 1;
            }
            &piece[..end]
        } else {
            piece
        };
        self.out.push_str(piece);
        let newlines_at_end = piece.bytes().rev().take_while(|&b| b == b'\n').count();
        self.trailing_newlines = if newlines_at_end == piece.len() {
            self.trailing_newlines + newlines_at_end
        } else {
            newlines_at_end
        };
        self.column = match piece.rfind('\n') {
            Some(last) => piece[last + 1..].chars().count(),
            None => self.column + piece.chars().count(),
        };
    }
}

/// HTML's white space (the ASCII kind; a no-break space stays).
fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | b'\x0c')
}

fn is_space_char(c: char) -> bool {
    u8::try_from(c).is_ok_and(is_space)
}

/// `text` with its character references (`&amp;`, `&#233;`, `&#x1F600;`) replaced by what
/// they stand for; one that is not a reference stays as it is.
fn decode_references(text: &str) -> Cow<'_, str> {
    if !text.contains('&') {
        return Cow::Borrowed(text);
    }
    let mut decoded = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        decoded.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        match reference(after) {
            Some((chars, used)) => {
                decoded.extend(chars.into_iter().flatten());
                rest = &after[used..];
            }
            None => {
                decoded.push('&');
                rest = after;
            }
        }
    }
    decoded.push_str(rest);
    Cow::Owned(decoded)
}

/// The characters the reference at the start of `text` (just after `&`) stands for, and the
/// bytes it takes.
fn reference(text: &str) -> Option<([Option<char>; 2], usize)> {
    let bytes = text.as_bytes();
    if bytes.first() == Some(&b'#') {
        let (hex, digits_start) = match bytes.get(1) {
            Some(b'x' | b'X') => (true, 2),
            _ => (false, 1),
        };
        let digits = bytes[digits_start..]
            .iter()
            .take_while(|byte| {
                if hex {
                    byte.is_ascii_hexdigit()
                } else {
                    byte.is_ascii_digit()
                }
            })
            .count();
        if digits == 0 {
            return None;
        }
        let radix = if hex { 16 } else { 10 };
        let value = text[digits_start..digits_start + digits]
            .chars()
            .fold(0u32, |value, digit| {
                value
                    .saturating_mul(radix)
                    .saturating_add(digit.to_digit(radix).unwrap_or(0))
            });
        let mut used = digits_start + digits;
        if bytes.get(used) == Some(&b';') {
            used += 1;
        }
        return Some(([Some(numeric_reference(value)), None], used));
    }
    let name_len = bytes
        .iter()
        .take(MAX_REFERENCE_NAME)
        .take_while(|byte| byte.is_ascii_alphanumeric())
        .count();
    if name_len == 0 {
        return None;
    }
    if bytes.get(name_len) == Some(&b';')
        && let Some(chars) = named_reference(&text[..=name_len])
    {
        return Some((chars, name_len + 1));
    }
    // The old references without `;` (`&amp`, `&copy`): the longest that is one.
    (2..=name_len)
        .rev()
        .find_map(|len| named_reference(&text[..len]).map(|chars| (chars, len)))
}

/// What the named reference `name` (`amp;`, or an old one without `;`) stands for. The table
/// also holds every start of a name, standing for nothing (for a tokenizer that reads a name
/// a character at a time).
fn named_reference(name: &str) -> Option<[Option<char>; 2]> {
    let &(first, second) = web_atoms::NAMED_ENTITIES.get(name)?;
    (first != 0).then(|| {
        [
            char::from_u32(first),
            (second != 0).then(|| char::from_u32(second)).flatten(),
        ]
    })
}

/// What a numeric reference stands for, as browsers read it: nothing valid is U+FFFD, and
/// the C1 controls are the Windows-1252 characters old pages meant.
fn numeric_reference(value: u32) -> char {
    match value {
        0x80..=0x9f => web_atoms::C1_REPLACEMENTS[(value - 0x80) as usize]
            .unwrap_or(char::REPLACEMENT_CHARACTER),
        0 => char::REPLACEMENT_CHARACTER,
        _ => char::from_u32(value).unwrap_or(char::REPLACEMENT_CHARACTER),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    fn text(html: &str) -> String {
        html_to_text(html, 1 << 20, &|| false)
            .expect("not stopped")
            .text
    }

    #[test]
    fn blocks_lists_headings_and_cells_read_as_lines() {
        let page = "<html><head><title>T</title><style>p{color:red}</style>\
            <script>if (a < b) { document.write('</p>') }</script></head>\
            <body><h2>Release   notes</h2><p>Version <b>0.3.1</b>\n adds\t--version.</p>\
            <ul><li>one<li>two<ul><li>nested</li></ul></li></ul>\
            <table><tr><th>name<th>size</tr><tr><td>a</td><td>1</td></tr></table>\
            <p>line<br>break<br/><br>after</p><pre>  keep\n    this </pre>tail</body></html>";
        assert_eq!(
            text(page),
            "## Release notes\n\nVersion 0.3.1 adds --version.\n\n* one\n* two\n\n  * nested\n\n\
             name | size\na | 1\n\nline\nbreak\n\nafter\n\n  keep\n    this \n\ntail"
        );
    }

    #[test]
    fn references_comments_and_odd_markup() {
        assert_eq!(
            text("a &amp; b &lt;c&gt; &#233;&#x1F600; &copy 2024 &nosuch; &#150; &#0;"),
            "a & b <c> é😀 © 2024 &nosuch; – \u{fffd}"
        );
        assert_eq!(
            text("x<!-- <p>hidden</p> -->y<!---->z<!-->w<?php echo 1 ?>v<!DOCTYPE html>u"),
            "xyzwvu"
        );
        assert_eq!(text("1 < 2 and 3 <= 4 </ 5"), "1 < 2 and 3 <= 4 </ 5");
        assert_eq!(
            text(r#"<a href="x>y" title='<p>'>link</a> <img alt=">">text"#),
            "link text"
        );
        assert_eq!(
            text("<textarea>a &amp; <b>b</b></textarea>"),
            "a & <b>b</b>"
        );
        assert_eq!(text("<SCRIPT>x</script >after"), "after");
        assert_eq!(text("<script>never closed <p>hidden"), "");
        assert_eq!(text("<p>unclosed <b attr=\"never"), "unclosed");
    }

    #[test]
    fn long_paragraphs_wrap_and_the_output_is_capped() {
        let words = "word ".repeat(100);
        let wrapped = text(&format!("<p>{words}</p>"));
        assert!(wrapped.lines().all(|line| line.chars().count() <= WIDTH));
        assert_eq!(wrapped.split_whitespace().count(), 100);

        let page = format!("<p>{}</p>", "é".repeat(1000));
        let capped = html_to_text(&page, 101, &|| false).expect("not stopped");
        assert!(capped.cut);
        assert_eq!(capped.text, "é".repeat(50));
    }

    #[test]
    fn pathological_pages_take_time_in_proportion_to_their_size() {
        let depth = 100_000;
        for page in [
            format!("{}deep{}", "<div>".repeat(depth), "</div>".repeat(depth)),
            format!("{}deep", "<b id=x><p>".repeat(depth)),
            format!("<div {}>attributes", "a=1 ".repeat(depth * 4)),
            "&amp".repeat(depth * 4),
            format!("<ul>{}", "<li><ul>".repeat(depth)),
        ] {
            let started = std::time::Instant::now();
            let converted = html_to_text(&page, 100 * 1024, &|| false).expect("not stopped");
            assert!(
                started.elapsed() < std::time::Duration::from_secs(5),
                "{} bytes took {:?}",
                page.len(),
                started.elapsed()
            );
            assert!(converted.text.len() <= 100 * 1024);
        }
    }

    #[test]
    fn the_caller_can_stop_it_between_pieces() {
        let page = "<p>word</p>".repeat(20_000);
        let asked = Cell::new(0);
        let stopped = html_to_text(&page, usize::MAX, &|| {
            asked.set(asked.get() + 1);
            asked.get() > 2
        });
        assert_eq!(stopped, Err(Stopped));
        assert_eq!(asked.get(), 3, "asked at the start and every 64 KiB");
    }
}
