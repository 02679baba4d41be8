//! `:LooprVerify` on a project the user edited by hand: the verifier is asked with the
//! phase's tasks and requirements, its findings fill the quickfix list and a message says what
//! it found, and nothing in the project or the stored artifacts changes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::code::planned_editor;
use crate::fake_llm::FakeLlm;
use crate::nvim::TestNvim;
use crate::scenario::tool_turn;

/// Every file under `dir` with its bytes (links to directories left out).
fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    crate::scenario::files_under(dir)
        .into_iter()
        .filter(|path| path.is_file())
        .map(|path| {
            let bytes = std::fs::read(&path).expect("read");
            (path, bytes)
        })
        .collect()
}

/// The stored artifacts: every file of every loop's iterations.
fn artifacts(loopr_home: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    contents(loopr_home)
        .into_iter()
        .filter(|(path, _)| {
            path.components()
                .any(|part| part.as_os_str() == "iterations")
        })
        .collect()
}

/// The current quickfix list: its title and its entries as the user reads them.
async fn quickfix(editor: &TestNvim) -> Value {
    editor
        .lua(
            "local list = vim.fn.getqflist({ title = 1, items = 1 })
             local entries = {}
             for _, item in ipairs(list.items) do
               table.insert(entries, { file = vim.api.nvim_buf_get_name(item.bufnr), lnum = item.lnum,
                 end_lnum = item.end_lnum, type = item.type, text = item.text })
             end
             return { title = list.title, entries = entries }",
        )
        .await
}

fn report_turn(verdict: &str, findings: Value) -> crate::fake_llm::Reply {
    tool_turn(
        "verdict",
        "report_verification",
        json!({"verdict": verdict, "summary": "Checked src/main.rs against R1.", "findings": findings}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_on_a_tree_edited_by_hand_reports_findings_and_changes_nothing() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, "{}", "true").await;
    // The user edits the code by hand: no code loop ever ran.
    let main = editor.dirs.project.join("src/main.rs");
    std::fs::write(&main, "fn main() {\n    println!(\"bye\");\n}\n").expect("edit");
    let project_before = contents(&editor.dirs.project);
    let artifacts_before = artifacts(&editor.dirs.loopr_home);
    let requests_before = fake.requests().len();
    fake.push(report_turn(
        "fail",
        json!([
            {"severity": "critical", "requirement": "R1", "file": "src/main.rs", "line": 2,
             "message": "--version is never matched", "fix": "Match --version first"},
            {"severity": "minor", "file": "src/main.rs", "line": 1, "end_line": 3,
             "message": "main has no doc comment"}
        ]),
    ));

    assert_eq!(editor.command("LooprVerify print-version").await, None);
    // Its end comes after what it found, in the order the host sent them.
    editor
        .wait_event("LooprLoopUpdated", |data| {
            data["type"] == "verify" && data["status"] == "complete"
        })
        .await;

    // The verifier was asked with the phase's tasks and the requirement its spec gave it.
    let asked: Vec<Value> = fake.requests()[requests_before..]
        .iter()
        .map(|request| request.body.clone())
        .collect();
    assert_eq!(asked.len(), 1, "one turn: {asked:#?}");
    let first = crate::fake_llm::first_user_text(&asked[0]);
    for needle in [
        "Match --version before other arguments and print the version",
        "Add a test for print-version",
        "R1",
        "WHEN the user runs sample --version THE SYSTEM SHALL print sample 0.3.1 and exit 0",
    ] {
        assert!(first.contains(needle), "{needle:?} missing from:\n{first}");
    }
    let offered: Vec<&str> = asked[0]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    for changing in ["write_file", "edit_file", "run_command"] {
        assert!(!offered.contains(&changing), "{offered:?}");
    }

    // What the user sees: the message, and the findings in the quickfix list.
    let messages: String = editor.lua("return vim.fn.execute('messages')").await;
    let told = "Loopr: print-version verification failed: 1 critical, 1 minor findings; see :copen";
    assert!(messages.contains(told), "{messages}");
    let list = quickfix(&editor).await;
    assert_eq!(list["title"], "Loopr: print-version verification");
    let file = main.display().to_string();
    let entries = list["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 2, "{list}");
    assert_eq!(entries[0]["file"], file.as_str());
    assert_eq!(entries[0]["lnum"], 2);
    assert_eq!(entries[0]["type"], "E");
    assert!(
        entries[0]["text"]
            .as_str()
            .is_some_and(|text| text.contains("--version is never matched")),
        "{list}"
    );
    assert_eq!(entries[1]["lnum"], 1);
    assert_eq!(entries[1]["end_lnum"], 3);
    assert_eq!(entries[1]["type"], "I");

    // Nothing changed on disk: the project's files, byte for byte, and the artifacts.
    assert_eq!(contents(&editor.dirs.project), project_before);
    assert_eq!(artifacts(&editor.dirs.loopr_home), artifacts_before);
}

/// Without a name and outside a phase.md, the host names the choices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_without_a_name_lists_the_phases_and_specs() {
    let fake = FakeLlm::start().await;
    let editor = planned_editor(&fake, "{}", "true").await;
    assert_eq!(
        editor.command("LooprVerify").await.as_deref(),
        Some(
            "Loopr: which phase or spec to verify? This project has 4; :LooprVerify \
             {phase|spec} with one of document-flag, exit-code, print-version, version-flag"
        )
    );
    assert_eq!(
        editor.command("LooprVerify nope").await.as_deref(),
        Some(
            "Loopr: no phase or spec named \"nope\" to verify; :LooprVerify {phase|spec} with \
             one of document-flag, exit-code, print-version, version-flag"
        )
    );
}

/// A verification the model is slow to answer stops at `:LooprCancel` of its loop: nothing
/// is stored beside the phase, and the quickfix lists are left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verification_under_way_is_cancelled_like_any_loop() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, "{}", "true").await;
    fake.push(crate::scenario::stalled_turn("Reading the code"));
    assert_eq!(editor.command("LooprVerify print-version").await, None);
    let running = editor
        .wait_event("LooprLoopUpdated", |data| {
            data["type"] == "verify" && data["status"] == "running"
        })
        .await;
    let id = running["id"].as_str().expect("id").to_owned();
    assert_eq!(editor.command(&format!("LooprCancel {id}")).await, None);
    editor.wait_status(&id, "cancelled").await;
    let stored = crate::scenario::files_ending_with(&editor.dirs.loopr_home, "verification.json");
    assert!(stored.is_empty(), "{stored:?}");
    let lists: i64 = editor.lua("return vim.fn.getqflist({ nr = '$' }).nr").await;
    assert_eq!(lists, 0, "no quickfix list was made");
}

