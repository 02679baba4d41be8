//! The project as it was when a code loop started, so the user can review every change the
//! loop made (one entry per hunk) and undo them all. A snapshot under the loop's directory:
//! a manifest of the project's files (honouring .gitignore, never secret files) and their
//! contents by hash.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::store::{write_atomic, write_atomic_keeping_mode};
use crate::tools::{ProjectRoot, ToolPolicy, project_walker};

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
}

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
        for (relative, path) in project_files(root, policy)? {
            let size = std::fs::metadata(&path)
                .map(|m| m.len())
                .unwrap_or(u64::MAX);
            if size > MAX_SNAPSHOT_FILE {
                manifest.files.insert(relative, None);
                continue;
            }
            let Ok(bytes) = std::fs::read(&path) else {
                // Present but unreadable: listed, so undo leaves it alone, not restorable.
                manifest.files.insert(relative, None);
                continue;
            };
            let hash = hash_of(&bytes);
            let blob = self.dir.join("blobs").join(&hash);
            if !blob.exists() {
                write_atomic(&blob, &bytes).map_err(|err| self.io_error(&blob, err))?;
            }
            manifest.files.insert(relative, Some(hash));
        }
        let json = serde_json::to_vec(&manifest).map_err(|err| self.io_error(&self.dir, err))?;
        let path = self.dir.join("manifest.json");
        write_atomic(&path, &json).map_err(|err| self.io_error(&path, err))
    }

    /// Every hunk that differs from the baseline, file by file in path order.
    pub fn changes(
        &self,
        root: &ProjectRoot,
        policy: &ToolPolicy,
    ) -> Result<Vec<ChangedHunk>, BaselineError> {
        let manifest = self.manifest()?;
        let current: BTreeMap<String, PathBuf> = project_files(root, policy)?.into_iter().collect();
        let mut hunks = Vec::new();
        let mut paths: Vec<&String> = manifest.files.keys().chain(current.keys()).collect();
        paths.sort();
        paths.dedup();
        for relative in paths {
            let path = root.path().join(relative);
            let before = manifest.files.get(relative);
            let now = current
                .get(relative)
                .and_then(|path| std::fs::read(path).ok());
            match (before, now) {
                (None, Some(now)) => hunks.push(ChangedHunk {
                    path,
                    status: ChangeStatus::Added,
                    line: 0,
                    summary: first_line(&String::from_utf8_lossy(&now)),
                }),
                (Some(_), None) => hunks.push(ChangedHunk {
                    path,
                    status: ChangeStatus::Deleted,
                    line: 0,
                    summary: "deleted".to_owned(),
                }),
                (Some(Some(hash)), Some(now)) if *hash != hash_of(&now) => {
                    let old = std::fs::read(self.dir.join("blobs").join(hash)).unwrap_or_default();
                    hunks.extend(diff_hunks(
                        &path,
                        &String::from_utf8_lossy(&old),
                        &String::from_utf8_lossy(&now),
                    ));
                }
                _ => {}
            }
        }
        Ok(hunks)
    }

    /// Puts every file back as it was: changed and deleted files are restored, and files the
    /// loop's tools created are removed (files that commands or the user created are kept).
    /// Every path is confined to the root as tools' writes are. Returns the paths it touched.
    pub fn restore(&self, root: &ProjectRoot) -> Result<Vec<PathBuf>, BaselineError> {
        let manifest = self.manifest()?;
        let mut touched = Vec::new();
        for path in self.created_files() {
            let Some(relative) = path
                .strip_prefix(root.path())
                .ok()
                .map(|p| p.to_string_lossy().replace('\\', "/"))
            else {
                continue;
            };
            if manifest.files.contains_key(&relative) {
                continue;
            }
            let Ok(confined) = root.resolve_for_write(&relative) else {
                continue;
            };
            if confined.is_file() {
                std::fs::remove_file(&confined).map_err(|err| self.io_error(&confined, err))?;
                touched.push(confined);
            }
        }
        for (relative, hash) in &manifest.files {
            let Some(hash) = hash else { continue };
            let Ok(path) = root.resolve_for_write(relative) else {
                // Now behind a symlink leading out, or otherwise unwritable: leave it.
                continue;
            };
            let unchanged = std::fs::read(&path).is_ok_and(|now| hash_of(&now) == *hash);
            if unchanged {
                continue;
            }
            let blob = self.dir.join("blobs").join(hash);
            let bytes = std::fs::read(&blob).map_err(|err| self.io_error(&blob, err))?;
            write_atomic_keeping_mode(&path, &bytes).map_err(|err| self.io_error(&path, err))?;
            touched.push(path);
        }
        Ok(touched)
    }

    fn created_files(&self) -> Vec<PathBuf> {
        std::fs::read(self.dir.join("created.json"))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
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

impl crate::tools::ChangeJournal for Baseline {
    fn created(&self, path: &Path) {
        // Tools of one loop run one at a time, so read-modify-write does not race.
        let mut created = self.created_files();
        if !created.iter().any(|known| known == path) {
            created.push(path.to_path_buf());
        }
        let written = serde_json::to_vec(&created)
            .map_err(std::io::Error::other)
            .and_then(|json| write_atomic(&self.dir.join("created.json"), &json));
        if let Err(err) = written {
            tracing::warn!(error = %err, path = %path.display(), "recording a created file for undo");
        }
    }
}

/// The project's files (relative path with `/`, absolute path), as the tools see them.
fn project_files(
    root: &ProjectRoot,
    policy: &ToolPolicy,
) -> Result<Vec<(String, PathBuf)>, BaselineError> {
    let walker = project_walker(root, root.path(), None).map_err(|err| BaselineError::Io {
        path: root.path().to_path_buf(),
        message: err.to_string(),
    })?;
    Ok(walker
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_some_and(|kind| kind.is_file()))
        .filter(|entry| policy.secret_pattern(entry.path()).is_none())
        .map(|entry| (root.relative_display(entry.path()), entry.into_path()))
        .collect())
}

