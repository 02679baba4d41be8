//! The plan in the repository: with `export_dir` set, the current plan, specs and phases of
//! a plan tree are mirrored to `<export_dir>/<plan>/` (laid out and linked by
//! `artifacts::export_files`) each time one of them is stored and each time a phase's tasks
//! are ticked. What Loopr last wrote at each path is recorded by its hash in `$LOOPR_HOME`
//! (`export.json`, per project): a file whose bytes differ from that (the user edited it), or
//! that Loopr never wrote, is never overwritten nor removed; the user is told once per change.
//! Writes go through `tools::ProjectFolder`: no link is followed. An export that fails is
//! told and logged; it never fails the loop.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::context::LoopContext;
use super::events::{LoopEvent, NoticeLevel};
use super::jobs::{self, JobError};
use super::loop_names::plan_name;
use super::settings::LoopSettings;
use super::task_progress::done_tasks;
use crate::artifacts::{
    ExportPhase, ExportSpec, ExportTree, PhaseArtifact, PlanArtifact, SpecArtifact, export_files,
    path_slug, unique_slug,
};
use crate::store::{
    LoopDb, LoopId, LoopRecord, LoopStatus, LoopType, ProjectLayout, StoreError, write_atomic,
};
use crate::tools::{Existing, FolderError, ProjectFolder, ProjectRoot, Replaced};

/// The record of what Loopr wrote, in the project's directory under `$LOOPR_HOME`.
const EXPORT_RECORD: &str = "export.json";

/// An exported file is a few kilobytes; one larger than this was not written by Loopr and is
/// not read.
const MAX_EXPORTED_FILE_BYTES: u64 = 4 << 20;

/// How many parents a loop may have on the way up to its plan (plan, spec, phase, code).
const MAX_TREE_DEPTH: usize = 8;

