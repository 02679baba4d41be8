//! Running one loop task: launching it, turning a crash into a failed loop, and the
//! bookkeeping after it ends (gates, children, dependents).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio_util::sync::CancellationToken;

use super::{LoopManager, ManagerError, Project, lock};
use crate::agent::approvals::PolicyApprover;
use crate::agent::artifact_loop::{ArtifactOutcome, LoopContext, LoopError, run_artifact_loop};
use crate::agent::code_loop::run_code_loop;
use crate::agent::jobs::ChildLoop;
use crate::agent::settings::LoopSettings;
use crate::store::{LoopRecord, LoopStatus, LoopType};
use crate::tools::Approver;

impl LoopManager {
    pub(super) fn launch(
        &self,
        project: &Project,
        record: LoopRecord,
        settings: LoopSettings,
        cancel: CancellationToken,
    ) {
        let provider = match (self.shared.provider_factory)(&settings) {
            Ok(provider) => provider,
            Err(err) => {
                lock(&self.shared.running).remove(&record.id);
                self.record_end(project, &record, LoopStatus::Failed, Some(err.to_string()));
                return;
            }
        };
        let policies = settings.tool_policy().and_then(|policy| {
            PolicyApprover::new(
                settings.approvals.clone(),
                &settings.allow_commands,
                policy.sandbox.is_confined(),
                self.shared.approver.clone(),
            )
            .and_then(|approver| approver.allowing_hosts(&settings.web_fetch_allow_hosts))
            .map(|approver| (policy, Arc::new(approver) as Arc<dyn Approver>))
        });
        let (policy, approver) = match policies {
            Ok(policies) => policies,
            Err(err) => {
                lock(&self.shared.running).remove(&record.id);
                self.record_end(
                    project,
                    &record,
                    LoopStatus::Failed,
                    Some(format!("invalid setting: {err}")),
                );
                return;
            }
        };
        tracing::info!(loop_id = %record.id, loop_type = record.loop_type.as_str(), "loop running");
        self.emit_status(&record.id, record.loop_type, LoopStatus::Running, None);
        let context = LoopContext {
            record: record.clone(),
            root: project.root.clone(),
            layout: project.layout.clone(),
            db: project.db.clone(),
            provider,
            settings: settings.clone(),
            events: self.shared.events.clone(),
            cancel: cancel.clone(),
            approver,
            policy: Arc::new(policy),
            buffers: self.shared.buffers.clone(),
        };
        self.shared.busy.send_modify(|busy| *busy += 1);
        // The loop runs in its own task so a panic inside it ends only that loop; the
        // supervising task records the outcome either way.
        let run = tokio::spawn(async move {
            match context.record.loop_type {
                LoopType::Code => run_code_loop(&context).await.map(LoopOutcome::Code),
                _ => run_artifact_loop(&context).await.map(LoopOutcome::Artifact),
            }
        });
        let manager = self.clone();
        let project = project.clone();
        let busy = self.shared.busy.clone();
        tokio::spawn(async move {
            let result = run.await;
            // Recording the end and scheduling what follows are SQLite transactions: the
            // blocking pool's work, not the async workers'.
            let finished = tokio::task::spawn_blocking(move || {
                manager.after_loop(&project, &record, &settings, &cancel, result);
            })
            .await;
            if let Err(err) = finished {
                tracing::error!(error = %err, "recording a loop's end crashed");
            }
            // Whatever happened above, a shell waiting for quiet must not wait forever.
            busy.send_modify(|busy| *busy -= 1);
        });
    }

    /// Records how a loop task ended and starts what may run now.
    fn after_loop(
        &self,
        project: &Project,
        record: &LoopRecord,
        settings: &LoopSettings,
        cancel: &CancellationToken,
        result: Result<Result<LoopOutcome, LoopError>, tokio::task::JoinError>,
    ) {
        lock(&self.shared.running).remove(&record.id);
        match result {
            // A cancel that came while the last answer was being stored still wins.
            Ok(Ok(_)) if cancel.is_cancelled() => {
                self.record_end(project, record, LoopStatus::Cancelled, None);
            }
            Ok(Ok(LoopOutcome::Artifact(outcome))) => {
                self.on_artifact(project, record, settings, outcome);
            }
            Ok(Ok(LoopOutcome::Code(iteration))) => {
                tracing::info!(loop_id = %record.id, iteration, "phase implemented and validated");
                self.record_end(project, record, LoopStatus::Complete, None);
            }
            Ok(Err(LoopError::Cancelled)) => {
                self.record_end(project, record, LoopStatus::Cancelled, None);
            }
            Ok(Err(err)) => {
                tracing::warn!(loop_id = %record.id, error = %err, "loop failed");
                self.record_end(project, record, LoopStatus::Failed, Some(err.to_string()));
            }
            Err(join_error) => {
                tracing::error!(loop_id = %record.id, error = %join_error, "loop crashed");
                let message =
                    format!("internal error: the loop crashed ({join_error}); see :LooprLog");
                self.record_end(project, record, LoopStatus::Failed, Some(message));
            }
        }
        self.schedule(project);
    }

