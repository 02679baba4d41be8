//! The code loop: implements one phase with the changing tools, then runs the phase's
//! validation command; on failure the output goes back to the model and the loop iterates,
//! up to a limit. Each iteration's conversation and validation output are stored under
//! `iterations/NNN/`; `run.json` holds the run so a killed host resumes it.

mod agent_session;
mod agent_turn;
mod verifying;
mod with_agent;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use async_trait::async_trait;

use super::baseline::{Baseline, BaselineError};
use super::checkpoint::{self, CheckpointRecord, Checkpoints};
use super::context::{LoopContext, LoopError, offered_mcp_tools};
use super::context_budget::RereadHints;
use super::events::LoopEvent;
use super::export;
use super::failure_locations::{self, FailureLocation};
use super::jobs;
use super::journal::Journal;
use super::progress::describe_tool_call;
use super::prompts;
use super::task_progress::{self, MARK_TASKS_DONE};
use super::turn::{CallHandler, CallResult, Conversation, start_run, stored_run};
use crate::artifacts::{PhaseArtifact, PlanArtifact, render_phase_markdown};
use crate::llm::text_protocol::TextProtocol;
use crate::llm::{Message, ToolCall, ToolSpec};
use crate::mcp::McpTools;
use crate::schema::input_schema_for;
use crate::store::write_atomic;
use crate::tools::{
    ApprovalRequest, ChangeKind, Decision, ToolContext, ToolError, ToolRegistry, parse_input,
    redact_cut_start, run_recorded, unsandboxed_note,
};

pub const COMPLETE_PHASE: &str = "complete_phase";
/// What the code loop's worker is told to do to have its work checked again: Loopr's model
/// calls `complete_phase`; a coding agent (`code_agent`) has no such tool and ends its turn.
fn check_again(context: &LoopContext) -> String {
    match context.settings.code_agent {
        Some(_) => "end your turn again".to_owned(),
        None => format!("call {COMPLETE_PHASE} again"),
    }
}

/// Bytes of validation output the model sees (the end, where failures are reported).
const VALIDATION_TAIL: usize = 16 * 1024;

/// Say the phase is implemented; the host then runs its validation command.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CompletePhaseInput {
    /// What was changed and why, in a few sentences.
    summary: String,
}

/// The `complete_phase` tool as offered to the model, naming the command it runs.
pub(super) fn complete_phase_spec(validation_command: &str) -> ToolSpec {
    ToolSpec::offered(
        COMPLETE_PHASE,
        format!(
            "Call when the phase's tasks are done. The host then runs the validation command \
             `{validation_command}`; if it fails you get its output and continue."
        ),
        &input_schema_for::<CompletePhaseInput>(),
        Some(serde_json::json!({
            "summary": "Added the version flag to Args in src/cli.rs; the CLI tests pass."
        })),
    )
}

