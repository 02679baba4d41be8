//! What of a loop's settings the store keeps: everything but secrets. The values of MCP
//! servers' and coding agents' `env` (tokens, by the variable names they read) are blanked,
//! the names kept; a loop takes the values from the user's current settings whenever it runs.

use serde_json::Value;

/// `settings` (a loop's settings as JSON) as the store keeps it: without secret values.
pub fn settings_without_secrets(settings: &str) -> String {
    secrets_removed(settings).unwrap_or_else(|| settings.to_owned())
}

/// `settings` without its secret values, or `None` if it holds none. What is not a JSON
/// object cannot be told apart from a secret and is not kept (`{}`: the defaults).
pub fn secrets_removed(settings: &str) -> Option<String> {
    let mut value = match serde_json::from_str::<Value>(settings) {
        Ok(value) if value.is_object() => value,
        _ => return Some("{}".to_owned()),
    };
    blank_secrets(&mut value).then(|| value.to_string())
}

/// Blanks the values of MCP servers' and agents' `env`; whether there was one that was not
/// blank.
fn blank_secrets(settings: &mut Value) -> bool {
    let mut blanked = false;
    for table in ["/mcp/servers", "/agents"] {
        if let Some(entries) = settings.pointer_mut(table).and_then(Value::as_object_mut) {
            blanked |= blank_env_values(entries);
        }
    }
    blanked
}

/// Blanks the `env` values of each of `entries`; whether one was not blank.
fn blank_env_values(entries: &mut serde_json::Map<String, Value>) -> bool {
    let mut blanked = false;
    for server in entries.values_mut() {
        if let Some(env) = server.get_mut("env").and_then(Value::as_object_mut) {
            for value in env.values_mut() {
                if value.as_str() != Some("") {
                    *value = Value::String(String::new());
                    blanked = true;
                }
            }
        }
    }
    blanked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_are_blanked_and_everything_else_kept() {
        let settings = r#"{"max_turns":7,"mcp":{"servers":{"github":{"command":"gh-mcp","args":["stdio"],"env":{"GITHUB_TOKEN":"ghp-secret","LEVEL":"debug"}},"docs":{"url":"http://127.0.0.1:1/mcp"}}}}"#;
        let stored = settings_without_secrets(settings);
        assert!(
            !stored.contains("ghp-secret") && !stored.contains("debug"),
            "{stored}"
        );
        let stored: Value = serde_json::from_str(&stored).expect("json");
        assert_eq!(stored["max_turns"], 7);
        assert_eq!(
            stored["mcp"]["servers"]["github"]["env"],
            serde_json::json!({"GITHUB_TOKEN": "", "LEVEL": ""})
        );
        assert_eq!(stored["mcp"]["servers"]["github"]["command"], "gh-mcp");
        assert_eq!(
            stored["mcp"]["servers"]["docs"]["url"],
            "http://127.0.0.1:1/mcp"
        );
        assert_eq!(
            secrets_removed(&settings_without_secrets(settings)),
            None,
            "nothing left to remove"
        );
    }

    #[test]
    fn agents_env_values_are_blanked_too() {
        let settings = r#"{"code_agent":"claude","agents":{"claude":{"command":"claude-agent-acp","env":{"ANTHROPIC_API_KEY":"sk-ant-secret"}}}}"#;
        let stored = settings_without_secrets(settings);
        assert!(!stored.contains("sk-ant-secret"), "{stored}");
        let stored: Value = serde_json::from_str(&stored).expect("json");
        assert_eq!(
            stored["agents"]["claude"]["env"],
            serde_json::json!({"ANTHROPIC_API_KEY": ""})
        );
        assert_eq!(stored["agents"]["claude"]["command"], "claude-agent-acp");
        assert_eq!(stored["code_agent"], "claude");
    }

    #[test]
    fn settings_without_servers_or_that_are_no_object_are_kept_safe() {
        for settings in [
            r#"{"max_turns": 7}"#,
            r#"{"mcp":{"servers":{"x":{"env":{}}}}}"#,
        ] {
            assert_eq!(secrets_removed(settings), None);
            assert_eq!(
                settings_without_secrets(settings),
                settings,
                "kept as it is"
            );
        }
        assert_eq!(settings_without_secrets("not json: GITHUB_TOKEN=x"), "{}");
        assert_eq!(settings_without_secrets(r#""a string""#), "{}");
    }
}
