use crate::fake_llm::{FakeLlm, rate_limited};
use crate::nvim::WAIT;
use crate::scenario::{create_plan_turn, list_files_turn, stalled_turn, start_editor, valid_plan};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_slow_stream_at_once() {
    let fake = FakeLlm::start().await;
    fake.push(stalled_turn("Thinking very slowly"));
    let mut editor = start_editor(&fake, "{}").await;

    let loop_id = editor.plan("Add a --version flag").await;
    fake.wait_for_requests(1).await;
    let completion: Vec<String> = editor
        .lua("return require('loopr').complete_loop_ids('')")
        .await;
    assert_eq!(
        completion,
        vec![loop_id.clone()],
        ":LooprCancel completes running loop ids"
    );

    assert_eq!(editor.command("LooprCancel").await, None);
    editor.wait_status(&loop_id, "cancelled").await;
    tokio::time::timeout(WAIT, fake.wait_for_disconnect())
        .await
        .expect("the HTTP stream was closed");
    assert_eq!(
        fake.requests().len(),
        1,
        "a cancelled request is not retried"
    );

    let error = editor
        .command("LooprCancel")
        .await
        .expect("nothing left to cancel");
    assert!(error.contains("no running loop"), "{error}");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_by_id_interrupts_a_pending_retry() {
    let fake = FakeLlm::start().await;
    // The server asks for a 60 s pause; only the cancel can end the wait within the test's
    // time limit.
    fake.push(rate_limited(60));
    let mut editor = start_editor(&fake, "{}").await;

    let loop_id = editor.plan("Add a --version flag").await;
    editor
        .wait_event("LooprProgress", |data| {
            data["message"]
                .as_str()
                .is_some_and(|message| message.contains("retrying in 60.0s"))
        })
        .await;
    assert_eq!(
        editor.command(&format!("LooprCancel {loop_id}")).await,
        None
    );
    editor.wait_status(&loop_id, "cancelled").await;
    assert_eq!(fake.requests().len(), 1);
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_whose_host_was_killed_mid_stream_resumes_after_restart() {
    let fake = FakeLlm::start().await;
    fake.push(list_files_turn());
    fake.push(stalled_turn("Working"));
    let mut editor = start_editor(&fake, "{}").await;

    let loop_id = editor.plan("Add a --version flag").await;
    fake.wait_for_requests(2).await;
    let pid: i32 = editor.lua("return require('loopr.host').pid()").await;
    kill_and_reap(pid).await;

    // The next command restarts the host, which resumes the loop from its stored
    // conversation: the turn that was cut off is sent again, the finished one is not.
    fake.push(create_plan_turn("toolu_plan", valid_plan()));
    assert_eq!(editor.command("LooprStatus").await, None);
    editor.wait_status(&loop_id, "awaiting_approval").await;
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        requests[1].body, requests[2].body,
        "the resumed request repeats the cut-off one"
    );
    let records = editor.status_records().await;
    assert_eq!(records.len(), 1, "no duplicate loop: {records:?}");
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_host_is_restarted_on_the_next_command() {
    let fake = FakeLlm::start().await;
    fake.push(create_plan_turn("toolu_plan", valid_plan()));
    let mut editor = start_editor(&fake, "{}").await;

    assert_eq!(editor.command("LooprStatus").await, None, "starts the host");
    let first_pid: i32 = editor.lua("return require('loopr.host').pid()").await;
    kill_and_reap(first_pid).await;
    // Neovim tells of the exit as soon as it sees it; the next command is not what failed.
    let told: bool = editor
        .lua("return vim.wait(30000, function() return vim.fn.execute('messages'):find('host exited %(code 137%)') ~= nil end, 5)")
        .await;
    assert!(told, "the exit is reported");

    let loop_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&loop_id, "awaiting_approval").await;
    let second_pid: i32 = editor.lua("return require('loopr.host').pid()").await;
    assert_ne!(first_pid, second_pid);
    let messages: String = editor.lua("return vim.fn.execute('messages')").await;
    assert!(
        messages.contains("restarted"),
        "the user is told: {messages}"
    );

    // Closing Neovim ends the host too.
    editor.quit().await;
    crate::nvim::wait_for_exit(second_pid).await;
}

async fn kill_and_reap(pid: i32) {
    // SAFETY: sending SIGKILL to the host process this test started.
    let result = unsafe { libc::kill(pid, libc::SIGKILL) };
    assert_eq!(result, 0, "kill {pid}");
    crate::nvim::wait_for_exit(pid).await;
}
