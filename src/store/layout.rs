//! Where state lives on disk: `$LOOPR_HOME`, one directory per project (basename and a hash of
//! its path), and each loop's directories, iterations, artifacts and `current` link in it.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::records::LoopId;

/// `$LOOPR_HOME`, else `~/.loopr`.
pub fn loopr_home_from_env() -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("LOOPR_HOME").filter(|value| !value.is_empty()) {
        return Some(PathBuf::from(home));
    }
    std::env::var_os("HOME")
        .filter(|value| !value.is_empty())
        .map(|home| PathBuf::from(home).join(".loopr"))
}

/// Where one project's state lives: `$LOOPR_HOME/<basename>-<hash>/`. The hash of the root's
/// path keeps two checkouts with the same basename apart.
#[derive(Clone, Debug)]
pub struct ProjectLayout {
    project_dir: PathBuf,
}

impl ProjectLayout {
    pub fn new(loopr_home: &Path, project_root: &Path) -> ProjectLayout {
        ProjectLayout {
            project_dir: loopr_home.join(project_key(project_root)),
        }
    }

    pub fn project_dir(&self) -> &Path {
        &self.project_dir
    }

    pub fn database(&self) -> PathBuf {
        self.project_dir.join("loopr.db")
    }

    /// The loop a file of this project's state belongs to (an artifact, a journal), if any.
    pub fn loop_of(&self, path: &Path) -> Option<LoopId> {
        let loops = self.project_dir.join("loops");
        let inside = |loops: &Path, path: &Path| {
            let name = path.strip_prefix(loops).ok()?.components().next()?;
            LoopId::parse(name.as_os_str().to_str()?)
        };
        inside(&loops, path).or_else(|| {
            inside(
                &std::fs::canonicalize(&loops).ok()?,
                &std::fs::canonicalize(path).ok()?,
            )
        })
    }

    pub fn loop_dir(&self, id: &LoopId) -> PathBuf {
        self.project_dir.join("loops").join(id.as_str())
    }

    /// `iterations/NNN`, relative to the loop directory; the form `triggered_by` and the
    /// `current` link use.
    pub fn iteration_relative(iteration: u32) -> PathBuf {
        Path::new("iterations").join(format!("{iteration:03}"))
    }

    pub fn iteration_dir(&self, id: &LoopId, iteration: u32) -> PathBuf {
        self.loop_dir(id).join(Self::iteration_relative(iteration))
    }

    pub fn artifacts_dir(&self, id: &LoopId, iteration: u32) -> PathBuf {
        self.iteration_dir(id, iteration).join("artifacts")
    }

    /// `in_loop` (a path relative to loop `id`'s directory) as seen from any loop's artifacts
    /// directory: up through `artifacts`, `NNN`, `iterations` and that loop's directory. A
    /// markdown link written this way keeps working when `$LOOPR_HOME` moves.
    pub fn from_artifacts_dir(id: &LoopId, in_loop: &Path) -> PathBuf {
        Path::new("../../../..").join(id.as_str()).join(in_loop)
    }

    /// The loop's conversation journal (JSON lines, appended each turn), which a restarted
    /// host resumes from.
    pub fn journal(&self, id: &LoopId) -> PathBuf {
        self.loop_dir(id).join("journal.jsonl")
    }

    /// Where versions before the journal kept a run's state (rewritten every turn); read
    /// once to resume such a run, then replaced by the journal.
    pub fn run_state(&self, id: &LoopId) -> PathBuf {
        self.loop_dir(id).join("run.json")
    }

    /// The latest verification of the phase (or spec) loop `id`'s artifact, beside it:
    /// not an iteration, so verifying never changes the artifact.
    pub fn verification(&self, id: &LoopId) -> PathBuf {
        self.loop_dir(id).join("verification.json")
    }

    /// Which tasks of the phase loop `id`'s artifact are done, beside it: not an iteration.
    pub fn task_progress(&self, id: &LoopId) -> PathBuf {
        self.loop_dir(id).join("task_progress.json")
    }

