//! What a code loop changed, so the user can review every change (one entry per hunk) and
//! undo exactly those. Two records under the loop's directory: the baseline, a snapshot of
//! the project when the loop started (a manifest of its files, honouring .gitignore and never
//! secret files, with their metadata and their contents by hash), and the ledger, which the
//! loop's tools keep: per file they changed, what it held before the loop's first change and
//! what the loop left. Files the loop never touched are never listed or restored, and a file
//! the user changed after the loop did is restored only when the user says so; so is a file
//! first changed by a command, since the user may have saved it while the command ran.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::store::{write_atomic, write_atomic_keeping_mode};
use crate::tools::{
    BufferCheck, BufferEdit, ChangeJournal, FileStat, OpenBuffers, ProjectRoot, ToolPolicy,
    TreeStats, bounded_line_diff,
};

/// Files larger than this are listed but not copied; they cannot be restored.
const MAX_SNAPSHOT_FILE: u64 = 2 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    #[error("baseline {path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error("the code loop has no baseline yet (it has not started)")]
    Missing,
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
    /// The hash of what the loop left; `None` when it deleted the file.
    after: Option<String>,
    /// The loop first changed the file through a command, so it is known only that the file
    /// changed while the command ran: the user may have saved it meanwhile, and "what the loop
    /// left" may be the user's work.
    #[serde(default)]
    by_command: bool,
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

/// Why undo left a file the loop changed as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// Changed (by the user, or anyone) since the loop changed it; restored only with force.
    ChangedSince,
    /// Changed while a command of the loop ran, which cannot tell its own writes from the
    /// user's saves meanwhile; restored only with force.
    ChangedDuringCommand,
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
}

/// One file of an undo, as planned from the ledger.
enum UndoAction {
    /// Already holds what it held before; only the ledger entry goes.
    AlreadyUndone,
    Restore {
        current: Option<Vec<u8>>,
        /// `None`: the loop created it, so it is removed.
        before: Option<Vec<u8>>,
        changed_since: bool,
        by_command: bool,
    },
    Skip(SkipReason),
}

struct UndoStep {
    relative: String,
    path: PathBuf,
    action: UndoAction,
}

pub struct Baseline {
    dir: PathBuf,
}

impl Baseline {
    pub fn at(loop_dir: &Path) -> Baseline {
        Baseline {
            dir: loop_dir.join("baseline"),
        }
    }

    pub fn exists(&self) -> bool {
        self.dir.join("manifest.json").exists()
    }

    /// Records the project as it is now. Blocking: run it off the async threads.
    pub fn record(&self, root: &ProjectRoot, policy: &ToolPolicy) -> Result<(), BaselineError> {
        let mut manifest = Manifest::default();
        let tree = TreeStats::capture(root, policy).map_err(|err| BaselineError::Io {
            path: root.path().to_path_buf(),
            message: err.to_string(),
        })?;
        for (relative, (path, stat)) in tree.files {
            manifest.stats.insert(relative.clone(), stat);
            if stat.size > MAX_SNAPSHOT_FILE {
                manifest.files.insert(relative, None);
                continue;
            }
            let Ok(bytes) = std::fs::read(&path) else {
                // Present but unreadable: listed, not restorable.
                manifest.files.insert(relative, None);
                continue;
            };
            let hash = self.store_blob(&bytes)?;
            manifest.files.insert(relative, Some(hash));
        }
        let json = serde_json::to_vec(&manifest).map_err(|err| self.io_error(&self.dir, err))?;
        let path = self.dir.join("manifest.json");
        write_atomic(&path, &json).map_err(|err| self.io_error(&path, err))
    }

