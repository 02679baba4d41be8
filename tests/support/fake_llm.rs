//! An in-process fake model server for integration tests, speaking one of four real wire
//! protocols ([`Wire`]): the Anthropic Messages API (`POST /v1/messages`, named SSE events),
//! OpenAI's chat completions (`POST /v1/chat/completions`, unnamed SSE chunks ending with
//! `[DONE]`, see `fake_openai.rs`), Ollama's native chat (`POST /api/chat`, NDJSON, see
//! `fake_ollama.rs`), or OpenAI's chat completions as llama-cpp-python's server speaks and
//! behaves (its framing, keep-alive pings, one slot whose next request interrupts the answer in
//! flight, its context window: see `fake_llamacpp.rs`). A scripted [`TurnBuilder`] is rendered
//! in the server's wire.
//!
//! The server listens on `127.0.0.1:0` and answers over HTTP/1.1 with chunked transfer
//! encoding. The response bytes are deliberately cut at odd,
//! varying boundaries (deterministic pseudo-random chunk sizes of 1..=23
//! bytes), each piece sent as its own body frame, so that clients have to
//! reassemble events, lines and even UTF-8 characters across reads.
//!
//! Replies are scripted: every request to `/v1/messages` pops the next queued
//! [`Reply`]. When the queue is empty the server answers 500 with a message
//! naming the request, so a test fails loudly instead of hanging.
//!
//! ```ignore
//! let server = FakeLlm::start().await;
//! server.push(TurnBuilder::new().text("Hello!").usage(12, 3).reply());
//! // ... point the client at server.base_url() and run it ...
//! let requests = server.wait_for_requests(1).await;
//! assert_eq!(requests[0].header("anthropic-version"), Some("2023-06-01"));
//! ```
//!
//! None of the waiting helpers have a built-in timeout (a real-time timeout
//! would misfire in tests that pause tokio's clock); wrap them in
//! `tokio::time::timeout` where a hang is possible.

#![allow(dead_code)]

#[path = "fake_llamacpp.rs"]
pub mod llamacpp;
#[path = "fake_ollama.rs"]
pub mod ollama;
#[path = "fake_openai.rs"]
pub mod openai;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderName, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio::task::{JoinHandle, JoinSet};

/// The `request_id` used in error bodies and the `request-id` header.
pub const FAKE_REQUEST_ID: &str = "req_fake_0123456789abcdef";
/// Model name reported by [`TurnBuilder`] unless overridden.
pub const DEFAULT_MODEL: &str = "claude-fake-1";
/// Message id reported by [`TurnBuilder`] unless overridden.
pub const DEFAULT_MESSAGE_ID: &str = "msg_fake_01";
/// Seed used by [`FakeLlm::start`] for chunk boundaries.
pub const DEFAULT_SEED: u64 = 0x5eed_f00d;
/// Largest body frame the server sends for streamed replies.
pub const MAX_CHUNK: usize = 23;

// ---------------------------------------------------------------------------
// Replies and events
// ---------------------------------------------------------------------------

/// One named Server-Sent Event.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub event: String,
    pub data: Value,
}

impl SseEvent {
    pub fn new(event: impl Into<String>, data: Value) -> SseEvent {
        SseEvent {
            event: event.into(),
            data,
        }
    }

    /// The wire form: `event: NAME\ndata: JSON\n\n`.
    pub fn to_sse(&self) -> String {
        format!("event: {}\ndata: {}\n\n", self.event, self.data)
    }
}

/// The exact bytes the server sends for these events (before chunking).
pub fn serialize_events(events: &[SseEvent]) -> String {
    events.iter().map(SseEvent::to_sse).collect()
}

/// The protocol a fake server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    Anthropic,
    OpenAi,
    Ollama,
    /// llama-cpp-python's server (see `fake_llamacpp.rs`): it also answers `GET /v1/models`
    /// and `GET /props`.
    LlamaCpp,
}

impl Wire {
    /// The one path the server answers.
    pub fn path(self) -> &'static str {
        match self {
            Wire::Anthropic => "/v1/messages",
            Wire::OpenAi | Wire::LlamaCpp => "/v1/chat/completions",
            Wire::Ollama => "/api/chat",
        }
    }
}

/// A scripted answer to one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A whole turn, rendered in the server's wire and split at odd byte boundaries.
    Turn(TurnBuilder),
    /// Like [`Reply::Turn`], but the body then stays open until the client goes away.
    StallTurn(TurnBuilder),
    /// 200 with this content type and these bytes verbatim (split at odd boundaries).
    Raw {
        content_type: &'static str,
        bytes: Vec<u8>,
    },
    /// 200, `text/event-stream`, the events serialized as SSE and split at
    /// odd byte boundaries; the body ends after the last event.
    Stream(Vec<SseEvent>),
    /// Like [`Reply::Stream`], but after the events the body stays open until
    /// the client goes away. Each such disconnect is counted; see
    /// [`FakeLlm::wait_for_disconnect`].
    Stall(Vec<SseEvent>),
    /// 200, `text/event-stream`, these bytes verbatim (still split at odd
    /// boundaries). See [`raw_sse_file`].
    RawSse(Vec<u8>),
    /// A non-streaming answer: status, extra headers, JSON body.
    Status {
        status: u16,
        headers: Vec<(String, String)>,
        body: Value,
    },
    /// The inner reply, sent only once the test releases it (see [`Reply::held`]); until then
    /// the request waits with no response headers.
    Held(Arc<Notify>, Box<Reply>),
    /// A turn whose body stops after the event carrying `pause_after` until the test releases
    /// it (see [`TurnBuilder::paused_after`]).
    PausedTurn {
        turn: TurnBuilder,
        pause_after: String,
        release: Arc<Notify>,
    },
    /// The inner reply, sent once `latency` has passed since the request arrived: a model's
    /// time to its first byte (see [`Reply::delayed`]). Outside any [`Reply::Held`].
    Delayed(std::time::Duration, Box<Reply>),
    /// A turn whose events go out one per body frame, each `interval` after the one before,
    /// counted from the first so the pace holds on average whatever the timer's grain: a
    /// model streaming at a given speed (see [`TurnBuilder::paced`]).
    PacedTurn {
        turn: TurnBuilder,
        interval: std::time::Duration,
    },
}

