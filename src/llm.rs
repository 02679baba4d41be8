//! Talking to language models: a provider-neutral conversation model, the `LlmProvider` trait
//! every backend implements, and the Anthropic Messages backend.

pub mod anthropic;
mod error;
mod provider;
mod types;

pub use error::LlmError;
pub use provider::{LlmProvider, ProviderEvent};
pub use types::{ChatRequest, ContentBlock, Message, Role, StopReason, ToolSpec, Turn, Usage};
