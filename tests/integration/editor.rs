use serde_json::Value;

use crate::fake_llm::FakeLlm;
use crate::nvim::API_KEY;
use crate::scenario::{
    create_plan_turn, revise_current, script_revised_spec, start_editor, valid_plan, wait_settled,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_reports_unknown_and_ill_typed_options_by_name_without_a_lua_error() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{ max_turns = 7 }").await;
    let setup = |opts: &str| {
        format!(
            "vim.cmd('messages clear')
             local ok, result = pcall(require('loopr').setup, {opts})
             if ok then return {{ raised = false, result = result }} end
             return {{ raised = true, result = tostring(result) }}"
        )
    };
    let messages = || async {
        editor
            .lua::<String>("return vim.fn.execute('messages')")
            .await
    };
    for (opts, expected) in [
        (
            "{ colour = 'red' }",
            "Loopr: setup(): unknown option \"colour\" (valid options: agents, allow_commands,",
        ),
        (
            "{ max_tokens = 'lots' }",
            "Loopr: setup(): option max_tokens expects an integer >= 1, got \"lots\" (string)",
        ),
        (
            "{ layout = 'float' }",
            "Loopr: setup(): option layout expects one of \"vsplit\", \"split\", \"tab\", got \"float\"",
        ),
        (
            "{ tool_protocol = 'json' }",
            "Loopr: setup(): option tool_protocol expects one of \"native\", \"xml\", \"markdown\", \"tool_calls\", got \"json\"",
        ),
        (
            "{ tool_choice = 'none' }",
            "Loopr: setup(): option tool_choice expects one of \"auto\", \"required\", got \"none\"",
        ),
        (
            "{ stream = 'no' }",
            "Loopr: setup(): option stream expects a boolean, got \"no\" (string)",
        ),
        (
            "{ max_format_retries = -1 }",
            "Loopr: setup(): option max_format_retries expects an integer >= 0, got -1",
        ),
        (
            "{ context_budget = 1000 }",
            "Loopr: setup(): option context_budget expects an integer >= 1024 (tokens), got 1000",
        ),
        (
            "{ rules_files = 'AGENTS.md' }",
            "Loopr: setup(): option rules_files expects a list of paths relative to the project root, got \"AGENTS.md\" (string)",
        ),
        (
            "{ rules_max_bytes = -1 }",
            "Loopr: setup(): option rules_max_bytes expects an integer >= 0, got -1",
        ),
        (
            "{ progress = 'yes' }",
            "Loopr: setup(): option progress expects a boolean, got \"yes\" (string)",
        ),
        (
            "'fast'",
            "Loopr: setup() expects a table or nil, got \"fast\"",
        ),
    ] {
        let outcome: Value = editor.lua(&setup(opts)).await;
        assert_eq!(outcome["raised"], false, "{opts}: {outcome}");
        assert_eq!(outcome["result"], false, "{opts}: {outcome}");
        let shown = messages().await;
        assert!(shown.contains(expected), "{opts}: {shown}");
        assert!(!shown.contains("traceback"), "{opts}: {shown}");
    }
    let kept: i64 = editor
        .lua("return require('loopr.config').get().max_turns")
        .await;
    assert_eq!(kept, 7, "invalid options leave the stored ones in effect");
    let fine: Value = editor
        .lua(&setup("{ layout = 'tab', max_turns = 3 }"))
        .await;
    assert_eq!(fine["result"], true, "{fine}");
    assert_eq!(messages().await.trim(), "");
    editor.quit().await;
}

