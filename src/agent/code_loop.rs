//! The code loop: implements one phase with the changing tools, then runs the phase's
//! validation command; on failure the output goes back to the model and the loop iterates,
//! up to a limit. Each iteration's conversation and validation output are stored under
//! `iterations/NNN/`; `run.json` holds the run so a killed host resumes it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::artifact_loop::{LoopContext, LoopError, model_turn};
use super::baseline::Baseline;
use super::events::LoopEvent;
use super::jobs;
use super::progress::{describe_provider_event, describe_tool_call};
use super::prompts;
use crate::artifacts::{PhaseArtifact, PlanArtifact, SpecArtifact, render_phase_markdown};
use crate::llm::{ChatRequest, ContentBlock, Message, Role, ToolCall, ToolSpec, Usage};
use crate::schema::input_schema_for;
use crate::store::{LoopStatus, write_atomic};
use crate::tools::{
    ApprovalRequest, ChangeKind, Decision, ToolContext, ToolError, ToolRegistry, parse_input,
    run_recorded, unsandboxed_note,
};

pub const COMPLETE_PHASE: &str = "complete_phase";
/// Bytes of validation output the model sees (the end, where failures are reported).
const VALIDATION_TAIL: usize = 16 * 1024;

/// Say the phase is implemented; the host then runs its validation command.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct CompletePhaseInput {
    /// What was changed and why, in a few sentences.
    summary: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct CodeRunState {
    iteration: u32,
    messages: Vec<Message>,
    /// The validation of `iteration` passed: the loop is done.
    #[serde(default)]
    passed: bool,
    /// The iteration the current allowance of `code_max_iterations` counts from; a retry or
    /// a revision starts a new allowance.
    #[serde(default = "first_iteration")]
    allowance_from: u32,
}

fn first_iteration() -> u32 {
    1
}

impl CodeRunState {
    fn last_allowed_iteration(&self, max_iterations: u32) -> u32 {
        self.allowance_from
            .saturating_add(max_iterations.saturating_sub(1))
    }
}

