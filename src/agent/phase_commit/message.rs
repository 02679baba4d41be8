//! A phase's commit message: its title, its objective, the tasks done, the requirements its
//! current verification found met, then the `Loopr-Plan:` and `Loopr-Phase:` trailers. Pure.
//! Bounded (a commit-msg hook hands it back through a command's output, which is capped).

use std::collections::BTreeSet;

use crate::agent::short_text::one_line;
use crate::artifacts::PhaseArtifact;

/// Characters of the objective kept.
const MAX_OBJECTIVE_CHARS: usize = 2_000;
/// Characters of one task or requirement line kept.
const MAX_LINE_CHARS: usize = 160;
/// Tasks or requirements listed; the rest are counted.
const MAX_LISTED: usize = 25;

/// What the message is made from.
#[derive(Clone, Debug, PartialEq)]
pub struct CommitMessage {
    /// The first line: the phase's title.
    pub title: String,
    pub text: String,
}

/// A requirement the phase's verification found met: its id and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetRequirement {
    pub id: String,
    pub text: String,
}

impl CommitMessage {
    /// The message for `phase` of the plan `plan`: `done` holds the numbers (from 1) of its
    /// tasks done, `met` the requirements its current verification found met.
    pub fn of(
        phase: &PhaseArtifact,
        done: &BTreeSet<usize>,
        met: &[MetRequirement],
        plan: &str,
    ) -> CommitMessage {
        let title = one_line(&phase.title, 200);
        let mut text = format!("{title}\n\n{}\n", wrap_objective(&phase.objective));
        let tasks: Vec<String> = phase
            .tasks
            .iter()
            .enumerate()
            .filter(|(index, _)| done.contains(&(index + 1)))
            .map(|(_, task)| one_line(&task.description, MAX_LINE_CHARS))
            .collect();
        push_list(&mut text, "Tasks done:", &tasks);
        let requirements: Vec<String> = met
            .iter()
            .map(|met| one_line(&format!("{}: {}", met.id, met.text), MAX_LINE_CHARS))
            .collect();
        push_list(&mut text, "Requirements covered:", &requirements);
        text.push_str(&format!(
            "\nLoopr-Plan: {}\nLoopr-Phase: {}\n",
            one_line(plan, 200),
            one_line(&phase.name, 200)
        ));
        CommitMessage { title, text }
    }
}

/// The objective as paragraphs of the text, cut to its bound.
fn wrap_objective(objective: &str) -> String {
    let trimmed = objective.trim();
    let mut kept: String = trimmed.chars().take(MAX_OBJECTIVE_CHARS).collect();
    if kept.len() < trimmed.len() {
        kept.push('…');
    }
    kept
}

/// `heading` and its items as a list, at most `MAX_LISTED` of them; nothing when empty.
fn push_list(text: &mut String, heading: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    text.push_str(&format!("\n{heading}\n"));
    for item in items.iter().take(MAX_LISTED) {
        text.push_str(&format!("- {item}\n"));
    }
    if items.len() > MAX_LISTED {
        text.push_str(&format!("- and {} more\n", items.len() - MAX_LISTED));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::TaskItem;

    fn phase() -> PhaseArtifact {
        let task = |description: &str| TaskItem {
            description: description.to_owned(),
            file: None,
            action: None,
            references: Vec::new(),
            requirements: Vec::new(),
        };
        PhaseArtifact {
            name: "print-version".to_owned(),
            title: "Print the version".to_owned(),
            objective: "Make --version print the crate's version.".to_owned(),
            tasks: vec![task("Parse the flag"), task("Print it"), task("Test it")],
            validation_command: "cargo test".to_owned(),
            success_criteria: Vec::new(),
        }
    }

    #[test]
    fn the_message_holds_title_objective_tasks_done_requirements_and_trailers() {
        let met = [MetRequirement {
            id: "R1".to_owned(),
            text: "WHEN run with --version THE SYSTEM SHALL print the version".to_owned(),
        }];
        let message = CommitMessage::of(&phase(), &BTreeSet::from([1, 3]), &met, "Version flag");
        assert_eq!(message.title, "Print the version");
        assert_eq!(
            message.text,
            "Print the version\n\nMake --version print the crate's version.\n\n\
             Tasks done:\n- Parse the flag\n- Test it\n\n\
             Requirements covered:\n- R1: WHEN run with --version THE SYSTEM SHALL print the version\n\n\
             Loopr-Plan: Version flag\nLoopr-Phase: print-version\n"
        );
    }

    #[test]
    fn without_tasks_done_or_requirements_met_their_sections_are_left_out() {
        let message = CommitMessage::of(&phase(), &BTreeSet::new(), &[], "a\nplan");
        assert_eq!(
            message.text,
            "Print the version\n\nMake --version print the crate's version.\n\n\
             Loopr-Plan: a plan\nLoopr-Phase: print-version\n"
        );
    }
}
