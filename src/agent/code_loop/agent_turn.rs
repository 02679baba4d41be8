//! One turn of a coding agent: `session/prompt` sent, and until the agent answers it, what
//! it sends served at once: its `session/update`s into the transcript (text as it streams,
//! its tool calls and their status, its plan, also as a `LoopEvent::AgentPlan`, its usage)
//! and its requests through the loop's `AgentClient`, concurrently (a `terminal/wait_for_exit`
//! waits while others are served). A cancel, or the tree's budget reached, sends
//! `session/cancel` and waits a bounded while for the agent to stop.

use std::collections::BTreeMap;
use std::time::Duration;

use agent_client_protocol::v1::schema::{
    CancelNotification, ContentBlock as AcpContent, PlanEntryStatus, PromptRequest, SessionUpdate,
    StopReason, TextContent, ToolCallStatus, UsageUpdate,
};
use futures::StreamExt;
use futures::stream::FuturesUnordered;

use super::agent_session::AgentSession;
use crate::acp::FromAgent;
use crate::agent::agent_client::{AgentClient, kind_word};
use crate::agent::context::{LoopContext, LoopError};
use crate::agent::events::{AgentPlanEntry, LoopEvent};
use crate::agent::turn::Conversation;
use crate::budget::BudgetGuard;
use crate::llm::{ContentBlock, Usage};
use crate::pricing::ModelUsage;

/// How long one turn of an agent may take: it writes a whole phase, running commands.
const TURN_TIMEOUT: Duration = Duration::from_secs(60 * 60);
/// How long an agent sent `session/cancel` has to end its turn before it is stopped.
const CANCEL_GRACE: Duration = Duration::from_secs(5);

/// What the agent did in a turn, as the loop's journal keeps it.
#[derive(Debug, Default)]
pub(super) struct AgentTurn {
    /// Its text and tool calls in the order they came, then its plan.
    pub content: Vec<ContentBlock>,
    /// How each tool call ended (its status), in the order they were made.
    pub results: Vec<ContentBlock>,
    /// The tokens it reported: the most its context held (`usage_update`).
    pub usage: Usage,
    /// Why Loopr stopped it (a cancel, the budget): the loop ends with it once what the
    /// agent did is kept.
    pub stopped: Option<LoopError>,
    calls: BTreeMap<String, ToolCallSeen>,
    plan: Vec<AgentPlanEntry>,
}

#[derive(Debug)]
struct ToolCallSeen {
    order: usize,
    title: String,
    status: ToolCallStatus,
}

/// Sends `prompt` in `session` and serves the agent until it ends its turn, or until Loopr
/// stopped it (`AgentTurn::stopped`). `model` names the agent in the loop's usage, `phase`
/// in its plan's event.
pub(super) async fn take_turn(
    context: &LoopContext,
    session: &mut AgentSession,
    client: &AgentClient,
    conversation: &Conversation,
    prompt: String,
    model: &str,
    phase: &str,
) -> Result<AgentTurn, LoopError> {
    let connection = session.agent.connection().clone();
    let session_id = session.id.clone();
    let request = PromptRequest::new(
        session_id.clone(),
        vec![AcpContent::Text(TextContent::new(prompt))],
    );
    let guard = context.tree_budget.guard_or(BudgetGuard::of(
        context.settings.budget,
        context.settings.price_table(),
    ));
    let mut turn = AgentTurn::default();
    let mut serving = FuturesUnordered::new();
    let mut stopping: Option<(LoopError, tokio::time::Instant)> = None;
    let answer = session
        .agent
        .request("session/prompt", request, TURN_TIMEOUT);
    tokio::pin!(answer);
    let from_agent = &mut session.from_agent;
    let stop = |why: LoopError, stopping: &mut Option<(LoopError, tokio::time::Instant)>| {
        if stopping.is_none() {
            tracing::info!(loop_id = %context.record.id, reason = %why, "asking the coding agent to stop");
            if let Err(err) =
                connection.send_notification(CancelNotification::new(session_id.clone()))
            {
                tracing::debug!("sending session/cancel: {err}");
            }
            *stopping = Some((why, tokio::time::Instant::now() + CANCEL_GRACE));
        }
    };
    // The agent's updates come before its answer, but on another way in: once it answered,
    // what it sent before is taken in first.
    let mut answered = None;
    let ended = loop {
        let deadline = stopping
            .as_ref()
            .map_or_else(far_future, |(_, deadline)| *deadline);
        let step = if answered.is_some() {
            match from_agent.try_recv() {
                Ok(message) => Step::Message(message),
                Err(_) => break answered,
            }
        } else {
            tokio::select! {
                biased;
                _ = context.cancel.cancelled(), if stopping.is_none() => Step::Cancel,
                _ = tokio::time::sleep_until(deadline) => break None,
                Some(message) = from_agent.next() => Step::Message(message),
                answer = &mut answer => Step::Answered(answer),
                Some(()) = serving.next(), if !serving.is_empty() => Step::Served,
            }
        };
        match step {
            Step::Cancel => stop(LoopError::Cancelled, &mut stopping),
            Step::Answered(answer) => answered = Some(answer),
            Step::Message(FromAgent::Update(notification)) => {
                let usage = turn.update(context, conversation, notification.update, phase);
                if let (Some(usage), Some(guard)) = (usage, guard.as_ref())
                    && let Some(reached) = budget_reached(context, guard, model, usage).await?
                {
                    stop(reached, &mut stopping);
                }
            }
            Step::Message(request) => serving.push(client.serve(request)),
            Step::Served => {}
        }
    };
    // What the agent asked and was not yet answered gets its answer before the turn ends.
    let _ = tokio::time::timeout(CANCEL_GRACE, async {
        while serving.next().await.is_some() {}
    })
    .await;
    if let Some((why, _)) = stopping {
        turn.finish(conversation);
        turn.stopped = Some(why);
        return Ok(turn);
    }
    match ended {
        Some(Ok(response)) => {
            if response.stop_reason != StopReason::EndTurn {
                tracing::info!(loop_id = %context.record.id, stop = ?response.stop_reason, "the coding agent ended its turn early");
            }
            turn.finish(conversation);
            Ok(turn)
        }
        Some(Err(err)) => Err(err.into()),
        None => Err(LoopError::Cancelled),
    }
}

