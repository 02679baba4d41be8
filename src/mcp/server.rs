//! One configured MCP server, supervised: started on first use, stopped with the pool. A
//! server that fails to start, or crashes again after a restart, is down: its callers are
//! told so at once, with the reason and when it is tried again, and it is restarted in the
//! background with a delay that doubles with each failure. No caller ever waits on another's
//! backoff, and at most for one start, which is bounded. Its state, tools and recent errors
//! are kept for the shells' MCP status and health check.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject, Tool};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::{ServiceExt, transport::TokioChildProcess};
use serde::Serialize;
use tokio::io::AsyncBufReadExt;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::{Endpoint, McpServerConfig};

/// Recent errors kept per server.
const RECENT_ERRORS: usize = 5;
/// The delay before the first restart of a server that is down; each failure in a row
/// doubles it, up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Why a server could not answer a call. The text goes to the model as an `is_error`
/// result, so it says what happened and whether trying again may help.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("MCP server {server} could not be started: {message}")]
    Start { server: String, message: String },
    #[error(
        "MCP server {server} is down ({reason}); it is {retry}, try again later or do without \
         it"
    )]
    Down {
        server: String,
        reason: String,
        /// `tried again in 2.0 s` or `being restarted`.
        retry: String,
    },
    #[error(
        "MCP server {server} did not answer within {seconds} s; it may be busy or stuck, try \
         again later or do without it"
    )]
    Timeout { server: String, seconds: u64 },
    #[error(
        "MCP server {server} stopped during the call ({message}); it is started again for \
         later calls"
    )]
    Crashed { server: String, message: String },
    #[error("MCP server {server} refused the call: {message}")]
    Refused { server: String, message: String },
    #[error("cancelled")]
    Cancelled,
}

/// What the shells' MCP status and health check show of a server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServerStatus {
    pub name: String,
    /// `not started`, `starting`, `running`, `stopped` (crashed or failed; restarted in the
    /// background) or `shut down`.
    pub state: String,
    pub transport: &'static str,
    /// The project it was started for (its working directory).
    pub root: String,
    pub tools: Vec<String>,
    pub starts: u32,
    /// Oldest first.
    pub recent_errors: Vec<String>,
}

type Client = RunningService<RoleClient, ()>;

struct Connection {
    client: Client,
    tools: Vec<Tool>,
}

/// Where a server is in its life.
enum Phase {
    /// Not started yet, or lost after it had been running: the next use starts it.
    Idle,
    /// A start under way. Callers wait for it when it is `awaited` (a start from `Idle`);
    /// a restart of a server that is down goes on in the background, callers told it is down.
    Starting {
        awaited: bool,
    },
    Running(Arc<Connection>),
    /// It failed to start, or crashed again before a call succeeded: callers are refused at
    /// once, and the first one refused plans a restart for `retry_at` (at once if that has
    /// passed).
    Down {
        reason: String,
        retry_at: Instant,
        restart_planned: bool,
    },
    ShutDown,
}

struct Slot {
    phase: Phase,
    /// Failures (crashes, failed starts) since the last successful call.
    failures: u32,
}

struct Shown {
    state: &'static str,
    tools: Vec<String>,
    starts: u32,
    recent_errors: VecDeque<String>,
}

pub struct McpServer {
    name: String,
    config: McpServerConfig,
    root: PathBuf,
    /// Never held across an await: a caller decides under it what to do, then waits (if at
    /// all) on `start_ended`.
    slot: Mutex<Slot>,
    /// Wakes the callers waiting for a start.
    start_ended: Notify,
    shown: Mutex<Shown>,
    stopped: CancellationToken,
}

/// What a caller found: a connection to use, a start to wait for, or why not.
enum Found {
    Ready(Arc<Connection>),
    WaitForStart,
    Refused(McpError),
}

