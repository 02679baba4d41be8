//! A code loop's validation as the user meets it: the quickfix list jumps to the places the
//! common runners name when 'errorformat' does not know the tool, and the phase's own
//! command runs in the sandbox without asking unless the user wants to approve it.

use serde_json::{Value, json};

use super::code::{accept, planned_editor};
use crate::fake_llm::FakeLlm;
use crate::nvim::TestNvim;
use crate::scenario::{AUTO_APPROVE, code_route, complete_phase_turn, run_code_loop};

/// The current quickfix list: its title, its valid entries and the text of the others.
async fn quickfix(editor: &TestNvim) -> Value {
    editor
        .lua(
            "local list = vim.fn.getqflist({ title = 1, items = 1 })
             local places, text = {}, {}
             for _, item in ipairs(list.items) do
               if item.valid == 1 then
                 table.insert(places, { file = vim.api.nvim_buf_get_name(item.bufnr), lnum = item.lnum, col = item.col, text = item.text })
               else
                 table.insert(text, item.text)
               end
             end
             return { title = list.title, places = places, text = text }",
        )
        .await
}

/// `cargo test`'s panic, which Neovim's 'errorformat' reads as a file named "thread 'adds'
/// … panicked at src/main.rs": the list still jumps to src/main.rs:2:5. A place in a file
/// that does not exist, or outside the project, is no entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_errorformat_does_not_know_still_gives_places_to_jump_to() {
    let fake = FakeLlm::start().await;
    // Fails once, as `cargo test` does, then passes.
    let validation = "[ -e .validated ] || { touch .validated; \
        printf '%s\\n' \"thread 'adds' (4242) panicked at src/main.rs:2:5:\" \
        'assertion `left == right` failed' ' --> src/gone.rs:1:1' \
        '    at Object.<anonymous> (/etc/hostname:1:1)'; exit 101; }";
    let mut editor = planned_editor(&fake, AUTO_APPROVE, validation).await;
    for _ in 0..2 {
        fake.push_routed(&code_route("print-version"), complete_phase_turn("done"));
    }
    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor
        .wait_event("LooprValidation", |data| data["passed"] == false)
        .await;

    let list = quickfix(&editor).await;
    assert_eq!(list["title"], "Loopr: print-version validation");
    let project = editor.dirs.project.display().to_string();
    assert_eq!(
        list["places"],
        json!([{"file": format!("{project}/src/main.rs"), "lnum": 2, "col": 5,
                "text": "assertion `left == right` failed"}]),
        "{list}"
    );
    assert!(
        list["text"]
            .as_array()
            .expect("text")
            .iter()
            .any(|line| line
                .as_str()
                .is_some_and(|line| line.contains("panicked at"))),
        "the output is still in the list: {list}"
    );
    // What the user gets from :cfirst: the file, at the line and column of the panic.
    assert_eq!(editor.command("cfirst").await, None);
    let at: Value = editor
        .lua("return { vim.api.nvim_buf_get_name(0), vim.api.nvim_win_get_cursor(0) }")
        .await;
    assert_eq!(at, json!([format!("{project}/src/main.rs"), [2, 4]]));
    editor.wait_status(&code_id, "complete").await;
    editor.quit().await;
}

/// The phase's validation command runs in the sandbox: by default it is not asked about,
/// even with every other command asked about.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_phases_validation_runs_in_the_sandbox_without_asking() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, "{}", "true").await;
    fake.push_routed(&code_route("print-version"), complete_phase_turn("done"));
    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code_id, "complete").await;
    let asked: Vec<&Value> = editor
        .events_seen()
        .iter()
        .filter(|(name, _)| name == "LooprApprovalRequested")
        .map(|(_, data)| data)
        .collect();
    assert!(asked.is_empty(), "nothing was asked: {asked:?}");
    editor.quit().await;
}

/// With `approve_validation`, the validation is asked about; rejecting it pauses the loop
/// (it does not fail) and the message names both ways on; `:LooprRetry` asks again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejecting_the_validation_pauses_the_loop_and_says_how_to_go_on() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, "{ approve_validation = true }", "true").await;
    for _ in 0..2 {
        fake.push_routed(&code_route("print-version"), complete_phase_turn("done"));
    }
    let code_id = run_code_loop(&mut editor, "print-version").await;
    let asked = editor
        .wait_event("LooprApprovalRequested", |data| data["kind"] == "command")
        .await;
    assert_eq!(asked["subject"], "true");
    editor
        .exec(&format!(
            "require('loopr.approvals').answer({}, 'reject', 'not yet')",
            asked["id"]
        ))
        .await;
    let notice = editor.wait_notice("paused").await;
    let expected = format!(
        "Loopr: print-version paused: its validation command `true` was rejected (\"not yet\"); \
         :LooprRetry {code_id} runs it again; to change the command, :LooprRevise {{feedback}} \
         in the phase's phase.md"
    );
    assert_eq!(notice["message"], expected.as_str());
    editor.wait_status(&code_id, "cancelled").await;
    let records = editor.status_records().await;
    let record = records
        .iter()
        .find(|record| record["id"] == code_id.as_str())
        .expect("the code loop");
    assert_eq!(
        (record["status"].clone(), record["retryable"].clone()),
        (json!("cancelled"), json!(true)),
        "stopped, not failed, and retryable: {record}"
    );
    let messages: String = editor.lua("return vim.fn.execute('messages')").await;
    assert!(messages.contains(&expected), "{messages}");
    assert!(
        !messages.contains(&format!("{code_id} failed")),
        "nothing says it failed: {messages}"
    );

    assert_eq!(editor.command(&format!("LooprRetry {code_id}")).await, None);
    let asked_again = editor
        .wait_event("LooprApprovalRequested", |data| {
            data["kind"] == "command" && data["id"] != asked["id"]
        })
        .await;
    accept(&editor, &asked_again).await;
    editor.wait_status(&code_id, "complete").await;
    editor.quit().await;
}
