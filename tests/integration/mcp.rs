//! MCP servers' tools in code loops, against the test server written with the same SDK
//! (`tests/support/mcp_server.rs`): offered as `server__tool`, approved per tool, checked
//! against the server's schema, errors and timeouts as error results, restarts after a crash,
//! no provider key in the server's environment.

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, TurnBuilder};
use crate::nvim::{API_KEY, TestNvim};
use crate::scenario::{
    code_route, commit_everything, complete_phase_turn, files_containing, phase_input, phase_route,
    plan_and_approve, plan_route, push_specs_and_phases, requests_routed, run_code_loop,
    spec_input, spec_route, start_editor, start_editor_at, start_editor_in, tool_results,
    tool_turn, wait_all_complete,
};

/// A token in the host's environment that no MCP server may see.
const SECRET: &str = "ghp-test-never-share";
const PHASE: &str = "print-version";
const PHASES: [&str; 3] = [PHASE, "document-flag", "exit-code"];

fn server_binary() -> &'static str {
    env!("CARGO_BIN_EXE_loopr-test-mcp-server")
}

/// What the test server wrote to its log: a line per start and per call that reached it.
fn server_log(log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The `setup()` table: commands and edits approved automatically (MCP calls not), and the
/// test server as `probe`, logging to `log`, with `read_only` tools and `timeout_secs`.
fn setup(log: &std::path::Path, read_only: &[&str], timeout_secs: u32) -> String {
    let read_only: Vec<String> = read_only.iter().map(|tool| format!("{tool:?}")).collect();
    format!(
        "{{ approvals = {{ write = 'auto', edit = 'auto', command = 'auto' }},
           mcp = {{ servers = {{ probe = {{ command = {:?}, args = {{ '--log', {:?} }},
             read_only_tools = {{ {} }}, timeout_secs = {timeout_secs} }} }} }} }}",
        server_binary(),
        log.display().to_string(),
        read_only.join(", ")
    )
}

/// An editor with a planned, approved one-phase hierarchy, ready for `:LooprRun print-version`.
async fn planned_editor(fake: &FakeLlm, setup: &str) -> TestNvim {
    crate::scenario::push_one_spec_hierarchy(fake, |_| Some("true".to_owned()), tool_turn);
    // A secret besides the provider key in the editor's (and so the host's) environment.
    let extra_env = vec![("GITHUB_TOKEN".to_owned(), SECRET.to_owned())];
    let mut editor = start_editor_at(fake.base_url(), setup, extra_env).await;
    commit_everything(&editor.dirs.project);
    plan_and_approve(&mut editor).await;
    wait_all_complete(&mut editor, 5).await;
    editor
}

