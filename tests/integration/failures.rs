//! What a user sees when loops fail, wait or are left running: the failure's line names the
//! loop, the reason's head and the way on; a retry takes the failed loop others wait on; and
//! quitting with loops under way says so once.

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, error_reply};
use crate::nvim::TestNvim;
use crate::scenario::{
    create_plan_turn, plan_route, push_specs_and_phases, spec_route, start_editor, start_editor_at,
    valid_plan, wait_all_complete,
};

/// The command line as the screen shows it (the last screen row), trailing blanks cut,
/// waiting (and handling events meanwhile) until it contains `needle`.
async fn command_line_with(editor: &TestNvim, needle: &str) -> String {
    editor
        .lua(&format!(
            "local function row()
               local cells = {{}}
               for col = 1, vim.o.columns do
                 cells[col] = vim.fn.screenstring(vim.o.lines, col)
               end
               return (table.concat(cells):gsub('%s+$', ''))
             end
             vim.wait(10000, function() return row():find({needle:?}, 1, true) ~= nil end, 10)
             return row()"
        ))
        .await
}

/// :messages once it holds `needle` (waiting, and handling events meanwhile).
async fn messages_with(editor: &TestNvim, needle: &str) -> String {
    editor
        .lua(&format!(
            "local function said()
               return vim.api.nvim_exec2('messages', {{ output = true }}).output
             end
             vim.wait(10000, function() return said():find({needle:?}, 1, true) ~= nil end, 10)
             return said()"
        ))
        .await
}

async fn messages(editor: &TestNvim) -> String {
    editor
        .lua("return vim.api.nvim_exec2('messages', { output = true }).output")
        .await
}

/// A model API nobody listens on: every request is refused.
fn refusing_base_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    drop(listener);
    format!("http://{address}")
}

/// A failure's one line (100 columns, as a split terminal has) names the loop by its task,
/// keeps the reason's head and ends with the way on, never the loop's id; the whole text,
/// what the line leaves out included, is in :messages, and no prompt waits for a key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_line_names_the_loop_its_reason_and_the_way_on() {
    let mut editor = start_editor_at(refusing_base_url(), "{ max_retries = 1 }", Vec::new()).await;
    editor.attach_ui(100, 24).await;
    let loop_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&loop_id, "failed").await;

    let line = command_line_with(&editor, ":LooprRetry").await;
    assert!(
        line.starts_with("Loopr: plan \"Add a --version flag\" failed: model re"),
        "the loop by its task, then the reason's head: {line:?}"
    );
    assert!(
        line.ends_with(":LooprRetry or R in :LooprStatus"),
        "the way on stays in the part that shows: {line:?}"
    );
    assert!(!line.contains(&loop_id), "no id: {line:?}");
    assert!(line.chars().count() < 100, "{line:?}");
    let (_, blocking) = editor.mode().await;
    assert!(!blocking, "no hit-enter prompt");
    let history = messages(&editor).await;
    let whole = history
        .lines()
        .find(|message| message.contains("failed: model request failed"))
        .unwrap_or_else(|| panic!("the failure is in :messages: {history}"));
    assert!(
        whole.contains("cannot reach the model API")
            && whole.contains("(after 2 attempts)")
            && whole.ends_with(":LooprRetry or R in :LooprStatus"),
        "the whole message, with the way on: {whole}"
    );
    editor.quit().await;
}

fn status_row<'a>(records: &'a [Value], name: &str) -> &'a Value {
    records
        .iter()
        .find(|record| record["name"] == name)
        .unwrap_or_else(|| panic!("no loop {name}: {records:#?}"))
}

