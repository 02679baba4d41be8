//! The plan in the repository (`export_dir`): the approved tree is mirrored with relative
//! links that resolve, a revision updates the files the user left alone and keeps (and names)
//! the one they edited, and a link planted at the export folder is refused with a message;
//! what an export writes while a code loop's command runs is not that loop's change.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::code::{mkfifo, planned_editor, quickfix_items};
use crate::fake_llm::FakeLlm;
use crate::nvim::TestNvim;
use crate::scenario::{
    code_route, complete_phase_turn, files_under, plan_and_approve, plan_route, revise_current,
    run_code_loop, script_revised_spec, start_editor, tool_turn, valid_plan, wait_all_complete,
    wait_settled,
};

const EXPORTING: &str =
    "{ plan_review_passes = 0, spec_review = false, export_dir = 'docs/plans' }";

/// The plan's folder: `export_dir`, then the plan's name made a file name.
const PLAN_DIR: &str = "docs/plans/add-a-version-flag";

/// The exported files, relative to the plan's folder.
fn exported(project: &Path) -> Vec<String> {
    let dir = project.join(PLAN_DIR);
    files_under(&dir)
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(&dir).expect("below the plan's folder");
            relative.display().to_string()
        })
        .collect()
}

/// Every link of every exported file that is not a URL names an exported file; returns how
/// many did.
fn assert_links_resolve(project: &Path) -> usize {
    let dir = project
        .join(PLAN_DIR)
        .canonicalize()
        .expect("the plan's folder");
    let mut resolved = 0;
    for file in files_under(&dir) {
        let text = std::fs::read_to_string(&file).expect("exported markdown");
        for (start, _) in text.match_indices("](") {
            let rest = &text[start + 2..];
            let destination = &rest[..rest.find(')').expect("closing )")];
            let target = destination.split('#').next().unwrap_or_default();
            if target.is_empty() || destination.contains("://") {
                continue;
            }
            let linked: PathBuf = file.parent().expect("folder").join(target);
            let linked = linked
                .canonicalize()
                .unwrap_or_else(|err| panic!("{}: {destination}: {err}", file.display()));
            assert!(
                linked.starts_with(&dir),
                "{destination} leaves the plan's folder"
            );
            resolved += 1;
        }
    }
    resolved
}

