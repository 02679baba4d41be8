//! `:LooprRewind`: the working tree back as it was before a phase, from the git checkpoint its
//! code loop took, with the user's git state (HEAD, index, branches, stash) untouched; and the
//! rewind undone with `:LooprUndo`.

use std::path::Path;

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, TurnBuilder};
use crate::nvim::TestNvim;
use crate::scenario::{
    AUTO_APPROVE, code_route, commit_everything, git_in as git, open_transcript, plan_and_approve,
    run_code_loop, start_editor, tool_turn, transcript_with, wait_all_complete, watch_transcripts,
};

/// What neither a checkpoint nor a rewind may change: HEAD, the index (`git status`'s index
/// part, exactly), the branches, the stash and HEAD's reflog.
fn users_git_state(dir: &Path) -> Vec<String> {
    [
        &["rev-parse", "HEAD"][..],
        &["diff", "--cached", "--raw", "--abbrev=40"],
        &["branch", "--list", "-v", "--no-abbrev"],
        &["stash", "list"],
        &["reflog", "show", "HEAD"],
    ]
    .iter()
    .map(|args| git(dir, args))
    .collect()
}

/// What `loopr rewind {phase}` printed in the editor's project; it must succeed.
fn loopr_rewind(editor: &TestNvim, phase: &str) -> String {
    loopr(editor, &["rewind", phase])
}

/// Runs `loopr <args>` in `editor`'s project, with its state; its standard output.
fn loopr(editor: &TestNvim, args: &[&str]) -> String {
    let cli = loopr_output(editor, args);
    assert!(
        cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    String::from_utf8_lossy(&cli.stdout).into_owned()
}

/// Runs `loopr <args>` in `editor`'s project, which must fail; its standard error.
fn loopr_failing(editor: &TestNvim, args: &[&str]) -> String {
    let cli = loopr_output(editor, args);
    assert!(
        !cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stdout)
    );
    String::from_utf8_lossy(&cli.stderr).into_owned()
}

fn loopr_output(editor: &TestNvim, args: &[&str]) -> std::process::Output {
    std::process::Command::new(crate::nvim::host_binary())
        .args(args)
        .current_dir(&editor.dirs.project)
        .env("LOOPR_HOME", &editor.dirs.loopr_home)
        .output()
        .expect("loopr runs")
}

/// An editor on a git project whose one-spec hierarchy is planned and approved.
async fn planned_in_git(fake: &FakeLlm) -> TestNvim {
    crate::scenario::planned_one_spec(fake, AUTO_APPROVE, |_| Some("true".to_owned())).await
}

/// Runs print-version's code loop, which edits `src/main.rs` and creates `src/version.rs`,
/// to completion; its id.
async fn run_two_changes(fake: &FakeLlm, editor: &mut TestNvim) -> String {
    fake.push_routed(
        &code_route("print-version"),
        TurnBuilder::new()
            .tool_use("e1", "edit_file", json!({"path": "src/main.rs", "old_string": "\"hello\"", "new_string": "\"bye\""}))
            .tool_use("w1", "write_file", json!({"path": "src/version.rs", "content": "pub const VERSION: &str = \"0.3.1\";\n"}))
            .tool_use("done", "complete_phase", json!({"summary": "two changes"}))
            .reply(),
    );
    let code_id = run_code_loop(editor, "print-version").await;
    editor.wait_status(&code_id, "complete").await;
    code_id
}

