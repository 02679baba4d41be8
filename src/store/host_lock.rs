//! Which hosts are alive. Each host holds an exclusive lock on `$LOOPR_HOME/hosts/<pid>.lock`
//! for as long as it runs; the kernel drops the lock when the process dies, however it dies.
//! Unlike "is a process with this pid running", this cannot be fooled by a pid reused after
//! a crash or a reboot.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

/// Held for the host's whole life; the file goes with it on a normal exit, and the next host
/// removes the file of one that was killed.
#[derive(Debug)]
pub struct HostLock {
    path: PathBuf,
    _file: File,
}

impl HostLock {
    pub fn acquire(loopr_home: &Path, pid: u32) -> std::io::Result<HostLock> {
        let path = lock_path(loopr_home, pid);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = loop {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)?;
            file.lock()?;
            // A sweeping host may have taken the file for a dead host's and removed it
            // between our open and our lock; a lock on a file nobody can open again proves
            // nothing, so start over with a new one.
            if is_same_file(&path, &file) {
                break file;
            }
        };
        let lock = HostLock { path, _file: file };
        remove_dead_locks(loopr_home, pid);
        Ok(lock)
    }
}

impl Drop for HostLock {
    fn drop(&mut self) {
        // Removed while still held, so nobody mistakes it for a dead host's in between.
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(unix)]
fn is_same_file(path: &Path, file: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(path), file.metadata()) {
        (Ok(on_disk), Ok(held)) => on_disk.dev() == held.dev() && on_disk.ino() == held.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn is_same_file(path: &Path, _file: &File) -> bool {
    path.exists()
}

/// Removes the lock files of hosts that are gone (nobody holds their lock), which otherwise
/// pile up after crashes. Each is removed while we hold its lock.
fn remove_dead_locks(loopr_home: &Path, own_pid: u32) {
    let Ok(entries) = std::fs::read_dir(loopr_home.join("hosts")) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_other_lock = path.extension().is_some_and(|ext| ext == "lock")
            && path.file_stem().and_then(|stem| stem.to_str()) != Some(&own_pid.to_string());
        if !is_other_lock {
            continue;
        }
        let Ok(file) = File::open(&path) else {
            continue;
        };
        if file.try_lock().is_ok() && std::fs::remove_file(&path).is_ok() {
            tracing::info!(path = %path.display(), "removed the lock file of a host that exited");
        }
    }
}

/// Whether the host that ran as `pid` still runs.
pub fn host_is_alive(loopr_home: &Path, pid: u32) -> bool {
    let Ok(file) = File::open(lock_path(loopr_home, pid)) else {
        return false;
    };
    match file.try_lock() {
        Ok(()) => {
            // Nobody held it: that host is gone. Our probe lock goes with `file`.
            false
        }
        Err(TryLockError::WouldBlock) => true,
        // Unknown: assume alive rather than risk running its loops twice.
        Err(TryLockError::Error(_)) => true,
    }
}

fn lock_path(loopr_home: &Path, pid: u32) -> PathBuf {
    loopr_home.join("hosts").join(format!("{pid}.lock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_alive_while_it_holds_its_lock() {
        let home = tempfile::tempdir().expect("tempdir");
        assert!(!host_is_alive(home.path(), 4242), "no lock file: gone");
        let lock = HostLock::acquire(home.path(), 4242).expect("lock");
        assert!(host_is_alive(home.path(), 4242));
        drop(lock);
        assert!(!host_is_alive(home.path(), 4242), "released: gone");
        assert!(
            !lock_path(home.path(), 4242).exists(),
            "a host that exits takes its lock file along"
        );
    }

    #[test]
    fn a_starting_host_removes_the_lock_files_of_dead_hosts_only() {
        let home = tempfile::tempdir().expect("tempdir");
        let live = HostLock::acquire(home.path(), 5001).expect("lock");
        // A killed host's file: present, nobody holds it.
        std::fs::write(lock_path(home.path(), 5002), "").expect("dead host's file");
        let starting = HostLock::acquire(home.path(), 5003).expect("lock");
        assert!(
            lock_path(home.path(), 5001).exists(),
            "a live host keeps its file"
        );
        assert!(host_is_alive(home.path(), 5001));
        assert!(!lock_path(home.path(), 5002).exists());
        drop((live, starting));
    }
}