async fn messages(editor: &TestNvim) -> String {
    editor
        .lua("return vim.api.nvim_exec2('messages', { output = true }).output")
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approved_tree_is_exported_with_links_that_resolve_and_an_edited_file_survives_a_revision()
 {
    let fake = FakeLlm::start().await;
    script_revised_spec(&fake);
    let mut editor = start_editor(&fake, EXPORTING).await;
    plan_and_approve(&mut editor).await;
    let records = wait_all_complete(&mut editor, 1 + 1 + 3).await;
    let project = editor.dirs.project.clone();
    assert_eq!(
        exported(&project),
        [
            "README.md",
            "version-flag/01-parse-flag.md",
            "version-flag/02-print-version.md",
            "version-flag/03-exit-code.md",
            "version-flag/README.md",
        ]
    );
    // Plan to spec, spec to its 3 phases and the plan, each phase to its spec and the plan.
    assert!(assert_links_resolve(&project) >= 1 + 4 + 3 * 2);

    let spec_readme = project.join(PLAN_DIR).join("version-flag/README.md");
    std::fs::write(&spec_readme, "# My notes on the spec\n").expect("the user's edit");
    let spec_md = records
        .iter()
        .find(|record| record["type"] == "spec")
        .and_then(|record| record["artifact_path"].as_str())
        .expect("spec.md")
        .to_owned();
    editor.exec(&format!("vim.cmd.edit({spec_md:?})")).await;
    revise_current(&editor, "Split parsing from printing").await;
    let shown = format!("{PLAN_DIR}/version-flag/README.md");
    let notice = editor.wait_notice(&shown).await;
    assert_eq!(notice["level"], "warn");
    assert_eq!(
        notice["message"],
        format!(
            "Loopr: {shown} was edited since Loopr exported it, so Loopr left it as it is and \
             the plan's newer text is not in it; delete or move the file to have it exported \
             again"
        )
    );
    wait_settled(&mut editor, 1 + 1 + 3 + 3).await;

    assert_eq!(
        std::fs::read_to_string(&spec_readme).expect("kept"),
        "# My notes on the spec\n"
    );
    // The old phases' files went, the revised phases' came.
    assert_eq!(
        exported(&project),
        [
            "README.md",
            "version-flag/01-parse-args.md",
            "version-flag/02-print-it.md",
            "version-flag/03-exit-zero.md",
            "version-flag/README.md",
        ]
    );
    assert_links_resolve(&project);
    let told = messages(&editor).await;
    assert_eq!(told.matches(&shown).count(), 1, "told once: {told}");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_planted_at_the_export_folder_is_refused_with_a_message() {
    let fake = FakeLlm::start().await;
    fake.push_routed(plan_route(), tool_turn("plan", "create_plan", valid_plan()));
    let mut editor = start_editor(&fake, EXPORTING).await;
    let outside = tempfile::tempdir().expect("outside the project");
    let docs = editor.dirs.project.join("docs");
    std::fs::create_dir_all(&docs).expect("docs");
    std::os::unix::fs::symlink(outside.path(), docs.join("plans")).expect("the planted link");

    let plan_id = editor.plan("Add a --version flag").await;
    let notice = editor.wait_event("LooprNotice", |_| true).await;
    assert_eq!(
        notice["message"],
        "Loopr: the plan could not be exported to docs/plans: docs/plans is a symbolic link or \
         something else that is not a folder; Loopr does not write through links; make it a \
         folder of the project or set export_dir to another one; the loop goes on"
    );
    assert!(
        messages(&editor)
            .await
            .contains("could not be exported to docs/plans")
    );
    editor.wait_status(&plan_id, "awaiting_approval").await;
    assert_eq!(
        std::fs::read_dir(outside.path()).expect("list").count(),
        0,
        "nothing was written through the link"
    );
    editor.quit().await;
}

/// The task boxes of an exported phase file.
fn exported_boxes(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .expect("the exported phase")
        .lines()
        .filter(|line| {
            line.starts_with("- [") && line[6..].starts_with(|c: char| c.is_ascii_digit())
        })
        .map(|line| line[..8].to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exported_phase_shows_the_tasks_ticked_as_the_code_loop_goes() {
    let fake = FakeLlm::start().await;
    let setup = "{ export_dir = 'docs/plans', approvals = { write = 'auto', edit = 'auto', command = 'auto' } }";
    let mut editor = planned_editor(&fake, setup, "true").await;
    let phase_file = editor
        .dirs
        .project
        .join(PLAN_DIR)
        .join("version-flag/01-print-version.md");
    assert_eq!(exported_boxes(&phase_file), ["- [ ] 1.", "- [ ] 2."]);

    let route = code_route("print-version");
    fake.push_routed(
        &route,
        tool_turn("first", "mark_tasks_done", json!({"tasks": [1]})),
    );
    let (complete, release) = complete_phase_turn("prints the version").held();
    fake.push_routed(&route, complete);
    let asked = fake.requests().len();
    let code_id = run_code_loop(&mut editor, "print-version").await;
    // The turn after the tick is asked once the tick is answered, which is after the export.
    fake.wait_for_requests(asked + 2).await;
    assert_eq!(exported_boxes(&phase_file), ["- [x] 1.", "- [ ] 2."]);

    release.notify_one();
    // The loop's end is recorded after its last ticks are exported.
    editor.wait_status(&code_id, "complete").await;
    assert_eq!(exported_boxes(&phase_file), ["- [x] 1.", "- [x] 2."]);
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_written_while_a_command_runs_is_not_in_the_code_loops_changes_or_undo() {
    let fake = FakeLlm::start().await;
    let setup = "{ export_dir = 'docs/plans', approvals = { write = 'auto', edit = 'auto', command = 'auto' } }";
    let mut editor = planned_editor(&fake, setup, "true").await;
    let project = editor.dirs.project.clone();
    mkfifo(&project.join("go.fifo"));
    let route = code_route("print-version");
    fake.push_routed(
        &route,
        tool_turn(
            "c1",
            "run_command",
            json!({"command": "read -r word < go.fifo && echo \"$word\" > generated.txt"}),
        ),
    );
    fake.push_routed(&route, complete_phase_turn("wrote generated.txt"));
    let code_id = run_code_loop(&mut editor, "print-version").await;
    // The open for writing returns once the command opened the FIFO to read: it runs.
    let fifo = project.join("go.fifo");
    let writer = tokio::task::spawn_blocking(move || {
        std::fs::OpenOptions::new()
            .write(true)
            .open(fifo)
            .expect("open the FIFO")
    });
    let mut writer = tokio::time::timeout(crate::nvim::WAIT, writer)
        .await
        .expect("the command runs")
        .expect("join");

    // Meanwhile another plan of the project is made, and exported.
    fake.push_routed(plan_route(), tool_turn("plan", "create_plan", valid_plan()));
    assert_eq!(editor.command("LooprPlan Add a --help flag").await, None);
    editor
        .wait_event("LooprReady", |data| {
            data["message"]
                .as_str()
                .is_some_and(|message| message.contains("Add a --help flag"))
        })
        .await;
    let exported = project.join("docs/plans/add-a-help-flag/README.md");
    assert!(exported.exists(), "the other plan is exported");

    std::io::Write::write_all(&mut writer, b"generated\n").expect("the command's input");
    drop(writer);
    editor.wait_status(&code_id, "complete").await;
    assert_eq!(editor.command("LooprChanges print-version").await, None);
    let items = quickfix_items(&editor).await;
    assert_eq!(
        items,
        json!([{"file": "generated.txt", "text": "added: generated"}]),
        "only the command's own file"
    );
    // Forced: a file a command created may hold the user's saves (see `:LooprUndo`).
    assert_eq!(editor.command("LooprUndo! print-version").await, None);
    assert!(!project.join("generated.txt").exists(), "undone");
    assert!(exported.exists(), "the export is not undone");
    editor.quit().await;
}
