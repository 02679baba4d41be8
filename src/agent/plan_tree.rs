//! Which plan tree a loop belongs to: the root its parents lead up to. What a tree spent and
//! which plan's tasks a list shows both ask it.

use std::collections::HashMap;

use crate::store::{LoopId, LoopRecord};

/// The parent of every loop a list holds, to walk from a loop up to its plan.
pub struct PlanTrees {
    parents: HashMap<LoopId, Option<LoopId>>,
}

impl PlanTrees {
    pub fn of<'a>(records: impl IntoIterator<Item = &'a LoopRecord>) -> PlanTrees {
        PlanTrees {
            parents: records
                .into_iter()
                .map(|record| (record.id.clone(), record.parent.clone()))
                .collect(),
        }
    }

    /// The root of `id`'s plan tree among the loops known (a loop whose parent is missing
    /// counts as a root). Walks at most as many steps as there are loops, so a cycle a
    /// damaged database might hold cannot hang it.
    pub fn root(&self, id: &LoopId) -> LoopId {
        let mut current = id;
        for _ in 0..self.parents.len() {
            match self.parents.get(current) {
                Some(Some(parent)) if self.parents.contains_key(parent) => current = parent,
                _ => break,
            }
        }
        current.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LoopType;

    fn record(loop_type: LoopType, parent: Option<&LoopRecord>) -> LoopRecord {
        LoopRecord {
            parent: parent.map(|parent| parent.id.clone()),
            ..LoopRecord::new_pending(loop_type, "task", "{}".to_owned())
        }
    }

    #[test]
    fn a_loop_leads_up_to_its_plan_and_a_cycle_ends() {
        let plan = record(LoopType::Plan, None);
        let spec = record(LoopType::Spec, Some(&plan));
        let phase = record(LoopType::Phase, Some(&spec));
        let orphan = LoopRecord {
            parent: LoopId::parse("gone-1"),
            ..record(LoopType::Spec, None)
        };
        let trees = PlanTrees::of([&plan, &spec, &phase, &orphan]);
        assert_eq!(trees.root(&phase.id), plan.id);
        assert_eq!(trees.root(&plan.id), plan.id);
        assert_eq!(trees.root(&orphan.id), orphan.id, "its parent is missing");

        let mut first = record(LoopType::Spec, None);
        let second = record(LoopType::Spec, Some(&first));
        first.parent = Some(second.id.clone());
        let cycle = PlanTrees::of([&first, &second]);
        let root = cycle.root(&first.id);
        assert!(root == first.id || root == second.id);
    }
}
