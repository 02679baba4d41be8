//! The artifact loop (plan, spec or phase): the turn engine's conversation until the artifact
//! tool succeeds and its review passes are through, or the turn limit is reached. What the
//! calls do lives here: the artifact tool stores an iteration, the review tool records a
//! verdict, the rest are the level's read-only tools.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::artifact_store::store_artifact;
use super::context_budget::RereadHints;
use super::events::LoopEvent;
use super::jobs::{self, ChildLoop};
use super::journal::Journal;
use super::progress::describe_tool_call;
use super::prompts;
use super::settings::LoopSettings;
use super::turn::{CallHandler, CallResult, Conversation, start_run, stored_run};
use crate::artifacts::{
    ArtifactKind, REVIEW_FOCI, SPEC_JUDGEMENT, Verdict, review_tool_name, review_tool_spec,
    validate_review,
};
use crate::llm::text_protocol::TextProtocol;
use crate::llm::{Message, ToolCall, ToolSpec};
use crate::tools::{ToolContext, ToolError, ToolRegistry};

use super::context::{LoopContext, LoopError, offered_mcp_tools};

#[derive(Debug)]
pub struct ArtifactOutcome {
    pub iteration: u32,
    /// The loops the accepted artifact spawns.
    pub children: Vec<ChildLoop>,
}

/// Where a run stands; stored with every turn.
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
    /// The last error a call of this run got back, for the failure message.
    #[serde(default)]
    last_problem: Option<String>,
}

/// The stage a run's progress lines name: the review pass under way, while one is (the
/// model's turns alone would not say it).
fn stage_label(stage: Stage, reviews: &[(&'static str, &'static str)]) -> Option<String> {
    match stage {
        Stage::Reviewing { pass } | Stage::Revising { pass } => {
            Some(review_pass_label(reviews, pass))
        }
        Stage::Drafting | Stage::Done => None,
    }
}

/// `review pass 3/5 (edge cases)` for the zero-based `pass`.
fn review_pass_label(reviews: &[(&'static str, &'static str)], pass: usize) -> String {
    let focus = reviews.get(pass).map_or("", |(focus, _)| focus);
    format!("review pass {}/{} ({focus})", pass + 1, reviews.len())
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
    let journal = Journal::of(&context.layout, &record.id);
    let rules = super::rules::for_loop(context, Vec::new()).await;
    let (mut state, messages, batches) =
        load_or_start(context, kind, &journal, rules.summary()).await?;
    if state.stage == Stage::Done {
        return finish(context, kind, &state);
    }
    let tools = ToolRegistry::for_loop(record.loop_type, context.settings.web_fetch);
    let mut tool_specs = level_tools(
        kind,
        &tools,
        context.settings.web_fetch,
        !reviews.is_empty(),
    );
    // Only the tools the user marked read-only reach planning levels (`mcp::McpServerConfig`).
    let mcp_tools = offered_mcp_tools(context).await;
    if !mcp_tools.is_empty() {
        let mut specs = tool_specs.to_vec();
        specs.extend(mcp_tools.specs());
        tool_specs = specs.into();
    }
    let project_name = context
        .root
        .path()
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut conversation = Conversation::new(
        context,
        journal,
        prompts::system_prompt(kind, &project_name, &tools.names()) + &rules.prompt_section(),
        tool_specs.clone(),
        // The artifact and review tools, the loop's own, answer with the defaults.
        RereadHints::of(&[&tools, &mcp_tools, &tool_specs]),
        messages,
        batches,
    );
    let draft_model = context
        .settings
        .model_for(kind.as_str())
        .map_err(LoopError::Settings)?;
    let review_model = context
        .settings
        .model_for("review")
        .map_err(LoopError::Settings)?;
    let tool_context = context.reading_tool_context();
    let max_turns = context.settings.max_turns;
    // What the model is told when it calls nothing, in the protocol it calls tools in.
    let text_protocol =
        TextProtocol::new(context.settings.tool_protocol, context.settings.tool_format);
    let draft_nudge = prompts::nudge_to_call(&jobs::artifact_tool(kind), text_protocol);
    let review_nudge = prompts::nudge_to_call(&review_tool_spec(kind), text_protocol);

    for turn_number in 1..=max_turns {
        context.set_stage(stage_label(state.stage, &reviews));
        context.progress(format!(
            "waiting for the model (turn {turn_number}/{max_turns})"
        ));
        let reviewing = matches!(state.stage, Stage::Reviewing { .. });
        let (model, nudge) = if reviewing {
            (review_model.clone(), review_nudge.clone())
        } else {
            (draft_model.clone(), draft_nudge.clone())
        };
        let mut calls = ArtifactCalls {
            context,
            kind,
            reviews: &reviews,
            state: &mut state,
            tools: &tools,
            mcp_tools: &mcp_tools,
            tool_context: &tool_context,
        };
        let answered = conversation
            .take_turn(context, model, &mut calls, nudge)
            .await?;
        if answered.last_problem.is_some() {
            state.last_problem = answered.last_problem;
        }
        if state.stage == Stage::Done {
            conversation.commit(&state).await?;
            return finish(context, kind, &state);
        }
        conversation.commit_later(&state)?;
    }
    conversation.flush().await?;
    Err(LoopError::TurnLimit {
        tool: match state.stage {
            Stage::Reviewing { .. } => review_tool_name(kind),
            _ => kind.tool_name(),
        },
        max_turns,
        last_problem: state.last_problem,
    })
}

