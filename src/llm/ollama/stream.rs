//! Assembling one assistant turn from `/api/chat`'s NDJSON lines: text in pieces, each tool
//! call whole in one line, a last line with `done: true`, the reason and the token counts.

use std::collections::HashSet;

use bytes::Bytes;
use futures::Stream;
use serde_json::Value;

use crate::llm::answer_body::{AnswerBody, AnswerLimits, MAX_PIECE_BYTES, piece_too_long};
use crate::llm::http::ErrorBody;
use crate::llm::types::token_count;
use crate::llm::{ContentBlock, ProviderEvent, StopReason, StreamFailure, Turn, Usage};

/// Reads NDJSON lines from `bytes`, within `limits`, until the one with `done: true` and
/// returns the turn. An answer without that line is incomplete, never a turn.
pub async fn read_turn<S, E>(
    bytes: S,
    limits: AnswerLimits,
    on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
) -> Result<Turn, StreamFailure>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::error::Error + 'static,
{
    let mut body = AnswerBody::new(bytes, limits);
    let mut lines = Lines::default();
    let mut assembler = TurnAssembler::default();
    loop {
        match body.next_chunk().await? {
            None => {
                // Ollama ends every line with a newline, but a last line without one is
                // still whole if it parses; one that does not was cut off with the stream.
                let rest = lines.rest();
                if serde_json::from_slice::<Value>(rest).is_ok()
                    && assembler.push(rest, on_event)?
                {
                    return Ok(assembler.finish());
                }
                return Err(StreamFailure::EndedEarly(
                    "the stream ended before the line with \"done\": true".to_owned(),
                ));
            }
            Some(chunk) => {
                lines.extend(&chunk);
                while let Some(line) = lines.next_line() {
                    if assembler.push(line, on_event)? {
                        return Ok(assembler.finish());
                    }
                    // Only a line that adds to the answer is progress: a server repeating
                    // empty messages keeps the stream alive, but not past the request timeout.
                    if assembler.take_growth() {
                        body.progressed();
                    }
                }
                if lines.rest().len() > MAX_PIECE_BYTES {
                    return Err(piece_too_long("line"));
                }
            }
        }
    }
}

/// Bytes received but not yet read as lines. A line may be split anywhere across reads, also
/// inside a UTF-8 character, so lines are cut from bytes and decoded whole.
#[derive(Debug, Default)]
struct Lines {
    buffer: Vec<u8>,
    /// Where the unread part starts.
    start: usize,
    /// Up to where the unread part is known to hold no newline.
    searched: usize,
}

impl Lines {
    fn extend(&mut self, chunk: &[u8]) {
        if self.start > 0 {
            self.buffer.drain(..self.start);
            self.searched -= self.start;
            self.start = 0;
        }
        self.buffer.extend_from_slice(chunk);
    }

    fn next_line(&mut self) -> Option<&[u8]> {
        let Some(offset) = self.buffer[self.searched..]
            .iter()
            .position(|byte| *byte == b'\n')
        else {
            self.searched = self.buffer.len();
            return None;
        };
        let line = self.start..self.searched + offset;
        self.start = line.end + 1;
        self.searched = self.start;
        Some(&self.buffer[line])
    }

    fn rest(&self) -> &[u8] {
        &self.buffer[self.start..]
    }
}

#[derive(Debug, Default)]
struct TurnAssembler {
    content: Vec<ContentBlock>,
    call_ids: HashSet<String>,
    stop_reason: Option<StopReason>,
    usage: Option<Usage>,
    /// Whether the answer grew (text or a call) since [`TurnAssembler::take_growth`] last said.
    grew: bool,
}

