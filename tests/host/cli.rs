//! The headless command line: `loopr plan --approve-all` runs the whole hierarchy without
//! Neovim, against the fake Anthropic server; `loopr status` lists what it did.

use crate::{fake_llm, nvim, scenario};

use serde_json::{Value, json};

use fake_llm::{FakeLlm, RecordedRequest, TurnBuilder, first_user_text};
use nvim::TestDirs;
use scenario::{
    SLOW_WORDS, answer_token_counts, files_ending_with, phase_input, phase_route, plan_route,
    run_loopr, run_loopr_plan, slow_plan_turn, spec_input, spec_route, tool_results, tool_turn,
    valid_plan,
};

/// One rule break per loop: the model's first answer breaks it, the second is correct.
struct Case {
    route: String,
    tool: &'static str,
    broken: Value,
    fixed: Value,
    complaint: &'static str,
}

fn with(mut value: Value, edit: impl FnOnce(&mut Value)) -> Value {
    edit(&mut value);
    value
}

/// The plan of the two-spec hierarchy: `version-docs` depends on `version-flag`.
fn two_spec_plan() -> Value {
    with(valid_plan(), |plan| {
        plan["specs"][0]["name"] = json!("version-flag");
        plan["specs"][1]["name"] = json!("version-docs");
        plan["specs"][1]["dependencies"] = json!(["version-flag"]);
    })
}

fn cases() -> Vec<Case> {
    let flag_phases = ["parse-flag", "print-version", "exit-code"];
    let docs_phases = ["readme", "changelog", "help-text", "man-page"];
    let spec_flag = spec_input("version-flag", &flag_phases);
    let spec_docs = spec_input("version-docs", &docs_phases);
    let phase = |name: &str, broken: Value, complaint| Case {
        route: phase_route(name),
        tool: "create_phase",
        broken,
        fixed: phase_input(name),
        complaint,
    };
    vec![
        Case {
            route: plan_route().to_owned(),
            tool: "create_plan",
            broken: with(two_spec_plan(), |plan| {
                plan["specs"][1]["references"] = json!(["#risks", "README.md"]);
            }),
            fixed: with(two_spec_plan(), |plan| {
                plan["specs"][1]["references"] = json!(["#risks", "output:version-flag"]);
            }),
            complaint: "specs[1].references[1]: \"README.md\" is not an accepted reference; a \
                        reference is one of: \"#anchor\"",
        },
        Case {
            route: spec_route("version-flag"),
            tool: "create_spec",
            broken: with(spec_flag.clone(), |spec| {
                spec["phases"].as_array_mut().expect("phases").truncate(2);
            }),
            fixed: spec_flag,
            complaint: "phases",
        },
        Case {
            route: spec_route("version-docs"),
            tool: "create_spec",
            broken: with(spec_docs.clone(), |spec| spec["name"] = json!("docs")),
            fixed: spec_docs.clone(),
            complaint: "this spec is named \"version-docs\"",
        },
        phase(
            "parse-flag",
            with(phase_input("parse-flag"), |p| p["name"] = json!("parse")),
            "this phase is named",
        ),
        phase(
            "print-version",
            with(phase_input("print-version"), |p| {
                p["validation_command"] = json!(" ")
            }),
            "is blank",
        ),
        phase(
            "exit-code",
            with(phase_input("exit-code"), |p| {
                p["tasks"][0]["file"] = json!("/etc/hosts")
            }),
            "is absolute",
        ),
        Case {
            // The corrected phase points into its spec's markdown.
            fixed: with(phase_input("readme"), |p| {
                p["tasks"][0]["references"] = json!(["#test-strategy", "#objective"])
            }),
            ..phase(
                "readme",
                with(phase_input("readme"), |p| {
                    p["tasks"][0]["file"] = json!("src/missing.rs")
                }),
                "does not exist, so it cannot be modified",
            )
        },
        phase(
            "changelog",
            with(phase_input("changelog"), |p| {
                p["tasks"][1]["file"] = json!("README.md")
            }),
            "already exists",
        ),
        phase(
            "help-text",
            json!({"name": "help-text", "title": "H", "objective": "O", "tasks": [{"description": "d"}], "validation_command": "true"}),
            "too sparse",
        ),
        phase(
            "man-page",
            with(phase_input("man-page"), |p| {
                p["tasks"][0]["file"] = json!("../outside.txt")
            }),
            "contains '..'",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_approve_all_runs_the_whole_hierarchy_and_each_rule_break_is_corrected() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    let cases = cases();
    for (index, case) in cases.iter().enumerate() {
        fake.push_routed(
            &case.route,
            tool_turn(
                &format!("toolu_bad_{index}"),
                case.tool,
                case.broken.clone(),
            ),
        );
        fake.push_routed(
            &case.route,
            tool_turn(
                &format!("toolu_good_{index}"),
                case.tool,
                case.fixed.clone(),
            ),
        );
    }

    let output = run_loopr(
        &dirs,
        &fake,
        &[
            "plan",
            "Add a --version flag",
            "--approve-all",
            "--settings",
            r#"{"max_concurrent_loops": 2, "plan_review_passes": 0, "spec_review": false}"#,
        ],
    )
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Every loop of the tree is in the summary, complete: 1 plan, 2 specs, 7 phases.
    let rows = scenario::all_complete_rows(&output);
    assert_eq!(rows.len(), 10, "{rows:#?}");
    assert!(
        stderr.contains("approved plan"),
        "progress goes to stderr: {stderr}"
    );
    // Three phases become runnable at once, but never more than two loops run together.
    assert_eq!(most_running_at_once(&stderr), 2, "{stderr}");

    // Each loop's first answer was refused with the rule it broke, and the second accepted.
    let requests = fake.requests();
    for case in &cases {
        let conversation: Vec<&RecordedRequest> = requests
            .iter()
            .filter(|request| first_user_text(&request.body).contains(&case.route))
            .collect();
        assert_eq!(
            conversation.len(),
            2,
            "{}: {} requests",
            case.route,
            conversation.len()
        );
        let refusal = &tool_results(&conversation[1].body)[0];
        assert_eq!(refusal["is_error"], true, "{}", case.route);
        let text = refusal["content"].as_str().expect("text");
        assert!(text.contains(case.complaint), "{}: {text}", case.route);
    }

    // The dependent spec started only after the spec it depends on completed.
    let position = |route: &str| {
        requests
            .iter()
            .enumerate()
            .filter(|(_, request)| first_user_text(&request.body).contains(route))
            .map(|(index, _)| index)
            .collect::<Vec<_>>()
    };
    let flag = position(&spec_route("version-flag"));
    let docs = position(&spec_route("version-docs"));
    assert!(
        docs[0] > flag[flag.len() - 1],
        "flag {flag:?} before docs {docs:?}"
    );

    // Every phase.md exists and renders its structured data.
    let phase_files = files_ending_with(&dirs.loopr_home, "/phase.md");
    assert_eq!(phase_files.len(), 7, "{phase_files:?}");
    for file in &phase_files {
        let markdown = std::fs::read_to_string(file).expect("phase.md");
        let json: Value = serde_json::from_slice(
            &std::fs::read(file.with_file_name("phase.json")).expect("json"),
        )
        .expect("parse");
        let title = json["title"].as_str().expect("title");
        assert!(
            markdown.starts_with(&format!("# Phase: {title}")),
            "{markdown}"
        );
        assert!(markdown.contains("1. Match --version before other arguments and print the version (`src/main.rs`, modify)"), "{markdown}");
        assert!(markdown.contains("```sh\ncargo test\n```"), "{markdown}");
    }
    assert_eq!(files_ending_with(&dirs.loopr_home, "/spec.md").len(), 2);

    // The corrected references are links: within plan.md, and from the readme phase into
    // its spec's spec.md, which exists and has the heading.
    let plan_md = files_ending_with(&dirs.loopr_home, "/plan.md");
    let plan_md = std::fs::read_to_string(&plan_md[0]).expect("plan.md");
    assert!(
        plan_md.contains(
            "**References:** [`#risks`](#risks), [`output:version-flag`](#spec-1-parse---version)"
        ),
        "{plan_md}"
    );
    assert!(
        plan_md.contains("\n## Risks\n") && plan_md.contains("\n### Spec 1: Parse --version\n")
    );
    let readme = phase_files
        .iter()
        .find(|file| {
            std::fs::read_to_string(file).is_ok_and(|md| md.starts_with("# Phase: Phase readme"))
        })
        .expect("the readme phase");
    let markdown = std::fs::read_to_string(readme).expect("phase.md");
    let link_start =
        markdown.find("[`#test-strategy`](").expect("a link") + "[`#test-strategy`](".len();
    let link = &markdown[link_start..link_start + markdown[link_start..].find(')').expect(")")];
    let (file, fragment) = link.split_once('#').expect("a fragment");
    assert_eq!(fragment, "test-strategy");
    assert!(
        file.starts_with("../../../../") && file.ends_with("/spec.md"),
        "{link}"
    );
    let spec_md = std::fs::read_to_string(readme.parent().expect("dir").join(file))
        .expect("the linked spec.md");
    assert!(spec_md.contains("# Spec: Spec version-docs\n"), "{spec_md}");
    assert!(spec_md.contains("\n## Test Strategy\n"), "{spec_md}");
    assert!(
        markdown.contains("[`#objective`](#objective)"),
        "{markdown}"
    );

    // `loopr status` reads the same records without running anything.
    let requests_before = fake.requests().len();
    let status = run_loopr(&dirs, &fake, &["status"]).await;
    assert!(status.status.success());
    let table = String::from_utf8_lossy(&status.stdout);
    assert_eq!(table.lines().count(), 11, "{table}");
    assert!(
        table.contains("version-docs") && table.contains("man-page"),
        "{table}"
    );
    assert_eq!(
        fake.requests().len(),
        requests_before,
        "status sends nothing to the model"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_without_approval_stops_at_the_gate_and_fails_the_exit_code() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    fake.push(tool_turn("toolu_plan", "create_plan", valid_plan()));
    let output = run_loopr_plan(&dirs, &fake).await;
    assert!(!output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("awaiting_approval"), "{stdout}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not every loop completed"), "{stderr}");

    // The plan's transcript, as its journal holds it.
    let id = awaiting_plan_id(&stdout);
    let transcript = run_loopr(&dirs, &fake, &["transcript", &id]).await;
    assert!(transcript.status.success(), "{transcript:?}");
    let text = String::from_utf8_lossy(&transcript.stdout);
    assert!(text.starts_with(&format!("# plan loop {id}\n")), "{text}");
    assert!(text.contains("### Turn 1"), "{text}");
    assert!(text.contains("<details><summary>→ create_plan ("), "{text}");
    let unknown = run_loopr(
        &dirs,
        &fake,
        &["transcript", "20990101-000000-000-0000000000"],
    )
    .await;
    assert!(!unknown.status.success());
    let error = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        error.contains("`loopr status` lists the project's loops"),
        "{error}"
    );
}

/// The id of the plan that awaits approval in a summary table.
fn awaiting_plan_id(table: &str) -> String {
    table
        .lines()
        .find(|line| line.contains("awaiting_approval"))
        .and_then(|line| line.split_whitespace().next())
        .expect("the plan's id")
        .to_owned()
}

/// Text from outside (a project file a tool read, the model's words, a command's output)
/// reaches the terminal with its control characters shown, never obeyed: an escape sequence
/// in a README could otherwise set the clipboard (OSC 52), clear the screen or hide lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_terminal_never_gets_a_control_character_from_outside() {
    const OSC_52: &str = "\u{1b}]52;c;Y3VybCBldmlsIHwgc2g=\u{7}";
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    std::fs::write(
        dirs.project.join("README.md"),
        format!("# sample{OSC_52}\u{1b}[2J\r\u{9b}31m\u{202e}\n"),
    )
    .expect("readme");
    fake.push(tool_turn(
        "toolu_read",
        "read_file",
        json!({ "path": "README.md" }),
    ));
    fake.push(tool_turn(
        "toolu_plan",
        "create_plan",
        with(valid_plan(), |plan| {
            plan["title"] = json!(format!("Add a flag{OSC_52}"));
        }),
    ));
    let output = run_loopr_plan(&dirs, &fake).await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let id = stdout
        .lines()
        .find(|line| line.contains("awaiting_approval"))
        .and_then(|line| line.split_whitespace().next())
        .expect("the plan's id")
        .to_owned();
    let transcript = run_loopr(&dirs, &fake, &["transcript", &id]).await;
    let transcript_text = String::from_utf8_lossy(&transcript.stdout);
    assert!(
        transcript_text.contains("# sample^[]52;c;Y3VybCBldmlsIHwgc2g=^G^[[2J<U+009B>31m<U+202E>"),
        "{transcript_text}"
    );
    for (what, bytes) in [
        ("plan's stdout", &output.stdout),
        ("plan's stderr", &output.stderr),
        ("transcript", &transcript.stdout),
        ("transcript's stderr", &transcript.stderr),
    ] {
        let text = String::from_utf8_lossy(bytes);
        let obeyed: Vec<char> = text
            .chars()
            .filter(|c| {
                (c.is_control() && *c != '\n' && *c != '\t')
                    || ('\u{202a}'..='\u{202e}').contains(c)
            })
            .collect();
        assert!(obeyed.is_empty(), "{what} holds {obeyed:?}: {text}");
    }
}

