//! The MCP tools one loop is offered (`server__tool`, with the server's JSON Schema), and
//! what a call of one does: the input checked against the schema, approval (kind `mcp`) for
//! tools not marked read-only, the server's answer capped like every tool's output.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use serde_json::Value;

use super::config::TOOL_SEPARATOR;
use super::server::{McpError, McpServer};
use crate::llm::ToolSpec;
use crate::schema::schema_issues;
use crate::tools::{ApprovalRequest, ChangeKind, Decision, ToolContext, ToolError};

/// Bytes of a server's answer the model sees.
const MAX_OUTPUT_BYTES: usize = 100 * 1024;

struct McpTool {
    /// `server__tool`, the name the model calls.
    exposed: String,
    tool: String,
    description: String,
    schema: Value,
    server: Arc<McpServer>,
}

/// The MCP tools of one loop, in a stable order (server, then the server's order), and the
/// servers whose tools it could not be offered, with why.
#[derive(Clone, Default)]
pub struct McpTools {
    tools: Arc<[McpTool]>,
    unavailable: Arc<[(String, String)]>,
}

impl McpTools {
    pub(super) fn builder() -> McpToolsBuilder {
        McpToolsBuilder {
            tools: Vec::new(),
            unavailable: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|tool| ToolSpec::offered(&tool.exposed, &tool.description, &tool.schema, None))
            .collect()
    }

    pub fn names(&self) -> Vec<&str> {
        self.tools
            .iter()
            .map(|tool| tool.exposed.as_str())
            .collect()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tools.iter().any(|tool| tool.exposed == name)
    }

    /// Runs the call of `name` (one of `names`); a tool of a server this loop could not be
    /// offered fails with why (a resumed conversation may call one); `None` if it is no MCP
    /// tool of this loop.
    pub async fn call(
        &self,
        name: &str,
        input: Value,
        context: &ToolContext,
    ) -> Option<Result<String, ToolError>> {
        match self.tools.iter().find(|tool| tool.exposed == name) {
            Some(tool) => Some(call(tool, input, context).await),
            None => self
                .unavailable
                .iter()
                .find(|(server, _)| {
                    name.strip_prefix(server.as_str())
                        .is_some_and(|tool| tool.starts_with(TOOL_SEPARATOR))
                })
                .map(|(_, why)| Err(ToolError::External(why.clone()))),
        }
    }
}

pub(super) struct McpToolsBuilder {
    tools: Vec<McpTool>,
    unavailable: Vec<(String, String)>,
}

impl McpToolsBuilder {
    /// Adds `server`'s `tool`; a tool whose name the providers would refuse is left out
    /// (and said so in the log).
    pub(super) fn add(&mut self, server: &Arc<McpServer>, tool: &rmcp::model::Tool) {
        let exposed = format!("{}{TOOL_SEPARATOR}{}", server.name(), tool.name);
        let valid = exposed.len() <= 64
            && exposed
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            tracing::warn!(server = server.name(), tool = %tool.name, "MCP tool left out: its name does not fit the providers' rules for tool names");
            return;
        }
        let mut schema = Value::Object(tool.input_schema.as_ref().clone());
        if schema.get("type").is_none() {
            schema["type"] = Value::from("object");
        }
        let description = tool
            .description
            .as_deref()
            .or(tool.title.as_deref())
            .unwrap_or("(no description)");
        self.tools.push(McpTool {
            exposed,
            tool: tool.name.to_string(),
            description: format!("{description} (MCP server {})", server.name()),
            schema,
            server: server.clone(),
        });
    }

    /// `server` offers this loop nothing, for `why`.
    /// `why` is what the model is told when it calls one of `server`'s tools: worded for
    /// no shell, since the model runs none of their commands.
    pub(super) fn unavailable(&mut self, server: &str, why: &str) {
        self.unavailable
            .push((server.to_owned(), crate::next_step::neutral(why)));
    }

    pub(super) fn build(self) -> McpTools {
        McpTools {
            tools: self.tools.into(),
            unavailable: self.unavailable.into(),
        }
    }
}

async fn call(tool: &McpTool, input: Value, context: &ToolContext) -> Result<String, ToolError> {
    let issues = schema_issues(&tool.schema, &input);
    if !issues.is_empty() {
        let listed: Vec<String> = issues
            .iter()
            .map(|issue| format!("{}: {}", issue.location, issue.message))
            .collect();
        return Err(ToolError::InvalidInput(format!(
            "{}; call {} again with input that matches its schema",
            listed.join("; "),
            tool.exposed
        )));
    }
    let arguments: JsonObject = match input {
        Value::Object(object) => object,
        _ => JsonObject::new(),
    };
    if !tool.server.config().is_read_only(&tool.tool) {
        let request = ApprovalRequest {
            loop_id: context.loop_id.clone(),
            kind: ChangeKind::Mcp,
            tool: "mcp",
            subject: tool.exposed.clone(),
            detail: format!(
                "MCP server {} tool {} with\n{}",
                tool.server.name(),
                tool.tool,
                serde_json::to_string_pretty(&arguments).unwrap_or_default()
            ),
        };
        match context.approver.decide(request, &context.cancel).await {
            Some(Decision::Accept | Decision::AcceptAllOfKind) => {}
            Some(Decision::Reject(reason)) => return Err(ToolError::Rejected(reason)),
            None => return Err(ToolError::Cancelled),
        }
    }
    match tool
        .server
        .call(&tool.tool, arguments, &context.cancel)
        .await
    {
        Ok(result) if result.is_error == Some(true) => Err(ToolError::External(format!(
            "the server reported an error: {}",
            result_text(&result)
        ))),
        Ok(result) => Ok(result_text(&result)),
        Err(McpError::Cancelled) => Err(ToolError::Cancelled),
        Err(err) => Err(ToolError::External(err.to_string())),
    }
}

/// The result as text: its text blocks, other blocks named, the structured content when
/// there is no text; capped.
fn result_text(result: &CallToolResult) -> String {
    let mut output = crate::tools::CappedOutput::new(MAX_OUTPUT_BYTES);
    let mut any_text = false;
    for block in &result.content {
        let text = match block {
            ContentBlock::Text(text) => {
                any_text = true;
                text.text.clone()
            }
            ContentBlock::Image(image) => format!("[an image ({}) left out]", image.mime_type),
            ContentBlock::Audio(audio) => format!("[audio ({}) left out]", audio.mime_type),
            ContentBlock::Resource(_) => "[an embedded resource left out]".to_owned(),
            ContentBlock::ResourceLink(link) => format!("[resource {}]", link.uri),
            _ => "[content of an unknown kind left out]".to_owned(),
        };
        for line in text.lines() {
            output.push_line(line);
        }
    }
    if !any_text && let Some(structured) = &result.structured_content {
        for line in serde_json::to_string_pretty(structured)
            .unwrap_or_default()
            .lines()
        {
            output.push_line(line);
        }
    }
    output.finish("the server's answer is longer; ask it for less")
}
