//! Assembling one assistant turn from the Messages API's named SSE events.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures::Stream;
use serde_json::Value;

use crate::llm::answer_body::{AnswerBody, AnswerLimits};
use crate::llm::server_text::{server_message, server_word};
use crate::llm::sse::{SseItem, SseReader};
use crate::llm::types::token_count;
use crate::llm::{ContentBlock, ProviderEvent, StopReason, StreamFailure, Turn, Usage};

/// Reads SSE events from `bytes`, within `limits`, until `message_stop` and returns the turn.
/// A message that never got its stop reason is incomplete, never a turn.
pub async fn read_turn<S, E>(
    bytes: S,
    limits: AnswerLimits,
    on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
) -> Result<Turn, StreamFailure>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::error::Error + 'static,
{
    let mut events = SseReader::new(AnswerBody::new(bytes, limits));
    let mut assembler = TurnAssembler::default();
    loop {
        match events.next().await? {
            // The final `message_stop` may be lost when the body ends without the blank line
            // that terminates an SSE event (the recorded fixtures end that way). Once
            // `message_delta` has delivered the stop reason the answer is complete.
            None if assembler.stop_reason.is_some() => return Ok(assembler.finish()),
            None => {
                return Err(StreamFailure::EndedEarly(
                    "the stream ended before the message's stop reason".to_owned(),
                ));
            }
            // Not a field of this API's streams.
            Some(SseItem::Error(_)) => {}
            Some(SseItem::Event { name, data }) => {
                // A ping proves the server alive, not that the answer goes on.
                if name != "ping" {
                    events.body().progressed();
                }
                if assembler.push(&name, &data, on_event)? {
                    return Ok(assembler.finish());
                }
            }
        }
    }
}

#[derive(Debug)]
enum PartialBlock {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
    /// Block types this client does not use (thinking, server tools): skipped.
    Ignored,
}

#[derive(Debug, Default)]
struct TurnAssembler {
    open: BTreeMap<u64, PartialBlock>,
    finished: BTreeMap<u64, ContentBlock>,
    stop_reason: Option<StopReason>,
    /// Set once an event carried usage.
    usage: Option<Usage>,
}

