//! A coding agent's turn within Loopr's limits, against the real test agent's `costly`,
//! `silent`, `flood` and `late` behaviours (`tests/support/acp_agent_limits.rs`): the cost it
//! reports counts against a dollar budget, an agent that never answers or floods Loopr still
//! stops on `:LooprCancel`, what a turn keeps is bounded, and what the agent writes after its
//! answer is in the changes list and undone.

use serde_json::{Value, json};

use super::agent_code_loop::{VALIDATION, agent_setup, assert_agent_saw_cancel, messages};
use super::code::planned_editor;
use crate::fake_llm::FakeLlm;
use crate::nvim::TestNvim;
use crate::scenario::{
    open_transcript, run_code_loop, run_to_the_budget, status_row, transcript_with,
    watch_transcripts,
};

/// The pid the test agent wrote once its turn began, waited for a bounded while. The agent
/// creates the file, then writes the pid in one write: the file is waited on until it is not
/// empty, as it can be read between the two.
async fn agent_pid(editor: &TestNvim) -> i32 {
    let path = editor.dirs.project.join("agent.pid");
    let written: bool = editor
        .lua(&format!(
            "return vim.wait(20000, function()
               local stat = vim.uv.fs_stat({:?})
               return stat ~= nil and stat.size > 0
             end, 20)",
            path.display().to_string()
        ))
        .await;
    assert!(written, "the agent's turn began");
    std::fs::read_to_string(&path)
        .expect("the agent wrote its pid")
        .trim()
        .parse()
        .expect("a pid")
}