#[derive(Debug, Serialize, Deserialize)]
struct CodeRunState {
    iteration: u32,
    /// The validation of `iteration` passed: the loop is done.
    #[serde(default)]
    passed: bool,
    /// The iteration the current allowance of `code_max_iterations` counts from; a retry or
    /// a revision starts a new allowance.
    #[serde(default = "first_iteration")]
    allowance_from: u32,
    /// The verification round under way: the validation of `iteration` passed and this
    /// round verifies it (a host killed meanwhile resumes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    verifying: Option<u32>,
    /// Verification rounds run on the current allowance of `verify.max_rounds`.
    #[serde(default)]
    verify_rounds: u32,
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

/// Implements the phase, with Loopr's own tools or through the coding agent the loop's
/// settings name (`code_agent`); returns the iteration whose validation passed.
pub async fn run_code_loop(context: &LoopContext) -> Result<u32, LoopError> {
    if let Some(agent) = context.settings.code_agent.clone() {
        return with_agent::run_with_agent(context, &agent).await;
    }
    let record = &context.record;
    let phase = phase_of(context)?;
    let tools = ToolRegistry::for_loop(record.loop_type, context.settings.web_fetch);
    let mcp_tools = offered_mcp_tools(context).await;
    let mut tool_specs = tools.specs();
    tool_specs.extend(mcp_tools.specs());
    tool_specs.push(task_progress::mark_tasks_done_spec());
    tool_specs.push(complete_phase_spec(&phase.validation_command));
    // `complete_phase`, the loop's own, answers with the defaults.
    let reread = RereadHints::of(&[&tools, &mcp_tools, &tool_specs]);
    let (journal, rules) = before_changes(context, &phase).await?;
    let (mut state, messages, batches) =
        load_or_start(context, &phase, &journal, rules.summary(), |first| first).await?;
    let project_name = context
        .root
        .path()
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut conversation = Conversation::new(
        context,
        journal,
        prompts::code_system_prompt(&project_name, &tools) + &rules.prompt_section(),
        tool_specs.into(),
        reread,
        messages,
        batches,
    );
    if let Some(passed) = where_it_stands(context, &mut conversation, &mut state, &phase).await? {
        return Ok(passed);
    }
    let max_iterations = context.settings.code_max_iterations;
    let model = context
        .settings
        .model_for("code")
        .map_err(LoopError::Settings)?;
    let tool_context = changing_tool_context(context);
    let max_turns = context.settings.max_turns;
    let nudge = prompts::nudge_to_call(
        &complete_phase_spec(&phase.validation_command),
        TextProtocol::new(context.settings.tool_protocol, context.settings.tool_format),
    );
    let mut turns_this_iteration = 0;
    let mut last_problem: Option<String> = None;

    while state.iteration <= state.last_allowed_iteration(max_iterations) {
        if turns_this_iteration >= max_turns {
            conversation.flush().await?;
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
        let mut calls = CodeCalls {
            context,
            tools: &tools,
            mcp_tools: &mcp_tools,
            tool_context: &tool_context,
            phase: &phase,
            iteration: state.iteration,
            validated: false,
            passed: false,
        };
        let answered = conversation
            .take_turn(context, model.clone(), &mut calls, nudge.clone())
            .await?;
        if answered.last_problem.is_some() {
            last_problem = answered.last_problem;
        }
        let (validated, passed) = (calls.validated, calls.passed);
        if passed {
            match verifying::after_validation(context, &mut conversation, &mut state, &phase)
                .await?
            {
                verifying::Settled::Complete => return Ok(state.iteration),
                verifying::Settled::Again => {
                    turns_this_iteration = 0;
                    conversation.commit_later(&state)?;
                    continue;
                }
            }
        }
        if validated {
            state.iteration += 1;
            turns_this_iteration = 0;
        }
        conversation.commit_later(&state)?;
    }
    conversation.flush().await?;
    Err(LoopError::ValidationFailing {
        command: phase.validation_command.clone(),
        iterations: max_iterations,
    })
}

/// What a code loop does before it changes anything: the checkpoint and the baseline (kept
/// across resumes); its journal and the project's rules for the phase.
async fn before_changes(
    context: &LoopContext,
    phase: &PhaseArtifact,
) -> Result<(Journal, super::rules::ProjectRules), LoopError> {
    // Before the baseline: a loop resumed after its baseline (or started by an older Loopr)
    // may have changed the tree already, so it takes none.
    if !Baseline::at(&context.layout.loop_dir(&context.record.id)).exists() {
        take_checkpoint(context).await;
    }
    record_baseline(context).await?;
    let journal = Journal::of(&context.layout, &context.record.id);
    let worked_on = phase
        .tasks
        .iter()
        .filter_map(|task| task.file.clone())
        .collect();
    let rules = super::rules::for_loop(context, worked_on).await;
    Ok((journal, rules))
}

/// What the loop's changing tools (and its validation) run with: each change journaled in
/// its baseline, for the changes list and undo.
fn changing_tool_context(context: &LoopContext) -> ToolContext {
    ToolContext {
        root: context.root.clone(),
        cancel: context.cancel.clone(),
        policy: context.policy.clone(),
        approver: context.approver.clone(),
        loop_id: context.record.id.to_string(),
        buffers: context.buffers.clone(),
        journal: Arc::new(loop_baseline(context)),
    }
}

/// The loop's baseline, not counting as the loop's what the plan's export writes.
fn loop_baseline(context: &LoopContext) -> Baseline {
    Baseline::at(&context.layout.loop_dir(&context.record.id)).excluding({
        let layout = context.layout.clone();
        Arc::new(move || export::exported_paths(&layout))
    })
}

/// Readies a run (new, resumed, revised or retried) for its next turn: the user's feedback
/// taken, a verification round a killed host left finished, a new allowance for a run that
/// gave up. `Some(iteration)` when the phase is done already (that iteration passed).
async fn where_it_stands(
    context: &LoopContext,
    conversation: &mut Conversation,
    state: &mut CodeRunState,
    phase: &PhaseArtifact,
) -> Result<Option<u32>, LoopError> {
    if let Some(feedback) = context.record.feedback.as_deref() {
        take_feedback(context, conversation, state, feedback).await?;
    } else if state.passed {
        return Ok(Some(state.iteration));
    } else if state.verifying.is_some() {
        // Killed while it verified: the round goes on.
        match verifying::verify(context, conversation, state, phase).await? {
            verifying::Settled::Complete => return Ok(Some(state.iteration)),
            verifying::Settled::Again => conversation.commit_later(state)?,
        }
    } else if state.iteration > state.last_allowed_iteration(context.settings.code_max_iterations) {
        // It gave up before and the user asked for another go.
        state.allowance_from = state.iteration;
        state.verify_rounds = 0;
    }
    Ok(None)
}

/// The calls of one turn of a code loop.
struct CodeCalls<'a> {
    context: &'a LoopContext,
    tools: &'a ToolRegistry,
    mcp_tools: &'a McpTools,
    tool_context: &'a ToolContext,
    phase: &'a PhaseArtifact,
    iteration: u32,
    /// `complete_phase` ran the validation in this turn.
    validated: bool,
    passed: bool,
}

#[async_trait]
impl CallHandler for CodeCalls<'_> {
    async fn answer(
        &mut self,
        call: ToolCall,
        conversation: &[std::sync::Arc<Message>],
    ) -> Result<CallResult, LoopError> {
        let context = self.context;
        let name = call.name;
        if name == COMPLETE_PHASE {
            if self.validated {
                return Ok(CallResult::error(
                    "the validation already ran for this answer".to_owned(),
                ));
            }
            return match parse_input::<CompletePhaseInput>(COMPLETE_PHASE, call.input) {
                Err(err) => Ok(CallResult::error(err.to_string())),
                Ok(done) => {
                    self.validated = true;
                    tracing::info!(loop_id = %context.record.id, summary = %done.summary, "phase reported done");
                    let (passed, text) = validate(
                        context,
                        self.tool_context,
                        self.phase,
                        self.iteration,
                        conversation,
                        &format!("call {COMPLETE_PHASE} again"),
                    )
                    .await?;
                    self.passed = passed;
                    Ok(CallResult {
                        content: text,
                        is_error: !passed,
                        follow_up: None,
                    })
                }
            };
        }
        if name == MARK_TASKS_DONE {
            let marked = task_progress::mark_tasks_done(context, self.phase, call.input).await;
            // The exported phase shows the ticks too (export reads them from task_progress).
            export::refresh(context).await;
            return marked;
        }
        context.progress(describe_tool_call(
            &[self.tools, self.mcp_tools],
            &name,
            &call.input,
        ));
        let called = match self.tools.get(&name) {
            Some(tool) => tool.call(call.input, self.tool_context).await,
            None => match self
                .mcp_tools
                .call(&name, call.input, self.tool_context)
                .await
            {
                Some(called) => called,
                None => {
                    let mut names: Vec<&str> = self.tools.names();
                    names.extend(self.mcp_tools.names());
                    names.extend([MARK_TASKS_DONE, COMPLETE_PHASE]);
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
            Err(err) => Ok(CallResult::error(format!("{name} failed: {err}"))),
        }
    }

    /// `complete_phase` goes last, so the validation sees every change of the turn. (The
    /// results may come in another order than the calls; providers pair them by id.)
    fn order(&self, calls: &mut Vec<ToolCall>) {
        calls.sort_by_key(|call| call.name == COMPLETE_PHASE);
    }
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
    let cancel = context.cancel.clone();
    let recording = tokio::task::spawn_blocking(move || baseline.record(&root, &policy, &cancel));
    // A cancel ends the wait at once, and the recording at its next file.
    let recorded = tokio::select! {
        biased;
        _ = context.cancel.cancelled() => return Err(LoopError::Cancelled),
        recorded = recording => recorded,
    };
    match recorded
        .map_err(|err| LoopError::Validation(format!("recording the baseline crashed: {err}")))?
    {
        Ok(()) => Ok(()),
        Err(BaselineError::Cancelled) => Err(LoopError::Cancelled),
        Err(err) => Err(LoopError::Artifact {
            kind: "baseline",
            source: std::io::Error::other(err.to_string()),
        }),
    }
}

/// The working tree as git sees it before the loop changes anything, as a commit under
/// `refs/loopr/<loop>/before`, for a rewind; kept across resumes. Outside a git work tree
/// there is none. One that cannot be taken (too slow, git fails) leaves the loop going on
/// without it, saying so.
async fn take_checkpoint(context: &LoopContext) {
    let loop_dir = context.layout.loop_dir(&context.record.id);
    if CheckpointRecord::read(&loop_dir).is_some() {
        return;
    }
    let Some(checkpoints) = Checkpoints::find(context.root.path()).await else {
        return;
    };
    context.progress("recording a checkpoint of the working tree (git)");
    let taken = tokio::select! {
        biased;
        _ = context.cancel.cancelled() => return,
        taken = checkpoints.take(&context.record.id, checkpoint::BEFORE, &loop_dir, checkpoint::TAKE_TIMEOUT) => taken,
    };
    let record = match taken {
        Ok(commit) => CheckpointRecord {
            before: Some(commit),
            missing: None,
        },
        Err(err) => {
            tracing::warn!(loop_id = %context.record.id, error = %err, "no checkpoint");
            context.progress(format!(
                "no checkpoint of the working tree (a rewind of this phase will use the \
                 baselines): {err}"
            ));
            CheckpointRecord {
                before: None,
                missing: Some(err.to_string()),
            }
        }
    };
    let written = tokio::task::spawn_blocking(move || record.write(&loop_dir)).await;
    if !matches!(written, Ok(Ok(()))) {
        tracing::warn!(loop_id = %context.record.id, "recording the checkpoint's commit failed");
    }
}

/// Runs the validation command for `iteration`, stores its output and the conversation, and
/// returns whether it passed with the text for the model (which, on a failure, is told to
/// fix it and `again`: what has the validation run once more).
async fn validate(
    context: &LoopContext,
    tool_context: &ToolContext,
    phase: &PhaseArtifact,
    iteration: u32,
    conversation: &[std::sync::Arc<Message>],
    again: &str,
) -> Result<(bool, String), LoopError> {
    let command = &phase.validation_command;
    if let Some(pattern) = context.policy.denied_by(command) {
        return Err(LoopError::Validation(format!(
            "`{command}` matches the deny-list pattern {pattern:?}; revise the phase's validation command"
        )));
    }
    // The model wrote this command (in the phase). Inside the sandbox it runs like the
    // phase's own check it is, unless the user wants to approve it; without a sandbox it
    // is asked about like any other command.
    let sandboxed = context.policy.sandbox.is_confined();
    if context.settings.approve_validation || !sandboxed {
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
                return Err(LoopError::ValidationRejected {
                    loop_id: context.record.id.clone(),
                    phase: phase.name.clone(),
                    command: command.clone(),
                    reason,
                });
            }
            None => return Err(LoopError::Cancelled),
        }
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
    let locations = failure_places(context, format!("{}{}", output.stdout, output.stderr)).await;
    context.events.emit(LoopEvent::ValidationFinished {
        loop_id: context.record.id.clone(),
        phase: phase.name.clone(),
        iteration,
        passed,
        command: command.clone(),
        output: format!("{}{}", output.stdout, output.stderr),
        locations,
        root: context.root.path().to_path_buf(),
    });
    context.progress(format!(
        "iteration {iteration}: validation {}",
        if passed { "passed" } else { "failed" }
    ));
    let text = if passed {
        format!(
            "Validation passed: `{command}` ({}). {}",
            output.status,
            if context.settings.verify.enabled {
                "The host now verifies the changes against the phase's requirements."
            } else {
                "The phase is complete."
            }
        )
    } else {
        let refusal = context
            .policy
            .sandbox
            .explain_refusal(&output)
            .map(|refusal| format!(" Note: {refusal}."))
            .unwrap_or_default();
        format!(
            "Validation failed: `{command}` ({}).{refusal} Fix the failures and {again}.\n{}",
            output.status,
            tail(&output.to_string(), VALIDATION_TAIL)
        )
    };
    Ok((passed, text))
}

/// The places in the project's files that a validation's `output` names (a walk of the
/// project may look for a bare file name: on the blocking pool).
async fn failure_places(context: &LoopContext, output: String) -> Vec<FailureLocation> {
    let root = context.root.clone();
    tokio::task::spawn_blocking(move || {
        failure_locations::in_project(&root, failure_locations::runner_locations(&output))
    })
    .await
    .unwrap_or_default()
}

fn tail(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut start = text.len() - max_bytes;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    // The cut may go through a URL: what is left of its credentials goes too.
    format!(
        "[... {start} bytes left out ...]\n{}",
        redact_cut_start(&text[start..])
    )
}

/// A revision of the code loop: the user's feedback opens a new iteration (with a fresh
/// allowance) of the same conversation. Stored before the feedback is used up, so a crash in
/// between repeats the feedback rather than losing it.
async fn take_feedback(
    context: &LoopContext,
    conversation: &mut Conversation,
    state: &mut CodeRunState,
    feedback: &str,
) -> Result<(), LoopError> {
    conversation.add_user_text(prompts::code_revision_request(
        feedback,
        &check_again(context),
    ));
    // The iteration after the last validated one; an iteration under way goes on.
    state.iteration = state
        .iteration
        .max(context.record.iteration.saturating_add(1));
    state.passed = false;
    state.allowance_from = state.iteration;
    state.verifying = None;
    state.verify_rounds = 0;
    conversation.commit(state).await?;
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

/// The stored run, or a new one whose first message is the phase (`first_message`) as
/// `framed` words it.
async fn load_or_start(
    context: &LoopContext,
    phase: &PhaseArtifact,
    journal: &Journal,
    rules: Vec<String>,
    framed: impl FnOnce(String) -> String,
) -> Result<(CodeRunState, Vec<Message>, u64), LoopError> {
    if let Some(run) = stored_run::<CodeRunState>(context, journal).await? {
        context.progress("resuming the code conversation");
        return Ok((run.state, run.messages, run.batches));
    }
    let state = CodeRunState {
        iteration: 1,
        passed: false,
        allowance_from: 1,
        verifying: None,
        verify_rounds: 0,
    };
    let first = Message::user_text(framed(first_message(context, phase).await?));
    let batches = start_run(context, journal, &first, rules, &state).await?;
    Ok((state, vec![first], batches))
}

/// The phase in full, with its spec and plan for context, as far as they can be read (on the
/// blocking pool).
async fn first_message(context: &LoopContext, phase: &PhaseArtifact) -> Result<String, LoopError> {
    let parent = context.record.parent.clone();
    let (spec, plan) = context
        .store(move |db, layout| {
            let phase_record = parent.and_then(|parent| db.get(&parent).ok().flatten());
            let spec = phase_record
                .as_ref()
                .and_then(|record| verifying::spec_of_phase(record, layout));
            let plan = phase_record
                .and_then(|record| record.parent)
                .and_then(|parent| db.get(&parent).ok().flatten())
                .and_then(|record| jobs::parent_artifact::<PlanArtifact>(&record, layout).ok())
                .map(|(_, plan)| plan);
            Ok((spec, plan))
        })
        .await?;
    Ok(prompts::code_task_message(
        &render_phase_markdown(phase),
        spec.as_ref(),
        plan.as_ref(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_of_a_validation_cut_inside_a_url_keeps_no_part_of_its_credentials() {
        let output = "fatal: could not read from https://user:s3cr3t-t0ken@git.example.com/app\n";
        let kept = tail(
            output,
            output.len() - "fatal: could not read from https://user:s3".len(),
        );
        assert!(!kept.contains("cr3t") && !kept.contains("t0ken"), "{kept}");
        assert!(kept.contains("[REDACTED]@git.example.com/app"), "{kept}");
        assert_eq!(tail("short", 100), "short");
    }
}
