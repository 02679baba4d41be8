//! Coding agents over ACP as `:checkhealth loopr` shows them, against the test agent written
//! with the same SDK (`tests/support/acp_agent.rs`): started in the project and initialized,
//! or why not (the setting named, the agent's stderr), never hanging.

use crate::fake_llm::FakeLlm;
use crate::nvim::TestNvim;
use crate::scenario::start_editor;

fn agent_binary() -> &'static str {
    env!("CARGO_BIN_EXE_loopr-test-acp-agent")
}

/// The report `:checkhealth loopr` writes.
async fn health_report(editor: &TestNvim) -> String {
    assert_eq!(editor.command("checkhealth loopr").await, None);
    editor
        .lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkhealth_starts_each_agent_and_shows_what_it_is_or_why_it_failed() {
    let fake = FakeLlm::start().await;
    let setup = format!(
        "{{ agents = {{
             test = {{ command = {bin:?} }},
             missing = {{ command = 'loopr-no-such-agent-acp' }},
             crashing = {{ command = {bin:?}, args = {{ '--behave', 'crash' }} }},
           }}, code_agent = 'test' }}",
        bin = agent_binary()
    );
    let editor = start_editor(&fake, &setup).await;
    let started = std::time::Instant::now();
    let report = health_report(&editor).await;
    assert!(
        report.contains(
            "agent test starts: Loopr Test Agent 0.3.1, ACP protocol version 1; load session, \
             prompts with embedded context, MCP over stdio and http"
        ),
        "{report}"
    );
    assert!(
        report.contains(
            "agent missing: agent \"missing\" (setting agents.missing.command): \
             `loopr-no-such-agent-acp` not found on PATH"
        ),
        "{report}"
    );
    assert!(
        report.contains(
            "agent crashing: agent \"crashing\" exited before it answered (exit status 3); its \
             stderr ended with:"
        ) && report.contains("loopr-test-acp-agent: no model configured, giving up"),
        "{report}"
    );
    assert!(
        report.contains("code_agent: test writes the code of phases"),
        "{report}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );

    // A code_agent naming no configured agent is named with the fix.
    editor
        .exec(&format!(
            "require('loopr').setup({{ agents = {{ test = {{ command = {:?} }} }}, code_agent = 'claude' }})",
            agent_binary()
        ))
        .await;
    let report = health_report(&editor).await;
    assert!(
        report.contains(
            "cannot probe the coding agents: Loopr: code_agent is \"claude\", which agents does \
             not configure (the configured agents are test); add it to agents or unset code_agent"
        ),
        "{report}"
    );
    editor.quit().await;
}
