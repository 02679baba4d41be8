//! The editor never waits for the host: commands send their request as a notification and
//! return; the answer comes back through a callback, also when the host is held or dies.

use serde_json::Value;

use loopr::bridge::deliver_reply;

use crate::fake_llm::FakeLlm;
use crate::nvim::{Hold, StartOptions, TestDirs, TestNvim};
use crate::scenario::stalled_turn;

/// An editor whose host stops each `plan` request at the `plan_request` hold point before it
/// records anything; nothing started the host yet. Notifications are recorded in `_G.notes`.
async fn editor_with_held_plan(fake: &FakeLlm) -> (TestNvim, Hold) {
    let dirs = TestDirs::new();
    let hold = Hold::new(dirs.temp.path());
    let editor = TestNvim::start(
        dirs,
        StartOptions {
            base_url: fake.base_url(),
            setup: "{ plan_review_passes = 0 }".to_owned(),
            extra_env: hold.env("plan_request"),
        },
    )
    .await;
    editor
        .exec(
            "_G.notes = {}
             vim.notify = function(msg, level) table.insert(_G.notes, { msg = msg, level = level }) end",
        )
        .await;
    (editor, hold)
}

/// Runs `:LooprPlan {task}` as a user would, recording each callback's loop id (or false) in
/// `_G.planned`; returns how long the command took, in ms.
async fn start_plan_command(editor: &TestNvim, task: &str) -> f64 {
    editor
        .lua(&format!(
            "_G.planned = {{}}
             local start = vim.uv.hrtime()
             require('loopr').plan({task:?}, function(id) table.insert(_G.planned, id or false) end)
             return (vim.uv.hrtime() - start) / 1e6"
        ))
        .await
}

