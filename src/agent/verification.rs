//! The verification pass: one conversation with the `verify` model, which reads the code
//! (read-only tools, and `show_diff` for a change left out of the first message) and
//! answers with `report_verification`: a verdict and findings, each at a file and line that
//! exist, judged against `verify.block_on`. Its journal is a file of its own beside the
//! loop's; a host killed meanwhile resumes it. `record_verification` keeps the latest one
//! beside the artifact verified and tells the shells.

mod findings;
mod request;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::artifact_loop::tool_call;
use super::baseline::{Baseline, BaselineError, FileDiff};
use super::context::{LoopContext, LoopError};
use super::context_budget::{RereadHints, estimate_text};
use super::events::LoopEvent;
use super::journal::Journal;
use super::prompts;
use super::task_progress::iteration_of;
use super::turn::{CallHandler, CallResult, Conversation, stored_run};
use crate::artifacts::{
    Requirement, StoredVerification, TaskItem, VerificationReport, VerificationScope,
};
use crate::llm::text_protocol::TextProtocol;
use crate::llm::{Message, ToolCall, ToolSpec, Usage};
use crate::mcp::McpTools;
use crate::store::{LoopId, LoopRecord, LoopType, now_rfc3339, write_atomic};
use crate::tools::{ToolContext, ToolRegistry, parse_input};
pub use findings::REPORT_VERIFICATION;
use findings::SHOW_DIFF;
use findings::{
    ShowDiffInput, cite_checked_paths, finding_problems, line_count, report_verification_spec,
    show_diff_spec,
};
use request::bounded_changes;
pub(super) use request::system_prompt;

/// What one verification checks.
#[derive(Clone, Debug)]
pub struct VerificationInput {
    pub scope: VerificationScope,
    /// The phase's tasks (for a spec: every phase's).
    pub tasks: Vec<TaskItem>,
    /// The requirements checked, with their text.
    pub requirements: Vec<Requirement>,
    /// A code loop's directory, whose baseline gives the diff; `None`: no diff (code
    /// written without Loopr).
    pub baseline_dir: Option<PathBuf>,
    pub validation_output: Option<String>,
    /// The code loop's verification round; 0 when asked on demand.
    pub round: u32,
}

/// The most one `show_diff` answer holds, as read tools cap theirs.
const SHOW_DIFF_MAX_BYTES: usize = 64 * 1024;

/// The share of the context budget the first message's diff may take.
const DIFF_SHARE_OF_BUDGET: u64 = 2;

/// A verification's run, stored with each of its turns.
#[derive(Debug, Default, Serialize, Deserialize)]
struct VerifyRunState {
    /// The accepted report, once there is one.
    #[serde(default)]
    accepted: Option<StoredVerification>,
}

/// Runs one verification conversation (model `models.verify`, read-only tools and the report
/// tool) in `context`, journaled at `journal_path` (continued when it holds an unfinished
/// run, its answer returned when it holds a finished one); returns the accepted report,
/// judged with `verify.block_on`.
pub async fn run_verification(
    context: &LoopContext,
    input: VerificationInput,
    journal_path: PathBuf,
) -> Result<StoredVerification, LoopError> {
    let transcript_id = transcript_id(&context.record);
    context.set_stage(Some(stage_words(context, input.round)));
    let verified = converse(context, &input, journal_path, &transcript_id).await;
    context.set_stage(None);
    context.transcripts.ended(&transcript_id);
    verified
}

/// Where the verification's live text goes: a code loop's aside of its own (its transcript
/// is the code loop's conversation); a verification loop's own transcript, which is what
/// following that loop shows.
fn transcript_id(record: &LoopRecord) -> LoopId {
    if record.loop_type != LoopType::Code {
        return record.id.clone();
    }
    LoopId::parse(&format!("{}-verify", record.id)).unwrap_or_else(LoopId::generate)
}

/// "verifying, round 1/2" (or "verifying" on demand): the stage its progress lines name.
fn stage_words(context: &LoopContext, round: u32) -> String {
    if round == 0 {
        "verifying".to_owned()
    } else {
        format!(
            "verifying, round {round}/{}",
            context.settings.verify.max_rounds.max(round)
        )
    }
}

