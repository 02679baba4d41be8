//! The contract between the host and the Lua it calls: every Lua function the host calls,
//! called through the host's own Rust code with exactly the arguments it sends, in a real
//! Neovim. Nothing here may leave Neovim waiting for the user.

use serde_json::{Value, json};

use loopr::agent::{FailureLocation, LoopEvent, NoticeLevel, TreeReady};
use loopr::artifacts::ArtifactKind;
use loopr::bridge::{
    apply_edit, apply_edit_within, check_buffer, deliver_event, reload_buffers, unsaved_buffer_text,
};
use loopr::store::{LoopId, LoopStatus, LoopType};
use loopr::tools::{ApprovalRequest, BufferCheck, BufferEdit, ChangeKind};

use crate::fake_llm::FakeLlm;
use crate::nvim::TestNvim;
use crate::scenario::start_editor;

const MAIN: &str = "fn main() {\n    println!(\"hello\");\n}\n";

async fn editor_with_main_open() -> (FakeLlm, TestNvim, std::path::PathBuf) {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    let main = editor.dirs.project.join("src/main.rs");
    editor
        .exec(&format!("vim.cmd.edit({:?})", main.display().to_string()))
        .await;
    (fake, editor, main)
}

/// Neovim's mode; `blocking` is true while it waits for the user (a prompt).
async fn assert_not_blocked(editor: &TestNvim) {
    let mode: Value = editor.lua("return vim.api.nvim_get_mode()").await;
    assert_eq!(mode["blocking"], false, "Neovim waits for the user: {mode}");
}

async fn buffer_state(editor: &TestNvim) -> (Vec<String>, bool) {
    editor
        .lua("return { vim.api.nvim_buf_get_lines(0, 0, -1, false), vim.bo.modified }")
        .await
}

