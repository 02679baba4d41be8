//! End-to-end tests: a real headless Neovim with the plugin loaded, the built host, and a fake
//! Anthropic server on loopback that speaks the real streaming wire protocol.

#[path = "support/fake_llm.rs"]
mod fake_llm;
#[path = "support/nvim.rs"]
mod nvim;
#[path = "support/release_server.rs"]
mod release_server;
#[path = "support/scenario.rs"]
mod scenario;

mod integration {
    // Needs the test agent: `--features test-mcp-server` (scripts/test.sh).
    #[cfg(feature = "test-mcp-server")]
    mod agent_code_loop;
    #[cfg(feature = "test-mcp-server")]
    mod agent_handover;
    #[cfg(feature = "test-mcp-server")]
    mod agent_permissions;
    #[cfg(feature = "test-mcp-server")]
    mod agent_prompts;
    #[cfg(feature = "test-mcp-server")]
    mod agent_turn_limits;
    mod agents;
    mod approve;
    mod cancel_and_restart;
    mod checkpoints;
    mod code;
    mod commands;
    mod contract;
    mod cost;
    mod coverage;
    mod editor;
    mod export;
    mod failures;
    mod hierarchy;
    mod host_match;
    mod install;
    mod lifecycle;
    mod loop_rules;
    // Needs the test MCP server: `--features test-mcp-server` (scripts/test.sh).
    #[cfg(feature = "test-mcp-server")]
    mod mcp;
    mod messages;
    mod model_api;
    mod phase_commits;
    mod phases;
    mod picking;
    mod plan_flow;
    mod plan_run;
    mod progress;
    mod providers_llamacpp;
    mod providers_ollama;
    mod providers_openai;
    mod requests;
    mod requirements;
    mod resume;
    mod retries;
    mod review;
    mod rules;
    mod status_window;
    mod task_progress;
    mod text_protocols;
    mod transcript;
    mod trust;
    mod validation;
    mod verification;
    mod verify;
    mod web;
    mod windows;
}