fn result_text(result: &Value) -> &str {
    result["content"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_loop_calls_mcp_tools_with_approval_and_schema_checks() {
    let fake = FakeLlm::start().await;
    let temp = tempfile::tempdir().expect("temp dir");
    let log = temp.path().join("server.log");
    let mut editor = planned_editor(&fake, &setup(&log, &["lookup", "environment"], 30)).await;
    fake.push_routed(
        &code_route(PHASE),
        TurnBuilder::new()
            .tool_use("l1", "probe__lookup", json!({"key": "answer"}))
            .tool_use("r1", "probe__record", json!({"note": "first"}))
            .tool_use("r2", "probe__record", json!({"note": "second"}))
            .tool_use("r3", "probe__record", json!({"note": 5}))
            .tool_use("e1", "probe__environment", json!({}))
            .reply(),
    );
    fake.push_routed(&code_route(PHASE), complete_phase_turn("used the tools"));

    let code_id = run_code_loop(&mut editor, PHASE).await;
    let first = editor
        .wait_event("LooprApprovalRequested", |data| data["kind"] == "mcp")
        .await;
    assert_eq!(first["subject"], "probe__record");
    let shown: String = editor
        .lua(&format!(
            "local name = 'loopr://approval/{}'
             for _, buf in ipairs(vim.api.nvim_list_bufs()) do
               if vim.api.nvim_buf_get_name(buf) == name then
                 return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\\n')
               end
             end
             return ''",
            first["id"]
        ))
        .await;
    assert!(
        shown.contains("Loopr wants to call the MCP tool probe__record")
            && shown.contains("\"note\": \"first\"")
            && shown.contains("calls of probe__record from now on"),
        "{shown}"
    );
    editor
        .exec(&format!(
            "require('loopr.approvals').answer({}, 'accept')",
            first["id"]
        ))
        .await;
    let second = editor
        .wait_event("LooprApprovalRequested", |data| {
            data["kind"] == "mcp" && data["id"] != first["id"]
        })
        .await;
    editor
        .exec(&format!(
            "require('loopr.approvals').answer({}, 'reject', 'not the second one')",
            second["id"]
        ))
        .await;
    editor.wait_status(&code_id, "complete").await;

    let requests = requests_routed(&fake, &code_route(PHASE));
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .filter(|name| name.starts_with("probe__"))
        .collect();
    assert_eq!(
        offered,
        [
            "probe__lookup",
            "probe__record",
            "probe__environment",
            "probe__crash",
            "probe__hang"
        ]
    );
    // The model is shown a server's schema without what changes nothing it accepts; the
    // call is still checked against the server's own (the `note: 5` below).
    let record = requests[0]["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|tool| tool["name"] == "probe__record"))
        .expect("probe__record");
    assert_eq!(
        record["input_schema"],
        json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"note": {"type": "string"}},
            "required": ["note"],
            "additionalProperties": false
        })
    );
    let results = tool_results(&requests[1]);
    assert_eq!(result_text(&results[0]), "value of answer\n");
    assert_ne!(results[0]["is_error"], true);
    assert_eq!(result_text(&results[1]), "recorded first\n");
    assert_eq!(results[2]["is_error"], true);
    assert_eq!(
        result_text(&results[2]),
        "probe__record failed: the user rejected this change: not the second one"
    );
    assert_eq!(results[3]["is_error"], true);
    assert!(
        result_text(&results[3]).contains("note") && result_text(&results[3]).contains("schema"),
        "{}",
        results[3]
    );
    let environment = result_text(&results[4]);
    assert!(
        environment.lines().any(|name| name == "PATH"),
        "{environment}"
    );
    assert!(
        !environment.contains("API_KEY")
            && !environment.contains(API_KEY)
            && !environment.contains("GITHUB_TOKEN")
            && !environment.contains(SECRET),
        "no provider key or other secret reaches the server: {environment}"
    );

    // Only the accepted call reached the server; the rejected and the invalid one did not.
    let reached: Vec<String> = server_log(&log)
        .into_iter()
        .filter(|line| !line.starts_with("start "))
        .collect();
    assert_eq!(reached, ["record first"]);
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_server_is_restarted_and_one_that_never_answers_times_out() {
    let fake = FakeLlm::start().await;
    let temp = tempfile::tempdir().expect("temp dir");
    let log = temp.path().join("server.log");
    let mut editor = planned_editor(&fake, &setup(&log, &["lookup", "crash", "hang"], 2)).await;
    fake.push_routed(
        &code_route(PHASE),
        TurnBuilder::new()
            .tool_use("c1", "probe__crash", json!({}))
            .tool_use("l1", "probe__lookup", json!({"key": "after"}))
            .tool_use("h1", "probe__hang", json!({}))
            .tool_use("l2", "probe__lookup", json!({"key": "still"}))
            .reply(),
    );
    fake.push_routed(&code_route(PHASE), complete_phase_turn("survived"));

    let code_id = run_code_loop(&mut editor, PHASE).await;
    editor.wait_status(&code_id, "complete").await;

    let requests = requests_routed(&fake, &code_route(PHASE));
    let results = tool_results(&requests[1]);
    assert_eq!(results[0]["is_error"], true);
    assert!(
        result_text(&results[0]).contains("MCP server probe stopped during the call"),
        "{}",
        results[0]
    );
    assert_eq!(result_text(&results[1]), "value of after\n", "restarted");
    assert_eq!(results[2]["is_error"], true);
    assert!(
        result_text(&results[2]).contains("did not answer within 2 s"),
        "{}",
        results[2]
    );
    assert_eq!(result_text(&results[3]), "value of still\n");
    let starts = server_log(&log)
        .iter()
        .filter(|line| line.starts_with("start "))
        .count();
    assert_eq!(starts, 2, "{:?}", server_log(&log));

    // :LooprMcp shows the server's state, tools and what went wrong.
    assert_eq!(editor.command("LooprMcp").await, None);
    let shown: String = editor
        .lua("return table.concat(vim.api.nvim_buf_get_lines(vim.fn.bufnr('loopr://mcp'), 0, -1, false), '\\n')")
        .await;
    assert!(
        shown.contains("probe (stdio, running, started 2 times)")
            && shown.contains("tools: lookup, record, environment, crash, hang")
            && shown.contains("error: the server stopped during a call")
            && shown.contains("error: MCP server probe did not answer within 2 s"),
        "{shown}"
    );

    // :checkhealth starts the configured server (for the project) and lists its tools.
    assert_eq!(editor.command("checkhealth loopr").await, None);
    let report: String = editor
        .lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
        .await;
    assert!(
        report.contains("MCP server probe starts; tools: lookup, record, environment, crash, hang"),
        "{report}"
    );
    editor.quit().await;
}

/// The test server over streamable HTTP on loopback, killed when dropped; and its URL.
async fn http_server(log: &std::path::Path) -> (tokio::process::Child, String) {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(server_binary())
        .args(["--http", "--log"])
        .arg(log)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the HTTP test server");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let url = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
        .await
        .expect("the server prints its URL")
        .expect("read")
        .expect("a line");
    (child, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_loop_calls_the_tools_of_a_streamable_http_server() {
    let fake = FakeLlm::start().await;
    let temp = tempfile::tempdir().expect("temp dir");
    let log = temp.path().join("server.log");
    let (_server, url) = http_server(&log).await;
    let setup = format!(
        "{{ approvals = {{ write = 'auto', edit = 'auto', command = 'auto', mcp = 'auto' }},
           mcp = {{ servers = {{ remote = {{ url = {url:?}, read_only_tools = {{ 'lookup' }} }} }} }} }}"
    );
    let mut editor = planned_editor(&fake, &setup).await;
    fake.push_routed(
        &code_route(PHASE),
        TurnBuilder::new()
            .tool_use("l1", "remote__lookup", json!({"key": "over http"}))
            .tool_use("r1", "remote__record", json!({"note": "over http"}))
            .tool_use("r2", "remote__record", json!({}))
            .reply(),
    );
    fake.push_routed(&code_route(PHASE), complete_phase_turn("used the tools"));

    let code_id = run_code_loop(&mut editor, PHASE).await;
    editor.wait_status(&code_id, "complete").await;

    let requests = requests_routed(&fake, &code_route(PHASE));
    let results = tool_results(&requests[1]);
    assert_eq!(result_text(&results[0]), "value of over http\n");
    assert_eq!(result_text(&results[1]), "recorded over http\n");
    assert_eq!(results[2]["is_error"], true, "{}", results[2]);
    let reached: Vec<String> = server_log(&log)
        .into_iter()
        .filter(|line| !line.starts_with("start "))
        .collect();
    assert_eq!(
        reached,
        ["record over http"],
        "approvals.mcp = 'auto' asks nothing"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planning_loops_get_only_the_tools_marked_read_only() {
    let fake = FakeLlm::start().await;
    let temp = tempfile::tempdir().expect("temp dir");
    let log = temp.path().join("server.log");
    let setup = format!(
        "{{ mcp = {{ servers = {{ probe = {{ command = {:?}, args = {{ '--log', {:?} }},
             levels = {{ 'spec', 'code' }}, read_only_tools = {{ 'lookup' }} }} }} }} }}",
        server_binary(),
        log.display().to_string()
    );
    fake.push_routed(
        plan_route(),
        tool_turn("plan", "create_plan", crate::scenario::one_spec_plan()),
    );
    fake.push_routed(
        &spec_route("version-flag"),
        TurnBuilder::new()
            .tool_use("l1", "probe__lookup", json!({"key": "spec"}))
            .reply(),
    );
    fake.push_routed(
        &spec_route("version-flag"),
        tool_turn("spec", "create_spec", spec_input("version-flag", &PHASES)),
    );
    for name in PHASES {
        fake.push_routed(
            &phase_route(name),
            tool_turn(name, "create_phase", phase_input(name)),
        );
    }
    let mut editor = start_editor(&fake, &setup).await;
    plan_and_approve(&mut editor).await;
    wait_all_complete(&mut editor, 5).await;

    let mcp_tools = |request: &Value| -> Vec<String> {
        request["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .filter_map(|tool| tool["name"].as_str())
            .filter(|name| name.starts_with("probe__"))
            .map(str::to_owned)
            .collect()
    };
    let spec_requests = requests_routed(&fake, &spec_route("version-flag"));
    assert_eq!(mcp_tools(&spec_requests[0]), ["probe__lookup"]);
    assert_eq!(
        result_text(&tool_results(&spec_requests[1])[0]),
        "value of spec\n"
    );
    let plan_requests = requests_routed(&fake, plan_route());
    assert!(
        mcp_tools(&plan_requests[0]).is_empty(),
        "plan is not in levels"
    );
    editor.quit().await;
}

