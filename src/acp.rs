//! Coding agents driven over the Agent Client Protocol (ACP: JSON-RPC over the agent's
//! stdio), through the official SDK (`agent-client-protocol`, protocol version 1): an agent
//! started in the project root (`process.rs`), connected and initialized (`connection.rs`,
//! `handshake.rs`, `version.rs`; `inflow.rs` holds its lines back while the loop reads
//! nothing), its failures typed (`error.rs`); the settings in `config.rs`.

mod config;
mod connection;
mod error;
mod handshake;
mod inflow;
mod process;
mod spawner;
mod version;

pub use config::{AgentConfig, UnknownAgent, check_agents, configured_agent};
pub use connection::{AgentConnection, FromAgent};
pub use error::{AcpError, SignIn};
pub use handshake::{AgentReport, INITIALIZE_TIMEOUT, initialize, probe_agent, probe_agents};
pub use process::{AgentProcess, MAX_MESSAGE_BYTES};
pub use version::LOOPR_PROTOCOL_VERSION;
