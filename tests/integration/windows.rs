//! Where Loopr's windows open and what they are called: every view (status, MCP servers,
//! log, transcripts, artifacts) opens per `layout`, beside the window the user works in
//! rather than the status list, closes with `q`, and a tab page of one reads as its name.

use serde_json::Value;

use crate::fake_llm::FakeLlm;
use crate::nvim::TestNvim;
use crate::scenario::{create_plan_turn, start_editor, valid_plan};

/// Every window of the current tab page: its buffer's name, position, size and whether it
/// floats; and the tab pages with their `t:loopr_name`.
async fn layout(editor: &TestNvim) -> Value {
    editor
        .lua(
            "local wins = {}
             for _, win in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
               local pos = vim.api.nvim_win_get_position(win)
               table.insert(wins, { name = vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(win)),
                 row = pos[1], col = pos[2], width = vim.api.nvim_win_get_width(win),
                 floating = vim.api.nvim_win_get_config(win).relative ~= '' })
             end
             local tabs = {}
             for _, tab in ipairs(vim.api.nvim_list_tabpages()) do
               table.insert(tabs, vim.t[tab].loopr_name or '')
             end
             return { wins = wins, tabs = tabs, current = vim.api.nvim_buf_get_name(0) }",
        )
        .await
}

/// The window of the current tab page showing the buffer named `name`.
fn window<'a>(layout: &'a Value, name: &str) -> &'a Value {
    layout["wins"]
        .as_array()
        .expect("wins")
        .iter()
        .find(|win| win["name"] == name)
        .unwrap_or_else(|| panic!("no window shows {name}: {layout}"))
}

/// The screen's first row as drawn: the tabline.
async fn tabline(editor: &TestNvim) -> String {
    editor
        .lua(
            "vim.cmd.redraw()
             local cells = {}
             for col = 1, vim.o.columns do table.insert(cells, vim.fn.screenstring(1, col)) end
             return table.concat(cells)",
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_split_layouts_views_open_beside_the_users_window_not_under_the_status_list() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{ layout = 'vsplit' }").await;
    editor.attach_ui(160, 40).await;
    assert_eq!(editor.command("edit notes.txt").await, None);
    assert_eq!(editor.command("LooprStatus").await, None);
    let before = layout(&editor).await;
    let notes = window(
        &before,
        &format!("{}/notes.txt", editor.dirs.project.display()),
    )
    .clone();
    let status = window(&before, "loopr://status").clone();
    assert!(status["row"].as_i64() > notes["row"].as_i64(), "{before}");

    // From the status list, :LooprMcp opens to the right of the user's window.
    assert_eq!(editor.command("LooprMcp").await, None);
    let shown = layout(&editor).await;
    let mcp = window(&shown, "loopr://mcp");
    assert_eq!(shown["current"], "loopr://mcp", "{shown}");
    assert_eq!(
        mcp["row"], notes["row"],
        "beside the user's window: {shown}"
    );
    assert!(mcp["col"].as_i64() > notes["col"].as_i64(), "{shown}");
    assert_eq!(
        window(&shown, "loopr://status")["row"],
        status["row"],
        "the status list stays below: {shown}"
    );
    // `q` closes it.
    editor.type_keys("q").await;
    let closed = layout(&editor).await;
    assert_eq!(closed["wins"].as_array().map(Vec::len), Some(2), "{closed}");
    let wiped: i64 = editor.lua("return vim.fn.bufnr('loopr://mcp')").await;
    assert_eq!(wiped, -1);

    // With `layout = 'split'`, the log opens below the user's window, above the status list.
    assert_eq!(
        editor
            .command("lua require('loopr').setup({ layout = 'split' })")
            .await,
        None
    );
    assert_eq!(editor.command("LooprLog").await, None);
    let shown = layout(&editor).await;
    let log_name = editor.dirs.log_file.display().to_string();
    assert_eq!(shown["current"], log_name.as_str(), "{shown}");
    let log = window(&shown, &log_name);
    assert_eq!(log["col"], notes["col"], "{shown}");
    assert!(
        log["row"].as_i64() > notes["row"].as_i64()
            && log["row"].as_i64() < window(&shown, "loopr://status")["row"].as_i64(),
        "below the user's window, above the status list: {shown}"
    );
    editor.type_keys("q").await;
    let closed = layout(&editor).await;
    assert_eq!(closed["wins"].as_array().map(Vec::len), Some(2), "{closed}");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_tab_layout_each_view_gets_a_tab_page_named_after_it_and_q_closes_it() {
    let fake = FakeLlm::start().await;
    fake.push(create_plan_turn("toolu_plan", valid_plan()));
    let mut editor = start_editor(&fake, "{ layout = 'tab' }").await;
    editor.attach_ui(200, 20).await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "awaiting_approval").await;
    for command in [
        "LooprStatus".to_owned(),
        "LooprMcp".to_owned(),
        "LooprLog".to_owned(),
        format!("LooprTranscript {plan_id}"),
    ] {
        assert_eq!(editor.command(&command).await, None);
    }
    let transcript = format!("Loopr transcript: plan {plan_id}");
    let shown = layout(&editor).await;
    assert_eq!(
        shown["tabs"],
        serde_json::json!([
            "",
            "Plan: Add a --version flag",
            "Loopr status",
            "Loopr MCP servers",
            "Loopr log",
            transcript
        ]),
        "{shown}"
    );
    let line = tabline(&editor).await;
    for name in [
        "Plan: Add a --version flag",
        "Loopr status",
        "Loopr MCP servers",
        "Loopr log",
        "Loopr transcript: plan",
    ] {
        assert!(line.contains(name), "{line:?}");
    }
    assert!(!line.contains("l//"), "no shortened path: {line:?}");

    // `q` closes each view's tab page.
    for remaining in [5, 4, 3, 2] {
        editor.type_keys("q").await;
        let tabs: usize = editor.lua("return #vim.api.nvim_list_tabpages()").await;
        assert_eq!(tabs, remaining);
        if remaining > 1 {
            // After a close Neovim shows the tab to the right, if any: go to the last one.
            assert_eq!(editor.command("tablast").await, None);
        }
    }
    editor.quit().await;
}
