//! Runs of a plan or a spec: every current phase of the tree, in order, one code loop at a
//! time. The run's rules are `agent::plan_run` (pure); its state is the store's `plan_runs`;
//! here a run starts, moves on when its loops do (`advance_plan_runs`, called after a loop
//! ends, a phase is done, an approval, a retry and when a project's loops resume), is told
//! to the user when it stops or is done, and ends with a cancel of its tree.

use std::collections::HashMap;
use std::path::Path;

use super::{LoopManager, ManagerError, Project, lock};
use crate::agent::events::{LoopEvent, NoticeLevel};
use crate::agent::loop_names::{LoopNameError, LoopNames, Wanted, shortest_name};
use crate::agent::plan_run::{RunStep, evaluate};
use crate::agent::settings::LoopSettings;
use crate::next_step::NextStep;
use crate::store::{LoopId, LoopRecord, PlanRun, PlanRunState, runs_as_a_tree};

/// What `run` started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// A code loop for the phase named.
    Code(LoopId),
    /// The run of the plan or spec named (its loop id).
    Tree(LoopId),
}

impl Started {
    /// The loop started, or the plan or spec whose run started.
    pub fn id(&self) -> &LoopId {
        match self {
            Started::Code(id) | Started::Tree(id) => id,
        }
    }
}

fn plan_or_spec(record: &LoopRecord) -> bool {
    matches!(
        record.loop_type,
        crate::store::LoopType::Plan | crate::store::LoopType::Spec
    )
}

impl LoopManager {
    /// Runs what `selector` names: a phase that may run gets a code loop (`start_code`); a
    /// plan or spec gets a run of every current phase of its tree, in order.
    pub fn run(
        &self,
        root: &Path,
        selector: &str,
        settings: LoopSettings,
    ) -> Result<Started, ManagerError> {
        let unknown_phase = match self.start_code(root, selector, settings.clone()) {
            Err(unknown @ ManagerError::UnknownPhase(_)) => unknown,
            started => return started.map(Started::Code),
        };
        let project = self.project_for_a_new_loop(root, &settings)?;
        let records = self.seen(&project)?;
        let wanted = Wanted {
            noun: "plan or spec",
            kind: &plan_or_spec,
            eligible: &runs_as_a_tree,
        };
        let target = match LoopNames::new(&records).resolve(selector, &wanted) {
            Ok(target) => target,
            Err(LoopNameError::NotFound(_)) => return Err(unknown_phase),
            Err(ambiguous) => return Err(ManagerError::Name(ambiguous)),
        };
        project.db.start_plan_run(&target.id, &settings.to_json())?;
        tracing::info!(loop_id = %target.id, "plan run started");
        self.advance_plan_runs(&project);
        Ok(Started::Tree(target.id.clone()))
    }

    /// Moves every running run of the project on: starts the next phase's code loop, records
    /// what it waits for, or tells the user it stopped or is done. A stopped run stays so
    /// until a retry of a loop of its tree (`retry_plan_runs`): a phase the user runs by hand
    /// meanwhile is the user's, and does not set the run going again.
    pub(super) fn advance_plan_runs(&self, project: &Project) {
        let _advancing = lock(&self.shared.advancing_runs);
        let runs = match project.db.plan_runs() {
            Ok(runs) => runs,
            Err(err) => {
                tracing::error!(error = %err, "reading the project's plan runs");
                return;
            }
        };
        for run in runs
            .into_iter()
            .filter(|run| run.state == PlanRunState::Running)
        {
            if let Err(err) = self.advance_run(project, &run) {
                tracing::error!(loop_id = %run.target, error = %err, "moving a plan run on");
            }
        }
    }

    fn advance_run(&self, project: &Project, run: &PlanRun) -> Result<(), ManagerError> {
        let records = self.seen(project)?;
        let Some(target) = records.iter().find(|record| record.id == run.target) else {
            return Ok(());
        };
        let view = evaluate(target, &records, run.code_loop.as_ref());
        let words = view.words();
        match &view.step {
            RunStep::Start(phase) => {
                let settings = LoopSettings::from_stored(&run.settings);
                match self.start_code_for(project, phase, &settings) {
                    Ok(code) => {
                        tracing::info!(loop_id = %run.target, code = %code, "plan run starts a phase");
                        project.db.update_plan_run(
                            &run.target,
                            PlanRunState::Running,
                            Some(&code),
                            &words,
                        )?;
                    }
                    Err(err) => {
                        let words = format!(
                            "stopped at {}: its code loop cannot start: {err}",
                            view.place()
                        );
                        self.stop_run(project, run, target, run.code_loop.as_ref(), &words, None)?;
                    }
                }
            }
            RunStep::Wait { on, .. } => {
                let code = (on.loop_type == crate::store::LoopType::Code)
                    .then_some(&on.id)
                    .or(run.code_loop.as_ref());
                project
                    .db
                    .update_plan_run(&run.target, PlanRunState::Running, code, &words)?;
            }
            RunStep::Stopped { at, .. } => {
                let retry = Some(NextStep::RetryOrCancelRun {
                    retry: shortest_name(&records, at),
                    run: shortest_name(&records, target),
                    code: at.loop_type == crate::store::LoopType::Code,
                });
                self.stop_run(project, run, target, run.code_loop.as_ref(), &words, retry)?;
            }
            RunStep::Done => {
                project.db.update_plan_run(
                    &run.target,
                    PlanRunState::Done,
                    run.code_loop.as_ref(),
                    &words,
                )?;
                tracing::info!(loop_id = %run.target, "plan run done");
                self.shared.events.emit(LoopEvent::Notice {
                    loop_id: run.target.to_string(),
                    level: NoticeLevel::Info,
                    message: format!("the run of {} is done: {words}", target.label()),
                });
            }
        }
        Ok(())
    }