/// While a spec runs, the spec that depends on it waits, and its row says for what. The spec
/// fails and the dependent fails for it; `:LooprRetry` without an id retries the spec the
/// other waits on (not the dependent, which would wait forever behind it), the dependent
/// waits again, and both complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_without_an_id_takes_the_failed_root_and_a_waiting_loop_says_what_it_waits_for() {
    let fake = FakeLlm::start().await;
    fake.push_routed(plan_route(), create_plan_turn("toolu_plan", valid_plan()));
    let (refusal, release) =
        error_reply(400, "invalid_request_error", "the spec request was refused").held();
    fake.push_routed(&spec_route("version-flag"), refusal);
    push_specs_and_phases(
        &fake,
        &[
            ("version-flag", ["parse-flag", "print-version", "exit-code"]),
            ("version-docs", ["readme", "changelog", "help-text"]),
        ],
    );
    let mut editor = start_editor(&fake, "{}").await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "awaiting_approval").await;
    assert_eq!(editor.command("LooprApprove").await, None);
    fake.wait_for_requests(2).await;

    let records = editor.status_records().await;
    let docs = status_row(&records, "version-docs");
    assert_eq!(
        (&docs["status"], &docs["waits_for"]),
        (&json!("pending"), &json!("waits for spec \"version-flag\"")),
        "{docs:#}"
    );
    let docs_id = docs["id"].as_str().expect("id").to_owned();
    assert_eq!(editor.command("LooprStatus").await, None);
    let shown: Vec<String> = editor
        .lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)")
        .await;
    assert!(
        shown.iter().any(|line| line.contains("version-docs")
            && line.contains("waits for spec \"version-flag\"")),
        "the status window says what the spec waits for: {shown:#?}"
    );

    release.notify_one();
    editor.wait_status(&docs_id, "failed").await;
    // Both failures were told (before the retry, which reports only its own errors).
    messages_with(&editor, "its dependency version-flag ended failed").await;
    assert_eq!(editor.command("LooprRetry").await, None);
    let history = messages(&editor).await;
    assert!(
        history.contains("Loopr: retrying spec \"version-flag\""),
        "the failed root is retried: {history}"
    );
    editor.wait_status(&docs_id, "pending").await;
    wait_all_complete(&mut editor, 1 + 2 + 6).await;
    editor.quit().await;
}

/// `:qa` while one plan runs and another awaits review: one message says so and that they go
/// on next time (read from 'verbosefile', where Neovim writes every message it shows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quitting_with_loops_under_way_says_so_once() {
    let fake = FakeLlm::start().await;
    fake.push(create_plan_turn("toolu_plan", valid_plan()));
    let (held, _release) = create_plan_turn("toolu_plan_2", valid_plan()).held();
    fake.push(held);
    let mut editor = start_editor(&fake, "{}").await;
    let first = editor.plan("Add a --version flag").await;
    editor.wait_status(&first, "awaiting_approval").await;
    let _second = editor.plan("Add a --help flag").await;
    fake.wait_for_requests(2).await;
    let said = editor.dirs.home.join("said-on-quit.txt");
    editor
        .exec(&format!(
            "vim.o.verbosefile = {:?}",
            said.display().to_string()
        ))
        .await;

    let _dirs = editor.quit().await;
    let text = std::fs::read_to_string(&said).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("open this project again"))
        .collect();
    assert_eq!(
        lines,
        [
            "Loopr: 1 loop running and 1 awaiting approval; they go on when you open this \
             project again (:LooprStatus)"
        ],
        "{text}"
    );
}

/// A loop that fails while the current buffer belongs to another project is still named, with
/// its way on, and asking about it opens no state for that other project; a review buffer's
/// hint stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_seen_from_another_projects_buffer_is_named_and_opens_no_state_there() {
    let mut editor = start_editor_at(refusing_base_url(), "{ max_retries = 1 }", Vec::new()).await;
    let loop_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&loop_id, "failed").await;
    let state_before: Vec<_> = std::fs::read_dir(&editor.dirs.loopr_home)
        .expect("loopr home")
        .map(|entry| entry.expect("entry").file_name())
        .collect();

    let other = editor.dirs.temp.path().join("other");
    std::fs::create_dir_all(other.join(".git")).expect("another project");
    let project = editor.dirs.project.display().to_string();
    editor
        .exec(&format!(
            "vim.cmd.edit(vim.fn.fnameescape({:?}))
             vim.cmd('messages clear')
             require('loopr').retry({loop_id:?}, {{ root = {project:?} }})",
            other.join("notes.txt").display().to_string()
        ))
        .await;
    let said = messages_with(&editor, "failed:").await;
    let failure = said
        .lines()
        .find(|line| line.contains("failed:"))
        .unwrap_or_else(|| panic!("the failure is told: {said}"));
    assert!(
        failure.starts_with("Loopr: plan \"Add a --version flag\" failed:")
            && failure.ends_with(":LooprRetry or R in :LooprStatus"),
        "named by its task, with the way on: {failure}"
    );
    let state_after: Vec<_> = std::fs::read_dir(&editor.dirs.loopr_home)
        .expect("loopr home")
        .map(|entry| entry.expect("entry").file_name())
        .collect();
    assert_eq!(state_before, state_after, "no state for the other project");
    editor.quit().await;
}