    fn on_artifact(
        &self,
        project: &Project,
        record: &LoopRecord,
        settings: &LoopSettings,
        outcome: ArtifactOutcome,
    ) {
        crate::test_hooks::pause_point(&format!(
            "after_artifact_write:{}",
            record.loop_type.as_str()
        ));
        let result = if settings.gates(record.loop_type.as_str()) {
            project
                .db
                .finish_with_children(
                    &record.id,
                    LoopStatus::AwaitingApproval,
                    &[],
                    self.shared.host_pid,
                )
                .map(|()| {
                    self.emit_status(
                        &record.id,
                        record.loop_type,
                        LoopStatus::AwaitingApproval,
                        None,
                    )
                })
                .map_err(ManagerError::from)
        } else {
            self.complete_with_children(
                project,
                record,
                outcome.iteration,
                &outcome.accepted.children,
            )
        };
        if let Err(err) = result {
            let still_running = project
                .db
                .get(&record.id)
                .ok()
                .flatten()
                .is_some_and(|now| now.status == LoopStatus::Running);
            if still_running && project.db.cancel_requested(&record.id).unwrap_or(false) {
                // Cancelled while it finished: the cancel wins, no child spawns.
                tracing::info!(loop_id = %record.id, "cancelled as it finished");
                self.record_end(project, record, LoopStatus::Cancelled, None);
            } else if still_running {
                // Not a revision or cancel that came first: the loop cannot go on.
                tracing::error!(loop_id = %record.id, error = %err, "recording the artifact's outcome");
                self.record_end(
                    project,
                    record,
                    LoopStatus::Failed,
                    Some(format!("recording the outcome: {err}")),
                );
            } else {
                tracing::info!(loop_id = %record.id, error = %err, "the loop was revised or cancelled as it finished");
            }
        }
    }

    fn complete_with_children(
        &self,
        project: &Project,
        record: &LoopRecord,
        iteration: u32,
        children: &[ChildLoop],
    ) -> Result<(), ManagerError> {
        self.complete_with_children_from(
            project,
            record,
            &[LoopStatus::Running, LoopStatus::AwaitingApproval],
            iteration,
            children,
        )
    }

    fn record_end(
        &self,
        project: &Project,
        record: &LoopRecord,
        status: LoopStatus,
        error: Option<String>,
    ) {
        if self.shared.shutting_down.load(Ordering::SeqCst) {
            // Left running in the store for the next host to resume.
            return;
        }
        match project
            .db
            .finish_running(&record.id, status, error.as_deref())
        {
            Ok(true) => {
                self.emit_status(&record.id, record.loop_type, status, error);
                if status != LoopStatus::Complete {
                    self.fail_dependents(project, record, status);
                }
            }
            Ok(false) => {
                tracing::debug!(loop_id = %record.id, "loop state changed meanwhile; end not recorded")
            }
            Err(err) => {
                tracing::error!(loop_id = %record.id, error = %err, "recording the loop's end")
            }
        }
    }

    /// Siblings waiting for `record` can never start now; they fail with the reason, and so do
    /// the loops waiting for them.
    pub(super) fn fail_dependents(
        &self,
        project: &Project,
        record: &LoopRecord,
        ended: LoopStatus,
    ) {
        let (Some(parent), Some(name)) = (&record.parent, &record.name) else {
            return;
        };
        let Ok(siblings) = project.db.children(parent) else {
            return;
        };
        for sibling in siblings {
            let waits_for_it = sibling.status == LoopStatus::Pending
                && sibling.triggered_by == record.triggered_by
                && sibling
                    .depends_on
                    .iter()
                    .any(|dependency| dependency == name);
            if !waits_for_it {
                continue;
            }
            let reason = format!("its dependency {name} ended {}", ended.as_str());
            if project
                .db
                .set_status(&sibling.id, LoopStatus::Failed, Some(&reason))
                .is_ok()
            {
                self.emit_status(
                    &sibling.id,
                    sibling.loop_type,
                    LoopStatus::Failed,
                    Some(reason),
                );
                self.fail_dependents(project, &sibling, LoopStatus::Failed);
            }
        }
    }
}

enum LoopOutcome {
    Artifact(ArtifactOutcome),
    /// The iteration whose validation passed.
    Code(u32),
}
