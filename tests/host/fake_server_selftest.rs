//! Checks that the fake Anthropic server behaves as the other tests expect.

use crate::fake_llm;

use std::time::Duration;

use fake_llm::{
    FakeLlm, Reply, SseEvent, TurnBuilder, error_reply, mid_stream_error, recorded,
    serialize_events, truncated_tool_use,
};
use futures::StreamExt;
use serde_json::{Value, json};

/// Generous bound so a broken server fails the test instead of hanging it.
const BOUND: Duration = Duration::from_secs(5);

fn client() -> reqwest::Client {
    // reqwest is built without a TLS provider of its own; the host installs one.
    loopr::llm::http::install_tls_provider();
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("reqwest client")
}

async fn post(server: &FakeLlm, body: &Value) -> reqwest::Response {
    client()
        .post(server.messages_url())
        .header("x-api-key", "sk-test")
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .expect("send request")
}

/// Reads the whole body, returning every chunk as it arrived.
async fn read_chunks(response: reqwest::Response) -> Vec<Vec<u8>> {
    let mut stream = response.bytes_stream();
    let mut chunks = Vec::new();
    while let Some(chunk) = tokio::time::timeout(BOUND, stream.next())
        .await
        .expect("body stalled")
    {
        chunks.push(chunk.expect("body chunk").to_vec());
    }
    chunks
}

/// Reads the body until it holds at least `len` bytes, without waiting for its end.
async fn read_at_least(
    stream: &mut (impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    len: usize,
) -> Vec<u8> {
    let mut received = Vec::new();
    while received.len() < len {
        let chunk = tokio::time::timeout(BOUND, stream.next())
            .await
            .expect("pieces arrive")
            .expect("body not ended")
            .expect("chunk");
        received.extend_from_slice(&chunk);
    }
    received
}

/// Minimal SSE parser for named events with single-line data.
fn parse_sse(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut event = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(rest) = line.strip_prefix("event: ") {
                    event = Some(rest.to_string());
                } else if let Some(rest) = line.strip_prefix("data: ") {
                    data = Some(serde_json::from_str(rest).expect("data is JSON"));
                }
            }
            (event.expect("event line"), data.expect("data line"))
        })
        .collect()
}

#[tokio::test]
async fn records_request_before_replying() {
    let server = FakeLlm::start().await;
    server.push(TurnBuilder::new().text("ok").reply());
    let body = json!({"model": "claude-x", "max_tokens": 16, "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]});
    let response = post(&server, &body).await;

    // The request is recorded before the response head is sent.
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.body, body);
    assert_eq!(request.header("X-Api-Key"), Some("sk-test"));
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert!(request.headers.iter().all(|(n, _)| *n == n.to_lowercase()));

    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream; charset=utf-8"
    );
    read_chunks(response).await;
    assert_eq!(server.wait_for_requests(1).await.len(), 1);
    assert_eq!(server.remaining_replies(), 0);
}

