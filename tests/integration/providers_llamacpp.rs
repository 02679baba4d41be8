//! The `openai` client against a server that behaves as llama-cpp-python's does
//! (`Wire::LlamaCpp`): answers another request interrupts, keep-alive pings while a long prompt
//! is evaluated, slow answers that outlast the request timeout, failures after the 200.

use std::sync::Mutex;
use std::time::Duration;

use loopr::llm::openai::{OpenAiClient, OpenAiConfig};
use loopr::llm::providers::build;
use loopr::llm::{
    ChatRequest, LlmError, LlmProvider, Message, ProviderEnv, ProviderEvent, ProviderName,
    ProviderSettings, RetryPolicy, Turn,
};
use tokio_util::sync::CancellationToken;

use crate::fake_llm::llamacpp::Overflow;
use crate::fake_llm::{FakeLlm, Reply, TurnBuilder, Wire};
use crate::scenario;

/// Bounds every wait so that a broken client fails the test instead of hanging it.
const BOUND: Duration = Duration::from_secs(30);

fn policy(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        request_timeout: Duration::from_secs(20),
        stream_idle_timeout: Duration::from_secs(10),
    }
}

fn client(fake: &FakeLlm, retry: RetryPolicy) -> OpenAiClient {
    OpenAiClient::new(OpenAiConfig {
        base_url: format!("{}/v1", fake.base_url()),
        api_key: None,
        tool_choice: None,
        stream: true,
        retry,
    })
    .expect("client")
}

fn request() -> ChatRequest {
    ChatRequest {
        model: "gemma3".to_owned(),
        max_tokens: 256,
        system: "You answer briefly.".to_owned(),
        messages: loopr::llm::shared(vec![Message::user_text("Say hello.")]),
        tools: Vec::new().into(),
    }
}

/// One request; its result and the reasons of the retries it reported.
async fn complete(client: &dyn LlmProvider) -> (Result<Turn, LlmError>, Vec<String>) {
    let retries = Mutex::new(Vec::new());
    let record = |event: ProviderEvent| {
        if let ProviderEvent::Retrying { reason, .. } = event {
            retries.lock().expect("retries").push(reason);
        }
    };
    let result = tokio::time::timeout(
        BOUND,
        client.complete(&request(), &record, &CancellationToken::new()),
    )
    .await
    .expect("the request ends");
    (result, retries.into_inner().expect("retries"))
}

