//! Which provider a loop talks to, where, and with which key: resolved from the user's
//! settings and the host's snapshot of the provider variables, the one place that decides
//! (`:checkhealth loopr` shows what it decided).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use serde::{Deserialize, Serialize};

pub use super::provider_spec::KeyNeed;
use super::provider_spec::{Connection, ProviderSpec};
use super::{ApiKey, LlmError, LlmProvider, RetryPolicy, ToolChoice, anthropic, ollama, openai};

/// A provider as the settings name it; what it is and does is its `spec()`.
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
    /// Every provider, in the order they are listed to the user.
    pub const ALL: [ProviderName; 3] = [
        ProviderName::Anthropic,
        ProviderName::Openai,
        ProviderName::Ollama,
    ];

    /// The registry: each provider's description, exported by its module.
    pub fn spec(self) -> &'static ProviderSpec {
        match self {
            ProviderName::Anthropic => &anthropic::PROVIDER,
            ProviderName::Openai => &openai::PROVIDER,
            ProviderName::Ollama => &ollama::PROVIDER,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.spec().name
    }

    /// The model when the settings name none; Ollama has no model everyone has pulled.
    pub fn default_model(self) -> Option<&'static str> {
        self.spec().default_model
    }

    /// Whether the `num_ctx` setting is sent, and so is the window requests go into.
    pub fn sends_num_ctx(self) -> bool {
        self.spec().sends_num_ctx
    }
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

/// Endings of the variables any provider may read whatever their name: keys (`api_key_env`
/// may name any `*_API_KEY`) and base URLs.
const VARIABLE_SUFFIXES: [&str; 2] = ["_API_KEY", "_BASE_URL"];

/// Which variables the providers may read: those ending in a suffix, and each provider's own
/// variables by name. The host keeps these from its start and takes the values Neovim has
/// later (the `credentials` notification), which is why a shell asks it which they are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ProviderVariables {
    pub suffixes: Vec<&'static str>,
    /// Provider variables that end in no suffix (`OLLAMA_HOST`).
    pub names: Vec<&'static str>,
}

pub fn provider_variables() -> ProviderVariables {
    let mut names: Vec<&'static str> = ProviderName::ALL
        .iter()
        .flat_map(|name| name.spec().variables())
        .filter(|variable| !VARIABLE_SUFFIXES.iter().any(|end| variable.ends_with(end)))
        .collect();
    names.sort_unstable();
    names.dedup();
    ProviderVariables {
        suffixes: VARIABLE_SUFFIXES.to_vec(),
        names,
    }
}

/// Whether a variable is one the providers may read (`provider_variables`).
pub fn is_provider_variable(name: &str) -> bool {
    VARIABLE_SUFFIXES.iter().any(|end| name.ends_with(end))
        || ProviderName::ALL
            .iter()
            .any(|provider| provider.spec().variables().any(|variable| variable == name))
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
    let spec = provider.spec();
    let base_url_variable = spec.base_url_variable;
    let setting = settings
        .base_url
        .as_deref()
        .map(str::trim)
        .filter(|url| !url.is_empty());
    let (base_url, base_url_source) = match (setting, env.get(base_url_variable)) {
        (Some(url), _) => (url.to_owned(), Source::Setting),
        (None, Some(url)) => (url.trim().to_owned(), Source::Variable),
        (None, None) => (spec.default_base_url.to_owned(), Source::Default),
    };
    let key_variable = settings
        .api_key_env
        .clone()
        .filter(|name| !name.trim().is_empty())
        .or(spec.key_variable.map(str::to_owned));
    let key_set = key_variable
        .as_deref()
        .is_some_and(|name| env.get(name).is_some());
    ProviderInfo {
        provider,
        base_url: (spec.complete_base_url)(base_url.trim_end_matches('/')),
        base_url_source,
        base_url_variable,
        key_variable,
        key_set,
        key_need: spec.key_need,
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
    (settings.provider.spec().connect)(Connection {
        base_url: info.base_url,
        api_key,
        retry,
        num_ctx: settings.num_ctx,
        tool_choice: settings.tool_choice,
        stream: settings.stream,
        max_parallel_requests: settings.max_parallel_requests,
    })
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

    /// What serde accepts for a provider, as its error for an unknown one lists them.
    fn serde_names() -> Vec<String> {
        let err = serde_json::from_str::<ProviderName>("\"?\"").expect_err("no such provider");
        let listed = err.to_string();
        let (_, names) = listed
            .split_once("expected one of ")
            .expect("serde lists the variants");
        names
            .split(", ")
            .map(|name| name.split('`').nth(1).expect("a quoted name").to_owned())
            .collect()
    }

    #[test]
    fn the_registry_lists_every_provider_once_under_its_serde_name() {
        let registered: Vec<String> = ProviderName::ALL
            .iter()
            .map(|name| name.spec().name.to_owned())
            .collect();
        assert_eq!(registered, serde_names());
        for name in ProviderName::ALL {
            let parsed: ProviderName =
                serde_json::from_value(serde_json::json!(name.spec().name)).expect("parses");
            assert_eq!(parsed, name);
        }
    }

    #[test]
    fn provider_variables_are_the_suffixes_and_each_providers_own_names() {
        let variables = provider_variables();
        assert_eq!(variables.suffixes, ["_API_KEY", "_BASE_URL"]);
        assert_eq!(variables.names, ["OLLAMA_HOST"]);
        for name in ProviderName::ALL {
            for variable in name.spec().variables() {
                assert!(is_provider_variable(variable), "{variable}");
            }
        }
        assert!(is_provider_variable("OPENROUTER_API_KEY"));
        assert!(!is_provider_variable("OLLAMA_HOSTS"));
        assert!(!is_provider_variable("PATH"));
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
