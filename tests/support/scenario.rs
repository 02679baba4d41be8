//! Building blocks shared by the end-to-end tests: a started editor against a fake server, and
//! the model turns a typical planning conversation consists of.
#![allow(dead_code)]

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply, TurnBuilder};
use crate::nvim::{StartOptions, TestDirs, TestNvim, WAIT};

/// An editor against `fake`. Review passes are off unless `setup` (a Lua table) turns them
/// on, so a test scripts only the turns it is about.
pub async fn start_editor(fake: &FakeLlm, setup: &str) -> TestNvim {
    start_editor_at(fake.base_url(), setup, Vec::new()).await
}

/// Like `start_editor`, against the model API at `base_url`, with `extra_env` added to
/// Neovim's environment.
pub async fn start_editor_at(
    base_url: String,
    setup: &str,
    extra_env: Vec<(String, String)>,
) -> TestNvim {
    TestNvim::start(
        TestDirs::new(),
        StartOptions {
            base_url,
            setup: format!(
                "vim.tbl_extend('force', {{ plan_review_passes = 0, spec_review = false, verify = false }}, {setup})"
            ),
            extra_env,
        },
    )
    .await
}

/// The key the OpenAI-provider tests set, and look for in logs.
pub const OPENAI_KEY: &str = "sk-proj-test-81d2c7aa-never-log-me";

/// An editor whose loops talk to `fake` (a server speaking `Wire::OpenAi`) as the `openai`
/// provider with model `gpt-test`, through `OPENAI_BASE_URL`; `OPENAI_API_KEY` holds `key`
/// if given (local servers take none). `setup` is added as for `start_editor`.
pub async fn start_openai_editor(fake: &FakeLlm, setup: &str, key: Option<&str>) -> TestNvim {
    let mut env = vec![(
        "OPENAI_BASE_URL".to_owned(),
        format!("{}/v1", fake.base_url()),
    )];
    env.extend(key.map(|key| ("OPENAI_API_KEY".to_owned(), key.to_owned())));
    start_editor_at(
        fake.base_url(),
        &format!("vim.tbl_extend('force', {{ provider = 'openai', model = 'gpt-test' }}, {setup})"),
        env,
    )
    .await
}

/// An editor whose `setup` (merged as in `start_editor`) picks the `ollama` provider, with
/// `OLLAMA_HOST` set to `fake`'s bare `host:port`, as users often write it.
pub async fn start_ollama_editor(fake: &FakeLlm, setup: &str) -> TestNvim {
    start_editor_at(
        fake.base_url(),
        setup,
        vec![("OLLAMA_HOST".to_owned(), fake.addr().to_string())],
    )
    .await
}

/// An editor on `dirs` against `fake`, with `setup` taken as it is. Given the directories a
/// quit editor returned, it is that editor restarted on the same project and state.
pub async fn start_editor_in(dirs: TestDirs, fake: &FakeLlm, setup: &str) -> TestNvim {
    TestNvim::start(
        dirs,
        StartOptions {
            base_url: fake.base_url(),
            setup: setup.to_owned(),
            extra_env: Vec::new(),
        },
    )
    .await
}

/// Quits `editor` while the model's turn for the plan `loop_id` is cut off (its request is
/// the last the fake got) and starts an editor on the same directories with `setup`, which
/// resumes the plan. `reply` answers the resumed request, held until the new editor listens
/// for events. Returns the new editor once the plan awaits approval, having checked that the
/// cut-off turn was sent again.
pub async fn restart_mid_turn(
    fake: &FakeLlm,
    editor: TestNvim,
    loop_id: &str,
    setup: &str,
    reply: Reply,
) -> TestNvim {
    let cut_off = fake.requests().len();
    let dirs = editor.quit().await;
    let (held, release) = reply.held();
    fake.push(held);
    let mut editor = start_editor_in(dirs, fake, setup).await;
    tokio::time::timeout(WAIT, fake.wait_for_requests(cut_off + 1))
        .await
        .expect("the new editor resumed the loop on start, which asked the model again");
    release.notify_one();
    editor.wait_status(loop_id, "awaiting_approval").await;
    let requests = fake.requests();
    assert_eq!(
        requests[cut_off - 1].body,
        requests[cut_off].body,
        "the cut-off turn is sent again"
    );
    editor
}

