//! The text tool-call protocols end to end: Neovim with `tool_protocol` set, against the
//! Anthropic and the OpenAI fakes answering in plain text. The tools travel in the system
//! prompt, the calls are read out of the answers, results go back as text, and an answer
//! that breaks the protocol is answered with what to fix.

use loopr::llm::text_protocol::{TextProtocol, render_call};
use loopr::llm::{ToolFormat, ToolProtocol};
use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply, TurnBuilder, Wire};
use crate::nvim::TestNvim;
use crate::scenario::{
    AUTO_APPROVE, OPENAI_KEY, code_route, phase_input, phase_route, plan_and_approve, plan_route,
    requests_routed, run_print_version, spec_input, spec_route, start_editor, start_openai_editor,
    valid_plan, wait_all_complete,
};

const SPECS: [(&str, [&str; 3]); 2] = [
    ("version-flag", ["parse-flag", "print-version", "exit-code"]),
    ("version-docs", ["readme", "changelog", "help-text"]),
];

/// The start of what the model is told about an answer it has to write again.
const FEEDBACK: &str = "Your last reply could not be used as written";

struct Case {
    protocol: ToolProtocol,
    format: ToolFormat,
    wire: Wire,
    /// The model's first plan answer, which breaks the protocol.
    malformed: &'static str,
    /// What the feedback on it must quote or name.
    named: &'static str,
    /// What the model is told first when the broken answer ended at a length limit: its
    /// 100 tokens are far below max_tokens (8192), so the server's context stopped it.
    cut_off: Option<&'static str>,
}

fn text_protocol(case: &Case) -> TextProtocol {
    TextProtocol::new(case.protocol, case.format).expect("a text protocol")
}

/// An answer that calls `tool` the way the protocol writes calls, after a line of prose.
fn call_turn(protocol: &TextProtocol, tool: &str, input: Value) -> Reply {
    let call = render_call(protocol, tool, &input);
    TurnBuilder::new()
        .text(&format!("I have what I need.\n\n{call}"))
        .usage(300, 100)
        .reply()
}

fn text_turn(text: &str) -> Reply {
    TurnBuilder::new().text(text).usage(300, 100).reply()
}

/// Every string inside `value`, joined: the text of a message in either wire.
fn all_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(items) => items.iter().map(all_text).collect::<Vec<_>>().join("\n"),
        // By key (`content` before `role`), whatever order serde_json keeps keys in.
        Value::Object(fields) => {
            let mut fields: Vec<(&String, &Value)> = fields.iter().collect();
            fields.sort_by_key(|(key, _)| *key);
            let texts: Vec<String> = fields.into_iter().map(|(_, v)| all_text(v)).collect();
            texts.join("\n")
        }
        _ => String::new(),
    }
}

/// The system prompt of a request body, in either wire.
fn system_prompt(body: &Value) -> String {
    match &body["system"] {
        Value::Null => all_text(&body["messages"][0]["content"]),
        system => all_text(system),
    }
}

fn last_message(body: &Value) -> &Value {
    body["messages"]
        .as_array()
        .and_then(|messages| messages.last())
        .expect("a message")
}

async fn editor_for(fake: &FakeLlm, case: &Case, extra: &str) -> TestNvim {
    let setup = format!(
        "vim.tbl_extend('force', {{ tool_protocol = '{}', tool_format = '{}' }}, {extra})",
        case.protocol.as_str(),
        case.format.as_str()
    );
    match case.wire {
        Wire::OpenAi => start_openai_editor(fake, &setup, Some(OPENAI_KEY)).await,
        _ => start_editor(fake, &setup).await,
    }
}

