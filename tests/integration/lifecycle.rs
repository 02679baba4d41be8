//! Revisions, retries, cancellation and failure reasons across the loop lifecycle: nothing a
//! user asks for is lost, whatever the timing or a restart in between.

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, overloaded};
use crate::nvim::{Hold, StartOptions, TestDirs, TestNvim};
use crate::scenario::{
    create_plan_turn, plan_route, stalled_turn, start_editor, start_editor_in, valid_plan,
};

const NO_REVIEWS: &str = "{ plan_review_passes = 0, spec_review = false }";

async fn record(editor: &TestNvim, id: &str) -> Value {
    editor
        .status_records()
        .await
        .into_iter()
        .find(|record| record["id"] == id)
        .unwrap_or_else(|| panic!("no loop {id}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revising_a_loop_made_before_neovim_restarted_runs_it() {
    let fake = FakeLlm::start().await;
    fake.push_routed(plan_route(), create_plan_turn("first", valid_plan()));
    let mut editor = start_editor(&fake, NO_REVIEWS).await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "awaiting_approval").await;
    let dirs = editor.quit().await;

    let mut revised = valid_plan();
    revised["title"] = json!("Add a --version flag, revised");
    fake.push_routed(plan_route(), create_plan_turn("second", revised));
    let mut editor = start_editor_in(dirs, &fake, NO_REVIEWS).await;
    let revise = format!(
        "require('loopr').revise('Name the flag in the title', {{ id = {plan_id:?} }}, function(id) result = id end)"
    );
    assert_eq!(editor.lua_answered::<String>(&revise).await, plan_id);
    editor.wait_status(&plan_id, "running").await;
    editor.wait_status(&plan_id, "awaiting_approval").await;
    assert_eq!(record(&editor, &plan_id).await["iteration"], 2);
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_between_a_loops_claim_and_its_launch_stops_it() {
    let fake = FakeLlm::start().await;
    fake.push(stalled_turn("Thinking"));
    fake.push(create_plan_turn("second", valid_plan()));
    let dirs = TestDirs::new();
    let hold = Hold::new(dirs.temp.path());
    // Claim 1 starts the first plan; claim 2, of the second plan once the first ends, holds.
    let mut editor = TestNvim::start(
        dirs,
        StartOptions {
            base_url: fake.base_url(),
            setup: "{ plan_review_passes = 0, max_concurrent_loops = 1 }".to_owned(),
            extra_env: hold.env("after_claim#2"),
        },
    )
    .await;
    let first = editor.plan("First change").await;
    fake.wait_for_requests(1).await;
    let second: String = editor
        .lua_answered("require('loopr').plan('Second change', function(id) result = id end)")
        .await;
    assert_eq!(record(&editor, &second).await["status"], "pending");

    assert_eq!(editor.command(&format!("LooprCancel {first}")).await, None);
    hold.arrived().await;
    // The second plan is claimed (running in the store) but not yet launched.
    assert_eq!(record(&editor, &second).await["status"], "running");
    assert_eq!(editor.command(&format!("LooprCancel {second}")).await, None);
    hold.release().await;
    editor.wait_status(&second, "cancelled").await;
    assert_eq!(
        fake.requests().len(),
        1,
        "the cancelled plan never asked the model"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_loop_is_retried_and_a_failed_revision_leaves_the_last_iteration_approvable() {
    let fake = FakeLlm::start().await;
    fake.push(overloaded());
    let mut editor = start_editor(&fake, "{ plan_review_passes = 0, max_retries = 0 }").await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "failed").await;

    // `R` on the loop's line in :LooprStatus retries it.
    fake.push(create_plan_turn("plan", valid_plan()));
    assert_eq!(editor.command("LooprStatus").await, None);
    editor
        .exec(&format!(
            "local lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
             for lnum, line in ipairs(lines) do
               if line:find({plan_id:?}, 1, true) then vim.api.nvim_win_set_cursor(0, {{ lnum, 0 }}) end
             end
             vim.api.nvim_feedkeys('R', 'x', false)"
        ))
        .await;
    editor.wait_status(&plan_id, "awaiting_approval").await;

    // The revision fails (persistent overload); iteration 1 stays, and stays approvable.
    fake.push(overloaded());
    let revise = format!(
        "require('loopr').revise('Smaller, please', {{ id = {plan_id:?} }}, function(id) result = id end)"
    );
    assert_eq!(editor.lua_answered::<String>(&revise).await, plan_id);
    editor.wait_status(&plan_id, "failed").await;
    assert_eq!(record(&editor, &plan_id).await["iteration"], 1);
    // The first spec the approval starts waits for the model (the second waits for it): no
    // failure of theirs mixes with what the approval says.
    fake.push(stalled_turn("Thinking"));
    assert_eq!(
        editor.command(&format!("LooprApprove {plan_id}")).await,
        None
    );
    editor.wait_status(&plan_id, "complete").await;
    let specs = editor
        .status_records()
        .await
        .into_iter()
        .filter(|record| record["type"] == "spec")
        .count();
    assert_eq!(specs, 2, "the approved plan spawned its specs");

    // A loop that is not failed, cancelled or interrupted is not retried.
    let refused = editor
        .command(&format!("LooprRetry {plan_id}"))
        .await
        .expect("refused");
    assert!(refused.contains("complete"), "{refused}");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_that_hits_the_turn_limit_says_what_the_model_was_last_told() {
    let fake = FakeLlm::start().await;
    let mut bad_plan = valid_plan();
    bad_plan["specs"] = json!([]);
    for id in ["bad1", "bad2"] {
        fake.push(create_plan_turn(id, bad_plan.clone()));
    }
    let mut editor = start_editor(&fake, "{ plan_review_passes = 0, max_turns = 2 }").await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "failed").await;
    let error = record(&editor, &plan_id).await["error"]
        .as_str()
        .expect("error")
        .to_owned();
    assert!(error.contains("after 2 model turns"), "{error}");
    assert!(
        error.contains("the last problem the model was told:") && error.contains("specs"),
        "{error}"
    );
    let log = editor.log_text();
    assert!(
        log.contains("artifact input rejected") && log.contains("specs"),
        "each rejected call's problems are logged"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_from_another_host_stops_the_loop_at_its_next_turn() {
    let fake = FakeLlm::start().await;
    let (first_turn, release) = crate::scenario::list_files_turn().held();
    fake.push(first_turn);
    let editor = crate::scenario::start_editor_in(TestDirs::new(), &fake, NO_REVIEWS).await;
    // Another host (the command line) runs the plan in the same project.
    let cli = crate::scenario::loopr_command(
        &editor.dirs,
        &fake,
        &[
            "plan",
            "Add a flag",
            "--settings",
            r#"{"plan_review_passes": 0}"#,
        ],
    )
    .output();
    let cli = tokio::spawn(cli);
    fake.wait_for_requests(1).await;
    let records = editor.status_records().await;
    let plan_id = records[0]["id"].as_str().expect("id").to_owned();
    assert_eq!(records[0]["status"], "running");

    assert_eq!(
        editor.command(&format!("LooprCancel {plan_id}")).await,
        None
    );
    release.notify_one();
    let output = cli.await.expect("join").expect("run loopr");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("plan {plan_id} cancelled")),
        "{stderr}"
    );
    assert_eq!(fake.requests().len(), 1, "no turn after the cancel");
    assert_eq!(record(&editor, &plan_id).await["status"], "cancelled");
    editor.quit().await;
}