/// When `:LooprRetry` alone would take another loop, the way on names the loop by the name
/// the command reads (short enough to stay on a failure's line), not by its id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_way_on_names_a_loop_a_plain_retry_would_not_take_by_its_name() {
    let mut editor = start_editor_at(refusing_base_url(), "{ max_retries = 1 }", Vec::new()).await;
    let older = editor.plan("Add a --version flag").await;
    editor.wait_status(&older, "failed").await;
    let newer = editor.plan("Print the help in colour").await;
    editor.wait_status(&newer, "failed").await;
    let rows = editor.status_records().await;
    let way_on = |id: &str| {
        rows.iter()
            .find(|row| row["id"] == id)
            .and_then(|row| row["way_on"].as_str())
            .map(str::to_owned)
    };
    assert_eq!(
        way_on(&newer).as_deref(),
        Some(":LooprRetry or R in :LooprStatus")
    );
    assert_eq!(
        way_on(&older).as_deref(),
        Some(":LooprRetry Add_a_--version_flag or R in :LooprStatus")
    );
    assert_eq!(
        editor.command("LooprRetry Add_a_--version_flag").await,
        None
    );
    editor.wait_status(&older, "running").await;
    editor.quit().await;
}

/// A real terminal Neovim: `nvim --remote-ui` in a tmux session, drawing the test's Neovim
/// (listening on a socket) as a user's terminal would. Dropped, the session goes.
struct TerminalUi {
    server: String,
}

impl TerminalUi {
    fn attach(editor_socket: &std::path::Path, tag: &str) -> TerminalUi {
        let server = format!("loopr-test-{tag}-{}", std::process::id());
        let started = std::process::Command::new("tmux")
            .args(["-L", &server, "new-session", "-d", "-x", "120", "-y", "30"])
            .arg(format!(
                "{} --server {} --remote-ui",
                crate::nvim::nvim_binary().display(),
                editor_socket.display()
            ))
            .status()
            .expect("tmux runs (scripts/test.sh installs it)");
        assert!(started.success(), "tmux new-session");
        TerminalUi { server }
    }

    fn tmux(&self, args: &[&str]) -> String {
        let output = std::process::Command::new("tmux")
            .args(["-L", &self.server])
            .args(args)
            .output()
            .expect("tmux");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The screen as the terminal shows it, once it shows `needle` (or after 10 s).
    async fn screen_with(&self, needle: &str) -> String {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let screen = self.tmux(&["capture-pane", "-p"]);
            if screen.contains(needle) || tokio::time::Instant::now() > deadline {
                return screen;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

impl Drop for TerminalUi {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

/// In a terminal, what Neovim echoes as it exits goes with its screen: `:qa` with a loop under
/// way asks once, on the screen, before the screen goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quitting_a_terminal_neovim_with_a_loop_under_way_says_so_on_its_screen() {
    let fake = FakeLlm::start().await;
    let (held, _release) = create_plan_turn("toolu_plan", valid_plan()).held();
    fake.push(held);
    let mut editor = start_editor(&fake, "{}").await;
    let _plan = editor.plan("Add a --version flag").await;
    fake.wait_for_requests(1).await;
    let socket = editor.dirs.temp.path().join("nvim.sock");
    editor
        .exec(&format!(
            "vim.fn.serverstart({:?})",
            socket.display().to_string()
        ))
        .await;
    let terminal = TerminalUi::attach(&socket, "quit");
    let attached: bool = editor
        .lua(
            "return vim.wait(10000, function()
               return #vim.tbl_filter(function(ui) return (ui.term_name or '') ~= '' end, vim.api.nvim_list_uis()) > 0
             end, 10)",
        )
        .await;
    assert!(attached, "the terminal UI attached");

    terminal.tmux(&["send-keys", ":qa", "Enter"]);
    let said = "they go on when you open this project again";
    let screen = terminal.screen_with("[O]K").await;
    assert_eq!(screen.matches(said).count(), 1, "{screen}");
    assert!(screen.contains("Loopr: 1 loop running; "), "{screen}");
    terminal.tmux(&["send-keys", "Enter"]);
    let _dirs = editor.quit().await;
}
