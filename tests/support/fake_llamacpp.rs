//! The fake server speaking as llama-cpp-python 0.3.36 (`python -m llama_cpp.server`) does
//! (`Wire::LlamaCpp`), byte for byte as the recordings in `tests/data/llamacpp-openai/` show and
//! as its code (`llama_cpp/server/app.py`, `errors.py`, `llama_chat_format.py`) behaves:
//!
//! - Chunks are Python's `json.dumps` (`", "` and `": "`, non-ASCII as `\uXXXX`), each SSE line
//!   ending with `\n`: a first chunk with only `{"role": "assistant"}`, one chunk per token, a
//!   finish chunk with `{}`, then `data: [DONE]`. No usage chunk, whatever
//!   `stream_options.include_usage` asks. Ids are `chatcmpl-<uuid>`.
//! - Tool calls stream as its forced-tool path sends them: every fragment repeats the index, the
//!   id (`call__<i>_<name>_cmpl-<uuid>`), the name and a legacy `function_call`; the last
//!   fragment carries `""`, the finish reason is `tool_calls` even when the token limit cut it.
//! - The response starts at once; `: ping - <time>` comments go out on a timer (sse-starlette's,
//!   every 15 s unless set) while the prompt is evaluated ([`Settings::prompt_eval`]) and after.
//! - One slot: a request waits for the one before it. A new request (or `GET /v1/models`, which
//!   takes the model's lock too) interrupts a stream in flight after its next chunk: that stream
//!   ends with `data: [DONE]`, no finish reason, and the connection is closed.
//! - An assistant message whose `content` is `null` or missing fails validation: HTTP 500 with
//!   the recorded body.
//! - The context window `n_ctx`: a prompt of at least `n_ctx` tokens fails in the server's
//!   generator, after the 200 and its headers went out, which llama-cpp-python only logs: the
//!   connection is closed with nothing sent ([`Overflow::DropConnection`], what its code does;
//!   [`Overflow::ErrorInStream`] sends an error object instead, as servers that report it in the
//!   stream do). Non-streamed, the same overflow is HTTP 400 `context_length_exceeded`. A prompt
//!   that fits but leaves less than `max_tokens` is answered up to the window: `max_tokens` is
//!   lowered to what is left and the answer ends with `length`.
//! - `GET /v1/models` as llama-cpp-python answers it; `GET /props` as llama.cpp's own
//!   `llama-server` answers it (llama-cpp-python has none: [`Settings::props`] off gives its 404),
//!   so context derivation can be tested against either.
//!
//! Prompt tokens are estimated from the request body's bytes, a quarter of them (a token is
//! about four bytes of English; the real server counts what its chat template made of the
//! messages and tools, which this cannot know).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::HeaderValue;
use hyper::{Method, Response, StatusCode};
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc};

use super::{Inner, Reply, ResponseBody, SplitMix64, TurnBuilder, TurnPart};

/// The model name the server reports (`--model_alias`), as in the recordings.
pub const MODEL_ALIAS: &str = "gemma3";
/// sse-starlette's default keep-alive interval.
pub const PING_INTERVAL: Duration = Duration::from_secs(15);
/// The recorded body of the 500 for an assistant message without usable `content`.
const HTTP500_ON_NULL_CONTENT: &str =
    include_str!("../data/llamacpp-openai/http500_on_null_content.json");

/// What the server does with a streamed request whose prompt does not fit its context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// llama-cpp-python 0.3.35's code: the `ValueError` ("Requested tokens (N) exceed context
    /// window of M") is raised in the stream's publisher after the response started; the
    /// server logs it and closes the connection without a byte of the answer.
    DropConnection,
    /// `data: {"error": {"message": "Requested tokens (N) exceed context window of M", "type":
    /// "internal_server_error", "param": null, "code": null}}`, then the body ends: what a server
    /// that reports the failure in the stream sends.
    ErrorInStream,
}

/// Which streamed answers may call tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamedCalls {
    /// Any: a scripted call streams in the forced-tool shape.
    Always,
    /// As the `chatml-function-calling` chat format: only with `tool_choice` naming a function;
    /// with `"auto"` (or none) a call fails after the evaluation ("Automatic streaming tool
    /// choice is not supported"), which the server only logs: the connection is closed.
    OnlyForced,
}

