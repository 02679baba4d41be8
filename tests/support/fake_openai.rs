//! Rendering scripted turns as OpenAI chat-completion chunks (unnamed SSE events ending with
//! `data: [DONE]`), shaped like the real API's: a first chunk with the role, text in pieces,
//! tool calls as fragments (the first with id, type and name, later ones only the index and a
//! piece of the arguments; parallel calls interleaved), a finish chunk, a usage-only chunk
//! with `choices: []` (unless the turn reports none), then `[DONE]`; or, asked with
//! `stream: false`, the whole completion as one JSON object. Also OpenAI-shaped error replies.

use serde_json::{Value, json};

use super::{Reply, TurnPart, TurnParts};

pub const CONTENT_TYPE: &str = "text/event-stream; charset=utf-8";
pub const COMPLETION_ID: &str = "chatcmpl-fake0123456789";
const CREATED: u64 = 1_745_000_000;

/// The SSE bytes of `turn`.
pub fn render_turn(turn: &TurnParts<'_>) -> Vec<u8> {
    let mut out = String::new();
    out.push_str(&delta_chunk(
        turn.model,
        json!({"role": "assistant", "content": ""}),
    ));
    let mut call_index = 0u64;
    let mut items = turn.items.iter().peekable();
    while let Some(item) = items.next() {
        match item {
            TurnPart::Text(pieces) => {
                for piece in pieces.iter() {
                    out.push_str(&delta_chunk(turn.model, json!({ "content": piece })));
                }
            }
            TurnPart::ToolCall { .. } => {
                // Calls that follow each other stream in parallel: their fragments interleave.
                let mut group = vec![(call_index, item)];
                call_index += 1;
                while let Some(next) =
                    items.next_if(|next| matches!(next, TurnPart::ToolCall { .. }))
                {
                    group.push((call_index, next));
                    call_index += 1;
                }
                out.push_str(&interleaved_calls(turn.model, &group));
            }
        }
    }
    out.push_str(&chunk(
        turn.model,
        json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": finish_reason(turn)}]),
    ));
    if turn.usage_reported {
        out.push_str(&sse(&json!({
            "id": COMPLETION_ID,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": turn.model,
            "choices": [],
            "usage": {
                "prompt_tokens": turn.input_tokens,
                "completion_tokens": turn.output_tokens,
                "total_tokens": turn.input_tokens + turn.output_tokens,
                "prompt_tokens_details": {"cached_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0}
            }
        })));
    }
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

/// `turn` as a server sends it to a request with `stream: false`: one `chat.completion`
/// object, its text whole, its calls whole (`content` null when there is no text, as
/// llama-cpp-python writes it), the finish reason and the usage.
pub fn render_whole(turn: &TurnParts<'_>) -> Value {
    let mut text = String::new();
    let mut calls = Vec::new();
    for item in &turn.items {
        match item {
            TurnPart::Text(pieces) => text.push_str(&pieces.concat()),
            TurnPart::ToolCall {
                id,
                name,
                fragments,
                ..
            } => calls.push(json!({"id": id, "type": "function",
                "function": {"name": name, "arguments": fragments.concat()}})),
        }
    }
    let mut message = json!({"role": "assistant", "content": (!text.is_empty()).then_some(text)});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    json!({
        "id": COMPLETION_ID,
        "object": "chat.completion",
        "created": CREATED,
        "model": turn.model,
        "choices": [{"index": 0, "message": message, "logprobs": null,
                     "finish_reason": finish_reason(turn)}],
        "usage": {
            "prompt_tokens": turn.input_tokens,
            "completion_tokens": turn.output_tokens,
            "total_tokens": turn.input_tokens + turn.output_tokens
        }
    })
}

/// The fragments of `calls`, round-robin: every call's first fragment, then every call's
/// first argument piece, and so on.
fn interleaved_calls(model: &str, calls: &[(u64, &TurnPart<'_>)]) -> String {
    let mut streams: Vec<Vec<Value>> = calls
        .iter()
        .filter_map(|(index, call)| match call {
            TurnPart::ToolCall {
                id,
                name,
                fragments,
                ..
            } => {
                let mut fragments_of_call = vec![json!({
                    "index": index, "id": id, "type": "function",
                    "function": {"name": name, "arguments": ""}
                })];
                fragments_of_call.extend(
                    fragments
                        .iter()
                        .filter(|piece| !piece.is_empty())
                        .map(|piece| json!({"index": index, "function": {"arguments": piece}})),
                );
                Some(fragments_of_call)
            }
            TurnPart::Text(_) => None,
        })
        .collect();
    let mut out = String::new();
    let longest = streams.iter().map(Vec::len).max().unwrap_or(0);
    for step in 0..longest {
        for stream in &mut streams {
            if let Some(fragment) = stream.get(step) {
                out.push_str(&delta_chunk(model, json!({ "tool_calls": [fragment] })));
            }
        }
    }
    out
}

/// `length` when a call was cut off (or the test asked for `max_tokens`), else `tool_calls`
/// when the turn calls tools, else `stop`.
fn finish_reason(turn: &TurnParts<'_>) -> String {
    let unfinished = turn.items.iter().any(|item| {
        matches!(
            item,
            TurnPart::ToolCall {
                finished: false,
                ..
            }
        )
    });
    let calls = turn
        .items
        .iter()
        .any(|item| matches!(item, TurnPart::ToolCall { .. }));
    match turn.stop_reason {
        _ if unfinished => "length".to_owned(),
        Some("max_tokens") => "length".to_owned(),
        Some("end_turn") => "stop".to_owned(),
        Some("tool_use") => "tool_calls".to_owned(),
        Some(other) => other.to_owned(),
        None if calls => "tool_calls".to_owned(),
        None => "stop".to_owned(),
    }
}

fn delta_chunk(model: &str, delta: Value) -> String {
    chunk(
        model,
        json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}]),
    )
}

fn chunk(model: &str, choices: Value) -> String {
    sse(&json!({
        "id": COMPLETION_ID,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "system_fingerprint": "fp_fake",
        "choices": choices,
    }))
}

fn sse(data: &Value) -> String {
    format!("data: {data}\n\n")
}

/// OpenAI's error body: `{"error":{"message","type","param","code"}}`.
pub fn error_body(error_type: &str, message: &str, code: &str) -> Value {
    json!({"error": {"message": message, "type": error_type, "param": null, "code": code}})
}

/// A non-streaming error answer with OpenAI's error body.
pub fn error_reply(status: u16, error_type: &str, message: &str, code: &str) -> Reply {
    Reply::Status {
        status,
        headers: Vec::new(),
        body: error_body(error_type, message, code),
    }
}

/// 429 with a `retry-after` header (seconds), as OpenAI sends on a rate limit.
pub fn rate_limited(retry_after_secs: u64) -> Reply {
    error_reply(
        429,
        "requests",
        "Rate limit reached for requests. Please try again in 1s.",
        "rate_limit_exceeded",
    )
    .with_header("retry-after", &retry_after_secs.to_string())
}

/// 503 as a server under load answers.
pub fn overloaded() -> Reply {
    error_reply(
        503,
        "server_error",
        "The server is overloaded or not ready yet.",
        "overloaded",
    )
}

/// A 200 stream that starts an answer with `partial_text`, then reports an error object
/// where the choices should be (as llama.cpp's server does) and ends.
pub fn mid_stream_error(partial_text: &str, error_type: &str, message: &str) -> Reply {
    let model = super::DEFAULT_MODEL;
    let mut bytes = delta_chunk(model, json!({"role": "assistant", "content": ""}));
    bytes.push_str(&delta_chunk(model, json!({ "content": partial_text })));
    bytes.push_str(&sse(
        &json!({"error": {"message": message, "type": error_type, "code": 500}}),
    ));
    Reply::Raw {
        content_type: CONTENT_TYPE,
        bytes: bytes.into_bytes(),
    }
}

/// A 200 stream that starts an answer with `partial_text` and ends with neither a finish
/// reason nor `[DONE]`, as when the connection drops.
pub fn dropped_stream(partial_text: &str) -> Reply {
    let model = super::DEFAULT_MODEL;
    let mut bytes = delta_chunk(model, json!({"role": "assistant", "content": ""}));
    bytes.push_str(&delta_chunk(model, json!({ "content": partial_text })));
    Reply::Raw {
        content_type: CONTENT_TYPE,
        bytes: bytes.into_bytes(),
    }
}
