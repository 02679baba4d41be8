//! One turn of a coding agent: `session/prompt` sent, and until the agent answers it, what
//! it sends served at once: its `session/update`s into the transcript (text as it streams,
//! its tool calls and their status, its plan, also as a `LoopEvent::AgentPlan`, its usage and
//! cost) and its requests through the loop's `AgentClient`, concurrently (a
//! `terminal/wait_for_exit` waits while others are served), at most `MAX_IN_FLIGHT` at once:
//! at the cap Loopr stops reading, so a flooding agent backs up on its own pipe. What it sent
//! before its answer is taken in after it, within bounds (`DRAIN_MESSAGES`, `DRAIN_TIME`), a
//! cancel still heard. A cancel, or the tree's budget reached, sends `session/cancel`, drops
//! the requests being served (the agent is told they failed) and waits a bounded while for
//! the agent to stop. What a turn keeps is bounded too (`kept`); what it spent is `spend`'s.

mod kept;
mod spend;

use std::collections::BTreeMap;
use std::time::Duration;

use agent_client_protocol::v1::schema::{
    CancelNotification, ContentBlock as AcpContent, PlanEntryStatus, PromptRequest, SessionUpdate,
    StopReason, TextContent, ToolCallStatus,
};
use futures::StreamExt;
use futures::channel::mpsc::Receiver;
use futures::stream::FuturesUnordered;

use super::agent_session::AgentSession;
use crate::acp::FromAgent;
use crate::agent::agent_client::{AgentClient, kind_word};
use crate::agent::context::{LoopContext, LoopError};
use crate::agent::events::{AgentPlanEntry, LoopEvent};
use crate::agent::turn::Conversation;
use crate::budget::BudgetGuard;
use crate::llm::{ContentBlock, Usage};
pub(super) use spend::AgentMeter;

/// How long one turn of an agent may take: it writes a whole phase, running commands.
const TURN_TIMEOUT: Duration = Duration::from_secs(60 * 60);
/// How long an agent sent `session/cancel` has to end its turn before it is stopped.
const CANCEL_GRACE: Duration = Duration::from_secs(5);
/// The agent's requests served at once; past it, Loopr reads nothing more from the agent.
const MAX_IN_FLIGHT: usize = 8;
/// What is taken in, at most, of what the agent sent before its answer: the rest waits for
/// the next turn (or is dropped with the agent), so an agent that floods Loopr after its
/// answer cannot keep a turn from ending.
const DRAIN_MESSAGES: usize = 1024;
const DRAIN_TIME: Duration = Duration::from_secs(2);

/// What the agent did in a turn, as the loop's journal keeps it.
#[derive(Debug, Default)]
pub(super) struct AgentTurn {
    /// Its text and tool calls in the order they came, then its plan.
    pub content: Vec<ContentBlock>,
    /// How each tool call ended (its status), in the order they were made.
    pub results: Vec<ContentBlock>,
    /// The tokens it reported: those of its answer if it gave them, else the most its
    /// context held (`usage_update`).
    pub usage: Usage,
    /// Why Loopr stopped it (a cancel, the budget): the loop ends with it once what the
    /// agent did is kept.
    pub stopped: Option<LoopError>,
    calls: BTreeMap<String, ToolCallSeen>,
    plan: Vec<AgentPlanEntry>,
    /// What `kept` left out of the turn.
    left_out: kept::LeftOut,
    /// The cost the agent reported in the session, before the turn and now.
    cost: spend::TurnCost,
}

#[derive(Debug)]
struct ToolCallSeen {
    order: usize,
    title: String,
    status: ToolCallStatus,
}

