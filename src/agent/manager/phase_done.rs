//! What follows a phase that is done: its code loop completed (validated, verified) and, when
//! the `"code"` gate holds it, approved. Each step is one call here, in order, so the
//! completion and the approval paths follow it alike.

use super::commit_hold::CommitHold;
use super::{LoopManager, Project};
use crate::agent::settings::LoopSettings;
use crate::store::LoopRecord;

impl LoopManager {
    /// Runs what follows the code loop `code` once its phase is done. `hold` is the project's
    /// commit hold (`hold_for_commit`), taken before the phase was recorded done; it is
    /// released once the commit is made, before the run moves on. Blocking (it may run git
    /// and write files): call it from the blocking pool.
    pub(super) fn after_phase_done(
        &self,
        project: &Project,
        code: &LoopRecord,
        settings: &LoopSettings,
        hold: Option<CommitHold>,
    ) {
        let cancel = hold
            .as_ref()
            .map(|hold| hold.cancel.clone())
            .unwrap_or_default();
        self.commit_phase(project, code, settings, &cancel);
        drop(hold);
        tracing::info!(loop_id = %code.id, "phase done");
        self.advance_plan_runs(project);
    }

    /// `after_phase_done` on the blocking pool, without waiting for it (an approval is
    /// answered at once); then starts what may run and tells a tree that stopped. The hold
    /// keeps the order: no code loop starts before the commit is made.
    pub(super) fn after_phase_done_in_background(
        &self,
        project: &Project,
        code: &LoopRecord,
        settings: LoopSettings,
        hold: Option<CommitHold>,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!(loop_id = %code.id, "no runtime to finish the phase on");
            return;
        };
        let manager = self.clone();
        let project = project.clone();
        let code = code.clone();
        // A shell waiting for quiet waits for the commit too.
        self.shared.busy.send_modify(|busy| *busy += 1);
        let busy = self.shared.busy.clone();
        runtime.spawn(async move {
            let finished = tokio::task::spawn_blocking(move || {
                manager.after_phase_done(&project, &code, &settings, hold);
                manager.schedule(&project);
                manager.tell_if_ready(&project, &code.id);
            })
            .await;
            if let Err(err) = finished {
                tracing::error!(error = %err, "what follows a done phase crashed");
            }
            busy.send_modify(|busy| *busy -= 1);
        });
    }
}
