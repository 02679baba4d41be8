//! What a command changed in the project: the project's files and their metadata before and
//! after it ran, so the files it wrote, created or deleted are recorded for the changes list
//! and undo like the files the writing tools change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::output::CommandOutput;
use super::shell::run_shell;
use super::{ProjectRoot, ReadBudget, ToolContext, ToolError, ToolPolicy, project_walker};

/// What reading the files one command changed (to tell later whether they still hold what it
/// left) may take in all: a command can leave any number of large, even sparse, files. Past
/// it, or once the loop is cancelled, files are told apart by their size and modification
/// time.
const READ_BUDGET_PER_COMMAND: u64 = 256 * 1024 * 1024;

/// Enough of a file's metadata to tell that it was written: a rewrite in place changes the
/// modification time, a replacement by rename the inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStat {
    pub size: u64,
    pub modified_ns: i128,
    pub changed_ns: i128,
    pub inode: u64,
}

impl FileStat {
    #[cfg(unix)]
    pub fn of(metadata: &std::fs::Metadata) -> FileStat {
        use std::os::unix::fs::MetadataExt;
        let nanos = |secs: i64, nsecs: i64| i128::from(secs) * 1_000_000_000 + i128::from(nsecs);
        FileStat {
            size: metadata.len(),
            modified_ns: nanos(metadata.mtime(), metadata.mtime_nsec()),
            changed_ns: nanos(metadata.ctime(), metadata.ctime_nsec()),
            inode: metadata.ino(),
        }
    }

    #[cfg(not(unix))]
    pub fn of(metadata: &std::fs::Metadata) -> FileStat {
        let modified_ns = metadata
            .modified()
            .ok()
            .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |since| since.as_nanos() as i128);
        FileStat {
            size: metadata.len(),
            modified_ns,
            changed_ns: 0,
            inode: 0,
        }
    }
}

/// The project's files as the tools see them (honouring .gitignore, never secret files):
/// relative path with `/` → absolute path and metadata.
#[derive(Clone, Debug, Default)]
pub struct TreeStats {
    pub files: BTreeMap<String, (PathBuf, FileStat)>,
}

/// A file whose metadata differs between two `TreeStats`.
#[derive(Clone, Debug, PartialEq)]
pub struct TreeChange {
    pub relative: String,
    pub path: PathBuf,
    /// Its metadata before; `None` when it did not exist.
    pub before: Option<FileStat>,
}

impl TreeStats {
    /// Walks the project, reading only metadata (of the files, never through a link), and
    /// stops when `cancel` is cancelled. Blocking: run it off the async threads.
    pub fn capture(
        root: &ProjectRoot,
        policy: &ToolPolicy,
        cancel: &CancellationToken,
    ) -> Result<TreeStats, ToolError> {
        let mut files = BTreeMap::new();
        for entry in project_walker(root, root.path(), None)?.filter_map(Result::ok) {
            if cancel.is_cancelled() {
                return Err(ToolError::Cancelled);
            }
            if !entry.file_type().is_some_and(|kind| kind.is_file())
                || policy.secret_pattern(entry.path()).is_some()
            {
                continue;
            }
            let Ok(metadata) = entry.metadata() else {
                continue;
            };
            files.insert(
                root.relative_display(entry.path()),
                (entry.path().to_path_buf(), FileStat::of(&metadata)),
            );
        }
        Ok(TreeStats { files })
    }

    /// The files created, changed or deleted between `self` and `after`, in path order.
    pub fn changes_to(&self, after: &TreeStats) -> Vec<TreeChange> {
        let mut changes: Vec<TreeChange> = after
            .files
            .iter()
            .filter(|(relative, (_, stat))| {
                self.files.get(*relative).map(|(_, before)| before) != Some(stat)
            })
            .map(|(relative, (path, _))| TreeChange {
                relative: relative.clone(),
                path: path.clone(),
                before: self.files.get(relative).map(|(_, stat)| *stat),
            })
            .collect();
        changes.extend(
            self.files
                .iter()
                .filter(|(relative, _)| !after.files.contains_key(*relative))
                .map(|(relative, (path, stat))| TreeChange {
                    relative: relative.clone(),
                    path: path.clone(),
                    before: Some(*stat),
                }),
        );
        changes.sort_by(|a, b| a.relative.cmp(&b.relative));
        changes
    }
}

