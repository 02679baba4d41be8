//! Tools the model can call while a loop runs. Every tool is confined to the project root and
//! caps its output; the registry hands each loop type its own tool set in a stable order.

mod approval;
mod buffers;
mod confine;
mod edit_file;
mod grep;
mod list_files;
mod output;
mod policy;
mod read_file;
mod run_command;
mod web_fetch;
mod write_file;

use std::sync::Arc;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use approval::{AcceptAll, ApprovalRequest, Approver, ChangeKind, Decision, file_diff};
pub use buffers::{BufferEdit, ChangeJournal, NoBuffers, NoJournal, OpenBuffers, line_replacement};
pub use confine::{PathError, ProjectRoot};
pub use edit_file::{EditFileTool, replace_once};
pub use grep::GrepTool;
pub use list_files::{ListFilesTool, project_walker};
pub use policy::{DEFAULT_DENIED_COMMANDS, DEFAULT_SECRET_PATTERNS, ToolPolicy};
pub use read_file::ReadFileTool;
pub use run_command::{CommandOutput, RunCommandTool, run_shell};
pub use web_fetch::WebFetchTool;
pub use write_file::WriteFileTool;

use crate::llm::ToolSpec;
use crate::store::LoopType;

/// What a tool may use while it runs.
#[derive(Clone)]
pub struct ToolContext {
    pub root: ProjectRoot,
    pub cancel: CancellationToken,
    pub policy: Arc<ToolPolicy>,
    pub approver: Arc<dyn Approver>,
    /// The loop the tools work for, named in approval requests.
    pub loop_id: String,
    /// Where open files are edited (the editor's buffers), if anywhere.
    pub buffers: Arc<dyn OpenBuffers>,
    /// Told about every file a tool creates.
    pub journal: Arc<dyn ChangeJournal>,
}

impl ToolContext {
    /// Asks before a change; a rejection becomes the tool's error, with the user's reason.
    async fn approve(&self, mut request: ApprovalRequest) -> Result<(), ToolError> {
        request.loop_id.clone_from(&self.loop_id);
        match self.approver.decide(request, &self.cancel).await {
            Some(Decision::Accept | Decision::AcceptAllOfKind) => Ok(()),
            Some(Decision::Reject(reason)) => Err(ToolError::Rejected(reason)),
            None => Err(ToolError::Cancelled),
        }
    }
}

/// Why a tool call failed. The text goes back to the model as an `is_error` tool result, so
/// it says what was wrong and how to call the tool correctly.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("invalid input: {0}")]
    InvalidInput(String),
    #[error(transparent)]
    Path(#[from] PathError),
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("refused: {0}")]
    Denied(String),
    #[error("the user rejected this change: {0}")]
    Rejected(String),
    #[error("cancelled")]
    Cancelled,
}

#[async_trait]
pub trait Tool: Send + Sync {
    fn name(&self) -> &'static str;
    fn description(&self) -> &'static str;
    fn input_schema(&self) -> Value;
    async fn call(&self, input: Value, context: &ToolContext) -> Result<String, ToolError>;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_owned(),
            description: self.description().to_owned(),
            input_schema: self.input_schema(),
        }
    }
}

/// A tool made from a closure, for small tools that need no type of their own.
pub struct FnTool<F> {
    name: &'static str,
    description: &'static str,
    input_schema: Value,
    run: F,
}

/// Builds a tool from a name, a description, the JSON schema of its input and a closure that
/// answers a call (synchronously; blocking work belongs in a `Tool` of its own).
pub fn fn_tool<F>(
    name: &'static str,
    description: &'static str,
    input_schema: Value,
    run: F,
) -> Arc<dyn Tool>
where
    F: Fn(Value, &ToolContext) -> Result<String, ToolError> + Send + Sync + 'static,
{
    Arc::new(FnTool {
        name,
        description,
        input_schema,
        run,
    })
}

#[async_trait]
impl<F> Tool for FnTool<F>
where
    F: Fn(Value, &ToolContext) -> Result<String, ToolError> + Send + Sync + 'static,
{
    fn name(&self) -> &'static str {
        self.name
    }

    fn description(&self) -> &'static str {
        self.description
    }

    fn input_schema(&self) -> Value {
        self.input_schema.clone()
    }

    async fn call(&self, input: Value, context: &ToolContext) -> Result<String, ToolError> {
        (self.run)(input, context)
    }
}

/// Parses a tool's input into its typed form, turning serde's complaint into advice.
pub fn parse_input<T: DeserializeOwned>(tool: &str, input: Value) -> Result<T, ToolError> {
    serde_json::from_value(input).map_err(|err| {
        ToolError::InvalidInput(format!(
            "{err}; call {tool} again with input that matches its schema"
        ))
    })
}

