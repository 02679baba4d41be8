//! Requirements with ids (issue 25, item 1): a spec whose requirement no phase covers, and a
//! phase whose tasks leave a requirement the spec assigned it uncited, are refused with an
//! error result naming the problem, and the model's corrected calls are stored and rendered
//! with the requirements anchored in spec.md and linked from phase.md. A spec stored before
//! requirements existed still loads and its phases resume and render.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::fake_llm::FakeLlm;
use crate::scenario::{
    ONE_SPEC_PHASES, one_spec_plan, phase_input, phase_route, plan_and_approve, plan_route,
    push_one_spec, requests_routed, spec_input, spec_route, stalled_turn, start_editor,
    start_editor_in, tool_results, tool_turn, wait_all_complete,
};

const NO_REVIEWS: &str = "{ plan_review_passes = 0, spec_review = false }";

/// `spec_input` with a second requirement, R2, covered by `print-version` when `covered`.
fn spec_with_r2(covered: bool) -> Value {
    let mut spec = spec_input("version-flag", &ONE_SPEC_PHASES);
    spec["requirements"]
        .as_array_mut()
        .expect("requirements")
        .push(json!({
            "id": "R2",
            "text": "WHEN the user runs sample -V THE SYSTEM SHALL print the same as --version",
            "check": "A test compares the two outputs."
        }));
    if covered {
        spec["phases"][0]["requirements"] = json!(["R1", "R2"]);
    }
    spec
}

/// `phase_input` of `print-version`, its second task citing R2 when `cited`.
fn print_version_phase(cited: bool) -> Value {
    let mut phase = phase_input("print-version");
    if cited {
        phase["tasks"][1]["requirements"] = json!(["R2"]);
    }
    phase
}

/// The model on `route` called `tool` twice: the first call got an error result naming the
/// one `problem`, the second was accepted.
fn assert_refused_once(fake: &FakeLlm, route: &str, tool: &str, problem: &str) {
    let requests = requests_routed(fake, route);
    assert_eq!(requests.len(), 2, "one refusal, then the corrected call");
    let answer = &tool_results(&requests[1])[0];
    assert_eq!(answer["is_error"], true, "{answer:#}");
    assert_eq!(
        answer["content"],
        format!(
            "{tool} rejected the input (1 problem); nothing was saved. Fix every problem below \
             and call {tool} again with the complete corrected input:\n- {problem}\n"
        )
    );
}