#[tokio::test]
async fn stream_reply_arrives_in_odd_chunks() {
    let server = FakeLlm::start().await;
    let input = json!({"path": "src/main.rs", "lines": [1, 2, 3], "note": "héllo ✓"});
    let turn = TurnBuilder::new()
        .text("Let me look at that file — ünïcödé included.")
        .ping()
        .tool_use("toolu_01", "read_file", input.clone())
        .usage(321, 45);
    let events = turn.events();
    server.push(turn.reply());

    let response = post(&server, &json!({})).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("content-length").is_none());
    let chunks = read_chunks(response).await;
    assert!(
        chunks.len() > 1,
        "expected many chunks, got {}",
        chunks.len()
    );
    assert!(chunks.iter().all(|c| (1..=23).contains(&c.len())));
    let body = String::from_utf8(chunks.concat()).expect("utf-8 body");
    assert_eq!(body, serialize_events(&events));

    // The events have the real API's shape.
    let parsed = parse_sse(&body);
    let names: Vec<&str> = parsed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"]);
    assert!(names.contains(&"ping"));
    for (name, data) in &parsed {
        assert_eq!(data["type"], name.as_str());
    }
    assert_eq!(parsed[0].1["message"]["usage"]["input_tokens"], 321);
    let delta = &parsed[parsed.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta["usage"]["output_tokens"], 45);

    let text: String = parsed
        .iter()
        .filter(|(_, d)| d["index"] == 0 && d["delta"]["type"] == "text_delta")
        .map(|(_, d)| d["delta"]["text"].as_str().expect("text"))
        .collect();
    assert_eq!(text, "Let me look at that file — ünïcödé included.");

    let start = parsed
        .iter()
        .find(|(n, d)| n == "content_block_start" && d["index"] == 1)
        .expect("tool_use block start");
    assert_eq!(
        start.1["content_block"],
        json!({"type": "tool_use", "id": "toolu_01", "name": "read_file", "input": {}})
    );
    let fragments: Vec<&str> = parsed
        .iter()
        .filter(|(_, d)| d["index"] == 1 && d["delta"]["type"] == "input_json_delta")
        .map(|(_, d)| d["delta"]["partial_json"].as_str().expect("fragment"))
        .collect();
    assert_eq!(fragments[0], "");
    assert!(fragments.len() > 2);
    let reassembled: Value = serde_json::from_str(&fragments.concat()).expect("input JSON");
    assert_eq!(reassembled, input);
    assert!(
        parsed
            .iter()
            .any(|(n, d)| n == "content_block_stop" && d["index"] == 1)
    );
}

#[tokio::test]
async fn status_reply_and_fallbacks() {
    let server = FakeLlm::start().await;
    server.push(
        error_reply(429, "rate_limit_error", "slow down")
            .with_header("retry-after", "3")
            .with_header("x-should-retry", "true"),
    );

    let response = post(&server, &json!({"n": 1})).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "3");
    assert_eq!(response.headers()["x-should-retry"], "true");
    assert_eq!(response.headers()["content-type"], "application/json");
    let body: Value = response.json().await.expect("json body");
    assert_eq!(body["type"], "error");
    assert_eq!(
        body["error"],
        json!({"type": "rate_limit_error", "message": "slow down"})
    );
    assert!(
        body["request_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("req_fake"))
    );

    // Queue exhausted: a loud 500 naming the request.
    let response = post(&server, &json!({"n": 2})).await;
    assert_eq!(response.status(), 500);
    let body: Value = response.json().await.expect("json body");
    assert_eq!(body["error"]["type"], "api_error");
    assert_eq!(
        body["error"]["message"],
        "fake server: no scripted reply left for request 2"
    );

    // Other paths: 404, still recorded, no reply consumed.
    server.push(TurnBuilder::new().text("unused").reply());
    let response = client()
        .get(format!("{}/v1/models", server.base_url()))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 404);
    let requests = server.wait_for_requests(3).await;
    assert_eq!(requests[2].path, "/v1/models");
    assert_eq!(requests[2].method, "GET");
    assert_eq!(server.remaining_replies(), 1);
}

#[tokio::test]
async fn an_answer_counts_as_served_once_its_last_piece_is_taken() {
    let server = FakeLlm::start().await;
    let turn = TurnBuilder::new().text("a whole answer");
    let events = turn.events();
    let expected = serialize_events(&events).into_bytes();
    // The producer holds the body open after its last piece, as one preempted between its
    // last send and its end does.
    let (held_open, release) = turn.paused_after("message_stop");
    server.push(held_open);
    server.push(Reply::Stall(events[..3].to_vec()));

    // The client has the last byte: the answer was served, whether or not the body has ended
    // (a client that leaves at the last event never sees the end; the benches time the host
    // from this moment).
    let response = post(&server, &json!({})).await;
    let mut stream = response.bytes_stream();
    read_at_least(&mut stream, expected.len()).await;
    let requests = server.requests();
    assert!(
        server.served_at(requests[0].number).is_some(),
        "every piece was taken, yet the answer is not served"
    );
    drop(stream);
    release.notify_one();

    // A stalled answer is never served, however much of it was sent.
    let response = post(&server, &json!({})).await;
    let stalled = serialize_events(&events[..3]).into_bytes();
    let mut stream = response.bytes_stream();
    read_at_least(&mut stream, stalled.len()).await;
    drop(stream);
    tokio::time::timeout(BOUND, server.wait_for_disconnect())
        .await
        .expect("server notices the client went away");
    assert_eq!(server.served_at(server.requests()[1].number), None);
}

