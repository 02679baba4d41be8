//! A coding agent's process: started in the project root with the environment commands get
//! plus its own `env`, in its own process group (killed with this handle, and the agent with
//! the host: `spawner.rs`), its stdio framed
//! as ACP's newline-delimited JSON with a bound per message, its stderr kept as a short tail
//! for error messages (never logged, and shown with credentials and its `env` values
//! redacted: an agent may print what its `env` holds).

use super::inflow::Inflow;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::{Sink, Stream};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};

use super::config::AgentConfig;
use super::error::AcpError;

/// The longest JSON-RPC message read from or written to an agent (a whole file's text may
/// travel in one).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// How much of the agent's stderr is kept for error messages: its last bytes and lines.
const STDERR_TAIL_BYTES: usize = 4 * 1024;
const STDERR_TAIL_LINES: usize = 20;

/// A started agent. Dropping it kills the agent's process group.
pub struct AgentProcess {
    name: String,
    child: Box<dyn process_wrap::tokio::ChildWrapper>,
    stdio: Option<(ChildStdin, ChildStdout)>,
    stderr: StderrTail,
    /// The values of the agent's `env`, taken out of its stderr where it is shown.
    secrets: Vec<String>,
}

impl std::fmt::Debug for AgentProcess {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("AgentProcess")
            .field("name", &self.name)
            .field("pid", &self.child.id())
            .finish()
    }
}

impl AgentProcess {
    /// Starts agent `name` as `config` says, in `root`.
    pub fn spawn(name: &str, config: &AgentConfig, root: &Path) -> Result<AgentProcess, AcpError> {
        let environment = agent_environment(config);
        let search_path = environment
            .iter()
            .find(|(variable, _)| variable == "PATH")
            .map(|(_, value)| value.clone());
        let program =
            resolve_program(&config.command, search_path.as_deref(), root).ok_or_else(|| {
                AcpError::NotFound {
                    agent: name.to_owned(),
                    command: config.command.clone(),
                }
            })?;
        let (args, root_dir, started) = (config.args.clone(), root.to_path_buf(), program.clone());
        let build = move || {
            let mut command = tokio::process::Command::new(&started);
            command
                .args(&args)
                .current_dir(&root_dir)
                .env_clear()
                .envs(environment)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .kill_on_drop(true);
            let mut wrapped = process_wrap::tokio::CommandWrap::from(command);
            wrapped
                .wrap(process_wrap::tokio::ProcessGroup::leader())
                .wrap(process_wrap::tokio::KillOnDrop);
            wrapped
        };
        let mut child =
            super::spawner::spawn_dying_with_host(build).map_err(|err| AcpError::NotStarted {
                agent: name.to_owned(),
                command: config.command.clone(),
                reason: err.to_string(),
            })?;
        let stdin = child.stdin().take();
        let stdout = child.stdout().take();
        let stderr = StderrTail::follow(child.stderr().take());
        let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
            return Err(AcpError::NotStarted {
                agent: name.to_owned(),
                command: config.command.clone(),
                reason: "its stdin or stdout could not be piped".to_owned(),
            });
        };
        tracing::info!(agent = %name, program = %program.display(), "ACP agent started");
        Ok(AgentProcess {
            name: name.to_owned(),
            child,
            stdio: Some((stdin, stdout)),
            stderr,
            secrets: env_secrets(config),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The agent's stdio as the SDK's line transport, once (`None` after the first call); the
    /// lines of methods `passed_on` read only with `inflow`'s credit.
    pub(super) fn take_transport(
        &mut self,
        inflow: &Inflow,
        passed_on: fn(&str) -> bool,
    ) -> Option<
        agent_client_protocol::Lines<
            impl Sink<String, Error = std::io::Error> + Send + 'static,
            impl Stream<Item = std::io::Result<String>> + Send + 'static,
        >,
    > {
        let (stdin, stdout) = self.stdio.take()?;
        Some(agent_client_protocol::Lines::new(
            message_sink(stdin),
            inflow.gate(message_stream(stdout), passed_on),
        ))
    }

    /// The last lines the agent wrote to stderr, with credentials and `env` values redacted:
    /// they go into messages and a loop's stored error.
    pub fn stderr_tail(&self) -> String {
        let (text, cut) = self.stderr.text();
        let mut text = crate::tools::redact_kept_tail(text, cut);
        for secret in &self.secrets {
            text = text.replace(secret.as_str(), crate::tools::REDACTED);
        }
        text
    }

    /// The agent's exit status, words for a message, when it has ended.
    pub fn exit_status(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status_words(status)),
            Ok(None) | Err(_) => None,
        }
    }

