//! The core's errors in Neovim's words: the core says what went wrong and, as a typed
//! `NextStep`, what the user can do next; this words that step as the `:Loopr` command or the
//! `setup()` option to use (the CLI words the same steps its own way). A new error needs no
//! change here, only a new kind of step does.

use crate::agent::{ManagerError, TreeReady, findings_counted};
use crate::artifacts::StoredVerification;
use crate::next_step::{self, NextStep};
use crate::store::{LoopRecord, retryable};

/// `err` as Neovim shows it: `Loopr: ` and the error, then the command to go on with.
pub fn manager_error(err: ManagerError) -> String {
    let next_step = err
        .next_step()
        .map(|step| clause(&step))
        .unwrap_or_default();
    format!("Loopr: {err}{next_step}")
}

/// Text the core keeps or sends with its next step attached (a loop's error, a notice, a
/// settings check's message), the step worded for Neovim.
pub fn hinted(text: &str) -> String {
    next_step::worded(text, clause)
}

/// `settings` with the run's `agent=<name>` in place of their `code_agent` (empty: none);
/// an agent `agents` does not configure named as the run chose it.
pub fn with_run_agent(
    mut settings: crate::agent::LoopSettings,
    agent: Option<String>,
) -> Result<crate::agent::LoopSettings, String> {
    let Some(agent) = agent else {
        return Ok(settings);
    };
    if agent.is_empty() {
        settings.code_agent = None;
        return Ok(settings);
    }
    if let Err(unknown) = crate::acp::configured_agent(&settings.agents, &agent) {
        return Err(format!(
            "Loopr: agent={agent} names no agent of agents ({}); add it to agents in setup(), \
             or pick one with :LooprRun {{phase}} agent=<Tab>",
            unknown.configured_words()
        ));
    }
    settings.code_agent = Some(agent);
    Ok(settings)
}

/// What the plan tree `label` names has ready now that its work stopped, and the commands to
/// go on with.
pub fn tree_ready(label: &str, ready: &TreeReady) -> String {
    let step = ready
        .next_step()
        .map(|step| clause(&step))
        .unwrap_or_default();
    format!("Loopr: {label}: {ready}{step}")
}

/// What a verification of `label` found, and where to see it.
pub fn verification(label: &str, verification: &StoredVerification) -> String {
    let round = match verification.round {
        0 => String::new(),
        round => format!(" (round {round})"),
    };
    let counted = findings_counted(&verification.report);
    match (
        verification.blocking,
        verification.report.findings.is_empty(),
    ) {
        (false, true) => format!("Loopr: {label} verification passed{round}"),
        (false, false) => {
            format!("Loopr: {label} verification passed{round} with {counted}; see :copen")
        }
        (true, _) => format!("Loopr: {label} verification failed{round}: {counted}; see :copen"),
    }
}

/// `step` as a clause appended to the message it follows.
fn clause(step: &NextStep) -> String {
    format!("; {}", step_words(step))
}

/// `step` in Neovim's words.
fn step_words(step: &NextStep) -> String {
    match step {
        NextStep::Approve { id } => format!(":LooprApprove {id} to go on"),
        NextStep::Retry => ":LooprRetry runs it again".to_owned(),
        NextStep::RetryOrCancel { name } => {
            format!(":LooprRetry {name} retries it, :LooprCancel {name} cancels it")
        }
        NextStep::RetryOrCancelRun { retry, run, .. } => format!(
            ":LooprRetry {retry} retries it and the run goes on, :LooprCancel {run} ends the run"
        ),
        NextStep::RetryOrRevisePhase { id } => format!(
            ":LooprRetry {id} runs it again; to change the command, :LooprRevise {{feedback}} \
             in the phase's phase.md"
        ),
        // Named as the user types it: the phase's newest code loop is `{phase}/code`.
        NextStep::FixFindings { phase, .. } => format!(
            "the findings are in the quickfix list \"Loopr: {phase} verification\" (:copen); \
             :LooprRetry {phase}/code has the model fix them, :LooprRevise {{feedback}} in the \
             phase's phase.md changes the phase"
        ),
        NextStep::ListLoops => "see :LooprStatus".to_owned(),
        NextStep::NameTranscript => {
            "name one: :LooprTranscript <id> (ids complete with <Tab>, :LooprStatus lists them)"
                .to_owned()
        }
        NextStep::StartCodeLoop { phase } => format!("start one with :LooprRun {phase}"),
        NextStep::SetOption {
            key,
            example: Some(example),
        } => format!("e.g. setup({})", lua_table(key, example)),
        NextStep::SetOption { key, example: None } => format!("set {key} in setup()"),
        NextStep::ShowMcpServers => ":LooprMcp shows the servers' state and errors".to_owned(),
        NextStep::Review => ":LooprApprove, :LooprRevise {feedback}".to_owned(),
        NextStep::RunPhases => ":LooprTasks, :LooprRun {phase}".to_owned(),
        NextStep::NameVerifyTarget { choices } => {
            format!(
                ":LooprVerify {{phase|spec}} with one of {}",
                choices.join(", ")
            )
        }
    }
}