/// Plans "Add a --version flag", waits until the plan awaits approval and approves it;
/// returns the plan's id.
pub async fn plan_and_approve(editor: &mut TestNvim) -> String {
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "awaiting_approval").await;
    assert_eq!(
        editor.command(&format!("LooprApprove {plan_id}")).await,
        None
    );
    plan_id
}

/// Asks with `:LooprRevise` for a revision of the loop shown in the current window.
pub async fn revise_current(editor: &TestNvim, feedback: &str) {
    assert_eq!(
        editor.command(&format!("LooprRevise {feedback}")).await,
        None
    );
}

/// Waits until the project has `count` loops, all complete; fails at once on a failed loop.
pub async fn wait_all_complete(editor: &mut TestNvim, count: usize) -> Vec<Value> {
    wait_loops(editor, count, |status| status == "complete").await
}

/// Waits until the project has `count` loops, each complete or invalidated; fails at once on
/// a failed loop.
pub async fn wait_settled(editor: &mut TestNvim, count: usize) -> Vec<Value> {
    wait_loops(editor, count, |status| {
        status == "complete" || status == "invalidated"
    })
    .await
}

async fn wait_loops(
    editor: &mut TestNvim,
    count: usize,
    settled: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    loop {
        let records = editor.status_records().await;
        let failed: Vec<&Value> = records.iter().filter(|r| r["status"] == "failed").collect();
        assert!(failed.is_empty(), "{failed:#?}");
        if records.len() == count && records.iter().all(|r| settled(&r["status"])) {
            return records;
        }
        editor
            .wait_event("LooprLoopUpdated", |data| data["status"] == "complete")
            .await;
    }
}

pub fn valid_plan() -> Value {
    json!({
        "title": "Add a --version flag",
        "overview": "Print the crate version from Cargo.toml when the CLI gets --version.",
        "specs": [
            {"name": "version-flag", "title": "Parse --version", "description": "Teach main.rs to recognise --version and print CARGO_PKG_VERSION.", "dependencies": []},
            {"name": "version-docs", "title": "Document --version", "description": "Mention the flag in README.md.", "dependencies": ["version-flag"]}
        ],
        "non_goals": ["A version subcommand"],
        "risks": ["None beyond forgetting the docs"]
    })
}

pub fn create_plan_turn(id: &str, plan: Value) -> Reply {
    TurnBuilder::new()
        .text("I have what I need; here is the plan.")
        .tool_use(id, "create_plan", plan)
        .usage(900, 300)
        .reply()
}

/// Words of the answer `slow_plan_turn` streams.
pub const SLOW_WORDS: usize = 30;

/// A plan answer streamed like a slow model's, one event every 50 ms for about four seconds:
/// `SLOW_WORDS` words of text, then the create_plan call.
pub fn slow_plan_turn() -> Reply {
    TurnBuilder::new()
        .text_deltas((0..SLOW_WORDS).map(|index| format!("thinking-aloud-{index} ")))
        .tool_use("toolu_plan", "create_plan", valid_plan())
        .usage(900, 300)
        .paced(std::time::Duration::from_millis(50))
}

/// The estimated token counts in progress messages ("model is answering… ~350 tokens so
/// far"; below 1,000, as `slow_plan_turn`'s are), in the order they came.
pub fn answer_token_counts<'a>(messages: impl IntoIterator<Item = &'a str>) -> Vec<u64> {
    messages
        .into_iter()
        .filter_map(|message| message.split("… ~").nth(1))
        .filter_map(|rest| rest.split(' ').next())
        .map(|count| count.parse().expect("a count below 1,000"))
        .collect()
}

/// A turn that starts (message_start and the opening of a text block) and then goes silent
/// with the connection open.
pub fn stalled_turn(text: &str) -> Reply {
    let opening = TurnBuilder::new()
        .text(text)
        .events()
        .into_iter()
        .take(3)
        .collect();
    Reply::Stall(opening)
}

pub fn list_files_turn() -> Reply {
    TurnBuilder::new()
        .text("Let me look at the project first.")
        .tool_use("toolu_list", "list_files", json!({}))
        .usage(500, 40)
        .reply()
}

/// The bodies of the requests whose first user message contains `route`, in order.
pub fn requests_routed(fake: &FakeLlm, route: &str) -> Vec<Value> {
    fake.requests()
        .into_iter()
        .filter(|request| crate::fake_llm::first_user_text(&request.body).contains(route))
        .map(|request| request.body)
        .collect()
}

