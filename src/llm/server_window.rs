//! What a local server says about the context window it runs a model with, so that loops whose
//! settings leave `max_tokens` and `context_budget` unset can fit them to it (`agent::limits`):
//! llama.cpp's `GET /props`, vLLM's `GET /v1/models`, LM Studio's `GET /api/v0/models`,
//! Ollama's `POST /api/show`. Each server and model is asked once per host run (the answer
//! kept, a failure asked again next time), every request bounded in time and size; hosted APIs
//! are never asked.

mod answers;
mod probe;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;

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

/// Whether `base_url` is a server on this machine or its network, which runs models itself
/// and can be asked about them: a loopback, private (RFC 1918, carrier-grade NAT as Tailscale
/// uses), link-local or unique-local address, `localhost`, a name under `.localhost`,
/// `.local`, `.lan`, `.internal` or `.home.arpa`, or a name without a dot (a host of the local
/// network, a container's service name).
pub fn is_local_url(base_url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(base_url) else {
        return false;
    };
    match url.host() {
        Some(url::Host::Ipv4(address)) => is_local_address(IpAddr::V4(address)),
        Some(url::Host::Ipv6(address)) => is_local_address(IpAddr::V6(address)),
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            name == "localhost"
                || !name.contains('.')
                || [".localhost", ".local", ".lan", ".internal", ".home.arpa"]
                    .iter()
                    .any(|suffix| name.ends_with(suffix))
        }
        None => false,
    }
}

fn is_local_address(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => is_local_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_local_v4(v4),
            None => is_local_v6(v6),
        },
    }
}

fn is_local_v4(address: Ipv4Addr) -> bool {
    let [first, second, ..] = address.octets();
    address.is_loopback()
        || address.is_private()
        || address.is_link_local()
        || address.is_unspecified()
        || (first == 100 && (64..128).contains(&second))
}

fn is_local_v6(address: Ipv6Addr) -> bool {
    let first = address.segments()[0];
    address.is_loopback()
        || address.is_unspecified()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
}

/// Which questions a server is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerKind {
    /// A server of OpenAI's chat completions: asked only when it is local.
    OpenAiCompatible,
    Ollama,
}

/// What the server at `base_url` says about `model`, asked (with the `authorization` the
/// provider sends, for a proxy in front) unless this host run has its answer already.
pub async fn ask(
    http: &reqwest::Client,
    authorization: Option<&reqwest::header::HeaderValue>,
    kind: ServerKind,
    base_url: &str,
    model: &str,
) -> ServerWindow {
    if kind == ServerKind::OpenAiCompatible && !is_local_url(base_url) {
        return ServerWindow::NotAsked;
    }
    let probe = Probe::new(http.clone(), authorization.cloned());
    let answer = ReportCache::shared()
        .get_or_ask(base_url, model, || async {
            match kind {
                ServerKind::OpenAiCompatible => probe.ask_openai(base_url, model).await,
                ServerKind::Ollama => probe.ask_ollama(base_url, model).await,
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

    #[test]
    fn local_means_this_machine_or_its_network() {
        for url in [
            "http://localhost:8080/v1",
            "http://127.0.0.1:8080/v1",
            "http://[::1]:8000/v1",
            "http://0.0.0.0:1234/v1",
            "http://192.168.1.20:8080/v1",
            "http://10.0.0.5:8000/v1",
            "http://172.20.0.3:8000/v1",
            "http://100.101.102.103:11434",
            "http://169.254.10.1:8080/v1",
            "http://[fd12:3456::1]:8080/v1",
            "http://[::ffff:192.168.0.2]:8080/v1",
            "http://gpu-box:8080/v1",
            "http://llama.local:8080/v1",
            "http://vllm.internal/v1",
            "http://box.lan:1234/v1",
            "http://server.home.arpa/v1",
            "http://app.localhost/v1",
        ] {
            assert!(is_local_url(url), "{url}");
        }
        for url in [
            "https://api.openai.com/v1",
            "https://openrouter.ai/api/v1",
            "https://my-team.openai.azure.com/openai/v1",
            "http://8.8.8.8/v1",
            "http://172.32.0.1/v1",
            "http://[2001:db8::1]/v1",
            "not a url",
        ] {
            assert!(!is_local_url(url), "{url}");
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
