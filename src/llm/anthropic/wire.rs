//! The JSON shapes of the Messages API that are not streamed: the request body and error bodies.

use serde::Serialize;
use serde_json::Value;

use crate::llm::{ChatRequest, Message, ToolSpec};

#[derive(Serialize)]
pub struct RequestBody<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "str::is_empty")]
    system: &'a str,
    messages: &'a [Message],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tools: &'a [ToolSpec],
    stream: bool,
}

impl<'a> RequestBody<'a> {
    pub fn streaming(request: &'a ChatRequest) -> RequestBody<'a> {
        RequestBody {
            model: &request.model,
            max_tokens: request.max_tokens,
            system: &request.system,
            messages: &request.messages,
            tools: &request.tools,
            stream: true,
        }
    }
}

/// `{"type":"error","error":{"type":..,"message":..,"details":{"error_code":..}}}`, read
/// leniently: proxies in front of the API may answer with anything.
#[derive(Debug, Default, PartialEq)]
pub struct ErrorBody {
    pub error_type: String,
    pub message: String,
    pub error_code: Option<String>,
}

impl ErrorBody {
    pub fn parse(body: &str) -> ErrorBody {
        let Ok(json) = serde_json::from_str::<Value>(body) else {
            return ErrorBody {
                error_type: "unknown_error".to_owned(),
                message: summarize(body),
                error_code: None,
            };
        };
        let error = json.get("error").unwrap_or(&Value::Null);
        let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
        ErrorBody {
            error_type: text(error.get("type")).unwrap_or_else(|| "unknown_error".to_owned()),
            message: text(error.get("message")).unwrap_or_else(|| summarize(body)),
            error_code: text(error.pointer("/details/error_code")),
        }
    }
}

fn summarize(body: &str) -> String {
    const LIMIT: usize = 300;
    let trimmed = body.trim();
    if trimmed.is_empty() {
        return "(empty response body)".to_owned();
    }
    match trimmed.char_indices().nth(LIMIT) {
        Some((cut, _)) => format!("{}…", &trimmed[..cut]),
        None => trimmed.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ContentBlock, Role};

    #[test]
    fn request_body_streams_and_carries_tools_and_system() {
        let request = ChatRequest {
            model: "claude-test".to_owned(),
            max_tokens: 100,
            system: "be brief".to_owned(),
            messages: vec![Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: "t1".to_owned(),
                    content: "nope".to_owned(),
                    is_error: true,
                }],
            }],
            tools: vec![ToolSpec {
                name: "grep".to_owned(),
                description: "search".to_owned(),
                input_schema: serde_json::json!({"type": "object"}),
            }],
        };
        let body = serde_json::to_value(RequestBody::streaming(&request)).expect("json");
        assert_eq!(
            body,
            serde_json::json!({
                "model": "claude-test",
                "max_tokens": 100,
                "system": "be brief",
                "messages": [{"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "nope", "is_error": true}
                ]}],
                "tools": [{"name": "grep", "description": "search", "input_schema": {"type": "object"}}],
                "stream": true
            })
        );
    }

    #[test]
    fn error_bodies_are_read_leniently() {
        let parsed = ErrorBody::parse(
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down","details":{"error_code":"enforced_spend_limit_reached"}}}"#,
        );
        assert_eq!(parsed.error_type, "rate_limit_error");
        assert_eq!(parsed.message, "slow down");
        assert_eq!(
            parsed.error_code.as_deref(),
            Some("enforced_spend_limit_reached")
        );
        let html = ErrorBody::parse("<html>bad gateway</html>");
        assert_eq!(html.error_type, "unknown_error");
        assert_eq!(html.message, "<html>bad gateway</html>");
    }
}
