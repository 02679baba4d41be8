use std::path::PathBuf;

use serde_json::{Value, json};

use super::phases::quickfix;
use crate::fake_llm::{FakeLlm, first_user_text};
use crate::nvim::TestNvim;
use crate::scenario::{
    AUTO_APPROVE, ONE_SPEC_PHASES, REVISED_PHASES, plan_and_approve, plan_route,
    push_one_spec_hierarchy, push_specs_and_phases, restart_mid_turn, revise_current,
    script_revised_spec, spec_input, spec_route, start_editor, tool_turn, valid_plan,
    wait_all_complete, wait_settled,
};

const NO_REVIEWS: &str = "{ plan_review_passes = 0, spec_review = false }";
const SPECS: [(&str, [&str; 3]); 2] = [
    ("version-flag", ["parse-flag", "print-version", "exit-code"]),
    ("version-docs", ["readme", "changelog", "help-text"]),
];

fn two_spec_plan() -> Value {
    let mut plan = valid_plan();
    plan["specs"][0]["name"] = json!(SPECS[0].0);
    plan["specs"][1]["name"] = json!(SPECS[1].0);
    plan["specs"][1]["dependencies"] = json!([SPECS[0].0]);
    plan
}

fn script_hierarchy(fake: &FakeLlm, plan: Value, specs: &[(&str, [&str; 3])]) {
    fake.push_routed(plan_route(), tool_turn("plan", "create_plan", plan));
    push_specs_and_phases(fake, specs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approving_a_plan_runs_specs_in_dependency_order_and_tasks_fill_the_quickfix() {
    let fake = FakeLlm::start().await;
    script_hierarchy(&fake, two_spec_plan(), &SPECS);
    let mut editor = start_editor(&fake, NO_REVIEWS).await;
    editor
        .exec("vim.fn.setqflist({}, ' ', { title = 'my own list', items = { { filename = 'README.md', lnum = 1, text = 'mine' } } })")
        .await;

    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "awaiting_approval").await;
    assert_eq!(fake.requests().len(), 1, "nothing runs before the approval");
    assert_eq!(editor.command("LooprApprove").await, None);
    let records = wait_all_complete(&mut editor, 1 + 2 + 6).await;

    // The dependent spec started only after the spec it depends on completed.
    let requests = fake.requests();
    let positions = |route: &str| -> Vec<usize> {
        requests
            .iter()
            .enumerate()
            .filter(|(_, request)| first_user_text(&request.body).contains(route))
            .map(|(index, _)| index)
            .collect()
    };
    let flag = positions(&spec_route("version-flag"));
    let docs = positions(&spec_route("version-docs"));
    assert!(
        docs[0] > *flag.last().expect("flag ran"),
        "{flag:?} then {docs:?}"
    );

    // Every phase.md exists and renders its structured data.
    let phases: Vec<&Value> = records.iter().filter(|r| r["type"] == "phase").collect();
    for phase in &phases {
        let path = PathBuf::from(phase["artifact_path"].as_str().expect("artifact path"));
        let markdown = std::fs::read_to_string(&path).expect("phase.md");
        let name = phase["name"].as_str().expect("name");
        assert!(
            markdown.contains(&format!("**Name:** `{name}`")),
            "{markdown}"
        );
        assert!(
            markdown.contains(&format!("(`tests/{name}.rs`, create)")),
            "{markdown}"
        );
        assert_eq!(phase["triggered_by"], "iterations/001/artifacts/spec.json");
    }

    // :LooprTasks lists every task file of every phase with its user_data.
    assert_eq!(editor.command("LooprTasks").await, None);
    let list: Value = editor
        .lua(
            "local list = vim.fn.getqflist({ title = 1, items = 1, nr = 0 })
             local items = {}
             for _, item in ipairs(list.items) do
               table.insert(items, { file = vim.api.nvim_buf_get_name(item.bufnr), lnum = item.lnum,
                                     text = item.text, user_data = item.user_data })
             end
             return { title = list.title, items = items, nr = list.nr }",
        )
        .await;
    assert_eq!(list["title"], "Loopr: tasks (all phases)");
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 6 * 2, "{list:#}");
    let project = editor.dirs.project.display().to_string();
    for phase in &phases {
        let name = phase["name"].as_str().expect("name");
        let id = phase["id"].as_str().expect("id");
        let of_phase: Vec<&Value> = items
            .iter()
            .filter(|item| item["user_data"]["phase"] == name)
            .collect();
        assert_eq!(of_phase.len(), 2, "{name}");
        assert_eq!(of_phase[0]["file"], format!("{project}/src/main.rs"));
        assert_eq!(
            of_phase[0]["user_data"],
            json!({"loop_id": id, "phase": name, "task_index": 1, "action": "modify"})
        );
        assert_eq!(
            of_phase[1]["file"],
            format!("{project}/tests/{name}.rs"),
            "files to create appear too"
        );
        assert_eq!(of_phase[1]["user_data"]["action"], "create");
        assert_eq!(of_phase[1]["user_data"]["task_index"], 2);
    }

    // The user's own list is one :colder away; a single phase gets its own list, refreshed in place.
    assert_eq!(editor.command("colder").await, None);
    let title: String = editor
        .lua("return vim.fn.getqflist({ title = 1 }).title")
        .await;
    assert_eq!(title, "my own list");
    assert_eq!(editor.command("cnewer").await, None);
    assert_eq!(editor.command("LooprTasks parse-flag").await, None);
    let single: Value = editor
        .lua("local l = vim.fn.getqflist({ title = 1, size = 1, nr = '$' }) return { title = l.title, size = l.size, nr = l.nr }")
        .await;
    assert_eq!(single["title"], "Loopr: tasks parse-flag");
    assert_eq!(single["size"], 2);
    assert_eq!(editor.command("LooprTasks parse-flag").await, None);
    let after: i64 = editor.lua("return vim.fn.getqflist({ nr = '$' }).nr").await;
    assert_eq!(
        json!(after),
        single["nr"],
        "refreshing replaces the list in place"
    );

    // Opening the entry of a `create` task opens the new file.
    assert_eq!(editor.command("cc 2").await, None);
    let opened: String = editor.lua("return vim.api.nvim_buf_get_name(0)").await;
    assert_eq!(opened, format!("{project}/tests/parse-flag.rs"));
    assert!(!editor.dirs.project.join("tests/parse-flag.rs").exists());
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revising_a_spec_makes_iteration_two_current_and_invalidates_its_phases() {
    let fake = FakeLlm::start().await;
    script_revised_spec(&fake);
    let mut editor = start_editor(&fake, NO_REVIEWS).await;
    plan_and_approve(&mut editor).await;
    let records = wait_all_complete(&mut editor, 1 + 1 + 3).await;
    let spec = records
        .iter()
        .find(|r| r["type"] == "spec")
        .expect("spec")
        .clone();
    let spec_id = spec["id"].as_str().expect("id").to_owned();
    let old_phase_paths: Vec<String> = records
        .iter()
        .filter(|r| r["type"] == "phase")
        .map(|r| r["artifact_path"].as_str().expect("path").to_owned())
        .collect();

    let spec_md = spec["artifact_path"].as_str().expect("spec.md").to_owned();
    editor.exec(&format!("vim.cmd.edit({spec_md:?})")).await;
    revise_current(&editor, "Split parsing from printing").await;
    editor
        .wait_event("LooprLoopUpdated", |data| {
            data["id"] == spec_id.as_str() && data["status"] == "complete"
        })
        .await;
    let records = wait_settled(&mut editor, 1 + 1 + 3 + 3).await;

    // Iteration 002 is current, asked for with the feedback; the old phases are invalidated
    // but their artifacts stay; new phases come from iteration 002.
    let loop_dir = PathBuf::from(&spec_md)
        .ancestors()
        .nth(4)
        .expect("loop dir")
        .to_path_buf();
    assert_eq!(
        std::fs::read_link(loop_dir.join("current")).expect("current"),
        PathBuf::from("iterations/002")
    );
    let revision_request = fake
        .requests()
        .into_iter()
        .filter(|request| first_user_text(&request.body).contains(&spec_route("version-flag")))
        .nth(1)
        .expect("revision request");
    assert!(first_user_text(&revision_request.body).contains("Split parsing from printing"));
    let phases: Vec<&Value> = records.iter().filter(|r| r["type"] == "phase").collect();
    let invalidated: Vec<&&Value> = phases
        .iter()
        .filter(|r| r["status"] == "invalidated")
        .collect();
    assert_eq!(invalidated.len(), 3);
    for phase in phases.iter().filter(|r| r["status"] == "complete") {
        assert_eq!(phase["triggered_by"], "iterations/002/artifacts/spec.json");
        assert!(REVISED_PHASES.contains(&phase["name"].as_str().expect("name")));
    }
    for path in &old_phase_paths {
        assert!(
            PathBuf::from(path).exists(),
            "invalidated artifacts are kept"
        );
    }
    // An invalidated loop cannot be revised: its parent has moved on.
    editor
        .exec(&format!("vim.cmd.edit({:?})", old_phase_paths[0]))
        .await;
    let refused = editor
        .command("LooprRevise Make it smaller")
        .await
        .expect("refused");
    assert!(refused.contains("invalidated"), "{refused}");
    let spec_now = records.iter().find(|r| r["type"] == "spec").expect("spec");
    assert_eq!(spec_now["iteration"], 2);
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cut_off_by_quitting_neovim_resumes_when_neovim_starts_again() {
    let fake = FakeLlm::start().await;
    fake.push(crate::scenario::list_files_turn());
    fake.push(crate::scenario::stalled_turn("Working"));
    let mut editor = start_editor(&fake, NO_REVIEWS).await;
    let loop_id = editor.plan("Add a --version flag").await;
    fake.wait_for_requests(2).await;
    let resumed = crate::scenario::create_plan_turn("toolu_plan", valid_plan());
    let editor = restart_mid_turn(&fake, editor, &loop_id, NO_REVIEWS, resumed).await;
    assert_eq!(editor.status_records().await.len(), 1);
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_tree_shows_review_passes_and_approves_and_opens_from_its_keys() {
    let fake = FakeLlm::start().await;
    let mut plan = two_spec_plan();
    plan["specs"].as_array_mut().expect("specs").truncate(1);
    fake.push_routed(plan_route(), tool_turn("plan", "create_plan", plan));
    fake.push_routed(
        plan_route(),
        tool_turn(
            "review",
            "review_plan",
            json!({"verdict": "approve", "issues": []}),
        ),
    );
    push_specs_and_phases(&fake, &SPECS[..1]);
    let mut editor = start_editor(&fake, "{ plan_review_passes = 1 }").await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "awaiting_approval").await;

    assert_eq!(editor.command("LooprStatus").await, None);
    let before = buffer_lines(&editor).await;
    let plan_row = before
        .iter()
        .position(|line| line.contains(&plan_id))
        .expect("plan row");
    let columns: Vec<&str> = before[plan_row].split_whitespace().collect();
    assert!(columns.contains(&"awaiting_approval"), "{before:#?}");
    let reviews_column = before[0].find("REVIEWS").expect("REVIEWS header");
    assert_eq!(
        before[plan_row][reviews_column..].split_whitespace().next(),
        Some("1"),
        "{before:#?}"
    );

    // `a` on the plan's line approves it; the tree grows specs and phases under it.
    editor
        .exec(&format!(
            "vim.api.nvim_win_set_cursor(0, {{ {}, 0 }})",
            plan_row + 1
        ))
        .await;
    editor.exec("vim.api.nvim_feedkeys('a', 'x', false)").await;
    wait_all_complete(&mut editor, 1 + 1 + 3).await;
    let after = buffer_lines(&editor).await;
    let indent = |name: &str| {
        let line = after
            .iter()
            .find(|line| line.contains(name))
            .unwrap_or_else(|| panic!("{after:#?}"));
        line.len() - line.trim_start().len()
    };
    assert!(indent("version-flag") > indent(&plan_id), "{after:#?}");
    assert!(indent("parse-flag") > indent("version-flag"), "{after:#?}");

    // <CR> on a phase's line opens its phase.md.
    let phase_row = after
        .iter()
        .position(|line| line.contains("parse-flag"))
        .expect("phase row");
    editor
        .exec(&format!(
            "vim.api.nvim_win_set_cursor(0, {{ {}, 0 }})",
            phase_row + 1
        ))
        .await;
    editor
        .exec("vim.api.nvim_feedkeys(vim.keycode('<CR>'), 'x', false)")
        .await;
    let opened: String = editor.lua("return vim.api.nvim_buf_get_name(0)").await;
    assert!(
        opened.ends_with("/iterations/001/artifacts/phase.md"),
        "{opened}"
    );
    editor.quit().await;
}

async fn buffer_lines(editor: &TestNvim) -> Vec<String> {
    editor
        .lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)")
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_finished_plan_stops_the_specs_it_spawned() {
    let fake = FakeLlm::start().await;
    fake.push_routed(
        plan_route(),
        tool_turn("plan", "create_plan", two_spec_plan()),
    );
    // The first spec's model answer never comes: it is running when the cancel arrives.
    let (held, _never_released) =
        tool_turn("spec", "create_spec", spec_input(SPECS[0].0, &SPECS[0].1)).held();
    fake.push_routed(&spec_route(SPECS[0].0), held);
    let mut editor = start_editor(&fake, NO_REVIEWS).await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "awaiting_approval").await;
    assert_eq!(editor.command("LooprApprove").await, None);
    editor.wait_status(&plan_id, "complete").await;
    fake.wait_for_requests(2).await;

    assert_eq!(
        editor.command(&format!("LooprCancel {plan_id}")).await,
        None
    );
    let records = loop {
        let records = editor.status_records().await;
        if records
            .iter()
            .filter(|r| r["type"] == "spec")
            .all(|r| r["status"] == "cancelled")
        {
            break records;
        }
        editor
            .wait_event("LooprLoopUpdated", |data| data["status"] == "cancelled")
            .await;
    };
    assert_eq!(records.len(), 3);
    let plan = records.iter().find(|r| r["type"] == "plan").expect("plan");
    assert_eq!(
        plan["status"], "complete",
        "the finished plan keeps its status"
    );
    assert_eq!(fake.requests().len(), 2, "the dependent spec never started");
    let error = editor
        .command(&format!("LooprCancel {plan_id}"))
        .await
        .expect("nothing left");
    assert!(error.contains("nothing to cancel"), "{error}");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_without_a_phase_list_the_current_plans_tasks_each_naming_its_phase() {
    let fake = FakeLlm::start().await;
    // The same change planned twice: every phase name is in both plans.
    push_one_spec_hierarchy(&fake, |_| None, tool_turn);
    push_one_spec_hierarchy(&fake, |_| None, tool_turn);
    let mut editor = start_editor(&fake, AUTO_APPROVE).await;
    let first = plan_and_approve(&mut editor).await;
    wait_all_complete(&mut editor, 5).await;
    // (`TestNvim::plan` would take an earlier loop's "running" for the new plan's.)
    assert_eq!(
        editor
            .command("LooprPlan Print the version in colour")
            .await,
        None
    );
    let second = editor
        .wait_event("LooprLoopUpdated", |data| {
            data["type"] == "plan" && data["status"] == "awaiting_approval"
        })
        .await["id"]
        .as_str()
        .expect("the second plan's id")
        .to_owned();
    assert_eq!(
        editor.command(&format!("LooprApprove {second}")).await,
        None
    );
    let records = wait_all_complete(&mut editor, 10).await;
    // Each plan's phases: those whose spec's parent is the plan.
    let phases_of = |plan: &str| -> Vec<String> {
        let specs: Vec<&Value> = records.iter().filter(|r| r["parent"] == plan).collect();
        records
            .iter()
            .filter(|r| specs.iter().any(|spec| r["parent"] == spec["id"]))
            .filter_map(|r| r["id"].as_str().map(str::to_owned))
            .collect()
    };
    let expected_texts = || -> Vec<String> {
        ONE_SPEC_PHASES
            .iter()
            .flat_map(|phase| {
                [
                    format!(
                        "[{phase}] modify: Match --version before other arguments and print the version"
                    ),
                    format!("[{phase}] create: Add a test for {phase}"),
                ]
            })
            .collect()
    };
    let check = |list: &Value, plan: &str, task: &str| {
        assert_eq!(
            list["title"],
            format!("Loopr: tasks of plan \"{task}\""),
            "{list:#}"
        );
        let items = list["items"].as_array().expect("items");
        let texts: Vec<&str> = items.iter().filter_map(|i| i["text"].as_str()).collect();
        assert_eq!(
            texts,
            expected_texts(),
            "one entry per task, no duplicates: {list:#}"
        );
        let phases = phases_of(plan);
        assert!(
            items
                .iter()
                .all(|item| phases.iter().any(|id| item["loop_id"] == id.as_str())),
            "only the plan's phases: {list:#}"
        );
    };

    // Without an argument, from a source file: the newest plan.
    assert_eq!(editor.command("edit README.md").await, None);
    assert_eq!(editor.command("LooprTasks").await, None);
    check(
        &quickfix(&editor).await,
        &second,
        "Print the version in colour",
    );

    // From the older plan's plan.md: that plan.
    let plan_md = records
        .iter()
        .find(|r| r["id"] == first.as_str())
        .and_then(|r| r["artifact_path"].as_str())
        .expect("the first plan's plan.md")
        .to_owned();
    assert_eq!(editor.command(&format!("edit {plan_md}")).await, None);
    assert_eq!(editor.command("LooprTasks").await, None);
    check(&quickfix(&editor).await, &first, "Add a --version flag");
    editor.quit().await;
}
