//! The `ollama` provider: its client against the fake server speaking Ollama's `/api/chat`
//! over loopback (retries, errors, options), and the whole planning hierarchy run through it
//! from Neovim.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use loopr::llm::providers::build;
use loopr::llm::{
    ChatRequest, LlmError, LlmProvider, Message, ProviderEnv, ProviderEvent, ProviderName,
    ProviderSettings, RetryPolicy, StopReason, Turn,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::fake_llm::ollama::{
    cut_off, mid_stream_error, model_not_found, rate_limited, server_busy,
};
use crate::fake_llm::{FakeLlm, TurnBuilder, Wire, first_user_text};
use crate::scenario::{
    phase_input, phase_route, plan_route, spec_input, spec_route, start_ollama_editor, tool_turn,
    valid_plan, wait_all_complete,
};

const MODEL: &str = "qwen-test";

fn settings(num_ctx: Option<u32>, api_key_env: Option<&str>) -> ProviderSettings {
    ProviderSettings {
        provider: ProviderName::Ollama,
        base_url: None,
        api_key_env: api_key_env.map(str::to_owned),
        num_ctx,
        max_parallel_requests: None,
    }
}

/// The client the host builds for `settings`, with `OLLAMA_HOST` the fake's bare address.
fn client(
    fake: &FakeLlm,
    settings: &ProviderSettings,
    extra_env: &[(&str, &str)],
) -> std::sync::Arc<dyn LlmProvider> {
    let mut variables = vec![("OLLAMA_HOST".to_owned(), fake.addr().to_string())];
    variables.extend(
        extra_env
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned())),
    );
    let retry = RetryPolicy {
        max_retries: 2,
        request_timeout: Duration::from_secs(20),
        stream_idle_timeout: Duration::from_secs(10),
    };
    match build(settings, &ProviderEnv::new(variables), retry) {
        Ok(client) => client,
        Err(err) => panic!("the ollama client builds: {err}"),
    }
}

fn request() -> ChatRequest {
    ChatRequest {
        model: MODEL.to_owned(),
        max_tokens: 512,
        system: "Answer briefly.".to_owned(),
        messages: loopr::llm::shared(vec![Message::user_text("Say hello")]),
        tools: Vec::new().into(),
    }
}

/// Runs one request; returns its result and the retries it announced.
async fn complete(client: &dyn LlmProvider) -> (Result<Turn, LlmError>, Vec<(Duration, String)>) {
    let retries = Mutex::new(Vec::new());
    let record = |event: ProviderEvent| {
        if let ProviderEvent::Retrying { delay, reason, .. } = event {
            retries.lock().expect("retries").push((delay, reason));
        }
    };
    let result = tokio::time::timeout(
        Duration::from_secs(60),
        client.complete(&request(), &record, &CancellationToken::new()),
    )
    .await
    .expect("the request ends");
    (result, retries.into_inner().expect("retries"))
}

fn hello() -> crate::fake_llm::Reply {
    TurnBuilder::new()
        .model(MODEL)
        .text("Hello there, friend.")
        .usage(21, 6)
        .reply()
}

#[tokio::test]
async fn a_rate_limit_waits_as_asked_and_a_busy_server_is_retried() {
    let fake = FakeLlm::start_wire(Wire::Ollama).await;
    fake.push_all([rate_limited(1), server_busy(), hello()]);
    let client = client(&fake, &settings(None, None), &[]);
    let (result, retries) = complete(client.as_ref()).await;
    let turn = result.expect("the third attempt succeeds");
    assert_eq!(turn.text(), "Hello there, friend.");
    assert_eq!(turn.stop_reason, Some(StopReason::EndTurn));
    assert_eq!((turn.usage.input_tokens, turn.usage.output_tokens), (21, 6));
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert_eq!(
        retries[0].0,
        Duration::from_secs(1),
        "retry-after is honoured"
    );
    assert_eq!(retries[0].1, "HTTP 429 error");
    assert_eq!(retries[1].1, "HTTP 503 error");
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests.iter().all(|r| r.path == "/api/chat"));
    assert_eq!(
        requests[0].header("authorization"),
        None,
        "Ollama takes no key"
    );
}

