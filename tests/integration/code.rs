use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply, TurnBuilder};
use crate::nvim::TestNvim;
use crate::scenario::{
    AUTO_APPROVE, code_route, complete_phase_turn, killed_at_request, requests_routed,
    run_code_loop, stalled_turn, tool_results, tool_turn,
};

/// Plans and approves a one-spec hierarchy whose phase `print-version` is validated by
/// `validation`; returns when every loop is complete.
pub(super) async fn planned_editor(fake: &FakeLlm, setup: &str, validation: &str) -> TestNvim {
    crate::scenario::planned_one_spec(fake, setup, |phase| {
        (phase == "print-version").then(|| validation.to_owned())
    })
    .await
}

/// An auto-approving `planned_editor` with src/main.rs open in the current window; returns
/// it and main.rs's path.
async fn main_open_in_planned_editor(fake: &FakeLlm) -> (TestNvim, std::path::PathBuf) {
    let editor = planned_editor(fake, AUTO_APPROVE, "true").await;
    let main = editor.dirs.project.join("src/main.rs");
    edit(&editor, &main).await;
    (editor, main)
}

/// The model's edit of src/main.rs that greets with "bye" instead of "hello".
fn bye_edit() -> Value {
    json!({"path": "src/main.rs", "old_string": "\"hello\"", "new_string": "\"bye\""})
}

/// The model's turn that makes the `bye_edit` and says the phase is done.
fn bye_and_complete() -> Reply {
    TurnBuilder::new()
        .tool_use("e1", "edit_file", bye_edit())
        .tool_use(
            "done",
            "complete_phase",
            json!({"summary": "greets differently"}),
        )
        .reply()
}

/// The bodies of the requests of print-version's code loop.
fn print_version_requests(fake: &FakeLlm) -> Vec<Value> {
    requests_routed(fake, &code_route("print-version"))
}

/// Opens `path` in the current window.
async fn edit(editor: &TestNvim, path: &std::path::Path) {
    editor
        .exec(&format!("vim.cmd.edit({:?})", path.display().to_string()))
        .await;
}

/// Adds an unsaved line at the top of the current buffer.
async fn type_unsaved_note(editor: &TestNvim) {
    editor
        .exec("vim.api.nvim_buf_set_lines(0, 0, 0, false, { '// my unsaved note' })")
        .await;
}

/// Checks that the tool result `result` refused a change for a buffer's unsaved changes.
fn assert_refused_for_unsaved_changes(result: &Value) {
    assert_eq!(result["is_error"], true, "{result}");
    assert!(
        result["content"]
            .as_str()
            .expect("text")
            .contains("unsaved changes"),
        "{result}"
    );
}