/// How long a start of the dead servers below may take.
const START_SECS: u64 = 2;

/// Plans and approves a tree of eleven loops (two specs, the second after the first, of four
/// phases each) with `setup` (a Lua table), and returns the time from the plan's start until
/// every loop completed.
async fn plan_tree_took(setup: &str) -> std::time::Duration {
    let fake = FakeLlm::start().await;
    fake.push_routed(
        plan_route(),
        tool_turn("plan", "create_plan", crate::scenario::valid_plan()),
    );
    push_specs_and_phases(
        &fake,
        &[
            ("version-flag", ["flag-1", "flag-2", "flag-3", "flag-4"]),
            ("version-docs", ["docs-1", "docs-2", "docs-3", "docs-4"]),
        ],
    );
    let mut editor = start_editor(&fake, setup).await;
    let started = std::time::Instant::now();
    plan_and_approve(&mut editor).await;
    wait_all_complete(&mut editor, 11).await;
    let took = started.elapsed();
    editor.quit().await;
    took
}

/// A server that exits at once, or one that never answers the handshake, configured for
/// every planning level: the first loop that asks waits for one bounded start at most, and
/// every later one is told at once that the server is down, while it is tried again in the
/// background. The tree takes about as long as without the server, give or take one start
/// (it once took a minute more, every loop waiting out the restart delay behind the server's
/// lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_mcp_server_costs_a_plan_tree_nothing() {
    let without = plan_tree_took("{}").await;
    // What a start of each may cost the first loop that asks, besides the slack.
    for (how, server, start) in [
        ("exits at once", "command = 'false'", 0),
        (
            "never answers",
            "command = 'sleep', args = { '600' }",
            START_SECS,
        ),
    ] {
        let took = plan_tree_took(&format!(
            "{{ mcp = {{ servers = {{ dead = {{ {server}, levels = {{ 'plan', 'spec', 'phase' }},
                 timeout_secs = {START_SECS} }} }} }} }}"
        ))
        .await;
        let bound = without * 2 + std::time::Duration::from_secs(start + 2);
        assert!(
            took < bound,
            "with a server that {how} the tree took {took:?}, without one {without:?}"
        );
    }
}