async fn converse(
    context: &LoopContext,
    input: &VerificationInput,
    journal_path: PathBuf,
    transcript_id: &LoopId,
) -> Result<StoredVerification, LoopError> {
    let model = context
        .settings
        .model_for("verify")
        .map_err(LoopError::Settings)?;
    let journal = Journal::at(journal_path);
    let stored = stored_run::<VerifyRunState>(context, &journal).await?;
    if let Some(done) = stored.as_ref().and_then(|run| run.state.accepted.clone()) {
        return Ok(done);
    }
    let diffs = match &input.baseline_dir {
        Some(dir) => Some(changed_files(context, dir.clone()).await?),
        None => None,
    };
    let tools = ToolRegistry::for_loop(LoopType::Phase, context.settings.web_fetch);
    let tool_specs = verifier_tools(&tools, diffs.is_some());
    let own: Vec<&'static str> = [SHOW_DIFF, REPORT_VERIFICATION]
        .into_iter()
        .filter(|name| tool_specs.iter().any(|spec| spec.name == *name))
        .collect();
    let (messages, batches) = match stored {
        Some(run) => {
            context.progress("resuming the verification");
            (run.messages, run.batches)
        }
        None => {
            let budget = context.limits.context_budget.tokens / DIFF_SHARE_OF_BUDGET;
            let changes = diffs.as_deref().map(|diffs| bounded_changes(diffs, budget));
            let first = Message::user_text(request::first_message(
                &input.scope,
                &input.requirements,
                &input.tasks,
                input.validation_output.as_deref(),
                changes.as_ref(),
            ));
            start(context, &journal, &first).await?;
            (vec![first], 1)
        }
    };
    let project_name = context
        .root
        .path()
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let spent = loop_usage(context).await?;
    let mcp_tools = McpTools::default();
    let mut conversation = Conversation::new(
        context,
        journal,
        system_prompt(&project_name, &tools.names(), diffs.is_some()),
        tool_specs.into(),
        RereadHints::of(&[&tools]),
        messages,
        batches,
    )
    .aside(transcript_id.clone(), spent);
    let tool_context = context.reading_tool_context();
    let nudge = prompts::nudge_to_call(
        &report_verification_spec(),
        TextProtocol::new(context.settings.tool_protocol, context.settings.tool_format),
    );
    let max_turns = context.settings.max_turns;
    let mut state = VerifyRunState::default();
    let mut last_problem = None;
    for turn in 1..=max_turns {
        context.progress(format!("waiting for the model (turn {turn}/{max_turns})"));
        let mut calls = VerifyCalls {
            context,
            input,
            tools: &tools,
            mcp_tools: &mcp_tools,
            own: &own,
            tool_context: &tool_context,
            diffs: diffs.as_deref(),
            accepted: None,
        };
        let answered = conversation
            .take_turn(context, model.clone(), &mut calls, nudge.clone())
            .await?;
        if answered.last_problem.is_some() {
            last_problem = answered.last_problem;
        }
        if let Some(accepted) = calls.accepted {
            state.accepted = Some(accepted.clone());
            conversation.commit(&state).await?;
            return Ok(accepted);
        }
        conversation.commit_later(&state)?;
    }
    conversation.flush().await?;
    Err(LoopError::TurnLimit {
        tool: REPORT_VERIFICATION,
        max_turns,
        last_problem,
    })
}

/// The verifier's tools: the read-only `tools`, `show_diff` when there is a diff, and the
/// report tool.
pub(super) fn verifier_tools(tools: &ToolRegistry, with_diff: bool) -> Vec<ToolSpec> {
    let mut specs = tools.specs();
    if with_diff {
        specs.push(show_diff_spec());
    }
    specs.push(report_verification_spec());
    specs
}

/// The estimated input tokens of a verification's first request (system prompt, tools and
/// first message, as the context budget counts them) for `diffs` and what is checked, the
/// diff bounded by `budget_tokens` as a run bounds it.
pub fn first_request_tokens(
    requirements: &[Requirement],
    tasks: &[TaskItem],
    validation_output: Option<&str>,
    diffs: &[FileDiff],
    budget_tokens: u64,
) -> u64 {
    let tools = ToolRegistry::for_loop(LoopType::Phase, false);
    let specs = verifier_tools(&tools, true);
    let changes = bounded_changes(diffs, budget_tokens / DIFF_SHARE_OF_BUDGET);
    let first = request::first_message(
        &VerificationScope::Phase("bench".to_owned()),
        requirements,
        tasks,
        validation_output,
        Some(&changes),
    );
    let system = system_prompt("bench", &tools.names(), true);
    estimate_text(&system)
        + estimate_text(&serde_json::to_string(&specs).unwrap_or_default())
        + estimate_text(&first)
}

