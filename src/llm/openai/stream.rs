//! Assembling one assistant turn from chat-completion chunks (unnamed SSE events ending with
//! `data: [DONE]`), surviving what real servers send besides OpenAI's own form: see
//! `shared/notes/llm-wire-protocols.md`, section 5. Every quirk handled here has a test below.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use futures::Stream;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::llm::answer_body::{AnswerBody, AnswerLimits};
use crate::llm::http::ErrorBody;
use crate::llm::sse::{SseItem, SseReader};
use crate::llm::types::token_count;
use crate::llm::{ContentBlock, ProviderEvent, StopReason, StreamFailure, Turn, Usage};

/// Reads chunks from `bytes`, within `limits`, until `data: [DONE]` (or the end of a body that
/// delivered a finish reason) and returns the turn. An answer without a finish reason is
/// incomplete, never a turn: llama.cpp's server ends an answer another request interrupted
/// with a bare `[DONE]`.
pub async fn read_turn<S, E>(
    bytes: S,
    limits: AnswerLimits,
    on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
) -> Result<Turn, StreamFailure>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::error::Error + 'static,
{
    // Comment lines (`: ping - ...`, `: OPENROUTER PROCESSING`) never become events, but their
    // bytes keep the stream from stalling.
    let mut events = SseReader::new(AnswerBody::new(bytes, limits));
    let mut assembler = TurnAssembler::default();
    loop {
        match events.next().await? {
            // `[DONE]` is lost when the body ends without the blank line that terminates an
            // event, and some servers never send it; a finish reason says the answer is whole.
            None if assembler.finished => return Ok(assembler.finish(on_event)),
            None => {
                return Err(StreamFailure::EndedEarly(
                    "the stream ended with no finish reason".to_owned(),
                ));
            }
            Some(SseItem::Error(value)) => return Err(api_error(value.trim())),
            Some(SseItem::Event { name, data }) => {
                let data = data.trim();
                if data == "[DONE]" {
                    if assembler.finished {
                        return Ok(assembler.finish(on_event));
                    }
                    return Err(StreamFailure::EndedEarly(
                        "the stream ended with [DONE] and no finish reason".to_owned(),
                    ));
                }
                if name == "error" {
                    return Err(api_error(data));
                }
                // Only a piece that adds to the answer is progress: a server repeating empty
                // deltas keeps the stream alive, but not past the request timeout.
                if !data.is_empty() && assembler.push(data, on_event)? {
                    events.body().progressed();
                }
            }
        }
    }
}

/// Reads an answer a server sent whole (`application/json`), having ignored `stream: true`:
/// some proxies and older servers do. Its message is read as one chunk of a stream would be.
pub fn read_whole(
    body: &str,
    on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
) -> Result<Turn, StreamFailure> {
    let mut completion: Value = serde_json::from_str(body).map_err(|err| {
        StreamFailure::Protocol(format!("the answer is not JSON ({err}): {}", snippet(body)))
    })?;
    if let Some(choices) = completion.get_mut("choices").and_then(Value::as_array_mut) {
        for choice in choices {
            let Some(mut message) = choice.get_mut("message").map(Value::take) else {
                continue;
            };
            // Whole calls carry no index; their position is one, so that calls without an
            // id stay apart.
            if let Some(calls) = message.get_mut("tool_calls").and_then(Value::as_array_mut) {
                for (position, call) in calls.iter_mut().enumerate() {
                    if let Some(call) = call.as_object_mut() {
                        call.entry("index").or_insert(Value::from(position));
                    }
                }
            }
            if let Some(choice) = choice.as_object_mut() {
                choice.insert("delta".to_owned(), message);
            }
        }
    }
    let mut assembler = TurnAssembler::default();
    assembler.push(&completion.to_string(), on_event)?;
    Ok(assembler.finish(on_event))
}

/// An error a server reported inside a 200 stream: an `error` object, an `error` event, or
/// llama-server's `error:` field, whose value is the error object itself.
fn api_error(data: &str) -> StreamFailure {
    let error = serde_json::from_str::<Value>(data)
        .ok()
        .and_then(|json| {
            ErrorBody::from_json(&json).or_else(|| {
                json.get("message")
                    .and_then(|_| ErrorBody::from_json(&serde_json::json!({ "error": json })))
            })
        })
        .unwrap_or_else(|| ErrorBody::parse(data));
    StreamFailure::ApiError {
        error_type: error.error_type,
        message: error.message,
        code: error.error_code,
    }
}

/// Calls one turn may hold; more is a server gone wrong, not a plan.
const MAX_CALLS_PER_TURN: usize = 64;

/// A tool call as its fragments arrive.
#[derive(Debug, Default)]
struct PartialCall {
    /// The first non-empty id the server sent for it.
    wire_id: Option<String>,
    /// The first non-empty name: later fragments may repeat it or send `""`.
    name: String,
    /// Accumulated and parsed once at the end: parsing on every fragment is quadratic.
    arguments: String,
    announced: bool,
}

impl PartialCall {
    fn add_arguments(&mut self, piece: &str) {
        // Some servers (DeepSeek and others) resend the whole argument text in every chunk:
        // a piece that starts with everything so far replaces it.
        if !self.arguments.is_empty() && piece.starts_with(self.arguments.as_str()) {
            self.arguments.clear();
        }
        self.arguments.push_str(piece);
    }

    fn announce(&mut self, on_event: &(dyn Fn(ProviderEvent) + Send + Sync)) {
        if !self.announced {
            self.announced = true;
            on_event(ProviderEvent::ToolCallStarted {
                name: self.name.clone(),
            });
        }
    }
}