/// What happened next while the agent takes its turn.
enum Step<Answer> {
    Cancel,
    Answered(Answer),
    Message(FromAgent),
    Served,
}

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(365 * 24 * 3600)
}

/// Whether the tree's spend, with the turn's `usage` so far, reaches `guard`'s budget.
async fn budget_reached(
    context: &LoopContext,
    guard: &BudgetGuard,
    model: &str,
    usage: Usage,
) -> Result<Option<LoopError>, LoopError> {
    let id = context.record.id.clone();
    let spend = context.store(move |db, _| Ok(db.tree_spend(&id)?)).await?;
    let mut spent = spend.usage;
    spent.push(ModelUsage {
        model: model.to_owned(),
        usage,
    });
    Ok(guard
        .reached(&spent, spend.grant)
        .map(|reached| LoopError::BudgetReached {
            root: spend.root,
            reached,
        }))
}

impl AgentTurn {
    /// Takes one update in; returns the turn's usage when it changed.
    fn update(
        &mut self,
        context: &LoopContext,
        conversation: &Conversation,
        update: SessionUpdate,
        phase: &str,
    ) -> Option<Usage> {
        match update {
            SessionUpdate::AgentMessageChunk(chunk) => {
                if let AcpContent::Text(text) = chunk.content {
                    conversation.agent_text(&text.text);
                    self.text(&text.text);
                }
            }
            SessionUpdate::ToolCall(call) => {
                context.progress(format!("the agent: {}", call.title));
                let id = call.tool_call_id.to_string();
                let input = serde_json::json!({ "kind": kind_word(call.kind) });
                self.content.push(ContentBlock::tool_call(
                    id.clone(),
                    call.title.clone(),
                    input,
                ));
                let order = self.calls.len();
                self.calls.insert(
                    id,
                    ToolCallSeen {
                        order,
                        title: call.title,
                        status: call.status,
                    },
                );
            }
            SessionUpdate::ToolCallUpdate(update) => {
                let id = update.tool_call_id.to_string();
                let order = self.calls.len();
                let seen = self.calls.entry(id).or_insert_with(|| ToolCallSeen {
                    order,
                    title: "tool call".to_owned(),
                    status: ToolCallStatus::Pending,
                });
                if let Some(title) = update.fields.title {
                    seen.title = title;
                }
                if let Some(status) = update.fields.status {
                    seen.status = status;
                }
            }
            SessionUpdate::Plan(plan) => {
                self.plan = plan
                    .entries
                    .into_iter()
                    .map(|entry| AgentPlanEntry {
                        content: entry.content,
                        status: plan_status_word(&entry.status),
                    })
                    .collect();
                context.events.emit(LoopEvent::AgentPlan {
                    loop_id: context.record.id.clone(),
                    phase: phase.to_owned(),
                    entries: self.plan.clone(),
                });
            }
            SessionUpdate::UsageUpdate(UsageUpdate { used, .. })
                if used > self.usage.input_tokens =>
            {
                self.usage.input_tokens = used;
                return Some(self.usage);
            }
            _ => {}
        }
        None
    }

    fn text(&mut self, text: &str) {
        match self.content.last_mut() {
            Some(ContentBlock::Text { text: last }) => last.push_str(text),
            _ => self.content.push(ContentBlock::text(text)),
        }
    }

    /// The turn ended: its plan joins its text, and its tool calls' results are known.
    fn finish(&mut self, conversation: &Conversation) {
        if !self.plan.is_empty() {
            let mut shown = String::from("\n\n**The agent's plan:**\n\n");
            for entry in &self.plan {
                let mark = match entry.status {
                    "completed" => "x",
                    "in_progress" => "~",
                    _ => " ",
                };
                shown.push_str(&format!("- [{mark}] {}\n", entry.content));
            }
            conversation.agent_text(&shown);
            self.content.push(ContentBlock::text(shown));
        }
        let mut calls: Vec<(&String, &ToolCallSeen)> = self.calls.iter().collect();
        calls.sort_by_key(|(_, seen)| seen.order);
        self.results = calls
            .into_iter()
            .map(|(id, seen)| ContentBlock::ToolResult {
                id: id.clone(),
                content: format!("{}: {}", seen.title, status_word(&seen.status)),
                is_error: seen.status == ToolCallStatus::Failed,
            })
            .collect();
    }
}

/// `kind` as ACP spells it (`read`, `execute`, ...).
fn status_word(status: &ToolCallStatus) -> &'static str {
    match status {
        ToolCallStatus::Pending => "pending",
        ToolCallStatus::InProgress => "in progress",
        ToolCallStatus::Completed => "completed",
        ToolCallStatus::Failed => "failed",
        _ => "unknown",
    }
}

fn plan_status_word(status: &PlanEntryStatus) -> &'static str {
    match status {
        PlanEntryStatus::InProgress => "in_progress",
        PlanEntryStatus::Completed => "completed",
        _ => "pending",
    }
}
