//! Tests of serving an agent's requests: an agent built on the SDK's agent side asks over an
//! in-process connection, and `AgentClient` answers through real project files, the real
//! change journal (`Baseline`), bubblewrap, and a recording approver standing for the user.

use std::io::Write as _;
use std::sync::Arc;

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    CreateTerminalRequest, Diff, InitializeRequest, InitializeResponse, KillTerminalRequest,
    PermissionOption, PermissionOptionKind, ReadTextFileRequest, ReleaseTerminalRequest,
    RequestPermissionOutcome, RequestPermissionRequest, TerminalExitStatus, TerminalId,
    TerminalOutputRequest, TerminalOutputResponse, ToolCallContent, ToolCallUpdate,
    ToolCallUpdateFields, ToolKind, WaitForTerminalExitRequest, WriteTextFileRequest,
};
use agent_client_protocol::{Agent, Channel, Client, Error, ErrorCode, JsonRpcRequest};
use futures::FutureExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::AgentClient;
use crate::acp::FromAgent;
use crate::agent::Baseline;
use crate::tools::{
    Approver, BufferCheck, BufferEdit, ChangeKind, Decision, NoBuffers, OpenBuffers, ProjectRoot,
    RecordingApprover, Sandbox, SandboxMode, SandboxSettings, ToolContext, ToolPolicy,
};

const MAIN: &str = "fn main() {\n    run();\n}\n";
const SESSION: &str = "session-1";

/// A project with a recorded baseline, and the client serving its loop's agent.
struct Project {
    dir: tempfile::TempDir,
    _state: tempfile::TempDir,
    baseline: Baseline,
    root: ProjectRoot,
    approver: Arc<RecordingApprover>,
    cancel: CancellationToken,
    client: Arc<AgentClient>,
}

impl Project {
    /// Its user answers every approval with `decision`; commands run in bubblewrap.
    fn new(decision: Decision) -> Project {
        Project::with_buffers(decision, Arc::new(NoBuffers))
    }

    /// `new`, with `buffers` standing for the editor's open buffers.
    fn with_buffers(decision: Decision, buffers: Arc<dyn OpenBuffers>) -> Project {
        Project::asking_through(decision, buffers, |user| user)
    }

    /// `new`, its user asked through what `approver` makes of them (the loop's policy).
    fn asking_through(
        decision: Decision,
        buffers: Arc<dyn OpenBuffers>,
        approver: impl FnOnce(Arc<dyn Approver>) -> Arc<dyn Approver>,
    ) -> Project {
        let dir = tempfile::tempdir().expect("project");
        let state = tempfile::tempdir().expect("state");
        for (path, text) in [("src/main.rs", MAIN), (".env", "API_TOKEN=hunter2\n")] {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }
        let root = ProjectRoot::new(dir.path()).expect("root");
        let sandbox = Sandbox::new(&SandboxSettings {
            mode: SandboxMode::Bubblewrap,
            ..SandboxSettings::default()
        })
        .expect("bubblewrap, which these tests run commands in");
        let policy = Arc::new(ToolPolicy::default().with_sandbox(sandbox));
        let baseline = Baseline::at(state.path());
        baseline
            .record(&root, &policy, &CancellationToken::new())
            .expect("baseline");
        let user = Arc::new(RecordingApprover {
            decision,
            asked: std::sync::Mutex::new(Vec::new()),
        });
        let cancel = CancellationToken::new();
        let client = Arc::new(AgentClient::new(ToolContext {
            root: root.clone(),
            cancel: cancel.clone(),
            policy,
            approver: approver(user.clone()),
            loop_id: "code-loop".to_owned(),
            buffers,
            journal: Arc::new(Baseline::at(state.path())),
        }));
        Project {
            dir,
            _state: state,
            baseline,
            root,
            approver: user,
            cancel,
            client,
        }
    }

    fn path(&self, relative: &str) -> std::path::PathBuf {
        self.root.path().join(relative)
    }

    fn asked(&self) -> Vec<crate::tools::ApprovalRequest> {
        self.approver.asked.lock().expect("asked").clone()
    }
}

