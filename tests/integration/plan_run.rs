//! Running a plan or a spec (issue 26, item 1): every current phase from one `:LooprRun`, in
//! dependency order, one code loop at a time; the `"code"` gate; a failing phase stopping
//! the run and `:LooprRetry` going on; a run surviving its host.

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply, TurnBuilder, first_user_text};
use crate::nvim::TestNvim;
use crate::scenario::{
    code_route, plan_and_approve, plan_of_specs, plan_route, script_spec, start_editor,
    start_editor_in, tool_turn, wait_all_complete,
};

/// Code loops write, edit and run commands without asking; verification is not scripted.
const SETUP: &str =
    "{ approvals = { write = 'auto', edit = 'auto', command = 'auto' }, verify = false }";
/// The plan's name, as `:LooprRun` takes it (the first words of its task).
const PLAN_NAME: &str = "Add_a_--version_flag";
/// Spec `b`, listed first, depends on spec `a`.
const SPECS: [(&str, [&str; 3]); 2] = [("b", ["b-1", "b-2", "b-3"]), ("a", ["a-1", "a-2", "a-3"])];
const IN_ORDER: [&str; 6] = ["a-1", "a-2", "a-3", "b-1", "b-2", "b-3"];

/// Scripts the plan of `SPECS` (b depending on a) and their specs and phases, each phase
/// validated by `validation`.
fn script_tree(fake: &FakeLlm, validation: &str) {
    let mut plan = plan_of_specs(&SPECS);
    plan["specs"][0]["dependencies"] = json!(["a"]);
    fake.push_routed(plan_route(), tool_turn("plan", "create_plan", plan));
    for (spec, phases) in SPECS {
        script_spec(fake, spec, spec, &phases, validation);
    }
}

/// A code loop's turn that writes `path` and says the phase is done.
fn write_and_complete(phase: &str, path: &str, content: &str) -> Reply {
    TurnBuilder::new()
        .tool_use(
            &format!("{phase}-w"),
            "write_file",
            json!({"path": path, "content": content}),
        )
        .tool_use(
            &format!("{phase}-done"),
            "complete_phase",
            json!({"summary": format!("{phase} done")}),
        )
        .reply()
}

/// Scripts each phase of `phases` to write its own file and complete.
fn script_code(fake: &FakeLlm, phases: &[&str]) {
    for phase in phases {
        fake.push_routed(
            &code_route(phase),
            write_and_complete(phase, &format!("src/{phase}.rs"), "// done\n"),
        );
    }
}

/// The phases whose code loops asked the fake, in the order of their first request.
fn code_order(fake: &FakeLlm) -> Vec<String> {
    let mut order: Vec<String> = Vec::new();
    for request in fake.requests() {
        let text = first_user_text(&request.body);
        if let Some(phase) = IN_ORDER
            .iter()
            .find(|phase| text.contains(&code_route(phase)))
            && !order.iter().any(|known| known == phase)
        {
            order.push((*phase).to_owned());
        }
    }
    order
}

async fn messages(editor: &TestNvim) -> String {
    editor.lua("return vim.fn.execute('messages')").await
}

fn plan_row(records: &[Value]) -> Value {
    records
        .iter()
        .find(|r| r["type"] == "plan")
        .cloned()
        .expect("plan row")
}

/// The run words on spec `name`'s row.
fn spec_run(records: &[Value], name: &str) -> String {
    records
        .iter()
        .find(|r| r["type"] == "spec" && r["name"] == name)
        .and_then(|r| r["run"].as_str())
        .unwrap_or_else(|| panic!("spec {name} with a run: {records:#?}"))
        .to_owned()
}

fn code_of<'a>(records: &'a [Value], phase: &str) -> Vec<&'a Value> {
    records
        .iter()
        .filter(|r| r["type"] == "code" && r["name"] == phase)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_run_implements_every_phase_of_a_plan_in_dependency_order() {
    let fake = FakeLlm::start().await;
    script_tree(&fake, "true");
    script_code(&fake, &IN_ORDER);
    let mut editor = start_editor(&fake, SETUP).await;
    plan_and_approve(&mut editor).await;
    // At once: the specs and phases are still being written, and the run waits for them.
    assert_eq!(editor.command(&format!("LooprRun {PLAN_NAME}")).await, None);
    let records = wait_run_done(&mut editor, 1 + 2 + 6 + 6, "6 of 6 phases done").await;
    assert_eq!(
        code_order(&fake),
        IN_ORDER,
        "a's phases first, each in order"
    );
    for phase in IN_ORDER {
        assert_eq!(code_of(&records, phase).len(), 1, "{phase} ran once");
        assert!(editor.dirs.project.join(format!("src/{phase}.rs")).exists());
    }
    let plan = plan_row(&records);
    assert_eq!(plan["run"], "run done: 6 of 6 phases done", "{plan:#}");
    let messages = messages(&editor).await;
    assert!(
        messages.contains("Loopr: implementing Add_a_--version_flag"),
        "{messages}"
    );
    assert!(
        messages.contains(
            "Loopr: the run of plan \"Add a --version flag\" is done: 6 of 6 phases done"
        ),
        "{messages}"
    );
    editor.quit().await;
}

