//! The MCP server the tests run, written with the same SDK as the host's client (`rmcp`).
//!
//! `loopr-test-mcp-server [--log FILE] [--log-env NAME] [--http]` serves over stdio, or with
//! `--http` over streamable HTTP on a loopback port, whose URL it prints as its first line.
//! Tools:
//! - `lookup` (read-only): answers `value of <key>`;
//! - `record` (changing): appends its `note` to the log, so a test sees what reached it;
//! - `environment`: the names of the variables the server was started with;
//! - `crash`: the process exits while the call is under way;
//! - `hang`: never answers.
//!
//! Every start appends `start <pid>` to the log, so a test can count restarts, and with
//! `--log-env` then `env NAME=<value>` (or `env NAME unset`), so a test sees what the server
//! was given.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use rmcp::ServerHandler;
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::json;

#[derive(Clone)]
struct TestServer {
    log: Option<Arc<PathBuf>>,
}

impl TestServer {
    fn append(&self, line: &str) {
        let Some(path) = &self.log else { return };
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path.as_path())
            .and_then(|mut file| writeln!(file, "{line}"));
        if let Err(err) = appended {
            eprintln!("loopr-test-mcp-server: writing {}: {err}", path.display());
        }
    }
}

fn schema(value: serde_json::Value) -> Arc<JsonObject> {
    match value {
        serde_json::Value::Object(object) => Arc::new(object),
        _ => Arc::new(JsonObject::new()),
    }
}

fn tools() -> Vec<Tool> {
    let no_input = || schema(json!({"type": "object", "properties": {}}));
    vec![
        Tool::new(
            "lookup",
            "Looks a key up (reads only).",
            schema(json!({
                "type": "object",
                "properties": {"key": {"type": "string", "minLength": 1}},
                "required": ["key"],
                "additionalProperties": false
            })),
        ),
        // Written the way Python servers (pydantic) write a schema: a dialect, and titles
        // that repeat the names.
        Tool::new(
            "record",
            "Records a note (changes the server's state).",
            schema(json!({
                "$schema": "http://json-schema.org/draft-07/schema#",
                "title": "recordArguments",
                "type": "object",
                "properties": {"note": {"title": "Note", "type": "string"}},
                "required": ["note"],
                "additionalProperties": false
            })),
        ),
        Tool::new(
            "environment",
            "Names the server's environment variables.",
            no_input(),
        ),
        Tool::new("crash", "Exits in the middle of the call.", no_input()),
        Tool::new("hang", "Never answers.", no_input()),
    ]
}

fn text(argument: Option<&JsonObject>, name: &str) -> String {
    argument
        .and_then(|arguments| arguments.get(name))
        .and_then(|value| value.as_str())
        .unwrap_or_default()
        .to_owned()
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.as_ref();
        let answer = match request.name.as_ref() {
            "lookup" => format!("value of {}", text(arguments, "key")),
            "record" => {
                let note = text(arguments, "note");
                self.append(&format!("record {note}"));
                format!("recorded {note}")
            }
            "environment" => {
                let mut names: Vec<String> = std::env::vars_os()
                    .map(|(name, _)| name.to_string_lossy().into_owned())
                    .collect();
                names.sort();
                names.join("\n")
            }
            "crash" => {
                self.append("crash");
                std::process::exit(3);
            }
            "hang" => {
                self.append("hang");
                std::future::pending::<()>().await;
                String::new()
            }
            other => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "no tool {other}"
                ))])
                .into());
            }
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(answer)]).into())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut arguments = std::env::args().skip(1);
    let mut log = None;
    let mut logged_variable = None;
    let mut http = false;
    while let Some(argument) = arguments.next() {
        match argument.as_str() {
            "--log" => log = arguments.next().map(PathBuf::from).map(Arc::new),
            "--log-env" => logged_variable = arguments.next(),
            "--http" => http = true,
            other => {
                eprintln!("loopr-test-mcp-server: unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    let server = TestServer { log };
    server.append(&format!("start {}", std::process::id()));
    if let Some(name) = logged_variable {
        match std::env::var(&name) {
            Ok(value) => server.append(&format!("env {name}={value}")),
            Err(_) => server.append(&format!("env {name} unset")),
        }
    }
    if http {
        serve_http(server).await;
        return;
    }
    let running = match server.serve(rmcp::transport::io::stdio()).await {
        Ok(running) => running,
        Err(err) => {
            eprintln!("loopr-test-mcp-server: {err}");
            std::process::exit(1);
        }
    };
    if let Err(err) = running.waiting().await {
        eprintln!("loopr-test-mcp-server: {err}");
    }
}

/// Serves streamable HTTP at `http://127.0.0.1:<port>/mcp` until killed.
async fn serve_http(server: TestServer) {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("loopr-test-mcp-server: binding: {err}");
            std::process::exit(1);
        }
    };
    let address = match listener.local_addr() {
        Ok(address) => address,
        Err(err) => {
            eprintln!("loopr-test-mcp-server: {err}");
            std::process::exit(1);
        }
    };
    println!("http://{address}/mcp");
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            if let Err(err) = connection.await {
                eprintln!("loopr-test-mcp-server: connection: {err}");
            }
        });
    }
}
