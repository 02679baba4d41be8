//! What a code loop changed, so the user can review every change (one entry per hunk) and
//! undo exactly those. Two records under the loop's directory: the baseline, a snapshot of
//! the project when the loop started (a manifest of its files, honouring .gitignore and never
//! secret files, with their metadata and their contents by hash), and the ledger, which the
//! loop's tools keep: per file they changed, what it held before the loop's first change and
//! what the loop left. Files the loop never touched are never listed or restored, and a file
//! the user changed after the loop did is restored only when the user says so; so is a file
//! first changed by a command, since the user may have saved it while the command ran, and a
//! file a coding agent's own tools wrote behind the protocol (`written_by_agent`): its turn
//! is watched like a command, for minutes, while the user may go on editing and saving, so
//! "unchanged since the turn" cannot tell the agent's write from a save made during it. A
//! plain undo then names the agent and leaves the file; a forced undo restores it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

mod changed_files;
mod file_diffs;
mod file_state;
mod undo_report;

pub use file_diffs::FileDiff;
pub(crate) use file_state::{current_state, hash_of, what_is_at};
pub use undo_report::{SkipReason, UndoReport};

use crate::store::{make_durable, write_atomic, write_atomic_keeping_mode, write_atomic_unsynced};
use crate::tools::{
    BufferCheck, BufferEdit, ChangeJournal, FileStat, OpenBuffers, ProjectRoot, ReadBudget,
    ToolError, ToolPolicy, TreeStats, bounded_line_diff, read_regular,
};
use file_state::{Found, found_at};

/// Files larger than this are listed but not copied; they cannot be restored.
const MAX_SNAPSHOT_FILE: u64 = 2 * 1024 * 1024;
/// Files larger than this are not read to be compared (changes list) or restored through an
/// open buffer (undo).
const MAX_COMPARED_FILE: u64 = 8 * 1024 * 1024;
/// Files larger than this are told apart by size and modification time, not content.
const MAX_HASHED_FILE: u64 = 16 * 1024 * 1024;
/// How a fingerprint by size and modification time starts (a content hash is hex digits).
const STAT_FINGERPRINT: &str = "stat:";

#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    #[error("baseline {path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error("the code loop has no baseline yet (it has not started)")]
    Missing,
    #[error("cancelled")]
    Cancelled,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Manifest {
    /// Relative path → content hash, or `None` when too large to keep.
    files: BTreeMap<String, Option<String>>,
    /// Relative path → metadata when recorded, to tell later whether a file is still as it
    /// was then.
    #[serde(default)]
    stats: BTreeMap<String, FileStat>,
}

/// What a file held before the loop first changed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "hash")]
enum Before {
    /// It did not exist.
    Absent,
    /// This content, kept as a blob.
    Stored(String),
    /// A command changed it after someone else had (or it was too large to keep): what it
    /// held is unknown, so it cannot be restored.
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct LedgerEntry {
    before: Before,
    /// What the loop left (see `fingerprint`); `None` when it deleted the file.
    after: Option<String>,
    /// The loop first changed the file through a command, so it is known only that the file
    /// changed while the command ran: the user may have saved it meanwhile, and "what the loop
    /// left" may be the user's work.
    #[serde(default)]
    by_command: bool,
    /// The coding agent whose turn it was when a command-like change was seen (its own tools
    /// wrote behind the protocol); `None` for Loopr's own tools and commands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    agent: Option<String>,
}

impl LedgerEntry {
    /// Why a plain undo leaves the file though unchanged since the loop changed it.
    fn unsure(&self) -> Option<SkipReason> {
        match (&self.agent, self.by_command) {
            (Some(agent), _) => Some(SkipReason::WrittenByAgent(agent.clone())),
            (None, true) => Some(SkipReason::ChangedDuringCommand),
            (None, false) => None,
        }
    }
}

/// Relative path → the loop's change of that file.
type Ledger = BTreeMap<String, LedgerEntry>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeStatus {
    Added,
    Modified,
    Deleted,
}

impl ChangeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeStatus::Added => "added",
            ChangeStatus::Modified => "modified",
            ChangeStatus::Deleted => "deleted",
        }
    }
}

/// One changed region of one file.
#[derive(Clone, Debug, PartialEq)]
pub struct ChangedHunk {
    pub path: PathBuf,
    pub status: ChangeStatus,
    /// Zero-based line in the current file where the hunk starts.
    pub line: u32,
    /// `@@ -a,b +c,d @@` and the first changed line.
    pub summary: String,
}

/// One file of an undo, as planned from the ledger.
enum UndoAction {
    /// Already holds what it held before; only the ledger entry goes.
    AlreadyUndone,
    Restore {
        /// What it holds now, when it exists and is small enough to restore through an open
        /// buffer.
        current: Option<Vec<u8>>,
        /// `None`: the loop created it, so it is removed.
        before: Option<Vec<u8>>,
        changed_since: bool,
        /// Why a plain undo leaves it though unchanged since: a command or a coding agent
        /// first changed it, and the user may have saved it meanwhile.
        unsure: Option<SkipReason>,
    },
    Skip(SkipReason),
}

struct UndoStep {
    relative: String,
    path: PathBuf,
    action: UndoAction,
}

/// Where others write in the project while a loop runs (the plan's export), relative to the
/// root with `/`: asked after each command, since an export may come at any time.
pub type OthersPaths = Arc<dyn Fn() -> Vec<String> + Send + Sync>;

