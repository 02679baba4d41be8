//! One turn engine for every loop: ask the model, run its tool calls, answer with their
//! results (and a note when a call was cut off, saying whether by `max_tokens` or by the
//! server's context, or a nudge when none came), and append the turn to the journal. What a
//! call does, and what ends a loop, stay with the loop (`CallHandler` and the loop's own
//! state).

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::context::{LoopContext, LoopError};
use super::context_budget::{self, ContextBudget, RereadHints, SentView};
use super::cut_off::CutOff;
use super::journal::{Entry, Journal, Replayed};
use super::progress::{AnswerProgress, describe_retry};
use super::prompts;
use super::repetition::{self, CallOutcome, GIVE_UP_AT, Repetition, Setback, TELL_AT};
use super::transcript::{LiveTranscript, emit_batch};
use crate::budget::{BudgetGuard, TreeBudget};
use crate::llm::{
    ChatRequest, ContentBlock, LlmError, Message, ProviderEvent, Role, ToolCall, ToolSpec, Turn,
    Usage,
};
use crate::pricing::ModelUsage;
use crate::store::{LoopDb, LoopId};
use crate::tools::redact_credentials;

/// The answer to one tool call.
pub(super) struct CallResult {
    pub content: String,
    pub is_error: bool,
    /// Text to add after the tool results, e.g. the next review request.
    pub follow_up: Option<String>,
}

impl CallResult {
    pub fn ok(content: String) -> CallResult {
        CallResult {
            content,
            is_error: false,
            follow_up: None,
        }
    }

    pub fn error(content: String) -> CallResult {
        CallResult {
            content,
            is_error: true,
            follow_up: None,
        }
    }
}

/// The last run stored in `journal`, read off the async threads.
pub(super) async fn stored_run<S>(
    context: &LoopContext,
    journal: &Journal,
) -> Result<Option<Replayed<S>>, LoopError>
where
    S: serde::de::DeserializeOwned + serde::Serialize + Send + 'static,
{
    let journal = journal.clone();
    context.store(move |_, _| Ok(journal.load::<S>()?)).await
}

/// Starts a new run in `journal`: its first message and the loop's state. Returns the whole
/// batches the journal then holds. See `run_start_needs_sync` for when it is waited on to
/// reach the disk.
pub(super) async fn start_run(
    context: &LoopContext,
    journal: &Journal,
    first: &Message,
    rules: Vec<String>,
    state: &impl serde::Serialize,
) -> Result<u64, LoopError> {
    let (journal, first, state) = (journal.clone(), first.clone(), state_value(state)?);
    let (hub, id) = (context.transcripts.clone(), context.record.id.clone());
    context
        .store(move |_, _| {
            let before = journal.whole_entries()?.batches;
            let entries = Journal::run_start_entries(&first, rules);
            emit_batch(&hub, &id, before, &entries);
            if run_start_needs_sync(before) {
                journal.append(&entries, &state)
            } else {
                journal.append_unsynced(&entries, &state)
            }
            .map_err(journal_write_error)?;
            hub.written(&id, before + 1);
            Ok(before + 1)
        })
        .await
}

/// Whether a run's start must be on disk before the run goes on. A loop's first run need not
/// wait (the first turn's write syncs it): a crash that loses it leaves an empty journal, and
/// the loop starts again as if it never began. A later run (a revision, a retry) must: its
/// first turn can durably store an artifact and clear the feedback that asked for it, and a
/// crash that lost the start would then resume the run before it, which had finished.
fn run_start_needs_sync(batches_before: u64) -> bool {
    batches_before > 0
}

fn state_value(state: &impl serde::Serialize) -> Result<serde_json::Value, LoopError> {
    serde_json::to_value(state).map_err(|err| journal_write_error(std::io::Error::other(err)))
}

fn journal_write_error(source: std::io::Error) -> LoopError {
    LoopError::Artifact {
        kind: "journal",
        source,
    }
}

/// What a loop does with the calls of a turn.
#[async_trait]
pub(super) trait CallHandler: Send {
    /// Runs one well-formed call. `conversation` is everything up to and including the
    /// model's answer that made the call.
    async fn answer(
        &mut self,
        call: ToolCall,
        conversation: &[Arc<Message>],
    ) -> Result<CallResult, LoopError>;

    /// The order to run a turn's calls in.
    fn order(&self, _calls: &mut Vec<ToolCall>) {}
}