/// A typo in one option of `setup()` costs only that option: the others apply, an ill-typed
/// value keeps what was in effect, and each mistake is reported with what matters first (the
/// closest valid name), the full list of options only in `:messages`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_applies_the_valid_options_and_names_the_closest_for_a_typo() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    let outcome: Value = editor
        .lua(
            "vim.cmd('messages clear')
             local ok, err = require('loopr').setup({ bin = require('loopr.config').get().bin,
               max_turn = 3, layout = 'tab', stream = 'no', max_tokens = 512 })
             local config = require('loopr.config').get()
             return { ok = ok, layout = config.layout, stream = config.stream,
                      max_tokens = config.max_tokens, max_turns = config.max_turns }",
        )
        .await;
    assert_eq!(
        outcome["ok"], false,
        "setup() still says it had errors: {outcome}"
    );
    assert_eq!(outcome["layout"], "tab", "valid options apply: {outcome}");
    assert_eq!(outcome["max_tokens"], 512, "valid options apply: {outcome}");
    assert_eq!(
        outcome["stream"], true,
        "an ill-typed value keeps its default: {outcome}"
    );
    assert_eq!(
        outcome["max_turns"], 25,
        "a misspelt option changes nothing: {outcome}"
    );
    let shown: String = editor.lua("return vim.fn.execute('messages')").await;
    let lines: Vec<&str> = shown.lines().filter(|line| !line.is_empty()).collect();
    assert!(
        lines.iter().any(|line| line.starts_with(
            "Loopr: setup(): unknown option \"max_turn\"; did you mean \"max_turns\"?"
        )),
        "the closest name comes first: {shown}"
    );
    assert!(
        lines.iter().any(|line| line
            .starts_with("Loopr: setup(): option stream expects a boolean, got \"no\" (string)")),
        "each mistake is reported: {shown}"
    );
    assert!(
        lines
            .iter()
            .any(|line| line.contains("valid options:") && line.contains("max_turns")),
        "the whole list is in :messages: {shown}"
    );
    // The command line shows the last message: the short one with the suggestion, which
    // fits an 80-column screen whole.
    let last = lines.last().copied().unwrap_or_default();
    assert!(
        last.contains("did you mean") || last.starts_with("Loopr: setup(): option stream"),
        "a short message shows last: {shown}"
    );
    assert!(last.chars().count() < 80, "the shown message fits: {last}");
    editor.quit().await;
}