impl McpServer {
    pub(super) fn new(
        name: &str,
        config: McpServerConfig,
        root: &Path,
        stopped: CancellationToken,
    ) -> McpServer {
        McpServer {
            name: name.to_owned(),
            config,
            root: root.to_owned(),
            slot: Mutex::new(Slot {
                phase: Phase::Idle,
                failures: 0,
            }),
            start_ended: Notify::new(),
            shown: Mutex::new(Shown {
                state: "not started",
                tools: Vec::new(),
                starts: 0,
                recent_errors: VecDeque::new(),
            }),
            stopped,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn config(&self) -> &McpServerConfig {
        &self.config
    }

    /// The server's tools, starting it if it is not running.
    pub async fn tools(
        self: &Arc<Self>,
        cancel: &CancellationToken,
    ) -> Result<Vec<Tool>, McpError> {
        let connection = self.connection(cancel).await?;
        Ok(connection.tools.clone())
    }

    /// Calls `tool`; a crash, a timeout or a refusal comes back as an error, never a wait
    /// without end.
    pub async fn call(
        self: &Arc<Self>,
        tool: &str,
        arguments: JsonObject,
        cancel: &CancellationToken,
    ) -> Result<CallToolResult, McpError> {
        let connection = self.connection(cancel).await?;
        let work = async {
            let mut params = CallToolRequestParams::new(tool.to_owned());
            params.arguments = Some(arguments);
            match connection.client.call_tool(params).await {
                Ok(result) => {
                    self.lock_slot().failures = 0;
                    Ok(result)
                }
                Err(ServiceError::McpError(refusal)) => Err(McpError::Refused {
                    server: self.name.clone(),
                    message: refusal.message.to_string(),
                }),
                Err(err) => {
                    let message = err.to_string();
                    self.lose(
                        &connection,
                        format!("the server stopped during a call: {message}"),
                    );
                    tracing::warn!(server = %self.name, error = %message, "MCP server lost");
                    Err(McpError::Crashed {
                        server: self.name.clone(),
                        message,
                    })
                }
            }
        };
        let result = self.bounded(cancel, work).await;
        if let Err(err @ (McpError::Refused { .. } | McpError::Timeout { .. })) = &result {
            self.remember_error(err.to_string());
        }
        result
    }

    /// `work` unless the timeout, the caller's cancel or the pool's shutdown comes first.
    async fn bounded<T>(
        &self,
        cancel: &CancellationToken,
        work: impl Future<Output = Result<T, McpError>>,
    ) -> Result<T, McpError> {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(McpError::Cancelled),
            _ = self.stopped.cancelled() => Err(McpError::Cancelled),
            outcome = tokio::time::timeout(self.config.timeout(), work) => {
                outcome.unwrap_or_else(|_| Err(McpError::Timeout {
                    server: self.name.clone(),
                    seconds: self.config.timeout_secs,
                }))
            }
        }
    }

    /// The running connection; if there is none, a start this caller waits for (bounded by
    /// the server's timeout), or at once why not.
    async fn connection(
        self: &Arc<Self>,
        cancel: &CancellationToken,
    ) -> Result<Arc<Connection>, McpError> {
        let mut waited = false;
        loop {
            // Made before the slot is released: a start that ends in between still wakes it.
            let start_ended = self.start_ended.notified();
            match self.find(waited) {
                Found::Ready(connection) => return Ok(connection),
                Found::Refused(err) => return Err(err),
                Found::WaitForStart => {}
            }
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(McpError::Cancelled),
                _ = self.stopped.cancelled() => return Err(McpError::Cancelled),
                () = start_ended => waited = true,
            }
        }
    }

    /// What a caller finds, deciding under the slot's lock whether a start begins. A caller
    /// that `waited` for a start that failed is told why it failed.
    fn find(self: &Arc<Self>, waited: bool) -> Found {
        let mut slot = self.lock_slot();
        if let Phase::Running(connection) = &slot.phase {
            if !connection.client.is_closed() {
                return Found::Ready(connection.clone());
            }
            let connection = connection.clone();
            self.lose_in(&mut slot, &connection, "the server exited".to_owned());
        }
        let now = Instant::now();
        match &mut slot.phase {
            Phase::Running(connection) => Found::Ready(connection.clone()),
            Phase::Idle => {
                slot.phase = Phase::Starting { awaited: true };
                self.start_in_background(None);
                Found::WaitForStart
            }
            Phase::Starting { awaited: true } => Found::WaitForStart,
            Phase::Starting { awaited: false } => Found::Refused(McpError::Down {
                server: self.name.clone(),
                reason: self.last_error(),
                retry: "being restarted".to_owned(),
            }),
            Phase::Down { reason, .. } if waited => Found::Refused(McpError::Start {
                server: self.name.clone(),
                message: reason
                    .strip_prefix(START_FAILED)
                    .unwrap_or(reason)
                    .to_owned(),
            }),
            Phase::Down {
                reason,
                retry_at,
                restart_planned,
            } => {
                if !*restart_planned {
                    *restart_planned = true;
                    self.start_in_background(Some(*retry_at));
                }
                let retry = if *retry_at > now {
                    format!(
                        "tried again in {:.1} s",
                        retry_at.duration_since(now).as_secs_f64()
                    )
                } else {
                    "being restarted".to_owned()
                };
                Found::Refused(McpError::Down {
                    server: self.name.clone(),
                    reason: reason.clone(),
                    retry,
                })
            }
            Phase::ShutDown => Found::Refused(McpError::Cancelled),
        }
    }

