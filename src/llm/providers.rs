//! Which provider a loop talks to, where, and with which key: resolved from the user's
//! settings and the host's snapshot of the provider variables, the one place that decides
//! (`:checkhealth loopr` shows what it decided).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use serde::{Deserialize, Serialize};

use super::anthropic::{AnthropicClient, AnthropicConfig};
use super::ollama::{OllamaClient, OllamaConfig};
use super::openai::{OpenAiClient, OpenAiConfig};
use super::{ApiKey, LlmError, LlmProvider, RetryPolicy, ToolChoice};

/// Who answers a loop's requests.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ProviderName {
    #[default]
    Anthropic,
    /// OpenAI's chat completions, and every server that speaks them.
    Openai,
    /// Ollama's native `/api/chat`.
    Ollama,
}

impl ProviderName {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderName::Anthropic => "anthropic",
            ProviderName::Openai => "openai",
            ProviderName::Ollama => "ollama",
        }
    }

    /// The variable that sets the base URL, and the URL without it.
    pub fn base_url_variable(self) -> (&'static str, &'static str) {
        match self {
            ProviderName::Anthropic => ("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
            ProviderName::Openai => ("OPENAI_BASE_URL", "https://api.openai.com/v1"),
            ProviderName::Ollama => ("OLLAMA_HOST", "http://127.0.0.1:11434"),
        }
    }

    /// The variable that holds the key unless `api_key_env` names another, and whether a
    /// request without a key makes sense (local servers take none).
    fn default_key(self) -> (Option<&'static str>, KeyNeed) {
        match self {
            ProviderName::Anthropic => (Some("ANTHROPIC_API_KEY"), KeyNeed::Required),
            ProviderName::Openai => (Some("OPENAI_API_KEY"), KeyNeed::Optional),
            ProviderName::Ollama => (None, KeyNeed::Optional),
        }
    }

    /// The model when the settings name none; Ollama has no model everyone has pulled.
    pub fn default_model(self) -> Option<&'static str> {
        match self {
            ProviderName::Anthropic => Some("claude-sonnet-4-5"),
            ProviderName::Openai => Some("gpt-4.1"),
            ProviderName::Ollama => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyNeed {
    Required,
    Optional,
}

/// What of the user's settings concerns the provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderSettings {
    pub provider: ProviderName,
    /// Overrides the base URL variable.
    pub base_url: Option<String>,
    /// The variable holding the key, instead of the provider's usual one.
    pub api_key_env: Option<String>,
    /// Ollama's context window (`options.num_ctx`).
    pub num_ctx: Option<u32>,
    /// OpenAI's `tool_choice`, sent with the tools when set (Ollama's API has none).
    pub tool_choice: Option<ToolChoice>,
    /// Whether answers stream, or come whole.
    pub stream: bool,
    /// Requests to the server under way at once; `None`: its default (one for a local server).
    pub max_parallel_requests: Option<u32>,
}

impl Default for ProviderSettings {
    fn default() -> ProviderSettings {
        ProviderSettings {
            provider: ProviderName::default(),
            base_url: None,
            api_key_env: None,
            num_ctx: None,
            tool_choice: None,
            stream: true,
            max_parallel_requests: None,
        }
    }
}

/// Whether a variable is one the providers may read: keys (`*_API_KEY`), base URLs
/// (`*_BASE_URL`) and `OLLAMA_HOST`. The host keeps these from its start and takes the
/// values Neovim has later (the `credentials` request).
pub fn is_provider_variable(name: &str) -> bool {
    name.ends_with("_API_KEY") || name.ends_with("_BASE_URL") || name == "OLLAMA_HOST"
}

/// The provider variables as the host knows them. Keys never leave it: `Debug` shows names
/// only.
#[derive(Clone, Default)]
pub struct ProviderEnv {
    variables: BTreeMap<String, String>,
}

impl fmt::Debug for ProviderEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.variables.keys()).finish()
    }
}

impl ProviderEnv {
    /// Blank values count as unset; names that are not provider variables are ignored.
    pub fn new(variables: impl IntoIterator<Item = (String, String)>) -> ProviderEnv {
        ProviderEnv {
            variables: variables
                .into_iter()
                .filter(|(name, value)| is_provider_variable(name) && !value.trim().is_empty())
                .collect(),
        }
    }

