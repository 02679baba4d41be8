//! Coverage (issue 25, item 5): `:LooprStatus` shows per spec how many requirements are
//! verified and per phase its latest verification; `:LooprRequirements` (and `c` on a spec
//! row) lists the requirements not yet verified, each at its anchor's line in spec.md.
//!
//! The verifications come from the verification pass: code loops whose validation passes
//! are verified by the (fake) model, one passing, one with a critical finding.

use serde_json::{Value, json};

use crate::fake_llm::FakeLlm;
use crate::nvim::TestNvim;
use crate::scenario::{
    ONE_SPEC_PHASES, code_route, commit_everything, complete_phase_turn, one_spec_plan,
    phase_input, phase_route, plan_and_approve, plan_route, revise_current, run_code_loop,
    spec_input, spec_route, start_editor, tool_turn, wait_all_complete,
};

/// Changes approved, phases verified, one round each: a blocking verification fails the
/// code loop at once.
const SETUP: &str = "{ approvals = { write = 'auto', edit = 'auto', command = 'auto' },
    verify = { enabled = true, max_rounds = 1 } }";

/// The requirement each phase of `ONE_SPEC_PHASES` covers, with its text.
const REQUIREMENTS: [(&str, &str); 3] = [
    (
        "R1",
        "WHEN the user runs sample --version THE SYSTEM SHALL print sample 0.3.1",
    ),
    (
        "R2",
        "WHEN the user runs sample --help THE SYSTEM SHALL list --version",
    ),
    (
        "R3",
        "WHEN sample prints its version THE SYSTEM SHALL exit 0",
    ),
];

/// The spec `version-flag` with three requirements, phase i covering the i-th.
fn spec_of_three() -> Value {
    let mut spec = spec_input("version-flag", &ONE_SPEC_PHASES);
    spec["requirements"] = REQUIREMENTS
        .iter()
        .map(|(id, text)| json!({"id": id, "text": text, "check": "A test runs the binary."}))
        .collect();
    for (index, (id, _)) in REQUIREMENTS.iter().enumerate() {
        spec["phases"][index]["requirements"] = json!([id]);
    }
    spec
}

/// Phase `phase`'s tasks, the first citing requirement `id`; its validation passes.
fn phase_citing(phase: &str, id: &str) -> Value {
    let mut input = phase_input(phase);
    input["tasks"][0]["requirements"] = json!([id]);
    input["validation_command"] = json!("true");
    input
}

/// Where the verifier of phase `phase` is asked.
fn verify_route(phase: &str) -> String {
    format!("Verify phase `{phase}` against its requirements.")
}

/// The verifier's answer: `verdict` and `findings`.
fn report_turn(verdict: &str, findings: Value) -> crate::fake_llm::Reply {
    tool_turn(
        "verified",
        "report_verification",
        json!({"verdict": verdict, "summary": "Checked the change against its requirements.", "findings": findings}),
    )
}

/// The plan, `spec_of_three` and its phases, each citing its requirement.
fn script_the_spec(fake: &FakeLlm) {
    fake.push_routed(
        plan_route(),
        tool_turn("plan", "create_plan", one_spec_plan()),
    );
    fake.push_routed(
        &spec_route("version-flag"),
        tool_turn("spec", "create_spec", spec_of_three()),
    );
    for (phase, (id, _)) in ONE_SPEC_PHASES.iter().zip(REQUIREMENTS) {
        fake.push_routed(
            &phase_route(phase),
            tool_turn(phase, "create_phase", phase_citing(phase, id)),
        );
    }
}

/// An editor on the project with the spec's plan approved and its 5 loops complete.
async fn planned(fake: &FakeLlm) -> TestNvim {
    let mut editor = start_editor(fake, SETUP).await;
    commit_everything(&editor.dirs.project);
    plan_and_approve(&mut editor).await;
    wait_all_complete(&mut editor, 1 + 1 + 3).await;
    editor
}

