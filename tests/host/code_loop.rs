//! The code loop without Neovim: `loopr run <phase> --yes` edits the project until the
//! phase's validation command passes, against the fake Anthropic server.

use crate::{fake_llm, nvim, sandboxed, scenario};

use serde_json::{Value, json};

use fake_llm::{FakeLlm, TurnBuilder, first_user_text};
use nvim::TestDirs;
use sandboxed::{sandbox_settings, sandboxed_project};
use scenario::{
    files_ending_with, phase_input, phase_route, plan_route, run_loopr, spec_input, spec_route,
    tool_results, tool_turn, valid_plan,
};

const PHASES: [&str; 3] = ["print-version", "document-flag", "exit-code"];
const SETTINGS: &str = r#"{"plan_review_passes": 0, "spec_review": false, "verify": false}"#;

/// A planned project whose phase `print-version` is validated by grepping src/main.rs.
async fn planned(fake: &FakeLlm, dirs: &TestDirs) {
    scenario::plan_code_project(
        fake,
        dirs,
        "grep -q 'env!(\"CARGO_PKG_VERSION\")' src/main.rs",
    )
    .await;
}

fn code_route() -> &'static str {
    "Implement this phase.\n\n# Phase: Phase print-version"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_validation_goes_back_to_the_model_and_the_second_attempt_passes() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    planned(&fake, &dirs).await;
    let edit = |id: &str, old: &str, new: &str| {
        TurnBuilder::new()
            .text("Changing main.rs.")
            .tool_use(
                id,
                "edit_file",
                json!({"path": "src/main.rs", "old_string": old, "new_string": new}),
            )
            .tool_use(
                &format!("{id}-done"),
                "complete_phase",
                json!({"summary": "printed the version"}),
            )
            .usage(400, 120)
            .reply()
    };
    fake.push_routed(
        code_route(),
        edit("e1", "println!(\"hello\");", "println!(\"version\");"),
    );
    fake.push_routed(
        code_route(),
        edit(
            "e2",
            "println!(\"version\");",
            "println!(\"{}\", env!(\"CARGO_PKG_VERSION\"));",
        ),
    );
    let requests_before = fake.requests().len();

    let output = run_loopr(
        &dirs,
        &fake,
        &["run", "print-version", "--yes", "--settings", SETTINGS],
    )
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stderr:\n{stderr}\nstdout:\n{stdout}"
    );

    let main = std::fs::read_to_string(dirs.project.join("src/main.rs")).expect("main.rs");
    assert!(
        main.contains("println!(\"{}\", env!(\"CARGO_PKG_VERSION\"));"),
        "{main}"
    );
    let requests: Vec<_> = fake.requests().into_iter().skip(requests_before).collect();
    assert_eq!(requests.len(), 2, "one iteration more after the failure");
    assert!(first_user_text(&requests[0].body).contains(code_route()));
    let results = tool_results(&requests[1].body);
    assert_eq!(results[0]["content"], "edited src/main.rs");
    assert_eq!(results[1]["is_error"], true);
    let failure = results[1]["content"].as_str().expect("text");
    assert!(
        failure.starts_with("Validation failed: `grep -q"),
        "{failure}"
    );
    assert!(failure.contains("exit status 1"), "{failure}");
    let tools: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert_eq!(
        tools,
        vec![
            "read_file",
            "list_files",
            "grep",
            "write_file",
            "edit_file",
            "run_command",
            "mark_tasks_done",
            "complete_phase"
        ]
    );

    // Each iteration keeps its validation output and conversation.
    let logs = files_ending_with(&dirs.loopr_home, "/validation.log");
    assert_eq!(logs.len(), 2, "{logs:?}");
    let first = std::fs::read_to_string(&logs[0]).expect("log");
    let second = std::fs::read_to_string(&logs[1]).expect("log");
    assert!(
        logs[0].to_string_lossy().contains("/iterations/001/") && first.contains("exit status 1"),
        "{first}"
    );
    assert!(
        logs[1].to_string_lossy().contains("/iterations/002/") && second.contains("exit status 0"),
        "{second}"
    );
    let row = stdout.lines().nth(1).expect("code loop row");
    let fields: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        (fields[1], fields[2], fields[3], fields[4]),
        ("code", "print-version", "complete", "2"),
        "{stdout}"
    );
    let _: Value = serde_json::from_slice(
        &std::fs::read(logs[1].with_file_name("conversation.json")).expect("conversation"),
    )
    .expect("json");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_without_yes_and_names_the_alternatives() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    let output = run_loopr(&dirs, &fake, &["run", "print-version"]).await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--yes") && stderr.contains(":LooprRun"),
        "{stderr}"
    );
    assert!(fake.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_phase_is_reported() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    planned(&fake, &dirs).await;
    let output = run_loopr(
        &dirs,
        &fake,
        &["run", "no-such-phase", "--yes", "--settings", SETTINGS],
    )
    .await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no approved phase named \"no-such-phase\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("`loopr status` lists the project's loops") && !stderr.contains(":Loopr"),
        "the command line's next step, not Neovim's: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phase_still_waiting_for_review_cannot_run() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    let mut plan = valid_plan();
    plan["specs"] = json!([{"name": "version-flag", "title": "Parse --version", "description": "Print the version from src/main.rs when asked, then exit 0.", "dependencies": []}]);
    fake.push_routed(plan_route(), tool_turn("plan", "create_plan", plan));
    fake.push_routed(
        &spec_route("version-flag"),
        tool_turn("spec", "create_spec", spec_input("version-flag", &PHASES)),
    );
    for phase in PHASES {
        fake.push_routed(
            &phase_route(phase),
            tool_turn(phase, "create_phase", phase_input(phase)),
        );
    }
    let gated = r#"{"plan_review_passes": 0, "spec_review": false, "review_gates": ["phase"]}"#;
    let planned = run_loopr(
        &dirs,
        &fake,
        &["plan", "Add a --version flag", "--settings", gated],
    )
    .await;
    let table = String::from_utf8_lossy(&planned.stdout);
    assert_eq!(table.matches("awaiting_approval").count(), 3, "{table}");

    let output = run_loopr(
        &dirs,
        &fake,
        &["run", "print-version", "--yes", "--settings", SETTINGS],
    )
    .await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("wait for review"), "{stderr}");
}

