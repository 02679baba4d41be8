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
    max_parallel_requests: Option<u32>,
}

impl Endpoint {
    /// `base_url` (without a trailing slash) with its server's default turns.
    pub fn new(base_url: &str, variable: &'static str, server: ServerKind) -> Endpoint {
        Endpoint {
            base_url: base_url.to_owned(),
            variable,
            server,
            max_parallel_requests: server.default_parallel_requests(),
        }
    }

    /// At most `limit` requests at once to this server; `None` keeps the server's default.
    /// Every loop of the host shares the server's turns, whichever limit it asks for: the
    /// limit the first request asked for holds (`turns_at`).
    pub fn with_max_parallel_requests(mut self, limit: Option<u32>) -> Endpoint {
        if limit.is_some() {
            self.max_parallel_requests = limit;
        }
        self
    }

    /// Waits until a request may go to the server (at once when they are not limited); the
    /// turn lasts until the returned permit is dropped.
    pub async fn take_turn(&self) -> Option<OwnedSemaphorePermit> {
        let turns = turns_at(&self.base_url, self.max_parallel_requests?);
        if turns.available_permits() == 0 {
            tracing::info!(
                base_url = %url_to_show(&self.base_url),
                "waiting for another request to the same model server to finish"
            );
        }
        turns.acquire_owned().await.ok()
    }
}

/// `url` as it may be logged or shown: without the user and password it may carry, its query
/// and fragment (where a key may be).
pub fn url_to_show(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.has_host() => {
            // Only URLs that cannot carry credentials refuse these; they have none.
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.set_query(None);
            parsed.set_fragment(None);
            parsed.as_str().trim_end_matches('/').to_owned()
        }
        // Not a URL with a host: whatever precedes an `@` may be credentials.
        _ => url.rsplit('@').next().unwrap_or_default().to_owned(),
    }
}

/// The server `base_url` leads to, however it is spelt: the scheme, the host in lower case
/// (`localhost` as `127.0.0.1`), the port (the scheme's default when none is given) and the
/// path without trailing slashes.
fn server_key(base_url: &str) -> String {
    let Ok(url) = reqwest::Url::parse(base_url.trim()) else {
        return base_url.trim().trim_end_matches('/').to_owned();
    };
    let host = match url.host() {
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if name == "localhost" {
                "127.0.0.1".to_owned()
            } else {
                name
            }
        }
        Some(url::Host::Ipv4(address)) => address.to_string(),
        Some(url::Host::Ipv6(address)) => format!("[{address}]"),
        None => String::new(),
    };
    let port = url
        .port_or_known_default()
        .map_or_else(String::new, |port| format!(":{port}"));
    format!(
        "{}://{host}{port}{}",
        url.scheme(),
        url.path().trim_end_matches('/')
    )
}

/// A server's turns and the limit they were made with.
struct Turns {
    limit: u32,
    slots: Arc<Semaphore>,
    /// Whether a loop asking for another limit was told.
    told: bool,
}

/// The turns of the server at `base_url`, one set per server for the whole host, made with
/// the limit the first request asked for: a semaphore cannot shrink once its permits are out,
/// and separate turns for another limit would let loops interrupt each other. A different
/// limit asked for later is logged once.
fn turns_at(base_url: &str, limit: u32) -> Arc<Semaphore> {
    static TURNS: OnceLock<Mutex<HashMap<String, Turns>>> = OnceLock::new();
    let limit = limit.max(1);
    let mut turns = TURNS
        .get_or_init(Mutex::default)
        .lock()
        // A holder that panicked left the map whole: it is still usable.
        .unwrap_or_else(PoisonError::into_inner);
    let server = turns.entry(server_key(base_url)).or_insert_with(|| Turns {
        limit,
        slots: Arc::new(Semaphore::new(limit as usize)),
        told: false,
    });
    if server.limit != limit && !server.told {
        server.told = true;
        tracing::warn!(
            base_url = %url_to_show(base_url),
            asked = limit,
            holding = server.limit,
            "loops ask for different max_parallel_requests to one model server; the first \
             one asked for holds until Neovim restarts (set the same value everywhere)"
        );
    }
    Arc::clone(&server.slots)
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
        // Another server: the first limit asked for a server holds.
        let raised = Endpoint::new(
            "http://127.0.0.1:2/turns-test",
            "OPENAI_BASE_URL",
            ServerKind::Local,
        )
        .with_max_parallel_requests(Some(2));
        let (_one, _two) = (raised.take_turn().await, raised.take_turn().await);
        let hosted = Endpoint::new(
            "https://api.openai.com/v1",
            "OPENAI_BASE_URL",
            ServerKind::Hosted,
        );
        assert!(hosted.take_turn().await.is_none(), "no limit");
    }

    #[tokio::test]
    async fn spellings_of_one_server_and_different_limits_share_its_turns() {
        let first = Endpoint::new(
            "http://LOCALHOST:4242/spelling-test/",
            "OPENAI_BASE_URL",
            ServerKind::Local,
        );
        let turn = first.take_turn().await.expect("a turn");
        for other in [
            "http://127.0.0.1:4242/spelling-test",
            "http://localhost:4242/spelling-test//",
        ] {
            let second = Endpoint::new(other, "OPENAI_BASE_URL", ServerKind::Local)
                .with_max_parallel_requests(Some(2));
            let waiting = second.take_turn();
            tokio::pin!(waiting);
            assert!(
                futures::poll!(waiting.as_mut()).is_pending(),
                "{other} waits for the turn taken at another spelling"
            );
        }
        drop(turn);
    }

    #[test]
    fn a_url_shown_or_logged_carries_no_credentials_nor_query() {
        assert_eq!(
            url_to_show("http://user:s3cret@127.0.0.1:8080/v1?key=s3cret#x"),
            "http://127.0.0.1:8080/v1"
        );
        assert_eq!(
            url_to_show("https://api.openai.com/v1"),
            "https://api.openai.com/v1"
        );
        let unparsable = url_to_show("user:s3cret@gpu box/v1");
        assert!(!unparsable.contains("s3cret"), "{unparsable}");
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