/// A verification asked of a tree already at its budget is held before it starts, and says so
/// each time, not only for the first loop of the tree held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verification_held_at_the_budget_says_so_each_time() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, "{}", "true").await;
    // The planning spent more than this: whatever starts now waits for the budget.
    let ok: bool = editor
        .lua(
            "return require('loopr').setup(vim.tbl_extend('force', require('loopr.config').get(),
               { budget = { tokens = 1 } }))",
        )
        .await;
    assert!(ok, "setup refused the budget");
    let requests_before = fake.requests().len();
    let mut told: Vec<String> = Vec::new();
    for phase in ["print-version", "exit-code"] {
        assert_eq!(editor.command(&format!("LooprVerify {phase}")).await, None);
        let notice = editor
            .wait_event("LooprNotice", |data| {
                data["message"]
                    .as_str()
                    .is_some_and(|message| message.contains("reached its budget"))
                    && !told.iter().any(|id| data["loop_id"] == id.as_str())
            })
            .await;
        let message = notice["message"].as_str().unwrap_or_default();
        assert!(message.contains(":LooprApprove"), "{phase}: {notice}");
        told.push(notice["loop_id"].as_str().expect("loop id").to_owned());
    }
    let records = editor.status_records().await;
    for id in &told {
        let record = records
            .iter()
            .find(|record| record["id"] == id.as_str())
            .unwrap_or_else(|| panic!("no loop {id}: {records:#?}"));
        assert_eq!(
            (&record["type"], &record["status"]),
            (&json!("verify"), &json!("pending")),
            "held, not started: {record:#}"
        );
    }
    assert_eq!(
        fake.requests().len(),
        requests_before,
        "no verification asked the model"
    );
}
