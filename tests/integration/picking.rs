//! Picking the loop a command means (issue 24, items 10 and 11): a phase name planned twice
//! means the newest plan's phase unless the plan is named, and completion offers those names;
//! `:LooprCancel` without an id cancels the current artifact's tree, else the one plan tree
//! that runs, else asks which.

use serde_json::{Value, json};

use crate::fake_llm::FakeLlm;
use crate::nvim::TestNvim;
use crate::scenario::{
    AUTO_APPROVE, create_plan_turn, phase_loop_id, phase_route_by_position, plan_and_approve,
    plan_of_specs, plan_route, script_spec, spec_input, spec_route, stalled_turn, start_editor,
    tool_turn, valid_plan, wait_all_complete,
};

const FIRST_TASK: &str = "Add a --version flag";
const SECOND_TASK: &str = "Print the version in --help and in the README";

/// Scripts a plan of `specs` whose phases are routed by their position in their spec (a
/// phase name alone is not unique).
fn script_plan(fake: &FakeLlm, specs: &[(&str, [&str; 3])]) {
    fake.push_routed(
        plan_route(),
        tool_turn("plan", "create_plan", plan_of_specs(specs)),
    );
    for (spec, phases) in specs {
        script_spec(fake, spec, spec, phases, "true");
    }
}

/// Plans `task` (scripted by `script_plan`), approves the plan and waits until the project's `total` loops
/// are complete.
async fn plan_tree(editor: &mut TestNvim, task: &str, total: usize) -> String {
    // Not `editor.plan`: the running events of the older tree's loops are still unread.
    assert_eq!(editor.command(&format!("LooprPlan {task}")).await, None);
    let awaiting = editor
        .wait_event("LooprLoopUpdated", |data| {
            data["type"] == "plan" && data["status"] == "awaiting_approval"
        })
        .await;
    let plan_id = awaiting["id"].as_str().expect("plan id").to_owned();
    assert_eq!(
        editor.command(&format!("LooprApprove {plan_id}")).await,
        None
    );
    wait_all_complete(editor, total).await;
    plan_id
}

/// The loop ids of the current quickfix list's entries, each once.
async fn quickfix_loops(editor: &TestNvim) -> Vec<String> {
    let mut ids: Vec<String> = editor
        .lua(
            "local ids = {}
             for _, item in ipairs(vim.fn.getqflist()) do
               table.insert(ids, (item.user_data or {}).loop_id)
             end
             return ids",
        )
        .await;
    ids.dedup();
    ids
}

async fn messages(editor: &TestNvim) -> String {
    editor
        .lua("return vim.api.nvim_exec2('messages', { output = true }).output")
        .await
}

