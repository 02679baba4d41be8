//! Whether Neovim stays responsive while loops stream into open transcripts. Neovim runs
//! with its terminal UI in tmux (so every append is also drawn), the plugin loaded and the
//! release host; a second msgpack-RPC client times `nvim_eval("1")` every 5 ms: idle, while
//! one loop streams a 4000-word answer at 400 words/s into its open transcript, and while
//! eight do at once into eight open transcripts. Prints p50, p99 and max per phase and busy
//! ÷ idle p99. Figures only. Run with `cargo bench --bench responsiveness` (needs tmux).

#[path = "../tests/support/fake_llm.rs"]
mod fake_llm;
#[path = "../tests/support/nvim.rs"]
mod nvim;
#[path = "support/runtime.rs"]
mod runtime;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nvim_rs::compat::tokio::Compat;
use nvim_rs::{Handler, Neovim, Value};
use serde_json::json;
use tokio::io::WriteHalf;
use tokio::net::UnixStream;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use fake_llm::{FakeLlm, TurnBuilder};
use nvim::TestDirs;

const PROBE_EVERY: Duration = Duration::from_millis(5);
const IDLE_FOR: Duration = Duration::from_secs(10);
const WORDS: usize = 4000;
const WORDS_PER_SECOND: u32 = 400;
/// How long any one step of the setup may take before the bench gives up.
const WAIT: Duration = Duration::from_secs(60);
const WIDTH: u32 = 200;
const HEIGHT: u32 = 50;

type Writer = Compat<WriteHalf<UnixStream>>;
type Editor = Neovim<Writer>;

/// What the control connection hears from Neovim: `(kind, data)` of `loopr_bench`
/// notifications.
#[derive(Clone)]
struct Listener {
    sender: UnboundedSender<(String, serde_json::Value)>,
}

#[async_trait]
impl Handler for Listener {
    type Writer = Writer;

    async fn handle_notify(&self, name: String, args: Vec<Value>, _: Editor) {
        if name != "loopr_bench" {
            return;
        }
        let kind = args
            .first()
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let data = args
            .get(1)
            .cloned()
            .map(|value| rmpv::ext::from_value(value).unwrap_or_default())
            .unwrap_or_default();
        let _ = self.sender.send((kind, data));
    }
}

/// The probe connection asks, and is asked nothing.
#[derive(Clone)]
struct Silent;

#[async_trait]
impl Handler for Silent {
    type Writer = Writer;
}

/// A tmux server of the bench's own, killed when dropped.
struct Tmux {
    socket_name: String,
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = std::process::Command::new("tmux")
            .args(["-L", &self.socket_name, "kill-server"])
            .status();
    }
}

fn main() {
    runtime::block_on(run());
}

/// Starts Neovim's TUI in a detached tmux session of `WIDTH` × `HEIGHT`, listening on
/// `socket`, with the plugin set up against `fake`.
fn start_in_tmux(dirs: &TestDirs, fake: &FakeLlm, socket: &Path) -> Tmux {
    let tmux = Tmux {
        socket_name: format!("loopr-bench-{}", std::process::id()),
    };
    let setup = format!(
        "lua require('loopr').setup({{ bin = {bin:?}, plan_review_passes = 0, spec_review = false, max_concurrent_loops = 8 }})",
        bin = nvim::host_binary().display().to_string()
    );
    let environment = [
        ("HOME", dirs.home.clone()),
        ("XDG_CONFIG_HOME", dirs.home.join(".config")),
        ("XDG_DATA_HOME", dirs.home.join(".local/share")),
        ("XDG_STATE_HOME", dirs.home.join(".local/state")),
        ("XDG_CACHE_HOME", dirs.home.join(".cache")),
        ("LOOPR_HOME", dirs.loopr_home.clone()),
    ];
    let mut command = std::process::Command::new("tmux");
    command
        .args([
            "-L",
            &tmux.socket_name,
            "-f",
            "/dev/null",
            "new-session",
            "-d",
        ])
        .args(["-x", &WIDTH.to_string(), "-y", &HEIGHT.to_string(), "-c"])
        .arg(&dirs.project);
    for (name, value) in &environment {
        command.arg("-e").arg(format!("{name}={}", value.display()));
    }
    command
        .args(["-e", "ANTHROPIC_API_KEY=sk-bench", "-e"])
        .arg(format!("ANTHROPIC_BASE_URL={}", fake.base_url()))
        .args(["-e", "LANG=C.UTF-8"])
        .arg(nvim::nvim_binary())
        .args(["--clean", "-n", "--listen"])
        .arg(socket)
        .arg("--cmd")
        .arg(format!("set rtp^={}", nvim::plugin_root().display()))
        .args(["-c", &setup]);
    let status = command
        .status()
        .expect("tmux runs (scripts/bench.sh installs it)");
    assert!(status.success(), "tmux new-session failed: {status}");
    tmux
}