    /// Reads the provider variables and removes the keys from this process's environment,
    /// so no command the host starts inherits them.
    ///
    /// # Safety
    /// Changes the process environment: call it before any other thread exists.
    pub unsafe fn take_from_process() -> ProviderEnv {
        let env = ProviderEnv::new(std::env::vars());
        for name in env
            .variables
            .keys()
            .filter(|name| name.ends_with("_API_KEY"))
        {
            // SAFETY: the caller guarantees no other thread reads or writes the environment.
            unsafe { std::env::remove_var(name) };
        }
        env
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.variables.get(name).map(String::as_str)
    }
}

/// The variables loops get when they start. A shell replaces them when the user sets a key
/// while the host runs (in Neovim, `:let $OPENAI_API_KEY = ...` changes only Neovim's
/// environment, not the host's); loops already running keep the client they have.
#[derive(Clone, Debug, Default)]
pub struct SharedEnv(Arc<RwLock<ProviderEnv>>);

impl SharedEnv {
    pub fn new(env: ProviderEnv) -> SharedEnv {
        SharedEnv(Arc::new(RwLock::new(env)))
    }

    pub fn current(&self) -> ProviderEnv {
        // A writer that panicked left a whole map behind: the value is still usable.
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn replace(&self, env: ProviderEnv) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = env;
    }
}

/// Where the base URL came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Setting,
    Variable,
    Default,
}

/// The provider a loop will talk to, as resolved: safe to show (it holds no key).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProviderInfo {
    pub provider: ProviderName,
    pub base_url: String,
    pub base_url_source: Source,
    /// The variable that sets the base URL (`base_url` in the settings wins over it).
    pub base_url_variable: &'static str,
    /// The variable the key is read from, if this provider takes one.
    pub key_variable: Option<String>,
    pub key_set: bool,
    pub key_need: KeyNeed,
}

impl ProviderInfo {
    /// Why a loop could not start, if it could not.
    pub fn problem(&self) -> Option<LlmError> {
        match (&self.key_variable, self.key_set, self.key_need) {
            (Some(variable), false, KeyNeed::Required) => {
                Some(LlmError::MissingEnv(variable.clone()))
            }
            _ => None,
        }
    }
}

pub fn resolve(settings: &ProviderSettings, env: &ProviderEnv) -> ProviderInfo {
    let provider = settings.provider;
    let (base_url_variable, default_url) = provider.base_url_variable();
    let setting = settings
        .base_url
        .as_deref()
        .map(str::trim)
        .filter(|url| !url.is_empty());
    let (base_url, base_url_source) = match (setting, env.get(base_url_variable)) {
        (Some(url), _) => (url.to_owned(), Source::Setting),
        (None, Some(url)) => (url.trim().to_owned(), Source::Variable),
        (None, None) => (default_url.to_owned(), Source::Default),
    };
    let (default_key, key_need) = provider.default_key();
    let key_variable = settings
        .api_key_env
        .clone()
        .filter(|name| !name.trim().is_empty())
        .or(default_key.map(str::to_owned));
    let key_set = key_variable
        .as_deref()
        .is_some_and(|name| env.get(name).is_some());
    ProviderInfo {
        provider,
        base_url: normalize_base_url(provider, &base_url),
        base_url_source,
        base_url_variable,
        key_variable,
        key_set,
        key_need,
    }
}

/// `OLLAMA_HOST` is often a bare `host:port`, as Ollama's own CLI accepts it.
fn normalize_base_url(provider: ProviderName, url: &str) -> String {
    let url = url.trim_end_matches('/');
    if provider == ProviderName::Ollama && !url.contains("://") {
        super::ollama::base_url_of_bare_host(url)
    } else {
        url.to_owned()
    }
}