/// Whether `relative` is `path` or below it.
fn is_at(relative: &str, path: &str) -> bool {
    relative
        .strip_prefix(path)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Runs `command` like `run_shell` and tells the context's journal every project file it
/// created, changed or deleted, also when it was killed or cancelled midway; not what
/// changed where the journal says others write.
pub async fn run_recorded(
    context: &ToolContext,
    command: &str,
    cwd: &Path,
    timeout: Duration,
) -> Result<CommandOutput, ToolError> {
    let before = tree_before_command(context).await?;
    let output = run_shell(
        command,
        cwd,
        timeout,
        &context.cancel,
        &context.policy.sandbox,
        context.root.path(),
    )
    .await;
    record_command_changes(context, before).await;
    output
}

/// The project's files before a command runs, to tell later what it changed; `None` when
/// they could not be listed (nothing is recorded then). A cancel ends the wait at once.
pub async fn tree_before_command(context: &ToolContext) -> Result<Option<TreeStats>, ToolError> {
    let listing = {
        let root = context.root.clone();
        let policy = context.policy.clone();
        let cancel = context.cancel.clone();
        tokio::task::spawn_blocking(move || TreeStats::capture(&root, &policy, &cancel))
    };
    // A cancel ends the wait at once, and the walk at its next file.
    let before = tokio::select! {
        biased;
        _ = context.cancel.cancelled() => return Err(ToolError::Cancelled),
        listed = listing => listed,
    };
    match before {
        Ok(Ok(stats)) => Ok(Some(stats)),
        failed => {
            // Without a "before", every file would look created by the command, and undo
            // would remove them: better to record nothing.
            tracing::warn!(
                ?failed,
                "listing the project before a command; its changes are not recorded"
            );
            Ok(None)
        }
    }
}

/// Tells the context's journal every project file created, changed or deleted since
/// `before` (`tree_before_command`), and brings open buffers of them up to date.
pub async fn record_command_changes(context: &ToolContext, before: Option<TreeStats>) {
    record_changes_since(context, before).await;
}

/// `record_command_changes`, returning the project's files as they were found: the "before"
/// of whatever comes next, so that nothing between the two goes unrecorded.
pub async fn record_changes_since(
    context: &ToolContext,
    before: Option<TreeStats>,
) -> Option<TreeStats> {
    let before = before?;
    let journal = context.journal.clone();
    let root = context.root.clone();
    let policy = context.policy.clone();
    let budget = ReadBudget::new(READ_BUDGET_PER_COMMAND, context.cancel.clone());
    // Recorded even after a cancel, so that undo knows what the command did: the walk
    // reads only metadata, and a cancel leaves the files' contents unread (the budget).
    let recorded = tokio::task::spawn_blocking(move || {
        let after = TreeStats::capture(&root, &policy, &CancellationToken::new())?;
        // Asked after the walk: an export that wrote during it is then in its record.
        let others = journal.others_paths();
        let changes: Vec<TreeChange> = before
            .changes_to(&after)
            .into_iter()
            .filter(|change| !others.iter().any(|other| is_at(&change.relative, other)))
            .collect();
        for change in &changes {
            journal.command_changed(&root, &change.relative, change.before, &budget);
        }
        let changed = changes
            .into_iter()
            .filter(|change| after.files.contains_key(&change.relative))
            .map(|change| change.path)
            .collect::<Vec<_>>();
        Ok::<_, ToolError>((changed, after))
    })
    .await;
    match recorded {
        // Open buffers of what the command changed catch up now, not at the user's next
        // `:write` (which would prompt, or overwrite the command's work).
        Ok(Ok((changed, after))) => {
            context.buffers.reload(&changed).await;
            Some(after)
        }
        failed => {
            tracing::warn!(?failed, "recording what a command changed");
            None
        }
    }
}
