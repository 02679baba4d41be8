//! The parameters of each request and notification Lua sends, as the host reads them.

use std::path::PathBuf;

use nvim_rs::Value;
use serde::Deserialize;

use super::msgpack::params;

/// How a request's single parameter table is read. Most types read through serde; those
/// whose errors must not quote the input read on their own.
pub trait WireParams: Sized {
    fn from_args(method: &str, args: Vec<Value>) -> Result<Self, String>;
}

/// Parameters read through serde, with their errors naming the field at fault.
macro_rules! read_through_serde {
    ($($params:ty),* $(,)?) => {
        $(impl WireParams for $params {
            fn from_args(method: &str, args: Vec<Value>) -> Result<Self, String> {
                params(method, args)
            }
        })*
    };
}

read_through_serde!(
    PlanParams,
    RootParams,
    StatusParams,
    CancelParams,
    RunParams,
    VerifyParams,
    PhaseParams,
    McpProbeParams,
    AgentProbeParams,
    ProviderParams,
    RulesParams,
    UndoParams,
    ApprovalParams,
    ReviseParams,
    LoopIdsParams,
    TasksParams,
    RequirementsParams,
    TranscriptParams,
    TranscriptCloseParams,
    BudgetParams,
);

/// A request that takes no parameters; whatever comes is ignored, as it always was.
#[derive(Debug)]
pub struct NoParams;

impl WireParams for NoParams {
    fn from_args(_method: &str, _args: Vec<Value>) -> Result<Self, String> {
        Ok(NoParams)
    }
}

/// A notification's arguments as they came, for the one that reads them itself (`request`).
pub struct RawArgs(pub Vec<Value>);

impl WireParams for RawArgs {
    fn from_args(_method: &str, args: Vec<Value>) -> Result<Self, String> {
        Ok(RawArgs(args))
    }
}
use crate::agent::{LoopSettings, PhaseSelector};
use crate::store::Purpose;
use crate::tools::Decision;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanParams {
    pub task: String,
    pub root: PathBuf,
    #[serde(default)]
    pub settings: LoopSettings,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RootParams {
    pub root: PathBuf,
}

/// `:LooprStatus` asks with the prices of the current `setup()`, which the costs use.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusParams {
    pub root: PathBuf,
    #[serde(default)]
    pub prices: std::collections::BTreeMap<String, crate::pricing::Price>,
}

impl StatusParams {
    pub fn price_table(&self) -> Result<crate::pricing::PriceTable, String> {
        crate::pricing::PriceTable::check(&self.prices)
            .map_err(|err| format!("Loopr: setup(): {err}"))?;
        Ok(crate::pricing::PriceTable::new(self.prices.clone()))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelParams {
    pub root: PathBuf,
    #[serde(default)]
    pub id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunParams {
    pub root: PathBuf,
    /// A phase, spec or plan name, or its loop id (a spec or plan runs all its phases).
    pub phase: String,
    #[serde(default)]
    pub settings: LoopSettings,
    /// The run's `agent=<name>`: that agent of `agents` writes its code in place of
    /// `code_agent`; empty, Loopr's own code loop does.
    #[serde(default)]
    pub agent: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyParams {
    pub root: PathBuf,
    /// A phase or spec name or loop id; empty or absent: the only one the project has.
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub settings: LoopSettings,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseParams {
    pub root: PathBuf,
    /// A phase name or a phase loop id.
    pub phase: String,
}

/// The provider variables (keys, base URLs) as Neovim's environment has them now, all of
/// them: a variable left out is unset. Not `Debug`, and parse errors never quote the input:
/// a key must not reach a log or an error message.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialsParams {
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
}

impl WireParams for CredentialsParams {
    fn from_args(method: &str, args: Vec<Value>) -> Result<CredentialsParams, String> {
        params(method, args).map_err(|_| {
            format!(
                "Loopr: bad parameters for {method}: expected {{ env = {{ NAME = string, ... }} }}"
            )
        })
    }
}

/// The MCP servers of the user's `setup()`. Parse errors never quote the input: an `env`
/// value is a token.
pub struct McpParams(pub crate::mcp::McpSettings);

impl WireParams for McpParams {
    fn from_args(method: &str, args: Vec<Value>) -> Result<McpParams, String> {
        let settings: crate::mcp::McpSettings = params(method, args).map_err(|_| {
            format!(
                "Loopr: bad parameters for {method}: expected {{ servers = {{ <name> = {{ \
                 command = ..., env = {{ NAME = string, ... }}, ... }} }} }}"
            )
        })?;
        settings
            .check()
            .map_err(|err| format!("Loopr: {method}: {err}"))?;
        Ok(McpParams(settings))
    }
}

/// The budget and prices of the user's `setup()`, which every plan tree is held to.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetParams {
    #[serde(default)]
    pub budget: crate::budget::Budget,
    #[serde(default)]
    pub prices: std::collections::BTreeMap<String, crate::pricing::Price>,
}

/// `:checkhealth loopr` starts the configured MCP servers of a project and lists their tools.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpProbeParams {
    pub root: std::path::PathBuf,
    #[serde(default)]
    pub settings: LoopSettings,
}

/// `:checkhealth loopr` starts the configured coding agents of a project and initializes
/// them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentProbeParams {
    pub root: std::path::PathBuf,
    #[serde(default)]
    pub settings: LoopSettings,
}

/// `:checkhealth loopr` asks which provider the settings lead to.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderParams {
    #[serde(default)]
    pub settings: LoopSettings,
}

