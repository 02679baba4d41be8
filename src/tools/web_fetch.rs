//! `web_fetch`: an http(s) page as text. Only public internet addresses are fetched: the host
//! is resolved here and every address it resolves to checked (loopback, private, link-local,
//! metadata and other special addresses are refused), the connection goes only to an address
//! that passed (the client resolves through the same check, so a DNS answer cannot change
//! between the check and the connection), and redirects are followed one at a time, each hop
//! checked and its host approved again. The page is made text (`html_text`) on the blocking
//! pool, within the fetch's time limit and its cancel.

mod html_text;

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::output::{CappedOutput, clip_line};
use super::{ApprovalRequest, ChangeKind, Tool, ToolContext, ToolError, parse_input};
use crate::schema::input_schema_for;

/// Time for one fetch: on the network, all its hops together, and making text of the page.
/// The user's approvals are not counted, they may take as long as the user likes.
const TIMEOUT: Duration = Duration::from_secs(20);
/// Bytes read from the server at most; the rest is not downloaded.
const MAX_DOWNLOAD: usize = 2 * 1024 * 1024;
const MAX_OUTPUT_BYTES: usize = 100 * 1024;
/// Longer lines (minified scripts and JSON) are clipped, so one line cannot take the output.
const MAX_LINE_CHARS: usize = 10_000;
/// Redirects followed at most; each one is checked like the first request.
pub const MAX_REDIRECTS: usize = 5;

/// Fetch a web page as text.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebFetchInput {
    /// An http:// or https:// URL.
    pub url: String,
}

/// Why an address may not be fetched (`None`: it may). The strict check is
/// `non_public_address`; tests of the fetching itself inject one that lets their loopback
/// server through.
pub type AddressCheck = fn(IpAddr) -> Option<&'static str>;

/// Off unless the user enables it (`web_fetch = true`): it reaches outside the project.
pub struct WebFetchTool {
    client: reqwest::Client,
    check: AddressCheck,
}

impl WebFetchTool {
    pub fn new() -> WebFetchTool {
        if crate::test_hooks::loopback_fetch_allowed() {
            return WebFetchTool::with_address_check(public_or_the_test_server);
        }
        WebFetchTool::with_address_check(non_public_address)
    }

    /// A tool that refuses the addresses `check` names a reason for.
    pub(crate) fn with_address_check(check: AddressCheck) -> WebFetchTool {
        crate::llm::http::install_tls_provider();
        let client = reqwest::Client::builder()
            .user_agent(concat!("loopr/", env!("CARGO_PKG_VERSION")))
            .timeout(TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            // Redirects are followed by hand, so that each hop is checked and approved.
            .redirect(reqwest::redirect::Policy::none())
            // A proxy would resolve and connect for us, past the address check.
            .no_proxy()
            .dns_resolver(Arc::new(CheckedResolver { check }))
            .build()
            .unwrap_or_default();
        WebFetchTool { client, check }
    }
}

/// What a fetch is asked about as (per host).
const CHANGE: ChangeKind = ChangeKind::Fetch;

impl Default for WebFetchTool {
    fn default() -> WebFetchTool {
        WebFetchTool::new()
    }
}

#[async_trait]
impl Tool for WebFetchTool {
    fn name(&self) -> &'static str {
        "web_fetch"
    }

    fn description(&self) -> &'static str {
        "Fetch an http(s) URL and return it as text (HTML is reduced to readable text). Pages \
         are cut at 2 MiB downloaded and 100 KiB returned."
    }

    fn input_schema(&self) -> Value {
        input_schema_for::<WebFetchInput>()
    }

    fn example(&self) -> Value {
        json!({"url": "https://docs.rs/clap/latest/clap/"})
    }

    fn change_kind(&self) -> Option<ChangeKind> {
        Some(CHANGE)
    }

    async fn call(&self, input: Value, context: &ToolContext) -> Result<String, ToolError> {
        let input: WebFetchInput = parse_input(self.name(), input)?;
        let url = parse_web_url(input.url.trim())
            .map_err(|why| ToolError::InvalidInput(format!("url {:?} {why}", input.url)))?;
        let work = async {
            let mut budget = TimeBudget { left: TIMEOUT };
            let page = self
                .fetch_following_redirects(url.clone(), context, &mut budget)
                .await?;
            budget
                .within(page_text(&url, page))
                .await
                .unwrap_or_else(|| {
                    Err(web_error(
                        &url,
                        format!(
                            "could not be fetched and made text within {}s; fetch a smaller or \
                             simpler page",
                            TIMEOUT.as_secs()
                        ),
                    ))
                })
        };
        tokio::select! {
            biased;
            _ = context.cancel.cancelled() => Err(ToolError::Cancelled),
            result = work => result,
        }
    }
}