/// What the user can do next about `record`, short enough to stay on the line of a failure:
/// the step its error names, else, for a loop that ended without success, a retry: named by
/// `retry_name` when `:LooprRetry` alone would not take it.
pub fn way_on(record: &LoopRecord, retry_name: Option<&str>) -> Option<String> {
    let step = record
        .error
        .as_deref()
        .and_then(|error| next_step::split(error).1);
    let retry = match retry_name {
        None => ":LooprRetry or R in :LooprStatus".to_owned(),
        Some(name) => format!(":LooprRetry {name} or R in :LooprStatus"),
    };
    match step {
        Some(step @ NextStep::SetOption { .. }) if retryable(record.status) => {
            Some(format!("{}, then {retry}", step_words(&step)))
        }
        Some(NextStep::Retry) | None if retryable(record.status) => Some(retry),
        Some(NextStep::Retry) | None => None,
        Some(step) => Some(step_words(&step)),
    }
}

/// `{ a = { b = 'value' } }` for the dotted `key` `a.b`: the table `setup()` takes.
fn lua_table(key: &str, value: &str) -> String {
    let quoted = format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"));
    key.rsplit('.').fold(quoted, |inner, part| {
        let plain = part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !part.starts_with(|c: char| c.is_ascii_digit());
        if plain {
            format!("{{ {part} = {inner} }}")
        } else {
            format!("{{ [{part:?}] = {inner} }}")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LoopStatus;

    #[test]
    fn an_option_is_named_as_setup_takes_it() {
        assert_eq!(lua_table("model", "qwen3:8b"), "{ model = 'qwen3:8b' }");
        assert_eq!(
            lua_table("mcp.servers.my-git.command", "git"),
            "{ mcp = { servers = { [\"my-git\"] = { command = 'git' } } } }"
        );
    }

    #[test]
    fn blocking_findings_name_the_code_loop_to_retry_by_its_phase_not_its_id() {
        let step = NextStep::FixFindings {
            id: "20261126-104822-005-40637fb6de".to_owned(),
            phase: "print-version".to_owned(),
        };
        let words = step_words(&step);
        assert!(
            words.contains(":LooprRetry print-version/code has the model fix them"),
            "{words}"
        );
        assert!(!words.contains("20261126"), "{words}");
    }

    #[test]
    fn an_interrupted_code_loop_is_named_by_its_phase_not_its_id() {
        let words = manager_error(ManagerError::CodeLoopInterrupted {
            name: "print-version/code".to_owned(),
        });
        assert_eq!(
            words,
            "Loopr: print-version/code, this phase's code loop, is interrupted (the host that \
             ran it is gone); retry it to go on from where it stopped, or cancel it to start a \
             new one; :LooprRetry print-version/code retries it, :LooprCancel \
             print-version/code cancels it"
        );
    }

    #[test]
    fn a_failed_loop_names_its_way_on_and_the_loop_only_when_needed() {
        let failed = |error: &str| LoopRecord {
            status: LoopStatus::Failed,
            error: Some(error.to_owned()),
            ..LoopRecord::new_pending(crate::store::LoopType::Plan, "task", "{}".to_owned())
        };
        let overloaded = failed("overloaded");
        assert_eq!(
            way_on(&overloaded, None).as_deref(),
            Some(":LooprRetry or R in :LooprStatus")
        );
        assert_eq!(
            way_on(&overloaded, Some("cli/setup")).as_deref(),
            Some(":LooprRetry cli/setup or R in :LooprStatus")
        );
        let option = NextStep::SetOption {
            key: "model".to_owned(),
            example: Some("m".to_owned()),
        }
        .attach("no such model");
        assert_eq!(
            way_on(&failed(&option), None).as_deref(),
            Some("e.g. setup({ model = 'm' }), then :LooprRetry or R in :LooprStatus")
        );
        let complete = LoopRecord {
            status: LoopStatus::Complete,
            ..overloaded
        };
        assert_eq!(way_on(&complete, None), None);
    }

    #[test]
    fn text_without_a_step_is_shown_as_it_is() {
        assert_eq!(hinted("failed"), "failed");
        let text = NextStep::Approve { id: "x".to_owned() }.attach("reached its budget");
        assert_eq!(
            hinted(&text),
            "reached its budget; :LooprApprove x to go on"
        );
    }
}
