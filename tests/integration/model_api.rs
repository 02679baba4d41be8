//! Reaching the model API: a key or base URL set inside Neovim after the host started, and a
//! base URL nothing answers at.

use std::path::PathBuf;

use crate::fake_llm::{FakeLlm, Wire};
use crate::nvim::TestNvim;
use crate::scenario::{
    create_plan_turn, files_containing, files_under, start_editor_at, tool_turn, valid_plan,
};

const KEY_SET_IN_NEOVIM: &str = "sk-ant-set-inside-neovim-7d2e91c4";
const MISSING_KEY: &str = "ANTHROPIC_API_KEY is not set; export it in the shell, or in Neovim \
                           run :let $ANTHROPIC_API_KEY = '<value>'";

async fn messages(editor: &TestNvim) -> String {
    editor.lua("return vim.fn.execute('messages')").await
}

async fn host_pid(editor: &TestNvim) -> i64 {
    let pid: Option<i64> = editor.lua("return require('loopr.host').pid()").await;
    pid.expect("the host runs")
}

/// Asks for a plan and checks that it is refused for the missing key.
async fn assert_plan_refused_without_key(editor: &TestNvim) {
    let refused = editor.command("LooprPlan Add a --version flag").await;
    assert!(
        refused
            .as_deref()
            .is_some_and(|err| err.contains(MISSING_KEY)),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_set_inside_neovim_reaches_the_running_host_and_nothing_stores_it() {
    let fake = FakeLlm::start().await;
    fake.push(create_plan_turn("toolu_plan", valid_plan()));
    // Neovim starts without a key: blank in its environment, then removed altogether.
    let mut editor = start_editor_at(
        fake.base_url(),
        "{}",
        vec![("ANTHROPIC_API_KEY".to_owned(), String::new())],
    )
    .await;
    editor.exec("vim.env.ANTHROPIC_API_KEY = nil").await;
    let version: String = editor
        .lua("return require('loopr.host').request('version')")
        .await;
    assert!(!version.is_empty());
    let pid = host_pid(&editor).await;

    assert_plan_refused_without_key(&editor).await;

    let set = format!("let $ANTHROPIC_API_KEY = '{KEY_SET_IN_NEOVIM}'");
    assert_eq!(editor.command(&set).await, None);
    let loop_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&loop_id, "awaiting_approval").await;

    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].header("x-api-key"), Some(KEY_SET_IN_NEOVIM));
    assert_eq!(
        host_pid(&editor).await,
        pid,
        "the running host took the key; it was not restarted"
    );

    // Unset in Neovim, unset for the host too.
    assert_eq!(editor.command("unlet $ANTHROPIC_API_KEY").await, None);
    assert_plan_refused_without_key(&editor).await;
    assert_eq!(fake.requests().len(), 1);

    // Quitting stops the host, which flushes its log.
    let dirs = editor.quit().await;
    assert!(
        std::fs::read_to_string(&dirs.log_file).is_ok_and(|log| log.contains("credentials")),
        "the host logged that it got credentials"
    );
    assert_eq!(
        files_containing(dirs.temp.path(), KEY_SET_IN_NEOVIM),
        Vec::<PathBuf>::new(),
        "the key reaches no log, state or project file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_model_api_is_named_by_its_base_url_until_one_set_in_neovim_answers() {
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let mut editor = start_editor_at(
        format!("http://127.0.0.1:{closed_port}/"),
        "{ max_retries = 0 }",
        Vec::new(),
    )
    .await;

    let loop_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&loop_id, "failed").await;
    let expected = format!(
        "model request failed: cannot reach the model API at http://127.0.0.1:{closed_port} \
         (ANTHROPIC_BASE_URL): connection refused"
    );
    let records = editor.status_records().await;
    assert_eq!(records[0]["error"], expected.as_str(), "{records:#?}");
    let shown = messages(&editor).await;
    assert!(shown.contains(&expected), "{shown}");

    let fake = FakeLlm::start().await;
    fake.push(create_plan_turn("toolu_plan", valid_plan()));
    let set = format!("let $ANTHROPIC_BASE_URL = '{}'", fake.base_url());
    assert_eq!(editor.command(&set).await, None);
    let loop_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&loop_id, "awaiting_approval").await;
    assert_eq!(fake.requests().len(), 1);
    editor.quit().await;
}

/// `OLLAMA_HOST` ends in none of the endings that mark keys and base URLs: Neovim learns from
/// the host that it is a provider variable, and passes the one set inside Neovim after the
/// host started, before the request that needs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ollama_host_set_inside_neovim_reaches_the_running_host() {
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let fake = FakeLlm::start_wire(Wire::Ollama).await;
    fake.push(tool_turn("unsent", "create_plan", valid_plan()));
    let mut editor = start_editor_at(
        fake.base_url(),
        "{ provider = 'ollama', model = 'qwen-test', max_retries = 0 }",
        vec![("OLLAMA_HOST".to_owned(), format!("127.0.0.1:{closed_port}"))],
    )
    .await;
    let version: String = editor
        .lua("return require('loopr.host').request('version')")
        .await;
    assert!(!version.is_empty());
    let pid = host_pid(&editor).await;

    let set = format!("let $OLLAMA_HOST = '{}'", fake.addr());
    assert_eq!(editor.command(&set).await, None);
    let loop_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&loop_id, "awaiting_approval").await;
    assert_eq!(fake.requests().len(), 1);
    assert_eq!(
        host_pid(&editor).await,
        pid,
        "the running host took the address; it was not restarted"
    );
    editor.quit().await;
}

