//! The client side of ACP a coding agent calls while it implements a phase, served through
//! Loopr's own rules: `fs/*` through the project-root confinement, the secret patterns, open
//! buffers, the approval of writes and the change journal; `terminal/*` through the sandbox
//! and command approvals; `session/request_permission` through the approval prompt.

use crate::acp::FromAgent;
use crate::tools::ToolContext;

/// Serves one loop's agent; one per code loop run by an agent.
pub struct AgentClient {
    #[allow(dead_code)] // Used once each request is served (the serving part of issue 27).
    tools: ToolContext,
}

impl AgentClient {
    /// Serves the agent of the code loop whose changing tools run with `tools`.
    pub fn new(tools: ToolContext) -> AgentClient {
        AgentClient { tools }
    }

    /// Answers one request of the agent (any `FromAgent` but `Update`, which the loop shows).
    /// Never fails: what goes wrong is the agent's error answer.
    pub async fn serve(&self, request: FromAgent) {
        let refused = || agent_client_protocol::Error::method_not_found();
        let _ = match request {
            FromAgent::Update(_) => Ok(()),
            FromAgent::Permission((_, responder)) => responder.respond_with_error(refused()),
            FromAgent::ReadTextFile((_, responder)) => responder.respond_with_error(refused()),
            FromAgent::WriteTextFile((_, responder)) => responder.respond_with_error(refused()),
            FromAgent::CreateTerminal((_, responder)) => responder.respond_with_error(refused()),
            FromAgent::TerminalOutput((_, responder)) => responder.respond_with_error(refused()),
            FromAgent::WaitForTerminalExit((_, responder)) => {
                responder.respond_with_error(refused())
            }
            FromAgent::KillTerminal((_, responder)) => responder.respond_with_error(refused()),
            FromAgent::ReleaseTerminal((_, responder)) => responder.respond_with_error(refused()),
        };
    }

    /// Kills and releases every terminal the agent left open: the loop ends.
    pub async fn close(&self) {}
}