/// A fetched page: its content type, and its body up to `MAX_DOWNLOAD` bytes.
struct Page {
    content_type: String,
    body: Vec<u8>,
    truncated: bool,
}

/// The page as the text the model gets. Made on the blocking pool, so the async workers go on
/// streaming other loops' answers; when the caller stops waiting (cancel, time limit), the
/// work stops at its next check.
async fn page_text(url: &reqwest::Url, page: Page) -> Result<String, ToolError> {
    let content_type = page.content_type.as_str();
    let html = content_type.contains("html");
    let text = html
        || content_type.is_empty()
        || content_type.starts_with("text/")
        || content_type.contains("json")
        || content_type.contains("xml");
    if !text {
        return Err(web_error(url, format!("is {content_type}, not text")));
    }
    let stop = CancellationToken::new();
    let _stop_when_dropped = stop.clone().drop_guard();
    let converting =
        tokio::task::spawn_blocking(move || readable_text(&page, html, &|| stop.is_cancelled()));
    match converting.await {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(html_text::Stopped)) => Err(ToolError::Cancelled),
        Err(err) => Err(web_error(
            url,
            format!("making text of the page failed: {err}"),
        )),
    }
}

/// The page's text, capped; HTML reduced to readable text (`html_text`).
fn readable_text(
    page: &Page,
    html: bool,
    stop: &dyn Fn() -> bool,
) -> Result<String, html_text::Stopped> {
    let body = String::from_utf8_lossy(&page.body);
    let text = if html {
        // One byte over the cap, so that a page cut there is said to be.
        std::borrow::Cow::Owned(html_text::html_to_text(&body, MAX_OUTPUT_BYTES + 1, stop)?.text)
    } else {
        body
    };
    let mut output = CappedOutput::new(MAX_OUTPUT_BYTES);
    for line in text.lines() {
        if !output.push_line(&clip_line(line, MAX_LINE_CHARS)) {
            break;
        }
    }
    let mut result = output.finish("fetch a more specific page");
    if page.truncated {
        result.push_str(&format!("[download stopped at {MAX_DOWNLOAD} bytes]\n"));
    }
    Ok(result)
}