/// Asks the fake for its models, which takes the model's lock as a chat request does: the
/// answer in flight is interrupted.
async fn interrupt(fake: &FakeLlm) {
    loopr::llm::http::install_tls_provider();
    let response = reqwest::Client::new()
        .get(format!("{}/v1/models", fake.base_url()))
        .send()
        .await
        .expect("models");
    assert_eq!(response.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_another_request_interrupted_is_retried_never_a_turn() {
    let fake = FakeLlm::start_llamacpp().await;
    fake.llamacpp()
        .configure(|settings| settings.prompt_eval = Duration::from_millis(300));
    fake.push(TurnBuilder::new().text("never seen").reply());
    fake.push(TurnBuilder::new().text("The whole answer.").reply());
    let client = client(&fake, policy(2));
    let interrupting = async {
        fake.wait_for_requests(1).await;
        interrupt(&fake).await;
    };
    let ((result, retries), _) =
        tokio::join!(complete(&client), tokio::time::timeout(BOUND, interrupting));
    assert_eq!(fake.llamacpp().interruptions(), 1);
    let turn = result.expect("a turn");
    assert_eq!(turn.text(), "The whole answer.");
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert!(retries[0].contains("ended the answer"), "{retries:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_interrupted_every_time_end_in_an_error_that_says_so() {
    let fake = FakeLlm::start_llamacpp().await;
    fake.llamacpp()
        .configure(|settings| settings.prompt_eval = Duration::from_millis(300));
    fake.push(TurnBuilder::new().text("never seen").reply());
    fake.push(TurnBuilder::new().text("never seen either").reply());
    let client = client(&fake, policy(1));
    // Requests 1 and 3 are the client's, 2 and 4 the interruptions.
    let interrupting = async {
        for attempt in [1, 3] {
            fake.wait_for_requests(attempt).await;
            interrupt(&fake).await;
        }
    };
    let ((result, _), _) =
        tokio::join!(complete(&client), tokio::time::timeout(BOUND, interrupting));
    let message = result.expect_err("no turn").to_string();
    assert_eq!(
        message,
        "the model API ended its answer before it was complete: the stream ended with [DONE] \
         and no finish reason (after 2 attempts); another request to the same server may have \
         interrupted it (llama.cpp's server stops an answer when the next request arrives)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alives_while_a_long_prompt_is_evaluated_prove_the_server_alive() {
    let fake = FakeLlm::start_llamacpp().await;
    fake.llamacpp().configure(|settings| {
        settings.prompt_eval = Duration::from_millis(900);
        settings.ping_interval = Duration::from_millis(100);
    });
    fake.push(TurnBuilder::new().text("Evaluated at last.").reply());
    let client = client(
        &fake,
        RetryPolicy {
            stream_idle_timeout: Duration::from_millis(400),
            ..policy(0)
        },
    );
    let (result, retries) = complete(&client).await;
    assert_eq!(result.expect("a turn").text(), "Evaluated at last.");
    assert!(retries.is_empty(), "{retries:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_still_streaming_outlasts_the_request_timeout() {
    let fake = FakeLlm::start_llamacpp().await;
    let words: Vec<String> = (0..16).map(|word| format!("word{word} ")).collect();
    fake.push(
        TurnBuilder::new()
            .text_deltas(words.clone())
            .paced(Duration::from_millis(100)),
    );
    let client = client(
        &fake,
        RetryPolicy {
            request_timeout: Duration::from_millis(700),
            stream_idle_timeout: Duration::from_millis(500),
            max_retries: 0,
        },
    );
    let (result, _) = complete(&client).await;
    assert_eq!(result.expect("a turn").text(), words.concat());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_only_sends_keep_alives_still_ends_at_the_request_timeout() {
    let fake = FakeLlm::start_llamacpp().await;
    fake.llamacpp().configure(|settings| {
        settings.prompt_eval = Duration::from_secs(3600);
        settings.ping_interval = Duration::from_millis(100);
    });
    fake.push(TurnBuilder::new().text("never").reply());
    let client = client(
        &fake,
        RetryPolicy {
            request_timeout: Duration::from_millis(1500),
            stream_idle_timeout: Duration::from_millis(400),
            max_retries: 0,
        },
    );
    let (result, _) = complete(&client).await;
    assert_eq!(
        result.expect_err("no answer").to_string(),
        "the model API sent no answer within the request timeout of 1.5s (request_timeout_ms), \
         only keep-alives or nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_over_the_context_window_is_reported_as_such_and_not_retried() {
    let fake = FakeLlm::start_llamacpp().await;
    fake.llamacpp().configure(|settings| {
        settings.n_ctx = 16;
        settings.overflow = Overflow::ErrorInStream;
    });
    fake.push(TurnBuilder::new().text("never").reply());
    let (result, retries) = complete(&client(&fake, policy(2))).await;
    let error = result.expect_err("an overflow");
    assert!(error.is_context_overflow(), "{error}");
    assert!(retries.is_empty(), "{retries:?}");
    let message = error.to_string();
    assert!(
        message
            .starts_with("the request does not fit the model's context window: Requested tokens ("),
        "{message}"
    );
    for fix in ["--ctx-size", "n_ctx", "context_budget", "max_tokens"] {
        assert!(message.contains(fix), "{message} names {fix}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_closed_after_the_200_before_any_answer_names_the_likely_cause() {
    // What llama-cpp-python does with a prompt over its context window.
    let fake = FakeLlm::start_llamacpp().await;
    fake.llamacpp().configure(|settings| settings.n_ctx = 16);
    for _ in 0..3 {
        fake.push(TurnBuilder::new().text("never").reply());
    }
    let (result, retries) = complete(&client(&fake, policy(2))).await;
    assert_eq!(retries.len(), 2, "{retries:?}");
    let message = result.expect_err("no answer").to_string();
    assert!(
        message.starts_with("the model API closed the connection before it sent any of the answer"),
        "{message}"
    );
    assert!(
        message.contains("n_ctx") && message.contains("log"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsupported_feature_reported_after_the_200_is_shown_as_said_and_not_retried() {
    let fake = FakeLlm::start_wire(Wire::OpenAi).await;
    fake.push(Reply::RawSse(
        b"data: {\"error\": {\"message\": \"Automatic streaming tool choice is not supported\", \
          \"type\": \"internal_server_error\", \"param\": null, \"code\": null}}\n\n"
            .to_vec(),
    ));
    let (result, retries) = complete(&client(&fake, policy(2))).await;
    assert!(retries.is_empty(), "{retries:?}");
    assert_eq!(
        result.expect_err("an error").to_string(),
        "the model API reported internal_server_error mid-stream: Automatic streaming tool \
         choice is not supported"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_servers_error_line_is_read_not_taken_for_an_empty_answer() {
    // llama.cpp's `llama-server` writes a failure in the stream as an `error:` field, then
    // `[DONE]`.
    let fake = FakeLlm::start_wire(Wire::OpenAi).await;
    fake.push(Reply::RawSse(
        b"error: {\"code\":400,\"message\":\"the request exceeds the available context size, \
          try increasing it\",\"type\":\"exceed_context_size_error\"}\n\ndata: [DONE]\n\n"
            .to_vec(),
    ));
    let (result, retries) = complete(&client(&fake, policy(2))).await;
    assert!(retries.is_empty(), "{retries:?}");
    let error = result.expect_err("an overflow");
    assert!(error.is_context_overflow(), "{error}");
    assert!(
        error
            .to_string()
            .contains("the request exceeds the available context size"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_object_with_a_client_error_code_is_not_retried() {
    let fake = FakeLlm::start_wire(Wire::OpenAi).await;
    fake.push(Reply::RawSse(
        b"data: {\"error\": {\"code\": 400, \"message\": \"Invalid tool schema\", \"type\": \
          \"invalid_request_error\"}}\n\n"
            .to_vec(),
    ));
    let (result, retries) = complete(&client(&fake, policy(2))).await;
    assert!(retries.is_empty(), "{retries:?}");
    assert_eq!(
        result.expect_err("an error").to_string(),
        "the model API reported invalid_request_error mid-stream: Invalid tool schema"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loops_sharing_a_local_server_take_turns_instead_of_interrupting_each_other() {
    let fake = FakeLlm::start_llamacpp().await;
    fake.llamacpp()
        .configure(|settings| settings.prompt_eval = Duration::from_millis(300));
    for _ in 0..4 {
        fake.push(TurnBuilder::new().text("A whole answer.").reply());
    }
    // Two loops, each with its own client of the same server.
    let (first, second) = (client(&fake, policy(2)), client(&fake, policy(2)));
    let ((first, first_retries), (second, second_retries)) =
        tokio::join!(complete(&first), complete(&second));
    assert_eq!(first.expect("a turn").text(), "A whole answer.");
    assert_eq!(second.expect("a turn").text(), "A whole answer.");
    assert!(first_retries.is_empty(), "{first_retries:?}");
    assert!(second_retries.is_empty(), "{second_retries:?}");
    assert_eq!(fake.llamacpp().interruptions(), 0);
    assert_eq!(fake.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raised_limit_lets_requests_overlap_and_llama_cpp_python_interrupts_them() {
    let fake = FakeLlm::start_llamacpp().await;
    fake.llamacpp()
        .configure(|settings| settings.prompt_eval = Duration::from_millis(300));
    for _ in 0..6 {
        fake.push(TurnBuilder::new().text("A whole answer.").reply());
    }
    let settings = ProviderSettings {
        provider: ProviderName::Openai,
        max_parallel_requests: Some(2),
        ..ProviderSettings::default()
    };
    let env = ProviderEnv::new([(
        "OPENAI_BASE_URL".to_owned(),
        format!("{}/v1", fake.base_url()),
    )]);
    let first = build(&settings, &env, policy(2)).expect("a provider");
    let second = build(&settings, &env, policy(2)).expect("a provider");
    let ((_, first_retries), (_, second_retries)) =
        tokio::join!(complete(first.as_ref()), complete(second.as_ref()));
    assert!(fake.llamacpp().interruptions() >= 1);
    let retries = [first_retries, second_retries].concat();
    assert!(
        retries
            .iter()
            .any(|reason| reason.contains("ended the answer")),
        "{retries:?}"
    );
}

/// The two specs of `scenario::valid_plan`, with three phases each.
const TREE: [(&str, [&str; 3]); 2] = [
    ("version-flag", ["parse-flag", "print-version", "exit-code"]),
    ("version-docs", ["readme", "changelog", "help-text"]),
];

/// A whole plan tree against llama-cpp-python's behaviour (no usage, pings, one slot that a
/// second request interrupts, an overflow past its window), the settings leaving `max_tokens`
/// and `context_budget` unset: the host asks the server its window once, fits both to it, and
/// every loop of the tree completes, its requests taking turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_tree_completes_with_limits_fitted_to_the_window_the_server_reports() {
    let fake = FakeLlm::start_llamacpp().await;
    fake.llamacpp().configure(|settings| {
        settings.n_ctx = 8192;
        settings.prompt_eval = Duration::from_millis(20);
        settings.ping_interval = Duration::from_millis(5);
    });
    fake.push_routed(
        scenario::plan_route(),
        scenario::tool_turn("unsent", "create_plan", scenario::valid_plan()),
    );
    for (spec, phases) in &TREE {
        fake.push_routed(
            &scenario::spec_route(spec),
            scenario::tool_turn("unsent", "create_spec", scenario::spec_input(spec, phases)),
        );
        for phase in phases {
            fake.push_routed(
                &scenario::phase_route(phase),
                scenario::tool_turn("unsent", "create_phase", scenario::phase_input(phase)),
            );
        }
    }
    let dirs = crate::nvim::TestDirs::new();
    let settings = serde_json::json!({
        "provider": "openai",
        "base_url": format!("{}/v1", fake.base_url()),
        "model": "gemma3",
        "plan_review_passes": 0,
        "spec_review": false,
        "max_concurrent_loops": 3,
    })
    .to_string();
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        scenario::run_loopr(
            &dirs,
            &fake,
            &[
                "plan",
                "Add a --version flag",
                "--approve-all",
                "--settings",
                &settings,
            ],
        ),
    )
    .await
    .expect("the run ends");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let rows = scenario::all_complete_rows(&output);
    assert_eq!(rows.len(), 9, "a plan, 2 specs, 6 phases: {stdout}");
    // The server reports no usage: the table shows estimates, not zeros.
    assert!(stdout.contains('~'), "estimated tokens: {stdout}");

    let requests = fake.requests();
    let asked: Vec<&str> = requests
        .iter()
        .filter(|request| request.method == "GET")
        .map(|request| request.path.as_str())
        .collect();
    assert_eq!(asked, ["/props"], "asked once per host run");
    let chats: Vec<_> = requests
        .iter()
        .filter(|request| request.path == "/v1/chat/completions")
        .collect();
    assert_eq!(chats.len(), 9, "one answer per loop, none interrupted");
    for chat in &chats {
        // A quarter of the window, never the whole of it.
        assert_eq!(chat.body["max_tokens"], 2048, "{}", chat.body);
        // What is sent stays within the budget, the window less the answer: by the
        // host's own estimate (3 bytes a token), so with room to spare.
        assert!(chat.body_len / 3 <= 8192 - 2048, "{} bytes", chat.body_len);
    }
}