/// How the fake server behaves; changeable between requests ([`Server::configure`]).
#[derive(Clone, Debug)]
pub struct Settings {
    /// The context window, in tokens.
    pub n_ctx: u64,
    /// How long evaluating a prompt takes: only pings go out meanwhile.
    pub prompt_eval: Duration,
    pub ping_interval: Duration,
    pub model_alias: String,
    pub overflow: Overflow,
    pub streamed_calls: StreamedCalls,
    /// Whether `GET /props` answers (llama-server) or 404s (llama-cpp-python).
    pub props: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            n_ctx: 2048,
            prompt_eval: Duration::ZERO,
            ping_interval: PING_INTERVAL,
            model_alias: MODEL_ALIAS.to_owned(),
            overflow: Overflow::DropConnection,
            streamed_calls: StreamedCalls::Always,
            props: true,
        }
    }
}

/// The server's state: its settings, its one slot, and counts tests can wait on.
pub struct Server {
    settings: Mutex<Settings>,
    /// The model's lock: whoever holds the permit is evaluating or streaming.
    slot: Semaphore,
    /// Requests waiting for the slot (llama-cpp-python's outer lock being held).
    waiting: AtomicUsize,
    interruptions: AtomicUsize,
    uuids: Mutex<SplitMix64>,
    created: AtomicU64,
}

impl Server {
    pub(super) fn new(seed: u64) -> Server {
        Server {
            settings: Mutex::new(Settings::default()),
            slot: Semaphore::new(1),
            waiting: AtomicUsize::new(0),
            interruptions: AtomicUsize::new(0),
            uuids: Mutex::new(SplitMix64(seed ^ 0x11a3_acc9)),
            created: AtomicU64::new(1_795_640_664),
        }
    }

    /// Changes the settings for the requests that come from now on.
    pub fn configure(&self, change: impl FnOnce(&mut Settings)) {
        change(&mut self.settings.lock().expect("fake llama.cpp: settings lock"));
    }

    pub fn settings(&self) -> Settings {
        self.settings
            .lock()
            .expect("fake llama.cpp: settings lock")
            .clone()
    }

    /// How many streams a later request has interrupted so far.
    pub fn interruptions(&self) -> usize {
        self.interruptions.load(Ordering::SeqCst)
    }

    fn uuid(&self) -> String {
        let mut rng = self.uuids.lock().expect("fake llama.cpp: uuid lock");
        let (high, low) = (rng.next_u64(), rng.next_u64());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:x}{:03x}-{:012x}",
            high >> 32,
            (high >> 16) & 0xffff,
            high & 0xfff,
            8 | (low >> 62),
            (low >> 48) & 0xfff,
            low & 0xffff_ffff_ffff
        )
    }

    /// `int(time.time())` as the server writes it; counted up from the recordings' so that
    /// chunks of one answer share it and answers differ.
    fn created(&self) -> u64 {
        self.created.fetch_add(1, Ordering::SeqCst)
    }

    /// Waits for the slot, telling the stream in flight (if any) to stop, as a request waiting
    /// on llama-cpp-python's outer lock does.
    async fn take_slot(self: &Arc<Self>) -> SlotPermit {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let permit = self.slot.acquire().await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        std::mem::forget(permit.expect("fake llama.cpp: the slot is never closed"));
        SlotPermit(Arc::clone(self))
    }

    fn someone_waiting(&self) -> bool {
        self.waiting.load(Ordering::SeqCst) > 0
    }
}

/// The slot, given back when dropped (also when the client went away mid-answer).
struct SlotPermit(Arc<Server>);

impl Drop for SlotPermit {
    fn drop(&mut self) {
        self.0.slot.add_permits(1);
    }
}

// ---------------------------------------------------------------------------
// Python's json.dumps
// ---------------------------------------------------------------------------