/// Writes the file as a formatter or `sed -i` would, behind the buffer's back, with a
/// modification time the buffer cannot have seen.
fn change_on_disk(path: &std::path::Path, text: &str) {
    std::fs::write(path, text).expect("write");
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|file| file.set_modified(later))
        .expect("set mtime");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_of_a_buffer_behind_its_file_reloads_it_first_and_never_prompts() {
    let (_fake, editor, main) = editor_with_main_open().await;
    let on_disk = format!("// formatted\n// by a tool\n{MAIN}");
    change_on_disk(&main, &on_disk);
    let edited = on_disk.replace("\"hello\"", "\"bye\"");

    assert_eq!(check_buffer(&editor.nvim, &main).await, BufferCheck::Ready);
    assert_eq!(
        apply_edit(&editor.nvim, &main, &on_disk, &edited).await,
        BufferEdit::Applied
    );
    assert_not_blocked(&editor).await;
    let (lines, modified) = buffer_state(&editor).await;
    assert_eq!(
        lines,
        vec![
            "// formatted",
            "// by a tool",
            "fn main() {",
            "    println!(\"bye\");",
            "}"
        ],
        "the edit landed on the right lines"
    );
    assert!(!modified, "saved");
    assert_eq!(std::fs::read_to_string(&main).expect("read"), edited);
    // The buffer knows the file's new time: neither a check nor a write asks anything.
    assert_eq!(editor.command("checktime").await, None);
    assert_eq!(editor.command("write").await, None);
    assert_not_blocked(&editor).await;
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffer_with_unsaved_changes_behind_its_file_is_refused_and_left_alone() {
    let (_fake, editor, main) = editor_with_main_open().await;
    editor
        .exec("vim.api.nvim_buf_set_lines(0, 0, 0, false, { '// my unsaved note' })")
        .await;
    let on_disk = format!("// formatted\n{MAIN}");
    change_on_disk(&main, &on_disk);
    let edited = on_disk.replace("\"hello\"", "\"bye\"");

    assert_eq!(
        check_buffer(&editor.nvim, &main).await,
        BufferCheck::UnsavedChanges
    );
    assert_eq!(
        apply_edit(&editor.nvim, &main, &on_disk, &edited).await,
        BufferEdit::UnsavedChanges
    );
    assert_not_blocked(&editor).await;
    let (lines, modified) = buffer_state(&editor).await;
    assert_eq!(
        lines,
        vec![
            "// my unsaved note",
            "fn main() {",
            "    println!(\"hello\");",
            "}"
        ]
    );
    assert!(modified);
    assert_eq!(std::fs::read_to_string(&main).expect("read"), on_disk);
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffers_unsaved_text_is_read_as_its_file_would_hold_it() {
    let (_fake, editor, main) = editor_with_main_open().await;
    assert_eq!(
        unsaved_buffer_text(&editor.nvim, &main).await,
        None,
        "an unmodified buffer holds what the file does"
    );
    editor
        .exec("vim.api.nvim_buf_set_lines(0, 0, 0, false, { '// my unsaved note' })")
        .await;
    assert_eq!(
        unsaved_buffer_text(&editor.nvim, &main).await.as_deref(),
        Some(format!("// my unsaved note\n{MAIN}").as_str())
    );
    assert_eq!(std::fs::read_to_string(&main).expect("read"), MAIN);
    let readme = editor.dirs.project.join("README.md");
    assert_eq!(unsaved_buffer_text(&editor.nvim, &readme).await, None);
    assert_not_blocked(&editor).await;
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_of_a_file_no_buffer_shows_is_left_to_the_host() {
    let (_fake, editor, _main) = editor_with_main_open().await;
    let readme = editor.dirs.project.join("README.md");
    assert_eq!(
        check_buffer(&editor.nvim, &readme).await,
        BufferCheck::NotLoaded
    );
    assert_eq!(
        apply_edit(&editor.nvim, &readme, "# sample\n", "# changed\n").await,
        BufferEdit::NotLoaded
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_neovim_gets_to_after_the_host_gave_up_is_never_made() {
    let (_fake, editor, main) = editor_with_main_open().await;
    // Neovim blocks (as at a prompt) reading a FIFO until the test writes to it: from its next
    // turn of the event loop, before it gets to the edit sent after this.
    let fifo = editor.dirs.temp.path().join("hold.fifo");
    let fifo_name = std::ffi::CString::new(fifo.to_string_lossy().as_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path and a mode.
    assert_eq!(
        unsafe { libc::mkfifo(fifo_name.as_ptr(), 0o600) },
        0,
        "mkfifo"
    );
    editor
        .exec(&format!(
            "vim.schedule(function() io.open({:?}, 'r'):read('*a') end)",
            fifo.display().to_string()
        ))
        .await;
    let edited = MAIN.replace("\"hello\"", "\"bye\"");
    assert_eq!(
        apply_edit_within(
            &editor.nvim,
            &main,
            MAIN,
            &edited,
            std::time::Duration::from_millis(300)
        )
        .await,
        BufferEdit::UnsavedChanges,
        "no answer in time: reported as not made"
    );

    // Neovim gets to the edit only now, after the host reported it as not made.
    let release = fifo.clone();
    tokio::task::spawn_blocking(move || std::fs::write(release, "go"))
        .await
        .expect("join")
        .expect("release Neovim");
    let (lines, modified) = buffer_state(&editor).await;
    assert_eq!(
        lines,
        vec!["fn main() {", "    println!(\"hello\");", "}"],
        "the late edit was refused"
    );
    assert!(!modified);
    assert_eq!(std::fs::read_to_string(&main).expect("read"), MAIN);

    // The late answer did not cut the channel: the next edit goes through.
    assert_eq!(
        apply_edit(&editor.nvim, &main, MAIN, &edited).await,
        BufferEdit::Applied
    );
    assert_eq!(std::fs::read_to_string(&main).expect("read"), edited);
    editor.quit().await;
}

/// One event of every kind the host sends. The match makes a new kind fail to compile here
/// until it is added.
fn every_event(artifact: &std::path::Path) -> Vec<LoopEvent> {
    let id = LoopId::parse("20260101-000000-abcd").expect("id");
    let events = vec![
        LoopEvent::LoopUpdated {
            id: id.clone(),
            root: Some(
                artifact
                    .parent()
                    .unwrap_or(std::path::Path::new("/"))
                    .to_path_buf(),
            ),
            loop_type: LoopType::Code,
            status: LoopStatus::Failed,
            error: Some("validation kept failing".to_owned()),
        },
        LoopEvent::Progress {
            loop_id: id.clone(),
            label: "code \"print-version\"".to_owned(),
            message: "iteration 1/3: waiting for the model".to_owned(),
            tokens: None,
        },
        LoopEvent::Progress {
            loop_id: id.clone(),
            label: "code \"print-version\"".to_owned(),
            message: "model is answering… ~350 tokens so far".to_owned(),
            tokens: Some(350),
        },
        LoopEvent::ArtifactCreated {
            loop_id: id.clone(),
            kind: ArtifactKind::Plan,
            markdown_path: artifact.to_path_buf(),
            json_path: artifact.with_extension("json"),
            iteration: 1,
            gated: true,
        },
        LoopEvent::ApprovalRequested {
            id: 7,
            request: ApprovalRequest {
                loop_id: id.to_string(),
                kind: ChangeKind::Edit,
                tool: "edit_file",
                subject: "src/main.rs".to_owned(),
                detail: "--- a/src/main.rs\n+++ b/src/main.rs\n".to_owned(),
            },
        },
        LoopEvent::ApprovalClosed { id: 7 },
        LoopEvent::ValidationFinished {
            loop_id: id.clone(),
            phase: "print-version".to_owned(),
            iteration: 1,
            passed: false,
            command: "cargo test".to_owned(),
            output: "src/main.rs:2:5: error: boom\n".to_owned(),
            locations: vec![FailureLocation {
                path: "src/main.rs".to_owned(),
                line: 2,
                column: 5,
                text: "error: boom".to_owned(),
            }],
            root: artifact
                .parent()
                .unwrap_or(std::path::Path::new("/"))
                .to_path_buf(),
        },
        LoopEvent::TasksUpdated {
            loop_id: id.clone(),
            markdown_path: artifact.to_path_buf(),
            done: vec![1, 3],
        },
        LoopEvent::AgentPlan {
            loop_id: id.clone(),
            phase: "print-version".to_owned(),
            entries: vec![loopr::agent::AgentPlanEntry {
                content: "Add the flag".to_owned(),
                status: "in_progress",
            }],
        },
        LoopEvent::VerificationFinished {
            loop_id: id.clone(),
            root: artifact
                .parent()
                .unwrap_or(std::path::Path::new("/"))
                .to_path_buf(),
            label: "print-version".to_owned(),
            verification: loopr::artifacts::StoredVerification {
                scope: loopr::artifacts::VerificationScope::Phase("print-version".to_owned()),
                at: "2026-11-26T10:00:00Z".to_owned(),
                requirements: vec!["R1".to_owned()],
                artifact_iteration: Some(1),
                round: 1,
                block_on: loopr::artifacts::Severity::Critical,
                blocking: true,
                report: loopr::artifacts::VerificationReport {
                    verdict: loopr::artifacts::VerificationVerdict::Fail,
                    summary: "R1 is not met.".to_owned(),
                    findings: vec![loopr::artifacts::Finding {
                        severity: loopr::artifacts::Severity::Critical,
                        requirement: Some("R1".to_owned()),
                        file: "src/main.rs".to_owned(),
                        line: 2,
                        end_line: Some(3),
                        message: "The version is never printed.".to_owned(),
                        fix: Some("Print it.".to_owned()),
                    }],
                },
            },
        },
        LoopEvent::TreeReady {
            root: id.clone(),
            label: "plan \"Add a --version flag\"".to_owned(),
            ready: TreeReady::Phases { count: 3 },
        },
        LoopEvent::Notice {
            loop_id: id.to_string(),
            level: NoticeLevel::Warn,
            message: "the accepted change of src/main.rs was not made".to_owned(),
        },
    ];
    for event in &events {
        match event {
            LoopEvent::LoopUpdated { .. }
            | LoopEvent::Progress { .. }
            | LoopEvent::ArtifactCreated { .. }
            | LoopEvent::ApprovalRequested { .. }
            | LoopEvent::ApprovalClosed { .. }
            | LoopEvent::ValidationFinished { .. }
            | LoopEvent::VerificationFinished { .. }
            | LoopEvent::Notice { .. }
            | LoopEvent::TasksUpdated { .. }
            | LoopEvent::AgentPlan { .. }
            | LoopEvent::TreeReady { .. } => {}
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_the_host_sends_is_handled_without_error() {
    let fake = FakeLlm::start().await;
    let mut editor = start_editor(&fake, "{}").await;
    let artifact = editor.dirs.home.join("plan.md");
    std::fs::write(&artifact, "# Plan\n").expect("write");
    editor
        .exec("_G.loopr_notes = {} vim.notify = function(msg, level) table.insert(_G.loopr_notes, { msg = msg, level = level }) end")
        .await;
    for event in every_event(&artifact) {
        deliver_event(&editor.nvim, event)
            .await
            .expect("Lua takes the event");
    }
    // Handled in order after dispatch returns; the last one's User event marks the end.
    let notice = editor.wait_event("LooprNotice", |_| true).await;
    assert_eq!(
        notice["message"],
        "Loopr: the accepted change of src/main.rs was not made"
    );
    let answering = editor
        .wait_event("LooprProgress", |data| data["tokens"] == 350)
        .await;
    assert_eq!(
        answering["message"],
        "model is answering… ~350 tokens so far"
    );
    for pattern in [
        "LooprLoopUpdated",
        "LooprProgress",
        "LooprArtifactCreated",
        "LooprApprovalRequested",
        "LooprValidation",
        "LooprTasksUpdated",
    ] {
        editor.wait_event(pattern, |_| true).await;
    }
    let notes: Vec<Value> = editor.lua("return _G.loopr_notes").await;
    let errors: Vec<&Value> = notes
        .iter()
        .filter(|note| {
            note["msg"]
                .as_str()
                .is_some_and(|msg| msg.contains("error handling"))
        })
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    assert!(
        notes.contains(
            &json!({"msg": "Loopr: the accepted change of src/main.rs was not made", "level": 3})
        ),
        "{notes:?}"
    );
    assert_not_blocked(&editor).await;
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffers_of_files_a_command_changed_catch_up_or_are_kept_with_a_warning() {
    let (_fake, editor, main) = editor_with_main_open().await;
    let on_disk = format!("// reformatted by a command\n{MAIN}");
    change_on_disk(&main, &on_disk);
    reload_buffers(&editor.nvim, std::slice::from_ref(&main)).await;
    assert_not_blocked(&editor).await;
    let (lines, modified) = buffer_state(&editor).await;
    assert_eq!(lines[0], "// reformatted by a command");
    assert!(!modified);
    // The buffer knows the file's new time: writing it does not ask "file changed".
    assert_eq!(editor.command("write").await, None);
    assert_not_blocked(&editor).await;

    // With unsaved changes of the user's, the buffer is left as it is.
    editor
        .exec("vim.api.nvim_buf_set_lines(0, 0, 0, false, { '// mine, unsaved' })")
        .await;
    change_on_disk(&main, &format!("// again\n{MAIN}"));
    reload_buffers(&editor.nvim, std::slice::from_ref(&main)).await;
    assert_not_blocked(&editor).await;
    let (lines, modified) = buffer_state(&editor).await;
    assert_eq!(lines[0], "// mine, unsaved");
    assert!(modified);
    editor.quit().await;
}

/// Sends `method` as Lua's `require('loopr.host').send` does and returns what the callback got:
/// `{ result, err }`.
async fn sent(editor: &TestNvim, method: &str) -> Value {
    editor
        .lua_answered(&format!(
            "require('loopr.host').send({method:?}, {{}}, function(reply, err)
               result = {{ result = reply, err = err }}
             end)"
        ))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_notification_is_answered_through_the_callback() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    let version = sent(&editor, "version").await;
    assert_eq!(version, json!({"result": env!("CARGO_PKG_VERSION")}));
    let unknown = sent(&editor, "frobnicate").await;
    assert!(
        unknown["err"]
            .as_str()
            .is_some_and(|err| err.starts_with("Loopr: unknown request \"frobnicate\"")),
        "{unknown}"
    );
    let panicked = sent(&editor, "__panic").await;
    assert!(
        panicked["err"]
            .as_str()
            .is_some_and(|err| err.starts_with("Loopr: internal error while handling __panic")),
        "{panicked}"
    );
    // The host survived the panic.
    assert_eq!(
        sent(&editor, "version").await["result"],
        env!("CARGO_PKG_VERSION")
    );
    editor.quit().await;
}

/// The request table says which requests may come as `request` notifications; the others
/// are refused with a reason, and the same request waited on is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_its_row_keeps_to_waiting_is_refused_as_a_notification() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    let refused = sent(&editor, "mcp_status").await;
    assert!(
        refused["err"].as_str().is_some_and(|err| err
            .starts_with("Loopr: mcp_status is answered only as a request Neovim waits for")),
        "{refused}"
    );
    let waited: Value = editor
        .lua("local servers, err = require('loopr.host').request('mcp_status') return { err = err or vim.NIL, servers = servers }")
        .await;
    assert!(waited["err"].is_null(), "{waited}");
    assert!(waited["servers"].is_array(), "{waited}");
    editor.quit().await;
}
