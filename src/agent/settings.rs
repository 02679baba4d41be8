//! A loop's settings: the one definition of every option a shell passes to the host, with
//! its default, its limits and its description. The JSON schema derived from `LoopSettings`
//! is what shells generate their checks, types and documentation from (`bridge::generate`),
//! and `check` reads its numeric limits from that same schema.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::approvals::{ApprovalSettings, PolicyApprover};
use crate::acp::AgentConfig;
use crate::artifacts::Severity;
use crate::budget::Budget;
use crate::llm::{
    ProviderName, ProviderSettings, RetryPolicy, ToolChoice, ToolFormat, ToolProtocol,
};
use crate::mcp::McpSettings;
use crate::next_step::NextStep;
use crate::pricing::{Price, PriceTable};
use crate::tools::{
    AcceptAll, DEFAULT_DENIED_COMMANDS, DEFAULT_SECRET_PATTERNS, Sandbox, SandboxSettings,
    ToolPolicy,
};

/// Per-request settings from the user's configuration; every field has a default so a shell
/// may send only what the user changed. A loop keeps the settings it started with (they are
/// stored with it) and its children inherit them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LoopSettings {
    /// Who answers: `anthropic`, `openai` (and every server speaking its chat completions)
    /// or `ollama`.
    pub provider: ProviderName,
    /// The model; empty means the provider's default.
    #[schemars(length(min = 1))]
    pub model: String,
    /// Models per level, where one should differ from `model` (a cheaper one for reviews).
    pub models: LevelModels,
    /// Overrides the provider's base URL variable.
    #[schemars(url)]
    pub base_url: Option<String>,
    /// The variable that holds the API key, when not the provider's usual one.
    #[schemars(
        regex(pattern = r"^[A-Za-z0-9_]+_API_KEY$"),
        extend("x-expects" = "the name of an environment variable ending in _API_KEY")
    )]
    pub api_key_env: Option<String>,
    /// Ollama's context window; its small default silently truncates long prompts.
    #[schemars(range(min = 1))]
    pub num_ctx: Option<u32>,
    /// Requests to the model server under way at once, from all loops of the host; `None`:
    /// one for a server on this machine or network (llama-cpp-python stops an answer when the
    /// next request arrives), no limit for a hosted API or Ollama.
    #[schemars(
        range(min = 1),
        description = "Requests to the model server under way at once, from all loops of the \
                       host; unset: one for a server on this machine or network, no limit for a \
                       hosted API or Ollama."
    )]
    pub max_parallel_requests: Option<u32>,
    /// How the model calls tools: its provider's tool calling, or a text protocol.
    pub tool_protocol: ToolProtocol,
    /// How calls are written in the `xml` and `markdown` protocols.
    pub tool_format: ToolFormat,
    /// `tool_choice` sent with the tools (openai only); unset, none is sent. Some servers
    /// put the tools into the prompt only when it is sent (llama-cpp-python).
    pub tool_choice: Option<ToolChoice>,
    /// Whether answers stream as they are written; some servers cannot stream with tools.
    pub stream: bool,
    /// Answers in a row a text protocol could not read before the loop gives up.
    pub max_format_retries: u32,
    /// The longest answer, in tokens; unset, fitted to the server's context window where it
    /// says one (`limits.rs`), else 8192. Earlier versions stored the default as a value.
    #[schemars(
        range(min = 1),
        description = "The longest answer, in tokens; unset: fitted to the server's context \
                       window where it says one, else 8192."
    )]
    pub max_tokens: Option<u32>,
    /// Model turns before the loop gives up.
    #[schemars(range(min = 1))]
    pub max_turns: u32,
    /// Estimated input tokens a request may reach before older tool results are shortened
    /// in what is sent (`context_budget.rs`); unset, fitted to the server's context window
    /// where it says one, else 100,000.
    #[schemars(
        range(min = MIN_CONTEXT_BUDGET),
        extend("x-unit" = "tokens"),
        description = "Estimated input tokens a request may reach before older tool results are \
                       shortened; unset: fitted to the server's context window where it says \
                       one, else 100,000."
    )]
    pub context_budget: Option<u32>,
    /// The latest turns whose tool results are always sent whole.
    #[schemars(range(min = 1))]
    pub context_keep_turns: u32,
    /// How often a failed request to the model is retried.
    pub max_retries: u32,
    /// How long a request waits for its answer to begin, and then for each next piece of it.
    #[schemars(range(min = 1))]
    pub request_timeout_ms: u64,
    /// How long a streamed answer may send nothing before it is given up.
    #[schemars(range(min = 1))]
    pub stream_idle_timeout_ms: u64,
    /// Loop levels whose work waits for the user's approval before what follows it: a plan's,
    /// spec's or phase's artifact before its children spawn, a phase's code (`"code"`) before
    /// it counts as done and a plan or spec run goes on.
    #[schemars(extend("items" = { "type": "string", "enum": GATE_LEVELS }))]
    pub review_gates: Vec<String>,
    /// Loops this host runs at once.
    #[schemars(range(min = 1))]
    pub max_concurrent_loops: u32,
    /// Review passes a plan goes through before it counts as ready (0 turns them off).
    #[schemars(range(min = 0, max = 5))]
    pub plan_review_passes: u32,
    /// Whether a spec gets one judged review before it counts as ready.
    pub spec_review: bool,
    /// Validation runs a code loop may use before it fails.
    #[schemars(range(min = 1))]
    pub code_max_iterations: u32,
    /// Whether a phase whose validation passed is verified against its requirements before
    /// it counts as done, and what blocks it; `false` turns verification off.
    // `x-switch`: a boolean given for the table is its `enabled` (Lua's option check and
    // types read it so; the host's `verify_switch_or_table` does the same).
    #[schemars(extend("x-switch" = "enabled"))]
    #[serde(deserialize_with = "verify_switch_or_table")]
    pub verify: VerifySettings,
    /// `"phase"`: each phase that is done (validated, verified, approved when gated) is
    /// committed, only the files it changed, with the user's hooks; Loopr never pushes.
    pub commit: CommitMode,
    /// A folder of the project (`docs/plans`) the current plan, specs and phases are mirrored
    /// to as markdown, one folder per plan; unset, they stay in Loopr's state only.
    #[schemars(
        length(min = 1),
        extend("x-expects" = "a path relative to the project root")
    )]
    pub export_dir: Option<String>,
    /// How long a phase's validation command may run.
    #[schemars(range(min = 1))]
    pub validation_timeout_secs: u64,
    /// Per kind of change (write, edit, command, fetch, mcp): "ask" the user or accept
    /// ("auto").
    pub approvals: ApprovalSettings,
    /// Whether a phase's validation command waits for approval although it runs in the
    /// sandbox (without a sandbox it is always asked about).
    pub approve_validation: bool,
    /// Regular expressions; a matching command runs without asking.
    #[schemars(inner(length(min = 1)), extend("x-expects" = "a list of regular expressions"))]
    pub allow_commands: Vec<String>,
    /// Regular expressions; a matching command never runs, whatever is approved.
    #[schemars(inner(length(min = 1)), extend("x-expects" = "a list of regular expressions"))]
    pub deny_commands: Vec<String>,
    /// Globs on file names; matching files are never read or written by tools.
    #[schemars(inner(length(min = 1)), extend("x-expects" = "a list of globs"))]
    pub secret_patterns: Vec<String>,
    /// How long a `run_command` may run unless the model asks for less.
    #[schemars(range(min = 1))]
    pub command_timeout_secs: u64,
    /// Whether loops may fetch web pages (`web_fetch`); off unless enabled.
    pub web_fetch: bool,
    /// The sandbox commands run in.
    pub sandbox: SandboxSettings,
    /// Hosts `web_fetch` fetches from without asking (`docs.rs`, `*.python.org`).
    #[schemars(inner(length(min = 1)), extend("x-expects" = "a list of host names"))]
    pub web_fetch_allow_hosts: Vec<String>,
    /// The project's rules files, relative to its root, read into every loop's system prompt
    /// (a code loop also reads the nearest `AGENTS.md` above each file its phase works on).
    #[schemars(
        inner(length(min = 1)),
        extend("x-expects" = "a list of paths relative to the project root")
    )]
    pub rules_files: Vec<String>,
    /// Bytes of rules a system prompt takes at most; the rest is cut, with a note.
    pub rules_max_bytes: u32,
    /// USD per million tokens by model id (or its start), over the defaults.
    #[schemars(extend("propertyNames" = { "minLength": 1 }))]
    pub prices: BTreeMap<String, Price>,
    /// The spend of each plan tree after which its loops pause until approved.
    pub budget: Budget,
    /// MCP servers whose tools loops are offered.
    pub mcp: McpSettings,
    /// Coding agents speaking the Agent Client Protocol (Claude Code, Codex, Gemini CLI,
    /// goose, through their ACP adapters), by name.
    #[schemars(extend("propertyNames" = { "pattern": "^[A-Za-z0-9_-]+$" }))]
    pub agents: BTreeMap<String, AgentConfig>,
    /// The agent of `agents` that writes phases' code; unset, Loopr's own code loop does.
    #[schemars(length(min = 1), extend("x-expects" = "the name of an agent in agents"))]
    pub code_agent: Option<String>,
}

