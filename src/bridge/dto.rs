//! The shapes that cross the RPC boundary, and their conversion to and from msgpack values.
//! Core types are not serialised directly, so the wire format changes only here.

use std::path::PathBuf;

use nvim_rs::Value;
use serde::{Deserialize, Serialize};

use crate::agent::{ChangedHunk, LoopEvent, LoopSettings, PhaseSelector, PhaseTasks, UndoReport};
use crate::store::{LoopRecord, LoopStatus};
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
    /// A phase name or a phase loop id.
    pub phase: String,
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

impl CredentialsParams {
    pub fn from_args(args: Vec<Value>) -> Result<CredentialsParams, String> {
        params("credentials", args).map_err(|_| {
            "Loopr: bad parameters for credentials: expected { env = { NAME = string, ... } }"
                .to_owned()
        })
    }
}

/// The MCP servers of the user's `setup()`. Parse errors never quote the input: an `env`
/// value is a token.
pub struct McpParams(pub crate::mcp::McpSettings);

impl McpParams {
    pub fn from_args(args: Vec<Value>) -> Result<McpParams, String> {
        let settings: crate::mcp::McpSettings = params("mcp", args).map_err(|_| {
            "Loopr: bad parameters for mcp: expected { servers = { <name> = { command = ..., \
             env = { NAME = string, ... }, ... } } }"
                .to_owned()
        })?;
        settings
            .check()
            .map_err(|err| format!("Loopr: mcp: {err}"))?;
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

/// What opening a project for `resume` found.
#[derive(Debug, Serialize)]
pub struct ResumeReply {
    /// Loops not finished (pending, running, awaiting approval, paused).
    pub active: usize,
    /// Loops that run or will.
    pub resuming: usize,
    /// Loops paused or held at their plan tree's budget.
    pub waiting_for_budget: usize,
}

impl From<crate::agent::ResumeCounts> for ResumeReply {
    fn from(counts: crate::agent::ResumeCounts) -> ResumeReply {
        ResumeReply {
            active: counts.active,
            resuming: counts.resuming,
            waiting_for_budget: counts.waiting_for_budget,
        }
    }
}

/// `:checkhealth loopr` starts the configured MCP servers of a project and lists their tools.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpProbeParams {
    pub root: std::path::PathBuf,
    #[serde(default)]
    pub settings: LoopSettings,
}

/// One server probed: its tools, or why it could not start.
#[derive(Debug, Serialize)]
pub struct McpProbeReply {
    pub name: String,
    pub tools: Option<Vec<String>>,
    pub error: Option<String>,
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

#[derive(Debug, Serialize)]
pub struct RulesReply {
    /// `AGENTS.md (1204 bytes)`, in the order they go into the system prompt.
    pub used: Vec<String>,
    pub refused: Vec<RefusedRulesReply>,
}

#[derive(Debug, Serialize)]
pub struct RefusedRulesReply {
    pub path: String,
    pub reason: String,
}

/// The provider as resolved, never a key: whether one is set, and from which variable.
#[derive(Debug, Serialize)]
pub struct ProviderReply {
    #[serde(flatten)]
    pub info: crate::llm::ProviderInfo,
    /// The model per level (`plan`, `spec`, `phase`, `review`, `code`), when it resolves.
    pub models: std::collections::BTreeMap<&'static str, String>,
    /// Why a loop could not start with these settings, and the fix.
    pub problem: Option<String>,
    /// `native`, or the text protocol the model calls tools with.
    pub tool_protocol: crate::llm::ToolProtocol,
    /// How calls are written, for the `xml` and `markdown` protocols.
    pub tool_format: crate::llm::ToolFormat,
    /// What the server says about its context window and the limits loops get, when a loop
    /// could start.
    pub limits: Option<LimitsReply>,
}

/// `:checkhealth loopr`: the server's window and the limits fitted to it.
#[derive(Debug, Serialize)]
pub struct LimitsReply {
    pub max_tokens: u32,
    pub context_budget: u64,
    /// Whether the settings set them (else fitted to `window`, or the defaults).
    pub max_tokens_set: bool,
    pub context_budget_set: bool,
    pub window: Option<crate::agent::Window>,
    /// `not_asked` (a hosted API), `reported` or `unavailable`.
    pub server: &'static str,
    pub report: Option<crate::llm::ServerReport>,
    /// Why the server could not be asked.
    pub server_error: Option<String>,
}

impl LimitsReply {
    pub fn new(settings: &LoopSettings, server: &crate::llm::ServerWindow) -> LimitsReply {
        use crate::llm::ServerWindow;
        let limits = crate::agent::fit_limits(settings, server);
        let (state, report, server_error) = match server {
            ServerWindow::NotAsked => ("not_asked", None, None),
            ServerWindow::Reported(report) => ("reported", Some(report.clone()), None),
            ServerWindow::Unavailable(why) => ("unavailable", None, Some(why.clone())),
        };
        LimitsReply {
            max_tokens: limits.max_tokens,
            context_budget: limits.context_budget.tokens,
            max_tokens_set: settings.max_tokens.is_some(),
            context_budget_set: settings.context_budget.is_some(),
            window: limits.window,
            server: state,
            report,
            server_error,
        }
    }
}

/// `:LooprChanges` data: one LSP `Location` per changed hunk.
#[derive(Debug, Serialize)]
pub struct ChangesReply {
    pub loop_id: String,
    pub items: Vec<ChangeItemReply>,
}

#[derive(Debug, Serialize)]
pub struct ChangeItemReply {
    pub location: lsp_types::Location,
    pub text: String,
    pub status: &'static str,
}

impl ChangesReply {
    pub fn new(loop_id: String, hunks: Vec<ChangedHunk>) -> Result<ChangesReply, String> {
        let items = hunks
            .into_iter()
            .map(|hunk| {
                Ok(ChangeItemReply {
                    location: location(&hunk.path, hunk.line)?,
                    text: format!("{}: {}", hunk.status.as_str(), hunk.summary),
                    status: hunk.status.as_str(),
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(ChangesReply { loop_id, items })
    }
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

#[derive(Debug, Serialize)]
pub struct UndoReply {
    pub loop_id: String,
    pub restored: Vec<String>,
    pub skipped: Vec<SkippedFileReply>,
}

#[derive(Debug, Serialize)]
pub struct SkippedFileReply {
    pub path: String,
    /// "changed_since", "changed_during_command", "unsaved_buffer" or "unrestorable".
    pub reason: &'static str,
    pub message: String,
}

impl UndoReply {
    pub fn new(loop_id: String, report: UndoReport) -> UndoReply {
        let text = |path: &std::path::Path| path.to_string_lossy().into_owned();
        UndoReply {
            loop_id,
            restored: report.restored.iter().map(|path| text(path)).collect(),
            skipped: report
                .skipped
                .iter()
                .map(|(path, reason)| SkippedFileReply {
                    path: text(path),
                    reason: reason.as_str(),
                    message: reason.describe(),
                })
                .collect(),
        }
    }
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
    /// Only loops `:LooprCancel` stops: pending, running, awaiting approval, paused or
    /// interrupted.
    #[serde(default)]
    pub running_only: bool,
    /// Only loops `:LooprApprove` takes: awaiting approval, or paused or held at a budget.
    #[serde(default)]
    pub awaiting_only: bool,
}

impl LoopIdsParams {
    pub fn matches(&self, record: &LoopRecord) -> bool {
        if self.awaiting_only {
            matches!(
                record.status,
                LoopStatus::AwaitingApproval | LoopStatus::Paused
            ) || crate::store::held_at_budget(record)
        } else if self.running_only {
            record.status.is_active() || record.status == LoopStatus::Interrupted
        } else {
            true
        }
    }
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
            (None, None) => PhaseSelector::All,
        }
    }
}

/// `:LooprTasks` data: per phase, one LSP `Location` per task, which Lua turns into
/// quickfix entries.
#[derive(Debug, Serialize)]
pub struct TasksReply {
    pub phases: Vec<PhaseTasksReply>,
}

#[derive(Debug, Serialize)]
pub struct PhaseTasksReply {
    pub loop_id: String,
    pub name: String,
    pub title: String,
    pub markdown_path: String,
    pub items: Vec<TaskItemReply>,
}

#[derive(Debug, Serialize)]
pub struct TaskItemReply {
    pub location: lsp_types::Location,
    pub text: String,
    pub user_data: TaskUserData,
}

#[derive(Debug, Serialize)]
pub struct TaskUserData {
    pub loop_id: String,
    pub phase: String,
    pub task_index: usize,
    pub action: Option<&'static str>,
}

impl TasksReply {
    pub fn new(phases: Vec<PhaseTasks>) -> Result<TasksReply, String> {
        let phases = phases
            .into_iter()
            .map(|phase| {
                let items = phase
                    .tasks
                    .iter()
                    .map(|task| {
                        Ok(TaskItemReply {
                            location: location(&task.path, task.line)?,
                            text: task.text.clone(),
                            user_data: TaskUserData {
                                loop_id: phase.loop_id.clone(),
                                phase: phase.name.clone(),
                                task_index: task.task_index,
                                action: task.action.map(|action| action.as_str()),
                            },
                        })
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                Ok(PhaseTasksReply {
                    loop_id: phase.loop_id,
                    name: phase.name,
                    title: phase.title,
                    markdown_path: phase.markdown_path.to_string_lossy().into_owned(),
                    items,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(TasksReply { phases })
    }
}

fn location(path: &std::path::Path, line: u32) -> Result<lsp_types::Location, String> {
    let url = url::Url::from_file_path(path)
        .map_err(|()| format!("Loopr: {} is not an absolute path", path.display()))?;
    let uri: lsp_types::Uri = url
        .as_str()
        .parse()
        .map_err(|err| format!("Loopr: {url} is not a valid URI: {err}"))?;
    let position = lsp_types::Position { line, character: 0 };
    Ok(lsp_types::Location {
        uri,
        range: lsp_types::Range {
            start: position,
            end: position,
        },
    })
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

#[derive(Debug, Serialize)]
pub struct TranscriptReply {
    pub loop_id: String,
    pub loop_type: &'static str,
    pub status: &'static str,
}

#[derive(Debug, Serialize)]
pub struct LoopIdReply {
    pub loop_id: String,
}

#[derive(Debug, Serialize)]
pub struct LoopRecordReply {
    pub id: String,
    #[serde(rename = "type")]
    pub loop_type: &'static str,
    pub parent: Option<String>,
    pub status: &'static str,
    pub iteration: u32,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub error: Option<String>,
    pub task: String,
    pub name: Option<String>,
    pub triggered_by: Option<String>,
    pub depends_on: Vec<String>,
    pub review_passes: u32,
    pub artifact_path: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// What the loop spent.
    pub spend: SpendReply,
    /// What the plan tree spent, on the tree's root only.
    pub tree: Option<SpendReply>,
}

/// Tokens of every kind, and their estimated cost.
#[derive(Debug, Default, Serialize)]
pub struct SpendReply {
    pub input: u64,
    pub output: u64,
    pub cache_write: u64,
    pub cache_read: u64,
    /// Whether the counts are (in part) Loopr's estimate: the server reported no usage.
    pub estimated: bool,
    /// USD for the priced models; nil when tokens were spent and none of them is priced.
    pub cost_usd: Option<f64>,
    /// Models whose tokens the cost leaves out for want of a price (an empty name: tokens
    /// an earlier version counted without their model).
    pub cost_unknown: Vec<String>,
}

impl From<&crate::agent::Spend> for SpendReply {
    fn from(spend: &crate::agent::Spend) -> SpendReply {
        let usage = &spend.usage;
        SpendReply {
            input: usage.input_tokens,
            output: usage.output_tokens,
            cache_write: usage.cache_write_tokens,
            cache_read: usage.cache_read_tokens,
            estimated: usage.estimated,
            cost_usd: spend.cost.known_usd(),
            cost_unknown: spend.cost.unpriced.clone(),
        }
    }
}

impl LoopRecordReply {
    pub fn new(row: crate::agent::StatusRow) -> LoopRecordReply {
        LoopRecordReply {
            artifact_path: row.artifact.map(|path| path.to_string_lossy().into_owned()),
            spend: SpendReply::from(&row.spend),
            tree: row.tree.as_ref().map(SpendReply::from),
            ..LoopRecordReply::from(row.record)
        }
    }
}

impl From<LoopRecord> for LoopRecordReply {
    fn from(record: LoopRecord) -> LoopRecordReply {
        LoopRecordReply {
            artifact_path: None,
            id: record.id.to_string(),
            loop_type: record.loop_type.as_str(),
            parent: record.parent.map(|parent| parent.to_string()),
            status: record.status.as_str(),
            iteration: record.iteration,
            tokens_in: record.tokens_in,
            tokens_out: record.tokens_out,
            error: record.error.as_deref().map(super::words::hinted),
            task: record.task,
            name: record.name,
            triggered_by: record.triggered_by,
            depends_on: record.depends_on,
            review_passes: record.review_passes,
            created_at: record.created_at,
            updated_at: record.updated_at,
            spend: SpendReply::default(),
            tree: None,
        }
    }
}

/// Events as `require('loopr.events').dispatch` receives them.
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventMessage {
    LoopUpdated {
        id: String,
        #[serde(rename = "type")]
        loop_type: &'static str,
        status: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    Progress {
        loop_id: String,
        message: String,
        /// The tokens of the answer under way so far (estimated), while the model answers.
        #[serde(skip_serializing_if = "Option::is_none")]
        tokens: Option<u64>,
    },
    ArtifactCreated {
        loop_id: String,
        kind: &'static str,
        path: String,
        json_path: String,
        iteration: u32,
    },
    ApprovalRequested {
        id: u64,
        loop_id: String,
        kind: &'static str,
        tool: &'static str,
        subject: String,
        detail: String,
    },
    ApprovalClosed {
        id: u64,
    },
    Validation {
        loop_id: String,
        phase: String,
        iteration: u32,
        passed: bool,
        command: String,
        output: String,
    },
    Notice {
        loop_id: String,
        level: &'static str,
        message: String,
    },
}

impl From<LoopEvent> for EventMessage {
    fn from(event: LoopEvent) -> EventMessage {
        match event {
            LoopEvent::LoopUpdated {
                id,
                loop_type,
                status,
                error,
            } => EventMessage::LoopUpdated {
                id: id.to_string(),
                loop_type: loop_type.as_str(),
                status: status.as_str(),
                error: error.as_deref().map(super::words::hinted),
            },
            LoopEvent::Progress {
                loop_id,
                message,
                tokens,
            } => EventMessage::Progress {
                loop_id: loop_id.to_string(),
                message,
                tokens,
            },
            LoopEvent::ArtifactCreated {
                loop_id,
                kind,
                markdown_path,
                json_path,
                iteration,
            } => EventMessage::ArtifactCreated {
                loop_id: loop_id.to_string(),
                kind: kind.as_str(),
                path: markdown_path.to_string_lossy().into_owned(),
                json_path: json_path.to_string_lossy().into_owned(),
                iteration,
            },
            LoopEvent::ApprovalRequested { id, request } => EventMessage::ApprovalRequested {
                id,
                loop_id: request.loop_id,
                kind: request.kind.as_str(),
                tool: request.tool,
                subject: request.subject,
                detail: request.detail,
            },
            LoopEvent::ApprovalClosed { id } => EventMessage::ApprovalClosed { id },
            LoopEvent::ValidationFinished {
                loop_id,
                phase,
                iteration,
                passed,
                command,
                output,
            } => EventMessage::Validation {
                loop_id: loop_id.to_string(),
                phase,
                iteration,
                passed,
                command,
                output,
            },
            LoopEvent::Notice {
                loop_id,
                level,
                message,
            } => EventMessage::Notice {
                loop_id,
                level: level.as_str(),
                message: super::words::hinted(&message),
            },
        }
    }
}

/// The request's single parameter table. Lua sends an empty table as an empty array, so a
/// missing or empty argument reads as an empty map.
pub fn params<T: for<'de> Deserialize<'de>>(method: &str, args: Vec<Value>) -> Result<T, String> {
    let value = match args.into_iter().next() {
        None => Value::Map(Vec::new()),
        Some(Value::Array(items)) if items.is_empty() => Value::Map(Vec::new()),
        Some(value) => value,
    };
    // Through JSON: rmpv's own deserializer cannot read unit enum variants from strings.
    serde_json::from_value(msgpack_to_json(value))
        .map_err(|err| format!("Loopr: bad parameters for {method}: {err}"))
}

fn msgpack_to_json(value: Value) -> serde_json::Value {
    match value {
        Value::Nil => serde_json::Value::Null,
        Value::Boolean(flag) => serde_json::Value::Bool(flag),
        Value::Integer(integer) => integer
            .as_i64()
            .map(serde_json::Value::from)
            .or_else(|| integer.as_u64().map(serde_json::Value::from))
            .unwrap_or(serde_json::Value::Null),
        Value::F32(number) => serde_json::Value::from(f64::from(number)),
        Value::F64(number) => serde_json::Value::from(number),
        Value::String(text) => serde_json::Value::String(text.into_str().unwrap_or_default()),
        Value::Binary(bytes) => {
            serde_json::Value::String(String::from_utf8_lossy(&bytes).into_owned())
        }
        Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(msgpack_to_json).collect())
        }
        Value::Map(pairs) => serde_json::Value::Object(
            pairs
                .into_iter()
                .map(|(key, value)| {
                    let key = match key {
                        Value::String(text) => text.into_str().unwrap_or_default(),
                        other => other.to_string(),
                    };
                    (key, msgpack_to_json(value))
                })
                .collect(),
        ),
        Value::Ext(_, bytes) => {
            serde_json::Value::String(String::from_utf8_lossy(&bytes).into_owned())
        }
    }
}

/// Encodes a reply as msgpack with structs as maps. (rmpv's own serializer writes structs as
/// arrays, which Lua would see as lists.)
pub fn to_value<T: Serialize>(reply: &T) -> Result<Value, String> {
    let json =
        serde_json::to_value(reply).map_err(|err| format!("Loopr: encoding the reply: {err}"))?;
    Ok(json_to_msgpack(json))
}

fn json_to_msgpack(json: serde_json::Value) -> Value {
    match json {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(flag) => Value::from(flag),
        serde_json::Value::Number(number) => {
            if let Some(integer) = number.as_i64() {
                Value::from(integer)
            } else if let Some(integer) = number.as_u64() {
                Value::from(integer)
            } else {
                Value::from(number.as_f64().unwrap_or_default())
            }
        }
        serde_json::Value::String(text) => Value::from(text),
        serde_json::Value::Array(items) => {
            Value::Array(items.into_iter().map(json_to_msgpack).collect())
        }
        serde_json::Value::Object(fields) => Value::Map(
            fields
                .into_iter()
                .map(|(key, value)| (Value::from(key), json_to_msgpack(value)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: Vec<(&str, Value)>) -> Value {
        Value::Map(
            pairs
                .into_iter()
                .map(|(k, v)| (Value::from(k), v))
                .collect(),
        )
    }

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
    fn replies_encode_structs_as_maps() {
        let value = to_value(&LoopIdReply {
            loop_id: "abc".to_owned(),
        })
        .expect("encode");
        assert_eq!(value, map(vec![("loop_id", Value::from("abc"))]));
        let event = to_value(&EventMessage::Progress {
            loop_id: "abc".to_owned(),
            message: "reading".to_owned(),
            tokens: None,
        })
        .expect("encode");
        assert_eq!(
            event,
            map(vec![
                ("event", Value::from("progress")),
                ("loop_id", Value::from("abc")),
                ("message", Value::from("reading")),
            ])
        );
    }

    #[test]
    fn task_places_become_file_uri_locations() {
        let reply = TasksReply::new(vec![PhaseTasks {
            loop_id: "l-1".to_owned(),
            name: "parse-flag".to_owned(),
            title: "Parse".to_owned(),
            markdown_path: PathBuf::from("/state/phase.md"),
            tasks: vec![crate::agent::TaskPlace {
                path: PathBuf::from("/work/my project/src/main.rs"),
                line: 0,
                text: "modify: do it".to_owned(),
                task_index: 1,
                action: Some(crate::artifacts::TaskAction::Modify),
            }],
        }])
        .expect("reply");
        let json = serde_json::to_value(&reply).expect("json");
        let item = &json["phases"][0]["items"][0];
        assert_eq!(
            item["location"]["uri"],
            "file:///work/my%20project/src/main.rs"
        );
        assert_eq!(
            item["location"]["range"]["start"],
            serde_json::json!({"line": 0, "character": 0})
        );
        assert_eq!(
            item["user_data"],
            serde_json::json!({"loop_id": "l-1", "phase": "parse-flag", "task_index": 1, "action": "modify"})
        );
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
    fn an_empty_lua_table_reads_as_an_empty_map() {
        #[derive(Deserialize)]
        struct Nothing {}
        assert!(params::<Nothing>("version", vec![Value::Array(vec![])]).is_ok());
        assert!(params::<Nothing>("version", vec![]).is_ok());
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
            let Err(err) = CredentialsParams::from_args(args) else {
                panic!("a wrong shape is rejected");
            };
            assert!(!err.contains(key), "{err}");
            assert!(err.contains("env = { NAME = string, ... }"), "{err}");
        }
        let parsed = CredentialsParams::from_args(vec![map(vec![(
            "env",
            map(vec![("OPENAI_API_KEY", Value::from(key))]),
        )])])
        .expect("params");
        assert_eq!(
            parsed.env.get("OPENAI_API_KEY").map(String::as_str),
            Some(key)
        );
        let unset = CredentialsParams::from_args(vec![Value::Array(Vec::new())]).expect("empty");
        assert!(unset.env.is_empty());
    }
}