    /// Starts the server in a task of its own, so that a caller giving up does not end a
    /// start others wait for; `at`, a restart of a server that is down, once its delay is
    /// over.
    fn start_in_background(self: &Arc<Self>, at: Option<Instant>) {
        let server = self.clone();
        tokio::spawn(async move {
            if let Some(at) = at {
                tokio::select! {
                    _ = server.stopped.cancelled() => return,
                    () = tokio::time::sleep_until(at) => {}
                }
                let mut slot = server.lock_slot();
                if !matches!(slot.phase, Phase::Down { .. }) {
                    return;
                }
                slot.phase = Phase::Starting { awaited: false };
            }
            server.set_state("starting");
            let started = tokio::select! {
                _ = server.stopped.cancelled() => Err("the host is shutting down".to_owned()),
                outcome = tokio::time::timeout(server.config.timeout(), server.start()) => {
                    outcome.unwrap_or_else(|_| Err(format!(
                        "no answer to the MCP handshake within {} s",
                        server.config.timeout_secs
                    )))
                }
            };
            server.record_start(started);
            server.start_ended.notify_waiters();
        });
    }

    fn record_start(&self, started: Result<Connection, String>) {
        let mut slot = self.lock_slot();
        if matches!(slot.phase, Phase::ShutDown) {
            return;
        }
        match started {
            Ok(connection) => {
                let mut shown = self.lock_shown();
                shown.state = "running";
                shown.starts += 1;
                shown.tools = connection
                    .tools
                    .iter()
                    .map(|tool| tool.name.to_string())
                    .collect();
                slot.phase = Phase::Running(Arc::new(connection));
            }
            Err(message) => {
                tracing::warn!(server = %self.name, error = %message, "MCP server did not start");
                slot.failures += 1;
                let reason = format!("{START_FAILED}{message}");
                self.set_state("stopped");
                self.remember_error(reason.clone());
                slot.phase = Phase::Down {
                    reason,
                    retry_at: Instant::now() + backoff(slot.failures),
                    restart_planned: false,
                };
            }
        }
    }

    /// The connection broke: forget it. A server that ran until now is started again on its
    /// next use; one that breaks again before a call succeeded is down.
    fn lose(&self, connection: &Arc<Connection>, reason: String) {
        let mut slot = self.lock_slot();
        self.lose_in(&mut slot, connection, reason);
    }

    fn lose_in(&self, slot: &mut Slot, connection: &Arc<Connection>, reason: String) {
        if !matches!(&slot.phase, Phase::Running(current) if Arc::ptr_eq(current, connection)) {
            return;
        }
        slot.failures += 1;
        self.set_state("stopped");
        self.remember_error(reason.clone());
        slot.phase = if slot.failures == 1 {
            Phase::Idle
        } else {
            Phase::Down {
                reason,
                retry_at: Instant::now() + backoff(slot.failures),
                restart_planned: false,
            }
        };
    }

    async fn start(&self) -> Result<Connection, String> {
        let client = match self.config.endpoint() {
            Some(Endpoint::Command { program, args }) => self.spawn(program, args).await?,
            Some(Endpoint::Http { url }) => super::http::connect(url).await?,
            None => return Err("neither command nor url is set".to_owned()),
        };
        let tools = client
            .list_all_tools()
            .await
            .map_err(|err| format!("listing its tools failed: {err}"))?;
        tracing::info!(server = %self.name, tools = tools.len(), "MCP server started");
        Ok(Connection { client, tools })
    }

