//! `loopr-test-acp-agent [--behave NAME]`: a coding agent speaking ACP over stdio, written
//! with the same SDK the host uses (its agent side), for the tests of `src/acp`. What it does
//! is chosen by `--behave`:
//! - `normal` (the default): answers `initialize` as "Loopr Test Agent", opens sessions and
//!   ends each prompt's turn at once;
//! - `crash`: writes two lines to stderr and exits with status 3 before reading anything;
//! - `version`: answers `initialize` with protocol version 7 (written by hand: the SDK's agent
//!   side answers only in the version it was asked);
//! - `auth`: offers a terminal sign-in (`--login`) and refuses `session/new` until signed in;
//! - `hang`: reads `initialize` and never answers;
//! - `script`: a code loop's session (`script` below): the first prompt reads `notes.txt` over
//!   `fs`, asks permission for an edit (written over `fs` once approved) and for a command
//!   (expected to be rejected: it goes on), writes `README.md` and `status.txt` ("not yet")
//!   straight to disk, runs a command through `terminal` (one write inside the project, one
//!   outside), reports its plan and usage and ends its turn; a prompt saying the validation
//!   failed writes `status.txt` ("ok") and ends its turn;
//! - `wait`: each prompt writes its pid to `agent.pid`, says it works, then waits for
//!   `session/cancel` and ends its turn as cancelled;
//!
//! In every behaviour, a `session/cancel` is noted in `agent-saw-cancel` in its directory, and
//! with `LOOPR_TEST_AGENT_PROMPTS` set each prompt's text is appended to that file as a JSON
//! line with this process's id (`record_prompt`), so a test reads what the agent was told.
//! - `die`: each prompt says it starts, writes two lines to stderr and exits with status 4.
//! - `permissions`: the first prompt asks permission for a command it declares a "read",
//!   then for an edit of `notes.txt` with its diff, which once allowed it writes over `fs`
//!   exactly; a prompt saying the validation failed is answered as in `script`.
//! - `costly`, `euro`, `silent`, `flood`, `late`, `asks` (`limits` below): a cost over the
//!   budget, a cost in euros, no answer at all, a flood of text around its answer, a write
//!   after its answer, twenty permission requests at once.
//! - `pipe-flood`: floods Loopr's pipe (`flood` below): answers `initialize` by hand, then writes
//!   `FLOOD_UPDATES` session updates without waiting (`flood-blocked` noted if they stall
//!   for 2 s), notes `flood-sent` once all are written, asks to read `notes.txt` and sends one last update saying what it got.
//! - `record`: writes what `session/new` handed it (its MCP servers, and its environment) to
//!   files in its directory; each prompt writes `status.txt` ("ok") and ends its turn;
//! - `early`: sends 100 `session/update`s and an `fs/read_text_file` request before it answers
//!   `session/new` (`acp_agent_setup.rs`), then behaves as `normal`;
//! - `leak`: writes credentials to stderr (a token in a URL, an `Authorization` header, the
//!   value of its `LOOPR_TEST_AGENT_TOKEN`) and exits with status 3 before reading anything;
//! - `linger`: each prompt writes its pid to `agent.pid`, says it works and never ends; the
//!   process stays when its stdin closes, until killed.

use std::time::Duration;

use agent_client_protocol::v1::schema::{
    AgentCapabilities, AuthMethod, AuthMethodTerminal, CancelNotification, Implementation,
    InitializeRequest, InitializeResponse, McpCapabilities, NewSessionRequest, NewSessionResponse,
    PromptCapabilities, PromptRequest, PromptResponse, StopReason,
};
use agent_client_protocol::{Agent, Error, Lines};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Behaviour {
    Normal,
    Crash,
    Version,
    Auth,
    Hang,
    Script,
    Wait,
    Die,
    Permissions,
    Costly,
    Silent,
    Flood,
    Late,
    Asks,
    Euro,
    PipeFlood,
    Record,
    Early,
    Leak,
    Linger,
}