#[tokio::test]
async fn stall_keeps_body_open_until_client_leaves() {
    let server = FakeLlm::start().await;
    let events = TurnBuilder::new().text("partial answer").events();
    let expected = serialize_events(&events[..3]).into_bytes();
    server.push(Reply::Stall(events[..3].to_vec()));

    {
        let response = post(&server, &json!({})).await;
        assert_eq!(response.status(), 200);
        let mut stream = response.bytes_stream();
        let received = read_at_least(&mut stream, expected.len()).await;
        assert_eq!(received, expected);

        // Nothing more, but the body doesn't end either.
        let next = tokio::time::timeout(Duration::from_millis(150), stream.next()).await;
        assert!(next.is_err(), "stalled body yielded {next:?}");
        assert_eq!(server.disconnects(), 0);
        // Dropping the stream (and with it the response) closes the connection.
        drop(stream);
    }
    tokio::time::timeout(BOUND, server.wait_for_disconnect())
        .await
        .expect("server notices the client went away");
    assert_eq!(server.disconnects(), 1);
}

#[tokio::test]
async fn builders_match_recorded_shapes() {
    // Truncated tool call: no content_block_stop for the tool block,
    // stop_reason max_tokens.
    let Reply::Turn(turn) = truncated_tool_use("toolu_9", "make_file", r#"{"filename": "tax"#)
    else {
        panic!("expected a turn");
    };
    let events = turn.events();
    let stops: Vec<&Value> = events
        .iter()
        .filter(|e| e.event == "content_block_stop")
        .map(|e| &e.data["index"])
        .collect();
    assert_eq!(stops, [&json!(0)]);
    let fragments: String = events
        .iter()
        .filter(|e| e.data["index"] == 1 && e.event == "content_block_delta")
        .map(|e| e.data["delta"]["partial_json"].as_str().expect("fragment"))
        .collect();
    assert_eq!(fragments, r#"{"filename": "tax"#);
    let delta = events
        .iter()
        .find(|e| e.event == "message_delta")
        .expect("message_delta");
    assert_eq!(delta.data["delta"]["stop_reason"], "max_tokens");
    assert_eq!(
        events.last().map(|e| e.event.as_str()),
        Some("message_stop")
    );

    // Mid-stream error: the partial events, then an error event, then EOF.
    let partial = TurnBuilder::new().text("Hel").events()[..3].to_vec();
    let Reply::Stream(events) = mid_stream_error(partial.clone(), "overloaded_error", "Overloaded")
    else {
        panic!("expected a stream");
    };
    assert_eq!(&events[..3], &partial[..]);
    assert_eq!(
        events.last(),
        Some(&SseEvent::new(
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
        ))
    );

    // Empty tool input streams only the leading "" fragment.
    let events = TurnBuilder::new().tool_use("t", "list", json!({})).events();
    let fragments: Vec<&Value> = events
        .iter()
        .filter(|e| e.event == "content_block_delta")
        .map(|e| &e.data["delta"]["partial_json"])
        .collect();
    assert_eq!(fragments, [&json!("")]);
}

#[tokio::test]
async fn replays_recorded_fixture_verbatim() {
    let server = FakeLlm::start().await;
    server.push(recorded("tool_use_response.sse"));
    let response = post(&server, &json!({})).await;
    assert_eq!(response.status(), 200);
    let chunks = read_chunks(response).await;
    assert!(chunks.len() > 1);
    let expected = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/anthropic-sse/tool_use_response.sse"
    ))
    .expect("fixture");
    assert_eq!(chunks.concat(), expected);
}

