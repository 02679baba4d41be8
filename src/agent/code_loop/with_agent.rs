//! The code loop run by the user's coding agent over ACP (`code_agent`, or `agent=<name>`
//! for a run): the same checkpoint, baseline, journal, validation, verification and
//! iterations as Loopr's own loop, with the agent's turns in place of the model's. Each
//! prompt gives the agent the phase and the project's rules (the first) or what the
//! validation or verification said (the next ones); what its own tools write behind the
//! protocol is found by watching the tree around each turn (`tools::recorded`). A cancel, the
//! budget, or the loop's end stops the agent (`session/cancel`, then its process group).

use std::sync::Arc;

use super::agent_session::{self, AgentSession};
use super::agent_turn;
use super::{
    CodeRunState, before_changes, changing_tool_context, load_or_start, loop_baseline, phase_of,
    validate, verifying, where_it_stands,
};
use crate::acp::AgentConfig;
use crate::agent::agent_client::AgentClient;
use crate::agent::context::{LoopContext, LoopError};
use crate::agent::context_budget::RereadHints;
use crate::agent::turn::Conversation;
use crate::artifacts::PhaseArtifact;
use crate::llm::{ContentBlock, Role};
use crate::tools::{ToolContext, TreeStats, record_changes_since, tree_before_command};

/// What a failed validation asks of the agent, in place of `complete_phase`.
const END_TURN_AGAIN: &str = "end your turn again; Loopr then runs the validation once more";

/// Implements the phase through agent `name`; returns the iteration whose validation passed.
pub(super) async fn run_with_agent(context: &LoopContext, name: &str) -> Result<u32, LoopError> {
    let config = agent_config(context, name)?;
    let phase = phase_of(context)?;
    let (journal, rules) = before_changes(context, &phase).await?;
    let rules_section = rules.prompt_section();
    let validation = phase.validation_command.clone();
    let (mut state, messages, batches) =
        load_or_start(context, &phase, &journal, rules.summary(), |first| {
            agent_task(&first, &rules_section, &validation)
        })
        .await?;
    let mut conversation = Conversation::new(
        context,
        journal,
        String::new(),
        Arc::from(Vec::new()),
        RereadHints::of(&[]),
        messages,
        batches,
    );
    let resumed = conversation.messages().len() > 1;
    if let Some(passed) = where_it_stands(context, &mut conversation, &mut state, &phase).await? {
        return Ok(passed);
    }
    // A new session knows nothing of an earlier one: a resumed loop tells it the phase again.
    let prompt = match (resumed, first_text(&conversation)) {
        (true, Some(first)) => format!("{first}\n\n{}", last_words(&conversation)),
        _ => last_words(&conversation),
    };
    let tool_context = changing_tool_context(context);
    let client = AgentClient::new(tool_context.clone());
    // What changes in a turn is the agent's own tools' writes, and undo names the agent.
    let turn_context = ToolContext {
        journal: Arc::new(loop_baseline(context).written_by_agent(name)),
        ..tool_context.clone()
    };
    let mut session = agent_session::open(context, name, &config).await?;
    let mut run = AgentRun {
        context,
        phase: &phase,
        tool_context: &tool_context,
        turn_context: &turn_context,
        client: &client,
        meter: agent_turn::AgentMeter::new(format!("agent {name}")),
        watched: None,
    };
    let ended = run
        .iterate(&mut session, &mut conversation, &mut state, prompt)
        .await;
    client.close().await;
    session.agent.shut_down().await;
    // What the agent wrote after its last turn, until it was stopped, is the loop's too.
    record_changes_since(&turn_context, run.watched.take()).await;
    if ended.is_err() {
        // What is kept of the turn under way is what the user sees of it afterwards.
        if let Err(err) = conversation.flush().await {
            tracing::warn!(loop_id = %context.record.id, error = %err, "writing the agent's last turn");
        }
    }
    ended
}

/// The loop's agent as its settings configure it, the values of its `env` from the user's
/// current settings (a loop's stored settings keep only their names).
fn agent_config(context: &LoopContext, name: &str) -> Result<AgentConfig, LoopError> {
    let Some(config) = context.settings.agents.get(name) else {
        let refused = crate::acp::check_agents(&context.settings.agents, Some(name))
            .err()
            .unwrap_or_else(|| format!("code_agent names {name:?}, which is not configured"));
        return Err(LoopError::Settings(refused));
    };
    context
        .agents
        .with_current_env(name, config)
        .map_err(LoopError::Settings)
}

