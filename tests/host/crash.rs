//! Crash safety: the host is killed with SIGKILL at points around artifact writes, in the
//! middle of a hierarchy run; `loopr resume` then finishes every loop, every artifact parses,
//! and no child exists twice.

use crate::{fake_llm, nvim, scenario};

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use fake_llm::FakeLlm;
use nvim::TestDirs;
use scenario::{
    files_ending_with, loopr_command, phase_input, phase_route, plan_route, spec_input, spec_route,
    tool_turn, valid_plan,
};

const SETTINGS: &str = r#"{"plan_review_passes": 0, "spec_review": false, "max_concurrent_loops": 2, "verify": false}"#;
const SPECS: [(&str, [&str; 3]); 2] = [
    ("version-flag", ["parse-flag", "print-version", "exit-code"]),
    ("version-docs", ["readme", "changelog", "help-text"]),
];

fn command(dirs: &TestDirs, fake: &FakeLlm, args: &[&str]) -> tokio::process::Command {
    let mut command = loopr_command(dirs, fake, args);
    command.env("LOOPR_TEST_HOOKS", "1");
    command
}

/// Every answer twice: a loop killed after its answer arrived asks again after the restart.
fn script(fake: &FakeLlm) {
    let mut plan = valid_plan();
    plan["specs"][0]["name"] = json!(SPECS[0].0);
    plan["specs"][1]["name"] = json!(SPECS[1].0);
    plan["specs"][1]["dependencies"] = json!([SPECS[0].0]);
    for copy in 0..2 {
        fake.push_routed(
            plan_route(),
            tool_turn(&format!("plan{copy}"), "create_plan", plan.clone()),
        );
        for (spec, phases) in SPECS {
            fake.push_routed(
                &spec_route(spec),
                tool_turn(
                    &format!("{spec}{copy}"),
                    "create_spec",
                    spec_input(spec, &phases),
                ),
            );
            for phase in phases {
                fake.push_routed(
                    &phase_route(phase),
                    tool_turn(
                        &format!("{phase}{copy}"),
                        "create_phase",
                        phase_input(phase),
                    ),
                );
            }
        }
    }
}

async fn kill_at(point: &str) {
    kill_at_then(point, |_| {}).await;
}