#[tokio::test]
async fn paced_reply_sends_an_event_per_frame_at_the_pace() {
    let server = FakeLlm::start().await;
    let interval = Duration::from_millis(30);
    let turn = TurnBuilder::new().text_deltas(["one ", "two ", "three"]);
    let events = turn.events();
    server.push(turn.paced(interval));

    let begin = std::time::Instant::now();
    let response = post(&server, &json!({})).await;
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let mut arrivals = Vec::new();
    let mut body = Vec::new();
    while let Some(chunk) = tokio::time::timeout(BOUND, stream.next())
        .await
        .expect("body stalled")
    {
        arrivals.push(begin.elapsed());
        body.extend_from_slice(&chunk.expect("body chunk"));
    }
    assert_eq!(
        String::from_utf8(body).expect("utf-8 body"),
        serialize_events(&events)
    );
    // Event k leaves k intervals after the first; the last arrives no earlier.
    let pace = interval * (events.len() as u32 - 1);
    let last = *arrivals.last().expect("a chunk");
    assert!(
        last >= pace,
        "{} events at {interval:?} took only {last:?}",
        events.len()
    );
    assert!(
        arrivals.len() >= events.len() / 2,
        "the events came in {} pieces, not one after the other",
        arrivals.len()
    );
}

#[tokio::test]
async fn delayed_reply_waits_before_answering() {
    let server = FakeLlm::start().await;
    let latency = Duration::from_millis(150);
    server.push(TurnBuilder::new().text("late").reply().delayed(latency));
    server.push(TurnBuilder::new().text("prompt").reply());

    let begin = std::time::Instant::now();
    let response = post(&server, &json!({})).await;
    let waited = begin.elapsed();
    assert_eq!(response.status(), 200);
    assert!(waited >= latency, "answered after {waited:?}");
    let text = String::from_utf8(read_chunks(response).await.concat()).expect("utf-8 body");
    assert!(text.contains("late"), "{text}");

    // Only the delayed reply waits.
    let begin = std::time::Instant::now();
    let response = post(&server, &json!({})).await;
    assert!(begin.elapsed() < latency, "{:?}", begin.elapsed());
    read_chunks(response).await;
}

// ---------------------------------------------------------------------------
// The llama-cpp-python server (Wire::LlamaCpp)
// ---------------------------------------------------------------------------

mod llamacpp {
    use super::*;
    use fake_llm::llamacpp::{Overflow, StreamedCalls};

