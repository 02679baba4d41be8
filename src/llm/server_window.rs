//! What a local server says about the context window it runs a model with, so that loops whose
//! settings leave `max_tokens` and `context_budget` unset can fit them to it (`agent::limits`):
//! llama.cpp's `GET /props`, vLLM's `GET /v1/models`, LM Studio's `GET /api/v0/models`,
//! Ollama's `POST /api/show`. Each server and model is asked once per host run (the answer
//! kept, a failure asked again next time), every request bounded in time and size; hosted APIs
//! are never asked.

mod answers;
mod probe;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;

use super::{Endpoint, ServerKind};
use probe::Probe;

/// What a server said about a model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ServerReport {
    /// Tokens one request may take, prompt and answer together, as the server runs the model.
    pub context_window: Option<u32>,
    /// The most the model can take (what it was trained for, or the most a server loads it
    /// with), where the server said that instead of, or besides, its window.
    pub model_max: Option<u32>,
    /// The model as the server names it.
    pub model: Option<String>,
    /// Which answer said it, e.g. `GET /props (llama.cpp)`; none when the server answers none
    /// of the questions (llama-cpp-python).
    pub answered_by: Option<&'static str>,
}

/// What asking a server gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerWindow {
    /// Nothing was asked: a hosted API, whose models' windows its documentation gives.
    NotAsked,
    Reported(ServerReport),
    /// The server could not be asked (not running, too slow, an error); why.
    Unavailable(String),
}

impl ServerWindow {
    pub fn report(&self) -> Option<&ServerReport> {
        match self {
            ServerWindow::Reported(report) => Some(report),
            ServerWindow::NotAsked | ServerWindow::Unavailable(_) => None,
        }
    }
}

/// What the server `endpoint` leads to says about `model`, asked (with the `authorization` the
/// provider sends, for a proxy in front) unless this host run has its answer already. A hosted
/// API is never asked: its models' windows are the models' own, which its documentation gives.
/// The question takes one of the server's turns, as a model request does: llama-cpp-python
/// stops the answer in flight when it is asked `/v1/models`. It waits for the turn no longer
/// than a question may take: an answer under way may hold the server for minutes, and
/// `:checkhealth` waits for this one.
pub async fn ask(
    http: &reqwest::Client,
    authorization: Option<&reqwest::header::HeaderValue>,
    endpoint: &Endpoint,
    model: &str,
) -> ServerWindow {
    if endpoint.server == ServerKind::Hosted {
        return ServerWindow::NotAsked;
    }
    let base_url = endpoint.base_url.as_str();
    let probe = Probe::new(http.clone(), authorization.cloned());
    let answer = ReportCache::shared()
        .get_or_ask(base_url, model, || async {
            let Ok(_turn) = tokio::time::timeout(probe::TIMEOUT, endpoint.take_turn()).await else {
                return Err(format!(
                    "the server is busy answering another request (no turn within {}s); it is \
                     asked again when the next loop starts",
                    probe::TIMEOUT.as_secs()
                ));
            };
            match endpoint.server {
                ServerKind::Ollama => probe.ask_ollama(base_url, model).await,
                ServerKind::Local | ServerKind::Hosted => probe.ask_openai(base_url, model).await,
            }
        })
        .await;
    match answer {
        Ok(report) => ServerWindow::Reported(report),
        Err(why) => ServerWindow::Unavailable(why),
    }
}

type Answer = Arc<tokio::sync::OnceCell<ServerReport>>;

/// The answers of this host run, one per server and model: loops starting together wait for
/// one request; a failed one is asked again by the next caller.
#[derive(Default)]
pub struct ReportCache {
    answers: Mutex<HashMap<(String, String), Answer>>,
}

impl ReportCache {
    /// The host's cache.
    pub fn shared() -> &'static ReportCache {
        static CACHE: std::sync::LazyLock<ReportCache> =
            std::sync::LazyLock::new(ReportCache::default);
        &CACHE
    }

    /// What `server` said about `model`, asking with `ask` unless it answered before.
    pub async fn get_or_ask<F, Fut>(
        &self,
        server: &str,
        model: &str,
        ask: F,
    ) -> Result<ServerReport, String>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<ServerReport, String>>,
    {
        let answer = Arc::clone(
            self.answers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry((server.to_owned(), model.to_owned()))
                .or_default(),
        );
        answer.get_or_try_init(ask).await.cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(start_paused = true)]
    async fn a_server_busy_with_another_request_is_not_waited_for_past_the_bound() {
        let endpoint = Endpoint::new(
            "http://127.0.0.1:9/busy-server-test/v1",
            "OPENAI_BASE_URL",
            ServerKind::Local,
        );
        let _answer_under_way = endpoint.take_turn().await.expect("a turn");
        let http = crate::llm::http::shared_client().expect("a client");
        let asked = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            ask(&http, None, &endpoint, "model"),
        )
        .await
        .expect("the question returns while the turn is held");
        match asked {
            ServerWindow::Unavailable(why) => assert!(why.contains("busy"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_server_is_asked_once_and_a_failure_asked_again() {
        let cache = ReportCache::default();
        let asked = AtomicUsize::new(0);
        let failing = || async {
            asked.fetch_add(1, Ordering::SeqCst);
            Err::<ServerReport, _>("connection refused".to_owned())
        };
        assert!(cache.get_or_ask("http://a", "m", failing).await.is_err());
        assert!(cache.get_or_ask("http://a", "m", failing).await.is_err());
        assert_eq!(asked.load(Ordering::SeqCst), 2, "a failure is not kept");
        let report = ServerReport {
            context_window: Some(4096),
            ..ServerReport::default()
        };
        let answering = || async {
            asked.fetch_add(1, Ordering::SeqCst);
            Ok(report.clone())
        };
        let (first, second) = tokio::join!(
            cache.get_or_ask("http://a", "m", answering),
            cache.get_or_ask("http://a", "m", answering)
        );
        assert_eq!(first, Ok(report.clone()));
        assert_eq!(second, Ok(report.clone()));
        assert_eq!(
            cache.get_or_ask("http://a", "m", answering).await,
            Ok(report.clone())
        );
        assert_eq!(
            asked.load(Ordering::SeqCst),
            3,
            "callers at once share one request, later ones its answer"
        );
        cache
            .get_or_ask("http://a", "other", answering)
            .await
            .expect("asked");
        assert_eq!(asked.load(Ordering::SeqCst), 4, "another model is asked");
    }
}
