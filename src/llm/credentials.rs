//! API keys: never printed. `Debug` is redacted, headers carrying them are marked sensitive,
//! and every error text passes through `redact`.

use std::fmt;

#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: String) -> ApiKey {
        ApiKey(key)
    }

    /// The key for a request header; nothing else may read it.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// Replaces every occurrence of the key in `text`.
    pub fn redact(&self, text: &str) -> String {
        if self.0.is_empty() {
            text.to_owned()
        } else {
            text.replace(&self.0, "[REDACTED]")
        }
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([REDACTED])")
    }
}