    /// A recording of `tests/data/llamacpp-openai/`.
    fn recording(name: &str) -> String {
        std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/llamacpp-openai")
                .join(name),
        )
        .expect("recording")
    }

    async fn post_chat(server: &FakeLlm, body: &Value) -> reqwest::Response {
        client()
            .post(format!("{}/v1/chat/completions", server.base_url()))
            .json(body)
            .send()
            .await
            .expect("send request")
    }

    fn chat_body(stream: bool) -> Value {
        json!({"model": "gemma3", "stream": stream,
               "stream_options": {"include_usage": true},
               "messages": [{"role": "user", "content": "Say hello."}]})
    }

    /// The body as it came, and whether the connection ended without the body's end.
    async fn read_body(response: reqwest::Response) -> (String, bool) {
        let mut stream = response.bytes_stream();
        let mut body = Vec::new();
        let mut dropped = false;
        while let Some(chunk) = tokio::time::timeout(BOUND, stream.next())
            .await
            .expect("body stalled")
        {
            match chunk {
                Ok(bytes) => body.extend_from_slice(&bytes),
                Err(_) => {
                    dropped = true;
                    break;
                }
            }
        }
        (String::from_utf8(body).expect("utf-8 body"), dropped)
    }

    /// The `data:` payloads of an SSE body, comments left out.
    fn payloads(body: &str) -> Vec<&str> {
        body.split("\n\n")
            .filter_map(|event| event.strip_prefix("data: "))
            .collect()
    }

    /// `recorded` with its completion id and `created` replaced by those of `body`'s first
    /// chunk, which the fake makes up.
    fn with_names_of(recorded: &str, body: &str) -> String {
        let first: Value = serde_json::from_str(payloads(body)[0]).expect("a chunk");
        let recorded_first: Value =
            serde_json::from_str(payloads(recorded)[0]).expect("a recorded chunk");
        recorded
            .replace(
                recorded_first["id"].as_str().expect("id"),
                first["id"].as_str().expect("id"),
            )
            .replace(
                &recorded_first["created"].to_string(),
                &first["created"].to_string(),
            )
    }

    #[tokio::test]
    async fn a_streamed_answer_is_framed_byte_for_byte_as_recorded() {
        let server = FakeLlm::start_llamacpp().await;
        server.push(
            TurnBuilder::new()
                .text_deltas(["Say", " hello", ".", " mendatang", "user", " more"])
                .reply(),
        );
        let mut body = chat_body(true);
        body["max_tokens"] = json!(5);
        let response = post_chat(&server, &body).await;
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["content-type"],
            "text/event-stream; charset=utf-8"
        );
        let (received, dropped) = read_body(response).await;
        assert!(!dropped, "{received}");
        // A role chunk without content, one chunk per token, the finish (here the token
        // limit), `[DONE]`, and no usage although it was asked for.
        assert_eq!(
            received,
            with_names_of(&recording("short_stream_stop.sse"), &received)
        );
        let first: Value = serde_json::from_str(payloads(&received)[0]).expect("chunk");
        let id = first["id"].as_str().expect("id");
        let uuid = id.strip_prefix("chatcmpl-").expect("chatcmpl- id");
        let groups: Vec<usize> = uuid.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12], "{id}");
        assert!(!received.contains("usage"), "{received}");
    }

    #[tokio::test]
    async fn a_turn_scripted_to_end_at_the_token_limit_ends_at_length() {
        let server = FakeLlm::start_llamacpp().await;
        server.push(
            TurnBuilder::new()
                .text("cut short")
                .stop_reason("max_tokens")
                .reply(),
        );
        let (received, _) = read_body(post_chat(&server, &chat_body(true)).await).await;
        assert!(
            received.contains("\"finish_reason\": \"length\"}]}\n\ndata: [DONE]"),
            "{received}"
        );
    }

    #[tokio::test]
    async fn non_ascii_text_is_escaped_as_python_writes_it() {
        let server = FakeLlm::start_llamacpp().await;
        server.push(TurnBuilder::new().text_deltas(["héllo \"✓\" 🦙\n"]).reply());
        let (received, _) = read_body(post_chat(&server, &chat_body(true)).await).await;
        assert!(
            received.contains(r#"{"content": "h\u00e9llo \"\u2713\" \ud83e\udd99\n"}"#),
            "{received}"
        );
    }

    #[tokio::test]
    async fn pings_go_out_while_the_prompt_is_evaluated() {
        let server = FakeLlm::start_llamacpp().await;
        server.llamacpp().configure(|settings| {
            settings.prompt_eval = Duration::from_millis(400);
            settings.ping_interval = Duration::from_millis(50);
        });
        server.push(TurnBuilder::new().text("late").reply());
        let response = post_chat(&server, &chat_body(true)).await;
        assert_eq!(
            response.status(),
            200,
            "the answer starts before the evaluation"
        );
        let (received, _) = read_body(response).await;
        let before_answer = &received[..received.find("data: ").expect("data")];
        let pings: Vec<&str> = before_answer.split_terminator("\n\n").collect();
        assert!(pings.len() >= 3, "{received}");
        let recorded = recording("ping_then_stream_length.sse");
        let recorded_ping = recorded.lines().next().expect("a line");
        for ping in pings {
            // `: ping - 2026-11-25 21:04:39.062661+00:00`
            let stamp = ping.strip_prefix(": ping - ").expect("a ping comment");
            assert_eq!(
                stamp.len(),
                recorded_ping.len() - ": ping - ".len(),
                "{ping}"
            );
            assert!(stamp.ends_with("+00:00"), "{ping}");
            assert_eq!(&stamp[10..11], " ", "{ping}");
        }
    }

    #[tokio::test]
    async fn a_new_request_interrupts_the_answer_in_flight_as_recorded() {
        let server = FakeLlm::start_llamacpp().await;
        server
            .llamacpp()
            .configure(|settings| settings.prompt_eval = Duration::from_millis(600));
        server.push(TurnBuilder::new().text("the first answer").reply());
        server.push(TurnBuilder::new().text("the second answer").reply());
        let first = post_chat(&server, &chat_body(true)).await;
        // The second request comes while the first prompt is evaluated.
        let second = post_chat(&server, &chat_body(true)).await;
        let (interrupted, dropped) = read_body(first).await;
        // The recorder wrote a newline of its own when the connection closed.
        let recorded = recording("interrupted_done_without_finish_reason.sse");
        let recorded = format!("{}\n\n", recorded.trim_end());
        assert_eq!(
            interrupted,
            with_names_of(&recorded, &interrupted),
            "a role chunk, `[DONE]` without a finish reason"
        );
        assert!(dropped, "then the connection closes");
        let (answer, dropped) = read_body(second).await;
        assert!(!dropped);
        assert!(answer.contains("\"finish_reason\": \"stop\""), "{answer}");
        assert!(answer.ends_with("data: [DONE]\n\n"), "{answer}");
        assert_eq!(server.llamacpp().interruptions(), 1);
    }

    #[tokio::test]
    async fn asking_for_the_models_interrupts_an_answer_too() {
        let server = FakeLlm::start_llamacpp().await;
        server.push(
            TurnBuilder::new()
                .text_deltas(["one ", "two ", "three ", "four ", "five"])
                .paced(Duration::from_millis(150)),
        );
        let response = post_chat(&server, &chat_body(true)).await;
        let mut stream = response.bytes_stream();
        read_at_least(&mut stream, 1).await;
        let models = client()
            .get(format!("{}/v1/models", server.base_url()))
            .send()
            .await
            .expect("models");
        assert_eq!(models.status(), 200);
        assert_eq!(
            models.text().await.expect("models body"),
            r#"{"object":"list","data":[{"id":"gemma3","object":"model","owned_by":"me","permissions":[]}]}"#
        );
        assert_eq!(server.llamacpp().interruptions(), 1);
    }

    #[tokio::test]
    async fn an_assistant_message_without_content_gets_the_recorded_500() {
        let server = FakeLlm::start_llamacpp().await;
        server.push(TurnBuilder::new().text("fine").reply());
        let call = json!([{"id": "call_1", "type": "function",
            "function": {"name": "read_file", "arguments": "{}"}}]);
        let history = |assistant: Value| {
            json!({"model": "gemma3", "stream": true, "messages": [
                {"role": "user", "content": "Read it."},
                assistant,
                {"role": "tool", "tool_call_id": "call_1", "content": "text"}
            ]})
        };
        for assistant in [
            json!({"role": "assistant", "content": null, "tool_calls": call}),
            json!({"role": "assistant", "tool_calls": call}),
        ] {
            let response = post_chat(&server, &history(assistant)).await;
            assert_eq!(response.status(), 500);
            assert_eq!(
                response.text().await.expect("body"),
                recording("http500_on_null_content.json")
            );
        }
        let response = post_chat(
            &server,
            &history(json!({"role": "assistant", "content": "", "tool_calls": call})),
        )
        .await;
        assert_eq!(response.status(), 200, "\"\" is accepted");
        let (answer, _) = read_body(response).await;
        assert!(answer.contains("fine"), "{answer}");
    }

    /// `body` with its first message padded so that the whole body is `tokens` tokens (the
    /// fake counts four bytes a token).
    fn padded_to(mut body: Value, tokens: usize) -> Value {
        let length = body.to_string().len();
        let content = body["messages"][0]["content"].as_str().expect("content");
        body["messages"][0]["content"] =
            json!(format!("{content}{}", "x".repeat(tokens * 4 - length)));
        body
    }

    #[tokio::test]
    async fn a_prompt_over_the_context_window_closes_the_connection_after_the_200() {
        let server = FakeLlm::start_llamacpp().await;
        server.llamacpp().configure(|settings| settings.n_ctx = 256);
        server.push(TurnBuilder::new().text("never").reply());
        let response = post_chat(&server, &padded_to(chat_body(true), 300)).await;
        assert_eq!(response.status(), 200);
        let (received, dropped) = read_body(response).await;
        assert!(dropped, "the connection closes");
        assert_eq!(received, "", "with nothing of an answer");
    }

    #[tokio::test]
    async fn a_prompt_over_the_context_window_can_be_reported_in_the_stream() {
        let server = FakeLlm::start_llamacpp().await;
        server.llamacpp().configure(|settings| {
            settings.n_ctx = 256;
            settings.overflow = Overflow::ErrorInStream;
        });
        server.push(TurnBuilder::new().text("never").reply());
        let response = post_chat(&server, &padded_to(chat_body(true), 300)).await;
        assert_eq!(response.status(), 200);
        let (received, dropped) = read_body(response).await;
        assert!(!dropped);
        assert_eq!(
            received,
            "data: {\"error\": {\"message\": \"Requested tokens (300) exceed context window of \
             256\", \"type\": \"internal_server_error\", \"param\": null, \"code\": null}}\n\n"
        );
    }

    #[tokio::test]
    async fn a_prompt_over_the_context_window_is_a_400_when_not_streamed() {
        let server = FakeLlm::start_llamacpp().await;
        server.llamacpp().configure(|settings| settings.n_ctx = 256);
        server.push(TurnBuilder::new().text("never").reply());
        let mut body = chat_body(false);
        body["max_tokens"] = json!(64);
        let response = post_chat(&server, &padded_to(body, 300)).await;
        assert_eq!(response.status(), 400);
        assert_eq!(
            response.json::<Value>().await.expect("json"),
            json!({"error": {"message": "This model's maximum context length is 256 tokens. \
                However, you requested 364 tokens (300 in the messages, 64 in the completion). \
                Please reduce the length of the messages or completion.",
                "type": "invalid_request_error", "param": "messages",
                "code": "context_length_exceeded"}})
        );
    }

    #[tokio::test]
    async fn an_answer_longer_than_the_window_leaves_ends_at_length() {
        let server = FakeLlm::start_llamacpp().await;
        server.llamacpp().configure(|settings| settings.n_ctx = 256);
        server.push(
            TurnBuilder::new()
                .text_deltas(["a", "b", "c", "d", "e", "f"])
                .reply(),
        );
        let mut body = chat_body(true);
        body["max_tokens"] = json!(8192);
        let (received, _) = read_body(post_chat(&server, &padded_to(body, 252)).await).await;
        let chunks: Vec<Value> = payloads(&received)
            .into_iter()
            .filter(|payload| *payload != "[DONE]")
            .map(|payload| serde_json::from_str(payload).expect("chunk"))
            .collect();
        let text: String = chunks
            .iter()
            .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, "abcd", "the four tokens the window leaves");
        assert_eq!(
            chunks.last().expect("finish")["choices"][0]["finish_reason"],
            "length"
        );
    }

    #[tokio::test]
    async fn props_answer_as_llama_server_and_not_at_all_as_llama_cpp_python() {
        let server = FakeLlm::start_llamacpp().await;
        server
            .llamacpp()
            .configure(|settings| settings.n_ctx = 4096);
        let props: Value = client()
            .get(format!("{}/props", server.base_url()))
            .send()
            .await
            .expect("props")
            .json()
            .await
            .expect("json");
        assert_eq!(props["default_generation_settings"]["n_ctx"], 4096);
        assert_eq!(props["total_slots"], 1);
        assert!(props["model_path"].is_string() && props["chat_template"].is_string());
        server
            .llamacpp()
            .configure(|settings| settings.props = false);
        let response = client()
            .get(format!("{}/props", server.base_url()))
            .send()
            .await
            .expect("props");
        assert_eq!(response.status(), 404);
    }

    #[tokio::test]
    async fn a_call_not_streamed_is_shaped_as_recorded() {
        let server = FakeLlm::start_llamacpp().await;
        server.push(
            TurnBuilder::new()
                .tool_use(
                    "ignored",
                    "read_file",
                    json!({"path": "src/main.py", "start_line": 10000000}),
                )
                .reply(),
        );
        let body = chat_body(false);
        let response = post_chat(&server, &body).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "application/json");
        let received = response.text().await.expect("body");
        let answer: Value = serde_json::from_str(&received).expect("json");
        // The recorder ended the body with a newline the server did not send.
        let recorded = recording("tool_call_nonstreamed.json")
            .trim_end()
            .to_owned();
        let recorded_answer: Value = serde_json::from_str(&recorded).expect("json");
        let mut expected = recorded.clone();
        for (key, pointer) in [
            ("id", "/id"),
            ("created", "/created"),
            ("id", "/choices/0/message/tool_calls/0/id"),
            ("prompt_tokens", "/usage/prompt_tokens"),
            ("completion_tokens", "/usage/completion_tokens"),
            ("total_tokens", "/usage/total_tokens"),
        ] {
            let field =
                |answer: &Value| format!("\"{key}\":{}", answer.pointer(pointer).expect("field"));
            expected = expected.replace(&field(&recorded_answer), &field(&answer));
        }
        assert_eq!(received, expected);
        let call_id = answer
            .pointer("/choices/0/message/tool_calls/0/id")
            .and_then(Value::as_str)
            .expect("call id");
        assert!(call_id.starts_with("call__0_read_file_cmpl-"), "{call_id}");
        assert_eq!(
            answer["usage"]["prompt_tokens"],
            body.to_string().len() / 4,
            "a quarter of the request's bytes"
        );
    }

    #[tokio::test]
    async fn a_streamed_call_repeats_its_index_id_and_name_in_every_fragment() {
        let server = FakeLlm::start_llamacpp().await;
        let input = json!({"path": "src/main.py", "start_line": 3});
        server.push(
            TurnBuilder::new()
                .tool_use("ignored", "read_file", input.clone())
                .reply(),
        );
        let (received, _) = read_body(post_chat(&server, &chat_body(true)).await).await;
        let chunks: Vec<Value> = payloads(&received)
            .into_iter()
            .filter(|payload| *payload != "[DONE]")
            .map(|payload| serde_json::from_str(payload).expect("chunk"))
            .collect();
        assert_eq!(
            chunks[0]["choices"][0]["delta"],
            json!({"role": "assistant", "content": null, "function_call": null, "tool_calls": null})
        );
        let fragments: Vec<&Value> = chunks[1..chunks.len() - 1]
            .iter()
            .map(|chunk| &chunk["choices"][0]["delta"]["tool_calls"][0])
            .collect();
        assert!(fragments.len() > 2, "{received}");
        let id = fragments[0]["id"].as_str().expect("id");
        assert!(id.starts_with("call__0_read_file_cmpl-"), "{id}");
        for fragment in &fragments {
            assert_eq!(fragment["index"], 0);
            assert_eq!(fragment["id"], id);
            assert_eq!(fragment["function"]["name"], "read_file");
        }
        assert_eq!(fragments.last().expect("last")["function"]["arguments"], "");
        let arguments: String = fragments
            .iter()
            .map(|fragment| fragment["function"]["arguments"].as_str().expect("piece"))
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&arguments).expect("json"),
            input
        );
        let finish = &chunks.last().expect("finish")["choices"][0];
        assert_eq!(finish["finish_reason"], "tool_calls");
        assert!(received.ends_with("data: [DONE]\n\n"));
    }

    #[tokio::test]
    async fn with_calls_only_forced_an_automatic_streamed_call_drops_the_connection() {
        let server = FakeLlm::start_llamacpp().await;
        server
            .llamacpp()
            .configure(|settings| settings.streamed_calls = StreamedCalls::OnlyForced);
        let turn = TurnBuilder::new().tool_use("ignored", "list_files", json!({}));
        server.push(turn.reply());
        server.push(turn.reply());
        let mut body = chat_body(true);
        body["tool_choice"] = json!("auto");
        let response = post_chat(&server, &body).await;
        assert_eq!(response.status(), 200);
        let (received, dropped) = read_body(response).await;
        assert!(dropped && received.is_empty(), "{received}");
        body["tool_choice"] = json!({"type": "function", "function": {"name": "list_files"}});
        let (received, dropped) = read_body(post_chat(&server, &body).await).await;
        assert!(!dropped);
        assert!(received.contains("call__0_list_files_cmpl-"), "{received}");
    }
}
