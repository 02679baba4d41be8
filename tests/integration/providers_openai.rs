//! The `openai` provider end to end: Neovim with `provider = 'openai'` against a fake server
//! speaking OpenAI's chat completions (`Wire::OpenAi`) through `OPENAI_BASE_URL`, and the
//! client itself against that server's failures.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use loopr::llm::openai::{OpenAiClient, OpenAiConfig};
use loopr::llm::{
    ApiKey, ChatRequest, LlmProvider, Message, ProviderEvent, RetryPolicy, StopReason,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::fake_llm::openai::{dropped_stream, mid_stream_error, overloaded, rate_limited};
use crate::fake_llm::{FakeLlm, TurnBuilder, Wire};
use crate::scenario::{
    AUTO_APPROVE, OPENAI_KEY, code_route, complete_phase_turn, plan_route, push_specs_and_phases,
    requests_routed, run_print_version, start_openai_editor, tool_turn, valid_plan,
    wait_all_complete,
};

const SPECS: [(&str, [&str; 3]); 2] = [
    ("version-flag", ["parse-flag", "print-version", "exit-code"]),
    ("version-docs", ["readme", "changelog", "help-text"]),
];

/// The messages of a request body.
fn messages(body: &Value) -> &Vec<Value> {
    body["messages"].as_array().expect("messages")
}

/// The `tool` messages that follow the assistant message calling `call_id`, up to the next
/// message of another role.
fn results_after_call<'a>(body: &'a Value, call_id: &str) -> Vec<&'a Value> {
    let messages = messages(body);
    let calling = messages
        .iter()
        .position(|message| {
            message["role"] == "assistant"
                && message["tool_calls"]
                    .as_array()
                    .is_some_and(|calls| calls.iter().any(|call| call["id"] == call_id))
        })
        .unwrap_or_else(|| panic!("no assistant message calls {call_id}: {body:#}"));
    messages[calling + 1..]
        .iter()
        .take_while(|message| message["role"] == "tool")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_hierarchy_runs_end_to_end_over_chat_completions() {
    let fake = FakeLlm::start_wire(Wire::OpenAi).await;
    fake.push_routed(
        plan_route(),
        TurnBuilder::new()
            .text("Let me look at the project first.")
            .tool_use("call_list", "list_files", json!({}))
            .usage(500, 40)
            .reply(),
    );
    let mut broken = valid_plan();
    broken["specs"][1]["dependencies"] = json!(["auth"]);
    for (id, plan) in [("call_bad", broken), ("call_good", valid_plan())] {
        fake.push_routed(
            plan_route(),
            TurnBuilder::new()
                .text("Here is the plan.")
                .tool_use(id, "create_plan", plan)
                .usage(900, 300)
                .reply(),
        );
    }
    push_specs_and_phases(&fake, &SPECS);
    let mut editor = start_openai_editor(&fake, "{ layout = 'vsplit' }", Some(OPENAI_KEY)).await;

    let plan_id = editor.plan("Add a --version flag").await;
    let created = editor
        .wait_event("LooprArtifactCreated", |data| data["kind"] == "plan")
        .await;
    editor.wait_status(&plan_id, "awaiting_approval").await;

    // plan.md, from the corrected call, is open in a split.
    let markdown_path = PathBuf::from(created["path"].as_str().expect("path"));
    assert!(markdown_path.ends_with(format!("loops/{plan_id}/iterations/001/artifacts/plan.md")));
    let window: Value = editor
        .lua(
            "return { wins = #vim.api.nvim_tabpage_list_wins(0),
                      name = vim.api.nvim_buf_get_name(0) }",
        )
        .await;
    assert_eq!(window["wins"], 2, "{window}");
    assert_eq!(window["name"], markdown_path.to_string_lossy().as_ref());
    let stored: Value = serde_json::from_slice(
        &std::fs::read(markdown_path.with_file_name("plan.json")).expect("plan.json"),
    )
    .expect("json");
    assert_eq!(stored["specs"][1]["dependencies"], json!(["version-flag"]));

    // The requests, on the wire of chat completions.
    let first = &fake.requests()[0];
    assert_eq!(first.path, "/v1/chat/completions");
    assert_eq!(
        first.header("authorization"),
        Some(format!("Bearer {OPENAI_KEY}").as_str())
    );
    assert_eq!(first.header("x-api-key"), None);
    let plan_bodies = requests_routed(&fake, plan_route());
    assert_eq!(plan_bodies.len(), 3);
    let body = &plan_bodies[0];
    assert_eq!(body["model"], "gpt-test");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert!(
        body["max_tokens"].as_u64().is_some_and(|max| max > 0),
        "{body:#}"
    );
    assert_eq!(messages(body)[0]["role"], "system");
    assert_eq!(messages(body)[1]["role"], "user");
    let tools: Vec<(&str, &str)> = body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|tool| {
            (
                tool["type"].as_str().expect("type"),
                tool["function"]["name"].as_str().expect("name"),
            )
        })
        .collect();
    assert_eq!(
        tools,
        vec![
            ("function", "read_file"),
            ("function", "list_files"),
            ("function", "grep"),
            ("function", "create_plan")
        ]
    );

    // The listing went back as a `tool` message right after the call.
    let listing = results_after_call(&plan_bodies[1], "call_list");
    assert_eq!(listing.len(), 1);
    assert_eq!(listing[0]["tool_call_id"], "call_list");
    let text = listing[0]["content"].as_str().expect("content");
    assert!(
        text.contains("src/main.rs") && !text.contains("junk.txt"),
        "{text}"
    );
    let call = &messages(&plan_bodies[1])
        .iter()
        .find(|message| message["role"] == "assistant")
        .expect("the assistant message")["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(
        call["function"],
        json!({"name": "list_files", "arguments": "{}"})
    );

    // The invalid plan was answered with an error the model could correct.
    let rejection = results_after_call(&plan_bodies[2], "call_bad");
    assert_eq!(rejection.len(), 1);
    assert_eq!(rejection[0]["tool_call_id"], "call_bad");
    let message = rejection[0]["content"].as_str().expect("content");
    assert!(message.starts_with("Error"), "{message}");
    assert!(
        message.contains("\"auth\" is not a spec of this plan"),
        "{message}"
    );
    assert_eq!(
        messages(&plan_bodies[2]).last().expect("a message")["role"],
        "tool",
        "the results end the conversation so far"
    );

    // The usage of every turn was counted.
    let records = editor.status_records().await;
    let plan = records
        .iter()
        .find(|record| record["id"] == plan_id.as_str())
        .expect("the plan's record");
    assert_eq!(
        (plan["tokens_in"].as_u64(), plan["tokens_out"].as_u64()),
        (Some(2300), Some(640))
    );

    // Approving runs the specs and phases; :LooprTasks lists every task.
    assert_eq!(editor.command("LooprApprove").await, None);
    wait_all_complete(&mut editor, 1 + 2 + 6).await;
    assert_eq!(editor.command("LooprTasks").await, None);
    let tasks: i64 = editor.lua("return #vim.fn.getqflist()").await;
    assert_eq!(tasks, 6 * 2);
    assert!(
        fake.requests()
            .iter()
            .all(|request| request.path == "/v1/chat/completions"),
        "every level spoke chat completions"
    );
    assert!(
        !editor.log_text().contains(OPENAI_KEY),
        "the key leaked into the log"
    );
    editor.quit().await;
}

