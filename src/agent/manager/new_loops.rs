//! Recording new loops: a plan for a task, a code loop for an approved phase.

use std::path::Path;

use super::{LoopManager, ManagerError, Project};
use crate::agent::phases::{PhaseLookupError, resolve_phase};
use crate::agent::settings::LoopSettings;
use crate::store::{
    CodeLoopRefused, LoopId, LoopRecord, LoopStatus, LoopType, ProjectLayout, runnable_phase,
};

impl LoopManager {
    /// Starts a plan loop for `task` and returns its id at once; loops run in the background
    /// and report through events.
    pub fn start_plan(
        &self,
        root: &Path,
        task: &str,
        settings: LoopSettings,
    ) -> Result<LoopId, ManagerError> {
        let task = task.trim();
        if task.is_empty() {
            return Err(ManagerError::EmptyTask);
        }
        let project = self.project_for_a_new_loop(root, &settings)?;
        let record = LoopRecord::new_pending(LoopType::Plan, task, settings.to_json());
        project.db.insert(&record, self.shared.host_pid)?;
        tracing::info!(loop_id = %record.id, root = %project.root.path().display(), "plan loop created");
        self.emit_status(&record.id, record.loop_type, LoopStatus::Pending, None);
        self.schedule(&project);
        Ok(record.id)
    }

    /// The project at `root`, once `settings` can start a loop there (checked, a provider
    /// built: fail now, not in the background, when it cannot be, as without an API key); the
    /// loop's MCP servers and coding agent get the user's current settings (they are stored
    /// without their env values).
    pub(super) fn project_for_a_new_loop(
        &self,
        root: &Path,
        settings: &LoopSettings,
    ) -> Result<Project, ManagerError> {
        settings.check().map_err(ManagerError::Settings)?;
        (self.shared.provider_factory)(settings)?;
        let project = self.project(root)?;
        self.shared.mcp.use_current(&settings.mcp);
        self.shared.agents.use_current(&settings.agents);
        Ok(project)
    }

    /// Starts a code loop that implements phase `phase` (a phase name or a phase loop id) and
    /// returns its id at once.
    pub fn start_code(
        &self,
        root: &Path,
        phase: &str,
        settings: LoopSettings,
    ) -> Result<LoopId, ManagerError> {
        let project = self.project_for_a_new_loop(root, &settings)?;
        let records = project.db.list()?;
        let phase_record =
            resolve_phase(&records, phase, runnable_phase).map_err(|err| match err {
                PhaseLookupError::NotFound(_) => ManagerError::UnknownPhase(phase.to_owned()),
                ambiguous => ManagerError::Name(ambiguous),
            })?;
        self.start_code_for(&project, phase_record, &settings)
    }

    /// Starts a code loop that implements `phase_record` (a phase that may run) with
    /// `settings`; refused while the phase has an active code loop or changed meanwhile.
    pub(super) fn start_code_for(
        &self,
        project: &Project,
        phase_record: &LoopRecord,
        settings: &LoopSettings,
    ) -> Result<LoopId, ManagerError> {
        let phase = phase_record.name.as_deref().unwrap_or_default();
        let record = LoopRecord {
            parent: Some(phase_record.id.clone()),
            name: phase_record.name.clone(),
            triggered_by: Some(
                ProjectLayout::iteration_relative(phase_record.iteration)
                    .join("artifacts/phase.json")
                    .to_string_lossy()
                    .into_owned(),
            ),
            ..LoopRecord::new_pending(LoopType::Code, &phase_record.task, settings.to_json())
        };
        let inserted =
            project
                .db
                .insert_code_loop(&record, phase_record, self.shared.host_pid, |owner| {
                    self.host_is_gone(owner)
                })?;
        match inserted {
            Ok(()) => {}
            Err(CodeLoopRefused::Busy {
                id,
                status: LoopStatus::Interrupted,
            }) => {
                return Err(ManagerError::code_loop_interrupted(
                    &project.db.list()?,
                    &id,
                ));
            }
            Err(CodeLoopRefused::Busy { id, status }) => {
                return Err(ManagerError::WrongState {
                    id: id.to_string(),
                    status: status.as_str(),
                    hint: "this phase already has a code loop; cancel it first",
                });
            }
            Err(CodeLoopRefused::PhaseChanged(now)) => {
                return Err(ManagerError::PhaseChanged {
                    id: phase_record.id.to_string(),
                    status: now.status.as_str(),
                });
            }
        }
        tracing::info!(loop_id = %record.id, phase, "code loop created");
        self.emit_status(&record.id, record.loop_type, LoopStatus::Pending, None);
        self.schedule(project);
        Ok(record.id)
    }
}