async fn notes(editor: &TestNvim) -> Vec<Value> {
    editor.lua("return _G.notes").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_returns_while_the_host_is_held_and_the_callback_shows_the_id() {
    let fake = FakeLlm::start().await;
    fake.push(stalled_turn("Thinking"));
    let (mut editor, hold) = editor_with_held_plan(&fake).await;

    // The command starts the host and returns; the host is still before the store.
    start_plan_command(&editor, "Add a --version flag").await;
    hold.arrived().await;
    assert_eq!(editor.lua::<i64>("return 6 * 7").await, 42);
    let version: String = editor
        .lua("return require('loopr.host').request('version')")
        .await;
    assert!(
        !version.is_empty(),
        "the host answers other requests meanwhile"
    );
    assert_eq!(
        editor
            .lua::<i64>("return require('loopr.host').outstanding()")
            .await,
        1
    );
    assert_eq!(
        notes(&editor).await,
        Vec::<Value>::new(),
        "nothing said yet"
    );

    hold.release().await;
    let _: Option<bool> = editor.lua_answered("").await;
    let loop_id: String = editor.lua("return _G.planned[1]").await;
    editor.wait_status(&loop_id, "running").await;
    let planned: Vec<Value> = editor.lua("return _G.planned").await;
    assert_eq!(planned, vec![Value::from(loop_id.clone())], "called once");
    assert_eq!(
        notes(&editor).await,
        vec![serde_json::json!({"msg": format!("Loopr: planning (loop {loop_id})"), "level": 2})]
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_dies_with_the_plan_outstanding_fails_its_callback_and_recorded_nothing() {
    let fake = FakeLlm::start().await;
    let (editor, hold) = editor_with_held_plan(&fake).await;
    start_plan_command(&editor, "Add a --version flag").await;
    hold.arrived().await;
    let pid: i32 = editor.lua("return require('loopr.host').pid()").await;
    // SAFETY: sending SIGKILL to the host process this test's Neovim started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "kill {pid}");

    let _: Option<bool> = editor.lua_answered("").await;
    let planned: Vec<Value> = editor.lua("return _G.planned").await;
    assert_eq!(
        planned,
        vec![Value::Bool(false)],
        "called once, with an error"
    );
    let notes = notes(&editor).await;
    let failed: Vec<&Value> = notes
        .iter()
        .filter(|note| {
            note["msg"].as_str().is_some_and(|msg| {
                msg.starts_with("Loopr: host exited (code 137) before it answered plan")
            })
        })
        .collect();
    assert_eq!(failed.len(), 1, "{notes:?}");
    assert_eq!(failed[0]["level"], 4);
    // The plan was never acknowledged, and no half of it was kept: a new host finds nothing.
    assert_eq!(editor.status_records().await, Vec::<Value>::new());
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_reply_reaches_the_callback_and_the_user() {
    let fake = FakeLlm::start().await;
    let (editor, _hold) = editor_with_held_plan(&fake).await;
    let approved: Option<String> = editor
        .lua_answered(
            "require('loopr').approve('20260101-000000-abcd', nil, function(id) result = id end)",
        )
        .await;
    assert_eq!(approved, None);
    let notes = notes(&editor).await;
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0]["msg"]
            .as_str()
            .is_some_and(|msg| msg.starts_with("Loopr: ") && msg.contains("20260101-000000-abcd")),
        "{notes:?}"
    );
    assert_eq!(notes[0]["level"], 4);
    editor.quit().await;
}

/// Sends a `plan` request the held host will not answer yet, answers it from the test exactly
/// as the host would (`deliver_reply`), then lets the host answer too. Returns what the
/// callback got, each time it was called.
async fn answered_by_the_test_first(outcome: Result<rmpv::Value, String>) -> Vec<Value> {
    let fake = FakeLlm::start().await;
    fake.push(stalled_turn("Thinking"));
    let (editor, hold) = editor_with_held_plan(&fake).await;
    let token: i64 = editor
        .lua(
            "_G.answers, _G.replies = {}, 0
             local host = require('loopr.host')
             local reply = host.reply
             host.reply = function(...) _G.replies = _G.replies + 1 return reply(...) end
             local config = require('loopr.config')
             local params = { task = 'Add a flag', root = config.root(), settings = config.settings() }
             return host.send('plan', params, function(result, err)
               table.insert(_G.answers, { result = result, err = err })
             end)",
        )
        .await;
    hold.arrived().await;
    deliver_reply(&editor.nvim, token, outcome)
        .await
        .expect("Lua takes the reply");
    hold.release().await;
    // The host's own answer for the token: taken and dropped, the callback ran already.
    let host_replied: bool = editor
        .lua("return vim.wait(30000, function() return _G.replies == 2 end, 5)")
        .await;
    assert!(host_replied, "the host answered too");
    let _: Option<bool> = editor.lua_answered("").await;
    let answers = editor.lua("return _G.answers").await;
    editor.quit().await;
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reply_call_as_the_host_makes_it_runs_the_callback_once() {
    let answers = answered_by_the_test_first(Ok(rmpv::Value::Map(vec![(
        rmpv::Value::from("loop_id"),
        rmpv::Value::from("20260101-000000-abcd"),
    )])))
    .await;
    assert_eq!(
        answers,
        vec![serde_json::json!({"result": {"loop_id": "20260101-000000-abcd"}})]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_reply_call_as_the_host_makes_it_gives_the_callback_the_error() {
    let answers = answered_by_the_test_first(Err("Loopr: refused by the test".to_owned())).await;
    assert_eq!(
        answers,
        vec![serde_json::json!({"err": "Loopr: refused by the test"})]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_recorded_before_the_host_died_unanswered_is_kept() {
    let fake = FakeLlm::start().await;
    let dirs = TestDirs::new();
    let hold = Hold::new(dirs.temp.path());
    let editor = TestNvim::start(
        dirs,
        StartOptions {
            base_url: fake.base_url(),
            setup: "{ plan_review_passes = 0 }".to_owned(),
            extra_env: hold.env("request_answered"),
        },
    )
    .await;
    start_plan_command(&editor, "Add a --version flag").await;
    hold.arrived().await;
    let pid: i32 = editor.lua("return require('loopr.host').pid()").await;
    // SAFETY: sending SIGKILL to the host process this test's Neovim started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "kill {pid}");
    let _: Option<bool> = editor.lua_answered("").await;
    let planned: Vec<Value> = editor.lua("return _G.planned").await;
    assert_eq!(planned, vec![Value::Bool(false)], "unanswered: an error");

    // What the host did before it died is on disk; the next host has it.
    let records = editor.status_records().await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["type"], "plan");
    editor.quit().await;
}