/// Implements the phase; returns the iteration whose validation passed.
pub async fn run_code_loop(context: &LoopContext) -> Result<u32, LoopError> {
    let record = &context.record;
    let phase = phase_of(context)?;
    let tools = ToolRegistry::for_loop(record.loop_type, context.settings.web_fetch);
    let mut tool_specs = tools.specs();
    tool_specs.push(ToolSpec {
        name: COMPLETE_PHASE.to_owned(),
        description: format!(
            "Call when the phase's tasks are done. The host then runs the validation command \
             `{}`; if it fails you get its output and continue.",
            phase.validation_command
        ),
        input_schema: input_schema_for::<CompletePhaseInput>(),
    });
    record_baseline(context).await?;
    let mut state = load_or_start(context, &phase).await?;
    let max_iterations = context.settings.code_max_iterations;
    if let Some(feedback) = context.record.feedback.as_deref() {
        take_feedback(context, &mut state, feedback).await?;
    } else if state.passed {
        return Ok(state.iteration);
    } else if state.iteration > state.last_allowed_iteration(max_iterations) {
        // It gave up before and the user asked for another go.
        state.allowance_from = state.iteration;
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
            .model_for("code")
            .map_err(LoopError::Settings)?,
        max_tokens: context.settings.max_tokens,
        system: prompts::code_system_prompt(&project_name, &tools.names()),
        messages: std::mem::take(&mut state.messages),
        tools: tool_specs,
    };
    let tool_context = ToolContext {
        root: context.root.clone(),
        cancel: context.cancel.clone(),
        policy: context.policy.clone(),
        approver: context.approver.clone(),
        loop_id: record.id.to_string(),
        buffers: context.buffers.clone(),
        journal: Arc::new(Baseline::at(&context.layout.loop_dir(&record.id))),
    };
    let mut usage = Usage {
        input_tokens: record.tokens_in,
        output_tokens: record.tokens_out,
        ..Usage::default()
    };
    let max_turns = context.settings.max_turns;
    let on_provider_event = |event| context.progress(describe_provider_event(&event));
    let mut turns_this_iteration = 0;
    let mut last_problem: Option<String> = None;

    while state.iteration <= state.last_allowed_iteration(max_iterations) {
        if turns_this_iteration >= max_turns {
            return Err(LoopError::TurnLimit {
                tool: COMPLETE_PHASE,
                max_turns,
                last_problem,
            });
        }
        turns_this_iteration += 1;
        context.progress(format!(
            "iteration {}/{}: waiting for the model (turn {turns_this_iteration}/{max_turns})",
            state.iteration,
            state.last_allowed_iteration(max_iterations)
        ));
        let (turn, mut calls) =
            model_turn(context, &mut request, &mut usage, &on_provider_event).await?;
        // complete_phase goes last, so the validation sees every change of the turn. (The
        // results may come in another order than the calls; the API pairs them by id.)
        calls.sort_by_key(|call| call.name == COMPLETE_PHASE);
        let mut reply = Vec::new();
        let mut passed = false;
        let mut validated = false;
        for ToolCall {
            id: call_id,
            name,
            input,
            input_error,
        } in calls
        {
            let (content, is_error) = if let Some(problem) = input_error {
                (prompts::unusable_input(&name, &problem), true)
            } else if name == COMPLETE_PHASE && !validated {
                match parse_input::<CompletePhaseInput>(COMPLETE_PHASE, input) {
                    Err(err) => (err.to_string(), true),
                    Ok(done) => {
                        validated = true;
                        tracing::info!(loop_id = %record.id, summary = %done.summary, "phase reported done");
                        let outcome = validate(
                            context,
                            &tool_context,
                            &phase,
                            state.iteration,
                            &request.messages,
                        )
                        .await?;
                        passed = outcome.0;
                        (outcome.1, !passed)
                    }
                }
            } else if name == COMPLETE_PHASE {
                (
                    "the validation already ran for this answer".to_owned(),
                    true,
                )
            } else {
                context.progress(describe_tool_call(&name, &input));
                match tools.get(&name) {
                    None => (
                        format!(
                            "there is no tool named {name:?}; the available tools are {}, {COMPLETE_PHASE}",
                            tools.names().join(", ")
                        ),
                        true,
                    ),
                    Some(tool) => match tool.call(input, &tool_context).await {
                        Ok(content) => (content, false),
                        Err(ToolError::Cancelled) => return Err(LoopError::Cancelled),
                        Err(err) => (format!("{name} failed: {err}"), true),
                    },
                }
            };
            if is_error {
                last_problem = Some(content.clone());
            }
            reply.push(ContentBlock::ToolResult {
                id: call_id,
                content,
                is_error,
            });
        }
        if passed {
            request.messages.push(Message {
                role: Role::User,
                content: reply,
            });
            state.passed = true;
            save_state(context, &state, &request.messages).await?;
            return Ok(state.iteration);
        }
        if validated {
            state.iteration += 1;
            turns_this_iteration = 0;
        } else if !turn.truncated_tool_calls.is_empty() {
            reply.push(ContentBlock::Text {
                text: prompts::truncated_tool_call_note(
                    &turn.truncated_tool_calls,
                    context.settings.max_tokens,
                ),
            });
        } else if reply.is_empty() {
            reply.push(ContentBlock::Text {
                text: prompts::nudge_to_call_artifact_tool(COMPLETE_PHASE),
            });
        }
        request.messages.push(Message {
            role: Role::User,
            content: reply,
        });
        save_state(context, &state, &request.messages).await?;
    }
    Err(LoopError::ValidationFailing {
        command: phase.validation_command.clone(),
        iterations: max_iterations,
    })
}