/// A turn that was asked and answered, not yet in the journal.
pub(super) struct Answered {
    /// The last error one of its calls got back.
    pub last_problem: Option<String>,
}

/// A loop's conversation with the model and its journal.
pub(super) struct Conversation {
    request: ChatRequest,
    journal: Journal,
    /// Entries of the turn under way, appended at `commit`.
    pending: Vec<Entry>,
    /// The loop's tokens so far (also in its record).
    usage: Usage,
    /// The last turn, committed but not yet written: the next turn writes it first.
    unwritten: Option<UnwrittenTurn>,
    db: LoopDb,
    id: LoopId,
    /// Whose transcript its text is: the loop's, or a conversation's held aside (`aside`).
    transcript_id: LoopId,
    /// Answers in a row a text protocol could not read.
    unreadable_in_a_row: u32,
    /// The same thing going wrong turn after turn.
    repetition: Repetition,
    /// Shared with the provider's event callback while a turn is asked.
    transcript: Arc<LiveTranscript>,
    /// What is sent of `request.messages`: old results shortened to fit the budget.
    sent: SentView,
    budget: ContextBudget,
    /// The estimated tokens of the system prompt and the tools, sent with every request.
    fixed_tokens: u64,
    /// The plan tree's budget as the loop's settings have it, checked before each question
    /// unless the user has set another since (`tree_budget`).
    spend_guard: Option<BudgetGuard>,
    tree_budget: Arc<TreeBudget>,
}

struct UnwrittenTurn {
    /// Its journal batch number.
    batch: u64,
    entries: Vec<Entry>,
    state: serde_json::Value,
    tokens_in: u64,
    tokens_out: u64,
}

/// The tokens of the answers among `entries`, per model, as the journal has them.
fn usage_by_model(entries: &[Entry]) -> Vec<ModelUsage> {
    let mut spent: Vec<ModelUsage> = Vec::new();
    for entry in entries {
        let Entry::Assistant {
            model,
            usage,
            reported_usd_micros,
            ..
        } = entry
        else {
            continue;
        };
        match spent.iter_mut().find(|known| known.model == *model) {
            Some(known) => {
                known.usage.add(usage);
                known.reported_usd_micros = known
                    .reported_usd_micros
                    .saturating_add(*reported_usd_micros);
            }
            None => spent.push(ModelUsage {
                model: model.clone(),
                usage: *usage,
                reported_usd_micros: *reported_usd_micros,
            }),
        }
    }
    spent
}

/// Runs `work` on the blocking threads; a panic in it goes on unwinding here.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, LoopError> + Send + 'static,
) -> Result<T, LoopError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(join_error) if join_error.is_panic() => {
            std::panic::resume_unwind(join_error.into_panic())
        }
        Err(_) => Err(LoopError::Cancelled),
    }
}

impl Conversation {
    /// A conversation continuing `messages`, whose journal holds `batches` whole batches;
    /// `reread` is what the offered `tools` say of getting a shortened result again.
    pub fn new(
        context: &LoopContext,
        journal: Journal,
        system: String,
        tools: Arc<[ToolSpec]>,
        reread: RereadHints,
        messages: Vec<Message>,
        batches: u64,
    ) -> Conversation {
        let turns = messages
            .iter()
            .filter(|message| message.role == Role::Assistant)
            .count();
        let transcript = Arc::new(LiveTranscript::new(
            context.transcripts.clone(),
            context.record.id.clone(),
            batches,
            u32::try_from(turns).unwrap_or(u32::MAX),
        ));
        let budget = context.limits.context_budget;
        let fixed_tokens = context_budget::estimate_text(&system)
            + context_budget::estimate_text(&serde_json::to_string(&*tools).unwrap_or_default());
        let messages = crate::llm::shared(messages);
        Conversation {
            transcript,
            sent: SentView::replayed(&messages, fixed_tokens, &budget, reread),
            budget,
            fixed_tokens,
            request: ChatRequest {
                model: String::new(),
                max_tokens: context.limits.max_tokens,
                system,
                messages,
                tools,
            },
            journal,
            pending: Vec::new(),
            unwritten: None,
            db: context.db.clone(),
            id: context.record.id.clone(),
            transcript_id: context.record.id.clone(),
            unreadable_in_a_row: 0,
            repetition: Repetition::default(),
            spend_guard: BudgetGuard::of(context.settings.budget, context.settings.price_table()),
            tree_budget: context.tree_budget.clone(),
            usage: Usage {
                input_tokens: context.record.tokens_in,
                output_tokens: context.record.tokens_out,
                ..Usage::default()
            },
        }
    }