/// Writes the run's start (its first message) to the verification's own journal.
async fn start(context: &LoopContext, journal: &Journal, first: &Message) -> Result<(), LoopError> {
    let (journal, first) = (journal.clone(), first.clone());
    context
        .store(move |_, _| {
            journal
                .append(
                    &Journal::run_start_entries(&first, Vec::new()),
                    &VerifyRunState::default(),
                )
                .map_err(|source| LoopError::Artifact {
                    kind: "verification journal",
                    source,
                })
        })
        .await
}

/// The loop's tokens as its record has them now (another conversation of the loop may have
/// spent since it started).
async fn loop_usage(context: &LoopContext) -> Result<Usage, LoopError> {
    let id = context.record.id.clone();
    let record = context.store(move |db, _| Ok(db.get(&id)?)).await?;
    let record = record.unwrap_or_else(|| context.record.clone());
    Ok(Usage {
        input_tokens: record.tokens_in,
        output_tokens: record.tokens_out,
        ..Usage::default()
    })
}

/// The changes recorded by the baseline in `loop_dir`, one diff per file.
async fn changed_files(
    context: &LoopContext,
    loop_dir: PathBuf,
) -> Result<Vec<FileDiff>, LoopError> {
    let root = context.root.clone();
    let reading = tokio::task::spawn_blocking(move || Baseline::at(&loop_dir).file_diffs(&root));
    // A cancel does not wait for a large tree's diff: the read ends on its own, unheeded.
    let diffs = tokio::select! {
        read = reading => read
            .map_err(|err| LoopError::Validation(format!("reading the changes crashed: {err}")))?,
        () = context.cancel.cancelled() => return Err(LoopError::Cancelled),
    };
    match diffs {
        Ok(diffs) => Ok(diffs),
        // Nothing recorded, nothing changed.
        Err(BaselineError::Missing) => Ok(Vec::new()),
        Err(err) => Err(LoopError::Artifact {
            kind: "baseline",
            source: std::io::Error::other(err.to_string()),
        }),
    }
}

/// The calls of one turn of a verification.
struct VerifyCalls<'a> {
    context: &'a LoopContext,
    input: &'a VerificationInput,
    tools: &'a ToolRegistry,
    mcp_tools: &'a McpTools,
    own: &'a [&'static str],
    tool_context: &'a ToolContext,
    diffs: Option<&'a [FileDiff]>,
    /// The report, once one passed its checks in this turn.
    accepted: Option<StoredVerification>,
}

#[async_trait]
impl CallHandler for VerifyCalls<'_> {
    async fn answer(
        &mut self,
        call: ToolCall,
        _conversation: &[Arc<Message>],
    ) -> Result<CallResult, LoopError> {
        if call.name == REPORT_VERIFICATION {
            if self.accepted.is_some() {
                return Ok(CallResult::error(
                    "the verification is already reported".to_owned(),
                ));
            }
            return self.report(call.input).await;
        }
        if call.name == SHOW_DIFF
            && let Some(diffs) = self.diffs
        {
            return Ok(show_diff(diffs, call.input));
        }
        tool_call(
            self.context,
            self.own,
            self.tools,
            self.mcp_tools,
            self.tool_context,
            &call.name,
            call.input,
        )
        .await
    }

    /// The report goes last, so what the turn read comes first.
    fn order(&self, calls: &mut Vec<ToolCall>) {
        calls.sort_by_key(|call| call.name == REPORT_VERIFICATION);
    }
}