#[derive(Debug, Default)]
struct TurnAssembler {
    text: String,
    calls: Vec<PartialCall>,
    /// The position of the last call opened at each wire `index`.
    by_index: HashMap<u64, usize>,
    /// The position of the last call holding each wire id.
    by_id: HashMap<String, usize>,
    /// The latest non-empty finish reason (servers may send two finish chunks).
    finish_reason: Option<String>,
    /// Whether any finish chunk said `length`: a later `stop` does not make the cut-off call
    /// whole.
    cut_by_length: bool,
    finished: bool,
    usage: Option<Usage>,
    /// The completion's id (`chatcmpl-...`), which seeds the ids made for calls without one.
    completion_id: String,
}

impl TurnAssembler {
    /// Feeds one chunk; returns whether it added to the answer (text, a call's name or
    /// input, the usage, or the finish).
    fn push(
        &mut self,
        data: &str,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
    ) -> Result<bool, StreamFailure> {
        let chunk: Value = serde_json::from_str(data).map_err(|err| {
            StreamFailure::Protocol(format!("a chunk is not JSON ({err}): {}", snippet(data)))
        })?;
        // llama.cpp's server (and proxies) report a failure as an error object where the
        // choices should be, with the status already 200.
        if chunk.get("error").is_some_and(|error| !error.is_null()) {
            return Err(api_error(data));
        }
        if self.completion_id.is_empty()
            && let Some(id) = chunk.get("id").and_then(Value::as_str)
        {
            self.completion_id = id.to_owned();
        }
        let before = (self.usage, self.finished, self.finish_reason.clone());
        let mut grew = false;
        self.read_usage(chunk.get("usage"));
        // `choices: []` is the usage-only last chunk, or Azure's content-filter first chunk.
        let choices = chunk
            .get("choices")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        // Only the first choice is the answer (Loopr never asks for `n > 1`).
        for choice in choices
            .iter()
            .filter(|choice| choice.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        {
            // Kimi puts the usage inside the choice.
            self.read_usage(choice.get("usage"));
            if let Some(delta) = choice.get("delta") {
                // `reasoning` / `reasoning_content` are the model thinking, never the answer.
                if let Some(text) = delta.get("content").and_then(Value::as_str)
                    && !text.is_empty()
                {
                    self.text.push_str(text);
                    grew = true;
                    on_event(ProviderEvent::TextDelta {
                        text: text.to_owned(),
                    });
                }
                for fragment in delta
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                {
                    grew |= self.merge_fragment(fragment, on_event)?;
                }
            }
            // An empty reason (some servers send `""`) still says the answer is finished.
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finished = true;
                if !reason.is_empty() {
                    self.cut_by_length |= reason == "length";
                    self.finish_reason = Some(reason.to_owned());
                }
            }
        }
        Ok(grew || before != (self.usage, self.finished, self.finish_reason.clone()))
    }

    fn read_usage(&mut self, wire: Option<&Value>) {
        let Some(wire) = wire else { return };
        let count = |pointer: &str| wire.pointer(pointer).and_then(token_count);
        let (prompt, completion) = (count("/prompt_tokens"), count("/completion_tokens"));
        // `{}` (or `null`) says nothing; it must not erase counts already read.
        if prompt.is_none() && completion.is_none() {
            return;
        }
        let prompt = prompt.unwrap_or_default();
        // `prompt_tokens` includes the cached tokens (DeepSeek names them differently).
        let cached = count("/prompt_tokens_details/cached_tokens")
            .or_else(|| count("/prompt_cache_hit_tokens"))
            .unwrap_or_default()
            .min(prompt);
        self.usage = Some(Usage {
            input_tokens: prompt - cached,
            output_tokens: completion.unwrap_or_default(),
            cache_read_tokens: cached,
            ..Usage::default()
        });
    }

