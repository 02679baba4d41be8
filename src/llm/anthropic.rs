//! The Anthropic Messages API: streamed over SSE, retried as the official SDKs retry.

mod client;
mod retry;
mod stream;
mod wire;

pub use client::{
    AnthropicClient, AnthropicConfig, AnthropicCredentials, ApiKey, DEFAULT_BASE_URL,
    SharedCredentials,
};
pub use stream::{StreamFailure, read_turn};
