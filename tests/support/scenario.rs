//! Building blocks shared by the end-to-end tests: a started editor against a fake server, and
//! the model turns a typical planning conversation consists of.
#![allow(dead_code)]

use serde_json::{Value, json};

use crate::fake_anthropic::{FakeAnthropic, Reply, TurnBuilder};
use crate::nvim::{StartOptions, TestDirs, TestNvim};

/// An editor against `fake`. Review passes are off unless `setup` (a Lua table) turns them
/// on, so a test scripts only the turns it is about.
pub async fn start_editor(fake: &FakeAnthropic, setup: &str) -> TestNvim {
    TestNvim::start(
        TestDirs::new(),
        StartOptions {
            base_url: fake.base_url(),
            setup: format!(
                "vim.tbl_extend('force', {{ plan_review_passes = 0, spec_review = false }}, {setup})"
            ),
            extra_env: Vec::new(),
        },
    )
    .await
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

/// A spec of the two-spec hierarchy, with `phases` phases named `<prefix>-1`, `<prefix>-2`, ...
pub fn spec_input(name: &str, phase_names: &[&str]) -> Value {
    let phases: Vec<Value> = phase_names
        .iter()
        .map(|phase| {
            json!({
                "name": phase,
                "title": format!("Phase {phase}"),
                "description": format!("Do the {phase} part of {name}, keeping the existing behaviour intact and covering it with a test."),
                "files": ["src/main.rs"],
                "validation": "cargo test"
            })
        })
        .collect();
    json!({
        "name": name,
        "title": format!("Spec {name}"),
        "overview": format!("The {name} spec changes the CLI entry point in src/main.rs so that the new flag is recognised before any other argument, prints the version taken from Cargo.toml and exits successfully, with tests that pin the behaviour down."),
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
            {"description": "Match --version before other arguments and print the version", "file": "src/main.rs", "action": "modify"},
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

pub fn tool_turn(id: &str, tool: &str, input: Value) -> Reply {
    TurnBuilder::new()
        .tool_use(id, tool, input)
        .usage(300, 100)
        .reply()
}

/// Every file under `dir` whose name ends with `suffix`, sorted.
pub fn files_ending_with(dir: &std::path::Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                stack.push(path);
            } else if path.to_string_lossy().ends_with(suffix) {
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
    fake: &FakeAnthropic,
    args: &[&str],
) -> std::process::Output {
    loopr_command(dirs, fake, args)
        .output()
        .await
        .expect("run loopr")
}

/// The `loopr <args>` command `run_loopr` runs, to adjust before spawning it.
pub fn loopr_command(
    dirs: &crate::nvim::TestDirs,
    fake: &FakeAnthropic,
    args: &[&str],
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_loopr"));
    command
        .args(args)
        .current_dir(&dirs.project)
        .env_clear()
        .env("HOME", &dirs.home)
        .env("LOOPR_HOME", &dirs.loopr_home)
        .env("ANTHROPIC_API_KEY", crate::nvim::API_KEY)
        .env("ANTHROPIC_BASE_URL", fake.base_url())
        .kill_on_drop(true);
    command
}
