//! Tools the model can call while a loop runs. Every tool is confined to the project root and
//! caps its output; the registry hands each loop type its own tool set in a stable order.

mod approval;
mod buffers;
mod confine;
mod credentials_in_text;
mod edit_file;
mod grep;
mod list_files;
mod output;
mod policy;
mod project_file;
mod project_walk;
mod project_write;
mod read_file;
mod run_command;
mod sandbox;
mod shell;
mod tree_watch;
mod unfit_root;
mod web_fetch;
mod write_file;

use std::sync::Arc;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use approval::{
    AGENT_OWN_TOOL, AcceptAll, ApprovalRequest, Approver, ChangeKind, DIFF_TIMEOUT, Decision,
    bounded_line_diff, file_diff,
};
pub use buffers::{
    BufferCheck, BufferEdit, ChangeJournal, NoBuffers, NoJournal, OpenBuffers, line_replacement,
};
pub use confine::{PathError, ProjectRoot};
pub use credentials_in_text::{
    REDACTED, redact_credentials, redact_cut_end, redact_cut_start, redact_kept_tail,
};
pub use edit_file::{EditFileTool, replace_once};
pub use grep::GrepTool;
pub use list_files::ListFilesTool;
pub use output::{CappedOutput, CommandOutput};
pub use policy::{DEFAULT_DENIED_COMMANDS, DEFAULT_SECRET_PATTERNS, ToolPolicy};
pub use project_file::{ProjectFile, ReadBudget, ReadError, read_regular};
pub use project_walk::project_walker;
pub use project_write::{Existing, FolderError, ProjectFolder, Replaced};
pub use read_file::{MAX_FILE_BYTES as MAX_READ_BYTES, ReadFileTool};
pub use run_command::{RunCommandTool, approve_command, command_directory, unsandboxed_note};
pub use sandbox::{
    ExecRequest, Mechanism, SETUP_FAILED as SANDBOX_SETUP_FAILED, Sandbox, SandboxMode,
    SandboxSettings, SetupError as SandboxSetupError, changes_what_runs, command_environment,
    looks_secret, sandbox_exec,
};
pub use shell::{KEPT_BYTES_PER_STREAM, kill_group, run_shell, shell_word, spawn_shell};
pub use tree_watch::{
    FileStat, TreeChange, TreeStats, record_changes_since, record_command_changes, run_recorded,
    tree_before_command,
};
pub use unfit_root::{UnfitRoot, unfit_root};
pub use web_fetch::{MAX_REDIRECTS, WebFetchTool, non_public_address};
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
    /// What another program (an MCP server) answered or why it could not.
    #[error("{0}")]
    External(String),
}

#[async_trait]
pub trait Tool: Send + Sync {
    fn name(&self) -> &'static str;
    fn description(&self) -> &'static str;
    /// The full JSON Schema of the input; the model is shown it trimmed (`spec`).
    fn input_schema(&self) -> Value;
    /// One realistic call's input, valid under `input_schema`: what the text protocols show
    /// the model.
    fn example(&self) -> Value;
    async fn call(&self, input: Value, context: &ToolContext) -> Result<String, ToolError>;

    /// The progress line while a call of it runs, worded from the call's input.
    fn describe_call(&self, _input: &Value) -> String {
        calling(self.name())
    }

    /// How the model gets a result of it again once the result was shortened to keep the
    /// conversation within its budget: what the stand-in says after "To see it again, ".
    fn reread_hint(&self) -> String {
        call_again(self.name())
    }

    /// The kind of change its calls make, which each call asks approval for
    /// (`approvals.<kind>`); `None` for a tool that only reads.
    fn change_kind(&self) -> Option<ChangeKind> {
        None
    }

    /// When to use it rather than the other tools of its kind of change, as the code loop's
    /// system prompt says it after the tool's name ("new files"); `None` names it alone.
    fn use_when(&self) -> Option<&'static str> {
        None
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec::offered(
            self.name(),
            self.description(),
            &self.input_schema(),
            Some(self.example()),
        )
    }
}

/// The progress line for a call of `name` when its tool has no words of its own.
pub fn calling(name: &str) -> String {
    format!("calling {name}")
}

/// How a shortened result of `name` is got again when its tool says nothing more: the same
/// call.
pub fn call_again(name: &str) -> String {
    format!("call {name} again with the same input.")
}

/// A set of tools a loop offers, answering for each of its tools, by name, what the loop says
/// of its calls. The registry's tools answer through `Tool`; a set whose tools have no words
/// of their own (an MCP server's, a loop's own such as `complete_phase`) answers with the
/// defaults.
pub trait ToolSet {
    /// Its tools' names, in the order offered.
    fn tool_names(&self) -> Vec<&str>;

    /// The progress line for a call of its tool `name`; `None` when `name` is not its tool.
    fn describe_call(&self, name: &str, _input: &Value) -> Option<String> {
        self.tool_names().contains(&name).then(|| calling(name))
    }

    /// `Tool::reread_hint` of its tool `name`; `None` when `name` is not its tool.
    fn reread_hint(&self, name: &str) -> Option<String> {
        self.tool_names().contains(&name).then(|| call_again(name))
    }
}

