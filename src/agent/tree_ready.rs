//! What a plan tree holds for the user once its work stops: no loop of it runs or is about
//! to, so what its loops last reported is over. A typed fact (what is ready, how many, of
//! which level) with the `NextStep` to go on with; each shell words both.

use std::fmt;

use crate::next_step::NextStep;
use crate::store::{
    LoopId, LoopRecord, LoopStatus, LoopType, held_at_budget, runnable_phase, siblings, undone,
    waits_for_budget,
};

/// What a stopped tree has ready, the most pressing first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeReady {
    /// `count` loops failed (their changes not undone).
    Failed { count: usize },
    /// The tree reached its budget: loops of it are paused or held.
    AtBudget { root: LoopId },
    /// `count` loops wait for the user's review, all of `level` (`None`: of several).
    Review {
        level: Option<LoopType>,
        count: usize,
    },
    /// `count` approved phases no code loop has implemented yet.
    Phases { count: usize },
    /// Every loop of the tree completed (every phase implemented).
    Complete,
    /// The tree was cancelled.
    Cancelled,
}

impl TreeReady {
    /// What `tree` (a root and every loop below it) has ready, or `None` while a loop of it
    /// runs or can start (pending, its dependencies complete, not held at the budget).
    pub fn of(tree: &[&LoopRecord]) -> Option<TreeReady> {
        if tree.iter().any(|record| under_way(record, tree)) {
            return None;
        }
        let root = tree.iter().find(|record| record.parent.is_none())?;
        let count =
            |keep: &dyn Fn(&LoopRecord) -> bool| tree.iter().filter(|record| keep(record)).count();
        let failed = count(&|record| {
            record.status == LoopStatus::Failed && !undone(record.error.as_deref())
        });
        if failed > 0 {
            return Some(TreeReady::Failed { count: failed });
        }
        if tree.iter().any(|record| waits_for_budget(record)) {
            return Some(TreeReady::AtBudget {
                root: root.id.clone(),
            });
        }
        let awaiting: Vec<LoopType> = tree
            .iter()
            .filter(|record| record.status == LoopStatus::AwaitingApproval)
            .map(|record| record.loop_type)
            .collect();
        if let Some(first) = awaiting.first() {
            let level = awaiting
                .iter()
                .all(|level| level == first)
                .then_some(*first);
            return Some(TreeReady::Review {
                level,
                count: awaiting.len(),
            });
        }
        let phases = count(&|record| runnable_phase(record) && !implemented(record, tree));
        if phases > 0 {
            return Some(TreeReady::Phases { count: phases });
        }
        if root.status == LoopStatus::Cancelled {
            return Some(TreeReady::Cancelled);
        }
        Some(TreeReady::Complete)
    }

    /// What the user can do next, if anything.
    pub fn next_step(&self) -> Option<NextStep> {
        match self {
            TreeReady::Failed { .. } => Some(NextStep::Retry),
            TreeReady::AtBudget { root } => Some(NextStep::Approve {
                id: root.to_string(),
            }),
            TreeReady::Review { .. } => Some(NextStep::Review),
            TreeReady::Phases { .. } => Some(NextStep::RunPhases),
            TreeReady::Complete | TreeReady::Cancelled => None,
        }
    }
}

/// `3 phases ready`, `plan ready for review`: the fact, in no shell's terms.
impl fmt::Display for TreeReady {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TreeReady::Failed { count } => write!(f, "{} failed", counted(*count, "loop")),
            TreeReady::AtBudget { .. } => f.write_str("the plan tree reached its budget"),
            TreeReady::Review {
                level: Some(level),
                count: 1,
            } => write!(f, "{} ready for review", level.as_str()),
            TreeReady::Review { level, count } => {
                let level = level.map_or("loop", LoopType::as_str);
                write!(f, "{} ready for review", counted(*count, level))
            }
            TreeReady::Phases { count } => write!(f, "{} ready", counted(*count, "phase")),
            TreeReady::Complete => f.write_str("every loop of the plan tree completed"),
            TreeReady::Cancelled => f.write_str("the plan tree was cancelled"),
        }
    }
}

