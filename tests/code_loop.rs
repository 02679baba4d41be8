//! The code loop without Neovim: `loopr run <phase> --yes` edits the project until the
//! phase's validation command passes, against the fake Anthropic server.

#[path = "support/fake_anthropic.rs"]
mod fake_anthropic;
#[path = "support/nvim.rs"]
mod nvim;
#[path = "support/scenario.rs"]
mod scenario;

use serde_json::{Value, json};

use fake_anthropic::{FakeAnthropic, TurnBuilder, first_user_text};
use nvim::TestDirs;
use scenario::{
    files_ending_with, phase_input, phase_route, plan_route, run_loopr, spec_input, spec_route,
    tool_results, tool_turn, valid_plan,
};

const PHASES: [&str; 3] = ["print-version", "document-flag", "exit-code"];
const SETTINGS: &str = r#"{"plan_review_passes": 0, "spec_review": false}"#;

/// A planned project whose phase `print-version` is validated by grepping src/main.rs.
async fn planned(fake: &FakeAnthropic, dirs: &TestDirs) {
    planned_with(
        fake,
        dirs,
        "grep -q 'env!(\"CARGO_PKG_VERSION\")' src/main.rs",
    )
    .await;
}

async fn planned_with(fake: &FakeAnthropic, dirs: &TestDirs, validation: &str) {
    let mut plan = valid_plan();
    plan["specs"] = json!([{"name": "version-flag", "title": "Parse --version", "description": "Print the version from src/main.rs when asked, then exit 0.", "dependencies": []}]);
    fake.push_routed(plan_route(), tool_turn("plan", "create_plan", plan));
    fake.push_routed(
        &spec_route("version-flag"),
        tool_turn("spec", "create_spec", spec_input("version-flag", &PHASES)),
    );
    for phase in PHASES {
        let mut input = phase_input(phase);
        if phase == "print-version" {
            input["validation_command"] = json!(validation);
        }
        fake.push_routed(&phase_route(phase), tool_turn(phase, "create_phase", input));
    }
    let output = run_loopr(
        dirs,
        fake,
        &[
            "plan",
            "Add a --version flag",
            "--approve-all",
            "--settings",
            SETTINGS,
        ],
    )
    .await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn code_route() -> &'static str {
    "Implement this phase.\n\n# Phase: Phase print-version"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_validation_goes_back_to_the_model_and_the_second_attempt_passes() {
    let fake = FakeAnthropic::start().await;
    let dirs = TestDirs::new();
    planned(&fake, &dirs).await;
    let edit = |id: &str, old: &str, new: &str| {
        TurnBuilder::new()
            .text("Changing main.rs.")
            .tool_use(
                id,
                "edit_file",
                json!({"path": "src/main.rs", "old_string": old, "new_string": new}),
            )
            .tool_use(
                &format!("{id}-done"),
                "complete_phase",
                json!({"summary": "printed the version"}),
            )
            .usage(400, 120)
            .reply()
    };
    fake.push_routed(
        code_route(),
        edit("e1", "println!(\"hello\");", "println!(\"version\");"),
    );
    fake.push_routed(
        code_route(),
        edit(
            "e2",
            "println!(\"version\");",
            "println!(\"{}\", env!(\"CARGO_PKG_VERSION\"));",
        ),
    );
    let requests_before = fake.requests().len();

    let output = run_loopr(
        &dirs,
        &fake,
        &["run", "print-version", "--yes", "--settings", SETTINGS],
    )
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stderr:\n{stderr}\nstdout:\n{stdout}"
    );

    let main = std::fs::read_to_string(dirs.project.join("src/main.rs")).expect("main.rs");
    assert!(
        main.contains("println!(\"{}\", env!(\"CARGO_PKG_VERSION\"));"),
        "{main}"
    );
    let requests: Vec<_> = fake.requests().into_iter().skip(requests_before).collect();
    assert_eq!(requests.len(), 2, "one iteration more after the failure");
    assert!(first_user_text(&requests[0].body).contains(code_route()));
    let results = tool_results(&requests[1].body);
    assert_eq!(results[0]["content"], "edited src/main.rs");
    assert_eq!(results[1]["is_error"], true);
    let failure = results[1]["content"].as_str().expect("text");
    assert!(
        failure.starts_with("Validation failed: `grep -q"),
        "{failure}"
    );
    assert!(failure.contains("exit status 1"), "{failure}");
    let tools: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert_eq!(
        tools,
        vec![
            "read_file",
            "list_files",
            "grep",
            "write_file",
            "edit_file",
            "run_command",
            "complete_phase"
        ]
    );

    // Each iteration keeps its validation output and conversation.
    let logs = files_ending_with(&dirs.loopr_home, "/validation.log");
    assert_eq!(logs.len(), 2, "{logs:?}");
    let first = std::fs::read_to_string(&logs[0]).expect("log");
    let second = std::fs::read_to_string(&logs[1]).expect("log");
    assert!(
        logs[0].to_string_lossy().contains("/iterations/001/") && first.contains("exit status 1"),
        "{first}"
    );
    assert!(
        logs[1].to_string_lossy().contains("/iterations/002/") && second.contains("exit status 0"),
        "{second}"
    );
    let row = stdout.lines().nth(1).expect("code loop row");
    let fields: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        (fields[1], fields[2], fields[3], fields[4]),
        ("code", "print-version", "complete", "2"),
        "{stdout}"
    );
    let _: Value = serde_json::from_slice(
        &std::fs::read(logs[1].with_file_name("conversation.json")).expect("conversation"),
    )
    .expect("json");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_without_yes_and_names_the_alternatives() {
    let fake = FakeAnthropic::start().await;
    let dirs = TestDirs::new();
    let output = run_loopr(&dirs, &fake, &["run", "print-version"]).await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--yes") && stderr.contains(":LooprRun"),
        "{stderr}"
    );
    assert!(fake.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_phase_is_reported() {
    let fake = FakeAnthropic::start().await;
    let dirs = TestDirs::new();
    planned(&fake, &dirs).await;
    let output = run_loopr(
        &dirs,
        &fake,
        &["run", "no-such-phase", "--yes", "--settings", SETTINGS],
    )
    .await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no approved phase named \"no-such-phase\""),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phase_still_waiting_for_review_cannot_run() {
    let fake = FakeAnthropic::start().await;
    let dirs = TestDirs::new();
    let mut plan = valid_plan();
    plan["specs"] = json!([{"name": "version-flag", "title": "Parse --version", "description": "Print the version from src/main.rs when asked, then exit 0.", "dependencies": []}]);
    fake.push_routed(plan_route(), tool_turn("plan", "create_plan", plan));
    fake.push_routed(
        &spec_route("version-flag"),
        tool_turn("spec", "create_spec", spec_input("version-flag", &PHASES)),
    );
    for phase in PHASES {
        fake.push_routed(
            &phase_route(phase),
            tool_turn(phase, "create_phase", phase_input(phase)),
        );
    }
    let gated = r#"{"plan_review_passes": 0, "spec_review": false, "review_gates": ["phase"]}"#;
    let planned = run_loopr(
        &dirs,
        &fake,
        &["plan", "Add a --version flag", "--settings", gated],
    )
    .await;
    let table = String::from_utf8_lossy(&planned.stdout);
    assert_eq!(table.matches("awaiting_approval").count(), 3, "{table}");

    let output = run_loopr(
        &dirs,
        &fake,
        &["run", "print-version", "--yes", "--settings", SETTINGS],
    )
    .await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("wait for review"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validation_command_on_the_deny_list_never_runs() {
    let fake = FakeAnthropic::start().await;
    let dirs = TestDirs::new();
    planned_with(&fake, &dirs, "sudo touch ran").await;
    fake.push_routed(
        code_route(),
        tool_turn(
            "done",
            "complete_phase",
            json!({"summary": "nothing to do"}),
        ),
    );
    let output = run_loopr(
        &dirs,
        &fake,
        &["run", "print-version", "--yes", "--settings", SETTINGS],
    )
    .await;
    assert!(!output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("failed") && stdout.contains("deny-list"),
        "{stdout}"
    );
    assert!(!dirs.project.join("ran").exists());
}
