//! Ollama's native chat API (`POST /api/chat`): NDJSON streamed, each tool call whole in one
//! line, call ids only from recent versions, `options.num_ctx` for the context window.

mod client;
mod stream;
mod wire;

pub use client::{BASE_URL_VARIABLE, OllamaClient, OllamaConfig, base_url_of_bare_host};
pub use stream::read_turn;
