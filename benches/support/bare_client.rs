//! The floor for the host's figures: a client that only sends the long loop's requests (the
//! same sizes, over the same HTTP client) and reads each answer to its end, with no loop, no
//! tools and no journal. It runs in a process of its own, as the host does: the bench binary
//! started again with `URL_VARIABLE` set.

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::json;

use crate::fake_llm::{FakeLlm, TurnBuilder};

/// Set to the fake's messages URL in the child process that plays the client.
const URL_VARIABLE: &str = "LOOPR_BENCH_BARE_CLIENT_URL";
const TURNS_VARIABLE: &str = "LOOPR_BENCH_BARE_CLIENT_TURNS";

/// What the fake saw of the bare client's requests.
pub struct Floor {
    /// The first request's arrival to the last answer's end.
    pub wall: Duration,
    /// Each request's arrival to its answer's end, summed.
    pub server: Duration,
    /// How long each answer's end to the next request's arrival took, on average.
    pub between_turns: Duration,
}

/// Plays the client when this process was started for it; returns whether it was.
pub fn run_if_asked() -> bool {
    let Ok(url) = std::env::var(URL_VARIABLE) else {
        return false;
    };
    let turns = std::env::var(TURNS_VARIABLE)
        .ok()
        .and_then(|turns| turns.parse().ok())
        .expect("the number of turns");
    // The host's runtime: the same threads wake for the same events.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(send_all(&url, turns));
    true
}

/// One turn of the long loop as the Anthropic wire carries it: the model's read_file call
/// and its numbered result, with the comma that joins it to the message before.
fn turn_messages(index: usize, tool_result: &str) -> Bytes {
    let id = format!("toolu_{index:020}");
    let call = json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": id, "name": "read_file", "input": {"path": "src/big.rs"}}]});
    let result = json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": id, "content": tool_result}]});
    Bytes::from(format!(",{call},{result}"))
}

async fn send_all(url: &str, turns: usize) {
    let client = loopr::llm::http::shared_client().expect("the HTTP client");
    let line = "// a line of source text that the model reads again and again, as models do";
    let tool_result: String = (1..=200).map(|n| format!("{n:>6}\t{line}\n")).collect();
    let head = Bytes::from_static(
        br#"{"model":"m","max_tokens":1000,"stream":true,"messages":[{"role":"user","content":"Read it."}"#,
    );
    let mut sent: Vec<Bytes> = Vec::new();
    for index in 0..turns {
        let parts: Vec<Bytes> = std::iter::once(head.clone())
            .chain(sent.iter().cloned())
            .chain(std::iter::once(Bytes::from_static(b"]}")))
            .collect();
        let length: usize = parts.iter().map(Bytes::len).sum();
        let body = futures::stream::iter(parts.into_iter().map(Ok::<_, std::io::Error>));
        let response = client
            .post(url)
            .header("content-type", "application/json")
            .header("content-length", length)
            .body(reqwest::Body::wrap_stream(body))
            .send()
            .await
            .expect("the fake answers");
        response.bytes().await.expect("the whole answer");
        sent.push(turn_messages(index, &tool_result));
    }
}

/// Runs the bare client for `turns` requests against `fake` and reports what the fake saw.
pub async fn measure(fake: &FakeLlm, turns: usize) -> Floor {
    for index in 0..turns {
        fake.push(
            TurnBuilder::new()
                .tool_use(
                    &format!("bare{index}"),
                    "read_file",
                    json!({"path": "src/big.rs"}),
                )
                .reply(),
        );
    }
    let first = fake.requests().len();
    let status = tokio::process::Command::new(std::env::current_exe().expect("this bench"))
        .env(URL_VARIABLE, fake.messages_url())
        .env(TURNS_VARIABLE, turns.to_string())
        .status()
        .await
        .expect("the bare client runs");
    assert!(status.success(), "the bare client failed: {status}");
    let requests: Vec<_> = fake.requests().into_iter().skip(first).collect();
    assert_eq!(requests.len(), turns, "one request per turn");
    let served: Vec<Instant> = requests
        .iter()
        .map(|request| fake.served_at(request.number).expect("answer sent"))
        .collect();
    let server = requests
        .iter()
        .zip(&served)
        .map(|(request, served)| *served - request.arrived)
        .sum();
    let between: Duration = (1..turns)
        .map(|k| requests[k].arrived - served[k - 1])
        .sum();
    Floor {
        wall: served[turns - 1] - requests[0].arrived,
        server,
        between_turns: between / (turns as u32 - 1),
    }
}
