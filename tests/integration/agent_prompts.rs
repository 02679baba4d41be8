//! What a coding agent is told, read from the prompts the test agent records
//! (`LOOPR_TEST_AGENT_PROMPTS`): a verification's findings sent back in its words (end the
//! turn, no `complete_phase`), and a retried loop's new session told the phase again with
//! what Loopr said last.

use serde_json::{Value, json};

use super::agent_code_loop::{AGENT, VALIDATION, answer_approvals};
use super::code::planned_editor;
use super::verification::{r1_not_met, report_turn, verify_route};
use crate::fake_llm::FakeLlm;
use crate::nvim::TestNvim;
use crate::scenario::run_code_loop;

/// Where the test agent records its prompts, relative to the project (its working
/// directory): beside the project, so the record is no change of the loop's.
const PROMPTS: &str = "../agent-prompts.jsonl";

/// Setup with the scripted test agent as the code loop's agent, recording its prompts, and
/// `more` settings.
fn recording_setup(more: &str) -> String {
    format!(
        "{{ agents = {{ test = {{ command = {AGENT:?}, args = {{ '--behave', 'script' }}, env = {{ LOOPR_TEST_AGENT_PROMPTS = {PROMPTS:?} }} }} }}, code_agent = 'test', {more} }}"
    )
}

/// A planned editor whose code loop's agent records its prompts, with `more` settings, its
/// approvals answered.
async fn recording_editor(fake: &FakeLlm, more: &str) -> TestNvim {
    let editor = planned_editor(fake, &recording_setup(more), VALIDATION).await;
    answer_approvals(&editor).await;
    editor
}

/// The prompt the agent received that holds `words`, checking that none it received names
/// `complete_phase`, a tool it does not have.
fn prompt_holding(editor: &TestNvim, words: &str) -> String {
    let prompts = recorded_prompts(editor);
    for (_, prompt) in &prompts {
        assert!(!prompt.contains("complete_phase"), "{prompt}");
    }
    prompts
        .into_iter()
        .map(|(_, prompt)| prompt)
        .find(|prompt| prompt.contains(words))
        .unwrap_or_else(|| panic!("no prompt holds {words:?}: {:#?}", recorded_prompts(editor)))
}

/// The prompts the agent received, in order, each with the id of the agent process.
fn recorded_prompts(editor: &TestNvim) -> Vec<(u64, String)> {
    let text = std::fs::read_to_string(editor.dirs.project.join(PROMPTS)).unwrap_or_default();
    text.lines()
        .map(|line| {
            let line: Value = serde_json::from_str(line).expect("a JSON line");
            (
                line["pid"].as_u64().expect("a pid"),
                line["prompt"].as_str().expect("a prompt").to_owned(),
            )
        })
        .collect()
}

/// A verification's blocking findings go back to the agent as its next prompt, asking it to
/// end its turn: it has no `complete_phase` tool, and no prompt names one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verification_s_findings_ask_the_agent_to_end_its_turn_not_to_call_complete_phase() {
    let fake = FakeLlm::start().await;
    let mut editor = recording_editor(&fake, "verify = { max_rounds = 2 }").await;
    let verify = verify_route("print-version");
    fake.push_routed(
        &verify,
        report_turn(
            "v1",
            r1_not_met(
                "status.txt",
                1,
                "It says ok, not the version.",
                "Print the version.",
            ),
        ),
    );
    fake.push_routed(
        &verify,
        report_turn(
            "v2",
            json!({"verdict": "pass", "summary": "R1 is met.", "findings": []}),
        ),
    );
    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code_id, "complete").await;

    let findings = prompt_holding(&editor, "Verification round 1/2");
    assert!(
        findings.contains("It says ok, not the version.")
            && findings.contains("Fix them, then end your turn again"),
        "{findings}"
    );
    editor.quit().await;
}

/// A loop that gave up (its one iteration failed validation) and is retried opens a new
/// session, in a new agent process, whose first prompt is the phase again with the
/// validation's failure that Loopr said last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_agent_loop_tells_its_new_session_the_phase_and_the_last_feedback() {
    let fake = FakeLlm::start().await;
    let mut editor = recording_editor(&fake, "code_max_iterations = 1").await;
    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code_id, "failed").await;
    let first_session = recorded_prompts(&editor);
    let [(first_pid, phase_prompt)] = first_session.as_slice() else {
        panic!("one prompt before the retry: {first_session:#?}");
    };
    assert!(
        phase_prompt.contains("# Phase: Phase print-version"),
        "{phase_prompt}"
    );

    assert_eq!(editor.command(&format!("LooprRetry {code_id}")).await, None);
    editor.wait_status(&code_id, "complete").await;
    let prompts = recorded_prompts(&editor);
    let (second_pid, resumed) = prompts.get(1).expect("a prompt after the retry");
    assert_ne!(first_pid, second_pid, "a new agent process, a new session");
    assert!(
        resumed.starts_with(phase_prompt.as_str()),
        "the phase again:\n{resumed}"
    );
    assert!(
        resumed.contains("Validation failed: `grep -q ok status.txt`"),
        "the last feedback:\n{resumed}"
    );
    editor.quit().await;
}

/// The user's revision of an agent's work (`:LooprRevise` on the code loop awaiting review)
/// reaches the agent asking it to end its turn, not to call `complete_phase`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_asks_the_agent_to_end_its_turn_not_to_call_complete_phase() {
    let fake = FakeLlm::start().await;
    let mut editor = recording_editor(&fake, "review_gates = { 'plan', 'code' }").await;
    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code_id, "awaiting_approval").await;
    let revised: bool = editor
        .lua(&format!(
            "return require('loopr').revise('Also print the commit hash.', {{ id = {code_id:?} }})"
        ))
        .await;
    assert!(revised, "the revision is sent");
    // The revised run: its first turn fails the validation (3), its second passes (4).
    editor
        .wait_event("LooprValidation", |data| {
            data["loop_id"] == code_id.as_str() && data["iteration"] == 4 && data["passed"] == true
        })
        .await;

    let revision = prompt_holding(&editor, "Also print the commit hash.");
    assert!(
        revision.contains("Make these changes, then end your turn again."),
        "{revision}"
    );
    editor.quit().await;
}
