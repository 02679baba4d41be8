//! Rewinding the working tree to before a phase (its code loop's checkpoint, else the
//! baselines), undoing a rewind, and dropping the checkpoints of loops the store no longer has.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::code_changes::{code_loop_busy, newest_code_loop};
use super::{LoopManager, ManagerError, Project};
use crate::agent::baseline::{Baseline, UndoReport};
use crate::agent::checkpoint::{
    self, CheckpointRecord, Checkpoints, PathToRestore, Restored, restore_paths,
};
use crate::store::{
    LoopDb, LoopId, LoopRecord, LoopType, REWOUND_NOTE_PREFIX, rewound, undone, write_atomic,
};

/// What a rewind did.
#[derive(Debug, Default)]
pub struct RewindReport {
    /// Files put back as they were before the phase, and files left as they are.
    pub files: UndoReport,
    /// The code loops whose changes the rewind took back, newest first.
    pub rewound: Vec<LoopId>,
    /// Whether the rewind can be undone (it was made from a checkpoint).
    pub undoable: bool,
}

/// A rewind as kept beside each code loop it rewound, for its undo.
#[derive(Debug, Serialize, Deserialize)]
struct RewindRecord {
    /// The tree as the rewind found it: the `rewound` checkpoint's commit.
    snapshot: String,
    /// The code loops it rewound, each with the note it had before.
    loops: Vec<(LoopId, Option<String>)>,
    /// Each path the rewind wrote, and what it left there (`None`: it removed the file).
    restored: BTreeMap<StoredPath, Option<String>>,
}

const REWIND_RECORD: &str = "rewind.json";

