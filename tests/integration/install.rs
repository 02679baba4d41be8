//! `:LooprInstall` as a `build` step runs it: `nvim --headless -c LooprInstall -c q` against a
//! release server on loopback that serves a tarball of the test build and its `SHA256SUMS`,
//! in a copy of the plugin (so the repository's own `bin/` is never written). What the user
//! sees is read from `:messages`; what is installed, from `bin/` and by running the plugin.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use crate::nvim::{home_env, host_binary, nvim_binary, plugin_root};
use crate::release_server::{ReleaseServer, Served};

const VERSION: &str = env!("CARGO_PKG_VERSION");
/// How long one headless Neovim may take before the test fails instead of hanging.
const NVIM_DEADLINE: Duration = Duration::from_secs(120);

/// The release target this machine's install asks for.
fn this_target() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "aarch64-unknown-linux-musl",
        _ => "x86_64-unknown-linux-musl",
    }
}

fn asset_name() -> String {
    format!("loopr-{VERSION}-{}.tar.gz", this_target())
}

fn asset_path() -> String {
    format!("/v{VERSION}/{}", asset_name())
}

fn sums_path() -> String {
    format!("/v{VERSION}/SHA256SUMS")
}

/// `loopr-<version>-<target>.tar.gz` holding the test build as `loopr`, made once per run.
fn release_tarball() -> &'static [u8] {
    static TARBALL: OnceLock<Vec<u8>> = OnceLock::new();
    TARBALL.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::copy(host_binary(), dir.path().join("loopr")).expect("copy the host");
        let tarball = dir.path().join("release.tar.gz");
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg("tar -cf - -C \"$1\" loopr | gzip -1 > \"$2\"")
            .arg("sh")
            .arg(dir.path())
            .arg(&tarball)
            .status()
            .expect("run tar");
        assert!(status.success(), "tar the host");
        std::fs::read(tarball).expect("read the tarball")
    })
}

fn sha256_hex(path: &Path) -> String {
    let output = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .next()
        .expect("a sum")
        .to_owned()
}

/// `SHA256SUMS` as `sha256sum` writes it, for `tarball` under its asset name.
fn sums_for(tarball: &[u8]) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join(asset_name());
    std::fs::write(&file, tarball).expect("write the asset");
    format!("{}  {}\n", sha256_hex(&file), asset_name()).into_bytes()
}

/// A copy of the plugin's Lua side (`plugin/`, `lua/`) in a temp dir: its root is where the
/// install writes `bin/`.
struct PluginCopy {
    temp: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    project: PathBuf,
}

impl PluginCopy {
    fn new() -> PluginCopy {
        let temp = tempfile::tempdir().expect("tempdir");
        let base = temp.path().canonicalize().expect("canonical temp");
        let root = base.join("loopr");
        for dir in ["plugin", "lua"] {
            copy_tree(&plugin_root().join(dir), &root.join(dir));
        }
        std::fs::copy(plugin_root().join("build.lua"), root.join("build.lua")).expect("build.lua");
        let home = base.join("home");
        std::fs::create_dir_all(home.join("tmp")).expect("home");
        // The project Neovim works in: a root marker, apart from Loopr's state.
        std::fs::create_dir_all(base.join("project/.git")).expect("project");
        PluginCopy {
            temp,
            root,
            home,
            project: base.join("project"),
        }
    }

    fn installed(&self) -> PathBuf {
        self.root.join("bin/loopr")
    }

    fn record(&self) -> serde_json::Value {
        let text =
            std::fs::read_to_string(self.root.join("bin/install.json")).expect("bin/install.json");
        serde_json::from_str(&text).expect("install.json is JSON")
    }

