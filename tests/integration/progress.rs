//! Progress in Neovim: a slow model's turn shows as an answer growing, a few times, never once
//! per token; a review pass is named while the model answers it; when a tree's work stops,
//! the line says what is ready and what to run next.

use serde_json::json;

use crate::fake_llm::{FakeLlm, TurnBuilder};
use crate::scenario::{
    ONE_SPEC_PHASES, SLOW_WORDS, answer_token_counts, create_plan_turn, push_one_spec_hierarchy,
    slow_plan_turn, start_editor, tool_turn, valid_plan, wait_all_complete,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_answer_shows_its_tokens_growing_in_the_progress_line() {
    let fake = FakeLlm::start().await;
    fake.push(slow_plan_turn());
    let mut editor = start_editor(&fake, "{ plan_review_passes = 0 }").await;
    let loop_id = editor.plan("Add a --version flag").await;

    let first = editor
        .wait_event("LooprProgress", |data| data["tokens"].as_u64().is_some())
        .await;
    // While the answer streams, the statusline's text says how far it has come.
    let line: String = editor.lua("return require('loopr.progress').get()").await;
    assert!(
        line.starts_with("Loopr: model is answering… ~") && line.ends_with(" so far"),
        "{line}"
    );
    editor.wait_status(&loop_id, "awaiting_approval").await;

    let mut reports = vec![first];
    reports.extend(
        editor
            .events_seen()
            .iter()
            .filter(|(pattern, data)| pattern == "LooprProgress" && !data["tokens"].is_null())
            .map(|(_, data)| data.clone()),
    );
    let tokens: Vec<u64> = reports
        .iter()
        .filter_map(|data| data["tokens"].as_u64())
        .collect();
    assert!(tokens.len() >= 3, "{reports:#?}");
    assert!(
        tokens.len() < SLOW_WORDS / 3,
        "a few reports, not one per piece: {reports:#?}"
    );
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "growing: {tokens:?}"
    );
    let messages: Vec<&str> = reports
        .iter()
        .filter_map(|data| data["message"].as_str())
        .collect();
    assert_eq!(
        answer_token_counts(messages.iter().copied()),
        tokens,
        "{messages:#?}"
    );
    assert!(
        messages
            .iter()
            .any(|message| message.starts_with("model is writing a create_plan call… ~")),
        "the call's input counts too: {messages:#?}"
    );
    editor.quit().await;
}

/// During a plan's review passes the progress line says which pass the model is answering,
/// in the words the command line uses ("review pass 1/2 (completeness)"), not only a turn
/// count that could be any stage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_pass_shows_in_the_progress_line_while_the_model_answers_it() {
    let fake = FakeLlm::start().await;
    fake.push(create_plan_turn("toolu_plan", valid_plan()));
    let (review, release) = TurnBuilder::new()
        .text_deltas(["Checking that every part ", "of the request is covered."])
        .tool_use(
            "toolu_review",
            "review_plan",
            json!({"verdict": "approve", "issues": []}),
        )
        .usage(400, 60)
        .paused_after("Checking that every part ");
    fake.push(review);
    let mut editor = start_editor(&fake, "{ plan_review_passes = 2 }").await;
    editor.plan("Add a --version flag").await;

    let second_turn = editor
        .wait_event("LooprProgress", |data| {
            data["message"]
                .as_str()
                .is_some_and(|message| message.contains("waiting for the model (turn 2/"))
        })
        .await;
    assert_eq!(
        second_turn["message"]
            .as_str()
            .and_then(|message| message.split(": ").next()),
        Some("review pass 1/2 (completeness)"),
        "{second_turn}"
    );
    // The review's answer streams in and stops there: what the statusline shows now.
    editor.forget_seen();
    editor
        .wait_event("LooprProgress", |data| data["tokens"].as_u64().is_some())
        .await;
    let line: String = editor.lua("return require('loopr.progress').get()").await;
    assert!(
        line.starts_with("Loopr: review pass 1/2 (completeness): model is answering… ~"),
        "{line}"
    );
    release.notify_one();
    editor.quit().await;
}

/// When every loop of a tree has stopped, the progress line says what is ready and the
/// command to go on with, on the command line and in statuslines: nothing still says what a
/// loop that finished was doing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_a_tree_stops_the_progress_line_says_what_is_ready_and_what_to_run() {
    let fake = FakeLlm::start().await;
    push_one_spec_hierarchy(&fake, |_| None, tool_turn);
    let mut editor = start_editor(&fake, "{ plan_review_passes = 0, spec_review = false }").await;
    editor.attach_ui(120, 20).await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "awaiting_approval").await;
    let review = editor.wait_event("LooprReady", |_| true).await;
    assert_eq!(
        review["message"],
        "Loopr: plan \"Add a --version flag\": plan ready for review; :LooprApprove, :LooprRevise {feedback}"
    );
    let line: String = editor.lua("return require('loopr.progress').get()").await;
    assert_eq!(Some(line.as_str()), review["message"].as_str());

    assert_eq!(
        editor.command(&format!("LooprApprove {plan_id}")).await,
        None
    );
    wait_all_complete(&mut editor, 2 + ONE_SPEC_PHASES.len()).await;
    let ready = editor.wait_event("LooprReady", |_| true).await;
    let expected =
        "Loopr: plan \"Add a --version flag\": 3 phases ready; :LooprTasks, :LooprRun {phase}";
    assert_eq!(ready["message"], expected);
    let line: String = editor.lua("return require('loopr.progress').get()").await;
    assert_eq!(line, expected);
    // The command line, as drawn: the last row of the screen.
    let command_line: String = editor
        .lua("vim.cmd.redraw() local row = {} for col = 1, vim.o.columns do row[#row + 1] = vim.fn.screenstring(vim.o.lines, col) end return vim.trim(table.concat(row))")
        .await;
    assert_eq!(command_line, expected);
    editor.quit().await;
}
