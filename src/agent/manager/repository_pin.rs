//! The repository a project was in when Loopr first saw it, kept in the project's state
//! (`repository.json`). A command the model runs may create a repository (`git init`, a
//! `.git` file naming another git directory) whose config a commit would obey outside the
//! sandbox (filters, signing programs); the phase commit runs only in the pinned one.

use std::path::{Path, PathBuf};

use crate::store::{ProjectLayout, write_atomic};

const PIN_FILE: &str = "repository.json";

#[derive(serde::Serialize, serde::Deserialize)]
struct RepositoryPin {
    /// The canonical git directory, or none when the project was in no repository.
    git_dir: Option<PathBuf>,
}

/// Where the pin of the project at `layout` is kept.
pub(super) fn pin_path(layout: &ProjectLayout) -> PathBuf {
    layout.project_dir().join(PIN_FILE)
}

/// Records the repository holding `root` unless one is recorded already.
pub(super) fn pin_repository(layout: &ProjectLayout, root: &Path) {
    let path = pin_path(layout);
    if path.exists() {
        return;
    }
    let pin = RepositoryPin {
        git_dir: git_dir_above(root),
    };
    let written = serde_json::to_vec_pretty(&pin)
        .map_err(std::io::Error::other)
        .and_then(|bytes| write_atomic(&path, &bytes));
    if let Err(err) = written {
        tracing::warn!(path = %path.display(), error = %err, "recording the project's repository");
    }
}

/// Why a commit in the repository at `git_dir` is refused, if it is: it is not the one
/// recorded when Loopr first saw the project.
pub(super) fn unpinned_repository(layout: &ProjectLayout, git_dir: &Path) -> Option<String> {
    let path = pin_path(layout);
    let pinned = std::fs::read(&path)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<RepositoryPin>(&bytes).ok())
        .map(|pin| pin.git_dir);
    let found = git_dir.canonicalize().ok();
    match pinned {
        Some(pinned) if pinned.is_some() && pinned == found => None,
        Some(None) => Some(format!(
            "the repository at {} appeared after Loopr first saw the project, when it was in \
             none (a command may have created it); if it is yours, delete {} and the next phase \
             is committed",
            git_dir.display(),
            path.display()
        )),
        Some(Some(pinned)) => Some(format!(
            "the project's repository is {} but was {} when Loopr first saw the project (a \
             command may have moved it); if the change is yours, delete {} and the next phase \
             is committed",
            git_dir.display(),
            pinned.display(),
            path.display()
        )),
        None => Some(format!(
            "Loopr has no record of the project's repository ({} is missing or unreadable); \
             reopen the project to record it",
            path.display()
        )),
    }
}

/// The git directory git would find for `dir`, by the files alone (no git run): the nearest
/// `.git` folder, or the folder a `.git` file names, canonical.
fn git_dir_above(dir: &Path) -> Option<PathBuf> {
    for folder in dir.ancestors() {
        let dot_git = folder.join(".git");
        let Ok(meta) = std::fs::metadata(&dot_git) else {
            continue;
        };
        if meta.is_dir() {
            return dot_git.canonicalize().ok();
        }
        let text = std::fs::read_to_string(&dot_git).ok()?;
        let named = text.strip_prefix("gitdir:")?.trim();
        return folder.join(named).canonicalize().ok();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let status = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .status()
            .expect("git");
        assert!(status.success(), "{args:?}");
    }

    /// A repository a command creates after the pin, with a planted clean filter: the phase
    /// commit is refused, and git as the host runs it never starts the filter.
    #[tokio::test]
    async fn a_repository_created_after_the_pin_is_refused_and_runs_no_filter() {
        let home = tempfile::tempdir().expect("home");
        let root = tempfile::tempdir().expect("root");
        let root = root.path().canonicalize().expect("canonical");
        let layout = ProjectLayout::new(home.path(), &root);
        std::fs::create_dir_all(layout.project_dir()).expect("state");
        pin_repository(&layout, &root);
        // The model's command: a repository with a filter its attributes choose.
        let marker = root.join("marker");
        git(&root, &["init", "-q"]);
        git(
            &root,
            &[
                "config",
                "filter.x.clean",
                &format!("touch {}; cat", marker.display()),
            ],
        );
        std::fs::write(root.join(".gitattributes"), "* filter=x\n").expect("attrs");
        std::fs::write(root.join("a.txt"), "hello\n").expect("file");
        let found = crate::git::Git::find(&root).await.expect("a repository");
        found.command(["add", "-A"]).output().await.expect("add");
        found.command(["write-tree"]).output().await.expect("tree");
        assert!(!marker.exists(), "a host call ran the planted filter");
        let refused = unpinned_repository(&layout, found.git_dir()).expect("refused");
        assert!(
            refused.contains("appeared after Loopr first saw the project"),
            "{refused}"
        );
        // The repository that was there first is the one a commit may run in.
        let home = tempfile::tempdir().expect("home");
        let layout = ProjectLayout::new(home.path(), &root);
        std::fs::create_dir_all(layout.project_dir()).expect("state");
        pin_repository(&layout, &root);
        assert_eq!(unpinned_repository(&layout, found.git_dir()), None);
    }
}
