//! A commit of exactly the files one phase changed (`commit = "phase"`), on the branch HEAD
//! is on, without touching the user's other edits or what the user staged:
//!
//! 1. a temporary index, seeded from HEAD, takes the phase's files as the working tree holds
//!    them (created, modified, deleted). It lives in the repository's git directory, not in
//!    Loopr's state: the sandboxed hooks must read it, and the sandbox hides a state
//!    directory under /tmp behind its private /tmp;
//! 2. the user's commit hooks run on it (`hooks.rs`: sandboxed, or approved);
//! 3. git writes the tree and the commit from the host, hooks off, as the user (their
//!    configured identity);
//! 4. HEAD's branch moves to it only if it is still where it was (compare and swap, with a
//!    reflog message as git's), so a HEAD the user moved meanwhile is never overwritten;
//! 5. the user's index takes the committed files' new entries, every other entry as it was.
//!
//! Never a push, never another ref. No commit on a detached HEAD or while a merge, rebase,
//! cherry-pick or revert is under way: the changes stay, and the outcome says why.

mod hooks;
mod message;

use std::path::{Path, PathBuf};

pub use hooks::{CommitHooks, HookError};
pub use message::{CommitMessage, MetRequirement};

use crate::git::{Git, GitCommand, GitError};

/// Operations under way that a commit must not cut into: the file git keeps while each
/// lasts, and its name.
const IN_PROGRESS: [(&str, &str); 5] = [
    ("MERGE_HEAD", "merge"),
    ("rebase-merge", "rebase"),
    ("rebase-apply", "rebase"),
    ("CHERRY_PICK_HEAD", "cherry-pick"),
    ("REVERT_HEAD", "revert"),
];

/// Variables naming the user's identity, passed to git when the user set them.
const IDENTITY_VARIABLES: [&str; 5] = [
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "EMAIL",
];

/// One phase's commit, asked for.
pub struct PhaseCommit<'a> {
    pub git: &'a Git,
    /// The project root (canonical): the files are relative to it.
    pub root: &'a Path,
    /// The files the phase changed, relative to the root (`Baseline::changed_files`).
    pub files: &'a [String],
    pub message: &'a CommitMessage,
    /// The name of the directory in the git directory that holds the temporary index and
    /// message while the commit is made (`loopr-commit-<loop id>`); removed after.
    pub scratch: &'a str,
}

/// What became of the phase's changes.
#[derive(Debug)]
pub enum CommitOutcome {
    Committed {
        /// The new commit's full and abbreviated hash.
        commit: String,
        short: String,
        /// What went wrong after the commit was recorded (a post-commit hook, the update of
        /// the user's index), for the user to know.
        afterwards: Vec<String>,
    },
    /// The phase's files hold what HEAD holds: there is nothing to commit.
    NothingToCommit,
    NotCommitted(NotCommitted),
}