/// Beside the record: one export of a project at a time, whichever host runs it (two loops
/// of a tree may store at once; two Neovims, or Neovim and the CLI, may run one project), since
/// each export reads the record, writes files by it and writes it back. A file lock
/// (`flock`): two opens of it exclude each other in one process too, and a host that dies
/// lets go of it.
const EXPORT_LOCK: &str = "export.lock";

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(
        "the plan could not be exported to {export_dir}: {source}{}",
        folder_advice(.source)
    )]
    Failed {
        export_dir: String,
        source: Box<ExportError>,
    },
    #[error(transparent)]
    Folder(#[from] FolderError),
    #[error("reading the plan tree: {0}")]
    Store(#[from] StoreError),
    #[error("{path}: {source}")]
    File {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("locking the record of exported files {}: {source}", .path.display())]
    Lock {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("saving the record of exported files {}: {source}", .path.display())]
    Record {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What to do when the folder itself is in the way (a link, a file).
fn folder_advice(source: &ExportError) -> &'static str {
    match source {
        ExportError::Folder(_) => {
            "; make it a folder of the project or set export_dir to another one"
        }
        _ => "",
    }
}

/// `export.json`: per plan loop, its folder and each file Loopr wrote there.
#[derive(Debug, Default, Serialize, Deserialize)]
struct ExportRecord {
    #[serde(default)]
    plans: BTreeMap<String, PlanRecord>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct PlanRecord {
    /// The plan's folder below `export_dir`, chosen once: stable across revisions.
    folder: String,
    /// That folder relative to the project root, as last exported to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    dir: String,
    /// By path relative to the project root.
    #[serde(default)]
    files: BTreeMap<String, FileRecord>,
}

#[derive(Debug, Serialize, Deserialize)]
struct FileRecord {
    /// SHA-256 of the bytes Loopr last wrote there.
    sha256: String,
    /// SHA-256 of the user's bytes Loopr last told the user it left alone, so each change is
    /// told once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    warned: Option<String>,
}

/// Mirrors the plan tree of the loop of `context`, when its plan was started with
/// `export_dir` set; tells the user what it left alone, and that it failed if it did. Never
/// fails the loop.
pub(super) async fn refresh(context: &LoopContext) {
    let (root, id) = (context.root.clone(), context.record.id.clone());
    let exported = context
        .store(move |db, layout| Ok(export_plan_tree(db, layout, &root, &id)))
        .await;
    let notices = match exported {
        Ok(Ok(kept)) => kept,
        Ok(Err(err)) => {
            tracing::warn!(loop_id = %context.record.id, error = %err, "exporting the plan");
            vec![format!("{err}; the loop goes on")]
        }
        Err(err) => {
            tracing::warn!(loop_id = %context.record.id, error = %err, "exporting the plan");
            vec![format!("the plan could not be exported: {err}")]
        }
    };
    for message in notices {
        context.events.emit(LoopEvent::Notice {
            loop_id: context.record.id.to_string(),
            level: NoticeLevel::Warn,
            message,
        });
    }
}

/// Mirrors the current artifacts of the plan tree `loop_id` belongs to into
/// `<export_dir>/<plan>/` below `root`, `export_dir` as the plan was started with (the whole
/// tree goes to one folder, whatever a later code loop was started with); returns what to
/// tell the user of the files it left alone (each change once). Blocking.
pub fn export_plan_tree(
    db: &LoopDb,
    layout: &ProjectLayout,
    root: &ProjectRoot,
    loop_id: &LoopId,
) -> Result<Vec<String>, ExportError> {
    let Some(plan) = plan_of(db, loop_id)? else {
        return Ok(Vec::new());
    };
    let Some(export_dir) = LoopSettings::from_stored(&plan.settings).export_dir() else {
        return Ok(Vec::new());
    };
    let _one_at_a_time = lock_exports(layout)?;
    export_tree(db, layout, root, &export_dir, &plan).map_err(|source| ExportError::Failed {
        export_dir: export_dir.display().to_string(),
        source: Box::new(source),
    })
}

fn export_tree(
    db: &LoopDb,
    layout: &ProjectLayout,
    root: &ProjectRoot,
    export_dir: &Path,
    plan: &LoopRecord,
) -> Result<Vec<String>, ExportError> {
    let Some(tree) = current_tree(db, layout, plan)? else {
        return Ok(Vec::new());
    };
    let record_path = layout.project_dir().join(EXPORT_RECORD);
    let mut record = read_record(&record_path);
    crate::test_hooks::hold_point("export_record_read");
    let key = plan.id.to_string();
    if !record.plans.contains_key(&key) {
        let base = path_slug(&plan_name(&plan.task), "plan");
        let folder = unique_slug(&base, |candidate| {
            record.plans.values().any(|other| other.folder == candidate)
        });
        record.plans.insert(
            key.clone(),
            PlanRecord {
                folder,
                dir: String::new(),
                files: BTreeMap::new(),
            },
        );
    }
    let plan_record = record.plans.entry(key).or_default();
    let plan_dir = export_dir.join(&plan_record.folder);
    plan_record.dir = plan_dir.display().to_string();
    let plan_folder = Rc::new(ProjectFolder::open_creating(root, &plan_dir)?);
    let mut sync = Sync {
        plan_dir: &plan_dir,
        plan_folder,
        folders: HashMap::new(),
        files: &mut plan_record.files,
        notices: Vec::new(),
    };
    let files = export_files(&tree);
    let mut written = Vec::with_capacity(files.len());
    for file in &files {
        written.push(sync.shown(&file.path));
        sync.write(&file.path, file.markdown.as_bytes())?;
    }
    let gone: Vec<String> = sync
        .files
        .keys()
        .filter(|path| !written.contains(path))
        .cloned()
        .collect();
    for shown in gone {
        sync.remove(&shown)?;
    }
    let notices = sync.notices;
    let json = serde_json::to_vec_pretty(&record).map_err(std::io::Error::other);
    json.and_then(|json| write_atomic(&record_path, &json))
        .map_err(|source| ExportError::Record {
            path: record_path,
            source,
        })?;
    Ok(notices)
}

/// The plan loop `loop_id` belongs to, walking up its parents.
fn plan_of(db: &LoopDb, loop_id: &LoopId) -> Result<Option<LoopRecord>, StoreError> {
    let mut current = db.get(loop_id)?;
    for _ in 0..MAX_TREE_DEPTH {
        let Some(record) = current else {
            return Ok(None);
        };
        match &record.parent {
            None if record.loop_type == LoopType::Plan => return Ok(Some(record)),
            None => return Ok(None),
            Some(parent) => current = db.get(parent)?,
        }
    }
    Ok(None)
}

/// The plan's artifact and those of its specs and phases that stand (not invalidated by a
/// revision, stored at least once); `None` before the plan's first is stored. An artifact
/// that cannot be read is left out (and logged): the rest is still exported.
fn current_tree(
    db: &LoopDb,
    layout: &ProjectLayout,
    plan: &LoopRecord,
) -> Result<Option<ExportTree>, StoreError> {
    if plan.iteration == 0 {
        return Ok(None);
    }
    let Some(plan_artifact) = readable::<PlanArtifact>(plan, layout) else {
        return Ok(None);
    };
    let standing: Vec<LoopRecord> = db
        .descendants(&plan.id)?
        .into_iter()
        .filter(|record| record.status != LoopStatus::Invalidated && record.iteration > 0)
        .collect();
    let specs = standing
        .iter()
        .filter(|record| record.loop_type == LoopType::Spec)
        .filter_map(|spec_loop| {
            let spec = readable::<SpecArtifact>(spec_loop, layout)?;
            let phases = standing
                .iter()
                .filter(|record| {
                    record.loop_type == LoopType::Phase
                        && record.parent.as_ref() == Some(&spec_loop.id)
                })
                .filter_map(|phase_loop| {
                    Some(ExportPhase {
                        phase: readable::<PhaseArtifact>(phase_loop, layout)?,
                        done: done_tasks(layout, &phase_loop.id, phase_loop.iteration),
                    })
                })
                .collect();
            Some(ExportSpec { spec, phases })
        })
        .collect();
    Ok(Some(ExportTree {
        plan: plan_artifact,
        specs,
    }))
}

fn readable<T: serde::de::DeserializeOwned>(
    record: &LoopRecord,
    layout: &ProjectLayout,
) -> Option<T> {
    jobs::current_artifact(record, layout)
        .map_err(|err: JobError| {
            tracing::warn!(loop_id = %record.id, error = %err, "an artifact left out of the export");
        })
        .ok()
}

/// The project's export lock, held (exclusively) until the file is dropped.
fn lock_exports(layout: &ProjectLayout) -> Result<File, ExportError> {
    let path = layout.project_dir().join(EXPORT_LOCK);
    let failed = |source| ExportError::Lock {
        path: path.clone(),
        source,
    };
    let file = lock_file(&path).map_err(failed)?;
    match file.try_lock() {
        Ok(()) => return Ok(file),
        Err(TryLockError::WouldBlock) => {}
        Err(TryLockError::Error(err)) => return Err(failed(err)),
    }
    crate::test_hooks::hold_point("export_lock_busy");
    file.lock().map_err(failed)?;
    Ok(file)
}

fn lock_file(path: &Path) -> std::io::Result<File> {
    File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
}

/// What the exports keep in the project, relative to its root with `/`: each plan's folder
/// and each file written. Whoever else writes there (a command of a code loop) is not the
/// author of a change there. Read under the export lock (shared), so an export halfway
/// through is waited for and its files are in the record. Blocking.
pub fn exported_paths(layout: &ProjectLayout) -> Vec<String> {
    let lock = lock_file(&layout.project_dir().join(EXPORT_LOCK));
    let _exports_done = lock.as_ref().map(File::lock_shared);
    let record = read_record(&layout.project_dir().join(EXPORT_RECORD));
    record
        .plans
        .into_values()
        .flat_map(|plan| {
            let dir = Some(plan.dir).filter(|dir| !dir.is_empty());
            dir.into_iter().chain(plan.files.into_keys())
        })
        .collect()
}

fn read_record(path: &Path) -> ExportRecord {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|err| {
            tracing::warn!(path = %path.display(), error = %err, "an unreadable export record; starting a new one");
            ExportRecord::default()
        }),
        Err(_) => ExportRecord::default(),
    }
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// One plan's files brought in line with what is exported now.
struct Sync<'a> {
    /// The plan's folder, relative to the project root.
    plan_dir: &'a Path,
    plan_folder: Rc<ProjectFolder>,
    /// Its spec folders opened so far.
    folders: HashMap<String, Rc<ProjectFolder>>,
    files: &'a mut BTreeMap<String, FileRecord>,
    notices: Vec<String>,
}

impl Sync<'_> {
    /// `path` (below the plan's folder) as the record keys it and the user reads it.
    fn shown(&self, path: &str) -> String {
        self.plan_dir.join(path).display().to_string()
    }

    /// The folder `path` (below the plan's folder) is in, and its file name.
    fn folder_of<'p>(
        &mut self,
        path: &'p str,
    ) -> Result<(Rc<ProjectFolder>, &'p str), FolderError> {
        let Some((sub, name)) = path.split_once('/') else {
            return Ok((self.plan_folder.clone(), path));
        };
        if let Some(folder) = self.folders.get(sub) {
            return Ok((folder.clone(), name));
        }
        let opened = Rc::new(self.plan_folder.child(sub)?);
        self.folders.insert(sub.to_owned(), opened.clone());
        Ok((opened, name))
    }

    /// What Loopr last wrote at `shown`, if it wrote there.
    fn recorded(&self, shown: &str) -> Option<String> {
        self.files
            .get(shown)
            .map(|file| file.sha256.clone())
            .filter(|sha256| !sha256.is_empty())
    }

    /// Writes `bytes` at `path` unless what is there is not what Loopr last wrote.
    fn write(&mut self, path: &str, bytes: &[u8]) -> Result<(), ExportError> {
        let shown = self.shown(path);
        let io = |source| ExportError::File {
            path: shown.clone(),
            source,
        };
        let (folder, name) = self.folder_of(path)?;
        let existing = folder.existing(name, MAX_EXPORTED_FILE_BYTES).map_err(io)?;
        let wanted = sha256(bytes);
        if matches!(&existing, Existing::File(current) if sha256(current) == wanted) {
            // Already there: not written again, so an open buffer is not told it changed.
            self.files.insert(
                shown,
                FileRecord {
                    sha256: wanted,
                    warned: None,
                },
            );
            return Ok(());
        }
        if let Some((current, why)) = self.left_alone(&shown, &existing) {
            self.tell_left_alone(&shown, current, &why);
            return Ok(());
        }
        crate::test_hooks::hold_point("export_write");
        if let Replaced::LeftAlone(now) = folder
            .replace(name, bytes, &existing, MAX_EXPORTED_FILE_BYTES)
            .map_err(io)?
        {
            // Edited between the look above and the write.
            if let Some((current, why)) = self.left_alone(&shown, &now) {
                self.tell_left_alone(&shown, current, &why);
            }
            return Ok(());
        }
        self.files.insert(
            shown,
            FileRecord {
                sha256: wanted,
                warned: None,
            },
        );
        Ok(())
    }

    /// Why what is at `shown` is not to be replaced, with its hash (to tell each change
    /// once); `None` when it is absent or holds what Loopr last wrote.
    fn left_alone(&self, shown: &str, existing: &Existing) -> Option<(String, String)> {
        match existing {
            Existing::Absent => None,
            Existing::File(current) => {
                let current = sha256(current);
                let recorded = self.recorded(shown);
                if Some(&current) == recorded.as_ref() {
                    return None;
                }
                let why = match recorded {
                    Some(_) => "was edited since Loopr exported it",
                    None => "was not written by Loopr",
                };
                Some((current, why.to_owned()))
            }
            Existing::Other(what) => Some((String::new(), what.clone())),
        }
    }

    fn tell_left_alone(&mut self, shown: &str, current: String, why: &str) {
        self.tell_once(shown, current, || {
            format!(
                "{shown} {why}, so Loopr left it as it is and the plan's newer text is not \
                 in it; delete or move the file to have it exported again"
            )
        });
    }

    /// Removes the file Loopr wrote at `shown` (no longer part of the plan) unless the user
    /// edited it since.
    fn remove(&mut self, shown: &str) -> Result<(), ExportError> {
        let Some(path) = Path::new(shown)
            .strip_prefix(self.plan_dir)
            .ok()
            .and_then(Path::to_str)
            .map(str::to_owned)
        else {
            // Written under another export_dir: forgotten, left where it is.
            self.files.remove(shown);
            return Ok(());
        };
        let io = |source| ExportError::File {
            path: shown.to_owned(),
            source,
        };
        let (folder, name) = self.folder_of(&path)?;
        let existing = folder.existing(name, MAX_EXPORTED_FILE_BYTES).map_err(io)?;
        let Some(recorded) = self.recorded(shown) else {
            // Never Loopr's: only recorded so it was told once.
            self.files.remove(shown);
            return Ok(());
        };
        match existing {
            Existing::File(current) if sha256(&current) == recorded => {
                folder.remove_file(name).map_err(io)?;
                self.files.remove(shown);
                if let Some((sub, _)) = path.split_once('/') {
                    self.folders.remove(sub);
                    self.plan_folder.remove_folder_if_empty(sub);
                }
            }
            Existing::Absent | Existing::Other(_) => {
                self.files.remove(shown);
            }
            Existing::File(current) => {
                self.tell_once(shown, sha256(&current), || {
                    format!(
                        "{shown} is no longer part of the plan, but it was edited since Loopr \
                         exported it, so Loopr kept it; delete it if it is not wanted"
                    )
                });
            }
        }
        Ok(())
    }

    /// Tells `message` unless the user was already told of these bytes (`current`) at `shown`.
    fn tell_once(&mut self, shown: &str, current: String, message: impl FnOnce() -> String) {
        match self.files.get_mut(shown) {
            Some(file) if file.warned.as_deref() == Some(current.as_str()) => return,
            Some(file) => file.warned = Some(current),
            None => {
                // Never written by Loopr: recorded only so it is told once; its hash cannot
                // match anything Loopr writes, so it is never taken for Loopr's.
                self.files.insert(
                    shown.to_owned(),
                    FileRecord {
                        sha256: String::new(),
                        warned: Some(current),
                    },
                );
            }
        }
        self.notices.push(message());
    }
}

#[cfg(test)]
mod tests;
