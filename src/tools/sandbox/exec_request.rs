//! What `loopr sandbox-exec` is asked to run and how its set-up fails, on every OS: the
//! supervisor itself (`exec.rs`) is Linux's, and elsewhere the subcommand refuses
//! (`refused_without_linux`).

use std::io;
use std::path::PathBuf;

/// The exit status when the sandbox could not be set up (as `env` and `unshare` use it).
pub const SETUP_FAILED: i32 = 125;

/// What to run, and where it may write.
#[derive(Clone, Debug)]
pub struct ExecRequest {
    /// The host: the command is killed when it dies.
    pub parent_pid: i32,
    pub root: PathBuf,
    pub cwd: PathBuf,
    pub writable: Vec<PathBuf>,
    /// Bound read-only over the writable places, last (`.git`s, the state directory).
    pub read_only: Vec<PathBuf>,
    pub network: bool,
    pub shell_command: String,
}

/// A step of setting up the sandbox that failed.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {source}")]
pub struct SetupError {
    pub(super) step: String,
    pub(super) source: io::Error,
}

pub(super) fn failed(step: impl Into<String>) -> impl FnOnce(io::Error) -> SetupError {
    let step = step.into();
    move |source| SetupError { step, source }
}

/// Why `sandbox-exec` runs nothing on `os` (as `std::env::consts::OS` names it), which is not
/// Linux: it confines with what only Linux has. The host never starts it there.
#[cfg_attr(linux_apis, allow(dead_code))]
pub(super) fn refused_without_linux(os: &str) -> SetupError {
    failed("loopr sandbox-exec")(io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "it confines commands with Landlock and namespaces, which only Linux has, and this \
             is {}; nothing was run",
            super::os_name(os)
        ),
    ))
}