    /// Records that `run` stopped, and tells the user once (not again while it stays
    /// stopped for the same reason).
    fn stop_run(
        &self,
        project: &Project,
        run: &PlanRun,
        target: &LoopRecord,
        code: Option<&LoopId>,
        words: &str,
        next: Option<NextStep>,
    ) -> Result<(), ManagerError> {
        if run.state == PlanRunState::Stopped && run.note == words {
            return Ok(());
        }
        project
            .db
            .update_plan_run(&run.target, PlanRunState::Stopped, code, words)?;
        tracing::info!(loop_id = %run.target, "plan run stopped");
        let message = format!("the run of {} {words}", target.label());
        self.shared.events.emit(LoopEvent::Notice {
            loop_id: run.target.to_string(),
            level: NoticeLevel::Warn,
            message: match next {
                Some(next) => next.attach(&message),
                None => message,
            },
        });
        Ok(())
    }

    /// Sets the stopped runs going again whose tree holds `retried` (a loop a retry runs
    /// again), then moves every running run on.
    pub(super) fn retry_plan_runs(&self, project: &Project, retried: &LoopRecord) {
        let reading = project
            .db
            .plan_runs()
            .and_then(|runs| Ok((runs, project.db.list()?)));
        match reading {
            Ok((runs, records)) => {
                let tree = Tree::new(&records);
                for run in runs.iter().filter(|run| {
                    run.state == PlanRunState::Stopped && tree.within(&retried.id, &run.target)
                }) {
                    if let Err(err) = project.db.update_plan_run(
                        &run.target,
                        PlanRunState::Running,
                        run.code_loop.as_ref(),
                        &run.note,
                    ) {
                        tracing::error!(loop_id = %run.target, error = %err, "going on with a plan run");
                    }
                }
            }
            Err(err) => tracing::error!(error = %err, "reading the project's plan runs"),
        }
        self.advance_plan_runs(project);
    }

    /// Ends the live runs a cancel of `cancelled` reaches: the run of it, of a loop above
    /// it (its code loop, a phase or spec of the run's tree) or of a loop below it. Returns
    /// how many it ended.
    pub(super) fn cancel_plan_runs(&self, project: &Project, cancelled: &LoopRecord) -> usize {
        let _advancing = lock(&self.shared.advancing_runs);
        let (runs, records) = match (project.db.plan_runs(), project.db.list()) {
            (Ok(runs), Ok(records)) => (runs, records),
            (Err(err), _) | (_, Err(err)) => {
                tracing::error!(error = %err, "reading the project's plan runs");
                return 0;
            }
        };
        let tree = Tree::new(&records);
        let mut ended = 0;
        for run in runs.into_iter().filter(|run| run.state.is_live()) {
            if !tree.within(&cancelled.id, &run.target) && !tree.within(&run.target, &cancelled.id)
            {
                continue;
            }
            let words = format!("cancelled ({})", run.note);
            if let Err(err) = project.db.update_plan_run(
                &run.target,
                PlanRunState::Cancelled,
                run.code_loop.as_ref(),
                &words,
            ) {
                tracing::error!(loop_id = %run.target, error = %err, "recording a plan run's cancel");
                continue;
            }
            ended += 1;
            let label = tree
                .by_id
                .get(&run.target)
                .map_or_else(|| run.target.to_string(), |target| target.label());
            self.shared.events.emit(LoopEvent::Notice {
                loop_id: run.target.to_string(),
                level: NoticeLevel::Info,
                message: format!("the run of {label} was {words}"),
            });
        }
        ended
    }

    /// The project's runs as a status list shows them, by the plan or spec they run:
    /// `run: phase 3 of 7 (parse): its code loop runs`.
    pub fn plan_runs(&self, root: &Path) -> Result<HashMap<LoopId, String>, ManagerError> {
        let project = self.project(root)?;
        Ok(run_words(&project.db.plan_runs()?))
    }

    /// The run of `target`, if it has one.
    pub fn plan_run(&self, root: &Path, target: &LoopId) -> Result<Option<PlanRun>, ManagerError> {
        Ok(self.project(root)?.db.plan_run(target)?)
    }
}

/// The project's loops by id, to walk a loop's parents.
struct Tree<'a> {
    by_id: HashMap<&'a LoopId, &'a LoopRecord>,
}

impl<'a> Tree<'a> {
    fn new(records: &'a [LoopRecord]) -> Tree<'a> {
        Tree {
            by_id: records.iter().map(|record| (&record.id, record)).collect(),
        }
    }

    /// Whether `inner` is `outer` or below it.
    fn within(&self, inner: &LoopId, outer: &LoopId) -> bool {
        let mut current = Some(inner);
        // Bounded: a parent cycle in a damaged store ends the walk.
        for _ in 0..=self.by_id.len() {
            match current {
                Some(id) if id == outer => return true,
                Some(id) => current = self.by_id.get(id).and_then(|record| record.parent.as_ref()),
                None => return false,
            }
        }
        false
    }
}

/// Each run's words, by its plan or spec.
pub(super) fn run_words(runs: &[PlanRun]) -> HashMap<LoopId, String> {
    runs.iter()
        .map(|run| (run.target.clone(), run.shown()))
        .collect()
}
