//! Read-only answers for the shells: status, tasks, phase names, one loop by id.

use std::path::{Path, PathBuf};

use super::{LoopManager, ManagerError, Project};
use crate::agent::jobs;
use crate::agent::phases::{phase_selectors, resolve_phase};
use crate::agent::tasks::{PhaseSelector, PhaseTasks, phase_tasks};
use crate::store::{LoopId, LoopRecord, LoopStatus};

impl LoopManager {
    pub fn status(&self, root: &Path) -> Result<Vec<LoopRecord>, ManagerError> {
        Ok(self.project(root)?.db.list()?)
    }

    /// Every loop, newest first, with the markdown of its current artifact if it has one.
    pub fn status_with_artifacts(
        &self,
        root: &Path,
    ) -> Result<Vec<(LoopRecord, Option<PathBuf>)>, ManagerError> {
        let project = self.project(root)?;
        Ok(project
            .db
            .list()?
            .into_iter()
            .map(|record| {
                let markdown = jobs::artifact_kind(record.loop_type)
                    .ok()
                    .filter(|_| record.iteration > 0)
                    .map(|kind| {
                        project
                            .layout
                            .artifacts_dir(&record.id, record.iteration)
                            .join(format!("{}.md", kind.as_str()))
                    });
                (record, markdown)
            })
            .collect())
    }

    /// The tasks of the current phases matching `selector`.
    pub fn tasks(
        &self,
        root: &Path,
        selector: &PhaseSelector,
    ) -> Result<Vec<PhaseTasks>, ManagerError> {
        let project = self.project(root)?;
        let records = project.db.list()?;
        let selector = match selector {
            PhaseSelector::Named(name) => {
                let phase = resolve_phase(&records, name, |record| {
                    record.status != LoopStatus::Invalidated && record.iteration > 0
                })?;
                PhaseSelector::Loop(phase.id.to_string())
            }
            other => other.clone(),
        };
        Ok(phase_tasks(
            &records,
            &selector,
            &project.root,
            &project.layout,
        ))
    }

    /// The names to complete a phase argument with (`spec/phase` where a name is shared).
    pub fn phase_selectors(&self, root: &Path) -> Result<Vec<String>, ManagerError> {
        Ok(phase_selectors(&self.project(root)?.db.list()?))
    }

    pub(super) fn record(&self, project: &Project, id: &str) -> Result<LoopRecord, ManagerError> {
        let loop_id = LoopId::parse(id).ok_or_else(|| ManagerError::UnknownLoop(id.to_owned()))?;
        project
            .db
            .get(&loop_id)?
            .ok_or_else(|| ManagerError::UnknownLoop(id.to_owned()))
    }
}
