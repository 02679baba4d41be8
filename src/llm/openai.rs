//! OpenAI's chat completions, streamed over SSE: the API itself and every server that speaks
//! it (OpenRouter, vLLM, llama.cpp, LM Studio, Ollama's `/v1`), with the quirks they show.

mod client;
mod stream;
mod wire;

pub use client::{API_KEY_VARIABLE, BASE_URL_VARIABLE, OpenAiClient, OpenAiConfig};
pub use stream::read_turn;
#[cfg(test)]
pub(crate) use wire::{BodyOptions, TokenLimitField, encode};
