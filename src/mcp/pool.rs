//! The host's MCP servers, shared by its loops: one per project, name and configuration,
//! started on first use and stopped with the host.

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

    /// The tools the configured servers offer loops of `level` in the project at `root`,
    /// starting the servers not running. A server that cannot start is named with its error;
    /// the loop goes on without its tools.
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
            let server = self.server(root, name, config);
            match server.tools(cancel).await {
                Ok(listed) => {
                    for tool in listed
                        .iter()
                        .filter(|tool| config.offers(level, &tool.name))
                    {
                        tools.add(&server, tool);
                    }
                }
                Err(err) => unavailable.push(Unavailable {
                    server: name.clone(),
                    error: err.to_string(),
                }),
            }
        }
        (tools.build(), unavailable)
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