/// Registers, for each request type, a handler passing it to `client` as `FromAgent`, each
/// served in its own task as the code loop serves them.
macro_rules! served_by {
    ($builder:expr, $client:expr, $($variant:ident: $request:ty),+ $(,)?) => {
        $builder
        $(
            .on_receive_request(
                {
                    let client = $client.clone();
                    async move |request: $request, responder, _connection| {
                        let client = client.clone();
                        tokio::spawn(async move {
                            client.serve(FromAgent::$variant(Box::new((request, responder)))).await;
                        });
                        Ok(())
                    }
                },
                agent_client_protocol::on_receive_request!(),
            )
        )+
    };
}

/// The agent's end of a connection whose client side `client` serves.
struct TestAgent {
    to_client: ConnectionTo<Client>,
}

impl TestAgent {
    async fn connect(client: &Arc<AgentClient>) -> TestAgent {
        use agent_client_protocol::v1::schema::{
            CreateTerminalRequest as Create, KillTerminalRequest as Kill,
            ReadTextFileRequest as Read, ReleaseTerminalRequest as Release,
            RequestPermissionRequest as Permission, TerminalOutputRequest as Output,
            WaitForTerminalExitRequest as Wait, WriteTextFileRequest as Write,
        };
        let (loopr_end, agent_end) = Channel::duplex();
        let loopr = served_by!(Client.v1().name("loopr"), client,
            Permission: Permission,
            ReadTextFile: Read,
            WriteTextFile: Write,
            CreateTerminal: Create,
            TerminalOutput: Output,
            WaitForTerminalExit: Wait,
            KillTerminal: Kill,
            ReleaseTerminal: Release,
        );
        let (to_agent, connected) = futures::channel::oneshot::channel();
        tokio::spawn(loopr.connect_with(
            loopr_end,
            async move |connection: ConnectionTo<Agent>| {
                let _ = to_agent.send(connection.clone());
                futures::future::pending::<()>().await;
                Ok(())
            },
        ));
        let (to_client, agent_connected) = futures::channel::oneshot::channel();
        let agent = Agent.v1().name("test-agent").on_receive_request(
            async move |request: InitializeRequest, responder, _connection| {
                responder.respond(InitializeResponse::new(request.protocol_version))
            },
            agent_client_protocol::on_receive_request!(),
        );
        tokio::spawn(agent.connect_with(
            agent_end,
            async move |connection: ConnectionTo<Client>| {
                let _ = to_client.send(connection.clone());
                futures::future::pending::<()>().await;
                Ok(())
            },
        ));
        let to_agent = connected.await.expect("Loopr's end connected");
        to_agent
            .send_request(InitializeRequest::new(crate::acp::LOOPR_PROTOCOL_VERSION))
            .block_task()
            .await
            .expect("initialized");
        TestAgent {
            to_client: agent_connected.await.expect("the agent's end connected"),
        }
    }

    async fn ask<Request: JsonRpcRequest>(
        &self,
        request: Request,
    ) -> Result<Request::Response, Error> {
        self.to_client.send_request(request).block_task().await
    }
}

async fn connected(decision: Decision) -> (Project, TestAgent) {
    let project = Project::new(decision);
    let agent = TestAgent::connect(&project.client).await;
    (project, agent)
}

#[tokio::test]
async fn a_read_outside_the_root_or_by_a_relative_path_is_refused() {
    let (project, agent) = connected(Decision::Accept).await;
    let outside = agent
        .ask(ReadTextFileRequest::new(SESSION, "/etc/hostname"))
        .await
        .expect_err("outside the root");
    assert_eq!(outside.code, ErrorCode::INVALID_PARAMS);
    assert!(
        outside.message.contains("is outside the project root"),
        "{outside:?}"
    );
    let escape = agent
        .ask(ReadTextFileRequest::new(
            SESSION,
            project.path("src/../../etc/hostname"),
        ))
        .await
        .expect_err("up and out");
    assert!(escape.message.contains("contains '..'"), "{escape:?}");
    let relative = agent
        .ask(ReadTextFileRequest::new(SESSION, "src/main.rs"))
        .await
        .expect_err("relative");
    assert!(
        relative.message.contains("is not an absolute path"),
        "{relative:?}"
    );
}

