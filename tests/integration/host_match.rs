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
    // Where :LooprInstall would download this version from (the `install_url` option here).
    let version = env!("CARGO_PKG_VERSION");
    editor
        .exec("require('loopr').setup({ install_url = 'http://mirror.invalid/loopr/' })")
        .await;
    assert_eq!(editor.command("checkhealth loopr").await, None);
    let report: String = editor.lua(HEALTH_REPORT).await;
    assert!(
        report.contains(&format!(
            "release for this system: http://mirror.invalid/loopr/v{version}/loopr-{version}-x86_64-unknown-linux-musl.tar.gz"
        )) || report.contains(&format!(
            "release for this system: http://mirror.invalid/loopr/v{version}/loopr-{version}-aarch64-unknown-linux-musl.tar.gz"
        )),
        "{report}"
    );
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

/// A binary that is no host of this protocol (here one that exits at once and, asked its
/// version, gives an old one without a protocol) is not run, and `:checkhealth` says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_that_never_says_its_protocol_is_not_run() {
    use std::os::unix::fs::PermissionsExt;
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    let script = editor.dirs.home.join("old-loopr");
    std::fs::write(
        &script,
        "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'loopr 0.0.9'; exit 0; fi\nexit 3\n",
    )
    .expect("write the script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    editor
        .exec(&format!(
            "require('loopr').setup({{ bin = {script:?} }})",
            script = script.display().to_string()
        ))
        .await;
    let refused = editor.command("LooprStatus").await.expect("not run");
    assert!(refused.contains("host exited (code 3)"), "{refused}");

    // The binary is started again by the report's questions, and exits again: said as an error.
    let _ = editor.command("checkhealth loopr").await;
    let report: String = editor.lua(HEALTH_REPORT).await;
    assert!(
        report.contains("host version: 0.0.9 (no protocol said), but the plugin is"),
        "{report}"
    );
    assert!(report.contains(":LooprInstall"), "{report}");
    editor.quit().await;
}

/// Neovim runs other commands while a host being started is asked its version (the wait lets
/// them in). Such a command waits for that same answer: it never sends to a host not yet
/// checked (here one that never answers, so a request sent to it would hang), the host is
/// started once, and both the command and the start that was waiting say why it is not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_arriving_while_the_host_is_asked_its_version_waits_for_that_answer() {
    use std::os::unix::fs::PermissionsExt;
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    let started = editor.dirs.home.join("started.fifo");
    super::code::mkfifo(&started);
    let launches = editor.dirs.home.join("launches");
    let received = editor.dirs.home.join("received");
    let script = editor.dirs.home.join("silent-loopr");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho launched >> {launches:?}\necho started > {started:?}\ncat > {received:?}\n"
        ),
    )
    .expect("write the script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // The script says it runs once the plugin has started it and is waiting for its `hello`.
    let ready = tokio::task::spawn_blocking(move || std::fs::read_to_string(started));
    editor
        .exec(&format!(
            "require('loopr').setup({{ bin = {script:?} }})
             require('loopr.host_match').HELLO_WAIT_MS = 3000
             vim.schedule(function()
               require('loopr.host').send('status', nil, function(_, err) first_error = err end)
             end)",
            script = script.display().to_string()
        ))
        .await;
    ready.await.expect("join").expect("the host was started");

    let nested = editor.command("LooprStatus").await.expect("not run");
    assert!(
        nested.contains("did not say its version within 3 s"),
        "{nested}"
    );
    let first: String = editor
        .lua("vim.wait(10000, function() return first_error ~= nil end) return first_error")
        .await;
    assert!(
        first.contains("did not say its version within 3 s"),
        "{first}"
    );
    let launched = std::fs::read_to_string(&launches).expect("launch log");
    assert_eq!(launched.lines().count(), 1, "{launched}");
    // It was sent its `hello` and nothing else.
    let sent =
        String::from_utf8_lossy(&std::fs::read(&received).expect("what it got")).into_owned();
    assert!(sent.contains("hello"), "{sent:?}");
    assert!(!sent.contains("status"), "{sent:?}");
    assert!(
        editor
            .lua::<bool>("return require('loopr.host').chan() == nil")
            .await,
        "the silent host is stopped"
    );
    editor.quit().await;
}
