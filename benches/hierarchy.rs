//! How close the host's scheduling comes to the dependency critical path: the CLI
//! (`loopr plan --approve-all`, the release binary) runs a whole hierarchy of 10 specs × 5
//! phases at concurrency 8 against the fake model server, which answers every request after
//! 200 ms. The specs form one chain (each depends on the one before), so the critical path is
//! known: the plan, the ten specs one after the other, then a phase of the last, 12 requests;
//! at most 6 loops can run at once (a spec and the phases of the one before), so the 8 slots
//! never hold anything up. Prints wall ÷ critical path. Figures only. Run with
//! `cargo bench --bench hierarchy`.

#[path = "../tests/support/fake_llm.rs"]
mod fake_llm;
#[path = "../tests/support/nvim.rs"]
mod nvim;
#[path = "support/runtime.rs"]
mod runtime;
#[path = "../tests/support/scenario.rs"]
mod scenario;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use fake_llm::FakeLlm;
use nvim::TestDirs;
use scenario::{phase_input, phase_route, plan_route, spec_input, spec_route, tool_turn};

const SPECS: usize = 10;
const PHASES: usize = 5;
const CONCURRENCY: usize = 8;
const LATENCY: Duration = Duration::from_millis(200);
const RUNS: usize = 3;

fn main() {
    runtime::block_on(run());
}

fn spec_name(index: usize) -> String {
    format!("spec-{index:02}")
}

fn phase_names(spec: usize) -> Vec<String> {
    (1..=PHASES)
        .map(|phase| format!("{}-phase-{phase}", spec_name(spec)))
        .collect()
}

/// Ten specs, each depending on the one before.
fn chained_plan() -> Value {
    let specs: Vec<Value> = (0..SPECS)
        .map(|index| {
            let dependencies: Vec<String> = index.checked_sub(1).map(spec_name).into_iter().collect();
            json!({
                "name": spec_name(index),
                "title": format!("Step {index} of the change"),
                "description": format!("Step {index}: carry the change one step further in src/main.rs, building on the step before."),
                "dependencies": dependencies,
            })
        })
        .collect();
    json!({
        "title": "A long chain of steps",
        "overview": "Measure the scheduler: ten specs in a chain, each with five phases that can all run at once once their spec is written.",
        "specs": specs,
        "non_goals": ["Anything but the figures"],
        "risks": ["None"]
    })
}

/// Every loop's one answer, each after `LATENCY`.
fn script(fake: &FakeLlm) {
    fake.push_routed(
        plan_route(),
        tool_turn("plan", "create_plan", chained_plan()).delayed(LATENCY),
    );
    for spec in 0..SPECS {
        let phases = phase_names(spec);
        let names: Vec<&str> = phases.iter().map(String::as_str).collect();
        fake.push_routed(
            &spec_route(&spec_name(spec)),
            tool_turn(
                &spec_name(spec),
                "create_spec",
                spec_input(&spec_name(spec), &names),
            )
            .delayed(LATENCY),
        );
        for phase in &phases {
            fake.push_routed(
                &phase_route(phase),
                tool_turn(phase, "create_phase", phase_input(phase)).delayed(LATENCY),
            );
        }
    }
}