    /// Makes this a conversation held aside from the loop's own (a verification's): its live
    /// text goes under `transcript_id`, which the loop's transcript does not show (the loop
    /// says what came of it), and its tokens count on from `spent`, the loop's so far, in the
    /// loop's record.
    pub fn aside(mut self, transcript_id: LoopId, spent: Usage) -> Conversation {
        let turns = self
            .request
            .messages
            .iter()
            .filter(|message| message.role == Role::Assistant)
            .count();
        self.transcript = Arc::new(LiveTranscript::new(
            self.transcript.hub(),
            transcript_id.clone(),
            self.transcript.batch(),
            u32::try_from(turns).unwrap_or(u32::MAX),
        ));
        self.transcript_id = transcript_id;
        self.usage = spent;
        self
    }

    /// Counts on from `spent`: the loop's tokens after a conversation held aside spent some.
    pub fn count_from(&mut self, spent: Usage) {
        self.usage = spent;
    }

    /// Adds a message of ours (feedback) to the turn under way. It joins our last message
    /// if the conversation ends with one: roles alternate in what providers get.
    pub fn add_user_text(&mut self, text: String) {
        let block = ContentBlock::text(text);
        match self.request.messages.last_mut() {
            Some(last) if last.role == Role::User => {
                Arc::make_mut(last).content.push(block.clone());
            }
            _ => self.request.messages.push(Arc::new(Message {
                role: Role::User,
                content: vec![block.clone()],
            })),
        }
        let entry = Entry::User {
            content: vec![block],
        };
        self.transcript.entry(&entry);
        self.pending.push(entry);
    }

    /// Writes the kept turn and checks that the loop may go on, as `take_turn` does before
    /// it asks: `Cancelled` when it was cancelled or revised elsewhere, `BudgetReached` when
    /// its tree has spent its budget.
    pub async fn go_on(&mut self) -> Result<(), LoopError> {
        if self.write_then_check().await? {
            Ok(())
        } else {
            Err(LoopError::Cancelled)
        }
    }

    /// The conversation so far, whole.
    pub fn messages(&self) -> &[Arc<Message>] {
        &self.request.messages
    }

    /// Text a coding agent streamed (a loop run by an agent over ACP), shown as it comes.
    pub fn agent_text(&self, delta: &str) {
        self.transcript.text_delta(delta);
    }

    /// A coding agent's whole turn (its text, its tool calls, what it spent, as `model`,
    /// and the cost it reported), added to the turn under way as the model's answer would be;
    /// `results` (how each call ended) follow as our message.
    pub fn add_agent_turn(
        &mut self,
        content: Vec<ContentBlock>,
        results: Vec<ContentBlock>,
        model: String,
        usage: Usage,
        reported_usd_micros: u64,
    ) {
        self.usage.input_tokens = self.usage.input_tokens.saturating_add(usage.total_input());
        self.usage.output_tokens = self.usage.output_tokens.saturating_add(usage.output_tokens);
        self.transcript
            .answer_end(&content, &model, &usage, None, &[]);
        self.request.messages.push(Arc::new(Message {
            role: Role::Assistant,
            content: content.clone(),
        }));
        self.pending.push(Entry::Assistant {
            content,
            model,
            usage,
            stop_reason: None,
            truncated_tool_calls: Vec::new(),
            reported_usd_micros,
        });
        if !results.is_empty() {
            self.request.messages.push(Arc::new(Message {
                role: Role::User,
                content: results.clone(),
            }));
            let entry = Entry::User { content: results };
            self.transcript.entry(&entry);
            self.pending.push(entry);
        }
    }

