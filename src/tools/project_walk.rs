//! Walking the project as the tools see it: `.gitignore`, `.ignore` and `.git/info/exclude`
//! honoured (also outside a git repository) with the user's global excludes, dotfiles shown,
//! `.git` never entered, links never followed, paths in sorted order.
//!
//! The ignore files are the project's, so anything may stand in their place. They are read
//! here, through `ProjectFile` (a FIFO, a link or a device named `.gitignore` is passed over, a
//! huge one read only in part), and not by the walker library, which would open them blocking
//! and read them whole.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::overrides::OverrideBuilder;
use ignore::{Match, WalkBuilder};

use super::{ProjectFile, ProjectRoot, ToolError};

/// The most of one ignore file that is read; a longer one counts up to its last whole line
/// before that.
const MAX_IGNORE_FILE_BYTES: u64 = 1024 * 1024;

/// A walker over `dir` (inside `root`) that honours the project's ignore files, shows dotfiles
/// but never descends into `.git`, does not follow symlinks and yields paths in sorted order.
pub fn project_walker(
    root: &ProjectRoot,
    dir: &Path,
    glob: Option<&str>,
) -> Result<ignore::Walk, ToolError> {
    let rules = IgnoreRules::new(root.clone());
    let mut builder = WalkBuilder::new(dir);
    builder
        .hidden(false)
        .follow_links(false)
        .ignore(false)
        .git_ignore(false)
        .git_exclude(false)
        .git_global(false)
        .parents(false)
        .sort_by_file_path(|a, b| a.cmp(b))
        .filter_entry(move |entry| {
            entry.file_name() != ".git"
                && !rules.ignores(
                    entry.path(),
                    entry.file_type().is_some_and(|kind| kind.is_dir()),
                )
        });
    if let Some(glob) = glob.filter(|glob| !glob.trim().is_empty()) {
        let mut overrides = OverrideBuilder::new(root.path());
        overrides
            .add(glob)
            .map_err(|err| ToolError::InvalidInput(format!("glob {glob:?}: {err}")))?;
        let overrides = overrides
            .build()
            .map_err(|err| ToolError::InvalidInput(format!("glob {glob:?}: {err}")))?;
        builder.overrides(overrides);
    }
    Ok(builder.build())
}

/// The ignore rules of the project, each directory's read once, when the walk first needs
/// them.
struct IgnoreRules {
    root: ProjectRoot,
    /// The user's own excludes file (`core.excludesFile`), outside the project.
    global: Gitignore,
    dirs: Mutex<HashMap<PathBuf, Arc<DirectoryRules>>>,
}

/// What one directory's own files say.
struct DirectoryRules {
    /// `.ignore`, which wins over the git files.
    ignore: Gitignore,
    gitignore: Gitignore,
    /// `.git/info/exclude`, when the directory is a repository's top.
    exclude: Gitignore,
    /// It is a repository's top: the git files of directories above do not reach into it.
    repository: bool,
}

impl IgnoreRules {
    fn new(root: ProjectRoot) -> IgnoreRules {
        let (global, _) = GitignoreBuilder::new(root.path()).build_global();
        IgnoreRules {
            root,
            global,
            dirs: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `path` is ignored: the nearest directory whose `.ignore` says anything of it
    /// decides, else the nearest whose `.gitignore` does (up to its repository's top), then
    /// that repository's exclude file, then the user's global one; as git and ripgrep do.
    fn ignores(&self, path: &Path, is_dir: bool) -> bool {
        let mut ignore = Match::None;
        let mut gitignore = Match::None;
        let mut exclude = Match::None;
        let mut left_repository = false;
        let mut dir = path.parent();
        while let Some(current) = dir.filter(|dir| dir.starts_with(self.root.path())) {
            let rules = self.rules_of(current);
            if ignore.is_none() {
                ignore = rules.ignore.matched(path, is_dir).map(|_| ());
            }
            if !left_repository {
                if gitignore.is_none() {
                    gitignore = rules.gitignore.matched(path, is_dir).map(|_| ());
                }
                if exclude.is_none() {
                    exclude = rules.exclude.matched(path, is_dir).map(|_| ());
                }
                left_repository = rules.repository;
            }
            dir = current.parent();
        }
        ignore
            .or(gitignore)
            .or(exclude)
            .or(self.global.matched(path, is_dir).map(|_| ()))
            .is_ignore()
    }

    fn rules_of(&self, dir: &Path) -> Arc<DirectoryRules> {
        let mut dirs = self
            .dirs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        dirs.entry(dir.to_path_buf())
            .or_insert_with(|| Arc::new(self.read_rules(dir)))
            .clone()
    }

    fn read_rules(&self, dir: &Path) -> DirectoryRules {
        let git = dir.join(".git");
        let git_kind = git
            .symlink_metadata()
            .ok()
            .map(|metadata| metadata.file_type());
        let exclude = if git_kind.is_some_and(|kind| kind.is_dir()) {
            self.matcher(dir, &git.join("info/exclude"))
        } else {
            Gitignore::empty()
        };
        DirectoryRules {
            ignore: self.matcher(dir, &dir.join(".ignore")),
            gitignore: self.matcher(dir, &dir.join(".gitignore")),
            exclude,
            repository: git_kind.is_some(),
        }
    }

    /// The rules of the ignore file `file`, relative to `dir`; none when it is missing or not
    /// a regular file reached without a link.
    fn matcher(&self, dir: &Path, file: &Path) -> Gitignore {
        let text = match ProjectFile::open(&self.root, file)
            .and_then(|opened| opened.read_start(MAX_IGNORE_FILE_BYTES + 1))
        {
            Ok(bytes) => whole_lines(bytes),
            Err(super::ReadError::NotFound) => return Gitignore::empty(),
            Err(err) => {
                tracing::debug!(path = %file.display(), error = %err, "an ignore file is not read");
                return Gitignore::empty();
            }
        };
        let mut builder = GitignoreBuilder::new(dir);
        for (index, line) in text.lines().enumerate() {
            let line = if index == 0 {
                line.trim_start_matches('\u{feff}')
            } else {
                line
            };
            // A line git would not understand either is passed over.
            let _ = builder.add_line(Some(file.to_path_buf()), line);
        }
        builder.build().unwrap_or_else(|_| Gitignore::empty())
    }
}

/// The text of `bytes`, cut after its last newline when there are more than
/// `MAX_IGNORE_FILE_BYTES` (the file was read only in part).
fn whole_lines(mut bytes: Vec<u8>) -> String {
    if bytes.len() as u64 > MAX_IGNORE_FILE_BYTES {
        let end = bytes.iter().rposition(|&byte| byte == b'\n').unwrap_or(0);
        bytes.truncate(end);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}