/// `:checkhealth loopr`: the project's rules files under these settings.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulesParams {
    pub root: PathBuf,
    #[serde(default)]
    pub settings: LoopSettings,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UndoParams {
    pub root: PathBuf,
    pub phase: String,
    /// Also restore files changed since the loop changed them.
    #[serde(default)]
    pub force: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalParams {
    pub id: u64,
    /// "accept", "accept_all" or "reject".
    pub decision: String,
    #[serde(default)]
    pub reason: Option<String>,
}

impl ApprovalParams {
    pub fn decision(&self) -> Result<Decision, String> {
        match self.decision.as_str() {
            "accept" => Ok(Decision::Accept),
            "accept_all" => Ok(Decision::AcceptAllOfKind),
            "reject" => Ok(Decision::Reject(
                self.reason
                    .clone()
                    .filter(|reason| !reason.trim().is_empty())
                    .unwrap_or_else(|| "the user rejected it without giving a reason".to_owned()),
            )),
            other => Err(format!(
                "Loopr: decision {other:?} is not one of \"accept\", \"accept_all\", \"reject\""
            )),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviseParams {
    pub root: PathBuf,
    pub id: String,
    pub feedback: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoopIdsParams {
    pub root: PathBuf,
    /// Only the loops this action takes (`"approve"`, `"cancel"`, `"retry"`, `"run"`), as the
    /// host's rules say; every loop without one.
    #[serde(default)]
    pub purpose: Option<Purpose>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TasksParams {
    pub root: PathBuf,
    #[serde(default)]
    pub phase: Option<String>,
    #[serde(default)]
    pub loop_id: Option<String>,
}

impl TasksParams {
    pub fn selector(&self) -> PhaseSelector {
        match (&self.loop_id, &self.phase) {
            (Some(id), _) => PhaseSelector::Loop(id.clone()),
            (None, Some(name)) => PhaseSelector::Named(name.clone()),
            (None, None) => PhaseSelector::CurrentPlan,
        }
    }
}

/// `:LooprRequirements`: which spec (by name, else the spec of the loop `loop_id`, else the
/// newest).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequirementsParams {
    pub root: PathBuf,
    #[serde(default)]
    pub spec: Option<String>,
    #[serde(default)]
    pub loop_id: Option<String>,
}

/// `:LooprTranscript`: which loop (by id, else the artifact at `path`, else the newest
/// running one) and the token its text is sent with.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranscriptParams {
    pub root: PathBuf,
    #[serde(default)]
    pub id: Option<String>,
    /// The current buffer's file, when it has one.
    #[serde(default)]
    pub path: Option<PathBuf>,
    pub token: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranscriptCloseParams {
    pub token: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridge::dto::lua_table as map;

    #[test]
    fn plan_params_take_partial_settings_and_reject_unknown_ones() {
        let args = vec![map(vec![
            ("task", Value::from("Add a flag")),
            ("root", Value::from("/tmp/project")),
            ("settings", map(vec![("max_turns", Value::from(3))])),
        ])];
        let parsed: PlanParams = params("plan", args).expect("params");
        assert_eq!(parsed.settings.max_turns, 3);
        assert_eq!(
            parsed.settings.max_tokens,
            LoopSettings::default().max_tokens
        );

        let args = vec![map(vec![
            ("task", Value::from("x")),
            ("root", Value::from("/tmp")),
            ("settings", map(vec![("max_turn", Value::from(3))])),
        ])];
        let err = params::<PlanParams>("plan", args).expect_err("unknown setting");
        assert!(err.contains("max_turn"), "{err}");
    }

    #[test]
    fn approval_modes_arrive_as_strings() {
        let args = vec![map(vec![
            ("task", Value::from("x")),
            ("root", Value::from("/tmp")),
            (
                "settings",
                map(vec![(
                    "approvals",
                    map(vec![("edit", Value::from("auto"))]),
                )]),
            ),
        ])];
        let parsed: PlanParams = params("plan", args).expect("params");
        assert_eq!(
            parsed.settings.approvals.edit,
            crate::agent::ApprovalMode::Auto
        );
        assert_eq!(
            parsed.settings.approvals.write,
            crate::agent::ApprovalMode::Ask
        );
    }

    #[test]
    fn credentials_errors_never_quote_the_key() {
        let key = "sk-ant-do-not-echo";
        let wrong_shapes = [
            vec![Value::from(key)],
            vec![map(vec![("env", Value::from(vec![Value::from(key)]))])],
            vec![map(vec![(
                "env",
                map(vec![(
                    "OPENAI_API_KEY",
                    Value::from(vec![Value::from(key)]),
                )]),
            )])],
            vec![map(vec![("api_key", Value::from(key))])],
            vec![map(vec![(key, Value::from(key))])],
        ];
        for args in wrong_shapes {
            let Err(err) = CredentialsParams::from_args("credentials", args) else {
                panic!("a wrong shape is rejected");
            };
            assert!(!err.contains(key), "{err}");
            assert!(err.contains("env = { NAME = string, ... }"), "{err}");
        }
        let parsed = CredentialsParams::from_args(
            "credentials",
            vec![map(vec![(
                "env",
                map(vec![("OPENAI_API_KEY", Value::from(key))]),
            )])],
        )
        .expect("params");
        assert_eq!(
            parsed.env.get("OPENAI_API_KEY").map(String::as_str),
            Some(key)
        );
        let unset = CredentialsParams::from_args("credentials", vec![Value::Array(Vec::new())])
            .expect("empty");
        assert!(unset.env.is_empty());
    }
}
