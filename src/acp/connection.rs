//! One connection to a started agent: the SDK's client side driven on its own task over the
//! agent's stdio, requests bounded in time with their failures typed (`AcpError`), and what
//! the agent sends Loopr (session updates, and its requests with their responders) passed on
//! through one bounded channel, `FromAgent`, for the code loop to serve.

use std::time::Duration;

use agent_client_protocol::v1::schema::{
    AuthMethod, CreateTerminalRequest, KillTerminalRequest, ReadTextFileRequest,
    ReleaseTerminalRequest, RequestPermissionRequest, SessionNotification, TerminalOutputRequest,
    WaitForTerminalExitRequest, WriteTextFileRequest,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, ErrorCode, JsonRpcMessage, JsonRpcRequest};
use futures::channel::{mpsc, oneshot};

use super::config::AgentConfig;
use super::error::{AcpError, SignIn};
use super::inflow::Inflow;
use super::process::AgentProcess;

/// How long a dead agent's exit status and last stderr are waited for.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// A request of the agent with its responder: answered by whoever serves it. A responder
/// dropped unanswered answers the agent with an error, so the agent never waits forever.
/// Boxed: requests are large and differ in size.
type Asked<Request> = Box<(Request, Responder<<Request as JsonRpcRequest>::Response>)>;

/// What the agent sends Loopr, in the order it arrives.
#[derive(Debug)]
pub enum FromAgent {
    Update(Box<SessionNotification>),
    Permission(Asked<RequestPermissionRequest>),
    ReadTextFile(Asked<ReadTextFileRequest>),
    WriteTextFile(Asked<WriteTextFileRequest>),
    CreateTerminal(Asked<CreateTerminalRequest>),
    TerminalOutput(Asked<TerminalOutputRequest>),
    WaitForTerminalExit(Asked<WaitForTerminalExitRequest>),
    KillTerminal(Asked<KillTerminalRequest>),
    ReleaseTerminal(Asked<ReleaseTerminalRequest>),
}

/// A started agent and its ACP connection. Dropping it ends the connection and kills the
/// agent's process group.
pub struct AgentConnection {
    process: AgentProcess,
    config: AgentConfig,
    connection: ConnectionTo<Agent>,
    from_agent: Option<mpsc::Receiver<FromAgent>>,
    stop: Option<oneshot::Sender<()>>,
    driver: tokio::task::JoinHandle<()>,
    /// How the agent said one signs in (`initialize`), for an `auth_required` error.
    sign_in: Vec<SignIn>,
}

impl Drop for AgentConnection {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.driver.abort();
    }
}

/// How many of the agent's messages wait to be served, and how many more may be read before
/// they are: past it, the connection stops reading the agent until the loop takes one
/// (`inflow.rs`), so an agent that floods Loopr (between turns, when nothing is taken) fills
/// its own pipe, not the host's memory.
const WAITING_MESSAGES: usize = 64;

/// Passes what arrives on to `sender`, waiting while `WAITING_MESSAGES` wait; with no one
/// left to serve it, the request is answered with an error (its responder dropped). Then the
/// next message may be read.
async fn pass_on(sender: &mpsc::Sender<FromAgent>, inflow: &Inflow, message: FromAgent) {
    use futures::SinkExt;
    if sender.clone().send(message).await.is_err() {
        tracing::debug!("a message of the ACP agent arrived with no one to serve it");
    }
    inflow.passed();
}

/// Whether the agent's messages of `method` are passed on as `FromAgent` (and so read only
/// with a credit of the inflow).
fn passed_on(method: &str) -> bool {
    SessionNotification::matches_method(method)
        || RequestPermissionRequest::matches_method(method)
        || ReadTextFileRequest::matches_method(method)
        || WriteTextFileRequest::matches_method(method)
        || CreateTerminalRequest::matches_method(method)
        || TerminalOutputRequest::matches_method(method)
        || WaitForTerminalExitRequest::matches_method(method)
        || KillTerminalRequest::matches_method(method)
        || ReleaseTerminalRequest::matches_method(method)
}

/// Registers a handler for each request type that passes it on as `FromAgent::$variant`.
macro_rules! pass_requests_on {
    ($builder:expr, $sender:expr, $inflow:expr, $($variant:ident: $request:ty),+ $(,)?) => {
        $builder
        $(
            .on_receive_request(
                {
                    let sender = $sender.clone();
                    let inflow = $inflow.clone();
                    async move |request: $request, responder, _connection| {
                        let message = FromAgent::$variant(Box::new((request, responder)));
                        pass_on(&sender, &inflow, message).await;
                        Ok(())
                    }
                },
                agent_client_protocol::on_receive_request!(),
            )
        )+
    };
}

