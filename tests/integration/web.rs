//! `web_fetch` from a planning loop in Neovim: a fetch asks for approval per host in the
//! approval buffer, and a rejection goes back to the model.

use serde_json::json;

use crate::fake_llm::{FakeLlm, TurnBuilder};
use crate::scenario::{plan_route, start_editor, tool_results, tool_turn, valid_plan};

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