#[derive(Clone)]
pub struct Baseline {
    dir: PathBuf,
    others: Option<OthersPaths>,
    /// The coding agent whose turn the changes `command_changed` records are made in.
    agent: Option<String>,
}

impl Baseline {
    pub fn at(loop_dir: &Path) -> Baseline {
        Baseline {
            dir: loop_dir.join("baseline"),
            others: None,
            agent: None,
        }
    }

    /// This baseline, recording what changes around a turn of coding agent `agent` as its
    /// own tools' writes.
    pub fn written_by_agent(self, agent: &str) -> Baseline {
        Baseline {
            agent: Some(agent.to_owned()),
            ..self
        }
    }

    /// This baseline, not counting as the loop's what its commands change at `others`.
    pub fn excluding(self, others: OthersPaths) -> Baseline {
        Baseline {
            others: Some(others),
            ..self
        }
    }

    pub fn exists(&self) -> bool {
        self.dir.join("manifest.json").exists()
    }

    /// Records the project as it is now, stopping (with nothing recorded) at a cancel of
    /// `cancel`. The copies of the files are not synced one by one: a copy is checked, and
    /// made durable, when the ledger first comes to depend on it (`durable_blob`). Blocking:
    /// run it off the async threads.
    pub fn record(
        &self,
        root: &ProjectRoot,
        policy: &ToolPolicy,
        cancel: &CancellationToken,
    ) -> Result<(), BaselineError> {
        let mut manifest = Manifest::default();
        let tree = TreeStats::capture(root, policy, cancel).map_err(|err| match err {
            ToolError::Cancelled => BaselineError::Cancelled,
            err => BaselineError::Io {
                path: root.path().to_path_buf(),
                message: err.to_string(),
            },
        })?;
        for (relative, (path, stat)) in tree.files {
            if cancel.is_cancelled() {
                return Err(BaselineError::Cancelled);
            }
            manifest.stats.insert(relative.clone(), stat);
            // Too large, or no longer a regular file: listed, not restorable.
            let Ok(bytes) = read_regular(root, &path, MAX_SNAPSHOT_FILE) else {
                manifest.files.insert(relative, None);
                continue;
            };
            let hash = hash_of(&bytes);
            let blob = self.blob(&hash);
            if !blob.exists() {
                write_atomic_unsynced(&blob, &bytes).map_err(|err| self.io_error(&blob, err))?;
            }
            manifest.files.insert(relative, Some(hash));
        }
        let json = serde_json::to_vec(&manifest).map_err(|err| self.io_error(&self.dir, err))?;
        let path = self.dir.join("manifest.json");
        write_atomic(&path, &json).map_err(|err| self.io_error(&path, err))
    }

    /// Every hunk the loop's changes make, file by file in path order: each file the loop
    /// changed, compared with what it held before the loop's first change. What is now in a
    /// file's place is looked at without following a link, and read only up to a bound.
    /// Blocking.
    pub fn changes(&self, root: &ProjectRoot) -> Result<Vec<ChangedHunk>, BaselineError> {
        self.manifest()?;
        let mut hunks = Vec::new();
        for (relative, entry) in self.ledger() {
            let path = root.path().join(&relative);
            let status_if_there = match entry.before {
                Before::Absent => ChangeStatus::Added,
                _ => ChangeStatus::Modified,
            };
            let hunk = |status: ChangeStatus, summary: String| ChangedHunk {
                path: path.clone(),
                status,
                line: 0,
                summary,
            };
            match (&entry.before, found_at(root, &path)) {
                (Before::Absent, Found::Absent) => {}
                (_, Found::Absent) => {
                    hunks.push(hunk(ChangeStatus::Deleted, "deleted".to_owned()));
                }
                (_, Found::Other(what)) => hunks.push(hunk(status_if_there, what)),
                (_, Found::TooLarge(size)) => hunks.push(hunk(
                    status_if_there,
                    format!("{size} bytes, too large to compare"),
                )),
                (Before::Absent, Found::File(now)) => hunks.push(hunk(
                    ChangeStatus::Added,
                    first_line(&String::from_utf8_lossy(&now)),
                )),
                (Before::Stored(hash), Found::File(now)) if *hash != hash_of(&now) => {
                    match self.read_blob(hash) {
                        Ok(old) => hunks.extend(diff_hunks(
                            &path,
                            &String::from_utf8_lossy(&old),
                            &String::from_utf8_lossy(&now),
                        )),
                        Err(err) => hunks.push(hunk(
                            ChangeStatus::Modified,
                            format!("what it held before is lost from the baseline: {err}"),
                        )),
                    }
                }
                (Before::Stored(_), Found::File(_)) => {}
                (Before::Unknown, Found::File(_)) => hunks.push(hunk(
                    ChangeStatus::Modified,
                    "changed by a command; what it held before is unknown".to_owned(),
                )),
            }
        }
        Ok(hunks)
    }