impl WebFetchTool {
    /// Fetches `url`, following at most `MAX_REDIRECTS` redirects. Each hop's addresses are
    /// checked before its host is approved (nobody is asked about what would be refused),
    /// and each new host is approved on its own.
    async fn fetch_following_redirects(
        &self,
        mut url: reqwest::Url,
        context: &ToolContext,
        network: &mut TimeBudget,
    ) -> Result<Page, ToolError> {
        let mut approved_hosts: HashSet<String> = HashSet::new();
        let mut redirected_from: Option<reqwest::Url> = None;
        for hop in 0..=MAX_REDIRECTS {
            let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
            network
                .spend(&url, self.check_destination(&url, redirected_from.as_ref()))
                .await?;
            if !approved_hosts.contains(&host) {
                let mut detail = format!("Loopr wants to fetch {url}");
                if let Some(from) = &redirected_from {
                    detail.push_str(&format!("\n(redirected from {from})"));
                }
                context
                    .approve(ApprovalRequest {
                        loop_id: String::new(),
                        kind: CHANGE,
                        tool: self.name(),
                        subject: host.clone(),
                        detail,
                    })
                    .await?;
                approved_hosts.insert(host);
            }
            let response = network
                .spend(&url, async {
                    self.client
                        .get(url.clone())
                        .send()
                        .await
                        .map_err(|err| request_error(&url, redirected_from.as_ref(), &err))
                })
                .await?;
            let status = response.status();
            if status.is_redirection() {
                let location = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|value| value.to_str().ok())
                    .ok_or_else(|| {
                        web_error(&url, format!("HTTP {status} without a usable Location"))
                    })?;
                if hop == MAX_REDIRECTS {
                    return Err(web_error(
                        &url,
                        format!(
                            "redirects more than {MAX_REDIRECTS} times; fetch the final page \
                             directly"
                        ),
                    ));
                }
                let next = url
                    .join(location)
                    .map_err(|err| web_error(&url, format!("redirects to {location:?}: {err}")))
                    .and_then(|next| {
                        parse_web_url(next.as_str()).map_err(|why| {
                            web_error(&url, format!("redirects to {next}, which {why}"))
                        })
                    })?;
                redirected_from = Some(std::mem::replace(&mut url, next));
                continue;
            }
            if !status.is_success() {
                return Err(web_error(&url, format!("HTTP {status}")));
            }
            return network.spend(&url, read_body(&url, response)).await;
        }
        Err(web_error(
            &url,
            format!("redirects more than {MAX_REDIRECTS} times"),
        ))
    }

    /// Refuses a URL whose host is, or resolves to, an address the check refuses. A name is
    /// resolved again when connecting, through the same check (`CheckedResolver`); this
    /// earlier look-up only keeps the user from being asked about a refused fetch.
    async fn check_destination(
        &self,
        url: &reqwest::Url,
        redirected_from: Option<&reqwest::Url>,
    ) -> Result<(), ToolError> {
        let refused = |host: &str, address: IpAddr, reason: &str| {
            refusal(
                url,
                redirected_from,
                &Refused {
                    host: host.to_owned(),
                    address,
                    reason: reason.to_owned(),
                },
            )
        };
        match url.host() {
            Some(url::Host::Ipv4(address)) => match (self.check)(IpAddr::V4(address)) {
                Some(reason) => Err(refused(&address.to_string(), IpAddr::V4(address), reason)),
                None => Ok(()),
            },
            Some(url::Host::Ipv6(address)) => match (self.check)(IpAddr::V6(address)) {
                Some(reason) => Err(refused(&address.to_string(), IpAddr::V6(address), reason)),
                None => Ok(()),
            },
            Some(url::Host::Domain(name)) => match checked_lookup(name, self.check).await {
                Ok(_) => Ok(()),
                Err(LookupError::Refused(refusal_found)) => {
                    Err(refusal(url, redirected_from, &refusal_found))
                }
                Err(LookupError::Failed(message)) => Err(web_error(url, message)),
            },
            None => Err(ToolError::InvalidInput(format!("url {url} has no host"))),
        }
    }
}

/// What is left of a fetch's `TIMEOUT`, spent by the network and by making text of the page.
struct TimeBudget {
    left: Duration,
}

impl TimeBudget {
    /// `work`'s outcome, or `None` if the time left ran out first.
    async fn within<T>(&mut self, work: impl std::future::Future<Output = T>) -> Option<T> {
        let started = tokio::time::Instant::now();
        let finished = tokio::time::timeout(self.left, work).await;
        self.left = self.left.saturating_sub(started.elapsed());
        finished.ok()
    }

    /// A network step, failing with the fetch's time limit when it runs out.
    async fn spend<T>(
        &mut self,
        url: &reqwest::Url,
        work: impl std::future::Future<Output = Result<T, ToolError>>,
    ) -> Result<T, ToolError> {
        self.within(work).await.unwrap_or_else(|| {
            Err(web_error(
                url,
                format!("no answer within {}s", TIMEOUT.as_secs()),
            ))
        })
    }
}

/// The strict check, but for 127.0.0.1 itself, where a test serves its pages (only when the
/// test hooks ask for it).
fn public_or_the_test_server(address: IpAddr) -> Option<&'static str> {
    if address == IpAddr::V4(Ipv4Addr::LOCALHOST) {
        return None;
    }
    non_public_address(address)
}

/// `url` if it is an http(s) URL with a host; else why not, to follow the URL in a message.
fn parse_web_url(text: &str) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(text).map_err(|err| format!("is not a URL: {err}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("is not http or https; only web pages can be fetched".to_owned());
    }
    if url.host().is_none() {
        return Err("has no host".to_owned());
    }
    Ok(url)
}