impl Default for LoopSettings {
    fn default() -> LoopSettings {
        LoopSettings {
            provider: ProviderName::default(),
            model: String::new(),
            models: LevelModels::default(),
            base_url: None,
            api_key_env: None,
            num_ctx: None,
            max_parallel_requests: None,
            tool_protocol: ToolProtocol::default(),
            tool_format: ToolFormat::default(),
            tool_choice: None,
            stream: true,
            max_format_retries: 3,
            max_tokens: None,
            max_turns: 25,
            context_budget: None,
            context_keep_turns: 3,
            max_retries: 2,
            request_timeout_ms: 600_000,
            stream_idle_timeout_ms: 90_000,
            review_gates: vec!["plan".to_owned()],
            max_concurrent_loops: 4,
            plan_review_passes: 5,
            spec_review: true,
            code_max_iterations: 5,
            verify: VerifySettings::default(),
            commit: CommitMode::Off,
            export_dir: None,
            validation_timeout_secs: 600,
            approvals: ApprovalSettings::default(),
            approve_validation: false,
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
            rules_files: DEFAULT_RULES_FILES
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
            rules_max_bytes: 32 * 1024,
            prices: BTreeMap::new(),
            budget: Budget::default(),
            mcp: McpSettings::default(),
            agents: BTreeMap::new(),
            code_agent: None,
        }
    }
}