/// The tools offered to loops of a level: the same for all of them, so made once per host
/// and shared (their schemas are tens of kilobytes per loop otherwise).
pub(super) fn level_tools(
    kind: ArtifactKind,
    tools: &ToolRegistry,
    web_fetch: bool,
    reviewed: bool,
) -> Arc<[ToolSpec]> {
    type Key = (&'static str, bool, bool);
    static MADE: OnceLock<Mutex<HashMap<Key, Arc<[ToolSpec]>>>> = OnceLock::new();
    let made = MADE.get_or_init(Default::default);
    let mut made = made.lock().unwrap_or_else(PoisonError::into_inner);
    made.entry((kind.as_str(), web_fetch, reviewed))
        .or_insert_with(|| {
            let mut specs = tools.specs();
            specs.push(jobs::artifact_tool(kind));
            if reviewed {
                specs.push(review_tool_spec(kind));
            }
            specs.into()
        })
        .clone()
}

/// The calls of one turn of an artifact loop.
struct ArtifactCalls<'a> {
    context: &'a LoopContext,
    kind: ArtifactKind,
    reviews: &'a [(&'static str, &'static str)],
    state: &'a mut RunState,
    tools: &'a ToolRegistry,
    mcp_tools: &'a crate::mcp::McpTools,
    tool_context: &'a ToolContext,
}

#[async_trait]
impl CallHandler for ArtifactCalls<'_> {
    async fn answer(
        &mut self,
        call: ToolCall,
        conversation: &[Arc<Message>],
    ) -> Result<CallResult, LoopError> {
        let (context, kind) = (self.context, self.kind);
        if self.state.stage == Stage::Done {
            return Ok(CallResult::error(format!(
                "the {} is complete; nothing more is needed",
                kind.as_str()
            )));
        }
        if call.name == kind.tool_name() {
            context.progress(kind.describe_call());
            return create_call(
                context,
                kind,
                self.reviews,
                self.state,
                &call.input,
                conversation,
            )
            .await;
        }
        if call.name == review_tool_name(kind) && !self.reviews.is_empty() {
            return review_call(context, kind, self.reviews, self.state, &call.input).await;
        }
        tool_call(
            context,
            &[kind.tool_name()],
            self.tools,
            self.mcp_tools,
            self.tool_context,
            &call.name,
            call.input,
        )
        .await
    }
}

