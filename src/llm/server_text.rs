//! Text a server wrote (an error's message and type, a tool call's name), made fit to show
//! and keep: every server answer may come from an attacker, and this text reaches errors,
//! the store, every status row and progress line.

/// What is kept of an error's message.
const MESSAGE_CHARS: usize = 2_000;
/// What is kept of a word a server chose: an error's type, a tool call's name.
const WORD_CHARS: usize = 100;

/// An error message from a server, on one line and at most `MESSAGE_CHARS` long.
pub fn server_message(text: &str) -> String {
    one_line_capped(text, MESSAGE_CHARS)
}

/// An error type or tool name from a server, on one line and at most `WORD_CHARS` long.
pub fn server_word(text: &str) -> String {
    one_line_capped(text, WORD_CHARS)
}

/// `text` with each run of whitespace and control characters made one space, cut after
/// `max_chars` characters with an ellipsis. Reads no more of `text` than it keeps.
fn one_line_capped(text: &str, max_chars: usize) -> String {
    let mut line = String::with_capacity(text.len().min(max_chars * 4 + 3));
    let mut kept = 0;
    let mut gap = false;
    for character in text.trim().chars() {
        if character.is_whitespace() || character.is_control() {
            gap = true;
            continue;
        }
        if kept == max_chars {
            line.push('…');
            return line;
        }
        if gap {
            line.push(' ');
            kept += 1;
            gap = false;
            if kept == max_chars {
                line.push('…');
                return line;
            }
        }
        line.push(character);
        kept += 1;
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_becomes_one_line_cut_with_an_ellipsis() {
        assert_eq!(server_word(" a\n\tb\r\n\u{1b}c  "), "a b c");
        let long = server_word(&"é".repeat(500));
        assert_eq!(long.chars().count(), 101);
        assert!(long.ends_with('…'));
        assert_eq!(
            server_word(&"w".repeat(100)),
            "w".repeat(100),
            "exactly the cap"
        );
        assert_eq!(server_message(""), "");
    }
}
