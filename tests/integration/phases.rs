//! Phases named by `spec/phase` where two specs share a phase name (item 11), and code loops
//! that go on after a revision or a retry (item 12).

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply, TurnBuilder};
use crate::nvim::TestNvim;
use crate::scenario::{
    AUTO_APPROVE, complete_phase_turn, plan_and_approve, plan_of_specs, plan_route,
    requests_routed, run_code_loop, script_spec, start_editor, tool_turn, wait_all_complete,
    wait_settled,
};

/// Two specs that both have a phase named `parse`.
const SHARED_PARSE: [(&str, [&str; 3]); 2] = [
    ("cli", ["parse", "print-version", "exit-code"]),
    ("docs", ["parse", "readme", "changelog"]),
];
const ONE_SPEC: [(&str, [&str; 3]); 1] = [(
    "version-flag",
    ["print-version", "document-flag", "exit-code"],
)];

/// Routes the code loops of `spec`'s phases (only phase loops' messages name the spec
/// otherwise).
fn code_route(spec: &str) -> String {
    format!("It belongs to the spec \"{spec}\"")
}

/// Plans and approves `specs` (every phase validated by `validation`); returns when every
/// loop is complete, with `vim.notify` recording what Loopr tells the user (see `notes`).
async fn approved_hierarchy(
    fake: &FakeLlm,
    setup: &str,
    specs: &[(&str, [&str; 3])],
    validation: &str,
) -> TestNvim {
    fake.push_routed(
        plan_route(),
        tool_turn("plan", "create_plan", plan_of_specs(specs)),
    );
    for (spec, phases) in specs {
        script_spec(fake, spec, spec, phases, validation);
    }
    let mut editor = start_editor(fake, setup).await;
    editor
        .exec("_G.loopr_test_notes = {} vim.notify = function(msg) table.insert(_G.loopr_test_notes, msg) end")
        .await;
    plan_and_approve(&mut editor).await;
    wait_all_complete(&mut editor, 1 + specs.len() * 4).await;
    notes(&editor).await;
    editor
}

/// What Loopr notified since the last call.
async fn notes(editor: &TestNvim) -> Vec<String> {
    editor
        .lua("local notes = _G.loopr_test_notes _G.loopr_test_notes = {} return notes")
        .await
}

/// The id of the phase loop `spec/phase`.
fn phase_id(records: &[Value], spec: &str, phase: &str) -> String {
    crate::scenario::phase_loop_id(records, None, spec, phase)
}

/// The quickfix list's title and its entries' files (relative), texts and loop ids.
pub(super) async fn quickfix(editor: &TestNvim) -> Value {
    editor
        .lua(
            "local list = vim.fn.getqflist({ title = 1, items = 1 })
             local items = {}
             for _, item in ipairs(list.items) do
               table.insert(items, { file = vim.fn.fnamemodify(vim.api.nvim_buf_get_name(item.bufnr), ':.'),
                                     text = item.text, loop_id = (item.user_data or {}).loop_id })
             end
             return { title = list.title, items = items }",
        )
        .await
}

fn code_requests(fake: &FakeLlm, spec: &str) -> Vec<Value> {
    requests_routed(fake, &code_route(spec))
}

/// The text blocks of a request's last message, which must be the user's.
fn last_user_texts(body: &Value) -> Vec<String> {
    let last = body["messages"]
        .as_array()
        .and_then(|messages| messages.last())
        .expect("a message");
    assert_eq!(last["role"], "user");
    last["content"]
        .as_array()
        .expect("content blocks")
        .iter()
        .filter_map(|block| block["text"].as_str().map(str::to_owned))
        .collect()
}

