//! OpenAI's chat completions, streamed over SSE: the API itself and every server that speaks
//! it (OpenRouter, vLLM, llama.cpp, LM Studio, Ollama's `/v1`), with the quirks they show.

mod client;
mod stream;
mod wire;

use std::sync::Arc;

pub use client::{API_KEY_VARIABLE, BASE_URL_VARIABLE, OpenAiClient, OpenAiConfig, OpenAiWire};
pub use stream::read_turn;
#[cfg(test)]
pub(crate) use wire::{BodyOptions, TokenLimitField, encode};

use super::provider_spec::{Connection, KeyNeed, ProviderSpec, base_url_as_written};
use super::{LlmError, LlmProvider};

/// The provider `openai`: a local server takes no key, so none is required.
pub const PROVIDER: ProviderSpec = ProviderSpec {
    name: "openai",
    base_url_variable: BASE_URL_VARIABLE,
    default_base_url: "https://api.openai.com/v1",
    complete_base_url: base_url_as_written,
    key_variable: Some(API_KEY_VARIABLE),
    key_need: KeyNeed::Optional,
    default_model: Some("gpt-4.1"),
    sends_num_ctx: false,
    connect,
};

fn connect(connection: Connection) -> Result<Arc<dyn LlmProvider>, LlmError> {
    let client = OpenAiClient::new(OpenAiConfig {
        base_url: connection.base_url,
        api_key: connection.api_key,
        tool_choice: connection.tool_choice,
        stream: connection.stream,
        retry: connection.retry,
    })?;
    Ok(Arc::new(client.with_max_parallel_requests(
        connection.max_parallel_requests,
    )))
}