impl Reply {
    /// This reply, sent only after `latency` (a model's time to its first byte).
    pub fn delayed(self, latency: std::time::Duration) -> Reply {
        Reply::Delayed(latency, Box::new(self))
    }

    /// This reply, held back until the returned handle's `notify_one()` (which may come before
    /// or after the request arrives).
    pub fn held(self) -> (Reply, Arc<Notify>) {
        let release = Arc::new(Notify::new());
        (Reply::Held(Arc::clone(&release), Box::new(self)), release)
    }

    /// Adds a response header to a [`Reply::Status`] (e.g. `retry-after`).
    ///
    /// # Panics
    /// On any other variant, so a test can't silently lose the header.
    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        match &mut self {
            Reply::Status { headers, .. } => headers.push((name.to_string(), value.to_string())),
            other => panic!("Reply::with_header only applies to Reply::Status, not {other:?}"),
        }
        self
    }

    /// Turns a [`Reply::Stream`] into a [`Reply::Stall`] with the same events.
    pub fn stalled(self) -> Reply {
        match self {
            Reply::Stream(events) | Reply::Stall(events) => Reply::Stall(events),
            other => panic!("Reply::stalled only applies to event streams, not {other:?}"),
        }
    }

    fn validate(&self) {
        if let Reply::Status {
            status, headers, ..
        } = self
        {
            assert!(
                StatusCode::from_u16(*status).is_ok(),
                "fake server: invalid HTTP status {status}"
            );
            for (name, value) in headers {
                assert!(
                    HeaderName::from_bytes(name.as_bytes()).is_ok()
                        && HeaderValue::from_str(value).is_ok(),
                    "fake server: invalid header {name:?}: {value:?}"
                );
            }
        }
    }
}

/// The real API's error shape:
/// `{"type":"error","error":{"type":..,"message":..},"request_id":..}`.
pub fn error_body(error_type: &str, message: &str) -> Value {
    json!({
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": FAKE_REQUEST_ID,
    })
}

/// A non-streaming HTTP error with the real API's JSON error body.
pub fn error_reply(status: u16, error_type: &str, message: &str) -> Reply {
    Reply::Status {
        status,
        headers: Vec::new(),
        body: error_body(error_type, message),
    }
}

/// 529 `overloaded_error`, as the API sends under load.
pub fn overloaded() -> Reply {
    error_reply(529, "overloaded_error", "Overloaded")
}

/// 429 `rate_limit_error` with a `retry-after` header (seconds).
pub fn rate_limited(retry_after_secs: u64) -> Reply {
    error_reply(
        429,
        "rate_limit_error",
        "This request would exceed your organization's rate limit. Please try again later.",
    )
    .with_header("retry-after", &retry_after_secs.to_string())
}

/// The SSE `error` event the API sends when a stream fails midway.
pub fn error_event(error_type: &str, message: &str) -> SseEvent {
    SseEvent::new(
        "error",
        json!({"type": "error", "error": {"type": error_type, "message": message}}),
    )
}

/// The given events, then an `event: error`, then the body ends.
pub fn mid_stream_error(partial: Vec<SseEvent>, error_type: &str, message: &str) -> Reply {
    let mut events = partial;
    events.push(error_event(error_type, message));
    Reply::Stream(events)
}

/// A turn cut off by `max_tokens` in the middle of a tool call: a short text
/// block, then a `tool_use` block whose `input_json_delta`s stop after
/// `partial_json` with no `content_block_stop`, then `message_delta` with
/// stop reason `"max_tokens"` and `message_stop` (like the recorded
/// `incomplete_partial_json_response.sse`).
pub fn truncated_tool_use(id: &str, name: &str, partial_json: &str) -> Reply {
    TurnBuilder::new()
        .text("I'll do that now.")
        .truncated_tool_use(id, name, partial_json)
        .reply()
}

/// Serves a recorded `.sse` file verbatim. Relative paths are resolved
/// against the crate root.
///
/// # Panics
/// If the file can't be read.
pub fn raw_sse_file(path: impl AsRef<Path>) -> Reply {
    let path = path.as_ref();
    let full: PathBuf = if path.is_absolute() {
        path.to_path_buf()
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
    };
    match std::fs::read(&full) {
        Ok(bytes) => Reply::RawSse(bytes),
        Err(err) => panic!("fake server: can't read {}: {err}", full.display()),
    }
}

/// One of the recorded streams in `tests/data/anthropic-sse/`, by file name.
pub fn recorded(name: &str) -> Reply {
    raw_sse_file(Path::new("tests/data/anthropic-sse").join(name))
}

// ---------------------------------------------------------------------------
// TurnBuilder
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Item {
    Text(Vec<String>),
    ToolUse {
        id: String,
        name: String,
        fragments: Vec<String>,
        finished: bool,
    },
    Ping,
    Event(SseEvent),
}

/// Builds the event stream of one assistant message, shaped like the real
/// API's: `message_start`, content blocks with increasing `index`
/// (`content_block_start`, deltas, `content_block_stop`), `message_delta`
/// with the stop reason and output tokens, `message_stop`.
#[derive(Debug, Clone)]
pub struct TurnBuilder {
    items: Vec<Item>,
    input_tokens: u64,
    output_tokens: u64,
    /// False: the OpenAI and Ollama wires count nothing, as llama.cpp's servers do.
    usage_reported: bool,
    cache_write_tokens: u64,
    cache_read_tokens: u64,
    stop_reason: Option<String>,
    model: String,
    message_id: String,
    rng: SplitMix64,
}