#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
}

impl ToolRegistry {
    /// The tools a loop of this type may use. Planning levels only read; the code loop also
    /// writes, edits and runs commands. `web_fetch` only when the user enabled it.
    pub fn for_loop(loop_type: LoopType, web_fetch: bool) -> ToolRegistry {
        let mut tools: Vec<Arc<dyn Tool>> = vec![
            Arc::new(ReadFileTool),
            Arc::new(ListFilesTool),
            Arc::new(GrepTool),
        ];
        if loop_type == LoopType::Code {
            tools.push(Arc::new(WriteFileTool));
            tools.push(Arc::new(EditFileTool));
            tools.push(Arc::new(RunCommandTool));
        }
        if web_fetch {
            tools.push(Arc::new(WebFetchTool::new()));
        }
        ToolRegistry { tools }
    }

    /// A registry of exactly these tools, in this order.
    pub fn of(tools: Vec<Arc<dyn Tool>>) -> ToolRegistry {
        ToolRegistry { tools }
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|tool| tool.spec()).collect()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|tool| tool.name() == name)
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.tools.iter().map(|tool| tool.name()).collect()
    }
}

/// Writes `new` to `path`: into the editor's buffer when the file is open there, else
/// atomically on disk. An open buffer with unsaved changes of the user's is left alone and
/// the write fails, so nothing the user typed is lost. `requested` is resolved again and the
/// file compared with `old` first: the approval wait may have been long, and what was
/// approved must be what is changed.
async fn write_through_buffers(
    context: &ToolContext,
    requested: &str,
    shown: String,
    old: &str,
    new: String,
) -> Result<(), ToolError> {
    let path = context.root.resolve_for_write(requested)?;
    if read_existing(&path, &shown)?.unwrap_or_default() != old {
        return Err(ToolError::File {
            path: shown,
            message: "changed while the change waited for approval; nothing was written. Read \
                      it again and redo the change"
                .to_owned(),
        });
    }
    match context.buffers.apply(&path, old, &new).await {
        BufferEdit::Applied => Ok(()),
        BufferEdit::UnsavedChanges => Err(ToolError::File {
            path: shown,
            message: "is open in the editor with unsaved changes (or with other content than \
                      the file); nothing was changed. Tell the user to save or discard them, \
                      or change other files first"
                .to_owned(),
        }),
        BufferEdit::NotLoaded => {
            let journal = context.journal.clone();
            run_blocking(context, move || {
                let created = !path.exists();
                crate::store::write_atomic_keeping_mode(&path, new.as_bytes()).map_err(|err| {
                    ToolError::File {
                        path: shown,
                        message: err.to_string(),
                    }
                })?;
                if created {
                    journal.created(&path);
                }
                Ok(())
            })
            .await
        }
    }
}

/// Larger files are not read whole to be edited or diffed.
const MAX_EDITABLE_BYTES: u64 = 8 * 1024 * 1024;

/// The text of the file at `path`, `None` if it does not exist; an error if it cannot be
/// read as text or is too large to edit.
fn read_existing(path: &std::path::Path, shown: &str) -> Result<Option<String>, ToolError> {
    let file_error = |message: String| ToolError::File {
        path: shown.to_owned(),
        message,
    };
    match std::fs::metadata(path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(file_error(err.to_string())),
        Ok(metadata) if metadata.len() > MAX_EDITABLE_BYTES => {
            return Err(file_error(format!(
                "is {} bytes, larger than the {MAX_EDITABLE_BYTES}-byte limit for edits",
                metadata.len()
            )));
        }
        Ok(_) => {}
    }
    std::fs::read_to_string(path)
        .map(Some)
        .map_err(|err| file_error(format!("cannot be edited as text: {err}")))
}

/// Secret files are never read or written, whatever the tool.
fn refuse_secret(context: &ToolContext, path: &std::path::Path) -> Result<(), ToolError> {
    match context.policy.secret_pattern(path) {
        Some(pattern) => Err(ToolError::Denied(format!(
            "{} matches the secret-file pattern {pattern:?}; secret files are never read or written",
            context.root.relative_display(path)
        ))),
        None => Ok(()),
    }
}

/// Runs blocking file-system work off the async threads, stopping early on cancel.
async fn run_blocking<T: Send + 'static>(
    context: &ToolContext,
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    let task = tokio::task::spawn_blocking(work);
    tokio::select! {
        biased;
        _ = context.cancel.cancelled() => Err(ToolError::Cancelled),
        joined = task => joined.map_err(|err| ToolError::File {
            path: "(tool)".to_owned(),
            message: format!("the tool crashed: {err}"),
        })?,
    }
}

#[cfg(test)]
mod tests;