    /// Runs headless Neovim with this plugin, the `-c` commands `commands` and then returns
    /// what `:messages` held (plus what `report` Lua returned, as a line).
    async fn headless(&self, env: &[(&str, String)], commands: &[&str]) -> String {
        let out = self.temp.path().join("messages.txt");
        let _ = std::fs::remove_file(&out);
        let mut command = tokio::process::Command::new(nvim_binary());
        command
            .args(["--headless", "--clean", "-n", "--cmd"])
            .arg(format!("set rtp^={}", self.root.display()))
            .current_dir(&self.project);
        home_env(&mut command, &self.home)
            .env("LOOPR_HOME", self.home.join("loopr-state"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        for (name, value) in env {
            command.env(name, value);
        }
        for step in commands {
            command.arg("-c").arg(step);
        }
        command.arg("-c").arg(format!(
            "lua vim.fn.writefile(vim.split(vim.api.nvim_exec2('messages', {{ output = true }}).output, '\\n'), {:?})",
            out.display().to_string()
        ));
        command.args(["-c", "qa!"]);
        let status = tokio::time::timeout(NVIM_DEADLINE, command.status())
            .await
            .expect("headless Neovim ended in time")
            .expect("run headless Neovim");
        assert!(status.success(), "headless Neovim: {status}");
        std::fs::read_to_string(&out).expect("the messages Neovim wrote")
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            copy_tree(&path, &to.join(entry.file_name()));
        } else {
            std::fs::copy(&path, to.join(entry.file_name())).expect("copy");
        }
    }
}

/// The test build installed by hand as an earlier install would have, to see it survive.
fn install_old_binary(plugin: &PluginCopy) -> Vec<u8> {
    std::fs::create_dir_all(plugin.root.join("bin")).expect("bin");
    std::fs::copy(host_binary(), plugin.installed()).expect("old binary");
    std::fs::read(plugin.installed()).expect("read old binary")
}

/// Asserts `bin/loopr` is still `old`, byte for byte, and runs.
fn assert_old_binary_kept(plugin: &PluginCopy, old: &[u8]) {
    assert!(
        std::fs::read(plugin.installed()).expect("bin/loopr") == old,
        "bin/loopr is the old binary, byte for byte"
    );
    assert_runs(&plugin.installed());
}

/// Asserts the host at `bin/loopr` is whole and runs.
fn assert_runs(binary: &Path) {
    let output = std::process::Command::new(binary)
        .arg("--version")
        .output()
        .expect("run bin/loopr");
    assert!(
        output.status.success() && String::from_utf8_lossy(&output.stdout).contains(VERSION),
        "bin/loopr --version: {output:?}"
    );
}

/// A release server with `sums` as this version's SHA256SUMS and `asset` as its asset.
fn serve_release(sums: Vec<u8>, asset: Served) -> ReleaseServer {
    ReleaseServer::start(HashMap::from([
        (sums_path(), Served::Whole(sums)),
        (asset_path(), asset),
    ]))
}

/// A release server serving this version's release of the test build, checksummed.
fn serve_the_release() -> ReleaseServer {
    let tarball = release_tarball().to_vec();
    serve_release(sums_for(&tarball), Served::Whole(tarball))
}

/// `nvim --headless -c LooprInstall -c q` with `$LOOPR_INSTALL_URL` at `server`; its messages.
async fn install_from(plugin: &PluginCopy, server: &ReleaseServer) -> String {
    plugin
        .headless(
            &[("LOOPR_INSTALL_URL", server.base_url.clone())],
            &["LooprInstall"],
        )
        .await
}

/// `:LooprStatus` opened its window: the host answered it.
fn assert_status_opened(shown: &str) {
    assert!(
        shown
            .lines()
            .any(|line| line.starts_with("buffers: ") && line.contains("loopr://status")),
        "{shown}"
    );
}

/// What a user with this plugin sees from `:LooprStatus`, and the host that served it.
async fn status_through_plugin(plugin: &PluginCopy) -> String {
    plugin
        .headless(
            &[],
            &[
                "LooprStatus",
                "lua assert(vim.wait(30000, function() return require('loopr.host').outstanding() == 0 end, 10), 'host answered')",
                "lua print('host: ' .. vim.uv.fs_readlink('/proc/' .. require('loopr.host').pid() .. '/exe'))",
                "lua vim.wait(30000, function() return vim.fn.bufexists('loopr://status') == 1 end, 10)",
                "lua print('buffers: ' .. table.concat(vim.tbl_map(vim.api.nvim_buf_get_name, vim.api.nvim_list_bufs()), ' '))",
            ],
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_takes_the_release_checks_it_and_the_plugin_runs_it() {
    let server = serve_the_release();
    let plugin = PluginCopy::new();
    let setup = format!(
        "lua require('loopr').setup({{ install_url = {:?} }})",
        server.base_url
    );
    let messages = plugin.headless(&[], &[&setup, "LooprInstall"]).await;

    let asset_url = format!("{}{}", server.base_url, asset_path());
    assert!(
        messages.contains(&format!("Loopr: downloading {asset_url}")),
        "{messages}"
    );
    assert!(
        messages.contains(&format!(
            "Loopr: installed loopr {VERSION} from release {} (a release exists for {}) at {}",
            this_target(),
            this_target(),
            plugin.installed().display()
        )),
        "{messages}"
    );
    assert_runs(&plugin.installed());
    assert_eq!(
        plugin.record(),
        serde_json::json!({
            "version": VERSION,
            "from": "release",
            "target": this_target(),
            "reason": format!("a release exists for {}", this_target()),
            "url": asset_url,
        })
    );
    let leftovers: Vec<_> = std::fs::read_dir(plugin.root.join("bin"))
        .expect("bin")
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        leftovers.len(),
        2,
        "only loopr and install.json: {leftovers:?}"
    );

    let shown = status_through_plugin(&plugin).await;
    assert!(
        shown.contains(&format!("host: {}", plugin.installed().display())),
        "the plugin started bin/loopr:\n{shown}"
    );
    assert_status_opened(&shown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checksum_mismatch_installs_nothing_and_says_so() {
    let tarball = release_tarball().to_vec();
    let wrong = format!("{}  {}\n", "0".repeat(64), asset_name()).into_bytes();
    let server = serve_release(wrong, Served::Whole(tarball));
    let plugin = PluginCopy::new();
    let messages = install_from(&plugin, &server).await;

    assert!(
        messages.contains(&format!(
            "Loopr: checksum mismatch for {}: SHA256SUMS says {}, the download is ",
            asset_name(),
            "0".repeat(64)
        )) && messages.contains("; nothing installed"),
        "{messages}"
    );
    assert!(!plugin.installed().exists(), "nothing at bin/loopr");
    assert!(!plugin.root.join("bin/install.json").exists());
}

/// A stand-in `cargo` first on PATH: it records where and how it was run in `marker` and
/// "builds" the test host where cargo would put it.
struct StandInCargo {
    path: String,
    marker: PathBuf,
}

impl StandInCargo {
    fn new(plugin: &PluginCopy) -> StandInCargo {
        let tools = plugin.temp.path().join("tools");
        std::fs::create_dir_all(&tools).expect("tools");
        let marker = plugin.temp.path().join("cargo-ran");
        let cargo = tools.join("cargo");
        std::fs::write(
            &cargo,
            format!(
                "#!/bin/sh\necho \"$PWD: $*\" > {marker:?}\nmkdir -p target/release\ncp {host:?} target/release/loopr\n",
                host = host_binary().display().to_string(),
                marker = marker.display().to_string(),
            ),
        )
        .expect("write cargo");
        std::fs::set_permissions(&cargo, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod cargo");
        let path = format!(
            "{}:{}",
            tools.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        StandInCargo { path, marker }
    }

    /// Runs `install` (`LooprInstall` or `LooprInstall!`) against `server` with this cargo.
    async fn install(&self, plugin: &PluginCopy, server: &ReleaseServer, install: &str) -> String {
        self.install_with(plugin, server, install, &[]).await
    }

    /// As `install`, with `env` set too.
    async fn install_with(
        &self,
        plugin: &PluginCopy,
        server: &ReleaseServer,
        install: &str,
        env: &[(&str, String)],
    ) -> String {
        let mut all = vec![
            ("LOOPR_INSTALL_URL", server.base_url.clone()),
            ("PATH", self.path.clone()),
        ];
        all.extend(env.iter().cloned());
        plugin.headless(&all, &[install]).await
    }

    /// Asserts cargo ran `build --release` in the plugin root, and what it built is installed
    /// from source for `reason`, as the messages say.
    fn assert_installed(&self, plugin: &PluginCopy, messages: &str, reason: &str) {
        assert!(
            messages.contains(&format!(
                "Loopr: building from source with cargo build --release in {} ({reason})",
                plugin.root.display()
            )),
            "{messages}"
        );
        assert!(
            messages.contains(&format!(
                "Loopr: installed loopr {VERSION} from a source build ({reason}) at {}",
                plugin.installed().display()
            )),
            "{messages}"
        );
        assert_eq!(
            std::fs::read_to_string(&self.marker).expect("cargo ran"),
            format!("{}: build --release\n", plugin.root.display())
        );
        assert_runs(&plugin.installed());
        let record = plugin.record();
        assert_eq!(record["from"], "source");
        assert_eq!(record["reason"], reason);
        assert!(record.get("url").is_none(), "{record}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_release_falls_back_to_a_source_build() {
    let server = ReleaseServer::start(HashMap::new());
    let plugin = PluginCopy::new();
    let cargo = StandInCargo::new(&plugin);
    let messages = cargo.install(&plugin, &server, "LooprInstall").await;

    let reason = format!(
        "no release asset at {}{} (404)",
        server.base_url,
        sums_path()
    );
    cargo.assert_installed(&plugin, &messages, &reason);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_download_times_out_and_falls_back_to_a_source_build() {
    let server = ReleaseServer::start(HashMap::from([(sums_path(), Served::Stall)]));
    let plugin = PluginCopy::new();
    let cargo = StandInCargo::new(&plugin);
    let messages = cargo
        .install_with(
            &plugin,
            &server,
            "LooprInstall",
            &[("LOOPR_INSTALL_TIMEOUT", "2".to_owned())],
        )
        .await;

    let expected = format!(
        "no network: the download of {}{} timed out after 2 s (curl: (28) ",
        server.base_url,
        sums_path()
    );
    assert!(
        messages.contains(&format!(
            "Loopr: building from source with cargo build --release in {} ({expected}",
            plugin.root.display()
        )),
        "{messages}"
    );
    let reason = plugin.record()["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(reason.starts_with(&expected), "{reason}");
    cargo.assert_installed(&plugin, &messages, &reason);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_with_a_bang_builds_from_source_without_downloading() {
    let server = serve_the_release();
    let plugin = PluginCopy::new();
    let cargo = StandInCargo::new(&plugin);
    let messages = cargo.install(&plugin, &server, "LooprInstall!").await;

    cargo.assert_installed(&plugin, &messages, "a source build was asked for (!)");
    assert_eq!(
        server.requested(),
        Vec::<String>::new(),
        "nothing downloaded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_tarball_installs_nothing_and_keeps_the_old_binary() {
    let not_a_tarball = b"<html>a login page, not a release</html>".to_vec();
    let server = serve_release(sums_for(&not_a_tarball), Served::Whole(not_a_tarball));
    let plugin = PluginCopy::new();
    let old = install_old_binary(&plugin);
    let messages = install_from(&plugin, &server).await;

    assert!(
        messages.contains(&format!(
            "Loopr: {} is not a tarball holding loopr (",
            asset_name()
        )) && messages.contains("); nothing installed"),
        "{messages}"
    );
    assert_old_binary_kept(&plugin, &old);
    assert!(!plugin.root.join("bin/install.json").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_cut_off_halfway_leaves_the_old_binary_working() {
    let tarball = release_tarball().to_vec();
    let server = serve_release(sums_for(&tarball), Served::CutOffHalfway(tarball));
    let plugin = PluginCopy::new();
    let old = install_old_binary(&plugin);
    let messages = install_from(&plugin, &server).await;

    assert!(
        messages.contains(&format!(
            "Loopr: download of {}{} failed (curl: (18)",
            server.base_url,
            asset_path()
        )) && messages.contains("; the installed host is kept"),
        "{messages}"
    );
    assert_old_binary_kept(&plugin, &old);
    let shown = status_through_plugin(&plugin).await;
    assert_status_opened(&shown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_release_and_no_cargo_says_what_to_install() {
    let server = ReleaseServer::start(HashMap::new());
    let plugin = PluginCopy::new();
    let messages = plugin
        .headless(
            &[
                ("LOOPR_INSTALL_URL", server.base_url.clone()),
                ("PATH", path_without_cargo(&plugin)),
            ],
            &["LooprInstall"],
        )
        .await;

    assert!(
        messages.contains(&format!("Loopr: {}", no_cargo_error(&server))),
        "{messages}"
    );
    assert!(!plugin.installed().exists(), "nothing at bin/loopr");
}

/// A PATH with the tools a release install uses and no cargo.
fn path_without_cargo(plugin: &PluginCopy) -> String {
    let tools = plugin.temp.path().join("tools");
    std::fs::create_dir_all(&tools).expect("tools");
    for tool in ["curl", "tar", "gzip", "sha256sum"] {
        let found = which(tool);
        std::os::unix::fs::symlink(found, tools.join(tool)).expect("symlink a tool");
    }
    tools.display().to_string()
}

/// What the install says when `server` has no release and there is no cargo: the fix included.
fn no_cargo_error(server: &ReleaseServer) -> String {
    format!(
        "cannot build from source (no release asset at {}{} (404)): cargo is not on PATH; \
         install Rust from https://rustup.rs and run :LooprInstall! again",
        server.base_url,
        sums_path()
    )
}

/// Where `tool` is on the test's PATH.
fn which(tool: &str) -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join(tool))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{tool} on PATH"))
}

/// Runs the plugin's `build.lua` as lazy.nvim's runner does: loaded with `loadfile` and called
/// inside a coroutine that a check handle resumes on each turn of the event loop, each yielded
/// message recorded (lazy shows it as the build's status). Writes to `$LOOPR_BUILD_REPORT`, as
/// JSON, the messages (with whether `bin/loopr` existed when each came), the error the
/// coroutine raised, how often it was resumed, and what `bin/loopr --version` printed the
/// moment the coroutine ended.
const LAZY_STYLE_RUNNER: &str = r#"
local root = vim.env.LOOPR_PLUGIN_COPY
local binary = root .. '/bin/loopr'
local chunk = assert(loadfile(root .. '/build.lua'))
local co = coroutine.create(chunk)
local report = { yields = {}, resumes = 0 }
local function installed_version()
  if not vim.uv.fs_stat(binary) then
    return vim.NIL
  end
  return vim.trim(vim.system({ binary, '--version' }, { text = true }):wait().stdout)
end
local ended = false
local check = vim.uv.new_check()
check:start(vim.schedule_wrap(function()
  -- As lazy's runner: only a coroutine that yielded is resumed (not one still running).
  if ended or coroutine.status(co) ~= 'suspended' then
    return
  end
  report.resumes = report.resumes + 1
  local ok, yielded = coroutine.resume(co)
  if not ok then
    report.error = yielded
  elseif yielded then
    table.insert(report.yields, { message = yielded, installed = vim.uv.fs_stat(binary) ~= nil })
  end
  if coroutine.status(co) == 'dead' then
    ended = true
    check:stop()
    report.version_at_end = installed_version()
  end
end))
vim.wait(100000, function() return ended end, 10)
report.ended = ended
vim.fn.writefile({ vim.json.encode(report) }, vim.env.LOOPR_BUILD_REPORT)
"#;

/// `LAZY_STYLE_RUNNER` written into `plugin`'s temp dir: its path, where its report goes, and
/// the environment that tells it both, with `env` after.
fn lazy_style_runner<'env>(
    plugin: &PluginCopy,
    env: &[(&'env str, String)],
) -> (PathBuf, PathBuf, Vec<(&'env str, String)>) {
    let runner = plugin.temp.path().join("lazy_style_runner.lua");
    std::fs::write(&runner, LAZY_STYLE_RUNNER).expect("write the runner");
    let report = plugin.temp.path().join("build-report.json");
    let mut all = vec![
        ("LOOPR_PLUGIN_COPY", plugin.root.display().to_string()),
        ("LOOPR_BUILD_REPORT", report.display().to_string()),
    ];
    all.extend(env.iter().cloned());
    (runner, report, all)
}

/// The runner's report; `shown` (what Neovim said) explains a missing one.
fn read_runner_report(report: &Path, shown: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(report)
        .unwrap_or_else(|err| panic!("the runner's report: {err}\n{shown}"));
    serde_json::from_str(&text).expect("the report is JSON")
}

/// What `LAZY_STYLE_RUNNER` saw of `build.lua` in `plugin`, run with `env` in headless Neovim.
async fn build_as_lazy_runs_it(plugin: &PluginCopy, env: &[(&str, String)]) -> serde_json::Value {
    let (runner, report, env) = lazy_style_runner(plugin, env);
    let messages = plugin
        .headless(&env, &[&format!("luafile {}", runner.display())])
        .await;
    read_runner_report(&report, &messages)
}

/// As `build_as_lazy_runs_it`, in a Neovim with a UI attached, as lazy.nvim usually runs: the
/// runner is started over RPC once the UI is there.
async fn build_as_lazy_runs_it_with_a_ui(
    plugin: &PluginCopy,
    env: &[(&str, String)],
) -> serde_json::Value {
    let (runner, report, env) = lazy_style_runner(plugin, env);
    let mut command = tokio::process::Command::new(nvim_binary());
    command
        .args(["--embed", "--headless", "--clean", "-n", "--cmd"])
        .arg(format!("set rtp^={}", plugin.root.display()))
        .current_dir(&plugin.project);
    home_env(&mut command, &plugin.home)
        .env("LOOPR_HOME", plugin.home.join("loopr-state"))
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    for (name, value) in &env {
        command.env(name, value);
    }
    let (nvim, _io, _child) =
        nvim_rs::create::tokio::new_child_cmd(&mut command, nvim_rs::rpc::handler::Dummy::new())
            .await
            .expect("start nvim --embed");
    let mut options = nvim_rs::UiAttachOptions::new();
    options.set_linegrid_external(true);
    nvim.ui_attach(80, 24, &options).await.expect("ui_attach");
    let uis = nvim
        .exec_lua("return #vim.api.nvim_list_uis()", vec![])
        .await
        .expect("count the UIs");
    assert_eq!(uis.as_i64(), Some(1), "a UI is attached");
    tokio::time::timeout(
        NVIM_DEADLINE,
        nvim.command(&format!("luafile {}", runner.display())),
    )
    .await
    .expect("the runner ended in time")
    .expect("run the runner");
    read_runner_report(&report, "")
}

/// Asserts `report` shows `build.lua` yielding each step of installing `server`'s release in
/// `plugin` and ending only once `bin/loopr` is in place and runs.
fn assert_built_from_the_release(
    report: &serde_json::Value,
    plugin: &PluginCopy,
    server: &ReleaseServer,
) {
    assert_eq!(report["ended"], true, "{report}");
    assert!(report.get("error").is_none(), "{report}");
    let asset_url = format!("{}{}", server.base_url, asset_path());
    let messages: Vec<&str> = report["yields"]
        .as_array()
        .expect("yields")
        .iter()
        .map(|the| the["message"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        messages,
        [
            format!("downloading {asset_url}"),
            format!(
                "{} matches its SHA256SUMS checksum; unpacking it",
                asset_name()
            ),
            format!(
                "installed loopr {VERSION} from release {} (a release exists for {}) at {}",
                this_target(),
                this_target(),
                plugin.installed().display()
            ),
        ],
        "{report}"
    );
    assert_eq!(
        report["yields"][0]["installed"], false,
        "it yielded while the host was not yet there: {report}"
    );
    assert_eq!(report["yields"][2]["installed"], true, "{report}");
    assert!(
        report["resumes"].as_u64().unwrap_or_default() > 3,
        "the build gave the editor turns while it waited: {report}"
    );
    assert_eq!(
        report["version_at_end"],
        format!("loopr {VERSION} (protocol 1)"),
        "{report}"
    );
    assert_runs(&plugin.installed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_lua_in_lazys_coroutine_yields_progress_and_ends_once_the_host_runs() {
    let server = serve_the_release();
    let plugin = PluginCopy::new();
    let report =
        build_as_lazy_runs_it(&plugin, &[("LOOPR_INSTALL_URL", server.base_url.clone())]).await;

    assert_built_from_the_release(&report, &plugin, &server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_lua_under_lazy_with_a_ui_ends_only_once_the_host_runs() {
    let server = serve_the_release();
    let plugin = PluginCopy::new();
    let report =
        build_as_lazy_runs_it_with_a_ui(&plugin, &[("LOOPR_INSTALL_URL", server.base_url.clone())])
            .await;

    assert_built_from_the_release(&report, &plugin, &server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_lua_in_lazys_coroutine_raises_the_failure_with_its_fix() {
    let server = ReleaseServer::start(HashMap::new());
    let plugin = PluginCopy::new();
    let report = build_as_lazy_runs_it(
        &plugin,
        &[
            ("LOOPR_INSTALL_URL", server.base_url.clone()),
            ("PATH", path_without_cargo(&plugin)),
        ],
    )
    .await;

    assert_eq!(report["ended"], true, "{report}");
    assert_eq!(
        report["error"],
        format!("Loopr: {}", no_cargo_error(&server)),
        "{report}"
    );
    assert_eq!(
        report["yields"][0]["message"],
        format!("downloading {}{}", server.base_url, asset_path()),
        "{report}"
    );
    assert_eq!(report["version_at_end"], serde_json::Value::Null);
}

/// `nvim --headless -l build.lua` in the plugin copy with `env`: its exit status and what it
/// printed (stdout, then stderr).
async fn nvim_l_build(
    plugin: &PluginCopy,
    env: &[(&str, String)],
) -> (std::process::ExitStatus, String) {
    let mut command = tokio::process::Command::new(nvim_binary());
    command
        .args(["--headless", "-l", "build.lua"])
        .current_dir(&plugin.root);
    home_env(&mut command, &plugin.home)
        .env("LOOPR_HOME", plugin.home.join("loopr-state"))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    for (name, value) in env {
        command.env(name, value);
    }
    let output = tokio::time::timeout(NVIM_DEADLINE, command.output())
        .await
        .expect("nvim -l build.lua ended in time")
        .expect("run nvim -l build.lua");
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status, shown)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nvim_l_build_lua_installs_the_release() {
    let server = serve_the_release();
    let plugin = PluginCopy::new();
    let (status, shown) =
        nvim_l_build(&plugin, &[("LOOPR_INSTALL_URL", server.base_url.clone())]).await;

    assert!(status.success(), "{status}: {shown}");
    assert!(
        shown.contains(&format!(
            "Loopr: downloading {}{}",
            server.base_url,
            asset_path()
        )) && shown.contains(&format!(
            "Loopr: installed loopr {VERSION} from release {}",
            this_target()
        )),
        "{shown}"
    );
    assert_runs(&plugin.installed());
    assert_eq!(plugin.record()["from"], "release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nvim_l_build_lua_fails_with_the_fix_when_the_install_fails() {
    let server = ReleaseServer::start(HashMap::new());
    let plugin = PluginCopy::new();
    let (status, shown) = nvim_l_build(
        &plugin,
        &[
            ("LOOPR_INSTALL_URL", server.base_url.clone()),
            ("PATH", path_without_cargo(&plugin)),
        ],
    )
    .await;

    assert!(!status.success(), "{status}: {shown}");
    assert!(
        shown.contains(&format!("Loopr: {}", no_cargo_error(&server))),
        "{shown}"
    );
    assert!(!plugin.installed().exists(), "nothing at bin/loopr");
}

/// The repository as a plugin manager names it: `owner/name` of Cargo.toml's `repository`.
fn repository_name() -> &'static str {
    env!("CARGO_PKG_REPOSITORY")
        .strip_prefix("https://github.com/")
        .expect("Cargo.toml's repository is on GitHub")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_release_url_and_the_readme_name_cargo_tomls_repository() {
    let plugin = PluginCopy::new();
    let messages = plugin
        .headless(
            &[],
            &["lua print('asset: ' .. require('loopr.install').asset_url(require('loopr.generated.version').version, 'x86_64-unknown-linux-musl'))"],
        )
        .await;

    assert!(
        messages.contains(&format!(
            "asset: {}/releases/download/v{VERSION}/loopr-{VERSION}-x86_64-unknown-linux-musl.tar.gz",
            env!("CARGO_PKG_REPOSITORY")
        )),
        "{messages}"
    );
    let readme = std::fs::read_to_string(plugin_root().join("README.md")).expect("README.md");
    assert!(
        readme.contains(&format!("\"{}\",", repository_name())),
        "the README's lazy.nvim spec names {}",
        repository_name()
    );
    let help = std::fs::read_to_string(plugin_root().join("doc/loopr.txt")).expect("doc/loopr.txt");
    assert!(
        help.contains(&format!("\"{}\",", repository_name())),
        "the help's lazy.nvim spec names {}",
        repository_name()
    );
}
