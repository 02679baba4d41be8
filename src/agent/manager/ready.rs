//! Telling the shells what a plan tree has ready once its work stops (`TreeReady`): after a
//! loop of it ends, and after an approval or a cancel that leaves nothing of it to run.

use std::sync::atomic::Ordering;

use super::{LoopManager, Project, lock};
use crate::agent::events::LoopEvent;
use crate::agent::tree_ready::{TreeReady, tree_of};
use crate::store::{LoopId, tree_work};

impl LoopManager {
    /// Emits `TreeReady` for the tree of loop `id` if none of its loops runs or is about to,
    /// once per state of the tree.
    pub(super) fn tell_if_ready(&self, project: &Project, id: &LoopId) {
        if self.shared.shutting_down.load(Ordering::SeqCst) {
            return;
        }
        let records = match project.db.list() {
            Ok(records) => records,
            Err(err) => {
                tracing::warn!(loop_id = %id, error = %err, "reading the tree to tell what is ready");
                return;
            }
        };
        // A verification asked on demand is no work of the tree: it neither holds the tree's
        // readiness back nor, ending, tells it again.
        let tree: Vec<_> = tree_of(&records, id)
            .into_iter()
            .filter(|record| tree_work(record))
            .collect();
        let Some(ready) = TreeReady::of(&tree) else {
            return;
        };
        let Some(root) = tree.iter().find(|record| record.parent.is_none()) else {
            return;
        };
        // What the tree's loops are and where they stand; a revision or a retry that ran
        // since changes it, two loops that ended together leave it the same.
        let state: String = tree
            .iter()
            .map(|record| {
                format!(
                    "{} {} {};",
                    record.id,
                    record.status.as_str(),
                    record.updated_at
                )
            })
            .collect();
        {
            let mut told = lock(&self.shared.told_ready);
            if told.get(&root.id) == Some(&state) {
                return;
            }
            told.insert(root.id.clone(), state);
        }
        self.shared.events.emit(LoopEvent::TreeReady {
            root: root.id.clone(),
            label: root.label(),
            ready,
        });
    }
}