impl TurnAssembler {
    /// Feeds one line; returns true once the answer is complete.
    fn push(
        &mut self,
        line: &[u8],
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
    ) -> Result<bool, StreamFailure> {
        let line = line.trim_ascii();
        if line.is_empty() {
            return Ok(false);
        }
        let chunk: Value = serde_json::from_slice(line).map_err(|err| {
            StreamFailure::Protocol(format!(
                "a line of the answer is not JSON ({err}): {}",
                String::from_utf8_lossy(&line[..line.len().min(200)])
            ))
        })?;
        if chunk.get("error").is_some_and(|error| !error.is_null())
            && let Some(error) = ErrorBody::from_json(&chunk)
        {
            return Err(StreamFailure::ApiError {
                error_type: error.error_type,
                message: error.message,
                code: error.error_code,
            });
        }
        if let Some(message) = chunk.get("message") {
            // `message.thinking` is the model's reasoning, never part of the answer.
            if let Some(text) = message.get("content").and_then(Value::as_str)
                && !text.is_empty()
            {
                self.push_text(text);
                on_event(ProviderEvent::TextDelta {
                    text: text.to_owned(),
                });
            }
            if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
                for call in calls {
                    self.push_call(call, on_event);
                }
            }
        }
        if chunk.get("done").and_then(Value::as_bool) != Some(true) {
            return Ok(false);
        }
        let called_tools = self
            .content
            .iter()
            .any(|block| matches!(block, ContentBlock::ToolCall { .. }));
        let done_reason = chunk.get("done_reason").and_then(Value::as_str);
        // The wire has no reason for calls ("stop" comes with them): their presence says it.
        self.stop_reason = Some(match done_reason {
            _ if called_tools => StopReason::ToolUse,
            Some("length") => StopReason::MaxTokens,
            None | Some("" | "stop") => StopReason::EndTurn,
            Some(other) => StopReason::Other(other.to_owned()),
        });
        let count = |key: &str| chunk.get(key).and_then(token_count);
        // A server in front of Ollama may count nothing: that is no usage, not zero tokens.
        let (input, output) = (count("prompt_eval_count"), count("eval_count"));
        if input.is_some() || output.is_some() {
            self.usage = Some(Usage {
                input_tokens: input.unwrap_or_default(),
                output_tokens: output.unwrap_or_default(),
                ..Usage::default()
            });
        }
        Ok(true)
    }

    /// Whether the answer grew since the last time this was asked.
    fn take_growth(&mut self) -> bool {
        std::mem::take(&mut self.grew)
    }

    fn push_text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.grew = true;
        match self.content.last_mut() {
            Some(ContentBlock::Text { text: open }) => open.push_str(text),
            _ => self.content.push(ContentBlock::text(text)),
        }
    }

    fn push_call(&mut self, call: &Value, on_event: &(dyn Fn(ProviderEvent) + Send + Sync)) {
        let function = call.get("function").unwrap_or(&Value::Null);
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let id = self.call_id(call.get("id").and_then(Value::as_str));
        let (input, mut input_error) = arguments(function.get("arguments"));
        if name.is_empty() {
            input_error = Some("the call names no tool".to_owned());
        }
        on_event(ProviderEvent::ToolCallStarted { name: name.clone() });
        // The input comes whole; its length is what the answer grew by.
        let bytes = function
            .get("arguments")
            .map_or(0, |sent| sent.to_string().len());
        on_event(ProviderEvent::ToolInputDelta { bytes });
        self.grew = true;
        self.content.push(ContentBlock::ToolCall {
            id,
            name,
            input,
            input_error,
        });
    }

    /// The id the server sent, or (older versions send none, and a repeated one would pair a
    /// result with the wrong call) one made up, unique in this turn.
    fn call_id(&mut self, sent: Option<&str>) -> String {
        let usable = sent
            .map(str::trim)
            .filter(|id| !id.is_empty() && !self.call_ids.contains(*id));
        let id = match usable {
            Some(id) => id.to_owned(),
            None => loop {
                let made_up = format!(
                    "call_{}",
                    std::iter::repeat_with(fastrand::alphanumeric)
                        .take(24)
                        .collect::<String>()
                );
                if !self.call_ids.contains(&made_up) {
                    break made_up;
                }
            },
        };
        self.call_ids.insert(id.clone());
        id
    }

    fn finish(self) -> Turn {
        Turn {
            content: self.content,
            // Each call arrives whole in one line, so a token limit can end the answer
            // between calls but never cut one in half: nothing is ever truncated here.
            truncated_tool_calls: Vec::new(),
            stop_reason: self.stop_reason,
            usage: self.usage,
            unreadable: None,
        }
    }
}