impl AgentConnection {
    /// Starts agent `name` in `root` and connects to it (no request is sent yet).
    pub async fn start(
        name: &str,
        config: &AgentConfig,
        root: &std::path::Path,
    ) -> Result<AgentConnection, AcpError> {
        let mut process = AgentProcess::spawn(name, config, root)?;
        let inflow = Inflow::new(WAITING_MESSAGES);
        let transport =
            process
                .take_transport(&inflow, passed_on)
                .ok_or_else(|| AcpError::NotStarted {
                    agent: name.to_owned(),
                    command: config.command.clone(),
                    reason: "its stdio was already taken".to_owned(),
                })?;
        let (sender, from_agent) = mpsc::channel(WAITING_MESSAGES);
        let (connection_sender, connection_receiver) = oneshot::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let updates = sender.clone();
        let update_inflow = inflow.clone();
        let builder = Client.v1().name("loopr").on_receive_notification(
            async move |notification: SessionNotification, _connection| {
                let message = FromAgent::Update(Box::new(notification));
                pass_on(&updates, &update_inflow, message).await;
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        );
        let builder = pass_requests_on!(builder, sender, inflow,
            Permission: RequestPermissionRequest,
            ReadTextFile: ReadTextFileRequest,
            WriteTextFile: WriteTextFileRequest,
            CreateTerminal: CreateTerminalRequest,
            TerminalOutput: TerminalOutputRequest,
            WaitForTerminalExit: WaitForTerminalExitRequest,
            KillTerminal: KillTerminalRequest,
            ReleaseTerminal: ReleaseTerminalRequest,
        );
        let agent = name.to_owned();
        let driver = tokio::spawn(async move {
            let ended = builder
                .connect_with(transport, async move |connection: ConnectionTo<Agent>| {
                    let _ = connection_sender.send(connection);
                    let _ = stopped.await;
                    Ok(())
                })
                .await;
            if let Err(err) = ended {
                tracing::debug!(%agent, "the ACP connection ended: {err}");
            }
        });
        // The driver hands the connection over as soon as it runs, before any I/O.
        let connection = connection_receiver
            .await
            .map_err(|_| AcpError::NotStarted {
                agent: name.to_owned(),
                command: config.command.clone(),
                reason: "its connection could not be set up".to_owned(),
            })?;
        Ok(AgentConnection {
            process,
            config: config.clone(),
            connection,
            from_agent: Some(from_agent),
            stop: Some(stop),
            driver,
            sign_in: Vec::new(),
        })
    }

    pub fn name(&self) -> &str {
        self.process.name()
    }

    /// What the agent sends Loopr, once (the code loop serves it).
    pub fn take_from_agent(&mut self) -> Option<mpsc::Receiver<FromAgent>> {
        self.from_agent.take()
    }

    /// The SDK's connection, for notifications (`session/cancel`).
    pub fn connection(&self) -> &ConnectionTo<Agent> {
        &self.connection
    }

    /// Remembers how the agent said one signs in, for a later `auth_required` error.
    pub(super) fn set_sign_in(&mut self, methods: &[AuthMethod]) {
        self.sign_in = methods
            .iter()
            .map(|method| sign_in(&self.config, method))
            .collect();
    }

    /// Sends `request` (ACP method `method`) and waits at most `limit` for its answer; a
    /// failure typed, with the agent's stderr tail where it died. Until the code loop takes
    /// what the agent sends (`take_from_agent`: its session is open), what the agent sends
    /// meanwhile is refused, not left waiting: an agent that asks something before it answers
    /// `session/new` then goes on, and the bounded channel never fills while nobody reads it.
    pub async fn request<Request: JsonRpcRequest>(
        &mut self,
        method: &'static str,
        request: Request,
        limit: Duration,
    ) -> Result<Request::Response, AcpError> {
        let Some(mut from_agent) = self.from_agent.take() else {
            return self.answer(method, request, limit).await;
        };
        let refusing = async {
            use futures::StreamExt;
            while let Some(message) = from_agent.next().await {
                refuse_before_session(message);
            }
            // Nothing more will come: only the answer ends the wait.
            std::future::pending::<Result<Request::Response, AcpError>>().await
        };
        let answered = tokio::select! {
            // The answer first: what the agent sends after it is the session's.
            biased;
            answered = self.answer(method, request, limit) => answered,
            never = refusing => never,
        };
        self.from_agent = Some(from_agent);
        answered
    }

    async fn answer<Request: JsonRpcRequest>(
        &mut self,
        method: &'static str,
        request: Request,
        limit: Duration,
    ) -> Result<Request::Response, AcpError> {
        let sent = self.connection.send_request(request).block_task();
        match tokio::time::timeout(limit, sent).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(err)) => Err(self.request_failed(method, err).await),
            Err(_) => Err(AcpError::TimedOut {
                agent: self.name().to_owned(),
                method,
                waited: limit,
                stderr_tail: self.process.stderr_tail(),
            }),
        }
    }

    /// `err` (of `method`) as what it means: the agent gone, a sign-in asked, a version it
    /// does not speak, or its own error.
    async fn request_failed(
        &mut self,
        method: &'static str,
        err: agent_client_protocol::Error,
    ) -> AcpError {
        let agent = self.name().to_owned();
        if agent_client_protocol::is_incoming_transport_closed(&err)
            || agent_client_protocol::is_connection_terminated(&err)
        {
            let status = self.process.ended(EXIT_GRACE).await;
            return AcpError::Exited {
                agent,
                status,
                stderr_tail: self.process.stderr_tail(),
            };
        }
        if err.code == ErrorCode::AUTH_REQUIRED {
            return AcpError::AuthenticationRequired {
                agent,
                methods: self.sign_in.clone(),
            };
        }
        let data = err
            .data
            .as_ref()
            .map(|data| match data {
                serde_json::Value::String(text) => text.clone(),
                other => other.to_string(),
            })
            .unwrap_or_default();
        if let Some(agent_version) = super::version::version_refused(&data) {
            return AcpError::ProtocolMismatch {
                agent,
                agent_version,
                loopr_version: super::version::LOOPR_PROTOCOL_VERSION.as_u16(),
            };
        }
        let message = if data.is_empty() {
            err.message.clone()
        } else {
            format!("{}: {data}", err.message)
        };
        AcpError::Protocol {
            agent,
            method,
            message: one_line(&message),
            stderr_tail: self.process.stderr_tail(),
        }
    }

    /// Ends the connection and kills the agent's process group.
    pub async fn shut_down(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.process.kill().await;
    }
}

