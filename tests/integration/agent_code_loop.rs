//! A code loop run by a coding agent over ACP (`code_agent`, `:LooprRun {phase} agent=<name>`)
//! against the real test agent (`tests/support/acp_agent.rs`): its scripted session validated
//! and sent back until it passes, its text, tool calls and plan in the transcript and the
//! quickfix list, its direct writes in the changes list and undo; a cancel mid-turn, a crash
//! mid-turn and an agent that is not there, none hanging.

use serde_json::{Value, json};

use super::code::planned_editor;
use crate::fake_llm::FakeLlm;
use crate::nvim::TestNvim;
use crate::scenario::{
    files_containing, open_transcript, run_code_loop, run_loopr, run_to_the_budget,
    transcript_with, watch_transcripts,
};

pub(super) const AGENT: &str = env!("CARGO_BIN_EXE_loopr-test-acp-agent");
/// A secret the agent's `env` gives it: stored with no loop, shown nowhere.
const AGENT_TOKEN: &str = "agent-token-never-stored";
/// What the phase's validation asks: the agent's second turn writes it.
pub(super) const VALIDATION: &str = "grep -q ok status.txt";

/// Setup with the test agent, `behave`-ing, as agent `test`; the code loop's agent with
/// `code_agent`.
pub(super) fn agent_setup(behave: &str, code_agent: bool) -> String {
    format!(
        "{{ agents = {{ test = {{ command = {AGENT:?}, args = {{ '--behave', {behave:?} }}, env = {{ LOOPR_TEST_AGENT_TOKEN = {AGENT_TOKEN:?} }} }} }}{} }}",
        if code_agent {
            ", code_agent = 'test'"
        } else {
            ""
        }
    )
}

/// Answers every approval request as it comes: what names `deploy` rejected, the rest
/// accepted; each answer noted in `_G.agent_approvals`.
pub(super) async fn answer_approvals(editor: &TestNvim) {
    editor
        .exec(
            "_G.agent_approvals = {}
             vim.api.nvim_create_autocmd('User', { pattern = 'LooprApprovalRequested', callback = function(ev)
               local req = ev.data
               local reject = req.subject:find('deploy') ~= nil
               local decision = reject and 'reject' or 'accept'
               table.insert(_G.agent_approvals, ('%s %s: %s'):format(req.kind, req.subject, decision))
               vim.schedule(function()
                 require('loopr.approvals').answer(req.id, decision, reject and 'not now' or nil)
               end)
             end })",
        )
        .await;
}

/// The test agent noted a `session/cancel` in the project.
pub(super) fn assert_agent_saw_cancel(editor: &TestNvim) {
    assert_eq!(
        std::fs::read_to_string(editor.dirs.project.join("agent-saw-cancel"))
            .ok()
            .as_deref(),
        Some("session/cancel arrived\n"),
        "the agent was sent session/cancel"
    );
}

/// The error loop `id`'s record keeps, as `:LooprStatus` shows it.
pub(super) async fn loop_error(editor: &TestNvim, id: &str) -> String {
    editor
        .status_records()
        .await
        .iter()
        .find(|record| record["id"] == id)
        .and_then(|record| record["error"].as_str())
        .unwrap_or_default()
        .to_owned()
}

pub(super) async fn messages(editor: &TestNvim) -> String {
    editor
        .lua("return vim.api.nvim_exec2('messages', { output = true }).output")
        .await
}

