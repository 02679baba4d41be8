//! Puts chosen paths of the working tree back as a checkpoint holds them: a file comes back
//! with its bytes and mode, a link as git stored it (never followed), a path the checkpoint
//! lacks is removed, unless the baseline of the loop that first changed it knew it (a file git
//! ignores is in no checkpoint): then it gets what that baseline found. A path whose file is not what the last loop (or the rewind) left there
//! is the user's since, and is kept unless forced, as undo does; writes go through open
//! buffers; nothing is written outside the root or through a link on the way.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

use super::{CheckpointError, Checkpoints, Entry};
use crate::agent::baseline::{
    Baseline, SkipReason, UndoReport, current_state, restore_file, what_is_at,
};
use crate::git::GitError;
use crate::tools::{OpenBuffers, ProjectRoot, ReadBudget};

/// A path to put back, with what should be there now for it to be restored without force
/// (its fingerprint as the baseline's ledger keeps them; `None`: nothing).
pub struct PathToRestore {
    /// Relative to the root, its bytes as the ledger or git has them.
    pub relative: PathBuf,
    pub expected: Option<String>,
    /// The directory of the loop whose baseline saw the path before any rewound loop changed
    /// it: asked when the checkpoint lacks the path (git ignores it), so it is not deleted.
    pub earlier: Option<PathBuf>,
}

/// What a restore did: the undo-like report, and what each restored path now holds (its
/// fingerprint, `None` when removed), to tell later whether the user changed it since.
#[derive(Debug, Default)]
pub struct Restored {
    pub report: UndoReport,
    pub now: BTreeMap<PathBuf, Option<String>>,
}

/// Puts `paths` back as a checkpoint holds them (`entries`, read before anything changed).
/// It never fails as a whole: a path that cannot be put back is reported skipped, with why,
/// so what was written is always known to the caller. The file work runs off the async
/// workers (each path's state read in one batch, as undo plans; each write's follow-up apart).
pub async fn restore_paths(
    checkpoints: &Checkpoints,
    entries: &BTreeMap<PathBuf, Entry>,
    root: &ProjectRoot,
    paths: Vec<PathToRestore>,
    force: bool,
    buffers: &dyn OpenBuffers,
) -> Restored {
    let shown: Vec<PathBuf> = paths
        .iter()
        .map(|wanted| root.path().join(&wanted.relative))
        .collect();
    let planned = {
        let root = root.clone();
        off_workers(move || plan(&root, paths)).await
    };
    let mut restored = Restored::default();
    let planned = match planned {
        Ok(planned) => planned,
        Err(err) => {
            let why = format!("reading what is there failed: {err}");
            restored.report.skipped = shown
                .into_iter()
                .map(|path| (path, SkipReason::Unrestorable(why.clone())))
                .collect();
            return restored;
        }
    };
    let restore = Restore {
        checkpoints,
        entries,
        root,
        force,
        buffers,
    };
    for (wanted, found) in planned {
        let shown = root.path().join(&wanted.relative);
        let outcome = match found {
            Ok(found) => restore.one(&wanted, found).await,
            Err(reason) => Err(reason),
        };
        match outcome {
            Ok(Some((path, now))) => {
                restored.now.insert(wanted.relative, now);
                restored.report.restored.push(path);
            }
            Ok(None) => {}
            Err(reason) => restored.report.skipped.push((shown, reason)),
        }
    }
    restored
}

/// A path to restore as found before it is written: where it leads and what it holds now
/// (as `baseline::current_state` read it).
struct Found {
    path: PathBuf,
    /// Its bytes, when it exists and is small enough to compare.
    bytes: Option<Vec<u8>>,
    /// Its fingerprint as the ledger keeps them; `None` when it does not exist.
    fingerprint: Option<String>,
}

/// Each of `paths` as found, or why it is not put back. Blocking.
fn plan(
    root: &ProjectRoot,
    paths: Vec<PathToRestore>,
) -> Vec<(PathToRestore, Result<Found, SkipReason>)> {
    paths
        .into_iter()
        .map(|wanted| {
            let shown = root.path().join(&wanted.relative);
            let found = match root.resolve_path_for_write(&wanted.relative) {
                Ok(path) if path == shown => current_state(root, &path, wanted.expected.as_deref())
                    .map(|current| Found {
                        path,
                        bytes: current.bytes,
                        fingerprint: current.fingerprint,
                    })
                    .map_err(|err| SkipReason::Unrestorable(format!("it {err}"))),
                _ => Err(SkipReason::Unrestorable(
                    "its path now leads through a link, outside the project or into .git"
                        .to_owned(),
                )),
            };
            (wanted, found)
        })
        .collect()
}

/// One restore: where the paths' content comes from, and how they are written.
struct Restore<'a> {
    checkpoints: &'a Checkpoints,
    entries: &'a BTreeMap<PathBuf, Entry>,
    root: &'a ProjectRoot,
    force: bool,
    buffers: &'a dyn OpenBuffers,
}

