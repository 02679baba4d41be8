//! What stays read-only inside the writable places: both mechanisms bind these over them
//! read-only, after every writable bind, so that no `sandbox.writable` entry opens them again.
//!
//! - `.git` of the project and of every repository nested in it (a `.git` directory or file
//!   anywhere under the root), and of the repositories in the writable places beside it (to
//!   a few levels), unless `allow_git`: hooks and config there run the next time
//!   the user runs git, outside any sandbox, and the project's diff does not show them;
//! - the Git directories `.git` files point to (a submodule's, a worktree's and its main
//!   repository's), when they lie in a writable place;
//! - what a repository's config has git run or read from the working tree (its hooks
//!   directory `core.hooksPath`, as Husky sets it, an fsmonitor, pager, editor or other
//!   program, an included config file): a command could otherwise rewrite what git runs next,
//!   outside any sandbox, in files the project's diff may not show (Husky's are ignored);
//! - the state directory (`$LOOPR_HOME`), whose database holds the settings later loops run
//!   with, when it lies in a writable place.
//!
//! Only paths inside a writable place are returned: anything else is read-only already, and
//! binding it could show a command what the sandbox hides (the host's `/tmp`).

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::tools::{ProjectFile, ProjectRoot};

/// How many directories the search for nested repositories reads, breadth first (shallow
/// repositories first). A tree larger than this is searched this far, and the log says so.
const MAX_DIRECTORIES: usize = 100_000;
/// How many directories are read, and how deep, in each writable place beside the project
/// (`~/src` holding other repositories at `~/src/<name>` or `~/src/<group>/<name>`).
const MAX_PLACE_DIRECTORIES: usize = 10_000;
const MAX_PLACE_DEPTH: usize = 3;
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
        // The project whole; the writable places beside it to a few levels (the
        // repositories of `~/src/*`), which are often large trees of other things.
        let beside = writable
            .iter()
            .filter_map(|place| place.canonicalize().ok())
            .filter(|place| !place.starts_with(root));
        let entries = git_entries(root, MAX_DIRECTORIES, usize::MAX)
            .into_iter()
            .chain(
                beside
                    .flat_map(|place| git_entries(&place, MAX_PLACE_DIRECTORIES, MAX_PLACE_DEPTH)),
            );
        'entries: for entry in entries {
            let git_dirs = if entry.is_dir() {
                vec![entry.clone()]
            } else {
                git_dirs_named_by(&entry)
            };
            let worktree = entry.parent().unwrap_or(root).to_path_buf();
            let run_by_git = git_dirs
                .iter()
                .flat_map(|git_dir| config_paths(git_dir, &worktree));
            let paths: Vec<PathBuf> = git_dirs_named_by(&entry)
                .into_iter()
                .chain([entry])
                .chain(run_by_git)
                .collect();
            for path in paths {
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
/// under `root`, breadth first, reading at most `max_directories` directories no deeper than
/// `max_depth` below `root`; links are not followed, nor is any `.git` searched.
fn git_entries(root: &Path, max_directories: usize, max_depth: usize) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = VecDeque::from([(root.to_owned(), 0)]);
    let mut read = 0;
    while let Some((dir, depth)) = pending.pop_front() {
        if read == max_directories {
            tracing::warn!(
                root = %root.display(),
                "stopped looking for nested Git repositories after {max_directories} \
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
            } else if kind.is_dir() && depth < max_depth {
                pending.push_back((entry.path(), depth + 1));
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

/// The keys of a Git config (section.key, lowercase) whose value is a program git runs or a
/// directory of them; the value's first word is what may be a path into the working tree.
const PROGRAM_KEYS: [&str; 11] = [
    "core.hookspath",
    "core.fsmonitor",
    "core.pager",
    "core.editor",
    "core.sshcommand",
    "core.askpass",
    "sequence.editor",
    "diff.external",
    "gpg.program",
    "credential.helper",
    "merge.tool",
];
/// How many config files (a repository's and those it includes) are read per repository.
const MAX_CONFIG_FILES: usize = 8;
/// How much of one config file is read.
const MAX_CONFIG_BYTES: u64 = 64 * 1024;

/// The paths `git_dir`'s config has git run or read, relative ones resolved as git does
/// (programs and hooks from the working tree's top, included files from the including
/// file's directory); bounded, and only regular files read.
fn config_paths(git_dir: &Path, worktree: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![git_dir.join("config")];
    let mut read = 0;
    while let Some(config) = pending.pop() {
        if read == MAX_CONFIG_FILES {
            break;
        }
        read += 1;
        let Some(text) = read_small_file(&config, MAX_CONFIG_BYTES) else {
            continue;
        };
        let base = config.parent().unwrap_or(Path::new("/"));
        for (key, value) in config_entries(&text) {
            let first_word = value.split_whitespace().next().unwrap_or("");
            if key == "include.path" || (key.starts_with("includeif.") && key.ends_with(".path")) {
                let included = base.join(value);
                found.push(included.clone());
                pending.push(included);
            } else if PROGRAM_KEYS.contains(&key.as_str()) && first_word.contains('/') {
                found.push(worktree.join(first_word));
            }
        }
    }
    found
}

/// `(section.key, value)` of each setting in a Git config's text: section and key lowercase
/// (a subsection kept as written), the value unquoted and without a trailing comment.
fn config_entries(text: &str) -> Vec<(String, String)> {
    let mut section = String::new();
    let mut entries = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            let header = header.split(']').next().unwrap_or("");
            section = match header.split_once(char::is_whitespace) {
                Some((name, sub)) => format!(
                    "{}.{}",
                    name.to_ascii_lowercase(),
                    sub.trim().trim_matches('"')
                ),
                None => header.to_ascii_lowercase(),
            };
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let mut unquoted = String::new();
        let mut quoted = false;
        for c in value.trim().chars() {
            match c {
                '"' => quoted = !quoted,
                '#' | ';' if !quoted => break,
                c => unquoted.push(c),
            }
        }
        entries.push((
            format!("{section}.{}", key.trim().to_ascii_lowercase()),
            unquoted.trim().to_owned(),
        ));
    }
    entries
}

/// The first line of a small regular file; `None` for anything else (a link, a FIFO, a
/// device: never opened in a way that could block or follow it).
fn read_pointer(path: &Path) -> Option<String> {
    read_small_file(path, MAX_POINTER_BYTES)?
        .lines()
        .next()
        .map(str::to_owned)
}

/// At most `max_bytes` of a regular file; `None` for anything else (a link, a FIFO, a
/// device: never opened in a way that could block or follow it).
fn read_small_file(path: &Path, max_bytes: u64) -> Option<String> {
    // The project's one reader, with the file's own directory as its root: these files may
    // lie beside the project (a worktree's main repository).
    let directory = ProjectRoot::new(path.parent()?).ok()?;
    let file = ProjectFile::open(&directory, &directory.path().join(path.file_name()?)).ok()?;
    let bytes = file.read_start(max_bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests;