    /// Merges one call fragment; returns whether the call's name or input changed.
    fn merge_fragment(
        &mut self,
        fragment: &Value,
        on_event: &(dyn Fn(ProviderEvent) + Send + Sync),
    ) -> Result<bool, StreamFailure> {
        let index = fragment.get("index").and_then(Value::as_u64);
        let id = fragment
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty());
        let position = self.call_for(index, id)?;
        let call = &mut self.calls[position];
        if call.wire_id.is_none()
            && let Some(id) = id
        {
            call.wire_id = Some(id.to_owned());
            let last = self.by_id.entry(id.to_owned()).or_insert(position);
            *last = (*last).max(position);
        }
        let before = call.arguments.len();
        let named = !call.name.is_empty();
        let mut replaced = false;
        if let Some(function) = fragment.get("function") {
            if call.name.is_empty()
                && let Some(name) = function.get("name").and_then(Value::as_str)
            {
                call.name = name.trim().to_owned();
            }
            match function.get("arguments") {
                Some(Value::String(piece)) => call.add_arguments(piece),
                // Some servers send the arguments as an object, whole.
                Some(object @ Value::Object(_)) => {
                    let whole = object.to_string();
                    replaced = whole != call.arguments;
                    call.arguments = whole;
                }
                _ => {}
            }
        }
        // The name may come late: the call is announced once it has one (or at the end).
        if !call.name.is_empty() {
            call.announce(on_event);
        }
        let grown = call.arguments.len().saturating_sub(before);
        if grown > 0 {
            on_event(ProviderEvent::ToolInputDelta { bytes: grown });
        }
        Ok(grown > 0 || replaced || (!named && !call.name.is_empty()))
    }

    /// The call a fragment belongs to, opening a new one when it belongs to none. Fragments
    /// are keyed by `index`, but a fragment with a new id at an index that already holds a
    /// call starts another call (Ollama's `/v1` gives every parallel call index 0), and one
    /// without an index belongs to the last call unless its id says otherwise (Gemini).
    /// Looked up, not searched: one event may carry many thousands of fragments.
    fn call_for(&mut self, index: Option<u64>, id: Option<&str>) -> Result<usize, StreamFailure> {
        let existing = match index {
            Some(index) => self.by_index.get(&index).copied(),
            None => id
                .and_then(|id| self.by_id.get(id).copied())
                .or_else(|| self.calls.len().checked_sub(1)),
        };
        let starts_another = |call: &PartialCall| matches!((call.wire_id.as_deref(), id), (Some(held), Some(new)) if held != new);
        match existing {
            Some(position) if !starts_another(&self.calls[position]) => Ok(position),
            _ if self.calls.len() >= MAX_CALLS_PER_TURN => Err(StreamFailure::Protocol(format!(
                "the answer began tool call {} in one turn; a turn may hold at most {MAX_CALLS_PER_TURN}",
                self.calls.len() + 1
            ))),
            _ => {
                let position = self.calls.len();
                self.calls.push(PartialCall::default());
                if let Some(index) = index {
                    self.by_index.insert(index, position);
                }
                Ok(position)
            }
        }
    }

    fn finish(self, on_event: &(dyn Fn(ProviderEvent) + Send + Sync)) -> Turn {
        let mut content = Vec::new();
        if !self.text.is_empty() {
            content.push(ContentBlock::Text { text: self.text });
        }
        let mut truncated_tool_calls = Vec::new();
        let mut ids = CallIds::new(&self.completion_id);
        for (position, mut call) in self.calls.into_iter().enumerate() {
            call.announce(on_event);
            let parsed = parse_arguments(&call.arguments);
            // Cut off by the token limit, a call whose arguments are not a whole object (or
            // have not begun) is incomplete: it must never run.
            let incomplete =
                call.arguments.trim().is_empty() || !matches!(parsed, Arguments::Object(_));
            if self.cut_by_length && incomplete {
                truncated_tool_calls.push(call.name);
                continue;
            }
            let id = ids.assign(call.wire_id.as_deref(), position, &call);
            let (input, input_error) = match parsed {
                Arguments::Object(input) => (input, None),
                Arguments::Invalid(why) => (Value::String(call.arguments), Some(why)),
            };
            content.push(ContentBlock::ToolCall {
                id,
                name: call.name,
                input,
                input_error,
            });
        }
        let called_tools = content
            .iter()
            .any(|block| matches!(block, ContentBlock::ToolCall { .. }));
        // Servers say `stop` although they sent calls (vLLM, Gemini, OpenRouter), send an
        // empty reason or none: what happened is decided from the calls present.
        let stop_reason = if self.cut_by_length {
            StopReason::MaxTokens
        } else if called_tools {
            StopReason::ToolUse
        } else {
            match self.finish_reason.as_deref() {
                Some("content_filter") => StopReason::Refusal,
                None | Some("stop" | "tool_calls" | "function_call" | "eos") => StopReason::EndTurn,
                Some(other) => StopReason::Other(other.to_owned()),
            }
        };
        Turn {
            content,
            truncated_tool_calls,
            stop_reason: Some(stop_reason),
            usage: self.usage,
            unreadable: None,
        }
    }
}

enum Arguments {
    Object(Value),
    /// Why the text is no usable input.
    Invalid(String),
}

fn parse_arguments(text: &str) -> Arguments {
    if text.trim().is_empty() {
        return Arguments::Object(Value::Object(Default::default()));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(value) if value.is_object() => Arguments::Object(value),
        Ok(_) => Arguments::Invalid("the arguments are not a JSON object".to_owned()),
        Err(err) => Arguments::Invalid(format!("the arguments are not valid JSON: {err}")),
    }
}

/// The ids of a turn's calls. An id the server sent is kept when the wire can carry it back;
/// a missing, empty, odd (spaces, too long) or repeated one is replaced by `call_` and 24
/// letters and digits, derived from the completion and the call so that reading the same
/// stream twice gives the same turn.
struct CallIds<'a> {
    completion_id: &'a str,
    used: HashSet<String>,
}

impl<'a> CallIds<'a> {
    fn new(completion_id: &'a str) -> CallIds<'a> {
        CallIds {
            completion_id,
            used: HashSet::new(),
        }
    }

    fn assign(&mut self, wire_id: Option<&str>, position: usize, call: &PartialCall) -> String {
        let id = match wire_id {
            Some(id) if is_valid_id(id) && !self.used.contains(id) => id.to_owned(),
            _ => self.made_up(position, call),
        };
        self.used.insert(id.clone());
        id
    }

    fn made_up(&self, position: usize, call: &PartialCall) -> String {
        const ALPHANUMERIC: &[u8] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        (0u32..)
            .map(|attempt| {
                let digest = Sha256::new()
                    .chain_update(self.completion_id.as_bytes())
                    .chain_update(position.to_le_bytes())
                    .chain_update(attempt.to_le_bytes())
                    .chain_update(call.name.as_bytes())
                    .chain_update([0])
                    .chain_update(call.arguments.as_bytes())
                    .finalize();
                let suffix: String = digest
                    .iter()
                    .take(24)
                    .map(|byte| char::from(ALPHANUMERIC[usize::from(*byte) % ALPHANUMERIC.len()]))
                    .collect();
                format!("call_{suffix}")
            })
            .find(|id| !self.used.contains(id))
            .unwrap_or_default()
    }
}

/// What every server takes back as a `tool_call_id`.
fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
}

