//! The host's MCP servers, shared by its loops: one per project, name and configuration,
//! started on first use and stopped with the host; and the user's current MCP settings,
//! where loops take their servers' `env` values from.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use tokio_util::sync::CancellationToken;

use super::config::{McpServerConfig, McpSettings};
use super::server::{McpServer, ServerStatus};
use super::tools::McpTools;

type ServerKey = (PathBuf, String, McpServerConfig);

#[derive(Default)]
pub struct McpPool {
    servers: Mutex<HashMap<ServerKey, Arc<McpServer>>>,
    /// The latest a shell gave (each shell's settings).
    current: Mutex<McpSettings>,
    stopped: CancellationToken,
}

/// A server whose tools could not be offered, and why.
#[derive(Debug)]
pub struct Unavailable {
    pub server: String,
    pub error: String,
}

impl McpPool {
    pub fn new() -> McpPool {
        McpPool::default()
    }

    fn server(&self, root: &Path, name: &str, config: &McpServerConfig) -> Arc<McpServer> {
        let key = (root.to_owned(), name.to_owned(), config.clone());
        self.lock()
            .entry(key)
            .or_insert_with(|| {
                Arc::new(McpServer::new(
                    name,
                    config.clone(),
                    root,
                    self.stopped.child_token(),
                ))
            })
            .clone()
    }

    /// The user's MCP settings from now on: the `env` values loops' servers get.
    pub fn use_current(&self, settings: &McpSettings) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = settings.clone();
    }

    /// The user's MCP settings now (with their `env` values): what a coding agent is given.
    pub fn current(&self) -> McpSettings {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The tools the servers of a loop's `settings` offer loops of `level` in the project at
    /// `root`, starting the servers not running, with the `env` values of the current
    /// settings. A server that cannot start, or whose `env` the current settings lack, is
    /// named with its error; the loop goes on without its tools, whose calls get that error.
    pub async fn tools_for(
        &self,
        root: &Path,
        settings: &McpSettings,
        level: &str,
        cancel: &CancellationToken,
    ) -> (McpTools, Vec<Unavailable>) {
        let mut tools = McpTools::builder();
        let mut unavailable = Vec::new();
        for (name, config) in &settings.servers {
            if !config.offered_to(level) {
                continue;
            }
            match self.server_tools(root, name, config, cancel).await {
                Ok((server, listed)) => {
                    for tool in listed
                        .iter()
                        .filter(|tool| config.offers(level, &tool.name))
                    {
                        tools.add(&server, tool);
                    }
                }
                Err(error) => {
                    tools.unavailable(name, &error);
                    unavailable.push(Unavailable {
                        server: name.clone(),
                        error,
                    });
                }
            }
        }
        (tools.build(), unavailable)
    }

    /// The server `name` as a loop's settings have it, with the current `env` values, and
    /// its tools; or why not.
    async fn server_tools(
        &self,
        root: &Path,
        name: &str,
        config: &McpServerConfig,
        cancel: &CancellationToken,
    ) -> Result<(Arc<McpServer>, Vec<rmcp::model::Tool>), String> {
        let config = self
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .with_current_env(name, config)?;
        let server = self.server(root, name, &config);
        // The server's own words are in the error: never a next step of theirs.
        let listed = server
            .tools(cancel)
            .await
            .map_err(|err| crate::next_step::plain(&err.to_string()))?;
        Ok((server, listed))
    }

    /// Starts (if needed) each configured server for `root` and lists its tools, for
    /// `:checkhealth`: per server, its tools or why it could not start.
    pub async fn probe(
        &self,
        root: &Path,
        settings: &McpSettings,
    ) -> Vec<(String, Result<Vec<String>, String>)> {
        let cancel = CancellationToken::new();
        let mut probed = Vec::new();
        for (name, config) in &settings.servers {
            let server = self.server(root, name, config);
            let listed = server
                .tools(&cancel)
                .await
                .map(|tools| tools.iter().map(|tool| tool.name.to_string()).collect())
                .map_err(|err| err.to_string());
            probed.push((name.clone(), listed));
        }
        probed
    }

    /// Every server this host knows, by name.
    pub fn status(&self) -> Vec<ServerStatus> {
        let mut statuses: Vec<ServerStatus> =
            self.lock().values().map(|server| server.status()).collect();
        statuses.sort_by(|a, b| (&a.name, &a.root).cmp(&(&b.name, &b.root)));
        statuses
    }

    /// Stops every server; calls under way end as cancelled.
    pub fn shut_down(&self) {
        self.stopped.cancel();
        for server in self.lock().values() {
            server.stop();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ServerKey, Arc<McpServer>>> {
        self.servers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