/// Accepts the change or command the approval request `asked` is about.
pub(super) async fn accept(editor: &TestNvim, asked: &Value) {
    editor
        .exec(&format!(
            "require('loopr.approvals').answer({}, 'accept')",
            asked["id"]
        ))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_validation_fills_the_quickfix_list_and_the_next_iteration_passes() {
    let fake = FakeLlm::start().await;
    let validation = "grep -q CARGO_PKG_VERSION src/main.rs || { echo 'src/main.rs:2:5: error: the version is not printed'; exit 1; }";
    let mut editor = planned_editor(&fake, AUTO_APPROVE, validation).await;
    let step = crate::scenario::edit_main_and_complete;
    fake.push_routed(
        &code_route("print-version"),
        step("e1", "\"hello\"", "\"version\""),
    );
    fake.push_routed(
        &code_route("print-version"),
        step(
            "e2",
            "println!(\"version\");",
            "println!(\"{}\", env!(\"CARGO_PKG_VERSION\"));",
        ),
    );

    let code_id = run_code_loop(&mut editor, "print-version").await;
    let failed = editor
        .wait_event("LooprValidation", |data| data["passed"] == false)
        .await;
    assert_eq!(failed["iteration"], 1);
    assert_eq!(failed["phase"], "print-version");
    let list: Value = editor
        .lua(
            "local list = vim.fn.getqflist({ title = 1, items = 1 })
             local items = {}
             for _, item in ipairs(list.items) do
               if item.valid == 1 then
                 table.insert(items, { file = vim.api.nvim_buf_get_name(item.bufnr), lnum = item.lnum, col = item.col, text = item.text })
               end
             end
             return { title = list.title, items = items }",
        )
        .await;
    assert_eq!(list["title"], "Loopr: print-version validation");
    let project = editor.dirs.project.display().to_string();
    assert_eq!(
        list["items"],
        json!([{"file": format!("{project}/src/main.rs"), "lnum": 2, "col": 5, "text": " error: the version is not printed"}]),
        "parsed with Neovim's errorformat"
    );
    let passed = editor
        .wait_event("LooprValidation", |data| data["passed"] == true)
        .await;
    assert_eq!(passed["iteration"], 2);
    editor.wait_status(&code_id, "complete").await;
    let main = std::fs::read_to_string(editor.dirs.project.join("src/main.rs")).expect("main.rs");
    assert!(main.contains("env!(\"CARGO_PKG_VERSION\")"), "{main}");
    let records = editor.status_records().await;
    let code = records
        .iter()
        .find(|r| r["type"] == "code")
        .expect("code loop");
    assert_eq!(
        (code["iteration"].clone(), code["name"].clone()),
        (json!(2), json!("print-version"))
    );

    // The transcript shows both validation runs, in order, the failure's output with it.
    crate::scenario::watch_transcripts(&editor).await;
    let buf = crate::scenario::open_transcript(&editor, Some(&code_id)).await;
    let transcript = crate::scenario::transcript_with(&mut editor, buf, "Validation passed").await;
    let failed_at = transcript
        .find("Validation failed")
        .expect("the failed run");
    let passed_at = transcript
        .find("Validation passed")
        .expect("the passed run");
    assert!(failed_at < passed_at, "{transcript}");
    assert!(
        transcript[failed_at..passed_at].contains("error: the version is not printed"),
        "{transcript}"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejecting_an_edit_returns_the_users_reason_to_the_model() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, "{ approve_validation = true }", "true").await;
    fake.push_routed(
        &code_route("print-version"),
        TurnBuilder::new()
            .tool_use("e1", "edit_file", bye_edit())
            .reply(),
    );
    fake.push_routed(
        &code_route("print-version"),
        complete_phase_turn("left main.rs alone as asked"),
    );

    let code_id = run_code_loop(&mut editor, "print-version").await;
    let asked = editor.wait_event("LooprApprovalRequested", |_| true).await;
    assert_eq!(
        (asked["kind"].clone(), asked["subject"].clone()),
        (json!("edit"), json!("src/main.rs"))
    );
    let shown: Value = editor
        .lua(&format!(
            "local name = 'loopr://approval/{}'
             for _, buf in ipairs(vim.api.nvim_list_bufs()) do
               if vim.api.nvim_buf_get_name(buf) == name then
                 return {{ ft = vim.bo[buf].filetype, text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\\n') }}
               end
             end
             return vim.NIL",
            asked["id"]
        ))
        .await;
    assert_eq!(shown["ft"], "diff", "{shown}");
    assert!(
        shown["text"]
            .as_str()
            .expect("text")
            .contains("+    println!(\"bye\");"),
        "{shown}"
    );
    editor
        .exec(&format!(
            "require('loopr.approvals').answer({}, 'reject', 'keep the greeting, print the version elsewhere')",
            asked["id"]
        ))
        .await;
    // The validation command the model wrote, asked about as approve_validation wants.
    let validation = editor
        .wait_event("LooprApprovalRequested", |data| data["kind"] == "command")
        .await;
    assert_eq!(validation["subject"], "true");
    accept(&editor, &validation).await;
    editor.wait_status(&code_id, "complete").await;

    let requests = print_version_requests(&fake);
    let results = tool_results(&requests[1]);
    assert_eq!(results[0]["is_error"], true);
    assert_eq!(
        results[0]["content"],
        "edit_file failed: the user rejected this change: keep the greeting, print the version elsewhere"
    );
    let main = std::fs::read_to_string(editor.dirs.project.join("src/main.rs")).expect("main.rs");
    assert!(main.contains("\"hello\""), "nothing was written: {main}");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_to_an_open_file_lands_in_its_buffer_and_u_undoes_it() {
    let fake = FakeLlm::start().await;
    let (mut editor, main) = main_open_in_planned_editor(&fake).await;
    fake.push_routed(&code_route("print-version"), bye_and_complete());
    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code_id, "complete").await;

    let line: String = editor
        .lua("return vim.api.nvim_buf_get_lines(0, 1, 2, false)[1]")
        .await;
    assert_eq!(line, "    println!(\"bye\");", "the buffer shows the edit");
    assert!(
        std::fs::read_to_string(&main)
            .expect("read")
            .contains("\"bye\""),
        "and it was saved"
    );
    assert_eq!(editor.command("normal! u").await, None);
    let undone: String = editor
        .lua("return vim.api.nvim_buf_get_lines(0, 1, 2, false)[1]")
        .await;
    assert_eq!(
        undone, "    println!(\"hello\");",
        "u undoes the model's edit"
    );
    editor.quit().await;
}

/// Runs `code` with `buf` as the current buffer and returns what it returns.
async fn in_buffer<T: serde::de::DeserializeOwned>(editor: &TestNvim, buf: i64, code: &str) -> T {
    editor
        .lua(&format!(
            "return vim.api.nvim_buf_call({buf}, function() {code} end)"
        ))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_loaded_hidden_buffer_u_after_undo_brings_back_the_loops_edit_then_the_original() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, AUTO_APPROVE, "true").await;
    let main = editor.dirs.project.join("src/main.rs");
    // Loaded, but shown in no window.
    let buf: i64 = editor
        .lua(&format!(
            "local buf = vim.fn.bufadd({:?}) vim.fn.bufload(buf) return buf",
            main.display().to_string()
        ))
        .await;
    let shown: i64 = editor
        .lua(&format!("return #vim.fn.win_findbuf({buf})"))
        .await;
    assert_eq!(shown, 0, "the buffer is hidden");
    fake.push_routed(&code_route("print-version"), bye_and_complete());
    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code_id, "complete").await;
    let greeting = "return vim.api.nvim_buf_get_lines(0, 1, 2, false)[1]";
    let line: String = in_buffer(&editor, buf, greeting).await;
    assert_eq!(
        line, "    println!(\"bye\");",
        "the hidden buffer took the edit"
    );

    assert_eq!(editor.command("LooprUndo print-version").await, None);
    let line: String = in_buffer(&editor, buf, greeting).await;
    assert_eq!(
        line, "    println!(\"hello\");",
        "the restore went into the buffer"
    );
    let undo_steps: i64 = editor
        .lua(&format!("return #vim.fn.undotree({buf}).entries"))
        .await;
    assert_eq!(
        undo_steps, 2,
        "the edit and the restore are separate undo steps"
    );

    let line: String = in_buffer(&editor, buf, &format!("vim.cmd('silent undo') {greeting}")).await;
    assert_eq!(line, "    println!(\"bye\");", "u takes the restore back");
    let line: String = in_buffer(&editor, buf, &format!("vim.cmd('silent undo') {greeting}")).await;
    assert_eq!(
        line, "    println!(\"hello\");",
        "another u takes the loop's edit back"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_to_a_buffer_with_unsaved_changes_is_not_applied() {
    let fake = FakeLlm::start().await;
    let (mut editor, main) = main_open_in_planned_editor(&fake).await;
    type_unsaved_note(&editor).await;
    fake.push_routed(
        &code_route("print-version"),
        TurnBuilder::new()
            .tool_use("e1", "edit_file", bye_edit())
            .reply(),
    );
    fake.push_routed(
        &code_route("print-version"),
        complete_phase_turn("could not edit"),
    );
    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code_id, "complete").await;

    let requests = print_version_requests(&fake);
    assert_refused_for_unsaved_changes(&tool_results(&requests[1])[0]);
    let lines: Vec<String> = editor
        .lua("return vim.api.nvim_buf_get_lines(0, 0, 3, false)")
        .await;
    assert_eq!(
        lines,
        vec![
            "// my unsaved note",
            "fn main() {",
            "    println!(\"hello\");"
        ]
    );
    assert!(
        std::fs::read_to_string(&main)
            .expect("read")
            .contains("\"hello\""),
        "the file was not written behind the buffer"
    );
    editor.quit().await;
}

/// Keeps every `vim.notify` message in `_G.loopr_notes` instead of showing it.
pub(super) async fn capture_notifications(editor: &TestNvim) {
    editor
        .exec(
            "_G.loopr_notes = {} vim.notify = function(msg) table.insert(_G.loopr_notes, msg) end",
        )
        .await;
}

pub(super) async fn notifications(editor: &TestNvim) -> Vec<String> {
    editor.lua("return _G.loopr_notes").await
}

async fn quickfix_files(editor: &TestNvim) -> Vec<String> {
    editor
        .lua(
            "local files = {}
             for _, item in ipairs(vim.fn.getqflist()) do
               table.insert(files, vim.fn.fnamemodify(vim.api.nvim_buf_get_name(item.bufnr), ':.'))
             end
             return files",
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_changes_list_and_undo_cover_only_the_loops_changes_and_spare_the_users() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, AUTO_APPROVE, "true").await;
    fake.push_routed(
        &code_route("print-version"),
        TurnBuilder::new()
            .tool_use("e1", "edit_file", bye_edit())
            .tool_use("w1", "write_file", json!({"path": "src/version.rs", "content": "pub const VERSION: &str = \"0.3.1\";\n"}))
            .tool_use("c1", "run_command", json!({"command": "echo generated > generated.txt"}))
            .tool_use("done", "complete_phase", json!({"summary": "three changes"}))
            .reply(),
    );
    let project = editor.dirs.project.clone();
    let read = |path: &str| std::fs::read_to_string(project.join(path)).ok();
    let main_before = read("src/main.rs").expect("main.rs");
    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code_id, "complete").await;

    assert_eq!(editor.command("LooprChanges print-version").await, None);
    let list: Value = editor
        .lua(
            "local list = vim.fn.getqflist({ title = 1, items = 1 })
             local items = {}
             for _, item in ipairs(list.items) do
               table.insert(items, { file = vim.fn.fnamemodify(vim.api.nvim_buf_get_name(item.bufnr), ':.'), lnum = item.lnum, text = item.text })
             end
             return { title = list.title, items = items }",
        )
        .await;
    assert_eq!(list["title"], "Loopr: print-version changes");
    assert_eq!(
        list["items"],
        json!([
            {"file": "generated.txt", "lnum": 1, "text": "added: generated"},
            {"file": "src/main.rs", "lnum": 2, "text": "modified: @@ -2,1 +2,1 @@ println!(\"bye\");"},
            {"file": "src/version.rs", "lnum": 1, "text": "added: pub const VERSION: &str = \"0.3.1\";"}
        ])
    );

    // The user's own work after the loop: a new file, an edit of a file the loop never
    // touched, and a change to a file the loop created.
    std::fs::write(project.join("notes.txt"), "my notes\n").expect("write");
    std::fs::write(project.join("README.md"), "# sample\n\nMy words.\n").expect("write");
    std::fs::write(
        project.join("src/version.rs"),
        "pub const VERSION: &str = \"0.4.0\"; // mine\n",
    )
    .expect("write");
    capture_notifications(&editor).await;
    assert_eq!(editor.command("LooprUndo print-version").await, None);
    assert_eq!(read("src/main.rs"), Some(main_before));
    assert_eq!(
        read("generated.txt").as_deref(),
        Some("generated\n"),
        "a command's file may be the user's: left"
    );
    assert_eq!(read("notes.txt").as_deref(), Some("my notes\n"));
    assert_eq!(
        read("README.md").as_deref(),
        Some("# sample\n\nMy words.\n")
    );
    assert_eq!(
        read("src/version.rs").as_deref(),
        Some("pub const VERSION: &str = \"0.4.0\"; // mine\n"),
        "changed since the loop: not overwritten"
    );
    let notes = notifications(&editor).await;
    assert_eq!(
        notes,
        vec![
            "Loopr: restored 1 file(s) changed by print-version; left as they are:\n  \
             generated.txt: changed while a command of the loop ran; it may hold your edits\n  \
             src/version.rs: changed since the loop changed it\nReview them; \
             :LooprUndo! print-version overwrites the files changed since or changed during a \
             command."
        ]
    );
    let updated = editor.wait_status(&code_id, "complete").await;
    assert_eq!(updated["type"], "code");
    let records = editor.status_records().await;
    let code = records
        .iter()
        .find(|r| r["id"] == code_id.as_str())
        .expect("code loop");
    assert_eq!(code["error"], "undone: 1 file(s) restored; 2 not restored");

    assert_eq!(editor.command("LooprChanges print-version").await, None);
    assert_eq!(
        quickfix_files(&editor).await,
        vec!["generated.txt", "src/version.rs"]
    );

    assert_eq!(editor.command("LooprUndo! print-version").await, None);
    assert_eq!(read("src/version.rs"), None);
    assert_eq!(read("generated.txt"), None, "the command's file is gone");
    assert_eq!(read("notes.txt").as_deref(), Some("my notes\n"));
    let notes = notifications(&editor).await;
    assert_eq!(
        notes.last().map(String::as_str),
        Some("Loopr: restored 2 file(s) changed by print-version")
    );
    assert_eq!(editor.command("LooprChanges print-version").await, None);
    assert_eq!(
        notifications(&editor).await.last().map(String::as_str),
        Some("Loopr: print-version changed nothing")
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_leaves_a_file_that_changed_while_a_command_ran_unless_forced() {
    let fake = FakeLlm::start().await;
    // The validation command stands in for the user saving a file while it runs: it changes
    // README.md, which the loop's tools never touch.
    let mut editor = planned_editor(
        &fake,
        AUTO_APPROVE,
        "printf 'Saved while the validation ran.\\n' >> README.md",
    )
    .await;
    fake.push_routed(&code_route("print-version"), bye_and_complete());
    let project = editor.dirs.project.clone();
    let read = |path: &str| std::fs::read_to_string(project.join(path)).expect(path);
    let (main_before, readme_before) = (read("src/main.rs"), read("README.md"));
    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code_id, "complete").await;
    let readme_saved = read("README.md");
    assert_eq!(
        readme_saved,
        format!("{readme_before}Saved while the validation ran.\n")
    );

    capture_notifications(&editor).await;
    assert_eq!(editor.command("LooprUndo print-version").await, None);
    assert_eq!(
        read("src/main.rs"),
        main_before,
        "the loop's own edit is undone"
    );
    assert_eq!(
        read("README.md"),
        readme_saved,
        "the save is not overwritten"
    );
    assert_eq!(
        notifications(&editor).await,
        vec![
            "Loopr: restored 1 file(s) changed by print-version; left as they are:\n  \
             README.md: changed while a command of the loop ran; it may hold your edits\n\
             Review them; :LooprUndo! print-version overwrites the files changed during a \
             command."
        ]
    );

    assert_eq!(editor.command("LooprUndo! print-version").await, None);
    assert_eq!(read("README.md"), readme_before, "restored when forced");
    assert_eq!(
        notifications(&editor).await.last().map(String::as_str),
        Some("Loopr: restored 1 file(s) changed by print-version")
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_to_an_open_file_changed_on_disk_lands_on_the_right_lines_without_a_prompt() {
    let fake = FakeLlm::start().await;
    let (mut editor, main) = main_open_in_planned_editor(&fake).await;
    // A formatter rewrites the open, unmodified file behind the buffer's back.
    let formatted = "// formatted\n\nfn main() {\n    println!(\"hello\");\n}\n";
    std::fs::write(&main, formatted).expect("write");
    std::fs::File::options()
        .write(true)
        .open(&main)
        .and_then(|file| {
            file.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
        })
        .expect("mtime");
    fake.push_routed(&code_route("print-version"), bye_and_complete());
    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code_id, "complete").await;

    let expected = formatted.replace("\"hello\"", "\"bye\"");
    assert_eq!(std::fs::read_to_string(&main).expect("read"), expected);
    let buffer: Value = editor
        .lua("return { lines = vim.api.nvim_buf_get_lines(0, 0, -1, false), modified = vim.bo.modified, mode = vim.api.nvim_get_mode() }")
        .await;
    assert_eq!(
        buffer["lines"],
        json!([
            "// formatted",
            "",
            "fn main() {",
            "    println!(\"bye\");",
            "}"
        ])
    );
    assert_eq!(buffer["modified"], false);
    assert_eq!(buffer["mode"]["blocking"], false);
    assert_eq!(editor.command("write").await, None, "no W11/W12 prompt");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_an_open_buffer_cannot_take_are_refused_before_asking_or_reported_after() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, "{ approve_validation = true }", "true").await;
    let project = editor.dirs.project.clone();
    for file in ["README.md", "src/main.rs"] {
        edit(&editor, &project.join(file)).await;
    }
    // Unsaved changes in main.rs from the start; README.md gets some while its edit waits.
    type_unsaved_note(&editor).await;
    fake.push_routed(
        &code_route("print-version"),
        TurnBuilder::new()
            .tool_use("e1", "edit_file", bye_edit())
            .tool_use("e2", "edit_file", json!({"path": "README.md", "old_string": "A tiny CLI.", "new_string": "A tiny CLI with --version."}))
            .reply(),
    );
    fake.push_routed(
        &code_route("print-version"),
        complete_phase_turn("could not edit"),
    );
    capture_notifications(&editor).await;
    let code_id = run_code_loop(&mut editor, "print-version").await;
    let asked = editor.wait_event("LooprApprovalRequested", |_| true).await;
    assert_eq!(
        (asked["kind"].clone(), asked["subject"].clone()),
        (json!("edit"), json!("README.md")),
        "main.rs's edit was refused without asking"
    );
    editor
        .exec(&format!(
            "vim.api.nvim_buf_set_lines(vim.fn.bufnr({:?}), 0, 0, false, {{ 'typed while asked' }})",
            project.join("README.md").display().to_string()
        ))
        .await;
    accept(&editor, &asked).await;
    let notice = editor.wait_event("LooprNotice", |_| true).await;
    assert_eq!(
        notice["message"],
        "Loopr: the accepted change of README.md was not made: its buffer has unsaved changes. \
         Save (:w) or discard (:e!) them; the model was told"
    );
    assert_eq!(notice["level"], "warn");
    let validation = editor
        .wait_event("LooprApprovalRequested", |data| data["kind"] == "command")
        .await;
    accept(&editor, &validation).await;
    editor.wait_status(&code_id, "complete").await;

    let requests = print_version_requests(&fake);
    let results = tool_results(&requests[1]);
    for result in &results {
        assert_refused_for_unsaved_changes(result);
    }
    assert!(
        notifications(&editor)
            .await
            .iter()
            .any(|note| note.contains("README.md"))
    );
    assert_eq!(
        std::fs::read_to_string(project.join("README.md")).expect("read"),
        "# sample\n\nA tiny CLI.\n"
    );
    editor.quit().await;
}

/// Runs the code loop of `phase`, whose command starts a long `sleep` and says through the
/// FIFO `fifo` (in the project) when it runs, so that a test cancels at that moment; returns
/// the loop's id once the command runs.
async fn run_a_command_that_keeps_running(
    editor: &mut TestNvim,
    fake: &FakeLlm,
    phase: &str,
    fifo: &str,
) -> String {
    fake.push_routed(
        &code_route(phase),
        tool_turn(
            "slow",
            "run_command",
            json!({"command": format!("sleep 1000 & echo go > {fifo}; wait")}),
        ),
    );
    let code_id = run_code_loop(editor, phase).await;
    let fifo = editor.dirs.project.join(fifo);
    let ready =
        tokio::task::spawn_blocking(move || std::fs::read_to_string(fifo).expect("read fifo"));
    assert_eq!(
        tokio::time::timeout(crate::nvim::WAIT, ready)
            .await
            .expect("the command ran")
            .expect("join"),
        "go\n"
    );
    code_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_code_loop_kills_its_running_command_and_the_processes_it_started() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, AUTO_APPROVE, "true").await;
    mkfifo(&editor.dirs.project.join("ready.fifo"));
    let code_id =
        run_a_command_that_keeps_running(&mut editor, &fake, "print-version", "ready.fifo").await;

    // Host-side pids: inside the sandbox's PID namespace the command's own are other numbers.
    let host: i32 = editor.lua("return require('loopr.host').pid()").await;
    let started = crate::nvim::descendants(host);
    assert!(!started.is_empty(), "the command runs");
    assert_eq!(
        editor.command(&format!("LooprCancel {code_id}")).await,
        None
    );
    editor.wait_status(&code_id, "cancelled").await;
    for pid in started {
        crate::nvim::wait_for_exit(pid).await;
    }
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_while_a_change_waits_for_approval_closes_the_prompt_and_writes_nothing() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, "{}", "true").await;
    fake.push_routed(
        &code_route("print-version"),
        TurnBuilder::new()
            .tool_use(
                "w1",
                "write_file",
                json!({"path": "src/new.rs", "content": "pub fn new() {}\n"}),
            )
            .reply(),
    );
    let code_id = run_code_loop(&mut editor, "print-version").await;
    let asked = editor.wait_event("LooprApprovalRequested", |_| true).await;
    assert_eq!(
        (asked["kind"].clone(), asked["subject"].clone()),
        (json!("write"), json!("src/new.rs"))
    );

    assert_eq!(
        editor.command(&format!("LooprCancel {code_id}")).await,
        None
    );
    editor.wait_status(&code_id, "cancelled").await;
    let pending: Value = editor
        .lua("return require('loopr.approvals').pending()")
        .await;
    assert_eq!(pending, json!([]), "the prompt is gone");
    let open = format!("loopr://approval/{}", asked["id"]);
    let still_open: bool = editor
        .lua(&format!(
            "for _, buf in ipairs(vim.api.nvim_list_bufs()) do if vim.api.nvim_buf_get_name(buf) == {open:?} then return true end end return false"
        ))
        .await;
    assert!(!still_open);
    assert!(!editor.dirs.project.join("src/new.rs").exists());
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_sandbox_every_command_is_asked_about_and_says_unsandboxed() {
    let fake = FakeLlm::start().await;
    // Commands on "auto", and the command allow-listed: a sandbox-less machine still asks.
    let mut editor = planned_editor(
        &fake,
        "{ approvals = { write = 'auto', edit = 'auto', command = 'auto' },
           allow_commands = { 'echo hi' }, sandbox = { mode = 'off' } }",
        "true",
    )
    .await;
    fake.push_routed(
        &code_route("print-version"),
        TurnBuilder::new()
            .tool_use("hi", "run_command", json!({"command": "echo hi"}))
            .tool_use("done", "complete_phase", json!({"summary": "said hi"}))
            .reply(),
    );
    let code_id = run_code_loop(&mut editor, "print-version").await;
    for subject in ["echo hi", "true"] {
        let asked = editor
            .wait_event("LooprApprovalRequested", |data| data["kind"] == "command")
            .await;
        assert_eq!(asked["subject"], subject);
        let text: String = editor
            .lua(&format!(
                "local buf = vim.fn.bufnr('loopr://approval/{}')
                 return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\\n')",
                asked["id"]
            ))
            .await;
        assert!(
            text.contains("UNSANDBOXED") && text.contains("sandbox.mode"),
            "{text}"
        );
        editor
            .exec(&format!(
                "require('loopr.approvals').answer({}, 'accept_all')",
                asked["id"]
            ))
            .await;
    }
    editor.wait_status(&code_id, "complete").await;
    editor.quit().await;
}