/// llama-cpp-python puts the tools into the prompt only when `tool_choice` is sent, and
/// cannot stream with it: the two settings reach the wire, and the whole answers it then
/// sends make the same plan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_choice_and_whole_answers_reach_a_server_that_cannot_stream_with_tools() {
    let fake = FakeLlm::start_wire(Wire::OpenAi).await;
    fake.push(
        TurnBuilder::new()
            .tool_use("call_list", "list_files", json!({}))
            .usage(500, 40)
            .reply(),
    );
    fake.push(crate::scenario::create_plan_turn("call_plan", valid_plan()));
    let mut editor =
        start_openai_editor(&fake, "{ tool_choice = 'auto', stream = false }", None).await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "awaiting_approval").await;
    let bodies = requests_routed(&fake, plan_route());
    assert_eq!(bodies.len(), 2);
    for body in &bodies {
        assert_eq!(body["stream"], false, "{body:#}");
        assert_eq!(body["tool_choice"], "auto", "{body:#}");
        assert!(body.get("stream_options").is_none(), "{body:#}");
    }
    // The answer that only called a tool goes back with empty text, as the server takes it.
    let calling = &messages(&bodies[1])[2];
    assert_eq!(calling["role"], "assistant");
    assert_eq!(calling["content"], "", "{calling}");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_loop_completes_over_chat_completions_without_a_key() {
    let fake = FakeLlm::start_wire(Wire::OpenAi).await;
    crate::scenario::push_one_spec_hierarchy(&fake, |_| Some("true".to_owned()), tool_turn);
    // Two calls in one turn: the fake interleaves their fragments, as parallel calls stream.
    fake.push_routed(
        &code_route("print-version"),
        TurnBuilder::new()
            .text("Changing the greeting and checking the manifest.")
            .tool_use(
                "call_edit",
                "edit_file",
                json!({"path": "src/main.rs", "old_string": "\"hello\"", "new_string": "\"bye\""}),
            )
            .tool_use("call_read", "read_file", json!({"path": "Cargo.toml"}))
            .reply(),
    );
    fake.push_routed(
        &code_route("print-version"),
        complete_phase_turn("greets differently"),
    );
    let mut editor = start_openai_editor(&fake, AUTO_APPROVE, None).await;
    let main = run_print_version(&mut editor).await;
    assert!(main.contains("\"bye\""), "{main}");
    let code_bodies = requests_routed(&fake, &code_route("print-version"));
    assert_eq!(code_bodies.len(), 2);
    let results = results_after_call(&code_bodies[1], "call_edit");
    let ids: Vec<&str> = results
        .iter()
        .map(|result| result["tool_call_id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, vec!["call_edit", "call_read"], "in call order");
    assert!(
        results[1]["content"]
            .as_str()
            .expect("content")
            .contains("version = \"0.3.1\""),
        "{:#}",
        results[1]
    );
    assert!(
        fake.requests()
            .iter()
            .all(|request| request.header("authorization").is_none()),
        "no key, no Authorization header"
    );
    editor.quit().await;
}

fn client(fake: &FakeLlm, key: &str) -> OpenAiClient {
    OpenAiClient::new(OpenAiConfig {
        base_url: format!("{}/v1", fake.base_url()),
        api_key: Some(ApiKey::new(key.to_owned())),
        tool_choice: None,
        stream: true,
        retry: RetryPolicy {
            max_retries: 2,
            request_timeout: Duration::from_secs(20),
            stream_idle_timeout: Duration::from_secs(10),
        },
    })
    .expect("client")
}

/// One request through `client`; its turn and the reasons of the retries it took.
async fn complete(client: &OpenAiClient) -> (loopr::llm::Turn, Vec<String>) {
    let request = ChatRequest {
        model: "gpt-test".to_owned(),
        max_tokens: 256,
        system: "Answer briefly.".to_owned(),
        messages: loopr::llm::shared(vec![Message::user_text("Say something.")]),
        tools: Vec::new().into(),
    };
    let retries = Mutex::new(Vec::new());
    let record = |event: ProviderEvent| {
        if let ProviderEvent::Retrying { reason, .. } = event {
            retries.lock().expect("retries").push(reason);
        }
    };
    let turn = tokio::time::timeout(
        Duration::from_secs(30),
        client.complete(&request, &record, &CancellationToken::new()),
    )
    .await
    .expect("the request ends")
    .expect("a turn");
    (turn, retries.into_inner().expect("retries"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_retried_and_a_partial_answer_is_thrown_away() {
    let fake = FakeLlm::start_wire(Wire::OpenAi).await;
    let client = client(&fake, OPENAI_KEY);
    let cases = [
        (rate_limited(1), "HTTP 429 requests"),
        (overloaded(), "HTTP 503 server_error"),
        (
            mid_stream_error("half an answer", "server_error", "the model crashed"),
            "server_error mid-stream",
        ),
        (
            dropped_stream("half an answer"),
            "the server ended the answer before it was complete: the stream ended with no \
             finish reason; another request to the same server may have interrupted it \
             (llama.cpp's server stops an answer when the next request arrives)",
        ),
    ];
    for (number, (failure, reason)) in cases.into_iter().enumerate() {
        fake.push(failure);
        fake.push(TurnBuilder::new().text("The whole answer.").reply());
        let (turn, retries) = complete(&client).await;
        assert_eq!(turn.text(), "The whole answer.", "{reason}");
        assert_eq!(retries, vec![reason.to_owned()]);
        let requests = fake.requests();
        assert_eq!(requests.len(), 2 * (number + 1));
        assert_eq!(
            requests[2 * number].body,
            requests[2 * number + 1].body,
            "the same request again after {reason}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fakes_chunks_read_back_as_the_turn_they_script() {
    let fake = FakeLlm::start_wire(Wire::OpenAi).await;
    let client = client(&fake, OPENAI_KEY);
    fake.push(
        TurnBuilder::new()
            .text("Three at once.")
            .tool_use("call_a", "read_file", json!({"path": "src/main.rs"}))
            .tool_use(
                "call_b",
                "grep",
                json!({"pattern": "fn main", "path": "src"}),
            )
            .tool_use("call_c", "list_files", json!({}))
            .usage(1234, 56)
            .reply(),
    );
    let (turn, _) = complete(&client).await;
    assert_eq!(turn.text(), "Three at once.");
    let calls: Vec<(String, String, Value)> = turn
        .tool_calls()
        .into_iter()
        .map(|call| (call.id, call.name, call.input))
        .collect();
    assert_eq!(
        calls,
        vec![
            (
                "call_a".to_owned(),
                "read_file".to_owned(),
                json!({"path": "src/main.rs"})
            ),
            (
                "call_b".to_owned(),
                "grep".to_owned(),
                json!({"pattern": "fn main", "path": "src"})
            ),
            ("call_c".to_owned(), "list_files".to_owned(), json!({})),
        ]
    );
    assert_eq!(turn.stop_reason, Some(StopReason::ToolUse));
    let usage = turn.usage.expect("the server counts the tokens");
    assert_eq!((usage.input_tokens, usage.output_tokens), (1234, 56));

    fake.push(
        TurnBuilder::new()
            .text("Writing it now.")
            .truncated_tool_use(
                "call_w",
                "write_file",
                "{\"path\": \"a.rs\", \"content\": \"fn ma",
            )
            .reply(),
    );
    let (turn, _) = complete(&client).await;
    assert_eq!(turn.stop_reason, Some(StopReason::MaxTokens));
    assert!(turn.tool_calls().is_empty());
    assert_eq!(turn.truncated_tool_calls, vec!["write_file".to_owned()]);
}