    /// Starts a stdio server in its own process group (killed with its children when the
    /// connection is dropped), with the environment commands get plus the configured
    /// variables, its stderr into the log.
    async fn spawn(&self, program: &str, args: &[String]) -> Result<Client, String> {
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .current_dir(&self.root)
            .env_clear()
            .envs(crate::tools::command_environment(&[]))
            .envs(&self.config.env)
            .kill_on_drop(true);
        let mut wrapped = process_wrap::tokio::CommandWrap::from(command);
        wrapped
            .wrap(process_wrap::tokio::ProcessGroup::leader())
            .wrap(process_wrap::tokio::KillOnDrop);
        let (transport, stderr) = TokioChildProcess::builder(wrapped)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|err| format!("running {program}: {err}"))?;
        if let Some(stderr) = stderr {
            let name = self.name.clone();
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::info!(server = %name, "MCP server stderr: {line}");
                }
            });
        }
        ().serve(transport)
            .await
            .map_err(|err| format!("the MCP handshake failed: {err}"))
    }

    /// Stops the server (the pool shuts down): its connection dropped, which closes the
    /// child's stdin and kills its process group. A start under way ends with the pool's
    /// stop token and drops what it started.
    pub(super) fn stop(&self) {
        self.lock_slot().phase = Phase::ShutDown;
        self.set_state("shut down");
        self.start_ended.notify_waiters();
    }

    pub fn status(&self) -> ServerStatus {
        let shown = self.lock_shown();
        ServerStatus {
            name: self.name.clone(),
            state: shown.state.to_owned(),
            transport: match self.config.endpoint() {
                Some(Endpoint::Http { .. }) => "http",
                _ => "stdio",
            },
            root: self.root.display().to_string(),
            tools: shown.tools.clone(),
            starts: shown.starts,
            recent_errors: shown.recent_errors.iter().cloned().collect(),
        }
    }

    fn set_state(&self, state: &'static str) {
        self.lock_shown().state = state;
    }

    fn remember_error(&self, error: String) {
        let mut shown = self.lock_shown();
        if shown.recent_errors.len() == RECENT_ERRORS {
            shown.recent_errors.pop_front();
        }
        shown.recent_errors.push_back(error);
    }

    fn last_error(&self) -> String {
        self.lock_shown()
            .recent_errors
            .back()
            .cloned()
            .unwrap_or_else(|| "it stopped".to_owned())
    }

    fn lock_shown(&self) -> MutexGuard<'_, Shown> {
        self.shown.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_slot(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How the reason of a server that did not start begins.
const START_FAILED: &str = "start failed: ";

fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_BACKOFF
        .saturating_mul(1 << doublings)
        .min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stdio server that never answers the MCP handshake, with a start bounded to 1 s.
    fn never_answering(root: &Path) -> Arc<McpServer> {
        let config = McpServerConfig {
            command: Some("sleep".to_owned()),
            args: vec!["600".to_owned()],
            timeout_secs: 1,
            ..McpServerConfig::default()
        };
        Arc::new(McpServer::new(
            "stuck",
            config,
            root,
            CancellationToken::new(),
        ))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_that_failed_to_start_fails_its_callers_at_once_with_the_reason() {
        let root = tempfile::tempdir().expect("tempdir");
        let server = never_answering(root.path());
        let cancel = CancellationToken::new();
        let first = server.tools(&cancel).await.expect_err("never answers");
        assert!(first.to_string().contains("MCP server stuck"), "{first}");

        // Another start would take the whole second again: the caller is told at once.
        let asked = std::time::Instant::now();
        let second = server.tools(&cancel).await.expect_err("down");
        assert!(
            asked.elapsed() < Duration::from_secs(1),
            "waited {:?} for a server known to be down",
            asked.elapsed()
        );
        let told = second.to_string();
        assert!(
            told.contains("MCP server stuck is down")
                && told.contains("no answer to the MCP handshake within 1 s")
                && told.contains("tried again"),
            "{told}"
        );
        assert_eq!(server.status().state, "stopped");
    }

    #[test]
    fn backoff_doubles_up_to_a_cap() {
        assert_eq!(backoff(1), Duration::from_millis(250));
        assert_eq!(backoff(2), Duration::from_millis(500));
        assert_eq!(backoff(3), Duration::from_secs(1));
        assert_eq!(backoff(40), MAX_BACKOFF);
    }
}
