//! The request body of chat completions, translated from Loopr's conversation: the system
//! prompt as the first message, each tool result its own `tool` message right after the
//! assistant message that made the call (in call order), a user's text after its results.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;

use crate::llm::wire_cache::{RequestBytes, WireCache, comma_separated};
use crate::llm::{ChatRequest, ContentBlock, Message, Role, ToolChoice, ToolSpec};

/// What an assistant message without text or calls says instead: some servers (Mistral's)
/// refuse an assistant message with neither.
const EMPTY_ANSWER: &str = "(no content)";

/// The field that bounds the answer's length. OpenAI deprecated `max_tokens` in favour of
/// `max_completion_tokens`, and its reasoning models (o-series, gpt-5) reject `max_tokens`
/// with a 400. Most other servers read only `max_tokens`: llama.cpp's server learned
/// `max_completion_tokens` only in 2026 (ggml-org/llama.cpp#19831), llamafile and
/// llama-cpp-python ignore it (mozilla-ai/llamafile#701, abetlen/llama-cpp-python#1907), and
/// a bound a server ignores means an answer without limit. So OpenAI's own hosts get the new
/// name and every other server the old one, which all of them read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenLimitField {
    MaxTokens,
    MaxCompletionTokens,
}

impl TokenLimitField {
    pub fn for_base_url(base_url: &str) -> TokenLimitField {
        let host = reqwest::Url::parse(base_url)
            .ok()
            .and_then(|url| url.host_str().map(str::to_ascii_lowercase));
        match host {
            Some(host) if host == "api.openai.com" || host.ends_with(".openai.azure.com") => {
                TokenLimitField::MaxCompletionTokens
            }
            _ => TokenLimitField::MaxTokens,
        }
    }
}

#[derive(Serialize)]
pub struct RequestBody<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ToolChoice>,
    stream: bool,
    /// Only with `stream: true`: OpenAI refuses it otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
}

#[derive(Serialize)]
struct StreamOptions {
    /// Asks for the last chunk with the token counts (`choices: []`).
    include_usage: bool,
}

#[derive(Debug, PartialEq, Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: Cow<'a, str>,
    },
    Assistant {
        /// `""` when the message only calls tools. The API itself writes `null` there, but
        /// llama-cpp-python answers HTTP 500 to `null` and to a missing key alike (LM Studio
        /// and older llama.cpp servers refuse them too), and every server takes a string.
        content: Cow<'a, str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: Cow<'a, str>,
    },
}

#[derive(Debug, PartialEq, Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Debug, PartialEq, Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    /// A JSON string, not an object: that is the wire's form.
    arguments: String,
}

#[derive(Debug, PartialEq, Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Debug, PartialEq, Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

/// What a body says besides the conversation, from the provider's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyOptions {
    pub token_limit: TokenLimitField,
    /// Sent only with tools: servers refuse a `tool_choice` without them.
    pub tool_choice: Option<ToolChoice>,
    /// Whether the answer streams as SSE, or comes whole as one JSON object.
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
        .then_some(WireMessage::System {
            content: &request.system,
        })
        .into_iter()
        .collect();
    cache.body(&head, &system, &request.messages, |previous, message| {
        comma_separated(&wire_message_parts(previous, message))
    })
}

impl<'a> RequestBody<'a> {
    fn new(request: &'a ChatRequest, options: BodyOptions) -> RequestBody<'a> {
        let bound = Some(request.max_tokens);
        let limit = options.token_limit;
        let tools: Vec<WireTool<'a>> = request.tools.iter().map(wire_tool).collect();
        RequestBody {
            model: &request.model,
            tool_choice: options.tool_choice.filter(|_| !tools.is_empty()),
            tools,
            stream: options.stream,
            stream_options: options.stream.then_some(StreamOptions {
                include_usage: true,
            }),
            max_tokens: bound.filter(|_| limit == TokenLimitField::MaxTokens),
            max_completion_tokens: bound.filter(|_| limit == TokenLimitField::MaxCompletionTokens),
        }
    }
}

fn wire_tool(tool: &ToolSpec) -> WireTool<'_> {
    WireTool {
        kind: "function",
        function: WireFunction {
            name: &tool.name,
            description: &tool.description,
            parameters: &tool.input_schema,
        },
    }
}

