//! The host as Neovim sees it: how long a request takes to answer, how long a whole plan loop
//! takes against the fake server, and how much memory the host process uses. The host is the
//! release binary, spoken to over msgpack-RPC exactly as Neovim does; `LOOPR_BENCH_HOST` names
//! another build of it to measure instead (the release workflow's: `target/dist/loopr`). Prints
//! figures only, and stops if the measured host no longer turns a panic into an error reply.
//! Run with `cargo bench --bench host`.

#[path = "support/bare_client.rs"]
mod bare_client;
#[path = "../tests/support/fake_llm.rs"]
mod fake_llm;
#[path = "../tests/support/nvim.rs"]
mod nvim;
#[path = "support/runtime.rs"]
mod runtime;

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

/// The host binary measured: `LOOPR_BENCH_HOST` when set (another profile's build, such as the
/// release workflow's `dist`), else the release build cargo made for this bench.
fn host_binary() -> std::path::PathBuf {
    std::env::var_os("LOOPR_BENCH_HOST")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_loopr").into())
}

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
    if bare_client::run_if_asked() {
        return;
    }
    runtime::block_on(run());
}

/// How long the host takes from being spawned (as Neovim spawns it) to its first answer,
/// against how long Neovim itself takes to start and quit.
async fn cold_start(state: &std::path::Path, fake: &FakeLlm) {
    const STARTS: usize = 11;
    let mut host_starts = Vec::new();
    for _ in 0..STARTS {
        let (sender, _events) = unbounded_channel();
        let mut command = host_command(state, fake);
        let begin = Instant::now();
        let (host, _io, mut child) =
            nvim_rs::create::tokio::new_child_cmd(&mut command, FakeEditor { events: sender })
                .await
                .expect("start host");
        host.call("version", vec![])
            .await
            .expect("call")
            .expect("version");
        host_starts.push(begin.elapsed());
        child.kill().await.expect("stop the host");
    }
    let nvim_starts = run_times(
        STARTS,
        nvim::nvim_binary(),
        &["--clean", "--headless", "+qa"],
    )
    .await;
    // What no host can go below here: starting any process at all, and loading this binary
    // (`--version` answers before the runtime, the log or the store start).
    let process_floor = run_times(STARTS, "/bin/true".into(), &[]).await[STARTS / 2];
    let binary_floor = run_times(STARTS, host_binary(), &["--version"]).await[STARTS / 2];
    host_starts.sort();
    let host = host_starts[STARTS / 2];
    let editor = nvim_starts[STARTS / 2];
    let binary = host_binary();
    let size = std::fs::metadata(&binary)
        .unwrap_or_else(|err| panic!("reading {}: {err}", binary.display()))
        .len();
    println!(
        "host binary: {} ({:.1} MB)",
        binary.display(),
        size as f64 / 1_000_000.0
    );
    println!(
        "floors, medians: spawning /bin/true {:.2} ms ({:.3} of Neovim's), `loopr --version` {:.2} ms ({:.3})",
        ms(process_floor),
        process_floor.as_secs_f64() / editor.as_secs_f64(),
        ms(binary_floor),
        binary_floor.as_secs_f64() / editor.as_secs_f64()
    );
    println!(
        "host cold start (spawned to its answer to `version`): median {:.2} ms, max {:.2} ms; \
         `nvim --clean --headless +qa`: median {:.2} ms, max {:.2} ms ({STARTS} runs each)",
        ms(host),
        ms(host_starts[STARTS - 1]),
        ms(editor),
        ms(nvim_starts[STARTS - 1])
    );
    println!(
        "summary: host cold start ÷ `nvim --clean --headless +qa`: {:.3} (target ≤ 0.1; {:.2} ms vs {:.2} ms, medians)",
        host.as_secs_f64() / editor.as_secs_f64(),
        ms(host),
        ms(editor)
    );
    println!(
        "summary: host binary {:.1} MB; `loopr --version` ÷ Neovim's start: {:.3}, the host's first answer: {:.3}",
        size as f64 / 1_000_000.0,
        binary_floor.as_secs_f64() / editor.as_secs_f64(),
        host.as_secs_f64() / editor.as_secs_f64()
    );
}

/// Stops the bench unless the measured host still answers a request that panics with an error
/// reply and keeps serving: what a smaller build must not give up (`panic = "abort"` would).
async fn panic_becomes_error_reply(state: &std::path::Path, fake: &FakeLlm) {
    let (sender, _events) = unbounded_channel();
    let mut command = host_command(state, fake);
    command.env("LOOPR_TEST_HOOKS", "1");
    let (host, _io, mut child) =
        nvim_rs::create::tokio::new_child_cmd(&mut command, FakeEditor { events: sender })
            .await
            .expect("start host");
    let panicked = host.call("__panic", vec![]).await.expect("call");
    assert!(
        panicked.as_ref().is_err_and(|err| err
            .as_str()
            .is_some_and(|text| text.contains("internal error while handling __panic"))),
        "{} answered __panic with {panicked:?}, not an error reply",
        host_binary().display()
    );
    let version = host
        .call("version", vec![])
        .await
        .expect("call after the panic");
    assert!(version.is_ok(), "after the panic: {version:?}");
    println!("host turns a panic into an error reply and keeps serving: yes");
    child.kill().await.expect("stop the host");
}

