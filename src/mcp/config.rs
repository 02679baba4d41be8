//! What the user configures about MCP servers (the `mcp.servers` setting), and the checks that name the fix when it is wrong.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Joins a server's name and its tool's name into the name the model sees.
pub const TOOL_SEPARATOR: &str = "__";

/// The loop levels a server's tools may be offered to.
pub const MCP_LEVELS: [&str; 4] = ["plan", "spec", "phase", "code"];

/// Longest tool name the providers accept (Anthropic and OpenAI: 64).
const MAX_TOOL_NAME: usize = 64;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct McpSettings {
    /// By server name, which prefixes its tools (`name__tool`).
    #[schemars(extend("propertyNames" = { "pattern": "^[A-Za-z0-9_-]+$" }))]
    pub servers: BTreeMap<String, McpServerConfig>,
}

/// One server: a command speaking MCP over stdio, or the URL of a streamable HTTP server.
/// `Debug` names its `env` variables, never their values.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[schemars(
    extend("oneOf" = [{ "required": ["command"] }, { "required": ["url"] }]),
    description = "One server: a command speaking MCP over stdio, or the URL of a streamable HTTP \
                   server."
)]
pub struct McpServerConfig {
    /// A program speaking MCP over stdio (started in the project root).
    #[schemars(length(min = 1))]
    pub command: Option<String>,
    pub args: Vec<String>,
    /// Variables set for the command, over the allow-listed ones of the host. Their values
    /// are secrets (tokens): a loop's stored settings keep only the names, and a loop takes
    /// the values from the user's current settings (`McpSettings::with_current_env`).
    #[schemars(
        description = "Variables set for the command, over the allow-listed ones of the host."
    )]
    pub env: BTreeMap<String, String>,
    /// A streamable HTTP server instead of a command.
    #[schemars(length(min = 1))]
    pub url: Option<String>,
    /// The loop levels offered the server's tools; planning levels get only `read_only_tools`.
    #[schemars(extend("items" = { "type": "string", "enum": MCP_LEVELS }))]
    pub levels: Vec<String>,
    /// Tools the user vouches only read: offered to planning levels, and called without asking.
    #[schemars(inner(length(min = 1)))]
    pub read_only_tools: Vec<String>,
    /// How long a call (or a start) may take before the model is told it timed out.
    #[schemars(range(min = 1))]
    pub timeout_secs: u64,
}

impl Default for McpServerConfig {
    fn default() -> McpServerConfig {
        McpServerConfig {
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            url: None,
            levels: vec!["code".to_owned()],
            read_only_tools: Vec::new(),
            timeout_secs: 60,
        }
    }
}

impl std::fmt::Debug for McpServerConfig {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("McpServerConfig")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("url", &self.url)
            .field("levels", &self.levels)
            .field("read_only_tools", &self.read_only_tools)
            .field("timeout_secs", &self.timeout_secs)
            .finish()
    }
}

/// How the host reaches a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint<'a> {
    Command {
        program: &'a str,
        args: &'a [String],
    },
    Http {
        url: &'a str,
    },
}

impl McpServerConfig {
    pub fn endpoint(&self) -> Option<Endpoint<'_>> {
        match (self.command.as_deref(), self.url.as_deref()) {
            (Some(program), None) => Some(Endpoint::Command {
                program,
                args: &self.args,
            }),
            (None, Some(url)) => Some(Endpoint::Http { url }),
            _ => None,
        }
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }

    /// Whether loops of `level` get any of this server's tools.
    pub fn offered_to(&self, level: &str) -> bool {
        self.levels.iter().any(|offered| offered == level)
    }

    /// Whether `tool` goes to loops of `level`: every tool to code loops, only read-only
    /// ones to planning loops, which never change anything.
    pub fn offers(&self, level: &str, tool: &str) -> bool {
        self.offered_to(level) && (level == "code" || self.is_read_only(tool))
    }

    pub fn is_read_only(&self, tool: &str) -> bool {
        self.read_only_tools
            .iter()
            .any(|read_only| read_only == tool)
    }
}