/// print-version's code loop completes the phase; its verification passes.
fn script_print_version_passing(fake: &FakeLlm) {
    fake.push_routed(&code_route("print-version"), complete_phase_turn("printed"));
    fake.push_routed(
        &verify_route("print-version"),
        report_turn("pass", json!([])),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_counts_verified_requirements_and_the_quickfix_list_points_at_the_rest() {
    let fake = FakeLlm::start().await;
    script_the_spec(&fake);
    let mut editor = planned(&fake).await;

    // print-version's code loop is verified and passes; document-flag's verification finds
    // R2 unmet (critical), which fails its code loop; exit-code never runs.
    script_print_version_passing(&fake);
    fake.push_routed(
        &code_route("document-flag"),
        complete_phase_turn("documented"),
    );
    fake.push_routed(
        &verify_route("document-flag"),
        report_turn(
            "fail",
            json!([{
                "severity": "critical",
                "requirement": "R2",
                "file": "src/main.rs",
                "line": 1,
                "message": "--help does not list --version"
            }]),
        ),
    );
    let code = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code, "complete").await;
    let code = run_code_loop(&mut editor, "document-flag").await;
    editor.wait_status(&code, "failed").await;

    // :LooprStatus: the spec's count and each phase's state, in the NOTE column.
    editor.command("LooprStatus").await;
    let lines: Vec<String> = editor
        .lua("return vim.api.nvim_buf_get_lines(vim.fn.bufnr('loopr://status'), 0, -1, false)")
        .await;
    let row = |kind: &str, name: &str| -> String {
        lines
            .iter()
            .find(|line| {
                let words: Vec<&str> = line.split_whitespace().collect();
                words.first() == Some(&kind) && words.get(1) == Some(&name)
            })
            .unwrap_or_else(|| panic!("no {kind} {name} row: {lines:#?}"))
            .clone()
    };
    // The header is ASCII; a row's cells may not be (`300 in · 100 out`): count characters,
    // each one cell wide here.
    let note_at = lines[0].find("NOTE").expect("a NOTE column");
    let note = |kind: &str, name: &str| -> String {
        let cells: String = row(kind, name).chars().skip(note_at).collect();
        cells.trim().to_owned()
    };
    assert_eq!(
        note("spec", "version-flag"),
        "requirements 1/3 verified",
        "{lines:#?}"
    );
    assert_eq!(note("phase", "print-version"), "verified", "{lines:#?}");
    assert_eq!(
        note("phase", "document-flag"),
        "1 finding (1 critical), blocking",
        "{lines:#?}"
    );
    assert_eq!(note("phase", "exit-code"), "not verified yet", "{lines:#?}");

    // :LooprRequirements: the two not verified, each at its requirement's line in spec.md.
    assert_eq!(editor.command("LooprRequirements version-flag").await, None);
    let list: Value = editor
        .lua(
            "local list = vim.fn.getqflist({ title = 0, items = 0 })
             local entries = {}
             for index, item in ipairs(list.items) do
               vim.cmd('cc ' .. index)
               table.insert(entries, {
                 file = vim.api.nvim_buf_get_name(0),
                 text = item.text,
                 line = vim.api.nvim_get_current_line(),
               })
             end
             return { title = list.title, entries = entries }",
        )
        .await;
    assert_eq!(
        list["title"], "Loopr: version-flag requirements",
        "{list:#}"
    );
    let entries = list["entries"].as_array().expect("entries");
    let texts: Vec<&str> = entries
        .iter()
        .map(|entry| entry["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        texts,
        [
            format!(
                "R2: {} (finding: --help does not list --version)",
                REQUIREMENTS[1].1
            ),
            format!("R3: {} (not verified yet)", REQUIREMENTS[2].1),
        ],
        "{list:#}"
    );
    for (entry, id) in entries.iter().zip(["R2", "R3"]) {
        assert!(
            entry["file"]
                .as_str()
                .is_some_and(|file| file.ends_with("/spec.md")),
            "{list:#}"
        );
        let anchor = format!("<a id=\"{id}\"></a>");
        assert!(
            entry["line"]
                .as_str()
                .is_some_and(|line| line.starts_with(&format!("- {anchor}"))),
            "the entry opens at its anchor: {list:#}"
        );
    }

    // `c` on the spec's row in the status window makes the same list.
    editor
        .exec(
            "vim.cmd('cclose')
             vim.cmd('LooprStatus')
             vim.api.nvim_set_current_win(vim.fn.bufwinid('loopr://status'))
             for lnum, line in ipairs(vim.api.nvim_buf_get_lines(0, 0, -1, false)) do
               if line:match('^%s*spec%s') then vim.api.nvim_win_set_cursor(0, { lnum, 0 }) end
             end
             vim.fn.setqflist({}, 'f')",
        )
        .await;
    let hints: Vec<String> = editor
        .lua("local status = require('loopr.status') return { status.hint(100), status.hint(120) }")
        .await;
    assert!(
        !hints[0].contains("c coverage") && hints[1].contains("c coverage"),
        "c shows in the winbar where every other key fits too: {hints:?}"
    );
    editor.type_keys("c").await;
    let current: Value = editor
        .lua("return vim.fn.getqflist({ title = 0, size = 0 })")
        .await;
    assert_eq!(
        current,
        json!({"title": "Loopr: version-flag requirements", "size": 2})
    );
    editor.quit().await;
}

/// The NOTE cell of the `kind` `name` row of `:LooprStatus`.
async fn status_note(editor: &TestNvim, kind: &str, name: &str) -> String {
    editor.command("LooprStatus").await;
    let lines: Vec<String> = editor
        .lua("return vim.api.nvim_buf_get_lines(vim.fn.bufnr('loopr://status'), 0, -1, false)")
        .await;
    let note_at = lines[0].find("NOTE").expect("a NOTE column");
    let row = lines
        .iter()
        .find(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            words.first() == Some(&kind) && words.get(1) == Some(&name)
        })
        .unwrap_or_else(|| panic!("no {kind} {name} row: {lines:#?}"));
    let cells: String = row.chars().skip(note_at).collect();
    cells.trim().to_owned()
}

/// A phase verified, then revised: its verification checked the old iteration of phase.md,
/// so the phase shows not verified, and its requirement is listed as not verified yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verified_phase_revised_is_not_verified_any_more() {
    let fake = FakeLlm::start().await;
    script_the_spec(&fake);
    // The revision of print-version.
    fake.push_routed(
        &phase_route("print-version"),
        tool_turn(
            "revised",
            "create_phase",
            phase_citing("print-version", "R1"),
        ),
    );
    let mut editor = planned(&fake).await;
    script_print_version_passing(&fake);
    let code = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code, "complete").await;
    assert_eq!(
        status_note(&editor, "phase", "print-version").await,
        "verified"
    );
    assert_eq!(
        status_note(&editor, "spec", "version-flag").await,
        "requirements 1/3 verified"
    );

    let records = editor.status_records().await;
    let phase = records
        .iter()
        .find(|r| r["type"] == "phase" && r["name"] == "print-version")
        .expect("print-version")
        .clone();
    let phase_md = phase["artifact_path"]
        .as_str()
        .expect("phase.md")
        .to_owned();
    editor
        .exec(&format!("vim.cmd('cclose') vim.cmd.edit({phase_md:?})"))
        .await;
    revise_current(&editor, "Print the version on stderr too").await;
    loop {
        let records = editor.status_records().await;
        let revised = records
            .iter()
            .any(|r| r["id"] == phase["id"] && r["iteration"] == 2 && r["status"] == "complete");
        if revised {
            break;
        }
        editor.wait_event("LooprLoopUpdated", |_| true).await;
    }

    assert_eq!(
        status_note(&editor, "phase", "print-version").await,
        "not verified yet"
    );
    assert_eq!(
        status_note(&editor, "spec", "version-flag").await,
        "requirements 0/3 verified"
    );
    assert_eq!(editor.command("LooprRequirements version-flag").await, None);
    let texts: Vec<String> = editor
        .lua(
            "local texts = {}
             for _, item in ipairs(vim.fn.getqflist()) do table.insert(texts, item.text) end
             return texts",
        )
        .await;
    assert_eq!(
        texts.first(),
        Some(&format!("R1: {} (not verified yet)", REQUIREMENTS[0].1)),
        "{texts:#?}"
    );
    assert_eq!(texts.len(), 3, "{texts:#?}");
    editor.quit().await;
}