    pub fn current_link(&self, id: &LoopId) -> PathBuf {
        self.loop_dir(id).join("current")
    }
}

/// The longest file name Linux and macOS file systems take, in bytes.
const NAME_MAX: usize = 255;

fn project_key(project_root: &Path) -> String {
    let basename = project_root
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".to_owned());
    let safe_basename: String = basename
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let digest = Sha256::digest(project_root.to_string_lossy().as_bytes());
    let short_hash: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    // A name up to NAME_MAX bytes plus the hash would not fit: the name is cut (on a
    // character) and the hash of the whole path keeps such projects apart. A name that fits
    // keeps the key earlier versions gave it, so its state is found again.
    let room = NAME_MAX - short_hash.len() - 1;
    let mut cut = safe_basename.len().min(room);
    while !safe_basename.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}-{short_hash}", &safe_basename[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_key_is_basename_and_short_hash_distinct_per_path() {
        let first = project_key(Path::new("/home/me/work/app"));
        let second = project_key(Path::new("/home/me/other/app"));
        assert!(first.starts_with("app-") && first.len() == "app-".len() + 8);
        assert_ne!(first, second);
        assert_eq!(first, project_key(Path::new("/home/me/work/app")));
    }

    #[test]
    fn a_long_non_ascii_project_name_still_makes_a_state_directory() {
        // 120 characters of 3 bytes each: a 360-byte name... cannot be a directory itself, but
        // 85 of them (255 bytes) can, and its key must fit too.
        let longest: String = "項".repeat(85);
        assert_eq!(longest.len(), 255);
        let parent = tempfile::tempdir().expect("tempdir");
        let root = parent.path().join(&longest);
        std::fs::create_dir(&root).expect("a project with the longest name the system allows");
        let key = project_key(&root);
        assert!(key.len() <= NAME_MAX, "{} bytes", key.len());
        let home = tempfile::tempdir().expect("tempdir");
        let layout = ProjectLayout::new(home.path(), &root);
        std::fs::create_dir_all(layout.project_dir()).expect("the state directory");
        assert!(key.starts_with("項項項"), "{key}");
        // Two long names that differ only past the cut still get their own state.
        let other = parent.path().join(format!("{}x", "項".repeat(84)));
        assert_ne!(key, project_key(&other));
    }

    #[test]
    fn a_name_that_fits_keeps_the_key_earlier_versions_gave_it() {
        let digest = Sha256::digest(b"/home/me/work/app");
        let hash: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            project_key(Path::new("/home/me/work/app")),
            format!("app-{hash}")
        );
    }

    #[test]
    fn a_path_from_one_artifacts_directory_reaches_another_loop() {
        let layout = ProjectLayout::new(Path::new("/state"), Path::new("/p/app"));
        let child = LoopId::parse("20261121-000000-abcd").expect("id");
        let parent = LoopId::parse("20261120-000000-dcba").expect("id");
        let relative = ProjectLayout::from_artifacts_dir(
            &parent,
            Path::new("iterations/002/artifacts/plan.md"),
        );
        let mut reached = layout.artifacts_dir(&child, 7);
        for component in relative.components() {
            match component {
                std::path::Component::ParentDir => assert!(reached.pop()),
                other => reached.push(other),
            }
        }
        assert_eq!(
            reached,
            layout.artifacts_dir(&parent, 2).join("plan.md"),
            "{}",
            relative.display()
        );
    }

    #[test]
    fn iteration_directories_are_zero_padded() {
        let layout = ProjectLayout::new(Path::new("/state"), Path::new("/p/app"));
        let id = LoopId::parse("20261121-000000-abcd").expect("id");
        let dir = layout.artifacts_dir(&id, 1);
        assert!(dir.ends_with("loops/20261121-000000-abcd/iterations/001/artifacts"));
    }
}