impl LoopManager {
    /// Puts the working tree back as it was before the newest code loop of `phase` started,
    /// for every path that loop and every later code loop of the project (not undone or
    /// rewound already) changed. A file changed since the last loop wrote it is kept unless
    /// `force`. Those loops are noted rewound. Refused while a code loop is active.
    pub async fn rewind(
        &self,
        root: &Path,
        phase: &str,
        force: bool,
    ) -> Result<(LoopId, RewindReport), ManagerError> {
        let project = self.project(root)?;
        let code = newest_code_loop(&project, phase)?;
        if rewound(code.error.as_deref()) {
            return Err(ManagerError::WrongState {
                id: code.id.to_string(),
                status: "rewound",
                hint: "its phase was rewound already; undo the rewind to bring its work back",
            });
        }
        let records = project.db.list()?;
        if let Some(active) = records
            .iter()
            .find(|record| record.loop_type == LoopType::Code && record.status.is_active())
        {
            return Err(ManagerError::WrongState {
                id: active.id.to_string(),
                status: active.status.as_str(),
                hint: code_loop_busy(active.status),
            });
        }
        // Newest first: the target and every later code loop whose work stands.
        let position = records
            .iter()
            .position(|record| record.id == code.id)
            .unwrap_or_default();
        let loops: Vec<LoopRecord> = records[..=position]
            .iter()
            .filter(|record| {
                record.id == code.id
                    || (record.loop_type == LoopType::Code
                        && !undone(record.error.as_deref())
                        && !rewound(record.error.as_deref()))
            })
            .cloned()
            .collect();
        let code_dir = project.layout.loop_dir(&code.id);
        let before = {
            let dir = code_dir.clone();
            blocking(move || CheckpointRecord::read(&dir).and_then(|record| record.before)).await?
        };
        let checkpoints = match before {
            Some(_) => Checkpoints::find(project.root.path()).await,
            None => None,
        };
        let shown_phase = code.name.as_deref().unwrap_or(phase).to_owned();
        let mut report = RewindReport::default();
        // Once the tree changed, a failure still lets what was done be recorded and noted (so
        // the rewind can be undone); it is told after.
        let mut failure: Option<ManagerError> = None;
        let mut done: Vec<&LoopRecord> = Vec::new();
        match (checkpoints, before) {
            (Some(checkpoints), Some(before)) => {
                // Read before anything changes: a checkpoint git cannot read (an object lost
                // or damaged) stops the rewind here, with no snapshot taken and no file written.
                let entries = checkpoints.entries(&before).await.map_err(|err| {
                    ManagerError::Baseline(format!(
                        "the checkpoint taken before phase {shown_phase} cannot be read, so \
                         nothing was changed: {err}"
                    ))
                })?;
                let dirs: Vec<PathBuf> = loops
                    .iter()
                    .map(|record| project.layout.loop_dir(&record.id))
                    .collect();
                let paths = blocking(move || changed_paths(&dirs)).await?;
                let changed = paths.iter().map(|path| path.relative.clone()).collect();
                let snapshot = checkpoints
                    .take_also(
                        &code.id,
                        checkpoint::REWOUND,
                        &code_dir,
                        checkpoint::TAKE_TIMEOUT,
                        changed,
                    )
                    .await
                    .map_err(|err| {
                        ManagerError::Baseline(format!(
                            "the working tree could not be recorded before the rewind, so \
                             nothing was changed: {err}"
                        ))
                    })?;
                let Restored { report: files, now } = restore_paths(
                    &checkpoints,
                    &entries,
                    &project.root,
                    paths,
                    force,
                    self.shared.buffers.as_ref(),
                )
                .await;
                report.files = files;
                let record = RewindRecord {
                    snapshot,
                    loops: loops
                        .iter()
                        .map(|record| (record.id.clone(), record.error.clone()))
                        .collect(),
                    restored: now
                        .into_iter()
                        .map(|(relative, now)| (StoredPath(relative), now))
                        .collect(),
                };
                // The phase's own loop's record is what its undo reads: the rewind can be
                // undone once that one is written, whatever befalls the others'.
                let others: Vec<PathBuf> = loops
                    .iter()
                    .filter(|record| record.id != code.id)
                    .map(|record| project.layout.loop_dir(&record.id))
                    .collect();
                let own = [code_dir.clone()];
                let written = blocking(move || {
                    let own = write_records(&own, &record);
                    (own.is_ok(), own.and(write_records(&others, &record)))
                })
                .await;
                match written {
                    Ok((undoable, written)) => {
                        report.undoable = undoable;
                        failure = written.err();
                    }
                    Err(err) => failure = Some(err),
                }
                done.extend(loops.iter());
            }
            _ => {
                // Without a checkpoint: each loop's baseline, newest first, down to the phase's.
                for record in &loops {
                    let undone = Baseline::at(&project.layout.loop_dir(&record.id))
                        .undo(&project.root, self.shared.buffers.as_ref(), force)
                        .await;
                    match undone {
                        Ok(undone) => {
                            report.files.restored.extend(undone.restored);
                            report.files.skipped.extend(undone.skipped);
                            done.push(record);
                        }
                        Err(err) => {
                            failure = Some(ManagerError::Baseline(err.to_string()));
                            break;
                        }
                    }
                }
            }
        }
        let at = time::OffsetDateTime::now_utc();
        let (hour, minute, restored) = (at.hour(), at.minute(), report.files.restored.len());
        let note = format!(
            "{REWOUND_NOTE_PREFIX} to before phase {shown_phase} at {hour:02}:{minute:02} UTC; \
             {restored} file(s) restored"
        );
        for record in done {
            match self.note_loop(&project, record, Some(note.clone())).await {
                Ok(()) => report.rewound.push(record.id.clone()),
                Err(err) => {
                    failure.get_or_insert(err);
                }
            }
        }
        let journal = crate::agent::journal::Journal::of(&project.layout, &code.id);
        let line = format!(
            "Rewound to before this phase at {hour:02}:{minute:02} UTC; {restored} file(s) restored"
        );
        match blocking(move || journal.append_note(&line)).await? {
            Ok(Some((batch, entry))) => crate::agent::transcript::emit_batch(
                &self.shared.transcripts,
                &code.id,
                batch,
                &[entry],
            ),
            Ok(None) => {}
            Err(err) => tracing::warn!(error = %err, "noting the rewind in the transcript"),
        }
        if let Some(err) = failure {
            return Err(ManagerError::Baseline(format!(
                "the rewind to before phase {shown_phase} stopped part way ({restored} file(s) \
                 restored, {} code loop(s) noted rewound{}): {err}",
                report.rewound.len(),
                if report.undoable {
                    "; it can be undone"
                } else {
                    ""
                }
            )));
        }
        tracing::info!(loop_id = %code.id, restored = report.files.restored.len(), skipped = report.files.skipped.len(), "rewound");
        Ok((code.id, report))
    }

