//! Project rules files (`AGENTS.md` and the like) in every loop's system prompt.

use serde_json::Value;

use crate::fake_llm::FakeLlm;
use crate::scenario::{
    code_route, commit_everything, complete_phase_turn, open_transcript, phase_route,
    plan_and_approve, plan_route, push_one_spec_hierarchy, requests_routed, run_code_loop,
    spec_route, start_editor, tool_turn, transcript_with, wait_all_complete, watch_transcripts,
};

const ROOT_RULES: &str = "We use cargo nextest. Never call unwrap in library code.\n";
const NESTED_RULES: &str = "Keep main.rs under fifty lines.\n";

fn system_text(body: &Value) -> String {
    body["system"]
        .as_array()
        .expect("system blocks")
        .iter()
        .filter_map(|block| block["text"].as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_level_sees_the_projects_rules_and_a_code_loop_the_nested_ones_of_its_files() {
    let fake = FakeLlm::start().await;
    push_one_spec_hierarchy(&fake, |_| Some("true".to_owned()), tool_turn);
    fake.push_routed(
        &code_route("print-version"),
        complete_phase_turn("nothing to change"),
    );
    // A CLAUDE.md too big for what is left of a 400-byte cap, and a secret file named as rules.
    let mut editor = start_editor(
        &fake,
        "{ rules_max_bytes = 400, rules_files = { 'AGENTS.md', 'CLAUDE.md', '.env' }, approvals = { command = 'auto' } }",
    )
    .await;
    let project = editor.dirs.project.clone();
    std::fs::write(project.join("AGENTS.md"), ROOT_RULES).expect("AGENTS.md");
    std::fs::write(project.join("src/AGENTS.md"), NESTED_RULES).expect("src/AGENTS.md");
    std::fs::write(project.join("CLAUDE.md"), "Claude rule. ".repeat(100)).expect("CLAUDE.md");
    std::fs::write(project.join(".env"), "API_TOKEN=do-not-send\n").expect(".env");
    commit_everything(&project);
    watch_transcripts(&editor).await;

    let plan_id = plan_and_approve(&mut editor).await;
    wait_all_complete(&mut editor, 5).await;
    let code_id = run_code_loop(&mut editor, "print-version").await;
    editor.wait_status(&code_id, "complete").await;

    for (level, route) in [
        ("plan", plan_route().to_owned()),
        ("spec", spec_route("version-flag")),
        ("phase", phase_route("print-version")),
        ("code", code_route("print-version")),
    ] {
        let requests = requests_routed(&fake, &route);
        let system = system_text(
            requests
                .first()
                .unwrap_or_else(|| panic!("a {level} request")),
        );
        assert!(system.contains("# Project rules"), "{level}: {system}");
        assert!(
            system.contains(&format!("## AGENTS.md\n\n{}", ROOT_RULES.trim_end())),
            "{level}: {system}"
        );
        assert!(
            system.contains("[Loopr cut CLAUDE.md here: it has 1300 bytes"),
            "{level}: the oversized file is capped with a note: {system}"
        );
        assert!(
            !system.contains("do-not-send"),
            "{level}: the secret file is never read"
        );
        let nested = format!(
            "## src/AGENTS.md (for files under src/)\n\n{}",
            NESTED_RULES.trim_end()
        );
        assert_eq!(
            system.contains(&nested),
            level == "code",
            "{level}: only the code loop works on src/main.rs: {system}"
        );
    }

    // The transcript says which files the run was given.
    let buf = open_transcript(&editor, Some(&plan_id)).await;
    let transcript = transcript_with(&mut editor, buf, "Project rules:").await;
    assert!(
        transcript
            .contains("Project rules: AGENTS.md (57 bytes), CLAUDE.md (cut at 343 of 1300 bytes)"),
        "{transcript}"
    );

    // :checkhealth lists them, and the refused one with why.
    assert_eq!(editor.command("checkhealth loopr").await, None);
    let health: String = editor
        .lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
        .await;
    assert!(
        health.contains("rules file: AGENTS.md (57 bytes)"),
        "{health}"
    );
    assert!(
        health.contains("rules file .env is not read: it matches the secret pattern"),
        "{health}"
    );
}