/// The quickfix list's items: each one's file (relative to the project) and text.
pub(super) async fn quickfix_items(editor: &TestNvim) -> Value {
    editor
        .lua(
            "local items = {}
             for _, item in ipairs(vim.fn.getqflist()) do
               table.insert(items, { file = vim.fn.fnamemodify(vim.api.nvim_buf_get_name(item.bufnr), ':.'), text = item.text })
             end
             return items",
        )
        .await
}

/// Makes a FIFO at `path`.
pub(super) fn mkfifo(path: &std::path::Path) {
    let name = std::ffi::CString::new(path.display().to_string()).expect("path");
    // SAFETY: mkfifo reads a NUL-terminated path and creates a FIFO there.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// What a hostile command can leave in a project: FIFOs (opening one for reading blocks until a
/// writer comes), one of them named like an ignore file, and links to a device that never ends.
/// A code loop still records its baseline, records what its command replaced (without opening
/// it), and completes; the changes list names what is there instead of reading it; and
/// `:LooprCancel` still ends the next loop while its command runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifos_and_device_links_in_the_project_never_hang_a_code_loop_or_its_cancel() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, AUTO_APPROVE, "true").await;
    let project = editor.dirs.project.clone();
    mkfifo(&project.join("signal.fifo"));
    mkfifo(&project.join("src/.gitignore"));
    std::os::unix::fs::symlink("/dev/zero", project.join("zero")).expect("link");
    fake.push_routed(
        &code_route("print-version"),
        tool_turn(
            "c1",
            "run_command",
            json!({"command": "rm README.md Cargo.toml && mkfifo README.md && ln -s /dev/zero Cargo.toml"}),
        ),
    );
    fake.push_routed(
        &code_route("print-version"),
        complete_phase_turn("replaced two files"),
    );
    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code_id, "complete").await;
    let results = tool_results(&print_version_requests(&fake)[1]);
    assert_eq!(
        results[0]["content"], "exit status 0\n--- stdout ---\n--- stderr ---\n",
        "{results:?}"
    );

    assert_eq!(editor.command("LooprChanges print-version").await, None);
    let items = quickfix_items(&editor).await;
    assert_eq!(
        items,
        json!([
            {"file": "Cargo.toml", "text": "modified: now a symbolic link to /dev/zero (not followed)"},
            {"file": "README.md", "text": "modified: now a FIFO (named pipe), not a regular file"}
        ])
    );

    // The next loop is cancelled while its command runs.
    let slow_id =
        run_a_command_that_keeps_running(&mut editor, &fake, "document-flag", "signal.fifo").await;
    assert_eq!(
        editor.command(&format!("LooprCancel {slow_id}")).await,
        None
    );
    editor.wait_status(&slow_id, "cancelled").await;
    editor.quit().await;
}

