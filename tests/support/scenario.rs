//! Building blocks shared by the end-to-end tests: a started editor against a fake server, and
//! the model turns a typical planning conversation consists of.
#![allow(dead_code)]

use serde_json::{Value, json};

use crate::fake_anthropic::{FakeAnthropic, Reply, TurnBuilder};
use crate::nvim::{StartOptions, TestDirs, TestNvim};

pub async fn start_editor(fake: &FakeAnthropic, setup: &str) -> TestNvim {
    TestNvim::start(
        TestDirs::new(),
        StartOptions {
            base_url: fake.base_url(),
            setup: setup.to_owned(),
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
