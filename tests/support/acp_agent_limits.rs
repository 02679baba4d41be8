//! The test agent's turns that try Loopr's limits (`--behave costly|euro|silent|flood|late|asks`):
//! a cost over the budget, a cost in euros, no answer at all, a flood of updates around its answer, a write
//! after its answer, `ASKED` permission requests at once. Each turn writes the agent's pid to `agent.pid` first, so that a test
//! can see the process gone.

use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, Cost, PermissionOption, PermissionOptionKind, PromptRequest,
    PromptResponse, RequestPermissionRequest, SessionId, SessionNotification, SessionUpdate,
    StopReason, TextContent, ToolCall, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
    ToolKind, Usage, UsageUpdate,
};

use super::Behaviour;

/// What the agent reports its first turn cost: over the tests' dollar budget.
const COST_USD: f64 = 0.75;
/// A flood's text before its answer: 40 chunks of 64 KiB, past what a turn keeps (1 MiB).
const FLOOD_BEFORE_ANSWER: (usize, usize) = (40, 64 * 1024);
/// A flood's text after its answer: many small chunks, bounded so that what the agent's
/// connection queues while Loopr does not read stays small (about 30 MB).
const FLOOD_AFTER_ANSWER: (usize, usize) = (300_000, 100);

/// How many permission requests `asks` sends at once: more than Loopr serves at once.
const ASKED: usize = 20;

/// One prompt's turn of `behaviour`: its answer, or none for an agent that never answers.
pub async fn turn(
    behaviour: Behaviour,
    connection: &ConnectionTo<Client>,
    request: &PromptRequest,
    cancelled: &Arc<tokio::sync::Notify>,
) -> Option<PromptResponse> {
    let _ = std::fs::write("agent.pid", std::process::id().to_string());
    let id = request.session_id.clone();
    match behaviour {
        Behaviour::Costly => {
            say(connection, &id, "Working on the phase; it costs.");
            update(
                connection,
                &id,
                SessionUpdate::UsageUpdate(
                    UsageUpdate::new(1_200, 200_000).cost(Cost::new(COST_USD, "USD")),
                ),
            );
            let _ = tokio::time::timeout(Duration::from_secs(600), cancelled.notified()).await;
            Some(PromptResponse::new(StopReason::Cancelled))
        }
        Behaviour::Euro => {
            update(
                connection,
                &id,
                SessionUpdate::UsageUpdate(
                    UsageUpdate::new(1_200, 200_000).cost(Cost::new(3.0, "EUR")),
                ),
            );
            if let Err(err) = std::fs::write("status.txt", "ok\n") {
                eprintln!("loopr-test-acp-agent: writing status.txt: {err}");
            }
            say(connection, &id, "Done; that cost 3 euros.");
            Some(PromptResponse::new(StopReason::EndTurn))
        }
        Behaviour::Silent => None,
        Behaviour::Flood => {
            update(
                connection,
                &id,
                SessionUpdate::ToolCall(
                    ToolCall::new("flood", "Flooding Loopr")
                        .kind(ToolKind::Other)
                        .status(ToolCallStatus::InProgress),
                ),
            );
            flood(connection, &id, FLOOD_BEFORE_ANSWER).await;
            Some(PromptResponse::new(StopReason::EndTurn))
        }
        Behaviour::Late => {
            say(
                connection,
                &id,
                "Writing status.txt; late.txt comes after my answer.",
            );
            if let Err(err) = std::fs::write("status.txt", "ok\n") {
                eprintln!("loopr-test-acp-agent: writing status.txt: {err}");
            }
            Some(PromptResponse::new(StopReason::EndTurn).usage(Usage::new(3_500, 3_000, 500)))
        }
        Behaviour::Asks => {
            let asked = (0..ASKED).map(|n| {
                let title = format!("Edit file {n}");
                let call = ToolCallUpdate::new(
                    format!("ask-{n}"),
                    ToolCallUpdateFields::new()
                        .title(title)
                        .kind(ToolKind::Edit),
                );
                let options = vec![
                    PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce),
                    PermissionOption::new("reject", "Reject", PermissionOptionKind::RejectOnce),
                ];
                connection
                    .send_request(RequestPermissionRequest::new(id.clone(), call, options))
                    .block_task()
            });
            let answered = futures::future::join_all(asked).await;
            let allowed = answered.iter().filter(|answer| answer.is_ok()).count();
            say(
                connection,
                &id,
                &format!("{allowed} of {ASKED} permission requests answered"),
            );
            if let Err(err) = std::fs::write("status.txt", "ok\n") {
                eprintln!("loopr-test-acp-agent: writing status.txt: {err}");
            }
            Some(PromptResponse::new(StopReason::EndTurn))
        }
        _ => Some(PromptResponse::new(StopReason::EndTurn)),
    }
}

/// What `behaviour` does once it answered: a flood goes on; `late` writes `late.txt` once
/// the test created `write-late` (between the turn and its validation).
pub async fn after_answer(
    behaviour: Behaviour,
    connection: &ConnectionTo<Client>,
    request: &PromptRequest,
) {
    match behaviour {
        Behaviour::Flood => flood(connection, &request.session_id, FLOOD_AFTER_ANSWER).await,
        Behaviour::Late => {
            for _ in 0..3_000 {
                if std::path::Path::new("write-late").exists() {
                    if let Err(err) = std::fs::write("late.txt", "written after the turn\n") {
                        eprintln!("loopr-test-acp-agent: writing late.txt: {err}");
                    }
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        _ => {}
    }
}

/// Sends `chunks` chunks of text of `bytes` each, as fast as the connection takes them.
async fn flood(connection: &ConnectionTo<Client>, id: &SessionId, (chunks, bytes): (usize, usize)) {
    let chunk = format!("{}\n", "flood ".repeat(bytes / 6));
    for _ in 0..chunks {
        update(
            connection,
            id,
            SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(
                TextContent::new(chunk.clone()),
            ))),
        );
        tokio::task::yield_now().await;
    }
}

fn say(connection: &ConnectionTo<Client>, id: &SessionId, text: &str) {
    update(
        connection,
        id,
        SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(TextContent::new(
            format!("{text}\n"),
        )))),
    );
}

fn update(connection: &ConnectionTo<Client>, id: &SessionId, update: SessionUpdate) {
    if let Err(err) = connection.send_notification(SessionNotification::new(id.clone(), update)) {
        eprintln!("loopr-test-acp-agent: sending an update: {err}");
    }
}