/// Runs print-version's code loop through the scripted agent to its end; the editor, the
/// loop's id and the validations seen (iteration, passed).
async fn scripted_run(fake: &FakeLlm) -> (TestNvim, String, Vec<(u64, bool)>) {
    let mut editor = planned_editor(fake, &agent_setup("script", true), VALIDATION).await;
    std::fs::write(editor.dirs.project.join("notes.txt"), "notes before\n").expect("write");
    answer_approvals(&editor).await;
    watch_transcripts(&editor).await;
    let code_id = run_code_loop(&mut editor, "print-version").await;
    let mut validations = Vec::new();
    while validations.last() != Some(&(2, true)) && validations.len() < 3 {
        let validation = editor
            .wait_event("LooprValidation", |data| {
                data["loop_id"] == code_id.as_str()
            })
            .await;
        validations.push((
            validation["iteration"].as_u64().unwrap_or_default(),
            validation["passed"] == true,
        ));
    }
    editor.wait_status(&code_id, "complete").await;
    (editor, code_id, validations)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_s_loop_is_validated_sent_back_and_passes_with_its_work_shown_and_undoable() {
    let fake = FakeLlm::start().await;
    let readme_before = "# sample\n\nA tiny CLI.\n";
    let (mut editor, code_id, validations) = scripted_run(&fake).await;
    let project = editor.dirs.project.clone();
    let read = |path: &str| std::fs::read_to_string(project.join(path)).ok();
    assert_eq!(
        validations,
        [(1, false), (2, true)],
        "sent back once, then passed"
    );
    assert_eq!(read("status.txt").as_deref(), Some("ok\n"));
    assert_eq!(
        read("README.md").as_deref(),
        Some("# sample\n\nWritten behind the protocol.\n"),
        "the agent's own write"
    );

    // The transcript: the agent's text, its tool calls with their status, its plan, and
    // what Loopr told it.
    let buf = open_transcript(&editor, Some(&code_id)).await;
    let transcript = transcript_with(&mut editor, buf, "Fixing what the validation said").await;
    for shown in [
        "→ **Write README.md**",
        "Write README.md: completed",
        "→ **Run make deploy**",
        "Run make deploy: failed",
        "**The agent's plan:**",
        "- [x] Read notes.txt",
        "- [~] Make the validation pass",
        "- [x] Make the validation pass",
        "Validation failed: `grep -q ok status.txt`",
        "end your turn again",
        "Done for now.",
        "LOOPR_TEST_AGENT_TOKEN is set",
    ] {
        assert!(
            transcript.contains(shown),
            "{shown:?} not in:\n{transcript}"
        );
    }
    assert!(
        files_containing(&editor.dirs.loopr_home, AGENT_TOKEN).is_empty(),
        "the agent's env value is stored nowhere"
    );

    // The agent's todo, as a quickfix list.
    let todo: Value = editor
        .lua(
            "local id = require('loopr.qf').find('Loopr: print-version agent todo')
             local items = vim.fn.getqflist({ id = id, items = 1 }).items
             return vim.tbl_map(function(item) return item.text end, items)",
        )
        .await;
    assert_eq!(
        todo,
        json!([
            "[x] Read notes.txt",
            "[x] Rewrite README.md",
            "[x] Make the validation pass"
        ])
    );

    // Its direct write is in the changes list, and undo takes it back.
    let changed = crate::scenario::changed_files(&editor, "print-version").await;
    assert!(changed.contains(&"README.md".to_owned()), "{changed:?}");
    // Like a command's, what the agent wrote behind the protocol may hold the user's edits
    // saved during its turn: undo names the agent as its author, and `!` takes it back.
    assert_eq!(editor.command("LooprUndo print-version").await, None);
    let shown = messages(&editor).await;
    assert!(
        shown.contains(
            "  README.md: written by the coding agent test's own tools during its turn; it may \
             hold your edits saved meanwhile"
        ),
        "{shown}"
    );
    assert!(
        shown.contains(
            ":LooprUndo! print-version overwrites the files changed during a command or written \
             by the coding agent."
        ),
        "{shown}"
    );
    assert_eq!(editor.command("LooprUndo! print-version").await, None);
    assert_eq!(
        read("README.md").as_deref(),
        Some(readme_before),
        "{}",
        messages(&editor).await
    );
    editor.quit().await;
}

/// What the agent's requests get, served by the loop's `AgentClient`: its read, its edit
/// once approved, its command's permission rejected (and it goes on), its terminal in the
/// sandbox (a write outside the project refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_s_requests_go_through_loopr_s_confinement_approvals_and_sandbox() {
    let fake = FakeLlm::start().await;
    let (mut editor, code_id, _) = scripted_run(&fake).await;
    let project = editor.dirs.project.clone();
    let read = |path: &str| std::fs::read_to_string(project.join(path)).ok();
    let buf = open_transcript(&editor, Some(&code_id)).await;
    let transcript = transcript_with(&mut editor, buf, "Done for now.").await;
    for shown in [
        "notes.txt over fs: notes before",
        "the edit was approved",
        "make deploy was rejected; going on without it",
        "the terminal's command exited",
    ] {
        assert!(
            transcript.contains(shown),
            "{shown:?} not in:\n{transcript}"
        );
    }
    assert_eq!(read("notes.txt").as_deref(), Some("edited over fs\n"));
    assert_eq!(read("terminal.txt").as_deref(), Some("inside\n"));
    assert!(
        !project.join("../agent-outside.txt").exists(),
        "the sandbox keeps the terminal's command inside the project"
    );
    let approvals: Vec<String> = editor.lua("return _G.agent_approvals").await;
    assert!(
        approvals
            .iter()
            .any(|answer| answer.starts_with("edit ") && answer.ends_with(": accept")),
        "{approvals:?}"
    );
    assert!(
        approvals
            .iter()
            .any(|answer| answer.contains("deploy") && answer.ends_with(": reject")),
        "{approvals:?}"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_turn_tells_the_agent_and_stops_its_process() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, &agent_setup("wait", false), VALIDATION).await;
    answer_approvals(&editor).await;
    assert_eq!(
        editor.command("LooprRun print-version agent=test").await,
        None
    );
    let code_id = crate::scenario::code_loop_id(&mut editor).await;
    editor
        .wait_event("LooprProgress", |data| {
            data["message"]
                .as_str()
                .is_some_and(|message| message.contains("the agent: Thinking it over"))
        })
        .await;
    let pid: i32 = std::fs::read_to_string(editor.dirs.project.join("agent.pid"))
        .expect("the agent wrote its pid")
        .trim()
        .parse()
        .expect("a pid");
    assert_eq!(
        editor.command(&format!("LooprCancel {code_id}")).await,
        None
    );
    editor.wait_status(&code_id, "cancelled").await;
    assert_agent_saw_cancel(&editor);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the agent's process is gone"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_budget_the_agent_is_told_to_stop_and_the_loop_pauses_with_its_spend_kept() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, &agent_setup("script", true), VALIDATION).await;
    answer_approvals(&editor).await;
    let planning: u64 = editor
        .status_records()
        .await
        .iter()
        .map(|row| row["tokens_in"].as_u64().unwrap_or(0) + row["tokens_out"].as_u64().unwrap_or(0))
        .sum();
    // The agent says its context holds 1200 tokens in its first turn: over the 1000 left.
    let budget = planning + 1000;
    let (code_id, message) = run_to_the_budget(
        &mut editor,
        &format!("{{ tokens = {budget} }}"),
        "print-version",
    )
    .await;
    assert!(
        message.contains(&format!(
            "reached its budget ({} of {budget} tokens)",
            planning + 1200
        )),
        "{message}"
    );
    editor.wait_status(&code_id, "paused").await;
    assert_agent_saw_cancel(&editor);
    let code = editor
        .status_records()
        .await
        .into_iter()
        .find(|row| row["id"] == code_id.as_str())
        .expect("the code loop's row");
    assert_eq!(
        code["tokens_in"], 1200,
        "the agent's turn is counted: {code:#}"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_dies_mid_turn_fails_the_loop_with_its_stderr() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, &agent_setup("die", true), VALIDATION).await;
    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code_id, "failed").await;
    let error = loop_error(&editor, &code_id).await;
    assert!(
        error.starts_with("agent \"test\" exited before it answered (exit status 4)")
            && error.ends_with(
                "its stderr ended with:\nloopr-test-acp-agent: working on the phase\n\
                 loopr-test-acp-agent: out of memory (scripted crash)"
            ),
        "{error}"
    );
    assert!(
        messages(&editor)
            .await
            .contains("out of memory (scripted crash)"),
        "{}",
        messages(&editor).await
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_not_configured_or_not_installed_is_named_with_its_setting() {
    let fake = FakeLlm::start().await;
    let setup = format!(
        "{{ agents = {{ test = {{ command = {AGENT:?} }}, gone = {{ command = 'loopr-no-such-agent-acp' }} }} }}"
    );
    let mut editor = planned_editor(&fake, &setup, VALIDATION).await;
    let started: Value = editor
        .lua_answered(
            "require('loopr').run('print-version agent=codex', function(id) result = id or vim.NIL end)",
        )
        .await;
    assert_eq!(started, Value::Null, "refused");
    // <Tab> after `agent=` offers the configured agents.
    let offered: Value = editor
        .lua("return require('loopr').complete('run', 'agent=')")
        .await;
    assert_eq!(offered, serde_json::json!(["agent=gone", "agent=test"]));
    let shown = messages(&editor).await;
    assert!(
        shown.contains(
            "Loopr: agent=codex names no agent of agents (the configured agents are gone, \
             test); add it to agents in setup(), or pick one with :LooprRun {phase} agent=<Tab>"
        ),
        "{shown}"
    );

    assert_eq!(
        editor.command("LooprRun print-version agent=gone").await,
        None
    );
    let code_id = crate::scenario::code_loop_id(&mut editor).await;
    editor.wait_status(&code_id, "failed").await;
    assert_eq!(
        loop_error(&editor, &code_id).await,
        "agent \"gone\" (setting agents.gone.command): `loopr-no-such-agent-acp` not found on PATH"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_runs_a_phase_through_the_agent_it_names() {
    let fake = FakeLlm::start().await;
    let editor = planned_editor(&fake, "{}", VALIDATION).await;
    let dirs = &editor.dirs;
    let settings =
        json!({"verify": {"enabled": false}, "agents": {"test": {"command": AGENT, "args": ["--behave", "script"]}}}).to_string();
    let fake = &fake;
    let run_through = |agent: &'static str| {
        let settings = settings.clone();
        async move {
            let args = [
                "run",
                "print-version",
                "--yes",
                "--unsandboxed",
                "--agent",
                agent,
                "--settings",
                &settings,
            ];
            run_loopr(dirs, fake, &args).await
        }
    };
    let refused = run_through("codex").await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "--agent codex names no agent of agents (the configured agents are test); add it to \
             agents in --settings, or pass --agent with one of them"
        ),
        "{stderr}"
    );

    let run = run_through("test").await;
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(
        stderr.contains("iteration 1: `grep -q ok status.txt` failed")
            && stderr.contains("iteration 2: `grep -q ok status.txt` passed")
            && stderr.contains("the agent's plan: 3 of 3 entries done"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(dirs.project.join("status.txt"))
            .ok()
            .as_deref(),
        Some("ok\n")
    );
    editor.quit().await;
}
