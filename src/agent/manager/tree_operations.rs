//! What the user does to the loop tree: approve, revise, retry, cancel.

use std::path::Path;

use super::{LoopManager, ManagerError, Project, lock};
use crate::agent::jobs::{self, ChildLoop};
use crate::store::{LoopId, LoopRecord, LoopStatus, LoopType, ProjectLayout};

impl LoopManager {
    /// Approves loop `id` (or the newest loop awaiting approval): it completes and its
    /// children spawn from its stored artifact.
    pub fn approve(&self, root: &Path, id: Option<&str>) -> Result<LoopId, ManagerError> {
        let project = self.project(root)?;
        let record = match id.map(str::trim).filter(|id| !id.is_empty()) {
            Some(id) => self.record(&project, id)?,
            None => project
                .db
                .list()?
                .into_iter()
                .find(|record| record.status == LoopStatus::AwaitingApproval)
                .ok_or(ManagerError::NothingTo("awaiting approval"))?,
        };
        // A loop whose revision (or review) failed keeps its last good iteration, which the
        // user may still approve.
        let approvable = record.status == LoopStatus::AwaitingApproval
            || (record.status == LoopStatus::Failed
                && record.iteration > 0
                && record.loop_type != LoopType::Code);
        if !approvable {
            return Err(ManagerError::WrongState {
                id: record.id.to_string(),
                status: record.status.as_str(),
                hint: "only loops awaiting approval (or failed loops with an artifact) can be \
                       approved",
            });
        }
        let kind = jobs::artifact_kind(record.loop_type)?;
        let path = project
            .layout
            .artifacts_dir(&record.id, record.iteration)
            .join(format!("{}.json", kind.as_str()));
        let accepted = jobs::read_json(&path)
            .ok()
            .and_then(|json| jobs::restore(kind, &json))
            .ok_or_else(|| ManagerError::StoredArtifact {
                id: record.id.to_string(),
                message: format!("{} is missing or invalid", path.display()),
            })?;
        self.complete_with_children_from(
            &project,
            &record,
            &[LoopStatus::AwaitingApproval, LoopStatus::Failed],
            record.iteration,
            &accepted.children,
        )?;
        tracing::info!(loop_id = %record.id, iteration = record.iteration, "approved");
        self.schedule(&project);
        Ok(record.id)
    }

    /// Runs loop `id` again with the user's feedback. Its children, spawned from the old
    /// artifact, are cancelled and invalidated; their artifacts stay on disk. A code loop
    /// starts a new iteration that gets the feedback.
    pub fn revise(&self, root: &Path, id: &str, feedback: &str) -> Result<LoopId, ManagerError> {
        if feedback.trim().is_empty() {
            return Err(ManagerError::EmptyFeedback);
        }
        let project = self.project(root)?;
        let record = self.record(&project, id)?;
        let revisable = !matches!(
            record.status,
            LoopStatus::Running | LoopStatus::Pending | LoopStatus::Invalidated
        ) && (record.iteration > 0 || record.loop_type == LoopType::Code);
        let wrong_state = |status: LoopStatus| ManagerError::WrongState {
            id: record.id.to_string(),
            status: status.as_str(),
            hint: "only a current loop that has produced its artifact and is not running \
                   can be revised (an invalidated loop's parent was revised: revise the \
                   parent's new children instead)",
        };
        if !revisable {
            return Err(wrong_state(record.status));
        }
        let Some(invalidated) =
            project
                .db
                .revise(&record.id, feedback.trim(), self.shared.host_pid)?
        else {
            let now = self.record(&project, id)?;
            return Err(wrong_state(now.status));
        };
        // After the transaction, so a descendant started in between is stopped too; its
        // supervisor finds it invalidated and leaves that be.
        for (child, loop_type) in &invalidated {
            if let Some(token) = lock(&self.shared.running).get(child) {
                token.cancel();
            }
            self.emit_status(child, *loop_type, LoopStatus::Invalidated, None);
        }
        tracing::info!(loop_id = %record.id, invalidated = invalidated.len(), "revising");
        self.emit_status(&record.id, record.loop_type, LoopStatus::Pending, None);
        self.schedule(&project);
        Ok(record.id)
    }

