//! The user's coding agents as a shell last gave them, `env` values included: a loop's stored
//! settings keep only the variables' names (`store::stored_settings`), so a loop run by an
//! agent takes the values from here, as MCP servers take theirs from `McpPool::use_current`.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use crate::acp::AgentConfig;
use crate::mcp::env_from_current;

/// Shared by the host's loops; set each time a shell asks for a new loop.
#[derive(Debug, Default)]
pub struct CurrentAgents {
    agents: Mutex<BTreeMap<String, AgentConfig>>,
}

impl CurrentAgents {
    /// The user's agents from now on.
    pub fn use_current(&self, agents: &BTreeMap<String, AgentConfig>) {
        *self.agents.lock().unwrap_or_else(PoisonError::into_inner) = agents.clone();
    }

    /// `stored` (agent `name` as a loop's settings keep it) with its `env` values from the
    /// current settings; else which variables they lack, the setting named.
    pub fn with_current_env(
        &self,
        name: &str,
        stored: &AgentConfig,
    ) -> Result<AgentConfig, String> {
        let agents = self.agents.lock().unwrap_or_else(PoisonError::into_inner);
        let env = env_from_current(
            &format!("agent {name:?}"),
            &format!("agents.{name}.env"),
            &stored.env,
            agents.get(name).map(|agent| &agent.env),
        )?;
        Ok(AgentConfig {
            env,
            ..stored.clone()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(env: &[(&str, &str)]) -> AgentConfig {
        AgentConfig {
            command: "claude-agent-acp".to_owned(),
            env: env
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
            ..AgentConfig::default()
        }
    }

    #[test]
    fn stored_names_take_the_current_values_and_a_missing_one_names_the_setting() {
        let current = CurrentAgents::default();
        let stored = agent(&[("ANTHROPIC_API_KEY", "")]);
        let missing = current
            .with_current_env("claude", &stored)
            .expect_err("no current settings");
        let (words, step) = crate::next_step::split(&missing);
        assert!(
            words.starts_with("agent \"claude\" needs ANTHROPIC_API_KEY in its env"),
            "{words}"
        );
        assert!(step.is_some(), "{missing}");
        current.use_current(&BTreeMap::from([(
            "claude".to_owned(),
            agent(&[("ANTHROPIC_API_KEY", "sk-ant-1")]),
        )]));
        let config = current.with_current_env("claude", &stored).expect("set");
        assert_eq!(config.env["ANTHROPIC_API_KEY"], "sk-ant-1");
        assert_eq!(
            current
                .with_current_env("claude", &agent(&[]))
                .expect("no env"),
            agent(&[])
        );
    }
}
