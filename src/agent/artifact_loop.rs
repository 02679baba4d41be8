//! The conversation cycle of an artifact loop (plan, spec or phase): send, stream, run the tool
//! calls, answer with tool results, until the artifact tool succeeds and its review passes
//! are through, or the turn limit is reached. The run's state (conversation, review stage) is
//! stored after every turn, so a killed host resumes it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::artifact_store::store_artifact;
use super::events::{EventSink, LoopEvent};
use super::jobs::{self, Accepted, JobError};
use super::progress::{describe_provider_event, describe_tool_call};
use super::prompts;
use super::settings::LoopSettings;
use crate::artifacts::{
    ArtifactKind, REVIEW_FOCI, SPEC_JUDGEMENT, Verdict, review_tool_name, review_tool_spec,
    validate_review,
};
use crate::llm::{
    ChatRequest, ContentBlock, LlmError, LlmProvider, Message, Role, ToolCall, Turn, Usage,
};
use crate::store::{LoopDb, LoopRecord, ProjectLayout, StoreError, write_atomic};
use crate::tools::{
    Approver, NoJournal, OpenBuffers, ProjectRoot, ToolContext, ToolError, ToolPolicy, ToolRegistry,
};

#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error("cancelled")]
    Cancelled,
    #[error("model request failed: {0}")]
    Llm(LlmError),
    #[error(
        "no valid {tool} call after {max_turns} model turns (the turn limit){}; raise max_turns, \
         make the task more specific, or :LooprRetry",
        last_problem_note(.last_problem.as_deref())
    )]
    TurnLimit {
        tool: &'static str,
        max_turns: u32,
        /// What the model was last told was wrong, the likely reason it never got there.
        last_problem: Option<String>,
    },
    #[error("saving the {kind} artifact: {source}")]
    Artifact {
        kind: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the validation command `{command}` still fails after {iterations} iterations; see the \
         validation list, raise code_max_iterations or revise the phase"
    )]
    ValidationFailing { command: String, iterations: u32 },
    #[error("the validation command could not run: {0}")]
    Validation(String),
    #[error(transparent)]
    Job(#[from] JobError),
    #[error("the loop's settings: {0}")]
    Settings(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Characters of the last problem kept in a failure message; the whole text is in the log.
const LAST_PROBLEM_CHARS: usize = 300;

fn last_problem_note(problem: Option<&str>) -> String {
    let Some(problem) = problem.map(str::trim).filter(|problem| !problem.is_empty()) else {
        return String::new();
    };
    let flat = problem.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut shown: String = flat.chars().take(LAST_PROBLEM_CHARS).collect();
    if shown.len() < flat.len() {
        shown.push('…');
    }
    format!("; the last problem the model was told: {shown}")
}

impl From<LlmError> for LoopError {
    fn from(err: LlmError) -> LoopError {
        match err {
            LlmError::Cancelled => LoopError::Cancelled,
            other => LoopError::Llm(other),
        }
    }
}

/// Everything one loop run needs; built by the manager.
pub struct LoopContext {
    pub record: LoopRecord,
    pub root: ProjectRoot,
    pub layout: ProjectLayout,
    pub db: LoopDb,
    pub provider: Arc<dyn LlmProvider>,
    pub settings: LoopSettings,
    pub events: Arc<dyn EventSink>,
    pub cancel: CancellationToken,
    /// Asks before changes (code loops only; planning tools never change anything).
    pub approver: Arc<dyn Approver>,
    /// What tools may never do (secret files, denied commands).
    pub policy: Arc<ToolPolicy>,
    pub buffers: Arc<dyn OpenBuffers>,
}

impl LoopContext {
    /// Runs store work (SQLite writes, atomic file writes: each ends in an fsync) on the
    /// blocking pool, so the async workers that stream model answers never wait behind a
    /// disk. A panic in `work` goes on unwinding in the loop's task, whose supervisor reports
    /// it.
    pub(super) async fn store<T: Send + 'static>(
        &self,
        work: impl FnOnce(&LoopDb, &ProjectLayout) -> Result<T, LoopError> + Send + 'static,
    ) -> Result<T, LoopError> {
        let db = self.db.clone();
        let layout = self.layout.clone();
        match tokio::task::spawn_blocking(move || work(&db, &layout)).await {
            Ok(result) => result,
            Err(join_error) if join_error.is_panic() => {
                std::panic::resume_unwind(join_error.into_panic())
            }
            Err(_) => Err(LoopError::Cancelled),
        }
    }

    /// Stores the run's state (`run.json`), which a restarted host resumes from.
    pub(super) async fn save_run_state(&self, state: &impl Serialize) -> Result<(), LoopError> {
        let json = serde_json::to_vec(state).map_err(|err| LoopError::Artifact {
            kind: "run state",
            source: std::io::Error::other(err),
        })?;
        self.write_file("run state", self.layout.run_state(&self.record.id), json)
            .await
    }

    /// Writes `bytes` to `path` atomically, off the async threads.
    pub(super) async fn write_file(
        &self,
        kind: &'static str,
        path: std::path::PathBuf,
        bytes: Vec<u8>,
    ) -> Result<(), LoopError> {
        self.store(move |_, _| {
            write_atomic(&path, &bytes).map_err(|source| LoopError::Artifact { kind, source })
        })
        .await
    }

    pub(super) fn progress(&self, message: impl Into<String>) {
        self.events.emit(LoopEvent::Progress {
            loop_id: self.record.id.clone(),
            message: message.into(),
        });
    }
}

#[derive(Debug)]
pub struct ArtifactOutcome {
    pub iteration: u32,
    pub accepted: Accepted,
}

/// Where a run stands; stored in `run.json` after every turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "stage", rename_all = "snake_case")]
enum Stage {
    /// Waiting for the first acceptable artifact.
    Drafting,
    /// Waiting for the verdict of review pass `pass` (zero-based).
    Reviewing { pass: usize },
    /// Review pass `pass` asked for changes; waiting for the revised artifact.
    Revising { pass: usize },
    /// The artifact is accepted and reviewed.
    Done,
}

#[derive(Debug, Serialize, Deserialize)]
struct RunState {
    /// The loop's iteration when the run started; the run stores the ones after it.
    base_iteration: u32,
    /// The newest iteration this run stored (the base until the first is stored).
    stored_iteration: u32,
    stage: Stage,
    passes_done: u32,
    messages: Vec<Message>,
    /// The last error a call of this run got back, for the failure message.
    #[serde(default)]
    last_problem: Option<String>,
}

/// The answer to one tool call, before it becomes a `tool_result` block.
struct CallResult {
    content: String,
    is_error: bool,
    /// Text to add after the tool results, e.g. the next review request.
    follow_up: Option<String>,
}

impl CallResult {
    fn ok(content: String) -> CallResult {
        CallResult {
            content,
            is_error: false,
            follow_up: None,
        }
    }

    fn error(content: String) -> CallResult {
        CallResult {
            content,
            is_error: true,
            follow_up: None,
        }
    }
}

/// The review passes this kind of artifact goes through, as (name, question).
fn review_schedule(
    kind: ArtifactKind,
    settings: &LoopSettings,
) -> Vec<(&'static str, &'static str)> {
    match kind {
        ArtifactKind::Plan => {
            let passes = usize::try_from(settings.plan_review_passes).unwrap_or(usize::MAX);
            REVIEW_FOCI.iter().take(passes).copied().collect()
        }
        ArtifactKind::Spec if settings.spec_review => vec![SPEC_JUDGEMENT],
        ArtifactKind::Spec | ArtifactKind::Phase => Vec::new(),
    }
}

pub async fn run_artifact_loop(context: &LoopContext) -> Result<ArtifactOutcome, LoopError> {
    let record = &context.record;
    let kind = jobs::artifact_kind(record.loop_type)?;
    let reviews = review_schedule(kind, &context.settings);
    let mut state = load_or_start(context, kind).await?;
    if state.stage == Stage::Done {
        return finish(context, kind, &state);
    }
    let tools = ToolRegistry::for_loop(record.loop_type, context.settings.web_fetch);
    let mut tool_specs = tools.specs();
    tool_specs.push(jobs::artifact_tool(kind));
    if !reviews.is_empty() {
        tool_specs.push(review_tool_spec(kind));
    }
    let project_name = context
        .root
        .path()
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut request = ChatRequest {
        model: context
            .settings
            .model_for(kind.as_str())
            .map_err(LoopError::Settings)?,
        max_tokens: context.settings.max_tokens,
        system: prompts::system_prompt(kind, &project_name, &tools.names()),
        messages: std::mem::take(&mut state.messages),
        tools: tool_specs,
    };
    let tool_context = ToolContext {
        root: context.root.clone(),
        cancel: context.cancel.clone(),
        policy: context.policy.clone(),
        // Planning tools only read; the one that asks is `web_fetch` (per host), when enabled.
        approver: context.approver.clone(),
        loop_id: context.record.id.to_string(),
        buffers: context.buffers.clone(),
        journal: Arc::new(NoJournal),
    };
    let mut usage = Usage {
        input_tokens: record.tokens_in,
        output_tokens: record.tokens_out,
        ..Usage::default()
    };
    let max_turns = context.settings.max_turns;
    let on_provider_event = |event| context.progress(describe_provider_event(&event));

    for turn_number in 1..=max_turns {
        context.progress(format!(
            "waiting for the model (turn {turn_number}/{max_turns})"
        ));
        let (turn, calls) =
            model_turn(context, &mut request, &mut usage, &on_provider_event).await?;

        let mut reply = Vec::new();
        let mut follow_ups = Vec::new();
        for ToolCall {
            id: call_id,
            name,
            input,
            input_error,
        } in calls
        {
            let result = if let Some(problem) = input_error {
                CallResult::error(prompts::unusable_input(&name, &problem))
            } else if state.stage == Stage::Done {
                CallResult::error(format!(
                    "the {} is complete; nothing more is needed",
                    kind.as_str()
                ))
            } else if name == kind.tool_name() {
                context.progress(describe_tool_call(&name, &input));
                create_call(
                    context,
                    kind,
                    &reviews,
                    &mut state,
                    &input,
                    &request.messages,
                )
                .await?
            } else if name == review_tool_name(kind) && !reviews.is_empty() {
                review_call(context, kind, &reviews, &mut state, &input).await?
            } else {
                tool_call(context, kind, &tools, &tool_context, &name, input).await?
            };
            follow_ups.extend(result.follow_up);
            if result.is_error {
                state.last_problem = Some(result.content.clone());
            }
            reply.push(ContentBlock::ToolResult {
                id: call_id,
                content: result.content,
                is_error: result.is_error,
            });
        }

        if state.stage == Stage::Done {
            state.messages = request.messages;
            save_state(context, &state).await?;
            return finish(context, kind, &state);
        }

        // Tool results come first in the user message, as the API requires.
        if !turn.truncated_tool_calls.is_empty() {
            follow_ups.push(prompts::truncated_tool_call_note(
                &turn.truncated_tool_calls,
                context.settings.max_tokens,
            ));
        } else if reply.is_empty() {
            follow_ups.push(match state.stage {
                Stage::Reviewing { .. } => {
                    prompts::nudge_to_call_artifact_tool(review_tool_name(kind))
                }
                _ => prompts::nudge_to_call_artifact_tool(kind.tool_name()),
            });
        }
        reply.extend(
            follow_ups
                .into_iter()
                .map(|text| ContentBlock::Text { text }),
        );
        request.messages.push(Message {
            role: Role::User,
            content: reply,
        });
        state.messages = request.messages.clone();
        save_state(context, &state).await?;
    }
    Err(LoopError::TurnLimit {
        tool: match state.stage {
            Stage::Reviewing { .. } => review_tool_name(kind),
            _ => kind.tool_name(),
        },
        max_turns,
        last_problem: state.last_problem,
    })
}

/// One model turn: asks, adds the turn's tokens to the loop's count, appends the answer to
/// the conversation, and returns the turn with its tool calls.
pub(super) async fn model_turn(
    context: &LoopContext,
    request: &mut ChatRequest,
    usage: &mut Usage,
    on_provider_event: &(dyn Fn(crate::llm::ProviderEvent) + Send + Sync),
) -> Result<(Turn, Vec<ToolCall>), LoopError> {
    // A cancel or revision from another host (another Neovim, the CLI) reaches this one
    // only through the store: checked before each turn.
    let id = context.record.id.clone();
    if !context
        .store(move |db, _| Ok(db.still_wanted(&id)?))
        .await?
    {
        tracing::info!(loop_id = %context.record.id, "cancelled or invalidated elsewhere; stopping");
        return Err(LoopError::Cancelled);
    }
    let turn = context
        .provider
        .complete(request, on_provider_event, &context.cancel)
        .await?;
    usage.input_tokens += turn.usage.total_input();
    usage.output_tokens += turn.usage.output_tokens;
    let (id, tokens_in, tokens_out) = (
        context.record.id.clone(),
        usage.input_tokens,
        usage.output_tokens,
    );
    context
        .store(move |db, _| Ok(db.set_tokens(&id, tokens_in, tokens_out)?))
        .await?;
    let calls = turn.tool_calls();
    request.messages.push(Message {
        role: Role::Assistant,
        content: turn.content.clone(),
    });
    Ok((turn, calls))
}

/// A call of the artifact tool: validated, stored as the next iteration, then on to the next
/// review pass or done.
async fn create_call(
    context: &LoopContext,
    kind: ArtifactKind,
    reviews: &[(&'static str, &'static str)],
    state: &mut RunState,
    input: &Value,
    conversation: &[Message],
) -> Result<CallResult, LoopError> {
    let accepted = match jobs::accept(&context.record, &context.root, input)? {
        Ok(accepted) => accepted,
        Err(report) => {
            let problems = report.issues.len();
            tracing::info!(
                loop_id = %context.record.id,
                problems,
                report = %report,
                "artifact input rejected"
            );
            context.progress(format!(
                "the {} had {problems} problem{}; asking the model to fix {}",
                kind.as_str(),
                if problems == 1 { "" } else { "s" },
                if problems == 1 { "it" } else { "them" },
            ));
            return Ok(CallResult::error(report.to_string()));
        }
    };
    let iteration = state.stored_iteration + 1;
    crate::test_hooks::pause_point(&format!("before_artifact_write:{}", kind.as_str()));
    let (id, json, markdown, conversation) = (
        context.record.id.clone(),
        accepted.json.clone(),
        accepted.markdown.clone(),
        conversation.to_vec(),
    );
    let stored = context
        .store(move |db, layout| {
            let stored = store_artifact(
                layout,
                &id,
                iteration,
                kind,
                &json,
                &markdown,
                Some(&conversation),
            )
            .map_err(|source| LoopError::Artifact {
                kind: kind.as_str(),
                source,
            })?;
            db.set_iteration(&id, iteration)?;
            Ok(stored)
        })
        .await?;
    state.stored_iteration = iteration;
    tracing::info!(loop_id = %context.record.id, iteration, path = %stored.markdown_path.display(), "artifact stored");
    // A revision (asked for or not) settles the pass under way.
    let next_pass = match state.stage {
        Stage::Drafting | Stage::Done => 0,
        Stage::Reviewing { pass } | Stage::Revising { pass } => {
            state.passes_done = u32::try_from(pass + 1).unwrap_or(u32::MAX);
            set_review_passes(context, state.passes_done).await?;
            pass + 1
        }
    };
    let mut result = CallResult::ok(accepted.summary);
    if next_pass < reviews.len() {
        state.stage = Stage::Reviewing { pass: next_pass };
        result.follow_up = Some(review_request(context, kind, reviews, next_pass));
    } else {
        state.stage = Stage::Done;
    }
    Ok(result)
}

async fn set_review_passes(context: &LoopContext, passes: u32) -> Result<(), LoopError> {
    let id = context.record.id.clone();
    context
        .store(move |db, _| Ok(db.set_review_passes(&id, passes)?))
        .await
}

async fn review_call(
    context: &LoopContext,
    kind: ArtifactKind,
    reviews: &[(&'static str, &'static str)],
    state: &mut RunState,
    input: &Value,
) -> Result<CallResult, LoopError> {
    let Stage::Reviewing { pass } = state.stage else {
        return Ok(CallResult::error(format!(
            "no review is asked for now; {}",
            match state.stage {
                Stage::Revising { .. } => format!(
                    "call {} with the revised {}",
                    kind.tool_name(),
                    kind.as_str()
                ),
                _ => format!("call {} first", kind.tool_name()),
            }
        )));
    };
    let review = match validate_review(kind, input) {
        Ok(review) => review,
        Err(report) => return Ok(CallResult::error(report.to_string())),
    };
    let (focus, _) = reviews[pass];
    let label = format!("review pass {}/{} ({focus})", pass + 1, reviews.len());
    match review.verdict {
        Verdict::Approve => {
            state.passes_done = u32::try_from(pass + 1).unwrap_or(u32::MAX);
            set_review_passes(context, state.passes_done).await?;
            context.progress(format!("{label}: approved"));
            let mut result = CallResult::ok(format!("Recorded: {label} approved."));
            if pass + 1 < reviews.len() {
                state.stage = Stage::Reviewing { pass: pass + 1 };
                result.follow_up = Some(review_request(context, kind, reviews, pass + 1));
            } else {
                state.stage = Stage::Done;
            }
            Ok(result)
        }
        Verdict::Revise => {
            context.progress(format!(
                "{label}: revising ({} issue(s))",
                review.issues.len()
            ));
            state.stage = Stage::Revising { pass };
            Ok(CallResult::ok(format!(
                "Recorded {} issue(s). Now call {} with the complete revised {} that fixes them.",
                review.issues.len(),
                kind.tool_name(),
                kind.as_str()
            )))
        }
    }
}

fn review_request(
    context: &LoopContext,
    kind: ArtifactKind,
    reviews: &[(&'static str, &'static str)],
    pass: usize,
) -> String {
    let (focus, question) = reviews[pass];
    context.progress(format!(
        "review pass {}/{} ({focus})",
        pass + 1,
        reviews.len()
    ));
    prompts::review_request(
        kind,
        pass + 1,
        reviews.len(),
        focus,
        question,
        review_tool_name(kind),
    )
}

async fn tool_call(
    context: &LoopContext,
    kind: ArtifactKind,
    tools: &ToolRegistry,
    tool_context: &ToolContext,
    name: &str,
    input: Value,
) -> Result<CallResult, LoopError> {
    context.progress(describe_tool_call(name, &input));
    let Some(tool) = tools.get(name) else {
        return Ok(CallResult::error(format!(
            "there is no tool named {name:?}; the available tools are {}, {}",
            tools.names().join(", "),
            kind.tool_name()
        )));
    };
    match tool.call(input, tool_context).await {
        Ok(content) => Ok(CallResult::ok(content)),
        Err(ToolError::Cancelled) => Err(LoopError::Cancelled),
        Err(err) => {
            tracing::debug!(loop_id = %context.record.id, tool = name, error = %err, "tool call failed");
            Ok(CallResult::error(format!("{name} failed: {err}")))
        }
    }
}

/// Reports the accepted, reviewed artifact of the run.
fn finish(
    context: &LoopContext,
    kind: ArtifactKind,
    state: &RunState,
) -> Result<ArtifactOutcome, LoopError> {
    let iteration = state.stored_iteration;
    let artifacts = context.layout.artifacts_dir(&context.record.id, iteration);
    let json_path = artifacts.join(format!("{}.json", kind.as_str()));
    let accepted = jobs::read_json(&json_path)
        .ok()
        .and_then(|json| jobs::restore(kind, &json))
        .ok_or_else(|| LoopError::Artifact {
            kind: kind.as_str(),
            source: std::io::Error::other(format!("{} is missing or invalid", json_path.display())),
        })?;
    context.events.emit(LoopEvent::ArtifactCreated {
        loop_id: context.record.id.clone(),
        kind,
        markdown_path: artifacts.join(format!("{}.md", kind.as_str())),
        json_path,
        iteration,
    });
    Ok(ArtifactOutcome {
        iteration,
        accepted,
    })
}

/// The run state to continue from: the stored one after a crash, or a fresh one (first run,
/// or a revision asked for with feedback).
async fn load_or_start(context: &LoopContext, kind: ArtifactKind) -> Result<RunState, LoopError> {
    let record = &context.record;
    let path = context.layout.run_state(&record.id);
    if record.feedback.is_none() {
        let stored = std::fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<RunState>(&bytes).ok())
            .filter(|state| state.stage == Stage::Done || resumable(&state.messages));
        if let Some(state) = stored {
            if state.stage != Stage::Done {
                context.progress(format!("resuming the {} conversation", kind.as_str()));
            }
            return Ok(state);
        }
    }
    let previous = previous_artifact(context, kind);
    let state = RunState {
        base_iteration: record.iteration,
        stored_iteration: record.iteration,
        stage: Stage::Drafting,
        passes_done: 0,
        last_problem: None,
        messages: vec![Message::user_text(jobs::first_message(
            record,
            &context.layout,
            previous.as_ref(),
        )?)],
    };
    set_review_passes(context, 0).await?;
    save_state(context, &state).await?;
    Ok(state)
}

/// Only a conversation that ends with our message can be sent again as it is.
fn resumable(messages: &[Message]) -> bool {
    messages
        .last()
        .is_some_and(|message| message.role == Role::User)
}

fn previous_artifact(context: &LoopContext, kind: ArtifactKind) -> Option<Value> {
    let record = &context.record;
    if record.iteration == 0 {
        return None;
    }
    let path = context
        .layout
        .artifacts_dir(&record.id, record.iteration)
        .join(format!("{}.json", kind.as_str()));
    jobs::read_json(&path).ok()
}

async fn save_state(context: &LoopContext, state: &RunState) -> Result<(), LoopError> {
    context.save_run_state(state).await
}