/// A token in an MCP server's `env`: the server gets it, nothing of Loopr's keeps it.
const TOKEN: &str = "mcp-token-5d1f0c7e-never-store-me";

/// A whole `setup()` table (review passes off, changes approved): the test server as `probe`
/// for every level, `lookup` read-only, logging to `log` what `PROBE_TOKEN` it was given,
/// which `env` sets to `token` if there is one.
fn token_setup(log: &std::path::Path, token: Option<&str>) -> String {
    let env = token
        .map(|token| format!("env = {{ PROBE_TOKEN = {token:?} }},"))
        .unwrap_or_default();
    format!(
        "{{ plan_review_passes = 0, spec_review = false,
           approvals = {{ write = 'auto', edit = 'auto', command = 'auto' }},
           mcp = {{ servers = {{ probe = {{ command = {:?},
             args = {{ '--log', {:?}, '--log-env', 'PROBE_TOKEN' }}, {env}
             levels = {{ 'plan', 'spec', 'phase', 'code' }}, read_only_tools = {{ 'lookup' }} }} }} }} }}",
        server_binary(),
        log.display().to_string(),
    )
}

/// Quits `editor` and waits until its host has exited, so its database is as it left it.
async fn quit_host(editor: TestNvim) -> crate::nvim::TestDirs {
    let host: i32 = editor.lua("return require('loopr.host').pid()").await;
    let dirs = editor.quit().await;
    crate::nvim::wait_for_exit(host).await;
    dirs
}

fn assert_stored_nowhere(dirs: &crate::nvim::TestDirs) {
    assert_eq!(
        files_containing(dirs.temp.path(), TOKEN),
        Vec::<std::path::PathBuf>::new(),
        "no byte of the token in $LOOPR_HOME (loopr.db and its log included), the host's log \
         or the project"
    );
}

