//! The conversation cycle of a planning loop: send, stream, run the tool calls, answer with
//! tool results, until the artifact tool succeeds or the turn limit is reached.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::artifact_store::store_artifact;
use super::events::{EventSink, LoopEvent};
use super::progress::{describe_provider_event, describe_tool_call};
use super::prompts;
use super::settings::LoopSettings;
use crate::artifacts::{
    ArtifactKind, PlanArtifact, create_plan_spec, render_plan_markdown, validate_plan,
};
use crate::llm::{ChatRequest, ContentBlock, LlmError, LlmProvider, Message, Role, Usage};
use crate::store::{LoopDb, LoopId, ProjectLayout, StoreError};
use crate::tools::{ProjectRoot, ToolContext, ToolRegistry};

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
    pub id: LoopId,
    pub task: String,
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
            loop_id: self.id.clone(),
            message: message.into(),
        });
    }
}

#[derive(Debug)]
pub struct PlanOutcome {
    pub markdown_path: PathBuf,
    pub iteration: u32,
}

/// The answer to one tool call, before it becomes a `tool_result` block.
struct CallResult {
    content: String,
    is_error: bool,
    accepted_plan: Option<PlanArtifact>,
}

pub async fn run_plan_loop(context: &LoopContext) -> Result<PlanOutcome, LoopError> {
    let tools = ToolRegistry::for_loop(crate::store::LoopType::Plan);
    let mut tool_specs = tools.specs();
    tool_specs.push(create_plan_spec());
    let project_name = context
        .root
        .path()
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut request = ChatRequest {
        model: context.settings.model.clone(),
        max_tokens: context.settings.max_tokens,
        system: prompts::plan_system_prompt(&project_name, &tools.names()),
        messages: vec![Message::user_text(prompts::plan_task_message(
            &context.task,
        ))],
        tools: tool_specs,
    };
    let tool_context = ToolContext {
        root: context.root.clone(),
        cancel: context.cancel.clone(),
    };
    let mut usage = Usage::default();
    let max_turns = context.settings.max_turns;
    let iteration = 1;
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
            .set_progress(&context.id, 0, usage.input_tokens, usage.output_tokens)?;

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
            let result = run_call(context, &tools, &tool_context, &name, input).await?;
            if accepted.is_none() {
                accepted = result.accepted_plan;
            }
            reply.push(ContentBlock::ToolResult {
                tool_use_id: call_id,
                content: result.content,
                is_error: result.is_error,
            });
        }

        if let Some(plan) = accepted {
            let outcome = save_plan(context, &plan, iteration, &request.messages)?;
            context.db.set_progress(
                &context.id,
                iteration,
                usage.input_tokens,
                usage.output_tokens,
            )?;
            return Ok(outcome);
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
                text: prompts::nudge_to_call_artifact_tool(ArtifactKind::Plan.tool_name()),
            });
        }
        request.messages.push(Message {
            role: Role::User,
            content: reply,
        });
    }
    Err(LoopError::TurnLimit {
        tool: ArtifactKind::Plan.tool_name(),
        max_turns,
    })
}

async fn run_call(
    context: &LoopContext,
    tools: &ToolRegistry,
    tool_context: &ToolContext,
    name: &str,
    input: Value,
) -> Result<CallResult, LoopError> {
    context.progress(describe_tool_call(name, &input));
    if name == ArtifactKind::Plan.tool_name() {
        return Ok(match validate_plan(&input) {
            Ok(plan) => CallResult {
                content: format!(
                    "Plan accepted with {} spec{}; plan.md was written for review.",
                    plan.specs.len(),
                    if plan.specs.len() == 1 { "" } else { "s" }
                ),
                is_error: false,
                accepted_plan: Some(plan),
            },
            Err(report) => {
                tracing::info!(loop_id = %context.id, problems = report.issues.len(), "create_plan input rejected");
                context.progress(format!(
                    "the plan had {} problem{}; asking the model to fix {}",
                    report.issues.len(),
                    if report.issues.len() == 1 { "" } else { "s" },
                    if report.issues.len() == 1 {
                        "it"
                    } else {
                        "them"
                    },
                ));
                CallResult {
                    content: report.to_string(),
                    is_error: true,
                    accepted_plan: None,
                }
            }
        });
    }
    let Some(tool) = tools.get(name) else {
        return Ok(CallResult {
            content: format!(
                "there is no tool named {name:?}; the available tools are {}, {}",
                tools.names().join(", "),
                ArtifactKind::Plan.tool_name()
            ),
            is_error: true,
            accepted_plan: None,
        });
    };
    match tool.call(input, tool_context).await {
        Ok(content) => Ok(CallResult {
            content,
            is_error: false,
            accepted_plan: None,
        }),
        Err(crate::tools::ToolError::Cancelled) => Err(LoopError::Cancelled),
        Err(err) => {
            tracing::debug!(loop_id = %context.id, tool = name, error = %err, "tool call failed");
            Ok(CallResult {
                content: format!("{name} failed: {err}"),
                is_error: true,
                accepted_plan: None,
            })
        }
    }
}

fn save_plan(
    context: &LoopContext,
    plan: &PlanArtifact,
    iteration: u32,
    conversation: &[Message],
) -> Result<PlanOutcome, LoopError> {
    let markdown = render_plan_markdown(plan);
    let stored = store_artifact(
        &context.layout,
        &context.id,
        iteration,
        ArtifactKind::Plan,
        plan,
        &markdown,
        conversation,
    )
    .map_err(|source| LoopError::Artifact {
        kind: ArtifactKind::Plan.as_str(),
        source,
    })?;
    tracing::info!(loop_id = %context.id, path = %stored.markdown_path.display(), "plan stored");
    context.events.emit(LoopEvent::ArtifactCreated {
        loop_id: context.id.clone(),
        kind: ArtifactKind::Plan,
        markdown_path: stored.markdown_path.clone(),
        json_path: stored.json_path,
        iteration,
    });
    Ok(PlanOutcome {
        markdown_path: stored.markdown_path,
        iteration,
    })
}
