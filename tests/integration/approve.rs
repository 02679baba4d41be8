//! `:LooprApprove` as a user sees it: refused before anything starts when its children could
//! not reach the model, and named by the plan's task rather than by its id.

use crate::fake_llm::FakeLlm;
use crate::nvim::TestNvim;
use crate::scenario::{create_plan_turn, start_editor, valid_plan};

const MISSING_KEY: &str = "ANTHROPIC_API_KEY is not set; export it in the shell, or in Neovim \
                           run :let $ANTHROPIC_API_KEY = '<value>'";

async fn messages(editor: &TestNvim) -> String {
    editor
        .lua("return vim.api.nvim_exec2('messages', { output = true }).output")
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approving_without_a_key_is_refused_with_the_next_step_and_nothing_starts() {
    let fake = FakeLlm::start().await;
    fake.push(create_plan_turn("toolu_plan", valid_plan()));
    let mut editor = start_editor(&fake, "{}").await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "awaiting_approval").await;

    assert_eq!(editor.command("unlet $ANTHROPIC_API_KEY").await, None);
    let refused = editor.command("LooprApprove").await;
    assert!(
        refused
            .as_deref()
            .is_some_and(|err| err.contains(MISSING_KEY)),
        "{refused:?}"
    );
    let shown = messages(&editor).await;
    assert!(!shown.contains("approved"), "{shown}");
    let records = editor.status_records().await;
    assert_eq!(records.len(), 1, "no spec loop was created: {records:#?}");
    assert_eq!(records[0]["status"], "awaiting_approval", "{records:#?}");
    assert_eq!(fake.requests().len(), 1);
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approving_from_a_source_buffer_names_the_plan_by_its_task() {
    let fake = FakeLlm::start().await;
    fake.push(create_plan_turn("toolu_first", valid_plan()));
    fake.push(create_plan_turn("toolu_second", valid_plan()));
    let mut editor = start_editor(&fake, "{}").await;
    let first = editor.plan("Add a --version flag").await;
    editor.wait_status(&first, "awaiting_approval").await;
    let second = editor.plan("Print the help in colour").await;
    editor.wait_status(&second, "awaiting_approval").await;

    // A source buffer: no artifact here, so the newest plan awaiting review is approved.
    editor.exec("vim.cmd.edit('src/main.rs')").await;
    assert_eq!(editor.command("LooprApprove").await, None);
    editor.wait_status(&second, "complete").await;
    let shown = messages(&editor).await;
    assert!(
        shown.contains("Loopr: approved plan \"Print the help in colour\""),
        "{shown}"
    );
    assert!(
        shown.contains(
            "Loopr: plan \"Print the help in colour\" awaits review: :LooprApprove or :LooprRevise"
        ),
        "{shown}"
    );
    // `planning (loop …)` keeps its id (tests/integration/requests.rs holds that wording).
    let named_by_id: Vec<&str> = shown
        .lines()
        .filter(|line| line.contains(&second) && !line.contains("planning (loop"))
        .collect();
    assert!(named_by_id.is_empty(), "no long id: {named_by_id:?}");
    editor.quit().await;
}