/// The provider for a loop, with the key it needs.
pub fn build(
    settings: &ProviderSettings,
    env: &ProviderEnv,
    retry: RetryPolicy,
) -> Result<Arc<dyn LlmProvider>, LlmError> {
    let info = resolve(settings, env);
    if let Some(problem) = info.problem() {
        return Err(problem);
    }
    let api_key = info
        .key_variable
        .as_deref()
        .and_then(|name| env.get(name))
        .map(|key| ApiKey::new(key.to_owned()));
    let limit = settings.max_parallel_requests;
    match settings.provider {
        ProviderName::Anthropic => Ok(Arc::new(
            AnthropicClient::new(AnthropicConfig {
                base_url: info.base_url,
                api_key: api_key.unwrap_or_else(|| ApiKey::new(String::new())),
                retry,
            })?
            .with_max_parallel_requests(limit),
        )),
        ProviderName::Openai => Ok(Arc::new(
            OpenAiClient::new(OpenAiConfig {
                base_url: info.base_url,
                api_key,
                tool_choice: settings.tool_choice,
                stream: settings.stream,
                retry,
            })?
            .with_max_parallel_requests(limit),
        )),
        ProviderName::Ollama => Ok(Arc::new(
            OllamaClient::new(OllamaConfig {
                base_url: info.base_url,
                api_key,
                num_ctx: settings.num_ctx,
                stream: settings.stream,
                retry,
            })?
            .with_max_parallel_requests(limit),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> ProviderEnv {
        ProviderEnv::new(
            pairs
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned())),
        )
    }

    #[test]
    fn base_urls_come_from_the_setting_then_the_variable_then_the_default() {
        let settings = ProviderSettings {
            provider: ProviderName::Openai,
            ..ProviderSettings::default()
        };
        let info = resolve(&settings, &env(&[]));
        assert_eq!(
            (info.base_url.as_str(), info.base_url_source),
            ("https://api.openai.com/v1", Source::Default)
        );
        let info = resolve(
            &settings,
            &env(&[("OPENAI_BASE_URL", "http://localhost:8080/v1/")]),
        );
        assert_eq!(
            (info.base_url.as_str(), info.base_url_source),
            ("http://localhost:8080/v1", Source::Variable)
        );
        let overridden = ProviderSettings {
            base_url: Some("https://openrouter.ai/api/v1".to_owned()),
            ..settings
        };
        let info = resolve(
            &overridden,
            &env(&[("OPENAI_BASE_URL", "http://localhost:8080/v1")]),
        );
        assert_eq!(info.base_url, "https://openrouter.ai/api/v1");
        assert_eq!(info.base_url_source, Source::Setting);
    }

    #[test]
    fn ollama_host_may_be_a_bare_address() {
        let settings = ProviderSettings {
            provider: ProviderName::Ollama,
            ..ProviderSettings::default()
        };
        let info = resolve(&settings, &env(&[("OLLAMA_HOST", "10.0.0.5:11434")]));
        assert_eq!(info.base_url, "http://10.0.0.5:11434");
        assert_eq!(info.key_variable, None);
        assert_eq!(info.problem().map(|err| err.to_string()), None);
    }

    #[test]
    fn ollama_host_without_a_port_means_ollamas_port_as_for_its_own_cli() {
        let settings = ProviderSettings {
            provider: ProviderName::Ollama,
            ..ProviderSettings::default()
        };
        let base_url = |host: &str| resolve(&settings, &env(&[("OLLAMA_HOST", host)])).base_url;
        assert_eq!(base_url("gpu-box"), "http://gpu-box:11434");
        assert_eq!(base_url("0.0.0.0"), "http://0.0.0.0:11434");
        assert_eq!(base_url(":11500"), "http://127.0.0.1:11500");
        assert_eq!(base_url("::1"), "http://[::1]:11434");
        assert_eq!(base_url("[::1]:11500"), "http://[::1]:11500");
        assert_eq!(base_url("http://gpu-box"), "http://gpu-box");
        assert_eq!(
            base_url("https://ollama.example/"),
            "https://ollama.example"
        );
    }

    #[test]
    fn a_missing_key_is_a_problem_only_where_the_provider_needs_one() {
        let anthropic = resolve(&ProviderSettings::default(), &env(&[]));
        let problem = anthropic
            .problem()
            .expect("anthropic needs a key")
            .to_string();
        assert!(
            problem.starts_with("ANTHROPIC_API_KEY is not set"),
            "{problem}"
        );
        let local = resolve(
            &ProviderSettings {
                provider: ProviderName::Openai,
                ..ProviderSettings::default()
            },
            &env(&[]),
        );
        assert!(local.problem().is_none());
        assert!(!local.key_set);
        let custom = resolve(
            &ProviderSettings {
                provider: ProviderName::Openai,
                api_key_env: Some("OPENROUTER_API_KEY".to_owned()),
                ..ProviderSettings::default()
            },
            &env(&[("OPENROUTER_API_KEY", "sk-or-1"), ("OPENAI_API_KEY", "")]),
        );
        assert_eq!(custom.key_variable.as_deref(), Some("OPENROUTER_API_KEY"));
        assert!(custom.key_set);
    }

    #[test]
    fn debug_shows_names_and_never_values() {
        let shown = format!(
            "{:?}",
            env(&[("OPENAI_API_KEY", "sk-secret"), ("PATH", "/bin")])
        );
        assert_eq!(shown, "{\"OPENAI_API_KEY\"}");
    }
}
