//! Ollama's native chat API (`POST /api/chat`): NDJSON streamed, each tool call whole in one
//! line, call ids only from recent versions, `options.num_ctx` for the context window.

mod client;
mod stream;
mod wire;

use std::sync::Arc;

pub use client::{
    BASE_URL_VARIABLE, OllamaClient, OllamaConfig, OllamaWire, base_url_of_bare_host,
};
pub use stream::read_turn;

use super::provider_spec::{Connection, KeyNeed, ProviderSpec};
use super::{LlmError, LlmProvider};

/// The provider `ollama`: no key (a proxy in front may take one, named by `api_key_env`), no
/// model everyone has pulled, and the context window it is sent.
pub const PROVIDER: ProviderSpec = ProviderSpec {
    name: "ollama",
    base_url_variable: BASE_URL_VARIABLE,
    default_base_url: "http://127.0.0.1:11434",
    complete_base_url,
    key_variable: None,
    key_need: KeyNeed::Optional,
    default_model: None,
    sends_num_ctx: true,
    connect,
};

/// `OLLAMA_HOST` is often a bare `host:port`, as Ollama's own CLI accepts it.
fn complete_base_url(url: &str) -> String {
    if url.contains("://") {
        url.to_owned()
    } else {
        base_url_of_bare_host(url)
    }
}

fn connect(connection: Connection) -> Result<Arc<dyn LlmProvider>, LlmError> {
    let client = OllamaClient::new(OllamaConfig {
        base_url: connection.base_url,
        api_key: connection.api_key,
        num_ctx: connection.num_ctx,
        stream: connection.stream,
        retry: connection.retry,
    })?;
    Ok(Arc::new(client.with_max_parallel_requests(
        connection.max_parallel_requests,
    )))
}
