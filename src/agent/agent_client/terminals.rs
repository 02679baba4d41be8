//! `terminal/*`: the agent's commands, run as `run_command` runs one: past the deny-list and
//! the user's approval of commands, in Loopr's sandbox, in a process group of their own, the
//! files they change recorded in the change journal (`tree_before_command`,
//! `record_command_changes`). What differs is that a terminal runs in the background while
//! the agent asks for its output, waits for its exit, kills or releases it; its output is
//! kept to its last `output_byte_limit` bytes (never more than Loopr keeps of a command), and
//! at most `MAX_OPEN_TERMINALS` are open at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use agent_client_protocol::v1::schema::{
    CreateTerminalRequest, CreateTerminalResponse, KillTerminalResponse, ReleaseTerminalResponse,
    TerminalExitStatus, TerminalId, TerminalOutputResponse, WaitForTerminalExitResponse,
};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::absolute_path;
use crate::tools::{
    CommandOutput, KEPT_BYTES_PER_STREAM, ToolContext, ToolError, approve_command,
    changes_what_runs, command_directory, kill_group, looks_secret, record_command_changes,
    redact_kept_tail, shell_word, spawn_shell, tree_before_command,
};

/// Terminals one agent may have open (created and not released) at once.
pub(super) const MAX_OPEN_TERMINALS: usize = 8;
/// The most of a terminal's output kept: what Loopr keeps of a command's two streams.
pub(super) const MAX_OUTPUT_BYTES: usize = 2 * KEPT_BYTES_PER_STREAM;
/// What the approver is told asks.
const TOOL: &str = "terminal";
/// How long the output of a finished command may still take to arrive: a process that
/// escaped its group may hold the pipes open.
const OUTPUT_GRACE: Duration = Duration::from_secs(2);
/// Bytes taken from a pipe per read.
const READ_PIECE: usize = 64 * 1024;

/// One agent's terminals.
#[derive(Default)]
pub(super) struct Terminals {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    open: HashMap<String, Arc<Terminal>>,
    created: u64,
    /// The loop ended: no terminal is created any more.
    closed: bool,
}