/// Kills the host at `point`, lets `between` change the state it left, resumes, and checks
/// the whole hierarchy completed. Returns the fake server, for a look at the requests.
async fn kill_at_then(point: &str, between: impl FnOnce(&TestDirs)) -> FakeLlm {
    let fake = FakeLlm::start().await;
    script(&fake);
    let dirs = TestDirs::new();

    let mut first = command(
        &dirs,
        &fake,
        &[
            "plan",
            "Add a --version flag",
            "--approve-all",
            "--settings",
            SETTINGS,
        ],
    )
    .env("LOOPR_TEST_PAUSE_AT", point)
    .stderr(Stdio::piped())
    .stdout(Stdio::null())
    .spawn()
    .expect("spawn loopr plan");
    let stderr = first.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let marker = format!("paused at {point}");
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.expect("read stderr") {
            let found = line.contains(&marker);
            seen.push(line);
            if found {
                return;
            }
        }
        panic!(
            "{point}: the process ended without pausing:\n{}",
            seen.join("\n")
        );
    })
    .await
    .unwrap_or_else(|_| panic!("{point}: no pause within 30s"));
    first.start_kill().expect("SIGKILL");
    let status = first.wait().await.expect("wait");
    assert!(!status.success(), "{point}: killed");
    between(&dirs);

    let resumed = command(&dirs, &fake, &["resume", "--approve-all"])
        .output()
        .await
        .expect("run loopr resume");
    let stdout = String::from_utf8_lossy(&resumed.stdout);
    assert!(
        resumed.status.success(),
        "{point}: resume failed\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&resumed.stderr)
    );

    // Every loop of the hierarchy exists once and completed.
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 1 + 2 + 6, "{point}:\n{stdout}");
    let mut names: HashMap<&str, usize> = HashMap::new();
    for row in &rows {
        assert_eq!(row[3], "complete", "{point}:\n{stdout}");
        *names.entry(row[2]).or_default() += 1;
    }
    for (name, count) in names {
        assert_eq!(count, 1, "{point}: {name} exists {count} times\n{stdout}");
    }

    // Every artifact on disk parses, and every markdown file is whole.
    for file in files_ending_with(&dirs.loopr_home, ".json") {
        let name = file
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or_default();
        if ["plan.json", "spec.json", "phase.json"].contains(&name) {
            let parsed: Result<Value, _> =
                serde_json::from_slice(&std::fs::read(&file).expect("read"));
            assert!(parsed.is_ok(), "{point}: {} does not parse", file.display());
        }
    }
    // Nothing the killed host was writing is left behind, nor its lock file.
    for dir in [&dirs.loopr_home, &dirs.project] {
        let leftovers: Vec<_> = files_ending_with(dir, "")
            .into_iter()
            .filter(|file| {
                file.file_name()
                    .and_then(|name| name.to_str())
                    .is_some_and(|name| name.starts_with(".loopr-"))
            })
            .collect();
        assert!(leftovers.is_empty(), "{point}: {leftovers:?}");
    }
    let locks = files_ending_with(&dirs.loopr_home.join("hosts"), ".lock");
    assert!(locks.is_empty(), "{point}: {locks:?}");
    for file in files_ending_with(&dirs.loopr_home, ".md") {
        let text = std::fs::read_to_string(&file).expect("read");
        assert!(
            text.starts_with("# ") && text.ends_with('\n'),
            "{point}: {} is cut",
            file.display()
        );
    }
    fake
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_before_a_spec_artifact_write_then_resumed() {
    kill_at("before_artifact_write:spec").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_during_a_spec_artifact_write_then_resumed() {
    kill_at("during_artifact_write:spec").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_a_spec_artifact_write_before_its_children_then_resumed() {
    kill_at("after_artifact_write:spec").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_during_a_phase_artifact_write_then_resumed() {
    kill_at("during_artifact_write:phase").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_plan_was_written_before_its_gate_then_resumed() {
    kill_at("after_artifact_write:plan").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_in_the_middle_of_an_atomic_write_then_resumed() {
    kill_at("atomic_write:plan.md").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_in_the_middle_of_a_journal_append_then_resumed() {
    kill_at("append:journal.jsonl").await;
}

/// A loop stored by a version before the journal (its whole run in `run.json`, in the
/// Anthropic-shaped form) resumes after the upgrade, with its conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stored_before_the_journal_resumes_after_the_upgrade() {
    let fake = kill_at_then("before_artifact_write:plan", |dirs| {
        let journals = files_ending_with(&dirs.loopr_home, "journal.jsonl");
        assert_eq!(journals.len(), 1, "only the plan loop ran: {journals:?}");
        let journal = &journals[0];
        let first: Value = std::fs::read_to_string(journal)
            .expect("journal")
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).expect("line"))
            .find(|entry| entry["type"] == "user")
            .expect("the task message");
        let legacy = json!({
            "base_iteration": 0,
            "stored_iteration": 0,
            "stage": {"stage": "drafting"},
            "passes_done": 0,
            "messages": [
                {"role": "user", "content": first["content"]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_before_upgrade", "name": "list_files", "input": {}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_before_upgrade", "content": "src/main.rs"}
                ]}
            ]
        });
        std::fs::remove_file(journal).expect("remove the journal");
        std::fs::write(journal.with_file_name("run.json"), legacy.to_string()).expect("run.json");
    })
    .await;
    let resumed_plan_request = fake
        .requests()
        .into_iter()
        .filter(|request| fake_llm::first_user_text(&request.body).contains(plan_route()))
        .nth(1)
        .expect("the resumed plan loop asked the model");
    let messages = &resumed_plan_request.body["messages"];
    assert_eq!(
        messages[1]["content"][0],
        json!({"type": "tool_use", "id": "toolu_before_upgrade", "name": "list_files", "input": {}}),
        "{messages}"
    );
    assert_eq!(
        messages[2]["content"][0]["tool_use_id"], "toolu_before_upgrade",
        "{messages}"
    );
}
