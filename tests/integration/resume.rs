//! Resuming at startup: the host alone says where a project's state is (`loopr has-state`),
//! so projects whose names Lua and Rust would spell differently resume too.

use serde_json::Value;

use crate::fake_anthropic::FakeAnthropic;
use crate::nvim::{StartOptions, TestDirs, TestNvim, WAIT};
use crate::scenario::{create_plan_turn, list_files_turn, run_loopr, stalled_turn, valid_plan};

/// A decomposed "é" (e + U+0301 COMBINING ACUTE ACCENT) and a superscript two: characters
/// that character-class rules outside the host treat differently from Rust's.
const NON_ASCII_NAME: &str = "cafe\u{301} x\u{b2}";

fn options(fake: &FakeAnthropic) -> StartOptions {
    StartOptions {
        base_url: fake.base_url(),
        setup: "{ plan_review_passes = 0 }".to_owned(),
        extra_env: Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loops_resume_when_neovim_starts_in_a_project_with_a_non_ascii_name() {
    let fake = FakeAnthropic::start().await;
    fake.push(list_files_turn());
    fake.push(stalled_turn("Working"));
    let dirs = TestDirs::with_project_name(NON_ASCII_NAME);
    let mut editor = TestNvim::start(dirs, options(&fake)).await;
    let loop_id = editor.plan("Add a --version flag").await;
    fake.wait_for_requests(2).await;
    let dirs = editor.quit().await;

    // The reply to the resumed request is held until the new editor listens for events.
    let (held, release) = create_plan_turn("toolu_plan", valid_plan()).held();
    fake.push(held);
    let mut editor = TestNvim::start(dirs, options(&fake)).await;
    tokio::time::timeout(WAIT, fake.wait_for_requests(3))
        .await
        .expect("the new editor resumed the loop on start, which asked the model again");
    release.notify_one();
    editor.wait_status(&loop_id, "awaiting_approval").await;
    let requests = fake.requests();
    assert_eq!(
        requests[1].body, requests[2].body,
        "the cut-off turn is sent again"
    );
    let messages: String = editor.lua("return vim.fn.execute('messages')").await;
    assert!(messages.contains("Loopr: resuming 1 loop(s)"), "{messages}");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_startup_check_starts_no_host_in_a_project_without_state() {
    let fake = FakeAnthropic::start().await;
    let mut editor = TestNvim::start(TestDirs::new(), options(&fake)).await;
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
    let fake = FakeAnthropic::start().await;
    fake.push(create_plan_turn("toolu_plan", valid_plan()));
    let dirs = TestDirs::with_project_name(NON_ASCII_NAME);
    let root = dirs.project.display().to_string();

    let before = run_loopr(&dirs, &fake, &["has-state", "--root", &root]).await;
    assert_eq!(before.status.code(), Some(1), "{before:?}");
    assert!(
        !dirs.loopr_home.exists(),
        "asking creates nothing in $LOOPR_HOME"
    );

    let plan = run_loopr(
        &dirs,
        &fake,
        &[
            "plan",
            "Add a --version flag",
            "--settings",
            r#"{"plan_review_passes": 0}"#,
        ],
    )
    .await;
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
