//! `src/acp` against the test agent written with the same SDK (`tests/support/acp_agent.rs`):
//! an agent started and initialized, and each way it fails typed and worded, none hanging.

use std::time::{Duration, Instant};

use loopr::acp::{AcpError, AgentConfig, probe_agent};

fn test_agent(behave: &str) -> AgentConfig {
    AgentConfig {
        command: env!("CARGO_BIN_EXE_loopr-test-acp-agent").to_owned(),
        args: vec!["--behave".to_owned(), behave.to_owned()],
        ..AgentConfig::default()
    }
}

async fn probe(config: &AgentConfig, limit: Duration) -> Result<loopr::acp::AgentReport, AcpError> {
    let root = tempfile::tempdir().expect("temp dir");
    probe_agent("test", config, root.path(), limit).await
}

#[tokio::test]
async fn an_agent_is_started_and_initialized() {
    let report = probe(&test_agent("normal"), Duration::from_secs(30))
        .await
        .expect("initialized");
    assert_eq!(report.name, "Loopr Test Agent");
    assert_eq!(report.version.as_deref(), Some("0.3.1"));
    assert_eq!(report.protocol_version, 1);
    assert_eq!(
        report.capabilities(),
        "load session, prompts with embedded context, MCP over stdio and http"
    );
}

#[tokio::test]
async fn a_missing_command_names_the_setting() {
    let config = AgentConfig {
        command: "loopr-no-such-agent-acp".to_owned(),
        ..AgentConfig::default()
    };
    let err = probe(&config, Duration::from_secs(30))
        .await
        .expect_err("missing");
    assert_eq!(
        err.to_string(),
        "agent \"test\" (setting agents.test.command): `loopr-no-such-agent-acp` not found on PATH"
    );
}

