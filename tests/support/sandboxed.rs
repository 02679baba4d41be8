//! Commands run by a real code loop (`loopr run --yes`) in a real sandbox, for the tests of
//! what the sandbox lets a command do.
#![allow(dead_code)]

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, TurnBuilder};
use crate::nvim::TestDirs;

/// The settings that run commands under `mechanism` ("bubblewrap", "landlock") with the rest
/// of the `sandbox` table from `sandbox`, or why that mechanism cannot run here.
pub fn sandbox_settings_with(mechanism: &str, sandbox: Value) -> Result<String, String> {
    let mut table = sandbox;
    table["mode"] = json!(mechanism);
    let settings = json!({
        "plan_review_passes": 0,
        "spec_review": false,
        "code_max_iterations": 1,
        "verify": false,
        "sandbox": table,
    })
    .to_string();
    let probe = std::process::Command::new(env!("CARGO_BIN_EXE_loopr"))
        .args(["sandbox", "--settings", &settings])
        .output()
        .expect("run loopr sandbox");
    if probe.status.success() {
        Ok(settings)
    } else {
        Err(String::from_utf8_lossy(&probe.stderr).trim().to_owned())
    }
}

/// The settings that run commands under `mechanism`, or why it cannot run here.
pub fn sandbox_settings(mechanism: &str) -> Result<String, String> {
    sandbox_settings_with(mechanism, json!({}))
}

/// The settings that run commands under `mechanism`; `None`, saying why (the test is then
/// skipped), where it cannot run here.
/// `LOOPR_REQUIRE_SANDBOX` names the mechanisms that must run (the test script sets it where
/// they do): a skip there would pass without testing anything, so it fails instead.
pub fn settings_or_skip(mechanism: &str) -> Option<String> {
    let required = std::env::var("LOOPR_REQUIRE_SANDBOX")
        .is_ok_and(|names| names.split(',').any(|name| name.trim() == mechanism));
    match sandbox_settings(mechanism) {
        Ok(settings) => Some(settings),
        Err(why) if required => {
            panic!(
                "the {mechanism} sandbox must run here (LOOPR_REQUIRE_SANDBOX) but cannot: {why}"
            )
        }
        Err(why) => {
            eprintln!("skipped: the {mechanism} sandbox cannot run here: {why}");
            None
        }
    }
}

/// A planned project and the settings that run its commands under `mechanism`; `None`
/// (the test skipped, saying why) where that sandbox cannot run here.
pub async fn sandboxed_project(mechanism: &str) -> Option<(String, FakeLlm, TestDirs)> {
    let settings = settings_or_skip(mechanism)?;
    let (fake, dirs) = planned_project().await;
    Some((settings, fake, dirs))
}

/// A project planned headless whose phase `print-version` is validated by `true`. It lies in
/// a directory of its own (`work/`), which a test may make writable: the test's HOME is
/// beside it, and a writable place may not hold HOME.
pub async fn planned_project() -> (FakeLlm, TestDirs) {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::with_project_name("work/project");
    crate::scenario::plan_code_project(&fake, &dirs, "true").await;
    (fake, dirs)
}

/// What one `run_command` call answered.
#[derive(Debug)]
pub struct CommandResult {
    pub text: String,
    pub is_error: bool,
}

/// Runs `commands` as one turn of `run_command` calls of a code loop of the phase
/// `print-version` (`loopr run --yes` with `settings`), then completes the phase; returns each
/// call's result, in order.
pub async fn run_commands(
    fake: &FakeLlm,
    dirs: &TestDirs,
    settings: &str,
    commands: &[String],
) -> Vec<CommandResult> {
    let route = crate::scenario::code_route("print-version");
    let mut turn = TurnBuilder::new();
    for (index, command) in commands.iter().enumerate() {
        turn = turn.tool_use(
            &format!("command-{index}"),
            "run_command",
            json!({ "command": command }),
        );
    }
    fake.push_routed(&route, turn.reply());
    fake.push_routed(&route, crate::scenario::complete_phase_turn("checked"));
    let requests_before = fake.requests().len();
    let output = crate::scenario::loopr_command(
        dirs,
        fake,
        &["run", "print-version", "--yes", "--settings", settings],
    )
    .env("PATH", std::env::var_os("PATH").unwrap_or_default())
    .output()
    .await
    .expect("run loopr");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let requests = fake.requests();
    let answered = &requests
        .get(requests_before + 1)
        .expect("the turn after the commands")
        .body;
    crate::scenario::tool_results(answered)
        .iter()
        .map(|result| CommandResult {
            text: result["content"].as_str().expect("text").to_owned(),
            is_error: result["is_error"] == true,
        })
        .collect()
}