#[tokio::test]
async fn a_secret_file_is_neither_read_nor_written() {
    let (project, agent) = connected(Decision::Accept).await;
    let read = agent
        .ask(ReadTextFileRequest::new(SESSION, project.path(".env")))
        .await
        .expect_err("secret");
    assert_eq!(read.code, ErrorCode::INVALID_REQUEST);
    assert!(
        read.message
            .contains(".env matches the secret-file pattern"),
        "{read:?}"
    );
    let write = agent
        .ask(WriteTextFileRequest::new(
            SESSION,
            project.path(".env"),
            "API_TOKEN=mine\n",
        ))
        .await
        .expect_err("secret");
    assert!(write.message.contains("secret-file pattern"), "{write:?}");
    assert_eq!(
        std::fs::read_to_string(project.path(".env")).expect(".env"),
        "API_TOKEN=hunter2\n"
    );
    assert!(project.asked().is_empty(), "{:?}", project.asked());
}

#[tokio::test]
async fn a_read_answers_the_lines_asked_for() {
    let (project, agent) = connected(Decision::Accept).await;
    let whole = agent
        .ask(ReadTextFileRequest::new(
            SESSION,
            project.path("src/main.rs"),
        ))
        .await
        .expect("read");
    assert_eq!(whole.content, MAIN);
    assert_eq!(second_line_of_main(&project, &agent).await, "    run();\n");
}

/// Line 2 of `src/main.rs`, as the agent reads it.
async fn second_line_of_main(project: &Project, agent: &TestAgent) -> String {
    agent
        .ask(
            ReadTextFileRequest::new(SESSION, project.path("src/main.rs"))
                .line(2)
                .limit(1),
        )
        .await
        .expect("read")
        .content
}

/// The editor, where `src/main.rs` is open with a line the user typed and did not save.
struct EditedMain;

const UNSAVED_MAIN: &str = "// typed, not saved\nfn main() {}\n";

#[async_trait::async_trait]
impl OpenBuffers for EditedMain {
    async fn apply(&self, _path: &std::path::Path, _old: &str, _new: &str) -> BufferEdit {
        BufferEdit::UnsavedChanges
    }

    async fn check(&self, _path: &std::path::Path) -> BufferCheck {
        BufferCheck::UnsavedChanges
    }

    async fn reload(&self, _paths: &[std::path::PathBuf]) {}

    async fn unsaved_text(&self, path: &std::path::Path) -> Option<String> {
        path.ends_with("src/main.rs")
            .then(|| UNSAVED_MAIN.to_owned())
    }
}

#[tokio::test]
async fn a_file_open_with_unsaved_changes_is_read_as_the_user_sees_it() {
    let project = Project::with_buffers(Decision::Accept, Arc::new(EditedMain));
    let agent = TestAgent::connect(&project.client).await;
    assert_eq!(
        second_line_of_main(&project, &agent).await,
        "fn main() {}\n"
    );
}

#[tokio::test]
async fn an_approved_write_is_asked_with_its_diff_journaled_and_undone() {
    let (project, agent) = connected(Decision::Accept).await;
    let new_main = "fn main() {\n    run();\n    done();\n}\n";
    agent
        .ask(WriteTextFileRequest::new(
            SESSION,
            project.path("src/main.rs"),
            new_main,
        ))
        .await
        .expect("written");
    assert_eq!(
        std::fs::read_to_string(project.path("src/main.rs")).expect("main"),
        new_main
    );
    let asked = project.asked();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(
        (asked[0].kind, asked[0].subject.as_str()),
        (ChangeKind::Write, "src/main.rs")
    );
    assert!(
        asked[0].detail.contains("+    done();"),
        "{}",
        asked[0].detail
    );
    let changes = project.baseline.changes(&project.root).expect("changes");
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(changes[0].summary.contains("done();"), "{changes:?}");
    let undone = project
        .baseline
        .undo(&project.root, &NoBuffers, false)
        .await
        .expect("undo");
    assert_eq!(
        undone.restored,
        vec![project.path("src/main.rs")],
        "{undone:?}"
    );
    assert_eq!(
        std::fs::read_to_string(project.path("src/main.rs")).expect("main"),
        MAIN
    );
}