async fn completions(editor: &TestNvim, line: &str) -> Vec<String> {
    editor
        .lua(&format!("return vim.fn.getcompletion({line:?}, 'cmdline')"))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phase_planned_twice_means_the_newest_plans_unless_the_plan_is_named() {
    let fake = FakeLlm::start().await;
    let mut editor = start_editor(&fake, AUTO_APPROVE).await;
    script_plan(&fake, &[("cli", ["setup", "parse", "print-version"])]);
    let first = plan_tree(&mut editor, FIRST_TASK, 5).await;
    let newer = [
        ("cli", ["setup", "help-text", "exit-code"]),
        ("docs", ["setup", "readme", "changelog"]),
    ];
    script_plan(&fake, &newer);
    let second = plan_tree(&mut editor, SECOND_TASK, 5 + 9).await;
    let records = editor.status_records().await;
    let old_setup = phase_loop_id(&records, Some(&first), "cli", "setup");
    let new_setup = phase_loop_id(&records, Some(&second), "cli", "setup");

    // spec/phase means the newest plan's phase; naming the plan reaches the older one.
    assert_eq!(editor.command("LooprTasks cli/setup").await, None);
    assert_eq!(quickfix_loops(&editor).await, [new_setup.as_str()]);
    assert_eq!(
        editor
            .command("LooprTasks Add_a_--version_flag/setup")
            .await,
        None
    );
    assert_eq!(quickfix_loops(&editor).await, [old_setup.as_str()]);
    assert_eq!(
        editor
            .command("LooprTasks Print_the_version_in/cli/setup")
            .await,
        None
    );
    assert_eq!(quickfix_loops(&editor).await, [new_setup.as_str()]);
    // A name only the older plan has needs no plan.
    assert_eq!(editor.command("LooprTasks parse").await, None);
    assert_eq!(
        quickfix_loops(&editor).await,
        [phase_loop_id(&records, Some(&first), "cli", "parse")]
    );

    // The newest plan has two: the message lists them by path before any id, and says
    // the names that pick one.
    editor.exec("vim.cmd('messages clear')").await;
    let error = editor
        .command("LooprRun setup")
        .await
        .expect("an ambiguous name runs nothing");
    let shown = messages(&editor).await;
    assert!(shown.contains(&error), "{shown}");
    let paths = "\"setup\" names 2 phases: Print_the_version_in/cli/setup, \
                 Print_the_version_in/docs/setup; say which: cli/setup or docs/setup";
    assert!(error.starts_with(&format!("Loopr: {paths}")), "{error}");
    assert!(
        error.contains(&format!(
            "Print_the_version_in/cli/setup (loop {new_setup}, complete)"
        )),
        "{error}"
    );

    // <Tab> offers the names that work.
    assert_eq!(completions(&editor, "LooprRun cli/").await, ["cli/setup"]);
    assert_eq!(
        completions(&editor, "LooprTasks Add").await,
        ["Add_a_--version_flag/setup"]
    );
    assert_eq!(
        completions(&editor, "LooprChanges ").await,
        [
            "Add_a_--version_flag/setup",
            "changelog",
            "cli/setup",
            "docs/setup",
            "exit-code",
            "help-text",
            "parse",
            "print-version",
            "readme"
        ]
    );
    // Commands that take any loop take these names too.
    assert_eq!(
        editor
            .command("LooprTranscript Add_a_--version_flag/setup")
            .await,
        None
    );
    let opened: i64 = editor
        .lua(&format!(
            "return vim.fn.bufnr('loopr://transcript/{old_setup}')"
        ))
        .await;
    assert!(opened > 0, "the older plan's setup transcript is open");
    editor.quit().await;
}

/// Overrides vim.ui.select in the child Neovim: it records each question's prompt and items
/// (by their shown text) in `_G.asked` and picks the item shown as `pick`.
async fn answer_select_with(editor: &TestNvim, pick: &str) {
    editor
        .exec(&format!(
            "_G.asked = {{}}
             vim.ui.select = function(items, opts, on_choice)
               local shown = vim.tbl_map(opts.format_item or tostring, items)
               table.insert(_G.asked, {{ prompt = opts.prompt, items = shown }})
               for index, text in ipairs(shown) do
                 if text == {pick:?} then return on_choice(items[index], index) end
               end
               on_choice(nil, nil)
             end"
        ))
        .await;
}

async fn status_of(editor: &TestNvim, id: &str) -> String {
    editor
        .status_records()
        .await
        .iter()
        .find(|r| r["id"] == id)
        .and_then(|r| r["status"].as_str())
        .expect("the loop")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_without_an_id_takes_this_artifacts_tree_else_the_running_one_else_asks() {
    let fake = FakeLlm::start().await;
    fake.push_routed(FIRST_TASK, create_plan_turn("plan", valid_plan()));
    fake.push_routed(SECOND_TASK, stalled_turn("Reading the help text"));
    fake.push_routed("Document the flag", stalled_turn("Reading the README"));
    let mut editor = start_editor(&fake, "{}").await;
    let reviewed = editor.plan(FIRST_TASK).await;
    let record = editor.wait_status(&reviewed, "awaiting_approval").await;
    let second = editor.plan(SECOND_TASK).await;
    let third = editor.plan("Document the flag").await;
    fake.wait_for_requests(3).await;
    answer_select_with(
        &editor,
        "plan \"Print the version in --help and in the README\"",
    )
    .await;

    // In the plan.md of the plan awaiting review, that plan is cancelled, not the newest.
    let plan_md = editor
        .status_records()
        .await
        .iter()
        .find(|r| r["id"] == reviewed.as_str())
        .and_then(|r| r["artifact_path"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("plan.md: {record}"));
    editor
        .exec(&format!("vim.cmd.edit(vim.fn.fnameescape({plan_md:?}))"))
        .await;
    assert_eq!(editor.command("LooprCancel").await, None);
    editor.wait_status(&reviewed, "cancelled").await;
    assert_eq!(status_of(&editor, &second).await, "running");
    assert_eq!(status_of(&editor, &third).await, "running");

    // Elsewhere, with two plans running, the user is asked which.
    editor.exec("vim.cmd.enew()").await;
    assert_eq!(editor.command("LooprCancel").await, None);
    editor.wait_status(&second, "cancelled").await;
    assert_eq!(status_of(&editor, &third).await, "running");
    let asked: Value = editor.lua("return _G.asked").await;
    assert_eq!(
        asked,
        json!([{
            "prompt": "Loopr: cancel which running plan?",
            "items": ["plan \"Document the flag\"", "plan \"Print the version in --help and in the README\""],
        }])
    );

    // In the plan.md of a plan that no longer runs, the one plan that does is not cancelled
    // behind the user's back: the user is asked (and here picks none).
    let _: Option<bool> = editor
        .lua_answered(&format!(
            "vim.cmd.edit(vim.fn.fnameescape({plan_md:?}))
             vim.cmd('LooprCancel')"
        ))
        .await;
    let asked: Value = editor.lua("return _G.asked[2]").await;
    assert_eq!(
        asked,
        json!({
            "prompt": "Loopr: cancel which running plan?",
            "items": ["plan \"Document the flag\""],
        })
    );
    assert_eq!(status_of(&editor, &third).await, "running");

    // Elsewhere, with one plan running, it is cancelled without a question.
    editor.exec("vim.cmd.enew()").await;
    assert_eq!(editor.command("LooprCancel").await, None);
    editor.wait_status(&third, "cancelled").await;
    let asked: Value = editor.lua("return #_G.asked").await;
    assert_eq!(
        asked, 2,
        "asked only in the plan.md of a plan that does not run"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_without_an_id_stops_every_running_phase_of_the_one_running_plan() {
    let fake = FakeLlm::start().await;
    let mut editor = start_editor(&fake, "{}").await;
    let phases = ["setup", "parse", "print-version"];
    fake.push_routed(
        plan_route(),
        tool_turn("plan", "create_plan", plan_of_specs(&[("cli", phases)])),
    );
    fake.push_routed(
        &spec_route("cli"),
        tool_turn("cli", "create_spec", spec_input("cli", &phases)),
    );
    for index in 1..=3 {
        fake.push_routed(
            &phase_route_by_position("cli", index),
            stalled_turn("Working out the phase"),
        );
    }
    let plan_id = plan_and_approve(&mut editor).await;
    // The plan, its spec, then its three phases at once (specs are not reviewed here).
    fake.wait_for_requests(5).await;
    editor.exec("vim.cmd.enew()").await;

    assert_eq!(editor.command("LooprCancel").await, None);
    for record in editor.status_records().await {
        if record["type"] == "phase" {
            let id = record["id"].as_str().expect("id").to_owned();
            editor.wait_status(&id, "cancelled").await;
        }
    }
    let records = editor.status_records().await;
    let running: Vec<&Value> = records.iter().filter(|r| r["active"] == true).collect();
    assert!(running.is_empty(), "{running:#?}");
    assert!(
        messages(&editor)
            .await
            .contains("Loopr: cancelling plan \"Add a --version flag\""),
        "the plan {plan_id} is cancelled as a whole"
    );
    editor.quit().await;
}