fn snippet(text: &str) -> String {
    const LIMIT: usize = 200;
    match text.char_indices().nth(LIMIT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Mutex;
    use std::time::Duration;

    use crate::llm::provider_checks::{self, limits, runtime};

    /// `idle` of silence at most; the request timeout and the size far off.
    /// One chunk as servers send it: the envelope around `choices`.
    fn chunk(choices: Value) -> String {
        let envelope = json!({
            "id": "chatcmpl-AbC123",
            "object": "chat.completion.chunk",
            "created": 1_745_000_000,
            "model": "gpt-test",
            "system_fingerprint": "fp_0123",
            "choices": choices,
        });
        format!("data: {envelope}\n\n")
    }

    fn delta(delta: Value) -> String {
        chunk(json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}]))
    }

    fn finish(reason: &str) -> String {
        chunk(json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": reason}]))
    }

    fn usage(prompt: u64, completion: u64, cached: u64) -> String {
        let envelope = json!({
            "id": "chatcmpl-AbC123",
            "object": "chat.completion.chunk",
            "created": 1_745_000_000,
            "model": "gpt-test",
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached}
            }
        });
        format!("data: {envelope}\n\n")
    }

    const DONE: &str = "data: [DONE]\n\n";

    fn role() -> String {
        delta(json!({"role": "assistant", "content": ""}))
    }

    /// The first fragment of a call, as OpenAI sends it.
    fn call_start(index: u64, id: &str, name: &str) -> String {
        delta(json!({"tool_calls": [{
            "index": index, "id": id, "type": "function",
            "function": {"name": name, "arguments": ""}
        }]}))
    }

    /// A later fragment: only the index and a piece of the arguments.
    fn call_arguments(index: u64, piece: &str) -> String {
        delta(json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    }

    fn tool_fragment(fragment: Value) -> String {
        delta(json!({ "tool_calls": [fragment] }))
    }

    async fn read_chunks(chunks: Vec<Vec<u8>>) -> Result<Turn, StreamFailure> {
        read_turn(
            provider_checks::body(chunks),
            limits(Duration::from_secs(5)),
            &|_| {},
        )
        .await
    }

    fn read(stream: &str) -> Result<Turn, StreamFailure> {
        runtime().block_on(read_chunks(vec![stream.as_bytes().to_vec()]))
    }

    fn read_ok(stream: &str) -> Turn {
        read(stream).unwrap_or_else(|err| panic!("{err:?}"))
    }

    /// Every way of cutting the stream in two yields the same turn as reading it whole.
    fn assert_split_invariant(stream: &str) -> Turn {
        let bytes = stream.as_bytes();
        let rt = runtime();
        let whole = rt.block_on(read_chunks(vec![bytes.to_vec()]));
        for split in 1..bytes.len() {
            let parts = vec![bytes[..split].to_vec(), bytes[split..].to_vec()];
            assert_eq!(
                rt.block_on(read_chunks(parts)),
                whole,
                "split at byte {split}"
            );
        }
        whole.unwrap_or_else(|err| panic!("{err:?}"))
    }

    fn calls(turn: &Turn) -> Vec<(String, String, Value)> {
        turn.tool_calls()
            .into_iter()
            .map(|call| (call.id, call.name, call.input))
            .collect()
    }

    fn started(stream: &str) -> Vec<String> {
        events(stream)
            .into_iter()
            .filter_map(|event| match event {
                ProviderEvent::ToolCallStarted { name } => Some(name),
                _ => None,
            })
            .collect()
    }

    /// What reading `stream` reported.
    fn events(stream: &str) -> Vec<ProviderEvent> {
        let seen = Mutex::new(Vec::new());
        let on_event = |event: ProviderEvent| seen.lock().expect("lock").push(event);
        let bytes =
            futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(stream.to_owned()))]);
        runtime()
            .block_on(read_turn(bytes, limits(Duration::from_secs(5)), &on_event))
            .expect("turn");
        seen.into_inner().expect("lock")
    }

    #[test]
    fn a_text_answer_assembles_at_every_split_point() {
        let stream = [
            role(),
            delta(json!({"content": "Hello"})),
            delta(json!({"content": ", wörld — "})),
            delta(json!({"content": "done."})),
            finish("stop"),
            usage(120, 9, 0),
            DONE.to_owned(),
        ]
        .concat();
        let turn = assert_split_invariant(&stream);
        assert_eq!(turn.text(), "Hello, wörld — done.");
        assert_eq!(turn.stop_reason, Some(StopReason::EndTurn));
        assert!(turn.tool_calls().is_empty());
        assert_eq!(
            turn.usage,
            Some(Usage {
                input_tokens: 120,
                output_tokens: 9,
                ..Usage::default()
            })
        );
    }

    #[test]
    fn parallel_calls_interleaved_by_index_assemble_at_every_split_point() {
        let stream = [
            role(),
            delta(json!({"content": "Two lookups."})),
            call_start(0, "call_Aa1", "read_file"),
            call_start(1, "call_Bb2", "grep"),
            call_arguments(0, "{\"pa"),
            call_arguments(1, "{\"pattern\": "),
            call_arguments(0, "th\": \"src/main.rs\"}"),
            call_arguments(1, "\"fn main\"}"),
            finish("tool_calls"),
            usage(300, 40, 0),
            DONE.to_owned(),
        ]
        .concat();
        let turn = assert_split_invariant(&stream);
        assert_eq!(turn.text(), "Two lookups.");
        assert_eq!(
            calls(&turn),
            vec![
                (
                    "call_Aa1".to_owned(),
                    "read_file".to_owned(),
                    json!({"path": "src/main.rs"})
                ),
                (
                    "call_Bb2".to_owned(),
                    "grep".to_owned(),
                    json!({"pattern": "fn main"})
                ),
            ]
        );
        assert_eq!(turn.stop_reason, Some(StopReason::ToolUse));
        assert!(turn.truncated_tool_calls.is_empty());
    }

    #[test]
    fn comment_lines_between_events_are_skipped() {
        let stream = [
            ": OPENROUTER PROCESSING\n\n".to_owned(),
            role(),
            ": OPENROUTER PROCESSING\n\n".to_owned(),
            delta(json!({"content": "ok"})),
            finish("stop"),
            DONE.to_owned(),
        ]
        .concat();
        assert_eq!(assert_split_invariant(&stream).text(), "ok");
    }

    #[test]
    fn chunks_without_choices_are_skipped_azure_filter_first_and_usage_last() {
        let azure_filter = format!(
            "data: {}\n\n",
            json!({"id": "", "object": "", "created": 0, "model": "", "choices": [],
                   "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}]})
        );
        let stream = [
            azure_filter,
            role(),
            delta(json!({"content": "fine"})),
            finish("stop"),
            usage(50, 2, 0),
            DONE.to_owned(),
        ]
        .concat();
        let turn = read_ok(&stream);
        assert_eq!(turn.text(), "fine");
        assert_eq!(turn.usage.map(|usage| usage.output_tokens), Some(2));
    }

    #[test]
    fn an_empty_usage_object_erases_nothing() {
        let empty_usage = format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-AbC123", "choices": [], "usage": {}})
        );
        let stream = [
            role(),
            delta(json!({"content": "x"})),
            finish("stop"),
            usage(70, 3, 0),
            empty_usage,
            DONE.to_owned(),
        ]
        .concat();
        assert_eq!(
            read_ok(&stream).usage.map(|usage| usage.total_input()),
            Some(70)
        );
    }

    #[test]
    fn usage_inside_the_choice_is_read() {
        let kimi = chunk(json!([{"index": 0, "delta": {}, "finish_reason": "stop",
            "usage": {"prompt_tokens": 33, "completion_tokens": 4, "total_tokens": 37}}]));
        let stream = [
            role(),
            delta(json!({"content": "x"})),
            kimi,
            DONE.to_owned(),
        ]
        .concat();
        let turn = read_ok(&stream);
        let usage = turn.usage.expect("usage");
        assert_eq!((usage.input_tokens, usage.output_tokens), (33, 4));
    }

    #[test]
    fn counts_beyond_any_model_are_clamped() {
        let usage = chunk(json!([{"index": 0, "delta": {}, "finish_reason": "stop",
            "usage": {"prompt_tokens": u64::MAX, "completion_tokens": u64::MAX}}]));
        let stream = [
            role(),
            delta(json!({"content": "x"})),
            usage,
            DONE.to_owned(),
        ]
        .concat();
        let usage = read_ok(&stream).usage.expect("usage");
        let most = u64::from(u32::MAX);
        assert_eq!((usage.input_tokens, usage.output_tokens), (most, most));
    }

    #[test]
    fn absent_usage_is_no_usage_not_zero_tokens() {
        let stream = [
            role(),
            delta(json!({"content": "x"})),
            finish("stop"),
            DONE.to_owned(),
        ]
        .concat();
        assert_eq!(read_ok(&stream).usage, None);
    }

    #[test]
    fn llama_cpp_python_reports_no_usage_although_asked() {
        let recorded = include_str!("../../../tests/data/llamacpp-openai/short_stream_stop.sse");
        let turn = read_ok(recorded);
        assert!(!turn.text().is_empty());
        assert_eq!(
            turn.usage, None,
            "the turn engine estimates what was not counted"
        );
    }

    #[test]
    fn cached_prompt_tokens_are_read_from_the_cache_not_counted_twice() {
        let stream = [
            role(),
            delta(json!({"content": "x"})),
            finish("stop"),
            usage(2_000, 15, 1_536),
            DONE.to_owned(),
        ]
        .concat();
        assert_eq!(
            read_ok(&stream).usage,
            Some(Usage {
                input_tokens: 464,
                output_tokens: 15,
                cache_read_tokens: 1_536,
                ..Usage::default()
            })
        );
    }

    #[test]
    fn an_error_object_in_a_200_stream_is_an_api_error() {
        let error = format!(
            "data: {}\n\n",
            json!({"error": {"code": 500, "message": "Context size has been exceeded.", "type": "server_error"}})
        );
        let stream = [role(), delta(json!({"content": "partial"})), error].concat();
        assert_eq!(
            read(&stream),
            Err(StreamFailure::ApiError {
                error_type: "server_error".to_owned(),
                message: "Context size has been exceeded.".to_owned(),
                code: Some("500".to_owned()),
            })
        );
    }

    #[test]
    fn an_error_event_is_an_api_error() {
        let stream = [
            role(),
            "event: error\ndata: upstream overloaded\n\n".to_owned(),
        ]
        .concat();
        assert_eq!(
            read(&stream),
            Err(StreamFailure::ApiError {
                error_type: "unknown_error".to_owned(),
                message: "upstream overloaded".to_owned(),
                code: None,
            })
        );
    }

    #[test]
    fn reasoning_deltas_are_never_part_of_the_answer() {
        let stream = [
            role(),
            delta(json!({"content": null, "reasoning_content": "Let me think about "})),
            delta(json!({"content": null, "reasoning": "the question."})),
            delta(json!({"content": "The answer."})),
            finish("stop"),
            DONE.to_owned(),
        ]
        .concat();
        assert_eq!(read_ok(&stream).text(), "The answer.");
    }

    #[test]
    fn a_new_id_at_an_index_already_holding_a_call_starts_another_call() {
        let stream = [
            role(),
            tool_fragment(json!({"index": 0, "id": "call_one", "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}})),
            tool_fragment(json!({"index": 0, "id": "call_two", "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\":\"b\"}"}})),
            finish("tool_calls"),
            DONE.to_owned(),
        ]
        .concat();
        let turn = read_ok(&stream);
        assert_eq!(
            calls(&turn),
            vec![
                (
                    "call_one".to_owned(),
                    "read_file".to_owned(),
                    json!({"path": "a"})
                ),
                (
                    "call_two".to_owned(),
                    "read_file".to_owned(),
                    json!({"path": "b"})
                ),
            ]
        );
    }

    #[test]
    fn fragments_without_index_belong_to_the_last_call_unless_their_id_is_new() {
        let stream = [
            role(),
            tool_fragment(json!({"id": "g1", "type": "function",
                "function": {"name": "grep", "arguments": "{\"pattern\":"}})),
            tool_fragment(json!({"function": {"arguments": "\"x\"}"}})),
            tool_fragment(json!({"id": "g2", "type": "function",
                "function": {"name": "list_files", "arguments": "{}"}})),
            finish("tool_calls"),
            DONE.to_owned(),
        ]
        .concat();
        assert_eq!(
            calls(&read_ok(&stream)),
            vec![
                ("g1".to_owned(), "grep".to_owned(), json!({"pattern": "x"})),
                ("g2".to_owned(), "list_files".to_owned(), json!({})),
            ]
        );
    }

    #[test]
    fn indexes_starting_at_one_are_only_keys() {
        let stream = [
            role(),
            call_start(1, "call_c1", "list_files"),
            call_arguments(1, "{}"),
            finish("tool_calls"),
            DONE.to_owned(),
        ]
        .concat();
        assert_eq!(
            calls(&read_ok(&stream)),
            vec![("call_c1".to_owned(), "list_files".to_owned(), json!({}))]
        );
    }

    #[test]
    fn the_first_non_empty_name_wins_whether_late_repeated_or_blanked() {
        let late = [
            role(),
            tool_fragment(
                json!({"index": 0, "id": "call_l", "function": {"arguments": "{\"path\":"}}),
            ),
            tool_fragment(
                json!({"index": 0, "function": {"name": "read_file", "arguments": "\"a\"}"}}),
            ),
            finish("tool_calls"),
            DONE.to_owned(),
        ]
        .concat();
        assert_eq!(calls(&read_ok(&late))[0].1, "read_file");
        let repeated_then_blank = [
            role(),
            tool_fragment(json!({"index": 0, "id": "call_r", "type": "function", "function": {"name": "grep", "arguments": ""}})),
            tool_fragment(json!({"index": 0, "function": {"name": "grep", "arguments": "{\"pattern\":"}})),
            tool_fragment(json!({"index": 0, "function": {"name": "", "arguments": "\"y\"}"}})),
            finish("tool_calls"),
            DONE.to_owned(),
        ]
        .concat();
        assert_eq!(
            calls(&read_ok(&repeated_then_blank)),
            vec![(
                "call_r".to_owned(),
                "grep".to_owned(),
                json!({"pattern": "y"})
            )]
        );
    }

    #[test]
    fn tool_starts_are_reported_once_per_call_when_the_name_is_known() {
        let stream = [
            role(),
            tool_fragment(json!({"index": 0, "id": "call_1", "function": {"arguments": ""}})),
            tool_fragment(json!({"index": 0, "function": {"name": "grep", "arguments": "{"}})),
            tool_fragment(json!({"index": 0, "function": {"name": "grep", "arguments": "}"}})),
            call_start(1, "call_2", "list_files"),
            call_arguments(1, "{}"),
            tool_fragment(json!({"index": 2, "id": "call_3", "function": {"arguments": "{}"}})),
            finish("tool_calls"),
            DONE.to_owned(),
        ]
        .concat();
        assert_eq!(
            started(&stream),
            vec!["grep".to_owned(), "list_files".to_owned(), String::new()]
        );
    }

    #[test]
    fn whole_arguments_resent_in_every_chunk_replace_instead_of_appending() {
        let stream = [
            role(),
            call_start(0, "call_d", "read_file"),
            call_arguments(0, "{\"path\": \"sr"),
            call_arguments(0, "{\"path\": \"src/ma"),
            call_arguments(0, "{\"path\": \"src/main.rs\"}"),
            finish("tool_calls"),
            DONE.to_owned(),
        ]
        .concat();
        assert_eq!(
            calls(&read_ok(&stream))[0].2,
            json!({"path": "src/main.rs"})
        );
        let grown: usize = events(&stream)
            .iter()
            .filter_map(|event| match event {
                ProviderEvent::ToolInputDelta { bytes } => Some(*bytes),
                _ => None,
            })
            .sum();
        assert_eq!(
            grown,
            "{\"path\": \"src/main.rs\"}".len(),
            "the input's growth is reported, a resent piece not twice"
        );
    }

    #[test]
    fn all_arguments_in_one_chunk_with_the_finish_in_the_same_chunk() {
        let stream = [
            role(),
            chunk(json!([{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_w",
                "type": "function", "function": {"name": "grep", "arguments": "{\"pattern\":\"z\"}"}}]},
                "finish_reason": "tool_calls"}])),
            DONE.to_owned(),
        ]
        .concat();
        let turn = read_ok(&stream);
        assert_eq!(
            calls(&turn),
            vec![(
                "call_w".to_owned(),
                "grep".to_owned(),
                json!({"pattern": "z"})
            )]
        );
        assert_eq!(turn.stop_reason, Some(StopReason::ToolUse));
    }

    #[test]
    fn empty_arguments_mean_an_empty_object() {
        let stream = [
            role(),
            call_start(0, "call_e", "list_files"),
            finish("tool_calls"),
            DONE.to_owned(),
        ]
        .concat();
        let turn = read_ok(&stream);
        assert_eq!(turn.tool_calls()[0].input, json!({}));
        assert_eq!(turn.tool_calls()[0].input_error, None);
    }

    #[test]
    fn arguments_that_are_not_a_json_object_become_an_input_error_not_a_crash() {
        let stream = [
            role(),
            call_start(0, "call_bad", "grep"),
            call_arguments(0, "{\"pattern\": \"x\",}"),
            call_start(1, "call_list", "list_files"),
            call_arguments(1, "[\"src\"]"),
            finish("tool_calls"),
            DONE.to_owned(),
        ]
        .concat();
        let turn = read_ok(&stream);
        let calls = turn.tool_calls();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].input, json!("{\"pattern\": \"x\",}"));
        let why = calls[0].input_error.as_deref().expect("an input error");
        assert!(why.starts_with("the arguments are not valid JSON"), "{why}");
        assert_eq!(calls[1].input, json!("[\"src\"]"));
        assert_eq!(
            calls[1].input_error.as_deref(),
            Some("the arguments are not a JSON object")
        );
        assert_eq!(turn.stop_reason, Some(StopReason::ToolUse));
    }

    #[test]
    fn missing_empty_odd_and_repeated_ids_are_replaced_by_valid_ones() {
        let stream = [
            role(),
            tool_fragment(json!({"index": 0, "type": "function", "function": {"name": "a", "arguments": "{}"}})),
            tool_fragment(json!({"index": 1, "id": "", "type": "function", "function": {"name": "b", "arguments": "{}"}})),
            tool_fragment(json!({"index": 2, "id": "call with spaces", "type": "function", "function": {"name": "c", "arguments": "{}"}})),
            tool_fragment(json!({"index": 3, "id": "call_same", "type": "function", "function": {"name": "d", "arguments": "{}"}})),
            tool_fragment(json!({"index": 4, "id": "call_same", "type": "function", "function": {"name": "e", "arguments": "{}"}})),
            finish("tool_calls"),
            DONE.to_owned(),
        ]
        .concat();
        let turn = read_ok(&stream);
        let ids: Vec<String> = turn.tool_calls().into_iter().map(|call| call.id).collect();
        assert_eq!(ids.len(), 5, "{ids:?}");
        assert_eq!(ids[3], "call_same", "a valid id is kept");
        for (position, id) in ids
            .iter()
            .enumerate()
            .filter(|(position, _)| *position != 3)
        {
            let suffix = id.strip_prefix("call_").unwrap_or_else(|| panic!("{id}"));
            assert_eq!(suffix.len(), 24, "{id}");
            assert!(suffix.bytes().all(|b| b.is_ascii_alphanumeric()), "{id}");
            assert!(
                !ids[..position].contains(id),
                "ids are distinct within the turn: {ids:?}"
            );
        }
        assert_eq!(read_ok(&stream), turn, "the same stream gives the same ids");
    }

    #[test]
    fn calls_decide_the_stop_reason_whatever_the_finish_reason_says() {
        let call = [
            role(),
            call_start(0, "call_s", "list_files"),
            call_arguments(0, "{}"),
        ]
        .concat();
        for ending in [
            [finish("stop"), DONE.to_owned()].concat(),
            [finish(""), DONE.to_owned()].concat(),
            [finish("tool_calls"), finish("stop"), DONE.to_owned()].concat(),
        ] {
            let turn = read_ok(&format!("{call}{ending}"));
            assert_eq!(turn.stop_reason, Some(StopReason::ToolUse), "{ending}");
            assert_eq!(turn.tool_calls().len(), 1, "{ending}");
        }
        let no_calls = [
            role(),
            delta(json!({"content": "hi"})),
            finish("tool_calls"),
            DONE.to_owned(),
        ]
        .concat();
        assert_eq!(read_ok(&no_calls).stop_reason, Some(StopReason::EndTurn));
    }

    #[test]
    fn length_in_the_middle_of_a_call_truncates_it_and_it_never_runs() {
        let stream = [
            role(),
            delta(json!({"content": "Writing it."})),
            call_start(0, "call_ok", "list_files"),
            call_arguments(0, "{}"),
            call_start(1, "call_cut", "write_file"),
            call_arguments(1, "{\"path\": \"a.rs\", \"content\": \"fn ma"),
            finish("length"),
            usage(10, 4096, 0),
            DONE.to_owned(),
        ]
        .concat();
        let turn = assert_split_invariant(&stream);
        assert_eq!(turn.stop_reason, Some(StopReason::MaxTokens));
        assert_eq!(turn.truncated_tool_calls, vec!["write_file".to_owned()]);
        assert_eq!(
            calls(&turn),
            vec![("call_ok".to_owned(), "list_files".to_owned(), json!({}))]
        );
    }

    #[test]
    fn a_stream_ending_after_the_finish_reason_without_done_is_complete() {
        let stream = [role(), delta(json!({"content": "whole"})), finish("stop")].concat();
        let turn = read_ok(&stream);
        assert_eq!(turn.text(), "whole");
        let without_blank_line = format!("{stream}data: [DONE]");
        assert_eq!(read_ok(&without_blank_line), turn);
    }

    #[test]
    fn a_stream_ending_before_any_finish_reason_is_incomplete() {
        let stream = [
            role(),
            call_start(0, "call_x", "grep"),
            call_arguments(0, "{\"pattern\":"),
        ]
        .concat();
        assert_eq!(
            read(&stream),
            Err(StreamFailure::EndedEarly(
                "the stream ended with no finish reason".to_owned()
            ))
        );
    }

    #[test]
    fn done_without_a_finish_reason_is_incomplete_even_with_whole_calls() {
        let done_early = StreamFailure::EndedEarly(
            "the stream ended with [DONE] and no finish reason".to_owned(),
        );
        // What llama-cpp-python sent when another request interrupted the answer.
        assert_eq!(
            read(&llamacpp_recording(
                "interrupted_done_without_finish_reason.sse"
            )),
            Err(done_early.clone())
        );
        let whole_call = [
            role(),
            call_start(0, "call_s", "list_files"),
            call_arguments(0, "{}"),
            DONE.to_owned(),
        ]
        .concat();
        assert_eq!(read(&whole_call), Err(done_early));
    }

    fn llamacpp_recording(name: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/llamacpp-openai")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
    }

    #[test]
    fn llama_cpp_pythons_recorded_answers_read_with_their_pings_and_no_usage() {
        let short = assert_split_invariant(&llamacpp_recording("short_stream_stop.sse"));
        assert_eq!(short.text(), "Say hello. mendatanguser");
        // 70 KB: read whole, not at each of its split points.
        let long = read_ok(&llamacpp_recording("ping_then_stream_length.sse"));
        assert!(
            long.text().starts_with("you are the planning stage:"),
            "{long:?}"
        );
        for turn in [short, long] {
            assert_eq!(turn.stop_reason, Some(StopReason::MaxTokens));
            assert_eq!(turn.usage, None);
        }
    }

    #[test]
    fn llama_servers_error_field_is_an_api_error() {
        let stream = "error: {\"code\":400,\"message\":\"the request exceeds the available \
                      context size, try increasing it\",\"type\":\"exceed_context_size_error\"}\n\n\
                      data: [DONE]\n\n";
        assert_eq!(
            read(stream),
            Err(StreamFailure::ApiError {
                error_type: "exceed_context_size_error".to_owned(),
                message: "the request exceeds the available context size, try increasing it"
                    .to_owned(),
                code: Some("400".to_owned()),
            })
        );
    }

    #[test]
    fn a_chunk_that_is_not_json_is_a_protocol_failure() {
        let stream = [role(), "data: {not json\n\n".to_owned()].concat();
        assert!(
            matches!(read(&stream), Err(StreamFailure::Protocol(_))),
            "{:?}",
            read(&stream)
        );
    }

    #[test]
    fn an_answer_sent_whole_despite_stream_true_is_read() {
        let body = json!({
            "id": "chatcmpl-whole", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "Both.",
                "tool_calls": [
                    {"type": "function", "function": {"name": "grep", "arguments": "{\"pattern\":\"a\"}"}},
                    {"type": "function", "function": {"name": "list_files", "arguments": "{}"}}
                ]
            }}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
        });
        let turn = read_whole(&body.to_string(), &|_| {}).expect("turn");
        assert_eq!(turn.text(), "Both.");
        let names: Vec<String> = turn
            .tool_calls()
            .into_iter()
            .map(|call| call.name)
            .collect();
        assert_eq!(names, vec!["grep".to_owned(), "list_files".to_owned()]);
        assert_eq!(turn.stop_reason, Some(StopReason::ToolUse));
        assert_eq!(turn.usage.map(|usage| usage.output_tokens), Some(3));
        assert!(matches!(
            read_whole(
                r#"{"error":{"message":"nope","type":"server_error"}}"#,
                &|_| {}
            ),
            Err(StreamFailure::ApiError { .. })
        ));
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
            "data: {\"choices\":[]}\n\n".to_owned(),
            delta(json!({})),
            delta(json!({"content": ""})),
            delta(json!({"tool_calls": []})),
        ];
        provider_checks::assert_empty_pieces_are_no_progress(
            delta(json!({"content": "Hel"})),
            empties,
            |body, limits| async move { read_turn(body, limits, &|_| {}).await },
        );
    }

    #[test]
    fn more_calls_than_a_turn_may_hold_fail_and_name_the_count() {
        let calls: Vec<Value> = (0..=MAX_CALLS_PER_TURN)
            .map(|index| json!({"index": index, "id": format!("call_{index}"), "type": "function", "function": {"name": "grep", "arguments": "{}"}}))
            .collect();
        let stream =
            delta(json!({"tool_calls": calls})) + &finish("tool_calls") + "data: [DONE]\n\n";
        let result = read(&stream);
        assert!(
            matches!(&result, Err(StreamFailure::Protocol(message)) if message.contains(&format!("{}", MAX_CALLS_PER_TURN + 1)) && message.contains(&MAX_CALLS_PER_TURN.to_string())),
            "{result:?}"
        );
        let calls: Vec<Value> = (0..MAX_CALLS_PER_TURN)
            .map(|index| json!({"index": index, "id": format!("call_{index}"), "type": "function", "function": {"name": "grep", "arguments": "{}"}}))
            .collect();
        let stream =
            delta(json!({"tool_calls": calls})) + &finish("tool_calls") + "data: [DONE]\n\n";
        assert_eq!(
            read(&stream).expect("a full turn").tool_calls().len(),
            MAX_CALLS_PER_TURN
        );
    }
}
