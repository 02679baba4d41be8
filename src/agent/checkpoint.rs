//! Checkpoints: the working tree (tracked files and untracked ones git does not ignore) kept
//! as a git commit under `refs/loopr/<code-loop-id>/<name>`, and read back path by path. A
//! checkpoint is taken through a temporary index in Loopr's own state directory, so HEAD, the
//! index, branches, the stash, HEAD's reflog and the user's hooks are never touched; every
//! path goes to git as data (`-z`, `--stdin`, never a shell). Only refs under `refs/loopr/`
//! are written or deleted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

mod restore;

pub use restore::{PathToRestore, Restored, restore_paths};

use crate::git::{Git, GitError};
use crate::store::{LoopId, write_atomic};
use crate::tools::{ProjectRoot, project_walker};

/// The checkpoint taken before a code loop changes anything.
pub const BEFORE: &str = "before";
/// The working tree as a rewind found it, so the rewind can be undone.
pub const REWOUND: &str = "rewound";
/// Where Loopr's refs live; nothing outside it is ever written.
const REF_ROOT: &str = "refs/loopr/";
/// The trailer of a checkpoint commit naming the project root it was taken for.
const ROOT_TRAILER: &str = "Loopr-Root";
/// How long taking a checkpoint may take: a huge or endless file in the tree makes the loop go
/// on without one rather than wait.
pub const TAKE_TIMEOUT: Duration = Duration::from_secs(60);
/// Who a checkpoint's commit names (no user configuration needed).
const AUTHOR: (&str, &str) = ("Loopr", "loopr@localhost");

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("git answered something unexpected: {0}")]
    Unexpected(String),
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error("{0} is not a regular file, and git would wait on it forever")]
    UnfitGitFile(String),
}

/// Files git reads while it adds the tree: one a command replaced with a FIFO or a device
/// would hang it (a link it does not follow).
const FILES_GIT_READS: [&str; 3] = [".gitignore", ".gitattributes", ".gitmodules"];

/// What a checkpoint holds at one path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A regular file (executable or not) and its blob.
    File { blob: String, executable: bool },
    /// A symbolic link; its blob holds the target.
    Symlink { blob: String },
    /// A submodule or anything else a rewind does not write.
    Other,
}

/// The checkpoints of one project, in the git work tree that holds it.
#[derive(Clone, Debug)]
pub struct Checkpoints {
    git: Git,
    /// The project root, the only part of the tree a checkpoint adds from disk.
    root: PathBuf,
    /// The project root relative to the top of the work tree (empty at the top), with `/`.
    prefix: String,
}

impl Checkpoints {
    /// The checkpoints of the project at `root`; `None` outside a git work tree or without git.
    pub async fn find(root: &Path) -> Option<Checkpoints> {
        let git = Git::find(root).await?;
        let (top, root) = (git.work_tree().to_owned(), root.to_owned());
        let (top, root) =
            off_workers(move || Some((top.canonicalize().ok()?, root.canonicalize().ok()?)))
                .await
                .ok()??;
        let relative = root.strip_prefix(&top).ok()?;
        let mut prefix = String::new();
        for part in relative.components() {
            prefix.push_str(part.as_os_str().to_str()?);
            prefix.push('/');
        }
        Some(Checkpoints { git, root, prefix })
    }

    /// The ref of checkpoint `name` of `loop_id`.
    pub fn ref_name(loop_id: &LoopId, name: &str) -> String {
        format!("{REF_ROOT}{loop_id}/{name}")
    }

    /// Records the working tree as checkpoint `name` of `loop_id`; returns its commit. The
    /// temporary index lives in `scratch_dir` (Loopr's state, never the project) and is gone
    /// when this returns.
    pub async fn take(
        &self,
        loop_id: &LoopId,
        name: &str,
        scratch_dir: &Path,
        timeout: Duration,
    ) -> Result<String, CheckpointError> {
        self.take_also(loop_id, name, scratch_dir, timeout, Vec::new())
            .await
    }

