use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::output::CappedOutput;
use super::{Tool, ToolContext, ToolError, parse_input};
use crate::schema::input_schema_for;

const TIMEOUT: Duration = Duration::from_secs(20);
/// Bytes read from the server at most; the rest is not downloaded.
const MAX_DOWNLOAD: usize = 2 * 1024 * 1024;
const MAX_OUTPUT_BYTES: usize = 100 * 1024;
const TEXT_WIDTH: usize = 100;

/// Fetch a web page as text.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebFetchInput {
    /// An http:// or https:// URL.
    pub url: String,
}

/// Off unless the user enables it (`web_fetch = true`): it reaches outside the project.
pub struct WebFetchTool {
    client: reqwest::Client,
}

impl WebFetchTool {
    pub fn new() -> WebFetchTool {
        let client = reqwest::Client::builder()
            .user_agent(concat!("loopr/", env!("CARGO_PKG_VERSION")))
            .timeout(TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        WebFetchTool { client }
    }
}

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

    async fn call(&self, input: Value, context: &ToolContext) -> Result<String, ToolError> {
        let input: WebFetchInput = parse_input(self.name(), input)?;
        let url = reqwest::Url::parse(input.url.trim())
            .map_err(|err| ToolError::InvalidInput(format!("url {:?}: {err}", input.url)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ToolError::InvalidInput(format!(
                "url {:?} is not http or https; only web pages can be fetched",
                input.url
            )));
        }
        let fetch = fetch(&self.client, url.clone());
        let (content_type, bytes, truncated) = tokio::select! {
            biased;
            _ = context.cancel.cancelled() => return Err(ToolError::Cancelled),
            result = tokio::time::timeout(TIMEOUT, fetch) => result.map_err(|_| web_error(&url, format!("no answer within {}s", TIMEOUT.as_secs())))??,
        };
        let text = if content_type.contains("html") {
            html2text::config::plain_no_decorate()
                .string_from_read(bytes.as_slice(), TEXT_WIDTH)
                .map_err(|err| web_error(&url, format!("unreadable HTML: {err}")))?
        } else if content_type.is_empty()
            || content_type.starts_with("text/")
            || content_type.contains("json")
            || content_type.contains("xml")
        {
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            return Err(web_error(&url, format!("is {content_type}, not text")));
        };
        let mut output = CappedOutput::new(MAX_OUTPUT_BYTES);
        for line in text.lines() {
            if !output.push_line(line) {
                break;
            }
        }
        let mut result = output.finish("fetch a more specific page");
        if truncated {
            result.push_str(&format!("[download stopped at {MAX_DOWNLOAD} bytes]\n"));
        }
        Ok(result)
    }
}

async fn fetch(
    client: &reqwest::Client,
    url: reqwest::Url,
) -> Result<(String, Vec<u8>, bool), ToolError> {
    let response = client
        .get(url.clone())
        .send()
        .await
        .map_err(|err| web_error(&url, err.to_string()))?;
    let status = response.status();
    if !status.is_success() {
        return Err(web_error(&url, format!("HTTP {status}")));
    }
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
        let chunk = chunk.map_err(|err| web_error(&url, err.to_string()))?;
        let room = MAX_DOWNLOAD.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if chunk.len() > room {
            truncated = true;
            break;
        }
    }
    Ok((content_type, body, truncated))
}

fn web_error(url: &reqwest::Url, message: String) -> ToolError {
    ToolError::File {
        path: url.to_string(),
        message,
    }
}
