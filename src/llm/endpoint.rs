//! Where a provider's requests go: the base URL, the variable that sets it, what kind of
//! server answers there, which decides the advice an error gives (a local llama.cpp server
//! is told to start with a larger context, Ollama to raise `num_ctx`), and the turns requests
//! to it take. llama-cpp-python stops the answer in flight when the next request arrives:
//! two loops on one such server would interrupt each other, each retry interrupting the other
//! again, so by default requests to a local server take turns, shared by every loop of the
//! host.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What kind of server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerKind {
    /// A hosted API (Anthropic's, OpenAI's, a provider or proxy on the internet).
    Hosted,
    /// A server speaking OpenAI's chat completions on this machine or its network: llama.cpp's
    /// `llama-server`, llama-cpp-python, LM Studio, vLLM.
    Local,
    /// Ollama's own API.
    Ollama,
}

impl ServerKind {
    /// How many requests may go to such a server at once unless the settings say: one for a
    /// local OpenAI-compatible server (llama-cpp-python interrupts, a one-slot `llama-server`
    /// only queues); no limit for a hosted API, nor for Ollama, which queues requests itself
    /// (`OLLAMA_NUM_PARALLEL`).
    fn default_parallel_requests(self) -> Option<u32> {
        match self {
            ServerKind::Local => Some(1),
            ServerKind::Hosted | ServerKind::Ollama => None,
        }
    }

    /// A server at `base_url` speaking OpenAI's chat completions: local when its host is this
    /// machine or a private network's.
    pub fn of_openai_base_url(base_url: &str) -> ServerKind {
        if is_local_url(base_url) {
            ServerKind::Local
        } else {
            ServerKind::Hosted
        }
    }
}

/// Whether `base_url` is a server on this machine or its network, which runs models itself
/// and can be asked about them: a loopback, private (RFC 1918, carrier-grade NAT as Tailscale
/// uses), link-local or unique-local address, `localhost`, a name under `.localhost`,
/// `.local`, `.lan`, `.internal` or `.home.arpa`, or a name without a dot (a host of the local
/// network, a container's service name).
fn is_local_url(base_url: &str) -> bool {
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

/// Where requests go, the variable that sets it (named when it cannot be reached), the kind
/// of server there, and the turns its requests take.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub base_url: String,
    pub variable: &'static str,
    pub server: ServerKind,
    /// The requests to this server that may be under way at once, when they are limited.
    turns: Option<Arc<Semaphore>>,
}

impl Endpoint {
    /// `base_url` (without a trailing slash) with its server's default turns.
    pub fn new(base_url: &str, variable: &'static str, server: ServerKind) -> Endpoint {
        Endpoint {
            base_url: base_url.to_owned(),
            variable,
            server,
            turns: turns_at(base_url, server.default_parallel_requests()),
        }
    }

    /// At most `limit` requests at once to this server, from every loop of the host with the
    /// same limit; `None` keeps the server's default.
    pub fn with_max_parallel_requests(mut self, limit: Option<u32>) -> Endpoint {
        if let Some(limit) = limit {
            self.turns = turns_at(&self.base_url, Some(limit));
        }
        self
    }

    /// Waits until a request may go to the server (at once when they are not limited); the
    /// turn lasts until the returned permit is dropped.
    pub async fn take_turn(&self) -> Option<OwnedSemaphorePermit> {
        let turns = self.turns.as_ref()?;
        if turns.available_permits() == 0 {
            tracing::info!(
                base_url = %self.base_url,
                "waiting for another request to the same model server to finish"
            );
        }
        Arc::clone(turns).acquire_owned().await.ok()
    }
}

/// The turns of each server (by base URL) and limit.
type TurnsByServer = HashMap<(String, u32), Arc<Semaphore>>;

/// The turns of the server at `base_url` for `limit` requests at once, one per server and
/// limit for the whole host.
fn turns_at(base_url: &str, limit: Option<u32>) -> Option<Arc<Semaphore>> {
    static TURNS: OnceLock<Mutex<TurnsByServer>> = OnceLock::new();
    let limit = limit?.max(1);
    let mut turns = TURNS
        .get_or_init(Mutex::default)
        .lock()
        // A holder that panicked left the map whole: it is still usable.
        .unwrap_or_else(PoisonError::into_inner);
    let slots = turns
        .entry((base_url.to_owned(), limit))
        .or_insert_with(|| Arc::new(Semaphore::new(limit as usize)));
    Some(Arc::clone(slots))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_to_a_local_server_take_turns_across_clients_unless_the_limit_is_raised() {
        let local = "http://127.0.0.1:1/turns-test";
        let first = Endpoint::new(local, "OPENAI_BASE_URL", ServerKind::Local);
        let second = Endpoint::new(local, "OPENAI_BASE_URL", ServerKind::Local);
        let turn = first.take_turn().await.expect("a turn");
        let waiting = second.take_turn();
        tokio::pin!(waiting);
        assert!(
            futures::poll!(waiting.as_mut()).is_pending(),
            "the second waits for the first"
        );
        drop(turn);
        assert!(waiting.await.is_some());
        let raised = Endpoint::new(local, "OPENAI_BASE_URL", ServerKind::Local)
            .with_max_parallel_requests(Some(2));
        let (_one, _two) = (raised.take_turn().await, raised.take_turn().await);
        let hosted = Endpoint::new(
            "https://api.openai.com/v1",
            "OPENAI_BASE_URL",
            ServerKind::Hosted,
        );
        assert!(hosted.take_turn().await.is_none(), "no limit");
    }

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
            assert_eq!(
                ServerKind::of_openai_base_url(url),
                ServerKind::Local,
                "{url}"
            );
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
            assert_eq!(
                ServerKind::of_openai_base_url(url),
                ServerKind::Hosted,
                "{url}"
            );
        }
    }
}