impl Default for TurnBuilder {
    fn default() -> Self {
        TurnBuilder::new()
    }
}

impl TurnBuilder {
    pub fn new() -> TurnBuilder {
        TurnBuilder {
            items: Vec::new(),
            input_tokens: 10,
            output_tokens: 5,
            usage_reported: true,
            cache_write_tokens: 0,
            cache_read_tokens: 0,
            stop_reason: None,
            model: DEFAULT_MODEL.to_string(),
            message_id: DEFAULT_MESSAGE_ID.to_string(),
            rng: SplitMix64(0x7e47_b10c),
        }
    }

    pub fn model(mut self, model: &str) -> Self {
        self.model = model.to_string();
        self
    }

    pub fn message_id(mut self, id: &str) -> Self {
        self.message_id = id.to_string();
        self
    }

    /// A text block; the text is streamed as several `text_delta`s cut at
    /// character boundaries. An empty string gives a block with no deltas.
    pub fn text(mut self, text: &str) -> Self {
        let pieces = split_chars(text, 1, 12, &mut self.rng);
        self.items.push(Item::Text(pieces));
        self
    }

    /// A text block streamed as exactly these `text_delta` pieces.
    pub fn text_deltas<S: Into<String>>(mut self, pieces: impl IntoIterator<Item = S>) -> Self {
        self.items
            .push(Item::Text(pieces.into_iter().map(Into::into).collect()));
        self
    }

    /// A `tool_use` block. The input is serialized the way the API does
    /// (`{"key": "value", ...}`) and streamed as `input_json_delta`s whose
    /// first `partial_json` is `""`. An empty object streams only that `""`
    /// fragment, as the real API does for argument-less calls.
    pub fn tool_use(mut self, id: &str, name: &str, input: Value) -> Self {
        let serialized = if input.as_object().is_some_and(|m| m.is_empty()) {
            String::new()
        } else {
            api_style_json(&input)
        };
        let mut fragments = vec![String::new()];
        fragments.extend(split_chars(&serialized, 3, 15, &mut self.rng));
        self.items.push(Item::ToolUse {
            id: id.to_string(),
            name: name.to_string(),
            fragments,
            finished: true,
        });
        self
    }

    /// A `tool_use` block streamed as exactly these `partial_json` fragments
    /// (nothing is prepended).
    pub fn tool_use_fragments<S: Into<String>>(
        mut self,
        id: &str,
        name: &str,
        fragments: impl IntoIterator<Item = S>,
    ) -> Self {
        self.items.push(Item::ToolUse {
            id: id.to_string(),
            name: name.to_string(),
            fragments: fragments.into_iter().map(Into::into).collect(),
            finished: true,
        });
        self
    }

    /// A `tool_use` block cut off after `partial_json` (streamed as `""` plus
    /// several fragments) with no `content_block_stop`. Makes the default
    /// stop reason `"max_tokens"`. Should be the last block.
    pub fn truncated_tool_use(mut self, id: &str, name: &str, partial_json: &str) -> Self {
        let mut fragments = vec![String::new()];
        fragments.extend(split_chars(partial_json, 3, 15, &mut self.rng));
        self.items.push(Item::ToolUse {
            id: id.to_string(),
            name: name.to_string(),
            fragments,
            finished: false,
        });
        self
    }

    /// A `ping` event at this point of the stream.
    pub fn ping(mut self) -> Self {
        self.items.push(Item::Ping);
        self
    }

    /// An arbitrary event at this point of the stream (doesn't use an index).
    pub fn event(mut self, event: SseEvent) -> Self {
        self.items.push(Item::Event(event));
        self
    }

    /// `input_tokens` goes in `message_start`, `output_tokens` in
    /// `message_delta`. Defaults: 10 and 5.
    pub fn usage(mut self, input_tokens: u64, output_tokens: u64) -> Self {
        self.input_tokens = input_tokens;
        self.output_tokens = output_tokens;
        self
    }

    /// No usage at all in the OpenAI and Ollama wires (no usage chunk, no counts), as
    /// llama.cpp's servers answer although it is asked for.
    pub fn without_usage(mut self) -> Self {
        self.usage_reported = false;
        self
    }

    /// Prompt-cache tokens in `message_start` (Anthropic's `cache_creation_input_tokens` and
    /// `cache_read_input_tokens`). Defaults: 0 and 0.
    pub fn cache_usage(mut self, write_tokens: u64, read_tokens: u64) -> Self {
        self.cache_write_tokens = write_tokens;
        self.cache_read_tokens = read_tokens;
        self
    }

    /// Defaults to `"max_tokens"` after a truncated tool call, else
    /// `"tool_use"` if there is a tool call, else `"end_turn"`.
    pub fn stop_reason(mut self, reason: &str) -> Self {
        self.stop_reason = Some(reason.to_string());
        self
    }

