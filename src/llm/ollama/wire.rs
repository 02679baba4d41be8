//! The request body of `/api/chat`, translated from Loopr's conversation: the system prompt
//! as the first message, calls with their arguments as objects, and each tool result as a
//! `tool` message right after the assistant message that called it, in call order.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;

use crate::llm::wire_cache::{RequestBytes, WireCache, comma_separated};
use crate::llm::{ChatRequest, ContentBlock, Message, Role, ToolSpec};

#[derive(Debug, Serialize)]
pub struct RequestBody<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    stream: bool,
    options: Options,
}

/// `think` is left unset on purpose: models that think do so by default, and the thinking
/// stays out of the answer (see the stream); models that cannot think reject `think: true`.
#[derive(Debug, Serialize)]
struct Options {
    num_predict: u32,
    /// Ollama's default window is small (2048 to 8192 tokens depending on the version) and a
    /// longer prompt is cut silently, so the user's setting is sent when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    num_ctx: Option<u32>,
}

#[derive(Debug, PartialEq, Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Cow<'a, str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

impl<'a> WireMessage<'a> {
    fn text(role: &'static str, content: Cow<'a, str>) -> WireMessage<'a> {
        WireMessage {
            role,
            content,
            tool_calls: Vec::new(),
            tool_name: None,
            tool_call_id: None,
        }
    }
}

#[derive(Debug, PartialEq, Serialize)]
struct WireToolCall<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    id: &'a str,
    function: WireFunction<'a>,
}

#[derive(Debug, PartialEq, Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    arguments: &'a Value,
}

#[derive(Debug, Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireToolFunction<'a>,
}

#[derive(Debug, Serialize)]
struct WireToolFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

/// What a body says besides the conversation, from the provider's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyOptions {
    /// The context window to ask for; unset, the server's own.
    pub num_ctx: Option<u32>,
    /// Whether the answer streams as NDJSON lines, or comes whole as one JSON object.
    pub stream: bool,
}

/// The request's body, its messages made through `cache`.
pub fn encode(
    request: &ChatRequest,
    cache: &WireCache,
    options: BodyOptions,
) -> serde_json::Result<RequestBytes> {
    let head = RequestBody::new(request, options);
    let system: Vec<WireMessage<'_>> = (!request.system.is_empty())
        .then(|| WireMessage::text("system", Cow::Borrowed(request.system.as_str())))
        .into_iter()
        .collect();
    cache.body(&head, &system, &request.messages, |previous, message| {
        comma_separated(&wire_message_parts(previous, message))
    })
}

impl<'a> RequestBody<'a> {
    fn new(request: &'a ChatRequest, options: BodyOptions) -> RequestBody<'a> {
        RequestBody {
            model: &request.model,
            tools: request.tools.iter().map(wire_tool).collect(),
            stream: options.stream,
            options: Options {
                num_predict: request.max_tokens,
                num_ctx: options.num_ctx,
            },
        }
    }
}

fn wire_tool(tool: &ToolSpec) -> WireTool<'_> {
    WireTool {
        kind: "function",
        function: WireToolFunction {
            name: &tool.name,
            description: &tool.description,
            parameters: &tool.input_schema,
        },
    }
}

static EMPTY_ARGUMENTS: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| Value::Object(Default::default()));