/// The tools a loop answers itself, offered as their specs (the artifact and review tools,
/// `complete_phase`): the default words.
impl ToolSet for Vec<ToolSpec> {
    fn tool_names(&self) -> Vec<&str> {
        spec_names(self)
    }
}

/// A level's specs as shared among its loops: see `Vec<ToolSpec>`.
impl ToolSet for Arc<[ToolSpec]> {
    fn tool_names(&self) -> Vec<&str> {
        spec_names(self)
    }
}

fn spec_names(specs: &[ToolSpec]) -> Vec<&str> {
    specs.iter().map(|spec| spec.name.as_str()).collect()
}

/// A tool made from a closure, for small tools that need no type of their own.
pub struct FnTool<F> {
    name: &'static str,
    description: &'static str,
    input_schema: Value,
    example: Value,
    run: F,
}

/// Builds a tool from a name, a description, the JSON schema of its input, an example input
/// and a closure that answers a call (synchronously; blocking work belongs in a `Tool` of its
/// own).
pub fn fn_tool<F>(
    name: &'static str,
    description: &'static str,
    input_schema: Value,
    example: Value,
    run: F,
) -> Arc<dyn Tool>
where
    F: Fn(Value, &ToolContext) -> Result<String, ToolError> + Send + Sync + 'static,
{
    Arc::new(FnTool {
        name,
        description,
        input_schema,
        example,
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

    fn example(&self) -> Value {
        self.example.clone()
    }

    async fn call(&self, input: Value, context: &ToolContext) -> Result<String, ToolError> {
        (self.run)(input, context)
    }
}

/// The string `key` of a call's input, empty when it has none: for wording a call, which may
/// come before its input is checked.
fn text_field<'a>(input: &'a Value, key: &str) -> &'a str {
    input.get(key).and_then(Value::as_str).unwrap_or_default()
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
    /// The tools a loop of this type may use, one list per level, in the order offered (a
    /// new tool is added here). Planning levels and verification only read; the code loop also writes, edits
    /// and runs commands. `web_fetch` joins any level's, only when the user enabled it.
    pub fn for_loop(loop_type: LoopType, web_fetch: bool) -> ToolRegistry {
        let mut tools: Vec<Arc<dyn Tool>> = match loop_type {
            LoopType::Plan | LoopType::Spec | LoopType::Phase | LoopType::Verify => vec![
                Arc::new(ReadFileTool),
                Arc::new(ListFilesTool),
                Arc::new(GrepTool),
            ],
            LoopType::Code => vec![
                Arc::new(ReadFileTool),
                Arc::new(ListFilesTool),
                Arc::new(GrepTool),
                Arc::new(WriteFileTool),
                Arc::new(EditFileTool),
                Arc::new(RunCommandTool),
            ],
        };
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

    /// Its tools, in the order offered.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.iter()
    }
}

impl ToolSet for ToolRegistry {
    fn tool_names(&self) -> Vec<&str> {
        self.names()
    }

    fn describe_call(&self, name: &str, input: &Value) -> Option<String> {
        self.get(name).map(|tool| tool.describe_call(input))
    }

    fn reread_hint(&self, name: &str) -> Option<String> {
        self.get(name).map(|tool| tool.reread_hint())
    }
}

/// What `change_file` did.
struct FileChanged {
    shown: String,
    created: bool,
    length: usize,
}

/// Changes one file for `write_file` or `edit_file`: reads it, computes its new text with
/// `edit` (given the current text, `None` if the file does not exist), makes sure an open
/// buffer could take the change, asks for approval, writes (into the editor's buffer when
/// the file is open there), and records the change for the changes list and undo. Reading,
/// diffing and writing run off the async threads. A change that fails after it was
/// accepted is reported to the approver, so the user hears of it too.
async fn change_file<F>(
    context: &ToolContext,
    kind: ChangeKind,
    tool: &'static str,
    requested: &str,
    edit: F,
) -> Result<FileChanged, ToolError>
where
    F: FnOnce(Option<&str>, &str) -> Result<String, ToolError> + Send + 'static,
{
    let path = context.root.resolve_for_write(requested)?;
    refuse_secret(context, &path)?;
    let shown = context.root.relative_display(&path);
    let (before, after, diff) = {
        let path = path.clone();
        let shown = shown.clone();
        let root = context.root.clone();
        run_blocking(context, move || {
            let before = read_existing(&root, &path, &shown)?;
            let after = edit(before.as_deref(), &shown)?;
            let diff = file_diff(&shown, before.as_deref().unwrap_or_default(), &after);
            Ok((before, after, diff))
        })
        .await?
    };
    // Refused before asking: the user is not asked to approve what cannot happen.
    if context.buffers.check(&path).await == BufferCheck::UnsavedChanges {
        return Err(unsaved_changes_error(shown));
    }
    let mut request = ApprovalRequest {
        loop_id: context.loop_id.clone(),
        kind,
        tool,
        subject: shown.clone(),
        detail: diff,
    };
    context.approve(request.clone()).await?;
    let length = after.len();
    let created = before.is_none();
    match write_through_buffers(context, requested, shown.clone(), before, after).await {
        Ok(()) => Ok(FileChanged {
            shown,
            created,
            length,
        }),
        Err(WriteFailure {
            for_model,
            for_user,
        }) => {
            if !matches!(for_model, ToolError::Cancelled) {
                request.detail = String::new();
                context.approver.change_failed(&request, &for_user);
            }
            Err(for_model)
        }
    }
}

