//! One configured MCP server, supervised: started on first use, restarted with backoff after
//! it crashed or failed to start, stopped with the pool. Its state, tools and recent errors
//! are kept for `:LooprMcp` and `:checkhealth`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject, Tool};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::{ServiceExt, transport::TokioChildProcess};
use serde::Serialize;
use tokio::io::AsyncBufReadExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::{Endpoint, McpServerConfig};

/// Recent errors kept per server.
const RECENT_ERRORS: usize = 5;
/// The first restart's delay; each failure in a row doubles it, up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Why a server could not answer a call. The text goes to the model as an `is_error`
/// result, so it says what happened and whether trying again may help.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("MCP server {server} could not be started: {message}")]
    Start { server: String, message: String },
    #[error(
        "MCP server {server} did not answer within {seconds} s; it may be busy or stuck, try \
         again later or do without it"
    )]
    Timeout { server: String, seconds: u64 },
    #[error(
        "MCP server {server} stopped during the call ({message}); it is restarted for the next \
         call"
    )]
    Crashed { server: String, message: String },
    #[error("MCP server {server} refused the call: {message}")]
    Refused { server: String, message: String },
    #[error("cancelled")]
    Cancelled,
}

/// What `:LooprMcp` and `:checkhealth` show of a server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServerStatus {
    pub name: String,
    /// `not started`, `starting`, `running`, `stopped` (crashed or failed; restarted on next
    /// use) or `shut down`.
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

#[derive(Default)]
struct Slot {
    connection: Option<Arc<Connection>>,
    /// Failures (crashes, failed starts) since the last successful call.
    failures: u32,
    /// No start before this, after a failure.
    not_before: Option<Instant>,
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
    /// Held while starting, so concurrent first uses start the server once.
    slot: tokio::sync::Mutex<Slot>,
    shown: Mutex<Shown>,
    stopped: CancellationToken,
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
            slot: tokio::sync::Mutex::new(Slot::default()),
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
    pub async fn tools(&self, cancel: &CancellationToken) -> Result<Vec<Tool>, McpError> {
        let connection = self.bounded(cancel, self.connection(cancel)).await?;
        Ok(connection.tools.clone())
    }

    /// Calls `tool`; a crash, a timeout or a refusal comes back as an error, never a wait
    /// without end.
    pub async fn call(
        &self,
        tool: &str,
        arguments: JsonObject,
        cancel: &CancellationToken,
    ) -> Result<CallToolResult, McpError> {
        let work = async {
            let connection = self.connection(cancel).await?;
            let mut params = CallToolRequestParams::new(tool.to_owned());
            params.arguments = Some(arguments);
            match connection.client.call_tool(params).await {
                Ok(result) => {
                    self.slot.lock().await.failures = 0;
                    Ok(result)
                }
                Err(ServiceError::McpError(refusal)) => Err(McpError::Refused {
                    server: self.name.clone(),
                    message: refusal.message.to_string(),
                }),
                Err(err) => {
                    let message = err.to_string();
                    self.lost(&connection, &message).await;
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

    /// The running connection, started (after the backoff of earlier failures) if there is
    /// none or it closed.
    async fn connection(&self, cancel: &CancellationToken) -> Result<Arc<Connection>, McpError> {
        let mut slot = self.slot.lock().await;
        if let Some(connection) = &slot.connection {
            if !connection.client.is_closed() {
                return Ok(connection.clone());
            }
            slot.connection = None;
            slot.failures += 1;
            slot.not_before = Some(Instant::now() + backoff(slot.failures));
            self.remember_error("the server exited".to_owned());
        }
        if let Some(not_before) = slot.not_before {
            tokio::select! {
                _ = cancel.cancelled() => return Err(McpError::Cancelled),
                () = tokio::time::sleep_until(not_before) => {}
            }
        }
        self.set_state("starting");
        match self.start().await {
            Ok(connection) => {
                let connection = Arc::new(connection);
                slot.connection = Some(connection.clone());
                slot.not_before = None;
                let mut shown = self.lock_shown();
                shown.state = "running";
                shown.starts += 1;
                shown.tools = connection
                    .tools
                    .iter()
                    .map(|tool| tool.name.to_string())
                    .collect();
                Ok(connection)
            }
            Err(message) => {
                slot.failures += 1;
                slot.not_before = Some(Instant::now() + backoff(slot.failures));
                self.set_state("stopped");
                self.remember_error(format!("start failed: {message}"));
                Err(McpError::Start {
                    server: self.name.clone(),
                    message,
                })
            }
        }
    }

    /// The connection broke during a call: forget it, so the next use restarts the server.
    async fn lost(&self, connection: &Arc<Connection>, message: &str) {
        let mut slot = self.slot.lock().await;
        if slot
            .connection
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, connection))
        {
            slot.connection = None;
            slot.failures += 1;
            slot.not_before = Some(Instant::now() + backoff(slot.failures));
            self.set_state("stopped");
            self.remember_error(format!("the server stopped during a call: {message}"));
        }
        tracing::warn!(server = %self.name, error = %message, "MCP server lost");
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
        if let Ok(mut slot) = self.slot.try_lock() {
            slot.connection = None;
        }
        self.set_state("shut down");
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

    fn lock_shown(&self) -> std::sync::MutexGuard<'_, Shown> {
        self.shown.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_BACKOFF
        .saturating_mul(1 << doublings)
        .min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_a_cap() {
        assert_eq!(backoff(1), Duration::from_millis(250));
        assert_eq!(backoff(2), Duration::from_millis(500));
        assert_eq!(backoff(3), Duration::from_secs(1));
        assert_eq!(backoff(40), MAX_BACKOFF);
    }
}