    /// Waits (at most `limit`) for the agent to end and its stderr to be read to the end:
    /// its exit status in words, `still running` if it did not end.
    pub async fn ended(&mut self, limit: std::time::Duration) -> String {
        let status = match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(Ok(status)) => status_words(status),
            Ok(Err(err)) => format!("its status is unknown: {err}"),
            Err(_) => "still running".to_owned(),
        };
        self.stderr.finished(limit).await;
        status
    }

    /// Kills the agent's process group and waits for it.
    pub async fn kill(&mut self) {
        if let Err(err) = Box::into_pin(self.child.kill()).await {
            tracing::debug!(agent = %self.name, "killing the ACP agent: {err}");
        }
    }
}

fn status_words(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => status.to_string(),
    }
}

/// What the agent's environment holds: the host's variables commands get (no secrets, so no
/// provider key) and then the agent's own `env`.
fn agent_environment(config: &AgentConfig) -> Vec<(OsString, OsString)> {
    let mut environment = crate::tools::command_environment(&[]);
    environment.retain(|(variable, _)| {
        variable
            .to_str()
            .is_none_or(|variable| !config.env.contains_key(variable))
    });
    environment.extend(
        config
            .env
            .iter()
            .map(|(variable, value)| (OsString::from(variable), OsString::from(value))),
    );
    environment
}

/// The values of `config.env` long enough to be secrets (a value such as `1` is not one, and
/// taking it out would garble the text).
fn env_secrets(config: &AgentConfig) -> Vec<String> {
    const SHORTEST_SECRET: usize = 6;
    config
        .env
        .values()
        .filter(|value| value.chars().count() >= SHORTEST_SECRET)
        .cloned()
        .collect()
}

/// `command` as the file to run: a path (relative to `root`) when it holds a `/`, else the
/// first executable of that name in an absolute folder of `search_path`: a relative entry
/// (`.`, `bin`, an empty one) would find it in the project, where anyone who can commit to it
/// may have planted one.
fn resolve_program(
    command: &str,
    search_path: Option<&std::ffi::OsStr>,
    root: &Path,
) -> Option<PathBuf> {
    let command = command.trim();
    if command.contains('/') {
        let path = root.join(command);
        return is_executable(&path).then_some(path);
    }
    std::env::split_paths(search_path?)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(command))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Messages to the agent, one line each; one over the bound is refused, not sent.
fn message_sink(stdin: ChildStdin) -> impl Sink<String, Error = std::io::Error> + Send + 'static {
    Box::pin(futures::sink::unfold(
        stdin,
        |mut stdin, line: String| async move {
            if line.len() > MAX_MESSAGE_BYTES {
                return Err(std::io::Error::other(format!(
                    "a message to the agent of {} bytes is over the {MAX_MESSAGE_BYTES}-byte limit",
                    line.len()
                )));
            }
            stdin.write_all(line.as_bytes()).await?;
            stdin.write_all(b"\n").await?;
            stdin.flush().await?;
            Ok(stdin)
        },
    ))
}

/// The agent's messages, one per line; a line over the bound ends the stream with an error.
fn message_stream(
    stdout: ChildStdout,
) -> impl Stream<Item = std::io::Result<String>> + Send + 'static {
    Box::pin(futures::stream::unfold(
        Some(BufReader::new(stdout)),
        |reader| async move {
            let mut reader = reader?;
            let mut line = Vec::new();
            let limit = (MAX_MESSAGE_BYTES + 1) as u64;
            match (&mut reader).take(limit).read_until(b'\n', &mut line).await {
                Ok(0) => None,
                Ok(_) if line.len() > MAX_MESSAGE_BYTES => Some((
                    Err(std::io::Error::other(format!(
                        "the agent sent a message over the {MAX_MESSAGE_BYTES}-byte limit"
                    ))),
                    None,
                )),
                Ok(_) => {
                    while line
                        .last()
                        .is_some_and(|byte| matches!(byte, b'\n' | b'\r'))
                    {
                        line.pop();
                    }
                    let text = String::from_utf8(line).map_err(std::io::Error::other);
                    Some((text, Some(reader)))
                }
                Err(err) => Some((Err(err), None)),
            }
        },
    ))
}