/// The `tool_result` blocks of a recorded request's last (user) message.
pub fn tool_results(body: &Value) -> Vec<Value> {
    let messages = body["messages"].as_array().expect("messages");
    let last = messages.last().expect("a message");
    assert_eq!(last["role"], "user", "the last message answers the model");
    last["content"]
        .as_array()
        .expect("content")
        .iter()
        .filter(|block| block["type"] == "tool_result")
        .cloned()
        .collect()
}

/// Scripts into `fake` each spec of `specs` (its name and its phases' names) and each of its
/// phases, routed to their loops.
pub fn push_specs_and_phases<'a, Phases: AsRef<[&'a str]>>(
    fake: &FakeLlm,
    specs: &[(&str, Phases)],
) {
    for (spec, phases) in specs {
        let phases = phases.as_ref();
        fake.push_routed(
            &spec_route(spec),
            tool_turn(spec, "create_spec", spec_input(spec, phases)),
        );
        for phase in phases {
            fake.push_routed(
                &phase_route(phase),
                tool_turn(phase, "create_phase", phase_input(phase)),
            );
        }
    }
}

/// A spec of the two-spec hierarchy, with `phases` phases named `<prefix>-1`, `<prefix>-2`, ...
/// Its one requirement, R1, is covered by every phase, so each `phase_input` task cites it.
pub fn spec_input(name: &str, phase_names: &[&str]) -> Value {
    let phases: Vec<Value> = phase_names
        .iter()
        .map(|phase| {
            json!({
                "name": phase,
                "title": format!("Phase {phase}"),
                "description": format!("Do the {phase} part of {name}, keeping the existing behaviour intact and covering it with a test."),
                "files": ["src/main.rs"],
                "validation": "cargo test",
                "requirements": ["R1"]
            })
        })
        .collect();
    json!({
        "name": name,
        "title": format!("Spec {name}"),
        "overview": format!("The {name} spec changes the CLI entry point in src/main.rs so that the new flag is recognised before any other argument, prints the version taken from Cargo.toml and exits successfully, with tests that pin the behaviour down."),
        "requirements": [{
            "id": "R1",
            "text": "WHEN the user runs sample --version THE SYSTEM SHALL print sample 0.3.1 and exit 0",
            "check": "An integration test runs the binary with --version."
        }],
        "phases": phases,
        "acceptance_criteria": ["sample --version prints sample 0.3.1 and exits 0"],
        "test_strategy": "Unit tests for argument parsing and an integration test that runs the binary."
    })
}

pub fn phase_input(name: &str) -> Value {
    json!({
        "name": name,
        "title": format!("Phase {name}"),
        "objective": format!("Carry out {name}: recognise --version in src/main.rs and print the crate version."),
        "tasks": [
            {"description": "Match --version before other arguments and print the version", "file": "src/main.rs", "action": "modify", "requirements": ["R1"]},
            {"description": format!("Add a test for {name}"), "file": format!("tests/{name}.rs"), "action": "create"}
        ],
        "validation_command": "cargo test",
        "success_criteria": ["sample --version prints the version"]
    })
}

/// The opening words of each level's first message, for routing replies to the right
/// conversation.
pub fn plan_route() -> &'static str {
    "Plan this change"
}

pub fn spec_route(spec: &str) -> String {
    format!("Write the spec named \"{spec}\"")
}

pub fn phase_route(phase: &str) -> String {
    format!("# Phase \"{phase}\"")
}

pub fn code_route(phase: &str) -> String {
    format!("Implement this phase.\n\n# Phase: Phase {phase}")
}

pub fn tool_turn(id: &str, tool: &str, input: Value) -> Reply {
    TurnBuilder::new()
        .tool_use(id, tool, input)
        .usage(300, 100)
        .reply()
}

/// A code loop's model turn that replaces `old` with `new` in src/main.rs and says the phase
/// is done.
pub fn edit_main_and_complete(id: &str, old: &str, new: &str) -> Reply {
    crate::fake_llm::TurnBuilder::new()
        .tool_use(
            id,
            "edit_file",
            json!({"path": "src/main.rs", "old_string": old, "new_string": new}),
        )
        .tool_use(
            &format!("{id}-done"),
            "complete_phase",
            json!({"summary": "prints the version"}),
        )
        .reply()
}