/// The values of the variables `stored` names (an `env` as a loop's stored settings keep it,
/// names only) from `current` (the user's settings now). Else the variables they lack, said
/// of `what` (`MCP server docs`), with the setting `key` that sets them as the fix.
pub fn env_from_current(
    what: &str,
    key: &str,
    stored: &BTreeMap<String, String>,
    current: Option<&BTreeMap<String, String>>,
) -> Result<BTreeMap<String, String>, String> {
    let mut env = BTreeMap::new();
    let mut missing = Vec::new();
    for variable in stored.keys() {
        match current.and_then(|current| current.get(variable)) {
            Some(value) => {
                env.insert(variable.clone(), value.clone());
            }
            None => missing.push(variable.as_str()),
        }
    }
    if missing.is_empty() {
        return Ok(env);
    }
    let problem = format!(
        "{what} needs {} in its env, which the current settings do not set (env values are \
         never stored with a loop)",
        missing.join(", ")
    );
    Err(crate::next_step::NextStep::SetOption {
        key: key.to_owned(),
        example: None,
    }
    .attach(&problem))
}

impl McpSettings {
    /// `server` (as a loop's settings have it) with the values of its `env` taken from these,
    /// the user's current settings, by server and variable name: a loop's stored settings
    /// name the variables only. Else which ones the current settings do not set, and the fix.
    pub fn with_current_env(
        &self,
        name: &str,
        server: &McpServerConfig,
    ) -> Result<McpServerConfig, String> {
        let env = env_from_current(
            &format!("MCP server {name}"),
            &format!("mcp.servers.{name}.env"),
            &server.env,
            self.servers.get(name).map(|current| &current.env),
        )?;
        Ok(McpServerConfig {
            env,
            ..server.clone()
        })
    }

    /// Rejects what no server could start with, naming the setting and the fix.
    pub fn check(&self) -> Result<(), String> {
        for (name, server) in &self.servers {
            check_server(name, server)?;
        }
        Ok(())
    }
}

