use serde_json::Value;

use crate::fake_anthropic::FakeAnthropic;
use crate::nvim::API_KEY;
use crate::scenario::{create_plan_turn, start_editor, valid_plan};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_rejects_unknown_and_ill_typed_options_by_name() {
    let fake = FakeAnthropic::start().await;
    let editor = start_editor(&fake, "{}").await;
    let error_of = |opts: &str| {
        format!(
            "local ok, err = pcall(require('loopr').setup, {opts}) return ok and '' or tostring(err)"
        )
    };
    let unknown: String = editor.lua(&error_of("{ colour = 'red' }")).await;
    assert!(unknown.contains("colour"), "{unknown}");
    let ill_typed: String = editor.lua(&error_of("{ max_tokens = 'lots' }")).await;
    assert!(ill_typed.contains("max_tokens"), "{ill_typed}");
    let bad_layout: String = editor.lua(&error_of("{ layout = 'float' }")).await;
    assert!(bad_layout.contains("layout"), "{bad_layout}");
    let fine: String = editor
        .lua(&error_of("{ layout = 'tab', max_turns = 3 }"))
        .await;
    assert_eq!(fine, "");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_md_opens_without_pulling_the_user_out_of_insert_mode() {
    let fake = FakeAnthropic::start().await;
    fake.push(create_plan_turn("toolu_plan", valid_plan()));
    let mut editor = start_editor(&fake, "{}").await;
    editor.exec("vim.cmd.edit('notes.txt')").await;

    let loop_id = editor.plan("Add a --version flag").await;
    editor.nvim.input("ityping").await.expect("input");
    let created = editor.wait_event("LooprArtifactCreated", |_| true).await;
    editor.wait_status(&loop_id, "complete").await;

    let state: Value = editor
        .lua(&format!(
            "local found = false
             for _, win in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
               if vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(win)) == {:?} then found = true end
             end
             return {{ mode = vim.api.nvim_get_mode().mode, current = vim.fn.expand('%:t'), found = found,
                      line = vim.api.nvim_get_current_line() }}",
            created["path"].as_str().expect("path")
        ))
        .await;
    assert_eq!(state["mode"], "i", "{state}");
    assert_eq!(
        state["current"], "notes.txt",
        "focus stayed with the user: {state}"
    );
    assert_eq!(
        state["found"], true,
        "plan.md is visible in a split: {state}"
    );
    assert_eq!(state["line"], "typing");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkhealth_reports_binary_version_key_and_state_dir_without_the_key() {
    let fake = FakeAnthropic::start().await;
    let editor = start_editor(&fake, "{}").await;
    assert_eq!(editor.command("checkhealth loopr").await, None);
    let report: String = editor
        .lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
        .await;
    assert!(
        report.contains(env!("CARGO_PKG_VERSION")),
        "binary version: {report}"
    );
    assert!(report.contains("ANTHROPIC_API_KEY"), "{report}");
    assert!(!report.contains(API_KEY), "the key itself is never shown");
    assert!(
        report.contains(&editor.dirs.loopr_home.display().to_string()),
        "{report}"
    );
    assert!(!report.contains("ERROR"), "{report}");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_tags_build_cleanly_and_document_every_command() {
    let fake = FakeAnthropic::start().await;
    let editor = start_editor(&fake, "{}").await;
    let docs = editor.dirs.home.join("docs-copy");
    std::fs::create_dir_all(docs.join("doc")).expect("mkdir");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/doc/loopr.txt"),
        docs.join("doc/loopr.txt"),
    )
    .expect("copy");
    let error = editor
        .command(&format!("set rtp^={0} | helptags {0}/doc", docs.display()))
        .await;
    assert_eq!(error, None);
    for topic in [
        "loopr",
        ":LooprPlan",
        ":LooprStatus",
        ":LooprLog",
        ":LooprCancel",
        "LooprArtifactCreated",
        "LooprLoopUpdated",
    ] {
        assert_eq!(
            editor.command(&format!("help {topic}")).await,
            None,
            "{topic}"
        );
        let file: String = editor.lua("return vim.fn.expand('%:t')").await;
        assert_eq!(file, "loopr.txt", "{topic}");
    }
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_request_becomes_an_error_reply_and_the_host_lives_on() {
    let fake = FakeAnthropic::start().await;
    let editor = start_editor(&fake, "{}").await;
    let reply: Value = editor
        .lua("local result, err = require('loopr.host').request('__panic') return { result = result, err = err }")
        .await;
    let error = reply["err"].as_str().expect("an error");
    assert!(
        error.contains("internal error while handling __panic"),
        "{error}"
    );
    let version: String = editor
        .lua("return require('loopr.host').request('version')")
        .await;
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    let unknown: Value = editor
        .lua("local result, err = require('loopr.host').request('frobnicate') return { err = err }")
        .await;
    assert!(
        unknown["err"]
            .as_str()
            .expect("error")
            .contains("unknown request \"frobnicate\"")
    );
    editor.quit().await;
}