    /// Every hunk the loop's changes make, file by file in path order: each file the loop
    /// changed, compared with what it held before the loop's first change. Blocking.
    pub fn changes(&self, root: &ProjectRoot) -> Result<Vec<ChangedHunk>, BaselineError> {
        self.manifest()?;
        let mut hunks = Vec::new();
        for (relative, entry) in self.ledger() {
            let path = root.path().join(&relative);
            let now = std::fs::read(&path).ok();
            match (&entry.before, now) {
                (Before::Absent, None) => {}
                (Before::Absent, Some(now)) => hunks.push(ChangedHunk {
                    path,
                    status: ChangeStatus::Added,
                    line: 0,
                    summary: first_line(&String::from_utf8_lossy(&now)),
                }),
                (_, None) => hunks.push(ChangedHunk {
                    path,
                    status: ChangeStatus::Deleted,
                    line: 0,
                    summary: "deleted".to_owned(),
                }),
                (Before::Stored(hash), Some(now)) if *hash != hash_of(&now) => {
                    let old = std::fs::read(self.blob(hash)).unwrap_or_default();
                    hunks.extend(diff_hunks(
                        &path,
                        &String::from_utf8_lossy(&old),
                        &String::from_utf8_lossy(&now),
                    ));
                }
                (Before::Stored(_), Some(_)) => {}
                (Before::Unknown, Some(_)) => hunks.push(ChangedHunk {
                    path,
                    status: ChangeStatus::Modified,
                    line: 0,
                    summary: "changed by a command; what it held before is unknown".to_owned(),
                }),
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
            let baseline = Baseline {
                dir: self.dir.clone(),
            };
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
                    by_command: true, ..
                } if !force => {
                    report
                        .skipped
                        .push((step.path, SkipReason::ChangedDuringCommand));
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
        let baseline = Baseline {
            dir: self.dir.clone(),
        };
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
            let current = match std::fs::read(&path) {
                Ok(bytes) => Some(bytes),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
                Err(err) => {
                    steps.push(UndoStep {
                        path,
                        relative,
                        action: UndoAction::Skip(SkipReason::Unrestorable(format!(
                            "it cannot be read: {err}"
                        ))),
                    });
                    continue;
                }
            };
            let current_hash = current.as_deref().map(hash_of);
            let before = match &entry.before {
                Before::Absent => None,
                Before::Stored(hash) => match std::fs::read(self.blob(hash)) {
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
            let action = if current_hash == before.as_deref().map(hash_of) {
                UndoAction::AlreadyUndone
            } else {
                UndoAction::Restore {
                    changed_since: current_hash != entry.after,
                    by_command: entry.by_command,
                    current,
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
    /// is its first change of the file (made `by_command` or by a tool). A file back to what it
    /// held before leaves the ledger.
    fn note_change(
        &self,
        relative: &str,
        before: impl FnOnce(&Baseline) -> Before,
        after: Option<String>,
        by_command: bool,
    ) -> Result<(), BaselineError> {
        let mut ledger = self.ledger();
        // The first change decides: it is when `before` was taken, so a user's save during a
        // first change by a command stays unknown to the entry whatever the loop does later.
        let (before, by_command) = match ledger.get(relative) {
            Some(entry) => (entry.before.clone(), entry.by_command),
            None => (before(self), by_command),
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
                },
            );
        }
        self.save_ledger(&ledger)
    }

    fn store_blob(&self, bytes: &[u8]) -> Result<String, BaselineError> {
        let hash = hash_of(bytes);
        let blob = self.blob(&hash);
        if !blob.exists() {
            write_atomic(&blob, bytes).map_err(|err| self.io_error(&blob, err))?;
        }
        Ok(hash)
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
        );
        if let Err(err) = noted {
            tracing::warn!(error = %err, relative, "recording a tool's change for undo");
        }
    }

    fn command_changed(&self, relative: &str, path: &Path, before: Option<FileStat>) {
        let after = match hash_file(path) {
            Ok(hash) => Some(hash),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
            Err(err) => {
                tracing::warn!(error = %err, relative, "hashing a file a command changed");
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
                // user (or a command) changed it since, and its content then is gone.
                let Ok(manifest) = baseline.manifest() else {
                    return Before::Unknown;
                };
                match (manifest.stats.get(relative), manifest.files.get(relative)) {
                    (Some(stat), Some(Some(hash))) if *stat == before => {
                        Before::Stored(hash.clone())
                    }
                    _ => Before::Unknown,
                }
            },
            after,
            true,
        );
        if let Err(err) = noted {
            tracing::warn!(error = %err, relative, "recording a command's change for undo");
        }
    }
}

/// Puts `before` back at `path` (or removes it when `before` is `None`); through the
/// editor's buffer when the file is open there and both texts are text. False when an open
/// buffer with unsaved changes keeps it from being restored.
async fn restore_file(
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

fn hash_of(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// The hash of a file's content, read in pieces (a command may leave a large file).
fn hash_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    hasher.flush()?;
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
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
                .record(&fixture.root, &ToolPolicy::default())
                .expect("record");
            fixture
        }

        fn write(&self, path: &str, text: &str) {
            let path = self.project.path().join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
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
        let policy = ToolPolicy::default();
        // The user changes a file after the loop started, then a command changes it again:
        // what it held in between is unknown, so undo must not pretend to restore it.
        fixture.write("touched-by-user.txt", "two, the user's\n");
        let before = TreeStats::capture(&fixture.root, &policy).expect("before");
        fixture.write("src/main.rs", "fn main() {}\n");
        fixture.write("generated.rs", "// generated\n");
        fixture.write("touched-by-user.txt", "three, the command's\n");
        std::fs::remove_file(fixture.project.path().join("gone.txt")).expect("remove");
        let after = TreeStats::capture(&fixture.root, &policy).expect("after");
        for change in before.changes_to(&after) {
            fixture
                .baseline
                .command_changed(&change.relative, &change.path, change.before);
        }
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
        let policy = ToolPolicy::default();
        // A tool writes main.rs, then a command (a formatter, say) rewrites it: the loop's.
        fixture.tool_writes("src/main.rs", "fn main() {}\n");
        let before = TreeStats::capture(&fixture.root, &policy).expect("before");
        fixture.write("src/main.rs", "fn main() {\n}\n");
        // A command changes lib.rs first (or the user saved it meanwhile); a tool edits it later.
        fixture.write(
            "src/lib.rs",
            "pub fn a() {} // saved while the command ran\n",
        );
        let after = TreeStats::capture(&fixture.root, &policy).expect("after");
        for change in before.changes_to(&after) {
            fixture
                .baseline
                .command_changed(&change.relative, &change.path, change.before);
        }
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
}
