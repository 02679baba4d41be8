//! The `:LooprStatus` window as a first-time user meets it: sized to its content, with the
//! keys shown, invalidated loops set apart, errors readable in full, and no cancel of a
//! running tree without asking.

use serde_json::Value;

use crate::fake_llm::{FakeLlm, error_reply};
use crate::nvim::TestNvim;
use crate::scenario::{
    create_plan_turn, killed_at_request, one_spec_plan, plan_and_approve, plan_route,
    script_revised_spec, spec_route, stalled_turn, start_editor, valid_plan, wait_settled,
};

/// The status buffer's lines, the current window's height, and the highlight group of each
/// line ("" for none).
async fn status_view(editor: &TestNvim) -> Value {
    editor
        .lua(
            "local buf = vim.api.nvim_get_current_buf()
             local ns = vim.api.nvim_create_namespace('loopr_status')
             local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
             local groups = {}
             for i = 1, #lines do
               local marks = vim.api.nvim_buf_get_extmarks(buf, ns, { i - 1, 0 }, { i - 1, -1 }, { details = true })
               groups[i] = marks[1] and marks[1][4].hl_group or ''
             end
             return { name = vim.api.nvim_buf_get_name(buf), lines = lines, groups = groups,
                      height = vim.api.nvim_win_get_height(0) }",
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_window_fits_its_content_shows_the_keys_and_sets_invalidated_loops_apart() {
    let fake = FakeLlm::start().await;
    script_revised_spec(&fake);
    let mut editor = start_editor(&fake, "{}").await;
    plan_and_approve(&mut editor).await;
    wait_settled(&mut editor, 1 + 1 + 3).await;
    let records = editor.status_records().await;
    let spec_id = records
        .iter()
        .find(|r| r["type"] == "spec")
        .and_then(|r| r["id"].as_str())
        .expect("spec id")
        .to_owned();
    editor
        .exec(&format!(
            "require('loopr').revise('Split parsing from printing', {{ id = {spec_id:?} }})"
        ))
        .await;
    wait_settled(&mut editor, 1 + 1 + 3 + 3).await;

    assert_eq!(editor.command("only | LooprStatus").await, None);
    let view = status_view(&editor).await;
    assert_eq!(view["name"], "loopr://status");
    let lines: Vec<&str> = view["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .map(|line| line.as_str().expect("line"))
        .collect();
    // Header, plan, spec, 3 current and 3 invalidated phases, key hints.
    assert_eq!(lines.len(), 10, "{lines:#?}");
    assert_eq!(view["height"], 10, "the window fits its content: {view}");
    let hints = lines[lines.len() - 1];
    for key in [
        "<CR> open",
        "a approve",
        "r revise",
        "x cancel",
        "K error",
        "q close",
    ] {
        assert!(hints.contains(key), "{hints}");
    }
    let phase_rows: Vec<(usize, &str)> = lines
        .iter()
        .enumerate()
        .filter(|(_, line)| line.trim_start().starts_with("phase"))
        .map(|(index, line)| (index, *line))
        .collect();
    let invalidated: Vec<bool> = phase_rows
        .iter()
        .map(|(_, line)| line.contains("invalidated"))
        .collect();
    assert_eq!(
        invalidated,
        [false, false, false, true, true, true],
        "the replacements first, what they replaced after: {lines:#?}"
    );
    for (index, line) in &phase_rows {
        let expected = if line.contains("invalidated") {
            "LooprStatusInvalidated"
        } else {
            ""
        };
        assert_eq!(view["groups"][index], expected, "{line}: {view}");
    }
    assert_eq!(view["groups"][0], "LooprStatusHeader");
    assert_eq!(view["groups"][lines.len() - 1], "LooprStatusHint");

    // Alone in the tab, the window cannot shrink without growing the command line; it doesn't.
    assert_eq!(editor.command("only | LooprStatus").await, None);
    let cmdheight: i64 = editor.lua("return vim.o.cmdheight").await;
    assert_eq!(cmdheight, 1);
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_asks_before_cancelling_a_running_tree_and_k_shows_the_whole_error() {
    let fake = FakeLlm::start().await;
    let error_tail = "and this is the very end of the error text";
    let long_error = format!(
        "the request was rejected: {} {error_tail}",
        "too much context ".repeat(12)
    );
    fake.push_routed(
        plan_route(),
        error_reply(400, "invalid_request_error", &long_error),
    );
    fake.push_routed(plan_route(), create_plan_turn("toolu_plan", valid_plan()));
    fake.push_routed(&spec_route("version-flag"), stalled_turn("Writing"));
    let mut editor = start_editor(&fake, "{}").await;
    // confirm() prompts only with a UI; without one it answers the default at once.
    editor.attach_ui(120, 40).await;

    let failed_id = editor.plan("First attempt").await;
    editor.wait_status(&failed_id, "failed").await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "awaiting_approval").await;
    assert_eq!(
        editor.command(&format!("LooprApprove {plan_id}")).await,
        None
    );
    let spec = editor
        .wait_event("LooprLoopUpdated", |data| {
            data["type"] == "spec" && data["status"] == "running"
        })
        .await;
    let spec_id = spec["id"].as_str().expect("id").to_owned();

    assert_eq!(editor.command("LooprStatus").await, None);
    let view = status_view(&editor).await;
    let row_of = |id: &str| {
        view["lines"]
            .as_array()
            .expect("lines")
            .iter()
            .position(|line| line.as_str().is_some_and(|line| line.contains(id)))
            .map(|index| index + 1)
            .unwrap_or_else(|| panic!("no row for {id}: {view}"))
    };
    let (failed_row, plan_row) = (row_of(&failed_id), row_of(&plan_id));

    // K on the failed plan: its whole error, which the ERROR column truncates.
    editor
        .exec(&format!(
            "vim.api.nvim_win_set_cursor(0, {{ {failed_row}, 0 }})"
        ))
        .await;
    editor.type_keys("K").await;
    let float_text: String = editor
        .lua(
            "for _, win in ipairs(vim.api.nvim_list_wins()) do
               if vim.api.nvim_win_get_config(win).relative ~= '' then
                 local buf = vim.api.nvim_win_get_buf(win)
                 return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), ' ')
               end
             end
             return ''",
        )
        .await;
    assert!(float_text.contains(error_tail), "{float_text:?}");

    // x on the approved plan, whose specs still run: "n" keeps them, "y" cancels.
    editor
        .exec(&format!(
            "vim.api.nvim_win_set_cursor(0, {{ {plan_row}, 0 }})"
        ))
        .await;
    editor.type_keys("xn").await;
    let records = editor.status_records().await;
    let spec_status = records
        .iter()
        .find(|r| r["id"] == spec_id.as_str())
        .map(|r| r["status"].clone());
    assert_eq!(
        spec_status,
        Some(Value::from("running")),
        "answering no cancels nothing"
    );
    editor.type_keys("xy").await;
    editor.wait_status(&spec_id, "cancelled").await;
    editor.quit().await;
}

/// `x` on a finished plan whose one spec was interrupted (the `loopr plan` running it was
/// killed) asks first too: the cancel ends that spec for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_asks_before_cancelling_a_tree_with_an_interrupted_loop() {
    let fake = FakeLlm::start().await;
    fake.push_routed(
        plan_route(),
        create_plan_turn("toolu_plan", one_spec_plan()),
    );
    fake.push_routed(&spec_route("version-flag"), stalled_turn("Writing"));
    let mut editor = start_editor(&fake, "{}").await;
    assert!(
        editor.status_records().await.is_empty(),
        "Neovim's host has the project open before the other host runs"
    );
    editor.attach_ui(120, 40).await;
    let plan = [
        "plan",
        "Add a --version flag",
        "--approve-all",
        "--settings",
        r#"{"plan_review_passes": 0, "spec_review": false}"#,
    ];
    killed_at_request(&editor.dirs, &fake, &plan, 2).await;
    let records = editor.status_records().await;
    let id_of = |loop_type: &str, name: Option<&str>| {
        records
            .iter()
            .find(|r| r["type"] == loop_type && r["name"].as_str() == name)
            .and_then(|r| r["id"].as_str())
            .unwrap_or_else(|| panic!("no {loop_type} {name:?}: {records:?}"))
            .to_owned()
    };
    let (plan_id, spec_id) = (id_of("plan", None), id_of("spec", Some("version-flag")));
    assert_eq!(records.len(), 2, "{records:?}");
    let spec_status = |records: &[Value]| {
        records
            .iter()
            .find(|r| r["id"] == spec_id.as_str())
            .map(|r| r["status"].clone())
    };
    assert_eq!(spec_status(&records), Some(Value::from("interrupted")));

    assert_eq!(editor.command("LooprStatus").await, None);
    let view = status_view(&editor).await;
    let plan_row = view["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .position(|line| line.as_str().is_some_and(|line| line.contains(&plan_id)))
        .map(|index| index + 1)
        .unwrap_or_else(|| panic!("no row for {plan_id}: {view}"));
    editor
        .exec(&format!(
            "vim.api.nvim_win_set_cursor(0, {{ {plan_row}, 0 }})"
        ))
        .await;
    editor.type_keys("xn").await;
    assert_eq!(
        spec_status(&editor.status_records().await),
        Some(Value::from("interrupted")),
        "answering no cancels nothing"
    );
    editor.type_keys("xy").await;
    editor.wait_status(&spec_id, "cancelled").await;
    editor.quit().await;
}
