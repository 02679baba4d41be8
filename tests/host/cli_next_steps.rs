//! The command line words the core's next steps in its own terms: each error or notice whose
//! fix is a command or a setting names the CLI's subcommand, flag or `--settings` key, never
//! a Neovim command or `setup()`.

use crate::{fake_llm, nvim, scenario};

use serde_json::json;

use fake_llm::{FakeLlm, TurnBuilder};
use nvim::TestDirs;
use scenario::{plan_killed_at_request, run_loopr, tool_turn, valid_plan};

/// What `loopr <args>` printed, stdout then stderr.
async fn printed(dirs: &TestDirs, fake: &FakeLlm, args: &[&str]) -> String {
    let output = run_loopr(dirs, fake, args).await;
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `printed` holds the command line's `next_step` and nothing of Neovim's words, nor a hint
/// left unworded (its separator shows as `^_` on a terminal).
fn assert_words_of_the_command_line(printed: &str, next_step: &str) {
    assert!(printed.contains(next_step), "{next_step:?} in:\n{printed}");
    for foreign in [":Loopr", "setup(", "^_", "\u{1f}"] {
        assert!(!printed.contains(foreign), "{foreign:?} in:\n{printed}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_at_its_budget_says_what_can_let_it_go_on() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    // 400 tokens spent by the first answer, over the budget of 100.
    fake.push(tool_turn("l1", "list_files", json!({})));
    let settings = r#"{"plan_review_passes": 0, "budget": {"tokens": 100}}"#;
    let printed = printed(
        &dirs,
        &fake,
        &["plan", "Add a --version flag", "--settings", settings],
    )
    .await;
    assert_eq!(fake.requests().len(), 1, "{printed}");
    assert!(
        printed.contains("reached its budget (400 of 100 tokens)"),
        "{printed}"
    );
    // Said as the loop pauses, in the warning, and in the table's error column.
    assert_eq!(
        printed
            .matches("the command line cannot let a tree past its budget")
            .count(),
        3,
        "{printed}"
    );
    assert_words_of_the_command_line(&printed, "a larger budget in --settings for a new plan");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_at_its_turn_limit_names_the_commands_that_start_it_again() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    for _ in 0..2 {
        fake.push(TurnBuilder::new().text("Let me think first.").reply());
    }
    let settings = r#"{"plan_review_passes": 0, "max_turns": 2}"#;
    let printed = printed(
        &dirs,
        &fake,
        &["plan", "Add a --version flag", "--settings", settings],
    )
    .await;
    assert!(printed.contains("(the turn limit)"), "{printed}");
    assert_words_of_the_command_line(
        &printed,
        "raise max_turns or make the task more specific; `loopr plan` or `loopr run <phase>` \
         starts it again",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_model_is_named_as_a_settings_key() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    let printed = printed(
        &dirs,
        &fake,
        &[
            "plan",
            "Add a --version flag",
            "--settings",
            r#"{"provider": "ollama"}"#,
        ],
    )
    .await;
    assert!(fake.requests().is_empty(), "{printed}");
    assert!(
        printed.contains("provider ollama needs a model"),
        "{printed}"
    );
    assert_words_of_the_command_line(&printed, r#"e.g. --settings '{"model":"qwen3:8b"}'"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_resumed_without_its_env_is_named_as_a_settings_key() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    let server = |env: serde_json::Value| {
        json!({
            "plan_review_passes": 0,
            "mcp": {"servers": {"probe": {
                "command": "/nonexistent/mcp-server",
                "env": env,
                "levels": ["plan"]
            }}}
        })
        .to_string()
    };
    fake.push(scenario::stalled_turn("Let me look."));
    let with_env = server(json!({"PROBE_TOKEN": "t"}));
    plan_killed_at_request(&dirs, &fake, "Add a --version flag", &with_env, 1).await;

    fake.push(tool_turn("plan", "create_plan", valid_plan()));
    let printed = printed(&dirs, &fake, &["resume", "--settings", &server(json!({}))]).await;
    assert!(
        printed.contains("MCP server probe needs PROBE_TOKEN in its env"),
        "{printed}"
    );
    assert_words_of_the_command_line(&printed, "set mcp.servers.probe.env in --settings");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_that_cannot_start_is_reported_without_an_editor_command() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    fake.push(tool_turn("plan", "create_plan", valid_plan()));
    let settings = json!({
        "plan_review_passes": 0,
        "mcp": {"servers": {"probe": {
            "command": "/nonexistent/mcp-server",
            "levels": ["plan"]
        }}}
    })
    .to_string();
    let printed = printed(
        &dirs,
        &fake,
        &["plan", "Add a --version flag", "--settings", &settings],
    )
    .await;
    assert_words_of_the_command_line(&printed, "its tools are not offered to this loop");
}