/// A call of the artifact tool: validated, stored as the next iteration, then on to the next
/// review pass or done.
async fn create_call(
    context: &LoopContext,
    kind: ArtifactKind,
    reviews: &[(&'static str, &'static str)],
    state: &mut RunState,
    input: &Value,
    conversation: &[Arc<Message>],
) -> Result<CallResult, LoopError> {
    let (record, root, owned_input) = (context.record.clone(), context.root.clone(), input.clone());
    let checked = context
        .store(move |_, layout| Ok(jobs::accept(&record, &root, layout, &owned_input)?))
        .await?;
    let accepted = match checked {
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
    // Every iteration of every artifact is stored here: the one point the export follows.
    super::export::refresh(context).await;
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
    let label = review_pass_label(reviews, pass);
    // The progress lines below name the pass: it is the stage under way.
    match review.verdict {
        Verdict::Approve => {
            state.passes_done = u32::try_from(pass + 1).unwrap_or(u32::MAX);
            set_review_passes(context, state.passes_done).await?;
            context.progress("approved");
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
            context.progress(format!("revising ({} issue(s))", review.issues.len()));
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
    // The next turn's progress line says it: "review pass 2/5 (correctness): waiting ...".
    context.set_stage(Some(review_pass_label(reviews, pass)));
    prompts::review_request(
        kind,
        pass + 1,
        reviews.len(),
        focus,
        question,
        review_tool_name(kind),
    )
}

/// A call of one of `tools` or `mcp_tools`, read-only ones; a name that is neither is
/// answered with every tool offered (the loop's `own` ones too).
pub(super) async fn tool_call(
    context: &LoopContext,
    own: &[&'static str],
    tools: &ToolRegistry,
    mcp_tools: &crate::mcp::McpTools,
    tool_context: &ToolContext,
    name: &str,
    input: Value,
) -> Result<CallResult, LoopError> {
    context.progress(describe_tool_call(&[tools, mcp_tools], name, &input));
    let called = match tools.get(name) {
        Some(tool) => tool.call(input, tool_context).await,
        None => match mcp_tools.call(name, input, tool_context).await {
            Some(called) => called,
            None => {
                let mut names: Vec<&str> = tools.names();
                names.extend(mcp_tools.names());
                names.extend(own);
                return Ok(CallResult::error(format!(
                    "there is no tool named {name:?}; the available tools are {}",
                    names.join(", ")
                )));
            }
        },
    };
    match called {
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
    let children = jobs::read_json(&json_path)
        .ok()
        .and_then(|json| jobs::spawned_by(kind, &json))
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
        gated: context.settings.gates(context.record.loop_type.as_str()),
    });
    Ok(ArtifactOutcome {
        iteration,
        children,
    })
}

/// The run to continue from: the journal's after a crash, or a fresh one (first run, or a
/// revision asked for with feedback).
async fn load_or_start(
    context: &LoopContext,
    kind: ArtifactKind,
    journal: &Journal,
    rules: Vec<String>,
) -> Result<(RunState, Vec<Message>, u64), LoopError> {
    let record = &context.record;
    // A revision asked for with feedback starts over; anything else continues what is stored.
    if record.feedback.is_none()
        && let Some(run) = stored_run::<RunState>(context, journal).await?
    {
        if run.state.stage != Stage::Done {
            context.progress(format!("resuming the {} conversation", kind.as_str()));
        }
        return Ok((run.state, run.messages, run.batches));
    }
    let previous = previous_artifact(context, kind);
    let state = RunState {
        base_iteration: record.iteration,
        stored_iteration: record.iteration,
        stage: Stage::Drafting,
        passes_done: 0,
        last_problem: None,
    };
    let first = Message::user_text(jobs::first_message(
        record,
        &context.layout,
        previous.as_ref(),
    )?);
    // A fresh record has none; only a run after earlier ones resets its count.
    if record.review_passes != 0 {
        set_review_passes(context, 0).await?;
    }
    let batches = start_run(context, journal, &first, rules, &state).await?;
    Ok((state, vec![first], batches))
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