#[tokio::test]
async fn an_agent_that_exits_at_once_is_shown_with_its_stderr_tail() {
    let started = Instant::now();
    let err = probe(&test_agent("crash"), Duration::from_secs(30))
        .await
        .expect_err("crashed");
    assert!(matches!(err, AcpError::Exited { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "agent \"test\" exited before it answered (exit status 3); its stderr ended with:\n\
         loopr-test-acp-agent: starting\n\
         loopr-test-acp-agent: no model configured, giving up"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn another_protocol_version_is_named_with_loopr_s() {
    let err = probe(&test_agent("version"), Duration::from_secs(30))
        .await
        .expect_err("mismatch");
    assert_eq!(
        err.to_string(),
        "agent \"test\" speaks ACP protocol version 7, Loopr speaks version 1; install a \
         version of the agent's ACP adapter for protocol version 1"
    );
}

#[tokio::test]
async fn an_agent_asking_to_sign_in_names_the_command_to_run() {
    let config = test_agent("auth");
    let err = probe(&config, Duration::from_secs(30))
        .await
        .expect_err("auth");
    assert_eq!(
        err.to_string(),
        format!(
            "agent \"test\" asks you to sign in first: run `{} --behave auth --login` in a \
             terminal (Log in)",
            config.command
        )
    );
}

#[tokio::test]
async fn an_agent_that_never_answers_times_out() {
    let started = Instant::now();
    let err = probe(&test_agent("hang"), Duration::from_secs(1))
        .await
        .expect_err("timed out");
    assert_eq!(
        err.to_string(),
        "agent \"test\" did not answer initialize within 1 s"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

/// An agent that floods Loopr with messages while the loop reads none (between turns) fills
/// the bounded channel (64) and then its own pipe: its writes stall, its flood unsent,
/// instead of Loopr's memory growing. Once the loop reads, the flood passes and the
/// agent's request after it is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_agent_waits_on_its_pipe_until_the_loop_reads_and_is_then_answered() {
    use agent_client_protocol::v1::schema::{ContentBlock, ReadTextFileResponse, SessionUpdate};
    use futures::StreamExt;
    use loopr::acp::{AgentConnection, FromAgent, initialize};

    let root = tempfile::tempdir().expect("temp dir");
    std::fs::write(root.path().join("notes.txt"), "flood notes\n").expect("notes");
    let mut agent = AgentConnection::start("test", &test_agent("pipe-flood"), root.path())
        .await
        .expect("started");
    initialize(&mut agent, Duration::from_secs(30))
        .await
        .expect("initialized");
    let mut from_agent = agent.take_from_agent().expect("its messages");

    // No one reads: the agent's writes stall on its full pipe, its flood unsent, with no
    // more of it in Loopr than the channel, the pipe and the SDK's read buffer hold.
    let read = |name: &str| std::fs::read_to_string(root.path().join(name)).ok();
    let (blocked, sent) = until(|| {
        let (blocked, sent) = (read("flood-blocked"), read("flood-sent"));
        (blocked.is_some() || sent.is_some()).then_some((blocked, sent))
    })
    .await;
    assert_eq!(
        sent, None,
        "the agent wrote its whole flood while no one read it"
    );
    let blocked: usize = blocked.expect("blocked").parse().expect("a count");
    assert!(
        blocked < 2_000,
        "{blocked} updates written before the flood stalled"
    );

    // The loop reads: every update arrives, then the agent's read, which is answered.
    let mut updates = 0;
    let said = loop {
        let message = tokio::time::timeout(Duration::from_secs(60), from_agent.next())
            .await
            .expect("the flood goes on")
            .expect("the connection is open");
        match message {
            FromAgent::Update(notification) => match &notification.update {
                SessionUpdate::AgentMessageChunk(chunk) => match &chunk.content {
                    ContentBlock::Text(text) if text.text.starts_with("answered: ") => {
                        break text.text.clone();
                    }
                    _ => updates += 1,
                },
                other => panic!("unexpected update {other:?}"),
            },
            FromAgent::ReadTextFile(asked) => {
                let (_, responder) = *asked;
                responder
                    .respond(ReadTextFileResponse::new("flood notes"))
                    .expect("answered");
            }
            other => panic!("unexpected message {other:?}"),
        }
    };
    assert_eq!(said, "answered: flood notes");
    assert_eq!(Some(updates.to_string()), read("flood-sent"));
    agent.shut_down().await;
}

/// Waits for `found` to find something, looking again every 10 ms for at most 30 s: what it
/// looks at (files the test agent writes) sends no event.
async fn until<T>(mut found: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(found) = found() {
            return found;
        }
        assert!(Instant::now() < deadline, "not found within 30 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn an_agent_talking_before_its_session_opens_is_refused_not_left_waiting() {
    let root = tempfile::tempdir().expect("temp dir");
    std::fs::write(root.path().join("notes.txt"), "notes\n").expect("write");
    let config = test_agent("early");
    let mut agent = loopr::acp::AgentConnection::start("test", &config, root.path())
        .await
        .expect("started");
    loopr::acp::initialize(&mut agent, Duration::from_secs(30))
        .await
        .expect("initialized");
    let started = Instant::now();
    let request = agent_client_protocol::v1::schema::NewSessionRequest::new(root.path());
    let session = agent
        .request("session/new", request, Duration::from_secs(30))
        .await
        .expect("the session opens");
    assert_eq!(session.session_id.to_string(), "test-session-1");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        std::fs::read_to_string(root.path().join("agent-early.txt"))
            .ok()
            .as_deref(),
        Some(
            "refused before the session: Invalid request (\"no session is open yet: Loopr \
             serves requests once session/new is answered\")\n"
        ),
        "the agent's read before session/new was answered with an error"
    );
    agent.shut_down().await;
}

#[tokio::test]
async fn the_sign_in_command_quotes_each_word_as_a_shell_needs_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let folder = dir.path().join("my agents");
    std::fs::create_dir(&folder).expect("mkdir");
    let command = folder.join("test agent's acp");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_loopr-test-acp-agent"), &command)
        .expect("symlink");
    let config = AgentConfig {
        command: command.to_str().expect("utf-8").to_owned(),
        ..test_agent("auth")
    };
    let err = probe(&config, Duration::from_secs(30))
        .await
        .expect_err("auth");
    let quoted = format!("'{}/my agents/test agent'\\''s acp'", dir.path().display());
    assert_eq!(
        err.to_string(),
        format!(
            "agent \"test\" asks you to sign in first: run `{quoted} --behave auth --login` in \
             a terminal (Log in)"
        )
    );
}

#[tokio::test]
async fn a_relative_path_entry_never_finds_an_agent_in_the_project() {
    let root = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(root.path().join("bin")).expect("mkdir");
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_loopr-test-acp-agent"),
        root.path().join("bin/planted-acp"),
    )
    .expect("symlink");
    let config = AgentConfig {
        command: "planted-acp".to_owned(),
        env: [("PATH".to_owned(), "bin:.:/usr/bin".to_owned())].into(),
        ..AgentConfig::default()
    };
    let err = probe_agent("test", &config, root.path(), Duration::from_secs(30))
        .await
        .expect_err("not found");
    assert_eq!(
        err.to_string(),
        "agent \"test\" (setting agents.test.command): `planted-acp` not found on PATH"
    );
}