fn assert_gone(pid: i32) {
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the agent's process is gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dollar_budget_stops_the_agent_at_the_cost_it_reports_and_the_spend_shows_it() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, &agent_setup("costly", true), VALIDATION).await;
    let planning: f64 = editor
        .status_records()
        .await
        .iter()
        .map(|row| row["spend"]["cost_usd"].as_f64().unwrap_or(0.0))
        .sum();
    // The agent reports its session cost $0.75: over the $0.50 left.
    let budget = planning + 0.5;
    let (code_id, message) = run_to_the_budget(
        &mut editor,
        &format!("{{ usd = {budget} }}"),
        "print-version",
    )
    .await;
    let pid = agent_pid(&editor).await;
    assert!(
        message.contains(&format!(
            "reached its budget (${:.4} of ${budget})",
            planning + 0.75
        )),
        "{message}"
    );
    editor.wait_status(&code_id, "paused").await;
    assert_agent_saw_cancel(&editor);
    assert_gone(pid);
    let code = status_row(&editor, &code_id).await;
    assert_eq!(
        code["spend"]["cost_usd"].as_f64(),
        Some(0.75),
        "the cost the agent reported is the loop's: {code:#}"
    );
    assert_eq!(code["tokens_in"], 1200, "its tokens count too: {code:#}");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_never_answers_is_stopped_by_a_cancel_and_its_process_is_gone() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, &agent_setup("silent", true), VALIDATION).await;
    let code_id = run_code_loop(&mut editor, "print-version").await;
    let pid = agent_pid(&editor).await;
    assert_eq!(
        editor.command(&format!("LooprCancel {code_id}")).await,
        None
    );
    editor.wait_status(&code_id, "cancelled").await;
    assert_agent_saw_cancel(&editor);
    assert_gone(pid);
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_flooding_loopr_around_its_answer_has_its_turn_bounded_and_still_stops_on_cancel()
{
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, &agent_setup("flood", true), VALIDATION).await;
    watch_transcripts(&editor).await;
    let code_id = run_code_loop(&mut editor, "print-version").await;
    let pid = agent_pid(&editor).await;
    // Its first turn ends although it goes on sending after its answer: its validation runs.
    editor
        .wait_event("LooprValidation", |data| {
            data["loop_id"] == code_id.as_str() && data["iteration"] == 1
        })
        .await;
    let buf = open_transcript(&editor, Some(&code_id)).await;
    let transcript = transcript_with(&mut editor, buf, "[... more not kept]").await;
    assert!(
        transcript.contains("[... more not kept]: the agent's text past 1 MiB"),
        "{}",
        &transcript[transcript.len().saturating_sub(2000)..]
    );
    assert!(
        transcript.len() < 4 * 1024 * 1024,
        "a turn keeps at most 1 MiB of text: the transcript holds {} bytes",
        transcript.len()
    );
    assert_eq!(
        editor.command(&format!("LooprCancel {code_id}")).await,
        None
    );
    editor.wait_status(&code_id, "cancelled").await;
    assert_gone(pid);
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_agent_writes_after_its_answer_is_in_the_changes_list_and_undone() {
    let fake = FakeLlm::start().await;
    let setup = agent_setup("late", true).replacen("{ ", "{ approve_validation = true, ", 1);
    let mut editor = planned_editor(&fake, &setup, VALIDATION).await;
    let project = editor.dirs.project.clone();
    // The validation waits for its approval; meanwhile (after the turn was recorded) the
    // agent is let write late.txt, and the validation runs once it did.
    editor
        .exec(&format!(
            "vim.api.nvim_create_autocmd('User', {{ pattern = 'LooprApprovalRequested', callback = function(ev)
               local req = ev.data
               vim.schedule(function()
                 if req.subject == {VALIDATION:?} then
                   vim.fn.writefile({{}}, {trigger:?})
                   vim.wait(20000, function() return vim.uv.fs_stat({late:?}) ~= nil end, 20)
                 end
                 require('loopr.approvals').answer(req.id, 'accept')
               end)
             end }})",
            trigger = project.join("write-late").display().to_string(),
            late = project.join("late.txt").display().to_string(),
        ))
        .await;
    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code_id, "complete").await;
    assert_eq!(
        std::fs::read_to_string(project.join("late.txt"))
            .ok()
            .as_deref(),
        Some("written after the turn\n")
    );
    let changed = crate::scenario::changed_files(&editor, "print-version").await;
    assert!(changed.contains(&"late.txt".to_owned()), "{changed:?}");
    // The tokens its answer reported are the loop's.
    let code = status_row(&editor, &code_id).await;
    assert_eq!(
        (code["tokens_in"].as_u64(), code["tokens_out"].as_u64()),
        (Some(3000), Some(500)),
        "{code:#}"
    );

    assert_eq!(editor.command("LooprUndo! print-version").await, None);
    assert!(
        !project.join("late.txt").exists(),
        "undo takes it back: {}",
        messages(&editor).await
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_eight_of_the_agent_s_requests_are_served_at_once() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, &agent_setup("asks", true), VALIDATION).await;
    // The agent asks twenty permissions at once; each stays open until the test answers.
    editor
        .exec(
            "_G.open, _G.most = {}, 0
             vim.api.nvim_create_autocmd('User', { pattern = 'LooprApprovalRequested', callback = function(ev)
               table.insert(_G.open, ev.data.id)
               _G.most = math.max(_G.most, #_G.open)
             end })
             _G.answer_open = function()
               local answering = _G.open
               _G.open = {}
               for _, id in ipairs(answering) do require('loopr.approvals').answer(id, 'accept') end
             end",
        )
        .await;
    let code_id = run_code_loop(&mut editor, "print-version").await;
    let mut rounds = Vec::new();
    while rounds.iter().sum::<u64>() < 20 && rounds.len() < 5 {
        // Each round waits for as many as may be open at once (the last, for the rest);
        // more than eight ever open at once is seen by the autocmd's `_G.most`.
        let expected = 8.min(20 - rounds.iter().sum::<u64>());
        let came: bool = editor
            .lua(&format!(
                "return vim.wait(20000, function() return #_G.open >= {expected} end, 10)"
            ))
            .await;
        assert!(
            came,
            "{expected} requests open once earlier ones are answered: {rounds:?}"
        );
        let open: u64 = editor
            .lua("local n = #_G.open; _G.answer_open(); return n")
            .await;
        rounds.push(open);
    }
    let most: u64 = editor.lua("return _G.most").await;
    assert_eq!(most, 8, "at most eight open at once");
    assert_eq!(rounds, [8, 8, 4], "served eight at a time");
    editor.wait_status(&code_id, "complete").await;
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_in_another_currency_is_named_and_left_out_of_the_dollars() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, &agent_setup("euro", true), VALIDATION).await;
    let code_id = run_code_loop(&mut editor, "print-version").await;
    let said = editor
        .wait_event("LooprProgress", |data| {
            data["message"]
                .as_str()
                .is_some_and(|message| message.contains("reports its cost in EUR"))
        })
        .await;
    assert!(
        said["message"].as_str().unwrap_or_default().contains(
            "the agent reports its cost in EUR, not US dollars: a dollar budget cannot count \
             it (its tokens still count, at the price set for \"agent test\", if any)"
        ),
        "{said:#}"
    );
    editor.wait_status(&code_id, "complete").await;
    let code = status_row(&editor, &code_id).await;
    assert_eq!(code["spend"]["cost_usd"], Value::Null, "{code:#}");
    assert_eq!(
        code["spend"]["cost_unknown"],
        json!(["agent test"]),
        "{code:#}"
    );
    editor.quit().await;
}