/// A call's arguments as Loopr takes them: an object, or why they are not usable.
fn arguments(sent: Option<&Value>) -> (Value, Option<String>) {
    let empty = || Value::Object(Default::default());
    match sent {
        Some(Value::Object(_)) => (sent.cloned().unwrap_or_else(empty), None),
        // Ollama's Go types write a call without arguments as `null` (a nil map).
        None | Some(Value::Null) => (empty(), None),
        // Some servers in front of Ollama send the arguments as a JSON string, as OpenAI does.
        Some(Value::String(text)) if text.trim().is_empty() => (empty(), None),
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(object) if object.is_object() => (object, None),
            Ok(_) => (
                Value::String(text.clone()),
                Some("the arguments are not a JSON object".to_owned()),
            ),
            Err(err) => (
                Value::String(text.clone()),
                Some(format!("the arguments are not valid JSON: {err}")),
            ),
        },
        Some(other) => (
            other.clone(),
            Some("the arguments are not a JSON object".to_owned()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    use crate::llm::provider_checks::{self, limits, runtime};

    use serde_json::json;

    /// `idle` of silence at most; the request timeout and the size far off.
    async fn read_chunks(
        chunks: Vec<Vec<u8>>,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
    ) -> Result<Turn, StreamFailure> {
        read_turn(
            provider_checks::body(chunks),
            limits(Duration::from_secs(5)),
            on_event,
        )
        .await
    }

    /// Made-up ids differ between reads; this puts a placeholder in their place.
    fn without_made_up_ids(result: Result<Turn, StreamFailure>) -> Result<Turn, StreamFailure> {
        result.map(|mut turn| {
            for block in &mut turn.content {
                if let ContentBlock::ToolCall { id, .. } = block
                    && is_made_up(id)
                {
                    *id = "call_<made up>".to_owned();
                }
            }
            turn
        })
    }

    fn is_made_up(id: &str) -> bool {
        id.strip_prefix("call_")
            .is_some_and(|rest| rest.len() == 24 && rest.chars().all(|c| c.is_ascii_alphanumeric()))
    }

    /// Reads `lines` whole and cut in two at every byte; every way gives the same turn (made-up
    /// ids aside), and the tool calls are reported as they start.
    fn read_at_every_split(lines: &[Value]) -> Result<Turn, StreamFailure> {
        let bytes: Vec<u8> = lines
            .iter()
            .flat_map(|line| format!("{line}\n").into_bytes())
            .collect();
        read_bytes_at_every_split(bytes)
    }

    fn read_bytes_at_every_split(bytes: Vec<u8>) -> Result<Turn, StreamFailure> {
        let rt = runtime();
        let events = Mutex::new(Vec::new());
        let record = |event: ProviderEvent| events.lock().expect("events").push(event);
        let whole = rt.block_on(read_chunks(vec![bytes.clone()], &record));
        let seen: Vec<ProviderEvent> = events.lock().expect("events").drain(..).collect();
        if let Ok(turn) = &whole {
            let calls: Vec<ProviderEvent> = turn
                .tool_calls()
                .into_iter()
                .map(|call| ProviderEvent::ToolCallStarted { name: call.name })
                .collect();
            let started: Vec<ProviderEvent> = seen
                .iter()
                .filter(|event| matches!(event, ProviderEvent::ToolCallStarted { .. }))
                .cloned()
                .collect();
            assert_eq!(started, calls, "one event per call, in order");
            let streamed: String = seen
                .iter()
                .filter_map(|event| match event {
                    ProviderEvent::TextDelta { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(streamed, turn.text(), "the text streams as it comes");
        }
        let whole = without_made_up_ids(whole);
        for split in 1..bytes.len() {
            let parts = vec![bytes[..split].to_vec(), bytes[split..].to_vec()];
            let result = without_made_up_ids(rt.block_on(read_chunks(parts, &|_| {})));
            assert_eq!(result, whole, "split at byte {split}");
        }
        whole
    }

    fn chunk(message: Value) -> Value {
        json!({"model": "qwen3:8b", "created_at": "2025-06-01T10:15:03.512873Z",
               "message": message, "done": false})
    }

    fn text(content: &str) -> Value {
        chunk(json!({"role": "assistant", "content": content}))
    }

    fn calls(tool_calls: Value) -> Value {
        chunk(json!({"role": "assistant", "content": "", "tool_calls": tool_calls}))
    }

    fn done(reason: &str, prompt_eval_count: u64, eval_count: u64) -> Value {
        json!({"model": "qwen3:8b", "created_at": "2025-06-01T10:15:04.938120Z",
               "message": {"role": "assistant", "content": ""},
               "done": true, "done_reason": reason,
               "total_duration": 1_512_873_250u64, "load_duration": 21_330_875u64,
               "prompt_eval_count": prompt_eval_count, "prompt_eval_duration": 114_000_000u64,
               "eval_count": eval_count, "eval_duration": 1_376_000_000u64})
    }

    #[test]
    fn text_in_pieces_with_a_multibyte_character_assembles_at_every_split() {
        let turn = read_at_every_split(&[
            text("The flag "),
            text("prints “sample 0.3.1”"),
            text(" and exits."),
            done("stop", 412, 17),
        ])
        .expect("turn");
        assert_eq!(
            turn.content,
            vec![ContentBlock::text(
                "The flag prints “sample 0.3.1” and exits."
            )],
            "the pieces make one text"
        );
        assert_eq!(turn.stop_reason, Some(StopReason::EndTurn));
        assert_eq!(
            turn.usage,
            Some(Usage {
                input_tokens: 412,
                output_tokens: 17,
                ..Usage::default()
            })
        );
        assert!(turn.truncated_tool_calls.is_empty());
    }

    #[test]
    fn thinking_is_never_part_of_the_answer() {
        let turn = read_at_every_split(&[
            chunk(json!({"role": "assistant", "content": "", "thinking": "The user wants"})),
            chunk(json!({"role": "assistant", "content": "", "thinking": " a flag."})),
            text("Done."),
            done("stop", 30, 9),
        ])
        .expect("turn");
        assert_eq!(
            turn.content,
            vec![ContentBlock::text("Done.")],
            "only the answer"
        );
    }

    #[test]
    fn a_whole_call_without_an_id_gets_one_made_up_and_stop_means_tools_were_called() {
        let turn = read_at_every_split(&[
            text("Let me look."),
            calls(
                json!([{"function": {"name": "read_file", "arguments": {"path": "src/main.rs"}}}]),
            ),
            done("stop", 220, 31),
        ])
        .expect("turn");
        assert_eq!(turn.stop_reason, Some(StopReason::ToolUse));
        assert_eq!(
            turn.content,
            vec![
                ContentBlock::text("Let me look."),
                ContentBlock::tool_call(
                    "call_<made up>",
                    "read_file",
                    json!({"path": "src/main.rs"})
                ),
            ]
        );
    }

    #[test]
    fn made_up_ids_are_unique_in_a_turn_and_ids_sent_are_kept_unless_repeated() {
        let lines = [
            calls(json!([{"function": {"index": 0, "name": "list_files", "arguments": {}}}])),
            calls(json!([{"function": {"index": 0, "name": "list_files", "arguments": {}}}])),
            calls(json!([
                {"id": "call_kept", "function": {"index": 0, "name": "grep", "arguments": {"pattern": "a"}}},
                {"id": "call_kept", "function": {"index": 1, "name": "grep", "arguments": {"pattern": "b"}}}
            ])),
            done("stop", 50, 40),
        ];
        read_at_every_split(&lines).expect("turn");
        let bytes = lines
            .iter()
            .map(|line| format!("{line}\n"))
            .collect::<String>();
        let calls = runtime()
            .block_on(read_chunks(vec![bytes.into_bytes()], &|_| {}))
            .expect("turn")
            .tool_calls();
        let ids: Vec<&str> = calls.iter().map(|call| call.id.as_str()).collect();
        assert!(is_made_up(ids[0]) && is_made_up(ids[1]), "{ids:?}");
        assert_ne!(ids[0], ids[1]);
        assert_eq!(ids[2], "call_kept");
        assert!(is_made_up(ids[3]), "a repeated id is replaced: {ids:?}");
        assert_eq!(calls[3].input, json!({"pattern": "b"}));
    }

    #[test]
    fn arguments_sent_as_a_string_holding_an_object_are_accepted() {
        let turn = read_at_every_split(&[
            calls(json!([{"id": "call_1", "function": {"name": "read_file", "arguments": "{\"path\": \"README.md\"}"}}])),
            done("stop", 10, 10),
        ])
        .expect("turn");
        assert_eq!(
            turn.content,
            vec![ContentBlock::tool_call(
                "call_1",
                "read_file",
                json!({"path": "README.md"})
            )]
        );
    }

    #[test]
    fn arguments_that_are_no_object_become_an_input_error_never_a_crash() {
        let turn = read_at_every_split(&[
            calls(json!([
                {"id": "a", "function": {"name": "grep", "arguments": "{\"pattern\": "}},
                {"id": "b", "function": {"name": "grep", "arguments": [1, 2]}},
                {"id": "c", "function": {"name": "grep", "arguments": "\"just text\""}},
                {"id": "d", "function": {"name": "list_files", "arguments": null}},
                {"id": "e", "function": {"arguments": {}}}
            ])),
            done("stop", 10, 10),
        ])
        .expect("turn");
        let calls = turn.tool_calls();
        let errors: Vec<Option<&str>> = calls
            .iter()
            .map(|call| call.input_error.as_deref())
            .collect();
        assert!(
            errors[0].is_some_and(|error| error.starts_with("the arguments are not valid JSON")),
            "{errors:?}"
        );
        assert_eq!(calls[0].input, json!("{\"pattern\": "));
        assert_eq!(errors[1], Some("the arguments are not a JSON object"));
        assert_eq!(calls[1].input, json!([1, 2]));
        assert_eq!(errors[2], Some("the arguments are not a JSON object"));
        assert_eq!(
            (errors[3], &calls[3].input),
            (None, &json!({})),
            "null is a call without arguments"
        );
        assert_eq!(errors[4], Some("the call names no tool"));
        assert_eq!(turn.stop_reason, Some(StopReason::ToolUse));
    }

    #[test]
    fn counts_beyond_any_model_are_clamped() {
        let turn =
            read_at_every_split(&[text("x"), done("stop", u64::MAX, u64::MAX)]).expect("turn");
        let usage = turn.usage.expect("usage");
        let most = u64::from(u32::MAX);
        assert_eq!((usage.input_tokens, usage.output_tokens), (most, most));
    }

    #[test]
    fn done_reason_length_is_max_tokens_and_leaves_no_half_call() {
        let turn = read_at_every_split(&[text("The plan has three"), done("length", 900, 4096)])
            .expect("turn");
        assert_eq!(turn.stop_reason, Some(StopReason::MaxTokens));
        assert!(turn.truncated_tool_calls.is_empty());
        assert_eq!(turn.text(), "The plan has three");
    }

    #[test]
    fn calls_win_over_any_done_reason() {
        let turn = read_at_every_split(&[
            calls(json!([{"function": {"name": "list_files", "arguments": {}}}])),
            done("length", 900, 4096),
        ])
        .expect("turn");
        assert_eq!(turn.stop_reason, Some(StopReason::ToolUse));
        let other = read_at_every_split(&[text("loaded"), done("unload", 0, 0)]).expect("turn");
        assert_eq!(
            other.stop_reason,
            Some(StopReason::Other("unload".to_owned()))
        );
    }

    #[test]
    fn an_error_line_in_a_successful_stream_is_an_api_error() {
        let result = read_at_every_split(&[
            text("Partial answ"),
            json!({"error": "an error was encountered while running the model: unexpected EOF"}),
        ]);
        assert_eq!(
            result,
            Err(StreamFailure::ApiError {
                error_type: "error".to_owned(),
                message: "an error was encountered while running the model: unexpected EOF"
                    .to_owned(),
                code: None,
            })
        );
    }

    #[test]
    fn a_stream_ending_before_done_is_incomplete_wherever_it_is_cut() {
        let lines = [text("Hello"), text(" there"), done("stop", 5, 2)];
        let bytes: Vec<u8> = lines
            .iter()
            .flat_map(|line| format!("{line}\n").into_bytes())
            .collect();
        let done_line_end = bytes.len() - 1;
        let rt = runtime();
        for cut in 0..done_line_end {
            let result = rt.block_on(read_chunks(vec![bytes[..cut].to_vec()], &|_| {}));
            assert!(
                matches!(&result, Err(StreamFailure::EndedEarly(message)) if message.contains("done")),
                "cut at {cut}: {result:?}"
            );
        }
        let without_last_newline = rt
            .block_on(read_chunks(vec![bytes[..done_line_end].to_vec()], &|_| {}))
            .expect("a whole last line needs no newline");
        assert_eq!(without_last_newline.text(), "Hello there");
    }

    #[test]
    fn missing_counts_are_no_usage_and_blank_and_crlf_lines_are_skipped() {
        let stream = concat!(
            "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"ok\"},\"done\":false}\r\n",
            "\r\n",
            "\n",
            "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true}\r\n",
        );
        let turn = read_bytes_at_every_split(stream.as_bytes().to_vec()).expect("turn");
        assert_eq!(turn.text(), "ok");
        assert_eq!(turn.stop_reason, Some(StopReason::EndTurn));
        assert_eq!(
            turn.usage, None,
            "nothing counted is no usage, not zero tokens"
        );
    }

    #[test]
    fn a_line_that_is_not_json_is_a_protocol_failure() {
        let result = read_bytes_at_every_split(b"<html>502 Bad Gateway</html>\n".to_vec());
        assert!(
            matches!(&result, Err(StreamFailure::Protocol(message)) if message.contains("502 Bad Gateway")),
            "{result:?}"
        );
    }

    #[test]
    fn a_silent_stream_stalls() {
        provider_checks::assert_a_silent_body_stalls(|body, limits| async move {
            read_turn(body, limits, &|_| {}).await
        });
    }

    #[test]
    fn empty_pieces_keep_the_stream_alive_but_are_no_progress() {
        let empties = vec![
            format!(
                "{}\n",
                json!({"message": {"role": "assistant", "content": ""}, "done": false})
            ),
            format!(
                "{}\n",
                json!({"message": {"role": "assistant"}, "done": false})
            ),
            format!(
                "{}\n",
                json!({"message": {"role": "assistant", "content": "", "tool_calls": []}, "done": false})
            ),
        ];
        provider_checks::assert_empty_pieces_are_no_progress(
            format!(
                "{}\n",
                json!({"message": {"role": "assistant", "content": "Hel"}, "done": false})
            ),
            empties,
            |body, limits| async move { read_turn(body, limits, &|_| {}).await },
        );
    }

    #[test]
    fn a_line_longer_than_its_cap_fails_before_it_ends() {
        let mut chunks = vec![br#"{"message":{"role":"assistant","content":""#.to_vec()];
        chunks.extend(std::iter::repeat_n(vec![b'x'; 64 * 1024], 64));
        let result = runtime().block_on(read_chunks(chunks, &|_| {}));
        assert!(
            matches!(&result, Err(StreamFailure::Protocol(message)) if message.contains("1 MiB")),
            "{result:?}"
        );
    }
}
