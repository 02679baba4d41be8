//! Running one shell command to its end: in its own process group inside the sandbox,
//! killed with everything it started at a timeout or cancel, each stream kept to its start
//! and its end; and a word written as a shell reads it back (`shell_word`).

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::ToolError;
use super::output::{CommandOutput, HeadAndTail};
use super::sandbox::Sandbox;

/// Bytes of each stream kept from its start and from its end.
const HEAD_BYTES: usize = 4 * 1024;
const TAIL_BYTES: usize = 12 * 1024;
/// The most of one stream of a command's output Loopr keeps.
pub const KEPT_BYTES_PER_STREAM: usize = HEAD_BYTES + TAIL_BYTES;

/// Runs `command` with `sh -c` in `cwd` inside `sandbox` (confined to `root`), in its own
/// process group, which is killed with everything in it on timeout or cancel, and also once
/// the shell exits. (The sandbox's PID namespace also takes what left the group.)
pub async fn run_shell(
    command: &str,
    cwd: &std::path::Path,
    timeout: Duration,
    cancel: &tokio_util::sync::CancellationToken,
    sandbox: &Sandbox,
    root: &std::path::Path,
) -> Result<CommandOutput, ToolError> {
    let spawn_error = |err: std::io::Error| ToolError::File {
        path: "(command)".to_owned(),
        message: format!("could not start the command: {err}"),
    };
    let mut child = spawn_shell(command, cwd, cancel, sandbox, root).await?;
    let group = child.id();
    let stdout = child.stdout.take().map(read_capped);
    let stderr = child.stderr.take().map(read_capped);
    let outcome = tokio::select! {
        biased;
        _ = cancel.cancelled() => Outcome::Cancelled,
        _ = tokio::time::sleep(timeout) => Outcome::TimedOut,
        status = child.wait() => Outcome::Exited(status.map_err(spawn_error)?),
    };
    // Whatever the shell left running (a `cmd &`) is killed too: it would hold the output
    // pipes open, and nothing may outlive the call.
    kill_group(group);
    if !matches!(outcome, Outcome::Exited(_)) {
        let _ = child.wait().await;
    }
    let stdout = collect(stdout).await;
    let stderr = collect(stderr).await;
    let (exit_code, status) = match outcome {
        Outcome::Cancelled => return Err(ToolError::Cancelled),
        Outcome::TimedOut => (
            None,
            format!(
                "killed after the {:.1}s timeout (with every process it started)",
                timeout.as_secs_f64()
            ),
        ),
        Outcome::Exited(status) => match status.code() {
            Some(code) => (Some(code), format!("exit status {code}")),
            None => (None, "killed by a signal".to_owned()),
        },
    };
    Ok(CommandOutput {
        exit_code,
        status,
        stdout,
        stderr,
    })
}

/// Starts `sh -c command` in `cwd` inside `sandbox` (confined to `root`) in a process group
/// of its own, stdin closed, stdout and stderr piped.
pub async fn spawn_shell(
    command: &str,
    cwd: &std::path::Path,
    cancel: &tokio_util::sync::CancellationToken,
    sandbox: &Sandbox,
    root: &std::path::Path,
) -> Result<tokio::process::Child, ToolError> {
    let spawn_error = |err: std::io::Error| ToolError::File {
        path: "(command)".to_owned(),
        message: format!("could not start the command: {err}"),
    };
    // Making the sandbox looks through the project for nested repositories, which a huge or
    // slow tree makes long: a cancel does not wait for it (the look, on the blocking pool,
    // finishes on its own).
    let mut process = tokio::select! {
        biased;
        _ = cancel.cancelled() => return Err(ToolError::Cancelled),
        process = sandbox.command(command, cwd, root) => process.map_err(spawn_error)?,
    };
    process
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Its own process group, so a timeout or cancel kills everything it started.
    #[cfg(unix)]
    process.process_group(0);
    process.spawn().map_err(spawn_error)
}

/// The output of a reader task; a process that escaped the group (with `setsid`) may keep
/// the pipe open, so the wait is bounded.
async fn collect(task: Option<tokio::task::JoinHandle<String>>) -> String {
    let Some(task) = task else {
        return String::new();
    };
    let abort = task.abort_handle();
    match tokio::time::timeout(Duration::from_secs(2), task).await {
        Ok(Ok(text)) => text,
        Ok(Err(_)) => String::new(),
        Err(_) => {
            abort.abort();
            "[output still open: a process the command started left its group]\n".to_owned()
        }
    }
}

enum Outcome {
    Exited(std::process::ExitStatus),
    TimedOut,
    Cancelled,
}

/// Bytes taken from a pipe per read.
const READ_PIECE: usize = 256 * 1024;

/// Reads a stream to its end in the background, keeping its start and its end.
fn read_capped<R: AsyncRead + Unpin + Send + 'static>(
    mut stream: R,
) -> tokio::task::JoinHandle<String> {
    tokio::spawn(async move {
        let mut kept = HeadAndTail::new(HEAD_BYTES, TAIL_BYTES);
        let mut buffer = vec![0u8; READ_PIECE];
        while let Ok(read) = stream.read(&mut buffer).await {
            if read == 0 {
                break;
            }
            kept.push(&buffer[..read]);
        }
        kept.finish()
    })
}

/// Kills process group `group` (a command's, from `spawn_shell`) with everything in it.
#[cfg(unix)]
pub fn kill_group(group: Option<u32>) {
    let Some(group) = group.and_then(|id| libc::pid_t::try_from(id).ok()) else {
        return;
    };
    // SAFETY: killpg sends SIGKILL to the process group this tool created for the command.
    unsafe {
        libc::killpg(group, libc::SIGKILL);
    }
}

#[cfg(not(unix))]
pub fn kill_group(_group: Option<u32>) {}
/// `word` as one word of a POSIX shell: bare where every character is plain, else in single
/// quotes (a quote in it closed, escaped and reopened), so a command shown to the user runs
/// as it reads when pasted.
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./:=@%+,".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}
