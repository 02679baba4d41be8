//! bubblewrap (`bwrap`): a new mount, PID, IPC, UTS (and, without network, network)
//! namespace, the root filesystem bound read-only and the writable paths bound over it.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::Sandbox;

/// What every sandboxed command gets, before the paths and environment of its settings.
const BASE_ARGS: [&str; 15] = [
    // Killed with everything it started when the host dies, however it dies.
    "--die-with-parent",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    // No terminal to inject keystrokes into.
    "--new-session",
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--tmpfs",
    "/tmp",
];

/// `bwrap` on PATH, if it can set up a sandbox here (user namespaces may be off).
pub(super) fn available() -> Result<PathBuf, String> {
    if super::seccomp::filter().is_none() {
        return Err(format!(
            "bubblewrap cannot be used: {}",
            super::seccomp::NO_FILTER_HERE
        ));
    }
    if crate::test_hooks::bubblewrap_hidden() {
        return Err("bubblewrap (bwrap) is not installed (hidden for a test)".to_owned());
    }
    let bwrap =
        find_on_path("bwrap").ok_or_else(|| "bubblewrap (bwrap) is not installed".to_owned())?;
    // The very namespaces and mounts commands get, so a probe that passes means they work.
    let probe = std::process::Command::new(&bwrap)
        .args(BASE_ARGS)
        .args(["--unshare-net", "--", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match probe {
        Ok(output) if output.status.success() => Ok(bwrap),
        Ok(output) => Err(format!(
            "{} cannot set up a sandbox here: {}",
            bwrap.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )),
        Err(err) => Err(format!("{} cannot run: {err}", bwrap.display())),
    }
}

/// `program` on PATH, else where distributions install it (a host started with a bare
/// environment has no PATH).
fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/bin", "/usr/local/bin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// `read_only`: what to bind read-only over the writable places (`protected.rs`).
pub(super) fn command(
    bwrap: &Path,
    sandbox: &Sandbox,
    shell_command: &str,
    cwd: &Path,
    root: &Path,
    read_only: &[PathBuf],
) -> std::io::Result<tokio::process::Command> {
    let mut command = tokio::process::Command::new(bwrap);
    command.args(BASE_ARGS);
    if !sandbox.network {
        command.arg("--unshare-net");
    }
    // After /tmp: a project (or writable path) under /tmp is bound back over the tmpfs.
    bind(&mut command, "--bind", root);
    for path in &sandbox.writable {
        // A missing path would make bwrap fail; nothing to write there anyway.
        if path.exists() {
            bind(&mut command, "--bind", path);
        }
    }
    // Last, so that no writable place covers them. One gone since it was found has nothing
    // left to keep.
    for path in read_only {
        bind(&mut command, "--ro-bind-try", path);
    }
    command.arg("--clearenv");
    for (name, value) in sandbox.environment() {
        command.arg("--setenv").arg(name).arg(value);
    }
    command.args(["--setenv", "TMPDIR", "/tmp"]);
    command.arg("--chdir").arg(cwd);
    // Without its filter the sandbox has holes (Unix sockets, io_uring): no command runs.
    match seccomp_fd() {
        Ok(filter) => {
            command.args(["--seccomp", &SECCOMP_FD.to_string()]);
            let raw = std::os::fd::AsRawFd::as_raw_fd(&filter);
            // SAFETY: between fork and exec only dup2 runs (async-signal-safe); the copy at
            // SECCOMP_FD has no close-on-exec, so bwrap inherits it and reads the filter.
            // `filter` moves into the closure, which the command keeps until it is spawned.
            unsafe {
                command.pre_exec(move || {
                    let _keep = &filter;
                    if libc::dup2(raw, SECCOMP_FD) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        Err(err) => {
            return Err(std::io::Error::other(format!(
                "the sandbox's seccomp filter could not be made ({err}); the command was not run"
            )));
        }
    }
    command.args(["--", "sh", "-c"]).arg(shell_command);
    // bwrap reads its own environment for nothing the command sees; keep it clean anyway.
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    Ok(command)
}

/// Where bwrap finds the seccomp filter (above stdio, below anything tokio uses in the child).
const SECCOMP_FD: i32 = 10;

/// The filter in a memory file, read from its start by bwrap; an error on an architecture the
/// filter does not know (which `available` refuses before).
fn seccomp_fd() -> std::io::Result<std::fs::File> {
    use std::io::{Seek, Write};
    use std::os::fd::FromRawFd;
    let program = super::seccomp::filter()
        .ok_or_else(|| std::io::Error::other(super::seccomp::NO_FILTER_HERE))?;
    // SAFETY: memfd_create takes a NUL-terminated name and flags, returning a new fd or -1.
    let fd = unsafe { libc::memfd_create(c"loopr-seccomp".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nothing else owns.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(&program)?;
    file.rewind()?;
    Ok(file)
}

fn bind(command: &mut tokio::process::Command, how: &str, path: &Path) {
    command.arg(how).arg(path).arg(path);
}
