//! A code loop's coding agent up to its first prompt: started in the project root,
//! initialized, and a session opened there with the MCP servers the user gives code loops, as
//! far as the agent takes them (stdio always; http when it says so); every step bounded and
//! given up at a cancel.

use std::time::Duration;

use agent_client_protocol::v1::schema::{
    EnvVariable, McpServer, McpServerHttp, McpServerStdio, NewSessionRequest, SessionId,
};
use futures::channel::mpsc::Receiver;

use crate::acp::{AcpError, AgentConfig, AgentConnection, FromAgent, INITIALIZE_TIMEOUT};
use crate::agent::context::{LoopContext, LoopError};
use crate::agent::events::{LoopEvent, NoticeLevel};
use crate::mcp::{Endpoint, McpSettings};
use crate::next_step::NextStep;

/// How long an agent may take to open a session (it may start its MCP servers first).
const SESSION_TIMEOUT: Duration = Duration::from_secs(120);

/// A started agent with its session open.
pub(super) struct AgentSession {
    pub agent: AgentConnection,
    pub from_agent: Receiver<FromAgent>,
    pub id: SessionId,
}

/// Starts agent `name` (`config`) for the context's loop and opens its session. Dropped on a
/// failure, the agent is killed.
pub(super) async fn open(
    context: &LoopContext,
    name: &str,
    config: &AgentConfig,
) -> Result<AgentSession, LoopError> {
    context.progress(format!("starting the coding agent {name}"));
    let opening = async {
        let mut agent = AgentConnection::start(name, config, context.root.path()).await?;
        let report = crate::acp::initialize(&mut agent, INITIALIZE_TIMEOUT).await?;
        tracing::info!(loop_id = %context.record.id, agent = %name, version = ?report.version, "coding agent initialized");
        let offered = mcp_servers(
            &context.settings.mcp,
            &context.mcp.current(),
            report.mcp.contains(&"http"),
            &config.share_mcp_env,
        );
        for server in &offered.withheld {
            context.events.emit(LoopEvent::Notice {
                loop_id: context.record.id.to_string(),
                level: NoticeLevel::Warn,
                message: withheld_words(name, server),
            });
        }
        let servers = offered.servers;
        let request =
            NewSessionRequest::new(context.root.path().to_path_buf()).mcp_servers(servers);
        let session = agent
            .request("session/new", request, SESSION_TIMEOUT)
            .await?;
        let from_agent = agent
            .take_from_agent()
            .ok_or_else(|| AcpError::NotStarted {
                agent: name.to_owned(),
                command: config.command.clone(),
                reason: "its messages were already taken".to_owned(),
            })?;
        Ok::<_, AcpError>(AgentSession {
            agent,
            from_agent,
            id: session.session_id,
        })
    };
    tokio::select! {
        biased;
        _ = context.cancel.cancelled() => Err(LoopError::Cancelled),
        opened = opening => Ok(opened?),
    }
}

/// The MCP servers a session is opened with, and those left out for their `env`.
struct OfferedServers {
    servers: Vec<McpServer>,
    /// Code-level servers whose `env` is set but not shared with the agent, by name.
    withheld: Vec<String>,
}

/// The MCP servers of `settings` (the loop's) offered to code loops, with the `env` values of
/// `current` (the user's now: a loop's stored settings hold only the names), as ACP names
/// them; http ones only where the agent takes them (`http`). A server whose `env` the current
/// settings lack is left out (`offered_mcp_tools` tells the user of it the same way); one
/// whose `env` is set goes only when `shared` names it (`agents.<name>.share_mcp_env`), as
/// the agent sees every value it is handed.
fn mcp_servers(
    settings: &McpSettings,
    current: &McpSettings,
    http: bool,
    shared: &[String],
) -> OfferedServers {
    let mut withheld = Vec::new();
    let servers = settings
        .servers
        .iter()
        .filter(|(_, server)| server.offered_to("code"))
        .filter_map(|(name, server)| {
            let server = current.with_current_env(name, server).ok()?;
            if !server.env.is_empty() && !shared.contains(name) {
                withheld.push(name.clone());
                return None;
            }
            match server.endpoint()? {
                Endpoint::Command { program, args } => {
                    let env = server
                        .env
                        .iter()
                        .map(|(variable, value)| EnvVariable::new(variable, value))
                        .collect();
                    Some(McpServer::Stdio(
                        McpServerStdio::new(name, program)
                            .args(args.to_vec())
                            .env(env),
                    ))
                }
                Endpoint::Http { url } => {
                    http.then(|| McpServer::Http(McpServerHttp::new(name, url)))
                }
            }
        })
        .collect();
    OfferedServers { servers, withheld }
}

/// Why MCP server `server` is not in agent `agent`'s session, and the setting that hands it
/// over.
fn withheld_words(agent: &str, server: &str) -> String {
    let key = format!("agents.{agent}.share_mcp_env");
    NextStep::SetOption { key, example: None }.attach(&format!(
        "MCP server {server} is not offered to the coding agent {agent}: its env holds values \
         (tokens) the agent would see; to hand them over, name {server} in \
         agents.{agent}.share_mcp_env"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::McpServerConfig;

    fn server(command: Option<&str>, url: Option<&str>, env: &[(&str, &str)]) -> McpServerConfig {
        McpServerConfig {
            command: command.map(str::to_owned),
            url: url.map(str::to_owned),
            env: env
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
            levels: vec!["code".to_owned()],
            ..McpServerConfig::default()
        }
    }

    #[test]
    fn code_servers_go_with_their_current_env_and_http_only_where_the_agent_takes_it() {
        let stored = McpSettings {
            servers: [
                (
                    "docs".to_owned(),
                    server(None, Some("http://127.0.0.1:1/mcp"), &[]),
                ),
                (
                    "gh".to_owned(),
                    server(Some("gh-mcp"), None, &[("TOKEN", "")]),
                ),
                (
                    "plans-only".to_owned(),
                    McpServerConfig {
                        levels: vec!["plan".to_owned()],
                        ..server(Some("x"), None, &[])
                    },
                ),
            ]
            .into(),
        };
        let current = McpSettings {
            servers: [(
                "gh".to_owned(),
                server(Some("gh-mcp"), None, &[("TOKEN", "t0k")]),
            )]
            .into(),
        };
        let names = |offered: OfferedServers| -> Vec<String> {
            offered
                .servers
                .iter()
                .map(|server| match server {
                    McpServer::Stdio(stdio) => format!(
                        "stdio {} {}",
                        stdio.name,
                        stdio
                            .env
                            .iter()
                            .map(|env| format!("{}={}", env.name, env.value))
                            .collect::<Vec<_>>()
                            .join(",")
                    ),
                    McpServer::Http(http) => format!("http {} {}", http.name, http.url),
                    _ => "other".to_owned(),
                })
                .collect()
        };
        let shared = ["gh".to_owned()];
        assert_eq!(
            names(mcp_servers(&stored, &current, true, &shared)),
            ["http docs http://127.0.0.1:1/mcp", "stdio gh TOKEN=t0k"]
        );
        assert_eq!(
            names(mcp_servers(&stored, &current, false, &shared)),
            ["stdio gh TOKEN=t0k"]
        );
        assert!(
            mcp_servers(&stored, &McpSettings::default(), false, &shared)
                .servers
                .is_empty()
        );
        let unshared = mcp_servers(&stored, &current, false, &[]);
        assert_eq!(unshared.withheld, ["gh"]);
        assert!(unshared.servers.is_empty());
    }
}
