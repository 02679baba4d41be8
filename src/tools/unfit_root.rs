//! Directories that cannot be a project root. Loops write anywhere in their project (tools and
//! commands alike), so a root that holds more than one project would let them write what no
//! plan is about: the user's shell and editor start-up files under `$HOME`, the whole system
//! under `/`, or Loopr's own state, whose database holds the settings later loops run with
//! (a command could turn the sandbox off for them).

use std::path::{Path, PathBuf};

/// Why a directory cannot be a project root.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnfitRoot {
    #[error("{root} is the file system's root")]
    FileSystemRoot { root: PathBuf },
    #[error("{root} is your home directory (your shell's and editor's start-up files are there)")]
    Home { root: PathBuf },
    #[error("{root} holds your home directory")]
    HoldsHome { root: PathBuf },
    #[error("{root} holds Loopr's own state ({state})")]
    HoldsState { root: PathBuf, state: PathBuf },
    #[error("{root} is inside Loopr's own state ({state})")]
    InsideState { root: PathBuf, state: PathBuf },
    #[error("{root} is a system directory")]
    System { root: PathBuf },
}

/// System directories that are never one project (the root of a mounted volume such as
/// `/srv` or `/opt` may well be one, and a project may live anywhere below these). macOS's
/// own come last: its `/tmp`, `/var` and `/etc` are links into `/private`, and a root is
/// compared canonical.
const SYSTEM_DIRECTORIES: [&str; 23] = [
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/tmp",
    "/usr",
    "/var",
    "/System",
    "/Library",
    "/Applications",
    "/Volumes",
    "/cores",
    "/private",
    "/private/etc",
    "/private/tmp",
    "/private/var",
];

/// Why `root` (canonical) cannot be a project, given the user's home directory and Loopr's
/// state directory (each as configured; compared once symlinks are resolved), or `None` if
/// it can be one.
pub fn unfit_root(root: &Path, home: Option<&Path>, state: &Path) -> Option<UnfitRoot> {
    let owned = || root.to_path_buf();
    if root.parent().is_none() {
        return Some(UnfitRoot::FileSystemRoot { root: owned() });
    }
    let state = resolved(state);
    if state.starts_with(root) {
        return Some(UnfitRoot::HoldsState {
            root: owned(),
            state,
        });
    }
    if root.starts_with(&state) {
        return Some(UnfitRoot::InsideState {
            root: owned(),
            state,
        });
    }
    if let Some(home) = home.map(resolved) {
        if home == root {
            return Some(UnfitRoot::Home { root: owned() });
        }
        if home.starts_with(root) {
            return Some(UnfitRoot::HoldsHome { root: owned() });
        }
    }
    if SYSTEM_DIRECTORIES.iter().any(|dir| root == Path::new(dir)) {
        return Some(UnfitRoot::System { root: owned() });
    }
    None
}

/// `path` with symlinks resolved as far as it exists (the state directory may not exist yet),
/// the rest appended as given.
fn resolved(path: &Path) -> PathBuf {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        if let Ok(canonical) = existing.canonicalize() {
            return rest
                .iter()
                .rev()
                .fold(canonical, |path: PathBuf, name| path.join(name));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(root: &str, home: &str, state: &str) -> Option<UnfitRoot> {
        unfit_root(Path::new(root), Some(Path::new(home)), Path::new(state))
    }

    #[test]
    fn home_the_file_system_root_and_what_holds_them_are_refused() {
        let state = "/home/me/.loopr";
        assert!(matches!(
            check("/", "/home/me", state),
            Some(UnfitRoot::FileSystemRoot { .. })
        ));
        assert!(matches!(
            check("/home/me", "/home/me", "/var/lib/loopr"),
            Some(UnfitRoot::Home { .. })
        ));
        assert!(matches!(
            check("/home", "/home/me", "/var/lib/loopr"),
            Some(UnfitRoot::HoldsHome { .. })
        ));
        assert!(matches!(
            check("/usr", "/home/me", state),
            Some(UnfitRoot::System { .. })
        ));
        // macOS: `/tmp` as it is canonical there, and its own system folders.
        for system in ["/private/tmp", "/private", "/Applications", "/Volumes"] {
            assert!(
                matches!(
                    check(system, "/Users/me", "/Users/me/.loopr"),
                    Some(UnfitRoot::System { .. })
                ),
                "{system}"
            );
        }
        assert_eq!(check("/private/tmp/app", "/Users/me", state), None);
        assert_eq!(check("/Volumes/work/app", "/Users/me", state), None);
        assert_eq!(check("/home/me/src/app", "/home/me", state), None);
        assert_eq!(check("/usr/src/app", "/home/me", state), None);
        assert_eq!(check("/srv", "/home/me", state), None);
    }

    #[test]
    fn a_root_holding_the_state_or_inside_it_is_refused() {
        assert!(matches!(
            check("/work", "/home/me", "/work/state"),
            Some(UnfitRoot::HoldsState { .. })
        ));
        assert!(matches!(
            check("/work/state/app-1234", "/home/me", "/work/state"),
            Some(UnfitRoot::InsideState { .. })
        ));
        assert_eq!(check("/work/app", "/home/me", "/work/state"), None);
    }

    #[test]
    fn the_state_is_compared_with_its_symlinks_resolved() {
        let temp = tempfile::tempdir().expect("tempdir");
        let base = temp.path().canonicalize().expect("canonical");
        let project = base.join("project");
        std::fs::create_dir_all(project.join("state")).expect("mkdir");
        let link = base.join("state-link");
        std::os::unix::fs::symlink(project.join("state"), &link).expect("symlink");
        let refused = unfit_root(&project, None, &link.join("not-yet"));
        assert!(
            matches!(refused, Some(UnfitRoot::HoldsState { .. })),
            "{refused:?}"
        );
    }
}