/// Where teams keep their instructions for agents, read by default.
pub const DEFAULT_RULES_FILES: [&str; 4] = [
    "AGENTS.md",
    "CLAUDE.md",
    ".github/copilot-instructions.md",
    ".loopr/rules.md",
];

/// Below this a loop could not send its system prompt and tools with any conversation, not
/// even with a small model's window.
const MIN_CONTEXT_BUDGET: u32 = 1024;

/// The settings' JSON schema, made once: `check` reads the limits from it.
static SCHEMA: LazyLock<serde_json::Value> = LazyLock::new(|| {
    crate::schema::keys_sorted(
        serde_json::to_value(schemars::schema_for!(LoopSettings)).unwrap_or_default(),
    )
});

/// The JSON schema of the settings, for shells that generate their checks, types and
/// documentation from it.
pub fn settings_schema() -> serde_json::Value {
    SCHEMA.clone()
}

/// What `review_gates` may name.
const GATE_LEVELS: [&str; 4] = ["plan", "spec", "phase", "code"];
pub const MODEL_LEVELS: [&str; 6] = ["plan", "spec", "phase", "review", "code", "verify"];

/// `dir` as a relative path that stays below the project root and outside `.git`.
fn export_dir_relative(dir: &str) -> Result<std::path::PathBuf, String> {
    use std::path::{Component, Path};
    let path = Path::new(dir.trim());
    let mut relative = std::path::PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) if part == ".git" => {
                return Err(format!(
                    "export_dir is {dir:?}; name a folder outside .git, as \"docs/plans\""
                ));
            }
            Component::Normal(part) => relative.push(part),
            Component::CurDir => {}
            _ => {
                return Err(format!(
                    "export_dir is {dir:?}; name a folder relative to the project root, without \"..\", as \"docs/plans\""
                ));
            }
        }
    }
    if relative.as_os_str().is_empty() {
        return Err(format!(
            "export_dir is {dir:?}; name a folder below the project root, as \"docs/plans\""
        ));
    }
    Ok(relative)
}