/// A plan tree and a code loop whose MCP server's `env` holds a token: the server is given
/// it, but no loop record (they once kept every setting, `env` values included), no other
/// state file and no log holds it once the host is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_env_values_reach_the_server_and_nothing_that_is_stored() {
    let fake = FakeLlm::start().await;
    let temp = tempfile::tempdir().expect("temp dir");
    let log = temp.path().join("server.log");
    let mut editor = planned_editor(&fake, &token_setup(&log, Some(TOKEN))).await;
    fake.push_routed(
        &code_route(PHASE),
        TurnBuilder::new()
            .tool_use("l1", "probe__lookup", json!({"key": "token"}))
            .reply(),
    );
    fake.push_routed(&code_route(PHASE), complete_phase_turn("looked it up"));
    let code_id = run_code_loop(&mut editor, PHASE).await;
    editor.wait_status(&code_id, "complete").await;

    let results = tool_results(&requests_routed(&fake, &code_route(PHASE))[1]);
    assert_eq!(result_text(&results[0]), "value of token\n");
    assert!(
        server_log(&log).contains(&format!("env PROBE_TOKEN={TOKEN}")),
        "{:?}",
        server_log(&log)
    );
    let dirs = quit_host(editor).await;
    assert_stored_nowhere(&dirs);
}

/// Plans `task` with a first turn that never ends, and quits once the model was asked: the
/// plan is left running, for the next editor to resume. Returns its id.
async fn plan_cut_off(fake: &FakeLlm, editor: &mut TestNvim, task: &str) -> String {
    let asked = fake.requests().len();
    fake.push_routed(task, crate::scenario::stalled_turn("Let me look"));
    // Not the id `plan` returns: an earlier loop's `running` event may still be unread.
    editor.plan(task).await;
    tokio::time::timeout(crate::nvim::WAIT, fake.wait_for_requests(asked + 1))
        .await
        .expect("the model was asked");
    let records = editor.status_records().await;
    let planned = records
        .iter()
        .find(|record| record["task"] == task)
        .expect("the plan is recorded");
    planned["id"].as_str().expect("id").to_owned()
}

/// Starts an editor on `dirs` with `setup`, which resumes the cut-off plan `task`: its turn
/// calls `probe__lookup`, then plans. Returns the editor once the plan waits for approval,
/// and what the lookup answered.
async fn resume_looking_up(
    fake: &FakeLlm,
    dirs: crate::nvim::TestDirs,
    setup: &str,
    task: &str,
    plan_id: &str,
) -> (TestNvim, Value) {
    let lookup = TurnBuilder::new()
        .tool_use("l1", "probe__lookup", json!({"key": "resumed"}))
        .reply();
    // Held until the new editor listens for events.
    let (lookup, release) = lookup.held();
    fake.push_routed(task, lookup);
    fake.push_routed(
        task,
        tool_turn("plan", "create_plan", crate::scenario::valid_plan()),
    );
    let mut editor = start_editor_in(dirs, fake, setup).await;
    release.notify_one();
    editor.wait_status(plan_id, "awaiting_approval").await;
    let requests = requests_routed(fake, task);
    let result = tool_results(requests.last().expect("the plan's last request"))[0].clone();
    (editor, result)
}

/// A loop resumed by a new host takes its server's `env` from the settings of now: with the
/// token there, the server gets it; without, the server's tools fail with why, and the loop
/// goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_loop_takes_mcp_env_values_from_the_current_settings() {
    let fake = FakeLlm::start().await;
    let temp = tempfile::tempdir().expect("temp dir");
    let log = temp.path().join("server.log");
    let with_token = token_setup(&log, Some(TOKEN));

    let mut editor = start_editor_in(crate::nvim::TestDirs::new(), &fake, &with_token).await;
    let second = plan_cut_off(&fake, &mut editor, "Second change").await;
    let dirs = quit_host(editor).await;
    assert_stored_nowhere(&dirs);
    let starts_before = server_log(&log).len();
    let (mut editor, result) =
        resume_looking_up(&fake, dirs, &with_token, "Second change", &second).await;
    assert_eq!(result_text(&result), "value of resumed\n", "{result}");
    assert!(
        server_log(&log)[starts_before..].contains(&format!("env PROBE_TOKEN={TOKEN}")),
        "the resumed loop's server got the token: {:?}",
        server_log(&log)
    );

    // The token is gone from the settings: the server's tools say why they cannot be used.
    let third = plan_cut_off(&fake, &mut editor, "Third change").await;
    let dirs = quit_host(editor).await;
    let (editor, result) = resume_looking_up(
        &fake,
        dirs,
        &token_setup(&log, None),
        "Third change",
        &third,
    )
    .await;
    assert_eq!(result["is_error"], true, "{result}");
    assert!(
        result_text(&result).contains("PROBE_TOKEN")
            && result_text(&result).contains("mcp.servers.probe.env"),
        "{result}"
    );
    let dirs = quit_host(editor).await;
    assert_stored_nowhere(&dirs);
}