impl TurnAssembler {
    /// Feeds one event; returns true once the message is complete.
    fn push(
        &mut self,
        event_name: &str,
        data: &str,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
    ) -> Result<bool, StreamFailure> {
        if event_name == "ping" {
            return Ok(false);
        }
        let payload: Value = serde_json::from_str(data).map_err(|err| {
            StreamFailure::Protocol(format!("event {event_name:?} carries invalid JSON: {err}"))
        })?;
        let kind = payload
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event_name);
        match kind {
            "message_start" => {
                if let Some(wire) = payload.pointer("/message/usage") {
                    let usage = self.usage.get_or_insert_default();
                    read_input_usage(usage, wire);
                    usage.output_tokens = u64_at(wire, "output_tokens");
                }
            }
            "content_block_start" => {
                let index = block_index(&payload)?;
                let block = payload.get("content_block").unwrap_or(&Value::Null);
                let partial = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let text = str_at(block, "text");
                        if !text.is_empty() {
                            on_event(ProviderEvent::TextDelta {
                                text: text.to_owned(),
                            });
                        }
                        PartialBlock::Text(text.to_owned())
                    }
                    Some("tool_use") => {
                        let name = str_at(block, "name").to_owned();
                        on_event(ProviderEvent::ToolCallStarted { name: name.clone() });
                        PartialBlock::ToolUse {
                            id: str_at(block, "id").to_owned(),
                            name,
                            json: String::new(),
                        }
                    }
                    _ => PartialBlock::Ignored,
                };
                self.open.insert(index, partial);
            }
            "content_block_delta" => {
                let index = block_index(&payload)?;
                let delta = payload.get("delta").unwrap_or(&Value::Null);
                match (
                    self.open.get_mut(&index),
                    delta.get("type").and_then(Value::as_str),
                ) {
                    (Some(PartialBlock::Text(text)), Some("text_delta")) => {
                        let delta = str_at(delta, "text");
                        text.push_str(delta);
                        if !delta.is_empty() {
                            on_event(ProviderEvent::TextDelta {
                                text: delta.to_owned(),
                            });
                        }
                    }
                    (Some(PartialBlock::ToolUse { json, .. }), Some("input_json_delta")) => {
                        let piece = str_at(delta, "partial_json");
                        json.push_str(piece);
                        if !piece.is_empty() {
                            on_event(ProviderEvent::ToolInputDelta { bytes: piece.len() });
                        }
                    }
                    (None, _) => {
                        return Err(StreamFailure::Protocol(format!(
                            "content_block_delta for block {index}, which was never started"
                        )));
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = block_index(&payload)?;
                if let Some(block) = self.open.remove(&index)
                    && let Some(finished) = finish_block(block)?
                {
                    self.finished.insert(index, finished);
                }
            }
            "message_delta" => {
                if let Some(reason) = payload
                    .pointer("/delta/stop_reason")
                    .and_then(Value::as_str)
                {
                    self.stop_reason = Some(stop_reason(reason));
                }
                if let Some(wire) = payload.get("usage") {
                    let usage = self.usage.get_or_insert_default();
                    if wire.get("output_tokens").is_some() {
                        usage.output_tokens = u64_at(wire, "output_tokens");
                    }
                    if wire.get("input_tokens").is_some_and(|v| !v.is_null()) {
                        read_input_usage(usage, wire);
                    }
                }
            }
            "message_stop" if self.stop_reason.is_none() => {
                return Err(StreamFailure::EndedEarly(
                    "message_stop came before any stop reason".to_owned(),
                ));
            }
            "message_stop" => return Ok(true),
            "error" => {
                let error = payload.get("error").unwrap_or(&Value::Null);
                return Err(StreamFailure::ApiError {
                    error_type: server_word(str_at(error, "type")),
                    message: server_message(str_at(error, "message")),
                    code: None,
                });
            }
            _ => {}
        }
        Ok(false)
    }

    fn finish(mut self) -> Turn {
        let mut truncated_tool_calls = Vec::new();
        for (index, block) in std::mem::take(&mut self.open) {
            match block {
                // A block still open at message_stop was cut off; its input is incomplete and
                // must never run.
                PartialBlock::ToolUse { name, .. } => truncated_tool_calls.push(name),
                PartialBlock::Text(text) => {
                    self.finished.insert(index, ContentBlock::Text { text });
                }
                PartialBlock::Ignored => {}
            }
        }
        Turn {
            content: self.finished.into_values().collect(),
            truncated_tool_calls,
            stop_reason: self.stop_reason,
            usage: self.usage,
            unreadable: None,
        }
    }
}

fn finish_block(block: PartialBlock) -> Result<Option<ContentBlock>, StreamFailure> {
    Ok(match block {
        PartialBlock::Text(text) => Some(ContentBlock::Text { text }),
        PartialBlock::ToolUse { id, name, json } => {
            if json.trim().is_empty() {
                return Ok(Some(ContentBlock::tool_call(
                    id,
                    name,
                    Value::Object(Default::default()),
                )));
            }
            // Input that is not a JSON object goes back to the model as an error result.
            let (input, input_error) = match serde_json::from_str::<Value>(&json) {
                Ok(input) if input.is_object() => (input, None),
                Ok(_) => (
                    Value::String(json),
                    Some("the input is not a JSON object".to_owned()),
                ),
                Err(err) => (
                    Value::String(json),
                    Some(format!("the input is not valid JSON: {err}")),
                ),
            };
            Some(ContentBlock::ToolCall {
                id,
                name,
                input,
                input_error,
            })
        }
        PartialBlock::Ignored => None,
    })
}

fn block_index(payload: &Value) -> Result<u64, StreamFailure> {
    payload.get("index").and_then(Value::as_u64).ok_or_else(|| {
        StreamFailure::Protocol(format!("content block event without index: {payload}"))
    })
}

fn str_at<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn u64_at(value: &Value, key: &str) -> u64 {
    value.get(key).and_then(token_count).unwrap_or_default()
}

