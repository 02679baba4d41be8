//! How fast the client turns a streamed Messages API answer into a turn: in memory (parser
//! cost alone) and over real loopback HTTP against the fake server. Prints figures; asserts
//! nothing about time. Run with `cargo bench --bench anthropic_stream`.

#[path = "../tests/support/fake_llm.rs"]
mod fake_llm;

#[path = "support/runtime.rs"]
mod runtime;

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use fake_llm::{FakeLlm, TurnBuilder, serialize_events, split_at_odd_boundaries};
use loopr::llm::anthropic::{AnthropicClient, AnthropicConfig, read_turn};
use loopr::llm::{AnswerLimits, ApiKey, RetryPolicy};
use loopr::llm::{ChatRequest, LlmProvider, Message};

fn main() {
    runtime::block_on(async {
        println!("in memory (parser and assembler only):");
        for (name, turn) in turns() {
            parse_in_memory(name, &turn).await;
        }
        // The fake server sends every 1-23 bytes as its own HTTP chunk, so these figures are
        // dominated by framing overhead; the real API sends about one event per chunk.
        println!("over loopback HTTP (fake server, chunked, 1-23-byte frames):");
        for (name, turn) in turns() {
            over_http(name, &turn, 20).await;
        }
    });
}

/// Shapes like the real API's: many small deltas.
fn turns() -> Vec<(&'static str, TurnBuilder)> {
    let description = "Implement the part of the feature this spec covers, with tests. ";
    let specs: Vec<_> = (0..10)
        .map(|i| json!({"name": format!("spec-{i}"), "title": "A spec", "description": description.repeat(20), "dependencies": []}))
        .collect();
    let plan = json!({"title": "Bench", "overview": description.repeat(40), "specs": specs});
    let plan_text = plan.to_string();
    let fragments: Vec<String> = plan_text
        .as_bytes()
        .chunks(24)
        .map(|chunk| String::from_utf8_lossy(chunk).into_owned())
        .collect();
    let words = "The quick brown fox jumps over the lazy dog. ";
    vec![
        (
            "small tool call",
            TurnBuilder::new()
                .text("Let me look.")
                .tool_use("toolu_1", "list_files", json!({})),
        ),
        (
            "create_plan, 17 KB input in 24-byte fragments",
            TurnBuilder::new().tool_use_fragments("toolu_plan", "create_plan", fragments),
        ),
        (
            "100 KB of text in 20-byte deltas",
            TurnBuilder::new().text_deltas(std::iter::repeat_n(&words[..20], 5000)),
        ),
    ]
}

async fn parse_in_memory(name: &str, turn: &TurnBuilder) {
    let events = turn.events();
    let bytes = serialize_events(&events).into_bytes();
    let per_event: Vec<Bytes> = events
        .iter()
        .map(|event| Bytes::from(event.to_sse()))
        .collect();
    let odd = split_at_odd_boundaries(&bytes, 7);
    for (split, chunks) in [
        ("one event per chunk", per_event),
        ("1-23-byte chunks", odd),
    ] {
        let rounds = 50;
        let started = Instant::now();
        for _ in 0..rounds {
            let stream = futures::stream::iter(chunks.iter().cloned().map(Ok::<_, std::io::Error>));
            read_turn(
                stream,
                AnswerLimits::starting_now(Duration::from_secs(5), Duration::from_secs(60), 8192),
                &|_| {},
            )
            .await
            .expect("turn");
        }
        let per_turn = started.elapsed() / rounds;
        println!(
            "  {name} ({} bytes, {split}): {:.3} ms per turn, {:.0} MiB/s",
            bytes.len(),
            per_turn.as_secs_f64() * 1000.0,
            bytes.len() as f64 / 1_048_576.0 / per_turn.as_secs_f64()
        );
    }
}

async fn over_http(name: &str, turn: &TurnBuilder, turns: usize) {
    let fake = FakeLlm::start().await;
    let body_bytes = serialize_events(&turn.events()).len();
    let client = AnthropicClient::new(AnthropicConfig {
        base_url: fake.base_url(),
        api_key: ApiKey::new("sk-bench".to_owned()),
        retry: RetryPolicy {
            max_retries: 0,
            request_timeout: Duration::from_secs(60),
            stream_idle_timeout: Duration::from_secs(10),
        },
    })
    .expect("client");
    let request = ChatRequest {
        model: "bench".to_owned(),
        max_tokens: 1024,
        system: String::new(),
        messages: loopr::llm::shared(vec![Message::user_text("go")]),
        tools: Vec::new().into(),
    };
    let cancel = CancellationToken::new();
    let mut latencies = Vec::with_capacity(turns);
    for _ in 0..turns {
        fake.push(turn.reply());
        let begin = Instant::now();
        client
            .complete(&request, &|_| {}, &cancel)
            .await
            .expect("turn");
        latencies.push(begin.elapsed());
    }
    latencies.sort();
    println!(
        "  {name} ({body_bytes} bytes): median {:.2} ms, max {:.2} ms per turn",
        latencies[turns / 2].as_secs_f64() * 1000.0,
        latencies[turns - 1].as_secs_f64() * 1000.0,
    );
}
