//! Resuming at startup: the host alone says where a project's state is (`loopr has-state`),
//! so projects whose names Lua and Rust would spell differently resume too.

use serde_json::Value;

use crate::fake_llm::FakeLlm;
use crate::nvim::TestDirs;
use crate::scenario::{
    create_plan_turn, list_files_turn, plan_killed_at_request, restart_mid_turn, run_loopr,
    run_loopr_plan, stalled_turn, start_editor_in, valid_plan,
};

/// A decomposed "é" (e + U+0301 COMBINING ACUTE ACCENT) and a superscript two: characters
/// that character-class rules outside the host treat differently from Rust's.
const NON_ASCII_NAME: &str = "cafe\u{301} x\u{b2}";

const SETUP: &str = "{ plan_review_passes = 0 }";
/// `SETUP` as the command line's `--settings`.
const SETUP_SETTINGS: &str = r#"{"plan_review_passes": 0}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loops_resume_when_neovim_starts_in_a_project_with_a_non_ascii_name() {
    let fake = FakeLlm::start().await;
    fake.push(list_files_turn());
    fake.push(stalled_turn("Working"));
    let dirs = TestDirs::with_project_name(NON_ASCII_NAME);
    let mut editor = start_editor_in(dirs, &fake, SETUP).await;
    let loop_id = editor.plan("Add a --version flag").await;
    fake.wait_for_requests(2).await;
    let resumed = create_plan_turn("toolu_plan", valid_plan());
    let editor = restart_mid_turn(&fake, editor, &loop_id, SETUP, resumed).await;
    let messages: String = editor.lua("return vim.fn.execute('messages')").await;
    assert!(messages.contains("Loopr: resuming 1 loop(s)"), "{messages}");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_startup_check_starts_no_host_in_a_project_without_state() {
    let fake = FakeLlm::start().await;
    let mut editor = start_editor_in(TestDirs::new(), &fake, SETUP).await;
    editor
        .exec(
            "require('loopr').resume_if_needed(function(active)
               vim.rpcnotify(vim.g.loopr_test_channel, 'loopr_test_event', 'ResumeChecked',
                 { active = active or vim.NIL })
             end)",
        )
        .await;
    let checked = editor.wait_event("ResumeChecked", |_| true).await;
    assert_eq!(checked["active"], Value::Null);
    let host: Option<i64> = editor.lua("return require('loopr.host').chan()").await;
    assert_eq!(host, None, "no host was started");
    assert!(
        !editor.dirs.loopr_home.exists(),
        "nothing was written to $LOOPR_HOME"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn has_state_answers_by_exit_code() {
    let fake = FakeLlm::start().await;
    fake.push(create_plan_turn("toolu_plan", valid_plan()));
    let dirs = TestDirs::with_project_name(NON_ASCII_NAME);
    let root = dirs.project.display().to_string();

    let before = run_loopr(&dirs, &fake, &["has-state", "--root", &root]).await;
    assert_eq!(before.status.code(), Some(1), "{before:?}");
    assert!(
        !dirs.loopr_home.exists(),
        "asking creates nothing in $LOOPR_HOME"
    );

    let plan = run_loopr_plan(&dirs, &fake).await;
    assert!(
        !plan.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let after = run_loopr(&dirs, &fake, &["has-state"]).await;
    assert_eq!(after.status.code(), Some(0), "{after:?}");

    let missing = dirs.home.join("no-such-project").display().to_string();
    let broken = run_loopr(&dirs, &fake, &["has-state", "--root", &missing]).await;
    assert_eq!(broken.status.code(), Some(2), "{broken:?}");
    let stderr = String::from_utf8_lossy(&broken.stderr);
    assert!(
        stderr.contains("no-such-project"),
        "names the root: {stderr}"
    );
}

/// An editor whose host has the project open, and the id of the plan loop a `loopr plan`,
/// killed mid-turn meanwhile, left: Neovim's status shows it interrupted.
async fn editor_beside_a_killed_plan(fake: &FakeLlm) -> (crate::nvim::TestNvim, String) {
    let editor = start_editor_in(TestDirs::new(), fake, SETUP).await;
    assert!(
        editor.status_records().await.is_empty(),
        "Neovim's host has the project open before the other host runs"
    );
    fake.push(stalled_turn("Working"));
    plan_killed_at_request(
        &editor.dirs,
        fake,
        "Add a --version flag",
        SETUP_SETTINGS,
        1,
    )
    .await;
    let records = editor.status_records().await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["status"], "interrupted", "{records:?}");
    let loop_id = records[0]["id"].as_str().expect("id").to_owned();
    (editor, loop_id)
}

/// A `loopr plan` killed mid-turn while Neovim has the project open: Neovim's status (the
/// same query as `loopr status`) shows its loop interrupted, not running, and `:LooprRetry`
/// continues it from its stored conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_whose_host_was_killed_is_interrupted_in_the_status_and_retried() {
    let fake = FakeLlm::start().await;
    let (mut editor, loop_id) = editor_beside_a_killed_plan(&fake).await;

    fake.push(create_plan_turn("toolu_plan", valid_plan()));
    assert_eq!(editor.command(&format!("LooprRetry {loop_id}")).await, None);
    editor.wait_status(&loop_id, "awaiting_approval").await;
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].body, requests[1].body,
        "the retried loop asks again what the killed one asked"
    );
    editor.quit().await;
}

/// `:LooprCancel` of a loop whose host was killed ends it at once: no host is left to stop it,
/// so it is cancelled where it stands (its status says so), and a resume afterwards neither
/// adopts nor runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_loop_whose_host_was_killed_ends_it_and_no_resume_runs_it() {
    let fake = FakeLlm::start().await;
    let (mut editor, loop_id) = editor_beside_a_killed_plan(&fake).await;
    let offered: Vec<String> = editor
        .lua("return vim.fn.getcompletion('LooprCancel ', 'cmdline')")
        .await;
    assert_eq!(offered, vec![loop_id.clone()], "<Tab> offers it to cancel");

    assert_eq!(
        editor.command(&format!("LooprCancel {loop_id}")).await,
        None
    );
    // Answered once its transaction is done: what it changed is in the status now.
    let records = editor.status_records().await;
    assert_eq!(records[0]["status"], "cancelled", "{records:?}");
    editor.wait_status(&loop_id, "cancelled").await;

    fake.push(create_plan_turn("toolu_plan", valid_plan()));
    let resumed = run_loopr(&editor.dirs, &fake, &["resume"]).await;
    assert_eq!(
        fake.requests().len(),
        1,
        "the resume ran the cancelled loop: {}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let records = editor.status_records().await;
    assert_eq!(records[0]["status"], "cancelled", "{records:?}");
    editor.quit().await;
}
