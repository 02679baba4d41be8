//! `:LooprTranscript`: a loop's transcript followed live in a buffer, and read back from the
//! journal after a restart.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::fake_llm::{FakeLlm, TurnBuilder};
use crate::nvim::TestNvim;
use crate::scenario::{
    buffer_text, open_transcript, start_editor, start_editor_in, transcript_with, valid_plan,
    watch_transcripts,
};

/// Asserts that `needles` appear in `text` in this order, each once.
fn assert_in_order(text: &str, needles: &[&str]) {
    let mut from = 0;
    for needle in needles {
        assert_eq!(
            text.matches(needle).count(),
            1,
            "{needle:?} should appear once in:\n{text}"
        );
        let at = text[from..]
            .find(needle)
            .unwrap_or_else(|| panic!("{needle:?} missing after byte {from} in:\n{text}"));
        from += at + needle.len();
    }
}

const EXPECTED_ORDER: [&str; 13] = [
    "> Plan this change:",
    "### Turn 1",
    "Let me look at the project first.",
    "→ **list_files** `{}`",
    "_turn 1 · ",
    "← **list_files**",
    "### Turn 2",
    "→ **read_file** `{\"path\":\"missing.rs\"}`",
    "← **read_file** ✗ error",
    "### Turn 3",
    "Drafting the plan: part one and part two.",
    "<details><summary>→ create_plan (",
    "_turn 3 · claude-sonnet-4-5 · 4,700 in (3,000 from cache, 200 to cache) · 300 out_",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_loops_transcript_follows_it_live_and_reads_back_after_a_restart() {
    let fake = FakeLlm::start().await;
    fake.push(
        TurnBuilder::new()
            .text_deltas(["Let me look ", "at the project", " first."])
            .tool_use("toolu_list", "list_files", json!({}))
            .usage(500, 40)
            .reply(),
    );
    fake.push(
        TurnBuilder::new()
            .tool_use("toolu_read", "read_file", json!({"path": "missing.rs"}))
            .usage(700, 30)
            .reply(),
    );
    let (paused, release) = TurnBuilder::new()
        .text_deltas(["Drafting the plan: ", "part one", " and part two."])
        .tool_use("toolu_plan", "create_plan", valid_plan())
        .usage(1500, 300)
        .cache_usage(200, 3000)
        .paused_after("part one");
    fake.push(paused);
    let mut editor = start_editor(&fake, "{}").await;
    watch_transcripts(&editor).await;

    let loop_id = editor.plan("Add a --version flag").await;
    fake.wait_for_requests(3).await;
    // No id: the newest running loop.
    let buf = open_transcript(&editor, None).await;
    let name: String = editor
        .lua(&format!("return vim.api.nvim_buf_get_name({buf})"))
        .await;
    assert!(
        name.ends_with(&format!("loopr://transcript/{loop_id}")),
        "{name}"
    );

    // The turn under way shows as far as the model has written it.
    let live = transcript_with(&mut editor, buf, "part one").await;
    assert!(
        live.starts_with(&format!("# plan loop {loop_id}")),
        "{live}"
    );
    assert!(!live.contains("part two"), "{live}");
    assert_in_order(&live, &EXPECTED_ORDER[..9]);

    release.notify_one();
    editor.wait_status(&loop_id, "awaiting_approval").await;
    let followed = transcript_with(&mut editor, buf, "_turn 3 · ").await;
    assert_in_order(&followed, &EXPECTED_ORDER);
    let state: Value = editor
        .lua(&format!(
            "local win = vim.fn.win_findbuf({buf})[1]
             return vim.api.nvim_win_call(win, function()
               local line = vim.fn.search('create_plan (', 'n')
               local error_line = vim.fn.search('✗', 'n')
               local error_col = vim.fn.stridx(vim.fn.getline(error_line), '✗') + 1
               local function group(l, c) return vim.fn.synIDattr(vim.fn.synID(l, c, 1), 'name') end
               return {{ modifiable = vim.bo.modifiable, ft = vim.bo.filetype, fold = vim.wo.foldmethod,
                         line = line, closed = vim.fn.foldclosed(line),
                         error_mark = group(error_line, error_col), error_call = group(error_line, 1) }}
             end)"
        ))
        .await;
    assert_eq!(state["modifiable"], false, "{state}");
    assert_eq!(state["ft"], "loopr-transcript", "{state}");
    assert_eq!(state["fold"], "marker", "{state}");
    assert_eq!(state["error_mark"], "LooprTranscriptError", "{state}");
    assert_eq!(state["error_call"], "LooprTranscriptResult", "{state}");
    assert_ne!(
        state["closed"], -1,
        "the long create_plan input is folded: {state}"
    );

    // After a restart the loop has finished before Neovim started: its journal reads back.
    let dirs = editor.quit().await;
    let mut editor = start_editor_in(dirs, &fake, "{ plan_review_passes = 0 }").await;
    watch_transcripts(&editor).await;
    let buf = open_transcript(&editor, Some(&loop_id)).await;
    let stored = transcript_with(&mut editor, buf, "_turn 3 · ").await;
    assert_in_order(&stored, &EXPECTED_ORDER);
    assert!(
        stored.contains("Drafting the plan: part one and part two.\n"),
        "{stored}"
    );
}

/// Queues a turn that streams `words`, pauses after the first until the returned `Notify`
/// lets it go on, then calls `tool` with `input`.
fn push_paused(fake: &FakeLlm, words: [&str; 2], tool: &str, input: Value) -> Arc<Notify> {
    let (turn, release) = TurnBuilder::new()
        .text_deltas(words)
        .tool_use(&format!("toolu_{tool}"), tool, input)
        .paused_after(words[0]);
    fake.push(turn);
    release
}

/// An editor (`layout = 'vsplit'`, a UI `height` lines high) that plans, opens the plan
/// loop's transcript and waits until it shows "alpha"; with the loop's id and the
/// transcript's buffer.
async fn following_a_plan(fake: &FakeLlm, height: i64) -> (TestNvim, String, i64) {
    let mut editor = start_editor(fake, "{ layout = 'vsplit' }").await;
    editor.attach_ui(120, height).await;
    watch_transcripts(&editor).await;
    let loop_id = editor.plan("Add a --version flag").await;
    fake.wait_for_requests(1).await;
    let buf = open_transcript(&editor, Some(&loop_id)).await;
    transcript_with(&mut editor, buf, "alpha").await;
    (editor, loop_id, buf)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appending_never_moves_the_cursor_the_current_window_or_the_mode() {
    let fake = FakeLlm::start().await;
    let release_first = push_paused(&fake, ["alpha", " beta\n\nmore"], "list_files", json!({}));
    let release_second = push_paused(&fake, ["gamma", " delta"], "create_plan", valid_plan());
    // Short windows, so following the end scrolls.
    let (mut editor, loop_id, buf) = following_a_plan(&fake, 8).await;

    // The cursor in the transcript, on its last line (where new text lands).
    let before: Value = editor
        .lua(&format!(
            "vim.cmd('normal! G')
             _G.transcript_changed = 0
             vim.api.nvim_create_autocmd('TextChanged', {{ buffer = {buf}, callback = function()
               _G.transcript_changed = _G.transcript_changed + 1
             end }})
             return {{ win = vim.api.nvim_get_current_win(), cursor = vim.api.nvim_win_get_cursor(0) }}"
        ))
        .await;
    release_first.notify_one();
    fake.wait_for_requests(2).await;
    transcript_with(&mut editor, buf, "gamma").await;
    let after: Value = editor
        .lua(&format!(
            "return {{ win = vim.api.nvim_get_current_win(), cursor = vim.api.nvim_win_get_cursor(0),
                       lines = vim.api.nvim_buf_line_count({buf}) }}"
        ))
        .await;
    assert_eq!(before["win"], after["win"], "appending changed the window");
    // Issue 24 item 8 turned this around: a cursor at the end follows, like `tail -f`, in the
    // current window too (it used to stay put); one the user moved up stays (see
    // `a_transcript_opens_at_its_end_and_follows_while_the_cursor_stays_there`).
    assert_eq!(
        after["cursor"],
        json!([after["lines"], 0]),
        "the cursor at the end followed it"
    );
    // Text arriving ran no one's TextChanged handlers (it changes dozens of times a second).
    let changed: i64 = editor.lua("return _G.transcript_changed").await;
    assert_eq!(changed, 0);

    // Typing in another window while the transcript, at its end, follows along.
    let typing: Value = editor
        .lua(&format!(
            "local transcript_win = vim.api.nvim_get_current_win()
             vim.api.nvim_win_set_cursor(transcript_win, {{ vim.api.nvim_buf_line_count({buf}), 0 }})
             vim.cmd('wincmd p')
             return {{ win = vim.api.nvim_get_current_win(), transcript_win = transcript_win }}"
        ))
        .await;
    assert_ne!(typing["win"], typing["transcript_win"]);
    let transcript_win = &typing["transcript_win"];
    editor
        .lua::<Value>(&format!(
            "_G.transcript_scrolled = 0
             -- Scrolls alone: opening the plan's window at the end resizes every window.
             vim.api.nvim_create_autocmd('WinScrolled', {{ callback = function()
               local all = vim.v.event.all
               if vim.v.event['{transcript_win}'] and all.width == 0 and all.height == 0 then
                 _G.transcript_scrolled = _G.transcript_scrolled + 1
               end
             end }})
             _G.topline_before = vim.fn.getwininfo({transcript_win})[1].topline"
        ))
        .await;
    editor.type_keys("ihello").await;
    let (mode, _) = editor.mode().await;
    assert_eq!(mode, "i");
    let typed_cursor: Value = editor.lua("return vim.api.nvim_win_get_cursor(0)").await;
    release_second.notify_one();
    editor.wait_status(&loop_id, "awaiting_approval").await;
    let text = transcript_with(&mut editor, buf, "create_plan").await;
    let now: Value = editor
        .lua(&format!(
            "return {{ win = vim.api.nvim_get_current_win(), cursor = vim.api.nvim_win_get_cursor(0),
                       transcript_line = vim.api.nvim_win_get_cursor({})[1],
                       lines = vim.api.nvim_buf_line_count({buf}) }}",
            typing["transcript_win"]
        ))
        .await;
    assert_eq!(editor.mode().await.0, "i", "still typing");
    assert_eq!(now["win"], typing["win"], "the current window stayed");
    assert_eq!(now["cursor"], typed_cursor, "the typing cursor stayed");
    assert_eq!(
        now["transcript_line"], now["lines"],
        "the transcript window, at its end, followed the new text: {text}"
    );
    // It scrolled to follow, and that ran no one's WinScrolled handlers.
    let scrolled: Value = editor
        .lua(&format!(
            "return {{ scrolled = _G.transcript_scrolled, moved = vim.fn.getwininfo({transcript_win})[1].topline ~= _G.topline_before }}"
        ))
        .await;
    assert_eq!(scrolled["moved"], true, "{scrolled}");
    assert_eq!(scrolled["scrolled"], 0, "{scrolled}");

    // The transcript's window options stay with the transcript: another buffer opened in
    // its window gets the window's usual ones.
    let other: Value = editor
        .lua(&format!(
            "vim.cmd('stopinsert')
             vim.api.nvim_win_call({transcript_win}, function() vim.cmd('enew') end)
             return {{ fold = vim.wo[{transcript_win}].foldmethod, ignore = vim.wo[{transcript_win}].eventignorewin }}"
        ))
        .await;
    assert_eq!(other["fold"], "manual", "{other}");
    assert_eq!(other["ignore"], "", "{other}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_id_or_a_running_loop_the_message_names_the_fix() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    let error = editor.command("LooprTranscript").await.expect("an error");
    assert!(error.contains(":LooprTranscript <id>"), "{error}");
    let error = editor
        .command("LooprTranscript 20990101-000000-nope")
        .await
        .expect("an error");
    assert!(error.contains("no loop 20990101-000000-nope"), "{error}");
    let buffers: i64 = editor
        .lua("return #vim.tbl_filter(function(b) return vim.api.nvim_buf_get_name(b):find('transcript') ~= nil end, vim.api.nvim_list_bufs())")
        .await;
    assert_eq!(buffers, 0, "a failed open leaves no buffer behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reachable_from_an_artifact_buffer_and_the_status_window_and_the_hosts_append_call() {
    let fake = FakeLlm::start().await;
    fake.push(crate::scenario::list_files_turn());
    fake.push(crate::scenario::create_plan_turn(
        "toolu_plan",
        valid_plan(),
    ));
    let mut editor = start_editor(&fake, "{ layout = 'vsplit' }").await;
    watch_transcripts(&editor).await;
    let loop_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&loop_id, "awaiting_approval").await;

    // In plan.md, no id needed: the artifact's loop (none is running any more).
    let current: String = editor.lua("return vim.api.nvim_buf_get_name(0)").await;
    assert!(current.ends_with("plan.md"), "{current}");
    let from_artifact = open_transcript(&editor, None).await;
    transcript_with(&mut editor, from_artifact, "→ create_plan (").await;
    let token: u64 = editor
        .lua(&format!(
            "return vim.b[{from_artifact}].loopr_transcript_token"
        ))
        .await;
    assert_eq!(editor.command("close").await, None);
    let wiped: bool = editor
        .lua(&format!(
            "return not vim.api.nvim_buf_is_valid({from_artifact})"
        ))
        .await;
    assert!(wiped, "closing the window wipes the transcript buffer");
    let still_following: bool = editor
        .lua(&format!(
            "return require('loopr.host').request('transcript_close', {{ token = {token} }})"
        ))
        .await;
    assert!(
        !still_following,
        "wiping the buffer stopped the host sending it"
    );

    // From :LooprStatus, `t` on the loop's line.
    assert_eq!(editor.command("LooprStatus").await, None);
    let _: Option<bool> = editor
        .lua_answered(&format!(
            "vim.fn.search({loop_id:?})
             vim.api.nvim_feedkeys('t', 'x', false)"
        ))
        .await;
    let opened: i64 = editor.lua("return vim.api.nvim_get_current_buf()").await;
    let text = transcript_with(&mut editor, opened, "→ create_plan (").await;
    assert!(
        text.starts_with(&format!("# plan loop {loop_id}")),
        "{text}"
    );

    // The host's call, as the host makes it: text for a followed token lands at the end,
    // text for a token nobody follows any more is dropped without an error.
    let token: u64 = editor
        .lua(&format!("return vim.b[{opened}].loopr_transcript_token"))
        .await;
    let before = buffer_text(&editor, opened).await;
    loopr::bridge::deliver_transcript(
        &editor.nvim,
        &[
            loopr::agent::TranscriptText {
                token,
                text: "more from the host\nand a line".to_owned(),
            },
            loopr::agent::TranscriptText {
                token: token + 100,
                text: "for nobody".to_owned(),
            },
        ],
    )
    .await
    .expect("Lua takes the text");
    let after = buffer_text(&editor, opened).await;
    assert_eq!(after, format!("{before}more from the host\nand a line"));

    // A block that arrives cut in two calls (a cut falls anywhere) is folded all the same,
    // also once the user has opened a fold (after which Neovim leaves new folds open).
    let _: Option<bool> = editor
        .lua("vim.cmd(vim.fn.search('→ create_plan (', 'n') .. 'foldopen')")
        .await;
    for text in [
        "\n<deta",
        "ils><summary>→ cut</summary>\n\nbody\n</details>\n",
    ] {
        let item = loopr::agent::TranscriptText {
            token,
            text: text.to_owned(),
        };
        loopr::bridge::deliver_transcript(&editor.nvim, &[item])
            .await
            .expect("Lua takes the text");
    }
    let closed: i64 = editor
        .lua("return vim.fn.foldclosed(vim.fn.search('<summary>→ cut<', 'n'))")
        .await;
    assert_ne!(closed, -1, "the block that came in two calls is folded");

    // Showing the transcript in a second window leaves the folds of the first as the user
    // left them.
    let opened_fold = "vim.fn.foldclosed(vim.fn.search('→ create_plan (', 'n'))";
    let before: i64 = editor.lua(&format!("return {opened_fold}")).await;
    assert_eq!(before, -1, "the fold the user opened");
    let first_window: i64 = editor.lua("return vim.api.nvim_get_current_win()").await;
    let _: Option<bool> = editor
        .lua(&format!(
            "vim.cmd('vsplit | enew')
             vim.api.nvim_win_set_buf(0, {opened})
             vim.api.nvim_set_current_win({first_window})"
        ))
        .await;
    let (after, second): (i64, String) = editor
        .lua(&format!(
            "local second = vim.fn.win_findbuf({opened})
             local other = second[1] == {first_window} and second[2] or second[1]
             return {{ {opened_fold}, vim.wo[other].foldmethod }}"
        ))
        .await;
    assert_eq!(after, -1, "the first window's open fold stays open");
    assert_eq!(second, "marker", "the second window folds the transcript");
}