    /// One turn: asks `model`, runs the calls through `handler`, and adds the answer and the
    /// results to the conversation. `nudge` is what the model is told when it called nothing.
    pub async fn take_turn(
        &mut self,
        context: &LoopContext,
        model: String,
        handler: &mut dyn CallHandler,
        nudge: String,
    ) -> Result<Answered, LoopError> {
        // The last turn is on disk before the next question goes out: a host killed while
        // the model answers loses only the turn in flight. A cancel or revision from another
        // host (another Neovim, the CLI) reaches this one only through the store: checked in
        // the same trip to the blocking threads.
        if !self.write_then_check().await? {
            tracing::info!(loop_id = %context.record.id, "cancelled or invalidated elsewhere; stopping");
            return Err(LoopError::Cancelled);
        }
        self.request.model = model;
        let retries = Mutex::new(Vec::new());
        let answer_progress = Mutex::new(AnswerProgress::offering(self.request.tools.clone()));
        let transcript = self.transcript.clone();
        let on_provider_event = |event: ProviderEvent| {
            match &event {
                ProviderEvent::TextDelta { text } => transcript.text_delta(text),
                ProviderEvent::Retrying {
                    attempt,
                    delay,
                    reason,
                    ..
                } => {
                    let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
                    transcript.retry(*attempt, delay_ms, reason);
                    retries
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(Entry::Retry {
                            attempt: *attempt,
                            delay_ms,
                            reason: reason.clone(),
                        });
                }
                ProviderEvent::ToolCallStarted { .. } | ProviderEvent::ToolInputDelta { .. } => {}
            }
            if let Some(retry) = describe_retry(&event) {
                context.progress(retry);
            }
            let report = answer_progress
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .on_event(&event, tokio::time::Instant::now());
            if let Some(report) = report {
                context.answer_progress(report);
            }
        };
        let (turn, usage) = self.ask(context, &on_provider_event).await?;
        let cut_off = CutOff::of(&turn, &usage, self.request.max_tokens);
        if let Some(CutOff::ContextWindow { window, .. }) = cut_off {
            tracing::warn!(loop_id = %context.record.id, window, "the server stopped the answer well before max_tokens, probably at its context window");
        }
        self.pending.extend(
            retries
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        self.usage.input_tokens = self.usage.input_tokens.saturating_add(usage.total_input());
        self.usage.output_tokens = self.usage.output_tokens.saturating_add(usage.output_tokens);
        self.transcript.answer_end(
            &turn.content,
            &self.request.model,
            &usage,
            turn.stop_reason.as_ref(),
            &turn.truncated_tool_calls,
        );
        self.pending.push(Entry::Assistant {
            content: turn.content.clone(),
            model: self.request.model.clone(),
            usage,
            stop_reason: turn.stop_reason.clone(),
            truncated_tool_calls: turn.truncated_tool_calls.clone(),
            reported_usd_micros: 0,
        });
        self.request.messages.push(Arc::new(Message {
            role: Role::Assistant,
            content: turn.content.clone(),
        }));
        if let Some(feedback) = turn.unreadable {
            let feedback = match &cut_off {
                Some(cut_off) => format!("{}\n{feedback}", prompts::cut_off_reply_note(cut_off)),
                None => feedback,
            };
            return self.answer_unreadable(context, feedback);
        }
        self.unreadable_in_a_row = 0;

        let mut calls = turn.tool_calls();
        handler.order(&mut calls);
        let called = !calls.is_empty();
        let mut reply = Vec::new();
        let mut follow_ups = Vec::new();
        let mut last_problem = None;
        let mut outcomes = Vec::with_capacity(calls.len());
        for call in calls {
            let id = call.id.clone();
            let mut outcome = CallOutcome {
                name: call.name.clone(),
                input: call.input.clone(),
                error: None,
            };
            let mut result = match call.input_error.as_deref() {
                Some(problem) => CallResult::error(prompts::unusable_input(&call.name, problem)),
                None => handler.answer(call, &self.request.messages).await?,
            };
            // Whatever a tool read (a remote in .git/config, a command's output) goes to the
            // provider, the journal and the screen: never a credential in a URL.
            if let Cow::Owned(redacted) = redact_credentials(&result.content) {
                result.content = redacted;
            }
            follow_ups.extend(result.follow_up);
            if result.is_error {
                last_problem = Some(result.content.clone());
                outcome.error = Some(result.content.clone());
            }
            outcomes.push(outcome);
            reply.push(ContentBlock::ToolResult {
                id,
                content: result.content,
                is_error: result.is_error,
            });
        }
        let note = if !turn.truncated_tool_calls.is_empty() {
            Some(prompts::truncated_tool_call_note(
                &turn.truncated_tool_calls,
                &cut_off.unwrap_or(CutOff::TokenLimit {
                    max_tokens: self.request.max_tokens,
                }),
            ))
        } else {
            (!called).then_some(nudge)
        };
        let setback = match &note {
            Some(note) if !called => Some(Setback::NothingDone(note.clone())),
            _ => Setback::of_calls(outcomes),
        };
        follow_ups.extend(note);
        follow_ups.extend(self.check_repetition(context, setback)?);
        reply.extend(follow_ups.into_iter().map(ContentBlock::text));
        self.request.messages.push(Arc::new(Message {
            role: Role::User,
            content: reply.clone(),
        }));
        let entry = Entry::User { content: reply };
        self.transcript.entry(&entry);
        self.pending.push(entry);
        Ok(Answered { last_problem })
    }

    /// Sends the conversation within its budget. A provider that still finds it too long (the
    /// budget is more than the model takes) is asked once more, with the budget lowered to
    /// half of what it refused for the rest of the run. Returns the answer and its tokens:
    /// the server's count, else (a server that reports none) estimated from the request as
    /// sent and the answer.
    async fn ask(
        &mut self,
        context: &LoopContext,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
    ) -> Result<(Turn, Usage), LlmError> {
        let (turn, sent) = self.ask_within_budget(context, on_event).await?;
        let usage = match turn.usage {
            Some(usage) => usage,
            None => {
                tracing::debug!(loop_id = %context.record.id, "the server reported no usage; estimating the tokens");
                let calls = context.provider.calls_sent();
                Usage {
                    input_tokens: context_budget::estimate_sent(
                        &sent.messages,
                        self.fixed_tokens,
                        calls,
                    ),
                    output_tokens: context_budget::estimate_blocks_sent(&turn.content, calls),
                    estimated: true,
                    ..Usage::default()
                }
            }
        };
        Ok((turn, usage))
    }

    /// `ask`'s sending: the answer, and the request that got it.
    async fn ask_within_budget(
        &mut self,
        context: &LoopContext,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
    ) -> Result<(Turn, ChatRequest), LlmError> {
        let request = self.request_to_send();
        match context
            .provider
            .complete(&request, on_event, &context.cancel)
            .await
        {
            Err(err) if err.is_context_overflow() => {
                let refused = context_budget::estimate(&request.messages, self.fixed_tokens);
                self.budget.tokens = self.budget.tokens.min(refused / 2);
                tracing::warn!(
                    loop_id = %context.record.id,
                    refused_tokens = refused,
                    budget = self.budget.tokens,
                    error = %err,
                    "the model found the conversation too long; lowering the context budget"
                );
                context.progress("the conversation was too long for the model; shortening it");
                let request = self.request_to_send();
                let turn = context
                    .provider
                    .complete(&request, on_event, &context.cancel)
                    .await?;
                Ok((turn, request))
            }
            other => Ok((other?, request)),
        }
    }

    /// The request as sent: the conversation within its context budget. The journal and
    /// the calls' handlers keep the whole conversation.
    fn request_to_send(&mut self) -> ChatRequest {
        ChatRequest {
            messages: self
                .sent
                .messages(&self.request.messages, self.fixed_tokens, &self.budget),
            ..self.request.clone()
        }
    }

    /// Records the turn's setback (none: it went well). The same one `GIVE_UP_AT` times in a
    /// row ends the loop, saying what kept going wrong; from `TELL_AT` on, returns what to tell
    /// the model.
    fn check_repetition(
        &mut self,
        context: &LoopContext,
        setback: Option<Setback>,
    ) -> Result<Option<String>, LoopError> {
        let times = self.repetition.record(setback);
        let Some(setback) = self.repetition.current().filter(|_| times >= TELL_AT) else {
            return Ok(None);
        };
        let what = repetition::describe(setback, times);
        tracing::info!(loop_id = %context.record.id, times, what = %what, "the model repeats a setback");
        if times >= GIVE_UP_AT {
            return Err(LoopError::Repeating { what });
        }
        context.progress(format!("the model repeats itself: {what}"));
        Ok(Some(match setback {
            Setback::FailedCalls(_) => prompts::repeated_failure_note(times, GIVE_UP_AT),
            _ => prompts::repeated_inaction_note(times, GIVE_UP_AT),
        }))
    }

    /// An answer the text protocol could not read: nothing of it runs, and the model is told
    /// what was wrong until it has failed `max_format_retries` times in a row (that setting,
    /// not `GIVE_UP_AT`, ends a run of unreadable answers, the same or not); the same problem
    /// a `TELL_AT`th time in a row is pointed out.
    fn answer_unreadable(
        &mut self,
        context: &LoopContext,
        feedback: String,
    ) -> Result<Answered, LoopError> {
        self.unreadable_in_a_row += 1;
        let same_in_a_row = self
            .repetition
            .record(Some(Setback::Unreadable(feedback.clone())));
        tracing::info!(
            loop_id = %context.record.id,
            in_a_row = self.unreadable_in_a_row,
            feedback = %feedback,
            "answer did not follow the tool protocol"
        );
        if self.unreadable_in_a_row > context.settings.max_format_retries {
            return Err(LoopError::UnreadableAnswers {
                protocol: context.settings.tool_protocol.as_str(),
                answers: self.unreadable_in_a_row,
                last_problem: feedback,
            });
        }
        context.progress("the answer did not follow the tool protocol; asking again");
        let told = if same_in_a_row >= TELL_AT {
            format!(
                "{feedback}\n\n{}",
                prompts::repeated_unreadable_note(same_in_a_row)
            )
        } else {
            feedback.clone()
        };
        self.add_user_text(told);
        Ok(Answered {
            last_problem: Some(feedback),
        })
    }

    /// Appends the turn under way and the loop's `state` after it to the journal, and the
    /// loop's tokens to its record, and waits until they are written.
    pub async fn commit(&mut self, state: &impl serde::Serialize) -> Result<(), LoopError> {
        self.commit_later(state)?;
        self.flush().await
    }

    /// Writes the turn kept by `commit_later`, if any.
    pub async fn flush(&mut self) -> Result<(), LoopError> {
        let write = self.write_unwritten();
        blocking(write).await
    }

    /// Keeps the turn under way and the loop's `state` after it, to be written (with the
    /// loop's tokens) when the next turn starts, with its check that the loop is still
    /// wanted. A loop that ends instead calls `flush` (or `commit`).
    pub fn commit_later(&mut self, state: &impl serde::Serialize) -> Result<(), LoopError> {
        debug_assert!(self.unwritten.is_none(), "one unwritten turn at a time");
        self.unwritten = Some(UnwrittenTurn {
            batch: self.transcript.batch(),
            entries: std::mem::take(&mut self.pending),
            state: state_value(state)?,
            tokens_in: self.usage.input_tokens,
            tokens_out: self.usage.output_tokens,
        });
        self.transcript.next_batch();
        Ok(())
    }

    /// Writes the kept turn, then asks the store whether the loop is still wanted and, with
    /// a budget, whether its plan tree may spend more (`LoopError::BudgetReached` if not: the
    /// loop stops before asking, its journal whole).
    async fn write_then_check(&mut self) -> Result<bool, LoopError> {
        let write = self.write_unwritten();
        let budget = self.tree_budget.guard_or(self.spend_guard.clone());
        let (db, id) = (self.db.clone(), self.id.clone());
        blocking(move || {
            write()?;
            if !db.still_wanted(&id)? {
                return Ok(false);
            }
            if let Some(budget) = budget {
                let spend = db.tree_spend(&id)?;
                if let Some(reached) = budget.reached(&spend.usage, spend.grant) {
                    return Err(LoopError::BudgetReached {
                        root: spend.root,
                        reached,
                    });
                }
            }
            Ok(true)
        })
        .await
    }

    /// The blocking work of writing the kept turn (nothing when there is none).
    fn write_unwritten(&mut self) -> impl FnOnce() -> Result<(), LoopError> + Send + 'static {
        let unwritten = self.unwritten.take();
        let (db, id, journal) = (self.db.clone(), self.id.clone(), self.journal.clone());
        let transcripts = self.transcript.hub();
        let transcript_id = self.transcript_id.clone();
        move || {
            let Some(turn) = unwritten else {
                return Ok(());
            };
            journal
                .append(&turn.entries, &turn.state)
                .map_err(journal_write_error)?;
            transcripts.written(&transcript_id, turn.batch + 1);
            let spent = usage_by_model(&turn.entries);
            Ok(db.add_turn_usage(&id, turn.tokens_in, turn.tokens_out, &spent)?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::run_start_needs_sync;

    #[test]
    fn only_a_run_after_an_earlier_one_waits_for_its_start_to_reach_the_disk() {
        assert!(!run_start_needs_sync(0), "a loop's first run");
        assert!(run_start_needs_sync(1), "a revision after the first run");
        assert!(run_start_needs_sync(7), "a retry after several turns");
    }
}
