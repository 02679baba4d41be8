//! The client side of ACP a coding agent calls while it implements a phase, served through
//! Loopr's own rules: `fs/*` through the project-root confinement, the secret patterns, open
//! buffers, the approval of writes and the change journal (`files.rs`); `terminal/*` through
//! the sandbox and command approvals (`terminals.rs`); `session/request_permission` through
//! the approval prompt (`permission.rs`).

mod files;
mod permission;
mod terminals;

use agent_client_protocol::v1::schema::ToolKind;
use agent_client_protocol::{Error, ErrorCode};

use crate::acp::FromAgent;
use crate::tools::{PathError, ToolContext, ToolError};

use permission::Permissions;
use terminals::Terminals;

/// Serves one loop's agent; one per code loop run by an agent. `serve` may be called for
/// several requests at once (a `terminal/wait_for_exit` waits while others are served).
pub struct AgentClient {
    tools: ToolContext,
    terminals: Terminals,
    permissions: Permissions,
}

impl AgentClient {
    /// Serves the agent of the code loop whose changing tools run with `tools`: its sandbox,
    /// policy, approver, open buffers, change journal and cancel.
    pub fn new(tools: ToolContext) -> AgentClient {
        AgentClient {
            tools,
            terminals: Terminals::default(),
            permissions: Permissions::default(),
        }
    }

    /// Answers one request of the agent (any `FromAgent` but `Update`, which the loop shows).
    /// Never fails: what goes wrong is the agent's error answer, worded for it.
    pub async fn serve(&self, request: FromAgent) {
        let context = &self.tools;
        let sent = match request {
            FromAgent::Update(_) => Ok(()),
            FromAgent::Permission(asked) => {
                let (request, responder) = *asked;
                responder.respond(self.permissions.decide(context, request).await)
            }
            FromAgent::ReadTextFile(asked) => {
                let (request, responder) = *asked;
                responder.respond_with_result(files::read(context, request).await.map_err(answer))
            }
            FromAgent::WriteTextFile(asked) => {
                let (request, responder) = *asked;
                let written = files::write(context, &self.permissions, request).await;
                responder.respond_with_result(written.map_err(answer))
            }
            FromAgent::CreateTerminal(asked) => {
                let (request, responder) = *asked;
                let created = self.terminals.create(context, request).await;
                responder.respond_with_result(created.map_err(answer))
            }
            FromAgent::TerminalOutput(asked) => {
                let (request, responder) = *asked;
                responder.respond_with_result(
                    self.terminals.output(&request.terminal_id).map_err(answer),
                )
            }
            FromAgent::WaitForTerminalExit(asked) => {
                let (request, responder) = *asked;
                let exited = self.terminals.wait_for_exit(&request.terminal_id).await;
                responder.respond_with_result(exited.map_err(answer))
            }
            FromAgent::KillTerminal(asked) => {
                let (request, responder) = *asked;
                responder
                    .respond_with_result(self.terminals.kill(&request.terminal_id).map_err(answer))
            }
            FromAgent::ReleaseTerminal(asked) => {
                let (request, responder) = *asked;
                let released = self.terminals.release(&request.terminal_id).await;
                responder.respond_with_result(released.map_err(answer))
            }
        };
        if let Err(err) = sent {
            // The agent is gone or the connection closed: nothing more to tell it.
            tracing::debug!("answering the ACP agent failed: {err}");
        }
    }

    /// Kills every terminal the agent left running (with everything it started) and
    /// releases them all: the loop ends.
    pub async fn close(&self) {
        self.terminals.close().await;
    }
}

/// `err` as the agent's JSON-RPC error: a code for what kind of failure it is and Loopr's
/// message, which says what was wrong and what to do.
fn answer(err: ToolError) -> Error {
    let code = match &err {
        ToolError::Path(PathError::NotFound { .. }) => ErrorCode::RESOURCE_NOT_FOUND,
        ToolError::InvalidInput(_) | ToolError::Path(_) => ErrorCode::INVALID_PARAMS,
        ToolError::Denied(_) | ToolError::Rejected(_) => ErrorCode::INVALID_REQUEST,
        ToolError::Cancelled => ErrorCode::REQUEST_CANCELLED,
        ToolError::File { .. } | ToolError::External(_) => ErrorCode::INTERNAL_ERROR,
    };
    Error::new(code, err.to_string())
}

/// A call's `kind` in words, as the user is shown it and the journal keeps it: the
/// protocol's own word.
pub(crate) fn kind_word(kind: ToolKind) -> &'static str {
    match kind {
        ToolKind::Read => "read",
        ToolKind::Edit => "edit",
        ToolKind::Delete => "delete",
        ToolKind::Move => "move",
        ToolKind::Search => "search",
        ToolKind::Execute => "execute",
        ToolKind::Think => "think",
        ToolKind::Fetch => "fetch",
        ToolKind::SwitchMode => "switch_mode",
        _ => "other",
    }
}

/// `path` as the tools take it: ACP paths are absolute, and must lie inside the project.
fn absolute_path(path: &std::path::Path) -> Result<String, ToolError> {
    if !path.is_absolute() {
        return Err(ToolError::InvalidInput(format!(
            "{:?} is not an absolute path; ACP paths are absolute (inside the project root)",
            path.display().to_string()
        )));
    }
    path.to_str().map(str::to_owned).ok_or_else(|| {
        ToolError::InvalidInput(format!(
            "{:?} is not valid UTF-8; only UTF-8 paths are served",
            path.display().to_string()
        ))
    })
}

#[cfg(test)]
mod tests;
