//! The Anthropic Messages API: streamed over SSE, retried as the official SDKs retry.

mod client;
mod stream;
mod wire;

use std::sync::Arc;

pub use client::{
    API_KEY_VARIABLE, AnthropicClient, AnthropicConfig, AnthropicWire, BASE_URL_VARIABLE,
    DEFAULT_BASE_URL,
};
pub use stream::read_turn;

use super::provider_spec::{Connection, KeyNeed, ProviderSpec, base_url_as_written};
use super::{ApiKey, LlmError, LlmProvider};

/// The provider `anthropic`.
pub const PROVIDER: ProviderSpec = ProviderSpec {
    name: "anthropic",
    base_url_variable: BASE_URL_VARIABLE,
    default_base_url: DEFAULT_BASE_URL,
    complete_base_url: base_url_as_written,
    key_variable: Some(API_KEY_VARIABLE),
    key_need: KeyNeed::Required,
    default_model: Some("claude-sonnet-4-5"),
    sends_num_ctx: false,
    connect,
};

fn connect(connection: Connection) -> Result<Arc<dyn LlmProvider>, LlmError> {
    let client = AnthropicClient::new(AnthropicConfig {
        base_url: connection.base_url,
        api_key: connection
            .api_key
            .unwrap_or_else(|| ApiKey::new(String::new())),
        retry: connection.retry,
    })?;
    Ok(Arc::new(client.with_max_parallel_requests(
        connection.max_parallel_requests,
    )))
}