    /// As `take`, and adds `also` (paths relative to the root that exist) even where git
    /// ignores them: the files a loop changed, so a rewind's snapshot holds every one it writes.
    pub async fn take_also(
        &self,
        loop_id: &LoopId,
        name: &str,
        scratch_dir: &Path,
        timeout: Duration,
        also: Vec<PathBuf>,
    ) -> Result<String, CheckpointError> {
        let index = scratch_dir.join(format!("checkpoint-{name}.index"));
        let taken =
            tokio::time::timeout(timeout, self.take_with(loop_id, name, &index, also)).await;
        let removed = off_workers(move || {
            let _ = std::fs::remove_file(&index);
            let _ = std::fs::remove_file(index.with_extension("index.lock"));
        })
        .await;
        if let Err(err) = removed {
            tracing::warn!(error = %err, "removing a checkpoint's temporary index");
        }
        taken.unwrap_or_else(|_| {
            Err(CheckpointError::Git(GitError::TimedOut {
                command: "add".to_owned(),
                seconds: timeout.as_secs(),
            }))
        })
    }

    async fn take_with(
        &self,
        loop_id: &LoopId,
        name: &str,
        index: &Path,
        also: Vec<PathBuf>,
    ) -> Result<String, CheckpointError> {
        let fresh = index.to_owned();
        off_workers(move || {
            if let Some(dir) = fresh.parent() {
                std::fs::create_dir_all(dir).map_err(|err| CheckpointError::Io {
                    path: dir.to_owned(),
                    message: err.to_string(),
                })?;
            }
            let _ = std::fs::remove_file(&fresh);
            Ok::<(), CheckpointError>(())
        })
        .await??;
        let with_index = |args: &[&str]| {
            self.git
                .command(args.iter().copied())
                .env("GIT_INDEX_FILE", index)
        };
        let root = self.root.clone();
        let unfit = off_workers(move || unfit_git_file(&root)).await?;
        if let Some(unfit) = unfit {
            return Err(CheckpointError::UnfitGitFile(unfit));
        }
        let head = self.head().await?;
        if head.is_some() {
            with_index(&["read-tree", "HEAD"]).output().await?;
        }
        // The project's part of the work tree as `git add -A` takes it (FIFOs and devices are
        // skipped by git itself); the rest stays as HEAD has it.
        let pathspec = match self.prefix.trim_end_matches('/') {
            "" => ":/".to_owned(),
            prefix => format!(":(top,literal){prefix}"),
        };
        with_index(&["add", "-A", "--", &pathspec]).output().await?;
        let forced = self.present_paths(also).await?;
        if !forced.is_empty() {
            with_index(&["add", "-f", "--pathspec-from-file=-", "--pathspec-file-nul"])
                .env("GIT_LITERAL_PATHSPECS", "1")
                .stdin(forced)
                .output()
                .await?;
        }
        let tree = one_line(with_index(&["write-tree"]).output().await?.stdout)?;
        // The trailer says which project the ref belongs to: refs are the repository's, shared
        // by every project (and worktree) in it, and each prunes only its own.
        let message = format!(
            "loopr checkpoint {name} code loop {loop_id}\n\n{ROOT_TRAILER}: {}\n",
            self.root.display()
        );
        let mut commit = vec!["commit-tree", "--no-gpg-sign", tree.as_str()];
        if let Some(head) = head.as_deref() {
            commit.extend(["-p", head]);
        }
        let mut command = self.git.command(commit).stdin(message.into_bytes());
        for (variable, value) in [
            ("GIT_AUTHOR_NAME", AUTHOR.0),
            ("GIT_AUTHOR_EMAIL", AUTHOR.1),
            ("GIT_COMMITTER_NAME", AUTHOR.0),
            ("GIT_COMMITTER_EMAIL", AUTHOR.1),
        ] {
            command = command.env(variable, value);
        }
        let commit = one_line(command.output().await?.stdout)?;
        let reference = Checkpoints::ref_name(loop_id, name);
        self.git
            .command(["update-ref", "--no-deref", &reference, &commit])
            .output()
            .await?;
        Ok(commit)
    }