    /// Undoes the loop's changes: every file the loop changed goes back to what it held
    /// before (files it created are removed), through the editor's buffer when the file is
    /// open there. A file changed since the loop changed it is left alone unless `force`; a
    /// file open with unsaved changes always is. Every path is confined to the root as
    /// tools' writes are. What is undone leaves the ledger, so the changes list no longer
    /// shows it.
    pub async fn undo(
        &self,
        root: &ProjectRoot,
        buffers: &dyn OpenBuffers,
        force: bool,
    ) -> Result<UndoReport, BaselineError> {
        let steps = {
            let baseline = self.clone();
            let root = root.clone();
            blocking(move || baseline.plan_undo(&root)).await??
        };
        let mut report = UndoReport::default();
        let mut undone = Vec::new();
        for step in steps {
            let (current, before) = match step.action {
                UndoAction::AlreadyUndone => {
                    undone.push(step.relative);
                    continue;
                }
                UndoAction::Skip(reason) => {
                    report.skipped.push((step.path, reason));
                    continue;
                }
                UndoAction::Restore {
                    changed_since: true,
                    ..
                } if !force => {
                    report.skipped.push((step.path, SkipReason::ChangedSince));
                    continue;
                }
                UndoAction::Restore {
                    unsure: Some(reason),
                    ..
                } if !force => {
                    report.skipped.push((step.path, reason));
                    continue;
                }
                UndoAction::Restore {
                    current, before, ..
                } => (current, before),
            };
            match restore_file(&step.path, current, before, buffers).await {
                Ok(true) => {
                    report.restored.push(step.path);
                    undone.push(step.relative);
                }
                Ok(false) => report.skipped.push((step.path, SkipReason::UnsavedBuffer)),
                Err(err) => {
                    report
                        .skipped
                        .push((step.path, SkipReason::Unrestorable(err.to_string())));
                }
            }
        }
        let baseline = self.clone();
        blocking(move || baseline.forget(&undone)).await??;
        Ok(report)
    }

    /// What undo would do with each file of the ledger. Blocking.
    fn plan_undo(&self, root: &ProjectRoot) -> Result<Vec<UndoStep>, BaselineError> {
        self.manifest()?;
        let mut steps = Vec::new();
        for (relative, entry) in self.ledger() {
            let Ok(path) = root.resolve_for_write(&relative) else {
                steps.push(UndoStep {
                    path: root.path().join(&relative),
                    relative,
                    action: UndoAction::Skip(SkipReason::Unrestorable(
                        "its path now leads outside the project or into .git".to_owned(),
                    )),
                });
                continue;
            };
            if path != root.path().join(&relative) {
                // A directory on the way is now a link (inside the project): restoring through
                // it would write another file than the one the loop changed.
                steps.push(UndoStep {
                    path,
                    relative,
                    action: UndoAction::Skip(SkipReason::Unrestorable(
                        "its path now goes through a symbolic link, which Loopr does not follow"
                            .to_owned(),
                    )),
                });
                continue;
            }
            let current = match current_state(root, &path, entry.after.as_deref()) {
                Ok(current) => current,
                Err(err) => {
                    steps.push(UndoStep {
                        path,
                        relative,
                        action: UndoAction::Skip(SkipReason::Unrestorable(format!("it {err}"))),
                    });
                    continue;
                }
            };
            let before = match &entry.before {
                Before::Absent => None,
                Before::Stored(hash) => match self.read_blob(hash) {
                    Ok(bytes) => Some(bytes),
                    Err(err) => {
                        steps.push(UndoStep {
                            path,
                            relative,
                            action: UndoAction::Skip(SkipReason::Unrestorable(format!(
                                "its earlier content is lost from the baseline: {err}"
                            ))),
                        });
                        continue;
                    }
                },
                Before::Unknown => {
                    steps.push(UndoStep {
                        path,
                        relative,
                        action: UndoAction::Skip(SkipReason::Unrestorable(
                            "a command changed it and what it held before is unknown".to_owned(),
                        )),
                    });
                    continue;
                }
            };
            let already_undone = match (&current.fingerprint, &before) {
                (None, None) => true,
                (Some(_), Some(before)) => current.bytes.as_ref() == Some(before),
                _ => false,
            };
            let action = if already_undone {
                UndoAction::AlreadyUndone
            } else {
                UndoAction::Restore {
                    changed_since: current.fingerprint != entry.after,
                    unsure: entry.unsure(),
                    current: current.bytes,
                    before,
                }
            };
            steps.push(UndoStep {
                relative,
                path,
                action,
            });
        }
        Ok(steps)
    }

    /// Drops the ledger entries of `relatives`. Blocking.
    fn forget(&self, relatives: &[String]) -> Result<(), BaselineError> {
        if relatives.is_empty() {
            return Ok(());
        }
        let mut ledger = self.ledger();
        for relative in relatives {
            ledger.remove(relative);
        }
        self.save_ledger(&ledger)
    }

    /// Each file the loop changed, with what the loop left there (`None`: it deleted it).
    pub fn touched(&self) -> Vec<(String, Option<String>)> {
        self.ledger()
            .into_iter()
            .map(|(relative, entry)| (relative, entry.after))
            .collect()
    }

    /// What the loop's first change of `relative` found there: `None` when the loop did not
    /// change it; else its bytes (`None`: it did not exist), or why they are not known.
    /// Blocking.
    pub fn before_of(&self, relative: &str) -> Option<Result<Option<Vec<u8>>, String>> {
        let entry = self.ledger().remove(relative)?;
        Some(match entry.before {
            Before::Absent => Ok(None),
            Before::Stored(hash) => self.read_blob(&hash).map(Some),
            Before::Unknown => {
                Err("a command changed it and what it held before is unknown".to_owned())
            }
        })
    }