#[tokio::test]
async fn a_rejected_write_changes_nothing_and_the_agent_gets_the_reason() {
    let (project, agent) = connected(Decision::Reject("keep main.rs as it is".to_owned())).await;
    let rejected = agent
        .ask(WriteTextFileRequest::new(
            SESSION,
            project.path("src/main.rs"),
            "fn main() {}\n",
        ))
        .await
        .expect_err("rejected");
    assert_eq!(rejected.code, ErrorCode::INVALID_REQUEST);
    assert_eq!(
        rejected.message,
        "the user rejected this change: keep main.rs as it is"
    );
    assert_eq!(
        std::fs::read_to_string(project.path("src/main.rs")).expect("main"),
        MAIN
    );
    assert!(
        project
            .baseline
            .changes(&project.root)
            .expect("changes")
            .is_empty(),
        "nothing journaled"
    );
}

/// A directory outside the project and outside /tmp (which the sandbox replaces).
fn outside() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("loopr-agent-outside-")
        .tempdir_in("/var/tmp")
        .expect("a directory outside")
}

async fn run_to_exit(
    agent: &TestAgent,
    request: CreateTerminalRequest,
) -> (TerminalExitStatus, TerminalOutputResponse) {
    let id = agent.ask(request).await.expect("created").terminal_id;
    let exited = agent
        .ask(WaitForTerminalExitRequest::new(SESSION, id.clone()))
        .await
        .expect("exited")
        .exit_status;
    let output = agent
        .ask(TerminalOutputRequest::new(SESSION, id))
        .await
        .expect("output");
    (exited, output)
}

#[tokio::test]
async fn a_terminal_command_runs_approved_in_the_sandbox_and_its_writes_are_journaled() {
    let (project, agent) = connected(Decision::Accept).await;
    let outside = outside();
    let escaped = outside.path().join("escaped");
    let script = format!("echo made > made.txt; echo out > {}", escaped.display());
    let (exited, output) = run_to_exit(
        &agent,
        CreateTerminalRequest::new(SESSION, "sh")
            .args(vec!["-c".to_owned(), script.clone()])
            .cwd(project.root.path().to_path_buf()),
    )
    .await;
    assert_ne!(exited.exit_code, Some(0), "{output:?}");
    assert!(!escaped.exists(), "the sandbox let a write outside through");
    assert!(
        output.output.contains("Read-only file system")
            && output
                .output
                .contains("the sandbox refused writing outside the project root"),
        "{output:?}"
    );
    assert_eq!(output.exit_status, Some(exited));
    let asked = project.asked();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].kind, ChangeKind::Command);
    assert_eq!(asked[0].subject, format!("sh -c '{script}'"));
    let changes = project.baseline.changes(&project.root).expect("changes");
    assert_eq!(
        changes
            .iter()
            .map(|change| project.root.relative_display(&change.path))
            .collect::<Vec<_>>(),
        vec!["made.txt".to_owned()]
    );
}

#[tokio::test]
async fn a_terminal_on_the_deny_list_is_refused_unasked() {
    let (project, agent) = connected(Decision::Accept).await;
    let refused = agent
        .ask(CreateTerminalRequest::new(SESSION, "sudo").args(vec!["true".to_owned()]))
        .await
        .expect_err("denied");
    assert!(refused.message.contains("deny-list"), "{refused:?}");
    assert!(project.asked().is_empty());
}

#[tokio::test]
async fn terminal_output_keeps_its_last_bytes_within_the_limits() {
    let (_project, agent) = connected(Decision::Accept).await;
    let (exited, output) = run_to_exit(
        &agent,
        CreateTerminalRequest::new(SESSION, "sh")
            .args(vec!["-c".to_owned(), "seq 1 2000".to_owned()])
            .output_byte_limit(100),
    )
    .await;
    assert_eq!(exited.exit_code, Some(0));
    assert!(output.truncated, "{output:?}");
    assert!(output.output.len() <= 100, "{}", output.output.len());
    assert!(output.output.ends_with("1999\n2000\n"), "{output:?}");
    let (_, capped) = run_to_exit(
        &agent,
        CreateTerminalRequest::new(SESSION, "seq 1 100000").output_byte_limit(u64::MAX),
    )
    .await;
    assert!(capped.truncated);
    assert!(
        capped.output.len() <= super::terminals::MAX_OUTPUT_BYTES,
        "{}",
        capped.output.len()
    );
}

