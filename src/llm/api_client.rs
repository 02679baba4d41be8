//! The client every provider's HTTP API is reached through: the request URL and headers made
//! once, each request's body encoded once and posted per attempt within the attempt's bounds,
//! retried by `with_retries`, and the server asked about its window. A provider adds only its
//! wire (`WireFormat`): the headers it sends, the body it encodes and how it reads an answer.

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderValue};
use tokio_util::sync::CancellationToken;

use super::http::{post, shared_client};
use super::server_window;
use super::wire_cache::{RequestBytes, WireCache};
use super::{
    AnswerLimits, ApiKey, AttemptFailure, ChatRequest, Endpoint, LlmError, LlmProvider,
    ProviderEvent, RetryPolicy, ServerKind, ServerWindow, Turn, with_retries,
};

/// What a provider's API speaks: the one part of its client that is its own.
#[async_trait]
pub trait WireFormat: Send + Sync + 'static {
    /// The headers every request carries (the key among them, marked sensitive).
    fn headers(&self, api_key: Option<&ApiKey>) -> Result<HeaderMap, LlmError>;

    /// The request's body, reusing what `cache` kept of earlier requests of the loop.
    fn encode(&self, request: &ChatRequest, cache: &WireCache) -> serde_json::Result<RequestBytes>;

    /// The turn an answer that said success carries.
    async fn read_answer(
        &self,
        response: reqwest::Response,
        limits: AnswerLimits,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
    ) -> Result<Turn, AttemptFailure>;

    /// A request that could not be sent, with the provider's advice added where it has one.
    fn explain_send_failure(&self, failure: AttemptFailure) -> AttemptFailure {
        failure
    }
}

/// Where a client's requests go.
pub struct ApiTarget<'a> {
    /// As the settings or variable gave it; a trailing `/` is dropped.
    pub base_url: &'a str,
    /// Appended to the base URL: the endpoint of the chat API.
    pub path: &'static str,
    /// The variable that sets the base URL, named in errors.
    pub base_url_variable: &'static str,
    pub server: ServerKind,
}

/// A provider's client: `W` is its wire, the rest is the same for every provider.
pub struct ApiClient<W> {
    http: reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    endpoint: Endpoint,
    retry: RetryPolicy,
    /// Redacted from every error text.
    api_key: Option<ApiKey>,
    /// What earlier requests of this loop made of its messages.
    cache: WireCache,
    wire: W,
}

impl<W: WireFormat> ApiClient<W> {
    /// A client of the API at `target`, its headers made once.
    pub fn connect(
        target: ApiTarget<'_>,
        api_key: Option<ApiKey>,
        retry: RetryPolicy,
        wire: W,
    ) -> Result<ApiClient<W>, LlmError> {
        let base = target.base_url.trim_end_matches('/');
        let url = reqwest::Url::parse(&format!("{base}{}", target.path)).map_err(|err| {
            invalid_config(
                target.base_url_variable,
                format!("{base:?} is not a URL: {err}"),
            )
        })?;
        let headers = wire.headers(api_key.as_ref())?;
        let http = shared_client().map_err(|message| invalid_config("HTTP client", message))?;
        Ok(ApiClient {
            http,
            url,
            headers,
            endpoint: Endpoint::new(base, target.base_url_variable, target.server),
            retry,
            api_key,
            cache: WireCache::default(),
            wire,
        })
    }

    /// At most `limit` of the host's requests to this server at once; `None` keeps the
    /// server's default (one for a local server).
    pub fn with_max_parallel_requests(mut self, limit: Option<u32>) -> ApiClient<W> {
        self.endpoint = self.endpoint.with_max_parallel_requests(limit);
        self
    }

    async fn attempt(
        &self,
        body: &RequestBytes,
        limits: AnswerLimits,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
    ) -> Result<Turn, AttemptFailure> {
        let response = post(&self.http, &self.url, &self.headers, body, &limits)
            .await
            .map_err(|failure| self.wire.explain_send_failure(failure))?;
        self.wire.read_answer(response, limits, on_event).await
    }
}

#[async_trait]
impl<W: WireFormat> LlmProvider for ApiClient<W> {
    async fn complete(
        &self,
        request: &ChatRequest,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<Turn, LlmError> {
        let body = self
            .wire
            .encode(request, &self.cache)
            .map_err(|err| LlmError::Protocol(format!("encoding the request: {err}")))?;
        with_retries(
            self.retry,
            &self.endpoint,
            self.api_key.as_ref(),
            request.max_tokens,
            on_event,
            cancel,
            |limits| self.attempt(&body, limits, on_event),
        )
        .await
    }

    /// Only a local server is asked (`Endpoint::server`), with the `authorization` the
    /// provider sends, for a proxy in front.
    async fn server_window(&self, model: &str) -> ServerWindow {
        server_window::ask(
            &self.http,
            self.headers.get(reqwest::header::AUTHORIZATION),
            &self.endpoint,
            model,
        )
        .await
    }
}

/// A setting or variable that no client can be made with.
pub fn invalid_config(name: &str, message: String) -> LlmError {
    LlmError::InvalidConfig {
        name: name.to_owned(),
        message,
    }
}

/// `value` as a header value marked sensitive (never logged), or what names `setting` at fault.
/// `value_words` is how the error speaks of the value ("it", "the key").
pub fn secret_header(
    value: &str,
    setting: &str,
    value_words: &str,
) -> Result<HeaderValue, LlmError> {
    let mut header = HeaderValue::from_str(value).map_err(|_| {
        invalid_config(
            setting,
            format!("{value_words} contains characters not allowed in an HTTP header"),
        )
    })?;
    header.set_sensitive(true);
    Ok(header)
}