#[tokio::test]
async fn an_error_line_mid_stream_throws_the_partial_turn_away_and_retries() {
    let fake = FakeLlm::start_wire(Wire::Ollama).await;
    fake.push_all([
        mid_stream_error(
            "Hello the",
            "an error was encountered while running the model: unexpected EOF",
        ),
        hello(),
    ]);
    let client = client(&fake, &settings(None, None), &[]);
    let (result, retries) = complete(client.as_ref()).await;
    let turn = result.expect("the retry succeeds");
    assert_eq!(
        turn.content,
        vec![loopr::llm::ContentBlock::text("Hello there, friend.")],
        "nothing of the failed attempt is kept"
    );
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0].1, "error mid-stream");
    let requests = fake.requests();
    assert_eq!(
        requests[0].body, requests[1].body,
        "the same turn is asked again"
    );
}

#[tokio::test]
async fn a_stream_cut_off_before_done_is_retried() {
    let fake = FakeLlm::start_wire(Wire::Ollama).await;
    fake.push_all([cut_off("Hello there, fri"), hello()]);
    let client = client(&fake, &settings(None, None), &[]);
    let (result, retries) = complete(client.as_ref()).await;
    assert_eq!(
        result.expect("the retry succeeds").text(),
        "Hello there, friend."
    );
    assert_eq!(retries.len(), 1);
    assert!(retries[0].1.contains("\"done\": true"), "{retries:?}");
}

#[tokio::test]
async fn calls_arrive_whole_without_ids_and_a_call_cut_off_by_the_limit_is_not_sent() {
    let fake = FakeLlm::start_wire(Wire::Ollama).await;
    fake.push_all([
        TurnBuilder::new()
            .text("Two looks.")
            .tool_use("unsent", "read_file", json!({"path": "src/main.rs"}))
            .tool_use("unsent", "list_files", json!({}))
            .reply(),
        TurnBuilder::new()
            .text("The plan")
            .truncated_tool_use("unsent", "create_plan", "{\"title\": \"Add")
            .reply(),
    ]);
    let client = client(&fake, &settings(None, None), &[]);
    let started = Mutex::new(Vec::new());
    let record = |event: ProviderEvent| {
        if let ProviderEvent::ToolCallStarted { name } = event {
            started.lock().expect("started").push(name);
        }
    };
    let cancel = CancellationToken::new();
    let called = client
        .complete(&request(), &record, &cancel)
        .await
        .expect("turn");
    assert_eq!(called.stop_reason, Some(StopReason::ToolUse));
    let calls = called.tool_calls();
    let names: Vec<&str> = calls.iter().map(|call| call.name.as_str()).collect();
    assert_eq!(names, ["read_file", "list_files"]);
    assert_eq!(calls[0].input, json!({"path": "src/main.rs"}));
    assert!(calls.iter().all(|call| call.id.starts_with("call_")));
    assert_ne!(calls[0].id, calls[1].id);
    assert_eq!(
        started.into_inner().expect("started"),
        ["read_file", "list_files"]
    );
    let cut = client
        .complete(&request(), &|_| {}, &cancel)
        .await
        .expect("turn");
    assert_eq!(cut.stop_reason, Some(StopReason::MaxTokens));
    assert!(cut.tool_calls().is_empty() && cut.truncated_tool_calls.is_empty());
    assert_eq!(cut.text(), "The plan");
}

