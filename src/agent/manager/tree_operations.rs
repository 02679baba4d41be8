//! What the user does to the loop tree: approve, revise, retry, cancel. Which loops each one
//! reaches is decided by one store transaction; here the request is checked, the shells hear
//! what changed, and the tasks of stopped loops are cancelled.

use std::path::Path;

use super::{LoopManager, ManagerError, Project, lock};
use crate::agent::jobs::{self, ChildLoop};
use crate::agent::settings::LoopSettings;
use crate::budget::Grant;
use crate::store::{
    LoopId, LoopRecord, LoopStatus, LoopType, ProjectLayout, approvable, awaits_approval,
    default_retry, waits_for_budget,
};

/// What a cancel did.
#[derive(Debug)]
pub struct Cancelled {
    /// The loop it was asked of.
    pub id: LoopId,
    /// Running loops of its tree that other hosts run: asked to stop, each ends cancelled
    /// when its host checks, before its next turn.
    pub run_elsewhere: Vec<LoopId>,
}

impl LoopManager {
    /// Approves loop `id` (or the newest loop awaiting approval, paused or held at its
    /// budget): it completes and its children spawn from its stored artifact. A paused or
    /// held loop, or the root of a plan tree with such loops, instead lets the tree go past
    /// its budget (`resume_paused`).
    pub fn approve(&self, root: &Path, id: Option<&str>) -> Result<LoopId, ManagerError> {
        let project = self.project(root)?;
        let record = match id.map(str::trim).filter(|id| !id.is_empty()) {
            Some(id) => self.record(&project, id)?,
            None => project
                .db
                .list()?
                .into_iter()
                .find(awaits_approval)
                .ok_or(ManagerError::NothingTo("awaiting approval"))?,
        };
        if waits_for_budget(&record) || (record.parent.is_none() && !approvable(&record)) {
            return self.resume_paused(&project, &record);
        }
        // A phase named: the code loop whose changes await approval.
        let record = match gated_code_of(&project.db.list()?, &record) {
            Some(code) => code,
            None => record,
        };
        if record.loop_type == LoopType::Code && record.status == LoopStatus::AwaitingApproval {
            return self.approve_code(&project, &record);
        }
        let wrong_state = |status: LoopStatus| ManagerError::WrongState {
            id: record.id.to_string(),
            status: status.as_str(),
            hint: "only loops awaiting approval, failed loops with an artifact, and loops paused \
                   or held at their budget (or the plan of their tree) can be approved",
        };
        // Checked before reading the artifact, so a loop that has none is told why; the
        // store checks again as it approves.
        if !approvable(&record) {
            return Err(wrong_state(record.status));
        }
        let kind = jobs::artifact_kind(record.loop_type)?;
        let path = project
            .layout
            .artifacts_dir(&record.id, record.iteration)
            .join(format!("{}.json", kind.as_str()));
        let spawned = jobs::read_json(&path)
            .ok()
            .and_then(|json| jobs::spawned_by(kind, &json))
            .ok_or_else(|| ManagerError::StoredArtifact {
                id: record.id.to_string(),
                message: format!("{} is missing or invalid", path.display()),
            })?;
        let children = spawned_children(&record, record.iteration, &spawned)?;
        // The children start at once with the settings they inherit: fail here, before the
        // approval, when they could not reach the model (no API key), as `start_plan` does.
        if !children.is_empty() {
            (self.shared.provider_factory)(&LoopSettings::from_stored(&record.settings))?;
        }
        if let Err(refused) = project.db.approve(
            &record.id,
            record.iteration,
            &children,
            self.shared.host_pid,
        )? {
            return Err(wrong_state(refused.status));
        }
        self.emit_completed(&record, &children);
        tracing::info!(loop_id = %record.id, iteration = record.iteration, "approved");
        self.schedule(&project);
        self.advance_plan_runs(&project);
        self.tell_if_ready(&project, &record.id);
        Ok(record.id)
    }