fn read_input_usage(usage: &mut Usage, wire: &Value) {
    usage.input_tokens = u64_at(wire, "input_tokens");
    usage.cache_write_tokens = u64_at(wire, "cache_creation_input_tokens");
    usage.cache_read_tokens = u64_at(wire, "cache_read_input_tokens");
}

fn stop_reason(wire: &str) -> StopReason {
    match wire {
        "end_turn" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "refusal" => StopReason::Refusal,
        other => StopReason::Other(other.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::sync::Mutex;
    use std::time::Duration;

    use crate::llm::provider_checks::{self, limits, runtime};

    /// `idle` of silence at most; the request timeout and the size far off.
    fn fixture(name: &str) -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/anthropic-sse")
            .join(name);
        std::fs::read(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
    }

    async fn read_chunks(chunks: Vec<Vec<u8>>) -> Result<Turn, StreamFailure> {
        read_turn(
            provider_checks::body(chunks),
            limits(Duration::from_secs(5)),
            &|_| {},
        )
        .await
    }

    /// Every way of cutting the recorded stream in two yields the same turn as reading it whole.
    fn assert_split_invariant(name: &str) -> Result<Turn, StreamFailure> {
        let bytes = fixture(name);
        let rt = runtime();
        let whole = rt.block_on(read_chunks(vec![bytes.clone()]));
        for split in 1..bytes.len() {
            let parts = vec![bytes[..split].to_vec(), bytes[split..].to_vec()];
            let split_result = rt.block_on(read_chunks(parts));
            assert_eq!(split_result, whole, "{name} split at byte {split}");
        }
        whole
    }

    #[test]
    fn text_response_assembles_at_every_split_point() {
        let turn = assert_split_invariant("basic_response.sse").expect("turn");
        assert_eq!(turn.stop_reason, Some(StopReason::EndTurn));
        assert!(!turn.text().is_empty());
        assert!(turn.tool_calls().is_empty());
        let usage = turn.usage.expect("the API reports usage");
        assert!(usage.input_tokens > 0 && usage.output_tokens > 0);
    }

    #[test]
    fn tool_use_response_assembles_input_json_deltas_at_every_split_point() {
        let turn = assert_split_invariant("tool_use_response.sse").expect("turn");
        assert_eq!(turn.stop_reason, Some(StopReason::ToolUse));
        let calls = turn.tool_calls();
        assert_eq!(calls.len(), 1);
        let crate::llm::ToolCall {
            id, name, input, ..
        } = &calls[0];
        assert_eq!(id, "toolu_01NRLabsLyVHZPKxbKvkfSMn");
        assert_eq!(name, "get_weather");
        assert_eq!(input["location"], "Paris");
        assert!(turn.text().starts_with("I'll check the current weather"));
        assert!(turn.truncated_tool_calls.is_empty());
    }

    #[test]
    fn tool_use_cut_off_by_max_tokens_is_never_a_tool_call() {
        let turn = assert_split_invariant("incomplete_partial_json_response.sse").expect("turn");
        assert_eq!(turn.stop_reason, Some(StopReason::MaxTokens));
        assert!(turn.tool_calls().is_empty());
        assert_eq!(turn.truncated_tool_calls, vec!["make_file".to_owned()]);
    }

    #[test]
    fn refusal_assembles_at_every_split_point() {
        let turn = assert_split_invariant("refusal_response.sse").expect("turn");
        assert_eq!(turn.stop_reason, Some(StopReason::Refusal));
    }

    #[test]
    fn mid_stream_error_event_is_reported() {
        let stream = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
        let result = runtime().block_on(read_chunks(vec![stream.to_vec()]));
        assert_eq!(
            result,
            Err(StreamFailure::ApiError {
                error_type: "overloaded_error".to_owned(),
                message: "Overloaded".to_owned(),
                code: None,
            })
        );
    }

    #[test]
    fn a_tool_calls_input_is_reported_growing_by_its_length() {
        let seen = Mutex::new(0);
        let on_event = |event: ProviderEvent| {
            if let ProviderEvent::ToolInputDelta { bytes } = event {
                *seen.lock().expect("lock") += bytes;
            }
        };
        let bytes = fixture("tool_use_response.sse");
        let pieces: usize = String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .filter_map(|data| serde_json::from_str::<Value>(data).ok())
            .filter_map(|event| event.pointer("/delta/partial_json").cloned())
            .filter_map(|piece| piece.as_str().map(str::len))
            .sum();
        let stream = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(bytes))]);
        let turn = runtime()
            .block_on(read_turn(stream, limits(Duration::from_secs(5)), &on_event))
            .expect("turn");
        assert!(!turn.tool_calls().is_empty());
        assert!(pieces > 0);
        assert_eq!(*seen.lock().expect("lock"), pieces, "every piece once");
    }

    #[test]
    fn a_message_that_never_got_its_stop_reason_is_incomplete() {
        let bytes = fixture("tool_use_response.sse");
        let cut = bytes.len() / 2;
        let result = runtime().block_on(read_chunks(vec![bytes[..cut].to_vec()]));
        assert!(
            matches!(result, Err(StreamFailure::EndedEarly(_))),
            "{result:?}"
        );
        let stop_without_reason = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let result = runtime().block_on(read_chunks(vec![stop_without_reason.as_bytes().to_vec()]));
        assert_eq!(
            result,
            Err(StreamFailure::EndedEarly(
                "message_stop came before any stop reason".to_owned()
            ))
        );
    }

    #[test]
    fn an_error_event_of_any_length_is_one_line_and_capped() {
        let error = serde_json::json!({"type": "error", "error": {
            "type": format!("over\nloaded{}", "t".repeat(5_000)),
            "message": format!("a\nb{}", "m".repeat(1_000_000)),
        }});
        let stream = format!("event: error\ndata: {error}\n\n");
        let stream = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(stream))]);
        let failure =
            runtime().block_on(read_turn(stream, limits(Duration::from_secs(5)), &|_| {}));
        let Err(StreamFailure::ApiError {
            error_type,
            message,
            ..
        }) = failure
        else {
            panic!("an API error: {failure:?}");
        };
        assert!(error_type.starts_with("over loaded") && error_type.chars().count() <= 101);
        assert!(message.starts_with("a b") && message.chars().count() <= 2_001);
    }

    #[test]
    fn counts_beyond_any_model_are_clamped() {
        let stream = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":18446744073709551615,\"cache_read_input_tokens\":18446744073709551615}}}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":18446744073709551615}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let stream = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(stream))]);
        let turn = runtime()
            .block_on(read_turn(stream, limits(Duration::from_secs(5)), &|_| {}))
            .expect("turn");
        let usage = turn.usage.expect("usage");
        let most = u64::from(u32::MAX);
        assert_eq!(
            (
                usage.input_tokens,
                usage.cache_read_tokens,
                usage.output_tokens
            ),
            (most, most, most)
        );
    }

    #[test]
    fn unknown_events_are_ignored_and_tool_starts_are_reported() {
        let stream = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n",
            "event: brand_new_event\ndata: {\"type\":\"brand_new_event\"}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"list_files\",\"input\":{}}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":7}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let seen = Mutex::new(Vec::new());
        let on_event = |event: ProviderEvent| seen.lock().expect("lock").push(event);
        let stream = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(stream))]);
        let turn = runtime()
            .block_on(read_turn(stream, limits(Duration::from_secs(5)), &on_event))
            .expect("turn");
        assert_eq!(
            turn.content,
            vec![ContentBlock::tool_call(
                "t1",
                "list_files",
                serde_json::json!({})
            )]
        );
        assert_eq!(
            turn.usage,
            Some(Usage {
                input_tokens: 3,
                output_tokens: 7,
                ..Usage::default()
            })
        );
        assert_eq!(
            seen.into_inner().expect("lock"),
            vec![ProviderEvent::ToolCallStarted {
                name: "list_files".to_owned()
            }]
        );
    }

    #[test]
    fn a_silent_stream_stalls() {
        provider_checks::assert_a_silent_body_stalls(|body, limits| async move {
            read_turn(body, limits, &|_| {}).await
        });
    }
}