fn code_record(records: &[Value]) -> Value {
    records
        .iter()
        .find(|r| r["type"] == "code")
        .cloned()
        .expect("code loop")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phase_name_two_specs_share_is_named_spec_slash_phase() {
    let fake = FakeLlm::start().await;
    let mut editor = approved_hierarchy(&fake, AUTO_APPROVE, &SHARED_PARSE, "true").await;
    let records = editor.status_records().await;
    let cli_parse = phase_id(&records, "cli", "parse");
    let docs_parse = phase_id(&records, "docs", "parse");

    // A bare shared name runs nothing and says which phases it could mean.
    // The refusal is an error message (returned by `command`), not a Vim error.
    assert!(editor.command("LooprRun parse").await.is_some());
    let ambiguous = |notes: &[String]| {
        let [note] = notes else {
            panic!("one message: {notes:?}");
        };
        assert!(note.starts_with("Loopr: "), "{note}");
        assert!(
            note.contains(&format!("cli/parse (loop {cli_parse}, complete)")),
            "{note}"
        );
        assert!(
            note.contains(&format!("docs/parse (loop {docs_parse}, complete)")),
            "{note}"
        );
        assert!(note.contains("spec/phase"), "{note}");
    };
    ambiguous(&notes(&editor).await);
    let records = editor.status_records().await;
    assert!(
        records.iter().all(|r| r["type"] != "code"),
        "no code loop started: {records:#?}"
    );
    assert!(editor.command("LooprTasks parse").await.is_some());
    ambiguous(&notes(&editor).await);

    // spec/phase picks one.
    assert_eq!(editor.command("LooprTasks docs/parse").await, None);
    let tasks = quickfix(&editor).await;
    let items = tasks["items"].as_array().expect("items");
    assert_eq!(items.len(), 2, "{tasks:#}");
    assert!(
        items
            .iter()
            .all(|item| item["loop_id"] == docs_parse.as_str()),
        "{tasks:#}"
    );

    // Completion qualifies only the shared name; the plan and its specs, which a run of
    // every phase takes, come with the phases.
    let completions: Vec<String> = editor
        .lua("return vim.fn.getcompletion('LooprRun ', 'cmdline')")
        .await;
    let plan = loopr::agent::plan_name(
        editor
            .status_records()
            .await
            .iter()
            .find(|r| r["type"] == "plan")
            .and_then(|r| r["task"].as_str())
            .expect("the plan's task"),
    );
    let mut expected = vec![
        "changelog".to_owned(),
        "cli".to_owned(),
        "cli/parse".to_owned(),
        "docs".to_owned(),
        "docs/parse".to_owned(),
        "exit-code".to_owned(),
        "print-version".to_owned(),
        "readme".to_owned(),
        plan,
    ];
    expected.sort();
    assert_eq!(completions, expected);
    let completions: Vec<String> = editor
        .lua("return vim.fn.getcompletion('LooprChanges cli/', 'cmdline')")
        .await;
    assert_eq!(completions, ["cli/parse"]);

    fake.push_routed(
        &code_route("cli"),
        write_and_complete("w1", "src/parse.rs", "pub fn parse() {}\n", "parses"),
    );
    let code_id = run_code_loop(&mut editor, "cli/parse").await;
    editor.wait_status(&code_id, "complete").await;
    assert_eq!(
        code_record(&editor.status_records().await)["parent"],
        cli_parse.as_str(),
        "the code loop implements cli's parse"
    );
    let implementing = format!("Loopr: implementing cli/parse (loop {code_id})");
    assert!(
        notes(&editor).await.contains(&implementing),
        "{implementing}"
    );

    let change =
        json!([{"file": "src/parse.rs", "text": "added: pub fn parse() {}", "loop_id": code_id}]);
    assert_eq!(editor.command("LooprChanges cli/parse").await, None);
    assert_eq!(
        quickfix(&editor).await,
        json!({"title": "Loopr: cli/parse changes", "items": change})
    );
    // Only one of the two phases had a code loop, so the bare name is not ambiguous here.
    assert_eq!(editor.command("LooprChanges parse").await, None);
    assert_eq!(
        quickfix(&editor).await,
        json!({"title": "Loopr: parse changes", "items": change})
    );
    assert!(editor.command("LooprChanges docs/parse").await.is_some());
    let note = notes(&editor).await.join("\n");
    assert!(
        note.contains(
            "no code loop has run for phase \"docs/parse\"; start one with :LooprRun docs/parse"
        ),
        "{note}"
    );

    assert_eq!(editor.command("LooprUndo parse").await, None);
    assert!(!editor.dirs.project.join("src/parse.rs").exists());
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revising_a_validated_code_loop_runs_a_second_iteration_with_the_feedback() {
    let fake = FakeLlm::start().await;
    let validation = "test -f src/version.rs";
    let mut editor = approved_hierarchy(&fake, AUTO_APPROVE, &ONE_SPEC, validation).await;
    fake.push_routed(&code_route("version-flag"), write_version_and_complete());
    let code_id = run_code_loop(&mut editor, "print-version").await;
    let first = editor
        .wait_event("LooprValidation", |data| data["passed"] == true)
        .await;
    assert_eq!(first["iteration"], 1);
    editor.wait_status(&code_id, "complete").await;

    let feedback = "Take the version from CARGO_PKG_VERSION instead of a literal";
    fake.push_routed(
        &code_route("version-flag"),
        TurnBuilder::new()
            .tool_use(
                "e1",
                "edit_file",
                json!({"path": "src/version.rs", "old_string": "\"0.3.1\"", "new_string": "env!(\"CARGO_PKG_VERSION\")"}),
            )
            .tool_use("done-2", "complete_phase", json!({"summary": "uses the package version"}))
            .reply(),
    );
    let revised: String = editor
        .lua_answered(&format!(
            "require('loopr').revise({feedback:?}, {{ id = {code_id:?} }}, function(id) result = id end)"
        ))
        .await;
    assert_eq!(revised, code_id);
    editor.wait_status(&code_id, "running").await;
    let second = editor
        .wait_event("LooprValidation", |data| data["passed"] == true)
        .await;
    assert_eq!(second["iteration"], 2);
    editor.wait_status(&code_id, "complete").await;

    let requests = code_requests(&fake, "version-flag");
    assert_eq!(requests.len(), 2, "one model turn per iteration");
    let texts = last_user_texts(&requests[1]);
    assert!(
        texts.iter().any(|text| text.contains(feedback)),
        "the feedback is in the last user message: {texts:?}"
    );
    let code = code_record(&editor.status_records().await);
    assert_eq!(
        (code["status"].clone(), code["iteration"].clone()),
        (json!("complete"), json!(2))
    );
    let version =
        std::fs::read_to_string(editor.dirs.project.join("src/version.rs")).expect("version.rs");
    assert!(version.contains("CARGO_PKG_VERSION"), "{version}");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_a_code_loop_that_ran_out_of_iterations_gives_it_another() {
    let fake = FakeLlm::start().await;
    let validation = "test -f src/version.rs || { echo 'src/version.rs is missing'; exit 1; }";
    let setup = "{ code_max_iterations = 1, approvals = { write = 'auto', edit = 'auto', command = 'auto' } }";
    let mut editor = approved_hierarchy(&fake, setup, &ONE_SPEC, validation).await;
    fake.push_routed(
        &code_route("version-flag"),
        complete_phase_turn("nothing to do"),
    );
    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code_id, "failed").await;
    let failed = code_record(&editor.status_records().await);
    assert!(
        failed["error"]
            .as_str()
            .is_some_and(|error| error.contains("still fails after 1 iterations")),
        "{failed}"
    );

    fake.push_routed(&code_route("version-flag"), write_version_and_complete());
    assert_eq!(editor.command(&format!("LooprRetry {code_id}")).await, None);
    let passed = editor
        .wait_event("LooprValidation", |data| data["passed"] == true)
        .await;
    assert_eq!(passed["iteration"], 2);
    editor.wait_status(&code_id, "complete").await;

    let requests = code_requests(&fake, "version-flag");
    assert_eq!(requests.len(), 2);
    let failure = &requests[1]["messages"]
        .as_array()
        .and_then(|messages| messages.last())
        .expect("a message")["content"][0];
    assert_eq!(failure["is_error"], true, "{failure}");
    assert!(
        failure["content"]
            .as_str()
            .is_some_and(|text| text.contains("src/version.rs is missing")),
        "the retry goes on from the failed validation: {failure}"
    );
    let code = code_record(&editor.status_records().await);
    assert_eq!(
        (code["status"].clone(), code["iteration"].clone()),
        (json!("complete"), json!(2))
    );
    editor.quit().await;
}

/// A model turn that writes `content` to `path` and says the phase is done with `summary`.
fn write_and_complete(id: &str, path: &str, content: &str, summary: &str) -> Reply {
    TurnBuilder::new()
        .tool_use(id, "write_file", json!({"path": path, "content": content}))
        .tool_use(
            &format!("{id}-done"),
            "complete_phase",
            json!({"summary": summary}),
        )
        .reply()
}

/// A model turn that writes src/version.rs with a literal version and says the phase is done.
fn write_version_and_complete() -> Reply {
    write_and_complete(
        "w1",
        "src/version.rs",
        "pub const VERSION: &str = \"0.3.1\";\n",
        "adds the version",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_spec_revision_a_phase_name_means_the_current_phase() {
    let fake = FakeLlm::start().await;
    let mut editor = approved_hierarchy(&fake, AUTO_APPROVE, &ONE_SPEC, "true").await;
    fake.push_routed(
        &code_route("version-flag"),
        write_and_complete("old", "src/old.rs", "// old\n", "done"),
    );
    let old_code = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&old_code, "complete").await;

    // The revised spec has the same phases: the new print-version replaces the old one.
    let (spec, phases) = ONE_SPEC[0];
    script_spec(&fake, "spec-2", spec, &phases, "true");
    let records = editor.status_records().await;
    let spec_id = records
        .iter()
        .find(|r| r["type"] == "spec")
        .and_then(|r| r["id"].as_str())
        .expect("spec")
        .to_owned();
    let revised: String = editor
        .lua_answered(&format!(
            "require('loopr').revise('Keep the parsing apart', {{ id = {spec_id:?} }}, function(id) result = id end)"
        ))
        .await;
    assert_eq!(revised, spec_id);
    // plan, spec, three old phases and their code loop, three new phases
    wait_settled(&mut editor, 9).await;

    fake.push_routed(
        &code_route("version-flag"),
        write_and_complete("new", "src/new.rs", "// new\n", "done"),
    );
    let new_code = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&new_code, "complete").await;
    notes(&editor).await;

    // The invalidated phase had a code loop too, yet the name means the current phase, as
    // completion offers it.
    assert_eq!(editor.command("LooprChanges print-version").await, None);
    assert_eq!(notes(&editor).await, Vec::<String>::new());
    assert_eq!(
        quickfix(&editor).await,
        json!({"title": "Loopr: print-version changes", "items": [{"file": "src/new.rs", "text": "added: // new", "loop_id": new_code}]})
    );
    assert_eq!(
        editor
            .command("LooprChanges version-flag/print-version")
            .await,
        None
    );
    assert_eq!(notes(&editor).await, Vec::<String>::new());
    assert_eq!(
        quickfix(&editor).await["items"][0]["loop_id"],
        new_code.as_str()
    );
    // The old code loop is still reachable by its id.
    assert_eq!(
        editor.command(&format!("LooprChanges {old_code}")).await,
        None
    );
    let old = quickfix(&editor).await;
    let items = old["items"].as_array().expect("items");
    assert!(
        items
            .iter()
            .all(|item| item["loop_id"] == old_code.as_str())
            && items.iter().any(|item| item["file"] == "src/old.rs"),
        "{old:#}"
    );
    editor.quit().await;
}
