//! The request body of the Messages API, translated from Loopr's conversation: tool results
//! first in a user message, no empty text, no empty message, one message per role in turn.

use serde::Serialize;
use serde_json::Value;

use std::sync::Arc;

use crate::llm::wire_cache::{RequestBytes, WireCache, comma_separated};
use crate::llm::{ChatRequest, ContentBlock, Message, Role, ToolSpec};

/// What the API gets instead of an empty assistant message, which it refuses.
const EMPTY_ANSWER: &str = "(no content)";

/// Conversations with at least this many messages (one whole exchange) mark their end as a
/// prompt-cache breakpoint: the next turn reads everything before it from the cache.
const CACHED_CONVERSATION_MESSAGES: usize = 3;

#[derive(Serialize)]
pub struct RequestBody<'a> {
    model: &'a str,
    max_tokens: u32,
    /// One text block marked as a cache breakpoint: the tools and the system prompt, which
    /// every turn of a loop repeats, are billed as cache reads after the first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<SystemBlock<'a>>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tools: &'a [ToolSpec],
    stream: bool,
}

#[derive(Serialize)]
struct SystemBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
    cache_control: CacheControl,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

/// The API's cache breakpoint with its default lifetime (five minutes, renewed by each hit).
const EPHEMERAL: CacheControl = CacheControl { kind: "ephemeral" };

#[derive(Debug, PartialEq, Serialize)]
struct WireMessage<'a> {
    role: Role,
    content: Vec<WireBlock<'a>>,
}

/// A block, and whether it ends the prefix the API should cache.
#[derive(Debug, PartialEq, Serialize)]
struct MarkedBlock<'a> {
    #[serde(flatten)]
    block: WireBlock<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock<'a> {
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

/// The streamed request's body, its messages made through `cache`.
pub fn encode(request: &ChatRequest, cache: &WireCache) -> serde_json::Result<RequestBytes> {
    let system = if request.system.is_empty() {
        Vec::new()
    } else {
        vec![SystemBlock {
            kind: "text",
            text: &request.system,
            cache_control: EPHEMERAL,
        }]
    };
    let head = RequestBody {
        model: &request.model,
        max_tokens: request.max_tokens,
        system,
        tools: &request.tools[..],
        stream: true,
    };
    let none: [WireMessage<'_>; 0] = [];
    if alternating(&request.messages) {
        let render = |_: Option<&Message>, message: &Message| {
            comma_separated(&[marked(wire_message(message), None)])
        };
        if request.messages.len() >= CACHED_CONVERSATION_MESSAGES {
            // The end of the conversation so far is a breakpoint; rendered apart, since the
            // same message is sent unmarked once the conversation goes on.
            cache.body_with_last(&head, &none, &request.messages, render, |_, message| {
                comma_separated(&[marked(wire_message(message), Some(EPHEMERAL))])
            })
        } else {
            cache.body(&head, &none, &request.messages, render)
        }
    } else {
        // Messages of one role in a row must join: no message stands alone to be kept.
        let joined: Vec<_> = joined_messages(&request.messages)
            .into_iter()
            .map(|message| marked(message, None))
            .collect();
        WireCache::default().body(&head, &joined, &[], |_, _| Ok(Vec::new()))
    }
}

#[derive(Debug, PartialEq, Serialize)]
struct MarkedMessage<'a> {
    role: Role,
    content: Vec<MarkedBlock<'a>>,
}

/// `message` with its last block marked by `cache_control`, if any.
fn marked(message: WireMessage<'_>, cache_control: Option<CacheControl>) -> MarkedMessage<'_> {
    let last = message.content.len().saturating_sub(1);
    MarkedMessage {
        role: message.role,
        content: message
            .content
            .into_iter()
            .enumerate()
            .map(|(index, block)| MarkedBlock {
                block,
                cache_control: cache_control.filter(|_| index == last),
            })
            .collect(),
    }
}

fn alternating(messages: &[Arc<Message>]) -> bool {
    messages.windows(2).all(|pair| pair[0].role != pair[1].role)
}

static EMPTY_INPUT: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| Value::Object(Default::default()));

/// One message in the API's form: tool results first, no empty text, never empty.
fn wire_message(message: &Message) -> WireMessage<'_> {
    let mut results = Vec::new();
    let mut others = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Text { text } if text.is_empty() => {}
            ContentBlock::Text { text } => others.push(WireBlock::Text { text }),
            ContentBlock::ToolCall {
                id, name, input, ..
            } => others.push(WireBlock::ToolUse {
                id,
                name,
                // The API takes only objects; what else the model sent is answered with an
                // error result, which pairs with this call by id.
                input: if input.is_object() {
                    input
                } else {
                    &EMPTY_INPUT
                },
            }),
            ContentBlock::ToolResult {
                id,
                content,
                is_error,
            } => results.push(WireBlock::ToolResult {
                tool_use_id: id,
                content,
                is_error: *is_error,
            }),
        }
    }
    results.extend(others);
    if results.is_empty() {
        results.push(WireBlock::Text { text: EMPTY_ANSWER });
    }
    WireMessage {
        role: message.role,
        content: results,
    }
}