    /// Approves the changes of a code loop the `"code"` gate holds: it completes, its phase
    /// is done, and what follows a done phase runs.
    /// The reply does not wait for the commit: it is made in the background, the project's
    /// commit hold keeping code loops from starting until it is.
    fn approve_code(&self, project: &Project, record: &LoopRecord) -> Result<LoopId, ManagerError> {
        let settings = LoopSettings::from_stored(&record.settings);
        let hold = self.hold_for_commit(project, record, &settings);
        if let Err(refused) =
            project
                .db
                .approve(&record.id, record.iteration, &[], self.shared.host_pid)?
        {
            return Err(ManagerError::WrongState {
                id: record.id.to_string(),
                status: refused.status.as_str(),
                hint: "its changes were approved, undone or cancelled meanwhile",
            });
        }
        self.emit_completed(record, &[]);
        tracing::info!(loop_id = %record.id, "code approved");
        self.after_phase_done_in_background(project, record, settings, hold);
        Ok(record.id.clone())
    }

    /// Lets the paused loops of `record`'s plan tree go on from their journals (and its held
    /// ones start), with the tree's budget counted again from what it has spent now (priced
    /// as its budget is): the user grants another budget's worth.
    fn resume_paused(
        &self,
        project: &Project,
        record: &LoopRecord,
    ) -> Result<LoopId, ManagerError> {
        let prices = self
            .shared
            .tree_budget
            .prices_or(|| LoopSettings::from_stored(&record.settings).price_table());
        let resumed = project
            .db
            .resume_paused_tree(&record.id, self.shared.host_pid, |usage| {
                Grant::of_spend(usage, &prices)
            })?
            .map_err(|refused| ManagerError::WrongState {
                id: record.id.to_string(),
                status: refused.status.as_str(),
                hint: "only loops awaiting approval, failed loops with an artifact, and loops \
                       paused or held at their budget (or the plan of their tree) can be \
                       approved",
            })?;
        let (tree_root, changes) = resumed;
        tracing::info!(loop_id = %record.id, root = %tree_root, resumed = changes.len(), "going on past the budget");
        for change in changes {
            self.emit_change(change);
        }
        self.schedule(project);
        Ok(tree_root)
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
        let invalidated = project
            .db
            .revise(&record.id, feedback.trim(), self.shared.host_pid)?
            .map_err(|refused| ManagerError::WrongState {
                id: record.id.to_string(),
                status: refused.status.as_str(),
                hint: "only a current loop that has produced its artifact and is not running \
                       can be revised (an invalidated loop's parent was revised: revise the \
                       parent's new children instead)",
            })?;
        // After the transaction, so a descendant started in between is stopped too; its
        // supervisor finds it invalidated and leaves that be.
        let count = invalidated.len();
        for change in invalidated {
            if let Some(token) = lock(&self.shared.running).get(&change.id) {
                token.cancel();
            }
            self.emit_change(change);
        }
        tracing::info!(loop_id = %record.id, invalidated = count, "revising");
        self.emit_status(&record.id, record.loop_type, LoopStatus::Pending, None);
        self.schedule(&project);
        Ok(record.id)
    }

    /// Runs a loop that failed, was cancelled or was interrupted again, from where it stood:
    /// an artifact loop resumes its stored conversation (or starts over if it had none), a
    /// code loop gets a fresh allowance of iterations. Without `id`, the loop `default_retry`
    /// takes; the loops `retried_with` it run again too.
    pub fn retry(&self, root: &Path, id: Option<&str>) -> Result<LoopId, ManagerError> {
        let project = self.project(root)?;
        let record = match id.map(str::trim).filter(|id| !id.is_empty()) {
            Some(id) => self.record(&project, id)?,
            None => default_retry(&self.seen(&project)?)
                .cloned()
                .ok_or(ManagerError::NothingTo("failed, cancelled or interrupted"))?,
        };
        let retried = project
            .db
            .retry(&record.id, self.shared.host_pid, |owner| {
                self.host_is_gone(owner)
            })?;
        let also = retried.map_err(|refused| ManagerError::WrongState {
            id: record.id.to_string(),
            status: refused.status.as_str(),
            hint: "only a loop that failed, was cancelled or was interrupted can be retried",
        })?;
        tracing::info!(loop_id = %record.id, also = also.len(), "retrying");
        self.emit_status(&record.id, record.loop_type, LoopStatus::Pending, None);
        for change in also {
            self.emit_change(change);
        }
        self.schedule(&project);
        // A run stopped at this loop goes on from it.
        self.retry_plan_runs(&project, &record);
        Ok(record.id)
    }