/// How long `program args` takes from spawn to exit, `runs` times, sorted.
async fn run_times(runs: usize, program: std::path::PathBuf, args: &[&str]) -> Vec<Duration> {
    let mut times = Vec::new();
    for _ in 0..runs {
        let begin = Instant::now();
        let status = tokio::process::Command::new(&program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .unwrap_or_else(|err| panic!("running {}: {err}", program.display()));
        assert!(status.success(), "{} {args:?}: {status}", program.display());
        times.push(begin.elapsed());
    }
    times.sort();
    times
}

/// `loopr rpc` as Neovim starts it, against `fake`, its state under `state`.
fn host_command(state: &std::path::Path, fake: &FakeLlm) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(host_binary());
    command
        .args(["rpc", "--log-level", "info", "--log-file"])
        .arg(state.join("loopr.log"))
        .env("LOOPR_HOME", state.join("home"))
        .env("ANTHROPIC_API_KEY", "sk-bench")
        .env("ANTHROPIC_BASE_URL", fake.base_url())
        .stderr(Stdio::null());
    command
}

async fn run() {
    let fake = FakeLlm::start().await;
    let state = tempfile::tempdir().expect("tempdir");
    cold_start(state.path(), &fake).await;
    panic_becomes_error_reply(state.path(), &fake).await;
    let project = state.path().join("project");
    std::fs::create_dir_all(project.join("src")).expect("mkdir");
    std::fs::write(project.join("src/main.rs"), "fn main() {}\n").expect("write");
    let (sender, mut events) = unbounded_channel();
    let mut command = host_command(state.path(), &fake);
    let (host, _io, child) =
        nvim_rs::create::tokio::new_child_cmd(&mut command, FakeEditor { events: sender })
            .await
            .expect("start host");
    let pid = child.id().expect("pid");
    host.call("version", vec![])
        .await
        .expect("call")
        .expect("version");
    let idle_memory = memory(pid);
    println!("host idle after start: {idle_memory}");

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

    let busy_memory = loops_in_flight(&host, &fake, &root, &mut events, pid).await;
    println!("summary: host memory idle: {idle_memory}; with 100 loops in flight: {busy_memory}");

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

    long_loop(&host, &fake, &project, &root, &mut events, &plan, pid).await;
}

type Host = Neovim<Compat<ChildStdin>>;
type Events = tokio::sync::mpsc::UnboundedReceiver<serde_json::Value>;

/// Waits for `count` loops to settle (leave pending and running).
async fn settled(events: &mut Events, count: usize) {
    let mut done = 0;
    while done < count {
        let event = tokio::time::timeout(Duration::from_secs(120), events.recv())
            .await
            .expect("event in time")
            .expect("event");
        if event["event"] == "loop_updated"
            && event["status"] != "running"
            && event["status"] != "pending"
        {
            assert_eq!(event["status"], "awaiting_approval", "{event}");
            done += 1;
        }
    }
}

async fn start_plan(host: &Host, root: &Value, task: &str, settings: Vec<(&str, Value)>) {
    host.call(
        "plan",
        vec![map(vec![
            ("task", Value::from(task)),
            ("root", root.clone()),
            ("settings", map(settings)),
        ])],
    )
    .await
    .expect("call")
    .expect("plan");
}

/// The host's memory while 100 loops wait for their model's answer at once.
async fn loops_in_flight(
    host: &Host,
    fake: &FakeLlm,
    root: &Value,
    events: &mut Events,
    pid: u32,
) -> String {
    const LOOPS: usize = 100;
    let plan = json!({"title": "In flight", "overview": "Many loops at once: a plan with two specs, the second depending on the first, detailed enough to pass the sparseness rule.", "specs": [
        {"name": "one", "title": "One", "description": "The first spec: read the project layout and settle where the change goes.", "dependencies": []},
        {"name": "two", "title": "Two", "description": "The second spec: make the change and cover it with tests.", "dependencies": ["one"]}
    ]});
    let before = fake.requests().len();
    let mut releases = Vec::new();
    for index in 0..LOOPS {
        let (reply, release) = TurnBuilder::new()
            .tool_use(&format!("f{index}"), "create_plan", plan.clone())
            .reply()
            .held();
        fake.push(reply);
        releases.push(release);
    }
    for index in 0..LOOPS {
        start_plan(
            host,
            root,
            &format!("In flight {index}"),
            vec![
                ("plan_review_passes", Value::from(0)),
                ("max_concurrent_loops", Value::from(LOOPS as u64)),
            ],
        )
        .await;
    }
    tokio::time::timeout(
        Duration::from_secs(120),
        fake.wait_for_requests(before + LOOPS),
    )
    .await
    .expect("every loop asked the model");
    let in_flight = memory(pid);
    println!("host with {LOOPS} loops in flight: {in_flight}");
    for release in releases {
        release.notify_one();
    }
    settled(events, LOOPS).await;
    in_flight
}