impl Restore<'_> {
    /// Puts one path back; what it holds now when it was written, `None` when it already held
    /// what the checkpoint has, or why it was left.
    async fn one(
        &self,
        wanted: &PathToRestore,
        found: Found,
    ) -> Result<Option<(PathBuf, Option<String>)>, SkipReason> {
        let Restore {
            checkpoints,
            entries,
            root,
            force,
            buffers,
        } = *self;
        let Found {
            path,
            bytes: held,
            fingerprint,
        } = found;
        if fingerprint != wanted.expected && !force {
            return Err(SkipReason::ChangedSince);
        }
        let unrestorable = |why: String| SkipReason::Unrestorable(why);
        let written = match entries.get(&wanted.relative) {
            None => {
                let before = before_in_baseline(wanted.earlier.clone(), &wanted.relative)
                    .await
                    .map_err(unrestorable)?;
                if before.is_none() && fingerprint.is_none() || before.is_some() && before == held {
                    return Ok(None);
                }
                restore_file(&path, held, before, buffers)
                    .await
                    .map_err(|err| unrestorable(err.to_string()))?
            }
            Some(Entry::File { blob, executable }) => {
                let stored = checkpoints.blob(blob).await.map_err(|err| match err {
                    CheckpointError::Git(GitError::TooMuchOutput { limit, .. }) => {
                        unrestorable(format!(
                            "it is over {} MiB in the checkpoint, more than a rewind restores; \
                             git holds it as blob {blob}",
                            limit / (1024 * 1024)
                        ))
                    }
                    err => unrestorable(err.to_string()),
                })?;
                if held.as_ref() == Some(&stored) {
                    return Ok(None);
                }
                let written = restore_file(&path, held, Some(stored), buffers)
                    .await
                    .map_err(|err| unrestorable(err.to_string()))?;
                if written && *executable {
                    let path = path.clone();
                    off_workers(move || set_executable(&path))
                        .await
                        .and_then(|done| done)
                        .map_err(unrestorable)?;
                }
                written
            }
            Some(Entry::Symlink { blob }) => {
                let target = checkpoints
                    .blob(blob)
                    .await
                    .map_err(|err| unrestorable(err.to_string()))?;
                let path = path.clone();
                off_workers(move || put_link(&path, &target))
                    .await
                    .and_then(|done| done)
                    .map_err(unrestorable)?
            }
            Some(Entry::Other) => {
                return Err(unrestorable(
                    "git holds a submodule there, which a rewind does not write".to_owned(),
                ));
            }
        };
        if !written {
            return Err(SkipReason::UnsavedBuffer);
        }
        let now = {
            let (root, path) = (root.clone(), path.clone());
            off_workers(move || {
                let unlimited = ReadBudget::new(u64::MAX, CancellationToken::new());
                what_is_at(&root, &path, &unlimited).unwrap_or(None)
            })
            .await
            .unwrap_or(None)
        };
        Ok(Some((path, now)))
    }
}

/// Runs blocking file work on the blocking pool; its crash is the path's error.
async fn off_workers<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    super::off_workers(work)
        .await
        .map_err(|err| err.to_string())
}

/// What was at `relative` before the rewound loops changed it, for a path the checkpoint lacks:
/// what the baseline in `earlier` found, else nothing (the loops created it; a baseline names
/// files in Unicode, so one with another name is none of its).
async fn before_in_baseline(
    earlier: Option<PathBuf>,
    relative: &Path,
) -> Result<Option<Vec<u8>>, String> {
    let (Some(dir), Some(relative)) = (earlier, relative.to_str()) else {
        return Ok(None);
    };
    let relative = relative.to_owned();
    tokio::task::spawn_blocking(move || Baseline::at(&dir).before_of(&relative))
        .await
        .map_err(|err| err.to_string())?
        .unwrap_or(Ok(None))
        .map_err(|err| format!("it is in no checkpoint and {err}"))
}

fn set_executable(path: &Path) -> Result<(), String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .map_err(|err| err.to_string())?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Makes `path` the link to `target` git stored; what was there (a file, a link, never a
/// directory) is replaced. The link is made, never followed.
fn put_link(path: &Path, target: &[u8]) -> Result<bool, String> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let target = PathBuf::from(std::ffi::OsStr::from_bytes(target));
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.is_dir() => {
                return Err("a directory is in its place now".to_owned());
            }
            Ok(_) => std::fs::remove_file(path).map_err(|err| err.to_string())?,
            Err(_) => {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|err| err.to_string())?;
                }
            }
        }
        std::os::unix::fs::symlink(&target, path).map_err(|err| err.to_string())?;
        Ok(true)
    }
    #[cfg(not(unix))]
    {
        let _ = (path, target);
        Err("symbolic links are restored only on Unix".to_owned())
    }
}
