//! Text cut short to fit a message: what a failure or a repeated mistake quotes of a longer
//! text, kept on one line.

/// `text` on one line (runs of white space as one space), cut to `chars` characters with `…`.
pub fn one_line(text: &str, chars: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut shown: String = flat.chars().take(chars).collect();
    if shown.len() < flat.len() {
        shown.push('…');
    }
    shown
}