async fn read_body(url: &reqwest::Url, response: reqwest::Response) -> Result<Page, ToolError> {
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    let mut truncated = false;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|err| web_error(url, err.to_string()))?;
        let room = MAX_DOWNLOAD.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if chunk.len() > room {
            truncated = true;
            break;
        }
    }
    Ok(Page {
        content_type,
        body,
        truncated,
    })
}

/// An address the check refused, carried through reqwest's error chain from the resolver.
#[derive(Debug, thiserror::Error)]
#[error("{host} resolves to {address}, {reason}")]
struct Refused {
    host: String,
    address: IpAddr,
    reason: String,
}

enum LookupError {
    Refused(Refused),
    Failed(String),
}

/// The addresses `name` resolves to, if the check refuses none of them. One refused address
/// refuses the name: a public address next to a private one is how a name is made to reach
/// inside.
async fn checked_lookup(name: &str, check: AddressCheck) -> Result<Vec<SocketAddr>, LookupError> {
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((name, 0))
        .await
        .map_err(|err| LookupError::Failed(format!("cannot resolve {name}: {err}")))?
        .collect();
    if addresses.is_empty() {
        return Err(LookupError::Failed(format!(
            "{name} resolves to no address"
        )));
    }
    for address in &addresses {
        if let Some(reason) = check(address.ip()) {
            return Err(LookupError::Refused(Refused {
                host: name.to_owned(),
                address: address.ip(),
                reason: reason.to_owned(),
            }));
        }
    }
    Ok(addresses)
}

/// The client's resolver: it connects only to addresses the check lets through.
struct CheckedResolver {
    check: AddressCheck,
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let check = self.check;
        let name = name.as_str().to_owned();
        Box::pin(async move {
            match checked_lookup(&name, check).await {
                Ok(addresses) => Ok(Box::new(addresses.into_iter()) as reqwest::dns::Addrs),
                Err(LookupError::Refused(refused)) => Err(refused.into()),
                Err(LookupError::Failed(message)) => Err(message.into()),
            }
        })
    }
}

fn refusal(
    url: &reqwest::Url,
    redirected_from: Option<&reqwest::Url>,
    refused: &Refused,
) -> ToolError {
    let subject = if refused.host == refused.address.to_string() {
        format!("{} is {}", refused.address, refused.reason)
    } else {
        refused.to_string()
    };
    let via = redirected_from
        .map(|from| format!(" (redirected from {from})"))
        .unwrap_or_default();
    ToolError::Denied(format!(
        "web_fetch of {url}{via}: {subject}; only public internet addresses are fetched, \
         never this machine, the local network or cloud metadata"
    ))
}

/// A failed request in plain words; a refusal by the resolver keeps its own message.
fn request_error(
    url: &reqwest::Url,
    redirected_from: Option<&reqwest::Url>,
    err: &reqwest::Error,
) -> ToolError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(current) = source {
        if let Some(refused) = current.downcast_ref::<Refused>() {
            return refusal(url, redirected_from, refused);
        }
        source = current.source();
    }
    web_error(url, err.to_string())
}

/// Why `address` is not a public internet address, or `None` if it is. IPv6 forms that
/// carry an IPv4 address (mapped, compatible, NAT64, 6to4) are judged by that address.
pub fn non_public_address(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(v4) => non_public_v4(v4),
        IpAddr::V6(v6) => non_public_v6(v6),
    }
}

fn non_public_v4(address: Ipv4Addr) -> Option<&'static str> {
    let [a, b, _, _] = address.octets();
    if address == Ipv4Addr::new(169, 254, 169, 254) {
        return Some("the cloud metadata address");
    }
    if a == 0 {
        return Some("an unspecified (\"this network\") address");
    }
    if address.is_loopback() {
        return Some("a loopback address (this machine)");
    }
    if address.is_private() {
        return Some("a private network address");
    }
    if address.is_link_local() {
        return Some("a link-local address");
    }
    if a == 100 && (64..128).contains(&b) {
        return Some("a shared (carrier-grade NAT) address");
    }
    if address.is_broadcast() {
        return Some("the broadcast address");
    }
    if address.is_multicast() {
        return Some("a multicast address");
    }
    if a >= 240 {
        return Some("a reserved address");
    }
    if (a == 192 && b == 0 && address.octets()[2] == 0) || (a == 198 && (18..20).contains(&b)) {
        return Some("a reserved address");
    }
    None
}

