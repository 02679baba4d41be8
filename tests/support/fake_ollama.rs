//! Rendering scripted turns as Ollama `/api/chat` NDJSON lines, shaped like a real server's:
//! text in pieces, each tool call whole in its own line and without an id (as versions before
//! 0.12 send them), a last line with `done: true`, the reason, the token counts and the
//! durations. Plus Ollama's error answers: a status with `{"error": "..."}`, and an error
//! line in a 200 stream.

use serde_json::{Value, json};

use super::{Reply, TurnPart, TurnParts};

pub const CONTENT_TYPE: &str = "application/x-ndjson";

/// The NDJSON bytes of `turn`. A call cut off by the token limit is sent as nothing (Ollama
/// sends calls whole or not at all) and makes the reason `length`.
pub fn render_turn(turn: &TurnParts<'_>) -> Vec<u8> {
    let mut lines = Vec::new();
    let mut truncated = false;
    let mut call_index = 0;
    for item in &turn.items {
        match item {
            TurnPart::Text(pieces) => {
                for piece in pieces.iter() {
                    lines.push(chunk(
                        turn.model,
                        lines.len(),
                        json!({"role": "assistant", "content": piece}),
                    ));
                }
            }
            TurnPart::ToolCall {
                name,
                fragments,
                finished: true,
                ..
            } => {
                let call = json!({"function": {
                    "index": call_index,
                    "name": name,
                    "arguments": arguments(&fragments.concat()),
                }});
                call_index += 1;
                lines.push(chunk(
                    turn.model,
                    lines.len(),
                    json!({"role": "assistant", "content": "", "tool_calls": [call]}),
                ));
            }
            TurnPart::ToolCall {
                finished: false, ..
            } => truncated = true,
        }
    }
    let done_reason = if truncated || turn.stop_reason == Some("max_tokens") {
        "length"
    } else {
        "stop"
    };
    let mut last = json!({
        "model": turn.model,
        "created_at": created_at(lines.len()),
        "message": {"role": "assistant", "content": ""},
        "done": true,
        "done_reason": done_reason,
        "total_duration": 2_417_884_125u64,
        "load_duration": 18_513_667u64,
    });
    if turn.usage_reported {
        last["prompt_eval_count"] = json!(turn.input_tokens);
        last["prompt_eval_duration"] = json!(301_000_000u64);
        last["eval_count"] = json!(turn.output_tokens);
        last["eval_duration"] = json!(2_093_000_000u64);
    }
    lines.push(last);
    ndjson(&lines)
}

/// The arguments as the server sends them: an object; JSON a test scripted broken is sent as
/// the string it is, as servers in front of Ollama do.
fn arguments(json_text: &str) -> Value {
    if json_text.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(json_text).unwrap_or_else(|_| Value::String(json_text.to_owned()))
}

fn chunk(model: &str, position: usize, message: Value) -> Value {
    json!({
        "model": model,
        "created_at": created_at(position),
        "message": message,
        "done": false,
    })
}

fn created_at(position: usize) -> String {
    format!("2025-06-01T10:15:03.{:06}Z", 512_873 + position * 41_207)
}

fn ndjson(lines: &[Value]) -> Vec<u8> {
    lines
        .iter()
        .flat_map(|line| format!("{line}\n").into_bytes())
        .collect()
}

/// An error answer as Ollama sends one: the status and `{"error": message}`.
pub fn error_reply(status: u16, message: &str) -> Reply {
    Reply::Status {
        status,
        headers: Vec::new(),
        body: json!({ "error": message }),
    }
}

/// 404 for a model that was never pulled.
pub fn model_not_found(model: &str) -> Reply {
    error_reply(
        404,
        &format!("model '{model}' not found, try pulling it first"),
    )
}

/// 503, as Ollama answers when its queue is full (`OLLAMA_MAX_QUEUE`).
pub fn server_busy() -> Reply {
    error_reply(
        503,
        "server busy, please try again.  maximum pending requests exceeded",
    )
}

/// 429 with `retry-after` (seconds), as a rate-limiting proxy in front of Ollama sends it.
pub fn rate_limited(retry_after_secs: u64) -> Reply {
    error_reply(429, "too many requests").with_header("retry-after", &retry_after_secs.to_string())
}

/// A 200 stream with `partial_text` in pieces, then an `{"error": message}` line, and no
/// `done` line: the model runner failed in the middle of the answer.
pub fn mid_stream_error(partial_text: &str, message: &str) -> Reply {
    let mut lines = text_lines("qwen-test", partial_text);
    lines.push(json!({ "error": message }));
    Reply::Raw {
        content_type: CONTENT_TYPE,
        bytes: ndjson(&lines),
    }
}

/// A 200 stream with `partial_text` in pieces that ends without a `done` line, as when the
/// server goes away mid-answer.
pub fn cut_off(partial_text: &str) -> Reply {
    Reply::Raw {
        content_type: CONTENT_TYPE,
        bytes: ndjson(&text_lines("qwen-test", partial_text)),
    }
}

fn text_lines(model: &str, text: &str) -> Vec<Value> {
    text.split_inclusive(' ')
        .enumerate()
        .map(|(position, piece)| {
            chunk(
                model,
                position,
                json!({"role": "assistant", "content": piece}),
            )
        })
        .collect()
}
