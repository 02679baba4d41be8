//! The test agent's behaviours around a session's setup (`--behave record`, `early`): what
//! it was handed (`record`: `session/new`'s MCP servers and its own environment, written to
//! files a test reads) and an agent that talks to the client before `session/new` is
//! answered (`early`); one that dies with credentials in its last words (`leak`); and one
//! that outlives its stdin (`linger`).

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::Responder;
use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, NewSessionRequest, NewSessionResponse, PromptRequest,
    ReadTextFileRequest, SessionNotification, SessionUpdate, TextContent, ToolCall, ToolCallStatus,
    ToolKind,
};
use agent_client_protocol::{Client, Error};

/// Where `record` writes the MCP servers `session/new` gave it (as JSON, values and all).
pub const MCP_SERVERS_FILE: &str = "agent-mcp-servers.json";
/// Where `record` writes its environment (a JSON object, names to values).
pub const ENV_FILE: &str = "agent-env.json";
/// Where `early` writes what its request before the session got.
pub const EARLY_FILE: &str = "agent-early.txt";
/// The session `early` and `record` open.
const SESSION: &str = "test-session-1";

/// `record`: notes what it was handed, then opens the session.
pub fn record(request: &NewSessionRequest) -> NewSessionResponse {
    let servers = serde_json::to_string_pretty(&request.mcp_servers).unwrap_or_default();
    let _ = std::fs::write(MCP_SERVERS_FILE, servers);
    let environment: serde_json::Map<String, serde_json::Value> = std::env::vars_os()
        .map(|(name, value)| {
            (
                name.to_string_lossy().into_owned(),
                value.to_string_lossy().into_owned().into(),
            )
        })
        .collect();
    let _ = std::fs::write(ENV_FILE, serde_json::Value::Object(environment).to_string());
    NewSessionResponse::new(SESSION)
}

/// `record`'s prompt: the phase's validation (`grep -q ok status.txt`) passes after it.
pub fn finish_phase() {
    let _ = std::fs::write("status.txt", "ok\n");
}

/// `early`: before answering `session/new`, sends 100 `session/update`s and reads a file over
/// `fs` (on a task of its own, so that the connection goes on reading the answer); notes
/// what the read got, then opens the session.
pub fn early(
    request: NewSessionRequest,
    responder: Responder<NewSessionResponse>,
    connection: ConnectionTo<Client>,
) -> Result<(), Error> {
    connection.clone().spawn(async move {
        // More updates than Loopr keeps waiting (64): they must be taken as they come.
        for _ in 0..100 {
            let update = SessionNotification::new(
                SESSION,
                SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(
                    TextContent::new("Loading the project before the session opens."),
                ))),
            );
            let _ = connection.send_notification(update);
        }
        let read = connection
            .send_request(ReadTextFileRequest::new(
                SESSION,
                request.cwd.join("notes.txt"),
            ))
            .block_task()
            .await;
        let outcome = match read {
            Ok(read) => format!("read before the session: {}", read.content.trim()),
            Err(err) => format!(
                "refused before the session: {} ({})",
                err.message,
                err.data.unwrap_or_default()
            ),
        };
        let _ = std::fs::write(EARLY_FILE, format!("{outcome}\n"));
        responder.respond(NewSessionResponse::new(SESSION))
    })
}

/// `leak`: credentials on stderr, as an agent failing to clone or call an API may print
/// them; then exits with status 3.
pub fn leak_and_crash() -> ! {
    let token = std::env::var("LOOPR_TEST_AGENT_TOKEN").unwrap_or_default();
    eprintln!("loopr-test-acp-agent: cloning https://ghp_leaked0token@github.com/acme/app.git");
    eprintln!("loopr-test-acp-agent: request failed: Authorization: Bearer sk-live-leaked1");
    eprintln!("loopr-test-acp-agent: token {token} refused");
    std::process::exit(3);
}

/// How long `linger` stays after its stdin closes: longer than any test.
const LINGERING: std::time::Duration = std::time::Duration::from_secs(600);

/// `linger`'s prompt: writes its pid to `agent.pid`, says it works on the phase (a tool call
/// titled "Lingering over the phase") and never ends its turn.
pub fn linger_turn(request: &PromptRequest, connection: &ConnectionTo<Client>) {
    let _ = std::fs::write("agent.pid", std::process::id().to_string());
    let call = ToolCall::new("linger", "Lingering over the phase")
        .kind(ToolKind::Think)
        .status(ToolCallStatus::InProgress);
    let update =
        SessionNotification::new(request.session_id.clone(), SessionUpdate::ToolCall(call));
    let _ = connection.send_notification(update);
}

/// `linger` after its stdin closed: stays, as an agent busy with work of its own would, until
/// it is killed.
pub async fn linger() {
    tokio::time::sleep(LINGERING).await;
}
