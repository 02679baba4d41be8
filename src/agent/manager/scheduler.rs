//! What runs next: pending loops of this host whose dependencies are complete, while slots
//! are free.

use std::sync::atomic::Ordering;

use tokio_util::sync::CancellationToken;

use super::{LoopManager, Project, lock};
use crate::agent::settings::LoopSettings;
use crate::store::{LoopRecord, LoopStatus, StoreError};

impl LoopManager {
    /// Starts every pending loop of this host whose dependencies are complete, while slots
    /// are free.
    pub(super) fn schedule(&self, project: &Project) {
        if self.shared.shutting_down.load(Ordering::SeqCst) {
            return;
        }
        let _scheduling = lock(&self.shared.scheduling);
        let pending = match project.db.pending_for_host(self.shared.host_pid) {
            Ok(pending) => pending,
            Err(err) => {
                tracing::error!(error = %err, "listing pending loops");
                return;
            }
        };
        for record in pending {
            let settings = LoopSettings::from_stored(&record.settings);
            let limit = usize::try_from(settings.max_concurrent_loops).unwrap_or(usize::MAX);
            if self.running_count() >= limit {
                continue;
            }
            match dependencies_met(project, &record) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(err) => {
                    tracing::error!(loop_id = %record.id, error = %err, "checking dependencies");
                    continue;
                }
            }
            // The token exists before the claim: a cancel that comes between the claim and
            // the launch finds it, and the loop stops as soon as it starts.
            let cancel = CancellationToken::new();
            lock(&self.shared.running).insert(record.id.clone(), cancel.clone());
            match project.db.claim(&record.id, self.shared.host_pid) {
                Ok(true) => {
                    crate::test_hooks::hold_point("after_claim");
                    self.launch(project, record, settings, cancel);
                }
                Ok(false) => {
                    lock(&self.shared.running).remove(&record.id);
                }
                Err(err) => {
                    lock(&self.shared.running).remove(&record.id);
                    tracing::error!(loop_id = %record.id, error = %err, "claiming a loop");
                }
            }
        }
    }
}

/// A spec may start once the specs it depends on (its siblings from the same parent
/// artifact) are complete.
fn dependencies_met(project: &Project, record: &LoopRecord) -> Result<bool, StoreError> {
    if record.depends_on.is_empty() {
        return Ok(true);
    }
    let Some(parent) = &record.parent else {
        return Ok(true);
    };
    let siblings = project.db.children(parent)?;
    Ok(record.depends_on.iter().all(|dependency| {
        siblings.iter().any(|sibling| {
            sibling.name.as_deref() == Some(dependency.as_str())
                && sibling.triggered_by == record.triggered_by
                && sibling.status == LoopStatus::Complete
        })
    }))
}