/// A JSON value with its keys in the order the server writes them.
#[derive(Clone, Debug)]
pub enum Py {
    Null,
    Bool(bool),
    Int(i64),
    Str(String),
    List(Vec<Py>),
    Obj(Vec<(&'static str, Py)>),
}

/// How the server writes JSON: a stream chunk through `json.dumps` (`", "`, `": "`, ASCII
/// only), a whole response through Starlette's `JSONResponse` (compact, UTF-8 kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Chunk,
    Response,
}

fn text(value: &str) -> Py {
    Py::Str(value.to_owned())
}

impl Py {
    pub fn dumps(&self, style: Style) -> String {
        let mut out = String::new();
        self.write(style, &mut out);
        out
    }

    fn write(&self, style: Style, out: &mut String) {
        let (comma, colon) = match style {
            Style::Chunk => (", ", ": "),
            Style::Response => (",", ":"),
        };
        match self {
            Py::Null => out.push_str("null"),
            Py::Bool(value) => out.push_str(if *value { "true" } else { "false" }),
            Py::Int(value) => out.push_str(&value.to_string()),
            Py::Str(value) => write_string(value, style == Style::Chunk, out),
            Py::List(items) => {
                out.push('[');
                for (position, item) in items.iter().enumerate() {
                    if position > 0 {
                        out.push_str(comma);
                    }
                    item.write(style, out);
                }
                out.push(']');
            }
            Py::Obj(entries) => {
                out.push('{');
                for (position, (key, item)) in entries.iter().enumerate() {
                    if position > 0 {
                        out.push_str(comma);
                    }
                    write_string(key, true, out);
                    out.push_str(colon);
                    item.write(style, out);
                }
                out.push('}');
            }
        }
    }
}

/// A string as Python's encoder writes it: with `ascii`, everything outside space..`~` as
/// `\uXXXX` (UTF-16, lower-case hex); without, only quotes, backslashes and control characters.
fn write_string(value: &str, ascii: bool, out: &mut String) {
    out.push('"');
    for ch in value.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ch if u32::from(ch) < 0x20 || (ascii && !(' '..='~').contains(&ch)) => {
                let mut units = [0u16; 2];
                for unit in ch.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            ch => out.push(ch),
        }
    }
    out.push('"');
}

// ---------------------------------------------------------------------------
// Rendering answers
// ---------------------------------------------------------------------------

/// One token of a scripted answer.
#[derive(Clone, Debug)]
enum Token {
    Text(String),
    /// A piece of call `call`'s arguments.
    Arguments {
        call: usize,
        piece: String,
    },
}

/// A scripted turn as the server's tokens, with the calls it makes.
struct Script {
    tokens: Vec<Token>,
    /// Name of each call.
    calls: Vec<String>,
    /// Whether the script ends at the token limit (`stop_reason("max_tokens")`).
    at_limit: bool,
}

impl Script {
    fn of(turn: &TurnBuilder) -> Script {
        let mut tokens = Vec::new();
        let mut calls = Vec::new();
        let parts = turn.parts();
        let at_limit = parts.stop_reason == Some("max_tokens");
        for part in parts.items {
            match part {
                TurnPart::Text(pieces) => tokens.extend(
                    pieces
                        .iter()
                        .filter(|piece| !piece.is_empty())
                        .map(|piece| Token::Text(piece.clone())),
                ),
                TurnPart::ToolCall {
                    name, fragments, ..
                } => {
                    let call = calls.len();
                    calls.push(name.to_owned());
                    tokens.extend(fragments.iter().filter(|piece| !piece.is_empty()).map(
                        |piece| Token::Arguments {
                            call,
                            piece: piece.clone(),
                        },
                    ));
                }
            }
        }
        Script {
            tokens,
            calls,
            at_limit,
        }
    }

    fn text(&self) -> String {
        self.tokens
            .iter()
            .filter_map(|token| match token {
                Token::Text(piece) => Some(piece.as_str()),
                Token::Arguments { .. } => None,
            })
            .collect()
    }

