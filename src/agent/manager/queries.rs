//! Read-only answers for the shells: status, tasks, phase names, one loop by id.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{LoopManager, ManagerError, Project};
use crate::agent::coverage::{
    LoopCoverage, RequirementsLeft, coverage_by_loop, current_spec, requirements_left,
    resolve_spec, spec_selectors,
};
use crate::agent::jobs;
use crate::agent::loop_names::{LoopNameError, LoopNames, Wanted};
use crate::agent::phases::{phase_selectors, resolve_phase};
use crate::agent::plan_tree::PlanTrees;
use crate::agent::tasks::{PhaseSelector, TaskList, listed_phase, phase_tasks};
use crate::llm::Usage;
use crate::pricing::{Cost, ModelUsage, PriceTable, total_usage};
use crate::store::{LoopId, LoopRecord, LoopType, Purpose, waits_for_commit};

/// One loop of a shell's status list.
pub struct StatusRow {
    pub record: LoopRecord,
    /// The markdown of its current artifact, if it has one.
    pub artifact: Option<PathBuf>,
    pub spend: Spend,
    /// What its plan tree spent, for a loop that is the root of one.
    pub tree: Option<Spend>,
    /// A spec's requirements verified, a phase's latest verification.
    pub coverage: Option<LoopCoverage>,
    /// Where the run of a plan or spec stands: `run: phase 3 of 7 (parse): its code loop
    /// runs`.
    pub run: Option<String>,
    /// For a pending code loop, the code loop whose changes are being committed, which it
    /// waits its turn for (`store::waits_for_commit`).
    pub waits_for_commit: Option<LoopRecord>,
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

    /// What each current spec and phase shows of verification (`coverage_by_loop`).
    pub fn coverage(&self, root: &Path) -> Result<HashMap<LoopId, LoopCoverage>, ManagerError> {
        let project = self.project(root)?;
        Ok(coverage_by_loop(&project.layout, &self.seen(&project)?))
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
        let project = self.project(root)?;
        let mut usage_by_loop = project.db.usage_by_loop()?;
        let records: Vec<LoopRecord> = rows.iter().map(|(record, _)| record.clone()).collect();
        let mut coverage = coverage_by_loop(&project.layout, &records);
        let mut runs = super::plan_runs::run_words(&project.db.plan_runs()?);
        let trees = PlanTrees::of(rows.iter().map(|(record, _)| record));
        let committing = self.committing(&project);
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
                    waits_for_commit: waits_for_commit(&record, committing.as_ref()).cloned(),
                    run: runs.remove(&record.id),
                    spend: Spend::of(&usage, prices),
                    coverage: coverage.remove(&record.id),
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

    /// The requirements not yet verified of the spec `selector` names (`spec`,
    /// `plan/spec`, its loop id), else of the spec of loop `loop_id` (a spec, its phase or
    /// code loop), else of the newest current spec.
    pub fn requirements(
        &self,
        root: &Path,
        selector: Option<&str>,
        loop_id: Option<&str>,
    ) -> Result<RequirementsLeft, ManagerError> {
        let project = self.project(root)?;
        let records = self.seen(&project)?;
        let spec = match (
            selector.map(str::trim).filter(|name| !name.is_empty()),
            loop_id,
        ) {
            (Some(name), _) => resolve_spec(&records, name)?,
            // A loop of no spec (a plan's artifact) means no spec in particular.
            (None, loop_id) => loop_id
                .and_then(|id| records.iter().find(|record| record.id.as_str() == id))
                .and_then(|record| spec_of(&records, record))
                .or_else(|| records.iter().find(|record| current_spec(record)))
                .ok_or(ManagerError::NothingTo("spec"))?,
        };
        requirements_left(&project.layout, &records, spec).ok_or_else(|| {
            ManagerError::StoredArtifact {
                id: spec.id.to_string(),
                message: "its spec.json is missing or does not read as a spec".to_owned(),
            }
        })
    }

    /// The names to complete a spec argument with.
    pub fn spec_selectors(&self, root: &Path) -> Result<Vec<String>, ManagerError> {
        Ok(spec_selectors(&self.seen(&self.project(root)?)?))
    }

    /// The names to complete a phase argument with (`spec/phase` where a name is shared).
    pub fn phase_selectors(&self, root: &Path) -> Result<Vec<String>, ManagerError> {
        Ok(phase_selectors(&self.project(root)?.db.list()?))
    }

    /// The names to complete a loop argument with: the shortest name, as `record` reads
    /// it, of each loop (as `status` gives them) that `purpose` takes (every loop without
    /// one), sorted.
    pub fn loop_selectors(
        &self,
        root: &Path,
        purpose: Option<Purpose>,
    ) -> Result<Vec<String>, ManagerError> {
        let records = self.status(root)?;
        let taken = |record: &LoopRecord| purpose.is_none_or(|purpose| purpose.admits(record));
        Ok(LoopNames::new(&records).selectors(&Wanted::ANY_LOOP, &taken))
    }

    /// The loop `selector` names: its id, else a name as `loop_names` reads it.
    pub(super) fn record(
        &self,
        project: &Project,
        selector: &str,
    ) -> Result<LoopRecord, ManagerError> {
        let unknown = || ManagerError::UnknownLoop(selector.trim().to_owned());
        if let Some(loop_id) = LoopId::parse(selector.trim())
            && let Some(record) = project.db.get(&loop_id)?
        {
            return Ok(record);
        }
        let records = self.seen(project)?;
        match LoopNames::new(&records).resolve(selector, &Wanted::ANY_LOOP) {
            Ok(record) => Ok(record.clone()),
            Err(LoopNameError::NotFound(_)) => Err(unknown()),
            Err(ambiguous) => Err(ManagerError::Name(ambiguous)),
        }
    }
}

/// The spec loop `record` is or belongs to (its phase's, its code loop's), among `records`.
fn spec_of<'a>(records: &'a [LoopRecord], record: &'a LoopRecord) -> Option<&'a LoopRecord> {
    let mut current = record;
    for _ in 0..3 {
        if current.loop_type == LoopType::Spec {
            return Some(current);
        }
        let parent = current.parent.as_ref()?;
        current = records.iter().find(|candidate| &candidate.id == parent)?;
    }
    None
}
