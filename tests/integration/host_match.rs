//! The plugin runs only a host that speaks its wire protocol: it asks the host its version
//! and protocol before anything else, refuses one that differs (with the fix in
//! `:messages`) and keeps refusing it without starting it again; `:checkhealth loopr` shows
//! which binary runs, from where, and its version.

use crate::fake_llm::FakeLlm;
use crate::nvim::host_binary;
use crate::scenario::start_editor;

/// Lua that makes the plugin expect protocol 999, which no host speaks, and counts the jobs
/// it starts in `host_starts`.
const EXPECT_PROTOCOL_999: &str = "
    package.loaded['loopr.generated.version'] = { version = '0.1.0', protocol = 999 }
    host_starts = 0
    local jobstart = vim.fn.jobstart
    vim.fn.jobstart = function(...)
      host_starts = host_starts + 1
      return jobstart(...)
    end";

const HEALTH_REPORT: &str =
    "return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_of_another_protocol_is_refused_once_and_named_with_the_fix() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    editor.exec(EXPECT_PROTOCOL_999).await;
    let bin = host_binary().display().to_string();

    let first = editor.command("LooprStatus").await.expect("refused");
    for words in [
        bin.as_str(),
        &format!("{} (protocol 1)", env!("CARGO_PKG_VERSION")),
        "0.1.0 (protocol 999)",
        ":LooprInstall",
        "cargo build --release",
        "`bin` option",
    ] {
        assert!(first.contains(words), "{words:?} in {first}");
    }
    let messages: String = editor
        .lua("return vim.api.nvim_exec2('messages', { output = true }).output")
        .await;
    assert!(messages.contains(":LooprInstall"), "{messages}");
    assert!(
        editor
            .lua::<bool>("return require('loopr.host').chan() == nil")
            .await,
        "the refused host is stopped"
    );

    // The same binary is refused again, with the same words, without being started again.
    let second = editor.command("LooprStatus").await.expect("refused again");
    assert_eq!(second, first);
    assert_eq!(editor.lua::<i64>("return host_starts").await, 1);

    assert_eq!(editor.command("checkhealth loopr").await, None);
    let report: String = editor.lua(HEALTH_REPORT).await;
    assert!(report.contains("ERROR"), "{report}");
    assert!(report.contains("protocol 999"), "{report}");
    assert!(report.contains(":LooprInstall"), "{report}");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkhealth_shows_the_matching_host_its_origin_and_version() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    assert_eq!(editor.command("LooprStatus").await, None);
    assert_eq!(editor.command("checkhealth loopr").await, None);
    let report: String = editor.lua(HEALTH_REPORT).await;
    let bin = host_binary().display().to_string();
    assert!(
        report.contains(&format!("host binary: {bin} (the `bin` option)")),
        "{report}"
    );
    assert!(
        report.contains(&format!(
            "host version: {} (protocol 1), as the plugin expects",
            env!("CARGO_PKG_VERSION")
        )),
        "{report}"
    );
    assert!(!report.contains("ERROR"), "{report}");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_binary_runs_once_it_is_replaced_by_a_matching_one() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    let copy = editor.dirs.home.join("loopr-copy");
    std::fs::copy(host_binary(), &copy).expect("copy the host");
    editor
        .exec(&format!(
            "require('loopr').setup({{ bin = {copy:?} }})
             {EXPECT_PROTOCOL_999}",
            copy = copy.display().to_string()
        ))
        .await;
    let refused = editor.command("LooprStatus").await.expect("refused");
    assert!(refused.contains(":LooprInstall"), "{refused}");

    // The plugin now speaks the host's protocol, but the binary refused is the same file.
    editor
        .exec("package.loaded['loopr.generated.version'] = nil")
        .await;
    assert_eq!(editor.command("LooprStatus").await, Some(refused));

    // Installed anew (a rebuild, :LooprInstall), it is asked again and runs.
    std::fs::remove_file(&copy).expect("remove the copy");
    std::fs::copy(host_binary(), &copy).expect("copy the host again");
    assert_eq!(editor.command("LooprStatus").await, None);
    assert_eq!(editor.lua::<i64>("return host_starts").await, 2);
    editor.quit().await;
}
