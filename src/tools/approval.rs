//! Asking before a tool changes something: writes, edits and commands go through an
//! `Approver`, which may ask the user (in Neovim) or decide by policy.

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

/// The kinds of change that can be approved, each on its own ("accept all edits").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    Write,
    Edit,
    Command,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Write => "write",
            ChangeKind::Edit => "edit",
            ChangeKind::Command => "command",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ApprovalRequest {
    /// The loop asking (filled in by the tool context).
    pub loop_id: String,
    pub kind: ChangeKind,
    pub tool: &'static str,
    /// What is changed: the file (relative to the root) or the command.
    pub subject: String,
    /// The change itself: a unified diff, or the command and its directory.
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Accept,
    /// Accept this change and every later one of the same kind in the same loop.
    AcceptAllOfKind,
    /// Rejected, with the user's reason, which goes back to the model.
    Reject(String),
}

#[async_trait]
pub trait Approver: Send + Sync {
    /// Waits for a decision; returns `None` when `cancel` fires first.
    async fn decide(
        &self,
        request: ApprovalRequest,
        cancel: &CancellationToken,
    ) -> Option<Decision>;
}

/// Accepts everything; for headless runs the user chose to trust, and for read-only loops,
/// which never ask.
pub struct AcceptAll;

#[async_trait]
impl Approver for AcceptAll {
    async fn decide(
        &self,
        _request: ApprovalRequest,
        _cancel: &CancellationToken,
    ) -> Option<Decision> {
        Some(Decision::Accept)
    }
}

/// A unified diff of a file's change, for the approval prompt.
pub fn file_diff(path: &str, old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string()
}