/// A code loop's model turn that says the phase is done with `summary`.
pub fn complete_phase_turn(summary: &str) -> Reply {
    tool_turn("done", "complete_phase", json!({"summary": summary}))
}

/// Every file under `dir` whose name ends with `suffix`, sorted.
pub fn files_ending_with(dir: &std::path::Path, suffix: &str) -> Vec<std::path::PathBuf> {
    files_under(dir)
        .into_iter()
        .filter(|path| path.to_string_lossy().ends_with(suffix))
        .collect()
}

/// Every file under `dir` whose bytes contain `needle`.
pub fn files_containing(dir: &std::path::Path, needle: &str) -> Vec<std::path::PathBuf> {
    files_under(dir)
        .into_iter()
        .filter(|path| {
            std::fs::read(path).is_ok_and(|bytes| {
                bytes
                    .windows(needle.len())
                    .any(|window| window == needle.as_bytes())
            })
        })
        .collect()
}

/// Every file under `dir`, however deep, sorted.
pub fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                stack.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// `loopr <args>` without Neovim, in the project, against the fake server; waits for it.
pub async fn run_loopr(
    dirs: &crate::nvim::TestDirs,
    fake: &FakeLlm,
    args: &[&str],
) -> std::process::Output {
    loopr_command(dirs, fake, args)
        .output()
        .await
        .expect("run loopr")
}

/// The rows of a run's summary table after checking the run exited 0 and every row is
/// `complete` (its exit, stderr and stdout shown if not).
pub fn all_complete_rows(output: &std::process::Output) -> Vec<String> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {:?}\nstderr:\n{stderr}\nstdout:\n{stdout}",
        output.status
    );
    let rows: Vec<String> = stdout.lines().skip(1).map(str::to_owned).collect();
    assert!(
        rows.iter().all(|row| row.contains(" complete ")),
        "{stdout}"
    );
    rows
}

/// The arguments of `loopr plan "Add a --version flag"` without review passes.
pub const PLAN_ARGS: [&str; 4] = [
    "plan",
    "Add a --version flag",
    "--settings",
    r#"{"plan_review_passes": 0}"#,
];

/// `loopr plan "Add a --version flag"` without review passes (see `run_loopr`).
pub async fn run_loopr_plan(dirs: &crate::nvim::TestDirs, fake: &FakeLlm) -> std::process::Output {
    run_loopr(dirs, fake, &PLAN_ARGS).await
}

/// Runs `loopr plan <task>` with `settings` until the model got `requests` requests (the
/// last one left unanswered), and kills it there (SIGKILL): its loop stays running in the
/// store, its host gone. Returns that last request.
pub async fn plan_killed_at_request(
    dirs: &crate::nvim::TestDirs,
    fake: &FakeLlm,
    task: &str,
    settings: &str,
    requests: usize,
) -> crate::fake_llm::RecordedRequest {
    killed_at_request(
        dirs,
        fake,
        &["plan", task, "--settings", settings],
        requests,
    )
    .await
}

/// Runs `loopr <args>` until the model got `requests` requests in all (the last one left
/// unanswered), and kills it there (SIGKILL): its loops stay running in the store, their host
/// gone. Returns that last request.
pub async fn killed_at_request(
    dirs: &crate::nvim::TestDirs,
    fake: &FakeLlm,
    args: &[&str],
    requests: usize,
) -> crate::fake_llm::RecordedRequest {
    let mut run = loopr_command(dirs, fake, args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start loopr");
    let mut asked = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        fake.wait_for_requests(requests),
    )
    .await
    .expect("the model is asked");
    run.start_kill().expect("SIGKILL");
    run.wait().await.expect("wait");
    asked.swap_remove(requests - 1)
}

/// The `loopr <args>` command `run_loopr` runs, to adjust before spawning it.
pub fn loopr_command(
    dirs: &crate::nvim::TestDirs,
    fake: &FakeLlm,
    args: &[&str],
) -> tokio::process::Command {
    let mut command = tokio::process::Command::from(loopr_std_command(dirs, fake, args));
    command.kill_on_drop(true);
    command
}

/// `loopr_command` as a `std` command, for a test that waits for the process itself.
pub fn loopr_std_command(
    dirs: &crate::nvim::TestDirs,
    fake: &FakeLlm,
    args: &[&str],
) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_loopr"));
    command
        .args(args)
        .current_dir(&dirs.project)
        .env_clear()
        .env("HOME", &dirs.home)
        .env("LOOPR_HOME", &dirs.loopr_home)
        .env("ANTHROPIC_API_KEY", crate::nvim::API_KEY)
        .env("ANTHROPIC_BASE_URL", fake.base_url());
    command
}

