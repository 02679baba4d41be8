//! Review buffers: `plan.md`, `spec.md` and `phase.md` say in their winbar where the artifact
//! stands and which keys act on it, the keys do it, and the buffer cannot be edited (approval
//! takes the stored artifact, a revision is the way to change it).

use serde_json::Value;

use crate::fake_llm::FakeLlm;
use crate::nvim::TestNvim;
use crate::scenario::{
    ONE_SPEC_PHASES, create_plan_turn, one_spec_plan, spec_input, spec_route, start_editor,
    tool_turn,
};

const AWAITING: &str = "Awaiting review · a approve · r revise · t transcript · q close";

/// What window `win` (0: the current one) shows once the host has answered what Loopr asked:
/// its buffer's name, its winbar as drawn, whether the buffer can be changed, and its
/// buffer-local normal-mode keys.
async fn review_window(editor: &TestNvim, win: i64) -> Value {
    let _: Option<bool> = editor.lua_answered("").await;
    editor
        .lua(&format!(
            "local win = {win} == 0 and vim.api.nvim_get_current_win() or {win}
             local buf = vim.api.nvim_win_get_buf(win)
             local winbar = vim.wo[win].winbar
             local keys = {{}}
             for _, map in ipairs(vim.api.nvim_buf_get_keymap(buf, 'n')) do
               keys[map.lhs] = map.desc
             end
             return {{
               name = vim.api.nvim_buf_get_name(buf),
               winbar = winbar ~= '' and vim.api.nvim_eval_statusline(winbar, {{ winid = win, use_winbar = true }}).str or '',
               modifiable = vim.bo[buf].modifiable,
               readonly = vim.bo[buf].readonly,
               keys = keys,
             }}"
        ))
        .await
}

/// Asserts that the window `window` describes shows a file whose path ends with `suffix`.
fn assert_shows(window: &Value, suffix: &str) {
    assert!(
        window["name"]
            .as_str()
            .is_some_and(|name| name.ends_with(suffix)),
        "{suffix}: {window}"
    );
}

async fn messages(editor: &TestNvim) -> String {
    editor
        .lua("return vim.api.nvim_exec2('messages', { output = true }).output")
        .await
}

