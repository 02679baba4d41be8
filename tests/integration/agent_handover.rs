//! What Loopr hands the user's coding agent, and what it keeps from it, against the test
//! agent (`tests/support/acp_agent.rs`): MCP servers with their tokens only where the agent's
//! `share_mcp_env` names them, no provider key in its environment unless its `env` names one,
//! its stderr redacted where a loop's error shows it, its process gone with the host.

use serde_json::Value;

use super::agent_code_loop::{loop_error, messages};
use super::code::planned_editor;
use crate::fake_llm::FakeLlm;
use crate::nvim::TestNvim;
use crate::scenario::run_code_loop;

const AGENT: &str = env!("CARGO_BIN_EXE_loopr-test-acp-agent");
/// What the agent's `env` gives it.
const AGENT_TOKEN: &str = "agent-token-named-in-env";
/// The token of the MCP server `gh`, in its `env`.
const MCP_TOKEN: &str = "ghp_mcp-token-of-the-user";
/// The test agent `record` writes `status.txt` ("ok") in its turn.
const VALIDATION: &str = "grep -q ok status.txt";

/// Setup with the test agent, `behave`-ing, as `code_agent` `test`, its `env` naming
/// `LOOPR_TEST_AGENT_TOKEN` and `extra` (Lua fields) added to it; and two code-level MCP
/// servers: `gh`, whose `env` holds a token, and `docs`, with no `env`.
fn handover_setup(behave: &str, extra: &str) -> String {
    format!(
        "{{ agents = {{ test = {{ command = {AGENT:?}, args = {{ '--behave', {behave:?} }}, \
         env = {{ LOOPR_TEST_AGENT_TOKEN = {AGENT_TOKEN:?} }}{extra} }} }}, code_agent = 'test', \
         mcp = {{ servers = {{ \
           gh = {{ command = 'loopr-no-such-mcp', env = {{ GH_TOKEN = {MCP_TOKEN:?} }}, levels = {{ 'code' }} }}, \
           docs = {{ command = 'loopr-no-such-docs-mcp', levels = {{ 'code' }} }} }} }} }}"
    )
}

/// Runs print-version's code loop through the `record`ing agent to its end; the editor and
/// the JSON the agent wrote of its MCP servers and its environment.
async fn recorded_run(fake: &FakeLlm, extra: &str) -> (TestNvim, Value, Value) {
    let mut editor = planned_editor(fake, &handover_setup("record", extra), VALIDATION).await;
    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code_id, "complete").await;
    let read = |name: &str| -> Value {
        let text = std::fs::read_to_string(editor.dirs.project.join(name))
            .unwrap_or_else(|err| panic!("the agent wrote {name}: {err}"));
        serde_json::from_str(&text).expect("JSON")
    };
    let servers = read("agent-mcp-servers.json");
    let environment = read("agent-env.json");
    (editor, servers, environment)
}