/// Why the phase's changes were left uncommitted.
#[derive(Debug, thiserror::Error)]
pub enum NotCommitted {
    #[error("HEAD is detached (on no branch)")]
    Detached,
    #[error("a {0} is in progress")]
    InProgress(&'static str),
    #[error(
        "HEAD moved while the commit was being made (it was {was}, it is now {now}); the \
         commit was not recorded, so nothing of yours was overwritten"
    )]
    HeadMoved { was: String, now: String },
    #[error(
        "git has no identity to commit as; set yours with git config --global user.name \
         \"Your Name\" and git config --global user.email you@example.com (git said: {0})"
    )]
    NoIdentity(String),
    #[error(transparent)]
    Hook(#[from] HookError),
    #[error("the commit-msg hook left the message empty")]
    EmptyMessage,
    #[error("the project is not inside the repository's work tree ({0})")]
    Outside(String),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("writing {path}: {source}")]
    Scratch {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl PhaseCommit<'_> {
    /// Commits the phase's files, running `hooks`; the working tree is never changed.
    pub async fn commit(&self, hooks: &CommitHooks) -> CommitOutcome {
        let scratch = match self.git_dir().await {
            Ok(git_dir) => git_dir.join(self.scratch),
            Err(err) => return CommitOutcome::NotCommitted(err.into()),
        };
        let outcome = self.commit_with(hooks, &scratch).await;
        // What a failed call left (an index lock) would stop the next phase's commit.
        let _ = std::fs::remove_dir_all(&scratch);
        match outcome {
            Ok(outcome) => outcome,
            Err(why) => CommitOutcome::NotCommitted(why),
        }
    }

    async fn commit_with(
        &self,
        hooks: &CommitHooks,
        scratch: &Path,
    ) -> Result<CommitOutcome, NotCommitted> {
        let index = &scratch.join("index");
        let git = self.git;
        let (success, _) = git
            .command(["symbolic-ref", "-q", "HEAD"])
            .checked_output()
            .await?;
        if !success {
            return Err(NotCommitted::Detached);
        }
        if let Some(operation) = self.in_progress().await? {
            return Err(NotCommitted::InProgress(operation));
        }
        let head = self.head().await?;
        let files = self.files_in_work_tree().await?;
        let _ = std::fs::remove_dir_all(scratch);
        std::fs::create_dir_all(scratch).map_err(|source| NotCommitted::Scratch {
            path: scratch.to_owned(),
            source,
        })?;
        let seed = match &head {
            Some(head) => vec!["read-tree".to_owned(), head.clone()],
            None => vec!["read-tree".to_owned(), "--empty".to_owned()],
        };
        with_index(git.command(seed), index).output().await?;
        with_index(
            git.command(["update-index", "--add", "--remove", "-z", "--stdin"])
                .with_filters(),
            index,
        )
        .stdin(nul_separated(&files))
        .output()
        .await?;
        if self.tree(index).await? == self.head_tree(head.as_deref()).await? {
            return Ok(CommitOutcome::NothingToCommit);
        }
        self.identity().await?;

        let present = CommitHooks::present(git).await?;
        hooks.approve(&present).await?;
        if present.contains(&hooks::PRE_COMMIT) {
            hooks.run(hooks::PRE_COMMIT, Some(index)).await?;
        }
        let mut text = self.message.text.clone();
        for hook in [hooks::PREPARE_COMMIT_MSG, hooks::COMMIT_MSG] {
            if present.contains(&hook) {
                let file = scratch.join("message");
                std::fs::write(&file, &text).map_err(|source| NotCommitted::Scratch {
                    path: file.clone(),
                    source,
                })?;
                text = hooks.run_on_message(hook, &file, index).await?;
            }
        }
        let text = self.stripped(text).await?;
        // Written after the hooks: a pre-commit hook run unsandboxed may have added to it.
        let tree = self.tree(index).await?;

        let mut commit_tree = vec!["commit-tree".to_owned(), tree];
        if let Some(head) = &head {
            commit_tree.extend(["-p".to_owned(), head.clone()]);
        }
        let written = identity(git.command(commit_tree).signed())
            .stdin(text.into_bytes())
            .output()
            .await
            .map_err(no_identity)?;
        let commit = String::from_utf8_lossy(&written.stdout).trim().to_owned();

        let reflog = match head {
            Some(_) => format!("commit: {}", self.message.title),
            None => format!("commit (initial): {}", self.message.title),
        };
        let old = head.clone().unwrap_or_default();
        let moved = git
            .command(["update-ref", "-m", &reflog, "HEAD", &commit, &old])
            .output()
            .await;
        if let Err(err) = moved {
            let now = self.head().await.ok().flatten();
            if now != head {
                return Err(NotCommitted::HeadMoved {
                    was: short_or_none(head.as_deref()),
                    now: short_or_none(now.as_deref()),
                });
            }
            return Err(err.into());
        }

        let mut afterwards = Vec::new();
        let reset = git
            .command([
                "--literal-pathspecs",
                "reset",
                "-q",
                "--pathspec-from-file=-",
                "--pathspec-file-nul",
                &commit,
            ])
            .stdin(nul_separated(&files))
            .output()
            .await;
        if let Err(err) = reset {
            afterwards.push(format!(
                "your index still shows the committed files as before the commit ({err})"
            ));
        }
        if present.contains(&hooks::POST_COMMIT)
            && let Err(err) = hooks.run(hooks::POST_COMMIT, None).await
        {
            afterwards.push(err.to_string());
        }
        let short = self.short(&commit).await;
        Ok(CommitOutcome::Committed {
            commit,
            short,
            afterwards,
        })
    }

    async fn git_dir(&self) -> Result<PathBuf, GitError> {
        let output = self
            .git
            .command(["rev-parse", "--absolute-git-dir"])
            .output()
            .await?;
        Ok(PathBuf::from(
            String::from_utf8_lossy(&output.stdout).trim_end_matches('\n'),
        ))
    }

    /// The operation under way that a commit must not cut into, if any.
    async fn in_progress(&self) -> Result<Option<&'static str>, GitError> {
        let mut args = vec!["rev-parse".to_owned()];
        for (file, _) in IN_PROGRESS {
            args.extend(["--git-path".to_owned(), file.to_owned()]);
        }
        let output = self.git.command(&args).output().await?;
        let paths = String::from_utf8_lossy(&output.stdout).into_owned();
        Ok(IN_PROGRESS
            .into_iter()
            .zip(paths.lines())
            .find(|(_, path)| self.git.work_tree().join(path).exists())
            .map(|((_, operation), _)| operation))
    }

    /// The commit HEAD points at; `None` on a branch with no commit yet.
    async fn head(&self) -> Result<Option<String>, GitError> {
        let (found, output) = self
            .git
            .command(["rev-parse", "-q", "--verify", "HEAD^{commit}"])
            .checked_output()
            .await?;
        let hash = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        Ok((found && !hash.is_empty()).then_some(hash))
    }

    async fn head_tree(&self, head: Option<&str>) -> Result<String, GitError> {
        let Some(head) = head else {
            // The empty tree: what an unborn branch holds.
            let output = self
                .git
                .command(["hash-object", "-t", "tree", "--stdin"])
                .stdin(Vec::new())
                .output()
                .await?;
            return Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned());
        };
        let output = self
            .git
            .command(["rev-parse", &format!("{head}^{{tree}}")])
            .output()
            .await?;
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    async fn tree(&self, index: &Path) -> Result<String, GitError> {
        let output = with_index(self.git.command(["write-tree"]), index)
            .output()
            .await?;
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// The phase's files relative to the top of the work tree, less those git ignores
    /// (a file git tracks is never ignored).
    async fn files_in_work_tree(&self) -> Result<Vec<String>, NotCommitted> {
        let top = self
            .git
            .work_tree()
            .canonicalize()
            .unwrap_or_else(|_| self.git.work_tree().to_owned());
        let prefix = self
            .root
            .strip_prefix(&top)
            .map_err(|_| NotCommitted::Outside(self.root.display().to_string()))?;
        let files: Vec<String> = self
            .files
            .iter()
            .map(|file| {
                let joined = prefix.join(file);
                joined.to_string_lossy().replace('\\', "/")
            })
            .collect();
        let (_, ignored) = self
            .git
            .command(["check-ignore", "-z", "--stdin"])
            .stdin(nul_separated(&files))
            .checked_output()
            .await?;
        let ignored: Vec<&[u8]> = ignored
            .stdout
            .split(|byte| *byte == 0)
            .filter(|path| !path.is_empty())
            .collect();
        Ok(files
            .into_iter()
            .filter(|file| !ignored.contains(&file.as_bytes()))
            .collect())
    }

    /// Fails with git's words when no identity is configured.
    async fn identity(&self) -> Result<(), NotCommitted> {
        for variable in ["GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT"] {
            identity(self.git.command(["var", variable]))
                .output()
                .await
                .map_err(no_identity)?;
        }
        Ok(())
    }

    /// The message as `git commit` leaves one given with `-m`: trailing white space and
    /// surplus blank lines gone.
    async fn stripped(&self, text: String) -> Result<String, NotCommitted> {
        let output = self
            .git
            .command(["stripspace"])
            .stdin(text.into_bytes())
            .output()
            .await?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        if text.trim().is_empty() {
            return Err(NotCommitted::EmptyMessage);
        }
        Ok(text)
    }

    async fn short(&self, commit: &str) -> String {
        match self
            .git
            .command(["rev-parse", "--short", commit])
            .output()
            .await
        {
            Ok(output) => String::from_utf8_lossy(&output.stdout).trim().to_owned(),
            Err(_) => commit.chars().take(7).collect(),
        }
    }
}