    fn ledger(&self) -> Ledger {
        std::fs::read(self.dir.join("ledger.json"))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    fn save_ledger(&self, ledger: &Ledger) -> Result<(), BaselineError> {
        let path = self.dir.join("ledger.json");
        let json = serde_json::to_vec(ledger).map_err(|err| self.io_error(&path, err))?;
        write_atomic(&path, &json).map_err(|err| self.io_error(&path, err))
    }

    /// Records that the loop left `relative` as `after`, having found it as `before` if this
    /// is its first change of the file (made `by_command`, in a turn of `agent`, or by a
    /// tool). A file back to what it held before leaves the ledger.
    fn note_change(
        &self,
        relative: &str,
        before: impl FnOnce(&Baseline) -> Before,
        after: Option<String>,
        by_command: bool,
        agent: Option<String>,
    ) -> Result<(), BaselineError> {
        let mut ledger = self.ledger();
        // The first change decides: it is when `before` was taken, so a user's save during a
        // first change by a command stays unknown to the entry whatever the loop does later.
        let (before, by_command, agent) = match ledger.get(relative) {
            Some(entry) => (entry.before.clone(), entry.by_command, entry.agent.clone()),
            None => (before(self), by_command, agent),
        };
        let back_to_before = match (&before, &after) {
            (Before::Absent, None) => true,
            (Before::Stored(hash), Some(after)) => hash == after,
            _ => false,
        };
        if back_to_before {
            ledger.remove(relative);
        } else {
            ledger.insert(
                relative.to_owned(),
                LedgerEntry {
                    before,
                    after,
                    by_command,
                    agent,
                },
            );
        }
        self.save_ledger(&ledger)
    }

    /// Keeps `bytes` as a blob, durable before this returns (a ledger entry is about to
    /// name it); returns its name.
    fn store_blob(&self, bytes: &[u8]) -> Result<String, BaselineError> {
        let hash = hash_of(bytes);
        if !self.durable_blob(&hash) {
            let blob = self.blob(&hash);
            write_atomic(&blob, bytes).map_err(|err| self.io_error(&blob, err))?;
        }
        Ok(hash)
    }

    /// Whether the blob `hash` holds what its name says, made durable if so: the baseline's
    /// blobs are written without a sync each, so a power cut may have lost or cut one.
    fn durable_blob(&self, hash: &str) -> bool {
        let blob = self.blob(hash);
        self.read_blob(hash).is_ok() && make_durable(&blob).is_ok()
    }

    /// The content of the blob `hash`, checked against its name.
    fn read_blob(&self, hash: &str) -> Result<Vec<u8>, String> {
        // Loopr's own state: only ever the blobs it wrote, of bounded size.
        let bytes = std::fs::read(self.blob(hash)).map_err(|err| err.to_string())?;
        if hash_of(&bytes) == hash {
            Ok(bytes)
        } else {
            Err("the copy does not hold what it held when it was made".to_owned())
        }
    }

    fn blob(&self, hash: &str) -> PathBuf {
        self.dir.join("blobs").join(hash)
    }

    fn manifest(&self) -> Result<Manifest, BaselineError> {
        let path = self.dir.join("manifest.json");
        let bytes = std::fs::read(&path).map_err(|_| BaselineError::Missing)?;
        serde_json::from_slice(&bytes).map_err(|err| self.io_error(&path, err))
    }

    fn io_error(&self, path: &Path, err: impl std::fmt::Display) -> BaselineError {
        BaselineError::Io {
            path: path.to_path_buf(),
            message: err.to_string(),
        }
    }
}

// Tools of one loop run one at a time, so the ledger's read-modify-write does not race.
impl ChangeJournal for Baseline {
    fn others_paths(&self) -> Vec<String> {
        self.others
            .as_ref()
            .map(|others| others())
            .unwrap_or_default()
    }

    fn tool_changed(&self, relative: &str, before: Option<&[u8]>, after: &[u8]) {
        let noted = self.note_change(
            relative,
            |baseline| match before {
                None => Before::Absent,
                Some(bytes) => baseline
                    .store_blob(bytes)
                    .map_or(Before::Unknown, Before::Stored),
            },
            Some(hash_of(after)),
            false,
            None,
        );
        if let Err(err) = noted {
            tracing::warn!(error = %err, relative, "recording a tool's change for undo");
        }
    }

