//! Capping what a tool returns, so one call cannot flood the model's context.

use std::borrow::Cow;

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

/// `line` cut to at most `max_chars` characters, marking the cut.
pub fn clip_line(line: &str, max_chars: usize) -> Cow<'_, str> {
    // A line of no more bytes than the limit has no more characters either.
    if line.len() <= max_chars {
        return Cow::Borrowed(line);
    }
    match line.char_indices().nth(max_chars) {
        Some((cut, _)) => Cow::Owned(format!("{}… [line clipped]", &line[..cut])),
        None => Cow::Borrowed(line),
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
    fn clip_line_respects_char_boundaries() {
        assert_eq!(clip_line("héllo", 2), "hé… [line clipped]");
        assert_eq!(clip_line("hi", 2), "hi");
        assert_eq!(clip_line("héllo", 5), "héllo", "six bytes, five characters");
        assert_eq!(clip_line("héllo", 4), "héll… [line clipped]");
    }
}