impl Behaviour {
    fn from_args() -> Result<Behaviour, String> {
        let args: Vec<String> = std::env::args().skip(1).collect();
        match args
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice()
        {
            [] | ["--behave", "normal"] => Ok(Behaviour::Normal),
            ["--behave", "crash"] => Ok(Behaviour::Crash),
            ["--behave", "version"] => Ok(Behaviour::Version),
            ["--behave", "auth"] => Ok(Behaviour::Auth),
            ["--behave", "hang"] => Ok(Behaviour::Hang),
            ["--behave", "script"] => Ok(Behaviour::Script),
            ["--behave", "wait"] => Ok(Behaviour::Wait),
            ["--behave", "die"] => Ok(Behaviour::Die),
            ["--behave", "permissions"] => Ok(Behaviour::Permissions),
            ["--behave", "costly"] => Ok(Behaviour::Costly),
            ["--behave", "silent"] => Ok(Behaviour::Silent),
            ["--behave", "flood"] => Ok(Behaviour::Flood),
            ["--behave", "late"] => Ok(Behaviour::Late),
            ["--behave", "asks"] => Ok(Behaviour::Asks),
            ["--behave", "euro"] => Ok(Behaviour::Euro),
            ["--behave", "pipe-flood"] => Ok(Behaviour::PipeFlood),
            ["--behave", "record"] => Ok(Behaviour::Record),
            ["--behave", "early"] => Ok(Behaviour::Early),
            ["--behave", "leak"] => Ok(Behaviour::Leak),
            ["--behave", "linger"] => Ok(Behaviour::Linger),
            ["--login"] => Err("signed in (test agent): nothing to do".to_owned()),
            other => Err(format!("unknown arguments {other:?}")),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let behaviour = match Behaviour::from_args() {
        Ok(behaviour) => behaviour,
        Err(message) => {
            eprintln!("loopr-test-acp-agent: {message}");
            std::process::exit(2);
        }
    };
    if behaviour == Behaviour::Crash {
        eprintln!("loopr-test-acp-agent: starting");
        eprintln!("loopr-test-acp-agent: no model configured, giving up");
        std::process::exit(3);
    }
    if behaviour == Behaviour::Leak {
        setup::leak_and_crash();
    }
    if behaviour == Behaviour::Version {
        answer_in_version_7().await;
        return;
    }
    if behaviour == Behaviour::PipeFlood {
        flood::flood();
        return;
    }
    if let Err(err) = serve(behaviour).await {
        eprintln!("loopr-test-acp-agent: {err}");
        std::process::exit(1);
    }
    if behaviour == Behaviour::Linger {
        setup::linger().await;
    }
}

async fn serve(behaviour: Behaviour) -> Result<(), Error> {
    let cancelled = std::sync::Arc::new(tokio::sync::Notify::new());
    let seen_cancel = cancelled.clone();
    Agent
        .v1()
        .name("loopr-test-acp-agent")
        .on_receive_request(
            async move |request: InitializeRequest, responder, _connection| {
                if behaviour == Behaviour::Hang {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                responder.respond(initialize_answer(behaviour, &request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: NewSessionRequest, responder, connection| match behaviour {
                Behaviour::Auth => responder.respond_with_error(Error::auth_required()),
                Behaviour::Record => responder.respond(setup::record(&request)),
                Behaviour::Early => setup::early(request, responder, connection),
                _ => responder.respond(NewSessionResponse::new("test-session-1")),
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: PromptRequest, responder, connection| {
                record_prompt(&request);
                let cancelled = cancelled.clone();
                match behaviour {
                    // The turn talks to the client: on a task of its own, so that the
                    // connection goes on reading the client's answers.
                    Behaviour::Script
                    | Behaviour::Wait
                    | Behaviour::Die
                    | Behaviour::Permissions => connection.clone().spawn(async move {
                        let stop = script::turn(behaviour, &connection, &request, &cancelled).await;
                        responder.respond(PromptResponse::new(stop))
                    }),
                    Behaviour::Costly
                    | Behaviour::Silent
                    | Behaviour::Flood
                    | Behaviour::Late
                    | Behaviour::Asks
                    | Behaviour::Euro => connection.clone().spawn(async move {
                        let Some(answer) =
                            limits::turn(behaviour, &connection, &request, &cancelled).await
                        else {
                            return std::future::pending().await;
                        };
                        responder.respond(answer)?;
                        limits::after_answer(behaviour, &connection, &request).await;
                        Ok(())
                    }),
                    Behaviour::Linger => {
                        setup::linger_turn(&request, &connection);
                        // Never answered: the responder waits in a task of its own.
                        connection.spawn(async move {
                            setup::linger().await;
                            responder.respond(PromptResponse::new(StopReason::EndTurn))
                        })
                    }
                    Behaviour::Record => {
                        setup::finish_phase();
                        responder.respond(PromptResponse::new(StopReason::EndTurn))
                    }
                    _ => responder.respond(PromptResponse::new(StopReason::EndTurn)),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |_cancel: CancelNotification, _connection| {
                // Noted on disk for the tests; a turn waiting for it (`wait`) then ends.
                let _ = std::fs::write("agent-saw-cancel", "session/cancel arrived\n");
                seen_cancel.notify_one();
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(stdio())
        .await
}

/// Answers the first request (`initialize`) as an agent speaking protocol version 7 would,
/// then waits for stdin to close.
async fn answer_in_version_7() {
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let Ok(Some(line)) = lines.next_line().await else {
        return;
    };
    let id = serde_json::from_str::<serde_json::Value>(&line)
        .ok()
        .and_then(|request| request.get("id").cloned())
        .unwrap_or(serde_json::Value::Null);
    let answer = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": { "protocolVersion": 7, "agentCapabilities": {}, "authMethods": [] },
    });
    let mut stdout = tokio::io::stdout();
    let _ = stdout.write_all(format!("{answer}\n").as_bytes()).await;
    let _ = stdout.flush().await;
    while let Ok(Some(_)) = lines.next_line().await {}
}

/// Appends the prompt's text, with this process's id, to the file `LOOPR_TEST_AGENT_PROMPTS`
/// names, if it names one.
fn record_prompt(request: &PromptRequest) {
    let Some(path) = std::env::var_os("LOOPR_TEST_AGENT_PROMPTS").filter(|path| !path.is_empty())
    else {
        return;
    };
    let text: String = request
        .prompt
        .iter()
        .filter_map(|block| match block {
            agent_client_protocol::v1::schema::ContentBlock::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect();
    let line = serde_json::json!({ "pid": std::process::id(), "prompt": text });
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes()));
    if let Err(err) = appended {
        eprintln!("loopr-test-acp-agent: recording the prompt: {err}");
    }
}

#[path = "acp_agent_flood.rs"]
mod flood;

#[path = "acp_agent_script.rs"]
mod script;

#[path = "acp_agent_limits.rs"]
mod limits;
#[path = "acp_agent_setup.rs"]
mod setup;

fn initialize_answer(behaviour: Behaviour, request: &InitializeRequest) -> InitializeResponse {
    let mut answer = InitializeResponse::new(request.protocol_version)
        .agent_capabilities(
            AgentCapabilities::new()
                .load_session(true)
                .prompt_capabilities(PromptCapabilities::new().embedded_context(true))
                .mcp_capabilities(McpCapabilities::new().http(true)),
        )
        .agent_info(Implementation::new("loopr-test-acp-agent", "0.3.1").title("Loopr Test Agent"));
    if behaviour == Behaviour::Auth {
        answer = answer.auth_methods(vec![AuthMethod::Terminal(
            AuthMethodTerminal::new("login", "Log in").args(vec!["--login".to_owned()]),
        )]);
    }
    answer
}

/// This process's stdio as the SDK's line transport.
fn stdio() -> Lines<
    impl futures::Sink<String, Error = std::io::Error> + Send + 'static,
    impl futures::Stream<Item = std::io::Result<String>> + Send + 'static,
> {
    let outgoing = Box::pin(futures::sink::unfold(
        tokio::io::stdout(),
        |mut stdout, line: String| async move {
            stdout.write_all(line.as_bytes()).await?;
            stdout.write_all(b"\n").await?;
            stdout.flush().await?;
            Ok::<_, std::io::Error>(stdout)
        },
    ));
    let incoming = Box::pin(futures::stream::unfold(
        tokio::io::BufReader::new(tokio::io::stdin()).lines(),
        |mut lines| async move {
            match lines.next_line().await {
                Ok(Some(line)) => Some((Ok(line), lines)),
                Ok(None) => None,
                Err(err) => Some((Err(err), lines)),
            }
        },
    ));
    Lines::new(outgoing, incoming)
}
