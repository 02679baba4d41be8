//! The core's errors, notices and next steps in the command line's words: its subcommands,
//! flags and `--settings` keys (Neovim words the same steps in `bridge/words.rs`).

use crate::agent::{ManagerError, finding_text, findings_counted};
use crate::artifacts::StoredVerification;
use crate::next_step::{self, NextStep};

/// The core's error with the command that is the user's next step from the command line.
pub(super) fn with_next_step(err: ManagerError) -> anyhow::Error {
    match err.next_step() {
        Some(step) => anyhow::anyhow!("{err}{}", clause(&step)),
        None => err.into(),
    }
}

/// Text the core keeps or sends with its next step attached (a loop's error, a notice), the
/// step worded for the command line.
pub(super) fn hinted(text: &str) -> String {
    next_step::worded(text, clause)
}

/// A verification of `label` as the command line prints it: the verdict and its findings
/// counted, then each finding as `file:line: severity: message [R2] Fix: ...`.
pub(super) fn verification_lines(label: &str, verification: &StoredVerification) -> String {
    let verdict = if verification.blocking {
        "failed"
    } else {
        "passed"
    };
    let mut text = format!(
        "loopr: {label}: verification {verdict}: {}",
        findings_counted(&verification.report)
    );
    for finding in &verification.report.findings {
        text.push_str(&format!(
            "\n  {}:{}: {}: {}",
            finding.file,
            finding.line,
            finding.severity.as_str(),
            finding_text(finding)
        ));
    }
    text
}

/// `step` as the command line words it: its subcommands, flags and `--settings` keys.
pub(super) fn clause(step: &NextStep) -> String {
    match step {
        NextStep::Approve { id } => format!(
            "; the command line cannot let a tree past its budget: approving {id} in the editor \
             does, or a larger budget in --settings for a new plan"
        ),
        NextStep::Retry => "; `loopr plan` or `loopr run <phase>` starts it again".to_owned(),
        NextStep::RetryOrCancel { name } => format!(
            "; `loopr resume` goes on with it (and with the project's other loops that no host \
             runs), `loopr cancel {name}` cancels it"
        ),
        // The command line retries no loop: a new run starts a failed phase again.
        NextStep::RetryOrCancelRun {
            run, code: true, ..
        } => format!(
            "; `loopr run {run} --yes` runs it again from there (a new code loop for the phase), \
             `loopr cancel {run}` ends the run"
        ),
        NextStep::RetryOrCancelRun {
            retry,
            run,
            code: false,
        } => format!(
            "; retrying {retry} in the editor lets the run go on, `loopr cancel {run}` ends the run"
        ),
        NextStep::RetryOrRevisePhase { .. } => {
            "; `loopr run <phase> --yes` starts the phase again; revising the phase in the editor \
             changes the command"
                .to_owned()
        }
        NextStep::FixFindings { phase, .. } => format!(
            "; the findings are listed above; `loopr run {phase} --yes` starts the phase again \
             with a new code loop; revising the phase in the editor changes what it asks"
        ),
        NextStep::ListLoops => "; `loopr status` lists the project's loops".to_owned(),
        NextStep::NameTranscript => {
            "; name one: `loopr transcript <id>` (`loopr status` lists them)".to_owned()
        }
        NextStep::StartCodeLoop { phase } => format!("; start one with `loopr run {phase}`"),
        NextStep::SetOption {
            key,
            example: Some(example),
        } => format!("; e.g. --settings '{}'", settings_json(key, example)),
        NextStep::SetOption { key, example: None } => format!("; set {key} in --settings"),
        // The command line keeps no servers' state beyond the run: the notice is all of it.
        NextStep::ShowMcpServers => String::new(),
        NextStep::Review => "; `loopr resume --approve-all` approves it and goes on; the editor \
             can ask for a revision instead"
            .to_owned(),
        NextStep::RunPhases => "; `loopr run <phase>` implements one".to_owned(),
        NextStep::NameVerifyTarget { choices } => {
            format!("; `loopr verify NAME` with one of {}", choices.join(", "))
        }
    }
}

/// `{"a": {"b": "value"}}` for the dotted `key` `a.b`: what `--settings` takes.
fn settings_json(key: &str, value: &str) -> String {
    key.rsplit('.')
        .fold(
            serde_json::Value::from(value),
            |inner, part| serde_json::json!({ part: inner }),
        )
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_run_is_worded_with_commands_that_exist_and_its_names() {
        let at_code = clause(&NextStep::RetryOrCancelRun {
            retry: "a-2/code".to_owned(),
            run: "a".to_owned(),
            code: true,
        });
        assert_eq!(
            at_code,
            "; `loopr run a --yes` runs it again from there (a new code loop for the phase), \
             `loopr cancel a` ends the run"
        );
        let at_spec = clause(&NextStep::RetryOrCancelRun {
            retry: "a".to_owned(),
            run: "plan".to_owned(),
            code: false,
        });
        assert!(!at_spec.contains("resume"), "{at_spec}");
        assert!(
            at_spec.contains("`loopr cancel plan` ends the run"),
            "{at_spec}"
        );
    }

    #[test]
    fn an_interrupted_code_loop_is_named_by_its_phase_not_its_id() {
        let step = NextStep::RetryOrCancel {
            name: "print-version/code".to_owned(),
        };
        assert_eq!(
            clause(&step),
            "; `loopr resume` goes on with it (and with the project's other loops that no host \
             runs), `loopr cancel print-version/code` cancels it"
        );
    }
}
