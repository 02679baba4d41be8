//! Running one loop task: launching it, turning a crash into a failed loop, and the
//! bookkeeping after it ends (gates, children, dependents).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio_util::sync::CancellationToken;

use super::tree_operations::spawned_children;
use super::{LoopManager, ManagerError, Project, lock};
use crate::agent::approvals::PolicyApprover;
use crate::agent::artifact_loop::{ArtifactOutcome, run_artifact_loop};
use crate::agent::code_loop::run_code_loop;
use crate::agent::context::{LoopContext, LoopError};
use crate::agent::events::{LoopEvent, NoticeLevel};
use crate::agent::export;
use crate::agent::settings::LoopSettings;
use crate::agent::task_progress;
use crate::agent::verify_on_demand::run_verify_loop;
use crate::agent::{ask_limits, limits};
use crate::llm::ServerWindow;
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
        let policies = self
            .shared
            .policies
            .policy_for(&settings)
            .and_then(|policy| {
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
            limits: limits::fit_limits(&settings, &ServerWindow::NotAsked),
            settings: settings.clone(),
            events: self.shared.events.clone(),
            cancel: cancel.clone(),
            approver,
            policy,
            buffers: self.shared.buffers.clone(),
            transcripts: self.shared.transcripts.clone(),
            tree_budget: self.shared.tree_budget.clone(),
            mcp: self.shared.mcp.clone(),
            agents: self.shared.agents.clone(),
            stage: Default::default(),
        };
        self.shared.busy.send_modify(|busy| *busy += 1);
        // The loop runs in its own task so a panic inside it ends only that loop; the
        // supervising task records the outcome either way.
        let run = tokio::spawn(async move {
            let mut context = context;
            // Asked here, in the loop's own task: never on a shell's path, and a server that
            // answers slowly holds back only this loop's first turn.
            context.limits = ask_limits::ask_server(&context).await;
            match context.record.loop_type {
                LoopType::Code => {
                    let implemented = run_code_loop(&context).await;
                    if implemented.is_ok() && !context.cancel.is_cancelled() {
                        task_progress::mark_all_done(&context).await;
                        export::refresh(&context).await;
                    }
                    implemented.map(LoopOutcome::Code)
                }
                LoopType::Verify => run_verify_loop(&context)
                    .await
                    .map(|()| LoopOutcome::Verified),
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
            Ok(Ok(LoopOutcome::Verified)) => {
                tracing::info!(loop_id = %record.id, "verified on demand");
                self.record_end(project, record, LoopStatus::Complete, None);
            }
            Ok(Ok(LoopOutcome::Code(iteration))) => {
                tracing::info!(loop_id = %record.id, iteration, "phase implemented and validated");
                if settings.gates(record.loop_type.as_str()) {
                    // Done once the user approves its changes (`approve`).
                    self.record_end(project, record, LoopStatus::AwaitingApproval, None);
                } else {
                    // Held before the phase is recorded done: no code loop starts before
                    // its commit is made.
                    let hold = self.hold_for_commit(project, record, settings);
                    if self.record_end(project, record, LoopStatus::Complete, None) {
                        self.after_phase_done(project, record, settings, hold);
                    }
                }
            }
            Ok(Err(LoopError::Cancelled)) => {
                self.record_end(project, record, LoopStatus::Cancelled, None);
            }
            Ok(Err(reached @ LoopError::BudgetReached { .. })) => {
                self.record_pause(project, record, reached.for_record());
            }
            Ok(Err(rejected @ LoopError::ValidationRejected { .. })) => {
                self.record_stop_for_the_user(project, record, rejected.for_record());
            }
            Ok(Err(err)) => {
                tracing::warn!(loop_id = %record.id, error = %err, "loop failed");
                self.record_end(project, record, LoopStatus::Failed, Some(err.for_record()));
            }
            Err(join_error) => {
                tracing::error!(loop_id = %record.id, error = %join_error, "loop crashed");
                let message = format!(
                    "internal error: the loop crashed ({join_error}); the host's log has the details"
                );
                self.record_end(project, record, LoopStatus::Failed, Some(message));
            }
        }
        self.schedule(project);
        // A run waits for what this loop was: written, failed, or its phase done.
        self.advance_plan_runs(project);
        self.tell_if_ready(project, &record.id);
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
        let gated = settings.gates(record.loop_type.as_str());
        let (status, spawned) = if gated {
            (LoopStatus::AwaitingApproval, Ok(Vec::new()))
        } else {
            let spawned = spawned_children(record, outcome.iteration, &outcome.children);
            (LoopStatus::Complete, spawned)
        };
        let finished = spawned.and_then(|children| {
            let finished = project.db.finish_with_children(
                &record.id,
                status,
                &children,
                self.shared.host_pid,
            )?;
            Ok::<_, ManagerError>((finished, children))
        });
        match finished {
            Ok((Ok(()), _)) if gated => {
                self.emit_status(&record.id, record.loop_type, status, None)
            }
            Ok((Ok(()), children)) => self.emit_completed(record, &children),
            // A running loop is refused only when a cancel was asked while it finished: the
            // cancel wins, no child spawns.
            Ok((Err(refused), _)) if refused.status == LoopStatus::Running => {
                tracing::info!(loop_id = %record.id, "cancelled as it finished");
                self.record_end(project, record, LoopStatus::Cancelled, None);
            }
            Ok((Err(refused), _)) => {
                tracing::info!(loop_id = %record.id, status = refused.status.as_str(), "the loop was revised or cancelled as it finished");
            }
            Err(err) => {
                // Not a revision or cancel that came first: the loop cannot go on.
                tracing::error!(loop_id = %record.id, error = %err, "recording the artifact's outcome");
                self.record_end(
                    project,
                    record,
                    LoopStatus::Failed,
                    Some(format!("recording the outcome: {err}")),
                );
            }
        }
    }

    /// Pauses a loop whose plan tree reached its budget; the user hears of it once per tree.
    fn record_pause(&self, project: &Project, record: &LoopRecord, reason: String) {
        if self.shared.shutting_down.load(Ordering::SeqCst) {
            return;
        }
        match project.db.pause_running(&record.id, &reason) {
            Ok(Some(paused)) => {
                tracing::info!(loop_id = %record.id, root = %paused.root, reason = %crate::next_step::neutral(&reason), "paused at the budget");
                self.emit_change(paused.change);
                if paused.first_in_tree {
                    self.shared.events.emit(LoopEvent::Notice {
                        loop_id: record.id.to_string(),
                        level: NoticeLevel::Warn,
                        message: reason,
                    });
                }
            }
            // No longer running as it paused: a cancel asked meanwhile wins.
            Ok(None) => {
                self.record_end(project, record, LoopStatus::Cancelled, None);
            }
            Err(err) => {
                tracing::error!(loop_id = %record.id, error = %err, "recording the loop's pause");
                self.record_end(
                    project,
                    record,
                    LoopStatus::Failed,
                    Some(format!("recording the pause: {err}")),
                );
            }
        }
    }

    /// Stops a loop the user stopped by rejecting what it needed (its validation command):
    /// not a failure, so it ends as the user's stop (retryable, its journal whole) with a
    /// notice of how to go on.
    fn record_stop_for_the_user(&self, project: &Project, record: &LoopRecord, reason: String) {
        tracing::info!(loop_id = %record.id, reason = %crate::next_step::neutral(&reason), "stopped by the user's rejection");
        self.record_end(project, record, LoopStatus::Cancelled, Some(reason.clone()));
        self.shared.events.emit(LoopEvent::Notice {
            loop_id: record.id.to_string(),
            level: NoticeLevel::Warn,
            message: reason,
        });
    }

    /// Records how a running loop ended; whether it was recorded (not when the host shuts
    /// down, nor when a cancel or revision changed the loop meanwhile).
    fn record_end(
        &self,
        project: &Project,
        record: &LoopRecord,
        status: LoopStatus,
        error: Option<String>,
    ) -> bool {
        if self.shared.shutting_down.load(Ordering::SeqCst) {
            // Left running in the store for the next host to resume.
            return false;
        }
        match project.db.end_running(&record.id, status, error.as_deref()) {
            Ok(Some(changes)) => {
                for change in changes {
                    self.emit_change(change);
                }
                true
            }
            Ok(None) => {
                tracing::debug!(loop_id = %record.id, "loop state changed meanwhile; end not recorded");
                false
            }
            Err(err) => {
                tracing::error!(loop_id = %record.id, error = %err, "recording the loop's end");
                false
            }
        }
    }
}

enum LoopOutcome {
    Artifact(ArtifactOutcome),
    /// The iteration whose validation passed.
    Code(u32),
    /// A verification asked on demand answered (what it found is stored and told).
    Verified,
}