/// The option table is generated from the host's definitions: what setup() accepts and
/// says it expects is what the host accepts (the sandbox's "landlock" included), and the host
/// gets each option unless its default applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_accepts_what_the_host_defines_and_passes_on_only_what_differs() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    let checked: Value = editor
        .lua(
            "local config = require('loopr.config')
             local _, wrong = config.validate({ sandbox = { mode = 'jail' } })
             return { landlock = config.validate({ sandbox = { mode = 'landlock' } }),
                      wrong = wrong,
                      both = config.validate({ mcp = { servers = { a = { command = 'x', url = 'http://h' } } } }),
                      named = config.validate({ mcp = { servers = { ['a b'] = { command = 'x' } } } }) }",
        )
        .await;
    assert_eq!(checked["landlock"], true, "{checked}");
    assert!(
        checked["wrong"]
            .as_str()
            .is_some_and(|err| err.contains("\"landlock\"")
                && err.starts_with("Loopr: setup(): option sandbox expects")),
        "{checked}"
    );
    assert_eq!(
        checked["both"], false,
        "a server is a command or a URL: {checked}"
    );
    assert_eq!(checked["named"], false, "server names are plain: {checked}");
    let sent: Value = editor
        .lua(
            "local config = require('loopr.config')
             assert(config.setup({ approvals = { write = 'ask' }, max_turns = 9,
                                   mcp = { servers = { a = { command = 'x', args = {}, env = {} } } } }))
             local settings = config.settings()
             return { approvals = settings.approvals == nil, prices = settings.prices == nil,
                      layout = settings.layout == nil, max_turns = settings.max_turns,
                      server = settings.mcp.servers.a }",
        )
        .await;
    assert_eq!(sent["approvals"], true, "the default is the host's: {sent}");
    assert_eq!(sent["prices"], true, "an empty table is left out: {sent}");
    assert_eq!(
        sent["layout"], true,
        "editor options stay in Neovim: {sent}"
    );
    assert_eq!(sent["max_turns"], 9, "{sent}");
    assert_eq!(
        sent["server"],
        serde_json::json!({ "command": "x" }),
        "{sent}"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_md_opens_without_pulling_the_user_out_of_insert_mode() {
    let fake = FakeLlm::start().await;
    fake.push(create_plan_turn("toolu_plan", valid_plan()));
    let mut editor = start_editor(&fake, "{}").await;
    editor.exec("vim.cmd.edit('notes.txt')").await;

    let loop_id = editor.plan("Add a --version flag").await;
    editor.nvim.input("ityping").await.expect("input");
    let created = editor.wait_event("LooprArtifactCreated", |_| true).await;
    editor.wait_status(&loop_id, "awaiting_approval").await;

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
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    assert_eq!(editor.command("checkhealth loopr").await, None);
    let report: String = editor
        .lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
        .await;
    assert!(
        report.contains(env!("CARGO_PKG_VERSION")),
        "binary version: {report}"
    );
    assert!(report.contains("provider: anthropic"), "{report}");
    assert!(
        report.contains(&format!(
            "base URL: {} ($ANTHROPIC_BASE_URL)",
            fake.base_url()
        )),
        "{report}"
    );
    assert!(
        report.contains("models: plan: claude-sonnet-4-5"),
        "{report}"
    );
    assert!(report.contains("ANTHROPIC_API_KEY is set"), "{report}");
    assert!(!report.contains(API_KEY), "the key itself is never shown");
    assert!(
        report.contains(&editor.dirs.loopr_home.display().to_string()),
        "{report}"
    );
    assert!(!report.contains("ERROR"), "{report}");
    // The host binary says which sandbox commands run in, or that there is none and why.
    assert!(
        report.contains("commands run in a sandbox: bubblewrap")
            || report.contains("commands run unsandboxed and are always asked about"),
        "{report}"
    );
    editor.quit().await;

    let editor = start_editor(&fake, "{ sandbox = { mode = 'off' } }").await;
    assert_eq!(editor.command("checkhealth loopr").await, None);
    let report: String = editor
        .lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
        .await;
    assert!(
        report.contains("unsandboxed") && report.contains("sandbox.mode = \"auto\""),
        "{report}"
    );
    editor.quit().await;
}

/// `:help loopr` works straight from a checkout on 'runtimepath' (how `scripts/nvim.sh`, a
/// plain runtimepath install and lazy.nvim load it), because `doc/tags` is committed; and the
/// committed file is exactly what `:helptags` generates (lazy.nvim regenerates it on install),
/// so it cannot go stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_works_from_a_fresh_checkout_and_the_committed_tags_are_current() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    let committed_tags = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/doc/tags"))
        .expect("doc/tags is committed; regenerate it with :helptags doc");
    let docs = editor.dirs.home.join("docs-copy");
    std::fs::create_dir_all(docs.join("doc")).expect("mkdir");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/doc/loopr.txt"),
        docs.join("doc/loopr.txt"),
    )
    .expect("copy");
    let error = editor
        .command(&format!("helptags {}/doc", docs.display()))
        .await;
    assert_eq!(error, None, "the help file builds without duplicate tags");
    let generated = std::fs::read_to_string(docs.join("doc/tags")).expect("generated tags");
    assert!(
        generated == committed_tags,
        "doc/tags is stale; run `nvim --headless --clean -c 'helptags doc' -c q` and commit it"
    );

    // The editor has only the checkout itself on 'runtimepath', as scripts/nvim.sh does.
    for topic in [
        "loopr",
        ":LooprPlan",
        ":LooprApprove",
        ":LooprRevise",
        ":LooprTasks",
        ":LooprRun",
        ":LooprChanges",
        ":LooprUndo",
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
        let file: String = editor.lua("return vim.fn.expand('%:p')").await;
        assert_eq!(
            file,
            crate::nvim::plugin_root()
                .join("doc/loopr.txt")
                .display()
                .to_string(),
            "{topic}"
        );
    }
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_request_becomes_an_error_reply_and_the_host_lives_on() {
    let fake = FakeLlm::start().await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_and_tab_layouts_are_honoured() {
    for (layout, expect) in [("split", "col"), ("tab", "tab")] {
        let fake = FakeLlm::start().await;
        fake.push(create_plan_turn("toolu_plan", valid_plan()));
        let mut editor = start_editor(&fake, &format!("{{ layout = '{layout}' }}")).await;
        let loop_id = editor.plan("Add a --version flag").await;
        editor.wait_status(&loop_id, "awaiting_approval").await;
        let shape: Value = editor
            .lua("return { tabs = #vim.api.nvim_list_tabpages(), layout = vim.fn.winlayout()[1], ft = vim.bo.filetype }")
            .await;
        assert_eq!(shape["ft"], "markdown", "{layout}: {shape}");
        if expect == "tab" {
            assert_eq!(shape["tabs"], 2, "{layout}: {shape}");
            assert_eq!(shape["layout"], "leaf", "{layout}: {shape}");
        } else {
            assert_eq!(shape["tabs"], 1, "{layout}: {shape}");
            assert_eq!(
                shape["layout"], expect,
                "{layout}: one window above the other: {shape}"
            );
        }
        editor.quit().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopr_log_opens_the_host_log() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    assert_eq!(
        editor.command("LooprStatus").await,
        None,
        "starts the host, which logs"
    );
    let log_file = editor.dirs.log_file.display().to_string();
    // The host writes its first line on start; the buffer shows the file itself.
    assert_eq!(editor.command("LooprLog").await, None);
    let name: String = editor.lua("return vim.api.nvim_buf_get_name(0)").await;
    assert_eq!(name, log_file);
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_binary_is_reported_with_the_build_command() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    // A copy of the plugin without target/, and a PATH without loopr.
    let plugin = editor.dirs.home.join("plugin-copy");
    for dir in ["lua/loopr", "lua/loopr/generated", "plugin"] {
        std::fs::create_dir_all(plugin.join(dir)).expect("mkdir");
        for entry in std::fs::read_dir(crate::nvim::plugin_root().join(dir)).expect("read_dir") {
            let entry = entry.expect("entry");
            if entry.path().is_dir() {
                continue;
            }
            std::fs::copy(entry.path(), plugin.join(dir).join(entry.file_name())).expect("copy");
        }
    }
    let error: String = editor
        .lua(&format!(
            "vim.env.PATH = '/nonexistent'
             for name in pairs(package.loaded) do
               if name:find('^loopr') then package.loaded[name] = nil end
             end
             vim.opt.rtp:prepend({plugin:?})
             local host = require('loopr.host')
             require('loopr').setup({{}})
             local path, err = host.resolve_bin()
             return path or err",
            plugin = plugin.display().to_string()
        ))
        .await;
    assert!(error.contains("cargo build --release"), "{error}");
    assert!(
        error.contains(&plugin.display().to_string()),
        "names the plugin directory: {error}"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revised_spec_replaces_its_open_window_and_opens_no_other() {
    let fake = FakeLlm::start().await;
    script_revised_spec(&fake);
    let mut editor = start_editor(&fake, "{}").await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "awaiting_approval").await;
    assert_eq!(editor.command("only").await, None);
    assert_eq!(
        editor.command(&format!("LooprApprove {plan_id}")).await,
        None
    );
    let records = wait_settled(&mut editor, 1 + 1 + 3).await;
    let windows: i64 = editor
        .lua("return #vim.api.nvim_tabpage_list_wins(0)")
        .await;
    assert_eq!(windows, 1, "specs and phases without review open no window");

    // The user reads the spec in a split beside their file and asks for a revision.
    let spec_record = records.iter().find(|r| r["type"] == "spec").expect("spec");
    let spec_id = spec_record["id"].as_str().expect("id").to_owned();
    let spec_md = spec_record["artifact_path"]
        .as_str()
        .expect("path")
        .to_owned();
    assert!(spec_md.contains("iterations/001"), "{spec_md}");
    editor
        .exec(&format!(
            "vim.cmd.edit('notes.txt') vim.cmd.vsplit({spec_md:?})"
        ))
        .await;
    let spec_window: i64 = editor.lua("return vim.api.nvim_get_current_win()").await;
    revise_current(&editor, "Split parsing from printing").await;
    editor
        .wait_event("LooprArtifactCreated", |data| {
            data["loop_id"] == spec_id.as_str() && data["iteration"] == 2
        })
        .await;
    wait_settled(&mut editor, 1 + 1 + 3 + 3).await;

    let shown: Value = editor
        .lua(&format!(
            "return {{ windows = #vim.api.nvim_tabpage_list_wins(0),
                      name = vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf({spec_window})) }}"
        ))
        .await;
    let name = shown["name"].as_str().expect("name");
    assert!(
        name.ends_with(&format!("loops/{spec_id}/iterations/002/artifacts/spec.md")),
        "the spec's window shows the revision: {shown}"
    );
    assert_eq!(
        shown["windows"], 2,
        "the new phases opened no windows: {shown}"
    );
    editor.quit().await;
}

