//! Verification after a passing validation: the findings go back to the code loop, fill the
//! quickfix list `Loopr: <phase> verification`, and a report citing what does not exist is
//! refused until corrected.

use serde_json::{Value, json};

use super::code::planned_editor;
use crate::fake_llm::{FakeLlm, Reply};
use crate::nvim::TestNvim;
use crate::scenario::{
    code_route, edit_main_and_complete, requests_routed, run_code_loop, tool_results, tool_turn,
};

/// Verification on (the shared setup turns it off), changes approved without asking.
const VERIFYING: &str = "{ approvals = { write = 'auto', edit = 'auto', command = 'auto' }, \
                         verify = { max_rounds = 2 } }";

/// The opening words of a verification's first message for `phase`.
pub(super) fn verify_route(phase: &str) -> String {
    format!("Verify phase `{phase}` against its requirements.")
}

/// A planned editor whose phase print-version is verified, its code loop's first turn
/// scripted to greet with `greeting` and complete; returns it with the routes of the code
/// loop's and the verifier's conversations.
async fn verifying_editor(fake: &FakeLlm, greeting: &str) -> (TestNvim, String, String) {
    let editor = planned_editor(fake, VERIFYING, "true").await;
    let code = code_route("print-version");
    fake.push_routed(
        &code,
        edit_main_and_complete("e1", "\"hello\"", &format!("{greeting:?}")),
    );
    (editor, code, verify_route("print-version"))
}

pub(super) fn report_turn(id: &str, report: Value) -> Reply {
    tool_turn(id, "report_verification", report)
}

/// A failing report: R1 not met, with one critical finding at `file`:`line`.
pub(super) fn r1_not_met(file: &str, line: u32, message: &str, fix: &str) -> Value {
    json!({
        "verdict": "fail",
        "summary": "R1 is not met: the version is not printed.",
        "findings": [{
            "severity": "critical",
            "requirement": "R1",
            "file": file,
            "line": line,
            "message": message,
            "fix": fix
        }]
    })
}

/// The quickfix list titled `title`: its entries as the user sees them.
async fn quickfix(editor: &TestNvim, title: &str) -> Value {
    editor
        .lua(&format!(
            "local qf = require('loopr.qf')
             local id = qf.find({title:?})
             if not id then return vim.NIL end
             local list = vim.fn.getqflist({{ id = id, items = 1 }})
             local items = {{}}
             for _, item in ipairs(list.items) do
               table.insert(items, {{
                 file = vim.api.nvim_buf_get_name(item.bufnr),
                 lnum = item.lnum, end_lnum = item.end_lnum, type = item.type, text = item.text,
               }})
             end
             return items"
        ))
        .await
}

/// Checks that the list `Loopr: print-version verification` holds one finding, at line 2 of
/// src/main.rs, of `kind` (E, W, I), reading `text`.
async fn assert_listed_at_main_line_2(editor: &TestNvim, kind: &str, text: &str) {
    let project = editor.dirs.project.display().to_string();
    assert_eq!(
        quickfix(editor, "Loopr: print-version verification").await,
        json!([{
            "file": format!("{project}/src/main.rs"),
            "lnum": 2,
            "end_lnum": 0,
            "type": kind,
            "text": text
        }])
    );
}

async fn messages(editor: &TestNvim) -> String {
    editor
        .lua("return vim.api.nvim_exec2('messages', { output = true }).output")
        .await
}