fn non_public_v6(address: Ipv6Addr) -> Option<&'static str> {
    let segments = address.segments();
    if address == Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254) {
        return Some("the cloud metadata address");
    }
    if address.is_unspecified() {
        return Some("the unspecified address");
    }
    if address.is_loopback() {
        return Some("a loopback address (this machine)");
    }
    if let Some(v4) = embedded_v4(address) {
        return non_public_v4(v4);
    }
    match segments[0] {
        first if first & 0xfe00 == 0xfc00 => Some("a private (unique local) address"),
        first if first & 0xffc0 == 0xfe80 => Some("a link-local address"),
        first if first & 0xffc0 == 0xfec0 => Some("a private (site-local) address"),
        first if first & 0xff00 == 0xff00 => Some("a multicast address"),
        _ => None,
    }
}

/// The IPv4 address an IPv6 address stands for, if it is one of the forms that carry one.
fn embedded_v4(address: Ipv6Addr) -> Option<Ipv4Addr> {
    let segments = address.segments();
    let octets = address.octets();
    let last_four = || Ipv4Addr::new(octets[12], octets[13], octets[14], octets[15]);
    // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible, deprecated but still routed).
    if segments[..5].iter().all(|segment| *segment == 0)
        && (segments[5] == 0xffff || segments[5] == 0)
    {
        return Some(last_four());
    }
    // 64:ff9b::a.b.c.d and 64:ff9b:1::/48: NAT64 translates to the IPv4 address.
    if segments[0] == 0x64 && segments[1] == 0xff9b {
        return Some(last_four());
    }
    // 2002:AABB:CCDD::/48: 6to4 tunnels to AA.BB.CC.DD.
    if segments[0] == 0x2002 {
        return Some(Ipv4Addr::new(octets[2], octets[3], octets[4], octets[5]));
    }
    None
}

