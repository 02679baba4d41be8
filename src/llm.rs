//! Talking to language models: Loopr's own conversation model, the `LlmProvider` trait every
//! backend implements, what they share (one HTTP client, the retry loop, key redaction), and
//! the backends.

mod answer_body;
pub mod anthropic;
pub mod api_client;
mod attempt;
mod credentials;
mod endpoint;
mod error;
pub mod http;
pub mod ollama;
pub mod openai;
mod per_message;
mod provider;
#[cfg(test)]
mod provider_checks;
mod provider_event;
pub mod provider_spec;
pub mod providers;
mod retry;
mod server_text;
pub mod server_window;
mod sse;
mod stream_failure;
pub mod text_protocol;
mod text_provider;
mod text_results;
mod tool_protocol;
mod types;
pub mod wire_cache;

pub use answer_body::AnswerLimits;
pub use attempt::{AttemptFailure, RetryPolicy, with_retries};
pub use credentials::ApiKey;
pub use endpoint::{Endpoint, ServerKind, url_to_show};
pub use error::{LlmError, is_overflow_report};
pub use provider::{CallsSent, LlmProvider};
pub use provider_event::ProviderEvent;
pub use provider_spec::{Connection, KeyNeed, ProviderSpec};
pub use providers::{
    ProviderEnv, ProviderInfo, ProviderName, ProviderSettings, ProviderVariables, SharedEnv,
    is_provider_variable, provider_variables,
};
pub use retry::{backoff_delay, is_retryable_status, server_requested_delay};
pub use server_text::{server_message, server_word};
pub use server_window::{ServerReport, ServerWindow};
pub use stream_failure::StreamFailure;
pub use text_provider::{TextProtocolProvider, with_tool_protocol};
pub use tool_protocol::{ToolChoice, ToolFormat, ToolProtocol};
pub use types::{
    ChatRequest, ContentBlock, Message, Role, StopReason, ToolCall, ToolSpec, Turn, Usage, shared,
};