/// The project as it is before the loop changes anything; kept across resumes.
async fn record_baseline(context: &LoopContext) -> Result<(), LoopError> {
    let baseline = Baseline::at(&context.layout.loop_dir(&context.record.id));
    if baseline.exists() {
        return Ok(());
    }
    context.progress("recording the baseline of the project");
    let root = context.root.clone();
    let policy = context.policy.clone();
    tokio::task::spawn_blocking(move || baseline.record(&root, &policy))
        .await
        .map_err(|err| LoopError::Validation(format!("recording the baseline crashed: {err}")))?
        .map_err(|err| LoopError::Artifact {
            kind: "baseline",
            source: std::io::Error::other(err.to_string()),
        })
}

/// Runs the validation command for `iteration`, stores its output and the conversation, and
/// returns whether it passed with the text for the model.
async fn validate(
    context: &LoopContext,
    tool_context: &ToolContext,
    phase: &PhaseArtifact,
    iteration: u32,
    conversation: &[Message],
) -> Result<(bool, String), LoopError> {
    let command = &phase.validation_command;
    if let Some(pattern) = context.policy.denied_by(command) {
        return Err(LoopError::Validation(format!(
            "`{command}` matches the deny-list pattern {pattern:?}; revise the phase's validation command"
        )));
    }
    // The model wrote this command (in the phase), so it is approved like any other.
    let request = ApprovalRequest {
        loop_id: context.record.id.to_string(),
        kind: ChangeKind::Command,
        tool: "validation",
        subject: command.clone(),
        detail: format!(
            "$ {command}\n(the phase's validation command, in the project root){}",
            unsandboxed_note(&context.policy.sandbox)
        ),
    };
    match context.approver.decide(request, &context.cancel).await {
        Some(Decision::Accept | Decision::AcceptAllOfKind) => {}
        Some(Decision::Reject(reason)) => {
            return Err(LoopError::Validation(format!(
                "the user rejected the validation command `{command}`: {reason}"
            )));
        }
        None => return Err(LoopError::Cancelled),
    }
    context.progress(format!("iteration {iteration}: running {command}"));
    // Recorded like a tool's changes: a formatter in the validation changes files too.
    let output = run_recorded(
        tool_context,
        command,
        context.root.path(),
        context.settings.validation_timeout(),
    )
    .await
    .map_err(|err| match err {
        ToolError::Cancelled => LoopError::Cancelled,
        other => LoopError::Validation(other.to_string()),
    })?;
    let passed = output.succeeded();
    let log = format!("$ {command}\n{output}");
    let dir = context.layout.iteration_dir(&context.record.id, iteration);
    let store_error = |source| LoopError::Artifact {
        kind: "validation log",
        source,
    };
    let conversation =
        serde_json::to_vec(conversation).map_err(|err| store_error(std::io::Error::other(err)))?;
    let id = context.record.id.clone();
    context
        .store(move |db, _| {
            write_atomic(&dir.join("validation.log"), log.as_bytes()).map_err(store_error)?;
            write_atomic(&dir.join("conversation.json"), &conversation).map_err(store_error)?;
            Ok(db.set_iteration(&id, iteration)?)
        })
        .await?;
    context.events.emit(LoopEvent::ValidationFinished {
        loop_id: context.record.id.clone(),
        phase: phase.name.clone(),
        iteration,
        passed,
        command: command.clone(),
        output: format!("{}{}", output.stdout, output.stderr),
    });
    context.progress(format!(
        "iteration {iteration}: validation {}",
        if passed { "passed" } else { "failed" }
    ));
    let text = if passed {
        format!(
            "Validation passed: `{command}` ({}). The phase is complete.",
            output.status
        )
    } else {
        let refusal = context
            .policy
            .sandbox
            .explain_refusal(&output)
            .map(|refusal| format!(" Note: {refusal}."))
            .unwrap_or_default();
        format!(
            "Validation failed: `{command}` ({}).{refusal} Fix the failures and call \
             {COMPLETE_PHASE} again.\n{}",
            output.status,
            tail(&output.to_string(), VALIDATION_TAIL)
        )
    };
    Ok((passed, text))
}

fn tail(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut start = text.len() - max_bytes;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("[... {start} bytes left out ...]\n{}", &text[start..])
}