    /// Undoes the rewind that took back `code`'s changes: the paths it wrote go back to what
    /// the rewind found there (a path changed since is kept unless `force`); once all are
    /// back, the loops it rewound lose their note.
    pub(super) async fn undo_rewind(
        &self,
        project: &Project,
        code: &LoopRecord,
        force: bool,
    ) -> Result<(LoopId, UndoReport), ManagerError> {
        let dir = project.layout.loop_dir(&code.id);
        let record = blocking(move || read_record(&dir)).await?.ok_or_else(|| {
            ManagerError::Baseline(
                "this rewind was made from the baselines, without git, and cannot be undone"
                    .to_owned(),
            )
        })?;
        let checkpoints = Checkpoints::find(project.root.path())
            .await
            .ok_or_else(|| {
                ManagerError::Baseline(
                    "the project is no longer in a git work tree, which held the rewind's snapshot"
                        .to_owned(),
                )
            })?;
        let entries = checkpoints.entries(&record.snapshot).await.map_err(|err| {
            ManagerError::Baseline(format!(
                "the rewind's snapshot cannot be read, so nothing was changed: {err}"
            ))
        })?;
        let paths = record
            .restored
            .iter()
            .map(|(relative, now)| PathToRestore {
                relative: relative.0.clone(),
                expected: now.clone(),
                earlier: None,
            })
            .collect();
        let Restored { mut report, now } = restore_paths(
            &checkpoints,
            &entries,
            &project.root,
            paths,
            force,
            self.shared.buffers.as_ref(),
        )
        .await;
        let left: BTreeMap<StoredPath, Option<String>> = record
            .restored
            .iter()
            .filter(|(relative, _)| !now.contains_key(&relative.0))
            .filter(|(relative, _)| {
                let path = project.root.path().join(&relative.0);
                report.skipped.iter().any(|(skipped, _)| *skipped == path)
            })
            .map(|(relative, expected)| (relative.clone(), expected.clone()))
            .collect();
        let dirs: Vec<PathBuf> = record
            .loops
            .iter()
            .map(|(id, _)| project.layout.loop_dir(id))
            .collect();
        if left.is_empty() {
            for (id, before) in &record.loops {
                if let Some(looped) = project.db.get(id)?
                    && rewound(looped.error.as_deref())
                {
                    self.note_loop(project, &looped, before.clone()).await?;
                }
            }
            blocking(move || {
                for dir in dirs {
                    let _ = std::fs::remove_file(dir.join(REWIND_RECORD));
                }
            })
            .await?;
        } else {
            let kept = RewindRecord {
                restored: left,
                ..record
            };
            blocking(move || write_records(&dirs, &kept)).await??;
        }
        report.rewind_undone = true;
        Ok((code.id.clone(), report))
    }

    /// Sets `record`'s note while it keeps the status it had, and tells the shells.
    async fn note_loop(
        &self,
        project: &Project,
        record: &LoopRecord,
        note: Option<String>,
    ) -> Result<(), ManagerError> {
        let db = project.db.clone();
        let (id, status, stored) = (record.id.clone(), record.status, note.clone());
        let noted =
            blocking(move || db.set_error_if_status(&id, status, stored.as_deref())).await??;
        if noted {
            self.emit_status(&record.id, record.loop_type, record.status, note);
        }
        Ok(())
    }
}

/// How long the checkpoints of a code loop that is over are kept after it last changed.
pub const CHECKPOINT_RETENTION: time::Duration = time::Duration::days(30);

