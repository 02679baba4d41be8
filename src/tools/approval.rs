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
    /// A web page fetched by `web_fetch`; the subject is its host, and "accept all" means
    /// every later fetch from that host.
    Fetch,
    /// A call of an MCP server's tool; the subject is `server__tool`, and "accept all" means
    /// every later call of that tool.
    Mcp,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Write => "write",
            ChangeKind::Edit => "edit",
            ChangeKind::Command => "command",
            ChangeKind::Fetch => "fetch",
            ChangeKind::Mcp => "mcp",
        }
    }
}

/// The `tool` of a request a coding agent makes before one of its own tools acts (ACP
/// `session/request_permission`). Loopr neither confines nor sees what such a tool does, so
/// no approval setting and no "accept all" answers it: it is always asked.
pub const AGENT_OWN_TOOL: &str = "agent";

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

impl ApprovalRequest {
    /// Whether a coding agent asks it for one of its own tools (`AGENT_OWN_TOOL`).
    pub fn is_agent_own_tool(&self) -> bool {
        self.tool == AGENT_OWN_TOOL
    }
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

    /// A change `request` asked about was accepted but could not be made; `message` tells
    /// the user why and what to do. The model learns it from the tool's result; whoever
    /// accepted the change hears it here.
    fn change_failed(&self, _request: &ApprovalRequest, _message: &str) {}
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

/// How long a diff may take before the rest of it is shown as one replaced block: an exact
/// diff of two large, very different texts grows with the product of their sizes.
pub const DIFF_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(300);
/// Lines of a diff shown for approval; a longer one says how much was left out.
const MAX_DIFF_LINES: usize = 20_000;

/// The line diff of two texts, bounded in time by `DIFF_TIMEOUT`. CPU-heavy on large texts:
/// call it off the async threads.
pub fn bounded_line_diff<'a>(old: &'a str, new: &'a str) -> similar::TextDiff<'a, 'a, 'a, str> {
    similar::TextDiff::configure()
        .algorithm(similar::Algorithm::Myers)
        .timeout(DIFF_TIMEOUT)
        .diff_lines(old, new)
}

/// A unified diff of a file's change, for the approval prompt. CPU-heavy on large files:
/// call it off the async threads.
pub fn file_diff(path: &str, old: &str, new: &str) -> String {
    let diff = bounded_line_diff(old, new);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string();
    let total = text.lines().count();
    if total <= MAX_DIFF_LINES {
        return text;
    }
    let mut shown: String = text.split_inclusive('\n').take(MAX_DIFF_LINES).collect();
    shown.push_str(&format!(
        "[... {} more lines of the diff not shown]\n",
        total - MAX_DIFF_LINES
    ));
    shown
}
