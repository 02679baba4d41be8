//! The `:LooprStatus` window as a first-time user meets it: sized to its content, with the
//! keys shown, invalidated loops set apart, errors readable in full, and no cancel of a
//! running tree without asking.

use serde_json::Value;

use crate::fake_llm::{FakeLlm, error_reply};
use crate::nvim::TestNvim;
use crate::scenario::{
    FIRST_PHASES, code_route, create_plan_turn, killed_at_request, one_spec_plan, plan_and_approve,
    plan_route, script_revised_spec, spec_route, stalled_turn, start_editor, valid_plan,
    wait_settled,
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
             local winbar = vim.api.nvim_eval_statusline(vim.wo.winbar, { use_winbar = true, maxwidth = 1000, highlights = true })
             return { name = vim.api.nvim_buf_get_name(buf), lines = lines, groups = groups,
                      height = vim.api.nvim_win_get_height(0), winbar = winbar.str,
                      winbar_group = winbar.highlights[1] and winbar.highlights[1].group or '' }",
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
    // Header, plan, spec, 3 current and 3 invalidated phases; the key hints above them.
    assert_eq!(lines.len(), 9, "{lines:#?}");
    assert_eq!(view["height"], 10, "the window fits its content: {view}");
    let hints = view["winbar"].as_str().expect("winbar");
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
    assert_eq!(view["winbar_group"], "LooprStatusHint");

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

/// The status window as the user sees it: its lines, the winbar as drawn (at most the
/// window's width), the text area's width, the cursor line, and the keys mapped in it.
async fn drawn_status(editor: &TestNvim) -> Value {
    editor
        .lua(
            "local win = vim.fn.bufwinid('loopr://status')
             local buf = vim.api.nvim_win_get_buf(win)
             local info = vim.fn.getwininfo(win)[1]
             local bar = vim.api.nvim_eval_statusline(vim.wo[win].winbar, { winid = win, use_winbar = true })
             local widths = {}
             for _, line in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
               table.insert(widths, vim.fn.strdisplaywidth(line))
             end
             local keys = {}
             for _, map in ipairs(vim.api.nvim_buf_get_keymap(buf, 'n')) do
               keys[map.lhs] = map.desc
             end
             return { lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false), widths = widths,
                      winbar = bar.str, text_width = info.width - info.textoff,
                      cursor = vim.api.nvim_get_current_line(), current = vim.api.nvim_get_current_win() == win,
                      keys = keys }",
        )
        .await
}