fn artifact_of(records: &[Value], kind: &str, name: &str) -> PathBuf {
    let record = records
        .iter()
        .find(|record| record["type"] == kind && record["name"] == name)
        .unwrap_or_else(|| panic!("a {kind} loop named {name}"));
    PathBuf::from(record["artifact_path"].as_str().expect("artifact path"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncovered_requirement_and_an_uncited_one_are_refused_then_corrected_and_linked() {
    let fake = FakeLlm::start().await;
    fake.push_routed(
        plan_route(),
        tool_turn("plan", "create_plan", one_spec_plan()),
    );
    let spec = spec_route("version-flag");
    fake.push_routed(&spec, tool_turn("s1", "create_spec", spec_with_r2(false)));
    fake.push_routed(&spec, tool_turn("s2", "create_spec", spec_with_r2(true)));
    let print = phase_route("print-version");
    fake.push_routed(
        &print,
        tool_turn("p1", "create_phase", print_version_phase(false)),
    );
    fake.push_routed(
        &print,
        tool_turn("p2", "create_phase", print_version_phase(true)),
    );
    for phase in &ONE_SPEC_PHASES[1..] {
        fake.push_routed(
            &phase_route(phase),
            tool_turn(phase, "create_phase", phase_input(phase)),
        );
    }
    let mut editor = start_editor(&fake, NO_REVIEWS).await;
    plan_and_approve(&mut editor).await;
    let records = wait_all_complete(&mut editor, 1 + 1 + 3).await;

    assert_refused_once(
        &fake,
        &spec,
        "create_spec",
        "requirements[1]: R2 is covered by no phase; add \"R2\" to the `requirements` of the \
         phase that implements it",
    );
    let asked = crate::fake_llm::first_user_text(&requests_routed(&fake, &print)[0]);
    assert!(
        asked.contains(
            "Requirements this phase covers; cite each in the requirements of a task that \
             satisfies it:\n- R1: WHEN the user runs sample --version THE SYSTEM SHALL print \
             sample 0.3.1 and exit 0\n- R2: WHEN the user runs sample -V THE SYSTEM SHALL print \
             the same as --version\n"
        ),
        "the phase loop is told what it must cite: {asked}"
    );
    assert_refused_once(
        &fake,
        &print,
        "create_phase",
        "tasks: the spec assigns R2 (WHEN the user runs sample -V THE SYSTEM SHALL print the \
         same as --version) to this phase but no task cites it; add \"R2\" to the \
         `requirements` of the task that satisfies it, or add that task",
    );

    // spec.md anchors each requirement; phase.md links each citing task to its anchor.
    let spec_md =
        std::fs::read_to_string(artifact_of(&records, "spec", "version-flag")).expect("spec.md");
    assert!(
        spec_md.contains(
            "- <a id=\"R2\"></a>**R2:** WHEN the user runs sample -V THE SYSTEM SHALL print the \
             same as --version *Check:* A test compares the two outputs.\n"
        ),
        "{spec_md}"
    );
    let phase_path = artifact_of(&records, "phase", "print-version");
    let phase_md = std::fs::read_to_string(&phase_path).expect("phase.md");
    let task = phase_md
        .lines()
        .find(|line| line.starts_with("- [ ] 2. "))
        .expect("the second task");
    let (_, link) = task
        .split_once(" — satisfies [`R2`](")
        .unwrap_or_else(|| panic!("a link to R2: {phase_md}"));
    let (target, anchor) = link
        .trim_end_matches(')')
        .split_once('#')
        .expect("an anchor");
    assert_eq!(anchor, "R2");
    let linked: &Path = phase_path.parent().expect("dir");
    let linked_spec = std::fs::read_to_string(linked.join(target)).expect("the linked spec.md");
    assert_eq!(linked_spec, spec_md, "the link reaches this spec's spec.md");
    editor.quit().await;
}

/// Rewrites the stored spec.json beside `spec_md` as specs were stored before requirements:
/// no `requirements`, in the spec or its phases.
fn store_in_the_format_before_requirements(spec_md: &Path) {
    let path = spec_md.with_extension("json");
    let mut spec: Value =
        serde_json::from_slice(&std::fs::read(&path).expect("spec.json")).expect("json");
    let object = spec.as_object_mut().expect("an object");
    object
        .remove("requirements")
        .expect("stored with requirements");
    for phase in object["phases"].as_array_mut().expect("phases") {
        phase.as_object_mut().expect("phase").remove("requirements");
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&spec).expect("json")).expect("write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phases_under_a_spec_stored_before_requirements_resume_and_render() {
    let fake = FakeLlm::start().await;
    push_one_spec(&fake, tool_turn);
    for phase in ONE_SPEC_PHASES {
        fake.push_routed(&phase_route(phase), stalled_turn("Reading the spec"));
    }
    let mut editor = start_editor(&fake, NO_REVIEWS).await;
    plan_and_approve(&mut editor).await;
    fake.wait_for_requests(2 + ONE_SPEC_PHASES.len()).await;
    let records = editor.status_records().await;
    let spec_md = artifact_of(&records, "spec", "version-flag");
    let dirs = editor.quit().await;

    store_in_the_format_before_requirements(&spec_md);
    // Each task cites R1, which the spec's first acceptance criterion now reads as; the spec
    // assigned the phases nothing, so citing nothing would pass too.
    for phase in ONE_SPEC_PHASES {
        fake.push_routed(
            &phase_route(phase),
            tool_turn(phase, "create_phase", phase_input(phase)),
        );
    }
    let mut editor = start_editor_in(dirs, &fake, NO_REVIEWS).await;
    let records = wait_all_complete(&mut editor, 1 + 1 + 3).await;
    for phase in ONE_SPEC_PHASES {
        let phase_md =
            std::fs::read_to_string(artifact_of(&records, "phase", phase)).expect("phase.md");
        assert!(
            phase_md.contains(
                "1. Match --version before other arguments and print the version \
                 (`src/main.rs`, modify) — satisfies `R1`\n"
            ),
            "the citation is the id alone: the old spec.md has no anchors\n{phase_md}"
        );
    }
    editor.quit().await;
}