/// Deletes this project's checkpoint refs of loops `db` no longer holds, and of loops over
/// (not active) for longer than `CHECKPOINT_RETENTION`. Bounded (each git call is); run it
/// off the async workers' hot path.
pub(super) async fn prune_checkpoints(root: &Path, db: &LoopDb) {
    let Some(checkpoints) = Checkpoints::find(root).await else {
        return;
    };
    let by_loop = match checkpoints.refs_by_loop().await {
        Ok(by_loop) => by_loop,
        Err(err) => {
            tracing::warn!(error = %err, "listing Loopr's checkpoints");
            return;
        }
    };
    let gone: Vec<String> = by_loop
        .into_iter()
        .filter(|(loop_id, _)| {
            LoopId::parse(loop_id).is_some_and(|id| match db.get(&id) {
                Ok(None) => true,
                Ok(Some(record)) => over_for_long(&record),
                Err(_) => false,
            })
        })
        .flat_map(|(_, refs)| refs)
        .collect();
    if gone.is_empty() {
        return;
    }
    match checkpoints.delete_refs(&gone).await {
        Ok(()) => tracing::info!(
            count = gone.len(),
            "deleted checkpoints of loops that are gone"
        ),
        Err(err) => tracing::warn!(error = %err, "deleting checkpoints of loops that are gone"),
    }
}

/// Whether `record` is over (neither running, waiting nor awaiting approval) and last changed
/// longer ago than `CHECKPOINT_RETENTION`.
fn over_for_long(record: &LoopRecord) -> bool {
    let changed = time::OffsetDateTime::parse(
        &record.updated_at,
        &time::format_description::well_known::Rfc3339,
    );
    !record.status.is_active()
        && changed.is_ok_and(|at| time::OffsetDateTime::now_utc() - at > CHECKPOINT_RETENTION)
}

/// Every path the loops in `dirs` (newest first) changed, each with what the newest of them
/// left there and the oldest's directory (its baseline saw the path before them all).
/// Blocking.
fn changed_paths(dirs: &[PathBuf]) -> Vec<PathToRestore> {
    let mut changed: BTreeMap<String, PathToRestore> = BTreeMap::new();
    for dir in dirs {
        for (relative, after) in Baseline::at(dir).touched() {
            changed
                .entry(relative.clone())
                .or_insert(PathToRestore {
                    relative: PathBuf::from(relative),
                    expected: after,
                    earlier: None,
                })
                .earlier = Some(dir.clone());
        }
    }
    changed.into_values().collect()
}

/// A path relative to the root as a rewind record keeps it: its text when it is Unicode, else
/// `NUL` (which no file name holds), `hex:` and its bytes in hex, so no byte is lost.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct StoredPath(PathBuf);

/// What starts a name kept as its bytes.
const BYTES_MARK: &str = "\0hex:";

impl Serialize for StoredPath {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0.to_str() {
            Some(text) if !text.starts_with(BYTES_MARK) => serializer.serialize_str(text),
            _ => {
                let hex: String = checkpoint::path_bytes(&self.0)
                    .iter()
                    .map(|byte| format!("{byte:02x}"))
                    .collect();
                serializer.serialize_str(&format!("{BYTES_MARK}{hex}"))
            }
        }
    }
}

impl<'de> Deserialize<'de> for StoredPath {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let Some(hex) = text.strip_prefix(BYTES_MARK) else {
            return Ok(StoredPath(PathBuf::from(text)));
        };
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|at| {
                hex.get(at..at + 2)
                    .and_then(|pair| u8::from_str_radix(pair, 16).ok())
            })
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(|| serde::de::Error::custom(format!("not a stored path: {text:?}")))?;
        Ok(StoredPath(checkpoint::path_from_bytes(&bytes)))
    }
}