/// Sends `prompt` in `session` and serves the agent until it ends its turn, or until Loopr
/// stopped it (`AgentTurn::stopped`). `meter` names the agent in the loop's usage and keeps
/// the cost it reported in the session; `phase` names the phase in its plan's event. A turn
/// starts only while the tree is under its budget.
pub(super) async fn take_turn(
    context: &LoopContext,
    session: &mut AgentSession,
    client: &AgentClient,
    conversation: &Conversation,
    prompt: String,
    meter: &mut AgentMeter,
    phase: &str,
) -> Result<AgentTurn, LoopError> {
    let guard = context.tree_budget.guard_or(BudgetGuard::of(
        context.settings.budget,
        context.settings.price_table(),
    ));
    let mut turn = AgentTurn {
        cost: meter.turn_cost(),
        ..AgentTurn::default()
    };
    if let Some(guard) = guard.as_ref()
        && let Some(reached) = spend::budget_reached(context, guard, meter, &turn).await?
    {
        return Err(reached);
    }
    let connection = session.agent.connection().clone();
    let session_id = session.id.clone();
    let request = PromptRequest::new(
        session_id.clone(),
        vec![AcpContent::Text(TextContent::new(prompt))],
    );
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
    // what it sent before is taken in first, within the drain's bounds.
    let mut answered = None;
    let mut drain = Drain::default();
    let mut agent_closed = false;
    let ended = loop {
        let deadline = stopping
            .as_ref()
            .map_or_else(far_future, |(_, deadline)| *deadline);
        if answered.is_some() && !drain.take() {
            break answered;
        }
        let reading = !agent_closed && serving.len() < MAX_IN_FLIGHT;
        let step = tokio::select! {
            biased;
            _ = context.cancel.cancelled(), if stopping.is_none() => Step::Cancel,
            _ = tokio::time::sleep_until(deadline) => break None,
            _ = tokio::time::sleep_until(drain.until), if answered.is_some() => break answered,
            Some(()) = serving.next(), if !serving.is_empty() => Step::Served,
            received = next_message(from_agent, answered.is_none()), if reading => match received {
                Received::Message(message) => Step::Message(message),
                Received::NoneLeft => break answered,
                Received::Closed => Step::Closed,
            },
            answer = &mut answer, if answered.is_none() => Step::Answered(answer),
        };
        match step {
            Step::Cancel => stop(LoopError::Cancelled, &mut stopping),
            Step::Answered(answer) => {
                answered = Some(answer);
                drain = Drain::from_now();
            }
            Step::Message(FromAgent::Update(notification)) => {
                let changed = turn.update(context, conversation, notification.update, phase);
                if changed
                    && let Some(guard) = guard.as_ref()
                    && let Some(reached) =
                        spend::budget_reached(context, guard, meter, &turn).await?
                {
                    stop(reached, &mut stopping);
                    // What it asked is dropped: the agent is told each failed.
                    serving.clear();
                }
            }
            // Once stopping, nothing more the agent asks is served: dropped, it fails.
            Step::Message(_) if stopping.is_some() => {}
            Step::Message(request) => serving.push(client.serve(request)),
            Step::Served => {}
            Step::Closed => agent_closed = true,
        }
        // A turn that has its answer and is stopped takes nothing more in.
        if stopping.is_some() && answered.is_some() {
            break answered;
        }
    };
    meter.after(context, &turn);
    // The tokens its answer gives are the turn's, even of a turn Loopr stopped.
    if let Some(Ok(response)) = &ended
        && let Some(usage) = &response.usage
    {
        turn.usage = spend::turn_usage(usage);
    }
    if let Some((why, _)) = stopping {
        drop(serving);
        turn.finish(conversation);
        turn.stopped = Some(why);
        return Ok(turn);
    }
    // What the agent asked and was not yet answered gets its answer before the turn ends.
    let _ = tokio::time::timeout(CANCEL_GRACE, async {
        while serving.next().await.is_some() {}
    })
    .await;
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
    /// The agent's way in closed: it is gone (its answer, an error, follows).
    Closed,
}

/// What came of reading from the agent.
enum Received {
    Message(FromAgent),
    /// It sent nothing more (after its answer, nothing is waited for).
    NoneLeft,
    /// Its way in closed: it is gone.
    Closed,
}

/// The agent's next message: waited for while its answer is not `in`, else only one it
/// already sent.
async fn next_message(from_agent: &mut Receiver<FromAgent>, waiting: bool) -> Received {
    if waiting {
        return match from_agent.next().await {
            Some(message) => Received::Message(message),
            None => Received::Closed,
        };
    }
    match from_agent.try_recv() {
        Ok(message) => Received::Message(message),
        Err(_) => Received::NoneLeft,
    }
}

/// How much more of what the agent sent is taken in after its answer.
struct Drain {
    until: tokio::time::Instant,
    left: usize,
}

impl Default for Drain {
    fn default() -> Drain {
        Drain {
            until: far_future(),
            left: DRAIN_MESSAGES,
        }
    }
}

impl Drain {
    fn from_now() -> Drain {
        Drain {
            until: tokio::time::Instant::now() + DRAIN_TIME,
            left: DRAIN_MESSAGES,
        }
    }

    /// Whether one more step of taking in is allowed.
    fn take(&mut self) -> bool {
        let taken = self.left > 0;
        self.left = self.left.saturating_sub(1);
        taken
    }
}

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(365 * 24 * 3600)
}

impl AgentTurn {
    /// Takes one update in; whether what the turn spent changed.
    fn update(
        &mut self,
        context: &LoopContext,
        conversation: &Conversation,
        update: SessionUpdate,
        phase: &str,
    ) -> bool {
        match update {
            SessionUpdate::AgentMessageChunk(chunk) => {
                if let AcpContent::Text(text) = chunk.content {
                    self.text(conversation, &text.text);
                }
            }
            SessionUpdate::ToolCall(call) => {
                let id = call.tool_call_id.to_string();
                if !self.keeps_call(&id) {
                    return false;
                }
                let title = kept::title(&call.title);
                context.progress(format!("the agent: {title}"));
                let input = serde_json::json!({ "kind": kind_word(call.kind) });
                self.content
                    .push(ContentBlock::tool_call(id.clone(), title.clone(), input));
                let order = self.calls.len();
                self.calls.insert(
                    id,
                    ToolCallSeen {
                        order,
                        title,
                        status: call.status,
                    },
                );
            }
            SessionUpdate::ToolCallUpdate(update) => {
                let id = update.tool_call_id.to_string();
                if !self.keeps_call(&id) {
                    return false;
                }
                let order = self.calls.len();
                let seen = self.calls.entry(id).or_insert_with(|| ToolCallSeen {
                    order,
                    title: "tool call".to_owned(),
                    status: ToolCallStatus::Pending,
                });
                if let Some(title) = update.fields.title {
                    seen.title = kept::title(&title);
                }
                if let Some(status) = update.fields.status {
                    seen.status = status;
                }
            }
            SessionUpdate::Plan(plan) => {
                self.plan = kept::plan(plan.entries, |status| plan_status_word(&status));
                context.events.emit(LoopEvent::AgentPlan {
                    loop_id: context.record.id.clone(),
                    phase: phase.to_owned(),
                    entries: self.plan.clone(),
                });
            }
            SessionUpdate::UsageUpdate(update) => return self.took_usage(update),
            _ => {}
        }
        false
    }
}

/// A tool call's status in the words the transcript shows.
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
