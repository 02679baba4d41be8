//! The user's coding agents as a shell last gave them, `env` values included: a loop's stored
//! settings keep only the variables' names (`store::stored_settings`), so a loop run by an
//! agent takes the values from here, as MCP servers take theirs from `McpPool::use_current`.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use crate::acp::AgentConfig;
use crate::next_step::NextStep;

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
        if stored.env.is_empty() {
            return Ok(stored.clone());
        }
        let agents = self.agents.lock().unwrap_or_else(PoisonError::into_inner);
        let current = agents.get(name).map(|agent| &agent.env);
        let mut env = BTreeMap::new();
        let mut missing = Vec::new();
        for variable in stored.env.keys() {
            match current.and_then(|current| current.get(variable)) {
                Some(value) => {
                    env.insert(variable.clone(), value.clone());
                }
                None => missing.push(variable.as_str()),
            }
        }
        if !missing.is_empty() {
            let problem = format!(
                "agent {name:?} needs {} in its env, which the current settings do not set \
                 (env values are never stored with a loop)",
                missing.join(", ")
            );
            return Err(NextStep::SetOption {
                key: format!("agents.{name}.env"),
                example: None,
            }
            .attach(&problem));
        }
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
            args: Vec::new(),
            env: env
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
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
