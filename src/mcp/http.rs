//! Streamable HTTP servers: the SDK's client transport over reqwest.

use rmcp::ServiceExt;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;

pub(super) async fn connect(url: &str) -> Result<RunningService<RoleClient, ()>, String> {
    let transport = StreamableHttpClientTransport::from_uri(url.to_owned());
    ().serve(transport)
        .await
        .map_err(|err| format!("connecting to {url}: {err}"))
}
