//! What a verification sends: the estimated input tokens of its first request (system
//! prompt, tools, and the first message with the requirements, tasks, validation output and
//! the diff, bounded by the context budget) for a phase whose changes are a 200-line diff,
//! counted as the context budget counts them. Prints figures only.
//! Run with `cargo bench --bench verification`.

use loopr::agent::{FileDiff, LoopSettings, first_request_tokens, fit_limits};
use loopr::artifacts::{PhaseArtifact, PhaseRequirements, Requirement, TaskItem};
use loopr::llm::ServerWindow;
use loopr::tools::file_diff;

/// A file before and after a change of `changed` lines among 400.
fn changed_file(changed: usize) -> (String, String) {
    let before: String = (0..400)
        .map(|i| format!("    let value_{i} = compute({i}, \"line {i} as it was\");\n"))
        .collect();
    let after: String = (0..400)
        .map(|i| {
            if i % 2 == 0 && i / 2 < changed / 2 {
                format!("    let value_{i} = derive({i}, \"line {i} as the phase left it\");\n")
            } else {
                format!("    let value_{i} = compute({i}, \"line {i} as it was\");\n")
            }
        })
        .collect();
    (before, after)
}

fn main() {
    let (before, after) = changed_file(200);
    let diff = file_diff("src/values.rs", &before, &after);
    let changed_lines = diff
        .lines()
        .filter(|line| {
            (line.starts_with('+') || line.starts_with('-'))
                && !line.starts_with("+++")
                && !line.starts_with("---")
        })
        .count();
    let known: Vec<Requirement> = (1..=4)
        .map(|n| Requirement {
            id: format!("R{n}"),
            text: format!(
                "WHEN value {n} is asked for THE SYSTEM SHALL derive it from its line number"
            ),
            check: format!("A unit test asks for value {n} and compares it with derive({n})."),
        })
        .collect();
    let tasks: Vec<TaskItem> = (1..=3)
        .map(|n| TaskItem {
            description: format!("Derive the values of part {n} instead of computing them"),
            file: Some("src/values.rs".to_owned()),
            action: None,
            references: Vec::new(),
            requirements: vec![format!("R{n}")],
        })
        .collect();
    // What a run checks, by the one rule: R1..R3 its tasks cite, R4 the spec assigned it.
    let phase = PhaseArtifact {
        name: "derive-values".to_owned(),
        title: "Derive the values".to_owned(),
        objective: "Derive every value from its line number.".to_owned(),
        tasks,
        validation_command: "cargo test".to_owned(),
        success_criteria: Vec::new(),
    };
    let requirements = PhaseRequirements {
        known,
        assigned: vec!["R4".to_owned()],
        spec_href: None,
    }
    .verified_against(&phase);
    let tasks = phase.tasks;
    let validation = "running 42 tests\n".to_owned()
        + &"test values::derives ... ok\n".repeat(42)
        + "test result: ok. 42 passed; 0 failed\n";
    let limits = fit_limits(&LoopSettings::default(), &ServerWindow::NotAsked);
    let budget = limits.context_budget.tokens;
    let diffs = [FileDiff {
        path: "src/values.rs".to_owned(),
        diff: diff.clone(),
    }];
    let tokens = first_request_tokens(&requirements, &tasks, Some(&validation), &diffs, budget);
    let without_diff = first_request_tokens(&requirements, &tasks, Some(&validation), &[], budget);
    println!("diff: {changed_lines} changed lines, {} bytes", diff.len());
    println!("context budget: {budget} tokens (the default)");
    println!("verification first request: ~{tokens} input tokens");
    println!("  of which the diff: ~{} tokens", tokens - without_diff);
    println!(
        "summary: a verification of a {changed_lines}-line diff sends ~{tokens} input tokens first"
    );
}
