//! `initialize`: what Loopr tells an agent it can do, and what the agent answers (its name,
//! version, protocol version and capabilities) as an `AgentReport`; and the probe
//! `:checkhealth` runs for each configured agent.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use agent_client_protocol::v1::schema::{
    AuthCapabilities, ClientCapabilities, FileSystemCapabilities, Implementation,
    InitializeRequest, NewSessionRequest,
};

use super::config::AgentConfig;
use super::connection::AgentConnection;
use super::error::AcpError;
use super::version::LOOPR_PROTOCOL_VERSION;

/// How long an agent may take to start and answer `initialize` (adapters started through
/// `npx` may first install themselves).
pub const INITIALIZE_TIMEOUT: Duration = Duration::from_secs(60);

/// What an agent said of itself in `initialize`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentReport {
    /// Its name (the title where it gave one), `unnamed` where it gave none.
    pub name: String,
    pub version: Option<String>,
    pub protocol_version: u16,
    /// Whether it can load earlier sessions (`session/load`).
    pub load_session: bool,
    /// What a prompt may carry besides text: `image`, `audio`, `embedded context`.
    pub prompt: Vec<&'static str>,
    /// Which MCP servers besides stdio ones it reaches: `http`, `sse`.
    pub mcp: Vec<&'static str>,
    /// The names of the ways it offers to sign in.
    pub sign_in: Vec<String>,
}

impl AgentReport {
    /// Its capabilities in words: `load session, prompts with image and embedded context, MCP
    /// over stdio and http`.
    pub fn capabilities(&self) -> String {
        let mut words = Vec::new();
        if self.load_session {
            words.push("load session".to_owned());
        }
        if self.prompt.is_empty() {
            words.push("text prompts".to_owned());
        } else {
            words.push(format!("prompts with {}", and_list(&self.prompt)));
        }
        let mcp: Vec<&str> = std::iter::once("stdio")
            .chain(self.mcp.iter().copied())
            .collect();
        words.push(format!("MCP over {}", and_list(&mcp)));
        words.join(", ")
    }
}

fn and_list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// Initializes `agent`: Loopr serves file reads and writes and terminals, and signs in
/// through a terminal; fails unless the agent answers within `limit` in Loopr's version.
pub async fn initialize(
    agent: &mut AgentConnection,
    limit: Duration,
) -> Result<AgentReport, AcpError> {
    let request = InitializeRequest::new(LOOPR_PROTOCOL_VERSION)
        .client_capabilities(
            ClientCapabilities::new()
                .fs(FileSystemCapabilities::new()
                    .read_text_file(true)
                    .write_text_file(true))
                .terminal(true)
                .auth(AuthCapabilities::new().terminal(true)),
        )
        .client_info(Implementation::new("loopr", env!("CARGO_PKG_VERSION")));
    let answer = agent.request("initialize", request, limit).await?;
    if answer.protocol_version != LOOPR_PROTOCOL_VERSION {
        return Err(AcpError::ProtocolMismatch {
            agent: agent.name().to_owned(),
            agent_version: answer.protocol_version.as_u16().to_string(),
            loopr_version: LOOPR_PROTOCOL_VERSION.as_u16(),
        });
    }
    agent.set_sign_in(&answer.auth_methods);
    let capabilities = &answer.agent_capabilities;
    let prompt = &capabilities.prompt_capabilities;
    let mcp = &capabilities.mcp_capabilities;
    let (name, version) = match &answer.agent_info {
        Some(info) => (
            info.title.clone().unwrap_or_else(|| info.name.clone()),
            Some(info.version.clone()),
        ),
        None => ("unnamed".to_owned(), None),
    };
    Ok(AgentReport {
        name,
        version,
        protocol_version: answer.protocol_version.as_u16(),
        load_session: capabilities.load_session,
        prompt: [
            (prompt.image, "image"),
            (prompt.audio, "audio"),
            (prompt.embedded_context, "embedded context"),
        ]
        .into_iter()
        .filter_map(|(offered, word)| offered.then_some(word))
        .collect(),
        mcp: [(mcp.http, "http"), (mcp.sse, "sse")]
            .into_iter()
            .filter_map(|(offered, word)| offered.then_some(word))
            .collect(),
        sign_in: answer
            .auth_methods
            .iter()
            .map(|method| method.name().to_owned())
            .collect(),
    })
}

/// Starts agent `name` in `root`, initializes it and, where it offers ways to sign in, opens
/// a session to learn whether it needs one; then stops it. Each step within `limit`.
pub async fn probe_agent(
    name: &str,
    config: &AgentConfig,
    root: &Path,
    limit: Duration,
) -> Result<AgentReport, AcpError> {
    let mut agent = AgentConnection::start(name, config, root).await?;
    let probed = async {
        let report = initialize(&mut agent, limit).await?;
        if !report.sign_in.is_empty() {
            let session = NewSessionRequest::new(root.to_path_buf());
            agent.request("session/new", session, limit).await?;
        }
        Ok(report)
    }
    .await;
    agent.shut_down().await;
    probed
}

/// `probe_agent` for each of `agents`, at once; by name.
pub async fn probe_agents(
    agents: &BTreeMap<String, AgentConfig>,
    root: &Path,
    limit: Duration,
) -> Vec<(String, Result<AgentReport, AcpError>)> {
    let probes = agents.iter().map(|(name, config)| async move {
        (name.clone(), probe_agent(name, config, root, limit).await)
    });
    futures::future::join_all(probes).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_read_as_a_list() {
        let report = AgentReport {
            name: "Test".to_owned(),
            version: None,
            protocol_version: 1,
            load_session: true,
            prompt: vec!["image", "embedded context"],
            mcp: vec!["http"],
            sign_in: Vec::new(),
        };
        assert_eq!(
            report.capabilities(),
            "load session, prompts with image and embedded context, MCP over stdio and http"
        );
    }
}