/// Setup that lets code loops write, edit and run commands without asking.
pub const AUTO_APPROVE: &str =
    "{ approvals = { write = 'auto', edit = 'auto', command = 'auto' } }";

/// The id of the next code loop that starts running.
pub async fn code_loop_id(editor: &mut TestNvim) -> String {
    let running = editor
        .wait_event("LooprLoopUpdated", |data| {
            data["type"] == "code" && data["status"] == "running"
        })
        .await;
    running["id"].as_str().expect("id").to_owned()
}

/// Runs `:LooprRun {phase}` and returns the id of the code loop it starts.
pub async fn run_code_loop(editor: &mut TestNvim, phase: &str) -> String {
    assert_eq!(editor.command(&format!("LooprRun {phase}")).await, None);
    code_loop_id(editor).await
}

/// An editor with `setup` on a git project whose one-spec hierarchy (5 loops) is planned and
/// approved, each phase validated by the command `validation` gives it (or the default).
pub async fn planned_one_spec(
    fake: &FakeLlm,
    setup: &str,
    validation: impl Fn(&str) -> Option<String>,
) -> TestNvim {
    push_one_spec_hierarchy(fake, validation, tool_turn);
    let mut editor = start_editor(fake, setup).await;
    commit_everything(&editor.dirs.project);
    plan_and_approve(&mut editor).await;
    wait_all_complete(&mut editor, 5).await;
    editor
}

/// In a git project, plans and approves a one-spec hierarchy (5 loops), then runs the code
/// loop of its `print-version` phase to completion; returns `src/main.rs` as it then reads.
pub async fn run_print_version(editor: &mut TestNvim) -> String {
    commit_everything(&editor.dirs.project);
    plan_and_approve(editor).await;
    wait_all_complete(editor, 5).await;
    let code_id = run_code_loop(editor, "print-version").await;
    editor.wait_status(&code_id, "complete").await;
    std::fs::read_to_string(editor.dirs.project.join("src/main.rs")).expect("main.rs")
}