/// Whether Loopr commits a phase's changes once the phase is done.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum CommitMode {
    /// The user commits.
    #[default]
    Off,
    /// One commit per phase that is done.
    Phase,
}

/// How a phase is verified once its validation passes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct VerifySettings {
    /// Whether phases are verified; `verify = false` is short for `enabled = false`.
    pub enabled: bool,
    /// The least severe finding that sends the phase back to its code loop.
    pub block_on: Severity,
    /// Verifications a code loop runs before the phase fails.
    #[schemars(range(min = 1))]
    pub max_rounds: u32,
}

impl Default for VerifySettings {
    fn default() -> VerifySettings {
        VerifySettings {
            enabled: true,
            block_on: Severity::Critical,
            max_rounds: 2,
        }
    }
}

/// `verify = false` (or `true`) reads as the defaults with `enabled` set; a table as itself.
fn verify_switch_or_table<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<VerifySettings, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Given {
        Switch(bool),
        Table(VerifySettings),
    }
    Ok(match Given::deserialize(deserializer)? {
        Given::Switch(enabled) => VerifySettings {
            enabled,
            ..VerifySettings::default()
        },
        Given::Table(table) => table,
    })
}

/// A model per level; unset levels use `model`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LevelModels {
    #[schemars(length(min = 1))]
    pub plan: Option<String>,
    #[schemars(length(min = 1))]
    pub spec: Option<String>,
    #[schemars(length(min = 1))]
    pub phase: Option<String>,
    /// Review passes of plans and specs.
    #[schemars(length(min = 1))]
    pub review: Option<String>,
    #[schemars(length(min = 1))]
    pub code: Option<String>,
    /// Verifications of code against its phase's requirements.
    #[schemars(length(min = 1))]
    pub verify: Option<String>,
}

impl LevelModels {
    fn get(&self, level: &str) -> Option<&str> {
        match level {
            "plan" => self.plan.as_deref(),
            "spec" => self.spec.as_deref(),
            "phase" => self.phase.as_deref(),
            "review" => self.review.as_deref(),
            "code" => self.code.as_deref(),
            "verify" => self.verify.as_deref(),
            _ => None,
        }
        .filter(|model| !model.trim().is_empty())
    }
}

impl LoopSettings {
    /// Rejects values no loop can run with, naming the setting.
    pub fn check(&self) -> Result<(), String> {
        for level in MODEL_LEVELS {
            self.model_for(level)?;
        }
        if let Some(name) = self.api_key_env.as_deref()
            && !name.is_empty()
            && !crate::llm::is_provider_variable(name)
        {
            return Err(format!(
                "api_key_env is {name:?}; name a variable ending in _API_KEY (the host reads \
                 only those, and keeps them from the commands it runs)"
            ));
        }
        if let Some(budget) = self.context_budget
            && budget < MIN_CONTEXT_BUDGET
        {
            return Err(format!(
                "context_budget is {budget}; set at least {MIN_CONTEXT_BUDGET} tokens (the \
                 system prompt and the tools alone take more)"
            ));
        }
        self.check_ranges()?;
        self.tool_policy()?;
        PolicyApprover::new(
            self.approvals.clone(),
            &self.allow_commands,
            true,
            Arc::new(AcceptAll),
        )?
        .allowing_hosts(&self.web_fetch_allow_hosts)?;
        PriceTable::check(&self.prices)?;
        self.budget.check()?;
        self.mcp.check()?;
        crate::acp::check_agents(&self.agents, self.code_agent.as_deref())?;
        self.check_shared_mcp_env()?;
        if let Some(level) = self
            .review_gates
            .iter()
            .find(|level| !GATE_LEVELS.contains(&level.as_str()))
        {
            let known: Vec<String> = GATE_LEVELS
                .iter()
                .map(|level| format!("{level:?}"))
                .collect();
            return Err(format!(
                "review_gates has {level:?}; use any of {}",
                known.join(", ")
            ));
        }
        if let Some(dir) = &self.export_dir {
            export_dir_relative(dir)?;
        }
        if self.commit == CommitMode::Phase && self.sandbox.allow_git {
            return Err(
                "commit is \"phase\" and sandbox.allow_git is true; turn one off (with \
                 allow_git the model's commands may write .git, whose config and hooks the \
                 phase's commit would then run outside the sandbox)"
                    .to_owned(),
            );
        }
        Ok(())
    }

