//! Files the user has open in the editor. An edit to such a file goes into the open buffer
//! (visible at once, undoable there) instead of behind the editor's back.

use std::path::Path;

use async_trait::async_trait;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BufferEdit {
    /// No buffer has the file loaded: write it on disk.
    NotLoaded,
    /// The buffer took the edit and was saved.
    Applied,
    /// The buffer has unsaved changes of the user's; nothing was done.
    UnsavedChanges,
}

#[async_trait]
pub trait OpenBuffers: Send + Sync {
    /// Applies the change from `old` to `new` to the buffer holding `path`, if any.
    async fn apply(&self, path: &Path, old: &str, new: &str) -> BufferEdit;
}

/// No editor: every file is written on disk.
pub struct NoBuffers;

#[async_trait]
impl OpenBuffers for NoBuffers {
    async fn apply(&self, _path: &Path, _old: &str, _new: &str) -> BufferEdit {
        BufferEdit::NotLoaded
    }
}

/// Remembers the files tools create, so undoing a loop removes exactly those (and never a
/// file the user or a command made meanwhile).
pub trait ChangeJournal: Send + Sync {
    fn created(&self, path: &Path);
}

/// Nothing to remember (planning loops never write).
pub struct NoJournal;

impl ChangeJournal for NoJournal {
    fn created(&self, _path: &Path) {}
}

/// The smallest whole-line replacement turning `old` into `new`: the zero-based line range
/// `[start, end)` of `old` and the text that replaces it.
pub fn line_replacement(old: &str, new: &str) -> (usize, usize, String) {
    let old_lines: Vec<&str> = old.split_inclusive('\n').collect();
    let new_lines: Vec<&str> = new.split_inclusive('\n').collect();
    let prefix = old_lines
        .iter()
        .zip(&new_lines)
        .take_while(|(a, b)| a == b)
        .count();
    let suffix = old_lines[prefix..]
        .iter()
        .rev()
        .zip(new_lines[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let replacement = new_lines[prefix..new_lines.len() - suffix].concat();
    (prefix, old_lines.len() - suffix, replacement)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacements_cover_only_the_changed_lines() {
        assert_eq!(
            line_replacement("a\nb\nc\n", "a\nB\nc\n"),
            (1, 2, "B\n".to_owned())
        );
        assert_eq!(
            line_replacement("a\nc\n", "a\nb\nc\n"),
            (1, 1, "b\n".to_owned())
        );
        assert_eq!(line_replacement("a\nb\n", "a\n"), (1, 2, String::new()));
        assert_eq!(line_replacement("", "x\n"), (0, 0, "x\n".to_owned()));
        assert_eq!(line_replacement("same\n", "same\n"), (1, 1, String::new()));
    }
}
