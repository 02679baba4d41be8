//! The commit step of a phase that is done (`commit = "phase"`): gathers what the commit is
//! made of (the files the code loop changed, the phase, its plan, the requirements its
//! verification found met), commits them (`phase_commit`), and tells the user how it went,
//! as a notice and in the code loop's transcript.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{LoopManager, Project};
use crate::agent::baseline::Baseline;
use crate::agent::coverage::requirements_met_by_phase;
use crate::agent::events::{LoopEvent, NoticeLevel};
use crate::agent::jobs::current_artifact;
use crate::agent::journal::Journal;
use crate::agent::phase_commit::{
    CommitHooks, CommitMessage, CommitOutcome, MetRequirement, PhaseCommit,
};
use crate::agent::settings::{CommitMode, LoopSettings};
use crate::agent::task_progress::done_tasks;
use crate::artifacts::{PhaseArtifact, PlanArtifact};
use crate::git::Git;
use crate::store::{LoopRecord, LoopType};

impl LoopManager {
    /// Commits what code loop `code` changed when the settings ask for a commit per phase;
    /// `cancel` stops it (the project's commit hold's). Blocking: call it from the blocking pool.
    pub(super) fn commit_phase(
        &self,
        project: &Project,
        code: &LoopRecord,
        settings: &LoopSettings,
        cancel: &CancellationToken,
    ) {
        if settings.commit != CommitMode::Phase {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!(loop_id = %code.id, "no runtime to commit the phase on");
            return;
        };
        let name = phase_name(code);
        let (level, message) = match self.commit_inputs(project, code) {
            Ok((files, message)) => runtime.block_on(
                self.phase_commit_words(project, code, settings, &files, &message, cancel),
            ),
            Err(why) => (NoticeLevel::Warn, not_committed(&name, &why)),
        };
        tracing::info!(loop_id = %code.id, "{message}");
        let journal = Journal::of(&project.layout, &code.id);
        match journal.append_note(&message) {
            Ok(Some((batch, note))) => crate::agent::transcript::emit_batch(
                &self.shared.transcripts,
                &code.id,
                batch,
                &[note],
            ),
            Ok(None) => {}
            Err(err) => {
                tracing::warn!(loop_id = %code.id, error = %err, "noting the commit in the transcript")
            }
        }
        self.shared.events.emit(LoopEvent::Notice {
            loop_id: code.id.to_string(),
            level,
            message,
        });
    }

    /// Commits `files` with `message` for the phase of `code`; what the user is told of it.
    async fn phase_commit_words(
        &self,
        project: &Project,
        code: &LoopRecord,
        settings: &LoopSettings,
        files: &[String],
        message: &CommitMessage,
        cancel: &CancellationToken,
    ) -> (NoticeLevel, String) {
        let name = &phase_name(code);
        let not_committed = |why: String| (NoticeLevel::Warn, not_committed(name, &why));
        let Some(git) = Git::find(project.root.path()).await else {
            return not_committed("the project is not in a git repository".to_owned());
        };
        if let Some(why) =
            super::repository_pin::unpinned_repository(&project.layout, git.git_dir())
        {
            return not_committed(why);
        }
        let policy = match self.shared.policies.policy_for(settings) {
            Ok(policy) => policy,
            Err(err) => return not_committed(format!("invalid setting: {err}")),
        };
        let hooks = CommitHooks {
            sandbox: Arc::clone(&policy.sandbox),
            root: project.root.path().to_owned(),
            timeout: policy.command_timeout,
            approver: self.shared.approver.clone(),
            loop_id: code.id.to_string(),
            phase: name.to_owned(),
            // A cancel of the loop's tree or the host's shutdown answers an approval asked
            // of the hooks "not approved", and stops a hook that runs.
            cancel: cancel.clone(),
        };
        let scratch = format!("loopr-commit-{}", code.id);
        let outcome = PhaseCommit {
            git: &git,
            root: project.root.path(),
            files,
            message,
            scratch: &scratch,
        }
        .commit(&hooks)
        .await;
        match outcome {
            CommitOutcome::Committed {
                commit,
                short,
                afterwards,
            } => {
                tracing::info!(loop_id = %code.id, %commit, "phase committed");
                let committed = format!("Committed phase {name} as {short}: {}", message.title);
                if afterwards.is_empty() {
                    (NoticeLevel::Info, committed)
                } else {
                    (
                        NoticeLevel::Warn,
                        format!("{committed}; then {}", afterwards.join("; ")),
                    )
                }
            }
            CommitOutcome::NothingToCommit => (
                NoticeLevel::Info,
                format!("Phase {name} left no change to commit"),
            ),
            CommitOutcome::NotCommitted(why) => not_committed(why.to_string()),
        }
    }

    /// The files code loop `code` changed and the message of its phase's commit. Blocking.
    fn commit_inputs(
        &self,
        project: &Project,
        code: &LoopRecord,
    ) -> Result<(Vec<String>, CommitMessage), String> {
        let files = Baseline::at(&project.layout.loop_dir(&code.id))
            .changed_files()
            .map_err(|err| err.to_string())?;
        let records = project.db.list().map_err(|err| err.to_string())?;
        let parent_of = |record: &LoopRecord| {
            records
                .iter()
                .find(|parent| Some(&parent.id) == record.parent.as_ref())
        };
        let phase_record = parent_of(code)
            .filter(|record| record.loop_type == LoopType::Phase)
            .ok_or("its phase is gone")?;
        let phase: PhaseArtifact =
            current_artifact(phase_record, &project.layout).map_err(|err| err.to_string())?;
        let mut plan_record = phase_record;
        while let Some(parent) = parent_of(plan_record) {
            plan_record = parent;
        }
        let plan = current_artifact::<PlanArtifact>(plan_record, &project.layout)
            .map(|plan| plan.title)
            .unwrap_or_else(|_| plan_record.task.clone());
        let done = done_tasks(&project.layout, &phase_record.id, phase_record.iteration);
        let met: Vec<MetRequirement> =
            requirements_met_by_phase(&project.layout, &records, phase_record)
                .into_iter()
                .map(|requirement| MetRequirement {
                    id: requirement.id,
                    text: requirement.text,
                })
                .collect();
        Ok((files, CommitMessage::of(&phase, &done, &met, &plan)))
    }
}

/// How the commit's notices name the phase of code loop `code`.
fn phase_name(code: &LoopRecord) -> String {
    code.name.clone().unwrap_or_else(|| code.label())
}

/// Why phase `name` was not committed, and that its changes stay.
fn not_committed(name: &str, why: &str) -> String {
    format!(
        "Phase {name} was not committed: {why}. Its changes stay in the working tree, uncommitted."
    )
}
