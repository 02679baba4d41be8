//! Where a provider's requests go: the base URL, the variable that sets it, and what kind of
//! server answers there, which decides the advice an error gives (a local llama.cpp server
//! is told to start with a larger context, Ollama to raise `num_ctx`).

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
    /// A server at `base_url` speaking OpenAI's chat completions: local when its host is this
    /// machine or a private network's.
    pub fn of_openai_base_url(base_url: &str) -> ServerKind {
        let host = reqwest::Url::parse(base_url)
            .ok()
            .and_then(|url| url.host().map(|host| host.to_owned()));
        match host {
            Some(url::Host::Domain(name)) => {
                let name = name.to_ascii_lowercase();
                if name == "localhost" || name.ends_with(".localhost") || name.ends_with(".local") {
                    ServerKind::Local
                } else {
                    ServerKind::Hosted
                }
            }
            Some(url::Host::Ipv4(address)) => {
                if address.is_loopback() || address.is_private() || address.is_link_local() {
                    ServerKind::Local
                } else {
                    ServerKind::Hosted
                }
            }
            Some(url::Host::Ipv6(address)) => {
                // fc00::/7, unique local addresses: an IPv6 private network.
                let unique_local = (address.segments()[0] & 0xfe00) == 0xfc00;
                if address.is_loopback() || unique_local {
                    ServerKind::Local
                } else {
                    ServerKind::Hosted
                }
            }
            None => ServerKind::Hosted,
        }
    }
}

/// Where requests go, the variable that sets it (named when it cannot be reached), and the kind
/// of server there.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub base_url: String,
    pub variable: &'static str,
    pub server: ServerKind,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_on_this_machine_or_a_private_network_are_local() {
        for url in [
            "http://127.0.0.1:8080/v1",
            "http://localhost:1234/v1",
            "http://LOCALHOST/v1",
            "http://192.168.1.20:8000/v1",
            "http://10.0.0.5/v1",
            "http://[::1]:8080/v1",
            "http://[fd12::3]/v1",
            "http://gpu-box.local:8080/v1",
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
            "http://8.8.8.8/v1",
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