/// Connects to Neovim's socket once it listens.
async fn connect<H>(socket: &Path, handler: H) -> Editor
where
    H: Handler<Writer = Writer> + Send + 'static,
{
    let deadline = Instant::now() + WAIT;
    loop {
        // Neovim creates the socket while it starts; until then, connecting fails.
        if socket.exists()
            && let Ok((editor, _io)) =
                nvim_rs::create::tokio::new_path(socket.to_path_buf(), handler.clone()).await
        {
            return editor;
        }
        assert!(
            Instant::now() < deadline,
            "Neovim never listened on {}",
            socket.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Latencies of `nvim_eval("1")` sent every `PROBE_EVERY` from a client of its own (its own
/// thread and runtime, so the fake server's work does not delay its clock), each with the
/// moment it was sent. Says on `ready` when it is connected; runs until `stop` is set.
fn probe(
    socket: PathBuf,
    ready: tokio::sync::oneshot::Sender<()>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<(Instant, Duration)>> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("probe runtime");
        runtime.block_on(async move {
            let editor = connect(&socket, Silent).await;
            let _ = ready.send(());
            let mut samples = Vec::new();
            let mut ticks = tokio::time::interval(PROBE_EVERY);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stop.load(Ordering::SeqCst) {
                ticks.tick().await;
                let sent = Instant::now();
                tokio::time::timeout(WAIT, editor.eval("1"))
                    .await
                    .expect("Neovim answers nvim_eval within a minute")
                    .expect("nvim_eval");
                samples.push((sent, sent.elapsed()));
            }
            samples
        })
    })
}

/// A 4000-word answer as one text delta per word, in lines and paragraphs as prose comes.
fn long_answer() -> Vec<String> {
    const VOCABULARY: [&str; 12] = [
        "the",
        "loop",
        "reads",
        "each",
        "file",
        "and",
        "writes",
        "a",
        "plan",
        "for",
        "review",
        "carefully",
    ];
    (0..WORDS)
        .map(|index| {
            let word = VOCABULARY[index % VOCABULARY.len()];
            match index + 1 {
                n if n % 120 == 0 => format!("{word}.\n\n"),
                n if n % 14 == 0 => format!("{word}\n"),
                _ => format!("{word} "),
            }
        })
        .collect()
}

fn plan() -> serde_json::Value {
    json!({"title": "Stream", "overview": "Stream a long answer into an open transcript: a plan with two specs, the second depending on the first, detailed enough to pass the sparseness rule.", "specs": [
        {"name": "one", "title": "One", "description": "The first spec: read the project layout and settle where the change goes.", "dependencies": []},
        {"name": "two", "title": "Two", "description": "The second spec: make the change and cover it with tests.", "dependencies": ["one"]}
    ]})
}

struct Phase {
    label: String,
    from: Instant,
    to: Instant,
    /// CPU time Neovim and the host used during the phase.
    cpu: CpuSpent,
}

/// CPU time of a process so far, all its live threads, from the kernel's scheduler statistics
/// (a thread that ended takes its time with it: a spawn_blocking thread of the host, rarely).
fn cpu_time(pid: u32) -> Duration {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap_or_else(|err| panic!("listing the threads of {pid}: {err}"));
    tasks
        .filter_map(|task| {
            let stats = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
            stats.split_whitespace().next()?.parse().ok()
        })
        .map(Duration::from_nanos)
        .sum()
}

#[derive(Clone, Copy)]
struct Pids {
    nvim: u32,
    host: u32,
}

#[derive(Clone, Copy, Default)]
struct CpuSpent {
    nvim: Duration,
    host: Duration,
}

impl Pids {
    fn cpu(&self) -> CpuSpent {
        CpuSpent {
            nvim: cpu_time(self.nvim),
            host: cpu_time(self.host),
        }
    }

    fn since(&self, start: CpuSpent) -> CpuSpent {
        let now = self.cpu();
        CpuSpent {
            nvim: now.nvim.saturating_sub(start.nvim),
            host: now.host.saturating_sub(start.host),
        }
    }
}

struct Figures {
    p50: Duration,
    p99: Duration,
    max: Duration,
    samples: usize,
}

/// The latency figures of the probes sent during `phase`; `None` when it was too short to
/// hold one.
fn figures_of(samples: &[(Instant, Duration)], phase: &Phase) -> Option<Figures> {
    let mut latencies: Vec<Duration> = samples
        .iter()
        .filter(|(sent, _)| *sent >= phase.from && *sent < phase.to)
        .map(|(_, latency)| *latency)
        .collect();
    if latencies.is_empty() {
        return None;
    }
    latencies.sort();
    let at = |fraction: f64| latencies[((latencies.len() - 1) as f64 * fraction).round() as usize];
    Some(Figures {
        p50: at(0.5),
        p99: at(0.99),
        max: at(1.0),
        samples: latencies.len(),
    })
}

/// The figures of a phase the benchmark cannot do without (it lasts seconds).
fn figures(samples: &[(Instant, Duration)], phase: &Phase) -> Figures {
    figures_of(samples, phase).unwrap_or_else(|| panic!("no samples while {}", phase.label))
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Waits for the next `loopr_bench` notification of `kind` that `matches`.
async fn next(
    events: &mut UnboundedReceiver<(String, serde_json::Value)>,
    kind: &str,
    matches: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    loop {
        let (seen, data) = tokio::time::timeout(WAIT, events.recv())
            .await
            .unwrap_or_else(|_| panic!("no {kind} from Neovim within {WAIT:?}"))
            .expect("Neovim's connection");
        if seen == kind && matches(&data) {
            return data;
        }
    }
}

/// Starts `count` plan loops whose answer streams `long_answer` at `WORDS_PER_SECOND`,
/// opens each one's transcript with `:LooprTranscript <id>`, then lets the answers stream;
/// returns when every loop has stored its plan, with when the streaming began and ended (the
/// first answer whole) and the CPU time spent in between.
async fn stream_into_transcripts(
    editor: &Editor,
    events: &mut UnboundedReceiver<(String, serde_json::Value)>,
    fake: &FakeLlm,
    pids: Pids,
    count: usize,
) -> Streamed {
    editor.command("only").await.expect(":only");
    let interval = Duration::from_secs(1) / WORDS_PER_SECOND;
    let turn = TurnBuilder::new()
        .text_deltas(long_answer())
        .tool_use("plan", "create_plan", plan())
        .usage(2_000, 6_000);
    let mut releases = Vec::new();
    for _ in 0..count {
        let (reply, release) = turn.paced(interval).held();
        fake.push(reply);
        releases.push(release);
    }
    let asked_before = fake.requests().len();
    let mut loops = HashSet::new();
    for index in 0..count {
        editor
            .command(&format!("LooprPlan Stream a long answer {count}.{index}"))
            .await
            .expect(":LooprPlan");
        let known = loops.clone();
        let update = next(events, "loop", |data| {
            data["id"].as_str().is_some_and(|id| !known.contains(id))
        })
        .await;
        loops.insert(update["id"].as_str().expect("loop id").to_owned());
    }
    for id in &loops {
        editor
            .command(&format!("LooprTranscript {id}"))
            .await
            .expect(":LooprTranscript");
        let name = format!("loopr://transcript/{id}");
        next(events, "transcript", |data| data.as_str() == Some(&name)).await;
    }
    tokio::time::timeout(WAIT, fake.wait_for_requests(asked_before + count))
        .await
        .expect("every loop asked the model");
    let began = Instant::now();
    let cpu_before = pids.cpu();
    for release in releases {
        release.notify_one();
    }
    let mut done = HashSet::new();
    let mut ended = None;
    while done.len() < count {
        let update = next(events, "loop", |data| {
            data["status"] != "running" && data["status"] != "pending"
        })
        .await;
        // The answers streamed side by side: once one is whole, what follows is storing the
        // plans and opening them for review, not streaming. (The CPU figure also holds the
        // little that passed between the answer and this update.)
        ended.get_or_insert_with(|| pids.since(cpu_before));
        assert_eq!(update["status"], "awaiting_approval", "{update}");
        if let Some(id) = update["id"].as_str() {
            done.insert(id.to_owned());
        }
    }
    let lines: Vec<i64> = rmpv::ext::from_value(
        editor
            .exec_lua(
                "local lines = {}
                 for _, buf in ipairs(vim.api.nvim_list_bufs()) do
                   if vim.api.nvim_buf_get_name(buf):find('^loopr://transcript/') and #vim.fn.win_findbuf(buf) > 0 then
                     table.insert(lines, vim.api.nvim_buf_line_count(buf))
                   end
                 end
                 return lines",
                vec![],
            )
            .await
            .expect("transcript sizes"),
    )
    .expect("line counts");
    // A transcript that did not follow its loop would be nearly empty.
    let least = WORDS / 14;
    assert!(
        lines.len() == count && lines.iter().all(|&n| n as usize >= least),
        "{count} transcripts open in windows, each of at least {least} lines: {lines:?}"
    );
    let cpu = ended.expect("a loop finished");
    // The first answer's last byte left the fake: Neovim hears of the finished loop only
    // after it opened the plan for review, so the update's arrival would count that as
    // streaming.
    let ended = fake.requests()[asked_before..]
        .iter()
        .filter_map(|request| fake.served_at(request.number))
        .min()
        .expect("an answer served");
    Streamed {
        began,
        ended,
        cpu,
        reviewed: Instant::now(),
    }
}

/// When the answers streamed, and the CPU time spent meanwhile.
struct Streamed {
    began: Instant,
    ended: Instant,
    cpu: CpuSpent,
    /// When every plan was stored and open for review.
    reviewed: Instant,
}

async fn run() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    let socket = dirs.home.join("nvim.sock");
    let _tmux = start_in_tmux(&dirs, &fake, &socket);
    let (sender, mut events) = unbounded_channel();
    let editor = connect(&socket, Listener { sender }).await;
    let channel = editor
        .get_api_info()
        .await
        .expect("api info")
        .first()
        .and_then(Value::as_i64)
        .expect("channel id");
    editor
        .exec_lua(
            &format!(
                "vim.api.nvim_create_autocmd('User', {{ pattern = 'LooprLoopUpdated', callback = function(ev)
                   vim.rpcnotify({channel}, 'loopr_bench', 'loop', ev.data)
                 end }})
                 vim.api.nvim_create_autocmd('BufWinEnter', {{ pattern = 'loopr://transcript/*', callback = function(ev)
                   vim.rpcnotify({channel}, 'loopr_bench', 'transcript', ev.match)
                 end }})
                 assert(require('loopr.host').ensure(), 'Loopr: the host did not start')"
            ),
            vec![],
        )
        .await
        .expect("watch loops and transcripts, start the host");
    let pids: Vec<u32> = rmpv::ext::from_value(
        editor
            .exec_lua(
                "return { vim.fn.getpid(), vim.fn.jobpid(require('loopr.host').chan()) }",
                vec![],
            )
            .await
            .expect("Neovim's and the host's process ids"),
    )
    .expect("two process ids");
    let pids = Pids {
        nvim: pids[0],
        host: pids[1],
    };

    let stop = Arc::new(AtomicBool::new(false));
    let (ready, connected) = tokio::sync::oneshot::channel();
    let prober = probe(socket.clone(), ready, Arc::clone(&stop));
    tokio::time::timeout(WAIT, connected)
        .await
        .expect("the probe connects in time")
        .expect("the probe connects");
    let idle_from = Instant::now();
    let idle_cpu = pids.cpu();
    // Idle is a span of time: nothing to wait for but the clock.
    tokio::time::sleep(IDLE_FOR).await;
    let idle = Phase {
        label: "idle (the host running, no loop)".to_owned(),
        from: idle_from,
        to: Instant::now(),
        cpu: pids.since(idle_cpu),
    };
    let mut phases = vec![idle];
    let mut reviews = Vec::new();
    for count in [1, 8] {
        let streamed = stream_into_transcripts(&editor, &mut events, &fake, pids, count).await;
        let label = if count == 1 {
            format!(
                "1 loop streaming {WORDS} words at {WORDS_PER_SECOND} words/s into an open transcript"
            )
        } else {
            format!(
                "{count} loops streaming {WORDS} words at {WORDS_PER_SECOND} words/s each into {count} open transcripts"
            )
        };
        phases.push(Phase {
            label,
            from: streamed.began,
            to: streamed.ended,
            cpu: streamed.cpu,
        });
        reviews.push(Phase {
            label: format!("then {count} plan(s) stored and opened for review"),
            from: streamed.ended,
            to: streamed.reviewed,
            cpu: CpuSpent::default(),
        });
    }
    stop.store(true, Ordering::SeqCst);
    let samples = prober.join().expect("the probe");
    let _ = editor.command("qa!").await;

    println!(
        "Neovim's responsiveness: nvim_eval(\"1\") every {} ms from another client, the TUI in tmux {WIDTH}x{HEIGHT}",
        PROBE_EVERY.as_millis()
    );
    let idle = figures(&samples, &phases[0]);
    for phase in &phases {
        let these = figures(&samples, phase);
        let seconds = (phase.to - phase.from).as_secs_f64();
        println!(
            "  {}: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} samples over {seconds:.1} s); CPU per second: Neovim {:.1} ms, host {:.1} ms",
            phase.label,
            ms(these.p50),
            ms(these.p99),
            ms(these.max),
            these.samples,
            ms(phase.cpu.nvim) / seconds,
            ms(phase.cpu.host) / seconds,
        );
    }
    for review in &reviews {
        let seconds = (review.to - review.from).as_secs_f64();
        match figures_of(&samples, review) {
            Some(these) => println!(
                "  {}: p99 {:.3} ms, max {:.3} ms ({} samples over {seconds:.2} s)",
                review.label,
                ms(these.p99),
                ms(these.max),
                these.samples,
            ),
            None => println!("  {}: no probe sent in its {seconds:.3} s", review.label),
        }
    }
    for (phase, target) in phases[1..].iter().zip(["1.5", "2"]) {
        let these = figures(&samples, phase);
        println!(
            "summary: Neovim busy ÷ idle p99, {}: {:.2} (target ≤ {target}; p99 {:.3} ms vs {:.3} ms, max {:.3} ms)",
            phase.label,
            these.p99.as_secs_f64() / idle.p99.as_secs_f64(),
            ms(these.p99),
            ms(idle.p99),
            ms(these.max)
        );
    }
}
