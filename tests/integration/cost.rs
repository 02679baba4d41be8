//! Tokens and cost in `:LooprStatus`, priced by the table `setup()` overrides, and the budget
//! guard that pauses a plan tree at its limit until `:LooprApprove`.

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, TurnBuilder, Wire};
use crate::nvim::TestNvim;
use crate::scenario::{
    FIRST_PHASES, plan_and_approve, plan_route, spec_input, spec_route, start_editor,
    start_openai_editor, tool_turn, valid_plan,
};

/// The status rows exactly as `:LooprStatus` asks for them (with the setup's prices).
async fn status_rows(editor: &TestNvim) -> Vec<Value> {
    editor
        .lua("return require('loopr.status').rows(require('loopr.config').root())")
        .await
}

fn row<'a>(rows: &'a [Value], id: &str) -> &'a Value {
    rows.iter()
        .find(|row| row["id"] == id)
        .unwrap_or_else(|| panic!("no loop {id}: {rows:#?}"))
}

async fn status_window_lines(editor: &TestNvim) -> Vec<String> {
    assert_eq!(editor.command("LooprStatus").await, None);
    editor
        .lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)")
        .await
}

fn line_of<'a>(lines: &'a [String], id: &str) -> &'a str {
    lines
        .iter()
        .find(|line| line.contains(id))
        .unwrap_or_else(|| panic!("no line for {id}: {lines:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_tokens_the_model_reported_and_their_cost_per_loop_and_per_tree() {
    let fake = FakeLlm::start().await;
    // The plan (on the default model, priced by the override) takes two turns that use the
    // prompt cache; the first spec runs on a model nobody priced.
    fake.push_routed(
        plan_route(),
        TurnBuilder::new()
            .tool_use("toolu_list", "list_files", json!({}))
            .usage(1_000, 200)
            .cache_usage(3_000, 0)
            .reply(),
    );
    fake.push_routed(
        plan_route(),
        TurnBuilder::new()
            .tool_use("plan", "create_plan", valid_plan())
            .usage(500, 300)
            .cache_usage(0, 3_000)
            .reply(),
    );
    fake.push_routed(
        &spec_route("version-flag"),
        TurnBuilder::new()
            .tool_use(
                "spec",
                "create_spec",
                spec_input("version-flag", &FIRST_PHASES),
            )
            .usage(700, 150)
            .reply(),
    );
    let mut editor = start_editor(
        &fake,
        "{ review_gates = { 'plan', 'spec' }, models = { spec = 'mystery-model-1' },
           prices = { ['claude-sonnet-4-5'] = { input = 2, output = 10, cache_write = 4, cache_read = 0.5 } } }",
    )
    .await;
    let plan_id = plan_and_approve(&mut editor).await;
    let spec = editor
        .wait_event("LooprLoopUpdated", |data| {
            data["type"] == "spec" && data["status"] == "awaiting_approval"
        })
        .await;
    let spec_id = spec["id"].as_str().expect("spec id").to_owned();

    let rows = status_rows(&editor).await;
    // 1000 + 500 input, 200 + 300 output, 3000 written to the cache, 3000 read from it, at
    // $2, $10, $4 and $0.50 per million.
    let plan_cost = (1_500.0 * 2.0 + 500.0 * 10.0 + 3_000.0 * 4.0 + 3_000.0 * 0.5) / 1e6;
    let plan = row(&rows, &plan_id);
    assert_eq!(
        (
            &plan["spend"]["input"],
            &plan["spend"]["output"],
            &plan["spend"]["cache_write"],
            &plan["spend"]["cache_read"]
        ),
        (&json!(1_500), &json!(500), &json!(3_000), &json!(3_000)),
        "{plan:#}"
    );
    let cost = plan["spend"]["cost_usd"].as_f64().expect("the plan's cost");
    assert!((cost - plan_cost).abs() < 1e-12, "{cost} vs {plan_cost}");
    assert_eq!(plan["spend"]["cost_unknown"], json!([]));
    assert_eq!(plan["tokens_in"], 7_500, "every input token, cached or not");

    let spec = row(&rows, &spec_id);
    assert_eq!(
        (&spec["spend"]["input"], &spec["spend"]["output"]),
        (&json!(700), &json!(150))
    );
    assert_eq!(spec["spend"]["cost_usd"], Value::Null, "no made-up cost");
    assert_eq!(spec["spend"]["cost_unknown"], json!(["mystery-model-1"]));
    assert_eq!(spec["tree"], Value::Null, "tree sums are on the root only");

    let tree = &plan["tree"];
    assert_eq!(
        (
            &tree["input"],
            &tree["output"],
            &tree["cache_write"],
            &tree["cache_read"]
        ),
        (&json!(2_200), &json!(650), &json!(3_000), &json!(3_000)),
        "{tree:#}"
    );
    let tree_cost = tree["cost_usd"].as_f64().expect("the priced part");
    assert!((tree_cost - plan_cost).abs() < 1e-12, "{tree_cost}");
    assert_eq!(tree["cost_unknown"], json!(["mystery-model-1"]));

    let lines = status_window_lines(&editor).await;
    let plan_line = line_of(&lines, &plan_id);
    assert!(
        plan_line.contains("7500 in (3000 cached, 3000 cache write) · 500 out"),
        "{plan_line}"
    );
    assert!(plan_line.contains("$0.0215"), "{plan_line}");
    assert!(
        plan_line.contains(
            "8200 in (3000 cached, 3000 cache write) · 650 out · $0.0215+? (cost unknown for \
             mystery-model-1)"
        ),
        "the tree's total: {plan_line}"
    );
    let spec_line = line_of(&lines, &spec_id);
    let cost_cell = spec_line
        .split_once("700 in · 150 out")
        .map(|(_, rest)| rest.trim_start())
        .unwrap_or_else(|| panic!("{spec_line}"));
    assert_eq!(
        cost_cell.split_whitespace().next(),
        Some("?"),
        "an unknown cost: {spec_line}"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_estimates_for_a_server_that_reports_no_usage_and_an_unknown_cost() {
    // llama.cpp's servers answer without usage although it is asked for.
    let fake = FakeLlm::start_wire(Wire::OpenAi).await;
    fake.push(
        TurnBuilder::new()
            .model("gemma3")
            .tool_use("call_plan", "create_plan", valid_plan())
            .without_usage()
            .reply(),
    );
    let mut editor =
        start_openai_editor(&fake, "{ model = 'gemma3', plan_review_passes = 0 }", None).await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "awaiting_approval").await;

    let rows = status_rows(&editor).await;
    let plan = row(&rows, &plan_id);
    for spend in [&plan["spend"], &plan["tree"]] {
        assert_eq!(spend["estimated"], true, "{plan:#}");
        assert!(
            spend["input"].as_u64().is_some_and(|tokens| tokens > 0)
                && spend["output"].as_u64().is_some_and(|tokens| tokens > 0),
            "the request and the answer are estimated: {plan:#}"
        );
        assert_eq!(spend["cost_usd"], Value::Null, "no made-up cost: {plan:#}");
        assert_eq!(spend["cost_unknown"], json!(["gemma3"]));
    }
    let lines = status_window_lines(&editor).await;
    let plan_line = line_of(&lines, &plan_id);
    let (tokens, rest) = plan_line
        .split_once(" out")
        .unwrap_or_else(|| panic!("no tokens: {plan_line}"));
    assert!(
        tokens.contains(" in · ~")
            && tokens.split(" in · ").next().is_some_and(|input| {
                input
                    .rsplit(' ')
                    .next()
                    .is_some_and(|count| count.starts_with('~') && count != "~0")
            }),
        "estimates read as such: {plan_line}"
    );
    assert_eq!(
        rest.split_whitespace().next(),
        Some("?"),
        "never $0.0000: {plan_line}"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_pauses_at_its_token_budget_and_approving_goes_on_from_where_it_was() {
    let fake = FakeLlm::start().await;
    let (mut editor, plan_id) = plan_paused_at_its_budget(&fake).await;
    let notice = editor.wait_notice("reached its budget").await;
    assert_eq!(
        notice["message"],
        format!(
            "Loopr: plan tree {plan_id} reached its budget (1100 of 1000 tokens); \
             :LooprApprove {plan_id} to go on"
        )
    );
    // The pause came before the second question: the fake was asked once.
    assert_eq!(fake.requests().len(), 1);
    let rows = status_rows(&editor).await;
    let paused = row(&rows, &plan_id);
    assert_eq!(paused["status"], "paused");
    assert!(
        paused["error"]
            .as_str()
            .is_some_and(|error| error.contains(&format!(":LooprApprove {plan_id}"))),
        "the status says why and what to do: {paused:#}"
    );

    fake.push_routed(plan_route(), tool_turn("plan", "create_plan", valid_plan()));
    assert_eq!(
        editor.command(&format!("LooprApprove {plan_id}")).await,
        None
    );
    editor.wait_status(&plan_id, "awaiting_approval").await;
    assert_the_conversation_went_on(&fake, "after the approval");
    // Nothing was lost: the tokens of both turns are counted.
    let rows = status_rows(&editor).await;
    let plan = row(&rows, &plan_id);
    assert_eq!(
        (&plan["spend"]["input"], &plan["spend"]["output"]),
        (&json!(1_100), &json!(400)),
        "{plan:#}"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_refuses_prices_and_budgets_it_cannot_use_and_says_what_fits() {
    let fake = FakeLlm::start().await;
    let editor = start_editor(&fake, "{}").await;
    for (opts, accepted) in [
        ("{ prices = { ['m'] = { input = 1, output = 2 } } }", true),
        (
            "{ prices = { ['m'] = { input = 1, output = 2, cache_write = 1.25, cache_read = 0.1 } } }",
            true,
        ),
        ("{ prices = { ['m'] = { input = 1 } } }", false),
        ("{ prices = { ['m'] = { input = -1, output = 2 } } }", false),
        (
            "{ prices = { ['m'] = { input = 1, output = 2, cached = 1 } } }",
            false,
        ),
        ("{ budget = { tokens = 5000 } }", true),
        ("{ budget = { usd = 2.5, tokens = 1 } }", true),
        ("{ budget = { tokens = 0 } }", false),
        ("{ budget = { usd = 0 } }", false),
        ("{ budget = { dollars = 5 } }", false),
    ] {
        let outcome: Value = editor
            .lua(&format!(
                "local ok, err = require('loopr.config').validate({opts})
                 return {{ ok = ok, err = err or vim.NIL }}"
            ))
            .await;
        assert_eq!(outcome["ok"], accepted, "{opts}: {outcome}");
        if !accepted {
            let option = if opts.contains("prices") {
                "prices"
            } else {
                "budget"
            };
            let err = outcome["err"].as_str().expect("a message");
            assert!(
                err.starts_with(&format!("Loopr: setup(): option {option} expects a table")),
                "{opts}: {err}"
            );
        }
    }
    editor.quit().await;
}

/// Calls `setup()` again with the options in effect and `change` over them, as a user
/// changing one option in a running Neovim does.
async fn setup_again(editor: &TestNvim, change: &str) {
    let ok: bool = editor
        .lua(&format!(
            "return require('loopr').setup(vim.tbl_extend('force', require('loopr.config').get(), {change}))"
        ))
        .await;
    assert!(ok, "setup({change}) refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raising_the_budget_in_setup_lets_a_paused_tree_go_on_with_nothing_lost() {
    let fake = FakeLlm::start().await;
    let (mut editor, plan_id) = plan_paused_at_its_budget(&fake).await;
    fake.push_routed(plan_route(), tool_turn("plan", "create_plan", valid_plan()));

    // A budget the tree has still spent (1100 of 1100) lets nothing go on; the one after it
    // does, and the notice says which: the host takes them in order.
    setup_again(&editor, "{ budget = { tokens = 1100 } }").await;
    setup_again(&editor, "{ budget = { tokens = 5000 } }").await;
    let notice = editor.wait_notice("goes on").await;
    assert_eq!(
        notice["message"],
        format!("Loopr: plan tree {plan_id} goes on within its budget now (1100 of 5000 tokens)")
    );
    editor.wait_status(&plan_id, "awaiting_approval").await;

    assert_the_conversation_went_on(&fake, "after the raise");
    let rows = status_rows(&editor).await;
    let plan = row(&rows, &plan_id);
    assert_eq!(
        (
            &plan["spend"]["input"],
            &plan["spend"]["output"],
            &plan["error"]
        ),
        (&json!(1_100), &json!(400), &Value::Null),
        "both turns counted, no pause left: {plan:#}"
    );
    editor.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_of_a_tree_at_its_budget_stays_pending_until_approval() {
    let fake = FakeLlm::start().await;
    // The plan's only turn takes 1200 tokens: it completes over the budget of 1000.
    fake.push_routed(
        plan_route(),
        crate::scenario::create_plan_turn("toolu_plan", valid_plan()),
    );
    let mut editor = start_editor(
        &fake,
        "{ budget = { tokens = 1000 }, review_gates = { 'spec' } }",
    )
    .await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "complete").await;
    let reason = format!(
        "plan tree {plan_id} reached its budget (1200 of 1000 tokens); :LooprApprove {plan_id} \
         to go on"
    );
    // The notice comes once the spec is held (not started, not paused).
    let notice = editor.wait_notice("reached its budget").await;
    assert_eq!(notice["message"], format!("Loopr: {reason}"));
    let rows = status_rows(&editor).await;
    let spec = rows
        .iter()
        .find(|row| row["name"] == "version-flag")
        .unwrap_or_else(|| panic!("no spec: {rows:#?}"));
    let spec_id = spec["id"].as_str().expect("spec id").to_owned();
    assert_eq!(
        (&spec["status"], &spec["error"]),
        (&json!("pending"), &json!(reason)),
        "the status says why it waits"
    );
    editor.poll_events();
    assert!(
        !editor
            .events_seen()
            .iter()
            .any(|(_, data)| data["id"] == spec_id.as_str() && data["status"] == "running"),
        "the spec never started: {:#?}",
        editor.events_seen()
    );
    assert_eq!(fake.requests().len(), 1, "only the plan asked the model");

    fake.push_routed(
        &spec_route("version-flag"),
        tool_turn(
            "spec",
            "create_spec",
            spec_input("version-flag", &FIRST_PHASES),
        ),
    );
    assert_eq!(
        editor.command(&format!("LooprApprove {plan_id}")).await,
        None
    );
    editor.wait_status(&spec_id, "awaiting_approval").await;
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "the spec asked once, after the approval");
    let asked = crate::fake_llm::first_user_text(&requests[1].body);
    assert!(
        asked.contains(&spec_route("version-flag")),
        "the second question is the spec's: {asked}"
    );
    editor.quit().await;
}

/// The paused plan's one more question (`when` it was let go on) carries the earlier
/// conversation: the first message, the model's `list_files` call and its result.
fn assert_the_conversation_went_on(fake: &FakeLlm, when: &str) {
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "one more question, {when}");
    let messages = requests[1].body["messages"]
        .as_array()
        .expect("messages")
        .clone();
    assert_eq!(
        messages.len(),
        3,
        "the earlier conversation goes on: {messages:#?}"
    );
    assert_eq!(
        messages[0]["content"], requests[0].body["messages"][0]["content"],
        "the same first message"
    );
    assert!(
        messages[1]["content"]
            .to_string()
            .contains("\"id\":\"toolu_list\""),
        "the model's earlier call: {:#}",
        messages[1]
    );
    assert!(
        messages[2]["content"]
            .to_string()
            .contains("\"tool_use_id\":\"toolu_list\""),
        "and its result: {:#}",
        messages[2]
    );
}

/// A plan whose first turn spends 1100 tokens under a budget of 1000: paused before its
/// second. Returns the editor and the plan's id.
async fn plan_paused_at_its_budget(fake: &FakeLlm) -> (TestNvim, String) {
    // 1100 tokens in the first turn: the budget of 1000 is reached before the second.
    fake.push_routed(
        plan_route(),
        TurnBuilder::new()
            .text("Let me look at the project first.")
            .tool_use("toolu_list", "list_files", json!({}))
            .usage(800, 300)
            .reply(),
    );
    let mut editor = start_editor(fake, "{ budget = { tokens = 1000 } }").await;
    let plan_id = editor.plan("Add a --version flag").await;
    editor.wait_status(&plan_id, "paused").await;
    (editor, plan_id)
}