/// One running (or finished, not yet released) command.
struct Terminal {
    output: Arc<Mutex<Output>>,
    exit: watch::Receiver<Option<TerminalExitStatus>>,
    /// Cancelled to kill it.
    stop: CancellationToken,
    supervisor: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Terminal {
    /// Kills it (if it still runs) and waits until its end is recorded.
    async fn end(&self) {
        self.stop.cancel();
        if let Some(task) = self.supervisor.lock().await.take()
            && let Err(err) = task.await
        {
            tracing::warn!("an agent's terminal ended badly: {err}");
        }
    }
}

/// The last bytes of a terminal's output, cut at a character's start.
struct Output {
    bytes: Vec<u8>,
    limit: usize,
    truncated: bool,
}

impl Output {
    fn push(&mut self, piece: &[u8]) {
        self.bytes.extend_from_slice(piece);
        if self.bytes.len() > self.limit {
            let mut cut = self.bytes.len() - self.limit;
            // Never in the middle of a UTF-8 character: its continuation bytes go too.
            while self.bytes.get(cut).is_some_and(|byte| byte & 0xC0 == 0x80) {
                cut += 1;
            }
            self.bytes.drain(..cut);
            self.truncated = true;
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

impl Terminals {
    /// Starts the agent's command once it passed the deny-list and the user's approval.
    pub(super) async fn create(
        &self,
        context: &ToolContext,
        request: CreateTerminalRequest,
    ) -> Result<CreateTerminalResponse, ToolError> {
        self.check_room()?;
        let line = shell_line(&request)?;
        let cwd = match request.cwd.as_deref() {
            Some(cwd) => command_directory(context, Some(&absolute_path(cwd)?))?,
            None => command_directory(context, None)?,
        };
        approve_command(context, TOOL, &line, &cwd).await?;
        // Asked again: others may have been created while the user was asked.
        self.check_room()?;
        let limit = request
            .output_byte_limit
            .and_then(|limit| usize::try_from(limit).ok())
            .map_or(MAX_OUTPUT_BYTES, |limit| limit.min(MAX_OUTPUT_BYTES));
        let before = tree_before_command(context).await?;
        let mut child = spawn_shell(
            &line,
            &cwd,
            &context.cancel,
            &context.policy.sandbox,
            context.root.path(),
        )
        .await?;
        let output = Arc::new(Mutex::new(Output {
            bytes: Vec::new(),
            limit,
            truncated: false,
        }));
        let readers: Vec<_> = [
            child
                .stdout
                .take()
                .map(|out| read_into(out, output.clone())),
            child
                .stderr
                .take()
                .map(|err| read_into(err, output.clone())),
        ]
        .into_iter()
        .flatten()
        .collect();
        let (exited, exit) = watch::channel(None);
        let stop = CancellationToken::new();
        let supervisor = tokio::spawn(supervise(
            child,
            readers,
            Supervised {
                context: context.clone(),
                stop: stop.clone(),
                output: output.clone(),
                before,
                exited,
            },
        ));
        let terminal = Arc::new(Terminal {
            output,
            exit,
            stop,
            supervisor: tokio::sync::Mutex::new(Some(supervisor)),
        });
        let id = {
            let mut state = self.lock();
            if state.closed {
                None
            } else {
                state.created += 1;
                let id = format!("terminal-{}", state.created);
                state.open.insert(id.clone(), terminal.clone());
                Some(id)
            }
        };
        match id {
            Some(id) => Ok(CreateTerminalResponse::new(id)),
            None => {
                terminal.end().await;
                Err(loop_ended())
            }
        }
    }

    /// Its output so far, whether it was cut, and its exit status once it exited.
    pub(super) fn output(&self, id: &TerminalId) -> Result<TerminalOutputResponse, ToolError> {
        let terminal = self.find(id)?;
        let (text, truncated) = {
            let output = terminal
                .output
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            (output.text(), output.truncated)
        };
        // As every command's output Loopr hands a model: never a credential in a URL, also
        // where the kept end starts inside one.
        let text = redact_kept_tail(text, truncated);
        let status = terminal.exit.borrow().clone();
        Ok(TerminalOutputResponse::new(text, truncated).exit_status(status))
    }

    /// Its exit status, once it exited (and what it changed is recorded).
    pub(super) async fn wait_for_exit(
        &self,
        id: &TerminalId,
    ) -> Result<WaitForTerminalExitResponse, ToolError> {
        let mut exit = self.find(id)?.exit.clone();
        let status = exit
            .wait_for(Option::is_some)
            .await
            .map(|status| status.clone())
            .ok()
            .flatten()
            .ok_or_else(|| ToolError::File {
                path: "(terminal)".to_owned(),
                message: format!(
                    "terminal {id} ended without an exit status; create it again to retry"
                ),
            })?;
        Ok(WaitForTerminalExitResponse::new(status))
    }

    /// Kills its command with everything it started; it stays, for its output and status.
    pub(super) fn kill(&self, id: &TerminalId) -> Result<KillTerminalResponse, ToolError> {
        self.find(id)?.stop.cancel();
        Ok(KillTerminalResponse::new())
    }

    /// Kills its command if it still runs and forgets it.
    pub(super) async fn release(
        &self,
        id: &TerminalId,
    ) -> Result<ReleaseTerminalResponse, ToolError> {
        let terminal = self
            .lock()
            .open
            .remove(id.0.as_ref())
            .ok_or_else(|| unknown(id))?;
        terminal.end().await;
        Ok(ReleaseTerminalResponse::new())
    }

    /// Kills and releases every terminal; none is created after.
    pub(super) async fn close(&self) {
        let open: Vec<Arc<Terminal>> = {
            let mut state = self.lock();
            state.closed = true;
            state.open.drain().map(|(_, terminal)| terminal).collect()
        };
        futures::future::join_all(open.iter().map(|terminal| terminal.end())).await;
    }

    fn check_room(&self) -> Result<(), ToolError> {
        let state = self.lock();
        if state.closed {
            return Err(loop_ended());
        }
        if state.open.len() >= MAX_OPEN_TERMINALS {
            return Err(ToolError::Denied(format!(
                "{MAX_OPEN_TERMINALS} terminals are open, the most one loop may have; release \
                 one you are done with (terminal/release) first"
            )));
        }
        Ok(())
    }

    fn find(&self, id: &TerminalId) -> Result<Arc<Terminal>, ToolError> {
        self.lock()
            .open
            .get(id.0.as_ref())
            .cloned()
            .ok_or_else(|| unknown(id))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn unknown(id: &TerminalId) -> ToolError {
    ToolError::InvalidInput(format!(
        "there is no terminal {id}; it was released, or never created by terminal/create"
    ))
}

fn loop_ended() -> ToolError {
    ToolError::Denied("the loop has ended; no more commands are run".to_owned())
}

/// What a terminal's supervisor works with.
struct Supervised {
    context: ToolContext,
    stop: CancellationToken,
    output: Arc<Mutex<Output>>,
    before: Option<crate::tools::TreeStats>,
    exited: watch::Sender<Option<TerminalExitStatus>>,
}

/// Waits for the command to exit, to be killed (`stop`, the loop's cancel) or to reach the
/// command timeout; kills its group, gathers the rest of its output, records what it changed
/// and only then tells its exit status.
async fn supervise(
    mut child: tokio::process::Child,
    readers: Vec<tokio::task::JoinHandle<()>>,
    supervised: Supervised,
) {
    let Supervised {
        context,
        stop,
        output,
        before,
        exited,
    } = supervised;
    let group = child.id();
    let timeout = context.policy.command_timeout;
    let mut timed_out = false;
    let status = tokio::select! {
        biased;
        _ = context.cancel.cancelled() => None,
        _ = stop.cancelled() => None,
        _ = tokio::time::sleep(timeout) => {
            timed_out = true;
            None
        }
        status = child.wait() => Some(status),
    };
    // Whatever the command left running goes with it: nothing outlives a terminal.
    kill_group(group);
    let status = match status {
        Some(status) => status,
        None => child.wait().await,
    };
    for reader in readers {
        let abort = reader.abort_handle();
        if tokio::time::timeout(OUTPUT_GRACE, reader).await.is_err() {
            abort.abort();
        }
    }
    let status = exit_status(status);
    let notes = {
        let mut output = output
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut notes = String::new();
        if timed_out {
            notes.push_str(&format!(
                "\n[loopr: killed after the {:.0}s command timeout, with every process it \
                 started]\n",
                timeout.as_secs_f64()
            ));
        }
        let ended = CommandOutput {
            exit_code: status.exit_code.and_then(|code| i32::try_from(code).ok()),
            status: String::new(),
            stdout: output.text(),
            stderr: String::new(),
        };
        if let Some(refusal) = context.policy.sandbox.explain_refusal(&ended) {
            notes.push_str(&format!("\n[loopr: {refusal}]\n"));
        }
        output.push(notes.as_bytes());
        notes
    };
    if !notes.is_empty() {
        tracing::debug!(notes = notes.trim(), "an agent's terminal ended");
    }
    record_command_changes(&context, before).await;
    let _ = exited.send(Some(status));
}

/// Reads `stream` to its end into `output`.
fn read_into<R: AsyncRead + Unpin + Send + 'static>(
    mut stream: R,
    output: Arc<Mutex<Output>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buffer = vec![0u8; READ_PIECE];
        while let Ok(read) = stream.read(&mut buffer).await {
            if read == 0 {
                break;
            }
            output
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(&buffer[..read]);
        }
    })
}

fn exit_status(status: std::io::Result<std::process::ExitStatus>) -> TerminalExitStatus {
    let Ok(status) = status else {
        return TerminalExitStatus::new();
    };
    let code = status.code().and_then(|code| u32::try_from(code).ok());
    #[cfg(unix)]
    let signal = {
        use std::os::unix::process::ExitStatusExt;
        status.signal().map(signal_name)
    };
    #[cfg(not(unix))]
    let signal: Option<String> = None;
    TerminalExitStatus::new().exit_code(code).signal(signal)
}

/// A signal's name as a shell shows it.
fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGHUP => "SIGHUP".to_owned(),
        libc::SIGINT => "SIGINT".to_owned(),
        libc::SIGABRT => "SIGABRT".to_owned(),
        libc::SIGKILL => "SIGKILL".to_owned(),
        libc::SIGSEGV => "SIGSEGV".to_owned(),
        libc::SIGPIPE => "SIGPIPE".to_owned(),
        libc::SIGTERM => "SIGTERM".to_owned(),
        other => format!("signal {other}"),
    }
}

/// The request as one `sh -c` line, as a command is approved and run: its environment
/// exported first, then the command with its arguments quoted (without arguments, the
/// command is taken as a shell command line, as `run_command` takes one). Variables whose
/// names say they hold a secret are refused: commands never get secrets; nor may a variable
/// change which programs run (`changes_what_runs`).
fn shell_line(request: &CreateTerminalRequest) -> Result<String, ToolError> {
    let mut line = String::new();
    for variable in &request.env {
        let name = &variable.name;
        let valid = name
            .chars()
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
            && name
                .chars()
                .all(|char| char.is_ascii_alphanumeric() || char == '_');
        if !valid {
            return Err(ToolError::InvalidInput(format!(
                "{name:?} is not an environment variable name (letters, digits and _)"
            )));
        }
        if changes_what_runs(name) {
            return Err(ToolError::InvalidInput(format!(
                "{name} would change which programs run or what they load; run the command \
                 without setting it"
            )));
        }
        if looks_secret(name) {
            return Err(ToolError::Denied(format!(
                "{name} looks like it holds a secret, and commands never get secrets; run the \
                 command without it"
            )));
        }
        line.push_str(&format!("export {name}={}; ", shell_word(&variable.value)));
    }
    if request.command.trim().is_empty() {
        return Err(ToolError::InvalidInput("the command is empty".to_owned()));
    }
    if request.args.is_empty() {
        line.push_str(&request.command);
    } else {
        let words: Vec<String> = std::iter::once(&request.command)
            .chain(&request.args)
            .map(|word| shell_word(word))
            .collect();
        line.push_str(&words.join(" "));
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_keeps_its_last_bytes_and_never_half_a_character() {
        let mut output = Output {
            bytes: Vec::new(),
            limit: 4,
            truncated: false,
        };
        output.push(b"ab");
        assert_eq!((output.text().as_str(), output.truncated), ("ab", false));
        output.push("éxyz".as_bytes());
        // The last 4 bytes start inside "é": it goes whole.
        assert_eq!((output.text().as_str(), output.truncated), ("xyz", true));
    }

    #[test]
    fn arguments_are_quoted_and_the_environment_exported() {
        use agent_client_protocol::v1::schema::EnvVariable;
        let request = CreateTerminalRequest::new("s", "printf")
            .args(vec![
                "%s\\n".to_owned(),
                "it's".to_owned(),
                "plain".to_owned(),
            ])
            .env(vec![EnvVariable::new("GREETING", "hello world")]);
        assert_eq!(
            shell_line(&request).expect("line"),
            r"export GREETING='hello world'; printf '%s\n' 'it'\''s' plain"
        );
        let secret = CreateTerminalRequest::new("s", "env")
            .env(vec![EnvVariable::new("OPENAI_API_KEY", "sk-1")]);
        assert!(shell_line(&secret).is_err());
    }
}
