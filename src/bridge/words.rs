//! The core's errors in Neovim's words: the core says what went wrong, this adds the
//! `:Loopr` command that is the user's next step (the CLI adds its own).

use crate::agent::ManagerError;

/// `err` as Neovim shows it: `Loopr: ` and the error, then the command to go on with.
pub fn manager_error(err: ManagerError) -> String {
    let next_step = match &err {
        ManagerError::NoTranscriptTarget => {
            "; name one: :LooprTranscript <id> (ids complete with <Tab>, :LooprStatus lists them)"
                .to_owned()
        }
        ManagerError::UnknownPhase(_) | ManagerError::PhaseChanged { .. } => {
            "; see :LooprStatus".to_owned()
        }
        ManagerError::CodeLoopInterrupted { id } => {
            format!("; :LooprRetry {id} retries it, :LooprCancel {id} cancels it")
        }
        ManagerError::NoCodeLoop(phase) => format!("; start one with :LooprRun {phase}"),
        _ => String::new(),
    };
    format!("Loopr: {err}{next_step}")
}
