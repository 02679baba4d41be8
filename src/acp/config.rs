//! What the user configures about coding agents (the `agents` and `code_agent` settings), and
//! the checks that name the setting when one is wrong. The `env` values may be secrets: they
//! are never shown (`Debug` names the variables only), logged or stored (`stored_settings`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One coding agent speaking the Agent Client Protocol over its stdio: the program Loopr
/// starts in the project root.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// The program (an ACP adapter such as `claude-agent-acp`), found on PATH unless it is a
    /// path.
    #[schemars(length(min = 1))]
    pub command: String,
    pub args: Vec<String>,
    /// Variables set for the agent, over the allow-listed ones of the host; a provider key
    /// reaches an agent only when named here.
    pub env: BTreeMap<String, String>,
    /// MCP servers (names in `mcp.servers`) handed to this agent with their `env` values: a
    /// code-level server whose `env` is set is left out of the agent's session unless named
    /// here, as the agent (and whatever it runs) would see its tokens.
    #[schemars(inner(length(min = 1)))]
    pub share_mcp_env: Vec<String>,
}

impl std::fmt::Debug for AgentConfig {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("AgentConfig")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("share_mcp_env", &self.share_mcp_env)
            .finish()
    }
}

/// Whether `name` may name an agent: letters, digits, `-` and `_` (it is typed in
/// `agent=<name>` and shown in messages).
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Rejects agents no run could start and a `code_agent` naming none of them, naming the
/// setting and the fix.
pub fn check_agents(
    agents: &BTreeMap<String, AgentConfig>,
    code_agent: Option<&str>,
) -> Result<(), String> {
    for (name, agent) in agents {
        if !plain_name(name) {
            return Err(format!(
                "agents has an agent named {name:?}; use letters, digits, '-' and '_' (as \
                 \"claude\")"
            ));
        }
        if agent.command.trim().is_empty() {
            return Err(format!(
                "agents.{name}.command is empty; name the agent's ACP program (as \
                 \"claude-agent-acp\")"
            ));
        }
        if let Some(variable) = agent.env.keys().find(|variable| variable.is_empty()) {
            return Err(format!(
                "agents.{name}.env has a variable named {variable:?}; name each variable"
            ));
        }
    }
    if let Some(chosen) = code_agent
        && let Err(unknown) = configured_agent(agents, chosen)
    {
        return Err(format!(
            "code_agent is {chosen:?}, which agents does not configure ({}); add it to agents \
             or unset code_agent",
            unknown.configured_words()
        ));
    }
    Ok(())
}

/// An agent picked to write a run's code that `agents` does not configure; each shell words
/// it for the way it was picked (`code_agent`, or the run's own choice of agent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownAgent {
    pub name: String,
    /// The agents `agents` configures, by name.
    pub configured: Vec<String>,
}

impl UnknownAgent {
    /// `the configured agents are claude, goose`, or that none is.
    pub fn configured_words(&self) -> String {
        if self.configured.is_empty() {
            "no agent is configured in agents".to_owned()
        } else {
            format!("the configured agents are {}", self.configured.join(", "))
        }
    }
}

/// Whether `agents` configures agent `name`.
pub fn configured_agent(
    agents: &BTreeMap<String, AgentConfig>,
    name: &str,
) -> Result<(), UnknownAgent> {
    if agents.contains_key(name) {
        return Ok(());
    }
    Err(UnknownAgent {
        name: name.to_owned(),
        configured: agents.keys().cloned().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agents(entries: &[(&str, &str)]) -> BTreeMap<String, AgentConfig> {
        entries
            .iter()
            .map(|(name, command)| {
                (
                    (*name).to_owned(),
                    AgentConfig {
                        command: (*command).to_owned(),
                        ..AgentConfig::default()
                    },
                )
            })
            .collect()
    }

    #[test]
    fn configured_agents_and_a_code_agent_among_them_pass() {
        let configured = agents(&[("claude", "claude-agent-acp"), ("goose-1", "goose")]);
        assert_eq!(check_agents(&configured, None), Ok(()));
        assert_eq!(check_agents(&configured, Some("claude")), Ok(()));
    }

    #[test]
    fn each_mistake_names_its_setting() {
        let unknown = check_agents(&agents(&[("claude", "claude-agent-acp")]), Some("codex"))
            .expect_err("unknown code_agent");
        assert!(
            unknown.starts_with("code_agent is \"codex\", which agents does not configure")
                && unknown.contains("the configured agents are claude"),
            "{unknown}"
        );
        let none = check_agents(&BTreeMap::new(), Some("codex")).expect_err("none configured");
        assert!(none.contains("no agent is configured in agents"), "{none}");
        let empty = check_agents(&agents(&[("claude", "  ")]), None).expect_err("empty command");
        assert!(
            empty.starts_with("agents.claude.command is empty"),
            "{empty}"
        );
        let bad = check_agents(&agents(&[("my agent", "x")]), None).expect_err("bad name");
        assert!(bad.contains("named \"my agent\""), "{bad}");
    }

    #[test]
    fn debug_names_env_variables_never_their_values() {
        let agent = AgentConfig {
            command: "claude-agent-acp".to_owned(),
            env: BTreeMap::from([("ANTHROPIC_API_KEY".to_owned(), "sk-ant-secret".to_owned())]),
            ..AgentConfig::default()
        };
        let shown = format!("{agent:?}");
        assert!(
            shown.contains("ANTHROPIC_API_KEY") && !shown.contains("sk-ant-secret"),
            "{shown}"
        );
    }
}
