//! Loopr's messages as a user with a screen sees them: never a hit-enter prompt that takes the
//! key being typed, whatever arrives while they type.

use serde_json::json;

use crate::fake_llm::{FakeLlm, Reply, TurnBuilder, error_reply};
use crate::nvim::{TestNvim, WAIT};
use crate::scenario::start_editor;

const PLANS: usize = 3;

/// Far longer than any command line, and with a line break, like a real API error can be.
fn long_api_error() -> String {
    format!(
        "messages.0.content: the request was rejected because {}\nsee https://docs.anthropic.com/en/api/errors for details",
        "the conversation is far too long for the model to take in at once ".repeat(5)
    )
}

/// A first turn whose tool call makes the loop report a progress message longer than any
/// command line.
fn long_progress_turn(index: usize) -> Reply {
    let glob = format!(
        "src/**/{}{index}*.rs",
        "a_very_long_module_name_".repeat(10)
    );
    TurnBuilder::new()
        .tool_use(
            &format!("toolu_list_{index}"),
            "list_files",
            json!({ "glob": glob }),
        )
        .usage(100, 10)
        .reply()
}

async fn failed_count(editor: &mut TestNvim) -> usize {
    editor.poll_events();
    editor
        .events_seen()
        .iter()
        .filter(|(pattern, data)| pattern == "LooprLoopUpdated" && data["status"] == "failed")
        .count()
}

/// Types `word` a key at a time, checking after each that no prompt took it, and adds it to
/// `typed`.
async fn type_word(editor: &TestNvim, typed: &mut String, word: &str) {
    for key in word.chars() {
        editor.type_keys(&key.to_string()).await;
        typed.push(key);
    }
}

/// Types in one window while, in the background, several loops report long progress and then
/// fail with a long error at about the same time. Neovim must never stop at a hit-enter
/// prompt, and every typed key must land in the buffer.
async fn typing_survives_loopr_messages(columns: i64, mode_key: &str, mode: &str) {
    let fake = FakeLlm::start().await;
    let mut releases = Vec::new();
    for index in 0..PLANS {
        let (held, release) = long_progress_turn(index).held();
        fake.push(held);
        releases.push(release);
    }
    for _ in 0..PLANS {
        fake.push(error_reply(400, "invalid_request_error", &long_api_error()));
    }
    let mut editor = start_editor(&fake, "{}").await;
    editor.attach_ui(columns, 24).await;
    for index in 0..PLANS {
        editor
            .plan(&format!("Add a --version flag, take {index}"))
            .await;
    }
    fake.wait_for_requests(PLANS).await;
    editor
        .exec("vim.cmd.edit('notes.txt') vim.cmd.vsplit('draft.txt')")
        .await;

    editor.type_keys(mode_key).await;
    let sentence = "the quick brown fox jumps over the lazy dog ";
    let mut words = sentence.split_inclusive(' ').cycle();
    let mut typed = String::new();
    type_word(&editor, &mut typed, words.next().unwrap_or_default()).await;
    // The loops go on while the user types.
    for release in &releases {
        release.notify_one();
    }
    // A word after each thing the loops report, until all of them failed. Typing as fast as
    // Neovim answers, bounded only by a count of keys, kept the test and Neovim passing the
    // CPU back and forth: on a busy machine the host then got no CPU time at all (its threads
    // runnable, its answers unread in its sockets) and the loops never got to fail.
    let deadline = tokio::time::Instant::now() + WAIT;
    while failed_count(&mut editor).await < PLANS {
        assert!(
            editor.next_event_before(deadline).await,
            "the loops did not fail within {WAIT:?}; events: {:#?}\nhost log:\n{}",
            editor.events_seen(),
            editor.log_text()
        );
        type_word(&editor, &mut typed, words.next().unwrap_or_default()).await;
    }
    // A whole sentence more while the failures show.
    for word in sentence.split_inclusive(' ') {
        type_word(&editor, &mut typed, word).await;
    }

    let (mode_now, blocking) = editor.mode().await;
    assert_eq!((mode_now.as_str(), blocking), (mode, false));
    let line: String = editor
        .lua("return vim.fn.mode() == 'c' and vim.fn.getcmdline() or vim.api.nvim_get_current_line()")
        .await;
    assert_eq!(line, typed, "every typed key landed in the buffer");
    let messages: String = editor.lua("return vim.fn.execute('messages')").await;
    assert!(
        messages.contains("docs.anthropic.com/en/api/errors for details"),
        "the whole error stays in :messages: {messages}"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_never_open_the_hit_enter_prompt_at_80_columns() {
    typing_survives_loopr_messages(80, "i", "i").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_never_open_the_hit_enter_prompt_at_200_columns() {
    typing_survives_loopr_messages(200, "i", "i").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_never_open_the_hit_enter_prompt_on_the_command_line() {
    typing_survives_loopr_messages(80, ":", "c").await;
}

/// A vim.notify the user installed (nvim-notify, noice, snacks) gets every message whole, and
/// every message, whether the plugin's own or the host's, starts with "Loopr:".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_vim_notify_gets_whole_messages_all_prefixed_loopr() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    editor
        .exec(
            "_G.received = {}
             vim.notify = function(msg, level, opts)
               table.insert(_G.received, { msg = msg, level = level, title = opts and opts.title })
             end",
        )
        .await;
    // The host's own error, the plugin's usage error, an invalid option, and a multi-line one.
    // The host's answer comes after the command returned: waited for, to keep the order.
    let _: Option<bool> = editor.lua_answered("vim.cmd('LooprCancel')").await;
    editor.exec("vim.cmd('LooprRun')").await;
    editor
        .exec("require('loopr').setup({ max_turns = 0 })")
        .await;
    editor
        .exec("require('loopr.notify').notify('loopr: first line\\nsecond line', vim.log.levels.WARN)")
        .await;
    let received: Vec<serde_json::Value> = editor.lua("return _G.received").await;
    let texts: Vec<&str> = received
        .iter()
        .map(|message| message["msg"].as_str().expect("text"))
        .collect();
    assert_eq!(received.len(), 4, "{received:#?}");
    for message in &received {
        assert_eq!(message["title"], "Loopr", "{message}");
    }
    assert!(texts[0].starts_with("Loopr: no running loop"), "{texts:?}");
    assert!(
        texts[1].starts_with("Loopr: LooprRun needs a phase"),
        "{texts:?}"
    );
    assert!(
        texts[2].starts_with("Loopr: setup(): option max_turns expects an integer >= 1"),
        "{texts:?}"
    );
    assert_eq!(texts[3], "Loopr: first line\nsecond line");
    assert_eq!(received[0]["level"], 4, "errors are errors");
    assert_eq!(received[3]["level"], 3);
    editor.quit().await;
}
