//! What an undo did: the files it restored and, for each file it left as it is, why (which
//! the shells word, with the command that overwrites the ones a forced undo may).

use std::path::PathBuf;

/// Why undo left a file the loop changed as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// Changed (by the user, or anyone) since the loop changed it; restored only with force.
    ChangedSince,
    /// Changed while a command of the loop ran, which cannot tell its own writes from the
    /// user's saves meanwhile; restored only with force.
    ChangedDuringCommand,
    /// Written by the coding agent (named) behind the protocol during its turn, which, like
    /// a command, cannot be told from the user's saves meanwhile; restored only with force.
    WrittenByAgent(String),
    /// Open in the editor with unsaved changes.
    UnsavedBuffer,
    /// What it held before cannot be restored; says why.
    Unrestorable(String),
}

impl SkipReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            SkipReason::ChangedSince => "changed_since",
            SkipReason::ChangedDuringCommand => "changed_during_command",
            SkipReason::WrittenByAgent(_) => "written_by_agent",
            SkipReason::UnsavedBuffer => "unsaved_buffer",
            SkipReason::Unrestorable(_) => "unrestorable",
        }
    }

    pub fn describe(&self) -> String {
        match self {
            SkipReason::ChangedSince => "changed since the loop changed it".to_owned(),
            SkipReason::ChangedDuringCommand => {
                "changed while a command of the loop ran; it may hold your edits".to_owned()
            }
            SkipReason::WrittenByAgent(agent) => format!(
                "written by the coding agent {agent}'s own tools during its turn; it may hold \
                 your edits saved meanwhile"
            ),
            SkipReason::UnsavedBuffer => "open with unsaved changes".to_owned(),
            SkipReason::Unrestorable(why) => why.clone(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct UndoReport {
    /// Files put back as they were before the loop changed them (or removed, when the loop
    /// created them).
    pub restored: Vec<PathBuf>,
    /// Files left as they are, with the reason.
    pub skipped: Vec<(PathBuf, SkipReason)>,
    /// What was undone was a rewind (the files it wrote got back what they held before it).
    pub rewind_undone: bool,
}
