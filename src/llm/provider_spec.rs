//! What a provider says about itself, in one place: its name, the variables it reads, its
//! defaults and its constructor. Each provider module exports one `ProviderSpec`; the registry
//! (`providers.rs`) lists them, and everything else asks the registry.

use std::sync::Arc;

use serde::Serialize;

use super::{ApiKey, LlmError, LlmProvider, RetryPolicy, ToolChoice};

/// Whether a request without a key makes sense (local servers take none).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyNeed {
    Required,
    Optional,
}

/// One provider's description.
pub struct ProviderSpec {
    /// How the settings name it (`provider = "..."`), the same as `ProviderName`'s serde name.
    pub name: &'static str,
    /// The variable that sets the base URL (the `base_url` setting wins over it).
    pub base_url_variable: &'static str,
    /// The base URL when neither the setting nor the variable gives one.
    pub default_base_url: &'static str,
    /// Makes a base URL as written by the user whole (`OLLAMA_HOST` is often a bare
    /// `host:port`); the trailing `/` is already gone.
    pub complete_base_url: fn(&str) -> String,
    /// The variable holding the key unless `api_key_env` names another; none for a provider
    /// that takes no key unless told.
    pub key_variable: Option<&'static str>,
    pub key_need: KeyNeed,
    /// The model when the settings name none (`None`: there is no model everyone has).
    pub default_model: Option<&'static str>,
    /// Whether the provider sends the `num_ctx` setting, which then is the window requests go
    /// into.
    pub sends_num_ctx: bool,
    /// Makes the client a loop talks to.
    pub connect: fn(Connection) -> Result<Arc<dyn LlmProvider>, LlmError>,
}

impl ProviderSpec {
    /// The variables this provider reads by their own name (the key's may be another's,
    /// named by `api_key_env`).
    pub fn variables(&self) -> impl Iterator<Item = &'static str> {
        std::iter::once(self.base_url_variable).chain(self.key_variable)
    }
}

/// A base URL taken as written.
pub fn base_url_as_written(url: &str) -> String {
    url.to_owned()
}

/// What a provider's constructor is given: where to connect, with which key, and the
/// settings that concern the client.
#[derive(Clone, Debug)]
pub struct Connection {
    /// Resolved (setting, variable or default) and completed.
    pub base_url: String,
    pub api_key: Option<ApiKey>,
    pub retry: RetryPolicy,
    /// The context window to send (`options.num_ctx`) where the provider takes one.
    pub num_ctx: Option<u32>,
    /// `tool_choice` sent with the tools where the provider takes one.
    pub tool_choice: Option<ToolChoice>,
    /// Whether answers stream, or come whole.
    pub stream: bool,
    /// Requests to the server under way at once; `None`: its default (one for a local server).
    pub max_parallel_requests: Option<u32>,
}
