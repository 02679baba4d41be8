//! `commit = "phase"`: each phase that is done is committed alone, with the user's hooks run in
//! the sandbox; the user's own edits and staged changes stay as they were.

use serde_json::{Value, json};

use super::code::shown_messages;
use crate::fake_llm::{FakeLlm, Reply, TurnBuilder};
use crate::nvim::TestNvim;
use crate::scenario::{
    code_route, commit_everything, edit_main_and_complete, open_transcript, plan_and_approve,
    push_one_spec_hierarchy, run_code_loop, start_editor, status_row, tool_turn, transcript_with,
    wait_all_complete, watch_transcripts,
};

const SETUP: &str =
    "{ commit = 'phase', approvals = { write = 'auto', edit = 'auto', command = 'auto' } }";

/// An editor with `commit = "phase"` on a git project whose one-spec plan is approved, its
/// three phases validated by `true`, and a git identity of the project's own.
async fn planned_editor(fake: &FakeLlm) -> TestNvim {
    planned_editor_with(fake, SETUP).await
}

/// `planned_editor` with `setup` as the plugin's setup.
async fn planned_editor_with(fake: &FakeLlm, setup: &str) -> TestNvim {
    push_one_spec_hierarchy(fake, |_| Some("true".to_owned()), tool_turn);
    let mut editor = start_editor(fake, setup).await;
    commit_everything(&editor.dirs.project);
    git(&editor, &["config", "user.name", "Ada Lovelace"]);
    git(&editor, &["config", "user.email", "ada@example.com"]);
    plan_and_approve(&mut editor).await;
    wait_all_complete(&mut editor, 5).await;
    editor
}

/// Runs git in `editor`'s project; its output.
fn git(editor: &TestNvim, args: &[&str]) -> String {
    crate::scenario::git_in(&editor.dirs.project, args)
}

/// The model's turn that writes `files` and says the phase is done.
fn write_and_complete(files: &[(&str, &str)]) -> Reply {
    let mut turn = TurnBuilder::new();
    for (index, (path, content)) in files.iter().enumerate() {
        turn = turn.tool_use(
            &format!("w{index}"),
            "write_file",
            json!({"path": path, "content": content}),
        );
    }
    turn.tool_use("done", "complete_phase", json!({"summary": "written"}))
        .reply()
}

/// Runs phase `phase`'s code loop to completion; its id and the notice that tells how its
/// commit went.
async fn run_phase(editor: &mut TestNvim, phase: &str) -> (String, String) {
    let code_id = run_code_loop(editor, phase).await;
    editor.wait_status(&code_id, "complete").await;
    let message = commit_notice(editor, &code_id).await;
    (code_id, message)
}

/// The notice that tells how the commit of code loop `code_id` went.
async fn commit_notice(editor: &mut TestNvim, code_id: &str) -> String {
    let notice: Value = editor
        .wait_event("LooprNotice", |data| {
            data["loop_id"] == code_id
                && data["message"]
                    .as_str()
                    .is_some_and(|message| message.contains("ommitted"))
        })
        .await;
    notice["message"].as_str().expect("message").to_owned()
}

