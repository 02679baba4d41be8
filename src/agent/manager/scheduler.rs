//! What runs next: pending loops of this host whose dependencies are complete, while slots
//! are free and their plan tree is within its budget; one code loop of a project at a time,
//! and none while a phase of it is being committed.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use tokio_util::sync::CancellationToken;

use super::{LoopManager, Project, lock};
use crate::agent::settings::LoopSettings;
use crate::store::{LoopType, holds_working_tree};

impl LoopManager {
    /// Starts every pending loop of this host whose dependencies are complete, while slots
    /// are free; a loop of a tree at its budget is held back, its status saying why.
    pub(super) fn schedule(&self, project: &Project) {
        if self.shared.shutting_down.load(Ordering::SeqCst) {
            return;
        }
        let _scheduling = lock(&self.shared.scheduling);
        let ready = match project.db.ready_for_host(self.shared.host_pid) {
            Ok(ready) => ready,
            Err(err) => {
                tracing::error!(error = %err, "listing loops ready to run");
                return;
            }
        };
        // One code loop changes the working tree at a time, and none while a phase's changes
        // are being committed; the others wait their turn.
        let mut working_tree_held = match self.seen(project) {
            Ok(records) => {
                records.iter().any(holds_working_tree) || self.committing(project).is_some()
            }
            Err(err) => {
                tracing::error!(error = %err, "listing the project's loops");
                return;
            }
        };
        let mut reached_by_tree = BTreeMap::new();
        for record in ready {
            let is_code = record.loop_type == LoopType::Code;
            if is_code && working_tree_held {
                continue;
            }
            let settings = LoopSettings::from_stored(&record.settings);
            let limit = usize::try_from(settings.max_concurrent_loops).unwrap_or(usize::MAX);
            if self.running_count() >= limit {
                continue;
            }
            // Before its claim: a code loop would take its baseline snapshot, and any loop
            // would only pause at its first turn.
            match self.budget_hold(project, &record, &settings, &mut reached_by_tree) {
                Ok(None) => {}
                Ok(Some(reason)) => {
                    self.hold(project, &record, reason);
                    continue;
                }
                Err(err) => {
                    tracing::error!(loop_id = %record.id, error = %err, "reading the plan tree's spend");
                    continue;
                }
            }
            // The token exists before the claim: a cancel that comes between the claim and
            // the launch finds it, and the loop stops as soon as it starts.
            let cancel = CancellationToken::new();
            lock(&self.shared.running).insert(record.id.clone(), cancel.clone());
            match project.db.claim(&record.id, self.shared.host_pid) {
                Ok(true) => {
                    working_tree_held |= is_code;
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