/// Runs git in `dir` as the user would (a name and address for commits and stashes); its
/// standard output. A failure fails the test with git's words.
pub fn git_in(dir: &std::path::Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .args(["-c", "user.name=User", "-c", "user.email=user@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Makes the project a real git repository with one commit.
pub fn commit_everything(project: &std::path::Path) {
    for args in [
        vec!["init", "-q"],
        vec!["add", "-A"],
        vec![
            "-c",
            "user.name=Loopr Test",
            "-c",
            "user.email=test@loopr.invalid",
            "commit",
            "-qm",
            "initial",
        ],
    ] {
        let status = std::process::Command::new("git")
            .args(&args)
            .current_dir(project)
            .status()
            .expect("git runs");
        assert!(status.success(), "git {args:?}");
    }
}

/// The phases of the spec `script_revised_spec` scripts, before and after its revision.
pub const FIRST_PHASES: [&str; 3] = ["parse-flag", "print-version", "exit-code"];
pub const REVISED_PHASES: [&str; 3] = ["parse-args", "print-it", "exit-zero"];

/// Scripts a plan of one spec, the spec with `FIRST_PHASES`, and its revision with
/// `REVISED_PHASES` (every phase answered once); returns the spec's name.
pub fn script_revised_spec(fake: &FakeLlm) -> String {
    let mut plan = valid_plan();
    plan["specs"].as_array_mut().expect("specs").truncate(1);
    let spec = plan["specs"][0]["name"].as_str().expect("name").to_owned();
    fake.push_routed(plan_route(), tool_turn("plan", "create_plan", plan));
    for (id, phases) in [("spec1", FIRST_PHASES), ("spec2", REVISED_PHASES)] {
        fake.push_routed(
            &spec_route(&spec),
            tool_turn(id, "create_spec", spec_input(&spec, &phases)),
        );
        for phase in phases {
            fake.push_routed(
                &phase_route(phase),
                tool_turn(phase, "create_phase", phase_input(phase)),
            );
        }
    }
    spec
}

/// Plans a one-spec hierarchy headless (`loopr plan --approve-all`, no review passes) whose
/// phases are `print-version` (validated by `validation`), `document-flag` and `exit-code`.
pub async fn plan_code_project(fake: &FakeLlm, dirs: &crate::nvim::TestDirs, validation: &str) {
    plan_one_spec_headless(fake, dirs, |phase| {
        (phase == "print-version").then_some(validation)
    })
    .await;
}

/// Plans the one-spec hierarchy of `plan_code_project` headless, each phase validated by
/// what `validation_of` gives for it (else the phase's own command).
pub async fn plan_one_spec_headless<'v>(
    fake: &FakeLlm,
    dirs: &crate::nvim::TestDirs,
    validation_of: impl Fn(&str) -> Option<&'v str>,
) {
    let phases = ["print-version", "document-flag", "exit-code"];
    let mut plan = valid_plan();
    plan["specs"] = json!([{"name": "version-flag", "title": "Parse --version", "description": "Print the version from src/main.rs when asked, then exit 0.", "dependencies": []}]);
    fake.push_routed(plan_route(), tool_turn("plan", "create_plan", plan));
    fake.push_routed(
        &spec_route("version-flag"),
        tool_turn("spec", "create_spec", spec_input("version-flag", &phases)),
    );
    for phase in phases {
        let mut input = phase_input(phase);
        if let Some(validation) = validation_of(phase) {
            input["validation_command"] = json!(validation);
        }
        fake.push_routed(&phase_route(phase), tool_turn(phase, "create_phase", input));
    }
    let output = run_loopr(
        dirs,
        fake,
        &[
            "plan",
            "Add a --version flag",
            "--approve-all",
            "--settings",
            r#"{"plan_review_passes": 0, "spec_review": false}"#,
        ],
    )
    .await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Makes every transcript append also tell the test, so it can wait for text to arrive.
pub async fn watch_transcripts(editor: &TestNvim) {
    editor
        .exec(
            "local transcript = require('loopr.transcript')
             local append = transcript.append
             transcript.append = function(items)
               append(items)
               vim.rpcnotify(vim.g.loopr_test_channel, 'loopr_test_event', 'TranscriptAppended', vim.empty_dict())
             end",
        )
        .await;
}

pub async fn buffer_text(editor: &TestNvim, buf: i64) -> String {
    let lines: Vec<String> = editor
        .lua(&format!(
            "return vim.api.nvim_buf_get_lines({buf}, 0, -1, true)"
        ))
        .await;
    lines.join("\n")
}

/// The text of transcript buffer `buf` once it contains `needle`.
pub async fn transcript_with(editor: &mut TestNvim, buf: i64, needle: &str) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let text = buffer_text(editor, buf).await;
        if text.contains(needle) {
            return text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the transcript never showed {needle:?}:\n{text}"
        );
        editor.wait_event("TranscriptAppended", |_| true).await;
    }
}

/// Opens `:LooprTranscript [id]` and returns its buffer.
pub async fn open_transcript(editor: &TestNvim, id: Option<&str>) -> i64 {
    let command = match id {
        Some(id) => format!("LooprTranscript {id}"),
        None => "LooprTranscript".to_owned(),
    };
    assert_eq!(editor.command(&command).await, None);
    editor.lua("return vim.api.nvim_get_current_buf()").await
}

/// The phases of the one spec of `one_spec_plan`.
pub const ONE_SPEC_PHASES: [&str; 3] = ["print-version", "document-flag", "exit-code"];

/// A plan of one spec, `version-flag`.
pub fn one_spec_plan() -> Value {
    let mut plan = valid_plan();
    plan["specs"] = json!([{"name": "version-flag", "title": "Parse --version", "description": "Print the version from src/main.rs when asked, then exit 0.", "dependencies": []}]);
    plan
}

/// Scripts `one_spec_plan` and its spec with `ONE_SPEC_PHASES` into `fake`, each answer made
/// by `turn(id, tool, input)`; the phases are the caller's.
pub fn push_one_spec(fake: &FakeLlm, turn: impl Fn(&str, &str, Value) -> Reply) {
    fake.push_routed(plan_route(), turn("plan", "create_plan", one_spec_plan()));
    fake.push_routed(
        &spec_route("version-flag"),
        turn(
            "spec",
            "create_spec",
            spec_input("version-flag", &ONE_SPEC_PHASES),
        ),
    );
}

/// Scripts `one_spec_plan`, its spec with `ONE_SPEC_PHASES` and each phase into `fake`, each
/// answer made by `turn(id, tool, input)`; a phase's validation command is
/// `validation(phase)` where that says one.
pub fn push_one_spec_hierarchy(
    fake: &FakeLlm,
    validation: impl Fn(&str) -> Option<String>,
    turn: impl Fn(&str, &str, Value) -> Reply,
) {
    push_one_spec(fake, &turn);
    for phase in ONE_SPEC_PHASES {
        let mut input = phase_input(phase);
        if let Some(command) = validation(phase) {
            input["validation_command"] = json!(command);
        }
        fake.push_routed(&phase_route(phase), turn(phase, "create_phase", input));
    }
}

/// The id of the phase loop `spec/phase` among `records` (status rows); with `plan`, of the
/// spec that plan loop spawned.
pub fn phase_loop_id(records: &[Value], plan: Option<&str>, spec: &str, phase: &str) -> String {
    let spec_id = records
        .iter()
        .find(|r| {
            r["type"] == "spec" && r["name"] == spec && plan.is_none_or(|plan| r["parent"] == plan)
        })
        .map(|r| r["id"].clone())
        .expect("spec loop");
    records
        .iter()
        .find(|r| r["type"] == "phase" && r["name"] == phase && r["parent"] == spec_id)
        .and_then(|r| r["id"].as_str())
        .expect("phase loop")
        .to_owned()
}

/// A plan of `specs` (each a name and its three phases), none depending on another.
pub fn plan_of_specs(specs: &[(&str, [&str; 3])]) -> Value {
    let mut plan = valid_plan();
    plan["specs"] = specs
        .iter()
        .map(|(spec, _)| {
            json!({"name": spec, "title": format!("The {spec} part"), "description": format!("The {spec} part: print the version from src/main.rs when asked, then exit 0."), "dependencies": []})
        })
        .collect();
    plan
}

/// Routes a phase loop by its position in its spec: the phase name alone is not unique.
pub fn phase_route_by_position(spec: &str, position: usize) -> String {
    format!("Write phase {position} of 3 of the spec \"{spec}\"")
}

/// Scripts the model's answer `id` to the spec loop of `spec`, and those to its phase loops
/// (routed by position, each validated by `validation`).
pub fn script_spec(fake: &FakeLlm, id: &str, spec: &str, phases: &[&str; 3], validation: &str) {
    fake.push_routed(
        &spec_route(spec),
        tool_turn(id, "create_spec", spec_input(spec, phases)),
    );
    for (index, phase) in phases.iter().enumerate() {
        let mut input = phase_input(phase);
        input["validation_command"] = json!(validation);
        fake.push_routed(
            &phase_route_by_position(spec, index + 1),
            tool_turn(phase, "create_phase", input),
        );
    }
}

/// The status row of loop `id`, as `:LooprStatus` has it.
pub async fn status_row(editor: &TestNvim, id: &str) -> Value {
    editor
        .status_records()
        .await
        .into_iter()
        .find(|row| row["id"] == id)
        .expect("the loop's row")
}

/// The files `:LooprChanges <phase>` lists, relative to the project.
pub async fn changed_files(editor: &TestNvim, phase: &str) -> Vec<String> {
    assert_eq!(editor.command(&format!("LooprChanges {phase}")).await, None);
    editor
        .lua(
            "return vim.tbl_map(function(item)
               return vim.fn.fnamemodify(vim.api.nvim_buf_get_name(item.bufnr), ':.')
             end, vim.fn.getqflist({ items = 1 }).items)",
        )
        .await
}

/// Sets `budget` (a Lua table) over the editor's settings, runs `phase`'s code loop, and
/// waits for the notice that its tree reached the budget: the loop's id and the notice.
pub async fn run_to_the_budget(
    editor: &mut TestNvim,
    budget: &str,
    phase: &str,
) -> (String, String) {
    let ok: bool = editor
        .lua(&format!(
            "return require('loopr').setup(vim.tbl_extend('force', require('loopr.config').get(), {{ budget = {budget} }}))"
        ))
        .await;
    assert!(ok, "setup with budget {budget}");
    let code_id = run_code_loop(editor, phase).await;
    let notice = editor
        .wait_event("LooprNotice", |data| {
            data["message"]
                .as_str()
                .is_some_and(|message| message.contains("reached its budget"))
        })
        .await;
    let message = notice["message"].as_str().unwrap_or_default().to_owned();
    (code_id, message)
}
