//! Checks that the fake Anthropic server behaves as the other tests expect.

#[path = "support/fake_llm.rs"]
mod fake_llm;

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