/// Messages of one role in a row joined into one, results still first.
fn joined_messages(messages: &[Arc<Message>]) -> Vec<WireMessage<'_>> {
    let mut wire: Vec<WireMessage<'_>> = Vec::with_capacity(messages.len());
    for message in messages {
        let mut next = wire_message(message);
        next.content
            .retain(|block| !matches!(block, WireBlock::Text { text } if *text == EMPTY_ANSWER));
        match wire.last_mut() {
            Some(previous) if previous.role == message.role => {
                previous.content.extend(next.content);
                previous
                    .content
                    .sort_by_key(|block| !matches!(block, WireBlock::ToolResult { .. }));
            }
            _ => wire.push(next),
        }
    }
    for message in &mut wire {
        if message.content.is_empty() {
            message.content.push(WireBlock::Text { text: EMPTY_ANSWER });
        }
    }
    wire
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ContentBlock, Role};

    fn cache_marks(body: &Value) -> Vec<(usize, usize)> {
        let mut marks = Vec::new();
        for (m, message) in body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .enumerate()
        {
            for (b, block) in message["content"]
                .as_array()
                .expect("content")
                .iter()
                .enumerate()
            {
                if block.get("cache_control").is_some() {
                    marks.push((m, b));
                }
            }
        }
        marks
    }

    #[test]
    fn the_end_of_a_conversation_past_its_first_exchange_is_a_cache_breakpoint() {
        let cache = WireCache::default();
        let mut request = ChatRequest {
            model: "claude-test".to_owned(),
            max_tokens: 100,
            system: String::new(),
            messages: crate::llm::shared(vec![Message::user_text("task")]),
            tools: Vec::new().into(),
        };
        let body = |request: &ChatRequest, cache: &WireCache| {
            serde_json::from_slice::<Value>(&encode(request, cache).expect("encode").to_vec())
                .expect("json")
        };
        let first = body(&request, &cache);
        assert_eq!(cache_marks(&first), vec![], "nothing to reuse yet");
        assert!(first.get("system").is_none(), "no empty system block");
        request.messages.push(Arc::new(Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::text("reading"),
                ContentBlock::tool_call("t1", "read_file", serde_json::json!({"path": "a"})),
            ],
        }));
        request.messages.push(Arc::new(Message {
            role: Role::User,
            content: vec![
                ContentBlock::ToolResult {
                    id: "t1".to_owned(),
                    content: "text".to_owned(),
                    is_error: false,
                },
                ContentBlock::text("go on"),
            ],
        }));
        let second = body(&request, &cache);
        assert_eq!(
            cache_marks(&second),
            vec![(2, 1)],
            "the last block of the last message"
        );
        request.messages.push(Arc::new(Message {
            role: Role::Assistant,
            content: vec![ContentBlock::text("done")],
        }));
        request
            .messages
            .push(Arc::new(Message::user_text("thanks")));
        let third = body(&request, &cache);
        assert_eq!(
            cache_marks(&third),
            vec![(4, 0)],
            "only the newest end is marked"
        );
        assert_eq!(
            third,
            body(&request, &WireCache::default()),
            "as a fresh client sends it"
        );
    }

    #[test]
    fn request_body_streams_and_carries_tools_and_system() {
        let request = ChatRequest {
            model: "claude-test".to_owned(),
            max_tokens: 100,
            system: "be brief".to_owned(),
            messages: crate::llm::shared(vec![Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    id: "t1".to_owned(),
                    content: "nope".to_owned(),
                    is_error: true,
                }],
            }]),
            tools: vec![ToolSpec {
                name: "grep".to_owned(),
                description: "search".to_owned(),
                input_schema: serde_json::json!({"type": "object"}),
                example: None,
            }]
            .into(),
        };
        let body = serde_json::from_slice::<Value>(
            &encode(&request, &WireCache::default())
                .expect("encode")
                .to_vec(),
        )
        .expect("json");
        assert_eq!(
            body,
            serde_json::json!({
                "model": "claude-test",
                "max_tokens": 100,
                "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
                "messages": [{"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "nope", "is_error": true}
                ]}],
                "tools": [{"name": "grep", "description": "search", "input_schema": {"type": "object"}}],
                "stream": true
            })
        );
    }

    #[test]
    fn conversation_translates_to_the_rules_of_the_api() {
        let request = ChatRequest {
            model: "m".to_owned(),
            max_tokens: 1,
            system: String::new(),
            messages: crate::llm::shared(vec![
                Message::user_text("go"),
                Message {
                    role: Role::Assistant,
                    content: vec![ContentBlock::ToolCall {
                        id: "c1".to_owned(),
                        name: "grep".to_owned(),
                        input: Value::String("{bad".to_owned()),
                        input_error: Some("not JSON".to_owned()),
                    }],
                },
                Message {
                    role: Role::User,
                    content: vec![
                        ContentBlock::text("note"),
                        ContentBlock::ToolResult {
                            id: "c1".to_owned(),
                            content: "bad input".to_owned(),
                            is_error: true,
                        },
                    ],
                },
                Message::user_text("and more"),
                Message {
                    role: Role::Assistant,
                    content: vec![ContentBlock::text("")],
                },
            ]),
            tools: Vec::new().into(),
        };
        let body = serde_json::from_slice::<Value>(
            &encode(&request, &WireCache::default())
                .expect("encode")
                .to_vec(),
        )
        .expect("json");
        assert_eq!(
            body["messages"],
            serde_json::json!([
                {"role": "user", "content": [{"type": "text", "text": "go"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "c1", "name": "grep", "input": {}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": "bad input", "is_error": true},
                    {"type": "text", "text": "note"},
                    {"type": "text", "text": "and more"}
                ]},
                {"role": "assistant", "content": [{"type": "text", "text": "(no content)"}]}
            ])
        );
    }
}
