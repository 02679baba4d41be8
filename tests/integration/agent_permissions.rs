//! What the user is asked when a coding agent (the test agent, `--behave permissions`) asks
//! permission for its own tools: always, whatever `approvals` accepts automatically, with the
//! command it carries (nothing in it hidden) whatever kind it declares; and its write of exactly the diff the user
//! accepted is not asked again, yet lands in the changes list.

use super::code::planned_editor;
use crate::fake_llm::FakeLlm;
use crate::nvim::TestNvim;
use crate::scenario::{open_transcript, run_code_loop, transcript_with, watch_transcripts};

const AGENT: &str = env!("CARGO_BIN_EXE_loopr-test-acp-agent");

/// Notes each approval request as `kind subject`, the lines its review buffer shows in
/// `_G.agent_prompts`, and answers it: what names `deploy` rejected, the rest accepted.
async fn note_and_answer_approvals(editor: &TestNvim) {
    editor
        .exec(
            "_G.agent_requests, _G.agent_prompts = {}, {}
             vim.api.nvim_create_autocmd('User', { pattern = 'LooprApprovalRequested', callback = function(ev)
               local req = ev.data
               table.insert(_G.agent_requests, ('%s %s'):format(req.kind, req.subject))
               vim.schedule(function()
                 local buf = vim.fn.bufnr(('loopr://approval/%d'):format(req.id))
                 if buf > 0 then
                   table.insert(_G.agent_prompts, table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\\n'))
                 end
                 local reject = req.subject:find('deploy') ~= nil
                 require('loopr.approvals').answer(req.id, reject and 'reject' or 'accept', reject and 'not now' or nil)
               end)
             end })",
        )
        .await;
}

async fn messages(editor: &TestNvim) -> String {
    editor
        .lua("return vim.api.nvim_exec2('messages', { output = true }).output")
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_s_own_tools_are_asked_even_with_edits_and_mcp_calls_automatic() {
    let fake = FakeLlm::start().await;
    let setup = format!(
        "{{ approvals = {{ mcp = 'auto', edit = 'auto' }}, agents = {{ test = {{ command = {AGENT:?}, args = {{ '--behave', 'permissions' }} }} }}, code_agent = 'test' }}"
    );
    let mut editor = planned_editor(&fake, &setup, "grep -q ok status.txt").await;
    let notes = editor.dirs.project.join("notes.txt");
    std::fs::write(&notes, "notes before\n").expect("write");
    note_and_answer_approvals(&editor).await;
    watch_transcripts(&editor).await;
    let code_id = run_code_loop(&mut editor, "print-version").await;
    let buf = open_transcript(&editor, Some(&code_id)).await;
    let transcript = transcript_with(&mut editor, buf, "Done for now.").await;
    for said in [
        "looking at the deploy allowed: Ok(false)",
        "rewriting notes.txt allowed: Ok(true)",
        "notes.txt written over fs: Ok(",
    ] {
        assert!(transcript.contains(said), "{said:?} not in:\n{transcript}");
    }
    assert_eq!(
        std::fs::read_to_string(&notes).expect("notes"),
        "approved diff\n"
    );

    // Both asked, though edits and MCP calls are "auto"; the write of the accepted diff not.
    let requests: Vec<String> = editor.lua("return _G.agent_requests").await;
    assert_eq!(
        requests,
        ["command Look at the deploy", "edit Rewrite notes.txt"],
        "{}",
        messages(&editor).await
    );
    let shown = messages(&editor).await;
    for told in [
        "Loopr: approve the agent's own tool Look at the deploy? a accept · A accept all · r reject",
        "Loopr: approve the agent's own tool Rewrite notes.txt? a accept · A accept all · r reject",
    ] {
        assert!(shown.contains(told), "{told:?} not in:\n{shown}");
    }
    let prompts: Vec<String> = editor.lua("return _G.agent_prompts").await;
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    for (prompt, lines) in prompts.iter().zip([
        &[
            "The coding agent asks to use its own tool: Look at the deploy",
            "It is asked as execute for what it carries; it says \"read\".",
            "$ make deploy<200b>",
            "Each execute call is asked: a and A allow this one only.",
            "a accept · A accept all as said above · r reject with a reason · q reject",
        ][..],
        &[
            "The coding agent asks to use its own tool: Rewrite notes.txt",
            "--- a/notes.txt",
            "-notes before",
            "+approved diff",
            "a allows this call once; A allows its edit calls for the rest of this loop.",
        ][..],
    ]) {
        for line in lines {
            assert!(prompt.contains(line), "{line:?} not in:\n{prompt}");
        }
    }

    // The write is journaled like any: in the changes list.
    editor.wait_status(&code_id, "complete").await;
    let changed = crate::scenario::changed_files(&editor, "print-version").await;
    assert!(changed.contains(&"notes.txt".to_owned()), "{changed:?}");
    editor.quit().await;
}