fn web_error(url: &reqwest::Url, message: String) -> ToolError {
    ToolError::File {
        path: url.to_string(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::tools::{Approver, Decision, NoBuffers, NoJournal, ProjectRoot, ToolPolicy};

    /// Accepts, and remembers what it was asked.
    #[derive(Default)]
    struct Recording(Mutex<Vec<ApprovalRequest>>);

    #[async_trait]
    impl Approver for Recording {
        async fn decide(
            &self,
            request: ApprovalRequest,
            _cancel: &CancellationToken,
        ) -> Option<Decision> {
            self.0.lock().expect("lock").push(request);
            Some(Decision::Accept)
        }
    }

    fn context(dir: &tempfile::TempDir, approver: Arc<Recording>) -> ToolContext {
        ToolContext {
            root: ProjectRoot::new(dir.path()).expect("root"),
            cancel: CancellationToken::new(),
            policy: Arc::new(ToolPolicy::default()),
            approver,
            loop_id: "test-loop".to_owned(),
            buffers: Arc::new(NoBuffers),
            journal: Arc::new(NoJournal),
        }
    }

    /// A loopback HTTP server answering each connection with `respond(path)` (status line and
    /// headers, then the body); returns its address and how many requests it got.
    async fn serve(
        respond: impl Fn(&str) -> (String, String) + Send + Sync + 'static,
    ) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let requests = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut request = [0u8; 4096];
                let read = socket.read(&mut request).await.unwrap_or(0);
                let text = String::from_utf8_lossy(&request[..read]).into_owned();
                let path = text.split_whitespace().nth(1).unwrap_or("/").to_owned();
                requests.lock().expect("lock").push(path.clone());
                let (head, body) = respond(&path);
                let response = format!(
                    "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            }
        });
        (address, seen)
    }

    fn redirect_to(location: String) -> (String, String) {
        (
            format!("HTTP/1.1 302 Found\r\nLocation: {location}"),
            String::new(),
        )
    }

    #[test]
    fn only_public_addresses_pass() {
        for (address, reason) in [
            ("127.0.0.1", "loopback"),
            ("127.5.6.7", "loopback"),
            ("::1", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("fc00::1", "private"),
            ("fd12:3456::1", "private"),
            ("169.254.169.254", "metadata"),
            ("fd00:ec2::254", "metadata"),
            ("169.254.1.1", "link-local"),
            ("fe80::1", "link-local"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("100.127.255.255", "carrier-grade NAT"),
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
            ("224.0.0.1", "multicast"),
            ("ff02::1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
            ("::ffff:169.254.169.254", "metadata"),
            ("::127.0.0.1", "loopback"),
            ("64:ff9b::a00:1", "private"),
            ("2002:a9fe:a9fe::1", "metadata"),
        ] {
            let parsed: IpAddr = address.parse().expect(address);
            let found = non_public_address(parsed);
            assert!(
                found.is_some_and(|found| found.contains(reason)),
                "{address}: {found:?}, expected {reason}"
            );
        }
        for public in [
            "93.184.216.34",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            let parsed: IpAddr = public.parse().expect(public);
            assert_eq!(non_public_address(parsed), None, "{public}");
        }
    }

    #[tokio::test]
    async fn this_machine_the_local_network_and_metadata_are_refused_before_asking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let approver = Arc::new(Recording::default());
        let context = context(&dir, approver.clone());
        let (server, requests) = serve(|_| {
            (
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain".to_owned(),
                "inside".to_owned(),
            )
        })
        .await;
        let port = server.port();
        let tool = WebFetchTool::new();
        for (url, named) in [
            (
                format!("http://127.0.0.1:{port}/"),
                "127.0.0.1 is a loopback",
            ),
            (format!("http://localhost:{port}/"), "localhost resolves to"),
            (format!("http://[::ffff:127.0.0.1]:{port}/"), "loopback"),
            (
                format!("http://2130706433:{port}/"),
                "127.0.0.1 is a loopback",
            ),
            (
                format!("http://0.0.0.0:{port}/"),
                "0.0.0.0 is an unspecified",
            ),
            ("http://10.0.0.1/".to_owned(), "10.0.0.1 is a private"),
            (
                "http://169.254.169.254/latest/meta-data/".to_owned(),
                "169.254.169.254 is the cloud metadata address",
            ),
            ("http://[fd00:ec2::254]/".to_owned(), "cloud metadata"),
        ] {
            let err = tool
                .call(json!({ "url": url }), &context)
                .await
                .expect_err(&url);
            assert!(matches!(err, ToolError::Denied(_)), "{url}: {err}");
            assert!(err.to_string().contains(named), "{url}: {err}");
            assert!(
                err.to_string().contains("only public internet addresses"),
                "{err}"
            );
        }
        assert!(
            requests.lock().expect("lock").is_empty(),
            "nothing reached the server"
        );
        assert!(
            approver.0.lock().expect("lock").is_empty(),
            "nobody is asked about a refused fetch"
        );
    }

    #[tokio::test]
    async fn every_redirect_is_checked_and_few_are_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let approver = Arc::new(Recording::default());
        let context = context(&dir, approver.clone());
        let (server, requests) = serve(|path| match path {
            "/to-metadata" => redirect_to("http://169.254.169.254/latest/meta-data/".to_owned()),
            "/to-private" => redirect_to("http://10.0.0.1/admin".to_owned()),
            "/to-loopback" => redirect_to("http://127.0.0.2/".to_owned()),
            "/to-file" => redirect_to("file:///etc/passwd".to_owned()),
            "/page" => (
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain".to_owned(),
                "arrived".to_owned(),
            ),
            hop => {
                // /hop/N redirects to /hop/N-1 and /hop/0 to the page.
                let remaining: usize = hop
                    .strip_prefix("/hop/")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                match remaining {
                    0 => redirect_to("/page".to_owned()),
                    n => redirect_to(format!("/hop/{}", n - 1)),
                }
            }
        })
        .await;
        let tool = WebFetchTool::with_address_check(public_or_the_test_server);
        let fetch =
            |path: &str| tool.call(json!({ "url": format!("http://{server}{path}") }), &context);

        for (path, named) in [
            (
                "/to-metadata",
                "169.254.169.254 is the cloud metadata address",
            ),
            ("/to-private", "10.0.0.1 is a private"),
            ("/to-loopback", "127.0.0.2 is a loopback"),
        ] {
            let err = fetch(path).await.expect_err(path);
            assert!(matches!(err, ToolError::Denied(_)), "{path}: {err}");
            assert!(err.to_string().contains(named), "{path}: {err}");
            assert!(
                err.to_string()
                    .contains(&format!("redirected from http://{server}{path}")),
                "{path}: {err}"
            );
        }
        let err = fetch("/to-file").await.expect_err("file");
        assert!(err.to_string().contains("not http or https"), "{err}");

        // Four redirects (five requests in all) are followed; six are too many.
        assert_eq!(
            fetch("/hop/3").await.expect("within the limit"),
            "arrived\n"
        );
        let before = requests.lock().expect("lock").len();
        let err = fetch(&format!("/hop/{MAX_REDIRECTS}"))
            .await
            .expect_err("too many");
        assert!(
            err.to_string().contains("redirects more than 5 times"),
            "{err}"
        );
        assert_eq!(
            requests.lock().expect("lock").len() - before,
            MAX_REDIRECTS + 1
        );

        // One approval per host and call; the refused hops were never asked about.
        let asked = approver.0.lock().expect("lock");
        assert!(
            asked
                .iter()
                .all(|request| request.kind == ChangeKind::Fetch && request.subject == "127.0.0.1")
        );
        assert_eq!(asked.len(), 6, "one per call: {asked:?}");
        assert!(
            asked[0].detail.starts_with("Loopr wants to fetch http://"),
            "{}",
            asked[0].detail
        );
    }

    /// Accepts after the user thought about it for `thinking` (on tokio's paused clock).
    struct SlowUser {
        thinking: Duration,
    }

    #[async_trait]
    impl Approver for SlowUser {
        async fn decide(
            &self,
            _request: ApprovalRequest,
            _cancel: &CancellationToken,
        ) -> Option<Decision> {
            tokio::time::advance(self.thinking).await;
            Some(Decision::Accept)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_time_limit_counts_the_network_not_the_users_approval() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut context = context(&dir, Arc::new(Recording::default()));
        context.approver = Arc::new(SlowUser {
            thinking: TIMEOUT * 3,
        });
        let (server, requests) = serve(|_| {
            (
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain".to_owned(),
                "worth the wait".to_owned(),
            )
        })
        .await;
        let tool = WebFetchTool::with_address_check(public_or_the_test_server);
        let page = tool
            .call(json!({ "url": format!("http://{server}/") }), &context)
            .await
            .expect("fetched after a slow approval");
        assert_eq!(page, "worth the wait\n");
        assert_eq!(*requests.lock().expect("lock"), ["/"]);
    }

    /// A page of 100,000 nested elements (1.1 MB, half the download cap) is made text in
    /// bounded time; the call runs in a task of its own, so a conversion that never ends fails
    /// the test instead of hanging it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_page_of_100000_nested_elements_is_made_text_in_bounded_time() {
        let depth = 100_000;
        let page = format!(
            "<html><body>{}deep inside{}</body></html>",
            "<div>".repeat(depth),
            "</div>".repeat(depth)
        );
        let (server, _) = serve(move |_| {
            (
                "HTTP/1.1 200 OK\r\nContent-Type: text/html".to_owned(),
                page.clone(),
            )
        })
        .await;
        let call = tokio::spawn(async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let context = context(&dir, Arc::new(Recording::default()));
            let tool = WebFetchTool::with_address_check(public_or_the_test_server);
            tool.call(json!({ "url": format!("http://{server}/") }), &context)
                .await
        });
        let text = tokio::time::timeout(Duration::from_secs(30), call)
            .await
            .expect("made text within 30 s")
            .expect("the call did not panic")
            .expect("fetched");
        assert_eq!(text, "deep inside\n");
    }

    #[tokio::test]
    async fn the_client_connects_only_through_the_check() {
        // Past the look-up before approval, the connection's own resolution refuses too, so a
        // name that changes its answer in between cannot reach inside.
        let (server, requests) =
            serve(|_| ("HTTP/1.1 200 OK".to_owned(), "inside".to_owned())).await;
        let tool = WebFetchTool::new();
        let url =
            reqwest::Url::parse(&format!("http://localhost:{}/", server.port())).expect("url");
        let err = tool
            .client
            .get(url.clone())
            .send()
            .await
            .expect_err("refused");
        let refused = request_error(&url, None, &err);
        assert!(matches!(refused, ToolError::Denied(_)), "{refused}");
        assert!(
            refused.to_string().contains("localhost resolves to"),
            "{refused}"
        );
        assert!(requests.lock().expect("lock").is_empty());
    }
}
