//! bubblewrap (`bwrap`): a new mount, PID, IPC, UTS (and, without network, network)
//! namespace, the root filesystem bound read-only and the writable paths bound over it.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::Sandbox;

/// `bwrap` on PATH, if it can set up a sandbox here (user namespaces may be off).
pub(super) fn available() -> Result<PathBuf, String> {
    let bwrap =
        find_on_path("bwrap").ok_or_else(|| "bubblewrap (bwrap) is not installed".to_owned())?;
    let probe = std::process::Command::new(&bwrap)
        .args([
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--unshare-pid",
            "--unshare-net",
            "--die-with-parent",
            "--",
            "true",
        ])
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

pub(super) fn command(
    bwrap: &Path,
    sandbox: &Sandbox,
    shell_command: &str,
    cwd: &Path,
    root: &Path,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(bwrap);
    command.args([
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
    ]);
    if !sandbox.network {
        command.arg("--unshare-net");
    }
    // After /tmp: a project (or writable path) under /tmp is bound back over the tmpfs.
    bind(&mut command, "--bind", root);
    let git = root.join(".git");
    if !sandbox.allow_git && git.exists() {
        bind(&mut command, "--ro-bind", &git);
    }
    for path in &sandbox.writable {
        // A missing path would make bwrap fail; nothing to write there anyway.
        if path.exists() {
            bind(&mut command, "--bind", path);
        }
    }
    command.arg("--clearenv");
    for (name, value) in sandbox.environment() {
        command.arg("--setenv").arg(name).arg(value);
    }
    command.args(["--setenv", "TMPDIR", "/tmp"]);
    command.arg("--chdir").arg(cwd);
    command.args(["--", "sh", "-c"]).arg(shell_command);
    // bwrap reads its own environment for nothing the command sees; keep it clean anyway.
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    command
}

fn bind(command: &mut tokio::process::Command, how: &str, path: &Path) {
    command.arg(how).arg(path).arg(path);
}