/// The text of a request's last user message (tool results and the notes after them).
fn last_user_text(body: &Value) -> String {
    let last = body["messages"]
        .as_array()
        .and_then(|messages| messages.last())
        .expect("a last message");
    last["content"]
        .as_array()
        .expect("content blocks")
        .iter()
        .map(|block| {
            block["text"]
                .as_str()
                .or(block["content"].as_str())
                .unwrap_or_default()
                .to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_critical_finding_goes_back_to_the_code_loop_and_the_second_verification_passes() {
    let fake = FakeLlm::start().await;
    let (mut editor, code, verify) = verifying_editor(&fake, "sample").await;
    fake.push_routed(
        &verify,
        report_turn(
            "v1",
            r1_not_met(
                "src/main.rs",
                2,
                "It prints sample, not the version.",
                "Print sample 0.3.1.",
            ),
        ),
    );
    fake.push_routed(
        &code,
        edit_main_and_complete("e2", "\"sample\"", "\"sample 0.3.1\""),
    );
    fake.push_routed(
        &verify,
        report_turn(
            "v2",
            json!({"verdict": "pass", "summary": "R1 is met.", "findings": []}),
        ),
    );

    let code_id = run_code_loop(&mut editor, "print-version").await;
    let blocked = editor
        .wait_event("LooprVerification", |data| data["blocking"] == true)
        .await;
    assert_eq!(
        (blocked["label"].clone(), blocked["round"].clone()),
        (json!("print-version"), json!(1))
    );
    assert_listed_at_main_line_2(
        &editor,
        "E",
        "It prints sample, not the version. [R1] Fix: Print sample 0.3.1.",
    )
    .await;
    let passed = editor
        .wait_event("LooprVerification", |data| data["blocking"] == false)
        .await;
    assert_eq!(passed["round"], 2);
    editor.wait_status(&code_id, "complete").await;
    assert_eq!(
        quickfix(&editor, "Loopr: print-version verification").await,
        json!([]),
        "the passing verification empties the list"
    );
    let main = std::fs::read_to_string(editor.dirs.project.join("src/main.rs")).expect("main.rs");
    assert!(main.contains("\"sample 0.3.1\""), "{main}");
    let shown = messages(&editor).await;
    assert!(
        shown.contains(
            "Loopr: print-version verification failed (round 1): 1 critical finding; see :copen"
        ),
        "{shown}"
    );
    assert!(
        shown.contains("Loopr: print-version verification passed (round 2)"),
        "{shown}"
    );
    assert!(
        !editor
            .progress_messages("verifying, round 1/2: ")
            .is_empty(),
        "the status row says the round: {:#?}",
        editor.events_seen()
    );

    // What the verifier was sent: the phase's diff and the requirement with its check.
    let verifications = requests_routed(&fake, &verify);
    assert_eq!(verifications.len(), 2);
    let first = crate::fake_llm::first_user_text(&verifications[0]);
    assert!(
        first.contains("-    println!(\"hello\");\n+    println!(\"sample\");"),
        "{first}"
    );
    assert!(
        first.contains(
            "- R1: WHEN the user runs sample --version THE SYSTEM SHALL print sample 0.3.1 and \
             exit 0\n  Check: An integration test runs the binary with --version."
        ),
        "{first}"
    );
    assert!(
        verifications[0]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .all(|tool| !["edit_file", "write_file", "run_command"]
                .contains(&tool["name"].as_str().unwrap_or_default())),
        "the verifier only reads"
    );
    // What the code loop's model got back: the findings, then the next round's note.
    let asked = requests_routed(&fake, &code);
    assert_eq!(asked.len(), 2, "one iteration per round");
    let fed_back = last_user_text(&asked[1]);
    assert!(
        fed_back.contains("Verification round 1/2 checked the changes")
            && fed_back.contains(
                "- critical src/main.rs:2: It prints sample, not the version. [R1] Fix: Print \
                 sample 0.3.1."
            ),
        "{fed_back}"
    );
    let records = editor.status_records().await;
    let code_record = records
        .iter()
        .find(|r| r["type"] == "code")
        .expect("code loop");
    assert_eq!(
        code_record["iteration"], 2,
        "the findings took an iteration"
    );
    // The code loop's transcript shows the findings it got, then the passing round.
    crate::scenario::watch_transcripts(&editor).await;
    let buf = crate::scenario::open_transcript(&editor, Some(&code_id)).await;
    let transcript =
        crate::scenario::transcript_with(&mut editor, buf, "Verification round 2 passed").await;
    let found_at = transcript
        .find("- critical src/main.rs:2: It prints sample, not the version.")
        .expect("the findings in the transcript");
    let passed_at = transcript
        .find("Verification round 2 passed (no findings): R1 is met.")
        .expect("the passing round in the transcript");
    assert!(found_at < passed_at, "{transcript}");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finding_citing_a_missing_file_or_a_line_past_the_end_is_refused_and_corrected() {
    let fake = FakeLlm::start().await;
    let (mut editor, _code, verify) = verifying_editor(&fake, "sample 0.3.1").await;
    let finding = |file: &str, line: u32| json!({"severity": "minor", "file": file, "line": line, "message": "Say why in a comment."});
    fake.push_routed(
        &verify,
        report_turn(
            "v1",
            json!({"verdict": "pass", "summary": "R1 is met.", "findings": [
                finding("src/version.rs", 1),
                finding("src/main.rs", 9),
            ]}),
        ),
    );
    fake.push_routed(
        &verify,
        report_turn(
            "v2",
            json!({"verdict": "pass", "summary": "R1 is met.", "findings": [finding("src/main.rs", 2)]}),
        ),
    );

    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code_id, "complete").await;
    let verifications = requests_routed(&fake, &verify);
    assert_eq!(verifications.len(), 2, "the refused report was corrected");
    let refused = tool_results(&verifications[1]);
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["is_error"], true, "{refused:?}");
    let content = refused[0]["content"].as_str().expect("text");
    assert!(
        content.contains("finding 1 (src/version.rs): src/version.rs does not exist;"),
        "{content}"
    );
    assert!(
        content.contains(
            "finding 2 (src/main.rs): src/main.rs has 3 lines, so line 9 is past its end;"
        ),
        "{content}"
    );
    assert_listed_at_main_line_2(&editor, "I", "Say why in a comment.").await;
    editor.quit().await;
}

/// `verify = false` in `setup()` is taken (as `enabled = false`) and sent so to the host; a
/// value that is neither a table nor a boolean is refused, saying both forms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_takes_verify_false_as_verification_off() {
    let fake = FakeLlm::start().await;
    let editor = crate::scenario::start_editor(&fake, "{}").await;
    let outcome: Value = editor
        .lua(
            "vim.cmd('messages clear')
             local ok = require('loopr').setup({ bin = require('loopr.config').get().bin, verify = false })
             local config = require('loopr.config')
             return { ok = ok, verify = config.get().verify, sent = config.settings().verify }",
        )
        .await;
    assert_eq!(outcome["ok"], true, "{outcome}");
    // Loopr's messages are shown once Neovim gets to them: asked for apart.
    assert_eq!(messages(&editor).await.trim(), "");
    assert_eq!(
        outcome["verify"],
        json!({"enabled": false, "block_on": "critical", "max_rounds": 2})
    );
    assert_eq!(outcome["sent"]["enabled"], false, "{outcome}");
    editor
        .exec(
            "vim.cmd('messages clear')
             require('loopr').setup({ bin = require('loopr.config').get().bin, verify = 'no' })",
        )
        .await;
    let refused = messages(&editor).await;
    assert!(
        refused.contains(
            "Loopr: setup(): option verify expects a table with keys block_on (one of \"minor\", \
             \"major\", \"critical\"), enabled (a boolean), max_rounds (an integer >= 1), or a \
             boolean (its enabled alone), got \"no\" (string)"
        ),
        "{refused}"
    );
    editor.quit().await;
}