/// Presses `keys` in normal mode in the current window and waits for what they asked the
/// host.
async fn press(editor: &TestNvim, keys: &str) {
    let _: Option<bool> = editor
        .lua_answered(&format!("vim.api.nvim_feedkeys({keys:?}, 'x', false)"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_awaiting_review_names_its_keys_and_they_approve_revise_and_follow() {
    let fake = FakeLlm::start().await;
    fake.push(create_plan_turn("toolu_first", one_spec_plan()));
    fake.push(create_plan_turn("toolu_second", one_spec_plan()));
    fake.push_routed(
        &spec_route("version-flag"),
        tool_turn(
            "version-flag",
            "create_spec",
            spec_input("version-flag", &ONE_SPEC_PHASES),
        ),
    );
    let mut editor = start_editor(
        &fake,
        "{ layout = 'vsplit', review_gates = { 'plan', 'spec' } }",
    )
    .await;
    // The terminal of issue 24: the hint fits a split of it whole.
    editor.attach_ui(200, 50).await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "awaiting_approval").await;

    // plan.md: the winbar names the state and the keys, the keys are the buffer's, and the
    // buffer cannot be changed.
    let plan = review_window(&editor, 0).await;
    assert_shows(&plan, "/iterations/001/artifacts/plan.md");
    let first_name = plan["name"].as_str().expect("name").to_owned();
    assert_eq!(plan["winbar"], AWAITING, "{plan}");
    assert_eq!(plan["modifiable"], false, "{plan}");
    for key in ["a", "r", "t", "q"] {
        let desc = plan["keys"][key].as_str().unwrap_or_default();
        assert!(desc.starts_with("Loopr: "), "{key}: {plan}");
    }
    let refused: String = editor
        .lua("local ok, err = pcall(vim.cmd, 'normal! x') return tostring(err)")
        .await;
    assert!(refused.contains("E21"), "{refused}");

    // `t`: the plan loop's transcript, and `q` closes it again.
    let plan_win: i64 = editor.lua("return vim.api.nvim_get_current_win()").await;
    press(&editor, "t").await;
    let transcript: String = editor.lua("return vim.api.nvim_buf_get_name(0)").await;
    assert!(
        transcript.ends_with(&format!("loopr://transcript/{plan_id}")),
        "{transcript}"
    );
    press(&editor, "q").await;
    editor
        .exec(&format!("vim.api.nvim_set_current_win({plan_win})"))
        .await;

    // `r` asks for the feedback and revises; iteration 2 takes the window, awaiting review,
    // and iteration 1 says it was superseded.
    let _: Option<bool> = editor
        .lua_answered(
            "vim.ui.input = function(opts, on_confirm)
               _G.asked = opts.prompt
               on_confirm('Name the flag in the title')
             end
             vim.api.nvim_feedkeys('r', 'x', false)",
        )
        .await;
    let asked: String = editor.lua("return _G.asked").await;
    assert!(asked.contains("Add a --version flag"), "{asked}");
    editor
        .wait_event("LooprArtifactCreated", |data| data["iteration"] == 2)
        .await;
    editor.wait_status(&plan_id, "awaiting_approval").await;
    let revised = review_window(&editor, plan_win).await;
    assert_shows(&revised, "/iterations/002/artifacts/plan.md");
    assert_eq!(revised["winbar"], AWAITING, "{revised}");
    let feedback_sent = fake.requests().last().is_some_and(|request| {
        request
            .body
            .to_string()
            .contains("Name the flag in the title")
    });
    assert!(feedback_sent, "the feedback reached the model");
    let old_win: i64 = editor
        .lua(&format!(
            "vim.cmd('split ' .. vim.fn.fnameescape({first_name:?}))
             local win = vim.api.nvim_get_current_win()
             vim.api.nvim_set_current_win({plan_win})
             return win"
        ))
        .await;
    let old = review_window(&editor, old_win).await;
    assert_eq!(
        old["winbar"], "Superseded by iteration 2 · t transcript · q close",
        "{old}"
    );

    // `a` approves; the hint says so, and the spec, awaiting review, opens with its keys.
    press(&editor, "a").await;
    editor.wait_status(&plan_id, "complete").await;
    assert!(
        messages(&editor)
            .await
            .contains("Loopr: approved plan \"Add a --version flag\""),
    );
    let approved = review_window(&editor, plan_win).await;
    assert_eq!(
        approved["winbar"], "Approved · r revise · t transcript · q close",
        "{approved}"
    );
    let spec_event = editor
        .wait_event("LooprArtifactCreated", |data| data["kind"] == "spec")
        .await;
    let spec_id = spec_event["loop_id"].as_str().expect("loop id").to_owned();
    editor.wait_status(&spec_id, "awaiting_approval").await;
    let spec = review_window(&editor, 0).await;
    assert_shows(&spec, "/artifacts/spec.md");
    assert_eq!(spec["winbar"], AWAITING, "{spec}");
    assert_eq!(spec["modifiable"], false, "{spec}");
    editor.quit().await;
}

/// The keys of a review buffer are written once: the buffer's keymaps, the winbar's words and
/// `:help loopr-review` all come from, or list, the same table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_review_key_is_mapped_and_listed_in_the_help() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    let keys: Vec<(String, String)> = editor
        .lua(
            "return vim.tbl_map(function(key) return { key.lhs, key.hint } end, require('loopr.review').keys)",
        )
        .await;
    editor.quit().await;
    assert!(keys.len() >= 4, "{keys:?}");
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/doc/loopr.txt"))
        .expect("doc/loopr.txt");
    let section = doc
        .split_once("*loopr-review*")
        .map(|(_, rest)| rest)
        .and_then(|rest| rest.split("\n=====").next())
        .expect("doc/loopr.txt has a *loopr-review* section");
    for (lhs, name) in keys {
        let listed = section.lines().any(|line| {
            let mut words = line.split_whitespace();
            words.next() == Some(lhs.as_str()) && line.contains(&name)
        });
        assert!(
            listed,
            "`{lhs}` ({name}) is listed in :help loopr-review:\n{section}"
        );
    }
}

/// `:LooprRevise` without feedback asks for it (as `r` does) instead of Neovim's bare
/// `E471: Argument required`; outside an artifact buffer it says where it works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revise_without_feedback_asks_for_it() {
    let fake = FakeLlm::start().await;
    fake.push(create_plan_turn("toolu_first", one_spec_plan()));
    fake.push(create_plan_turn("toolu_second", one_spec_plan()));
    let mut editor = start_editor(&fake, "{ review_gates = { 'plan' } }").await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "awaiting_approval").await;

    let outcome: Value = editor
        .lua_answered(
            "vim.ui.input = function(opts, on_confirm)
               _G.asked = opts.prompt
               on_confirm('Name the flag in the title')
             end
             local ok, err = pcall(vim.cmd, 'LooprRevise')
             result = { ok = ok, err = ok and vim.NIL or tostring(err) }",
        )
        .await;
    assert_eq!(outcome["ok"], true, "no Vim error: {outcome}");
    let asked: Value = editor.lua("return _G.asked").await;
    assert!(
        asked
            .as_str()
            .is_some_and(|asked| asked.contains("Add a --version flag")),
        "{asked}"
    );
    editor
        .wait_event("LooprArtifactCreated", |data| data["iteration"] == 2)
        .await;

    let outside: Value = editor
        .lua(
            "vim.cmd('enew')
             vim.cmd('messages clear')
             local ok, err = pcall(vim.cmd, 'LooprRevise')
             vim.wait(1000, function() return vim.fn.execute('messages'):find('LooprRevise', 1, true) ~= nil end)
             return { ok = ok, said = vim.fn.execute('messages') }",
        )
        .await;
    assert_eq!(outside["ok"], true, "no Vim error: {outside}");
    assert!(
        outside["said"]
            .as_str()
            .is_some_and(|said| said.contains("LooprRevise works in an artifact buffer")),
        "{outside}"
    );
    editor.quit().await;
}

/// A review buffer's hint follows its own project's loop: a loop event that arrives while the
/// current buffer belongs to another project leaves it as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_review_hint_stays_while_another_projects_buffer_is_current() {
    let fake = FakeLlm::start().await;
    fake.push(create_plan_turn("toolu_first", one_spec_plan()));
    let mut editor = start_editor(&fake, "{ layout = 'vsplit', review_gates = { 'plan' } }").await;
    editor.attach_ui(200, 50).await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "awaiting_approval").await;
    let plan_win: i64 = editor.lua("return vim.api.nvim_get_current_win()").await;
    assert_eq!(review_window(&editor, plan_win).await["winbar"], AWAITING);

    let other = editor.dirs.temp.path().join("other");
    std::fs::create_dir_all(other.join(".git")).expect("another project");
    let _: Option<bool> = editor
        .lua_answered(&format!(
            "vim.cmd('wincmd p')
             vim.cmd.edit(vim.fn.fnameescape({:?}))
             vim.api.nvim_exec_autocmds('User', {{ pattern = 'LooprLoopUpdated', data = {{}} }})",
            other.join("notes.txt").display().to_string()
        ))
        .await;
    let plan = review_window(&editor, plan_win).await;
    assert_eq!(plan["winbar"], AWAITING, "{plan}");
    editor.quit().await;
}
