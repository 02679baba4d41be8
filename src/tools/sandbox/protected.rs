//! What stays read-only inside the writable places: both mechanisms bind these over them
//! read-only, after every writable bind, so that no `sandbox.writable` entry opens them again.
//!
//! - `.git` of the project and of every repository nested in it (a `.git` directory or file
//!   anywhere under the root), unless `allow_git`: hooks and config there run the next time
//!   the user runs git, outside any sandbox, and the project's diff does not show them;
//! - the Git directories `.git` files point to (a submodule's, a worktree's and its main
//!   repository's), when they lie in a writable place;
//! - the state directory (`$LOOPR_HOME`), whose database holds the settings later loops run
//!   with, when it lies in a writable place.
//!
//! Only paths inside a writable place are returned: anything else is read-only already, and
//! binding it could show a command what the sandbox hides (the host's `/tmp`).

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// How many directories the search for nested repositories reads, breadth first (shallow
/// repositories first). A tree larger than this is searched this far, and the log says so.
const MAX_DIRECTORIES: usize = 100_000;
/// How many `.git` entries are kept read-only at most (each is a mount).
const MAX_GIT_ENTRIES: usize = 1_000;
/// How many bytes of `.git` paths are kept read-only at most: each goes on a command line
/// (twice for bubblewrap), which the kernel bounds.
const MAX_GIT_PATH_BYTES: usize = 256 * 1024;
/// How long a `.git` file or a `commondir` file may be; Git's own are one short line.
const MAX_POINTER_BYTES: u64 = 4096;

/// The paths to bind read-only over the writable places (`root` and `writable`), canonical,
/// none inside another.
pub(super) fn read_only_paths(
    root: &Path,
    writable: &[PathBuf],
    allow_git: bool,
    state_dir: Option<&Path>,
) -> Vec<PathBuf> {
    let places: Vec<PathBuf> = std::iter::once(root)
        .chain(writable.iter().map(PathBuf::as_path))
        .filter_map(|place| place.canonicalize().ok())
        .collect();
    let inside_a_place = |path: &Path| {
        let path = path.canonicalize().ok()?;
        places
            .iter()
            .any(|place| path.starts_with(place))
            .then_some(path)
    };
    let mut kept = Vec::new();
    if !allow_git {
        let mut budget = MAX_GIT_PATH_BYTES;
        'entries: for entry in git_entries(root) {
            for path in git_dirs_named_by(&entry).into_iter().chain([entry]) {
                let Some(path) = inside_a_place(&path) else {
                    continue;
                };
                let Some(left) = budget.checked_sub(path.as_os_str().len()) else {
                    tracing::warn!(
                        root = %root.display(),
                        "the paths of nested Git repositories are too long to keep them all \
                         read-only; commands may write the .git of the others"
                    );
                    break 'entries;
                };
                budget = left;
                kept.push(path);
            }
        }
    }
    kept.extend(state_dir.and_then(inside_a_place));
    kept.sort();
    kept.dedup_by(|later, earlier| later.starts_with(earlier));
    kept
}

/// `root/.git` and the `.git` entries (directories, files, links) of the repositories nested
/// under `root`, breadth first; links are not followed, nor is any `.git` searched.
fn git_entries(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = VecDeque::from([root.to_owned()]);
    let mut read = 0;
    while let Some(dir) = pending.pop_front() {
        if read == MAX_DIRECTORIES {
            tracing::warn!(
                root = %root.display(),
                "stopped looking for nested Git repositories after {MAX_DIRECTORIES} \
                 directories: commands may write the .git of those further down"
            );
            break;
        }
        read += 1;
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if entry.file_name() == OsStr::new(".git") {
                found.push(entry.path());
                if found.len() == MAX_GIT_ENTRIES {
                    tracing::warn!(
                        root = %root.display(),
                        "{MAX_GIT_ENTRIES} nested Git repositories kept read-only; commands \
                         may write the .git of the others"
                    );
                    return found;
                }
            } else if kind.is_dir() {
                pending.push_back(entry.path());
            }
        }
    }
    found
}

/// The Git directories a `.git` file names (`gitdir: <path>`), with the main repository's of
/// a worktree (its `commondir`); nothing for a `.git` directory.
fn git_dirs_named_by(dot_git: &Path) -> Vec<PathBuf> {
    let Some(pointer) = read_pointer(dot_git) else {
        return Vec::new();
    };
    let Some(named) = pointer.strip_prefix("gitdir:") else {
        return Vec::new();
    };
    let base = dot_git.parent().unwrap_or(Path::new("/"));
    let git_dir = base.join(named.trim());
    let mut dirs = Vec::new();
    if let Some(common) = read_pointer(&git_dir.join("commondir")) {
        dirs.push(git_dir.join(common.trim()));
    }
    dirs.push(git_dir);
    dirs
}

/// The first line of a small regular file; `None` for anything else (a link, a FIFO, a
/// device: never opened in a way that could block or follow it).
fn read_pointer(path: &Path) -> Option<String> {
    if !std::fs::symlink_metadata(path).ok()?.is_file() {
        return None;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_POINTER_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    text.lines().next().map(str::to_owned)
}

#[cfg(test)]
mod tests;