    /// Those of `relatives` that exist under the root, as paths from the top of the work tree
    /// each ended by a NUL (git's `--pathspec-file-nul`).
    async fn present_paths(&self, relatives: Vec<PathBuf>) -> Result<Vec<u8>, CheckpointError> {
        let (root, prefix) = (self.root.clone(), self.prefix.clone());
        off_workers(move || {
            let mut listed = Vec::new();
            for relative in relatives {
                if std::fs::symlink_metadata(root.join(&relative)).is_ok_and(|meta| !meta.is_dir())
                {
                    listed.extend_from_slice(prefix.as_bytes());
                    listed.extend_from_slice(&path_bytes(&relative));
                    listed.push(0);
                }
            }
            listed
        })
        .await
    }

    /// HEAD's commit, `None` in a repository without one yet.
    async fn head(&self) -> Result<Option<String>, CheckpointError> {
        let (found, output) = self
            .git
            .command(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
            .checked_output()
            .await?;
        if found {
            one_line(output.stdout).map(Some)
        } else {
            Ok(None)
        }
    }

    /// What commit `commit` holds under the project root, by path relative to the root (its
    /// bytes as git has them, UTF-8 or not).
    pub async fn entries(&self, commit: &str) -> Result<BTreeMap<PathBuf, Entry>, CheckpointError> {
        let listed = self
            .git
            .command(["ls-tree", "-r", "-z", "--full-tree", commit])
            .output()
            .await?;
        let mut entries = BTreeMap::new();
        for record in listed.stdout.split(|byte| *byte == 0) {
            if record.is_empty() {
                continue;
            }
            let unexpected = || CheckpointError::Unexpected(String::from_utf8_lossy(record).into());
            let tab = record
                .iter()
                .position(|byte| *byte == b'\t')
                .ok_or_else(unexpected)?;
            let (meta, path) = (&record[..tab], &record[tab + 1..]);
            let meta = std::str::from_utf8(meta).map_err(|_| unexpected())?;
            let Some(relative) = path.strip_prefix(self.prefix.as_bytes()) else {
                continue;
            };
            let mut fields = meta.split(' ');
            let (mode, _kind, blob) = (fields.next(), fields.next(), fields.next());
            let blob = blob.unwrap_or_default().to_owned();
            let entry = match mode {
                Some("100644") => Entry::File {
                    blob,
                    executable: false,
                },
                Some("100755") => Entry::File {
                    blob,
                    executable: true,
                },
                Some("120000") => Entry::Symlink { blob },
                _ => Entry::Other,
            };
            entries.insert(path_from_bytes(relative), entry);
        }
        Ok(entries)
    }

    /// The bytes of blob `blob` (bounded by the git runner's output limit).
    pub async fn blob(&self, blob: &str) -> Result<Vec<u8>, CheckpointError> {
        Ok(self
            .git
            .command(["cat-file", "blob", blob])
            .output()
            .await?
            .stdout)
    }

    /// The loops of this project (its root named by the checkpoint's trailer) that have refs
    /// under `refs/loopr/`, with those refs.
    pub async fn refs_by_loop(&self) -> Result<BTreeMap<String, Vec<String>>, CheckpointError> {
        let format =
            format!("--format=%(refname) %(trailers:key={ROOT_TRAILER},valueonly,separator=%x2C)");
        let listed = self
            .git
            .command(["for-each-ref", format.as_str(), REF_ROOT])
            .output()
            .await?;
        let ours = self.root.display().to_string();
        let mut by_loop: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for line in String::from_utf8_lossy(&listed.stdout).lines() {
            // Another project's checkpoint (or one that names none) is never this project's.
            let Some((reference, root)) = line.split_once(' ') else {
                continue;
            };
            if root != ours {
                continue;
            }
            if let Some((loop_id, _)) = reference
                .strip_prefix(REF_ROOT)
                .and_then(|rest| rest.split_once('/'))
            {
                by_loop
                    .entry(loop_id.to_owned())
                    .or_default()
                    .push(reference.to_owned());
            }
        }
        Ok(by_loop)
    }

    /// Deletes `references`, each of which must be under `refs/loopr/`.
    pub async fn delete_refs(&self, references: &[String]) -> Result<(), CheckpointError> {
        let mut commands = String::new();
        for reference in references {
            if reference.starts_with(REF_ROOT) && !reference.contains(['\n', '\0']) {
                commands.push_str(&format!("delete {reference}\n"));
            }
        }
        if commands.is_empty() {
            return Ok(());
        }
        self.git
            .command(["update-ref", "--no-deref", "--stdin"])
            .stdin(commands.into_bytes())
            .output()
            .await?;
        Ok(())
    }
}

/// The commit of each checkpoint a code loop has, kept beside the loop.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CheckpointRecord {
    /// The `before` checkpoint's commit.
    pub before: Option<String>,
    /// Why there is none, when taking it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
}