/// Makes `script` the repository's hook `name`.
fn install_hook(editor: &TestNvim, name: &str, script: &str) {
    let hook = editor.dirs.project.join(".git/hooks").join(name);
    std::fs::write(&hook, script).expect("hook");
    let mut permissions = std::fs::metadata(&hook).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&hook, permissions).expect("chmod");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_phase_is_committed_alone_and_the_user_s_edit_and_staged_change_stay() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake).await;
    let project = editor.dirs.project.clone();
    // The user's own work, before and between the phases: an edit, and a staged new file.
    std::fs::write(project.join("README.md"), "# sample\n\nMy words.\n").expect("write");
    std::fs::write(project.join("notes.txt"), "my notes\n").expect("write");
    git(&editor, &["add", "notes.txt"]);

    fake.push_routed(
        &code_route("print-version"),
        write_and_complete(&[
            ("src/main.rs", "fn main() {\n    println!(\"0.3.1\");\n}\n"),
            ("tests/print-version.rs", "#[test]\nfn prints() {}\n"),
        ]),
    );
    // A commit-msg hook, run in the sandbox, may add to the message as it would for yours.
    install_hook(
        &editor,
        "commit-msg",
        "#!/bin/sh\nprintf 'Signed-off-by: Ada Lovelace <ada@example.com>\\n' >> \"$1\"\n",
    );
    let (_, first) = run_phase(&mut editor, "print-version").await;
    let first_short = git(&editor, &["rev-parse", "--short", "HEAD"]);
    assert_eq!(
        first,
        format!(
            "Loopr: Committed phase print-version as {}: Phase print-version",
            first_short.trim()
        )
    );

    fake.push_routed(
        &code_route("document-flag"),
        write_and_complete(&[("docs/flag.md", "# --version\n")]),
    );
    let (_, second) = run_phase(&mut editor, "document-flag").await;
    assert!(
        second.starts_with("Loopr: Committed phase document-flag as "),
        "{second}"
    );
    assert!(
        shown_messages(&editor).await.contains(&first),
        "the notice is shown"
    );

    assert_eq!(
        git(&editor, &["log", "--format=%s"]),
        "Phase document-flag\nPhase print-version\ninitial\n"
    );
    assert_eq!(
        git(&editor, &["show", "--name-only", "--format=", "HEAD~1"]),
        "src/main.rs\ntests/print-version.rs\n"
    );
    assert_eq!(
        git(&editor, &["show", "--name-only", "--format=", "HEAD"]),
        "docs/flag.md\n"
    );
    assert_eq!(
        git(&editor, &["log", "-2", "--format=%(trailers)"]),
        "Loopr-Plan: Add a --version flag\nLoopr-Phase: document-flag\n\
         Signed-off-by: Ada Lovelace <ada@example.com>\n\n\
         Loopr-Plan: Add a --version flag\nLoopr-Phase: print-version\n\
         Signed-off-by: Ada Lovelace <ada@example.com>\n\n"
    );
    let body = git(&editor, &["log", "-1", "--format=%b", "HEAD~1"]);
    assert!(
        body.contains("Tasks done:\n- Match --version before other arguments and print the version\n- Add a test for print-version\n"),
        "{body}"
    );
    assert_eq!(
        git(&editor, &["log", "-1", "--format=%an <%ae>"]),
        "Ada Lovelace <ada@example.com>\n"
    );
    assert_eq!(
        git(&editor, &["status", "--porcelain"]),
        " M README.md\nA  notes.txt\n",
        "the user's edit and staged file, uncommitted; the phases' files clean"
    );
    assert_eq!(
        git(&editor, &["diff", "--cached", "--name-only"]),
        "notes.txt\n"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_pre_commit_hook_runs_in_the_sandbox_and_leaves_the_phase_uncommitted() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake).await;
    let project = editor.dirs.project.clone();
    // The hook would write .git (the sandbox keeps it read-only) and then fails.
    install_hook(
        &editor,
        "pre-commit",
        "#!/bin/sh\ntouch .git/hook-wrote-here 2>/dev/null\necho 'lint: src/main.rs is not formatted' >&2\nexit 1\n",
    );
    let head = git(&editor, &["rev-parse", "HEAD"]);

    fake.push_routed(
        &code_route("print-version"),
        write_and_complete(&[("src/main.rs", "fn main() {println!(\"0.3.1\");}\n")]),
    );
    let (code_id, told) = run_phase(&mut editor, "print-version").await;
    assert_eq!(
        told,
        "Loopr: Phase print-version was not committed: the pre-commit hook failed (exit status \
         1); its output ended with:\nlint: src/main.rs is not formatted. Its changes stay in the \
         working tree, uncommitted."
    );
    assert!(
        shown_messages(&editor)
            .await
            .contains("the pre-commit hook failed")
    );
    assert_eq!(git(&editor, &["rev-parse", "HEAD"]), head);
    assert_eq!(git(&editor, &["status", "--porcelain"]), " M src/main.rs\n");
    assert!(
        !project.join(".git/hook-wrote-here").exists(),
        "the hook ran in the sandbox"
    );
    // The code loop's transcript ends with what became of the commit.
    watch_transcripts(&editor).await;
    let buf = open_transcript(&editor, Some(&code_id)).await;
    let transcript = transcript_with(&mut editor, buf, "was not committed").await;
    assert!(
        transcript.contains("> Phase print-version was not committed: the pre-commit hook failed"),
        "{transcript}"
    );
    assert!(
        transcript.contains("> lint: src/main.rs is not formatted."),
        "{transcript}"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verified_phase_s_commit_names_the_requirements_its_verification_found_met() {
    let fake = FakeLlm::start().await;
    let setup = "{ commit = 'phase', verify = { max_rounds = 1 }, approvals = { write = 'auto', \
                 edit = 'auto', command = 'auto' } }";
    let mut editor = super::code::planned_editor(&fake, setup, "true").await;
    git(&editor, &["config", "user.name", "Ada Lovelace"]);
    git(&editor, &["config", "user.email", "ada@example.com"]);
    fake.push_routed(
        &code_route("print-version"),
        edit_main_and_complete("e1", "\"hello\"", "\"sample 0.3.1\""),
    );
    fake.push_routed(
        &super::verification::verify_route("print-version"),
        tool_turn(
            "v1",
            "report_verification",
            json!({"verdict": "pass", "summary": "R1 is met.", "findings": []}),
        ),
    );
    let (_, told) = run_phase(&mut editor, "print-version").await;
    assert!(
        told.starts_with("Loopr: Committed phase print-version as "),
        "{told}"
    );
    assert_eq!(
        git(&editor, &["log", "-1", "--format=%b"]),
        "Carry out print-version: recognise --version in src/main.rs and print the crate \
         version.\n\n\
         Tasks done:\n\
         - Match --version before other arguments and print the version\n\
         - Add a test for print-version\n\n\
         Requirements covered:\n\
         - R1: WHEN the user runs sample --version THE SYSTEM SHALL print sample 0.3.1 and exit 0\n\n\
         Loopr-Plan: Add a --version flag\n\
         Loopr-Phase: print-version\n\n"
    );
    editor.quit().await;
}

/// A pre-commit hook that waits (at most a minute) until the test creates `.git/{flag}`.
fn hook_waiting_for(flag: &str) -> String {
    format!(
        "#!/bin/sh\ni=0\nwhile [ ! -e .git/{flag} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_loop_started_while_a_phase_is_committed_waits_for_the_commit() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_editor(&fake).await;
    let project = editor.dirs.project.clone();
    install_hook(&editor, "pre-commit", &hook_waiting_for("commit-may-go"));
    fake.push_routed(
        &code_route("print-version"),
        write_and_complete(&[("src/main.rs", "fn main() {\n    println!(\"0.3.1\");\n}\n")]),
    );
    // The second phase edits the first one's file too: in the first commit, it would show.
    fake.push_routed(
        &code_route("document-flag"),
        write_and_complete(&[
            ("docs/flag.md", "# --version\n"),
            ("src/main.rs", "fn main() {\n    println!(\"0.3.2\");\n}\n"),
        ]),
    );
    let first = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&first, "complete").await;
    // Its commit waits in the pre-commit hook; a code loop started by hand now waits for it.
    assert_eq!(editor.command("LooprRun document-flag").await, None);
    let second = editor
        .wait_event("LooprLoopUpdated", |data| {
            data["type"] == "code" && data["status"] == "pending" && data["id"] != first.as_str()
        })
        .await;
    let second = second["id"].as_str().expect("id").to_owned();
    let row = status_row(&editor, &second).await;
    assert_eq!(row["status"], "pending", "{row:#}");
    assert_eq!(
        row["waits_for"],
        "waits its turn: the changes of \"print-version\" are being committed"
    );
    editor.exec("vim.o.columns = 250").await;
    assert_eq!(editor.command("LooprStatus").await, None);
    let shown: String = editor
        .lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
        .await;
    assert!(
        shown.contains("waits its turn: the changes of \"print-version\""),
        "{shown}"
    );
    let asked_for_second = fake.requests().iter().any(|request| {
        request
            .body
            .to_string()
            .contains("# Phase: Phase document-flag")
    });
    assert!(!asked_for_second, "the second code loop has not started");

    std::fs::write(project.join(".git/commit-may-go"), "").expect("flag");
    editor.wait_status(&second, "complete").await;
    let notice = commit_notice(&mut editor, &second).await;
    assert!(
        notice.starts_with("Loopr: Committed phase document-flag"),
        "{notice}"
    );
    assert_eq!(
        git(&editor, &["log", "--format=%s"]),
        "Phase document-flag\nPhase print-version\ninitial\n"
    );
    assert_eq!(
        git(&editor, &["show", "--name-only", "--format=", "HEAD~1"]),
        "src/main.rs\n"
    );
    assert_eq!(
        git(&editor, &["show", "HEAD~1:src/main.rs"]),
        "fn main() {\n    println!(\"0.3.1\");\n}\n",
        "the first commit holds the first phase's file as it left it"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_of_a_phase_s_changes_is_answered_before_its_commit_is_made() {
    let fake = FakeLlm::start().await;
    let setup = "{ commit = 'phase', review_gates = { 'plan', 'code' }, approvals = { write = \
                 'auto', edit = 'auto', command = 'auto' } }";
    let mut editor = planned_editor_with(&fake, setup).await;
    let project = editor.dirs.project.clone();
    install_hook(&editor, "pre-commit", &hook_waiting_for("commit-may-go"));
    let head = git(&editor, &["rev-parse", "HEAD"]);
    fake.push_routed(
        &code_route("print-version"),
        write_and_complete(&[("src/main.rs", "fn main() {\n    println!(\"0.3.1\");\n}\n")]),
    );
    assert_eq!(editor.command("LooprRun print-version").await, None);
    let held = editor
        .wait_event("LooprLoopUpdated", |data| {
            data["type"] == "code" && data["status"] == "awaiting_approval"
        })
        .await;
    let code_id = held["id"].as_str().expect("id").to_owned();
    assert_eq!(editor.command("LooprApprove print-version").await, None);
    // Answered while the commit still waits in its pre-commit hook.
    let answered: bool = editor
        .lua("return vim.wait(20000, function() return vim.fn.execute('messages'):find('Loopr: approved', 1, true) ~= nil end, 5)")
        .await;
    assert!(answered, "{}", shown_messages(&editor).await);
    assert_eq!(
        git(&editor, &["rev-parse", "HEAD"]),
        head,
        "the commit waits in its hook"
    );
    std::fs::write(project.join(".git/commit-may-go"), "").expect("flag");
    let notice = commit_notice(&mut editor, &code_id).await;
    assert!(
        notice.starts_with("Loopr: Committed phase print-version as "),
        "{notice}"
    );
    assert_eq!(
        git(&editor, &["log", "--format=%s"]),
        "Phase print-version\ninitial\n"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_plan_answers_the_approval_of_unsandboxed_hooks_and_commits_nothing() {
    let fake = FakeLlm::start().await;
    let setup = "{ commit = 'phase', sandbox = { mode = 'off' }, approvals = { write = 'auto', \
                 edit = 'auto', command = 'auto' } }";
    let mut editor = planned_editor_with(&fake, setup).await;
    install_hook(&editor, "pre-commit", "#!/bin/sh\nexit 0\n");
    let head = git(&editor, &["rev-parse", "HEAD"]);
    fake.push_routed(
        &code_route("print-version"),
        write_and_complete(&[("src/main.rs", "fn main() {\n    println!(\"0.3.1\");\n}\n")]),
    );
    let code_id = run_code_loop(&mut editor, "print-version").await;
    // Without a sandbox the validation is asked about, and then the commit's hooks.
    let validation = editor
        .wait_event("LooprApprovalRequested", |data| data["subject"] == "true")
        .await;
    super::code::accept(&editor, &validation).await;
    editor
        .wait_event("LooprApprovalRequested", |data| {
            data["subject"] == "git hook run pre-commit"
        })
        .await;
    let plan = editor
        .status_records()
        .await
        .into_iter()
        .find(|row| row["type"] == "plan")
        .expect("the plan");
    let plan_id = plan["id"].as_str().expect("id").to_owned();
    assert_eq!(
        editor.command(&format!("LooprCancel {plan_id}")).await,
        None
    );
    let notice = commit_notice(&mut editor, &code_id).await;
    assert_eq!(
        notice,
        "Loopr: Phase print-version was not committed: the commit was stopped (cancelled). Its \
         changes stay in the working tree, uncommitted."
    );
    assert_eq!(git(&editor, &["rev-parse", "HEAD"]), head);
    assert_eq!(git(&editor, &["status", "--porcelain"]), " M src/main.rs\n");
    editor.quit().await;
}
