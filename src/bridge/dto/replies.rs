//! The replies to requests, shaped for Lua: what the manager answers, worded for the wire.

use schemars::JsonSchema;
use serde::Serialize;

use crate::agent::{
    ChangedHunk, LoopCoverage, LoopSettings, RequirementsLeft, RewindReport, TaskList, UndoReport,
};
use crate::bridge::words;
use crate::store::{
    LoopRecord, LoopStatus, Standing, awaited, code_turn_holder, default_retry, held_at_budget,
    retried_with, retryable,
};

/// What opening a project for `resume` found.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.ResumeReply")]
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

/// One server probed: its tools, or why it could not start.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.McpProbeReply")]
pub struct McpProbeReply {
    pub name: String,
    pub tools: Option<Vec<String>>,
    pub error: Option<String>,
}

/// One coding agent probed: what it said of itself in `initialize`, or why it failed.
#[derive(Debug, Default, Serialize, JsonSchema)]
#[schemars(rename = "loopr.AgentProbeReply")]
pub struct AgentProbeReply {
    /// Its name in `agents`.
    pub name: String,
    /// The name it gives itself.
    pub agent: Option<String>,
    pub version: Option<String>,
    pub protocol_version: Option<u16>,
    /// In words: `load session, prompts with image, MCP over stdio and http`.
    pub capabilities: Option<String>,
    pub error: Option<String>,
}