/// The most requests the fake was answering at once.
fn most_at_once(fake: &FakeLlm, first: usize) -> usize {
    let requests: Vec<_> = fake.requests().into_iter().skip(first).collect();
    let spans: Vec<(Instant, Instant)> = requests
        .iter()
        .filter_map(|request| {
            fake.served_at(request.number)
                .map(|served| (request.arrived, served))
        })
        .collect();
    spans
        .iter()
        .map(|(start, _)| {
            spans
                .iter()
                .filter(|(other_start, other_end)| other_start <= start && start < other_end)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// The critical path and where the time beyond it went, in one run: from start to the plan's
/// request, between an answer on the chain and the request it let start (median and max),
/// and from the last answer to the CLI's exit.
struct Gaps {
    /// The server's time on the chain's requests (each arrival to its answer's last byte):
    /// the critical path as the fake serves it, `LATENCY` plus streaming each answer.
    chain_service: Duration,
    to_first_request: Duration,
    between_links: Vec<Duration>,
    after_last_answer: Duration,
}

fn gaps(fake: &FakeLlm, first: usize, begin: Instant, end: Instant) -> Gaps {
    let requests: Vec<_> = fake.requests().into_iter().skip(first).collect();
    let find = |route: &str| {
        requests
            .iter()
            .find(|request| fake_llm::first_user_text(&request.body).contains(route))
            .unwrap_or_else(|| panic!("no request for {route:?}"))
    };
    let served =
        |request: &fake_llm::RecordedRequest| fake.served_at(request.number).expect("answer sent");
    let mut links = vec![find(plan_route())];
    links.extend((0..SPECS).map(|spec| find(&spec_route(&spec_name(spec)))));
    let last_phases: Vec<_> = phase_names(SPECS - 1)
        .iter()
        .map(|phase| find(&phase_route(phase)))
        .collect();
    let first_phase = last_phases
        .iter()
        .min_by_key(|request| request.arrived)
        .expect("a phase");
    links.push(first_phase);
    let last_answer = requests.iter().map(served).max().expect("answers");
    Gaps {
        chain_service: links
            .iter()
            .map(|request| served(request) - request.arrived)
            .sum(),
        to_first_request: links[0].arrived - begin,
        between_links: links
            .windows(2)
            .map(|pair| pair[1].arrived - served(pair[0]))
            .collect(),
        after_last_answer: end - last_answer,
    }
}

async fn run() {
    let fake = FakeLlm::start().await;
    let requests_per_run = 1 + SPECS + SPECS * PHASES;
    // The plan, each spec in turn, then one phase of the last spec.
    let chain = 1 + SPECS + 1;
    let critical_path = LATENCY * chain as u32;
    let settings = json!({
        "plan_review_passes": 0,
        "spec_review": false,
        "max_concurrent_loops": CONCURRENCY,
    })
    .to_string();
    let mut runs = Vec::new();
    let mut overlap = 0;
    for _ in 0..RUNS {
        let dirs = TestDirs::new();
        script(&fake);
        let first = fake.requests().len();
        let begin = Instant::now();
        let output = scenario::run_loopr(
            &dirs,
            &fake,
            &[
                "plan",
                "Carry the change out in a chain of steps",
                "--approve-all",
                "--settings",
                &settings,
            ],
        )
        .await;
        let wall = begin.elapsed();
        assert!(
            output.status.success(),
            "loopr plan failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let asked = fake.requests().len() - first;
        assert_eq!(asked, requests_per_run, "one request per loop");
        overlap = overlap.max(most_at_once(&fake, first));
        runs.push((wall, gaps(&fake, first, begin, begin + wall)));
    }
    let ratio =
        |(wall, gaps): &(Duration, Gaps)| wall.as_secs_f64() / gaps.chain_service.as_secs_f64();
    runs.sort_by(|one, other| ratio(one).total_cmp(&ratio(other)));
    let (median, gaps) = &mut runs[RUNS / 2];
    let median = *median;
    gaps.between_links.sort();
    println!(
        "hierarchy of {SPECS} specs × {PHASES} phases ({requests_per_run} loops, one request each answered after {} ms) at concurrency {CONCURRENCY}, at most {overlap} requests at once; the median of {RUNS} runs:",
        LATENCY.as_millis(),
    );
    println!(
        "  wall (loopr plan --approve-all, start to exit) {:.3} s; critical path: {chain} requests in a chain, {:.3} s as served ({:.1} s of latency, the rest streaming the answers)",
        median.as_secs_f64(),
        gaps.chain_service.as_secs_f64(),
        critical_path.as_secs_f64(),
    );
    println!(
        "  the host's time on the chain: start to the plan's request {:.1} ms; an answer to the request it lets start: median {:.1} ms, max {:.1} ms ({} links); the last answer to exit {:.1} ms",
        ms(gaps.to_first_request),
        ms(gaps.between_links[gaps.between_links.len() / 2]),
        ms(*gaps.between_links.last().expect("links")),
        gaps.between_links.len(),
        ms(gaps.after_last_answer)
    );
    println!(
        "summary: hierarchy wall ÷ dependency critical path: {:.2} (target ≤ 1.1; {:.3} s vs {:.3} s; over the bare {:.1} s of latency {:.2})",
        median.as_secs_f64() / gaps.chain_service.as_secs_f64(),
        median.as_secs_f64(),
        gaps.chain_service.as_secs_f64(),
        critical_path.as_secs_f64(),
        median.as_secs_f64() / critical_path.as_secs_f64()
    );
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
