//! MCP (Model Context Protocol) servers' tools for loops, through the official SDK (`rmcp`):
//! the configuration (`config`), one supervised server each (`server`, over stdio or
//! streamable HTTP), the host's pool of them (`pool`), and the tools one loop is offered
//! (`tools`). Knows nothing of Neovim.

mod config;
mod http;
mod pool;
mod server;
mod tools;

pub use config::{
    Endpoint, MCP_LEVELS, McpServerConfig, McpSettings, TOOL_SEPARATOR, env_from_current,
};
pub use pool::{McpPool, Unavailable};
pub use server::{McpError, ServerStatus};
pub use tools::McpTools;