/// The first prompt: the phase (`phase_task`, its objective, tasks, requirements and
/// validation command), the project's rules, and what ends the agent's work on it.
fn agent_task(phase_task: &str, rules: &str, validation: &str) -> String {
    format!(
        "{}{rules}\n\nWork in this project's files. When the phase's tasks are done, end your \
         turn: Loopr then runs the phase's validation command `{validation}` and tells you \
         what failed, if anything.",
        phase_task.trim_end()
    )
}

/// The text of the conversation's first message (the phase).
fn first_text(conversation: &Conversation) -> Option<String> {
    conversation
        .messages()
        .first()
        .map(|first| texts(&first.content))
}

/// The text of our last message: what the agent is told next.
fn last_words(conversation: &Conversation) -> String {
    conversation
        .messages()
        .iter()
        .rev()
        .find(|message| message.role == Role::User)
        .map(|message| texts(&message.content))
        .unwrap_or_default()
}

fn texts(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// One loop's run through its agent.
struct AgentRun<'a> {
    context: &'a LoopContext,
    phase: &'a PhaseArtifact,
    tool_context: &'a ToolContext,
    /// The tool context whose journal records a turn's changes as the agent's writes.
    turn_context: &'a ToolContext,
    client: &'a AgentClient,
    /// How the loop's usage names the agent, and the cost it reported.
    meter: agent_turn::AgentMeter,
    /// The project's files as the last turn left them: what changed since (the validation,
    /// the agent writing between turns) is recorded before the next turn, which counts from
    /// there.
    watched: Option<TreeStats>,
}

impl AgentRun<'_> {
    /// Prompts the agent (`prompt` first) and validates each turn, until a validation passes
    /// (and verification, if on, finds nothing blocking) or the iterations run out.
    async fn iterate(
        &mut self,
        session: &mut AgentSession,
        conversation: &mut Conversation,
        state: &mut CodeRunState,
        mut prompt: String,
    ) -> Result<u32, LoopError> {
        let context = self.context;
        let max_iterations = context.settings.code_max_iterations;
        while state.iteration <= state.last_allowed_iteration(max_iterations) {
            conversation.go_on().await?;
            context.progress(format!(
                "iteration {}/{}: the agent works",
                state.iteration,
                state.last_allowed_iteration(max_iterations)
            ));
            // The agent's own tools write behind the protocol: what changed in the turn is
            // recorded like a command's changes, for the changes list and undo; so is what
            // changed since the last turn ended, and the turn counts from there.
            let before = match record_changes_since(self.turn_context, self.watched.take()).await {
                Some(now) => Some(now),
                None => tree_before_command(self.turn_context)
                    .await
                    .map_err(|_| LoopError::Cancelled)?,
            };
            let turn = agent_turn::take_turn(
                context,
                session,
                self.client,
                conversation,
                prompt,
                &mut self.meter,
                &self.phase.name,
            )
            .await;
            // Recorded before the validation runs.
            self.watched = record_changes_since(self.turn_context, before).await;
            let turn = turn?;
            let reported_usd_micros = turn.reported_usd_micros();
            conversation.add_agent_turn(
                turn.content,
                turn.results,
                self.meter.model.clone(),
                turn.usage,
                reported_usd_micros,
            );
            if let Some(why) = turn.stopped {
                // What it did and spent before it stopped is kept.
                conversation.commit_later(state)?;
                return Err(why);
            }
            let (passed, text) = validate(
                context,
                self.tool_context,
                self.phase,
                state.iteration,
                conversation.messages(),
                END_TURN_AGAIN,
            )
            .await?;
            conversation.add_user_text(text.clone());
            if passed {
                match verifying::after_validation(context, conversation, state, self.phase).await? {
                    verifying::Settled::Complete => return Ok(state.iteration),
                    verifying::Settled::Again => {
                        prompt = last_words(conversation);
                        conversation.commit_later(state)?;
                        continue;
                    }
                }
            }
            state.iteration += 1;
            prompt = text;
            conversation.commit_later(state)?;
        }
        conversation.flush().await?;
        Err(LoopError::ValidationFailing {
            command: self.phase.validation_command.clone(),
            iterations: max_iterations,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::code_loop::COMPLETE_PHASE;

    #[test]
    fn the_first_prompt_holds_the_phase_the_rules_and_what_ends_the_work() {
        let prompt = agent_task(
            "Implement this phase.\n\n# Phase a-1\n",
            "\n\n## Project rules\nUse tabs.",
            "cargo test",
        );
        assert!(
            prompt.starts_with("Implement this phase.\n\n# Phase a-1\n"),
            "{prompt}"
        );
        assert!(prompt.contains("## Project rules\nUse tabs."), "{prompt}");
        assert!(
            prompt.ends_with(
                "validation command `cargo test` and tells you what failed, if anything."
            ),
            "{prompt}"
        );
        assert!(!prompt.contains(COMPLETE_PHASE), "{prompt}");
    }
}
