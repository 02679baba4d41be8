use std::time::Duration;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::approvals::{ApprovalSettings, PolicyApprover};
use crate::tools::{
    AcceptAll, DEFAULT_DENIED_COMMANDS, DEFAULT_SECRET_PATTERNS, Sandbox, SandboxSettings,
    ToolPolicy,
};

/// Per-request settings from the user's configuration; every field has a default so a shell
/// may send only what the user changed. A loop keeps the settings it started with (they are
/// stored with it) and its children inherit them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoopSettings {
    pub model: String,
    pub max_tokens: u32,
    /// Model turns before the loop gives up.
    pub max_turns: u32,
    pub max_retries: u32,
    pub request_timeout_ms: u64,
    pub stream_idle_timeout_ms: u64,
    /// Loop levels whose artifact waits for `:LooprApprove` before children spawn.
    pub review_gates: Vec<String>,
    /// Loops this host runs at once.
    pub max_concurrent_loops: u32,
    /// Review passes a plan goes through before it counts as ready (0 turns them off).
    pub plan_review_passes: u32,
    /// Whether a spec gets one judged review before it counts as ready.
    pub spec_review: bool,
    /// Validation runs a code loop may use before it fails.
    pub code_max_iterations: u32,
    /// How long a phase's validation command may run.
    pub validation_timeout_secs: u64,
    /// Per kind of change (write, edit, command): "ask" the user or accept ("auto").
    pub approvals: ApprovalSettings,
    /// Regular expressions; a matching command runs without asking.
    pub allow_commands: Vec<String>,
    /// Regular expressions; a matching command never runs, whatever is approved.
    pub deny_commands: Vec<String>,
    /// Globs on file names; matching files are never read or written by tools.
    pub secret_patterns: Vec<String>,
    /// How long a `run_command` may run unless the model asks for less.
    pub command_timeout_secs: u64,
    /// Whether loops may fetch web pages (`web_fetch`); off unless enabled.
    pub web_fetch: bool,
    /// The sandbox commands run in.
    pub sandbox: SandboxSettings,
    /// Hosts `web_fetch` fetches from without asking (`docs.rs`, `*.python.org`).
    pub web_fetch_allow_hosts: Vec<String>,
}

impl Default for LoopSettings {
    fn default() -> LoopSettings {
        LoopSettings {
            model: "claude-sonnet-4-5".to_owned(),
            max_tokens: 8192,
            max_turns: 25,
            max_retries: 2,
            request_timeout_ms: 600_000,
            stream_idle_timeout_ms: 90_000,
            review_gates: vec!["plan".to_owned()],
            max_concurrent_loops: 4,
            plan_review_passes: 5,
            spec_review: true,
            code_max_iterations: 5,
            validation_timeout_secs: 600,
            approvals: ApprovalSettings::default(),
            allow_commands: Vec::new(),
            deny_commands: DEFAULT_DENIED_COMMANDS
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
            secret_patterns: DEFAULT_SECRET_PATTERNS
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
            command_timeout_secs: 120,
            web_fetch: false,
            sandbox: SandboxSettings::default(),
            web_fetch_allow_hosts: Vec::new(),
        }
    }
}

const LEVELS: [&str; 3] = ["plan", "spec", "phase"];

impl LoopSettings {
    /// Rejects values no loop can run with, naming the setting.
    pub fn check(&self) -> Result<(), String> {
        if self.model.trim().is_empty() {
            return Err("model must not be empty".to_owned());
        }
        for (name, value) in [
            ("max_tokens", u64::from(self.max_tokens)),
            ("max_turns", u64::from(self.max_turns)),
            ("request_timeout_ms", self.request_timeout_ms),
            ("stream_idle_timeout_ms", self.stream_idle_timeout_ms),
            ("max_concurrent_loops", u64::from(self.max_concurrent_loops)),
            ("code_max_iterations", u64::from(self.code_max_iterations)),
            ("validation_timeout_secs", self.validation_timeout_secs),
            ("command_timeout_secs", self.command_timeout_secs),
        ] {
            if value == 0 {
                return Err(format!("{name} must be at least 1"));
            }
        }
        self.tool_policy()?;
        PolicyApprover::new(
            self.approvals.clone(),
            &self.allow_commands,
            true,
            Arc::new(AcceptAll),
        )?
        .allowing_hosts(&self.web_fetch_allow_hosts)?;
        if self.plan_review_passes > 5 {
            return Err("plan_review_passes must be between 0 and 5".to_owned());
        }
        if let Some(level) = self
            .review_gates
            .iter()
            .find(|level| !LEVELS.contains(&level.as_str()))
        {
            return Err(format!(
                "review_gates has {level:?}; use any of \"plan\", \"spec\", \"phase\""
            ));
        }
        Ok(())
    }

    pub fn gates(&self, level: &str) -> bool {
        self.review_gates.iter().any(|gate| gate == level)
    }

    /// What tools may never do under these settings.
    pub fn tool_policy(&self) -> Result<ToolPolicy, String> {
        let policy = ToolPolicy::new(
            &self.secret_patterns,
            &self.deny_commands,
            Duration::from_secs(self.command_timeout_secs),
        )?;
        Ok(policy.with_sandbox(Sandbox::new(&self.sandbox)?))
    }

    pub fn validation_timeout(&self) -> Duration {
        Duration::from_secs(self.validation_timeout_secs)
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    pub fn stream_idle_timeout(&self) -> Duration {
        Duration::from_millis(self.stream_idle_timeout_ms)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }

    /// Settings stored with a loop; unknown or missing fields fall back to defaults so old
    /// records stay readable.
    pub fn from_stored(json: &str) -> LoopSettings {
        let known = serde_json::to_value(LoopSettings::default()).unwrap_or_default();
        serde_json::from_str::<serde_json::Value>(json)
            .ok()
            .and_then(|mut value| {
                let object = value.as_object_mut()?;
                object.retain(|key, _| known.get(key).is_some());
                serde_json::from_value(value).ok()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_settings_round_trip_and_tolerate_old_or_unknown_fields() {
        let settings = LoopSettings {
            max_turns: 3,
            review_gates: vec![],
            ..LoopSettings::default()
        };
        assert_eq!(LoopSettings::from_stored(&settings.to_json()), settings);
        let old = LoopSettings::from_stored(r#"{"max_turns": 7, "retired_option": true}"#);
        assert_eq!(old.max_turns, 7);
        assert_eq!(
            LoopSettings::from_stored("not json"),
            LoopSettings::default()
        );
    }

    #[test]
    fn web_fetch_allow_hosts_are_host_names() {
        let settings = LoopSettings {
            web_fetch_allow_hosts: vec!["docs.rs".to_owned(), "https://example.com/".to_owned()],
            ..LoopSettings::default()
        };
        let err = settings.check().expect_err("a URL is not a host");
        assert!(
            err.contains("web_fetch_allow_hosts entry \"https://example.com/\""),
            "{err}"
        );
    }

    #[test]
    fn review_gates_name_known_levels() {
        let settings = LoopSettings {
            review_gates: vec!["plans".to_owned()],
            ..LoopSettings::default()
        };
        assert!(settings.check().expect_err("invalid").contains("\"plans\""));
    }
}