fn with_index(command: GitCommand, index: &Path) -> GitCommand {
    command.env("GIT_INDEX_FILE", index)
}

/// A call that names the author: only an identity the user configured (or set in these
/// variables) counts, never one guessed from the host's name.
fn identity(mut command: GitCommand) -> GitCommand {
    command = command
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "user.useConfigOnly")
        .env("GIT_CONFIG_VALUE_0", "true");
    for variable in IDENTITY_VARIABLES {
        if let Some(value) = std::env::var_os(variable) {
            command = command.env(variable, value);
        }
    }
    command
}

/// A failed identity lookup as `NoIdentity`, any other failure as it is.
fn no_identity(err: GitError) -> NotCommitted {
    match &err {
        GitError::Failed { stderr, .. }
            if stderr.contains("auto-detection is disabled")
                || stderr.contains("identity unknown")
                || stderr.contains("empty ident") =>
        {
            NotCommitted::NoIdentity(last_line(stderr))
        }
        _ => err.into(),
    }
}

fn last_line(text: &str) -> String {
    text.lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or_default()
        .trim()
        .to_owned()
}

fn short_or_none(hash: Option<&str>) -> String {
    match hash {
        Some(hash) => hash.chars().take(7).collect(),
        None => "no commit".to_owned(),
    }
}

fn nul_separated(files: &[String]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for file in files {
        bytes.extend_from_slice(file.as_bytes());
        bytes.push(0);
    }
    bytes
}

#[cfg(test)]
mod tests;
