//! The plugin keeps no copy of a host rule: what opens for review, what each command's
//! completion offers and what the status window marks are the host's answers, so they agree
//! with what the host then does, whatever the current `setup()` says.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use loopr::store::{LoopDb, LoopRecord, LoopStatus, LoopType};
use serde_json::Value;

use crate::fake_llm::FakeLlm;
use crate::nvim::TestNvim;
use crate::scenario::{push_one_spec_hierarchy, stalled_turn, start_editor, tool_turn};

/// Names the windows of the current tab page show.
async fn window_names(editor: &TestNvim) -> Vec<String> {
    editor
        .lua(
            "return vim.tbl_map(function(win)
               return vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(win))
             end, vim.api.nvim_tabpage_list_wins(0))",
        )
        .await
}

/// Replaces the options of `setup()` (keeping the test's host binary) by the test's defaults
/// with `review_gates`: loops started from now on get them, those started before keep theirs.
async fn set_review_gates(editor: &TestNvim, review_gates: &str) {
    editor
        .exec(&format!(
            "require('loopr').setup({{ bin = require('loopr.config').get().bin, log_level = 'trace',
               plan_review_passes = 0, spec_review = false, review_gates = {review_gates} }})"
        ))
        .await;
}

/// Plans, changes `setup()`'s review gates to `current` while the plan waits, approves it,
/// and returns whether the spec it spawned opened a window, and the spec's status.
async fn spec_opened_after_gates_changed(
    editor: &mut TestNvim,
    current: &str,
    seen_specs: &mut BTreeSet<String>,
) -> (bool, String) {
    // Its id from the plan's answer: a "running" event could be an earlier loop's.
    let plan_id: String = editor
        .lua_answered("require('loopr').plan('Add a --version flag', function(id) result = id end)")
        .await;
    editor.wait_status(&plan_id, "awaiting_approval").await;
    set_review_gates(editor, current).await;
    assert_eq!(editor.command("only").await, None);
    assert_eq!(
        editor.command(&format!("LooprApprove {plan_id}")).await,
        None
    );
    // The artifact's handler opens (or leaves) the window before it fires the event.
    let created = editor
        .wait_event("LooprArtifactCreated", |data| {
            data["kind"] == "spec"
                && !seen_specs.contains(data["loop_id"].as_str().unwrap_or_default())
        })
        .await;
    let spec_id = created["loop_id"].as_str().expect("spec id").to_owned();
    seen_specs.insert(spec_id.clone());
    let opened = window_names(editor)
        .await
        .iter()
        .any(|name| name.contains(&spec_id) && name.ends_with("spec.md"));
    let status = loop {
        let records = editor.status_records().await;
        let spec = records
            .iter()
            .find(|record| record["id"] == spec_id.as_str())
            .expect("the spec's record");
        let status = spec["status"].as_str().expect("status");
        if status != "running" {
            break status.to_owned();
        }
        editor
            .wait_event("LooprLoopUpdated", |data| data["id"] == spec_id.as_str())
            .await;
    };
    (opened, status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_opens_for_review_as_its_loops_stored_gates_say_not_the_current_setup() {
    let fake = FakeLlm::start().await;
    push_one_spec_hierarchy(&fake, |_| None, tool_turn);
    push_one_spec_hierarchy(&fake, |_| None, tool_turn);
    let mut editor = start_editor(&fake, "{ review_gates = { 'plan', 'spec' } }").await;
    let mut seen_specs = BTreeSet::new();

    // Started with specs gated: its spec waits for review, and opens, though setup() no
    // longer gates specs.
    let (opened, status) =
        spec_opened_after_gates_changed(&mut editor, "{ 'plan' }", &mut seen_specs).await;
    assert_eq!(status, "awaiting_approval", "the host gates it");
    assert!(opened, "a spec that waits for review opens");

    // Started with only plans gated (the setup() of the step before): its spec flows on, and
    // opens no window, though setup() now gates specs.
    let (opened, status) =
        spec_opened_after_gates_changed(&mut editor, "{ 'plan', 'spec' }", &mut seen_specs).await;
    assert_eq!(status, "complete", "the host does not gate it");
    assert!(!opened, "a spec that needs no review opens no window");
    editor.quit().await;
}

/// One loop of each kind the user can meet, by the status a shell sees (a running loop whose
/// host is gone is "interrupted"), each with the label the test reports it by.
fn loops_of_every_kind() -> Vec<(&'static str, LoopRecord)> {
    let with = |status: LoopStatus, iteration: u32, error: Option<&str>| LoopRecord {
        status,
        iteration,
        error: error.map(str::to_owned),
        ..LoopRecord::new_pending(LoopType::Plan, "Add a --version flag", "{}".to_owned())
    };
    vec![
        ("waiting", with(LoopStatus::Pending, 0, None)),
        (
            "held at its budget",
            with(
                LoopStatus::Pending,
                0,
                Some("its plan tree reached its budget"),
            ),
        ),
        ("interrupted", with(LoopStatus::Running, 0, None)),
        (
            "awaiting approval",
            with(LoopStatus::AwaitingApproval, 1, None),
        ),
        ("complete", with(LoopStatus::Complete, 1, None)),
        (
            "failed",
            with(LoopStatus::Failed, 0, Some("the server kept failing")),
        ),
        (
            "failed with an artifact",
            with(LoopStatus::Failed, 1, Some("the revision failed")),
        ),
        (
            "undone",
            with(LoopStatus::Failed, 1, Some("undone: 1 file(s) restored")),
        ),
        ("cancelled", with(LoopStatus::Cancelled, 0, None)),
        ("invalidated", with(LoopStatus::Invalidated, 1, None)),
        (
            "paused",
            with(
                LoopStatus::Paused,
                1,
                Some("its plan tree reached its budget"),
            ),
        ),
    ]
}

/// The project database the host opened under `loopr_home`.
fn project_database(loopr_home: &Path) -> PathBuf {
    std::fs::read_dir(loopr_home)
        .expect("LOOPR_HOME")
        .filter_map(Result::ok)
        .map(|entry| entry.path().join("loopr.db"))
        .find(|path| path.exists())
        .expect("the host opened the project's database")
}

/// Records a loop of each kind in the project the host has open, as another host that is
/// gone now (its pid holds no lock) left them; returns each id with its label.
async fn record_loops_of_every_kind(editor: &TestNvim) -> Vec<(String, &'static str)> {
    // The host opens the project (and sweeps what gone hosts left) before the loops appear.
    editor.status_records().await;
    let db = LoopDb::open(&project_database(&editor.dirs.loopr_home)).expect("open the database");
    let gone_host = u32::MAX - 7;
    loops_of_every_kind()
        .into_iter()
        .map(|(label, record)| {
            db.insert(&record, gone_host).expect("insert");
            (record.id.to_string(), label)
        })
        .collect()
}

/// The labels of `ids` among `loops`, sorted.
fn labels(loops: &[(String, &'static str)], ids: &[String]) -> BTreeSet<&'static str> {
    loops
        .iter()
        .filter(|(id, _)| ids.contains(id))
        .map(|(_, label)| *label)
        .collect()
}

/// The loops `command` (`retry`, `cancel`) accepts, asked of each loop of `loops` in turn.
async fn accepted_by(
    editor: &TestNvim,
    command: &str,
    loops: &[(String, &'static str)],
) -> BTreeSet<&'static str> {
    let ids: Vec<&str> = loops.iter().map(|(id, _)| id.as_str()).collect();
    let accepted: Vec<String> = editor
        .lua_answered(&format!(
            "result = {{}}
             for _, id in ipairs({ids}) do
               require('loopr').{command}(id, nil, function(done)
                 if done then table.insert(result, done) end
               end)
             end",
            ids = lua_list(&ids),
        ))
        .await;
    labels(loops, &accepted)
}

fn lua_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|item| format!("{item:?}")).collect();
    format!("{{ {} }}", quoted.join(", "))
}

/// The loops `:Loopr<command>`'s completion (`complete`, a function of `require('loopr')`)
/// offers among `loops`.
async fn offered_by(
    editor: &TestNvim,
    complete: &str,
    loops: &[(String, &'static str)],
) -> BTreeSet<&'static str> {
    let offered: Vec<String> = editor
        .lua(&format!("return require('loopr').{complete}('')"))
        .await;
    labels(loops, &offered)
}

/// The loops among `loops` whose status record has `flag` set.
async fn marked(
    editor: &TestNvim,
    flag: &str,
    loops: &[(String, &'static str)],
) -> BTreeSet<&'static str> {
    let records = editor.status_records().await;
    let ids: Vec<String> = records
        .iter()
        .filter(|record| record[flag] == Value::Bool(true))
        .filter_map(|record| record["id"].as_str().map(str::to_owned))
        .collect();
    labels(loops, &ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_and_cancel_completions_offer_exactly_the_loops_those_commands_take() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;

    let loops = record_loops_of_every_kind(&editor).await;
    let offered = offered_by(&editor, "complete_retryable_ids", &loops).await;
    assert_eq!(offered, marked(&editor, "retryable", &loops).await);
    // What retry takes runs again: its requests stall until the editor quits.
    for _ in 0..loops.len() {
        fake.push(stalled_turn("Trying again"));
    }
    let accepted = accepted_by(&editor, "retry", &loops).await;
    assert_eq!(
        offered, accepted,
        ":LooprRetry <Tab> offers what :LooprRetry takes"
    );
    assert!(
        !accepted.is_empty() && accepted.len() < loops.len(),
        "{accepted:?}"
    );

    let loops = record_loops_of_every_kind(&editor).await;
    let offered = offered_by(&editor, "complete_awaiting_ids", &loops).await;
    assert_eq!(offered, marked(&editor, "awaits_approval", &loops).await);
    assert_eq!(
        offered,
        BTreeSet::from(["awaiting approval", "held at its budget", "paused"])
    );
    let offered = offered_by(&editor, "complete_loop_ids", &loops).await;
    assert_eq!(offered, marked(&editor, "cancellable", &loops).await);
    let accepted = accepted_by(&editor, "cancel", &loops).await;
    assert_eq!(
        offered, accepted,
        ":LooprCancel <Tab> offers what :LooprCancel takes"
    );
    assert!(
        !accepted.is_empty() && accepted.len() < loops.len(),
        "{accepted:?}"
    );
    editor.quit().await;
}