    fn default_stop_reason(&self) -> &'static str {
        let tool_uses = self.items.iter().filter_map(|item| match item {
            Item::ToolUse { finished, .. } => Some(*finished),
            _ => None,
        });
        let mut any_tool_use = false;
        for finished in tool_uses {
            if !finished {
                return "max_tokens";
            }
            any_tool_use = true;
        }
        if any_tool_use { "tool_use" } else { "end_turn" }
    }

    /// The whole stream, ending with `message_stop`.
    pub fn events(&self) -> Vec<SseEvent> {
        let mut events = vec![SseEvent::new(
            "message_start",
            json!({
                "type": "message_start",
                "message": {
                    "id": self.message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": self.model,
                    "content": [],
                    "stop_reason": null,
                    "stop_sequence": null,
                    "usage": {
                        "input_tokens": self.input_tokens,
                        "cache_creation_input_tokens": self.cache_write_tokens,
                        "cache_read_input_tokens": self.cache_read_tokens,
                        "output_tokens": 1,
                    },
                },
            }),
        )];
        let mut index = 0u64;
        for item in &self.items {
            match item {
                Item::Text(pieces) => {
                    events.push(block_start(index, json!({"type": "text", "text": ""})));
                    for piece in pieces {
                        events.push(block_delta(
                            index,
                            json!({"type": "text_delta", "text": piece}),
                        ));
                    }
                    events.push(block_stop(index));
                    index += 1;
                }
                Item::ToolUse {
                    id,
                    name,
                    fragments,
                    finished,
                } => {
                    events.push(block_start(
                        index,
                        json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                    ));
                    for fragment in fragments {
                        events.push(block_delta(
                            index,
                            json!({"type": "input_json_delta", "partial_json": fragment}),
                        ));
                    }
                    if *finished {
                        events.push(block_stop(index));
                    }
                    index += 1;
                }
                Item::Ping => events.push(SseEvent::new("ping", json!({"type": "ping"}))),
                Item::Event(event) => events.push(event.clone()),
            }
        }
        let stop_reason = self
            .stop_reason
            .clone()
            .unwrap_or_else(|| self.default_stop_reason().to_string());
        events.push(SseEvent::new(
            "message_delta",
            json!({
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                "usage": {"output_tokens": self.output_tokens},
            }),
        ));
        events.push(SseEvent::new(
            "message_stop",
            json!({"type": "message_stop"}),
        ));
        events
    }

    /// This turn, in the wire of the server that sends it.
    pub fn reply(&self) -> Reply {
        Reply::Turn(self.clone())
    }

    /// This turn, its body stopping after the event that carries `text` (an SSE wire) until
    /// the returned handle's `notify_one()`.
    pub fn paused_after(&self, text: &str) -> (Reply, Arc<Notify>) {
        let release = Arc::new(Notify::new());
        let reply = Reply::PausedTurn {
            turn: self.clone(),
            pause_after: text.to_owned(),
            release: Arc::clone(&release),
        };
        (reply, release)
    }

    /// This turn streamed at a model's pace: one event per body frame, each `interval` after
    /// the one before (a text of one word per [`TurnBuilder::text_deltas`] piece at
    /// `1 s / words_per_second` streams at that many words a second).
    pub fn paced(&self, interval: std::time::Duration) -> Reply {
        Reply::PacedTurn {
            turn: self.clone(),
            interval,
        }
    }

    /// This whole turn, then the body stays open.
    pub fn stall(&self) -> Reply {
        Reply::StallTurn(self.clone())
    }

    /// What the turn says, wire-neutral, for the renderers of the other wires.
    pub fn parts(&self) -> TurnParts<'_> {
        TurnParts {
            items: self
                .items
                .iter()
                .filter_map(|item| match item {
                    Item::Text(pieces) => Some(TurnPart::Text(pieces)),
                    Item::ToolUse {
                        id,
                        name,
                        fragments,
                        finished,
                    } => Some(TurnPart::ToolCall {
                        id,
                        name,
                        fragments,
                        finished: *finished,
                    }),
                    Item::Ping | Item::Event(_) => None,
                })
                .collect(),
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            usage_reported: self.usage_reported,
            model: &self.model,
            stop_reason: self.stop_reason.as_deref(),
        }
    }
}

/// A turn as the other wires' renderers see it.
#[derive(Debug)]
pub struct TurnParts<'a> {
    pub items: Vec<TurnPart<'a>>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Whether the OpenAI and Ollama wires report the counts.
    pub usage_reported: bool,
    pub model: &'a str,
    /// The Anthropic stop reason the test set, if any (`max_tokens`, ...).
    pub stop_reason: Option<&'a str>,
}

#[derive(Debug)]
pub enum TurnPart<'a> {
    /// Text, as the pieces it streams in.
    Text(&'a [String]),
    /// A call; `fragments` concatenated are its JSON arguments (the first is often `""`).
    /// Not `finished`: cut off by the token limit.
    ToolCall {
        id: &'a str,
        name: &'a str,
        fragments: &'a [String],
        finished: bool,
    },
}

fn block_start(index: u64, content_block: Value) -> SseEvent {
    SseEvent::new(
        "content_block_start",
        json!({"type": "content_block_start", "index": index, "content_block": content_block}),
    )
}

fn block_delta(index: u64, delta: Value) -> SseEvent {
    SseEvent::new(
        "content_block_delta",
        json!({"type": "content_block_delta", "index": index, "delta": delta}),
    )
}

fn block_stop(index: u64) -> SseEvent {
    SseEvent::new(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": index}),
    )
}

/// Serializes like the API's tool input deltas: `{"a": 1, "b": [1, 2]}`.
fn api_style_json(value: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                out.push('{');
                for (i, (key, item)) in map.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push_str(": ");
                    write(item, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write(item, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// Cuts `text` into pieces of `min..=max` characters (never inside a char).
fn split_chars(text: &str, min: usize, max: usize, rng: &mut SplitMix64) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut chars = text.chars().peekable();
    while chars.peek().is_some() {
        let len = rng.in_range(min, max);
        pieces.push(chars.by_ref().take(len).collect());
    }
    pieces
}

// ---------------------------------------------------------------------------
// Chunking
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn in_range(&mut self, min: usize, max: usize) -> usize {
        let span = (max - min + 1) as u64;
        min + (self.next_u64() % span) as usize
    }
}

/// Cuts `bytes` into pieces of 1..=[`MAX_CHUNK`] bytes, deterministically
/// from `seed`. This is how the server frames streamed bodies.
pub fn split_at_odd_boundaries(bytes: &[u8], seed: u64) -> Vec<Bytes> {
    let mut rng = SplitMix64(seed);
    let mut chunks = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let len = rng.in_range(1, MAX_CHUNK).min(rest.len());
        let (head, tail) = rest.split_at(len);
        chunks.push(Bytes::copy_from_slice(head));
        rest = tail;
    }
    chunks
}