/// The wire messages of one message of the conversation; `previous` is the one before it,
/// whose calls a user message's results answer (they follow in the order of the calls).
fn wire_message_parts<'a>(
    previous: Option<&'a Message>,
    message: &'a Message,
) -> Vec<WireMessage<'a>> {
    let mut wire = Vec::new();
    match message.role {
        Role::Assistant => {
            let tool_calls: Vec<WireToolCall<'a>> =
                message.content.iter().filter_map(wire_tool_call).collect();
            let text = joined_text(&message.content);
            let content = if text.is_empty() && tool_calls.is_empty() {
                Cow::Borrowed(EMPTY_ANSWER)
            } else {
                text
            };
            wire.push(WireMessage::Assistant {
                content,
                tool_calls,
            });
        }
        Role::User => {
            let call_order: Vec<&str> = previous
                .filter(|previous| previous.role == Role::Assistant)
                .map(|previous| {
                    previous
                        .content
                        .iter()
                        .filter_map(|block| match block {
                            ContentBlock::ToolCall { id, .. } => Some(id.as_str()),
                            _ => None,
                        })
                        .collect()
                })
                .unwrap_or_default();
            let mut results: Vec<(usize, WireMessage<'a>)> = Vec::new();
            for block in &message.content {
                if let ContentBlock::ToolResult {
                    id,
                    content,
                    is_error,
                } = block
                {
                    let position = call_order
                        .iter()
                        .position(|call| call == id)
                        .unwrap_or(usize::MAX);
                    results.push((
                        position,
                        WireMessage::Tool {
                            tool_call_id: id,
                            content: result_text(content, *is_error),
                        },
                    ));
                }
            }
            // Stable: results of calls the assistant message did not make keep their order.
            results.sort_by_key(|(position, _)| *position);
            wire.extend(results.into_iter().map(|(_, result)| result));
            let text = joined_text(&message.content);
            if !text.is_empty() {
                wire.push(WireMessage::User { content: text });
            }
        }
    }
    wire
}

fn wire_tool_call(block: &ContentBlock) -> Option<WireToolCall<'_>> {
    let ContentBlock::ToolCall {
        id, name, input, ..
    } = block
    else {
        return None;
    };
    // Arguments that were not a JSON object go back as `{}`: servers that render the
    // conversation through a chat template parse them (llama.cpp answers 500 to invalid
    // JSON), and the error result paired with this call already tells the model what was
    // wrong.
    let arguments = if input.is_object() {
        input.to_string()
    } else {
        "{}".to_owned()
    };
    Some(WireToolCall {
        id,
        kind: "function",
        function: WireFunctionCall { name, arguments },
    })
}

/// The wire has no error flag on a tool result; the text says it instead.
fn result_text(content: &str, is_error: bool) -> Cow<'_, str> {
    if is_error
        && !content
            .trim_start()
            .to_ascii_lowercase()
            .starts_with("error")
    {
        Cow::Owned(format!("Error: {content}"))
    } else {
        Cow::Borrowed(content)
    }
}

