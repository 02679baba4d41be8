//! The user's commit hooks for a phase's commit. The hooks run code from the working tree the
//! model just wrote (a package.json script, a Makefile a hook calls), so they run where the
//! loop's commands run: inside its sandbox, or, without one, only once the user approved
//! them, as any command. Git itself writes the commit from the host with hooks off.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::git::{Git, GitError};
use crate::tools::{
    ApprovalRequest, ChangeKind, CommandOutput, Decision, Sandbox, run_shell, unsandboxed_note,
};

/// The hooks a commit runs, in the order git runs them.
pub const PRE_COMMIT: &str = "pre-commit";
pub const PREPARE_COMMIT_MSG: &str = "prepare-commit-msg";
pub const COMMIT_MSG: &str = "commit-msg";
pub const POST_COMMIT: &str = "post-commit";
const COMMIT_HOOKS: [&str; 4] = [PRE_COMMIT, PREPARE_COMMIT_MSG, COMMIT_MSG, POST_COMMIT];

/// Lines of a failed hook's output the user is shown.
const SHOWN_LINES: usize = 12;

/// Why a hook stopped the commit.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("the {hook} hook failed ({status}){}", shown_output(output))]
    Failed {
        hook: &'static str,
        status: String,
        output: String,
    },
    #[error("running the commit hooks ({hooks}) was refused: {reason}")]
    Refused { hooks: String, reason: String },
    #[error("the {hook} hook could not be run: {message}")]
    Unrunnable { hook: &'static str, message: String },
    #[error("the commit was stopped (cancelled)")]
    Cancelled,
}

/// `; its output ended with:` and the last lines of `output`, or nothing when it is empty.
fn shown_output(output: &str) -> String {
    let lines: Vec<&str> = output
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    if lines.is_empty() {
        return String::new();
    }
    let last = &lines[lines.len().saturating_sub(SHOWN_LINES)..];
    format!("; its output ended with:\n{}", last.join("\n"))
}

/// Where and how the hooks of one commit run.
pub struct CommitHooks {
    pub sandbox: Arc<Sandbox>,
    /// The project root: what the sandbox lets the hooks write, and where they start.
    pub root: PathBuf,
    pub timeout: Duration,
    /// Asked before hooks run unsandboxed.
    pub approver: Arc<dyn crate::tools::Approver>,
    /// The loop the commit is for (its approval request names it).
    pub loop_id: String,
    /// The phase, for the approval request's words.
    pub phase: String,
    pub cancel: CancellationToken,
}

impl CommitHooks {
    /// The commit hooks the repository has (core.hooksPath honoured): executable files.
    pub async fn present(git: &Git) -> Result<Vec<&'static str>, GitError> {
        let mut args = vec!["rev-parse".to_owned()];
        for hook in COMMIT_HOOKS {
            args.push("--git-path".to_owned());
            args.push(format!("hooks/{hook}"));
        }
        // Hooks allowed only so the user's core.hooksPath is read: rev-parse runs none.
        let output = git.command(&args).with_hooks().output().await?;
        let paths = String::from_utf8_lossy(&output.stdout).into_owned();
        Ok(COMMIT_HOOKS
            .into_iter()
            .zip(paths.lines())
            .filter(|(_, path)| is_executable(&git.work_tree().join(path)))
            .map(|(hook, _)| hook)
            .collect())
    }

    /// Asks the user before `hooks` run, when nothing confines them.
    pub async fn approve(&self, hooks: &[&'static str]) -> Result<(), HookError> {
        if self.sandbox.is_confined() || hooks.is_empty() {
            return Ok(());
        }
        let listed = hooks.join(", ");
        let request = ApprovalRequest {
            loop_id: self.loop_id.clone(),
            kind: ChangeKind::Command,
            tool: "commit hooks",
            subject: format!("git hook run {listed}"),
            detail: format!(
                "$ git hook run {listed}\n(the repository's commit hooks, for the commit of \
                 phase {}; they may run code the phase wrote){}",
                self.phase,
                unsandboxed_note(&self.sandbox)
            ),
        };
        match self.approver.decide(request, &self.cancel).await {
            Some(Decision::Accept | Decision::AcceptAllOfKind) => Ok(()),
            Some(Decision::Reject(reason)) => Err(HookError::Refused {
                hooks: listed,
                reason: if reason.trim().is_empty() {
                    "no reason given".to_owned()
                } else {
                    reason
                },
            }),
            None => Err(HookError::Cancelled),
        }
    }

    /// Runs `hook` with `index` as git's index (`None`: the repository's own).
    pub async fn run(&self, hook: &'static str, index: Option<&Path>) -> Result<(), HookError> {
        let script = format!(
            "{}git hook run --ignore-missing {hook}",
            index_assignment(index)
        );
        self.shell(hook, &script).await.map(drop)
    }

    /// Runs the message hook `hook` on `message_file` (which the host wrote, and the hook
    /// may not write: it edits a copy in its own /tmp); returns the message it leaves.
    pub async fn run_on_message(
        &self,
        hook: &'static str,
        message_file: &Path,
        index: &Path,
    ) -> Result<String, HookError> {
        let source = if hook == PREPARE_COMMIT_MSG {
            " message"
        } else {
            ""
        };
        let script = format!(
            "f=$(mktemp) && cat {} > \"$f\" && {}git hook run --ignore-missing {hook} -- \"$f\"{source} >&2 && cat \"$f\"",
            quoted(message_file),
            index_assignment(Some(index))
        );
        let output = self.shell(hook, &script).await?;
        if output.stdout.contains(" bytes left out ...]") {
            return Err(HookError::Unrunnable {
                hook,
                message: "it made the commit message too long".to_owned(),
            });
        }
        Ok(output.stdout)
    }

    async fn shell(&self, hook: &'static str, script: &str) -> Result<CommandOutput, HookError> {
        let output = run_shell(
            script,
            &self.root,
            self.timeout,
            &self.cancel,
            &self.sandbox,
            &self.root,
        )
        .await
        .map_err(|err| match err {
            crate::tools::ToolError::Cancelled => HookError::Cancelled,
            err => HookError::Unrunnable {
                hook,
                message: err.to_string(),
            },
        })?;
        if output.succeeded() {
            return Ok(output);
        }
        Err(HookError::Failed {
            hook,
            status: output.status.clone(),
            output: format!("{}{}", output.stdout, output.stderr),
        })
    }
}

/// `GIT_INDEX_FILE=<index> ` for a shell command, or nothing.
fn index_assignment(index: Option<&Path>) -> String {
    index
        .map(|index| format!("GIT_INDEX_FILE={} ", quoted(index)))
        .unwrap_or_default()
}

/// `path` as one word of `sh`.
fn quoted(path: &Path) -> String {
    crate::tools::shell_word(&path.to_string_lossy())
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}
