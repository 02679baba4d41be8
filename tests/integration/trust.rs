//! What a project cannot make Loopr do, as a user sees it: Neovim started in the home
//! directory does not make it a project (loops would write the shell's and editor's start-up
//! files, and Loopr's own state).

use crate::fake_llm::FakeLlm;
use crate::nvim::TestDirs;
use crate::scenario::{files_under, start_editor_in};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neovim_started_in_the_home_directory_does_not_make_it_a_project() {
    let fake = FakeLlm::start().await;
    let mut dirs = TestDirs::new();
    // Neovim runs in $HOME, where no root marker is: the root falls back to the cwd.
    dirs.project = dirs.home.clone();
    dirs.loopr_home = dirs.temp.path().join("state");
    let state = dirs.loopr_home.clone();
    let home = dirs.home.clone();
    let before = files_under(&home);
    let editor = start_editor_in(dirs, &fake, "{}").await;

    let refused = editor.command("LooprPlan Add a --version flag").await;
    let message = refused.unwrap_or_default();
    assert!(
        message.contains("is your home directory") && message.contains("root_markers"),
        "{message}"
    );
    assert!(fake.requests().is_empty(), "nothing was asked of the model");
    let project_state: Vec<_> = files_under(&state)
        .into_iter()
        .filter(|path| !path.starts_with(state.join("hosts")))
        .collect();
    assert!(
        project_state.is_empty(),
        "no state was made for the home directory: {project_state:?}"
    );
    let after: Vec<_> = files_under(&home)
        .into_iter()
        // Neovim's own: its log and state, and its server socket in the test's TMPDIR.
        .filter(|path| !path.starts_with(home.join(".local/state/nvim")))
        .filter(|path| !path.starts_with(home.join("tmp")))
        .collect();
    assert_eq!(after, before, "nothing was written in the home directory");
}