    fn command_changed(
        &self,
        root: &ProjectRoot,
        relative: &str,
        before: Option<FileStat>,
        budget: &ReadBudget,
    ) {
        let after = match what_is_at(root, &root.path().join(relative), budget) {
            Ok(after) => after,
            Err(err) => {
                tracing::warn!(error = %err, relative, "looking at a file a command changed");
                return;
            }
        };
        let noted = self.note_change(
            relative,
            |baseline| {
                let Some(before) = before else {
                    return Before::Absent;
                };
                // Known only if the file is still as the baseline recorded it: otherwise the
                // user (or a command) changed it since, and its content then is gone. So is a
                // copy a power cut damaged.
                let Ok(manifest) = baseline.manifest() else {
                    return Before::Unknown;
                };
                match (manifest.stats.get(relative), manifest.files.get(relative)) {
                    (Some(stat), Some(Some(hash)))
                        if *stat == before && baseline.durable_blob(hash) =>
                    {
                        Before::Stored(hash.clone())
                    }
                    _ => Before::Unknown,
                }
            },
            after,
            true,
            self.agent.clone(),
        );
        if let Err(err) = noted {
            tracing::warn!(error = %err, relative, "recording a command's change for undo");
        }
    }
}

/// Puts `before` back at `path` (or removes it when `before` is `None`); through the
/// editor's buffer when the file is open there and both texts are text. False when an open
/// buffer with unsaved changes keeps it from being restored.
pub(crate) async fn restore_file(
    path: &Path,
    current: Option<Vec<u8>>,
    before: Option<Vec<u8>>,
    buffers: &dyn OpenBuffers,
) -> Result<bool, BaselineError> {
    let current_text = current
        .as_deref()
        .and_then(|bytes| std::str::from_utf8(bytes).ok());
    let before_text = before
        .as_deref()
        .and_then(|bytes| std::str::from_utf8(bytes).ok());
    if let (Some(current_text), Some(before_text)) = (current_text, before_text) {
        match buffers.apply(path, current_text, before_text).await {
            BufferEdit::Applied => return Ok(true),
            BufferEdit::UnsavedChanges => return Ok(false),
            BufferEdit::NotLoaded => {}
        }
    } else if buffers.check(path).await == BufferCheck::UnsavedChanges {
        return Ok(false);
    }
    let path = path.to_path_buf();
    blocking(move || {
        let written = match &before {
            Some(bytes) => write_atomic_keeping_mode(&path, bytes),
            None => match std::fs::remove_file(&path) {
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            },
        };
        written.map(|()| true).map_err(|err| BaselineError::Io {
            path: path.clone(),
            message: err.to_string(),
        })
    })
    .await?
}

/// Runs blocking work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, BaselineError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| BaselineError::Io {
            path: PathBuf::new(),
            message: format!("the work crashed: {err}"),
        })
}

fn first_line(text: &str) -> String {
    text.lines()
        .next()
        .unwrap_or_default()
        .trim()
        .chars()
        .take(120)
        .collect()
}

