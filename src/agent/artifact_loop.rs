//! The conversation cycle of an artifact loop (plan, spec or phase): send, stream, run the tool
//! calls, answer with tool results, until the artifact tool succeeds or the turn limit is
//! reached. The conversation is stored after every turn, so a killed host resumes it.

use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::artifact_store::store_artifact;
use super::events::{EventSink, LoopEvent};
use super::jobs::{self, Accepted, JobError};
use super::progress::{describe_provider_event, describe_tool_call};
use super::prompts;
use super::settings::LoopSettings;
use crate::artifacts::ArtifactKind;
use crate::llm::{ChatRequest, ContentBlock, LlmError, LlmProvider, Message, Role, Usage};
use crate::store::{LoopDb, LoopRecord, ProjectLayout, StoreError, write_atomic};
use crate::tools::{ProjectRoot, ToolContext, ToolError, ToolRegistry};

#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error("cancelled")]
    Cancelled,
    #[error("model request failed: {0}")]
    Llm(LlmError),
    #[error(
        "no valid {tool} call after {max_turns} model turns (the turn limit); raise max_turns \
         or make the task more specific"
    )]
    TurnLimit { tool: &'static str, max_turns: u32 },
    #[error("saving the {kind} artifact: {source}")]
    Artifact {
        kind: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Job(#[from] JobError),
    #[error(transparent)]
    Store(#[from] StoreError),
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
}

impl LoopContext {
    fn progress(&self, message: impl Into<String>) {
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

/// The answer to one tool call, before it becomes a `tool_result` block.
struct CallResult {
    content: String,
    is_error: bool,
    accepted: Option<Accepted>,
}

pub async fn run_artifact_loop(context: &LoopContext) -> Result<ArtifactOutcome, LoopError> {
    let record = &context.record;
    let kind = jobs::artifact_kind(record.loop_type)?;
    let iteration = record.iteration + 1;
    if let Some(outcome) = restore_stored(context, kind, iteration)? {
        return Ok(outcome);
    }
    let tools = ToolRegistry::for_loop(record.loop_type);
    let mut tool_specs = tools.specs();
    tool_specs.push(jobs::artifact_tool(kind));
    let project_name = context
        .root
        .path()
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let conversation_path = context
        .layout
        .iteration_dir(&record.id, iteration)
        .join("conversation.json");
    let messages = match load_conversation(&conversation_path) {
        Some(messages) => {
            context.progress(format!("resuming the {} conversation", kind.as_str()));
            messages
        }
        None => {
            let previous = previous_artifact(context, kind);
            vec![Message::user_text(jobs::first_message(
                record,
                &context.layout,
                previous.as_ref(),
            )?)]
        }
    };
    let mut request = ChatRequest {
        model: context.settings.model.clone(),
        max_tokens: context.settings.max_tokens,
        system: prompts::system_prompt(kind, &project_name, &tools.names()),
        messages,
        tools: tool_specs,
    };
    let tool_context = ToolContext {
        root: context.root.clone(),
        cancel: context.cancel.clone(),
    };
    let mut usage = Usage {
        input_tokens: record.tokens_in,
        output_tokens: record.tokens_out,
    };
    let max_turns = context.settings.max_turns;
    let on_provider_event = |event| context.progress(describe_provider_event(&event));

    for turn_number in 1..=max_turns {
        context.progress(format!(
            "waiting for the model (turn {turn_number}/{max_turns})"
        ));
        let turn = context
            .provider
            .complete(&request, &on_provider_event, &context.cancel)
            .await?;
        usage.input_tokens += turn.usage.input_tokens;
        usage.output_tokens += turn.usage.output_tokens;
        context
            .db
            .set_tokens(&record.id, usage.input_tokens, usage.output_tokens)?;

        let calls: Vec<(String, String, Value)> = turn
            .tool_calls()
            .map(|(id, name, input)| (id.to_owned(), name.to_owned(), input.clone()))
            .collect();
        request.messages.push(Message {
            role: Role::Assistant,
            content: if turn.content.is_empty() {
                // The API refuses empty assistant messages; an empty turn still happened.
                vec![ContentBlock::Text {
                    text: "(no content)".to_owned(),
                }]
            } else {
                turn.content.clone()
            },
        });

        let mut reply = Vec::new();
        let mut accepted = None;
        for (call_id, name, input) in calls {
            let result = run_call(context, kind, &tools, &tool_context, &name, input).await?;
            if accepted.is_none() {
                accepted = result.accepted;
            }
            reply.push(ContentBlock::ToolResult {
                tool_use_id: call_id,
                content: result.content,
                is_error: result.is_error,
            });
        }

        if let Some(accepted) = accepted {
            return save(context, kind, iteration, accepted, &request.messages);
        }

        // Tool results come first in the user message, as the API requires.
        if !turn.truncated_tool_calls.is_empty() {
            reply.push(ContentBlock::Text {
                text: prompts::truncated_tool_call_note(
                    &turn.truncated_tool_calls,
                    context.settings.max_tokens,
                ),
            });
        } else if reply.is_empty() {
            reply.push(ContentBlock::Text {
                text: prompts::nudge_to_call_artifact_tool(kind.tool_name()),
            });
        }
        request.messages.push(Message {
            role: Role::User,
            content: reply,
        });
        save_conversation(&conversation_path, &request.messages)?;
    }
    Err(LoopError::TurnLimit {
        tool: kind.tool_name(),
        max_turns,
    })
}

async fn run_call(
    context: &LoopContext,
    kind: ArtifactKind,
    tools: &ToolRegistry,
    tool_context: &ToolContext,
    name: &str,
    input: Value,
) -> Result<CallResult, LoopError> {
    context.progress(describe_tool_call(name, &input));
    if name == kind.tool_name() {
        return Ok(
            match jobs::accept(&context.record, &context.root, &input)? {
                Ok(accepted) => CallResult {
                    content: accepted.summary.clone(),
                    is_error: false,
                    accepted: Some(accepted),
                },
                Err(report) => {
                    let problems = report.issues.len();
                    tracing::info!(loop_id = %context.record.id, tool = name, problems, "artifact input rejected");
                    context.progress(format!(
                        "the {} had {problems} problem{}; asking the model to fix {}",
                        kind.as_str(),
                        if problems == 1 { "" } else { "s" },
                        if problems == 1 { "it" } else { "them" },
                    ));
                    CallResult {
                        content: report.to_string(),
                        is_error: true,
                        accepted: None,
                    }
                }
            },
        );
    }
    let Some(tool) = tools.get(name) else {
        return Ok(CallResult {
            content: format!(
                "there is no tool named {name:?}; the available tools are {}, {}",
                tools.names().join(", "),
                kind.tool_name()
            ),
            is_error: true,
            accepted: None,
        });
    };
    match tool.call(input, tool_context).await {
        Ok(content) => Ok(CallResult {
            content,
            is_error: false,
            accepted: None,
        }),
        Err(ToolError::Cancelled) => Err(LoopError::Cancelled),
        Err(err) => {
            tracing::debug!(loop_id = %context.record.id, tool = name, error = %err, "tool call failed");
            Ok(CallResult {
                content: format!("{name} failed: {err}"),
                is_error: true,
                accepted: None,
            })
        }
    }
}

fn save(
    context: &LoopContext,
    kind: ArtifactKind,
    iteration: u32,
    accepted: Accepted,
    conversation: &[Message],
) -> Result<ArtifactOutcome, LoopError> {
    let stored = store_artifact(
        &context.layout,
        &context.record.id,
        iteration,
        kind,
        &accepted.json,
        &accepted.markdown,
        Some(conversation),
    )
    .map_err(|source| LoopError::Artifact {
        kind: kind.as_str(),
        source,
    })?;
    context.db.set_iteration(&context.record.id, iteration)?;
    tracing::info!(loop_id = %context.record.id, path = %stored.markdown_path.display(), "artifact stored");
    context.events.emit(LoopEvent::ArtifactCreated {
        loop_id: context.record.id.clone(),
        kind,
        markdown_path: stored.markdown_path,
        json_path: stored.json_path,
        iteration,
    });
    Ok(ArtifactOutcome {
        iteration,
        accepted,
    })
}

/// After a crash between storing an artifact and recording it, the stored JSON is the answer:
/// the model is not asked again. The markdown and `current` link are rewritten from it, since
/// the crash may have come before them.
fn restore_stored(
    context: &LoopContext,
    kind: ArtifactKind,
    iteration: u32,
) -> Result<Option<ArtifactOutcome>, LoopError> {
    let json_path = context
        .layout
        .artifacts_dir(&context.record.id, iteration)
        .join(format!("{}.json", kind.as_str()));
    let Some(accepted) = jobs::read_json(&json_path)
        .ok()
        .and_then(|json| jobs::restore(kind, &json))
    else {
        return Ok(None);
    };
    tracing::info!(loop_id = %context.record.id, iteration, "resuming from a stored artifact");
    save(context, kind, iteration, accepted, &[]).map(Some)
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

fn load_conversation(path: &std::path::Path) -> Option<Vec<Message>> {
    let bytes = std::fs::read(path).ok()?;
    let messages: Vec<Message> = serde_json::from_slice(&bytes).ok()?;
    // Only a conversation that ends with our message can be sent again as it is.
    (messages.last()?.role == Role::User).then_some(messages)
}

fn save_conversation(path: &std::path::Path, messages: &[Message]) -> Result<(), LoopError> {
    let json = serde_json::to_vec(messages).map_err(|err| LoopError::Artifact {
        kind: "conversation",
        source: std::io::Error::other(err),
    })?;
    write_atomic(path, &json).map_err(|source| LoopError::Artifact {
        kind: "conversation",
        source,
    })
}