#[tokio::test]
async fn a_model_that_was_never_pulled_fails_at_once_with_ollamas_own_words() {
    let fake = FakeLlm::start_wire(Wire::Ollama).await;
    fake.push_all([model_not_found(MODEL), hello()]);
    let client = client(&fake, &settings(None, None), &[]);
    let (result, retries) = complete(client.as_ref()).await;
    let message = result.expect_err("404 fails").to_string();
    assert_eq!(
        message,
        "HTTP 404 error from the model API: model 'qwen-test' not found, try pulling it first"
    );
    assert!(retries.is_empty(), "a 404 is not retried: {retries:?}");
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn num_ctx_is_sent_only_when_set_and_a_proxy_key_as_a_bearer_token() {
    let fake = FakeLlm::start_wire(Wire::Ollama).await;
    fake.push_all([hello(), hello()]);
    let with = client(
        &fake,
        &settings(Some(16384), Some("PROXY_API_KEY")),
        &[("PROXY_API_KEY", "sk-proxy-5e1a")],
    );
    complete(with.as_ref()).await.0.expect("turn");
    let without = client(&fake, &settings(None, None), &[]);
    complete(without.as_ref()).await.0.expect("turn");
    let requests = fake.requests();
    assert_eq!(
        requests[0].body["options"],
        json!({"num_predict": 512, "num_ctx": 16384})
    );
    assert_eq!(requests[1].body["options"], json!({"num_predict": 512}));
    assert_eq!(
        requests[0].header("authorization"),
        Some("Bearer sk-proxy-5e1a")
    );
    assert_eq!(requests[1].header("authorization"), None);
    assert_eq!(
        requests[1].body["messages"],
        json!([
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Say hello"}
        ])
    );
    assert_eq!(requests[1].body["stream"], true);
    assert_eq!(requests[1].body["model"], MODEL);
}

const SPECS: [(&str, [&str; 3]); 2] = [
    ("version-flag", ["parse-flag", "print-version", "exit-code"]),
    ("version-docs", ["readme", "changelog", "help-text"]),
];

/// The messages of `body` with `role`.
fn messages_with_role<'a>(body: &'a Value, role: &str) -> Vec<&'a Value> {
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|message| message["role"] == role)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_hierarchy_runs_through_ollama_with_calls_that_carry_no_ids() {
    let fake = FakeLlm::start_wire(Wire::Ollama).await;
    let mut broken = valid_plan();
    broken["specs"][1]["dependencies"] = json!(["auth"]);
    fake.push_routed(plan_route(), tool_turn("unsent", "create_plan", broken));
    fake.push_routed(
        plan_route(),
        tool_turn("unsent", "create_plan", valid_plan()),
    );
    for (spec, phases) in &SPECS {
        fake.push_routed(
            &spec_route(spec),
            tool_turn("unsent", "create_spec", spec_input(spec, phases)),
        );
        for phase in phases {
            fake.push_routed(
                &phase_route(phase),
                tool_turn("unsent", "create_phase", phase_input(phase)),
            );
        }
    }
    let mut editor = start_ollama_editor(
        &fake,
        &format!("{{ provider = 'ollama', model = '{MODEL}', num_ctx = 16384 }}"),
    )
    .await;

    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "awaiting_approval").await;

    // plan.md is open in a split.
    let window: Value = editor
        .lua(
            "return { wins = #vim.api.nvim_tabpage_list_wins(0),
                      name = vim.api.nvim_buf_get_name(0) }",
        )
        .await;
    assert_eq!(window["wins"], 2, "{window}");
    let plan_md = PathBuf::from(window["name"].as_str().expect("name"));
    assert!(
        plan_md.ends_with("iterations/001/artifacts/plan.md"),
        "{window}"
    );
    let markdown = std::fs::read_to_string(&plan_md).expect("plan.md");
    assert!(
        markdown.starts_with("# Plan: Add a --version flag"),
        "{markdown}"
    );

    // On the wire: Ollama's request, and the invalid call answered by a `tool` message that
    // names the call by the id the host made up for it.
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0];
    assert_eq!(first.path, "/api/chat");
    assert_eq!(first.body["model"], MODEL);
    assert_eq!(first.body["stream"], true);
    assert_eq!(
        first.body["options"],
        json!({"num_predict": 8192, "num_ctx": 16384})
    );
    assert_eq!(first.body["messages"][0]["role"], "system");
    assert!(first_user_text(&first.body).contains(plan_route()));
    let tool_names: Vec<&str> = first.body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|tool| {
            assert_eq!(tool["type"], "function");
            tool["function"]["name"].as_str().expect("name")
        })
        .collect();
    assert!(tool_names.contains(&"create_plan"), "{tool_names:?}");
    let correction = &requests[1].body;
    let called = messages_with_role(correction, "assistant");
    let call = &called.last().expect("the model's call")["tool_calls"][0];
    assert_eq!(call["function"]["name"], "create_plan");
    let call_id = call["id"].as_str().expect("an id was made up");
    assert!(
        call_id.starts_with("call_") && call_id.len() > 5,
        "{call_id}"
    );
    let results = messages_with_role(correction, "tool");
    assert_eq!(results.len(), 1, "{correction:#}");
    assert_eq!(results[0]["tool_call_id"], call_id);
    assert_eq!(results[0]["tool_name"], "create_plan");
    let answer = results[0]["content"].as_str().expect("content");
    assert!(answer.starts_with("Error: "), "{answer}");
    assert!(
        answer.contains("\"auth\" is not a spec of this plan"),
        "{answer}"
    );
    let stored: Value = serde_json::from_slice(
        &std::fs::read(plan_md.with_file_name("plan.json")).expect("plan.json"),
    )
    .expect("json");
    assert_eq!(stored["specs"][1]["dependencies"], json!(["version-flag"]));

    // Approved, the specs and phases run through Ollama too.
    assert_eq!(editor.command("LooprApprove").await, None);
    let records = wait_all_complete(&mut editor, 1 + 2 + 6).await;
    let phases = records.iter().filter(|r| r["type"] == "phase").count();
    assert_eq!(phases, 6);
    for request in fake.requests() {
        assert_eq!(request.path, "/api/chat");
        assert_eq!(request.body["options"]["num_ctx"], 16384);
    }

    assert_eq!(editor.command("LooprTasks").await, None);
    let list: Value = editor
        .lua("local l = vim.fn.getqflist({ title = 1, size = 1 }) return { title = l.title, size = l.size }")
        .await;
    assert_eq!(list["title"], "Loopr: tasks (all phases)");
    assert_eq!(list["size"], 6 * 2, "two tasks per phase");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_model_the_plan_is_refused_at_once_naming_the_fix() {
    let fake = FakeLlm::start_wire(Wire::Ollama).await;
    let editor = start_ollama_editor(&fake, "{ provider = 'ollama' }").await;
    let refused = editor.command("LooprPlan Add a --version flag").await;
    let refused = refused.expect("the plan is refused");
    assert!(refused.contains("Loopr: invalid setting"), "{refused}");
    assert!(
        refused.contains("provider ollama needs a model")
            && refused.contains("setup({ model = 'qwen3:8b' })"),
        "{refused}"
    );
    assert!(fake.requests().is_empty(), "nothing was sent");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_was_never_pulled_fails_the_plan_with_ollamas_message() {
    let fake = FakeLlm::start_wire(Wire::Ollama).await;
    fake.push(model_not_found(MODEL));
    let mut editor = start_ollama_editor(
        &fake,
        &format!("{{ provider = 'ollama', model = '{MODEL}' }}"),
    )
    .await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "failed").await;
    assert_eq!(fake.requests().len(), 1, "a 404 is not retried");
    let messages: String = editor.lua("return vim.fn.execute('messages')").await;
    assert!(
        messages.contains("model 'qwen-test' not found, try pulling it first"),
        "the user reads Ollama's own words: {messages}"
    );
    editor.quit().await;
}