/// The COST cell of the row of loop type `loop_type` in a summary table.
fn cost_of(table: &str, loop_type: &str) -> String {
    cell_of(table, loop_type, "COST")
}

/// The cell in column `name` of the first row of loop type `loop_type` in a summary table.
fn cell_of(table: &str, loop_type: &str, name: &str) -> String {
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let column = header
        .iter()
        .position(|column| *column == name)
        .unwrap_or_else(|| panic!("no {name} column: {table}"));
    let row = table
        .lines()
        .skip(1)
        .find(|line| line.split_whitespace().nth(1) == Some(loop_type))
        .unwrap_or_else(|| panic!("no {loop_type} row: {table}"));
    row.split_whitespace()
        .nth(column)
        .unwrap_or_else(|| panic!("no {name}: {row}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summary_and_the_status_show_what_each_loop_cost() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    fake.push(
        TurnBuilder::new()
            .tool_use("toolu_plan", "create_plan", valid_plan())
            .usage(900, 300)
            .cache_usage(1_000, 2_000)
            .reply(),
    );
    let output = run_loopr(
        &dirs,
        &fake,
        &[
            "plan",
            "Add a --version flag",
            "--settings",
            r#"{"plan_review_passes": 0,
                "prices": {"claude-sonnet-4-5": {"input": 2, "output": 10, "cache_write": 4, "cache_read": 0.5}}}"#,
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    // 900 input at $2, 300 output at $10, 1000 cache writes at $4, 2000 cache reads at $0.50
    // per million: 0.0018 + 0.003 + 0.004 + 0.001.
    assert_eq!(cost_of(&stdout, "plan"), "$0.0098", "{stdout}");

    // `loopr status` prices each loop as it started, or with the prices it is given.
    let status = run_loopr(&dirs, &fake, &["status"]).await;
    let table = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{table}");
    assert_eq!(cost_of(&table, "plan"), "$0.0098", "{table}");
    let repriced = run_loopr(
        &dirs,
        &fake,
        &[
            "status",
            "--settings",
            r#"{"prices": {"claude-sonnet": {"input": 20, "output": 100}}}"#,
        ],
    )
    .await;
    let table = String::from_utf8_lossy(&repriced.stdout);
    // Cache prices left out cost what input does: 3900 at $20, 300 at $100.
    assert_eq!(cost_of(&table, "plan"), "$0.108", "{table}");
    let refused = run_loopr(
        &dirs,
        &fake,
        &[
            "status",
            "--settings",
            r#"{"prices": {"m": {"input": -1, "output": 1}}}"#,
        ],
    )
    .await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("prices[\"m\"].input is -1"),
        "{stderr}"
    );
}

/// `loopr plan "Add a --version flag" --settings <settings>`, to adjust before running it.
fn plan_command(dirs: &TestDirs, fake: &FakeLlm, settings: &str) -> tokio::process::Command {
    scenario::loopr_command(
        dirs,
        fake,
        &["plan", "Add a --version flag", "--settings", settings],
    )
}

/// `loopr plan` with `settings` against `fake` speaking OpenAI's chat completions.
async fn openai_plan(dirs: &TestDirs, fake: &FakeLlm, settings: &str) -> std::process::Output {
    plan_command(dirs, fake, settings)
        .env("OPENAI_BASE_URL", format!("{}/v1", fake.base_url()))
        .output()
        .await
        .expect("run loopr plan")
}

/// A turn calling `name` as llama.cpp's servers answer: a model nobody priced, no usage
/// reported.
fn llama_call(id: &str, name: &str, input: Value) -> fake_llm::Reply {
    TurnBuilder::new()
        .model("gemma3")
        .tool_use(id, name, input)
        .without_usage()
        .reply()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_a_server_does_not_report_are_estimated_shown_as_such_and_priced_unknown() {
    let fake = FakeLlm::start_wire(fake_llm::Wire::OpenAi).await;
    let dirs = TestDirs::new();
    fake.push(llama_call("call_plan", "create_plan", valid_plan()));
    let output = openai_plan(
        &dirs,
        &fake,
        r#"{"provider": "openai", "model": "gemma3", "plan_review_passes": 0}"#,
    )
    .await;
    let summary = String::from_utf8_lossy(&output.stdout);
    let status = run_loopr(&dirs, &fake, &["status"]).await;
    let stored = String::from_utf8_lossy(&status.stdout);
    for table in [&summary, &stored] {
        for column in ["IN", "OUT"] {
            let tokens = cell_of(table, "plan", column);
            assert!(
                tokens.starts_with('~') && tokens != "~0",
                "{column} is an estimate: {table}"
            );
        }
        assert_eq!(cost_of(table, "plan"), "?", "never $0.0000: {table}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_estimate_under_a_text_protocol_counts_each_call_once_as_it_was_written() {
    let fake = FakeLlm::start_wire(fake_llm::Wire::OpenAi).await;
    let protocol = loopr::llm::text_protocol::TextProtocol::new(
        loopr::llm::ToolProtocol::ToolCalls,
        loopr::llm::ToolFormat::Json,
    )
    .expect("a text protocol");
    let call = loopr::llm::text_protocol::render_call(&protocol, "create_plan", &valid_plan());
    let answer = format!("The plan follows.\n\n{call}");
    fake.push(
        TurnBuilder::new()
            .model("gemma3")
            .text(&answer)
            .without_usage()
            .reply(),
    );
    let dirs = TestDirs::new();
    let output = openai_plan(
        &dirs,
        &fake,
        r#"{"provider": "openai", "model": "gemma3", "tool_protocol": "tool_calls", "plan_review_passes": 0}"#,
    )
    .await;
    let summary = String::from_utf8_lossy(&output.stdout);
    // What went over the wire is the answer's text alone (3 bytes a token, 24 for the block).
    let sent = (answer.len() as u64 + 24).div_ceil(3);
    assert_eq!(
        cell_of(&summary, "plan", "OUT"),
        format!("~{sent}"),
        "{summary}{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_budget_counts_the_tokens_estimated_for_a_server_that_reports_none() {
    let fake = FakeLlm::start_wire(fake_llm::Wire::OpenAi).await;
    let dirs = TestDirs::new();
    fake.push(llama_call("call_list", "list_files", json!({})));
    fake.push(llama_call("call_plan", "create_plan", valid_plan()));
    // The first question alone (system prompt, tools, task) is well over 100 tokens.
    let output = openai_plan(
        &dirs,
        &fake,
        r#"{"provider": "openai", "model": "gemma3", "plan_review_passes": 0,
            "budget": {"tokens": 100}}"#,
    )
    .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        fake.requests().len(),
        1,
        "the tree paused before its second question: {stdout}\n{stderr}"
    );
    assert_eq!(cell_of(&stdout, "plan", "STATUS"), "paused", "{stdout}");
    assert!(
        stdout.contains("reached its budget (~"),
        "the budget says its count is an estimate: {stdout}"
    );
}

/// The last message of a request (what the model was told after its answer), as JSON text.
fn last_message(request: &RecordedRequest) -> String {
    request.body["messages"]
        .as_array()
        .and_then(|messages| messages.last())
        .map(Value::to_string)
        .unwrap_or_default()
}

/// Runs `loopr plan` (turn limit 8) against eight scripted `answers`; returns the requests the
/// fake got and the summary table.
async fn plan_answered_by(
    answers: impl Fn(usize) -> fake_llm::Reply,
) -> (Vec<RecordedRequest>, String) {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    for turn in 1..=8 {
        fake.push(answers(turn));
    }
    let output = plan_command(&dirs, &fake, r#"{"plan_review_passes": 0, "max_turns": 8}"#)
        .output()
        .await
        .expect("run loopr plan");
    assert!(!output.status.success());
    (
        fake.requests(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_failing_call_again_and_again_ends_the_loop_early_saying_what_failed() {
    // A small local model sent this one broken plan seven times in a row.
    let broken = with(valid_plan(), |plan| {
        plan["specs"][1]["dependencies"] = json!(["auth"]);
    });
    let (requests, table) =
        plan_answered_by(|turn| tool_turn(&format!("call_{turn}"), "create_plan", broken.clone()))
            .await;
    assert_eq!(requests.len(), 5, "stopped at the fifth failure: {table}");
    for (index, request) in requests.iter().enumerate().skip(1) {
        let told = last_message(request);
        let warned = told.contains(
            "This is the third time this exact call failed with the same error; do something \
             different",
        ) || told.contains("This is the fourth time this exact call failed");
        assert_eq!(warned, index >= 3, "question {}: {told}", index + 1);
    }
    assert_eq!(cell_of(&table, "plan", "STATUS"), "failed", "{table}");
    let error = table.lines().nth(1).unwrap_or_default();
    assert!(
        error.contains("stopped early: the same create_plan call ({\"")
            && error.contains("failed with the same error 5 times in a row: ")
            && error.contains("auth")
            && !error.contains("turn limit"),
        "says what kept failing: {table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_that_call_nothing_again_and_again_end_the_loop_early() {
    let (requests, table) = plan_answered_by(|_| {
        TurnBuilder::new()
            .text("I would start by adding a flag.")
            .reply()
    })
    .await;
    assert_eq!(requests.len(), 5, "{table}");
    assert!(
        last_message(&requests[3])
            .contains("This is the third answer in a row that ran no tool call"),
        "{}",
        last_message(&requests[3])
    );
    assert!(
        table.contains("stopped early: the model answered 5 times in a row without a call that ran; it was told each time: You have not called create_plan yet."),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_answer_shows_its_tokens_growing_on_stderr() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    fake.push(slow_plan_turn());
    let output = run_loopr_plan(&dirs, &fake).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let counts = answer_token_counts(stderr.lines());
    assert!(
        counts.len() >= 3 && counts.len() < SLOW_WORDS / 3,
        "a few reports, not one per piece: {stderr}"
    );
    assert!(
        counts.windows(2).all(|pair| pair[0] < pair[1]),
        "growing: {stderr}"
    );
    assert!(
        stderr.contains(": model is answering… ~"),
        "the loop says what it waits for: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_waiting_for_review_stops_the_run_instead_of_hanging_it() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    let mut plan = valid_plan();
    plan["specs"][0]["name"] = json!("version-flag");
    plan["specs"][1]["name"] = json!("version-docs");
    plan["specs"][1]["dependencies"] = json!(["version-flag"]);
    fake.push_routed(plan_route(), tool_turn("plan", "create_plan", plan));
    let phases = ["parse-flag", "print-version", "exit-code"];
    fake.push_routed(
        &spec_route("version-flag"),
        tool_turn("spec", "create_spec", spec_input("version-flag", &phases)),
    );
    let settings = r#"{"review_gates": ["spec"], "plan_review_passes": 0, "spec_review": false}"#;
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        run_loopr(
            &dirs,
            &fake,
            &["plan", "Add a --version flag", "--settings", settings],
        ),
    )
    .await
    .expect("loopr plan returns although version-docs can never start");
    assert!(!output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    let status_of = |name: &str| {
        stdout
            .lines()
            .find(|line| line.contains(name))
            .map(|line| {
                line.split_whitespace()
                    .nth(3)
                    .unwrap_or_default()
                    .to_owned()
            })
            .unwrap_or_default()
    };
    assert_eq!(status_of("version-flag"), "awaiting_approval", "{stdout}");
    assert_eq!(status_of("version-docs"), "pending", "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_settings_are_reported_with_the_fix() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    let output = run_loopr(
        &dirs,
        &fake,
        &["plan", "x", "--settings", r#"{"max_turn": 3}"#],
    )
    .await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("max_turn") && stderr.contains("--settings"),
        "{stderr}"
    );
    assert!(fake.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_settings_are_read_and_checked_from_settings() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    let settings = r#"{"agents": {"claude": {"command": "claude-agent-acp", "env": {"ANTHROPIC_API_KEY": "sk-ant-never-shown"}}}, "code_agent": "codex"}"#;
    let output = run_loopr(&dirs, &fake, &["plan", "x", "--settings", settings]).await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "code_agent is \"codex\", which agents does not configure (the configured agents \
             are claude); add it to agents or unset code_agent"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("sk-ant-never-shown"), "{stderr}");
    let output = run_loopr(
        &dirs,
        &fake,
        &[
            "plan",
            "x",
            "--settings",
            r#"{"agents": {"claude": {"command": ""}}}"#,
        ],
    )
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("agents.claude.command is empty; name the agent's ACP program"),
        "{stderr}"
    );
    assert!(fake.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_that_holds_the_state_or_home_is_refused() {
    let fake = FakeLlm::start().await;
    let mut dirs = TestDirs::new();
    // The state directory is inside HOME, which holds it: run from HOME, then from its parent.
    for root in [dirs.home.clone(), dirs.temp.path().to_path_buf()] {
        dirs.project = root.clone();
        let output = run_loopr(&dirs, &fake, &["plan", "Add a flag"]).await;
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("holds Loopr's own state") && stderr.contains("root_markers"),
            "{}: {stderr}",
            root.display()
        );
    }
    assert!(fake.requests().is_empty());
    let state: Vec<_> = scenario::files_under(&dirs.loopr_home)
        .into_iter()
        .filter(|path| !path.starts_with(dirs.loopr_home.join("hosts")))
        .collect();
    assert!(state.is_empty(), "no project state was made: {state:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_started_together_on_a_new_project_all_plan() {
    // Several loopr processes open the project's new database at the same moment (its
    // migration and WAL switch race) and create loops at once (their ids must not collide).
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    const HOSTS: usize = 6;
    for index in 0..HOSTS {
        fake.push(tool_turn(
            &format!("plan{index}"),
            "create_plan",
            valid_plan(),
        ));
    }
    let runs: Vec<_> = (0..HOSTS)
        .map(|index| {
            scenario::loopr_command(
                &dirs,
                &fake,
                &[
                    "plan",
                    &format!("Change number {index}"),
                    "--settings",
                    r#"{"plan_review_passes": 0}"#,
                ],
            )
            .output()
        })
        .collect();
    for output in futures::future::join_all(runs).await {
        let output = output.expect("run loopr");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("duplicate column"), "{stderr}");
        assert!(!stderr.contains("database is locked"), "{stderr}");
        assert!(stderr.contains("awaiting_approval"), "{stderr}");
    }
    let status = run_loopr(&dirs, &fake, &["status"]).await;
    let table = String::from_utf8_lossy(&status.stdout);
    assert_eq!(table.matches("awaiting_approval").count(), HOSTS, "{table}");
}

/// The plan loop of a plan reviewed twice: the plan, a pass that approves it, a pass that
/// asks for a revision, and the revised plan (whose risks differ).
fn reviewed_plan_script() -> Vec<(&'static str, Value)> {
    let mut plan = valid_plan();
    plan["specs"] = json!([{
        "name": "version-flag",
        "title": "Parse --version",
        "description": "Teach src/main.rs to recognise --version and print CARGO_PKG_VERSION, then exit 0.",
        "dependencies": []
    }]);
    let mut revised_plan = plan.clone();
    revised_plan["risks"] = json!(["Clap may already reserve --version; check before adding it"]);
    let review = |verdict: &str, issues: Value| json!({"verdict": verdict, "issues": issues});
    vec![
        ("create_plan", plan),
        ("review_plan", review("approve", json!([]))),
        (
            "review_plan",
            review(
                "revise",
                json!(["The risk of a clash with clap is missing"]),
            ),
        ),
        ("create_plan", revised_plan),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_go_through_review_passes_and_specs_through_one_judged_review() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    let script = reviewed_plan_script();
    let revised_plan = script[3].1.clone();
    for ((tool, input), id) in script.into_iter().zip(["p1", "p2", "p3", "p4"]) {
        fake.push_routed(plan_route(), tool_turn(id, tool, input));
    }
    let review = |verdict: &str, issues: Value| json!({"verdict": verdict, "issues": issues});
    let phases = ["parse-flag", "print-version", "exit-code"];
    let spec = spec_input("version-flag", &phases);
    let mut revised_spec = spec.clone();
    revised_spec["acceptance_criteria"] = json!([
        "`sample --version` prints `sample 0.3.1`",
        "it exits with status 0"
    ]);
    for (id, tool, input) in [
        ("s1", "create_spec", spec),
        (
            "s2",
            "review_spec",
            review(
                "revise",
                json!(["The exit status is not testable as written"]),
            ),
        ),
        ("s3", "create_spec", revised_spec.clone()),
    ] {
        fake.push_routed(&spec_route("version-flag"), tool_turn(id, tool, input));
    }
    for phase in phases {
        fake.push_routed(
            &phase_route(phase),
            tool_turn(phase, "create_phase", phase_input(phase)),
        );
    }

    let output = run_loopr(
        &dirs,
        &fake,
        &[
            "plan",
            "Add a --version flag",
            "--approve-all",
            "--settings",
            r#"{"plan_review_passes": 2}"#,
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "stderr:\n{stderr}\nstdout:\n{stdout}"
    );

    // Each pass asked through the review tool, naming its focus.
    let requests = fake.requests();
    let plan_requests: Vec<&RecordedRequest> = requests
        .iter()
        .filter(|request| first_user_text(&request.body).contains(plan_route()))
        .collect();
    assert_eq!(plan_requests.len(), 4);
    let asked = |request: &RecordedRequest| {
        let last = request.body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .cloned()
            .unwrap_or_default();
        last["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|block| block["text"].as_str().map(str::to_owned))
            .collect::<String>()
    };
    assert!(
        asked(plan_requests[1]).contains("Review pass 1 of 2: completeness"),
        "{}",
        asked(plan_requests[1])
    );
    assert!(
        asked(plan_requests[2]).contains("Review pass 2 of 2: correctness"),
        "{}",
        asked(plan_requests[2])
    );
    let tools: Vec<&str> = plan_requests[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert!(tools.contains(&"review_plan"), "{tools:?}");

    // The stored plan is the revision, iteration 2, after 2 passes; the spec after its judge.
    let row = |name: &str| {
        stdout
            .lines()
            .find(|line| line.contains(name))
            .unwrap_or_default()
            .to_owned()
    };
    let plan_row = stdout.lines().nth(1).expect("plan row");
    let fields: Vec<&str> = plan_row.split_whitespace().collect();
    assert_eq!(
        (fields[1], fields[4], fields[5]),
        ("plan", "2", "2"),
        "{stdout}"
    );
    let spec_fields: Vec<String> = row("version-flag")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        (spec_fields[4].as_str(), spec_fields[5].as_str()),
        ("2", "1"),
        "{stdout}"
    );
    let plan_json = files_ending_with(&dirs.loopr_home, "/plan.json");
    assert_eq!(
        plan_json.len(),
        2,
        "both iterations are kept: {plan_json:?}"
    );
    let current: Value =
        serde_json::from_slice(&std::fs::read(&plan_json[1]).expect("read")).expect("json");
    assert_eq!(current["risks"], revised_plan["risks"]);
    let spec_json = files_ending_with(&dirs.loopr_home, "/spec.json");
    let spec: Value =
        serde_json::from_slice(&std::fs::read(&spec_json[1]).expect("read")).expect("json");
    assert_eq!(
        spec["acceptance_criteria"],
        revised_spec["acceptance_criteria"]
    );
}

/// The most loops running at the same time, from the status lines `loopr plan` prints.
fn most_running_at_once(stderr: &str) -> usize {
    let mut running = std::collections::HashSet::new();
    let mut most = 0;
    for line in stderr.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let ["loopr:", "plan" | "spec" | "phase", id, status] = words.as_slice() else {
            continue;
        };
        if *status == "running" {
            running.insert(id.to_string());
        } else {
            running.remove(*id);
        }
        most = most.max(running.len());
    }
    most
}

/// `web_fetch` in a real host, with fetches approved automatically: this machine (by address,
/// by name and in IPv6 form), the private network and the cloud metadata address are refused,
/// so is a redirect served from this machine, and nothing connects to the listener the test
/// holds open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_fetch_refuses_this_machine_the_local_network_and_metadata() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    let refused = [
        (
            format!("http://127.0.0.1:{port}/"),
            "127.0.0.1 is a loopback address",
        ),
        (format!("http://localhost:{port}/"), "localhost resolves to"),
        (
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            "loopback address",
        ),
        (
            format!("http://127.0.0.1:{port}/redirect?to=http://169.254.169.254/"),
            "127.0.0.1 is a loopback address",
        ),
        (
            "http://10.1.2.3/".to_owned(),
            "10.1.2.3 is a private network address",
        ),
        (
            "http://169.254.169.254/latest/meta-data/".to_owned(),
            "169.254.169.254 is the cloud metadata address",
        ),
    ];
    let mut fetches = fake_llm::TurnBuilder::new().text("Let me read the docs.");
    for (index, (url, _)) in refused.iter().enumerate() {
        fetches = fetches.tool_use(
            &format!("toolu_fetch_{index}"),
            "web_fetch",
            json!({"url": url}),
        );
    }
    fake.push_routed(plan_route(), fetches.usage(300, 60).reply());
    fake.push_routed(
        plan_route(),
        tool_turn("toolu_plan", "create_plan", valid_plan()),
    );

    let output = run_loopr(
        &dirs,
        &fake,
        &[
            "plan",
            "Add a --version flag",
            "--settings",
            r#"{"plan_review_passes": 0, "web_fetch": true, "approvals": {"fetch": "auto"}}"#,
        ],
    )
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("awaiting_approval"), "{stdout}\n{stderr}");

    let requests = fake.requests();
    let answered = requests
        .iter()
        .find(|request| {
            request.body["messages"]
                .as_array()
                .is_some_and(|m| m.len() == 3)
        })
        .expect("the model got the fetch results");
    let results = tool_results(&answered.body);
    assert_eq!(results.len(), refused.len());
    for (result, (url, named)) in results.iter().zip(&refused) {
        let content = result["content"].as_str().unwrap_or_default();
        assert_eq!(result["is_error"], true, "{url}: {content}");
        assert!(content.contains(named), "{url}: {content}");
        assert!(
            content.contains("only public internet addresses are fetched"),
            "{url}: {content}"
        );
    }
    use futures::FutureExt;
    assert!(
        listener.accept().now_or_never().is_none(),
        "nothing connected to this machine's listener"
    );
}

/// Kills, when a failed test unwinds, the processes it saw start that still run as started,
/// so that a failure leaves no `sleep` behind.
struct KillLeftovers {
    pids: Vec<i32>,
    argv: Vec<String>,
}

impl Drop for KillLeftovers {
    fn drop(&mut self) {
        let argv: Vec<&str> = self.argv.iter().map(String::as_str).collect();
        for pid in nvim::processes_running(&argv) {
            if self.pids.contains(&pid) {
                // SAFETY: kill sends SIGKILL to a process this test's command started.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }
}

/// Whether process `pid` ends within `limit`, waited for through a pidfd (no polling).
async fn exits_within(pid: i32, limit: std::time::Duration) -> bool {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return true;
    }
    let fd = i32::try_from(fd).expect("fd");
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    let owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: the descriptor is owned by the AsyncFd and registered nowhere else.
    let async_fd = unsafe { tokio::io::unix::AsyncFd::register(owned) }.expect("AsyncFd");
    tokio::time::timeout(limit, async_fd.readable())
        .await
        .is_ok()
}

/// SIGINT or SIGTERM of `loopr run` while the model's command runs two background `sleep`s:
/// the CLI stops its loop, exits with 128 + the signal and a one-line message, and no process
/// the command started is left running.
async fn a_signal_stops_the_cli_and_every_command_it_started(signal: i32, status: i32, name: &str) {
    use tokio::io::AsyncReadExt;

    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    scenario::plan_code_project(&fake, &dirs, "true").await;
    // Unique to this test run, so only the command's own sleeps match.
    let seconds = format!("1001.{}{signal}", std::process::id());
    let fifo = dirs.project.join("started.fifo");
    let path = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("path");
    // SAFETY: mkfifo takes a NUL-terminated path and a mode.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0, "mkfifo");
    // Opened for reading and writing so that it never reads as closed before the command
    // writes; the command's write then says both sleeps have started.
    let mut started = tokio::net::unix::pipe::OpenOptions::new()
        .read_write(true)
        .open_receiver(&fifo)
        .expect("open the FIFO");
    let command = format!("sleep {seconds} & sleep {seconds} & echo started > started.fifo; wait");
    fake.push_routed(
        "Implement this phase.\n\n# Phase: Phase print-version",
        fake_llm::TurnBuilder::new()
            .tool_use("toolu_run", "run_command", json!({ "command": command }))
            .usage(300, 40)
            .reply(),
    );
    let mut cli = scenario::loopr_command(&dirs, &fake, &["run", "print-version", "--yes"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start loopr run");

    // One line once both sleeps have started; read byte by byte up to its end.
    let mut line = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(60), async {
        let mut byte = [0u8; 1];
        while started.read_exact(&mut byte).await.is_ok() && byte[0] != b'\n' {
            line.push(byte[0]);
        }
    })
    .await
    .expect("the command starts its sleeps");
    // Host pids, from the process tree: inside the sandbox the command's are other numbers.
    let cli_pid = i32::try_from(cli.id().expect("pid")).expect("pid");
    let sleeps = nvim::descendants(cli_pid);
    assert!(!sleeps.is_empty(), "the command runs");
    let _cleanup = KillLeftovers {
        pids: sleeps.clone(),
        argv: vec!["sleep".to_owned(), seconds.clone()],
    };

    // SAFETY: kill sends a signal to the CLI this test started.
    assert_eq!(unsafe { libc::kill(cli_pid, signal) }, 0);
    let output = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        let mut stderr = String::new();
        if let Some(mut pipe) = cli.stderr.take() {
            pipe.read_to_string(&mut stderr).await.expect("stderr");
        }
        (cli.wait().await.expect("wait"), stderr)
    })
    .await
    .expect("the CLI exits after the signal");
    let (exit, stderr) = output;
    assert_eq!(exit.code(), Some(status), "{exit:?}\n{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!("loopr: stopped by {name}")) && last.contains("loopr resume"),
        "{stderr}"
    );
    for sleep in sleeps {
        assert!(
            exits_within(sleep, std::time::Duration::from_secs(5)).await,
            "process {sleep} of the command outlived the CLI"
        );
    }
    assert_eq!(
        nvim::processes_running(&["sleep", &seconds]),
        Vec::<i32>::new()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_cli_and_every_command_it_started() {
    a_signal_stops_the_cli_and_every_command_it_started(libc::SIGTERM, 143, "SIGTERM").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_stops_the_cli_and_every_command_it_started() {
    a_signal_stops_the_cli_and_every_command_it_started(libc::SIGINT, 130, "SIGINT").await;
}

/// The provider settings are the same keys in the CLI's `--settings`: a plan runs against an
/// Ollama server named by `OLLAMA_HOST`, with the model and context window from the JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_settings_work_in_the_clis_settings() {
    let fake = FakeLlm::start_wire(fake_llm::Wire::Ollama).await;
    fake.push(tool_turn("p1", "create_plan", valid_plan()));
    let dirs = TestDirs::new();
    let output = scenario::loopr_command(
        &dirs,
        &fake,
        &[
            "plan",
            "Add a --version flag",
            "--settings",
            r#"{"provider": "ollama", "model": "qwen-cli", "num_ctx": 8192, "plan_review_passes": 0}"#,
        ],
    )
    .env("OLLAMA_HOST", fake.addr().to_string())
    .output()
    .await
    .expect("run loopr plan");
    let requests = fake.requests();
    assert_eq!(
        requests.len(),
        1,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(requests[0].path, "/api/chat");
    assert_eq!(requests[0].body["model"], "qwen-cli");
    assert_eq!(requests[0].body["options"]["num_ctx"], 8192);
    // The plan waits at its review gate: the run stops there, as with Anthropic.
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("awaiting_approval"), "{stdout}");

    let stderr = refused_plan(&dirs, &fake, r#"{"provider": "ollama"}"#).await;
    assert!(stderr.contains("provider ollama needs a model"), "{stderr}");
}

/// Runs `loopr plan` with `settings` that must be refused before anything is sent; returns
/// what it printed on stderr.
async fn refused_plan(dirs: &TestDirs, fake: &FakeLlm, settings: &str) -> String {
    let sent = fake.requests().len();
    let refused = scenario::loopr_command(dirs, fake, &["plan", "Another", "--settings", settings])
        .output()
        .await
        .expect("run loopr plan");
    assert!(!refused.status.success());
    assert_eq!(fake.requests().len(), sent, "nothing is sent");
    String::from_utf8_lossy(&refused.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_tool_protocol_works_from_the_clis_settings() {
    let fake = FakeLlm::start_wire(fake_llm::Wire::Ollama).await;
    let protocol = loopr::llm::text_protocol::TextProtocol::new(
        loopr::llm::ToolProtocol::ToolCalls,
        loopr::llm::ToolFormat::Json,
    )
    .expect("a text protocol");
    let call = loopr::llm::text_protocol::render_call(&protocol, "create_plan", &valid_plan());
    fake.push(
        fake_llm::TurnBuilder::new()
            .text(&format!("The plan follows.\n\n{call}"))
            .reply(),
    );
    let dirs = TestDirs::new();
    let output = scenario::loopr_command(
        &dirs,
        &fake,
        &[
            "plan",
            "Add a --version flag",
            "--settings",
            r#"{"provider": "ollama", "model": "qwen-cli", "tool_protocol": "tool_calls", "plan_review_passes": 0}"#,
        ],
    )
    .env("OLLAMA_HOST", fake.addr().to_string())
    .output()
    .await
    .expect("run loopr plan");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("awaiting_approval"),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let body = &fake.requests()[0].body;
    assert!(body.get("tools").is_none(), "{body:#}");
    let system = body["messages"][0]["content"]
        .as_str()
        .expect("system prompt");
    assert!(system.contains("## Tool Calls"), "{system}");

    let stderr = refused_plan(
        &dirs,
        &fake,
        r#"{"model": "m", "tool_protocol": "function_calls"}"#,
    )
    .await;
    assert!(
        stderr.contains("option tool_protocol: unknown variant"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_passes_work_through_a_text_protocol() {
    let protocol = loopr::llm::text_protocol::TextProtocol::new(
        loopr::llm::ToolProtocol::Markdown,
        loopr::llm::ToolFormat::Yaml,
    )
    .expect("a text protocol");
    let answer = |tool: &str, input: Value| {
        let call = loopr::llm::text_protocol::render_call(&protocol, tool, &input);
        fake_llm::TurnBuilder::new()
            .text(&format!("# Thinking\nDone looking.\n\n{call}"))
            .reply()
    };
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    for (tool, input) in reviewed_plan_script() {
        fake.push_routed(plan_route(), answer(tool, input));
    }
    let phases = ["parse-flag", "print-version", "exit-code"];
    fake.push_routed(
        &spec_route("version-flag"),
        answer("create_spec", spec_input("version-flag", &phases)),
    );
    for phase in phases {
        fake.push_routed(
            &phase_route(phase),
            answer("create_phase", phase_input(phase)),
        );
    }

    let output = run_loopr(
        &dirs,
        &fake,
        &[
            "plan",
            "Add a --version flag",
            "--approve-all",
            "--settings",
            r#"{"plan_review_passes": 2, "spec_review": false, "tool_protocol": "markdown", "tool_format": "yaml"}"#,
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stderr:\n{}\nstdout:\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let requests = fake.requests();
    let plan_requests: Vec<&RecordedRequest> = requests
        .iter()
        .filter(|request| first_user_text(&request.body).contains(plan_route()))
        .collect();
    assert_eq!(plan_requests.len(), 4);
    let system = plan_requests[1].body["system"][0]["text"]
        .as_str()
        .expect("system");
    assert!(
        system.contains("review_plan"),
        "the review tool is described: {system}"
    );
    let last_text = |request: &RecordedRequest| {
        request.body["messages"]
            .as_array()
            .and_then(|messages| messages.last())
            .map(|message| message["content"].to_string())
            .unwrap_or_default()
    };
    assert!(
        last_text(plan_requests[1]).contains("Review pass 1 of 2"),
        "{}",
        last_text(plan_requests[1])
    );
    let plan_row = stdout.lines().nth(1).expect("plan row");
    let fields: Vec<&str> = plan_row.split_whitespace().collect();
    assert_eq!(
        (fields[1], fields[4], fields[5]),
        ("plan", "2", "2"),
        "the revision after two passes: {stdout}"
    );
}

/// The context budget of the tests below, in tokens, with only the latest turn kept whole.
const BUDGET: usize = 30_000;

/// A project with a file whose `read_file` result is about 14 KB (300 numbered lines), a
/// fake model that reads it `reads` times, and the settings of a 30,000-token budget.
fn large_reads(fake: &FakeLlm, reads: usize) -> (TestDirs, String) {
    for read in 0..reads {
        fake.push(tool_turn(
            &format!("read{read}"),
            "read_file",
            json!({"path": "big.txt"}),
        ));
    }
    let dirs = TestDirs::new();
    let file: String = (1..=300)
        .map(|line| format!("line {line:04}: the quick brown fox jumps over it\n"))
        .collect();
    std::fs::write(dirs.project.join("big.txt"), &file).expect("write big.txt");
    let settings = format!(
        r#"{{"plan_review_passes": 0, "context_budget": {BUDGET}, "context_keep_turns": 1}}"#
    );
    (dirs, settings)
}

/// The contents of every tool result in a recorded request.
fn sent_results(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .flat_map(|message| message["content"].as_array().cloned().unwrap_or_default())
        .filter(|block| block["type"] == "tool_result")
        .map(|block| block["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_with_large_tool_outputs_over_many_turns_stays_under_its_context_budget() {
    const READS: usize = 16;
    let fake = FakeLlm::start().await;
    let (dirs, settings) = large_reads(&fake, READS);
    fake.push(tool_turn("plan", "create_plan", valid_plan()));
    let output = run_loopr(
        &dirs,
        &fake,
        &["plan", "Add a --version flag", "--settings", &settings],
    )
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let requests = fake.requests();
    assert_eq!(requests.len(), READS + 1, "{stderr}");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("awaiting_approval"),
        "{stderr}"
    );

    // Loopr estimates 3 bytes a token; the body is what the estimate is of, with the wire's
    // framing and escapes (under a tenth) on top. Sent whole, the last request would be
    // about 250 KB.
    let largest = requests.iter().map(|r| r.body_len).max().unwrap_or(0);
    assert!(
        largest <= BUDGET * 3 * 11 / 10,
        "a request of {largest} bytes passed the budget of {BUDGET} tokens"
    );
    let last = sent_results(&requests[READS].body);
    assert_eq!(last.len(), READS);
    assert!(
        last[READS - 1].contains("line 0300: the quick brown fox"),
        "the latest result is sent whole"
    );
    // Shortened in steps, not a little every turn: several results at a time (how many
    // depends on the size of the system prompt and tools), the same number each step.
    let shortened_counts: Vec<usize> = requests
        .iter()
        .map(|request| {
            sent_results(&request.body)
                .iter()
                .filter(|result| result.starts_with("[Shortened by Loopr"))
                .count()
        })
        .collect();
    let mut steps = shortened_counts.clone();
    steps.dedup();
    let sizes: Vec<usize> = steps.windows(2).map(|pair| pair[1] - pair[0]).collect();
    assert!(
        steps[0] == 0
            && sizes.len() >= 3
            && sizes[1..].iter().all(|size| *size == sizes[1])
            && sizes.iter().all(|size| *size >= 3),
        "{shortened_counts:?}"
    );
    let shortened = &last[0];
    assert!(
        shortened.starts_with("[Shortened by Loopr")
            && shortened.contains(r#"read_file {"path":"big.txt"}"#)
            && shortened.contains("call read_file again with the same input"),
        "{shortened}"
    );

    // The journal keeps every result whole.
    let journal = files_ending_with(&dirs.loopr_home, "journal.jsonl");
    assert_eq!(journal.len(), 1, "{journal:?}");
    let journal = std::fs::read_to_string(&journal[0]).expect("read the journal");
    let whole_in_journal = journal
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .flat_map(|entry| entry["content"].as_array().cloned().unwrap_or_default())
        .filter(|block| {
            block["type"] == "tool_result"
                && block["content"]
                    .as_str()
                    .is_some_and(|content| content.contains("line 0300: the quick brown fox"))
        })
        .count();
    assert_eq!(whole_in_journal, READS);
}

/// `scenario::plan_killed_at_request` for the plan of "Add a --version flag".
async fn plan_killed_at_request(
    dirs: &TestDirs,
    fake: &FakeLlm,
    settings: &str,
    requests: usize,
) -> RecordedRequest {
    scenario::plan_killed_at_request(dirs, fake, "Add a --version flag", settings, requests).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_loop_sends_what_the_killed_one_sent() {
    // Killed between two shortenings: a resumed loop that only fitted what it loaded to the
    // budget would send every result whole.
    const READS: usize = 8;
    let fake = FakeLlm::start().await;
    let (dirs, settings) = large_reads(&fake, READS);
    fake.push(scenario::stalled_turn("Reading more."));
    let in_flight = plan_killed_at_request(&dirs, &fake, &settings, READS + 1).await;

    fake.push(tool_turn("plan", "create_plan", valid_plan()));
    let resumed = run_loopr(&dirs, &fake, &["resume"]).await;
    let requests = fake.requests();
    assert_eq!(
        requests.len(),
        READS + 2,
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let sent = sent_results(&in_flight.body);
    assert!(
        sent[0].starts_with("[Shortened by Loopr"),
        "the killed loop had shortened its oldest result: {}",
        sent[0]
    );
    assert_eq!(
        requests[READS + 1].body["messages"],
        in_flight.body["messages"],
        "the resumed loop asks what the killed one asked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_the_model_finds_too_long_is_shortened_and_asked_again() {
    const READS: usize = 4;
    let fake = FakeLlm::start().await;
    let (dirs, _) = large_reads(&fake, READS);
    // A budget larger than the model's window: the provider refuses the fifth request.
    fake.push(fake_llm::error_reply(
        400,
        "invalid_request_error",
        "prompt is too long: 210000 tokens > 200000 maximum",
    ));
    fake.push(tool_turn("plan", "create_plan", valid_plan()));
    let output = run_loopr(
        &dirs,
        &fake,
        &[
            "plan",
            "Add a --version flag",
            "--settings",
            r#"{"plan_review_passes": 0, "context_keep_turns": 1}"#,
        ],
    )
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("awaiting_approval"),
        "{stderr}"
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), READS + 2, "{stderr}");
    let (refused, again) = (&requests[READS], &requests[READS + 1]);
    assert!(
        sent_results(&refused.body)
            .iter()
            .all(|result| !result.starts_with("[Shortened by Loopr"))
    );
    let shortened = sent_results(&again.body)
        .iter()
        .filter(|result| result.starts_with("[Shortened by Loopr"))
        .count();
    assert_eq!(shortened, READS - 1, "all but the latest result");
    assert!(again.body_len * 2 < refused.body_len);
}

/// `loopr resume --settings` gives a resumed loop's MCP server its `env` values, which no
/// loop keeps: killed mid-turn, the plan is resumed, its server gets the token again, and
/// nothing of Loopr's holds it.
#[cfg(feature = "test-mcp-server")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_takes_mcp_env_values_from_its_settings() {
    const TOKEN: &str = "mcp-token-cli-9b3e-never-store-me";
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    let temp = tempfile::tempdir().expect("temp dir");
    let log = temp.path().join("server.log");
    let settings = json!({
        "plan_review_passes": 0,
        "mcp": {"servers": {"probe": {
            "command": env!("CARGO_BIN_EXE_loopr-test-mcp-server"),
            "args": ["--log", log, "--log-env", "PROBE_TOKEN"],
            "env": {"PROBE_TOKEN": TOKEN},
            "levels": ["plan"],
            "read_only_tools": ["lookup"]
        }}}
    })
    .to_string();
    fake.push(scenario::stalled_turn("Let me look."));
    plan_killed_at_request(&dirs, &fake, &settings, 1).await;

    fake.push(
        TurnBuilder::new()
            .tool_use("l1", "probe__lookup", json!({"key": "resumed"}))
            .reply(),
    );
    fake.push(tool_turn("plan", "create_plan", valid_plan()));
    let resumed = run_loopr(&dirs, &fake, &["resume", "--settings", &settings]).await;
    let requests = fake.requests();
    assert_eq!(
        requests.len(),
        3,
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let results = tool_results(&requests[2].body);
    assert_eq!(results[0]["content"], "value of resumed\n", "{results:?}");
    let given = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        given.matches(&format!("env PROBE_TOKEN={TOKEN}")).count(),
        2,
        "the plan's server and the resumed plan's got the token: {given}"
    );
    assert_eq!(
        scenario::files_containing(dirs.temp.path(), TOKEN),
        Vec::<std::path::PathBuf>::new(),
        "no state file (loopr.db and its log included) holds the token"
    );
}

/// Waits for `child` to exit (it must not have been waited for) and returns its wait status and
/// its peak resident memory in KiB (`ru_maxrss` of `wait4`, the kernel's own count).
fn wait_with_peak_memory(child: std::process::Child) -> (i32, u64) {
    let pid = i32::try_from(child.id()).expect("pid");
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 waits for the child `pid`, which nothing else waits for, and fills the
    // status and rusage given.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    (status, u64::try_from(usage.ru_maxrss).expect("ru_maxrss"))
}

/// A rules file a command made huge (`truncate -s 4G AGENTS.md`, sparse, on every later
/// start): the host reads `rules_max_bytes` of it, and its memory stays far below the file's
/// size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_rules_file_costs_the_host_no_more_memory_than_its_cap() {
    use std::os::unix::process::CommandExt;

    const PEAK_LIMIT_KIB: u64 = 200 * 1024;
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    let huge: u64 = 4 << 30;
    std::fs::File::create(dirs.project.join("AGENTS.md"))
        .and_then(|file| file.set_len(huge))
        .expect("sparse AGENTS.md");
    fake.push(tool_turn("toolu_plan", "create_plan", valid_plan()));
    let stderr_path = dirs.temp.path().join("stderr.txt");
    let mut command = scenario::loopr_std_command(
        &dirs,
        &fake,
        &[
            "plan",
            "Add a --version flag",
            "--settings",
            r#"{"plan_review_passes": 0}"#,
        ],
    );
    command
        .stdout(std::fs::File::create(dirs.temp.path().join("stdout.txt")).expect("stdout"))
        .stderr(std::fs::File::create(&stderr_path).expect("stderr"));
    // A guard for the machine, well above the limit checked: a host that reads the file
    // whole fails to allocate it instead of taking gigabytes.
    // SAFETY: setrlimit is async-signal-safe and touches only the child being started.
    unsafe {
        command.pre_exec(|| {
            let guard = libc::rlimit {
                rlim_cur: 2 << 30,
                rlim_max: 2 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_DATA, &guard) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let child = command.spawn().expect("spawn loopr");
    let pid = i32::try_from(child.id()).expect("pid");
    let waited = tokio::time::timeout(
        nvim::WAIT,
        tokio::task::spawn_blocking(move || wait_with_peak_memory(child)),
    )
    .await;
    let Ok(waited) = waited else {
        // SAFETY: kill sends SIGKILL to the child this test started, which still runs.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        panic!("loopr plan did not end within {:?}", nvim::WAIT);
    };
    let (status, peak_kib) = waited.expect("join");
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(
        peak_kib < PEAK_LIMIT_KIB,
        "peak resident memory {peak_kib} KiB (limit {PEAK_LIMIT_KIB} KiB), wait status \
         {status:#x}; stderr:\n{stderr}"
    );
    assert!(
        libc::WIFEXITED(status),
        "killed by signal {}: {stderr}",
        libc::WTERMSIG(status)
    );
    let system: String = fake.requests()[0].body["system"]
        .as_array()
        .expect("system blocks")
        .iter()
        .filter_map(|block| block["text"].as_str())
        .collect();
    assert!(
        system.contains(&format!("[Loopr cut AGENTS.md here: it has {huge} bytes")),
        "{system}"
    );
}

/// The task of the plan an earlier `loopr plan` was running when it was killed: no message of
/// the tests' other plans holds it, so its replies are routed by it.
const KILLED_TASK: &str = "Rename the settings module";

/// Runs a `loopr plan` of `KILLED_TASK` and kills it (SIGKILL) while the model answers: its
/// loop stays `running` in the store, its host gone. Returns the loop's id.
async fn plan_killed_mid_turn(dirs: &TestDirs, fake: &FakeLlm) -> String {
    fake.push_routed(KILLED_TASK, scenario::stalled_turn("Let me look."));
    scenario::plan_killed_at_request(dirs, fake, KILLED_TASK, r#"{"plan_review_passes": 0}"#, 1)
        .await;
    let journals = files_ending_with(&dirs.loopr_home, "journal.jsonl");
    assert_eq!(journals.len(), 1, "{journals:?}");
    journals[0]
        .parent()
        .and_then(|dir| dir.file_name())
        .and_then(|name| name.to_str())
        .expect("the loop's directory is its id")
        .to_owned()
}

/// The STATUS column of loop `id`'s row in a summary table.
fn status_in_table<'a>(table: &'a str, id: &str) -> &'a str {
    table
        .lines()
        .find(|line| line.starts_with(id))
        .and_then(|row| row.split_whitespace().nth(3))
        .unwrap_or_else(|| panic!("no row for {id}:\n{table}"))
}

/// How many requests the model got from the killed plan (their first message holds its task).
fn requests_of_killed_plan(fake: &FakeLlm) -> usize {
    fake.requests()
        .iter()
        .filter(|request| first_user_text(&request.body).contains(KILLED_TASK))
        .count()
}

/// Starts a `loopr plan` whose host lives, its first turn held until the returned `Notify`
/// releases it, and returns once it has asked the model (after the killed plan's request).
async fn live_plan_held_in_its_first_turn(
    dirs: &TestDirs,
    fake: &FakeLlm,
) -> (tokio::process::Child, std::sync::Arc<tokio::sync::Notify>) {
    let (answer, release) = scenario::create_plan_turn("live", valid_plan()).held();
    fake.push_routed("Add a --version flag", answer);
    let live = scenario::loopr_command(dirs, fake, &scenario::PLAN_ARGS)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start loopr plan");
    tokio::time::timeout(
        std::time::Duration::from_secs(60),
        fake.wait_for_requests(2),
    )
    .await
    .expect("the live plan asks the model");
    (live, release)
}

/// A loop whose host was killed is `interrupted`, not `running`, in `loopr status` (with the
/// command that continues it), while a loop a live host runs is `running`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_a_loop_whose_host_was_killed_as_interrupted() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    let killed = plan_killed_mid_turn(&dirs, &fake).await;

    let status = run_loopr(&dirs, &fake, &["status"]).await;
    let table = String::from_utf8_lossy(&status.stdout);
    let stderr = String::from_utf8_lossy(&status.stderr);
    assert!(status.status.success(), "{stderr}");
    assert_eq!(status_in_table(&table, &killed), "interrupted", "{table}");
    assert!(
        stderr.contains("1 loop(s) interrupted") && stderr.contains("`loopr resume` continues"),
        "{stderr}"
    );

    let (live, release) = live_plan_held_in_its_first_turn(&dirs, &fake).await;
    let status = run_loopr(&dirs, &fake, &["status"]).await;
    let table = String::from_utf8_lossy(&status.stdout);
    assert_eq!(status_in_table(&table, &killed), "interrupted", "{table}");
    let running: Vec<&str> = table
        .lines()
        .filter(|row| row.split_whitespace().nth(3) == Some("running"))
        .collect();
    assert_eq!(running.len(), 1, "the live plan runs:\n{table}");
    release.notify_one();
    let live = live.wait_with_output().await.expect("run loopr plan");
    assert!(
        String::from_utf8_lossy(&live.stdout).contains("awaiting_approval"),
        "{}",
        String::from_utf8_lossy(&live.stderr)
    );
    assert_eq!(requests_of_killed_plan(&fake), 1, "nothing resumed it");
}

/// A `loopr plan` in a project where an earlier run was killed runs, waits for, reports and
/// takes its exit code from its own plan tree only; the killed run's loop is left for
/// `loopr resume`, which says so once, and which then continues it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_runs_waits_for_and_reports_its_own_tree_only() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    let killed = plan_killed_mid_turn(&dirs, &fake).await;
    // Held: a run that resumed the killed loop would wait for this answer forever.
    let (answer, release) = scenario::create_plan_turn("resumed", valid_plan()).held();
    fake.push_routed(KILLED_TASK, answer);
    scenario::push_one_spec_hierarchy(&fake, |_| None, tool_turn);

    let output = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        run_loopr(
            &dirs,
            &fake,
            &[
                "plan",
                "Add a --version flag",
                "--approve-all",
                "--settings",
                r#"{"plan_review_passes": 0, "spec_review": false}"#,
            ],
        ),
    )
    .await
    .expect("the run ends when its own tree does, not waiting for the killed run's loop");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}\n{stdout}");
    let rows: Vec<&str> = stdout.lines().skip(1).collect();
    assert_eq!(
        rows.len(),
        1 + 1 + 3,
        "its plan, spec and phases:\n{stdout}"
    );
    assert!(
        rows.iter()
            .all(|row| row.contains(" complete ") && !row.starts_with(&killed)),
        "{stdout}"
    );
    assert_eq!(requests_of_killed_plan(&fake), 1, "{stderr}");
    let told: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("`loopr resume` continues them"))
        .collect();
    assert_eq!(told.len(), 1, "{stderr}");
    assert!(
        told[0].contains("1 unfinished loop(s) of this project that no host runs"),
        "{stderr}"
    );

    release.notify_one();
    let resumed = run_loopr(&dirs, &fake, &["resume"]).await;
    let table = String::from_utf8_lossy(&resumed.stdout);
    assert_eq!(
        requests_of_killed_plan(&fake),
        2,
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert_eq!(
        status_in_table(&table, &killed),
        "awaiting_approval",
        "{table}"
    );
}

/// `loopr cancel` of a loop whose host was killed cancels it at once (no host is left to stop
/// it), and a `loopr resume` afterwards runs nothing; of a loop a live host runs, it asks
/// that host to stop it, which it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_ends_an_interrupted_loop_at_once_and_a_running_one_through_its_host() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    let killed = plan_killed_mid_turn(&dirs, &fake).await;
    fake.push_routed(KILLED_TASK, tool_turn("plan", "create_plan", valid_plan()));

    let cancelled = run_loopr(&dirs, &fake, &["cancel", &killed]).await;
    let stderr = String::from_utf8_lossy(&cancelled.stderr);
    assert!(cancelled.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("plan {killed} cancelled")),
        "{stderr}"
    );
    let resumed = run_loopr(&dirs, &fake, &["resume"]).await;
    assert_eq!(
        requests_of_killed_plan(&fake),
        1,
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let table = String::from_utf8_lossy(&resumed.stdout);
    assert_eq!(status_in_table(&table, &killed), "cancelled", "{table}");

    let (live, release) = live_plan_held_in_its_first_turn(&dirs, &fake).await;
    let status = run_loopr(&dirs, &fake, &["status"]).await;
    let table = String::from_utf8_lossy(&status.stdout);
    let live_id = table
        .lines()
        .find(|row| row.split_whitespace().nth(3) == Some("running"))
        .and_then(|row| row.split_whitespace().next())
        .unwrap_or_else(|| panic!("the live plan runs:\n{table}"))
        .to_owned();
    let cancelled = run_loopr(&dirs, &fake, &["cancel", &live_id]).await;
    let stderr = String::from_utf8_lossy(&cancelled.stderr);
    assert!(cancelled.status.success(), "{stderr}");
    assert!(
        stderr.contains(&live_id) && stderr.contains("another host"),
        "{stderr}"
    );
    release.notify_one();
    let live = tokio::time::timeout(std::time::Duration::from_secs(60), live.wait_with_output())
        .await
        .expect("the live plan ends")
        .expect("run loopr plan");
    let table = String::from_utf8_lossy(&live.stdout);
    assert!(!live.status.success());
    assert_eq!(
        status_in_table(&table, &live_id),
        "cancelled",
        "{table}\n{}",
        String::from_utf8_lossy(&live.stderr)
    );
}

/// `loopr status` lines its columns up under their heads whatever their width (a loop id is
/// longer than its column was), and a plan's NAME is its task, shortened, not `-`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_columns_line_up_and_a_plan_is_named_by_its_task() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    fake.push(tool_turn("toolu_plan", "create_plan", valid_plan()));
    run_loopr_plan(&dirs, &fake).await;
    let status = run_loopr(&dirs, &fake, &["status"]).await;
    let table = String::from_utf8_lossy(&status.stdout);
    let header = table.lines().next().unwrap_or_default();
    let starts = |line: &str| -> Vec<usize> {
        line.char_indices()
            .filter(|&(at, c)| c != ' ' && (at == 0 || line.as_bytes()[at - 1] == b' '))
            .map(|(at, _)| at)
            .take(4)
            .collect()
    };
    let row = table
        .lines()
        .find(|line| line.contains(" plan "))
        .unwrap_or_else(|| panic!("no plan row:\n{table}"));
    assert_eq!(starts(row), starts(header), "columns:\n{table}");
    assert_eq!(
        row.split_whitespace().nth(2),
        Some("Add_a_--version_flag"),
        "{table}"
    );
}

/// `loopr transcript ID | head`: a reader that stops early ends the command quietly, as it
/// ends `rg` or `cat`, with no "Broken pipe" on the terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transcript_piped_into_a_reader_that_stops_early_ends_quietly() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    fake.push(tool_turn("toolu_plan", "create_plan", valid_plan()));
    let planned = run_loopr_plan(&dirs, &fake).await;
    let id = awaiting_plan_id(&String::from_utf8_lossy(&planned.stdout));
    for args in [vec!["transcript", id.as_str()], vec!["status"]] {
        // The reader is gone before the command writes: as `head` is after its lines.
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let output = scenario::loopr_command(&dirs, &fake, &args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            // Not `output()`: tokio's would replace the closed pipe with its own.
            .spawn()
            .expect("start loopr")
            .wait_with_output()
            .await
            .expect("run loopr");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            matches!(output.status.code(), Some(0 | 141))
                && !stderr.to_lowercase().contains("broken pipe"),
            "loopr {args:?}: {:?}\n{stderr}",
            output.status
        );
    }
}

/// `loopr resume` judges and lists the loops it resumed: an old loop the user cancelled
/// does not fail it, and a project with nothing unfinished lists what it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_judges_the_loops_it_resumed_not_an_old_cancelled_one() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    let cancelled = plan_killed_mid_turn(&dirs, &fake).await;
    assert!(
        run_loopr(&dirs, &fake, &["cancel", &cancelled])
            .await
            .status
            .success()
    );
    let killed = {
        fake.push_routed(
            "Add a --version flag",
            scenario::stalled_turn("Let me look."),
        );
        scenario::plan_killed_at_request(
            &dirs,
            &fake,
            "Add a --version flag",
            r#"{"plan_review_passes": 0, "spec_review": false}"#,
            2,
        )
        .await;
        let status = run_loopr(&dirs, &fake, &["status"]).await;
        let table = String::from_utf8_lossy(&status.stdout).into_owned();
        table
            .lines()
            .find(|row| row.split_whitespace().nth(3) == Some("interrupted"))
            .and_then(|row| row.split_whitespace().next())
            .unwrap_or_else(|| panic!("the killed plan:\n{table}"))
            .to_owned()
    };
    scenario::push_one_spec_hierarchy(&fake, |_| None, tool_turn);
    let resumed = run_loopr(&dirs, &fake, &["resume", "--approve-all"]).await;
    let table = String::from_utf8_lossy(&resumed.stdout);
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{stderr}\n{table}");
    assert!(table.lines().any(|row| row.starts_with(&killed)), "{table}");
    assert!(
        !table.lines().any(|row| row.starts_with(&cancelled)),
        "{table}"
    );
}

/// `loopr run`'s progress lines name the loop as a person calls it (its level and phase),
/// never by its id, and a call by its name with the article it takes ("an edit_file call").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_lines_name_the_loop_and_the_call_in_plain_english() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    scenario::plan_code_project(&fake, &dirs, "true").await;
    let route = scenario::code_route("print-version");
    fake.push_routed(
        &route,
        TurnBuilder::new()
            .tool_use(
                "toolu_edit",
                "edit_file",
                json!({"path": "src/main.rs", "old_string": "\"hello\"", "new_string": "\"bye\""}),
            )
            .usage(300, 40)
            .reply(),
    );
    fake.push_routed(&route, scenario::complete_phase_turn("says bye"));
    let output = run_loopr(
        &dirs,
        &fake,
        &[
            "run",
            "print-version",
            "--yes",
            "--settings",
            r#"{"verify": false}"#,
        ],
    )
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|line| line == "loopr: code \"print-version\": model is writing an edit_file call"),
        "{stderr}"
    );
    let code_id = stderr
        .lines()
        .find_map(|line| line.strip_prefix("loopr: code loop "))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the run names its loop once");
    let by_id: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with(&format!("loopr: {code_id}: ")))
        .collect();
    assert!(by_id.is_empty(), "progress named by id: {by_id:#?}");
}

/// A plan's review passes name every line of their turns on stderr, as in Neovim; when the
/// run's tree stops, a line says what is ready and the command to go on with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_pass_names_its_turns_and_the_end_says_what_is_ready() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    fake.push(scenario::create_plan_turn("toolu_plan", valid_plan()));
    fake.push(tool_turn(
        "review",
        "review_plan",
        json!({"verdict": "approve", "issues": []}),
    ));
    let output = run_loopr(
        &dirs,
        &fake,
        &[
            "plan",
            "Add a --version flag",
            "--settings",
            r#"{"plan_review_passes": 1}"#,
        ],
    )
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines.contains(
            &"loopr: plan \"Add a --version flag\": review pass 1/1 (completeness): waiting for \
              the model (turn 2/25)"
        ),
        "{stderr}"
    );
    assert!(
        lines.contains(
            &"loopr: plan \"Add a --version flag\": plan ready for review; `loopr resume \
              --approve-all` approves it and goes on; the editor can ask for a revision instead"
        ),
        "{stderr}"
    );
}

/// `loopr status` shows a spec's requirements verified and a phase's latest verification
/// after its error column: here `loopr run` verified one phase (R1 of the one-spec plan) and
/// the verifier passed it, so the spec reads `requirements 1/1 verified`, that phase
/// `verified` and the others `not verified yet`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_requirements_verified_and_each_phases_verification() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    scenario::commit_everything(&dirs.project);
    scenario::plan_code_project(&fake, &dirs, "true").await;
    fake.push_routed(
        &scenario::code_route("print-version"),
        scenario::complete_phase_turn("prints it"),
    );
    fake.push_routed(
        "Verify phase `print-version` against its requirements.",
        tool_turn(
            "verified",
            "report_verification",
            json!({"verdict": "pass", "summary": "R1 holds.", "findings": []}),
        ),
    );
    let run = run_loopr(&dirs, &fake, &["run", "print-version", "--yes"]).await;
    assert!(run.status.success(), "{run:?}");

    let status = run_loopr(&dirs, &fake, &["status"]).await;
    let table = String::from_utf8_lossy(&status.stdout).into_owned();
    let row = |name: &str| -> &str {
        table
            .lines()
            .find(|line| {
                let words: Vec<&str> = line.split_whitespace().collect();
                words.get(1) != Some(&"code") && words.get(2) == Some(&name)
            })
            .unwrap_or_else(|| panic!("no {name} row:\n{table}"))
    };
    assert!(
        row("version-flag").ends_with("  requirements 1/1 verified"),
        "{table}"
    );
    assert!(row("print-version").ends_with("  verified"), "{table}");
    assert!(row("exit-code").ends_with("  not verified yet"), "{table}");
}

/// `loopr verify` on a project edited by hand: the findings on stdout, one `file:line:
/// severity: message` line each, exit 1 while the verification does not pass; exit 0 and no
/// findings once it does; exit 2 when it cannot run. Nothing in the project changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_prints_the_findings_and_exits_1_until_the_verification_passes() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    scenario::plan_code_project(&fake, &dirs, "true").await;
    let main = dirs.project.join("src/main.rs");
    std::fs::write(&main, "fn main() {\n    println!(\"bye\");\n}\n").expect("edit");
    let project_files = || -> Vec<(std::path::PathBuf, Vec<u8>)> {
        scenario::files_under(&dirs.project)
            .into_iter()
            .map(|path| {
                let bytes = std::fs::read(&path).expect("read");
                (path, bytes)
            })
            .collect()
    };
    let before = project_files();
    let verdict = |verdict: &str, findings: Value| {
        tool_turn(
            "verdict",
            "report_verification",
            json!({"verdict": verdict, "summary": "Checked src/main.rs.", "findings": findings}),
        )
    };
    fake.push(verdict(
        "fail",
        json!([{"severity": "critical", "requirement": "R1", "file": "src/main.rs", "line": 2,
                "message": "--version is never matched", "fix": "Match --version first"}]),
    ));
    let failing = run_loopr(&dirs, &fake, &["verify", "print-version"]).await;
    let stderr = String::from_utf8_lossy(&failing.stderr);
    assert_eq!(failing.status.code(), Some(1), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&failing.stdout),
        "src/main.rs:2: critical: --version is never matched [R1] Fix: Match --version first\n",
        "{stderr}"
    );
    assert!(
        stderr.contains("loopr: print-version: verification failed: 1 critical finding"),
        "{stderr}"
    );

    fake.push(verdict("pass", json!([])));
    let passing = run_loopr(&dirs, &fake, &["verify", "print-version"]).await;
    let stderr = String::from_utf8_lossy(&passing.stderr);
    assert_eq!(passing.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&passing.stdout), "", "{stderr}");
    assert!(
        stderr.contains("loopr: print-version: verification passed: no findings"),
        "{stderr}"
    );

    assert_eq!(
        project_files(),
        before,
        "verification changes nothing in the project"
    );

    // A verification that cannot run is an error (exit 2), told apart from findings that
    // block (exit 1).
    let unknown = run_loopr(&dirs, &fake, &["verify", "nope"]).await;
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert_eq!(unknown.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("\"nope\""), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&unknown.stdout), "", "{stderr}");
}

/// `loopr run <spec>` runs every phase of the spec, in order, one code loop after another,
/// follows the run to its end and exits 0 once every phase is done; `loopr status` says
/// where the run stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_of_a_spec_implements_each_phase_in_order_and_status_says_it_is_done() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    let phases = ["print-version", "document-flag", "exit-code"];
    for phase in phases {
        fake.push_routed(
            &scenario::code_route(phase),
            scenario::complete_phase_turn(&format!("{phase} done")),
        );
    }
    scenario::plan_one_spec_headless(&fake, &dirs, |_| Some("true")).await;
    let settings = r#"{"verify": false}"#;
    let run = run_loopr(
        &dirs,
        &fake,
        &["run", "version-flag", "--yes", "--settings", settings],
    )
    .await;
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(
        stderr.contains("loopr: run done: 3 of 3 phases done"),
        "{stderr}"
    );
    let order: Vec<&str> = fake
        .requests()
        .iter()
        .filter_map(|request| {
            let text = first_user_text(&request.body);
            phases
                .into_iter()
                .find(|phase| text.contains(&scenario::code_route(phase)))
        })
        .collect();
    assert_eq!(
        order, phases,
        "one code loop per phase, in the spec's order"
    );

    let status = run_loopr(&dirs, &fake, &["status"]).await;
    let table = String::from_utf8_lossy(&status.stdout);
    assert!(
        table.contains("spec \"version-flag\": run done: 3 of 3 phases done"),
        "{table}"
    );
}