/// The line of `win`'s cursor and the line count of the buffer it shows.
async fn cursor_and_count(editor: &TestNvim, win: i64) -> (i64, i64) {
    editor
        .lua(&format!(
            "return {{ vim.api.nvim_win_get_cursor({win})[1],
                       vim.api.nvim_buf_line_count(vim.api.nvim_win_get_buf({win})) }}"
        ))
        .await
}

/// `:LooprTranscript` takes focus and opens at the end, and follows like `tail -f`: every
/// window whose cursor is on the last line, the current one too, stays on it as text comes;
/// moving up stops following there, going back to the end (`G`) starts it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transcript_opens_at_its_end_and_follows_while_the_cursor_stays_there() {
    let fake = FakeLlm::start().await;
    let release_first = push_paused(&fake, ["alpha", " beta\n\nmore"], "list_files", json!({}));
    let read = json!({"path": "src/main.rs"});
    let release_second = push_paused(&fake, ["gamma", " delta"], "read_file", read);
    let release_third = push_paused(&fake, ["epsilon", " zeta"], "create_plan", valid_plan());
    let (mut editor, loop_id, buf) = following_a_plan(&fake, 12).await;

    // Opened: the transcript's window is the current one, its cursor on the last line.
    let name: String = editor.lua("return vim.api.nvim_buf_get_name(0)").await;
    assert!(
        name.ends_with(&format!("loopr://transcript/{loop_id}")),
        "focus: {name}"
    );
    let first_win: i64 = editor.lua("return vim.api.nvim_get_current_win()").await;
    let (line, count) = cursor_and_count(&editor, first_win).await;
    assert!(count > 3, "the transcript has lines before its end");
    assert_eq!(line, count, "the cursor starts on the last line");

    // A second window on it (the current one now); both follow as text comes.
    let second_win: i64 = editor
        .lua("vim.cmd('split') return vim.api.nvim_get_current_win()")
        .await;
    release_first.notify_one();
    fake.wait_for_requests(2).await;
    transcript_with(&mut editor, buf, "gamma").await;
    for win in [first_win, second_win] {
        let (line, count) = cursor_and_count(&editor, win).await;
        assert_eq!(line, count, "window {win} followed the new text");
    }

    // Moving up in the current window stops it following; the other goes on.
    editor.exec("vim.cmd('normal! gg')").await;
    release_second.notify_one();
    fake.wait_for_requests(3).await;
    transcript_with(&mut editor, buf, "epsilon").await;
    let (line, _) = cursor_and_count(&editor, second_win).await;
    assert_eq!(line, 1, "moved up: stays where the user put it");
    let (line, count) = cursor_and_count(&editor, first_win).await;
    assert_eq!(line, count, "the other window still follows");

    // Back at the end, it follows again.
    editor.exec("vim.cmd('normal! G')").await;
    release_third.notify_one();
    editor.wait_status(&loop_id, "awaiting_approval").await;
    transcript_with(&mut editor, buf, "→ create_plan (").await;
    for win in [first_win, second_win] {
        let (line, count) = cursor_and_count(&editor, win).await;
        assert_eq!(line, count, "window {win} followed to the end");
    }
}
