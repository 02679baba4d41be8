//! Plan trees and their budget outside a loop's own check: the user setting another budget
//! (trees it allows go on), and the scheduler holding back loops of a tree at its budget.
//! What is decided (reached, may go on, where a tree stands) is `crate::budget`'s; this
//! module asks it, has the store record the outcome and tells the shells.

use std::collections::BTreeMap;

use super::{LoopManager, ManagerError, Project, lock};
use crate::agent::context::LoopError;
use crate::agent::events::{LoopEvent, NoticeLevel};
use crate::agent::settings::LoopSettings;
use crate::budget::{Budget, may_go_on};
use crate::pricing::{Price, PriceTable};
use crate::store::{LoopId, LoopRecord, StoreError, tree_work};

impl LoopManager {
    /// Holds every plan tree to `budget`, its dollars priced by `prices`, from now on (the
    /// user's settings): running loops check it before their next turn. Cheap; the trees it
    /// lets go on are `resume_within_budget`'s work.
    pub fn set_tree_budget(
        &self,
        budget: Budget,
        prices: BTreeMap<String, Price>,
    ) -> Result<(), ManagerError> {
        budget.check().map_err(ManagerError::Settings)?;
        PriceTable::check(&prices).map_err(ManagerError::Settings)?;
        tracing::info!(
            ?budget,
            priced_models = prices.len(),
            "plan trees held to a new budget"
        );
        self.shared.tree_budget.set(budget, PriceTable::new(prices));
        Ok(())
    }

    /// Lets the waiting trees of every open project go on that the budget now allows. Reads
    /// and writes SQLite: blocking work.
    pub fn resume_within_budget(&self) {
        let projects: Vec<Project> = lock(&self.shared.projects).values().cloned().collect();
        for project in projects {
            self.release_within_budget(&project);
            self.schedule(&project);
        }
    }

    /// Lets the trees of `project` go on whose loops wait for a budget that allows more now;
    /// the user hears of each. The caller schedules.
    pub(super) fn release_within_budget(&self, project: &Project) {
        let tree_budget = self.shared.tree_budget.clone();
        let went_on = project
            .db
            .resume_trees_within(self.shared.host_pid, |root, usage, grant| {
                let settings = LoopSettings::from_stored(&root.settings);
                let guard = tree_budget.guard_for(settings.budget, settings.price_table());
                may_go_on(guard.as_ref(), usage, grant)
            });
        let went_on = match went_on {
            Ok(went_on) => went_on,
            Err(err) => {
                tracing::error!(error = %err, "letting trees within their budget go on");
                return;
            }
        };
        for tree in went_on {
            tracing::info!(root = %tree.root, standing = %tree.standing, loops = tree.changes.len(), "going on within the budget");
            for change in tree.changes {
                self.emit_change(change);
            }
            self.shared.events.emit(LoopEvent::Notice {
                loop_id: tree.root.to_string(),
                level: NoticeLevel::Info,
                message: format!(
                    "plan tree {} goes on within its budget now ({})",
                    tree.root, tree.standing
                ),
            });
        }
    }

    /// Why pending loop `record` may not start: its plan tree reached the budget it is held
    /// to (worded as a loop stopped there is). `reached` keeps each tree's answer for one
    /// scheduling pass.
    pub(super) fn budget_hold(
        &self,
        project: &Project,
        record: &LoopRecord,
        settings: &LoopSettings,
        reached: &mut BTreeMap<LoopId, Option<String>>,
    ) -> Result<Option<String>, StoreError> {
        let Some(guard) = self
            .shared
            .tree_budget
            .guard_for(settings.budget, settings.price_table())
        else {
            return Ok(None);
        };
        let spend = project.db.tree_spend(&record.id)?;
        let reason = reached
            .entry(spend.root.clone())
            .or_insert_with(|| {
                guard.reached(&spend.usage, spend.grant).map(|reached| {
                    LoopError::BudgetReached {
                        root: spend.root.clone(),
                        reached,
                    }
                    .for_record()
                })
            })
            .clone();
        Ok(reason)
    }

    /// Holds pending loop `record` back with `reason`, telling the shells (and the user, the
    /// first time its tree waits for its budget, and for each verification: the user just
    /// asked for it, and the tree's readiness leaves it out, so nothing else would say why it
    /// does not start).
    pub(super) fn hold(&self, project: &Project, record: &LoopRecord, reason: String) {
        match project.db.hold_pending(&record.id, &reason) {
            Ok(Some(held)) => {
                tracing::info!(loop_id = %record.id, reason = %crate::next_step::neutral(&reason), "held at the budget");
                self.emit_change(held.change);
                if held.first_in_tree || !tree_work(record) {
                    self.shared.events.emit(LoopEvent::Notice {
                        loop_id: record.id.to_string(),
                        level: NoticeLevel::Warn,
                        message: reason,
                    });
                }
            }
            Ok(None) => {}
            Err(err) => {
                tracing::error!(loop_id = %record.id, error = %err, "holding a loop at the budget")
            }
        }
    }
}