impl AgentProbeReply {
    pub fn new(
        name: String,
        probed: Result<crate::acp::AgentReport, crate::acp::AcpError>,
    ) -> Self {
        match probed {
            Ok(report) => AgentProbeReply {
                capabilities: Some(report.capabilities()),
                agent: Some(report.name),
                version: report.version,
                protocol_version: Some(report.protocol_version),
                name,
                error: None,
            },
            Err(error) => AgentProbeReply {
                name,
                error: Some(error.to_string()),
                ..AgentProbeReply::default()
            },
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.RulesReply")]
pub struct RulesReply {
    /// `AGENTS.md (1204 bytes)`, in the order they go into the system prompt.
    pub used: Vec<String>,
    pub refused: Vec<RefusedRulesReply>,
}

impl RulesReply {
    /// The rules files of the project at `root` under `settings`.
    pub fn new(root: &std::path::Path, settings: &LoopSettings) -> Result<RulesReply, String> {
        let (rules, refused) =
            crate::agent::project_rules(root, settings).map_err(|err| format!("Loopr: {err}"))?;
        Ok(RulesReply {
            used: rules.summary(),
            refused: refused
                .into_iter()
                .map(|refused| RefusedRulesReply {
                    path: refused.path,
                    reason: refused.reason,
                })
                .collect(),
        })
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.RefusedRules")]
pub struct RefusedRulesReply {
    pub path: String,
    pub reason: String,
}

/// The provider as resolved, never a key: whether one is set, and from which variable.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.ProviderReply")]
pub struct ProviderReply {
    /// The core's `ProviderInfo`: `provider`, `base_url`, `base_url_source`,
    /// `base_url_variable`, `key_variable`, `key_set`, `key_need`.
    #[serde(flatten)]
    #[schemars(with = "serde_json::Map<String, serde_json::Value>")]
    pub info: crate::llm::ProviderInfo,
    /// The model per level (`plan`, `spec`, `phase`, `review`, `code`), when it resolves.
    pub models: std::collections::BTreeMap<&'static str, String>,
    /// Why a loop could not start with these settings, and the fix.
    pub problem: Option<String>,
    /// `native`, or the text protocol the model calls tools with.
    #[schemars(with = "String")]
    pub tool_protocol: crate::llm::ToolProtocol,
    /// How calls are written, for the `xml` and `markdown` protocols.
    #[schemars(with = "String")]
    pub tool_format: crate::llm::ToolFormat,
    /// What the server says about its context window and the limits loops get, when a loop
    /// could start.
    pub limits: Option<LimitsReply>,
}

/// `:checkhealth loopr`: the server's window and the limits fitted to it.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.Limits")]
pub struct LimitsReply {
    pub max_tokens: u32,
    pub context_budget: u64,
    /// Whether the settings set them (else fitted to `window`, or the defaults).
    pub max_tokens_set: bool,
    pub context_budget_set: bool,
    /// `{ tokens, from }`.
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub window: Option<crate::agent::Window>,
    /// `not_asked` (a hosted API), `reported` or `unavailable`.
    pub server: &'static str,
    /// `{ context_window, model_max, model, answered_by }`.
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
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
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.ChangesReply")]
pub struct ChangesReply {
    pub loop_id: String,
    pub items: Vec<ChangeItemReply>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.ChangeItem")]
pub struct ChangeItemReply {
    #[schemars(with = "LspLocation")]
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

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.UndoReply")]
pub struct UndoReply {
    pub loop_id: String,
    pub restored: Vec<String>,
    pub skipped: Vec<SkippedFileReply>,
    /// What was undone was a rewind of the phase (and of the later phases it took back).
    pub rewind_undone: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.UndoSkipped")]
pub struct SkippedFileReply {
    pub path: String,
    /// "changed_since", "changed_during_command", "written_by_agent", "unsaved_buffer" or
    /// "unrestorable".
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
            rewind_undone: report.rewind_undone,
        }
    }
}

/// What a rewind did: the files as an undo tells them, and what became of the loops.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.RewindReply")]
pub struct RewindReply {
    pub loop_id: String,
    pub restored: Vec<String>,
    pub skipped: Vec<SkippedFileReply>,
    /// How many code loops the rewind took back: the phase's and every later one.
    pub rewound: usize,
    /// Whether an undo of the phase undoes the rewind (it was made from a git checkpoint).
    pub undoable: bool,
}

impl RewindReply {
    pub fn new(loop_id: String, report: RewindReport) -> RewindReply {
        let files = UndoReply::new(loop_id, report.files);
        RewindReply {
            loop_id: files.loop_id,
            restored: files.restored,
            skipped: files.skipped,
            rewound: report.rewound.len(),
            undoable: report.undoable,
        }
    }
}

/// `:LooprTasks` data: per phase, one LSP `Location` per task, which Lua turns into
/// quickfix entries.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.TasksReply")]
pub struct TasksReply {
    pub phases: Vec<PhaseTasksReply>,
    /// The plan the phases were picked from (its `label`), when the project has other plans
    /// with phases too.
    pub plan: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.TaskPhase")]
pub struct PhaseTasksReply {
    pub loop_id: String,
    pub name: String,
    pub title: String,
    pub markdown_path: String,
    pub items: Vec<TaskItemReply>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.TaskItem")]
pub struct TaskItemReply {
    #[schemars(with = "LspLocation")]
    pub location: lsp_types::Location,
    pub text: String,
    pub user_data: TaskUserData,
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.TaskUserData")]
pub struct TaskUserData {
    pub loop_id: String,
    pub phase: String,
    pub task_index: usize,
    pub action: Option<&'static str>,
}

impl TasksReply {
    pub fn new(list: TaskList) -> Result<TasksReply, String> {
        let plan = list.plan.as_ref().map(LoopRecord::label);
        let phases = list
            .phases
            .into_iter()
            .map(|phase| {
                let items = phase
                    .tasks
                    .iter()
                    .map(|task| {
                        Ok(TaskItemReply {
                            location: location(&task.path, task.line)?,
                            // A done task says so, as its ticked box in phase.md does.
                            text: if task.done {
                                format!("[x] {}", task.text)
                            } else {
                                task.text.clone()
                            },
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
        Ok(TasksReply { phases, plan })
    }
}

/// The schema of an LSP `Location` as it goes over the wire, which `lsp_types` does not
/// give; Neovim's Lua knows the class.
#[derive(JsonSchema)]
#[schemars(rename = "lsp.Location")]
#[allow(dead_code)]
struct LspLocation {
    uri: String,
    range: LspRange,
}

#[derive(JsonSchema)]
#[schemars(rename = "lsp.Range")]
#[allow(dead_code)]
struct LspRange {
    start: LspPosition,
    end: LspPosition,
}

#[derive(JsonSchema)]
#[schemars(rename = "lsp.Position")]
#[allow(dead_code)]
struct LspPosition {
    line: u32,
    character: u32,
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

/// A spec's requirements not yet verified, each at its line in spec.md.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.RequirementsReply")]
pub struct RequirementsReply {
    /// The spec's name.
    pub spec: String,
    pub loop_id: String,
    /// Its spec.md.
    pub path: String,
    /// How many requirements are verified, in words: `requirements 5/6 verified`.
    pub coverage: String,
    pub items: Vec<RequirementItemReply>,
}

/// One requirement not yet verified.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.RequirementItem")]
pub struct RequirementItemReply {
    /// `R2`.
    pub id: String,
    pub text: String,
    /// Its line in spec.md, from 1.
    pub lnum: u32,
    /// Why it is not verified: `not verified yet`, `finding: <message>`, ...
    pub why: String,
}

impl From<RequirementsLeft> for RequirementsReply {
    fn from(left: RequirementsLeft) -> RequirementsReply {
        RequirementsReply {
            spec: left.spec,
            loop_id: left.loop_id.to_string(),
            path: left.markdown_path.to_string_lossy().into_owned(),
            coverage: left.coverage,
            items: left
                .unverified
                .into_iter()
                .map(|place| RequirementItemReply {
                    id: place.id,
                    text: place.text,
                    lnum: place.line.saturating_add(1),
                    why: place.why,
                })
                .collect(),
        }
    }
}

/// What a status row shows of verification.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.Coverage")]
pub struct CoverageReply {
    /// A spec's: `requirements 5/6 verified`; a phase's: `not verified yet`, `verified`,
    /// `2 findings (1 critical, 1 minor), blocking`.
    pub text: String,
    /// A spec's requirements verified, and how many it has.
    pub verified: Option<usize>,
    pub total: Option<usize>,
    /// A phase's latest verification: `not_verified`, `verified` or `blocking`.
    pub state: Option<&'static str>,
    /// A phase's findings by severity.
    pub critical: u32,
    pub major: u32,
    pub minor: u32,
}

impl From<&LoopCoverage> for CoverageReply {
    fn from(coverage: &LoopCoverage) -> CoverageReply {
        let text = coverage.describe();
        match coverage {
            LoopCoverage::Spec(spec) => CoverageReply {
                text,
                verified: Some(spec.verified()),
                total: Some(spec.total()),
                state: None,
                critical: 0,
                major: 0,
                minor: 0,
            },
            LoopCoverage::Phase(state) => {
                let counts = state.counts();
                CoverageReply {
                    text,
                    verified: None,
                    total: None,
                    state: Some(state.as_str()),
                    critical: counts.critical,
                    major: counts.major,
                    minor: counts.minor,
                }
            }
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.TranscriptReply")]
pub struct TranscriptReply {
    pub loop_id: String,
    pub loop_type: &'static str,
    pub status: &'static str,
}

/// What the host is: the plugin runs it only when `protocol` is the one it speaks.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.HelloReply")]
pub struct HelloReply {
    /// The host's crate version, e.g. `0.1.0`.
    pub version: &'static str,
    /// The wire protocol it speaks (`bridge::PROTOCOL_VERSION`).
    pub protocol: u32,
}

impl HelloReply {
    pub fn current() -> HelloReply {
        HelloReply {
            version: env!("CARGO_PKG_VERSION"),
            protocol: crate::bridge::PROTOCOL_VERSION,
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.LoopIdReply")]
pub struct LoopIdReply {
    pub loop_id: String,
    /// How messages name the loop: `plan "Add a --version flag"`, `spec "cli"`; the id
    /// only when the host no longer finds the loop. Left out when empty.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub label: String,
}

impl LoopIdReply {
    pub fn new(loop_id: impl std::fmt::Display) -> LoopIdReply {
        let loop_id = loop_id.to_string();
        LoopIdReply {
            label: format!("loop {loop_id}"),
            loop_id,
        }
    }

    /// The reply for `loop_id`, labelled from its record among `records`.
    pub fn named(records: &[LoopRecord], loop_id: impl std::fmt::Display) -> LoopIdReply {
        let loop_id = loop_id.to_string();
        match records.iter().find(|record| record.id.as_str() == loop_id) {
            Some(record) => LoopIdReply {
                label: record.label(),
                loop_id,
            },
            None => LoopIdReply::new(loop_id),
        }
    }
}

/// What a pending loop waits for among `records`, when that is another loop (a loop held at
/// its budget says so in its error): `waits for spec "cli", which failed`.
pub fn waits_for(record: &LoopRecord, records: &[LoopRecord]) -> Option<String> {
    if record.status != LoopStatus::Pending || held_at_budget(record) {
        return None;
    }
    if let Some(holder) = code_turn_holder(record, records) {
        let label = holder.label();
        return Some(match holder.status {
            LoopStatus::AwaitingApproval => format!(
                "waits its turn: the changes of {label} await approval, and one code loop \
                 works in the tree at a time"
            ),
            LoopStatus::Paused => format!(
                "waits its turn: {label} is paused at its plan's budget, and one code loop \
                 works in the tree at a time"
            ),
            _ => format!("waits its turn: {label} is running, and one code loop runs at a time"),
        });
    }
    let awaited: Vec<String> = awaited(record, records)
        .into_iter()
        .map(|awaited| match awaited.sibling {
            Some(sibling) if retryable(sibling.status) => {
                format!("{}, which {}", sibling.label(), ended(sibling.status))
            }
            Some(sibling) => sibling.label(),
            None => awaited.name.to_owned(),
        })
        .collect();
    (!awaited.is_empty()).then(|| format!("waits for {}", awaited.join(" and ")))
}

/// How a loop that ended without success ended, as a verb.
fn ended(status: LoopStatus) -> &'static str {
    match status {
        LoopStatus::Cancelled => "was cancelled",
        LoopStatus::Interrupted => "was interrupted",
        _ => "failed",
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "loopr.LoopRecord")]
pub struct LoopRecordReply {
    pub id: String,
    #[serde(rename = "type")]
    pub loop_type: &'static str,
    pub parent: Option<String>,
    pub status: &'static str,
    pub iteration: u32,
    pub tokens_in: u64,
    pub tokens_out: u64,
    /// The loop's error text as stored, an undone loop's note included.
    pub error: Option<String>,
    /// What of `error` is a note, not an error (`store::note`): what an undo restored. A
    /// status list shows it apart from errors.
    pub note: Option<String>,
    pub task: String,
    pub name: Option<String>,
    /// How messages name the loop (`LoopIdReply::label`).
    pub label: String,
    /// What a pending loop waits for, worded: `waits for spec "cli"`.
    pub waits_for: Option<String>,
    /// What the user can do next about a loop that ended without success (or whose error
    /// names a step), worded: `:LooprRetry or R in :LooprStatus`.
    pub way_on: Option<String>,
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
    /// A spec's requirements verified, a current phase's latest verification.
    pub coverage: Option<CoverageReply>,
    /// Where the run of every phase of this plan or spec stands, worded: `run: phase 3 of 7
    /// (parse): its code loop runs`.
    pub run: Option<String>,
    /// What the host's loop rules answer for it: the plugin keeps no copy of a rule.
    #[serde(flatten)]
    pub standing: Standing,
}

/// Tokens of every kind, and their estimated cost.
#[derive(Debug, Default, Serialize, JsonSchema)]
#[schemars(rename = "loopr.Spend")]
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
    /// The status rows, each with what it waits for and its way on, which the other loops
    /// decide (a retry without a loop named takes one of them).
    pub fn rows(rows: Vec<crate::agent::StatusRow>) -> Vec<LoopRecordReply> {
        let records: Vec<LoopRecord> = rows.iter().map(|row| row.record.clone()).collect();
        let plain_retry: Vec<&LoopRecord> = default_retry(&records)
            .map(|target| retried_with(target, &records))
            .unwrap_or_default();
        rows.into_iter()
            .zip(&records)
            .map(|(row, record)| {
                let taken = plain_retry.iter().any(|retried| retried.id == record.id);
                // Named as the user can type it, short enough to stay on a failure's line.
                let name = (!taken && retryable(record.status))
                    .then(|| crate::agent::shortest_name(&records, record));
                let waits = match &row.waits_for_commit {
                    Some(code) => Some(format!(
                        "waits its turn: the changes of {:?} are being committed",
                        code.name.clone().unwrap_or_else(|| code.label())
                    )),
                    None => waits_for(record, &records),
                };
                LoopRecordReply {
                    waits_for: waits,
                    way_on: words::way_on(record, name.as_deref()),
                    ..LoopRecordReply::new(row)
                }
            })
            .collect()
    }

    pub fn new(row: crate::agent::StatusRow) -> LoopRecordReply {
        LoopRecordReply {
            artifact_path: row.artifact.map(|path| path.to_string_lossy().into_owned()),
            spend: SpendReply::from(&row.spend),
            tree: row.tree.as_ref().map(SpendReply::from),
            coverage: row.coverage.as_ref().map(CoverageReply::from),
            run: row.run,
            ..LoopRecordReply::from(row.record)
        }
    }
}

impl From<LoopRecord> for LoopRecordReply {
    fn from(record: LoopRecord) -> LoopRecordReply {
        LoopRecordReply {
            standing: Standing::of_record(&record),
            label: record.label(),
            waits_for: None,
            way_on: None,
            run: None,
            artifact_path: None,
            id: record.id.to_string(),
            loop_type: record.loop_type.as_str(),
            parent: record.parent.map(|parent| parent.to_string()),
            status: record.status.as_str(),
            iteration: record.iteration,
            tokens_in: record.tokens_in,
            tokens_out: record.tokens_out,
            error: record.error.as_deref().map(crate::bridge::words::hinted),
            note: crate::store::note(record.error.as_deref()).map(crate::bridge::words::hinted),
            task: record.task,
            name: record.name,
            triggered_by: record.triggered_by,
            depends_on: record.depends_on,
            review_passes: record.review_passes,
            created_at: record.created_at,
            updated_at: record.updated_at,
            spend: SpendReply::default(),
            tree: None,
            coverage: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::PhaseTasks;
    use std::path::PathBuf;

    #[test]
    fn task_places_become_file_uri_locations() {
        let reply = TasksReply::new(TaskList {
            plan: None,
            phases: vec![PhaseTasks {
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
                    done: true,
                }],
            }],
        })
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
        assert_eq!(item["text"], "[x] modify: do it", "a done task says so");
        assert_eq!(
            item["user_data"],
            serde_json::json!({"loop_id": "l-1", "phase": "parse-flag", "task_index": 1, "action": "modify"})
        );
    }
}