/// A terminal reading a FIFO in the project (returned): it runs until the test writes to it.
async fn reading_a_fifo(project: &Project, agent: &TestAgent) -> (std::path::PathBuf, TerminalId) {
    let path = project.path("go.fifo");
    let status = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .expect("mkfifo");
    assert!(status.success());
    let id = agent
        .ask(CreateTerminalRequest::new(SESSION, "cat go.fifo"))
        .await
        .expect("created")
        .terminal_id;
    (path, id)
}

#[tokio::test]
async fn a_read_is_answered_while_the_agent_waits_for_a_terminal() {
    let (project, agent) = connected(Decision::Accept).await;
    let (fifo, id) = reading_a_fifo(&project, &agent).await;
    let mut waiting = Box::pin(agent.ask(WaitForTerminalExitRequest::new(SESSION, id.clone())));
    assert!((&mut waiting).now_or_never().is_none());
    let read = agent
        .ask(ReadTextFileRequest::new(
            SESSION,
            project.path("src/main.rs"),
        ))
        .await
        .expect("read while a wait is pending");
    assert_eq!(read.content, MAIN);
    assert!(
        (&mut waiting).now_or_never().is_none(),
        "the command cannot have ended: nothing was written to its FIFO"
    );
    tokio::task::spawn_blocking(move || std::fs::write(fifo, "go\n"))
        .await
        .expect("join")
        .expect("written to the FIFO");
    let exited = waiting.await.expect("exited").exit_status;
    assert_eq!(exited.exit_code, Some(0));
    let output = agent
        .ask(TerminalOutputRequest::new(SESSION, id))
        .await
        .expect("output");
    assert_eq!(output.output, "go\n");
}

#[tokio::test]
async fn a_killed_terminal_keeps_its_output_and_tells_its_signal() {
    let (project, agent) = connected(Decision::Accept).await;
    let (_, id) = reading_a_fifo(&project, &agent).await;
    agent
        .ask(KillTerminalRequest::new(SESSION, id.clone()))
        .await
        .expect("killed");
    let exited = agent
        .ask(WaitForTerminalExitRequest::new(SESSION, id.clone()))
        .await
        .expect("exited")
        .exit_status;
    assert_eq!(
        (exited.exit_code, exited.signal.as_deref()),
        (None, Some("SIGKILL"))
    );
    let output = agent
        .ask(TerminalOutputRequest::new(SESSION, id))
        .await
        .expect("still there after a kill");
    assert_eq!(output.exit_status, Some(exited));
}

#[tokio::test]
async fn close_kills_a_running_terminal_and_releases_it() {
    let (project, agent) = connected(Decision::Accept).await;
    let (fifo, id) = reading_a_fifo(&project, &agent).await;
    // Opening the FIFO to write returns once the command opened it to read: it runs.
    let mut writer = tokio::task::spawn_blocking(move || std::fs::File::create(fifo))
        .await
        .expect("join")
        .expect("the FIFO opened");
    writer.write_all(b"ready\n").expect("written while it runs");
    project.client.close().await;
    let after_close = writer.write_all(b"more\n").expect_err("no reader left");
    assert_eq!(after_close.kind(), std::io::ErrorKind::BrokenPipe);
    let released = agent
        .ask(TerminalOutputRequest::new(SESSION, id))
        .await
        .expect_err("released");
    assert!(
        released.message.contains("there is no terminal"),
        "{released:?}"
    );
    let after = agent
        .ask(CreateTerminalRequest::new(SESSION, "true"))
        .await
        .expect_err("the loop ended");
    assert!(after.message.contains("the loop has ended"), "{after:?}");
}

fn permission(
    kind: ToolKind,
    title: &str,
    content: Vec<ToolCallContent>,
) -> RequestPermissionRequest {
    let fields = ToolCallUpdateFields::new()
        .kind(kind)
        .title(title.to_owned())
        .content(content)
        .raw_input(json!({"command": "cargo test --lib"}));
    RequestPermissionRequest::new(
        SESSION,
        ToolCallUpdate::new("call-1", fields),
        vec![
            PermissionOption::new("once", "Allow once", PermissionOptionKind::AllowOnce),
            PermissionOption::new("always", "Always allow", PermissionOptionKind::AllowAlways),
            PermissionOption::new("no", "Reject", PermissionOptionKind::RejectOnce),
        ],
    )
}

