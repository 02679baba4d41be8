use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::output::HeadAndTail;
use super::sandbox::Sandbox;
use super::{ApprovalRequest, ChangeKind, Tool, ToolContext, ToolError, parse_input, run_recorded};
use crate::schema::input_schema_for;

const MAX_TIMEOUT_SECS: f64 = 600.0;
/// Bytes of each stream kept from its start and from its end.
const HEAD_BYTES: usize = 4 * 1024;
const TAIL_BYTES: usize = 12 * 1024;

/// Run a shell command in the project.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCommandInput {
    /// The shell command.
    #[schemars(length(min = 1))]
    pub command: String,
    /// Working directory (default: the root).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Seconds before it is killed (default from the settings).
    #[serde(default)]
    #[schemars(range(min = 0.1, max = 600.0))]
    pub timeout_secs: Option<f64>,
}

pub struct RunCommandTool;

/// What a command is asked about as.
const CHANGE: ChangeKind = ChangeKind::Command;

#[async_trait]
impl Tool for RunCommandTool {
    fn name(&self) -> &'static str {
        "run_command"
    }

    fn description(&self) -> &'static str {
        "Run a shell command (sh -c) in the project; returns its exit status, stdout and stderr. \
         It and every process it starts are killed at the timeout; some commands are never \
         allowed (e.g. sudo, git push)."
    }

    fn input_schema(&self) -> Value {
        input_schema_for::<RunCommandInput>()
    }

    fn example(&self) -> Value {
        json!({"command": "cargo test --lib cli", "timeout_secs": 300})
    }

    fn reread_hint(&self) -> String {
        "call run_command again with the same input (the command runs again).".to_owned()
    }

    fn change_kind(&self) -> Option<ChangeKind> {
        Some(CHANGE)
    }

    async fn call(&self, input: Value, context: &ToolContext) -> Result<String, ToolError> {
        let input: RunCommandInput = parse_input(self.name(), input)?;
        if let Some(pattern) = context.policy.denied_by(&input.command) {
            return Err(ToolError::Denied(format!(
                "the command matches the deny-list pattern {pattern:?} and is never run; do \
                 the work another way or ask the user to do it"
            )));
        }
        let cwd = context
            .root
            .resolve_existing(input.cwd.as_deref().unwrap_or("."))?;
        if !cwd.is_dir() {
            return Err(ToolError::InvalidInput(format!(
                "cwd {:?} is not a directory",
                input.cwd.unwrap_or_default()
            )));
        }
        let timeout = input
            .timeout_secs
            .filter(|secs| secs.is_finite() && *secs > 0.0)
            .map(|secs| Duration::from_secs_f64(secs.min(MAX_TIMEOUT_SECS)))
            .unwrap_or(context.policy.command_timeout);
        let sandbox = &context.policy.sandbox;
        context
            .approve(ApprovalRequest {
                loop_id: String::new(),
                kind: CHANGE,
                tool: self.name(),
                subject: input.command.clone(),
                detail: format!(
                    "$ {}\n(in {}){}",
                    input.command,
                    context.root.relative_display(&cwd),
                    unsandboxed_note(sandbox)
                ),
            })
            .await?;
        let output = run_recorded(context, &input.command, &cwd, timeout).await?;
        match sandbox.explain_refusal(&output) {
            // An error result, so the model sees at once that it must work another way.
            Some(refusal) => Err(ToolError::Denied(format!("{refusal}\n{output}"))),
            None => Ok(output.to_string()),
        }
    }
}

/// The line an approval request for a command gets when nothing confines it.
pub fn unsandboxed_note(sandbox: &Sandbox) -> String {
    if sandbox.is_confined() {
        String::new()
    } else {
        format!("\nUNSANDBOXED: {}", sandbox.describe())
    }
}

/// What a shell command did.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandOutput {
    /// The exit code; `None` when killed (timeout, signal).
    pub exit_code: Option<i32>,
    pub status: String,
    pub stdout: String,
    pub stderr: String,
}

impl CommandOutput {
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0)
    }
}

impl std::fmt::Display for CommandOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}\n--- stdout ---\n{}--- stderr ---\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

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
    let mut child = process.spawn().map_err(spawn_error)?;
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

#[cfg(unix)]
fn kill_group(group: Option<u32>) {
    let Some(group) = group.and_then(|id| libc::pid_t::try_from(id).ok()) else {
        return;
    };
    // SAFETY: killpg sends SIGKILL to the process group this tool created for the command.
    unsafe {
        libc::killpg(group, libc::SIGKILL);
    }
}

#[cfg(not(unix))]
fn kill_group(_group: Option<u32>) {}
