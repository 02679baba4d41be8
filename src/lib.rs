//! Loopr: a Neovim plugin host that turns a one-line request into a reviewed plan.
//!
//! The core (`llm`, `tools`, `artifacts`, `store`, `agent`) knows nothing of Neovim or msgpack;
//! only `bridge` does. See ARCHITECTURE.md for the code map.

pub mod acp;
pub mod agent;
pub mod artifacts;
pub mod bridge;
pub mod budget;
pub mod cli;
pub mod git;
pub mod llm;
pub mod logging;
pub mod markdown;
pub mod mcp;
pub mod next_step;
pub mod pricing;
pub mod schema;
pub mod store;
pub mod terminal_text;
pub mod test_hooks;
#[cfg(test)]
mod test_support;
pub mod tools;
