//! The test agent's scripted turns (`--behave script`, `wait`, `die`): what a coding agent
//! does in a code loop, told as it goes in `session/update`s, with each answer of the client
//! (Loopr) said in its text so a test can read it in the transcript.

use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, CreateTerminalRequest, Diff, PermissionOption,
    PermissionOptionKind, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus, PromptRequest,
    ReadTextFileRequest, ReleaseTerminalRequest, RequestPermissionOutcome,
    RequestPermissionRequest, SessionId, SessionNotification, SessionUpdate, StopReason,
    TerminalOutputRequest, TextContent, ToolCall, ToolCallContent, ToolCallStatus, ToolCallUpdate,
    ToolCallUpdateFields, ToolKind, UsageUpdate, WaitForTerminalExitRequest, WriteTextFileRequest,
};
use agent_client_protocol::{Client, JsonRpcRequest};

use super::Behaviour;

/// One prompt's turn of `behaviour`; how it ended.
pub async fn turn(
    behaviour: Behaviour,
    connection: &ConnectionTo<Client>,
    request: &PromptRequest,
    cancelled: &Arc<tokio::sync::Notify>,
) -> StopReason {
    let session = Session {
        connection,
        id: request.session_id.clone(),
    };
    let prompt: String = request
        .prompt
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect();
    match behaviour {
        Behaviour::Wait => {
            // Where the test finds this process, to see it gone.
            write_directly("agent.pid", &std::process::id().to_string());
            session.say("Working on the phase; this takes a while.");
            session.call(
                "think",
                "Thinking it over",
                ToolKind::Think,
                ToolCallStatus::InProgress,
            );
            let _ = tokio::time::timeout(Duration::from_secs(600), cancelled.notified()).await;
            StopReason::Cancelled
        }
        Behaviour::Die => {
            session.say("Starting on the phase.");
            eprintln!("loopr-test-acp-agent: working on the phase");
            eprintln!("loopr-test-acp-agent: out of memory (scripted crash)");
            std::process::exit(4);
        }
        _ if prompt.contains("Validation failed") => {
            session.say("Fixing what the validation said: status.txt gets ok.");
            write_directly("status.txt", "ok\n");
            session.plan(PlanEntryStatus::Completed);
            session.usage(2400);
            StopReason::EndTurn
        }
        Behaviour::Permissions => {
            permissions_turn(&session).await;
            StopReason::EndTurn
        }
        _ => {
            first_turn(&session).await;
            StopReason::EndTurn
        }
    }
}

/// The first turn of `permissions`: a command declared a "read", then an edit asked with its
/// diff and written over `fs` exactly as asked; each answer said.
async fn permissions_turn(session: &Session<'_>) {
    let command = ToolCallUpdateFields::new()
        .title("Look at the deploy")
        .kind(ToolKind::Read)
        // A zero-width space at its end, which the prompt must not hide.
        .raw_input(serde_json::json!({"command": "make deploy\u{200b}"}));
    let allowed = session
        .asked_with("look", command)
        .await
        .map_err(|err| err.message);
    session.say(&format!("looking at the deploy allowed: {allowed:?}"));

    let diff =
        Diff::new(absolute("notes.txt"), "approved diff\n").old_text("notes before\n".to_owned());
    let edit = ToolCallUpdateFields::new()
        .title("Rewrite notes.txt")
        .kind(ToolKind::Edit)
        .content(vec![ToolCallContent::Diff(diff)]);
    let allowed = session
        .asked_with("rewrite", edit)
        .await
        .map_err(|err| err.message);
    session.say(&format!("rewriting notes.txt allowed: {allowed:?}"));
    if allowed == Ok(true) {
        let written = session
            .ask(WriteTextFileRequest::new(
                session.id.clone(),
                absolute("notes.txt"),
                "approved diff\n",
            ))
            .await;
        session.say(&format!("notes.txt written over fs: {written:?}"));
    }
    session.say("Done for now.");
}

