use std::time::Duration;

use serde::Deserialize;

/// Per-request settings from the user's configuration; every field has a default so a shell
/// may send only what the user changed.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoopSettings {
    pub model: String,
    pub max_tokens: u32,
    /// Model turns before the loop gives up.
    pub max_turns: u32,
    pub max_retries: u32,
    pub request_timeout_ms: u64,
    pub stream_idle_timeout_ms: u64,
}

impl Default for LoopSettings {
    fn default() -> LoopSettings {
        LoopSettings {
            model: "claude-sonnet-4-5".to_owned(),
            max_tokens: 8192,
            max_turns: 25,
            max_retries: 2,
            request_timeout_ms: 600_000,
            stream_idle_timeout_ms: 90_000,
        }
    }
}

impl LoopSettings {
    /// Rejects values no loop can run with, naming the setting.
    pub fn check(&self) -> Result<(), String> {
        if self.model.trim().is_empty() {
            return Err("model must not be empty".to_owned());
        }
        for (name, value) in [
            ("max_tokens", u64::from(self.max_tokens)),
            ("max_turns", u64::from(self.max_turns)),
            ("request_timeout_ms", self.request_timeout_ms),
            ("stream_idle_timeout_ms", self.stream_idle_timeout_ms),
        ] {
            if value == 0 {
                return Err(format!("{name} must be at least 1"));
            }
        }
        Ok(())
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    pub fn stream_idle_timeout(&self) -> Duration {
        Duration::from_millis(self.stream_idle_timeout_ms)
    }
}