// ---------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------

/// A request the server received, recorded before it was answered.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    /// Path without the query string.
    pub path: String,
    /// Header names lowercased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The parsed JSON body; `Value::Null` if it was empty or not JSON.
    pub body: Value,
    /// The body bytes as received.
    pub raw_body: Vec<u8>,
    /// When the request's head arrived (its body, which the server reads, still on the way).
    pub arrived: std::time::Instant,
    /// When the last byte of its body arrived.
    pub received: std::time::Instant,
    /// The request's number, from 1 in arrival order (see [`FakeLlm::served_at`]).
    pub number: usize,
    /// The body's length, also when the body is not kept ([`FakeLlm::forget_bodies`]).
    pub body_len: usize,
}

impl RecordedRequest {
    /// The first value of a header (name matched case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

struct Inner {
    replies: Mutex<VecDeque<Reply>>,
    /// Replies reserved for conversations whose first user message contains the key, so
    /// concurrent conversations each get their own script.
    routes: Mutex<Vec<(String, VecDeque<Reply>)>>,
    requests: Mutex<Vec<RecordedRequest>>,
    /// Connections closed by the client while a Stall reply was open.
    disconnects: AtomicUsize,
    /// Connections accepted so far (a client that keeps its connection alive opens one).
    connections: AtomicUsize,
    /// Woken (notify_waiters) whenever `requests` or `disconnects` changes.
    changed: Notify,
    seed: u64,
    wire: Wire,
    /// Whether recorded requests keep their bodies (benchmarks with long conversations
    /// turn it off: they would hold gigabytes).
    keep_bodies: std::sync::atomic::AtomicBool,
    /// Request number (1-based) → when its streamed answer was fully sent.
    served: Mutex<std::collections::HashMap<usize, std::time::Instant>>,
    /// Questions about the server (`/api/show`, `/props`, `/v1/models`, `/api/v0/models`), kept
    /// apart from the model requests.
    probes: Mutex<Vec<RecordedRequest>>,
    /// What Ollama's `/api/show` says about every model.
    shown_model: Mutex<ollama::ShownModel>,
    /// The state of a [`Wire::LlamaCpp`] server (unused by the others).
    llamacpp: Arc<llamacpp::Server>,
}

impl Inner {
    fn record(&self, mut request: RecordedRequest) -> usize {
        request.body_len = request.raw_body.len();
        if !self.keep_bodies.load(Ordering::SeqCst) {
            request.raw_body = Vec::new();
            request.body = Value::Null;
        }
        let n = {
            let mut requests = self.requests.lock().expect("fake server: requests lock");
            request.number = requests.len() + 1;
            requests.push(request);
            requests.len()
        };
        self.changed.notify_waiters();
        n
    }

    fn note_disconnect(&self) {
        self.disconnects.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    fn next_reply(&self, body: &Value) -> Option<Reply> {
        let opening = first_user_text(body);
        {
            let mut routes = self.routes.lock().expect("fake server: routes lock");
            if let Some((_, queue)) = routes
                .iter_mut()
                .find(|(key, queue)| !queue.is_empty() && opening.contains(key.as_str()))
            {
                return queue.pop_front();
            }
        }
        self.replies
            .lock()
            .expect("fake server: replies lock")
            .pop_front()
    }

    async fn wait_until<T>(&self, mut check: impl FnMut() -> Option<T>) -> T {
        loop {
            let notified = self.changed.notified();
            let mut notified = std::pin::pin!(notified);
            // Register before checking so a change in between isn't missed.
            notified.as_mut().enable();
            if let Some(value) = check() {
                return value;
            }
            notified.await;
        }
    }
}

/// The fake server. Dropping it stops accepting and closes its connections.
pub struct FakeLlm {
    inner: Arc<Inner>,
    addr: SocketAddr,
    accept_task: JoinHandle<()>,
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}

impl FakeLlm {
    /// Binds `127.0.0.1:0` and serves on the current tokio runtime.
    pub async fn start() -> FakeLlm {
        FakeLlm::start_with_seed(DEFAULT_SEED).await
    }

    /// Like [`FakeLlm::start`], with another seed for chunk boundaries
    /// (each response uses the seed mixed with its request number).
    ///
    /// # Panics
    /// If the port can't be bound.
    pub async fn start_with_seed(seed: u64) -> FakeLlm {
        FakeLlm::start_speaking(Wire::Anthropic, seed).await
    }

    /// A server speaking `wire`.
    pub async fn start_wire(wire: Wire) -> FakeLlm {
        FakeLlm::start_speaking(wire, DEFAULT_SEED).await
    }

    /// A server speaking `wire`, with `seed` for chunk boundaries.
    ///
    /// # Panics
    /// If the port can't be bound.
    pub async fn start_speaking(wire: Wire, seed: u64) -> FakeLlm {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("fake server: bind 127.0.0.1:0");
        let addr = listener
            .local_addr()
            .expect("fake server: listener address");
        let inner = Arc::new(Inner {
            replies: Mutex::new(VecDeque::new()),
            routes: Mutex::new(Vec::new()),
            requests: Mutex::new(Vec::new()),
            disconnects: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            changed: Notify::new(),
            seed,
            wire,
            served: Mutex::new(std::collections::HashMap::new()),
            keep_bodies: std::sync::atomic::AtomicBool::new(true),
            probes: Mutex::new(Vec::new()),
            shown_model: Mutex::new(ollama::ShownModel::default()),
            llamacpp: Arc::new(llamacpp::Server::new(seed)),
        });
        let accept_task = tokio::spawn(accept_loop(listener, Arc::clone(&inner)));
        FakeLlm {
            inner,
            addr,
            accept_task,
        }
    }

    /// A server speaking as llama-cpp-python's does ([`Wire::LlamaCpp`]).
    pub async fn start_llamacpp() -> FakeLlm {
        FakeLlm::start_wire(Wire::LlamaCpp).await
    }