/// The first turn of `script`: every kind of request a coding agent makes, each answer said.
async fn first_turn(session: &Session<'_>) {
    // Whether the agent's `env` reached it (never the value).
    let token = std::env::var_os("LOOPR_TEST_AGENT_TOKEN")
        .filter(|value| !value.is_empty())
        .map_or("unset", |_| "set");
    session.say(&format!("LOOPR_TEST_AGENT_TOKEN is {token}"));
    session.call(
        "read",
        "Read notes.txt",
        ToolKind::Read,
        ToolCallStatus::InProgress,
    );
    let read = session
        .ask(ReadTextFileRequest::new(
            session.id.clone(),
            absolute("notes.txt"),
        ))
        .await;
    session.ended(
        "read",
        read.map(|read| format!("notes.txt over fs: {}", read.content.trim()))
            .map_err(|err| format!("reading notes.txt over fs failed: {err}")),
    );

    session.call(
        "edit",
        "Edit notes.txt",
        ToolKind::Edit,
        ToolCallStatus::Pending,
    );
    match session
        .permission("edit", "Edit notes.txt", ToolKind::Edit)
        .await
    {
        Ok(true) => {
            let written = session
                .ask(WriteTextFileRequest::new(
                    session.id.clone(),
                    absolute("notes.txt"),
                    "edited over fs\n",
                ))
                .await;
            let status = if written.is_ok() {
                ToolCallStatus::Completed
            } else {
                ToolCallStatus::Failed
            };
            session.done("edit", status);
            session.say(&format!("the edit was approved; writing it: {written:?}"));
        }
        Ok(false) => {
            session.done("edit", ToolCallStatus::Failed);
            session.say("the edit was rejected");
        }
        Err(err) => {
            session.done("edit", ToolCallStatus::Failed);
            session.say(&format!("asking to edit failed: {err}"));
        }
    }

    session.call(
        "deploy",
        "Run make deploy",
        ToolKind::Execute,
        ToolCallStatus::Pending,
    );
    session.done("deploy", ToolCallStatus::Failed);
    match session
        .permission("deploy", "Run make deploy", ToolKind::Execute)
        .await
    {
        Ok(true) => session.say("make deploy was approved (it is not run)"),
        Ok(false) => session.say("make deploy was rejected; going on without it"),
        Err(err) => session.say(&format!(
            "asking to run make deploy failed: {err}; going on"
        )),
    }

    session.call(
        "own-write",
        "Write README.md",
        ToolKind::Edit,
        ToolCallStatus::InProgress,
    );
    write_directly("README.md", "# sample\n\nWritten behind the protocol.\n");
    write_directly("status.txt", "not yet\n");
    session.done("own-write", ToolCallStatus::Completed);

    session.call(
        "terminal",
        "Run sh in a terminal",
        ToolKind::Execute,
        ToolCallStatus::InProgress,
    );
    let ran = session.terminal().await;
    session.ended(
        "terminal",
        ran.map_err(|err| format!("the terminal failed: {err}")),
    );

    session.plan(PlanEntryStatus::InProgress);
    session.usage(1200);
    session.say("Done for now.");
}

fn absolute(name: &str) -> std::path::PathBuf {
    std::env::current_dir().unwrap_or_default().join(name)
}

fn write_directly(name: &str, content: &str) {
    if let Err(err) = std::fs::write(name, content) {
        eprintln!("loopr-test-acp-agent: writing {name}: {err}");
    }
}

struct Session<'a> {
    connection: &'a ConnectionTo<Client>,
    id: SessionId,
}

