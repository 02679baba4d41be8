//! How long `:LooprPlan` blocks Neovim: a real headless Neovim with the plugin, against the
//! fake model server, timing the command inside Neovim (`vim.uv.hrtime` around `vim.cmd`).
//! Cold: the command that starts the host; warm: the host already runs. Also what one
//! transcript append costs Neovim at the first lines and at line 10,000 and beyond (the host's
//! call, timed inside Neovim). Prints figures only.
//! Run with `cargo bench --bench editor` (`--profile dev` times the debug host).

#[path = "../tests/support/fake_llm.rs"]
mod fake_llm;
#[path = "../tests/support/nvim.rs"]
mod nvim;
#[path = "support/runtime.rs"]
mod runtime;
#[path = "../tests/support/scenario.rs"]
mod scenario;

use std::time::Duration;

use fake_llm::FakeLlm;
use nvim::TestNvim;

const COLD_RUNS: usize = 5;
const WARM_RUNS: usize = 20;

fn main() {
    runtime::block_on(run());
}

/// Runs `:LooprPlan` and returns how long Neovim spent in it.
async fn time_plan_command(editor: &TestNvim, task: &str) -> Duration {
    let millis: f64 = editor
        .lua(&format!(
            "local start = vim.uv.hrtime()
             vim.cmd({command:?})
             return (vim.uv.hrtime() - start) / 1e6",
            command = format!("LooprPlan {task}")
        ))
        .await;
    Duration::from_secs_f64(millis / 1000.0)
}

/// Waits for the first event of a loop not in `known`, so one command's work is over before
/// the next is timed.
async fn new_loop(editor: &mut TestNvim, known: &mut std::collections::HashSet<String>) {
    let seen = known.clone();
    let event = editor
        .wait_event("LooprLoopUpdated", move |data| {
            data["id"].as_str().is_some_and(|id| !seen.contains(id))
        })
        .await;
    known.insert(event["id"].as_str().unwrap_or_default().to_owned());
}

/// Neovim's time in `require('loopr.transcript').append` for one streamed piece, median over
/// `TRANSCRIPT_SAMPLES` calls, at the buffer's current length.
async fn time_appends(editor: &TestNvim, token: u64) -> Duration {
    let mut times: Vec<f64> = editor
        .lua(&format!(
            "local transcript, times = require('loopr.transcript'), {{}}
             for n = 1, {TRANSCRIPT_SAMPLES} do
               local start = vim.uv.hrtime()
               transcript.append({{ {{ token = {token}, text = 'a streamed piece of the answer, word ' .. n .. '\\n' }} }})
               times[n] = (vim.uv.hrtime() - start) / 1e6
             end
             return times"
        ))
        .await;
    times.sort_by(f64::total_cmp);
    Duration::from_secs_f64(times[times.len() / 2] / 1000.0)
}

const TRANSCRIPT_SAMPLES: usize = 200;

/// One append at the start of a transcript and past line 10,000 cost the same.
async fn transcript_appends(fake: &FakeLlm) {
    fake.push(scenario::list_files_turn());
    fake.push(scenario::create_plan_turn(
        "toolu_plan",
        scenario::valid_plan(),
    ));
    let mut editor = scenario::start_editor(fake, "{}").await;
    scenario::watch_transcripts(&editor).await;
    let loop_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&loop_id, "awaiting_approval").await;
    let buf = scenario::open_transcript(&editor, Some(&loop_id)).await;
    scenario::transcript_with(&mut editor, buf, "create_plan").await;
    let token: u64 = editor
        .lua(&format!("return vim.b[{buf}].loopr_transcript_token"))
        .await;
    let early = time_appends(&editor, token).await;
    let _: Option<bool> = editor
        .lua(&format!(
            "local lines = {{}}
             for n = 1, 10000 do lines[n] = 'filler line ' .. n end
             require('loopr.transcript').append({{ {{ token = {token}, text = table.concat(lines, '\\n') .. '\\n' }} }})"
        ))
        .await;
    let late = time_appends(&editor, token).await;
    let lines: i64 = editor
        .lua(&format!("return vim.api.nvim_buf_line_count({buf})"))
        .await;
    println!(
        "transcript append, one streamed piece: {:.3} ms near the start, {:.3} ms at line {lines} (ratio {:.2})",
        early.as_secs_f64() * 1000.0,
        late.as_secs_f64() * 1000.0,
        late.as_secs_f64() / early.as_secs_f64()
    );
    editor.quit().await;
}

async fn run() {
    let fake = FakeLlm::start().await;
    transcript_appends(&fake).await;
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for run in 0..COLD_RUNS {
        let mut editor = scenario::start_editor(&fake, "{}").await;
        // The model never answers: the loops stay running and say nothing while timed.
        for _ in 0..=WARM_RUNS / COLD_RUNS {
            fake.push(scenario::stalled_turn("Thinking"));
        }
        let mut loops = std::collections::HashSet::new();
        cold.push(time_plan_command(&editor, &format!("Cold start {run}")).await);
        new_loop(&mut editor, &mut loops).await;
        for take in 0..WARM_RUNS / COLD_RUNS {
            warm.push(time_plan_command(&editor, &format!("Warm {run}.{take}")).await);
            new_loop(&mut editor, &mut loops).await;
        }
        editor.quit().await;
    }
    cold.sort();
    warm.sort();
    let median_ms = |figures: &[Duration]| figures[figures.len() / 2].as_secs_f64() * 1000.0;
    let summary = format!(
        "summary: :LooprPlan blocks Neovim: median {:.3} ms warm, {:.3} ms cold (target ≤ 2 ms)",
        median_ms(&warm),
        median_ms(&cold)
    );
    for (label, figures) in [
        ("cold, the command starts the host", cold),
        ("warm, the host runs", warm),
    ] {
        println!(
            ":LooprPlan blocks Neovim ({label}): median {:.3} ms, max {:.3} ms over {} runs",
            figures[figures.len() / 2].as_secs_f64() * 1000.0,
            figures[figures.len() - 1].as_secs_f64() * 1000.0,
            figures.len()
        );
    }
    println!("{summary}");
}