fn check_server(name: &str, server: &McpServerConfig) -> Result<(), String> {
    let at = format!("mcp.servers.{name}");
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !name.contains(TOOL_SEPARATOR);
    if !plain {
        return Err(format!(
            "mcp server name {name:?}: use letters, digits, '-' and single '_' (it prefixes the \
             server's tools as {name}{TOOL_SEPARATOR}<tool>)"
        ));
    }
    if name.len() + TOOL_SEPARATOR.len() >= MAX_TOOL_NAME {
        return Err(format!(
            "{at}: the name is too long; tool names are at most {MAX_TOOL_NAME} characters"
        ));
    }
    match server.endpoint() {
        Some(Endpoint::Command { program, .. }) if program.trim().is_empty() => {
            return Err(format!("{at}.command is empty; name the server's program"));
        }
        Some(Endpoint::Http { url }) => {
            let parsed = url::Url::parse(url)
                .map_err(|err| format!("{at}.url {url:?} is not a URL ({err})"))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(format!(
                    "{at}.url {url:?}: use an http:// or https:// URL (streamable HTTP)"
                ));
            }
            if !server.args.is_empty() || !server.env.is_empty() {
                return Err(format!(
                    "{at}: args and env are for a command; a url server takes neither"
                ));
            }
        }
        Some(Endpoint::Command { .. }) => {}
        None => {
            return Err(format!(
                "{at}: set either command (a stdio server, e.g. {{ command = 'npx', args = \
                 {{ '-y', '@modelcontextprotocol/server-everything' }} }}) or url (a streamable \
                 HTTP server), not both or neither"
            ));
        }
    }
    if let Some(variable) = server
        .env
        .keys()
        .find(|variable| crate::llm::is_provider_variable(variable))
    {
        return Err(format!(
            "{at}.env sets {variable}; provider keys never reach MCP servers, remove it"
        ));
    }
    if let Some(level) = server
        .levels
        .iter()
        .find(|level| !MCP_LEVELS.contains(&level.as_str()))
    {
        return Err(format!(
            "{at}.levels has {level:?}; use any of \"plan\", \"spec\", \"phase\", \"code\""
        ));
    }
    if server.timeout_secs == 0 {
        return Err(format!("{at}.timeout_secs must be at least 1"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(name: &str, server: McpServerConfig) -> McpSettings {
        McpSettings {
            servers: BTreeMap::from([(name.to_owned(), server)]),
        }
    }

    fn command(program: &str) -> McpServerConfig {
        McpServerConfig {
            command: Some(program.to_owned()),
            ..McpServerConfig::default()
        }
    }

    #[test]
    fn a_server_needs_exactly_one_of_command_and_url() {
        assert_eq!(settings("git", command("mcp-git")).check(), Ok(()));
        let neither = settings("git", McpServerConfig::default()).check();
        assert!(neither.expect_err("neither").contains("set either command"));
        let both = McpServerConfig {
            url: Some("http://127.0.0.1:1/mcp".to_owned()),
            ..command("mcp-git")
        };
        assert!(settings("git", both).check().is_err());
        let ftp = McpServerConfig {
            url: Some("ftp://example.com".to_owned()),
            ..McpServerConfig::default()
        };
        assert!(
            settings("docs", ftp)
                .check()
                .expect_err("ftp")
                .contains("use an http:// or https:// URL")
        );
    }

    #[test]
    fn names_levels_and_env_are_checked() {
        assert!(
            settings("my server", command("x"))
                .check()
                .expect_err("space")
                .contains("mcp server name \"my server\"")
        );
        assert!(settings("a__b", command("x")).check().is_err());
        let planning = McpServerConfig {
            levels: vec!["review".to_owned()],
            ..command("x")
        };
        assert!(
            settings("x", planning)
                .check()
                .expect_err("review")
                .contains("levels has \"review\"")
        );
        let leaky = McpServerConfig {
            env: BTreeMap::from([("ANTHROPIC_API_KEY".to_owned(), "k".to_owned())]),
            ..command("x")
        };
        assert!(
            settings("x", leaky)
                .check()
                .expect_err("key")
                .contains("provider keys never reach MCP servers")
        );
    }

    #[test]
    fn env_values_come_from_the_current_settings_and_debug_hides_them() {
        let configured = McpServerConfig {
            env: BTreeMap::from([("GITHUB_TOKEN".to_owned(), "ghp-now".to_owned())]),
            ..command("gh-mcp")
        };
        let current = settings("github", configured.clone());
        let stored = McpServerConfig {
            env: BTreeMap::from([("GITHUB_TOKEN".to_owned(), String::new())]),
            ..command("gh-mcp")
        };
        assert_eq!(current.with_current_env("github", &stored), Ok(configured));
        let err = McpSettings::default()
            .with_current_env("github", &stored)
            .expect_err("not configured now");
        assert!(
            err.contains("MCP server github needs GITHUB_TOKEN")
                && err.contains("mcp.servers.github.env"),
            "{err}"
        );
        assert_eq!(
            McpSettings::default().with_current_env("plain", &command("x")),
            Ok(command("x")),
            "a server without env needs nothing"
        );
        let shown = format!("{current:?}");
        assert!(
            shown.contains("GITHUB_TOKEN") && !shown.contains("ghp-now"),
            "{shown}"
        );
    }

    #[test]
    fn planning_levels_get_only_read_only_tools() {
        let server = McpServerConfig {
            levels: vec!["spec".to_owned(), "code".to_owned()],
            read_only_tools: vec!["lookup".to_owned()],
            ..command("x")
        };
        assert!(server.offers("code", "record"));
        assert!(server.offers("spec", "lookup"));
        assert!(!server.offers("spec", "record"));
        assert!(!server.offers("plan", "lookup"), "plan is not in levels");
        assert!(
            !command("x").offers("spec", "lookup"),
            "code only by default"
        );
    }
}