/// Waits until `count` loops are complete and the run has said it is done (`done`), then the
/// records: the run moves on after its last loop ends, so its row can lag that loop's.
async fn wait_run_done(editor: &mut TestNvim, count: usize, done: &str) -> Vec<Value> {
    wait_all_complete(editor, count).await;
    editor.wait_notice(&format!("is done: {done}")).await;
    editor.status_records().await
}

/// Plans and approves the tree (validated by `validation`) and waits until it is written.
async fn written_tree(fake: &FakeLlm, setup: &str, validation: &str) -> TestNvim {
    script_tree(fake, validation);
    let mut editor = start_editor(fake, setup).await;
    plan_and_approve(&mut editor).await;
    wait_all_complete(&mut editor, 1 + 2 + 6).await;
    editor
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_gate_holds_the_run_after_each_phase_until_its_changes_are_approved() {
    let fake = FakeLlm::start().await;
    let setup = "{ approvals = { write = 'auto', edit = 'auto', command = 'auto' }, verify = false, review_gates = { 'plan', 'code' } }";
    let mut editor = written_tree(&fake, setup, "true").await;
    script_code(&fake, &["a-1", "a-2", "a-3"]);
    // A spec runs its own phases only.
    assert_eq!(editor.command("LooprRun a").await, None);
    let held = editor
        .wait_event("LooprLoopUpdated", |data| {
            data["type"] == "code" && data["status"] == "awaiting_approval"
        })
        .await;
    let code_id = held["id"].as_str().expect("id").to_owned();
    let quickfix: Value = editor
        .lua("local list = vim.fn.getqflist({ title = 1, items = 1 }) return { title = list.title, count = #list.items, open = vim.fn.getqflist({ winid = 0 }).winid ~= 0 }")
        .await;
    assert_eq!(
        quickfix,
        json!({"title": "Loopr: a-1 changes", "count": 1, "open": true}),
        "the changes list opens, named by its phase"
    );
    assert_eq!(code_order(&fake), ["a-1"], "a-2 waits for the approval");
    assert_eq!(
        spec_run(&editor.status_records().await, "a"),
        "run: phase 1 of 3 (a-1): its changes await approval"
    );
    // Named by its phase.
    assert_eq!(editor.command("LooprApprove a-1").await, None);
    editor.wait_status(&code_id, "complete").await;
    let next = editor
        .wait_event("LooprLoopUpdated", |data| {
            data["type"] == "code"
                && data["status"] == "awaiting_approval"
                && data["id"] != code_id.as_str()
        })
        .await;
    assert_eq!(code_order(&fake), ["a-1", "a-2"]);
    // Without an argument: the code loop waiting.
    assert_eq!(editor.command("LooprApprove").await, None);
    editor
        .wait_status(next["id"].as_str().expect("id"), "complete")
        .await;
    let last = editor
        .wait_event("LooprLoopUpdated", |data| {
            data["type"] == "code" && data["status"] == "awaiting_approval"
        })
        .await;
    // The same status said again (as a resume does) is no news: the list the user closed
    // stays closed.
    let reopened: bool = editor
        .lua(&format!(
            "vim.cmd('cclose') \
             require('loopr.events').dispatch({{ event = 'loop_updated', id = {:?}, type = 'code', status = 'awaiting_approval', root = {:?} }}) \
             local handled = false vim.schedule(function() handled = true end) \
             vim.wait(10000, function() return handled end) \
             return vim.fn.getqflist({{ winid = 0 }}).winid ~= 0",
            last["id"].as_str().expect("id"),
            editor.dirs.project.display().to_string()
        ))
        .await;
    assert!(
        !reopened,
        "a re-emitted status does not reopen the changes list"
    );
    assert_eq!(editor.command("LooprApprove").await, None);
    let records = wait_run_done(&mut editor, 9 + 3, "3 of 3 phases done").await;
    assert_eq!(code_order(&fake), ["a-1", "a-2", "a-3"]);
    assert_eq!(spec_run(&records, "a"), "run done: 3 of 3 phases done");
    editor.quit().await;
}

/// Runs spec `a` of the written tree with a-2's code loop failing its validation (one
/// iteration allowed).
async fn run_spec_a_failing_at_a_2(fake: &FakeLlm) -> TestNvim {
    let setup = "{ approvals = { write = 'auto', edit = 'auto', command = 'auto' }, verify = false, code_max_iterations = 1 }";
    let editor = written_tree(
        fake,
        setup,
        "test \"$(cat state.txt 2>/dev/null)\" != broken",
    )
    .await;
    script_code(fake, &["a-1"]);
    fake.push_routed(
        &code_route("a-2"),
        write_and_complete("a-2", "state.txt", "broken"),
    );
    assert_eq!(editor.command("LooprRun a").await, None);
    editor
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_phase_stops_the_run_and_a_retry_goes_on_from_it() {
    let fake = FakeLlm::start().await;
    let mut editor = run_spec_a_failing_at_a_2(&fake).await;
    let failed = editor
        .wait_event("LooprLoopUpdated", |data| {
            data["type"] == "code" && data["status"] == "failed"
        })
        .await;
    let failed_id = failed["id"].as_str().expect("id").to_owned();
    let stopped: bool = editor
        .lua("return vim.wait(30000, function() return vim.fn.execute('messages'):find('the run of spec \"a\" stopped at phase 2 of 3 (a-2): its code loop failed', 1, true) ~= nil end, 5)")
        .await;
    assert!(stopped, "the user is told: {}", messages(&editor).await);
    let run = spec_run(&editor.status_records().await, "a");
    assert!(
        run.starts_with("run stopped at phase 2 of 3 (a-2): its code loop failed"),
        "{run}"
    );
    assert_eq!(code_order(&fake), ["a-1", "a-2"], "a-3 did not start");

    // The retry goes on from a-2, then the run takes a-3.
    fake.push_routed(
        &code_route("a-2"),
        write_and_complete("a-2", "state.txt", "fixed"),
    );
    script_code(&fake, &["a-3"]);
    assert_eq!(editor.command("LooprRetry").await, None);
    editor.wait_status(&failed_id, "complete").await;
    let records = wait_run_done(&mut editor, 9 + 3, "3 of 3 phases done").await;
    assert_eq!(code_order(&fake), ["a-1", "a-2", "a-3"]);
    assert_eq!(
        code_of(&records, "a-2").len(),
        1,
        "the retried loop went on"
    );
    assert_eq!(spec_run(&records, "a"), "run done: 3 of 3 phases done");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_run_names_its_way_on_and_a_cancel_ends_it_for_good() {
    let fake = FakeLlm::start().await;
    let editor = run_spec_a_failing_at_a_2(&fake).await;
    let stopped: bool = editor
        .lua("return vim.wait(30000, function() return vim.fn.execute('messages'):find('the run of spec \"a\" stopped at phase 2 of 3', 1, true) ~= nil end, 5)")
        .await;
    let told = messages(&editor).await;
    assert!(stopped, "the user is told: {told}");
    // Named as the user types them, not by id.
    assert!(
        told.contains(
            ":LooprRetry a-2/code retries it and the run goes on, :LooprCancel a ends the run"
        ),
        "{told}"
    );

    // Nothing in the tree is active, yet the run is there to end.
    assert_eq!(editor.command("LooprCancel a").await, None);
    let run = spec_run(&editor.status_records().await, "a");
    assert!(run.starts_with("run cancelled"), "{run}");
    assert!(
        messages(&editor)
            .await
            .contains("the run of spec \"a\" was cancelled"),
        "{}",
        messages(&editor).await
    );

    // The phase run by hand is the user's: the ended run does not start a-3 after it.
    fake.push_routed(
        &code_route("a-2"),
        write_and_complete("a-2", "state.txt", "fixed"),
    );
    assert_eq!(editor.command("LooprRun a-2").await, None);
    let passed: bool = editor
        .lua("return vim.wait(30000, function() return vim.fn.execute('messages'):find('a-2 validation passed', 1, true) ~= nil end, 5)")
        .await;
    assert!(passed, "{}", messages(&editor).await);
    // A resume moves every live run on at once: after it, a-3 would have started.
    let _: Value = editor
        .lua(&format!(
            "return require('loopr.host').request('resume', {{ root = {:?} }})",
            editor.dirs.project.display().to_string()
        ))
        .await;
    let records = editor.status_records().await;
    assert!(code_of(&records, "a-3").is_empty(), "{records:#?}");
    assert!(spec_run(&records, "a").starts_with("run cancelled"));
    assert_eq!(code_order(&fake), ["a-1", "a-2"]);
    editor.quit().await;
}

/// Runs a-1 and, once its code loop is `first_status`, b-1: the event of b-1's code loop
/// pending, and its row in the status.
async fn b_1_behind_a_1(editor: &mut TestNvim, first_status: &str) -> (Value, Value) {
    assert_eq!(editor.command("LooprRun a-1").await, None);
    let first = editor
        .wait_event("LooprLoopUpdated", |data| {
            data["type"] == "code" && data["status"] == first_status
        })
        .await;
    assert_eq!(editor.command("LooprRun b-1").await, None);
    let second = editor
        .wait_event("LooprLoopUpdated", |data| {
            data["type"] == "code" && data["status"] == "pending" && data["id"] != first["id"]
        })
        .await;
    let row = editor
        .status_records()
        .await
        .into_iter()
        .find(|r| r["id"] == second["id"])
        .expect("second code loop");
    (second, row)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_loop_started_by_hand_waits_its_turn_and_says_so() {
    let fake = FakeLlm::start().await;
    let mut editor = written_tree(&fake, SETUP, "true").await;
    let (held, release) = write_and_complete("a-1", "src/a-1.rs", "// done\n").held();
    fake.push_routed(&code_route("a-1"), held);
    script_code(&fake, &["b-1"]);
    let (second, row) = b_1_behind_a_1(&mut editor, "running").await;
    assert_eq!(row["status"], "pending");
    assert_eq!(
        row["waits_for"],
        "waits its turn: code \"a-1\" is running, and one code loop runs at a time"
    );
    editor.exec("vim.o.columns = 250").await;
    assert_eq!(editor.command("LooprStatus").await, None);
    let shown: String = editor
        .lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
        .await;
    assert!(shown.contains("waits its turn"), "{shown}");
    release.notify_one();
    editor
        .wait_status(second["id"].as_str().expect("id"), "complete")
        .await;
    assert_eq!(code_order(&fake), ["a-1", "b-1"]);
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_host_was_killed_goes_on_after_the_restart() {
    let fake = FakeLlm::start().await;
    let editor = written_tree(&fake, SETUP, "true").await;
    script_code(&fake, &["a-1"]);
    let (held, _release) = write_and_complete("a-2", "src/a-2.rs", "// done\n").held();
    fake.push_routed(&code_route("a-2"), held);
    assert_eq!(editor.command("LooprRun a").await, None);
    // a-1 done, a-2's code loop asked the model, which holds its answer.
    let requests = loop {
        let requests = code_order(&fake);
        if requests.len() == 2 {
            break requests;
        }
        fake.wait_for_requests(fake.requests().len() + 1).await;
    };
    assert_eq!(requests, ["a-1", "a-2"]);
    let pid: i32 = editor.lua("return require('loopr.host').pid()").await;
    // SAFETY: sending SIGKILL to the host process this test's Neovim started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "kill {pid}");
    crate::nvim::wait_for_exit(pid).await;
    let dirs = editor.quit().await;

    script_code(&fake, &["a-2", "a-3"]);
    let mut editor = start_editor_in(dirs, &fake, SETUP).await;
    // Opening the project resumes its loops, and the run with them.
    assert_eq!(editor.command("LooprStatus").await, None);
    let records = wait_run_done(&mut editor, 9 + 3, "3 of 3 phases done").await;
    assert_eq!(code_order(&fake), ["a-1", "a-2", "a-3"]);
    for phase in ["a-1", "a-2", "a-3"] {
        assert_eq!(code_of(&records, phase).len(), 1, "{phase}: one code loop");
    }
    assert_eq!(spec_run(&records, "a"), "run done: 3 of 3 phases done");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_loop_whose_changes_await_approval_keeps_the_working_tree_until_approved() {
    let fake = FakeLlm::start().await;
    let setup = "{ approvals = { write = 'auto', edit = 'auto', command = 'auto' }, verify = false, review_gates = { 'plan', 'code' } }";
    let mut editor = written_tree(&fake, setup, "true").await;
    script_code(&fake, &["a-1", "b-1"]);
    let (second, row) = b_1_behind_a_1(&mut editor, "awaiting_approval").await;
    assert_eq!(
        row["status"], "pending",
        "b-1 must not edit over a-1's unreviewed changes"
    );
    assert_eq!(
        row["waits_for"],
        "waits its turn: the changes of code \"a-1\" await approval, and one code loop works \
         in the tree at a time"
    );
    assert_eq!(code_order(&fake), ["a-1"]);
    assert_eq!(editor.command("LooprApprove a-1").await, None);
    editor
        .wait_event("LooprLoopUpdated", |data| {
            data["id"] == second["id"] && data["status"] == "awaiting_approval"
        })
        .await;
    assert_eq!(code_order(&fake), ["a-1", "b-1"]);
    editor.quit().await;
}
