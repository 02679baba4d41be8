//! Read-only answers for the shells: status, tasks, phase names, one loop by id.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{LoopManager, ManagerError, Project};
use crate::agent::jobs;
use crate::agent::phases::{phase_selectors, resolve_phase};
use crate::agent::plan_tree::PlanTrees;
use crate::agent::tasks::{PhaseSelector, TaskList, listed_phase, phase_tasks};
use crate::llm::Usage;
use crate::pricing::{Cost, ModelUsage, PriceTable, total_usage};
use crate::store::{LoopId, LoopRecord, LoopType, Purpose};

/// One loop of a shell's status list.
pub struct StatusRow {
    pub record: LoopRecord,
    /// The markdown of its current artifact, if it has one.
    pub artifact: Option<PathBuf>,
    pub spend: Spend,
    /// What its plan tree spent, for a loop that is the root of one.
    pub tree: Option<Spend>,
}

/// Tokens of every kind and what they cost.
pub struct Spend {
    pub usage: Usage,
    pub cost: Cost,
}

impl Spend {
    fn of(usage: &[ModelUsage], prices: &PriceTable) -> Spend {
        Spend {
            usage: total_usage(usage),
            cost: prices.cost(usage),
        }
    }
}

impl LoopManager {
    /// Every loop, newest first, as the user should see it: a running loop whose host is gone
    /// is interrupted.
    pub fn status(&self, root: &Path) -> Result<Vec<LoopRecord>, ManagerError> {
        let project = self.project(root)?;
        self.seen(&project)
    }

    /// The ids of the project's loops, as `status` gives them, that `purpose` takes (every
    /// loop without one), newest first.
    pub fn loop_ids(
        &self,
        root: &Path,
        purpose: Option<Purpose>,
    ) -> Result<Vec<LoopId>, ManagerError> {
        Ok(self
            .status(root)?
            .into_iter()
            .filter(|record| purpose.is_none_or(|purpose| purpose.admits(record)))
            .map(|record| record.id)
            .collect())
    }

    pub(super) fn seen(&self, project: &Project) -> Result<Vec<LoopRecord>, ManagerError> {
        Ok(project.db.list_as_seen(|owner| self.host_is_gone(owner))?)
    }

    /// The tokens each loop of the project spent, per model.
    pub fn usage_by_loop(
        &self,
        root: &Path,
    ) -> Result<HashMap<LoopId, Vec<ModelUsage>>, ManagerError> {
        Ok(self.project(root)?.db.usage_by_loop()?)
    }

    /// Every loop as `status` gives it, with the markdown of its current artifact if it has
    /// one.
    pub fn status_with_artifacts(
        &self,
        root: &Path,
    ) -> Result<Vec<(LoopRecord, Option<PathBuf>)>, ManagerError> {
        let project = self.project(root)?;
        Ok(self
            .seen(&project)?
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

    /// Every loop as `status_with_artifacts` gives it, with what it spent and, for the root
    /// of each plan tree, what the whole tree spent (plan, specs, phases, code loops, the
    /// invalidated ones too: their tokens were paid for), priced by `prices`.
    pub fn status_with_spend(
        &self,
        root: &Path,
        prices: &PriceTable,
    ) -> Result<Vec<StatusRow>, ManagerError> {
        let rows = self.status_with_artifacts(root)?;
        let mut usage_by_loop = self.project(root)?.db.usage_by_loop()?;
        let trees = PlanTrees::of(rows.iter().map(|(record, _)| record));
        let mut by_tree: HashMap<LoopId, Vec<ModelUsage>> = HashMap::new();
        let mut with_usage = Vec::with_capacity(rows.len());
        for (record, artifact) in rows {
            let usage = usage_by_loop.remove(&record.id).unwrap_or_default();
            let tree = by_tree.entry(trees.root(&record.id)).or_default();
            for entry in &usage {
                match tree.iter_mut().find(|known| known.model == entry.model) {
                    Some(known) => known.usage.add(&entry.usage),
                    None => tree.push(entry.clone()),
                }
            }
            with_usage.push((record, artifact, usage));
        }
        Ok(with_usage
            .into_iter()
            .map(|(record, artifact, usage)| {
                let tree = record.parent.is_none().then(|| {
                    Spend::of(
                        by_tree.get(&record.id).map_or(&[][..], Vec::as_slice),
                        prices,
                    )
                });
                StatusRow {
                    spend: Spend::of(&usage, prices),
                    tree,
                    record,
                    artifact,
                }
            })
            .collect())
    }

    /// The tasks of the current phases `selector` picks. A loop id that is no phase's, and
    /// no selector at all, pick a plan: the loop's, else the newest plan with phases; the
    /// list names that plan when other plans have phases too.
    pub fn tasks(&self, root: &Path, selector: &PhaseSelector) -> Result<TaskList, ManagerError> {
        let project = self.project(root)?;
        let records = project.db.list()?;
        let trees = PlanTrees::of(&records);
        let mut plans_with_phases: Vec<LoopId> = Vec::new();
        for record in records.iter().filter(|record| listed_phase(record)) {
            let plan = trees.root(&record.id);
            if !plans_with_phases.contains(&plan) {
                plans_with_phases.push(plan);
            }
        }
        let selector = match selector {
            PhaseSelector::Named(name) => {
                let phase = resolve_phase(&records, name, listed_phase)?;
                PhaseSelector::Loop(phase.id.to_string())
            }
            PhaseSelector::Loop(id) => match records.iter().find(|r| r.id.as_str() == id) {
                Some(record) if record.loop_type != LoopType::Phase => {
                    PhaseSelector::Plan(trees.root(&record.id))
                }
                _ => selector.clone(),
            },
            // The newest plan, not the plan of the newest phase (a revision renews phases).
            PhaseSelector::CurrentPlan => records
                .iter()
                .find(|record| plans_with_phases.contains(&record.id))
                .map_or(PhaseSelector::All, |plan| {
                    PhaseSelector::Plan(plan.id.clone())
                }),
            other => other.clone(),
        };
        let plan = match &selector {
            PhaseSelector::Plan(plan) if plans_with_phases.len() > 1 => {
                records.iter().find(|record| &record.id == plan).cloned()
            }
            _ => None,
        };
        Ok(TaskList {
            phases: phase_tasks(&records, &selector, &project.root, &project.layout),
            plan,
        })
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