    /// Every number within the limits its schema gives (`minimum`, `maximum`): the schema's
    /// attributes are the one statement of those limits, for this check and for the shells.
    /// Each `agents.<name>.share_mcp_env` names a server of `mcp.servers`: a misspelt name
    /// would leave its server out of the agent's session without a word.
    fn check_shared_mcp_env(&self) -> Result<(), String> {
        for (agent, config) in &self.agents {
            if let Some(unknown) = config
                .share_mcp_env
                .iter()
                .find(|server| !self.mcp.servers.contains_key(server.as_str()))
            {
                let known: Vec<&str> = self.mcp.servers.keys().map(String::as_str).collect();
                let configured = if known.is_empty() {
                    "it configures none".to_owned()
                } else {
                    format!("it configures {}", known.join(", "))
                };
                return Err(format!(
                    "agents.{agent}.share_mcp_env names {unknown:?}, which mcp.servers does not \
                     configure ({configured}); name a server of mcp.servers"
                ));
            }
        }
        Ok(())
    }

    fn check_ranges(&self) -> Result<(), String> {
        let values = serde_json::to_value(self).map_err(|err| err.to_string())?;
        let Some(properties) = SCHEMA.get("properties").and_then(|p| p.as_object()) else {
            return Ok(());
        };
        for (name, property) in properties {
            let Some(value) = values.get(name).and_then(serde_json::Value::as_f64) else {
                continue;
            };
            let bound = |key: &str| property.get(key).and_then(serde_json::Value::as_f64);
            let (minimum, maximum) = (bound("minimum"), bound("maximum"));
            let below = minimum.is_some_and(|minimum| value < minimum);
            let above = maximum.is_some_and(|maximum| value > maximum);
            if !(below || above) {
                continue;
            }
            return Err(match (minimum, maximum) {
                (Some(minimum), Some(maximum)) => {
                    format!("{name} must be between {minimum} and {maximum}")
                }
                (Some(minimum), None) => format!("{name} must be at least {minimum}"),
                (None, maximum) => format!("{name} must be at most {}", maximum.unwrap_or(value)),
            });
        }
        Ok(())
    }

    /// The model for turns of `level` (`plan`, `spec`, `phase`, `review`, `code`).
    pub fn model_for(&self, level: &str) -> Result<String, String> {
        let chosen = self
            .models
            .get(level)
            .or(Some(self.model.as_str()))
            .map(str::trim)
            .filter(|model| !model.is_empty())
            .or(self.provider.default_model());
        chosen.map(str::to_owned).ok_or_else(|| {
            let problem = format!(
                "provider {} needs a model: set model to one that `ollama list` shows",
                self.provider.as_str()
            );
            NextStep::SetOption {
                key: "model".to_owned(),
                example: Some("qwen3:8b".to_owned()),
            }
            .attach(&problem)
        })
    }

