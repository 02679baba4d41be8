//! Back-pressure on what an agent sends Loopr. The SDK reads the agent's lines into a queue
//! without bound before its handlers run, so a bounded channel behind the handlers alone does
//! not stop a flood: the lines themselves are held back. A line carrying a message Loopr
//! passes on (`FromAgent`) is read only with a credit, given back once that message is in
//! the channel; answers to Loopr's own requests and other messages cost none. When the loop
//! reads nothing, the credits run out, Loopr stops reading the agent's stdout, and the agent
//! blocks on its own full pipe.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use tokio::sync::Semaphore;

/// The credits shared by the gate on the agent's lines and the handlers that pass its
/// messages on.
#[derive(Clone)]
pub(super) struct Inflow {
    credits: Arc<Semaphore>,
}

impl Inflow {
    /// At most `limit` passed-on messages read and not yet in the channel.
    pub(super) fn new(limit: usize) -> Inflow {
        Inflow {
            credits: Arc::new(Semaphore::new(limit)),
        }
    }

    /// `lines`, each line whose method `passed_on` says goes to the channel waiting for a
    /// credit before it is read on.
    pub(super) fn gate(
        &self,
        lines: impl Stream<Item = std::io::Result<String>> + Send + 'static,
        passed_on: fn(&str) -> bool,
    ) -> impl Stream<Item = std::io::Result<String>> + Send + 'static {
        let credits = self.credits.clone();
        lines.then(move |line| {
            let credits = credits.clone();
            async move {
                let costs = line
                    .as_deref()
                    .ok()
                    .and_then(method_of)
                    .is_some_and(|method| passed_on(&method));
                if costs && let Ok(credit) = credits.acquire().await {
                    // Given back by `passed`, once the message is in the channel.
                    credit.forget();
                }
                line
            }
        })
    }

    /// A message read with a credit is in the channel: one more may be read.
    pub(super) fn passed(&self) {
        self.credits.add_permits(1);
    }
}

/// The JSON-RPC method a line names, if it is a request or a notification.
fn method_of(line: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(default)]
        method: Option<String>,
    }
    serde_json::from_str::<Head>(line).ok()?.method
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_requests_and_notifications_name_a_method() {
        assert_eq!(
            method_of(r#"{"jsonrpc":"2.0","method":"session/update","params":{}}"#).as_deref(),
            Some("session/update")
        );
        assert_eq!(method_of(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#), None);
        assert_eq!(method_of("not json"), None);
    }
}
