//! What can go wrong starting or talking to a coding agent, each case with what the user
//! needs to fix it: the setting and the command, the agent's last words on stderr, the
//! protocol versions, the sign-in command.

use std::time::Duration;

/// How the agent asks the user to sign in, as its `initialize` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignIn {
    /// The method's name, as the agent words it ("Log in with Claude").
    pub name: String,
    /// The command to run in a terminal, for a terminal method (the agent's own command
    /// with the method's arguments); `None` for a method the agent runs itself.
    pub command: Option<String>,
}

/// Why an agent could not be started or answered wrongly.
#[derive(Debug, thiserror::Error)]
pub enum AcpError {
    /// `command` is neither on PATH nor an executable file.
    #[error("agent {agent:?} (setting agents.{agent}.command): `{command}` not found on PATH")]
    NotFound { agent: String, command: String },
    /// The program exists but could not be started.
    #[error(
        "agent {agent:?} (setting agents.{agent}.command): starting `{command}` failed: {reason}"
    )]
    NotStarted {
        agent: String,
        command: String,
        reason: String,
    },
    /// The agent's process ended (or closed its stdout) before it answered.
    #[error("agent {agent:?} exited before it answered ({status}){}", stderr_words(.stderr_tail))]
    Exited {
        agent: String,
        /// `exit status 3`, `killed by signal 9`, or `still running` when it closed stdout.
        status: String,
        stderr_tail: String,
    },
    /// The agent speaks another protocol version than Loopr.
    #[error(
        "agent {agent:?} speaks ACP protocol version {agent_version}, Loopr speaks version \
         {loopr_version}; install a version of the agent's ACP adapter for protocol version \
         {loopr_version}"
    )]
    ProtocolMismatch {
        agent: String,
        /// As the agent said it (`"2"`; `"unknown"` when it said none Loopr could read).
        agent_version: String,
        loopr_version: u16,
    },
    /// The agent needs the user to sign in first.
    #[error("agent {agent:?} asks you to sign in first{}", sign_in_words(.methods))]
    AuthenticationRequired { agent: String, methods: Vec<SignIn> },
    /// The agent did not answer `method` in time.
    #[error("agent {agent:?} did not answer {method} within {} s{}", .waited.as_secs(), stderr_words(.stderr_tail))]
    TimedOut {
        agent: String,
        method: &'static str,
        waited: Duration,
        stderr_tail: String,
    },
    /// The agent answered `method` with an error, or with something that is not ACP.
    #[error("agent {agent:?} failed {method}: {message}{}", stderr_words(.stderr_tail))]
    Protocol {
        agent: String,
        method: &'static str,
        message: String,
        stderr_tail: String,
    },
}

impl AcpError {
    /// The agent's name, as `agents` has it.
    pub fn agent(&self) -> &str {
        match self {
            AcpError::NotFound { agent, .. }
            | AcpError::NotStarted { agent, .. }
            | AcpError::Exited { agent, .. }
            | AcpError::ProtocolMismatch { agent, .. }
            | AcpError::AuthenticationRequired { agent, .. }
            | AcpError::TimedOut { agent, .. }
            | AcpError::Protocol { agent, .. } => agent,
        }
    }
}

fn stderr_words(tail: &str) -> String {
    if tail.trim().is_empty() {
        String::new()
    } else {
        format!("; its stderr ended with:\n{}", tail.trim_end())
    }
}

fn sign_in_words(methods: &[SignIn]) -> String {
    let words: Vec<String> = methods
        .iter()
        .map(|method| match &method.command {
            Some(command) => format!("run `{command}` in a terminal ({})", method.name),
            None => format!("{} (the agent signs in itself)", method.name),
        })
        .collect();
    if words.is_empty() {
        "; it names no way to sign in, see the agent's documentation".to_owned()
    } else {
        format!(": {}", words.join("; or "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_setting_the_versions_and_the_sign_in_command() {
        let missing = AcpError::NotFound {
            agent: "claude".to_owned(),
            command: "claude-agent-acp".to_owned(),
        };
        assert_eq!(
            missing.to_string(),
            "agent \"claude\" (setting agents.claude.command): `claude-agent-acp` not found on PATH"
        );
        let exited = AcpError::Exited {
            agent: "goose".to_owned(),
            status: "exit status 3".to_owned(),
            stderr_tail: "error: no config\n".to_owned(),
        };
        assert_eq!(
            exited.to_string(),
            "agent \"goose\" exited before it answered (exit status 3); its stderr ended with:\nerror: no config"
        );
        let auth = AcpError::AuthenticationRequired {
            agent: "claude".to_owned(),
            methods: vec![SignIn {
                name: "Log in".to_owned(),
                command: Some("claude-agent-acp --login".to_owned()),
            }],
        };
        assert_eq!(
            auth.to_string(),
            "agent \"claude\" asks you to sign in first: run `claude-agent-acp --login` in a terminal (Log in)"
        );
    }
}