impl Session<'_> {
    fn update(&self, update: SessionUpdate) {
        let notification = SessionNotification::new(self.id.clone(), update);
        if let Err(err) = self.connection.send_notification(notification) {
            eprintln!("loopr-test-acp-agent: sending an update: {err}");
        }
    }

    fn say(&self, text: &str) {
        self.update(SessionUpdate::AgentMessageChunk(ContentChunk::new(
            ContentBlock::Text(TextContent::new(format!("{text}\n"))),
        )));
    }

    fn call(&self, id: &str, title: &str, kind: ToolKind, status: ToolCallStatus) {
        self.update(SessionUpdate::ToolCall(
            ToolCall::new(id.to_owned(), title)
                .kind(kind)
                .status(status),
        ));
    }

    fn done(&self, id: &str, status: ToolCallStatus) {
        self.update(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            id.to_owned(),
            ToolCallUpdateFields::new().status(status),
        )));
    }

    /// Tool call `id` ended as `outcome` says, which the agent then says.
    fn ended(&self, id: &str, outcome: Result<String, String>) {
        let (status, said) = match outcome {
            Ok(said) => (ToolCallStatus::Completed, said),
            Err(said) => (ToolCallStatus::Failed, said),
        };
        self.done(id, status);
        self.say(&said);
    }

    fn plan(&self, last: PlanEntryStatus) {
        let entry =
            |content: &str, status| PlanEntry::new(content, PlanEntryPriority::High, status);
        self.update(SessionUpdate::Plan(Plan::new(vec![
            entry("Read notes.txt", PlanEntryStatus::Completed),
            entry("Rewrite README.md", PlanEntryStatus::Completed),
            entry("Make the validation pass", last),
        ])));
    }

    fn usage(&self, used: u64) {
        self.update(SessionUpdate::UsageUpdate(UsageUpdate::new(used, 200_000)));
    }

    async fn ask<Request: JsonRpcRequest>(
        &self,
        request: Request,
    ) -> Result<Request::Response, agent_client_protocol::Error> {
        self.connection.send_request(request).block_task().await
    }

    /// Asks permission for tool call `id` (`title`, of `kind`): whether "allow" was picked.
    async fn permission(
        &self,
        id: &str,
        title: &str,
        kind: ToolKind,
    ) -> Result<bool, agent_client_protocol::Error> {
        self.asked_with(id, ToolCallUpdateFields::new().title(title).kind(kind))
            .await
    }

    /// Asks permission for tool call `id` described by `fields`: whether "allow" was picked.
    async fn asked_with(
        &self,
        id: &str,
        fields: ToolCallUpdateFields,
    ) -> Result<bool, agent_client_protocol::Error> {
        let options = vec![
            PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce),
            PermissionOption::new("reject", "Reject", PermissionOptionKind::RejectOnce),
        ];
        let asked = RequestPermissionRequest::new(
            self.id.clone(),
            ToolCallUpdate::new(id.to_owned(), fields),
            options,
        );
        let answer = self.ask(asked).await?;
        Ok(matches!(
            answer.outcome,
            RequestPermissionOutcome::Selected(selected) if &*selected.option_id.0 == "allow"
        ))
    }

    /// Runs a command writing inside the project and outside it; what came of it, in words.
    async fn terminal(&self) -> Result<String, agent_client_protocol::Error> {
        let created = self
            .ask(CreateTerminalRequest::new(self.id.clone(), "sh").args(vec![
                    "-c".to_owned(),
                    "echo inside > terminal.txt; echo outside > ../agent-outside.txt; echo ran"
                        .to_owned(),
                ]))
            .await?;
        let terminal = created.terminal_id;
        let exit = self
            .ask(WaitForTerminalExitRequest::new(
                self.id.clone(),
                terminal.clone(),
            ))
            .await?;
        let output = self
            .ask(TerminalOutputRequest::new(
                self.id.clone(),
                terminal.clone(),
            ))
            .await?;
        self.ask(ReleaseTerminalRequest::new(self.id.clone(), terminal))
            .await?;
        Ok(format!(
            "the terminal's command exited ({:?}): {}",
            exit.exit_status.exit_code,
            output.output.trim()
        ))
    }
}