/// The end of the agent's stderr, read as it comes: its last lines, bounded in bytes, and
/// whether its start was cut off.
struct StderrTail {
    text: Arc<Mutex<(String, bool)>>,
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl StderrTail {
    fn follow(stderr: Option<tokio::process::ChildStderr>) -> StderrTail {
        let text = Arc::new(Mutex::new((String::new(), false)));
        let reader = stderr.map(|stderr| {
            let text = text.clone();
            tokio::spawn(async move {
                let mut stderr = stderr;
                let mut chunk = vec![0u8; 4096];
                while let Ok(read) = stderr.read(&mut chunk).await {
                    if read == 0 {
                        break;
                    }
                    let mut kept = text.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                    let (kept, cut) = &mut *kept;
                    kept.push_str(&String::from_utf8_lossy(&chunk[..read]));
                    let tail = tail(kept, STDERR_TAIL_BYTES, STDERR_TAIL_LINES);
                    *cut |= tail.len() < kept.len();
                    *kept = tail;
                }
            })
        });
        StderrTail { text, reader }
    }

    /// The tail, and whether its start was cut off.
    fn text(&self) -> (String, bool) {
        self.text
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Waits (at most `limit`) until stderr is read to its end.
    async fn finished(&mut self, limit: std::time::Duration) {
        if let Some(reader) = self.reader.as_mut()
            && tokio::time::timeout(limit, reader).await.is_ok()
        {
            self.reader = None;
        }
    }
}

impl Drop for StderrTail {
    fn drop(&mut self) {
        if let Some(reader) = &self.reader {
            reader.abort();
        }
    }
}

/// The end of `text`: at most `lines` lines and `bytes` bytes (cut at a character).
fn tail(text: &str, bytes: usize, lines: usize) -> String {
    let mut start = text.len().saturating_sub(bytes);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let kept = &text[start..];
    let line_starts: Vec<usize> = kept
        .trim_end_matches('\n')
        .match_indices('\n')
        .map(|(at, _)| at + 1)
        .collect();
    let from = line_starts
        .len()
        .checked_sub(lines)
        .and_then(|index| line_starts.get(index).copied())
        .unwrap_or(0);
    kept[from..].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_lines_within_the_bytes() {
        let text: String = (1..=30).map(|n| format!("line {n}\n")).collect();
        let kept = tail(&text, 4096, 20);
        assert!(
            kept.starts_with("line 11\n") && kept.ends_with("line 30\n"),
            "{kept:?}"
        );
        let kept = tail(&"é".repeat(3000), 4096, 20);
        assert!(kept.len() <= 4096 && kept.chars().all(|c| c == 'é'));
        assert_eq!(tail("one line", 4096, 20), "one line");
    }

    #[test]
    fn the_agent_env_overrides_the_host_and_a_secret_comes_only_when_named() {
        let config = AgentConfig {
            command: "agent".to_owned(),
            env: std::collections::BTreeMap::from([(
                "PATH".to_owned(),
                "/opt/agent/bin".to_owned(),
            )]),
            ..AgentConfig::default()
        };
        let environment = agent_environment(&config);
        let paths: Vec<_> = environment
            .iter()
            .filter(|(variable, _)| variable == "PATH")
            .collect();
        assert_eq!(paths.len(), 1);
        assert_eq!(paths[0].1, "/opt/agent/bin");
    }

    #[test]
    fn a_command_is_found_on_the_path_or_as_a_path() {
        let dir = tempfile::tempdir().expect("temp dir");
        let program = dir.path().join("my-agent");
        std::fs::write(&program, "#!/bin/sh\n").expect("write");
        let not_executable = dir.path().join("plain");
        std::fs::write(&not_executable, "").expect("write");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let search = std::env::join_paths(["/nonexistent", dir.path().to_str().expect("utf-8")])
            .expect("join");
        assert_eq!(
            resolve_program("my-agent", Some(&search), Path::new("/")),
            Some(program.clone())
        );
        assert_eq!(
            resolve_program("plain", Some(&search), Path::new("/")),
            None
        );
        assert_eq!(
            resolve_program("./my-agent", None, dir.path()),
            Some(dir.path().join("./my-agent"))
        );
        assert_eq!(
            resolve_program("missing", Some(&search), Path::new("/")),
            None
        );
    }
}
