//! Landlock with namespaces, for where bubblewrap is missing or refused.
//!
//! The host starts its own binary again as `loopr sandbox-exec` (see `exec.rs`), which
//! unshares the user, mount, PID, IPC, UTS (and, without network, network) namespaces itself,
//! forks the command's PID 1, sets up the mounts there (everything read-only but the writable
//! places, a private `/tmp`, `.git`s and the state directory read-only over them, its own
//! `/proc`), applies Landlock (writes only beneath the writable places, reads everywhere) and
//! the seccomp filter, and `exec`s `sh -c`. Doing the namespaces in-process rather than through util-linux
//! `unshare` keeps it to one helper process and lets the supervisor watch the host through a
//! pidfd: `PR_SET_PDEATHSIG` set by the host would fire when the host *thread* that spawned it
//! exits (tokio's threads come and go), killing commands for nothing.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::Sandbox;

/// The oldest Landlock ABI that can keep a command from changing files outside the writable
/// places: ABI 1 and 2 cannot stop `truncate(2)`.
const MINIMUM_ABI: i32 = 3;

/// The program the host runs `sandbox-exec` with: the running binary, even if it was replaced
/// on disk since it started (`current_exe()` would then name the new one, or nothing).
const SELF_EXE: &str = "/proc/self/exe";

/// The Landlock ABI of the running kernel, if commands can be confined with it and with the
/// namespaces here (probed by running one through `sandbox-exec`).
pub(super) fn available() -> Result<i32, String> {
    if super::seccomp::filter().is_none() {
        return Err(format!(
            "Landlock cannot be used: {}",
            super::seccomp::NO_FILTER_HERE
        ));
    }
    let abi = kernel_abi()?;
    let probe_root = tempfile::tempdir()
        .map_err(|err| format!("no temporary directory to probe the sandbox in: {err}"))?;
    // `echo $$` says 1 only in a PID namespace of its own; a binary that is not loopr (a test
    // harness) cannot answer that by chance.
    let probe = std::process::Command::new(SELF_EXE)
        .args(exec_arguments(&ExecArguments {
            root: probe_root.path(),
            cwd: probe_root.path(),
            writable: &[],
            read_only: &[],
            network: false,
            shell_command: "echo $$",
        }))
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .map_err(|err| format!("the sandbox helper cannot run: {err}"))?;
    if probe.status.success() && probe.stdout == b"1\n" {
        Ok(abi)
    } else {
        let stderr = String::from_utf8_lossy(&probe.stderr);
        let why = stderr
            .trim()
            .trim_start_matches("Loopr: the sandbox could not be set up: ");
        Err(format!(
            "the namespaces Landlock (ABI {abi}) needs cannot be set up here: {}",
            if why.is_empty() {
                "the probe failed"
            } else {
                why
            }
        ))
    }
}

/// What `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)` says.
fn kernel_abi() -> Result<i32, String> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer and size 0 this only asks for the ABI version.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if abi < 0 {
        return Err(match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EOPNOTSUPP) => "Landlock is built into the kernel but not enabled (add \
                                       landlock to the kernel's lsm= boot parameter)"
                .to_owned(),
            _ => {
                "the kernel has no Landlock (it needs Linux 6.2 or later built with it)".to_owned()
            }
        });
    }
    let abi = i32::try_from(abi).unwrap_or(i32::MAX);
    if abi < MINIMUM_ABI {
        return Err(format!(
            "Landlock ABI {abi} cannot stop a command from truncating files outside the project \
             (it needs ABI {MINIMUM_ABI}, Linux 6.2 or later)"
        ));
    }
    Ok(abi)
}

struct ExecArguments<'a> {
    root: &'a Path,
    cwd: &'a Path,
    writable: &'a [PathBuf],
    read_only: &'a [PathBuf],
    network: bool,
    shell_command: &'a str,
}

fn exec_arguments(arguments: &ExecArguments<'_>) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = vec![
        "sandbox-exec".into(),
        "--parent-pid".into(),
        std::process::id().to_string().into(),
        "--root".into(),
        arguments.root.into(),
        "--cwd".into(),
        arguments.cwd.into(),
    ];
    for path in arguments.writable {
        args.push("--writable".into());
        args.push(path.into());
    }
    for path in arguments.read_only {
        args.push("--read-only".into());
        args.push(path.into());
    }
    if arguments.network {
        args.push("--network".into());
    }
    args.push("--".into());
    args.push(arguments.shell_command.into());
    args
}

/// `read_only`: what to bind read-only over the writable places (`protected.rs`).
pub(super) fn command(
    sandbox: &Sandbox,
    shell_command: &str,
    cwd: &Path,
    root: &Path,
    read_only: &[PathBuf],
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(SELF_EXE);
    command.args(exec_arguments(&ExecArguments {
        root,
        cwd,
        writable: &sandbox.writable,
        read_only,
        network: sandbox.network,
        shell_command,
    }));
    // `sandbox-exec` passes its environment on to the command as it is.
    command
        .env_clear()
        .envs(sandbox.environment().iter().cloned())
        .env("TMPDIR", "/tmp");
    command
}