/// `loopr run print-version --yes --unsandboxed --settings <settings>`.
fn run_unsandboxed(settings: &str) -> [&str; 6] {
    [
        "run",
        "print-version",
        "--yes",
        "--unsandboxed",
        "--settings",
        settings,
    ]
}

/// The id and status of the first code loop in `loopr status`'s table.
async fn code_loop_in_status(dirs: &TestDirs, fake: &FakeLlm) -> (String, String) {
    let status = run_loopr(dirs, fake, &["status"]).await;
    let table = String::from_utf8_lossy(&status.stdout);
    let row: Vec<&str> = table
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|fields| fields.get(1) == Some(&"code"))
        .unwrap_or_else(|| panic!("no code loop in:\n{table}"));
    (row[0].to_owned(), row[3].to_owned())
}

/// A `loopr run` killed while its code loop waits for the model leaves that loop
/// interrupted: the next `loopr run` of the phase is refused with what happened and the
/// command line's two ways on, `loopr resume` and `loopr cancel <phase>/code`; once it is cancelled
/// (at once: no host is left to stop it), `loopr run` implements the phase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_a_phase_whose_code_loop_was_interrupted_names_resume_and_cancel() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    scenario::plan_code_project(&fake, &dirs, "true").await;
    fake.push_routed(code_route(), scenario::stalled_turn("Looking."));
    let run = run_unsandboxed(r#"{"verify": false}"#);
    scenario::killed_at_request(&dirs, &fake, &run, fake.requests().len() + 1).await;
    let (id, status) = code_loop_in_status(&dirs, &fake).await;
    assert_eq!(status, "interrupted");

    let refused = run_loopr(&dirs, &fake, &run).await;
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    // Named as the user types it, never by its id.
    assert!(
        stderr.contains("print-version/code, this phase's code loop, is interrupted")
            && stderr.contains("`loopr resume`")
            && stderr.contains("`loopr cancel print-version/code`")
            && !stderr.contains(&id)
            && !stderr.contains(":Loopr"),
        "{stderr}"
    );

    let cancelled = run_loopr(&dirs, &fake, &["cancel", "print-version/code"]).await;
    let stderr = String::from_utf8_lossy(&cancelled.stderr);
    assert!(cancelled.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("code {id} cancelled")), "{stderr}");
    assert_eq!(
        code_loop_in_status(&dirs, &fake).await,
        (id.clone(), "cancelled".to_owned())
    );

    fake.push_routed(code_route(), scenario::complete_phase_turn("nothing to do"));
    let output = run_loopr(&dirs, &fake, &run).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!stdout.contains(&id), "its own code loop only: {stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validation_command_on_the_deny_list_never_runs() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    scenario::plan_code_project(&fake, &dirs, "sudo touch ran").await;
    fake.push_routed(
        code_route(),
        tool_turn(
            "done",
            "complete_phase",
            json!({"summary": "nothing to do"}),
        ),
    );
    let output = run_loopr(
        &dirs,
        &fake,
        &["run", "print-version", "--yes", "--settings", SETTINGS],
    )
    .await;
    assert!(!output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("failed") && stdout.contains("deny-list"),
        "{stdout}"
    );
    assert!(!dirs.project.join("ran").exists());
}