impl VerifyCalls<'_> {
    async fn report(&mut self, input: serde_json::Value) -> Result<CallResult, LoopError> {
        let context = self.context;
        let report = match parse_input::<VerificationReport>(REPORT_VERIFICATION, input) {
            Ok(report) => report,
            Err(err) => return Ok(CallResult::error(err.to_string())),
        };
        let checked: Vec<String> = self
            .input
            .requirements
            .iter()
            .map(|requirement| requirement.id.clone())
            .collect();
        let (root, policy, owned_report, owned_checked) = (
            context.root.clone(),
            self.tool_context.policy.clone(),
            report.clone(),
            checked.clone(),
        );
        // Counting lines reads files: off the async threads, and given up on cancel.
        let checking = tokio::task::spawn_blocking(move || {
            let problems = finding_problems(&owned_report, &owned_checked, &mut |file| {
                line_count(&root, &policy, file)
            });
            let mut cited = owned_report;
            cite_checked_paths(&root, &mut cited);
            (problems, cited)
        });
        let (problems, report) = tokio::select! {
            biased;
            _ = context.cancel.cancelled() => return Err(LoopError::Cancelled),
            checked = checking => checked.map_err(|err| {
                LoopError::Validation(format!("checking the findings crashed: {err}"))
            })?,
        };
        if !problems.is_empty() {
            context.progress(format!(
                "the report had {} problem(s); asking the model to fix them",
                problems.len()
            ));
            return Ok(CallResult::error(format!(
                "The report was not accepted; call {REPORT_VERIFICATION} again with these fixed:\n- {}",
                problems.join("\n- ")
            )));
        }
        let block_on = context.settings.verify.block_on;
        let stored = StoredVerification {
            scope: self.input.scope.clone(),
            at: now_rfc3339(),
            requirements: checked,
            artifact_iteration: context
                .record
                .triggered_by
                .as_deref()
                .and_then(iteration_of),
            round: self.input.round,
            block_on,
            blocking: report.blocks(block_on),
            report,
        };
        let text = format!(
            "Recorded: {} with {} finding(s).",
            if stored.blocking {
                "blocking"
            } else {
                "passing"
            },
            stored.report.findings.len()
        );
        self.accepted = Some(stored);
        Ok(CallResult::ok(text))
    }
}

/// `show_diff`'s answer: a page of the file's diff (from line `offset`, at most `limit`
/// lines and `SHOW_DIFF_MAX_BYTES`, ending with where the next page starts), or the changed
/// files to choose from.
fn show_diff(diffs: &[FileDiff], input: serde_json::Value) -> CallResult {
    let wanted = match parse_input::<ShowDiffInput>(SHOW_DIFF, input) {
        Ok(wanted) => wanted,
        Err(err) => return CallResult::error(err.to_string()),
    };
    let file = wanted.file.trim().trim_start_matches("./");
    match diffs.iter().find(|diff| diff.path == file) {
        Some(diff) => diff_page(
            &diff.diff,
            wanted.offset.unwrap_or(1).max(1),
            wanted.limit.unwrap_or(usize::MAX).max(1),
        ),
        None if diffs.is_empty() => CallResult::error("no file was changed".to_owned()),
        None => CallResult::error(format!(
            "{file} was not changed; the changed files are {}",
            request::file_list(
                &diffs
                    .iter()
                    .map(|diff| diff.path.clone())
                    .collect::<Vec<_>>()
            )
        )),
    }
}

/// Lines `offset..` of `diff` (from 1), at most `limit` of them and `SHOW_DIFF_MAX_BYTES`;
/// a line longer than a page is cut. A page that leaves lines says how to read on.
fn diff_page(diff: &str, offset: usize, limit: usize) -> CallResult {
    let total = diff.lines().count();
    if offset > total {
        return CallResult::error(format!(
            "the diff has {total} line{}, so offset {offset} is past its end; call again with an \
             offset from 1 to {total}",
            if total == 1 { "" } else { "s" }
        ));
    }
    let mut page = String::new();
    let mut next = offset;
    for line in diff.lines().skip(offset - 1).take(limit) {
        if page.len() + line.len() + 1 > SHOW_DIFF_MAX_BYTES {
            if page.is_empty() {
                let cut = crate::markdown::char_boundary_at_or_before(line, SHOW_DIFF_MAX_BYTES);
                page.push_str(&line[..cut]);
                page.push_str(" [line cut]\n");
                next += 1;
            }
            break;
        }
        page.push_str(line);
        page.push('\n');
        next += 1;
    }
    if next <= total {
        page.push_str(&format!(
            "[{} more lines, call again with offset={next}]\n",
            total + 1 - next
        ));
    }
    CallResult::ok(page)
}