/// `1 phase`, `6 phases`.
fn counted(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

/// Whether `record` runs, or is pending with nothing it waits for: it will run.
fn under_way(record: &LoopRecord, tree: &[&LoopRecord]) -> bool {
    match record.status {
        LoopStatus::Running => true,
        LoopStatus::Pending => !held_at_budget(record) && dependencies_complete(record, tree),
        _ => false,
    }
}

/// Whether the siblings `record` depends on (spawned by the same artifact) are complete.
fn dependencies_complete(record: &LoopRecord, tree: &[&LoopRecord]) -> bool {
    record.depends_on.iter().all(|dependency| {
        tree.iter().any(|sibling| {
            siblings(record, sibling)
                && sibling.name.as_deref() == Some(dependency.as_str())
                && sibling.status == LoopStatus::Complete
        })
    })
}

/// Whether a code loop of phase `phase` completed.
fn implemented(phase: &LoopRecord, tree: &[&LoopRecord]) -> bool {
    tree.iter().any(|record| {
        record.loop_type == LoopType::Code
            && record.parent.as_ref() == Some(&phase.id)
            && record.status == LoopStatus::Complete
    })
}

/// The loops of the tree `id` belongs to, from `records` (a project's): its root and every
/// loop below it.
pub fn tree_of<'a>(records: &'a [LoopRecord], id: &LoopId) -> Vec<&'a LoopRecord> {
    let parent_of = |id: &LoopId| {
        records
            .iter()
            .find(|record| &record.id == id)
            .and_then(|record| record.parent.clone())
    };
    let mut root = id.clone();
    // Bounded by the number of loops: a broken store cannot make it climb forever.
    for _ in 0..records.len() {
        match parent_of(&root) {
            Some(parent) => root = parent,
            None => break,
        }
    }
    let mut members = vec![root];
    let mut tree: Vec<&LoopRecord> = Vec::new();
    // Parents before children is not promised by `records`: grow until nothing joins.
    loop {
        let joined: Vec<&LoopRecord> = records
            .iter()
            .filter(|record| !members.contains(&record.id))
            .filter(|record| {
                record
                    .parent
                    .as_ref()
                    .is_some_and(|parent| members.contains(parent))
            })
            .collect();
        if joined.is_empty() {
            break;
        }
        members.extend(joined.iter().map(|record| record.id.clone()));
    }
    tree.extend(records.iter().filter(|record| members.contains(&record.id)));
    tree
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(loop_type: LoopType, status: LoopStatus, parent: Option<&LoopRecord>) -> LoopRecord {
        LoopRecord {
            parent: parent.map(|parent| parent.id.clone()),
            status,
            iteration: 1,
            ..LoopRecord::new_pending(loop_type, "Add a --version flag", "{}".to_owned())
        }
    }

    #[test]
    fn a_tree_with_a_loop_running_or_about_to_has_nothing_ready() {
        let plan = record(LoopType::Plan, LoopStatus::Complete, None);
        let spec = record(LoopType::Spec, LoopStatus::Complete, Some(&plan));
        let running = record(LoopType::Phase, LoopStatus::Running, Some(&spec));
        let pending = record(LoopType::Phase, LoopStatus::Pending, Some(&spec));
        assert_eq!(TreeReady::of(&[&plan, &spec, &running]), None);
        assert_eq!(TreeReady::of(&[&plan, &spec, &pending]), None);
    }

    #[test]
    fn a_stopped_tree_says_what_is_ready_the_most_pressing_first() {
        let plan = record(LoopType::Plan, LoopStatus::Complete, None);
        let spec = record(LoopType::Spec, LoopStatus::Complete, Some(&plan));
        let phases: Vec<LoopRecord> = (0..3)
            .map(|_| record(LoopType::Phase, LoopStatus::Complete, Some(&spec)))
            .collect();
        let code = record(LoopType::Code, LoopStatus::Complete, Some(&phases[0]));
        let mut tree = vec![&plan, &spec];
        tree.extend(phases.iter());
        let ready = TreeReady::of(&tree).expect("stopped");
        assert_eq!(ready, TreeReady::Phases { count: 3 });
        assert_eq!(ready.to_string(), "3 phases ready");
        assert_eq!(ready.next_step(), Some(NextStep::RunPhases));
        tree.push(&code);
        assert_eq!(TreeReady::of(&tree), Some(TreeReady::Phases { count: 2 }));

        let failed = record(LoopType::Code, LoopStatus::Failed, Some(&phases[1]));
        tree.push(&failed);
        assert_eq!(
            TreeReady::of(&tree).map(|ready| ready.to_string()),
            Some("1 loop failed".to_owned())
        );

        let awaiting = record(LoopType::Plan, LoopStatus::AwaitingApproval, None);
        let ready = TreeReady::of(&[&awaiting]).expect("stopped");
        assert_eq!(ready.to_string(), "plan ready for review");
        assert_eq!(ready.next_step(), Some(NextStep::Review));
    }

    #[test]
    fn the_tree_of_a_loop_is_its_root_and_everything_below() {
        let plan = record(LoopType::Plan, LoopStatus::Complete, None);
        let spec = record(LoopType::Spec, LoopStatus::Complete, Some(&plan));
        let phase = record(LoopType::Phase, LoopStatus::Complete, Some(&spec));
        let other = record(LoopType::Plan, LoopStatus::Complete, None);
        // Children listed before their parents.
        let records = vec![phase.clone(), other, spec.clone(), plan.clone()];
        let ids: Vec<&LoopId> = tree_of(&records, &spec.id)
            .iter()
            .map(|record| &record.id)
            .collect();
        assert_eq!(ids, vec![&phase.id, &spec.id, &plan.id]);
    }
}