/// `:LooprPlan` → plan.md → `:LooprApprove` → specs and phases → `:LooprTasks`, every answer
/// written in `case`'s protocol, the first plan answer broken.
async fn the_hierarchy_runs_through(case: Case) {
    let protocol = text_protocol(&case);
    let fake = FakeLlm::start_wire(case.wire).await;
    let malformed = TurnBuilder::new().text(case.malformed).usage(300, 100);
    fake.push_routed(
        plan_route(),
        if case.cut_off.is_some() {
            malformed.stop_reason("max_tokens").reply()
        } else {
            malformed.reply()
        },
    );
    fake.push_routed(
        plan_route(),
        call_turn(&protocol, "create_plan", valid_plan()),
    );
    for (spec, phases) in SPECS {
        fake.push_routed(
            &spec_route(spec),
            call_turn(&protocol, "create_spec", spec_input(spec, &phases)),
        );
        for phase in phases {
            fake.push_routed(
                &phase_route(phase),
                call_turn(&protocol, "create_phase", phase_input(phase)),
            );
        }
    }
    let mut editor = editor_for(&fake, &case, "{}").await;
    plan_and_approve(&mut editor).await;
    wait_all_complete(&mut editor, 1 + 2 + 6).await;
    assert_eq!(editor.command("LooprTasks").await, None);
    let tasks: i64 = editor.lua("return #vim.fn.getqflist()").await;
    assert_eq!(tasks, 6 * 2);

    let plan_bodies = requests_routed(&fake, plan_route());
    assert_eq!(
        plan_bodies.len(),
        2,
        "the broken answer was asked again once"
    );
    for body in fake.requests().iter().map(|request| &request.body) {
        assert!(body.get("tools").is_none(), "no native tools: {body:#}");
    }
    let system = system_prompt(&plan_bodies[0]);
    for tool in ["read_file", "list_files", "grep", "create_plan"] {
        assert!(system.contains(tool), "{tool} is described: {system}");
    }
    let told = all_text(last_message(&plan_bodies[1]));
    assert!(told.contains(FEEDBACK), "{told}");
    assert!(told.contains(case.named), "{told}");
    match case.cut_off {
        Some(note) => assert!(told.starts_with(note), "{told}"),
        None => assert!(
            !told.contains("stopped your reply") && !told.contains("cut off at the limit"),
            "{told}"
        ),
    }
    assert!(!told.contains("the limit of 8192 tokens"), "{told}");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xml_sections_with_json_calls_over_anthropic() {
    the_hierarchy_runs_through(Case {
        protocol: ToolProtocol::Xml,
        format: ToolFormat::Json,
        wire: Wire::Anthropic,
        malformed: "<thinking>Planning.</thinking>\n<action>\n{\"tool\": \"create_plan\", \"args\": {\"title\": \"x\",}}\n</action>",
        named: "\"title\": \"x\",}",
        cut_off: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xml_sections_with_yaml_calls_over_chat_completions() {
    the_hierarchy_runs_through(Case {
        protocol: ToolProtocol::Xml,
        format: ToolFormat::Yaml,
        wire: Wire::OpenAi,
        malformed: "<thinking>Planning.</thinking>\n<action>\ntool: create_plan\nargs:\n  title: Add a flag\n",
        named: "<action>",
        cut_off: Some(
            "The server stopped your reply after 100 tokens, probably at its context window of \
             400 tokens (the conversation and your reply together), so its end is missing;",
        ),
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markdown_sections_with_json_calls_over_chat_completions() {
    the_hierarchy_runs_through(Case {
        protocol: ToolProtocol::Markdown,
        format: ToolFormat::Json,
        wire: Wire::OpenAi,
        malformed: "# Thinking\nPlanning.\n\n# Action\n{\"tool\": \"create_plans\", \"args\": {}}\n",
        named: "create_plans",
        cut_off: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markdown_sections_with_yaml_calls_over_anthropic() {
    the_hierarchy_runs_through(Case {
        protocol: ToolProtocol::Markdown,
        format: ToolFormat::Yaml,
        wire: Wire::Anthropic,
        malformed: "# Action\ntool: create_plan\nargs:\n  title: Add a --version flag\n  overview: Print the version.\n",
        named: "specs",
        cut_off: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_blocks_over_anthropic() {
    the_hierarchy_runs_through(Case {
        protocol: ToolProtocol::ToolCalls,
        format: ToolFormat::Json,
        wire: Wire::Anthropic,
        malformed: "Here is the plan.\n\n## Tool Calls\n\n```json\n{\"uid\": \"c1\", \"name\": \"\", \"arguments\": {}}\n```\n",
        named: "name",
        cut_off: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_blocks_over_chat_completions() {
    the_hierarchy_runs_through(Case {
        protocol: ToolProtocol::ToolCalls,
        format: ToolFormat::Json,
        wire: Wire::OpenAi,
        malformed: "## Tool Calls\n\n```json\n{\"uid\": \"c1\", \"name\": \"create_plan\", \"arguments\": {\"title\": \"x\"}}\n",
        named: "```",
        cut_off: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_loop_completes_through_xml_sections_and_reads_its_results_as_text() {
    let case = Case {
        protocol: ToolProtocol::Xml,
        format: ToolFormat::Json,
        wire: Wire::Anthropic,
        malformed: "",
        named: "",
        cut_off: None,
    };
    let protocol = text_protocol(&case);
    let fake = FakeLlm::start_wire(case.wire).await;
    crate::scenario::push_one_spec_hierarchy(
        &fake,
        |_| Some("true".to_owned()),
        |_, tool, input| call_turn(&protocol, tool, input),
    );
    // Two calls in one action section, as an array.
    fake.push_routed(
        &code_route("print-version"),
        text_turn(
            "<thinking>Change the greeting, then look at the manifest.</thinking>\n<action>\n[\
             {\"tool\": \"edit_file\", \"args\": {\"path\": \"src/main.rs\", \"old_string\": \"\\\"hello\\\"\", \"new_string\": \"\\\"bye\\\"\"}},\
             {\"tool\": \"read_file\", \"args\": {\"path\": \"Cargo.toml\"}}]\n</action>\n\
             <result>made up by the model, never read</result>",
        ),
    );
    fake.push_routed(
        &code_route("print-version"),
        call_turn(
            &protocol,
            "complete_phase",
            json!({"summary": "greets differently"}),
        ),
    );
    let mut editor = editor_for(&fake, &case, AUTO_APPROVE).await;
    let main = run_print_version(&mut editor).await;
    assert!(main.contains("\"bye\""), "{main}");
    let code_bodies = requests_routed(&fake, &code_route("print-version"));
    assert_eq!(code_bodies.len(), 2);
    let results = all_text(last_message(&code_bodies[1]));
    let edit = results
        .find("<result tool=\"edit_file\" id=\"call_1\">")
        .unwrap_or_else(|| panic!("the edit's result, as text: {results}"));
    let read = results
        .find("<result tool=\"read_file\" id=\"call_2\">")
        .unwrap_or_else(|| panic!("the read's result, as text: {results}"));
    assert!(edit < read, "in call order: {results}");
    assert!(results.contains("version = \"0.3.1\""), "{results}");
    // The answer went back as the model wrote it, calls and all.
    let answer = all_text(&code_bodies[1]["messages"][1]);
    assert!(answer.contains("<action>"), "{answer}");
    editor.quit().await;
}

/// XML sections over Anthropic, whose every plan answer is a call with broken JSON.
fn broken_json_in_xml() -> Case {
    Case {
        protocol: ToolProtocol::Xml,
        format: ToolFormat::Json,
        wire: Wire::Anthropic,
        malformed: "<action>{\"tool\": \"create_plan\", \"args\": }</action>",
        named: "",
        cut_off: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_that_keep_breaking_the_protocol_fail_the_loop_naming_the_fixes() {
    let case = broken_json_in_xml();
    let fake = FakeLlm::start_wire(case.wire).await;
    for _ in 0..3 {
        fake.push_routed(plan_route(), text_turn(case.malformed));
    }
    let mut editor = editor_for(&fake, &case, "{ max_format_retries = 1 }").await;
    let loop_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&loop_id, "failed").await;

    assert_eq!(
        requests_routed(&fake, plan_route()).len(),
        2,
        "one answer and one retry"
    );
    let records = editor.status_records().await;
    let error = records[0]["error"].as_str().expect("error");
    assert!(
        error.contains("the model's last 2 answers did not follow the xml tool protocol"),
        "{error}"
    );
    assert!(error.contains("max_format_retries"), "{error}");
    assert!(
        error.contains(FEEDBACK),
        "the last problem is named: {error}"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_unreadable_answer_a_third_time_is_pointed_out_and_max_format_retries_ends_it() {
    let case = broken_json_in_xml();
    let fake = FakeLlm::start_wire(case.wire).await;
    for _ in 0..6 {
        fake.push_routed(plan_route(), text_turn(case.malformed));
    }
    // max_format_retries = 3 (the default): the fourth unreadable answer in a row ends it.
    let mut editor = editor_for(&fake, &case, "{}").await;
    let loop_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&loop_id, "failed").await;

    let requests = requests_routed(&fake, plan_route());
    assert_eq!(
        requests.len(),
        4,
        "the setting, not the repetition, ends it"
    );
    for (index, request) in requests.iter().enumerate().skip(1) {
        let told = all_text(last_message(request));
        assert!(told.contains(FEEDBACK), "{told}");
        assert_eq!(
            told.contains(
                "This is the third time your answer could not be read for the same reason; do \
                 something different"
            ),
            index == 3,
            "question {}: {told}",
            index + 1
        );
    }
    let records = editor.status_records().await;
    let error = records[0]["error"].as_str().expect("error");
    assert!(error.contains("max_format_retries"), "{error}");
    editor.quit().await;
}