/// The names of `servers` (as `session/new` carried them) with the values of their `env`.
fn server_envs(servers: &Value) -> Vec<String> {
    servers
        .as_array()
        .expect("a list")
        .iter()
        .map(|server| {
            let env: Vec<String> = server["env"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|variable| format!("{}={}", variable["name"], variable["value"]))
                .collect();
            format!("{} [{}]", server["name"], env.join(","))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_s_token_reaches_the_agent_only_where_share_mcp_env_names_it() {
    let fake = FakeLlm::start().await;
    let (editor, servers, _) = recorded_run(&fake, "").await;
    assert_eq!(
        server_envs(&servers),
        ["\"docs\" []"],
        "gh and its token are left out: {servers:#}"
    );
    let shown = messages(&editor).await;
    assert!(
        shown.contains(
            "MCP server gh is not offered to the coding agent test: its env holds values \
             (tokens) the agent would see; to hand them over, name gh in \
             agents.test.share_mcp_env"
        ),
        "{shown}"
    );
    editor.quit().await;

    let (editor, servers, _) = recorded_run(&fake, ", share_mcp_env = { 'gh' }").await;
    assert_eq!(
        server_envs(&servers),
        [
            "\"docs\" []",
            &format!("\"gh\" [\"GH_TOKEN\"=\"{MCP_TOKEN}\"]")
        ],
        "{servers:#}"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_key_reaches_the_agent_only_when_its_env_names_it() {
    let fake = FakeLlm::start().await;
    let (editor, _, environment) = recorded_run(&fake, "").await;
    let environment = environment.as_object().expect("an object");
    assert_eq!(
        environment.get("LOOPR_TEST_AGENT_TOKEN"),
        Some(&Value::from(AGENT_TOKEN)),
        "the variable its env names"
    );
    let names: Vec<&String> = environment.keys().collect();
    assert!(
        !environment.contains_key("ANTHROPIC_API_KEY"),
        "the host's provider key: {names:?}"
    );
    assert!(
        !environment
            .values()
            .any(|value| value.as_str() == Some(crate::nvim::API_KEY)),
        "the provider key's value under any name: {names:?}"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_the_agent_s_last_stderr_are_redacted_where_its_error_is_shown() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, &handover_setup("leak", ""), VALIDATION).await;
    // The agent dies at once: the failure may come while the command still runs.
    let _ = editor.command("LooprRun print-version").await;
    let code_id = crate::scenario::code_loop_id(&mut editor).await;
    editor.wait_status(&code_id, "failed").await;
    let error = loop_error(&editor, &code_id).await;
    let shown = messages(&editor).await;
    assert!(
        error.ends_with(
            "its stderr ended with:\n\
             loopr-test-acp-agent: cloning https://[REDACTED]@github.com/acme/app.git\n\
             loopr-test-acp-agent: request failed: Authorization: Bearer [REDACTED]\n\
             loopr-test-acp-agent: token [REDACTED] refused"
        ),
        "{error}"
    );
    for (place, text) in [("stored error", &error), ("messages", &shown)] {
        for redacted in [
            "cloning https://[REDACTED]@github.com/acme/app.git",
            "Authorization: Bearer [REDACTED]",
            "token [REDACTED] refused",
        ] {
            assert!(text.contains(redacted), "{place}: {text}");
        }
        for secret in ["ghp_leaked0token", "sk-live-leaked1", AGENT_TOKEN] {
            assert!(!text.contains(secret), "{place} shows {secret}: {text}");
        }
    }
    editor.quit().await;
}

/// Starts print-version's code loop through the `linger`ing agent (which outlives its
/// stdin) and waits until it works on the phase; the editor and the agent's pid.
async fn lingering_agent(fake: &FakeLlm) -> (TestNvim, i32) {
    let mut editor = planned_editor(fake, &handover_setup("linger", ""), VALIDATION).await;
    run_code_loop(&mut editor, "print-version").await;
    editor
        .wait_event("LooprProgress", |data| {
            data["message"]
                .as_str()
                .is_some_and(|message| message.contains("Lingering over the phase"))
        })
        .await;
    let pid = std::fs::read_to_string(editor.dirs.project.join("agent.pid"))
        .expect("the agent wrote its pid")
        .trim()
        .parse()
        .expect("a pid");
    (editor, pid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_s_process_ends_when_neovim_closes_mid_turn() {
    let fake = FakeLlm::start().await;
    let (editor, pid) = lingering_agent(&fake).await;
    editor.quit().await;
    // Panics if the agent is still there after 30 s.
    crate::nvim::wait_for_exit(pid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_s_process_ends_when_the_host_is_killed_mid_turn() {
    let fake = FakeLlm::start().await;
    let (editor, pid) = lingering_agent(&fake).await;
    let host: Option<i32> = editor.lua("return require('loopr.host').pid()").await;
    let host = host.expect("the host runs");
    // SAFETY: kill takes a pid and a signal; the host is this test's Neovim's child.
    assert_eq!(
        unsafe { libc::kill(host, libc::SIGKILL) },
        0,
        "kill the host"
    );
    // Panics if the agent is still there after 30 s.
    crate::nvim::wait_for_exit(pid).await;
    editor.quit().await;
}