/// A `loopr run` killed while its code loop waits for the model leaves the phase's code loop
/// interrupted. `:LooprRun` of the phase is refused with what happened and both ways on
/// (`:LooprRetry`, `:LooprCancel`, each naming the loop as typed); once it is cancelled, `:LooprRun`
/// starts a new code loop, which completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_a_phase_whose_code_loop_was_interrupted_names_retry_and_cancel() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, AUTO_APPROVE, "true").await;
    fake.push_routed(&code_route("print-version"), stalled_turn("Looking."));
    let asked = fake.requests().len() + 1;
    let run = ["run", "print-version", "--yes", "--unsandboxed"];
    killed_at_request(&editor.dirs, &fake, &run, asked).await;
    let interrupted = editor
        .status_records()
        .await
        .into_iter()
        .find(|record| record["type"] == "code")
        .expect("the killed run's code loop");
    assert_eq!(interrupted["status"], "interrupted", "{interrupted}");
    let id = interrupted["id"].as_str().expect("id").to_owned();

    let refused = editor
        .command("LooprRun print-version")
        .await
        .expect("refused while the phase has a code loop");
    // The loop is named as the user types it (its phase's code loop), not by its id.
    assert_eq!(
        refused,
        "Loopr: print-version/code, this phase's code loop, is interrupted (the host that ran \
         it is gone); retry it to go on from where it stopped, or cancel it to start a new one; \
         :LooprRetry print-version/code retries it, :LooprCancel print-version/code cancels it"
    );

    assert_eq!(editor.command("LooprCancel print-version/code").await, None);
    editor.wait_status(&id, "cancelled").await;
    fake.push_routed(&code_route("print-version"), bye_and_complete());
    let code_id = run_code_loop(&mut editor, "print-version").await;
    assert_ne!(code_id, id);
    editor.wait_status(&code_id, "complete").await;
    editor.quit().await;
}

