use std::path::PathBuf;

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, TurnBuilder};
use crate::nvim::API_KEY;
use crate::scenario::{create_plan_turn, list_files_turn, start_editor, tool_results, valid_plan};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_explores_the_project_then_opens_plan_md_in_a_split() {
    let fake = FakeLlm::start().await;
    fake.push(list_files_turn());
    fake.push(
        TurnBuilder::new()
            .tool_use("toolu_read", "read_file", json!({"path": "src/main.rs"}))
            .usage(700, 30)
            .reply(),
    );
    fake.push(create_plan_turn("toolu_plan", valid_plan()));
    let mut editor = start_editor(&fake, "{ layout = 'vsplit' }").await;
    let before = editor.dirs.snapshot();

    let loop_id = editor.plan("Add a --version flag to the CLI").await;
    let created = editor
        .wait_event("LooprArtifactCreated", |data| data["kind"] == "plan")
        .await;
    editor.wait_status(&loop_id, "awaiting_approval").await;

    // The event names the loop, the iteration and the rendered markdown.
    assert_eq!(created["loop_id"], loop_id.as_str());
    assert_eq!(created["iteration"], 1);
    let markdown_path = PathBuf::from(created["path"].as_str().expect("path"));
    assert!(markdown_path.ends_with(format!("loops/{loop_id}/iterations/001/artifacts/plan.md")));
    assert!(markdown_path.starts_with(&editor.dirs.loopr_home));
    let markdown = std::fs::read_to_string(&markdown_path).expect("plan.md");
    assert!(
        markdown.starts_with("# Plan: Add a --version flag"),
        "{markdown}"
    );
    assert!(
        markdown.contains("### Spec 2: Document --version"),
        "{markdown}"
    );

    // plan.json holds the structured specs, and `current` points at the iteration.
    let json_path = markdown_path.with_file_name("plan.json");
    let stored: Value =
        serde_json::from_slice(&std::fs::read(&json_path).expect("plan.json")).expect("json");
    assert_eq!(stored["specs"], valid_plan()["specs"]);
    let loop_dir = markdown_path
        .ancestors()
        .nth(4)
        .expect("loop dir")
        .to_path_buf();
    assert_eq!(
        std::fs::read_link(loop_dir.join("current")).expect("current"),
        PathBuf::from("iterations/001")
    );

    // plan.md is open in a vertical split as a normal markdown file buffer.
    let window: Value = editor
        .lua(
            "local wins = vim.api.nvim_tabpage_list_wins(0)
             local buf = vim.api.nvim_get_current_buf()
             return { wins = #wins, name = vim.api.nvim_buf_get_name(buf), ft = vim.bo[buf].filetype,
                      buftype = vim.bo[buf].buftype, listed = vim.bo[buf].buflisted,
                      layout = vim.fn.winlayout()[1] }",
        )
        .await;
    assert_eq!(window["wins"], 2, "{window}");
    assert_eq!(window["name"], markdown_path.to_string_lossy().as_ref());
    assert_eq!(window["ft"], "markdown");
    assert_eq!(window["buftype"], "");
    assert_eq!(window["listed"], true);
    assert_eq!(
        window["layout"], "row",
        "vsplit puts the windows side by side"
    );

    // The model saw real tool results, answered by tool_use id, with .gitignore honoured.
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].header("x-api-key"), Some(API_KEY));
    assert_eq!(requests[0].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(requests[0].body["stream"], true);
    let tool_names: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert_eq!(
        tool_names,
        vec!["read_file", "list_files", "grep", "create_plan"]
    );
    let listing = &tool_results(&requests[1].body)[0];
    assert_eq!(listing["tool_use_id"], "toolu_list");
    let listing_text = listing["content"].as_str().expect("text");
    assert!(
        listing_text.contains("src/main.rs") && listing_text.contains(".gitignore"),
        "{listing_text}"
    );
    assert!(
        !listing_text.contains("junk.txt"),
        "ignored files stay hidden: {listing_text}"
    );
    let read = &tool_results(&requests[2].body)[0];
    assert_eq!(read["tool_use_id"], "toolu_read");
    assert!(
        read["content"]
            .as_str()
            .expect("text")
            .contains("1\tfn main() {"),
        "{read}"
    );
    assert!(read.get("is_error").is_none());

    // :LooprStatus lists the loop with its tokens.
    assert_eq!(editor.command("LooprStatus").await, None);
    let status: String = editor
        .lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
        .await;
    let row = status
        .lines()
        .find(|line| line.contains(&loop_id))
        .unwrap_or_else(|| panic!("{status}"));
    assert!(
        row.contains("plan") && row.contains("awaiting_approval"),
        "{row}"
    );
    assert!(
        row.contains("2100") && row.contains("370"),
        "tokens in/out summed over turns: {row}"
    );

    // Only $LOOPR_HOME and the log file changed; the API key is in no log line.
    let after = editor.dirs.snapshot();
    let changed: Vec<&PathBuf> = after
        .iter()
        .filter(|(path, meta)| before.get(*path) != Some(meta))
        .map(|(path, _)| path)
        .collect();
    for path in &changed {
        assert!(
            path.starts_with(&editor.dirs.loopr_home) || **path == editor.dirs.log_file,
            "{} was written outside $LOOPR_HOME",
            path.display()
        );
    }
    let removed: Vec<_> = before
        .keys()
        .filter(|path| !after.contains_key(*path))
        .collect();
    assert!(removed.is_empty(), "{removed:?}");
    let log = editor.log_text();
    assert!(log.contains(&loop_id), "the log records the loop");
    assert!(!log.contains(API_KEY), "the API key leaked into the log");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_create_plan_is_answered_with_is_error_and_the_correction_succeeds() {
    let fake = FakeLlm::start().await;
    let mut broken = valid_plan();
    broken["specs"][1]["dependencies"] = json!(["auth"]);
    fake.push(create_plan_turn("toolu_bad", broken));
    fake.push(create_plan_turn("toolu_good", valid_plan()));
    let mut editor = start_editor(&fake, "{}").await;

    let loop_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&loop_id, "awaiting_approval").await;

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let results = tool_results(&requests[1].body);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["tool_use_id"], "toolu_bad");
    assert_eq!(results[0]["is_error"], true);
    let message = results[0]["content"].as_str().expect("text");
    assert!(message.contains("specs[1].dependencies[0]"), "{message}");
    assert!(
        message.contains("\"auth\" is not a spec of this plan"),
        "{message}"
    );
    assert!(message.contains("call create_plan again"), "{message}");
    // The rejected plan was never stored: only iteration 001, from the corrected call.
    let loop_dir = editor
        .dirs
        .snapshot()
        .into_keys()
        .find(|path| path.ends_with("plan.json"))
        .expect("plan.json");
    let stored: Value =
        serde_json::from_slice(&std::fs::read(&loop_dir).expect("read")).expect("json");
    assert_eq!(stored["specs"][1]["dependencies"], json!(["version-flag"]));
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_errors_go_back_to_the_model_and_truncated_calls_never_run() {
    let fake = FakeLlm::start().await;
    fake.push(
        TurnBuilder::new()
            .tool_use(
                "toolu_escape",
                "read_file",
                json!({"path": "../outside.txt"}),
            )
            .tool_use(
                "toolu_unknown",
                "write_file",
                json!({"path": "x", "content": "y"}),
            )
            .reply(),
    );
    // An answer that used up max_tokens (the default 8192) while writing the call.
    fake.push(
        TurnBuilder::new()
            .truncated_tool_use("toolu_cut", "create_plan", "{\"title\": \"Add a")
            .usage(2_000, 8_192)
            .reply(),
    );
    fake.push(create_plan_turn("toolu_plan", valid_plan()));
    let mut editor = start_editor(&fake, "{}").await;

    let loop_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&loop_id, "awaiting_approval").await;

    let requests = fake.requests();
    let results = tool_results(&requests[1].body);
    assert_eq!(results.len(), 2, "one result per tool_use, in order");
    assert_eq!(results[0]["tool_use_id"], "toolu_escape");
    assert_eq!(results[0]["is_error"], true);
    assert!(
        results[0]["content"]
            .as_str()
            .expect("text")
            .contains("contains '..'"),
        "{}",
        results[0]
    );
    assert_eq!(results[1]["tool_use_id"], "toolu_unknown");
    assert!(
        results[1]["content"]
            .as_str()
            .expect("text")
            .contains("no tool named \"write_file\"")
    );
    assert!(
        !editor.dirs.project.join("x").exists(),
        "nothing was written"
    );

    // The cut-off create_plan was not executed: the model was told, and no tool_result for it.
    let messages = requests[2].body["messages"].as_array().expect("messages");
    let last = messages.last().expect("last");
    assert!(tool_results(&requests[2].body).is_empty(), "{last}");
    let note = last["content"][0]["text"].as_str().expect("note");
    assert!(
        note.contains("hit the max_tokens limit (8192)") && note.contains("create_plan"),
        "{note}"
    );
    let assistant = &messages[messages.len() - 2];
    assert!(
        !assistant["content"]
            .as_array()
            .expect("content")
            .iter()
            .any(|block| block["type"] == "tool_use"),
        "the truncated call is not replayed as a tool_use: {assistant}"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_fails_with_its_reason_at_the_turn_limit() {
    let fake = FakeLlm::start().await;
    fake.push(list_files_turn());
    fake.push(list_files_turn());
    let mut editor = start_editor(&fake, "{ max_turns = 2 }").await;

    let loop_id = editor.plan("Add a --version flag").await;
    let failed = editor.wait_status(&loop_id, "failed").await;
    assert_eq!(failed["type"], "plan");

    let records = editor.status_records().await;
    let error = records[0]["error"].as_str().expect("error");
    assert!(error.contains("after 2 model turns"), "{error}");
    assert_eq!(fake.requests().len(), 2);
    editor.quit().await;
}