    /// Runs a loop that failed, was cancelled or was interrupted again, from where it stood:
    /// an artifact loop resumes its stored conversation (or starts over if it had none), a
    /// code loop gets a fresh allowance of iterations.
    pub fn retry(&self, root: &Path, id: Option<&str>) -> Result<LoopId, ManagerError> {
        let project = self.project(root)?;
        let record = match id.map(str::trim).filter(|id| !id.is_empty()) {
            Some(id) => self.record(&project, id)?,
            None => project
                .db
                .list()?
                .into_iter()
                .find(|record| retryable(record.status))
                .ok_or(ManagerError::NothingTo("failed or cancelled"))?,
        };
        let current = record.status != LoopStatus::Invalidated;
        if !current || !project.db.retry(&record.id, self.shared.host_pid)? {
            let now = self.record(&project, record.id.as_str())?;
            return Err(ManagerError::WrongState {
                id: record.id.to_string(),
                status: now.status.as_str(),
                hint: "only a loop that failed, was cancelled or was interrupted can be retried",
            });
        }
        tracing::info!(loop_id = %record.id, "retrying");
        self.emit_status(&record.id, record.loop_type, LoopStatus::Pending, None);
        self.schedule(&project);
        Ok(record.id)
    }

    /// Cancels loop `id` (or the newest active loop) and every active loop below it; a finished
    /// plan can be given to stop the specs and phases it spawned.
    pub fn cancel(&self, root: &Path, id: Option<&str>) -> Result<LoopId, ManagerError> {
        let project = self.project(root)?;
        let target = match id.map(str::trim).filter(|id| !id.is_empty()) {
            Some(id) => self.record(&project, id)?,
            None => project
                .db
                .list()?
                .into_iter()
                .find(|record| record.status.is_active())
                .ok_or(ManagerError::NothingTo("running"))?,
        };
        let tree = project.db.cancel_tree(&target.id)?;
        if tree.is_empty() {
            return Err(ManagerError::WrongState {
                id: target.id.to_string(),
                status: target.status.as_str(),
                hint: "neither it nor any loop below it is active; nothing to cancel",
            });
        }
        for record in &tree.cancelled {
            self.emit_status(&record.id, record.loop_type, LoopStatus::Cancelled, None);
            self.fail_dependents(&project, record, LoopStatus::Cancelled);
        }
        for id in &tree.running {
            // Registered before its claim, so a loop the scheduler is starting right now is
            // found here too; its supervisor records the cancellation when the task stops.
            // (A loop another host runs is stopped by that host.)
            if let Some(token) = lock(&self.shared.running).get(id) {
                token.cancel();
            }
        }
        tracing::info!(loop_id = %target.id, "cancel requested");
        Ok(target.id)
    }

    pub(super) fn complete_with_children_from(
        &self,
        project: &Project,
        record: &LoopRecord,
        from: &[LoopStatus],
        iteration: u32,
        children: &[ChildLoop],
    ) -> Result<(), ManagerError> {
        let kind = jobs::artifact_kind(record.loop_type)?;
        let triggered_by = ProjectLayout::iteration_relative(iteration)
            .join("artifacts")
            .join(format!("{}.json", kind.as_str()))
            .to_string_lossy()
            .into_owned();
        let child_records: Vec<LoopRecord> = children
            .iter()
            .map(|child| LoopRecord {
                parent: Some(record.id.clone()),
                name: Some(child.name.clone()),
                depends_on: child.depends_on.clone(),
                triggered_by: Some(triggered_by.clone()),
                ..LoopRecord::new_pending(child.loop_type, &child.task, record.settings.clone())
            })
            .collect();
        project.db.finish_with_children_from(
            &record.id,
            from,
            LoopStatus::Complete,
            &child_records,
            self.shared.host_pid,
        )?;
        self.emit_status(&record.id, record.loop_type, LoopStatus::Complete, None);
        for child in &child_records {
            self.emit_status(&child.id, child.loop_type, LoopStatus::Pending, None);
        }
        Ok(())
    }
}

/// Loops `:LooprRetry` can run again.
fn retryable(status: LoopStatus) -> bool {
    matches!(
        status,
        LoopStatus::Failed | LoopStatus::Cancelled | LoopStatus::Interrupted
    )
}
