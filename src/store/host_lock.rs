//! Which hosts are alive. Each host holds an exclusive lock on `$LOOPR_HOME/hosts/<pid>.lock`
//! for as long as it runs; the kernel drops the lock when the process dies, however it dies.
//! Unlike "is a process with this pid running", this cannot be fooled by a pid reused after
//! a crash or a reboot.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

/// Held for the host's whole life.
#[derive(Debug)]
pub struct HostLock {
    _file: File,
}

impl HostLock {
    pub fn acquire(loopr_home: &Path, pid: u32) -> std::io::Result<HostLock> {
        let path = lock_path(loopr_home, pid);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        file.lock()?;
        Ok(HostLock { _file: file })
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
    }
}