impl CheckpointRecord {
    fn path(loop_dir: &Path) -> PathBuf {
        loop_dir.join("checkpoint.json")
    }

    /// The record in `loop_dir`, `None` when no checkpoint was tried there.
    pub fn read(loop_dir: &Path) -> Option<CheckpointRecord> {
        let bytes = std::fs::read(CheckpointRecord::path(loop_dir)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Writes the record into `loop_dir`, atomically. Blocking.
    pub fn write(&self, loop_dir: &Path) -> std::io::Result<()> {
        let json = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        write_atomic(&CheckpointRecord::path(loop_dir), &json)
    }
}

/// The first file git would read while adding the project (`FILES_GIT_READS`) that is neither
/// a regular file nor a link, relative to `root`; the walk honours the ignore files as git
/// does and opens none of them blocking. Blocking.
fn unfit_git_file(root: &Path) -> Option<String> {
    let root = ProjectRoot::new(root).ok()?;
    let walker = project_walker(&root, root.path(), None).ok()?;
    walker.flatten().find_map(|entry| {
        let named = FILES_GIT_READS
            .iter()
            .any(|name| entry.file_name() == std::ffi::OsStr::new(name));
        let kind = entry.file_type()?;
        (named && !kind.is_file() && !kind.is_symlink() && !kind.is_dir())
            .then(|| root.relative_display(entry.path()))
    })
}

/// Runs blocking file work on the blocking pool, off the async workers.
async fn off_workers<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, CheckpointError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| CheckpointError::Unexpected(format!("the work crashed: {err}")))
}

/// A path as git writes it (`-z`), every byte kept (on Unix; elsewhere paths are Unicode).
pub fn path_from_bytes(bytes: &[u8]) -> PathBuf {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
    }
    #[cfg(not(unix))]
    {
        PathBuf::from(String::from_utf8_lossy(bytes).into_owned())
    }
}

/// `path`'s bytes as git takes them, with `/` between its parts.
pub fn path_bytes(path: &Path) -> Vec<u8> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes().to_vec()
    }
    #[cfg(not(unix))]
    {
        path.to_string_lossy().replace('\\', "/").into_bytes()
    }
}

fn one_line(stdout: Vec<u8>) -> Result<String, CheckpointError> {
    let text = String::from_utf8(stdout)
        .map_err(|err| CheckpointError::Unexpected(err.to_string()))?
        .trim()
        .to_owned();
    if text.is_empty() || text.contains(char::is_whitespace) {
        return Err(CheckpointError::Unexpected(text));
    }
    Ok(text)
}

#[cfg(test)]
mod tests;
