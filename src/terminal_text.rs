//! Text for a terminal, with nothing in it the terminal would obey. What the CLI prints comes
//! from outside (a project file a tool read, the model's words, a command's output, a
//! server's error): an escape sequence in it could set the clipboard (OSC 52), retitle the
//! window, clear the screen, or move the cursor to hide a line; a bidirectional override
//! shows text in another order than it is. Each such character is shown instead: C0 controls
//! as `^X` (but the line feed and the tab), DEL as `^?`, C1 controls and bidirectional
//! controls as `<U+XXXX>`.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with every character a terminal would act on shown instead.
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(obeyed) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            c if !obeyed(c) => shown.push(c),
            '\u{7f}' => shown.push_str("^?"),
            c if u32::from(c) < 0x20 => {
                shown.push('^');
                shown.push(char::from(b'@' + c as u8));
            }
            c => {
                let _ = write!(shown, "<U+{:04X}>", u32::from(c));
            }
        }
    }
    Cow::Owned(shown)
}

fn obeyed(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
        || c == '\u{200e}'
        || c == '\u{200f}'
        || c == '\u{61c}'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_overrides_are_shown_not_obeyed() {
        assert_eq!(
            for_terminal("a\u{1b}]52;c;eA==\u{7}b\r\u{9b}2J\u{7f}\u{202e}c\n\td"),
            "a^[]52;c;eA==^Gb^M<U+009B>2J^?<U+202E>c\n\td"
        );
    }

    #[test]
    fn plain_text_is_borrowed_as_it_is() {
        assert!(matches!(
            for_terminal("plain — ünïcode\n\tand tabs"),
            Cow::Borrowed(_)
        ));
    }
}
