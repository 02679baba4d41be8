//! `web_fetch` from a planning loop in Neovim: a fetch asks for approval per host in the
//! approval buffer, and a rejection goes back to the model; a page built to be slow to read
//! neither hangs its loop nor holds up the others.

use std::sync::Arc;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use crate::fake_llm::{FakeLlm, TurnBuilder};
use crate::nvim::WAIT;
use crate::scenario::{
    create_plan_turn, list_files_turn, plan_route, requests_routed, start_editor, start_editor_at,
    tool_results, tool_turn, valid_plan,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planning_loop_asks_before_fetching_from_a_host_and_hears_the_rejection() {
    let fake = FakeLlm::start().await;
    // A public address literal: checked without DNS, and never connected to, since the fetch
    // is rejected.
    let url = "http://93.184.216.34/docs/";
    fake.push_routed(
        plan_route(),
        TurnBuilder::new()
            .tool_use("toolu_fetch", "web_fetch", json!({ "url": url }))
            .usage(300, 40)
            .reply(),
    );
    fake.push_routed(
        plan_route(),
        tool_turn("toolu_plan", "create_plan", valid_plan()),
    );
    let mut editor = start_editor(&fake, "{ web_fetch = true }").await;
    let plan_id = editor.plan("Add a --version flag").await;

    let asked = editor.wait_event("LooprApprovalRequested", |_| true).await;
    assert_eq!(
        (asked["kind"].clone(), asked["subject"].clone()),
        (json!("fetch"), json!("93.184.216.34"))
    );
    let lines: Vec<String> = editor
        .lua(&format!(
            "for _, buf in ipairs(vim.api.nvim_list_bufs()) do if vim.api.nvim_buf_get_name(buf) == 'loopr://approval/{}' then return vim.api.nvim_buf_get_lines(buf, 0, -1, false) end end return {{}}",
            asked["id"]
        ))
        .await;
    assert_eq!(
        lines.first().map(String::as_str),
        Some(format!("Loopr wants to fetch {url} (loop {plan_id})").as_str()),
        "{lines:?}"
    );
    assert!(
        lines.last().is_some_and(
            |keys| keys.contains("A accept all fetches from 93.184.216.34 in this loop")
        ),
        "{lines:?}"
    );

    let answered: bool = editor
        .lua_answered(&format!(
            "require('loopr.approvals').answer({}, 'reject', 'read the local docs instead', function(answered) result = answered end)",
            asked["id"]
        ))
        .await;
    assert!(answered);
    editor.wait_status(&plan_id, "awaiting_approval").await;
    let requests = fake.requests();
    let results = tool_results(&requests.last().expect("the second turn").body);
    assert_eq!(results[0]["is_error"], true);
    assert!(
        results[0]["content"]
            .as_str()
            .is_some_and(|text: &str| text.contains("read the local docs instead")),
        "{results:?}"
    );
    editor.quit().await;
}

/// Serves `page` as HTML on 127.0.0.1 to every request; returns its URL and what is notified
/// once a response went out.
async fn serve_html(page: String) -> (String, Arc<Notify>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/deep", listener.local_addr().expect("address"));
    let served = Arc::new(Notify::new());
    let notify = served.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut request = [0u8; 4096];
            let _ = socket.read(&mut request).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                page.len()
            );
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(page.as_bytes()).await;
            notify.notify_one();
        }
    });
    (url, served)
}

/// 100,000 nested `<div>`s (the old HTML reader took minutes, on an async worker, past the
/// fetch's timeout and cancel): the fetching loop gets the text within seconds, and a loop
/// started while the page is read streams all its turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deeply_nested_page_neither_hangs_its_loop_nor_holds_up_another() {
    let depth = 100_000;
    let (url, served) = serve_html(format!(
        "<html><body>{}deep inside{}</body></html>",
        "<div>".repeat(depth),
        "</div>".repeat(depth)
    ))
    .await;
    let fake = FakeLlm::start().await;
    let fetching_task = "Read the deep page";
    fake.push_routed(
        fetching_task,
        TurnBuilder::new()
            .tool_use("toolu_fetch", "web_fetch", json!({ "url": url }))
            .usage(300, 40)
            .reply(),
    );
    fake.push_routed(fetching_task, create_plan_turn("toolu_plan", valid_plan()));
    let other_task = "Tidy the README";
    for _ in 0..3 {
        fake.push_routed(other_task, list_files_turn());
    }
    fake.push_routed(other_task, create_plan_turn("toolu_plan", valid_plan()));
    let mut editor = start_editor_at(
        fake.base_url(),
        "{ web_fetch = true, approvals = { fetch = 'auto' } }",
        vec![("LOOPR_TEST_FETCH_LOOPBACK".to_owned(), "1".to_owned())],
    )
    .await;

    let fetching = editor.plan(fetching_task).await;
    tokio::time::timeout(WAIT, served.notified())
        .await
        .expect("the page was fetched");
    let other = editor.plan(other_task).await;
    editor.wait_status(&other, "awaiting_approval").await;
    assert_eq!(requests_routed(&fake, other_task).len(), 4);
    editor.wait_status(&fetching, "awaiting_approval").await;

    let requests = requests_routed(&fake, fetching_task);
    let results = tool_results(&requests[1]);
    assert_ne!(results[0]["is_error"], true, "{results:?}");
    assert_eq!(results[0]["content"], "deep inside\n", "{results:?}");
    editor.quit().await;
}
