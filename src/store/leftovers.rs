//! Files a killed process leaves behind: the temporary files of atomic writes
//! (`.loopr-tmp-<pid>-*`, `.loopr-link-<pid>-*`). Each carries its writer's pid, so a file is
//! removed only once that host is gone (its host lock is free); a live host's write in
//! progress is never touched.

use std::path::Path;
use std::time::{Duration, SystemTime};

use super::host_lock::host_is_alive;

pub(super) const TEMP_PREFIX: &str = ".loopr-tmp-";
pub(super) const LINK_PREFIX: &str = ".loopr-link-";

/// Temporary files of older versions carry no pid; they are removed once surely stale.
const UNTAGGED_MAX_AGE: Duration = Duration::from_secs(60 * 60);

/// Removes `path` if it is a temporary file left by a dead host; returns whether it did.
pub fn remove_if_leftover(path: &Path, loopr_home: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
        return false;
    };
    let Some(rest) = name
        .strip_prefix(TEMP_PREFIX)
        .or_else(|| name.strip_prefix(LINK_PREFIX))
    else {
        return false;
    };
    let writer_gone = match rest
        .split_once('-')
        .and_then(|(pid, _)| pid.parse::<u32>().ok())
    {
        Some(pid) => pid != std::process::id() && !host_is_alive(loopr_home, pid),
        None => std::fs::symlink_metadata(path)
            .and_then(|metadata| metadata.modified())
            .ok()
            .and_then(|modified| SystemTime::now().duration_since(modified).ok())
            .is_some_and(|age| age > UNTAGGED_MAX_AGE),
    };
    if !writer_gone {
        return false;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {
            tracing::info!(path = %path.display(), "removed a temporary file a killed host left");
            true
        }
        Err(err) => {
            tracing::debug!(path = %path.display(), error = %err, "removing a leftover temporary file");
            false
        }
    }
}

/// Removes the leftovers anywhere under `dir` (a project's state directory: small, and
/// only Loopr writes there). Blocking.
pub fn sweep_state_dir(dir: &Path, loopr_home: &Path) -> usize {
    let mut removed = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => stack.push(path),
                Ok(_) => removed += usize::from(remove_if_leftover(&path, loopr_home)),
                Err(_) => {}
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::HostLock;

    #[test]
    fn only_files_of_dead_hosts_are_removed() {
        let home = tempfile::tempdir().expect("home");
        let dir = home.path().join("project/loops/a");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let live = HostLock::acquire(home.path(), 4_000_001).expect("lock");
        let files = [
            ".loopr-tmp-4000001-abc",
            ".loopr-tmp-4000002-abc",
            ".loopr-link-4000002-0000abcd",
            "run.json",
        ];
        for name in files {
            std::fs::write(dir.join(name), "x").expect("write");
        }
        let untagged = dir.join(".loopr-tmpXYZ123");
        std::fs::write(&untagged, "x").expect("write");
        assert_eq!(
            sweep_state_dir(&home.path().join("project"), home.path()),
            2
        );
        assert!(
            dir.join(".loopr-tmp-4000001-abc").exists(),
            "a live host's write"
        );
        assert!(dir.join("run.json").exists());
        assert!(
            untagged.exists(),
            "a fresh untagged file may be a write in progress"
        );
        drop(live);
    }
}