/// What `:messages` shows.
pub(super) async fn shown_messages(editor: &TestNvim) -> String {
    editor
        .lua("return vim.api.nvim_exec2('messages', { output = true }).output")
        .await
}

/// The lines of the `loopr://status` buffer.
async fn status_lines(editor: &TestNvim) -> Vec<String> {
    editor
        .lua(
            "for _, buf in ipairs(vim.api.nvim_list_bufs()) do
               if vim.api.nvim_buf_get_name(buf) == 'loopr://status' then
                 return vim.api.nvim_buf_get_lines(buf, 0, -1, false)
               end
             end
             return {}",
        )
        .await
}

/// The current quickfix list's title and entries' texts, and whether the quickfix window is
/// the current one.
async fn current_quickfix(editor: &TestNvim) -> Value {
    editor
        .lua(
            "local list = vim.fn.getqflist({ title = 1, items = 1 })
             local texts = {}
             for _, item in ipairs(list.items) do table.insert(texts, item.text) end
             return { title = list.title, texts = texts, in_list = vim.fn.win_gettype() == 'quickfix' }",
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_undo_the_changes_list_empties_the_status_says_undone_and_the_list_knows_its_phase() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake, AUTO_APPROVE, "true").await;
    fake.push_routed(&code_route("print-version"), bye_and_complete());
    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code_id, "complete").await;
    assert_eq!(editor.command("LooprStatus").await, None);
    assert_eq!(editor.command("LooprChanges print-version").await, None);
    let list = current_quickfix(&editor).await;
    assert_eq!(list["in_list"], true, "{list}");
    assert_eq!(list["title"], "Loopr: print-version changes");
    assert_eq!(list["texts"].as_array().map(Vec::len), Some(1), "{list}");

    // From the changes list, the commands know the phase it lists.
    assert_eq!(editor.command("LooprChanges").await, None);
    assert_eq!(editor.command("LooprUndo").await, None);
    let messages = shown_messages(&editor).await;
    assert!(
        messages.contains("Loopr: restored 1 file(s) changed by print-version"),
        "{messages}"
    );

    // The list no longer shows what was undone; the status window says what the loop is.
    let list = current_quickfix(&editor).await;
    assert_eq!(list["title"], "Loopr: print-version changes");
    assert_eq!(list["texts"], json!([]), "{list}");
    let lines = status_lines(&editor).await;
    let header = lines.first().cloned().unwrap_or_default();
    let code_line = lines
        .iter()
        .find(|line| line.trim_start().starts_with("code"))
        .cloned()
        .unwrap_or_else(|| panic!("no code loop line: {lines:#?}"));
    let at = |name: &str| {
        header
            .find(name)
            .unwrap_or_else(|| panic!("no {name} column: {lines:#?}"))
    };
    // By characters: the header is ASCII, the tokens cell is not (each is one column wide).
    let chars: Vec<char> = code_line.chars().collect();
    let cell = |from: &str, to: Option<&str>| {
        let end = to.map_or(chars.len(), at).min(chars.len());
        let start = at(from).min(end);
        chars[start..end]
            .iter()
            .collect::<String>()
            .trim()
            .to_owned()
    };
    assert_eq!(cell("STATUS", Some("ITER")), "undone", "{lines:#?}");
    assert_eq!(cell("ERROR", Some("NOTE")), "", "{lines:#?}");
    assert_eq!(
        cell("NOTE", None),
        "undone: 1 file(s) restored",
        "{lines:#?}"
    );

    // `loopr status` says it too.
    let cli = std::process::Command::new(crate::nvim::host_binary())
        .arg("status")
        .current_dir(&editor.dirs.project)
        .env("LOOPR_HOME", &editor.dirs.loopr_home)
        .output()
        .expect("loopr status");
    let table = String::from_utf8_lossy(&cli.stdout);
    let row = table
        .lines()
        .find(|line| line.starts_with(code_id.as_str()))
        .unwrap_or_else(|| panic!("no code loop row: {table}"));
    assert_eq!(
        row.split_whitespace().nth(3),
        Some("undone"),
        "the STATUS column: {table}"
    );

    // Asked again from the emptied list, the phase is still known.
    assert_eq!(editor.command("LooprChanges").await, None);
    let messages = shown_messages(&editor).await;
    assert!(
        messages.contains("Loopr: print-version changed nothing"),
        "{messages}"
    );
    editor.quit().await;
}