fn read_record(dir: &Path) -> Option<RewindRecord> {
    let bytes = std::fs::read(dir.join(REWIND_RECORD)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Writes `record` into each of `dirs`; one that fails does not keep it from the others.
/// The first failure.
fn write_records(dirs: &[PathBuf], record: &RewindRecord) -> Result<(), ManagerError> {
    let json = serde_json::to_vec(record)
        .map_err(|err| ManagerError::Baseline(format!("recording the rewind: {err}")))?;
    let mut first_failure = None;
    for dir in dirs {
        if let Err(err) = write_atomic(&dir.join(REWIND_RECORD), &json) {
            first_failure.get_or_insert(ManagerError::Baseline(format!(
                "recording the rewind in {}: {err}",
                dir.display()
            )));
        }
    }
    first_failure.map_or(Ok(()), Err)
}

/// Runs blocking work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ManagerError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| ManagerError::Baseline(format!("the rewind's work crashed: {err}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LoopStatus;
    use crate::test_support::git;

    #[cfg(unix)]
    #[test]
    fn a_rewind_record_keeps_a_name_that_is_not_unicode_byte_for_byte() {
        use std::os::unix::ffi::OsStrExt;
        let odd = PathBuf::from(std::ffi::OsStr::from_bytes(b"dir/caf\xe9.txt"));
        let record = RewindRecord {
            snapshot: "0".repeat(40),
            loops: Vec::new(),
            restored: BTreeMap::from([
                (StoredPath(odd.clone()), None),
                (StoredPath("plain.txt".into()), Some("hash".to_owned())),
            ]),
        };
        let json = serde_json::to_string(&record).expect("json");
        assert!(json.contains("\"plain.txt\":\"hash\""), "{json}");
        let read: RewindRecord = serde_json::from_str(&json).expect("read back");
        assert_eq!(read.restored, record.restored);
        assert_eq!(read.restored.keys().next().map(|path| &path.0), Some(&odd));
    }

    #[test]
    fn pruning_deletes_this_projects_checkpoints_of_loops_gone_or_long_over_and_nothing_else() {
        let repo = tempfile::tempdir().expect("repo");
        let state = tempfile::tempdir().expect("state");
        git(repo.path(), &["init", "-q"]);
        std::fs::write(repo.path().join("a.txt"), "a\n").expect("write");
        git(repo.path(), &["add", "-A"]);
        git(repo.path(), &["commit", "-qm", "a"]);
        git(
            repo.path(),
            &["update-ref", "refs/loopr-not-ours/x", "HEAD"],
        );
        let db = LoopDb::open(&state.path().join("loops.db")).expect("db");
        let kept = LoopRecord::new_pending(LoopType::Code, "kept", "{}".to_owned());
        db.insert(&kept, 1).expect("insert");
        let gone = LoopId::parse("20261126-120000-000-eeeeeeeeee").expect("id");
        // Over for longer than the retention: its checkpoints go too.
        let old = LoopRecord {
            status: LoopStatus::Complete,
            updated_at: "2026-01-01T00:00:00Z".to_owned(),
            ..LoopRecord::new_pending(LoopType::Code, "old", "{}".to_owned())
        };
        db.insert(&old, 1).expect("insert");
        // A project beside this one in the same repository: its refs are not this one's.
        std::fs::create_dir(repo.path().join("neighbour")).expect("neighbour");
        let neighbours = LoopId::parse("20261126-120000-000-ffffffffff").expect("id");
        // Off the async workers, as a host opening the project does it.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let checkpoints = Checkpoints::find(repo.path()).await.expect("git");
            let neighbour = Checkpoints::find(&repo.path().join("neighbour"))
                .await
                .expect("git");
            neighbour
                .take(
                    &neighbours,
                    checkpoint::BEFORE,
                    state.path(),
                    checkpoint::TAKE_TIMEOUT,
                )
                .await
                .expect("taken");
            for id in [&kept.id, &gone, &old.id] {
                checkpoints
                    .take(
                        id,
                        checkpoint::BEFORE,
                        state.path(),
                        checkpoint::TAKE_TIMEOUT,
                    )
                    .await
                    .expect("taken");
            }
            prune_checkpoints(repo.path(), &db).await;
        });
        let refs = git(repo.path(), &["for-each-ref", "--format=%(refname)"]);
        assert_eq!(
            refs,
            format!(
                "refs/heads/{}\nrefs/loopr-not-ours/x\n{}\n{}\n",
                git(repo.path(), &["branch", "--show-current"]).trim(),
                // Sorted by name: the neighbour's id is the older.
                Checkpoints::ref_name(&neighbours, checkpoint::BEFORE),
                Checkpoints::ref_name(&kept.id, checkpoint::BEFORE)
            )
        );
    }
}