    fn arguments(&self, call: usize) -> String {
        self.tokens
            .iter()
            .filter_map(|token| match token {
                Token::Arguments { call: of, piece } if *of == call => Some(piece.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The first `limit` tokens; whether the answer ends at the token limit (that cut it, or
    /// the script says so).
    fn cut_to(mut self, limit: u64) -> (Script, bool) {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let cut = self.tokens.len() > limit || self.at_limit;
        self.tokens.truncate(limit);
        (self, cut)
    }
}

/// What one answer is called: its completion uuid, `created`, the model, and its calls' ids.
struct Names {
    chat_id: String,
    created: u64,
    model: String,
    call_ids: Vec<String>,
}

impl Names {
    fn new(server: &Server, settings: &Settings, script: &Script) -> Names {
        let completion = server.uuid();
        Names {
            chat_id: format!("chatcmpl-{completion}"),
            created: server.created(),
            model: settings.model_alias.clone(),
            call_ids: script
                .calls
                .iter()
                .enumerate()
                .map(|(index, name)| format!("call__{index}_{name}_cmpl-{}", server.uuid()))
                .collect(),
        }
    }
}

/// The chunks of a streamed answer (each a `data:` payload), `[DONE]` not included.
fn stream_chunks(script: &Script, names: &Names, cut: bool) -> Vec<String> {
    let envelope = |choice: Vec<(&'static str, Py)>| {
        Py::Obj(vec![
            ("id", text(&names.chat_id)),
            ("model", text(&names.model)),
            ("created", Py::Int(names.created as i64)),
            ("object", text("chat.completion.chunk")),
            ("choices", Py::List(vec![Py::Obj(choice)])),
        ])
        .dumps(Style::Chunk)
    };
    // The forced-tool path writes its chunks with the keys in another order.
    let call_envelope = |finish: Py, delta: Py| {
        Py::Obj(vec![
            ("id", text(&names.chat_id)),
            ("object", text("chat.completion.chunk")),
            ("created", Py::Int(names.created as i64)),
            ("model", text(&names.model)),
            (
                "choices",
                Py::List(vec![Py::Obj(vec![
                    ("index", Py::Int(0)),
                    ("finish_reason", finish),
                    ("logprobs", Py::Null),
                    ("delta", delta),
                ])]),
            ),
        ])
        .dumps(Style::Chunk)
    };
    let text_choice = |delta: Py, finish: Py| {
        vec![
            ("index", Py::Int(0)),
            ("delta", delta),
            ("logprobs", Py::Null),
            ("finish_reason", finish),
        ]
    };
    let fragment = |call: usize, piece: &str| {
        let name = &script.calls[call];
        call_envelope(
            Py::Null,
            Py::Obj(vec![
                ("role", Py::Null),
                ("content", Py::Null),
                (
                    "function_call",
                    Py::Obj(vec![("name", text(name)), ("arguments", text(piece))]),
                ),
                (
                    "tool_calls",
                    Py::List(vec![Py::Obj(vec![
                        ("index", Py::Int(call as i64)),
                        ("id", text(&names.call_ids[call])),
                        ("type", text("function")),
                        (
                            "function",
                            Py::Obj(vec![("name", text(name)), ("arguments", text(piece))]),
                        ),
                    ])]),
                ),
            ]),
        )
    };
    let mut chunks = Vec::new();
    if script.calls.is_empty() {
        chunks.push(envelope(text_choice(
            Py::Obj(vec![("role", text("assistant"))]),
            Py::Null,
        )));
        for token in &script.tokens {
            if let Token::Text(piece) = token {
                chunks.push(envelope(text_choice(
                    Py::Obj(vec![("content", text(piece))]),
                    Py::Null,
                )));
            }
        }
        let reason = if cut { "length" } else { "stop" };
        chunks.push(envelope(text_choice(Py::Obj(Vec::new()), text(reason))));
        return chunks;
    }
    let nulls = || {
        Py::Obj(vec![
            ("role", Py::Null),
            ("content", Py::Null),
            ("function_call", Py::Null),
            ("tool_calls", Py::Null),
        ])
    };
    chunks.push(call_envelope(
        Py::Null,
        Py::Obj(vec![
            ("role", text("assistant")),
            ("content", Py::Null),
            ("function_call", Py::Null),
            ("tool_calls", Py::Null),
        ]),
    ));
    let mut open_call = None;
    for token in &script.tokens {
        match token {
            // Text before the calls, which this path cannot write, goes as the plain path's
            // content chunks.
            Token::Text(piece) => chunks.push(envelope(text_choice(
                Py::Obj(vec![("content", text(piece))]),
                Py::Null,
            ))),
            Token::Arguments { call, piece } => {
                if let Some(previous) = open_call.filter(|previous| previous != call) {
                    chunks.push(fragment(previous, ""));
                }
                open_call = Some(*call);
                chunks.push(fragment(*call, piece));
            }
        }
    }
    // The completion's last chunk (its finish) arrives as a fragment with no arguments; calls
    // with none at all still get their one fragment.
    for call in open_call.into_iter().chain(
        (0..script.calls.len())
            .filter(|call| script.arguments(*call).is_empty() && Some(*call) != open_call),
    ) {
        chunks.push(fragment(call, ""));
    }
    chunks.push(call_envelope(text("tool_calls"), nulls()));
    chunks
}

/// A whole (non-streamed) answer as the server's response model writes it.
fn whole_answer(script: &Script, names: &Names, cut: bool, prompt_tokens: u64) -> String {
    let text_answer = script.text();
    let completion_tokens = script.tokens.len() as u64;
    let (message, finish) = if script.calls.is_empty() {
        (
            Py::Obj(vec![
                ("content", text(&text_answer)),
                ("role", text("assistant")),
            ]),
            if cut { "length" } else { "stop" },
        )
    } else {
        let calls = (0..script.calls.len())
            .map(|call| {
                Py::Obj(vec![
                    ("id", text(&names.call_ids[call])),
                    ("type", text("function")),
                    (
                        "function",
                        Py::Obj(vec![
                            ("name", text(&script.calls[call])),
                            ("arguments", text(&script.arguments(call))),
                        ]),
                    ),
                ])
            })
            .collect();
        let content = if text_answer.is_empty() {
            Py::Null
        } else {
            text(&text_answer)
        };
        let mut message = vec![
            ("content", content),
            ("tool_calls", Py::List(calls)),
            ("role", text("assistant")),
        ];
        // With one call the legacy field comes too, its name as the model's follow-up wrote
        // it (`functions.read_file:` less the prefix).
        if script.calls.len() == 1 {
            message.push((
                "function_call",
                Py::Obj(vec![
                    ("name", text(&format!("{}:", script.calls[0]))),
                    ("arguments", text(&script.arguments(0))),
                ]),
            ));
        }
        (Py::Obj(message), "tool_calls")
    };
    Py::Obj(vec![
        ("id", text(&names.chat_id)),
        ("object", text("chat.completion")),
        ("created", Py::Int(names.created as i64)),
        ("model", text(&names.model)),
        (
            "choices",
            Py::List(vec![Py::Obj(vec![
                ("index", Py::Int(0)),
                ("message", message),
                ("logprobs", Py::Null),
                ("finish_reason", text(finish)),
            ])]),
        ),
        (
            "usage",
            Py::Obj(vec![
                ("prompt_tokens", Py::Int(prompt_tokens as i64)),
                ("completion_tokens", Py::Int(completion_tokens as i64)),
                (
                    "total_tokens",
                    Py::Int((prompt_tokens + completion_tokens) as i64),
                ),
            ]),
        ),
    ])
    .dumps(Style::Response)
}

/// The SSE bytes of `turn` as the server streams it when nothing interrupts it and the window
/// holds it, with the ids a fresh server gives.
pub fn render_turn(turn: &TurnBuilder) -> Vec<u8> {
    let server = Server::new(super::DEFAULT_SEED);
    let settings = Settings::default();
    let script = Script::of(turn);
    let names = Names::new(&server, &settings, &script);
    let mut out = Vec::new();
    for chunk in stream_chunks(&script, &names, script.at_limit) {
        out.extend_from_slice(&data(&chunk));
    }
    out.extend_from_slice(&data("[DONE]"));
    out
}

/// `: ping - 2026-11-25 21:04:39.062661+00:00`, as sse-starlette writes `datetime.now(utc)`.
pub fn ping_line() -> String {
    let format = time::macros::format_description!(
        "[year]-[month]-[day] [hour]:[minute]:[second].[subsecond digits:6]+00:00"
    );
    let now = time::OffsetDateTime::now_utc()
        .format(format)
        .unwrap_or_default();
    format!(": ping - {now}\n\n")
}

fn data(payload: &str) -> Bytes {
    Bytes::from(format!("data: {payload}\n\n"))
}

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

/// Answers a request to the fake llama.cpp server (already recorded).
pub(super) async fn handle(
    inner: &Arc<Inner>,
    method: &Method,
    path: &str,
    body: &Value,
    body_len: usize,
    arrived: std::time::Instant,
) -> Response<ResponseBody> {
    let server = &inner.llamacpp;
    let settings = server.settings();
    match (method, path) {
        (&Method::GET, "/props") if settings.props => {
            json(200, &props(&settings).dumps(Style::Response))
        }
        (&Method::GET, "/v1/models") => {
            // The route takes the model's lock: it interrupts a stream in flight.
            let _slot = server.take_slot().await;
            json(200, &models(&settings).dumps(Style::Response))
        }
        (&Method::POST, "/v1/chat/completions") => {
            chat(inner, server, settings, body, body_len, arrived).await
        }
        _ => json(404, r#"{"detail":"Not Found"}"#),
    }
}

async fn chat(
    inner: &Arc<Inner>,
    server: &Arc<Server>,
    settings: Settings,
    body: &Value,
    body_len: usize,
    arrived: std::time::Instant,
) -> Response<ResponseBody> {
    if assistant_without_content(body) {
        return json(500, HTTP500_ON_NULL_CONTENT);
    }
    let Some(reply) = inner.next_reply(body) else {
        return json(
            500,
            &Py::Obj(vec![(
                "error",
                Py::Obj(vec![
                    ("message", text("fake llama.cpp: no scripted reply left")),
                    ("type", text("internal_server_error")),
                    ("param", Py::Null),
                    ("code", Py::Null),
                ]),
            )])
            .dumps(Style::Response),
        );
    };
    let reply = super::resolve_waits(reply, arrived).await;
    let request = Request::read(body, body_len);
    let (turn, pace) = match reply {
        Reply::Turn(turn) => (turn, Duration::ZERO),
        Reply::PacedTurn { turn, interval } => (turn, interval),
        Reply::Status { status, body, .. } => return json(status, &body.to_string()),
        Reply::RawSse(bytes) => return streamed_raw(server, settings, bytes),
        other => {
            return json(
                500,
                &format!(
                    "{{\"error\":{{\"message\":\"fake llama.cpp: {other:?} is not a reply it sends\"}}}}"
                ),
            );
        }
    };
    if request.stream {
        streamed(server, settings, request, Script::of(&turn), pace)
    } else {
        whole(server, settings, request, Script::of(&turn)).await
    }
}

/// What of a request the server acts on.
struct Request {
    stream: bool,
    prompt_tokens: u64,
    max_tokens: Option<u64>,
    /// Whether `tool_choice` names a function (the only way a call streams in
    /// [`StreamedCalls::OnlyForced`]).
    forced_tool: bool,
}

impl Request {
    fn read(body: &Value, body_len: usize) -> Request {
        Request {
            stream: body["stream"].as_bool().unwrap_or(false),
            // About four bytes a token; see the module's documentation.
            prompt_tokens: (body_len / 4) as u64,
            max_tokens: body["max_tokens"].as_u64().filter(|tokens| *tokens > 0),
            forced_tool: body["tool_choice"].is_object(),
        }
    }

    /// The message llama-cpp-python raises for a prompt that does not fit.
    fn overflow(&self, settings: &Settings) -> Option<String> {
        (self.prompt_tokens >= settings.n_ctx).then(|| {
            format!(
                "Requested tokens ({}) exceed context window of {}",
                self.prompt_tokens, settings.n_ctx
            )
        })
    }

    /// `max_tokens` lowered to what the window leaves, as `Llama._create_completion` does.
    fn token_limit(&self, settings: &Settings) -> u64 {
        let left = settings.n_ctx.saturating_sub(self.prompt_tokens);
        self.max_tokens.map_or(left, |asked| asked.min(left))
    }
}

/// Whether an assistant message has `"content": null` or no `content`, which the server's
/// request model refuses.
fn assistant_without_content(body: &Value) -> bool {
    body["messages"].as_array().is_some_and(|messages| {
        messages.iter().any(|message| {
            message["role"] == "assistant" && message.get("content").is_none_or(Value::is_null)
        })
    })
}

async fn whole(
    server: &Arc<Server>,
    settings: Settings,
    request: Request,
    script: Script,
) -> Response<ResponseBody> {
    let _slot = server.take_slot().await;
    tokio::time::sleep(settings.prompt_eval).await;
    if request.overflow(&settings).is_some() {
        // `errors.py`'s `context_length_exceeded`.
        let completion = request.max_tokens.unwrap_or(0);
        let message = format!(
            "This model's maximum context length is {} tokens. However, you requested {} tokens \
             ({} in the messages, {} in the completion). Please reduce the length of the messages \
             or completion.",
            settings.n_ctx,
            request.prompt_tokens + completion,
            request.prompt_tokens,
            request
                .max_tokens
                .map_or_else(|| "None".to_owned(), |tokens| tokens.to_string())
        );
        let error = Py::Obj(vec![(
            "error",
            Py::Obj(vec![
                ("message", text(&message)),
                ("type", text("invalid_request_error")),
                ("param", text("messages")),
                ("code", text("context_length_exceeded")),
            ]),
        )]);
        return json(400, &error.dumps(Style::Response));
    }
    let (script, cut) = script.cut_to(request.token_limit(&settings));
    let names = Names::new(server, &settings, &script);
    json(
        200,
        &whole_answer(&script, &names, cut, request.prompt_tokens),
    )
}

/// What the body producer sends: a piece of the body, or the connection's end without the
/// body's (hyper then closes it, as uvicorn does when the app fails mid-response).
type Piece = Result<Bytes, std::io::Error>;

fn dropped() -> Piece {
    Err(std::io::Error::other(
        "fake llama.cpp: the server closed the connection",
    ))
}

fn streamed(
    server: &Arc<Server>,
    settings: Settings,
    request: Request,
    script: Script,
    pace: Duration,
) -> Response<ResponseBody> {
    let (tx, rx) = mpsc::channel::<Piece>(16);
    let server = Arc::clone(server);
    tokio::spawn(async move {
        let pings = tokio::spawn(send_pings(tx.clone(), settings.ping_interval));
        stream_answer(&server, &settings, &request, script, pace, &tx).await;
        pings.abort();
    });
    sse_response(rx)
}

/// Serves recorded bytes as the answer, after the slot and the evaluation.
fn streamed_raw(
    server: &Arc<Server>,
    settings: Settings,
    bytes: Vec<u8>,
) -> Response<ResponseBody> {
    let (tx, rx) = mpsc::channel::<Piece>(16);
    let server = Arc::clone(server);
    tokio::spawn(async move {
        let pings = tokio::spawn(send_pings(tx.clone(), settings.ping_interval));
        let _slot = server.take_slot().await;
        tokio::time::sleep(settings.prompt_eval).await;
        let _ = tx.send(Ok(Bytes::from(bytes))).await;
        pings.abort();
    });
    sse_response(rx)
}

async fn send_pings(tx: mpsc::Sender<Piece>, interval: Duration) {
    let start = tokio::time::Instant::now();
    for beat in 1u32.. {
        tokio::time::sleep_until(start + interval * beat).await;
        if tx.send(Ok(Bytes::from(ping_line()))).await.is_err() {
            return;
        }
    }
}

async fn stream_answer(
    server: &Arc<Server>,
    settings: &Settings,
    request: &Request,
    script: Script,
    pace: Duration,
    tx: &mpsc::Sender<Piece>,
) {
    let _slot = server.take_slot().await;
    tokio::time::sleep(settings.prompt_eval).await;
    if let Some(message) = request.overflow(settings) {
        let _ = match settings.overflow {
            Overflow::DropConnection => tx.send(dropped()).await,
            Overflow::ErrorInStream => {
                let error = Py::Obj(vec![(
                    "error",
                    Py::Obj(vec![
                        ("message", text(&message)),
                        ("type", text("internal_server_error")),
                        ("param", Py::Null),
                        ("code", Py::Null),
                    ]),
                )]);
                tx.send(Ok(data(&error.dumps(Style::Chunk)))).await
            }
        };
        return;
    }
    if !script.calls.is_empty()
        && settings.streamed_calls == StreamedCalls::OnlyForced
        && !request.forced_tool
    {
        // "Automatic streaming tool choice is not supported", in the server's log only.
        let _ = tx.send(dropped()).await;
        return;
    }
    let (script, cut) = script.cut_to(request.token_limit(settings));
    let names = Names::new(server, settings, &script);
    let start = tokio::time::Instant::now();
    for (position, chunk) in stream_chunks(&script, &names, cut).into_iter().enumerate() {
        tokio::time::sleep_until(start + pace * position as u32).await;
        if tx.send(Ok(data(&chunk))).await.is_err() {
            return;
        }
        // After each chunk the publisher looks for a request waiting on the model's lock.
        if server.someone_waiting() {
            server.interruptions.fetch_add(1, Ordering::SeqCst);
            let _ = tx.send(Ok(data("[DONE]"))).await;
            let _ = tx.send(dropped()).await;
            return;
        }
    }
    let _ = tx.send(Ok(data("[DONE]"))).await;
}

/// The body of a streamed answer. A dropped connection is held back once, so that hyper
/// flushes what came before it (the response head included) before it closes the connection.
struct Pieces {
    rx: mpsc::Receiver<Piece>,
    held: Option<std::io::Error>,
}

impl futures::Stream for Pieces {
    type Item = Result<Frame<Bytes>, std::io::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if let Some(error) = self.held.take() {
            return std::task::Poll::Ready(Some(Err(error)));
        }
        match std::task::ready!(self.rx.poll_recv(cx)) {
            Some(Ok(bytes)) => std::task::Poll::Ready(Some(Ok(Frame::data(bytes)))),
            Some(Err(error)) => {
                self.held = Some(error);
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            }
            None => std::task::Poll::Ready(None),
        }
    }
}

fn sse_response(rx: mpsc::Receiver<Piece>) -> Response<ResponseBody> {
    let mut response = Response::new(StreamBody::new(Pieces { rx, held: None }).boxed());
    let headers = response.headers_mut();
    for (name, value) in [
        ("content-type", "text/event-stream; charset=utf-8"),
        ("cache-control", "no-store"),
        ("x-accel-buffering", "no"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

fn json(status: u16, body: &str) -> Response<ResponseBody> {
    let full = http_body_util::Full::new(Bytes::from(body.to_owned()))
        .map_err(|never| match never {})
        .boxed();
    let mut response = Response::new(full);
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    response
}

/// `GET /v1/models` of llama-cpp-python.
fn models(settings: &Settings) -> Py {
    Py::Obj(vec![
        ("object", text("list")),
        (
            "data",
            Py::List(vec![Py::Obj(vec![
                ("id", text(&settings.model_alias)),
                ("object", text("model")),
                ("owned_by", text("me")),
                ("permissions", Py::List(Vec::new())),
            ])]),
        ),
    ])
}

/// `GET /props` of llama.cpp's `llama-server` (the fields a client reads).
fn props(settings: &Settings) -> Py {
    Py::Obj(vec![
        (
            "default_generation_settings",
            Py::Obj(vec![
                ("n_ctx", Py::Int(settings.n_ctx as i64)),
                (
                    "params",
                    Py::Obj(vec![("n_predict", Py::Int(-1)), ("stream", Py::Bool(true))]),
                ),
            ]),
        ),
        ("total_slots", Py::Int(1)),
        (
            "model_path",
            text(&format!("/models/{}.gguf", settings.model_alias)),
        ),
        (
            "chat_template",
            text("{{ bos_token }}{% for message in messages %}...{% endfor %}"),
        ),
    ])
}
