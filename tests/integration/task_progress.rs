//! Task progress: the code loop ticks the tasks it finished (`mark_tasks_done`), the open
//! phase.md shows the ticks while the loop still runs, every task is ticked once the phase is
//! complete, and phase.md and `:LooprTasks` still show them after a restart.

use serde_json::{Value, json};

use loopr::agent::LoopEvent;
use loopr::bridge::deliver_event;
use loopr::store::LoopId;

use super::code::planned_editor;
use crate::fake_llm::FakeLlm;
use crate::nvim::TestNvim;
use crate::scenario::{
    AUTO_APPROVE, code_route, complete_phase_turn, requests_routed, run_code_loop, start_editor,
    start_editor_in, tool_results, tool_turn,
};

const PHASE: &str = "print-version";

/// The task lines of the current buffer (a phase.md): the checkbox and the task's number.
async fn task_boxes(editor: &TestNvim) -> Vec<String> {
    let lines: Vec<String> = editor
        .lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)")
        .await;
    lines
        .into_iter()
        .filter(|line| {
            line.starts_with("- [") && line[6..].starts_with(|c: char| c.is_ascii_digit())
        })
        .map(|line| line[..8].to_owned())
        .collect()
}

/// The texts of the quickfix entries `:LooprTasks {PHASE}` lists.
async fn listed_tasks(editor: &TestNvim) -> Vec<String> {
    assert_eq!(editor.command(&format!("LooprTasks {PHASE}")).await, None);
    editor
        .lua("return vim.tbl_map(function(item) return item.text end, vim.fn.getqflist())")
        .await
}

/// The phase.md of `PHASE`, as the status rows name it.
async fn phase_md(editor: &TestNvim) -> String {
    let records = editor.status_records().await;
    let phase = records
        .iter()
        .find(|record| record["type"] == "phase" && record["name"] == PHASE)
        .expect("the phase loop");
    phase["artifact_path"]
        .as_str()
        .expect("its phase.md")
        .to_owned()
}

async fn edit(editor: &TestNvim, path: &str) {
    editor.exec(&format!("vim.cmd.edit({path:?})")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticked_tasks_show_in_the_open_phase_md_while_the_code_loop_runs_and_after_a_restart() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, AUTO_APPROVE, "true").await;
    let path = phase_md(&editor).await;
    edit(&editor, &path).await;
    assert_eq!(task_boxes(&editor).await, ["- [ ] 1.", "- [ ] 2."]);

    let route = code_route(PHASE);
    fake.push_routed(
        &route,
        tool_turn("beyond", "mark_tasks_done", json!({"tasks": [3]})),
    );
    fake.push_routed(
        &route,
        tool_turn("first", "mark_tasks_done", json!({"tasks": [1]})),
    );
    let (complete, release) = complete_phase_turn("prints the version").held();
    fake.push_routed(&route, complete);
    let asked = fake.requests().len();
    let code_id = run_code_loop(&mut editor, PHASE).await;

    // The model's last turn is held: the loop is still running.
    fake.wait_for_requests(asked + 3).await;
    let requests = requests_routed(&fake, &route);
    let refused: Vec<Value> = tool_results(&requests[1]);
    assert_eq!(refused[0]["is_error"], true, "{refused:?}");
    assert_eq!(
        refused[0]["content"],
        "task 3 does not exist: phase.md numbers its tasks 1 to 2; call mark_tasks_done \
         again with those numbers"
    );
    assert_eq!(
        tool_results(&requests[2])[0]["content"],
        "Marked task 1 done in phase.md (1 of 2 done)."
    );
    let ticked = editor
        .wait_event("LooprTasksUpdated", |data| data["done"] == json!([1]))
        .await;
    assert_eq!(ticked["path"], path.as_str());
    assert_eq!(task_boxes(&editor).await, ["- [x] 1.", "- [ ] 2."]);
    let records = editor.status_records().await;
    let code = records
        .iter()
        .find(|record| record["id"] == code_id.as_str())
        .expect("the code loop");
    assert_eq!(code["status"], "running", "{code}");

    // Once the phase is complete, every task counts as done.
    release.notify_one();
    editor.wait_status(&code_id, "complete").await;
    editor
        .wait_event("LooprTasksUpdated", |data| data["done"] == json!([1, 2]))
        .await;
    assert_eq!(task_boxes(&editor).await, ["- [x] 1.", "- [x] 2."]);
    let all_done = [
        format!(
            "[{PHASE}] [x] modify: Match --version before other arguments and print the version"
        ),
        format!("[{PHASE}] [x] create: Add a test for {PHASE}"),
    ];
    assert_eq!(listed_tasks(&editor).await, all_done);

    // A restarted host reads the progress it stored.
    let dirs = editor.quit().await;
    let editor = start_editor_in(dirs, &fake, AUTO_APPROVE).await;
    edit(&editor, &path).await;
    assert_eq!(task_boxes(&editor).await, ["- [x] 1.", "- [x] 2."]);
    assert_eq!(listed_tasks(&editor).await, all_done);
    editor.quit().await;
}

/// A phase.md the user changed in its buffer keeps their change when the host ticks the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phase_md_buffer_with_changes_of_the_users_is_not_reloaded_when_tasks_are_ticked() {
    let fake = FakeLlm::start().await;
    let mut editor = start_editor(&fake, "{}").await;
    let path = editor.dirs.home.join("phase.md");
    std::fs::write(&path, "- [ ] 1. First\n").expect("phase.md");
    edit(&editor, &path.display().to_string()).await;
    editor
        .exec("vim.bo.modifiable = true vim.api.nvim_buf_set_lines(0, 0, -1, false, { 'my note' })")
        .await;
    std::fs::write(&path, "- [x] 1. First\n").expect("ticked");
    let ticked = LoopEvent::TasksUpdated {
        loop_id: LoopId::generate(),
        markdown_path: path.clone(),
        done: vec![1],
    };
    deliver_event(&editor.nvim, ticked)
        .await
        .expect("Lua takes the event");
    editor.wait_event("LooprTasksUpdated", |_| true).await;
    let lines: Vec<String> = editor
        .lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)")
        .await;
    assert_eq!(lines, ["my note"]);
    let messages: String = editor
        .lua("return vim.api.nvim_exec2('messages', { output = true }).output")
        .await;
    assert_eq!(messages, "", "no prompt about the changed file");
    assert_eq!(
        editor.mode().await,
        ("n".to_owned(), false),
        "nothing waits for a key"
    );
    editor.quit().await;
}