fn run_command_call(id: &str, command: &str) -> (String, Value) {
    (id.to_owned(), json!({ "command": command }))
}

async fn sandboxed_commands_are_confined(mechanism: &str) {
    let Some((settings, fake, dirs)) = sandboxed_project(mechanism).await else {
        return;
    };
    // Outside the project and outside /tmp (which the sandbox replaces with its own), in a
    // directory of this test's own under /var/tmp (the checkout itself may be under /tmp).
    let canary_home = tempfile::Builder::new()
        .prefix("loopr-canary-")
        .tempdir_in("/var/tmp")
        .expect("canary dir in /var/tmp");
    let canary = canary_home.path().join("canary");
    std::fs::create_dir_all(&canary).expect("canary");
    std::fs::write(canary.join("keep.txt"), "keep\n").expect("canary file");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    // A Unix socket of "the user's" on a path the sandbox can see (read-only): a session
    // bus, a Neovim server or an ssh-agent would be one.
    let socket_path = canary_home.path().join("user.sock");
    let user_socket = std::os::unix::net::UnixListener::bind(&socket_path).expect("socket");
    user_socket.set_nonblocking(true).expect("nonblocking");
    let canary_path = canary.display();
    let calls = [
        run_command_call(
            "rm",
            &format!("rm -rf {canary_path}; echo new > {canary_path}/new.txt"),
        ),
        run_command_call("inside", "echo inside > inside.txt && cat inside.txt"),
        run_command_call("env", "env"),
        run_command_call(
            "environ",
            "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done 2>/dev/null | grep -c API_KEY; true",
        ),
        run_command_call(
            "net",
            &format!(
                "bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' 2>/dev/null && echo connected || echo refused"
            ),
        ),
        run_command_call(
            "fork",
            "(setsid sh -c 'sleep 1001.25 & echo background' &); echo launched",
        ),
        run_command_call(
            "unix",
            &format!(
                "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{}'); print('connected')\"",
                socket_path.display()
            ),
        ),
    ];
    let mut turn = TurnBuilder::new();
    for (id, input) in &calls {
        turn = turn.tool_use(id, "run_command", input.clone());
    }
    fake.push_routed(code_route(), turn.reply());
    let (done, release) = TurnBuilder::new()
        .tool_use("done", "complete_phase", json!({"summary": "checked"}))
        .reply()
        .held();
    fake.push_routed(code_route(), done);
    let requests_before = fake.requests().len();

    let mut run = tokio::spawn(
        scenario::loopr_command(
            &dirs,
            &fake,
            &["run", "print-version", "--yes", "--settings", &settings],
        )
        .env("LOOPR_TEST_SECRET_TOKEN", "must-not-leak")
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output(),
    );
    let requests = tokio::select! {
        requests = fake.wait_for_requests(requests_before + 2) => requests,
        ended = &mut run => panic!("loopr run ended before the commands ran: {ended:?}"),
    };
    // Every call of the turn has returned: nothing the commands started may still run.
    assert_eq!(
        nvim::processes_running(&["sleep", "1001.25"]),
        Vec::<i32>::new(),
        "a setsid, double-forked child outlived its command"
    );
    release.notify_one();
    let output = run.await.expect("join").expect("run loopr");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let results = tool_results(&requests[requests_before + 1].body);
    let result = |index: usize| {
        (
            results[index]["content"].as_str().expect("text").to_owned(),
            results[index]["is_error"] == true,
        )
    };
    let (refused, is_error) = result(0);
    assert!(is_error, "{refused}");
    assert!(
        refused.contains("the sandbox refused writing outside the project root"),
        "{refused}"
    );
    assert_eq!(
        std::fs::read_to_string(canary.join("keep.txt")).expect("the canary survives"),
        "keep\n"
    );
    assert!(!canary.join("new.txt").exists());
    let (inside, is_error) = result(1);
    assert!(!is_error && inside.contains("inside"), "{inside}");
    assert_eq!(
        std::fs::read_to_string(dirs.project.join("inside.txt")).expect("written inside"),
        "inside\n"
    );
    let (environment, _) = result(2);
    assert!(environment.contains("PATH="), "{environment}");
    for secret in [
        "ANTHROPIC_API_KEY",
        "LOOPR_TEST_SECRET_TOKEN",
        "must-not-leak",
        nvim::API_KEY,
    ] {
        assert!(
            !environment.contains(secret),
            "{secret} reached a command:\n{environment}"
        );
    }
    let (environ, _) = result(3);
    assert!(
        environ.contains("exit status 0") && environ.contains("\n0\n"),
        "{environ}"
    );
    let (network, _) = result(4);
    assert!(network.contains("refused"), "{network}");
    assert!(
        matches!(listener.accept(), Err(err) if err.kind() == std::io::ErrorKind::WouldBlock),
        "a command reached a loopback listener with the network off"
    );
    let (unix, _) = result(6);
    assert!(unix.contains("Operation not permitted"), "{unix}");
    assert!(
        matches!(user_socket.accept(), Err(err) if err.kind() == std::io::ErrorKind::WouldBlock),
        "a command connected to a Unix socket outside the sandbox"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bubblewrap_confines_files_network_environment_and_processes() {
    sandboxed_commands_are_confined("bubblewrap").await;
}

/// In a user namespace whose limit of nested user namespaces is 0 (util-linux `unshare`),
/// Landlock's namespaces cannot be set up: asked for by name, it is refused, naming why.
#[test]
fn forcing_landlock_where_user_namespaces_are_refused_names_why() {
    let loopr = env!("CARGO_BIN_EXE_loopr");
    let output = std::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "sh", "-c"])
        .arg(
            r#"echo 0 > /proc/sys/user/max_user_namespaces || exit 99
               exec "$0" sandbox --settings '{"sandbox": {"mode": "landlock"}}'"#,
        )
        .arg(loopr)
        .output();
    let output = match output {
        Ok(output) if output.status.code() != Some(99) && output.status.code() != Some(1) => output,
        other => {
            eprintln!("skipped: cannot limit user namespaces here: {other:?}");
            return;
        }
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(r#"sandbox.mode = "landlock", but the namespaces Landlock"#)
            && stderr.contains("user namespaces may be disabled")
            && stderr.contains(r#"use sandbox.mode = "auto""#),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn landlock_confines_files_network_environment_and_processes() {
    sandboxed_commands_are_confined("landlock").await;
}

async fn no_command_outlives_a_killed_host(mechanism: &str) {
    let Some((settings, fake, dirs)) = sandboxed_project(mechanism).await else {
        return;
    };
    let fifo = dirs.project.join("started.fifo");
    let path = std::ffi::CString::new(fifo.to_string_lossy().as_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path and a mode.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0, "mkfifo");
    fake.push_routed(
        code_route(),
        TurnBuilder::new()
            .tool_use(
                "long",
                "run_command",
                json!({"command": "(setsid sleep 1002.5 &); sleep 1002.75 & echo up > started.fifo; wait"}),
            )
            .reply(),
    );
    let mut host = scenario::loopr_command(
        &dirs,
        &fake,
        &["run", "print-version", "--yes", "--settings", &settings],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .expect("spawn loopr run");
    // The command's write meets this read: the command and what it started are running.
    let reader_fifo = fifo.clone();
    let read = tokio::task::spawn_blocking(move || std::fs::read_to_string(reader_fifo));
    tokio::select! {
        read = read => {
            read.expect("join").expect("read the fifo");
        }
        ended = host.wait() => {
            // Unblocks the reader, which would otherwise keep the runtime from shutting down.
            let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
            panic!("loopr run ended before the command started: {ended:?}");
        }
    }
    let started = nvim::descendants(i32::try_from(host.id().expect("pid")).expect("pid"));
    assert!(!started.is_empty(), "the command runs");
    host.start_kill().expect("SIGKILL the host");
    host.wait().await.expect("wait");
    for pid in started {
        nvim::wait_for_exit(pid).await;
    }
    assert_eq!(
        nvim::processes_running(&["sleep", "1002.5"]),
        Vec::<i32>::new(),
        "the setsid child survived"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_bubblewrap_no_command_outlives_a_killed_host() {
    no_command_outlives_a_killed_host("bubblewrap").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_yes_does_not_run_unsandboxed_commands_unless_told_so() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    scenario::plan_code_project(&fake, &dirs, "true").await;
    let off = r#"{"plan_review_passes": 0, "spec_review": false, "sandbox": {"mode": "off"}, "verify": false}"#;
    let refused = run_loopr(
        &dirs,
        &fake,
        &["run", "print-version", "--yes", "--settings", off],
    )
    .await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains("no sandbox confines commands") && stderr.contains("--unsandboxed"),
        "{stderr}"
    );
    let requests = fake.requests().len();
    fake.push_routed(
        code_route(),
        TurnBuilder::new()
            .tool_use(
                "done",
                "complete_phase",
                json!({"summary": "nothing to do"}),
            )
            .reply(),
    );
    let accepted = run_loopr(
        &dirs,
        &fake,
        &[
            "run",
            "print-version",
            "--yes",
            "--unsandboxed",
            "--settings",
            off,
        ],
    )
    .await;
    assert!(
        accepted.status.success(),
        "{}",
        String::from_utf8_lossy(&accepted.stderr)
    );
    assert_eq!(fake.requests().len(), requests + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_landlock_no_command_outlives_a_killed_host() {
    no_command_outlives_a_killed_host("landlock").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_bubblewrap_auto_falls_back_to_landlock_and_then_to_asking() {
    let describe = |hide_bwrap: bool, settings: &str| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_loopr"));
        command.args(["sandbox", "--settings", settings]);
        if hide_bwrap {
            command
                .env("LOOPR_TEST_HOOKS", "1")
                .env("LOOPR_TEST_NO_BWRAP", "1");
        }
        let output = command.output().expect("run loopr sandbox");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    };
    let (_, with_bwrap) = describe(false, "{}");
    if !with_bwrap.starts_with("bubblewrap") {
        eprintln!("skipped: bubblewrap does not work here: {with_bwrap}");
        return;
    }
    let (code, without) = describe(true, "{}");
    match sandbox_settings("landlock") {
        Ok(_) => {
            assert_eq!(code, Some(0), "{without}");
            assert!(without.starts_with("Landlock ABI"), "{without}");
        }
        Err(why) => {
            eprintln!("Landlock cannot run here ({why}): the fallback is no sandbox");
            assert_eq!(code, Some(1), "{without}");
            assert!(without.starts_with("none:"), "{without}");
        }
    }
}

/// A host killed while it verifies a phase leaves the round in the code loop's run state:
/// `loopr resume` verifies again instead of implementing again, and the phase completes,
/// the verification printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_while_it_verifies_resumes_the_verification() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    scenario::plan_code_project(&fake, &dirs, "true").await;
    let verify = "Verify phase `print-version` against its requirements.";
    fake.push_routed(
        code_route(),
        scenario::edit_main_and_complete("e1", "\"hello\"", "\"sample 0.3.1\""),
    );
    fake.push_routed(verify, scenario::stalled_turn("Reading src/main.rs."));
    let run = run_unsandboxed(r#"{"verify": {"max_rounds": 2}}"#);
    let killed = scenario::killed_at_request(&dirs, &fake, &run, fake.requests().len() + 2).await;
    assert!(
        first_user_text(&killed.body).contains(verify),
        "killed while it verified"
    );
    fake.push_routed(
        verify,
        tool_turn(
            "v1",
            "report_verification",
            json!({"verdict": "pass", "summary": "R1 is met.", "findings": []}),
        ),
    );
    let resumed = run_loopr(&dirs, &fake, &["resume", "--unsandboxed"]).await;
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{stderr}");
    assert!(
        stderr.contains("loopr: print-version: verification passed: no findings"),
        "{stderr}"
    );
    let asked = |route: &str| scenario::requests_routed(&fake, route).len();
    assert_eq!(asked(code_route()), 1, "the code was not implemented again");
    assert_eq!(asked(verify), 2, "the verification was asked again");
    assert_eq!(code_loop_in_status(&dirs, &fake).await.1, "complete");
}
