//! The hold a phase's commit keeps on its project: while a code loop's changes are being
//! committed no other code loop starts (the scheduler counts it as a running code loop), and
//! a cancel of the loop's tree or the host's shutdown ends what the commit waits on.

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use super::{LoopManager, Project, lock};
use crate::agent::settings::{CommitMode, LoopSettings};
use crate::store::{LoopId, LoopRecord};

/// A commit under way in a project: the code loop whose changes it commits.
pub(super) struct Committing {
    pub code: LoopRecord,
    /// Cancelled by a cancel of the code loop's tree and by the host's shutdown.
    pub cancel: CancellationToken,
}

/// A project's commit hold, taken for one code loop's commit; dropping it (the commit done,
/// failed or panicked) releases it.
pub(super) struct CommitHold {
    manager: LoopManager,
    project: PathBuf,
    code: LoopId,
    pub cancel: CancellationToken,
}

impl Drop for CommitHold {
    fn drop(&mut self) {
        let mut committing = lock(&self.manager.shared.committing);
        if let Some(held) = committing.get_mut(&self.project) {
            held.retain(|commit| commit.code.id != self.code);
            if held.is_empty() {
                committing.remove(&self.project);
            }
        }
    }
}

impl LoopManager {
    /// Takes `project`'s commit hold for code loop `code` when its settings commit each
    /// phase; taken before the loop is recorded done, so no code loop starts in between.
    pub(super) fn hold_for_commit(
        &self,
        project: &Project,
        code: &LoopRecord,
        settings: &LoopSettings,
    ) -> Option<CommitHold> {
        if settings.commit != CommitMode::Phase {
            return None;
        }
        let key = project.root.path().to_path_buf();
        let cancel = CancellationToken::new();
        lock(&self.shared.committing)
            .entry(key.clone())
            .or_default()
            .push(Committing {
                code: code.clone(),
                cancel: cancel.clone(),
            });
        Some(CommitHold {
            manager: self.clone(),
            project: key,
            code: code.id.clone(),
            cancel,
        })
    }

    /// The code loop whose changes are being committed in `project`, if any.
    pub(super) fn committing(&self, project: &Project) -> Option<LoopRecord> {
        lock(&self.shared.committing)
            .get(project.root.path())
            .and_then(|held| held.first())
            .map(|commit| commit.code.clone())
    }

    /// Stops the commits of `project` whose code loop is `target` or below it (an approval
    /// they wait on is answered "not approved"); how many it stopped.
    pub(super) fn cancel_commits_below(
        &self,
        project: &Project,
        target: &LoopId,
        records: &[LoopRecord],
    ) -> usize {
        let below = |code: &LoopRecord| {
            let mut at = Some(code);
            while let Some(record) = at {
                if &record.id == target {
                    return true;
                }
                at = records
                    .iter()
                    .find(|parent| Some(&parent.id) == record.parent.as_ref());
            }
            false
        };
        let committing = lock(&self.shared.committing);
        let Some(held) = committing.get(project.root.path()) else {
            return 0;
        };
        held.iter()
            .filter(|commit| below(&commit.code))
            .inspect(|commit| commit.cancel.cancel())
            .count()
    }
}