    pub fn provider_settings(&self) -> ProviderSettings {
        ProviderSettings {
            provider: self.provider,
            base_url: self.base_url.clone(),
            api_key_env: self.api_key_env.clone(),
            num_ctx: self.num_ctx,
            tool_choice: self.tool_choice,
            stream: self.stream,
            max_parallel_requests: self.max_parallel_requests,
        }
    }

    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_retries: self.max_retries,
            request_timeout: self.request_timeout(),
            stream_idle_timeout: self.stream_idle_timeout(),
        }
    }

    /// The prices in effect for these settings: the user's over the defaults.
    pub fn price_table(&self) -> PriceTable {
        PriceTable::new(self.prices.clone())
    }

    /// `export_dir` as a path below the project root, when set (checked by `check`).
    pub fn export_dir(&self) -> Option<std::path::PathBuf> {
        let dir = self.export_dir.as_deref()?;
        export_dir_relative(dir).ok()
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
    fn verify_false_turns_verification_off_and_a_table_keeps_the_defaults_it_omits() {
        let off: LoopSettings =
            serde_json::from_value(serde_json::json!({"verify": false})).unwrap();
        assert_eq!(
            off.verify,
            VerifySettings {
                enabled: false,
                ..VerifySettings::default()
            }
        );
        let table: LoopSettings =
            serde_json::from_value(serde_json::json!({"verify": {"block_on": "major"}})).unwrap();
        assert_eq!(table.verify.block_on, Severity::Major);
        assert!(table.verify.enabled);
        assert_eq!(table.verify.max_rounds, 2);
        assert!(
            serde_json::from_value::<LoopSettings>(serde_json::json!({"verify": {"rounds": 3}}))
                .is_err()
        );
    }

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
    fn share_mcp_env_names_only_configured_mcp_servers() {
        let settings: LoopSettings = serde_json::from_value(serde_json::json!({
            "mcp": { "servers": { "gh": { "command": "gh-mcp", "env": { "GH_TOKEN": "t" } } } },
            "agents": { "claude": { "command": "claude-agent-acp", "share_mcp_env": ["gh", "gitlab"] } }
        }))
        .unwrap();
        assert_eq!(
            settings.check().expect_err("gitlab is no MCP server"),
            "agents.claude.share_mcp_env names \"gitlab\", which mcp.servers does not \
             configure (it configures gh); name a server of mcp.servers"
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
    fn models_per_level_fall_back_to_model_then_to_the_providers_default() {
        let settings = LoopSettings {
            models: LevelModels {
                review: Some("claude-haiku-4-5".to_owned()),
                ..LevelModels::default()
            },
            ..LoopSettings::default()
        };
        assert_eq!(
            settings.model_for("review").as_deref(),
            Ok("claude-haiku-4-5")
        );
        assert_eq!(
            settings.model_for("plan").as_deref(),
            Ok("claude-sonnet-4-5")
        );
        let ollama = LoopSettings {
            provider: ProviderName::Ollama,
            ..LoopSettings::default()
        };
        let err = ollama.check().expect_err("ollama has no default model");
        assert!(err.contains("provider ollama needs a model"), "{err}");
        let chosen = LoopSettings {
            model: "qwen3:8b".to_owned(),
            ..ollama
        };
        assert_eq!(chosen.check(), Ok(()));
    }

    #[test]
    fn api_key_env_names_a_key_variable() {
        let settings = LoopSettings {
            api_key_env: Some("PATH".to_owned()),
            ..LoopSettings::default()
        };
        assert!(
            settings
                .check()
                .expect_err("PATH")
                .contains("api_key_env is \"PATH\"")
        );
    }

    #[test]
    fn the_context_budget_and_max_tokens_are_checked_when_set() {
        let small = LoopSettings {
            context_budget: Some(100),
            ..LoopSettings::default()
        };
        let err = small.check().expect_err("too small");
        assert!(
            err.contains("context_budget is 100; set at least 1024"),
            "{err}"
        );
        let no_answer = LoopSettings {
            max_tokens: Some(0),
            ..LoopSettings::default()
        };
        assert!(
            no_answer
                .check()
                .expect_err("no answer")
                .contains("max_tokens must be at least 1")
        );
        let no_turns = LoopSettings {
            context_keep_turns: 0,
            ..LoopSettings::default()
        };
        assert!(
            no_turns
                .check()
                .expect_err("none kept")
                .contains("context_keep_turns must be at least 1")
        );
        assert_eq!(LoopSettings::default().check(), Ok(()));
    }

    /// Earlier versions stored every setting with its value, the defaults too: those loops
    /// keep the limits they started with. Loops stored now keep "unset", fitted again to the
    /// server when they resume.
    #[test]
    fn stored_limits_of_earlier_versions_stay_values_and_unset_ones_stay_unset() {
        let earlier = LoopSettings::from_stored(
            r#"{"provider": "openai", "max_tokens": 8192, "context_budget": 100000, "max_turns": 25}"#,
        );
        assert_eq!(earlier.max_tokens, Some(8192));
        assert_eq!(earlier.context_budget, Some(100_000));
        let now = LoopSettings {
            provider: ProviderName::Openai,
            ..LoopSettings::default()
        };
        let stored = now.to_json();
        assert!(stored.contains("\"max_tokens\":null"), "{stored}");
        let read = LoopSettings::from_stored(&stored);
        assert_eq!(read, now);
        assert_eq!((read.max_tokens, read.context_budget), (None, None));
    }

    #[test]
    fn numbers_are_held_to_the_limits_of_the_schema() {
        let cases = [
            (
                LoopSettings {
                    num_ctx: Some(0),
                    ..LoopSettings::default()
                },
                "num_ctx must be at least 1",
            ),
            (
                LoopSettings {
                    plan_review_passes: 6,
                    ..LoopSettings::default()
                },
                "plan_review_passes must be between 0 and 5",
            ),
            (
                LoopSettings {
                    command_timeout_secs: 0,
                    ..LoopSettings::default()
                },
                "command_timeout_secs must be at least 1",
            ),
        ];
        for (settings, expected) in cases {
            assert_eq!(settings.check(), Err(expected.to_owned()));
        }
        let schema = settings_schema();
        assert_eq!(schema["properties"]["max_turns"]["minimum"], 1);
        assert_eq!(schema["properties"]["plan_review_passes"]["maximum"], 5);
    }

    #[test]
    fn review_gates_name_known_levels() {
        let settings = LoopSettings {
            review_gates: vec!["plans".to_owned()],
            ..LoopSettings::default()
        };
        let refused = settings.check().expect_err("invalid");
        assert!(refused.contains("\"plans\""), "{refused}");
        assert!(
            refused.contains("\"code\""),
            "the code gate is offered: {refused}"
        );
        let code_gate = LoopSettings {
            review_gates: vec!["code".to_owned()],
            ..LoopSettings::default()
        };
        assert_eq!(code_gate.check(), Ok(()));
        assert!(code_gate.gates("code"));
    }

    #[test]
    fn export_dir_stays_below_the_root_and_outside_git() {
        for (dir, fix) in [
            ("/tmp/plans", "relative to the project root"),
            ("docs/../../x", "without \"..\""),
            (".git/plans", "outside .git"),
            ("./", "below the project root"),
        ] {
            let settings = LoopSettings {
                export_dir: Some(dir.to_owned()),
                ..LoopSettings::default()
            };
            let refused = settings.check().expect_err(dir);
            assert!(refused.contains(fix), "{dir}: {refused}");
            assert_eq!(settings.export_dir(), None);
        }
        let settings = LoopSettings {
            export_dir: Some("./docs/plans".to_owned()),
            ..LoopSettings::default()
        };
        assert_eq!(settings.check(), Ok(()));
        assert_eq!(
            settings.export_dir(),
            Some(std::path::PathBuf::from("docs/plans"))
        );
    }

    #[test]
    fn commit_mode_reads_off_and_phase() {
        let settings: LoopSettings =
            serde_json::from_value(serde_json::json!({ "commit": "phase" })).expect("phase");
        assert_eq!(settings.commit, CommitMode::Phase);
        assert_eq!(LoopSettings::default().commit, CommitMode::Off);
        let mut both: LoopSettings = serde_json::from_value(
            serde_json::json!({ "commit": "phase", "sandbox": { "allow_git": true } }),
        )
        .expect("parses");
        let refused = both.check().expect_err("commit per phase with allow_git");
        assert!(
            refused.starts_with("commit is \"phase\" and sandbox.allow_git is true; turn one off"),
            "{refused}"
        );
        both.sandbox.allow_git = false;
        assert_eq!(both.check(), Ok(()));
        assert!(
            serde_json::from_value::<LoopSettings>(serde_json::json!({ "commit": "yes" })).is_err()
        );
    }
}