/// The hunks between two versions of a file. The diff is bounded in time: two large, very
/// different texts show as coarser hunks instead of taking seconds. Blocking.
fn diff_hunks(path: &Path, old: &str, new: &str) -> Vec<ChangedHunk> {
    let diff = bounded_line_diff(old, new);
    let old_lines: Vec<&str> = old.lines().collect();
    let new_lines: Vec<&str> = new.lines().collect();
    diff.grouped_ops(0)
        .into_iter()
        .filter_map(|group| {
            let first = group.first()?;
            let last = group.last()?;
            let old_range = first.old_range().start..last.old_range().end;
            let new_range = first.new_range().start..last.new_range().end;
            let changed_line = new_lines
                .get(new_range.start)
                .or_else(|| old_lines.get(old_range.start))
                .copied()
                .unwrap_or_default();
            Some(ChangedHunk {
                path: path.to_path_buf(),
                status: ChangeStatus::Modified,
                line: u32::try_from(new_range.start).unwrap_or(u32::MAX),
                summary: format!(
                    "@@ -{},{} +{},{} @@ {}",
                    old_range.start + 1,
                    old_range.len(),
                    new_range.start + 1,
                    new_range.len(),
                    changed_line.trim().chars().take(100).collect::<String>()
                ),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::NoBuffers;

    struct Fixture {
        project: tempfile::TempDir,
        _state: tempfile::TempDir,
        root: ProjectRoot,
        baseline: Baseline,
    }

    impl Fixture {
        fn new(files: &[(&str, &str)]) -> Fixture {
            let project = tempfile::tempdir().expect("project");
            let state = tempfile::tempdir().expect("state");
            let fixture = Fixture {
                root: ProjectRoot::new(project.path()).expect("root"),
                baseline: Baseline::at(state.path()),
                project,
                _state: state,
            };
            for (path, text) in files {
                fixture.write(path, text);
            }
            fixture
                .baseline
                .record(
                    &fixture.root,
                    &ToolPolicy::default(),
                    &CancellationToken::new(),
                )
                .expect("record");
            fixture
        }

        fn write(&self, path: &str, text: &str) {
            let path = self.project.path().join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }

        /// The project's files and their metadata, as a command's recording takes them.
        fn tree(&self) -> TreeStats {
            TreeStats::capture(
                &self.root,
                &ToolPolicy::default(),
                &CancellationToken::new(),
            )
            .expect("tree")
        }

        fn read(&self, path: &str) -> Option<String> {
            std::fs::read_to_string(self.project.path().join(path)).ok()
        }

        /// What a writing tool does: writes the file and tells the journal.
        fn tool_writes(&self, path: &str, text: &str) {
            let before = std::fs::read(self.project.path().join(path)).ok();
            self.write(path, text);
            self.baseline
                .tool_changed(path, before.as_deref(), text.as_bytes());
        }

        fn listed(&self) -> Vec<(String, &'static str, u32)> {
            self.baseline
                .changes(&self.root)
                .expect("changes")
                .iter()
                .map(|hunk| {
                    (
                        self.root.relative_display(&hunk.path),
                        hunk.status.as_str(),
                        hunk.line,
                    )
                })
                .collect()
        }

        async fn undo(&self, force: bool) -> (Vec<String>, Vec<(String, &'static str)>) {
            let report = self
                .baseline
                .undo(&self.root, &NoBuffers, force)
                .await
                .expect("undo");
            (
                report
                    .restored
                    .iter()
                    .map(|path| self.root.relative_display(path))
                    .collect(),
                report
                    .skipped
                    .iter()
                    .map(|(path, reason)| (self.root.relative_display(path), reason.as_str()))
                    .collect(),
            )
        }
    }

    fn unlimited() -> ReadBudget {
        ReadBudget::new(u64::MAX, CancellationToken::new())
    }

    const MAIN: &str = "fn main() {\n    a();\n    b();\n    c();\n    d();\n    e();\n}\n";

    #[tokio::test]
    async fn only_what_the_loops_tools_changed_is_listed_and_undone() {
        let fixture = Fixture::new(&[
            ("src/main.rs", MAIN),
            ("README.md", "# x\n"),
            (".env", "SECRET=1\n"),
        ]);
        assert!(fixture.listed().is_empty());
        fixture.tool_writes(
            "src/main.rs",
            "fn main() {\n    A();\n    b();\n    c();\n    d();\n    E();\n}\n",
        );
        fixture.tool_writes("src/new.rs", "pub fn new() {}\n");
        // The user's own work during the loop, in files the loop never touched.
        fixture.write("notes.txt", "the user's own new file\n");
        fixture.write("README.md", "# x\n\nthe user's edit\n");
        fixture.write(".env", "SECRET=2\n");
        assert_eq!(
            fixture.listed(),
            vec![
                ("src/main.rs".to_owned(), "modified", 1),
                ("src/main.rs".to_owned(), "modified", 5),
                ("src/new.rs".to_owned(), "added", 0),
            ]
        );
        let hunks = fixture.baseline.changes(&fixture.root).expect("changes");
        assert_eq!(hunks[0].summary, "@@ -2,1 +2,1 @@ A();");

        let (restored, skipped) = fixture.undo(false).await;
        assert_eq!(restored, vec!["src/main.rs", "src/new.rs"]);
        assert!(skipped.is_empty(), "{skipped:?}");
        assert_eq!(fixture.read("src/main.rs").as_deref(), Some(MAIN));
        assert_eq!(fixture.read("src/new.rs"), None);
        assert_eq!(
            fixture.read("notes.txt").as_deref(),
            Some("the user's own new file\n")
        );
        assert_eq!(
            fixture.read("README.md").as_deref(),
            Some("# x\n\nthe user's edit\n")
        );
        assert_eq!(fixture.read(".env").as_deref(), Some("SECRET=2\n"));
        assert!(fixture.listed().is_empty(), "nothing undone is listed");
    }

    #[tokio::test]
    async fn a_file_changed_after_the_loop_changed_it_is_named_and_restored_only_with_force() {
        let fixture = Fixture::new(&[("src/main.rs", MAIN), ("src/lib.rs", "pub fn a() {}\n")]);
        fixture.tool_writes("src/main.rs", "fn main() {}\n");
        fixture.tool_writes("src/lib.rs", "pub fn b() {}\n");
        fixture.write("src/main.rs", "fn main() { /* the user's fix */ }\n");

        let (restored, skipped) = fixture.undo(false).await;
        assert_eq!(restored, vec!["src/lib.rs"]);
        assert_eq!(skipped, vec![("src/main.rs".to_owned(), "changed_since")]);
        assert_eq!(
            fixture.read("src/main.rs").as_deref(),
            Some("fn main() { /* the user's fix */ }\n"),
            "not overwritten"
        );
        assert_eq!(
            fixture
                .listed()
                .iter()
                .map(|(path, _, _)| path.as_str())
                .collect::<Vec<_>>(),
            vec!["src/main.rs"],
            "still listed: not undone"
        );

        let (restored, skipped) = fixture.undo(true).await;
        assert_eq!(
            (restored, skipped),
            (vec!["src/main.rs".to_owned()], vec![])
        );
        assert_eq!(fixture.read("src/main.rs").as_deref(), Some(MAIN));
        assert!(fixture.listed().is_empty());
    }

    #[tokio::test]
    async fn what_a_command_changed_is_recorded_from_the_trees_metadata() {
        let fixture = Fixture::new(&[
            ("src/main.rs", MAIN),
            ("gone.txt", "bye\n"),
            ("touched-by-user.txt", "one\n"),
        ]);
        // The user changes a file after the loop started, then a command changes it again:
        // what it held in between is unknown, so undo must not pretend to restore it.
        fixture.write("touched-by-user.txt", "two, the user's\n");
        let before = fixture.tree();
        fixture.write("src/main.rs", "fn main() {}\n");
        fixture.write("generated.rs", "// generated\n");
        fixture.write("touched-by-user.txt", "three, the command's\n");
        std::fs::remove_file(fixture.project.path().join("gone.txt")).expect("remove");
        command_ran(&fixture, &before);
        assert_eq!(
            fixture.listed(),
            vec![
                ("generated.rs".to_owned(), "added", 0),
                ("gone.txt".to_owned(), "deleted", 0),
                ("src/main.rs".to_owned(), "modified", 0),
                ("touched-by-user.txt".to_owned(), "modified", 0),
            ]
        );

        // What changed while the command ran may be the user's saves: named, left alone.
        let (restored, skipped) = fixture.undo(false).await;
        assert!(restored.is_empty(), "{restored:?}");
        assert_eq!(
            skipped,
            vec![
                ("generated.rs".to_owned(), "changed_during_command"),
                ("gone.txt".to_owned(), "changed_during_command"),
                ("src/main.rs".to_owned(), "changed_during_command"),
                ("touched-by-user.txt".to_owned(), "unrestorable"),
            ]
        );
        assert_eq!(
            fixture.read("src/main.rs").as_deref(),
            Some("fn main() {}\n")
        );
        assert_eq!(
            fixture.read("generated.rs").as_deref(),
            Some("// generated\n")
        );

        let (restored, skipped) = fixture.undo(true).await;
        assert_eq!(restored, vec!["generated.rs", "gone.txt", "src/main.rs"]);
        assert_eq!(
            skipped,
            vec![("touched-by-user.txt".to_owned(), "unrestorable")]
        );
        assert_eq!(fixture.read("src/main.rs").as_deref(), Some(MAIN));
        assert_eq!(fixture.read("gone.txt").as_deref(), Some("bye\n"));
        assert_eq!(fixture.read("generated.rs"), None);
        assert_eq!(
            fixture.read("touched-by-user.txt").as_deref(),
            Some("three, the command's\n")
        );
    }

    #[tokio::test]
    async fn the_first_change_of_a_file_decides_whether_undo_needs_force() {
        let fixture = Fixture::new(&[("src/main.rs", MAIN), ("src/lib.rs", "pub fn a() {}\n")]);
        // A tool writes main.rs, then a command (a formatter, say) rewrites it: the loop's.
        fixture.tool_writes("src/main.rs", "fn main() {}\n");
        let before = fixture.tree();
        fixture.write("src/main.rs", "fn main() {\n}\n");
        // A command changes lib.rs first (or the user saved it meanwhile); a tool edits it later.
        fixture.write(
            "src/lib.rs",
            "pub fn a() {} // saved while the command ran\n",
        );
        command_ran(&fixture, &before);
        fixture.tool_writes(
            "src/lib.rs",
            "pub fn b() {} // saved while the command ran\n",
        );

        let (restored, skipped) = fixture.undo(false).await;
        assert_eq!(restored, vec!["src/main.rs"]);
        assert_eq!(
            skipped,
            vec![("src/lib.rs".to_owned(), "changed_during_command")]
        );
        assert_eq!(fixture.read("src/main.rs").as_deref(), Some(MAIN));
    }

    #[test]
    fn large_very_different_files_diff_in_bounded_time_into_coarser_hunks() {
        let old: String = (0..40_000).map(|i| format!("old line {i}\n")).collect();
        let new: String = (0..40_000)
            .map(|i| format!("new line {}\n", i * 3))
            .collect();
        let hunks = diff_hunks(Path::new("big.txt"), &old, &new);
        assert!(!hunks.is_empty());
        assert_eq!(hunks[0].line, 0);
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn undo_never_writes_through_a_symlink_that_leads_out() {
        let outside = tempfile::tempdir().expect("outside");
        let fixture = Fixture::new(&[("src/main.rs", "fn main() {}\n")]);
        fixture.tool_writes("src/main.rs", "fn main() { changed(); }\n");
        std::fs::remove_dir_all(fixture.project.path().join("src")).expect("remove");
        std::os::unix::fs::symlink(outside.path(), fixture.project.path().join("src"))
            .expect("link");
        let (restored, skipped) = fixture.undo(true).await;
        assert!(restored.is_empty());
        assert_eq!(skipped, vec![("src/main.rs".to_owned(), "unrestorable")]);
        assert!(
            !outside.path().join("main.rs").exists(),
            "nothing written outside the root"
        );
    }

    /// Records what a command did between `before` and now, as `run_recorded` does.
    fn command_ran(fixture: &Fixture, before: &TreeStats) {
        let after = fixture.tree();
        for change in before.changes_to(&after) {
            fixture.baseline.command_changed(
                &fixture.root,
                &change.relative,
                change.before,
                &unlimited(),
            );
        }
    }

    /// A file outside the project, in a directory that lives as long as the result.
    fn secret_outside() -> (tempfile::TempDir, PathBuf) {
        let outside = tempfile::tempdir().expect("outside");
        let secret = outside.path().join("secret.txt");
        std::fs::write(&secret, "top secret\n").expect("write");
        (outside, secret)
    }

    fn listed_summaries(baseline: &Baseline, root: &ProjectRoot) -> Vec<(String, String)> {
        baseline
            .changes(root)
            .expect("changes")
            .iter()
            .map(|hunk| {
                (
                    root.relative_display(&hunk.path),
                    format!("{}: {}", hunk.status.as_str(), hunk.summary),
                )
            })
            .collect()
    }

    #[cfg(unix)]
    #[test]
    fn what_a_command_left_in_place_of_a_file_is_recorded_and_listed_without_opening_it() {
        use crate::test_support::{mkfifo, returns_within};
        let (_outside, secret) = secret_outside();
        let fixture = Fixture::new(&[("a.txt", "a\n"), ("b.txt", "b\n"), ("c.txt", "c\n")]);
        let before = fixture.tree();
        let project = fixture.project.path().to_path_buf();
        for name in ["a.txt", "b.txt", "c.txt"] {
            std::fs::remove_file(project.join(name)).expect("remove");
        }
        mkfifo(&project.join("a.txt"));
        std::os::unix::fs::symlink("/dev/zero", project.join("b.txt")).expect("link");
        std::os::unix::fs::symlink(&secret, project.join("c.txt")).expect("link");
        let (_fixture, listed) =
            returns_within("recording and listing the command's changes", move || {
                command_ran(&fixture, &before);
                let listed = listed_summaries(&fixture.baseline, &fixture.root);
                (fixture, listed)
            });
        assert_eq!(
            listed,
            vec![
                (
                    "a.txt".to_owned(),
                    "modified: now a FIFO (named pipe), not a regular file".to_owned()
                ),
                (
                    "b.txt".to_owned(),
                    "modified: now a symbolic link to /dev/zero (not followed)".to_owned()
                ),
                (
                    "c.txt".to_owned(),
                    format!(
                        "modified: now a symbolic link to {} (not followed)",
                        secret.display()
                    )
                ),
            ]
        );
    }

    #[cfg(unix)]
    #[test]
    fn the_changes_list_never_reads_through_a_link_left_in_place_of_a_file() {
        let (_outside, secret) = secret_outside();
        let fixture = Fixture::new(&[("src/main.rs", MAIN)]);
        fixture.tool_writes("notes.txt", "the loop's notes\n");
        fixture.tool_writes("src/main.rs", "fn main() {}\n");
        let project = fixture.project.path();
        for name in ["notes.txt", "src/main.rs"] {
            std::fs::remove_file(project.join(name)).expect("remove");
            std::os::unix::fs::symlink(&secret, project.join(name)).expect("link");
        }
        let link_note = format!("now a symbolic link to {} (not followed)", secret.display());
        assert_eq!(
            listed_summaries(&fixture.baseline, &fixture.root),
            vec![
                ("notes.txt".to_owned(), format!("added: {link_note}")),
                ("src/main.rs".to_owned(), format!("modified: {link_note}")),
            ]
        );
    }

    #[test]
    fn the_changes_list_reads_a_bounded_part_of_a_huge_file() {
        use crate::test_support::bytes_read_by_this_thread;
        let fixture = Fixture::new(&[("data.txt", "small\n")]);
        fixture.tool_writes("data.txt", "still small\n");
        let huge = 256 * 1024 * 1024;
        std::fs::File::options()
            .write(true)
            .open(fixture.project.path().join("data.txt"))
            .and_then(|file| file.set_len(huge))
            .expect("grow");
        let read_before = bytes_read_by_this_thread();
        let listed = listed_summaries(&fixture.baseline, &fixture.root);
        let read = bytes_read_by_this_thread() - read_before;
        assert!(read < 16 * 1024 * 1024, "{read} bytes read");
        assert_eq!(
            listed,
            vec![(
                "data.txt".to_owned(),
                format!("modified: {huge} bytes, too large to compare")
            )]
        );
    }

    #[tokio::test]
    async fn a_blob_that_does_not_hold_what_its_name_says_is_never_restored() {
        let fixture = Fixture::new(&[("src/main.rs", MAIN), ("src/lib.rs", "pub fn a() {}\n")]);
        // What a power cut may leave of blobs written without a sync of their own.
        for text in [MAIN, "pub fn a() {}\n"] {
            std::fs::write(fixture.baseline.blob(&hash_of(text.as_bytes())), "").expect("torn");
        }
        let before = fixture.tree();
        fixture.write("src/main.rs", "fn main() { command(); }\n");
        command_ran(&fixture, &before);
        fixture.tool_writes("src/lib.rs", "pub fn b() {}\n");

        let (restored, skipped) = fixture.undo(true).await;
        assert_eq!(
            restored,
            vec!["src/lib.rs"],
            "the tool had the content at hand"
        );
        assert_eq!(
            fixture.read("src/lib.rs").as_deref(),
            Some("pub fn a() {}\n")
        );
        assert_eq!(skipped, vec![("src/main.rs".to_owned(), "unrestorable")]);
        assert_eq!(
            fixture.read("src/main.rs").as_deref(),
            Some("fn main() { command(); }\n"),
            "not emptied"
        );
    }

    #[test]
    fn a_cancelled_recording_stops_and_leaves_no_baseline() {
        let project = tempfile::tempdir().expect("project");
        let state = tempfile::tempdir().expect("state");
        std::fs::write(project.path().join("main.rs"), MAIN).expect("write");
        let root = ProjectRoot::new(project.path()).expect("root");
        let baseline = Baseline::at(state.path());
        let cancel = CancellationToken::new();
        cancel.cancel();
        let recorded = baseline.record(&root, &ToolPolicy::default(), &cancel);
        assert!(
            matches!(recorded, Err(BaselineError::Cancelled)),
            "{recorded:?}"
        );
        assert!(!baseline.exists());
    }

    #[test]
    fn a_file_too_large_growing_or_beyond_the_budget_is_fingerprinted_by_size_and_time() {
        let fixture = Fixture::new(&[("small.txt", "small\n"), ("growing.log", "start\n")]);
        let fingerprint_of = |relative: &str, budget: &ReadBudget| {
            what_is_at(&fixture.root, &fixture.root.path().join(relative), budget)
                .expect("looked at")
                .expect("present")
        };
        assert_eq!(
            fingerprint_of("small.txt", &unlimited()),
            hash_of(b"small\n")
        );
        let no_budget = ReadBudget::new(0, CancellationToken::new());
        assert!(fingerprint_of("small.txt", &no_budget).starts_with(STAT_FINGERPRINT));
        std::fs::File::options()
            .write(true)
            .open(fixture.root.path().join("growing.log"))
            .and_then(|file| file.set_len(MAX_HASHED_FILE + 1))
            .expect("grow");
        assert!(fingerprint_of("growing.log", &unlimited()).starts_with(STAT_FINGERPRINT));
    }
}