/// The provider `:checkhealth` shows is the host's reading of the options and of Neovim's
/// environment as it is now: a key set with `:let` after the host started counts, and
/// options no loop could start with are an error naming the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkhealth_shows_the_provider_the_host_resolves_from_options_and_environment() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(
        &fake,
        "{ provider = 'openai', base_url = 'http://127.0.0.1:9/v1', api_key_env = 'OPENROUTER_API_KEY', models = { review = 'cheap-model' } }",
    )
    .await;
    let before = health_report(&editor).await;
    assert!(before.contains("provider: openai"), "{before}");
    assert!(
        before.contains("base URL: http://127.0.0.1:9/v1 (base_url option)"),
        "{before}"
    );
    assert!(before.contains("review: cheap-model"), "{before}");
    assert!(before.contains("plan: gpt-4.1"), "{before}");
    assert!(
        !before.contains("tool calls:"),
        "native tool calling goes unmentioned: {before}"
    );
    assert!(
        before.contains("OPENROUTER_API_KEY is not set (fine for a local server"),
        "{before}"
    );
    // A local server is asked for its context window; one that is down leaves the defaults.
    assert!(
        before.contains(
            "WARNING cannot ask the server for its context window: http://127.0.0.1:9/props: \
             connection refused"
        ),
        "{before}"
    );
    assert!(
        before.contains("max_tokens 8192 (default), context_budget 100000 (default)"),
        "{before}"
    );
    let key = "sk-or-never-shown-4711";
    assert_eq!(
        editor
            .command(&format!("let $OPENROUTER_API_KEY = '{key}'"))
            .await,
        None
    );
    let after = health_report(&editor).await;
    assert!(after.contains("OPENROUTER_API_KEY is set"), "{after}");
    assert!(!after.contains(key), "the key itself is never shown");
    editor.quit().await;

    let editor = start_editor(
        &fake,
        "{ provider = 'ollama', tool_protocol = 'markdown', tool_format = 'yaml' }",
    )
    .await;
    let ollama = health_report(&editor).await;
    assert!(ollama.contains("provider: ollama"), "{ollama}");
    assert!(
        ollama.contains("tool calls: markdown text protocol, calls as yaml"),
        "{ollama}"
    );
    assert!(
        ollama.contains("ERROR provider ollama needs a model: set model"),
        "{ollama}"
    );
    editor.quit().await;
}

async fn health_report(editor: &crate::nvim::TestNvim) -> String {
    assert_eq!(editor.command("checkhealth loopr").await, None);
    editor
        .lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
        .await
}
