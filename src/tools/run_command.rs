//! The `run_command` tool: a shell command the user approved (or the policy allows), run in
//! the project under the sandbox, its changes to the tree recorded.

use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::sandbox::Sandbox;
use super::{ApprovalRequest, ChangeKind, Tool, ToolContext, ToolError, parse_input, run_recorded};
use crate::schema::input_schema_for;

const MAX_TIMEOUT_SECS: f64 = 600.0;

/// Run a shell command in the project.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCommandInput {
    /// The shell command.
    #[schemars(length(min = 1))]
    pub command: String,
    /// Working directory (default: the root).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Seconds before it is killed (default from the settings).
    #[serde(default)]
    #[schemars(range(min = 0.1, max = 600.0))]
    pub timeout_secs: Option<f64>,
}

pub struct RunCommandTool;

/// What a command is asked about as.
const CHANGE: ChangeKind = ChangeKind::Command;

#[async_trait]
impl Tool for RunCommandTool {
    fn name(&self) -> &'static str {
        "run_command"
    }

    fn description(&self) -> &'static str {
        "Run a shell command (sh -c) in the project; returns its exit status, stdout and stderr. \
         It and every process it starts are killed at the timeout; some commands are never \
         allowed (e.g. sudo, git push)."
    }

    fn input_schema(&self) -> Value {
        input_schema_for::<RunCommandInput>()
    }

    fn example(&self) -> Value {
        json!({"command": "cargo test --lib cli", "timeout_secs": 300})
    }

    fn reread_hint(&self) -> String {
        "call run_command again with the same input (the command runs again).".to_owned()
    }

    fn change_kind(&self) -> Option<ChangeKind> {
        Some(CHANGE)
    }

    async fn call(&self, input: Value, context: &ToolContext) -> Result<String, ToolError> {
        let input: RunCommandInput = parse_input(self.name(), input)?;
        let cwd = command_directory(context, input.cwd.as_deref())?;
        let timeout = input
            .timeout_secs
            .filter(|secs| secs.is_finite() && *secs > 0.0)
            .map(|secs| Duration::from_secs_f64(secs.min(MAX_TIMEOUT_SECS)))
            .unwrap_or(context.policy.command_timeout);
        let sandbox = &context.policy.sandbox;
        approve_command(context, self.name(), &input.command, &cwd).await?;
        let output = run_recorded(context, &input.command, &cwd, timeout).await?;
        match sandbox.explain_refusal(&output) {
            // An error result, so the model sees at once that it must work another way.
            Some(refusal) => Err(ToolError::Denied(format!("{refusal}\n{output}"))),
            None => Ok(output.to_string()),
        }
    }
}

/// The directory a command runs in: `requested` (relative to the root, or absolute inside
/// it; the root when `None`), which must be a directory of the project.
pub fn command_directory(
    context: &ToolContext,
    requested: Option<&str>,
) -> Result<std::path::PathBuf, ToolError> {
    let cwd = context.root.resolve_existing(requested.unwrap_or("."))?;
    if !cwd.is_dir() {
        return Err(ToolError::InvalidInput(format!(
            "cwd {:?} is not a directory",
            requested.unwrap_or_default()
        )));
    }
    Ok(cwd)
}

/// What every command (`tool`'s) passes before it runs: the deny-list, then the user's
/// approval (the command, its directory, and whether the sandbox confines it).
pub async fn approve_command(
    context: &ToolContext,
    tool: &'static str,
    command: &str,
    cwd: &std::path::Path,
) -> Result<(), ToolError> {
    if let Some(pattern) = context.policy.denied_by(command) {
        return Err(ToolError::Denied(format!(
            "the command matches the deny-list pattern {pattern:?} and is never run; do \
             the work another way or ask the user to do it"
        )));
    }
    context
        .approve(ApprovalRequest {
            loop_id: String::new(),
            kind: CHANGE,
            tool,
            subject: command.to_owned(),
            detail: format!(
                "$ {command}\n(in {}){}",
                context.root.relative_display(cwd),
                unsandboxed_note(&context.policy.sandbox)
            ),
        })
        .await
}

/// The line an approval request for a command gets when nothing confines it.
pub fn unsandboxed_note(sandbox: &Sandbox) -> String {
    if sandbox.is_confined() {
        String::new()
    } else {
        format!("\nUNSANDBOXED: {}", sandbox.describe())
    }
}