/// The `error` (note) of loop `id` in the status list.
async fn note_of(editor: &TestNvim, id: &str) -> Value {
    let records = editor.status_records().await;
    records
        .iter()
        .find(|record| record["id"] == id)
        .map(|record| record["error"].clone())
        .expect("the loop")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_restores_the_tree_before_a_phase_keeps_the_users_edit_and_git_state_and_undo_brings_it_back()
 {
    let fake = FakeLlm::start().await;
    let mut editor = planned_in_git(&fake).await;
    let project = editor.dirs.project.clone();
    let read = |path: &str| std::fs::read_to_string(project.join(path)).ok();
    // The user's git state: a branch, a stash, a staged new file.
    git(&project, &["branch", "side"]);
    std::fs::write(project.join("README.md"), "# sample\n\nstashed words\n").expect("write");
    git(&project, &["stash", "-q"]);
    std::fs::write(project.join("staged.txt"), "the user's staged file\n").expect("write");
    git(&project, &["add", "staged.txt"]);
    let git_state = users_git_state(&project);
    let (main_before, cargo_before, readme_before) = (
        read("src/main.rs").expect("main.rs"),
        read("Cargo.toml").expect("Cargo.toml"),
        read("README.md").expect("README.md"),
    );

    // print-version modifies, creates and deletes; document-flag, a later phase, edits too.
    fake.push_routed(
        &code_route("print-version"),
        TurnBuilder::new()
            .tool_use("e1", "edit_file", json!({"path": "src/main.rs", "old_string": "\"hello\"", "new_string": "\"bye\""}))
            .tool_use("w1", "write_file", json!({"path": "src/version.rs", "content": "pub const VERSION: &str = \"0.3.1\";\n"}))
            .tool_use("w2", "write_file", json!({"path": "docs/guide.md", "content": "the loop's guide\n"}))
            .tool_use("c1", "run_command", json!({"command": "rm Cargo.toml"}))
            .tool_use("done", "complete_phase", json!({"summary": "four changes"}))
            .reply(),
    );
    fake.push_routed(
        &code_route("document-flag"),
        TurnBuilder::new()
            .tool_use("e1", "edit_file", json!({"path": "README.md", "old_string": "A tiny CLI.", "new_string": "A tiny CLI with --version."}))
            .tool_use("done", "complete_phase", json!({"summary": "documented"}))
            .reply(),
    );
    let first = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&first, "complete").await;
    let second = run_code_loop(&mut editor, "document-flag").await;
    editor.wait_status(&second, "complete").await;
    assert_eq!(
        users_git_state(&project),
        git_state,
        "taking the checkpoints changed nothing of the user's git state"
    );
    let (main_after, readme_after) = (
        read("src/main.rs").expect("main.rs"),
        read("README.md").expect("README.md"),
    );
    assert!(main_after.contains("bye"), "{main_after}");
    assert_eq!(read("Cargo.toml"), None);
    // The user edits a file the phase created.
    std::fs::write(project.join("docs/guide.md"), "my guide now\n").expect("write");

    super::code::capture_notifications(&editor).await;
    assert_eq!(editor.command("LooprRewind print-version").await, None);
    assert_eq!(
        read("src/main.rs"),
        Some(main_before.clone()),
        "modified: restored"
    );
    assert_eq!(read("src/version.rs"), None, "created: removed");
    assert_eq!(read("Cargo.toml"), Some(cargo_before), "deleted: back");
    assert_eq!(
        read("README.md"),
        Some(readme_before),
        "the later phase's change: gone"
    );
    assert_eq!(
        read("docs/guide.md").as_deref(),
        Some("my guide now\n"),
        "the user's edit: kept"
    );
    assert_eq!(
        read("staged.txt").as_deref(),
        Some("the user's staged file\n")
    );
    assert_eq!(
        users_git_state(&project),
        git_state,
        "the rewind left git alone"
    );
    assert_eq!(
        super::code::notifications(&editor).await,
        vec![
            "Loopr: rewound to before print-version: restored 4 file(s), 2 code loop(s) \
             rewound; left as they are:\n  docs/guide.md: changed since the loop changed it\n\
             Review them; :LooprRewind! print-version overwrites the files changed since.\n\
             :LooprUndo print-version undoes the rewind."
        ]
    );
    for id in [&first, &second] {
        let note = note_of(&editor, id).await;
        let note = note.as_str().unwrap_or_default().to_owned();
        assert!(
            note.starts_with("rewound: to before phase print-version at ")
                && note.ends_with(" UTC; 4 file(s) restored"),
            "{note}"
        );
    }
    watch_transcripts(&editor).await;
    let buf = open_transcript(&editor, Some(&first)).await;
    let transcript = transcript_with(&mut editor, buf, "> Rewound to before this phase at ").await;
    assert!(
        transcript.contains(" UTC; 4 file(s) restored"),
        "{transcript}"
    );
    assert_eq!(editor.command("wincmd p").await, None);

    // Undoing the rewind brings the phases' work back; the user's edit stays.
    assert_eq!(editor.command("LooprUndo print-version").await, None);
    assert_eq!(read("src/main.rs"), Some(main_after));
    assert_eq!(
        read("src/version.rs").as_deref(),
        Some("pub const VERSION: &str = \"0.3.1\";\n")
    );
    assert_eq!(read("Cargo.toml"), None);
    assert_eq!(read("README.md"), Some(readme_after));
    assert_eq!(read("docs/guide.md").as_deref(), Some("my guide now\n"));
    assert_eq!(users_git_state(&project), git_state);
    assert_eq!(
        super::code::notifications(&editor)
            .await
            .last()
            .map(String::as_str),
        Some("Loopr: undid the rewind to before print-version: restored 4 file(s)")
    );
    for id in [&first, &second] {
        assert_eq!(note_of(&editor, id).await, Value::Null, "no longer rewound");
    }
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_git_loopr_rewind_restores_from_the_baselines_and_says_it_cannot_be_undone() {
    let fake = FakeLlm::start().await;
    crate::scenario::push_one_spec_hierarchy(&fake, |_| Some("true".to_owned()), tool_turn);
    let mut editor = start_editor(&fake, AUTO_APPROVE).await;
    plan_and_approve(&mut editor).await;
    wait_all_complete(&mut editor, 5).await;
    let project = editor.dirs.project.clone();
    assert!(!project.join(".git").exists(), "no git here");
    let read = |path: &str| std::fs::read_to_string(project.join(path)).ok();
    let main_before = read("src/main.rs").expect("main.rs");
    let code_id = run_two_changes(&fake, &mut editor).await;

    assert_eq!(
        loopr_rewind(&editor, "print-version"),
        "rewound to before print-version: restored 2 file(s), 1 code loop(s) rewound\n  \
         restored src/main.rs\n  restored src/version.rs\nmade from the baselines (no git \
         checkpoint): it cannot be undone\n"
    );
    assert_eq!(read("src/main.rs"), Some(main_before));
    assert_eq!(read("src/version.rs"), None);
    let note = note_of(&editor, &code_id).await;
    assert!(
        note.as_str()
            .is_some_and(|note| note.starts_with("rewound: to before phase print-version at ")),
        "{note}"
    );

    let refused = editor.command("LooprUndo print-version").await;
    assert_eq!(
        refused.as_deref(),
        Some("Loopr: this rewind was made from the baselines, without git, and cannot be undone")
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_restores_a_file_git_ignores_that_the_phase_edited_and_undo_brings_the_edit_back() {
    let fake = FakeLlm::start().await;
    crate::scenario::push_one_spec_hierarchy(&fake, |_| Some("true".to_owned()), tool_turn);
    let mut editor = start_editor(&fake, AUTO_APPROVE).await;
    let project = editor.dirs.project.clone();
    std::fs::write(project.join(".gitignore"), "*.log\n").expect("write");
    std::fs::write(project.join("notes.log"), "the user's notes\n").expect("write");
    commit_everything(&project);
    assert_eq!(git(&project, &["ls-files", "notes.log"]), "", "ignored");
    plan_and_approve(&mut editor).await;
    wait_all_complete(&mut editor, 5).await;
    let read = |path: &str| std::fs::read_to_string(project.join(path)).ok();
    fake.push_routed(
        &code_route("print-version"),
        TurnBuilder::new()
            .tool_use("e1", "edit_file", json!({"path": "notes.log", "old_string": "the user's notes", "new_string": "the loop's notes"}))
            .tool_use("done", "complete_phase", json!({"summary": "notes"}))
            .reply(),
    );
    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code_id, "complete").await;
    assert_eq!(read("notes.log").as_deref(), Some("the loop's notes\n"));

    assert_eq!(
        loopr_rewind(&editor, "print-version"),
        format!(
            "rewound to before print-version: restored 1 file(s), 1 code loop(s) rewound\n  \
             restored notes.log\nthe tree as it was before the rewind is kept as git ref \
             refs/loopr/{code_id}/rewound; `loopr undo print-version` undoes the rewind\n"
        )
    );
    assert_eq!(
        read("notes.log").as_deref(),
        Some("the user's notes\n"),
        "the ignored file is back as it was, not deleted"
    );
    assert_eq!(
        loopr(&editor, &["undo", "print-version"]),
        "undid the rewind to before print-version: restored 1 file(s)\n  restored notes.log\n"
    );
    assert_eq!(
        read("notes.log").as_deref(),
        Some("the loop's notes\n"),
        "undo brings the phase's edit back"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_git_cannot_read_stops_the_rewind_with_a_clear_error_before_anything_changes()
{
    let fake = FakeLlm::start().await;
    let mut editor = planned_in_git(&fake).await;
    let project = editor.dirs.project.clone();
    let code_id = run_two_changes(&fake, &mut editor).await;
    // The checkpoint's commit is lost (a pruned or damaged object store): its ref names an
    // object git no longer has.
    let before = git(
        &project,
        &["rev-parse", &format!("refs/loopr/{code_id}/before")],
    );
    let before = before.trim();
    std::fs::remove_file(
        project
            .join(".git/objects")
            .join(&before[..2])
            .join(&before[2..]),
    )
    .expect("the checkpoint's loose object");
    let tree = |project: &Path| {
        (
            std::fs::read_to_string(project.join("src/main.rs")).ok(),
            std::fs::read_to_string(project.join("src/version.rs")).ok(),
            git(project, &["status", "--porcelain=v1"]),
        )
    };
    let tree_before = tree(&project);

    let refused = loopr_failing(&editor, &["rewind", "print-version"]);
    assert!(
        refused.starts_with(
            "loopr: rewinding to before print-version: the checkpoint taken before phase \
             print-version cannot be read, so nothing was changed: git "
        ),
        "{refused}"
    );
    assert_eq!(tree(&project), tree_before, "the tree is untouched");
    assert_eq!(
        git(
            &project,
            &["for-each-ref", "--format=%(refname)", "refs/loopr/"]
        ),
        format!("refs/loopr/{code_id}/before\n"),
        "no snapshot of a rewind that did not happen"
    );
    assert_eq!(note_of(&editor, &code_id).await, Value::Null, "not rewound");
    editor.quit().await;
}

/// A rewind that wrote the files but cannot record itself beside one of the loops it rewound
/// (a folder stands where its record goes) says so, and still records itself beside the
/// phase's loop and notes every loop rewound: undoing it brings the phases' work back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_that_fails_part_way_records_and_notes_what_it_did_so_undo_brings_it_back() {
    let fake = FakeLlm::start().await;
    let mut editor = planned_in_git(&fake).await;
    let project = editor.dirs.project.clone();
    let read = |path: &str| std::fs::read_to_string(project.join(path)).ok();
    let (main_before, readme_before) = (read("src/main.rs"), read("README.md"));
    let first = run_two_changes(&fake, &mut editor).await;
    fake.push_routed(
        &code_route("document-flag"),
        TurnBuilder::new()
            .tool_use("e1", "edit_file", json!({"path": "README.md", "old_string": "A tiny CLI.", "new_string": "A tiny CLI with --version."}))
            .tool_use("done", "complete_phase", json!({"summary": "documented"}))
            .reply(),
    );
    let second = run_code_loop(&mut editor, "document-flag").await;
    editor.wait_status(&second, "complete").await;
    let (main_after, readme_after) = (read("src/main.rs"), read("README.md"));
    let second_dir = walkdir_named(&editor.dirs.loopr_home, &second).expect("its folder");
    std::fs::create_dir(second_dir.join("rewind.json")).expect("a folder in the way");

    let failed = loopr_failing(&editor, &["rewind", "print-version"]);
    assert!(
        failed.starts_with(
            "loopr: rewinding to before print-version: the rewind to before phase print-version \
             stopped part way (3 file(s) restored, 2 code loop(s) noted rewound; it can be \
             undone): recording the rewind in "
        ),
        "{failed}"
    );
    assert_eq!(read("src/main.rs"), main_before);
    assert_eq!(read("src/version.rs"), None);
    assert_eq!(read("README.md"), readme_before);
    for id in [&first, &second] {
        let note = note_of(&editor, id).await;
        assert!(
            note.as_str()
                .is_some_and(|note| note.starts_with("rewound: to before phase print-version")),
            "{note}"
        );
    }

    let undone = loopr(&editor, &["undo", "print-version"]);
    assert!(
        undone.starts_with("undid the rewind to before print-version: restored 3 file(s)\n"),
        "{undone}"
    );
    assert_eq!(read("src/main.rs"), main_after);
    assert_eq!(read("README.md"), readme_after);
    assert!(read("src/version.rs").is_some(), "created again");
    editor.quit().await;
}

/// The folder named `name` somewhere under `dir`.
fn walkdir_named(dir: &Path, name: &str) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        if entry.file_name() == name {
            return Some(path);
        }
        if let Some(found) = walkdir_named(&path, name) {
            return Some(found);
        }
    }
    None
}