/// What the agent sends before its session is open: an update is dropped (no session shows
/// it yet), a request answered with an error saying so.
fn refuse_before_session(message: FromAgent) {
    let responder = match message {
        FromAgent::Update(_) => return,
        FromAgent::Permission(asked) => asked.1.erase_to_json(),
        FromAgent::ReadTextFile(asked) => asked.1.erase_to_json(),
        FromAgent::WriteTextFile(asked) => asked.1.erase_to_json(),
        FromAgent::CreateTerminal(asked) => asked.1.erase_to_json(),
        FromAgent::TerminalOutput(asked) => asked.1.erase_to_json(),
        FromAgent::WaitForTerminalExit(asked) => asked.1.erase_to_json(),
        FromAgent::KillTerminal(asked) => asked.1.erase_to_json(),
        FromAgent::ReleaseTerminal(asked) => asked.1.erase_to_json(),
    };
    let refusal = agent_client_protocol::Error::invalid_request()
        .data("no session is open yet: Loopr serves requests once session/new is answered");
    if let Err(err) = responder.respond_with_error(refusal) {
        tracing::debug!("refusing an ACP agent's request before its session: {err}");
    }
}

/// `method` as the user follows it: a terminal method's command is the agent's own, with
/// the method's arguments, each word quoted as a shell needs it.
fn sign_in(config: &AgentConfig, method: &AuthMethod) -> SignIn {
    let command = match method {
        AuthMethod::Terminal(terminal) => {
            let words: Vec<String> = std::iter::once(&config.command)
                .chain(&config.args)
                .chain(&terminal.args)
                .map(|word| crate::tools::shell_word(word))
                .collect();
            Some(words.join(" "))
        }
        _ => None,
    };
    SignIn {
        name: method.name().to_owned(),
        command,
    }
}

/// An agent's error message as one line of at most 400 characters.
fn one_line(message: &str) -> String {
    let line = message.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(400) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}
