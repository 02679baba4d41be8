//! The Anthropic Messages API: streamed over SSE, retried as the official SDKs retry.

mod client;
mod stream;
mod wire;

pub use client::{
    API_KEY_VARIABLE, AnthropicClient, AnthropicConfig, BASE_URL_VARIABLE, DEFAULT_BASE_URL,
};
pub use stream::read_turn;
