//! Which projects this host has open: opening one sweeps the temporary files killed hosts
//! left behind and, if the shell wants it (`OnOpen`), adopts the loops of hosts that are gone;
//! `resume` adopts them whatever the shell chose.

use std::path::Path;

use super::{LoopManager, ManagerError, OnOpen, Project, lock};
use crate::store::{
    LoopDb, LoopStatus, ProjectLayout, remove_if_leftover, sweep_state_dir, waits_for_budget,
};

/// What opening a project left to do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResumeCounts {
    /// Loops not finished: pending, running, awaiting approval, paused.
    pub active: usize,
    /// Loops that run or will (pending, running).
    pub resuming: usize,
    /// Loops that wait for their plan tree's budget (paused, or held before they started):
    /// approving the tree or a larger budget lets them go on.
    pub waiting_for_budget: usize,
}
use crate::tools::{ProjectRoot, project_walker, unfit_root};

impl LoopManager {
    /// The project at `root`, opened once per host. Opening it adopts the loops hosts that
    /// are gone left unfinished, so they resume, when the shell chose `ResumeInterrupted`.
    pub(super) fn project(&self, root: &Path) -> Result<Project, ManagerError> {
        let root = ProjectRoot::new(root).map_err(|source| ManagerError::Root {
            path: root.to_path_buf(),
            source,
        })?;
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        if let Some(unfit) = unfit_root(root.path(), home.as_deref(), &self.shared.loopr_home) {
            return Err(unfit.into());
        }
        let project = {
            let mut projects = lock(&self.shared.projects);
            if let Some(project) = projects.get(root.path()) {
                return Ok(project.clone());
            }
            let layout = ProjectLayout::new(&self.shared.loopr_home, root.path());
            let db = LoopDb::open(&layout.database())?;
            // Before anyone can start a loop here through this host: whatever holds its pid now
            // was left by an earlier host with the same pid.
            let disowned = db.disown_leftovers(self.shared.host_pid)?;
            if disowned > 0 {
                tracing::info!(
                    count = disowned,
                    "loops of an earlier host with this host's pid belong to no host now"
                );
            }
            // Before any loop runs a command that could create a repository.
            super::repository_pin::pin_repository(&layout, root.path());
            let project = Project { root, layout, db };
            projects.insert(project.root.path().to_path_buf(), project.clone());
            project
        };
        self.remove_leftovers(&project);
        if self.shared.on_open == OnOpen::ResumeInterrupted {
            self.take_over_interrupted(&project)?;
            self.schedule(&project);
            // Runs go on with the loops: one whose phase got done as its host went away
            // starts the next.
            self.advance_plan_runs(&project);
        } else {
            self.schedule(&project);
        }
        Ok(project)
    }

    /// Adopts the loops hosts that are gone left pending or running, and lets the trees go on
    /// that a budget raised while no host had the project open allows. The caller schedules.
    fn take_over_interrupted(&self, project: &Project) -> Result<(), ManagerError> {
        let adopted = project
            .db
            .adopt_orphans(self.shared.host_pid, |owner| self.host_is_gone(owner))?;
        if !adopted.is_empty() {
            tracing::info!(
                count = adopted.len(),
                "resuming loops of a host that exited"
            );
            for id in &adopted {
                if let Some(record) = project.db.get(id)? {
                    self.emit_status(id, record.loop_type, LoopStatus::Pending, None);
                }
            }
        }
        self.release_within_budget(project);
        Ok(())
    }

    /// Opens the project and resumes its unfinished loops, those hosts that are gone left
    /// too; returns how many loops are active, how many of them may run (pending or running,
    /// not held at their tree's budget) and how many wait for a budget (paused, or held).
    pub fn resume(&self, root: &Path) -> Result<ResumeCounts, ManagerError> {
        let project = self.project(root)?;
        self.take_over_interrupted(&project)?;
        self.schedule(&project);
        self.advance_plan_runs(&project);
        let mut counts = ResumeCounts::default();
        for record in project.db.list()? {
            counts.active += usize::from(record.status.is_active());
            if waits_for_budget(&record) {
                counts.waiting_for_budget += 1;
            } else if !record.status.is_idle() {
                counts.resuming += 1;
            }
        }
        Ok(counts)
    }

    /// How many loops of the project hosts that are gone left pending or running: what
    /// `resume` would take over.
    pub fn left_unfinished(&self, root: &Path) -> Result<usize, ManagerError> {
        let project = self.project(root)?;
        Ok(project.db.count_orphans(|owner| self.host_is_gone(owner))?)
    }

    /// Starts what of this host's loops may run now (a shell waiting for quiet asks once more
    /// before it stops).
    pub fn start_ready(&self, root: &Path) -> Result<(), ManagerError> {
        let project = self.project(root)?;
        self.schedule(&project);
        Ok(())
    }

    /// Removes the temporary files hosts that were killed left in the project's state (now:
    /// it is small) and in the project itself, then the checkpoints of loops that are gone (in
    /// the background: a tree walk and git, which a shell waiting for quiet waits for).
    fn remove_leftovers(&self, project: &Project) {
        let home = self.shared.loopr_home.clone();
        let removed = sweep_state_dir(project.layout.project_dir(), &home);
        if removed > 0 {
            tracing::info!(
                removed,
                "removed temporary files of killed hosts from the state"
            );
        }
        let root = project.root.clone();
        let db = project.db.clone();
        self.shared.busy.send_modify(|busy| *busy += 1);
        let manager = self.clone();
        let spawned = std::thread::Builder::new()
            .name("loopr-leftovers".to_owned())
            .spawn(move || {
                if let Ok(walker) = project_walker(&root, root.path(), None) {
                    for entry in walker.flatten() {
                        remove_if_leftover(entry.path(), &home);
                    }
                }
                // Checkpoints of loops the store no longer holds (a deleted plan's).
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => {
                        runtime.block_on(super::rewind::prune_checkpoints(root.path(), &db));
                    }
                    Err(err) => tracing::warn!(error = %err, "pruning checkpoints"),
                }
                manager.shared.busy.send_modify(|busy| *busy -= 1);
            });
        if let Err(err) = spawned {
            tracing::warn!(error = %err, "starting the leftover sweep");
            self.shared.busy.send_modify(|busy| *busy -= 1);
        }
    }
}