/// At 100 columns the whole table shows (the columns a newcomer needs least give way, the
/// error is cut, `K` has it all), the keys are on top in the winbar, the cursor starts on the
/// newest loop and stays on its loop while the tree grows; `T` lists a phase's tasks and `i`
/// runs it, keys mapped from the same table the hint is made of.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_100_columns_the_table_fits_the_keys_are_on_top_and_the_cursor_on_the_newest_loop() {
    let fake = FakeLlm::start().await;
    let long_error = format!(
        "the request was rejected: {}",
        "too much context ".repeat(12)
    );
    fake.push_routed(
        plan_route(),
        error_reply(400, "invalid_request_error", &long_error),
    );
    script_revised_spec(&fake);
    fake.push_routed(&code_route(FIRST_PHASES[0]), stalled_turn("Reading"));
    let mut editor = start_editor(&fake, "{}").await;
    editor.attach_ui(100, 40).await;
    let failed_id = editor.plan("First attempt").await;
    editor.wait_status(&failed_id, "failed").await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "awaiting_approval").await;

    assert_eq!(editor.command("LooprStatus").await, None);
    let view = drawn_status(&editor).await;
    let lines: Vec<&str> = view["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .map(|line| line.as_str().expect("line"))
        .collect();
    let text_width = view["text_width"].as_u64().expect("width");
    assert_eq!(text_width, 100, "{view}");
    for (line, width) in lines.iter().zip(view["widths"].as_array().expect("widths")) {
        assert!(
            width.as_u64().expect("width") <= text_width,
            "wider than the window: {line:?}\n{lines:#?}"
        );
    }
    for column in ["LOOP", "NAME", "STATUS", "ERROR"] {
        assert!(lines[0].contains(column), "{lines:#?}");
    }
    let failed_row = lines
        .iter()
        .find(|line| line.contains("First attempt"))
        .unwrap_or_else(|| panic!("{lines:#?}"));
    let error_column = lines[0].find("ERROR").expect("ERROR");
    assert!(
        failed_row.contains("failed") && failed_row.len() > error_column + 10,
        "the error shows, cut: {failed_row:?}"
    );
    assert!(
        lines.iter().all(|line| !line.contains("keys")),
        "the keys are not after the loops: {lines:#?}"
    );
    let winbar = view["winbar"].as_str().expect("winbar");
    for key in [
        "<CR> open",
        "a approve",
        "r revise",
        "i run",
        "T tasks",
        "t transcript",
        "R retry",
        "x cancel",
        "K error",
        "q close",
    ] {
        assert!(winbar.contains(key), "{winbar:?}");
        let lhs = key.split(' ').next().expect("lhs");
        assert!(
            view["keys"][lhs]
                .as_str()
                .is_some_and(|desc| !desc.is_empty()),
            "{lhs} is mapped: {view}"
        );
    }
    assert_eq!(view["current"], true, "{view}");
    let cursor = view["cursor"].as_str().expect("cursor line").to_owned();
    assert!(
        cursor.contains("Add a --version flag") && cursor.contains("awaiting_approval"),
        "the cursor starts on the newest loop: {cursor:?}"
    );

    // Approving grows the tree under the plan; the cursor stays on the plan's line.
    assert_eq!(
        editor.command(&format!("LooprApprove {plan_id}")).await,
        None
    );
    let mut phases_complete = 0;
    while phases_complete < FIRST_PHASES.len() {
        editor
            .wait_event("LooprLoopUpdated", |data| {
                data["type"] == "phase" && data["status"] == "complete"
            })
            .await;
        phases_complete += 1;
    }
    let view = drawn_status(&editor).await;
    let lines = view["lines"].as_array().expect("lines");
    assert_eq!(lines.len(), 1 + 2 + 1 + FIRST_PHASES.len(), "{view}");
    let cursor = view["cursor"].as_str().expect("cursor line");
    assert!(
        cursor.contains("Add a --version flag"),
        "the cursor stayed on its loop: {cursor:?}\n{view}"
    );

    // A narrower screen: the table fits again, and the winbar points to the keys left out.
    editor.nvim.ui_try_resize(60, 40).await.expect("resize");
    let narrow = drawn_status(&editor).await;
    let narrow_width = narrow["text_width"].as_u64().expect("width");
    assert_eq!(narrow_width, 60, "{narrow}");
    for (line, width) in narrow["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .zip(narrow["widths"].as_array().expect("widths"))
    {
        assert!(
            width.as_u64().expect("width") <= narrow_width,
            "wider than the window: {line}\n{narrow}"
        );
    }
    let winbar = narrow["winbar"].as_str().expect("winbar");
    assert!(
        winbar.contains("<CR> open") && winbar.ends_with("g? all keys"),
        "{winbar:?}"
    );
    assert!(
        narrow["keys"]["g?"].as_str().is_some(),
        "g? is mapped: {narrow}"
    );

    // On a phase's line, T lists its tasks and i runs it.
    let phase_line = lines
        .iter()
        .position(|line| {
            line.as_str()
                .is_some_and(|line| line.contains(FIRST_PHASES[0]))
        })
        .map(|index| index + 1)
        .unwrap_or_else(|| panic!("{view}"));
    editor
        .exec(&format!(
            "vim.api.nvim_win_set_cursor(vim.fn.bufwinid('loopr://status'), {{ {phase_line}, 0 }})
             vim.api.nvim_set_current_win(vim.fn.bufwinid('loopr://status'))"
        ))
        .await;
    editor.type_keys("T").await;
    let tasks: Value = editor
        .lua("return vim.fn.getqflist({ title = 0, size = 0 })")
        .await;
    assert_eq!(
        tasks["title"],
        format!("Loopr: tasks {}", FIRST_PHASES[0]),
        "{tasks}"
    );
    assert!(tasks["size"].as_u64().unwrap_or(0) > 0, "{tasks}");
    editor
        .exec("vim.api.nvim_set_current_win(vim.fn.bufwinid('loopr://status'))")
        .await;
    editor.type_keys("i").await;
    editor
        .wait_event("LooprLoopUpdated", |data| {
            data["type"] == "code" && data["status"] == "running"
        })
        .await;
    // The row's phase is sent by its id, but the message names the phase.
    let said: String = editor
        .lua(
            "vim.wait(5000, function() return vim.fn.execute('messages'):find('implementing', 1, true) ~= nil end)
             return vim.fn.execute('messages')",
        )
        .await;
    assert!(
        said.contains(&format!("Loopr: implementing {} (loop ", FIRST_PHASES[0])),
        "{said}"
    );
    editor.quit().await;
}

/// Wide characters (a task in Japanese) are cut by the cells they take on screen: every row
/// fits the width and the columns stay aligned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_of_wide_characters_is_cut_to_the_cells_it_takes() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    let fitted: Value = editor
        .lua(
            "local rows = { { id = '20261126-000000-000-aaaaaaaaaa', type = 'plan', status = 'running', shown_status = 'running',
                              task = string.rep('日本語のタスクを追加する', 4) } }
             local out = {}
             for _, width in ipairs({ 40, 60, 200 }) do
               local lines = require('loopr.status_table').format(rows, width)
               local status_at = {}
               for i, line in ipairs(lines) do
                 local at = line:find(i == 1 and 'STATUS' or 'running', 1, true)
                 status_at[i] = at and vim.fn.strdisplaywidth(line:sub(1, at - 1)) or -1
               end
               table.insert(out, {
                 width = width,
                 widest = math.max(unpack(vim.tbl_map(vim.fn.strdisplaywidth, lines))),
                 status_at = status_at,
               })
             end
             return out",
        )
        .await;
    for fit in fitted.as_array().expect("fits") {
        let width = fit["width"].as_u64().expect("width");
        assert!(fit["widest"].as_u64().expect("widest") <= width, "{fitted}");
        assert_eq!(
            fit["status_at"][0], fit["status_at"][1],
            "aligned: {fitted}"
        );
    }
    editor.quit().await;
}