/// Writes `verification` atomically beside the artifact of `artifact_loop` (the latest one
/// of that phase or spec) and tells the shells, which name it `label` (the phase's or
/// spec's name).
pub async fn record_verification(
    context: &LoopContext,
    artifact_loop: &LoopId,
    label: String,
    verification: &StoredVerification,
) -> Result<(), LoopError> {
    let json = serde_json::to_vec_pretty(verification).map_err(|err| LoopError::Artifact {
        kind: "verification",
        source: std::io::Error::other(err),
    })?;
    let artifact_loop = artifact_loop.clone();
    context
        .store(move |_, layout| {
            write_atomic(&layout.verification(&artifact_loop), &json).map_err(|source| {
                LoopError::Artifact {
                    kind: "verification",
                    source,
                }
            })
        })
        .await?;
    context.events.emit(LoopEvent::VerificationFinished {
        loop_id: context.record.id.clone(),
        root: context.root.path().to_path_buf(),
        label,
        verification: verification.clone(),
    });
    Ok(())
}

/// `show_diff`'s full schema, for the checks of every tool's schema and example.
#[cfg(test)]
pub(super) fn show_diff_schema() -> serde_json::Value {
    crate::schema::input_schema_for::<ShowDiffInput>()
}

/// A verification's first message for `phase` (one requirement, a small diff): what the
/// first-request checks measure.
#[cfg(test)]
pub(super) fn sample_first_message(phase: &crate::artifacts::PhaseArtifact) -> String {
    let diff = crate::tools::file_diff(
        "src/cli.rs",
        "struct Args {}\n",
        "struct Args {\n    version: bool,\n}\n",
    );
    request::first_message(
        &VerificationScope::Phase(phase.name.clone()),
        &[Requirement {
            id: "R1".to_owned(),
            text: "WHEN --version is given THE SYSTEM SHALL print the version".to_owned(),
            check: "cargo run -- --version prints it".to_owned(),
        }],
        &phase.tasks,
        Some("test result: ok. 3 passed"),
        Some(&bounded_changes(
            &[FileDiff {
                path: "src/cli.rs".to_owned(),
                diff,
            }],
            10_000,
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn big_diff(lines: usize) -> FileDiff {
        let mut diff = String::from("--- a/big.rs\n+++ b/big.rs\n");
        for line in 0..lines {
            diff.push_str(&format!(
                "+line {line} of a large generated fixture, padded out\n"
            ));
        }
        FileDiff {
            path: "big.rs".to_owned(),
            diff,
        }
    }

    #[test]
    fn show_diff_answers_a_large_diff_a_page_at_a_time() {
        let diffs = [big_diff(100_000)];
        let first = show_diff(&diffs, serde_json::json!({"file": "big.rs"}));
        assert!(!first.is_error, "{}", first.content);
        assert!(
            first.content.len() <= SHOW_DIFF_MAX_BYTES + 200,
            "the answer is {} bytes",
            first.content.len()
        );
        assert!(
            first.content.starts_with("--- a/big.rs\n"),
            "{}",
            &first.content[..80]
        );
        let hint = first.content.lines().last().unwrap_or_default().to_owned();
        assert!(
            hint.contains("more lines, call again with offset="),
            "the answer ends: {hint}"
        );
        let offset: usize = hint
            .rsplit("offset=")
            .next()
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|digits| digits.parse().ok())
            .unwrap();
        let next = show_diff(
            &diffs,
            serde_json::json!({"file": "big.rs", "offset": offset}),
        );
        assert!(!next.is_error, "{}", next.content);
        let first_line_shown = diffs[0].diff.lines().nth(offset - 1).unwrap();
        assert!(
            next.content.starts_with(first_line_shown),
            "page 2 starts: {}",
            &next.content[..80]
        );
        let last = show_diff(
            &diffs,
            serde_json::json!({"file": "big.rs", "offset": 100_002, "limit": 5}),
        );
        assert_eq!(
            last.content,
            "+line 99999 of a large generated fixture, padded out\n"
        );
    }
}

#[cfg(test)]
mod transcript_tests {
    use super::*;

    #[test]
    fn a_verification_loop_streams_under_its_own_id_a_code_loop_aside() {
        let verify =
            crate::store::LoopRecord::new_pending(LoopType::Verify, "task", "{}".to_owned());
        assert_eq!(
            transcript_id(&verify),
            verify.id,
            "what following the loop shows"
        );
        let code = crate::store::LoopRecord::new_pending(LoopType::Code, "task", "{}".to_owned());
        assert_eq!(
            transcript_id(&code).as_str(),
            format!("{}-verify", code.id),
            "the code loop's transcript is its own conversation"
        );
    }
}