fn hash_of(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
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

fn diff_hunks(path: &Path, old: &str, new: &str) -> Vec<ChangedHunk> {
    let diff = similar::TextDiff::from_lines(old, new);
    diff.grouped_ops(0)
        .into_iter()
        .filter_map(|group| {
            let first = group.first()?;
            let last = group.last()?;
            let old_range = first.old_range().start..last.old_range().end;
            let new_range = first.new_range().start..last.new_range().end;
            let changed_line = new
                .lines()
                .nth(new_range.start)
                .or_else(|| old.lines().nth(old_range.start))
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

    #[test]
    fn changes_are_listed_by_hunk_and_undone_to_the_baseline() {
        let project = tempfile::tempdir().expect("project");
        let state = tempfile::tempdir().expect("state");
        let write = |path: &str, text: &str| {
            let path = project.path().join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        };
        write(
            "src/main.rs",
            "fn main() {\n    a();\n    b();\n    c();\n    d();\n    e();\n}\n",
        );
        write("README.md", "# x\n");
        write("gone.txt", "bye\n");
        write(".env", "SECRET=1\n");
        let root = ProjectRoot::new(project.path()).expect("root");
        let policy = ToolPolicy::default();
        let baseline = Baseline::at(state.path());
        assert!(matches!(
            baseline.changes(&root, &policy),
            Err(BaselineError::Missing)
        ));
        baseline.record(&root, &policy).expect("record");

        write(
            "src/main.rs",
            "fn main() {\n    A();\n    b();\n    c();\n    d();\n    E();\n}\n",
        );
        write("src/new.rs", "pub fn new() {}\n");
        crate::tools::ChangeJournal::created(
            &baseline,
            &project
                .path()
                .canonicalize()
                .expect("canonical")
                .join("src/new.rs"),
        );
        write("notes.txt", "the user's own new file\n");
        write(".env", "SECRET=2\n");
        std::fs::remove_file(project.path().join("gone.txt")).expect("remove");
        let hunks = baseline.changes(&root, &policy).expect("changes");
        let listed: Vec<(String, &str, u32)> = hunks
            .iter()
            .map(|hunk| {
                (
                    root.relative_display(&hunk.path),
                    hunk.status.as_str(),
                    hunk.line,
                )
            })
            .collect();
        assert_eq!(
            listed,
            vec![
                ("gone.txt".to_owned(), "deleted", 0),
                ("notes.txt".to_owned(), "added", 0),
                ("src/main.rs".to_owned(), "modified", 1),
                ("src/main.rs".to_owned(), "modified", 5),
                ("src/new.rs".to_owned(), "added", 0),
            ]
        );
        assert_eq!(hunks[2].summary, "@@ -2,1 +2,1 @@ A();");

        let touched = baseline.restore(&root).expect("restore");
        assert_eq!(touched.len(), 3);
        assert!(
            project.path().join("notes.txt").exists(),
            "a file the loop did not create stays"
        );
        assert_eq!(
            std::fs::read_to_string(project.path().join("src/main.rs")).expect("read"),
            "fn main() {\n    a();\n    b();\n    c();\n    d();\n    e();\n}\n"
        );
        assert_eq!(
            std::fs::read_to_string(project.path().join("gone.txt")).expect("read"),
            "bye\n"
        );
        assert!(!project.path().join("src/new.rs").exists());
        assert_eq!(
            std::fs::read_to_string(project.path().join(".env")).expect("read"),
            "SECRET=2\n",
            "secrets are not touched"
        );
        let left: Vec<String> = baseline
            .changes(&root, &policy)
            .expect("changes")
            .iter()
            .map(|hunk| root.relative_display(&hunk.path))
            .collect();
        assert_eq!(left, vec!["notes.txt".to_owned()]);
    }

    #[cfg(unix)]
    #[test]
    fn undo_never_writes_through_a_symlink_that_leads_out() {
        let project = tempfile::tempdir().expect("project");
        let outside = tempfile::tempdir().expect("outside");
        let state = tempfile::tempdir().expect("state");
        std::fs::create_dir_all(project.path().join("src")).expect("mkdir");
        std::fs::write(project.path().join("src/main.rs"), "fn main() {}\n").expect("write");
        let root = ProjectRoot::new(project.path()).expect("root");
        let baseline = Baseline::at(state.path());
        baseline
            .record(&root, &ToolPolicy::default())
            .expect("record");
        std::fs::remove_dir_all(project.path().join("src")).expect("remove");
        std::os::unix::fs::symlink(outside.path(), project.path().join("src")).expect("link");
        baseline.restore(&root).expect("restore");
        assert!(
            !outside.path().join("main.rs").exists(),
            "nothing written outside the root"
        );
    }
}