/// A request repeats the conversation: the provider keeps what it made of earlier messages
/// and sends the body in pieces, with its exact length (no chunked upload, which some
/// servers refuse), byte for byte what a fresh client sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_conversation_is_sent_whole_with_its_length_and_as_a_fresh_client_sends_it() {
    use loopr::llm::anthropic::{AnthropicClient, AnthropicConfig};
    use loopr::llm::{ApiKey, ChatRequest, ContentBlock, LlmProvider, Message, RetryPolicy, Role};
    use std::sync::Arc;

    let fake = FakeLlm::start().await;
    let client = || {
        AnthropicClient::new(AnthropicConfig {
            base_url: fake.base_url(),
            api_key: ApiKey::new("sk-ant-pieces".to_owned()),
            retry: RetryPolicy {
                max_retries: 0,
                request_timeout: std::time::Duration::from_secs(30),
                stream_idle_timeout: std::time::Duration::from_secs(30),
            },
        })
        .expect("client")
    };
    let long_result = "a line a model read\n".repeat(5_000);
    let mut request = ChatRequest {
        model: "claude-test".to_owned(),
        max_tokens: 100,
        system: "be brief".to_owned(),
        messages: loopr::llm::shared(vec![Message::user_text("task")]),
        tools: Vec::new().into(),
    };
    let cancel = tokio_util::sync::CancellationToken::new();
    let ignore = |_| {};
    let kept = client();
    for turn in 0..3 {
        fake.push(crate::fake_llm::TurnBuilder::new().text("ok").reply());
        kept.complete(&request, &ignore, &cancel)
            .await
            .expect("turn");
        request.messages.push(Arc::new(Message {
            role: Role::Assistant,
            content: vec![ContentBlock::tool_call(
                format!("t{turn}"),
                "read_file",
                serde_json::json!({"path": "a"}),
            )],
        }));
        request.messages.push(Arc::new(Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                id: format!("t{turn}"),
                content: long_result.clone(),
                is_error: false,
            }],
        }));
    }
    fake.push(crate::fake_llm::TurnBuilder::new().text("ok").reply());
    kept.complete(&request, &ignore, &cancel)
        .await
        .expect("turn");
    fake.push(crate::fake_llm::TurnBuilder::new().text("ok").reply());
    client()
        .complete(&request, &ignore, &cancel)
        .await
        .expect("turn");
    let requests = fake.requests();
    let (kept_body, fresh_body) = (&requests[3], &requests[4]);
    assert_eq!(kept_body.raw_body, fresh_body.raw_body);
    assert_eq!(kept_body.body["messages"].as_array().map(Vec::len), Some(7));
    for sent in &requests {
        assert_eq!(
            sent.header("content-length"),
            Some(sent.raw_body.len().to_string().as_str())
        );
        assert_eq!(sent.header("transfer-encoding"), None);
    }
}

/// The blocks of a request's messages that carry `cache_control`, as (message, block).
fn cache_breakpoints(body: &serde_json::Value) -> Vec<(usize, usize)> {
    let mut marks = Vec::new();
    for (m, message) in body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        for (b, block) in message["content"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            if block.get("cache_control").is_some() {
                marks.push((m, b));
            }
        }
    }
    marks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_carry_cache_breakpoints_and_the_cache_tokens_are_recorded() {
    let fake = FakeLlm::start().await;
    let turn = |builder: crate::fake_llm::TurnBuilder, write: u64, read: u64| {
        builder.usage(100, 20).cache_usage(write, read).reply()
    };
    fake.push(turn(
        crate::fake_llm::TurnBuilder::new().tool_use("t1", "list_files", serde_json::json!({})),
        3000,
        0,
    ));
    fake.push(turn(
        crate::fake_llm::TurnBuilder::new().tool_use(
            "t2",
            "read_file",
            serde_json::json!({"path": "src/main.rs"}),
        ),
        400,
        3000,
    ));
    fake.push(turn(
        crate::fake_llm::TurnBuilder::new().tool_use("t3", "create_plan", valid_plan()),
        500,
        3400,
    ));
    let mut editor = crate::scenario::start_editor(&fake, "{}").await;
    let loop_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&loop_id, "awaiting_approval").await;

    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        assert_eq!(
            request.body["system"][0]["cache_control"],
            serde_json::json!({"type": "ephemeral"}),
            "the tools and system prompt are one cached prefix: {:#}",
            request.body["system"]
        );
    }
    assert_eq!(
        cache_breakpoints(&requests[0].body),
        vec![],
        "one message: nothing to reuse"
    );
    assert_eq!(cache_breakpoints(&requests[1].body), vec![(2, 0)]);
    assert_eq!(cache_breakpoints(&requests[2].body), vec![(4, 0)]);

    // Each turn's cache tokens are in the journal; the record counts every input token.
    let journal = files_under(&editor.dirs.loopr_home)
        .into_iter()
        .find(|path| path.ends_with("journal.jsonl"))
        .expect("journal");
    let usages: Vec<(u64, u64)> = std::fs::read_to_string(&journal)
        .expect("journal")
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|entry| entry["type"] == "assistant")
        .map(|entry| {
            let usage = &entry["usage"];
            (
                usage["cache_write_tokens"].as_u64().unwrap_or(0),
                usage["cache_read_tokens"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(usages, vec![(3000, 0), (400, 3000), (500, 3400)]);
    let records = editor.status_records().await;
    assert_eq!(
        records[0]["tokens_in"].as_u64(),
        Some(3 * 100 + 3000 + 400 + 3000 + 500 + 3400)
    );
    editor.quit().await;
}
