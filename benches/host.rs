//! The host as Neovim sees it: how long a request takes to answer, how long a whole plan loop
//! takes against the fake server, and how much memory the host process uses. The host is the
//! release binary, spoken to over msgpack-RPC exactly as Neovim does. Prints figures only.
//! Run with `cargo bench --bench host`.

#[path = "../tests/support/fake_llm.rs"]
mod fake_llm;

use std::process::Stdio;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nvim_rs::compat::tokio::Compat;
use nvim_rs::{Handler, Neovim, Value};
use serde_json::json;
use tokio::process::ChildStdin;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

use fake_llm::{FakeLlm, TurnBuilder};

const RUNS: usize = 20;

/// Plays Neovim's part: accepts the events the host pushes with nvim_exec_lua.
#[derive(Clone)]
struct FakeEditor {
    events: UnboundedSender<serde_json::Value>,
}

#[async_trait]
impl Handler for FakeEditor {
    type Writer = Compat<ChildStdin>;

    async fn handle_request(
        &self,
        name: String,
        args: Vec<Value>,
        _: Neovim<Self::Writer>,
    ) -> Result<Value, Value> {
        if name == "nvim_exec_lua"
            && let Some(Value::Array(lua_args)) = args.get(1)
            && let Some(event) = lua_args.first()
        {
            let event =
                rmpv::ext::from_value::<serde_json::Value>(event.clone()).unwrap_or_default();
            let _ = self.events.send(event);
        }
        Ok(Value::Nil)
    }
}

fn map(pairs: Vec<(&str, Value)>) -> Value {
    Value::Map(
        pairs
            .into_iter()
            .map(|(key, value)| (Value::from(key), value))
            .collect(),
    )
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run());
}

async fn run() {
    let fake = FakeLlm::start().await;
    let state = tempfile::tempdir().expect("tempdir");
    let project = state.path().join("project");
    std::fs::create_dir_all(project.join("src")).expect("mkdir");
    std::fs::write(project.join("src/main.rs"), "fn main() {}\n").expect("write");
    let (sender, mut events) = unbounded_channel();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_loopr"));
    command
        .args(["rpc", "--log-level", "info", "--log-file"])
        .arg(state.path().join("loopr.log"))
        .env("LOOPR_HOME", state.path().join("home"))
        .env("ANTHROPIC_API_KEY", "sk-bench")
        .env("ANTHROPIC_BASE_URL", fake.base_url())
        .stderr(Stdio::null());
    let (host, _io, child) =
        nvim_rs::create::tokio::new_child_cmd(&mut command, FakeEditor { events: sender })
            .await
            .expect("start host");
    let pid = child.id().expect("pid");
    host.call("version", vec![])
        .await
        .expect("call")
        .expect("version");
    println!("host idle after start: {}", memory(pid));

    let root = Value::from(project.display().to_string());
    let mut request_latencies = Vec::new();
    for _ in 0..200 {
        let begin = Instant::now();
        host.call("status", vec![map(vec![("root", root.clone())])])
            .await
            .expect("call")
            .expect("status");
        request_latencies.push(begin.elapsed());
    }
    request_latencies.sort();
    println!(
        "status request round trip: median {:.3} ms, p99 {:.3} ms",
        ms(request_latencies[100]),
        ms(request_latencies[198])
    );

    let plan = json!({"title": "Bench", "overview": "Measure the host: a plan with two specs, the second depending on the first, detailed enough to pass the sparseness rule of the plan artifact.", "specs": [
        {"name": "one", "title": "One", "description": "The first spec: read the project layout and settle where the change goes.", "dependencies": []},
        {"name": "two", "title": "Two", "description": "The second spec: make the change and cover it with tests.", "dependencies": ["one"]}
    ]});
    let mut reply_latencies = Vec::new();
    let mut loop_latencies = Vec::new();
    for _ in 0..RUNS {
        fake.push(
            TurnBuilder::new()
                .tool_use("t1", "list_files", json!({}))
                .reply(),
        );
        fake.push(
            TurnBuilder::new()
                .tool_use("t2", "read_file", json!({"path": "src/main.rs"}))
                .reply(),
        );
        fake.push(
            TurnBuilder::new()
                .tool_use("t3", "create_plan", plan.clone())
                .reply(),
        );
        let begin = Instant::now();
        host.call(
            "plan",
            vec![map(vec![
                ("task", Value::from("Bench the host")),
                ("root", root.clone()),
                (
                    "settings",
                    map(vec![("plan_review_passes", Value::from(0))]),
                ),
            ])],
        )
        .await
        .expect("call")
        .expect("plan");
        reply_latencies.push(begin.elapsed());
        loop {
            let event = tokio::time::timeout(Duration::from_secs(30), events.recv())
                .await
                .expect("event in time")
                .expect("event");
            let settled = event["event"] == "loop_updated"
                && event["status"] != "running"
                && event["status"] != "pending";
            if settled {
                // Plans wait for review by default: that is the end of the loop's work.
                assert_eq!(event["status"], "awaiting_approval", "{event}");
                break;
            }
        }
        loop_latencies.push(begin.elapsed());
    }
    reply_latencies.sort();
    loop_latencies.sort();
    println!(
        "plan request answered (what :LooprPlan waits for): median {:.3} ms, max {:.3} ms",
        ms(reply_latencies[RUNS / 2]),
        ms(reply_latencies[RUNS - 1])
    );
    println!(
        "plan loop of 3 streamed turns with 2 tool calls, to stored plan.md: median {:.2} ms, max {:.2} ms",
        ms(loop_latencies[RUNS / 2]),
        ms(loop_latencies[RUNS - 1])
    );
    println!("host after {RUNS} plan loops: {}", memory(pid));
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn memory(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kib| kib.parse::<u64>().ok())
            .map_or_else(
                || "?".to_owned(),
                |kib| format!("{:.1} MiB", kib as f64 / 1024.0),
            )
    };
    format!("RSS {}, peak RSS {}", field("VmRSS:"), field("VmHWM:"))
}
