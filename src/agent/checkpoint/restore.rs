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
use crate::tools::{OpenBuffers, ProjectRoot, ReadBudget};

/// A path to put back, with what should be there now for it to be restored without force
/// (its fingerprint as the baseline's ledger keeps them; `None`: nothing).
pub struct PathToRestore {
    pub relative: String,
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
    pub now: BTreeMap<String, Option<String>>,
}

/// Puts `paths` back as checkpoint `commit` holds them.
pub async fn restore_paths(
    checkpoints: &Checkpoints,
    commit: &str,
    root: &ProjectRoot,
    paths: Vec<PathToRestore>,
    force: bool,
    buffers: &dyn OpenBuffers,
) -> Result<Restored, CheckpointError> {
    let entries = checkpoints.entries(commit).await?;
    let mut restored = Restored::default();
    for wanted in paths {
        let shown = root.path().join(&wanted.relative);
        let skip = |restored: &mut Restored, reason: SkipReason| {
            restored.report.skipped.push((shown.clone(), reason));
        };
        let path = match root.resolve_for_write(&wanted.relative) {
            Ok(path) if path == shown => path,
            _ => {
                skip(
                    &mut restored,
                    SkipReason::Unrestorable(
                        "its path now leads through a link, outside the project or into .git"
                            .to_owned(),
                    ),
                );
                continue;
            }
        };
        let current = match current_state(root, &path, wanted.expected.as_deref()) {
            Ok(current) => current,
            Err(err) => {
                skip(&mut restored, SkipReason::Unrestorable(format!("it {err}")));
                continue;
            }
        };
        if current.fingerprint != wanted.expected && !force {
            skip(&mut restored, SkipReason::ChangedSince);
            continue;
        }
        let written = match entries.get(&wanted.relative) {
            None => match before_in_baseline(wanted.earlier.clone(), &wanted.relative).await {
                Err(err) => Err(err),
                Ok(before) if before.is_none() && current.fingerprint.is_none() => continue,
                Ok(before) if before.is_some() && before == current.bytes => continue,
                Ok(before) => restore_file(&path, current.bytes, before, buffers)
                    .await
                    .map_err(|err| err.to_string()),
            },
            Some(Entry::File { blob, executable }) => {
                let bytes = match checkpoints.blob(blob).await {
                    Ok(bytes) => bytes,
                    Err(err) => {
                        skip(&mut restored, SkipReason::Unrestorable(err.to_string()));
                        continue;
                    }
                };
                if current.bytes.as_ref() == Some(&bytes) {
                    continue;
                }
                let written = restore_file(&path, current.bytes, Some(bytes), buffers)
                    .await
                    .map_err(|err| err.to_string());
                match written {
                    Ok(true) if *executable => set_executable(&path).map(|()| true),
                    other => other,
                }
            }
            Some(Entry::Symlink { blob }) => match checkpoints.blob(blob).await {
                Ok(target) => put_link(&path, &target),
                Err(err) => Err(err.to_string()),
            },
            Some(Entry::Other) => {
                skip(
                    &mut restored,
                    SkipReason::Unrestorable(
                        "git holds a submodule there, which a rewind does not write".to_owned(),
                    ),
                );
                continue;
            }
        };
        match written {
            Ok(true) => {
                let unlimited = ReadBudget::new(u64::MAX, CancellationToken::new());
                let now = what_is_at(root, &path, &unlimited).unwrap_or(None);
                restored.now.insert(wanted.relative, now);
                restored.report.restored.push(path);
            }
            Ok(false) => skip(&mut restored, SkipReason::UnsavedBuffer),
            Err(err) => skip(&mut restored, SkipReason::Unrestorable(err)),
        }
    }
    Ok(restored)
}

/// What was at `relative` before the rewound loops changed it, for a path the checkpoint lacks:
/// what the baseline in `earlier` found, else nothing (the loops created it).
async fn before_in_baseline(
    earlier: Option<PathBuf>,
    relative: &str,
) -> Result<Option<Vec<u8>>, String> {
    let Some(dir) = earlier else {
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