fn unsaved_changes_error(shown: String) -> ToolError {
    ToolError::File {
        path: shown,
        message: "is open in the editor with unsaved changes; nothing was changed. Tell the \
                  user to save or discard them, or change other files first"
            .to_owned(),
    }
}

/// Why an accepted change was not made: what the model is told, and what the user is.
struct WriteFailure {
    for_model: ToolError,
    for_user: String,
}

/// Writes `new` to `requested`: into the editor's buffer when the file is open there, else
/// atomically on disk. An open buffer with unsaved changes of the user's is left alone and
/// the write fails, so nothing the user typed is lost. `requested` is resolved again and the
/// file compared with `old` first: the approval wait may have been long, and what was
/// approved must be what is changed.
async fn write_through_buffers(
    context: &ToolContext,
    requested: &str,
    shown: String,
    old: Option<String>,
    new: String,
) -> Result<(), WriteFailure> {
    let failure = |for_model: ToolError, advice: &str| WriteFailure {
        for_user: format!(
            "the accepted change of {shown} was not made: {advice}; the model was told"
        ),
        for_model,
    };
    let path = context
        .root
        .resolve_for_write(requested)
        .map_err(|err| failure(err.into(), "its path is no longer writable"))?;
    let now = {
        let path = path.clone();
        let shown = shown.clone();
        let root = context.root.clone();
        run_blocking(context, move || read_existing(&root, &path, &shown))
            .await
            .map_err(|err| failure(err, "it can no longer be read"))?
    };
    if now != old {
        return Err(failure(
            ToolError::File {
                path: shown.clone(),
                message: "changed while the change waited for approval; nothing was written. \
                          Read it again and redo the change"
                    .to_owned(),
            },
            "it changed while the change waited for approval",
        ));
    }
    let old_text = old.as_deref().unwrap_or_default();
    let written_on_disk = match context.buffers.apply(&path, old_text, &new).await {
        BufferEdit::Applied => false,
        BufferEdit::UnsavedChanges => {
            return Err(failure(
                unsaved_changes_error(shown.clone()),
                "its buffer has unsaved changes. Save (:w) or discard (:e!) them",
            ));
        }
        BufferEdit::NotLoaded => true,
    };
    let journal = context.journal.clone();
    let relative = shown.clone();
    let root = context.root.clone();
    let written = tokio::task::spawn_blocking(move || {
        if written_on_disk {
            crate::store::write_atomic_keeping_mode(&path, new.as_bytes())?;
        }
        // What the buffer saved may differ in line endings from `new`; the journal keeps
        // what is on disk, to recognise later whether the user changed it since.
        let after = if written_on_disk {
            new.into_bytes()
        } else {
            read_regular(&root, &path, MAX_EDITABLE_BYTES)
                .map_err(|err| std::io::Error::other(format!("reading what was saved: {err}")))?
        };
        journal.tool_changed(&relative, old.as_deref().map(str::as_bytes), &after);
        Ok::<(), std::io::Error>(())
    })
    .await;
    match written {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => Err(failure(
            ToolError::File {
                path: shown.clone(),
                message: err.to_string(),
            },
            &format!("writing it failed ({err})"),
        )),
        Err(err) => Err(failure(
            ToolError::File {
                path: shown.clone(),
                message: format!("the write crashed: {err}"),
            },
            "writing it crashed",
        )),
    }
}

/// Larger files are not read whole to be edited or diffed.
const MAX_EDITABLE_BYTES: u64 = 8 * 1024 * 1024;

/// The text of the file at `path`, `None` if it does not exist; an error if it cannot be
/// read as text, is not a regular file or is too large to edit. Blocking.
fn read_existing(
    root: &ProjectRoot,
    path: &std::path::Path,
    shown: &str,
) -> Result<Option<String>, ToolError> {
    let file_error = |message: String| ToolError::File {
        path: shown.to_owned(),
        message,
    };
    let bytes = match read_regular(root, path, MAX_EDITABLE_BYTES) {
        Ok(bytes) => bytes,
        Err(ReadError::NotFound) => return Ok(None),
        Err(ReadError::TooLarge(size)) => {
            return Err(file_error(format!(
                "is {size} bytes, larger than the {MAX_EDITABLE_BYTES}-byte limit for edits"
            )));
        }
        Err(err) => return Err(file_error(err.to_string())),
    };
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|err| file_error(format!("cannot be edited as text: {err}")))
}

/// Secret files are never read or written, whatever the tool.
pub fn refuse_secret(context: &ToolContext, path: &std::path::Path) -> Result<(), ToolError> {
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
#[cfg(test)]
pub(crate) use tests::RecordingApprover;
