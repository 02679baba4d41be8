//! What follows a phase that is done: its code loop completed (validated, verified) and, when
//! the `"code"` gate holds it, approved. Each step is one call here, in order, so the
//! completion and the approval paths follow it alike.

use super::{LoopManager, Project};
use crate::agent::settings::LoopSettings;
use crate::store::LoopRecord;

impl LoopManager {
    /// Runs what follows the code loop `code` once its phase is done. Blocking (it may run
    /// git and write files): call it from the blocking pool.
    pub(super) fn after_phase_done(
        &self,
        project: &Project,
        code: &LoopRecord,
        settings: &LoopSettings,
    ) {
        self.commit_phase(project, code, settings);
        tracing::info!(loop_id = %code.id, "phase done");
        self.advance_plan_runs(project);
    }
}
