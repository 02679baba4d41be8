//! Files the user has open in the editor. An edit to such a file goes into the open buffer
//! (visible at once, undoable there) instead of behind the editor's back.

use std::path::{Path, PathBuf};

use async_trait::async_trait;

use super::tree_watch::FileStat;
use super::{ProjectRoot, ReadBudget};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BufferEdit {
    /// No buffer has the file loaded: write it on disk.
    NotLoaded,
    /// The buffer took the edit and was saved.
    Applied,
    /// The buffer has unsaved changes of the user's (or could not be brought up to date with
    /// the file); nothing was done.
    UnsavedChanges,
}

/// Whether an edit of a file could go through the editor, asked before the user is asked to
/// approve it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BufferCheck {
    /// No buffer has the file loaded.
    NotLoaded,
    /// A buffer has it loaded without unsaved changes (if it is behind the file, it is
    /// reloaded before the edit).
    Ready,
    /// A buffer holds unsaved changes of the user's; an edit would be refused.
    UnsavedChanges,
}

#[async_trait]
pub trait OpenBuffers: Send + Sync {
    /// Applies the change from `old` (the file's text now) to `new` to the buffer holding
    /// `path`, if any.
    async fn apply(&self, path: &Path, old: &str, new: &str) -> BufferEdit;

    /// Whether `apply` could take a change of `path`; changes nothing.
    async fn check(&self, path: &Path) -> BufferCheck;

    /// `paths` changed on disk behind the editor (a command did it): buffers showing them
    /// are brought up to date where they hold no unsaved changes, so a later `:write` neither
    /// prompts nor overwrites the change; the user hears of the others.
    async fn reload(&self, paths: &[PathBuf]);

    /// The text of the buffer holding `path` where it has unsaved changes (what the user
    /// sees, newer than the file); `None` where no buffer does, or it holds what the file does.
    async fn unsaved_text(&self, _path: &Path) -> Option<String> {
        None
    }
}

/// No editor: every file is written on disk.
pub struct NoBuffers;

#[async_trait]
impl OpenBuffers for NoBuffers {
    async fn apply(&self, _path: &Path, _old: &str, _new: &str) -> BufferEdit {
        BufferEdit::NotLoaded
    }

    async fn check(&self, _path: &Path) -> BufferCheck {
        BufferCheck::NotLoaded
    }

    async fn reload(&self, _paths: &[PathBuf]) {}
}

/// Remembers what a loop's tools changed, so the changes list shows exactly that and undo
/// restores exactly that (never a file the user changed and the loop did not). Paths are
/// relative to the project root, with `/`. Every method blocks: call it off the async
/// threads.
pub trait ChangeJournal: Send + Sync {
    /// `write_file` or `edit_file` changed `relative` from `before` (`None`: it did not
    /// exist) to `after`.
    fn tool_changed(&self, relative: &str, before: Option<&[u8]>, after: &[u8]);

    /// A command created, changed or deleted `relative` (inside `root`); `before` is its
    /// metadata before the command, `None` when it did not exist. Telling what it holds now
    /// reads at most what `budget`, shared by the files of one command, still allows.
    fn command_changed(
        &self,
        root: &ProjectRoot,
        relative: &str,
        before: Option<FileStat>,
        budget: &ReadBudget,
    );

    /// Paths (relative, with `/`; a folder stands for all below it) where someone other than
    /// the loop writes while it runs, such as the plan's export: a command's changes there are
    /// not the loop's.
    fn others_paths(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Nothing to remember (planning loops never write).
pub struct NoJournal;

impl ChangeJournal for NoJournal {
    fn tool_changed(&self, _relative: &str, _before: Option<&[u8]>, _after: &[u8]) {}

    fn command_changed(
        &self,
        _root: &ProjectRoot,
        _relative: &str,
        _before: Option<FileStat>,
        _budget: &ReadBudget,
    ) {
    }
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
