//! Capping what a tool returns, so one call cannot flood the model's context, and what a
//! shell command did (`CommandOutput`), its streams capped.

use std::borrow::Cow;

use super::credentials_in_text::{redact_cut_end, redact_cut_start};

/// Collects lines up to a byte budget and remembers whether anything was dropped.
pub struct CappedOutput {
    text: String,
    budget: usize,
    dropped_lines: usize,
}

impl CappedOutput {
    pub fn new(budget: usize) -> CappedOutput {
        CappedOutput {
            text: String::new(),
            budget,
            dropped_lines: 0,
        }
    }

    /// Appends `line` and a newline; returns false once the budget is spent.
    pub fn push_line(&mut self, line: &str) -> bool {
        if self.dropped_lines > 0 || self.text.len() + line.len() + 1 > self.budget {
            self.dropped_lines += 1;
            return false;
        }
        self.text.push_str(line);
        self.text.push('\n');
        true
    }

    pub fn is_full(&self) -> bool {
        self.dropped_lines > 0
    }

    pub fn finish(self, hint: &str) -> String {
        let mut text = self.text;
        if self.dropped_lines > 0 {
            text.push_str(&format!(
                "[output truncated at {} bytes; {hint}]\n",
                self.budget
            ));
        }
        text
    }
}

/// The start and the end of a stream of any length, and how much lies between: what a
/// command's output keeps. Each piece costs a copy of at most what is kept of it, so a command
/// writing gigabytes costs no more than reading them.
pub struct HeadAndTail {
    head: Vec<u8>,
    head_bytes: usize,
    /// The end so far; may hold up to twice `tail_bytes` between trims.
    tail: Vec<u8>,
    tail_bytes: usize,
    left_out: u64,
}

impl HeadAndTail {
    pub fn new(head_bytes: usize, tail_bytes: usize) -> HeadAndTail {
        HeadAndTail {
            head: Vec::with_capacity(head_bytes),
            head_bytes,
            tail: Vec::with_capacity(2 * tail_bytes),
            tail_bytes,
            left_out: 0,
        }
    }

    pub fn push(&mut self, mut piece: &[u8]) {
        let to_head = piece.len().min(self.head_bytes - self.head.len());
        self.head.extend_from_slice(&piece[..to_head]);
        piece = &piece[to_head..];
        if piece.len() >= self.tail_bytes {
            // Only the piece's own end can be kept.
            let skipped = piece.len() - self.tail_bytes;
            self.left_out += (self.tail.len() + skipped) as u64;
            self.tail.clear();
            self.tail.extend_from_slice(&piece[skipped..]);
            return;
        }
        self.tail.extend_from_slice(piece);
        if self.tail.len() > 2 * self.tail_bytes {
            self.trim_tail();
        }
    }

    fn trim_tail(&mut self) {
        let excess = self.tail.len().saturating_sub(self.tail_bytes);
        self.tail.drain(..excess);
        self.left_out += excess as u64;
    }

    /// The text kept, the cut marked with how many bytes it left out, ending with a newline
    /// unless empty.
    pub fn finish(mut self) -> String {
        self.trim_tail();
        let head = String::from_utf8_lossy(&self.head);
        let tail = String::from_utf8_lossy(&self.tail);
        if self.left_out == 0 {
            let mut text = format!("{head}{tail}");
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            return text;
        }
        // A URL the cut went through could leave part of a token on either side.
        let mut text = redact_cut_end(&head).into_owned();
        text.push_str(&format!("\n[... {} bytes left out ...]\n", self.left_out));
        text.push_str(&redact_cut_start(&tail));
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text
    }
}

/// `line` cut to at most `max_chars` characters, marking the cut.
pub fn clip_line(line: &str, max_chars: usize) -> Cow<'_, str> {
    // A line of no more bytes than the limit has no more characters either.
    if line.len() <= max_chars {
        return Cow::Borrowed(line);
    }
    match line.char_indices().nth(max_chars) {
        Some((cut, _)) => Cow::Owned(format!("{}… [line clipped]", redact_cut_end(&line[..cut]))),
        None => Cow::Borrowed(line),
    }
}

/// What a shell command did.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandOutput {
    /// The exit code; `None` when killed (timeout, signal).
    pub exit_code: Option<i32>,
    pub status: String,
    pub stdout: String,
    pub stderr: String,
}

impl CommandOutput {
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0)
    }
}

impl std::fmt::Display for CommandOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}\n--- stdout ---\n{}--- stderr ---\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_output_stops_at_the_budget_and_says_so() {
        let mut output = CappedOutput::new(10);
        assert!(output.push_line("12345"));
        assert!(!output.push_line("123456"));
        assert!(!output.push_line("1"));
        assert!(output.is_full());
        assert_eq!(
            output.finish("narrow it"),
            "12345\n[output truncated at 10 bytes; narrow it]\n"
        );
    }

    #[test]
    fn head_and_tail_keep_both_ends_of_pieces_of_any_size() {
        let stream: Vec<u8> = (0..10_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        for piece_size in [1, 3, 7, 10, 11, 64, 1000, 10_000] {
            let mut kept = HeadAndTail::new(5, 10);
            for piece in stream.chunks(piece_size) {
                kept.push(piece);
            }
            let text = String::from_utf8_lossy(&stream).into_owned();
            assert_eq!(
                kept.finish(),
                format!(
                    "{}\n[... 9985 bytes left out ...]\n{}\n",
                    &text[..5],
                    &text[text.len() - 10..]
                ),
                "pieces of {piece_size}"
            );
        }
        let mut short = HeadAndTail::new(5, 10);
        short.push(b"hello world");
        assert_eq!(short.finish(), "hello world\n", "nothing left out");
    }

    #[test]
    fn a_cut_through_a_url_leaves_no_part_of_its_credentials() {
        const TOKEN: &str = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";
        let url = format!("remote: https://{TOKEN}@github.com/acme/app.git");
        for cut in ["remote: https://".len() + 3, "remote: https://".len() + 30] {
            let clipped = clip_line(&url, cut);
            assert!(!clipped.contains(&TOKEN[..3]), "{clipped}");
            assert!(clipped.ends_with("… [line clipped]"), "{clipped}");
        }
        // The stream's kept head ends inside the token, its kept tail starts inside it.
        let mut kept = HeadAndTail::new(20, 30);
        kept.push(format!("{}\n{}\n", "x".repeat(4), url).as_bytes());
        let text = kept.finish();
        for piece in TOKEN.as_bytes().chunks(4) {
            let piece = std::str::from_utf8(piece).expect("ascii");
            assert!(!text.contains(piece), "{piece} in {text}");
        }
        assert!(text.contains("@github.com/acme/app.git"), "{text}");
    }

    #[test]
    fn clip_line_respects_char_boundaries() {
        assert_eq!(clip_line("héllo", 2), "hé… [line clipped]");
        assert_eq!(clip_line("hi", 2), "hi");
        assert_eq!(clip_line("héllo", 5), "héllo", "six bytes, five characters");
        assert_eq!(clip_line("héllo", 4), "héll… [line clipped]");
    }
}