fn joined_text(content: &[ContentBlock]) -> Cow<'_, str> {
    let mut texts = content.iter().filter_map(|block| match block {
        ContentBlock::Text { text } if !text.is_empty() => Some(text.as_str()),
        _ => None,
    });
    let Some(first) = texts.next() else {
        return Cow::Borrowed("");
    };
    let rest: Vec<&str> = texts.collect();
    if rest.is_empty() {
        return Cow::Borrowed(first);
    }
    let mut joined = first.to_owned();
    for text in rest {
        joined.push_str("\n\n");
        joined.push_str(text);
    }
    Cow::Owned(joined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(system: &str, messages: Vec<Message>, tools: Vec<ToolSpec>) -> ChatRequest {
        ChatRequest {
            model: "gpt-test".to_owned(),
            max_tokens: 100,
            system: system.to_owned(),
            messages: crate::llm::shared(messages),
            tools: tools.into(),
        }
    }

    fn body(request: &ChatRequest, token_limit: TokenLimitField) -> Value {
        body_with(
            request,
            BodyOptions {
                token_limit,
                tool_choice: None,
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

    fn result(id: &str, content: &str, is_error: bool) -> ContentBlock {
        ContentBlock::ToolResult {
            id: id.to_owned(),
            content: content.to_owned(),
            is_error,
        }
    }

    #[test]
    fn the_body_streams_with_usage_and_the_system_prompt_comes_first() {
        let request = request(
            "be brief",
            vec![Message::user_text("go")],
            vec![ToolSpec {
                name: "grep".to_owned(),
                description: "search".to_owned(),
                input_schema: json!({"type": "object"}),
                example: None,
            }],
        );
        assert_eq!(
            body(&request, TokenLimitField::MaxTokens),
            json!({
                "model": "gpt-test",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "go"}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "grep", "description": "search", "parameters": {"type": "object"}
                }}],
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_tokens": 100
            })
        );
    }

    fn grep_tool() -> ToolSpec {
        ToolSpec {
            name: "grep".to_owned(),
            description: "search".to_owned(),
            input_schema: json!({"type": "object"}),
            example: None,
        }
    }

    #[test]
    fn tool_choice_goes_with_the_tools_and_never_without_them() {
        for (choice, sent) in [
            (ToolChoice::Auto, json!("auto")),
            (ToolChoice::Required, json!("required")),
        ] {
            let options = BodyOptions {
                token_limit: TokenLimitField::MaxTokens,
                tool_choice: Some(choice),
                stream: true,
            };
            let with_tools = request("", vec![Message::user_text("go")], vec![grep_tool()]);
            assert_eq!(body_with(&with_tools, options)["tool_choice"], sent);
            // A text protocol sends no tools: `tool_choice` alone is refused by OpenAI.
            let without = request("", vec![Message::user_text("go")], Vec::new());
            let body = body_with(&without, options);
            assert!(body.get("tool_choice").is_none(), "{body}");
        }
        let unset = request("", vec![Message::user_text("go")], vec![grep_tool()]);
        let body = body(&unset, TokenLimitField::MaxTokens);
        assert!(body.get("tool_choice").is_none(), "{body}");
    }

    /// `stream_options` is refused by OpenAI when `stream` is false.
    #[test]
    fn a_request_for_a_whole_answer_says_stream_false_and_asks_no_stream_options() {
        let request = request("sys", vec![Message::user_text("go")], vec![grep_tool()]);
        let body = body_with(
            &request,
            BodyOptions {
                token_limit: TokenLimitField::MaxTokens,
                tool_choice: Some(ToolChoice::Auto),
                stream: false,
            },
        );
        assert_eq!(body["stream"], false, "{body}");
        assert!(body.get("stream_options").is_none(), "{body}");
        assert_eq!(body["max_tokens"], 100);
        assert_eq!(body["tool_choice"], "auto");
    }

    #[test]
    fn no_tools_key_when_there_are_no_tools_and_no_system_message_when_it_is_empty() {
        let request = request("", vec![Message::user_text("hi")], Vec::new());
        let body = body(&request, TokenLimitField::MaxCompletionTokens);
        assert!(body.get("tools").is_none(), "{body}");
        assert!(body.get("max_tokens").is_none(), "{body}");
        assert_eq!(body["max_completion_tokens"], 100);
        assert_eq!(body["messages"], json!([{"role": "user", "content": "hi"}]));
    }

    #[test]
    fn openai_hosts_get_max_completion_tokens_and_other_servers_max_tokens() {
        for (url, field) in [
            (
                "https://api.openai.com/v1",
                TokenLimitField::MaxCompletionTokens,
            ),
            (
                "https://my-team.openai.azure.com/openai/v1",
                TokenLimitField::MaxCompletionTokens,
            ),
            ("https://openrouter.ai/api/v1", TokenLimitField::MaxTokens),
            ("http://localhost:8000/v1", TokenLimitField::MaxTokens),
            ("http://127.0.0.1:1234/v1", TokenLimitField::MaxTokens),
            ("not a url", TokenLimitField::MaxTokens),
        ] {
            assert_eq!(TokenLimitField::for_base_url(url), field, "{url}");
        }
    }

    #[test]
    fn tool_results_become_tool_messages_in_call_order_after_the_assistant_message() {
        let request = request(
            "sys",
            vec![
                Message::user_text("plan it"),
                Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::text("Looking first."),
                        ContentBlock::tool_call("call_a", "list_files", json!({})),
                        ContentBlock::tool_call("call_b", "read_file", json!({"path": "x"})),
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![
                        ContentBlock::text("also note this"),
                        result("call_b", "contents", false),
                        result("call_a", "bad listing", true),
                    ],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![ContentBlock::tool_call(
                        "call_c",
                        "grep",
                        json!({"pattern": "fn"}),
                    )],
                },
                Message {
                    role: Role::User,
                    content: vec![result("call_c", "Error: already said", true)],
                },
            ],
            Vec::new(),
        );
        assert_eq!(
            body(&request, TokenLimitField::MaxTokens)["messages"],
            json!([
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "plan it"},
                {"role": "assistant", "content": "Looking first.", "tool_calls": [
                    {"id": "call_a", "type": "function", "function": {"name": "list_files", "arguments": "{}"}},
                    {"id": "call_b", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"x\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_a", "content": "Error: bad listing"},
                {"role": "tool", "tool_call_id": "call_b", "content": "contents"},
                {"role": "user", "content": "also note this"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_c", "type": "function", "function": {"name": "grep", "arguments": "{\"pattern\":\"fn\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_c", "content": "Error: already said"}
            ])
        );
    }

    /// llama-cpp-python (and LM Studio, and llama.cpp's server before it learned otherwise)
    /// refuses `"content": null` and a missing `content` alike; an empty string is what every
    /// server takes, OpenAI's own included (its content is an optional string).
    #[test]
    fn an_answer_that_only_calls_tools_has_empty_text_never_null() {
        let request = request(
            "",
            vec![
                Message::user_text("go"),
                Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::text(""),
                        ContentBlock::tool_call("call_a", "list_files", json!({})),
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![result("call_a", "src/main.rs", false)],
                },
            ],
            Vec::new(),
        );
        let messages = body(&request, TokenLimitField::MaxTokens)["messages"].clone();
        assert_eq!(
            messages[1],
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}
            ]})
        );
    }

    #[test]
    fn arguments_that_were_not_an_object_go_back_as_an_empty_object() {
        let request = request(
            "",
            vec![
                Message::user_text("go"),
                Message {
                    role: Role::Assistant,
                    content: vec![ContentBlock::ToolCall {
                        id: "call_x".to_owned(),
                        name: "grep".to_owned(),
                        input: Value::String("{\"pattern\": ".to_owned()),
                        input_error: Some("not JSON".to_owned()),
                    }],
                },
                Message {
                    role: Role::User,
                    content: vec![result("call_x", "the input is not valid JSON", true)],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![ContentBlock::text("")],
                },
            ],
            Vec::new(),
        );
        let messages = body(&request, TokenLimitField::MaxTokens)["messages"].clone();
        assert_eq!(messages[1]["tool_calls"][0]["function"]["arguments"], "{}");
        assert_eq!(messages[2]["content"], "Error: the input is not valid JSON");
        assert_eq!(
            messages[3],
            json!({"role": "assistant", "content": "(no content)"})
        );
    }
}