    /// The settings and counts of a [`Wire::LlamaCpp`] server.
    pub fn llamacpp(&self) -> &llamacpp::Server {
        &self.inner.llamacpp
    }

    /// Records requests from now on without their bodies (they are still routed by them).
    pub fn forget_bodies(&self) {
        self.inner.keep_bodies.store(false, Ordering::SeqCst);
    }

    /// When the streamed answer to request `number` (see [`RecordedRequest::number`]) was
    /// fully handed to the connection.
    pub fn served_at(&self, number: usize) -> Option<std::time::Instant> {
        self.inner
            .served
            .lock()
            .expect("fake server: served lock")
            .get(&number)
            .copied()
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:PORT/v1/messages`.
    pub fn messages_url(&self) -> String {
        format!("{}/v1/messages", self.base_url())
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues a reply; each `POST /v1/messages` takes the oldest one.
    ///
    /// # Panics
    /// If a [`Reply::Status`] has an invalid status code or header.
    pub fn push(&self, reply: Reply) {
        reply.validate();
        self.inner
            .replies
            .lock()
            .expect("fake server: replies lock")
            .push_back(reply);
    }

    /// Queues a reply for the conversation whose first user message contains `key`; such
    /// requests take routed replies before the shared queue.
    pub fn push_routed(&self, key: &str, reply: Reply) {
        reply.validate();
        let mut routes = self.inner.routes.lock().expect("fake server: routes lock");
        match routes.iter_mut().find(|(existing, _)| existing == key) {
            Some((_, queue)) => queue.push_back(reply),
            None => routes.push((key.to_owned(), VecDeque::from([reply]))),
        }
    }

    /// Queues several replies in order.
    pub fn push_all(&self, replies: impl IntoIterator<Item = Reply>) {
        for reply in replies {
            self.push(reply);
        }
    }

    /// How many queued replies haven't been served yet.
    pub fn remaining_replies(&self) -> usize {
        self.inner
            .replies
            .lock()
            .expect("fake server: replies lock")
            .len()
    }

    /// What Ollama's `/api/show` says about every model from now on.
    pub fn show_model(&self, shown: ollama::ShownModel) {
        *self
            .inner
            .shown_model
            .lock()
            .expect("fake server: shown lock") = shown;
    }

    /// The questions about the server received so far (`/api/show`, `/props`, `/v1/models`,
    /// `/api/v0/models`), in order; they are not among [`FakeLlm::requests`].
    pub fn probes(&self) -> Vec<RecordedRequest> {
        self.inner
            .probes
            .lock()
            .expect("fake server: probes lock")
            .clone()
    }

    /// Every request received so far (any path but the questions about the server, see
    /// [`FakeLlm::probes`]), in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.inner
            .requests
            .lock()
            .expect("fake server: requests lock")
            .clone()
    }

    /// Waits until at least `n` requests have been recorded; returns them all.
    pub async fn wait_for_requests(&self, n: usize) -> Vec<RecordedRequest> {
        self.inner
            .wait_until(|| {
                let requests = self.requests();
                (requests.len() >= n).then_some(requests)
            })
            .await
    }

    /// How many times a client has closed a connection while a
    /// [`Reply::Stall`] body was open on it.
    pub fn disconnects(&self) -> usize {
        self.inner.disconnects.load(Ordering::SeqCst)
    }

    /// How many connections clients have opened so far.
    pub fn connections(&self) -> usize {
        self.inner.connections.load(Ordering::SeqCst)
    }

    /// Waits until at least `n` such disconnects have happened in total.
    pub async fn wait_for_disconnects(&self, n: usize) {
        self.inner
            .wait_until(|| (self.disconnects() >= n).then_some(()))
            .await
    }

    /// Waits until a client has closed a connection while a [`Reply::Stall`]
    /// was being served (returns at once if that already happened; counts are
    /// cumulative, use [`FakeLlm::wait_for_disconnects`] for more).
    pub async fn wait_for_disconnect(&self) {
        self.wait_for_disconnects(1).await
    }
}

/// A response body; an error ends the connection without the body's end (a server failing
/// mid-answer).
type ResponseBody = BoxBody<Bytes, std::io::Error>;

async fn accept_loop(listener: TcpListener, inner: Arc<Inner>) {
    // Connection tasks live in the set, so aborting this task (on drop of
    // the server) drops the set and aborts every connection with it.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _peer)) => stream,
                    Err(_) => {
                        tokio::task::yield_now().await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                inner.connections.fetch_add(1, Ordering::SeqCst);
                let inner = Arc::clone(&inner);
                connections.spawn(async move {
                    let service = service_fn(move |request| handle(Arc::clone(&inner), request));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// The text of the first user message of a request body, in any of the wires (OpenAI and
/// Ollama put the system prompt first).
pub fn first_user_text(body: &Value) -> String {
    let first_user = body["messages"]
        .as_array()
        .and_then(|messages| messages.iter().find(|message| message["role"] == "user"));
    let content = first_user.map_or(&Value::Null, |message| &message["content"]);
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|block| block["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

async fn handle(
    inner: Arc<Inner>,
    request: Request<Incoming>,
) -> Result<Response<ResponseBody>, Infallible> {
    let arrived = std::time::Instant::now();
    let (parts, body) = request.into_parts();
    let raw_body = match body.collect().await {
        Ok(collected) => collected.to_bytes().to_vec(),
        Err(err) => {
            return Ok(json_response(
                400,
                &[],
                &error_body(
                    "invalid_request_error",
                    &format!("fake server: couldn't read request body: {err}"),
                ),
            ));
        }
    };
    let received = std::time::Instant::now();
    let body_json = serde_json::from_slice(&raw_body).unwrap_or(Value::Null);
    let headers = parts
        .headers
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let path = parts.uri.path().to_string();
    if let Some(answer) = probe_answer(&inner, &parts.method, &path, &body_json) {
        inner
            .probes
            .lock()
            .expect("fake server: probes lock")
            .push(RecordedRequest {
                method: parts.method.to_string(),
                path,
                headers,
                body: body_json,
                body_len: raw_body.len(),
                raw_body,
                arrived,
                received,
                number: 0,
            });
        return Ok(answer);
    }
    let body_json_for_routing = body_json.clone();
    // Asked for a whole answer, a chat-completions server sends its turns as one object.
    let whole = inner.wire == Wire::OpenAi && body_json["stream"] == false;
    let body_len = raw_body.len();
    let number = inner.record(RecordedRequest {
        method: parts.method.to_string(),
        path: path.clone(),
        headers,
        body: body_json,
        raw_body,
        arrived,
        received,
        number: 0,
        body_len: 0,
    });

    if inner.wire == Wire::LlamaCpp {
        return Ok(llamacpp::handle(
            &inner,
            &parts.method,
            &path,
            &body_json_for_routing,
            body_len,
            arrived,
        )
        .await);
    }

    if parts.method != Method::POST || path != inner.wire.path() {
        return Ok(json_response(
            404,
            &[],
            &error_body(
                "not_found_error",
                &format!("fake server: no route for {} {path}", parts.method),
            ),
        ));
    }

    let Some(reply) = inner.next_reply(&body_json_for_routing) else {
        return Ok(json_response(
            500,
            &[],
            &error_body(
                "api_error",
                &format!("fake server: no scripted reply left for request {number}"),
            ),
        ));
    };

    let seed = inner.seed ^ (number as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let reply = resolve_waits(reply, arrived).await;
    let response = match reply {
        Reply::Held(..) => json_response(
            500,
            &[],
            &error_body(
                "api_error",
                "fake server: a held reply may not hold another",
            ),
        ),
        Reply::Delayed(..) => json_response(
            500,
            &[],
            &error_body(
                "api_error",
                "fake server: a delayed reply goes outside a held one, not inside",
            ),
        ),
        Reply::PacedTurn { turn, interval } => {
            let (content_type, bytes) = render_turn(inner.wire, &turn);
            paced_response(&inner, content_type, &bytes, interval, number)
        }
        Reply::Status {
            status,
            headers,
            body,
        } => json_response(status, &headers, &body),
        Reply::Stream(events) => sse_response(
            &inner,
            serialize_events(&events).into_bytes(),
            seed,
            false,
            number,
        ),
        Reply::Stall(events) => sse_response(
            &inner,
            serialize_events(&events).into_bytes(),
            seed,
            true,
            number,
        ),
        Reply::RawSse(bytes) => sse_response(&inner, bytes, seed, false, number),
        Reply::Raw {
            content_type,
            bytes,
        } => stream_response(&inner, content_type, bytes, seed, false, number, None),
        Reply::Turn(turn) if whole => json_response(200, &[], &openai::render_whole(&turn.parts())),
        Reply::Turn(turn) => {
            let (content_type, bytes) = render_turn(inner.wire, &turn);
            stream_response(&inner, content_type, bytes, seed, false, number, None)
        }
        Reply::StallTurn(turn) => {
            let (content_type, bytes) = render_turn(inner.wire, &turn);
            stream_response(&inner, content_type, bytes, seed, true, number, None)
        }
        Reply::PausedTurn {
            turn,
            pause_after,
            release,
        } => {
            let (content_type, bytes) = render_turn(inner.wire, &turn);
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let at = text
                .find(&pause_after)
                .and_then(|at| text[at..].find("\n\n").map(|end| at + end + 2));
            match at {
                Some(cut) => stream_response(
                    &inner,
                    content_type,
                    bytes,
                    seed,
                    false,
                    number,
                    Some((cut, release)),
                ),
                None => json_response(
                    500,
                    &[],
                    &error_body(
                        "api_error",
                        &format!("fake server: {pause_after:?} is in no event of the turn"),
                    ),
                ),
            }
        }
    };
    Ok(response)
}

/// The answer to a question about the server, if the request is one: Ollama describes its
/// model (`POST /api/show`); a chat-completions server knows none of the questions (404), as
/// llama-cpp-python does.
fn probe_answer(
    inner: &Inner,
    method: &Method,
    path: &str,
    body: &Value,
) -> Option<Response<ResponseBody>> {
    match (inner.wire, method, path) {
        (Wire::Ollama, &Method::POST, "/api/show") => {
            let model = body["model"].as_str().unwrap_or_default();
            let shown = *inner.shown_model.lock().expect("fake server: shown lock");
            Some(json_response(200, &[], &ollama::show_answer(model, shown)))
        }
        (Wire::OpenAi, &Method::GET, "/props" | "/v1/models" | "/api/v0/models") => {
            Some(json_response(404, &[], &json!({"detail": "Not Found"})))
        }
        _ => None,
    }
}

/// `reply` once its wait is over: a [`Reply::Delayed`]'s latency, then a [`Reply::Held`]'s
/// release.
async fn resolve_waits(reply: Reply, arrived: std::time::Instant) -> Reply {
    let reply = match reply {
        Reply::Delayed(latency, inner) => {
            tokio::time::sleep_until((arrived + latency).into()).await;
            *inner
        }
        other => other,
    };
    match reply {
        Reply::Held(release, inner) => {
            release.notified().await;
            *inner
        }
        other => other,
    }
}

fn json_response(
    status: u16,
    headers: &[(String, String)],
    body: &Value,
) -> Response<ResponseBody> {
    let bytes = Bytes::from(body.to_string());
    let mut response = Response::new(Full::new(bytes).map_err(|never| match never {}).boxed());
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let response_headers = response.headers_mut();
    response_headers.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response_headers.insert("request-id", HeaderValue::from_static(FAKE_REQUEST_ID));
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            response_headers.append(name, value);
        }
    }
    response
}

/// The content type and bytes of `turn` in `wire`.
fn render_turn(wire: Wire, turn: &TurnBuilder) -> (&'static str, Vec<u8>) {
    match wire {
        Wire::Anthropic => (
            SSE_CONTENT_TYPE,
            serialize_events(&turn.events()).into_bytes(),
        ),
        Wire::OpenAi => (SSE_CONTENT_TYPE, openai::render_turn(&turn.parts())),
        Wire::Ollama => (ollama::CONTENT_TYPE, ollama::render_turn(&turn.parts())),
        Wire::LlamaCpp => (SSE_CONTENT_TYPE, llamacpp::render_turn(turn)),
    }
}

const SSE_CONTENT_TYPE: &str = "text/event-stream; charset=utf-8";

fn sse_response(
    inner: &Arc<Inner>,
    bytes: Vec<u8>,
    seed: u64,
    stall: bool,
    number: usize,
) -> Response<ResponseBody> {
    stream_response(inner, SSE_CONTENT_TYPE, bytes, seed, stall, number, None)
}

/// A streamed answer's body, which notes when the answer was served: when hyper takes its
/// last piece. (Waiting for the channel to close instead races the producer: a client that
/// stops reading at the last event can close the connection while the producer, preempted
/// between its last send and dropping its sender, still holds the channel open.)
struct ServedBody {
    rx: mpsc::Receiver<Bytes>,
    inner: Arc<Inner>,
    number: usize,
    /// How many pieces the answer has; `None` for one that never ends (a stall).
    pieces: Option<usize>,
    taken: usize,
    ended: bool,
}

impl ServedBody {
    fn note_served(&mut self) {
        if !std::mem::replace(&mut self.ended, true) {
            self.inner
                .served
                .lock()
                .expect("fake server: served lock")
                .insert(self.number, std::time::Instant::now());
        }
    }
}

impl futures::Stream for ServedBody {
    type Item = Result<Frame<Bytes>, std::io::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let next = std::task::ready!(self.rx.poll_recv(cx));
        match next {
            Some(_) => {
                self.taken += 1;
                if self.pieces == Some(self.taken) {
                    self.note_served();
                }
            }
            None if self.pieces.is_some() => self.note_served(),
            None => {}
        }
        std::task::Poll::Ready(next.map(|bytes| Ok(Frame::data(bytes))))
    }
}

/// A streamed answer; with `pause`, it stops after `pause.0` bytes until `pause.1` is
/// notified.
fn stream_response(
    inner: &Arc<Inner>,
    content_type: &'static str,
    bytes: Vec<u8>,
    seed: u64,
    stall: bool,
    number: usize,
    pause: Option<(usize, Arc<Notify>)>,
) -> Response<ResponseBody> {
    let (first, rest, release) = match pause {
        Some((cut, release)) => (
            split_at_odd_boundaries(&bytes[..cut], seed),
            split_at_odd_boundaries(&bytes[cut..], seed.rotate_left(7)),
            Some(release),
        ),
        None => (split_at_odd_boundaries(&bytes, seed), Vec::new(), None),
    };
    let pieces = (!stall).then_some(first.len() + rest.len());
    // Capacity 1: hyper takes (and usually flushes) one piece at a time.
    let (tx, rx) = mpsc::channel::<Bytes>(1);
    let producer_inner = Arc::clone(inner);
    tokio::spawn(async move {
        let mut sent_all = true;
        for chunk in first {
            if tx.send(chunk).await.is_err() {
                sent_all = false;
                break;
            }
        }
        if let Some(release) = release {
            release.notified().await;
        }
        for chunk in rest {
            if !sent_all || tx.send(chunk).await.is_err() {
                sent_all = false;
                break;
            }
        }
        if stall {
            // The receiver lives in the response body, which hyper drops
            // when the connection goes away.
            if sent_all {
                tx.closed().await;
            }
            producer_inner.note_disconnect();
        }
    });
    streamed_body(inner, content_type, rx, number, pieces)
}

/// A 200 response whose body is the `pieces` that come through `rx` (`None`: it never ends),
/// recording when it was all served.
fn streamed_body(
    inner: &Arc<Inner>,
    content_type: &'static str,
    rx: mpsc::Receiver<Bytes>,
    number: usize,
    pieces: Option<usize>,
) -> Response<ResponseBody> {
    let stream = ServedBody {
        rx,
        inner: Arc::clone(inner),
        number,
        pieces,
        taken: 0,
        ended: false,
    };
    let mut response = Response::new(StreamBody::new(stream).boxed());
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    headers.insert(
        hyper::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    headers.insert("request-id", HeaderValue::from_static(FAKE_REQUEST_ID));
    response
}

/// `bytes` (a rendered turn) sent an event at a time, each `interval` after the one before.
fn paced_response(
    inner: &Arc<Inner>,
    content_type: &'static str,
    bytes: &[u8],
    interval: std::time::Duration,
    number: usize,
) -> Response<ResponseBody> {
    // SSE events end with a blank line, NDJSON (Ollama) records with a newline.
    let separator: &[u8] = if content_type == SSE_CONTENT_TYPE {
        b"\n\n"
    } else {
        b"\n"
    };
    let mut events = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let end = rest
            .windows(separator.len())
            .position(|window| window == separator)
            .map_or(rest.len(), |at| at + separator.len());
        let (event, tail) = rest.split_at(end);
        events.push(Bytes::copy_from_slice(event));
        rest = tail;
    }
    let pieces = Some(events.len());
    let (tx, rx) = mpsc::channel::<Bytes>(1);
    tokio::spawn(async move {
        let start = tokio::time::Instant::now();
        for (index, event) in events.into_iter().enumerate() {
            tokio::time::sleep_until(start + interval * index as u32).await;
            if tx.send(event).await.is_err() {
                break;
            }
        }
    });
    streamed_body(inner, content_type, rx, number, pieces)
}