fn chosen(outcome: &RequestPermissionOutcome) -> Option<&str> {
    match outcome {
        RequestPermissionOutcome::Selected(selected) => Some(selected.option_id.0.as_ref()),
        _ => None,
    }
}

/// `permission`, offering only `options`.
fn offering(
    mut request: RequestPermissionRequest,
    options: &[PermissionOptionKind],
) -> RequestPermissionRequest {
    request
        .options
        .retain(|option| options.contains(&option.kind));
    request
}

fn shorten_main(project: &Project) -> ToolCallContent {
    ToolCallContent::Diff(
        Diff::new(project.path("src/main.rs"), "fn main() {}\n").old_text(MAIN.to_owned()),
    )
}

/// The agent asks to shorten main.rs with its diff alone (no command).
fn shorten_main_asked(project: &Project) -> RequestPermissionRequest {
    let mut edit = permission(ToolKind::Edit, "Shorten main", vec![shorten_main(project)]);
    edit.tool_call.fields.raw_input = None;
    edit
}

/// The agent writes `content` as the whole of main.rs over `fs`.
async fn write_main(project: &Project, agent: &TestAgent, content: &str) {
    agent
        .ask(WriteTextFileRequest::new(
            SESSION,
            project.path("src/main.rs"),
            content,
        ))
        .await
        .expect("written");
}

#[tokio::test]
async fn allow_always_holds_for_edits_but_each_command_is_asked() {
    let (project, agent) = connected(Decision::AcceptAllOfKind).await;
    for title in ["Run the tests", "Run them again"] {
        let answer = agent
            .ask(permission(ToolKind::Execute, title, Vec::new()))
            .await
            .expect("answered");
        assert_eq!(
            chosen(&answer.outcome),
            Some("once"),
            "a command is never allowed for good"
        );
    }
    let asked = project.asked();
    assert_eq!(asked.len(), 2, "each command is asked: {asked:?}");
    assert_eq!(asked[0].subject, "Run the tests");
    assert_eq!(asked[0].kind, ChangeKind::Command);
    assert!(
        asked[0].detail.contains("(execute)")
            && asked[0].detail.contains("$ cargo test --lib")
            && asked[0]
                .detail
                .contains("Each execute call is asked: a and A allow this one only."),
        "{}",
        asked[0].detail
    );
    // A diff without a command: an edit, which "allow always" covers.
    let edit = shorten_main_asked(&project);
    for _ in 0..2 {
        let answer = agent.ask(edit.clone()).await.expect("answered");
        assert_eq!(chosen(&answer.outcome), Some("always"));
    }
    let asked = project.asked();
    assert_eq!(asked.len(), 3, "the second edit is not asked: {asked:?}");
    assert_eq!(asked[2].kind, ChangeKind::Edit);
    assert!(
        asked[2].detail.contains("--- a/src/main.rs")
            && asked[2].detail.contains("-    run();")
            && asked[2]
                .detail
                .contains("A allows its edit calls for the rest of this loop"),
        "{}",
        asked[2].detail
    );
}

#[tokio::test]
async fn a_call_carrying_a_command_is_asked_as_one_whatever_kind_it_declares() {
    let (project, agent) = connected(Decision::AcceptAllOfKind).await;
    for title in ["Look around", "Look again"] {
        let answer = agent
            .ask(permission(ToolKind::Read, title, Vec::new()))
            .await
            .expect("answered");
        assert_eq!(chosen(&answer.outcome), Some("once"));
    }
    let asked = project.asked();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert_eq!(asked[1].kind, ChangeKind::Command);
    assert!(
        asked[1].detail.contains("(execute)") && asked[1].detail.contains("it says \"read\""),
        "{}",
        asked[1].detail
    );
}