/// The wire messages of one message of the conversation; `previous` is the one before it,
/// whose calls a user message's results answer.
fn wire_message_parts<'a>(
    previous: Option<&'a Message>,
    message: &'a Message,
) -> Vec<WireMessage<'a>> {
    let mut wire = Vec::new();
    // The calls of the assistant message before, in order: a `tool` message carries the name
    // of the tool it answers (older Ollama versions match results by name, not id), and the
    // results follow in the order of the calls.
    let mut calls: Vec<(&str, &str)> = previous
        .filter(|previous| previous.role == Role::Assistant)
        .map(|previous| {
            previous
                .content
                .iter()
                .filter_map(|block| match block {
                    ContentBlock::ToolCall { id, name, .. } => Some((id.as_str(), name.as_str())),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    match message.role {
        Role::Assistant => {
            calls.clear();
            let mut tool_calls = Vec::new();
            for block in &message.content {
                if let ContentBlock::ToolCall {
                    id, name, input, ..
                } = block
                {
                    calls.push((id, name));
                    tool_calls.push(WireToolCall {
                        id,
                        function: WireFunction {
                            name,
                            // Only objects are arguments; what else the model sent is
                            // answered with an error result, which pairs with this call.
                            arguments: if input.is_object() {
                                input
                            } else {
                                &EMPTY_ARGUMENTS
                            },
                        },
                    });
                }
            }
            wire.push(WireMessage {
                tool_calls,
                ..WireMessage::text("assistant", joined_text(&message.content))
            });
        }
        Role::User => {
            let mut results: Vec<(&str, &str, bool)> = message
                .content
                .iter()
                .filter_map(|block| match block {
                    ContentBlock::ToolResult {
                        id,
                        content,
                        is_error,
                    } => Some((id.as_str(), content.as_str(), *is_error)),
                    _ => None,
                })
                .collect();
            let call_position = |id: &str| {
                calls
                    .iter()
                    .position(|(call_id, _)| *call_id == id)
                    .unwrap_or(usize::MAX)
            };
            results.sort_by_key(|(id, _, _)| call_position(id));
            for (id, content, is_error) in results {
                let name = calls
                    .iter()
                    .find(|(call_id, _)| *call_id == id)
                    .map(|(_, name)| *name);
                // The wire has no error flag; the model learns it from the words.
                let content = if is_error {
                    Cow::Owned(format!("Error: {content}"))
                } else {
                    Cow::Borrowed(content)
                };
                wire.push(WireMessage {
                    tool_name: name,
                    tool_call_id: Some(id),
                    ..WireMessage::text("tool", content)
                });
            }
            let text = joined_text(&message.content);
            if !text.is_empty() {
                wire.push(WireMessage::text("user", text));
            }
        }
    }
    wire
}

/// The message's text blocks as one string (the wire has one text per message).
fn joined_text(blocks: &[ContentBlock]) -> Cow<'_, str> {
    let mut texts = blocks.iter().filter_map(|block| match block {
        ContentBlock::Text { text } if !text.is_empty() => Some(text.as_str()),
        _ => None,
    });
    let Some(first) = texts.next() else {
        return Cow::Borrowed("");
    };
    match texts.next() {
        None => Cow::Borrowed(first),
        Some(second) => {
            let mut joined = format!("{first}\n\n{second}");
            for text in texts {
                joined.push_str("\n\n");
                joined.push_str(text);
            }
            Cow::Owned(joined)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(messages: Vec<Message>, tools: Vec<ToolSpec>) -> ChatRequest {
        ChatRequest {
            model: "qwen3:8b".to_owned(),
            max_tokens: 4096,
            system: "You plan changes.".to_owned(),
            messages: crate::llm::shared(messages),
            tools: tools.into(),
        }
    }

    fn body(request: &ChatRequest, num_ctx: Option<u32>) -> Value {
        body_with(
            request,
            BodyOptions {
                num_ctx,
                stream: true,
            },
        )
    }

    fn body_with(request: &ChatRequest, options: BodyOptions) -> Value {
        serde_json::from_slice(
            &encode(request, &WireCache::default(), options)
                .expect("encode")
                .to_vec(),
        )
        .expect("json")
    }

    #[test]
    fn the_body_streams_with_the_system_prompt_first_tools_as_functions_and_options() {
        let request = request(
            vec![Message::user_text("Add a --version flag")],
            vec![ToolSpec {
                name: "read_file".to_owned(),
                description: "Read a file".to_owned(),
                input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
                example: None,
            }],
        );
        assert_eq!(
            body(&request, Some(16384)),
            json!({
                "model": "qwen3:8b",
                "messages": [
                    {"role": "system", "content": "You plan changes."},
                    {"role": "user", "content": "Add a --version flag"}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "read_file",
                    "description": "Read a file",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}
                }}],
                "stream": true,
                "options": {"num_predict": 4096, "num_ctx": 16384}
            })
        );
    }

    #[test]
    fn a_request_for_a_whole_answer_says_stream_false() {
        let request = request(vec![Message::user_text("hi")], Vec::new());
        let body = body_with(
            &request,
            BodyOptions {
                num_ctx: Some(8192),
                stream: false,
            },
        );
        assert_eq!(body["stream"], false, "{body}");
        assert_eq!(
            body["options"],
            json!({"num_predict": 4096, "num_ctx": 8192})
        );
    }

    #[test]
    fn without_tools_num_ctx_or_system_prompt_those_fields_are_left_out() {
        let mut request = request(vec![Message::user_text("hi")], Vec::new());
        request.system = String::new();
        let body = body(&request, None);
        assert_eq!(body["messages"], json!([{"role": "user", "content": "hi"}]));
        assert!(body.get("tools").is_none(), "{body}");
        assert_eq!(body["options"], json!({"num_predict": 4096}));
        assert!(body.get("think").is_none(), "{body}");
    }

    #[test]
    fn calls_carry_object_arguments_and_results_follow_as_tool_messages_in_call_order() {
        let request = request(
            vec![
                Message::user_text("go"),
                Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::text("Looking first."),
                        ContentBlock::tool_call("call_a", "list_files", json!({})),
                        ContentBlock::tool_call(
                            "call_b",
                            "read_file",
                            json!({"path": "src/main.rs"}),
                        ),
                        ContentBlock::ToolCall {
                            id: "call_c".to_owned(),
                            name: "grep".to_owned(),
                            input: Value::String("[1, 2]".to_owned()),
                            input_error: Some("the arguments are not a JSON object".to_owned()),
                        },
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![
                        ContentBlock::text("also keep it short"),
                        ContentBlock::ToolResult {
                            id: "call_c".to_owned(),
                            content: "the arguments are not a JSON object".to_owned(),
                            is_error: true,
                        },
                        ContentBlock::ToolResult {
                            id: "call_b".to_owned(),
                            content: "1\tfn main() {}".to_owned(),
                            is_error: false,
                        },
                        ContentBlock::ToolResult {
                            id: "call_a".to_owned(),
                            content: "src/main.rs".to_owned(),
                            is_error: false,
                        },
                    ],
                },
            ],
            Vec::new(),
        );
        assert_eq!(
            body(&request, None)["messages"],
            json!([
                {"role": "system", "content": "You plan changes."},
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": "Looking first.", "tool_calls": [
                    {"id": "call_a", "function": {"name": "list_files", "arguments": {}}},
                    {"id": "call_b", "function": {"name": "read_file", "arguments": {"path": "src/main.rs"}}},
                    {"id": "call_c", "function": {"name": "grep", "arguments": {}}}
                ]},
                {"role": "tool", "tool_name": "list_files", "tool_call_id": "call_a", "content": "src/main.rs"},
                {"role": "tool", "tool_name": "read_file", "tool_call_id": "call_b", "content": "1\tfn main() {}"},
                {"role": "tool", "tool_name": "grep", "tool_call_id": "call_c",
                 "content": "Error: the arguments are not a JSON object"},
                {"role": "user", "content": "also keep it short"}
            ])
        );
    }

    #[test]
    fn several_texts_join_into_one_and_an_empty_answer_stays_an_empty_message() {
        let request = request(
            vec![
                Message {
                    role: Role::User,
                    content: vec![
                        ContentBlock::text("first"),
                        ContentBlock::text(""),
                        ContentBlock::text("second"),
                    ],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![ContentBlock::text("")],
                },
                Message {
                    role: Role::User,
                    content: vec![ContentBlock::ToolResult {
                        id: "unknown".to_owned(),
                        content: "orphan".to_owned(),
                        is_error: false,
                    }],
                },
            ],
            Vec::new(),
        );
        assert_eq!(
            body(&request, None)["messages"],
            json!([
                {"role": "system", "content": "You plan changes."},
                {"role": "user", "content": "first\n\nsecond"},
                {"role": "assistant", "content": ""},
                {"role": "tool", "tool_call_id": "unknown", "content": "orphan"}
            ])
        );
    }
}