    /// Cancels loop `id` (or the newest active loop) and every active loop below it; a finished
    /// plan can be given to stop the specs and phases it spawned. Loops no host runs (waiting,
    /// or interrupted: their host is gone) are cancelled at once; this host's running ones are
    /// stopped; other hosts stop theirs before their next turn.
    pub fn cancel(&self, root: &Path, id: Option<&str>) -> Result<Cancelled, ManagerError> {
        let project = self.project(root)?;
        let target = match id.map(str::trim).filter(|id| !id.is_empty()) {
            Some(id) => self.record(&project, id)?,
            // As the user sees them: an interrupted loop is ended only when named.
            None => self
                .seen(&project)?
                .into_iter()
                .find(|record| record.status.is_active())
                .ok_or(ManagerError::NothingTo("running"))?,
        };
        let tree = project
            .db
            .cancel_tree(&target.id, |owner| self.host_is_gone(owner))?;
        // A run stopped at a failed phase has nothing active, and is still there to end.
        let runs_ended = self.cancel_plan_runs(&project, &target);
        // A commit of a phase of the tree, done, may wait on the user's approval of its hooks.
        let commits_stopped = self.cancel_commits_below(&project, &target.id, &project.db.list()?);
        if tree.is_empty() && runs_ended == 0 && commits_stopped == 0 {
            return Err(ManagerError::WrongState {
                id: target.id.to_string(),
                status: target.status.as_str(),
                hint: "neither it nor any loop below it is active; nothing to cancel",
            });
        }
        for change in tree.changes {
            self.emit_change(change);
        }
        let mut run_elsewhere = Vec::new();
        for id in tree.running {
            // Registered before its claim, so a loop the scheduler is starting right now is
            // found here too; its supervisor records the cancellation when the task stops.
            match lock(&self.shared.running).get(&id) {
                Some(token) => token.cancel(),
                None => run_elsewhere.push(id),
            }
        }
        tracing::info!(loop_id = %target.id, run_elsewhere = run_elsewhere.len(), "cancel requested");
        self.tell_if_ready(&project, &target.id);
        Ok(Cancelled {
            id: target.id,
            run_elsewhere,
        })
    }

    /// Tells the shells that `record` completed and `children` appeared.
    pub(super) fn emit_completed(&self, record: &LoopRecord, children: &[LoopRecord]) {
        self.emit_status(&record.id, record.loop_type, LoopStatus::Complete, None);
        for child in children {
            self.emit_status(&child.id, child.loop_type, LoopStatus::Pending, None);
        }
    }
}

/// The code loop of phase `record` whose changes await approval, if it has one.
fn gated_code_of(records: &[LoopRecord], record: &LoopRecord) -> Option<LoopRecord> {
    if record.loop_type != LoopType::Phase {
        return None;
    }
    records
        .iter()
        .find(|code| {
            code.loop_type == LoopType::Code
                && code.parent.as_ref() == Some(&record.id)
                && code.status == LoopStatus::AwaitingApproval
        })
        .cloned()
}

/// The loops that `parent`'s accepted artifact of iteration `iteration` spawns, pending and
/// inheriting its settings.
pub(super) fn spawned_children(
    parent: &LoopRecord,
    iteration: u32,
    children: &[ChildLoop],
) -> Result<Vec<LoopRecord>, ManagerError> {
    let kind = jobs::artifact_kind(parent.loop_type)?;
    let triggered_by = ProjectLayout::iteration_relative(iteration)
        .join("artifacts")
        .join(format!("{}.json", kind.as_str()))
        .to_string_lossy()
        .into_owned();
    Ok(children
        .iter()
        .map(|child| LoopRecord {
            parent: Some(parent.id.clone()),
            name: Some(child.name.clone()),
            depends_on: child.depends_on.clone(),
            triggered_by: Some(triggered_by.clone()),
            ..LoopRecord::new_pending(child.loop_type, &child.task, parent.settings.clone())
        })
        .collect())
}