#[tokio::test]
async fn the_agent_s_own_tools_are_asked_whatever_the_approvals_accept_automatically() {
    use crate::agent::{ApprovalMode, ApprovalSettings, PolicyApprover};
    let settings = ApprovalSettings {
        edit: ApprovalMode::Auto,
        mcp: ApprovalMode::Auto,
        ..ApprovalSettings::default()
    };
    let project = Project::asking_through(Decision::AcceptAllOfKind, Arc::new(NoBuffers), |user| {
        Arc::new(PolicyApprover::new(settings, &[], true, user).expect("policy"))
    });
    let agent = TestAgent::connect(&project.client).await;
    let edit = shorten_main_asked(&project);
    for request in [
        edit,
        permission(ToolKind::Execute, "Run the tests", Vec::new()),
        permission(ToolKind::Other, "Run the tests", Vec::new()),
    ] {
        agent.ask(request).await.expect("answered");
    }
    let asked: Vec<_> = project
        .asked()
        .into_iter()
        .map(|request| request.subject)
        .collect();
    assert_eq!(
        asked,
        ["Shorten main", "Run the tests", "Run the tests"],
        "neither \"auto\" nor an earlier \"accept all\" lets the agent's own tools act unseen"
    );
}

#[tokio::test]
async fn a_call_with_a_diff_and_a_command_shows_both_and_one_with_neither_its_input() {
    let (project, agent) = connected(Decision::Accept).await;
    agent
        .ask(permission(
            ToolKind::Edit,
            "Shorten main, then test",
            vec![shorten_main(&project)],
        ))
        .await
        .expect("answered");
    let mut fetch = permission(ToolKind::Fetch, "Fetch the docs", Vec::new());
    fetch.tool_call.fields.raw_input = Some(json!({"url": "https://docs.rs/tokio"}));
    agent.ask(fetch).await.expect("answered");
    let asked = project.asked();
    assert_eq!(asked[0].kind, ChangeKind::Command, "{asked:?}");
    assert!(
        asked[0].detail.contains("$ cargo test --lib")
            && asked[0].detail.contains("--- a/src/main.rs")
            && asked[0].detail.contains("-    run();"),
        "{}",
        asked[0].detail
    );
    assert!(
        asked[1]
            .detail
            .contains("\"url\": \"https://docs.rs/tokio\""),
        "{}",
        asked[1].detail
    );
}

#[tokio::test]
async fn accepting_once_where_the_agent_offers_no_allow_once_is_said_first() {
    use PermissionOptionKind::{AllowAlways, RejectOnce};
    let (project, agent) = connected(Decision::Accept).await;
    let edit = shorten_main_asked(&project);
    let edited = agent
        .ask(offering(edit, &[AllowAlways, RejectOnce]))
        .await
        .expect("answered");
    assert_eq!(chosen(&edited.outcome), Some("always"));
    let command = agent
        .ask(offering(
            permission(ToolKind::Execute, "Run the tests", Vec::new()),
            &[AllowAlways, RejectOnce],
        ))
        .await
        .expect("answered");
    assert_eq!(
        chosen(&command.outcome),
        Some("no"),
        "a command is never allowed for good, so it cannot be allowed at all"
    );
    let asked = project.asked();
    assert!(
        asked[0].detail.contains(
            "This agent offers no \"allow once\": accepting allows its edit calls for the \
             rest of this loop."
        ),
        "{}",
        asked[0].detail
    );
    assert!(
        asked[1].detail.contains(
            "This agent offers no \"allow once\", and Loopr allows no execute call for good: \
             whatever you answer, the agent is told it is rejected."
        ),
        "{}",
        asked[1].detail
    );
}

#[tokio::test]
async fn a_write_making_the_change_just_approved_is_not_asked_again() {
    let (project, agent) = connected(Decision::Accept).await;
    let edit = shorten_main_asked(&project);
    let answer = agent.ask(edit).await.expect("answered");
    assert_eq!(chosen(&answer.outcome), Some("once"));
    write_main(&project, &agent, "fn main() {}\n").await;
    assert_eq!(
        std::fs::read_to_string(project.path("src/main.rs")).expect("main"),
        "fn main() {}\n"
    );
    assert_eq!(project.asked().len(), 1, "{:?}", project.asked());
    let changes = project.baseline.changes(&project.root).expect("changes");
    assert_eq!(changes.len(), 1, "still journaled: {changes:?}");

    // Another write of the same file, and the approved one made twice, are asked.
    for content in ["fn main() { other(); }\n", "fn main() {}\n"] {
        write_main(&project, &agent, content).await;
    }
    let asked = project.asked();
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert_eq!(asked[1].kind, ChangeKind::Write);
    assert_eq!(asked[2].kind, ChangeKind::Write);
}