/// A 200-turn loop whose conversation grows to about 3 MB: how much of its time is the
/// host's own (the rest is the model server's), and whether a late turn costs the host more
/// than an early one.
async fn long_loop(
    host: &Host,
    fake: &FakeLlm,
    project: &std::path::Path,
    root: &Value,
    events: &mut Events,
    plan: &serde_json::Value,
    pid: u32,
) {
    const TURNS: usize = 200;
    let line = "// a line of source text that the model reads again and again, as models do\n";
    std::fs::write(
        project.join("src/big.rs"),
        line.repeat(15 * 1024 / line.len()),
    )
    .expect("write");
    for index in 0..TURNS - 1 {
        fake.push(
            TurnBuilder::new()
                .tool_use(
                    &format!("r{index}"),
                    "read_file",
                    json!({"path": "src/big.rs"}),
                )
                .reply(),
        );
    }
    fake.push(
        TurnBuilder::new()
            .tool_use("done", "create_plan", plan.clone())
            .reply(),
    );
    let first = fake.requests().len();
    let connections_before = fake.connections();
    fake.forget_bodies();
    let begin = Instant::now();
    start_plan(
        host,
        root,
        "A long loop",
        vec![
            ("plan_review_passes", Value::from(0)),
            ("max_turns", Value::from(TURNS as u64 + 5)),
        ],
    )
    .await;
    settled(events, 1).await;
    let wall = begin.elapsed();
    let requests: Vec<_> = fake.requests().into_iter().skip(first).collect();
    assert_eq!(requests.len(), TURNS, "one request per turn");
    let served: Vec<Instant> = requests
        .iter()
        .map(|request| fake.served_at(request.number).expect("answer sent"))
        .collect();
    let service: Duration = requests
        .iter()
        .zip(&served)
        .map(|(request, served)| *served - request.arrived)
        .sum();
    // The host's part of turn k: from its answer's last byte to the next request's arrival.
    let host_turn = |k: usize| requests[k + 1].arrived - served[k];
    // The median of a window: one turn the scheduler delayed says nothing of the others.
    let window = |range: std::ops::Range<usize>| {
        let mut turns: Vec<Duration> = range.map(host_turn).collect();
        turns.sort();
        turns[turns.len() / 2]
    };
    let early = window(5..15);
    let late = window(TURNS - 11..TURNS - 1);
    let every = window(0..TURNS - 1);
    let body_kib = requests[TURNS - 1].body_len / 1024;
    let uploads: Duration = requests
        .iter()
        .map(|request| request.received - request.arrived)
        .sum();
    println!(
        "{TURNS}-turn loop ({body_kib} KiB request at the end): host wall {:.2} s, model server \
         (request head to the answer's last byte) {:.2} s, wall / server = {:.2}",
        wall.as_secs_f64(),
        service.as_secs_f64(),
        wall.as_secs_f64() / service.as_secs_f64()
    );
    println!(
        "host time per turn (an answer's last byte to the next request's head), median: all \
         turns {:.2} ms, turns 6-15 {:.2} ms, turns 190-199 {:.2} ms, late / early = {:.2}",
        ms(every),
        ms(early),
        ms(late),
        late.as_secs_f64() / early.as_secs_f64()
    );
    println!(
        "of the server's time, request bodies arriving: {:.2} s; connections opened: {}",
        uploads.as_secs_f64(),
        fake.connections() - connections_before
    );
    let floor = bare_client::measure(fake, TURNS).await;
    println!(
        "bare HTTP client sending the same requests (no loop, the floor here): wall / server \
         = {:.2}, per turn {:.2} ms",
        floor.wall.as_secs_f64() / floor.server.as_secs_f64(),
        ms(floor.between_turns)
    );
    println!("host after the {TURNS}-turn loop: {}", memory(pid));
    println!(
        "summary: {TURNS}-turn loop against a zero-latency fake, wall ÷ the fake's own service time: {:.2} (a bare HTTP client sending the same requests: {:.2})",
        wall.as_secs_f64() / service.as_secs_f64(),
        floor.wall.as_secs_f64() / floor.server.as_secs_f64()
    );
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
