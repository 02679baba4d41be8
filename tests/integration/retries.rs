use serde_json::json;

use crate::fake_llm::{
    FakeLlm, TurnBuilder, error_reply, mid_stream_error, overloaded, rate_limited,
};
use crate::scenario::{create_plan_turn, stalled_turn, start_editor, valid_plan};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overloaded_529_and_rate_limited_429_are_retried() {
    let fake = FakeLlm::start().await;
    fake.push(overloaded());
    fake.push(rate_limited(1));
    fake.push(create_plan_turn("toolu_plan", valid_plan()));
    let mut editor = start_editor(&fake, "{ max_retries = 2 }").await;

    let loop_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&loop_id, "awaiting_approval").await;

    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "two retries, then success");
    assert_eq!(
        requests[0].body, requests[2].body,
        "a retry resends the same turn"
    );
    let retry_messages = editor.progress_messages("retrying");
    assert_eq!(retry_messages.len(), 2, "{retry_messages:?}");
    assert!(
        retry_messages[0].contains("HTTP 529 overloaded_error"),
        "{retry_messages:?}"
    );
    assert!(
        retry_messages[1].contains("HTTP 429 rate_limit_error")
            && retry_messages[1].contains("retrying in 1.0s"),
        "the server's retry-after is honoured: {retry_messages:?}"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mid_stream_error_discards_the_partial_turn_and_retries_it() {
    let fake = FakeLlm::start().await;
    let partial: Vec<_> = TurnBuilder::new()
        .text("Half of an answer that must be thrown away")
        .tool_use("toolu_lost", "list_files", json!({}))
        .events()
        .into_iter()
        .take(6)
        .collect();
    fake.push(mid_stream_error(partial, "overloaded_error", "Overloaded"));
    fake.push(create_plan_turn("toolu_plan", valid_plan()));
    let mut editor = start_editor(&fake, "{}").await;

    let loop_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&loop_id, "awaiting_approval").await;

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].body, requests[1].body,
        "nothing of the broken turn was kept"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_stream_times_out_and_is_retried() {
    let fake = FakeLlm::start().await;
    fake.push(stalled_turn("I'll start"));
    fake.push(create_plan_turn("toolu_plan", valid_plan()));
    let mut editor = start_editor(&fake, "{ stream_idle_timeout_ms = 400 }").await;

    let loop_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&loop_id, "awaiting_approval").await;

    assert_eq!(fake.requests().len(), 2);
    fake.wait_for_disconnect().await;
    assert_eq!(
        editor.progress_messages("stream stalled for 0.4s").len(),
        1,
        "{:#?}",
        editor.events_seen()
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_retries_and_client_errors_fail_the_loop_with_the_api_message() {
    let fake = FakeLlm::start().await;
    fake.push(overloaded());
    fake.push(overloaded());
    fake.push(error_reply(
        400,
        "invalid_request_error",
        "max_tokens: too large",
    ));
    let mut editor = start_editor(&fake, "{ max_retries = 1 }").await;

    let first = editor.plan("Add a --version flag").await;
    editor.wait_status(&first, "failed").await;
    assert_eq!(fake.requests().len(), 2, "one retry, as configured");

    let second = editor.plan("Add a --version flag").await;
    editor.wait_status(&second, "failed").await;
    assert_eq!(fake.requests().len(), 3, "a 400 is not retried");

    let records = editor.status_records().await;
    let error_of = |id: &str| {
        records
            .iter()
            .find(|record| record["id"] == id)
            .and_then(|record| record["error"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let exhausted = error_of(&first);
    assert!(
        exhausted.contains("HTTP 529 overloaded_error") && exhausted.contains("after 2 attempts"),
        "{exhausted}"
    );
    let rejected = error_of(&second);
    assert!(
        rejected.contains("HTTP 400 invalid_request_error")
            && rejected.contains("max_tokens: too large"),
        "{rejected}"
    );
    let messages: String = editor.lua("return vim.fn.execute('messages')").await;
    assert!(
        messages.contains("max_tokens: too large"),
        "the failure is shown to the user: {messages}"
    );
    editor.quit().await;
}