#[tokio::test]
async fn a_rejected_permission_chooses_reject_and_a_cancelled_loop_answers_cancelled() {
    let (project, agent) = connected(Decision::Reject("not now".to_owned())).await;
    let rejected = agent
        .ask(permission(ToolKind::Execute, "Run the tests", Vec::new()))
        .await
        .expect("answered");
    assert_eq!(chosen(&rejected.outcome), Some("no"));
    project.cancel.cancel();
    let cancelled = agent
        .ask(permission(ToolKind::Execute, "Run the tests", Vec::new()))
        .await
        .expect("answered");
    assert_eq!(cancelled.outcome, RequestPermissionOutcome::Cancelled);
    assert_eq!(project.asked().len(), 1);
    drop(project.dir);
}

#[tokio::test]
async fn at_most_eight_terminals_are_open_at_once() {
    let (project, agent) = connected(Decision::Accept).await;
    let (_, first) = reading_a_fifo(&project, &agent).await;
    for _ in 1..super::terminals::MAX_OPEN_TERMINALS {
        agent
            .ask(CreateTerminalRequest::new(SESSION, "cat go.fifo"))
            .await
            .expect("created");
    }
    let refused = agent
        .ask(CreateTerminalRequest::new(SESSION, "cat go.fifo"))
        .await
        .expect_err("one too many");
    assert_eq!(
        refused.message,
        "refused: 8 terminals are open, the most one loop may have; release one you are done \
         with (terminal/release) first"
    );
    agent
        .ask(ReleaseTerminalRequest::new(SESSION, first))
        .await
        .expect("released");
    agent
        .ask(CreateTerminalRequest::new(SESSION, "true"))
        .await
        .expect("room again");
    project.client.close().await;
}

/// A remote with its token, as a CI checkout leaves one in a file.
const REMOTE_WITH_TOKEN: &str = "https://ghp_secret123@github.com/acme/app.git";

#[tokio::test]
async fn what_the_agent_reads_and_its_terminals_print_carry_no_credentials() {
    let (project, agent) = connected(Decision::Accept).await;
    std::fs::write(
        project.path("notes.txt"),
        format!("clone {REMOTE_WITH_TOKEN}\n"),
    )
    .expect("write");
    let read = agent
        .ask(ReadTextFileRequest::new(SESSION, project.path("notes.txt")))
        .await
        .expect("read");
    assert_eq!(
        read.content,
        "clone https://[REDACTED]@github.com/acme/app.git\n"
    );
    let (_, output) = run_to_exit(
        &agent,
        CreateTerminalRequest::new(SESSION, "cat notes.txt").cwd(project.root.path().to_path_buf()),
    )
    .await;
    assert_eq!(
        output.output,
        "clone https://[REDACTED]@github.com/acme/app.git\n"
    );
}

#[tokio::test]
async fn a_terminal_may_not_change_what_runs_through_its_environment() {
    use agent_client_protocol::v1::schema::EnvVariable;
    let (project, agent) = connected(Decision::Accept).await;
    for name in ["LD_PRELOAD", "LD_LIBRARY_PATH", "BASH_ENV", "ENV", "PATH"] {
        let refused = agent
            .ask(
                CreateTerminalRequest::new(SESSION, "true")
                    .env(vec![EnvVariable::new(name, "/tmp/evil")]),
            )
            .await
            .expect_err("refused");
        assert_eq!(refused.code, ErrorCode::INVALID_PARAMS, "{refused:?}");
        assert_eq!(
            refused.message,
            format!(
                "invalid input: {name} would change which programs run or what they load; run \
                 the command without setting it"
            )
        );
    }
    assert!(project.asked().is_empty(), "{:?}", project.asked());
}

#[tokio::test]
async fn a_write_of_the_approved_content_over_a_file_changed_since_is_asked() {
    let (project, agent) = connected(Decision::Accept).await;
    let edit = shorten_main_asked(&project);
    agent.ask(edit).await.expect("answered");
    // The user changes main.rs meanwhile: the accepted diff no longer says what the write does.
    std::fs::write(project.path("src/main.rs"), "fn main() { mine(); }\n").expect("write");
    write_main(&project, &agent, "fn main() {}\n").await;
    let asked = project.asked();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(
        asked[1].detail.contains("-fn main() { mine(); }"),
        "{}",
        asked[1].detail
    );
}