/// A revision of the code loop: the user's feedback opens a new iteration (with a fresh
/// allowance) of the same conversation. Stored before the feedback is used up, so a crash in
/// between repeats the feedback rather than losing it.
async fn take_feedback(
    context: &LoopContext,
    state: &mut CodeRunState,
    feedback: &str,
) -> Result<(), LoopError> {
    let text = prompts::code_revision_request(feedback, COMPLETE_PHASE);
    // The stored conversation always ends with our message; the feedback joins it, as two
    // user messages in a row are refused by the API.
    match state.messages.last_mut() {
        Some(message) if message.role == Role::User => {
            message.content.push(ContentBlock::Text { text });
        }
        _ => state.messages.push(Message::user_text(text)),
    }
    // The iteration after the last validated one; an iteration under way goes on.
    state.iteration = state
        .iteration
        .max(context.record.iteration.saturating_add(1));
    state.passed = false;
    state.allowance_from = state.iteration;
    save_state(context, state, &state.messages).await?;
    let id = context.record.id.clone();
    context
        .store(move |db, _| Ok(db.clear_feedback(&id)?))
        .await?;
    context.progress(format!(
        "iteration {}: revising with your feedback",
        state.iteration
    ));
    Ok(())
}

/// The phase this loop implements, from the phase loop's stored artifact.
fn phase_of(context: &LoopContext) -> Result<PhaseArtifact, LoopError> {
    let (_, phase) = jobs::parent_artifact::<PhaseArtifact>(&context.record, &context.layout)?;
    Ok(phase)
}

async fn load_or_start(
    context: &LoopContext,
    phase: &PhaseArtifact,
) -> Result<CodeRunState, LoopError> {
    let path = context.layout.run_state(&context.record.id);
    let stored = std::fs::read(&path)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<CodeRunState>(&bytes).ok())
        .filter(|state| {
            state
                .messages
                .last()
                .is_some_and(|message| message.role == Role::User)
        });
    if let Some(state) = stored {
        context.progress("resuming the code conversation");
        return Ok(state);
    }
    let state = CodeRunState {
        iteration: 1,
        messages: vec![Message::user_text(first_message(context, phase))],
        passed: false,
        allowance_from: 1,
    };
    save_state(context, &state, &state.messages).await?;
    Ok(state)
}

/// The phase in full, with its spec and plan for context, as far as they can be read.
fn first_message(context: &LoopContext, phase: &PhaseArtifact) -> String {
    let phase_record = context
        .record
        .parent
        .as_ref()
        .and_then(|parent| context.db.get(parent).ok().flatten());
    let spec = phase_record
        .as_ref()
        .and_then(|record| jobs::parent_artifact::<SpecArtifact>(record, &context.layout).ok())
        .map(|(_, spec)| spec);
    let spec_record = phase_record
        .as_ref()
        .and_then(|record| record.parent.as_ref())
        .and_then(|parent| context.db.get(parent).ok().flatten());
    let plan = spec_record
        .as_ref()
        .and_then(|record| jobs::parent_artifact::<PlanArtifact>(record, &context.layout).ok())
        .map(|(_, plan)| plan);
    prompts::code_task_message(&render_phase_markdown(phase), spec.as_ref(), plan.as_ref())
}

/// `CodeRunState` as stored, borrowing the conversation rather than copying it.
#[derive(Serialize)]
struct StoredCodeRun<'a> {
    iteration: u32,
    messages: &'a [Message],
    passed: bool,
    allowance_from: u32,
}

async fn save_state(
    context: &LoopContext,
    state: &CodeRunState,
    messages: &[Message],
) -> Result<(), LoopError> {
    context
        .save_run_state(&StoredCodeRun {
            iteration: state.iteration,
            messages,
            passed: state.passed,
            allowance_from: state.allowance_from,
        })
        .await
}

/// Whether a phase may get a code loop: its artifact exists and is approved (a phase that
/// waits for review, or was invalidated, may not run).
pub fn runnable_phase(status: LoopStatus, iteration: u32) -> bool {
    iteration > 0 && status == LoopStatus::Complete
}
