//! Progress while the model answers: a slow model's turn shows in Neovim as an answer growing,
//! a few times, never once per token.

use crate::fake_llm::FakeLlm;
use crate::scenario::{SLOW_WORDS, answer_token_counts, slow_plan_turn, start_editor};

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
