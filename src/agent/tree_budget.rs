//! The budget plan trees are held to. Once a shell sets the user's budget and prices (Neovim
//! passes the user's to the host), every tree whose loops this host runs or schedules is
//! held to them from its next check on, whatever its loops started with: raising the budget
//! lets a paused tree go on, lowering it pauses a running one at its next turn. Until a shell
//! sets one (the CLI never does), a loop is held to the budget stored with its settings.

use std::sync::{RwLock, RwLockReadGuard};

use super::settings::LoopSettings;
use crate::pricing::{Budget, BudgetGuard, PriceTable};

#[derive(Debug, Default)]
pub struct TreeBudget {
    /// The user's budget and prices, once a shell set them.
    set: RwLock<Option<(Budget, PriceTable)>>,
}

impl TreeBudget {
    /// Holds every tree to `budget` (no limit if unset), its dollars priced by `prices`.
    pub fn set(&self, budget: Budget, prices: PriceTable) {
        let mut set = self
            .set
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *set = Some((budget, prices));
    }

    /// The guard a loop started with `stored` (its settings' own) is held to now; none when
    /// there is no budget.
    pub fn guard_or(&self, stored: Option<BudgetGuard>) -> Option<BudgetGuard> {
        match &*self.read() {
            Some((budget, prices)) => BudgetGuard::of(*budget, prices.clone()),
            None => stored,
        }
    }

    /// The guard a loop with `settings` is held to now.
    pub fn guard_for(&self, settings: &LoopSettings) -> Option<BudgetGuard> {
        self.guard_or(BudgetGuard::of(settings.budget, settings.price_table()))
    }

    /// The prices a tree of loops with `settings` is counted in now.
    pub fn prices_for(&self, settings: &LoopSettings) -> PriceTable {
        match &*self.read() {
            Some((_, prices)) => prices.clone(),
            None => settings.price_table(),
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Option<(Budget, PriceTable)>> {
        // A plain value replaced whole: a panic elsewhere cannot leave it half-written.
        self.set
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_users_budget_once_set_wins_over_what_a_loop_started_with() {
        let stored = LoopSettings {
            budget: Budget {
                tokens: Some(1_000),
                usd: None,
            },
            ..LoopSettings::default()
        };
        let tree_budget = TreeBudget::default();
        assert_eq!(
            tree_budget.guard_for(&stored).map(|guard| guard.budget),
            Some(stored.budget),
            "until a shell sets one, the stored budget holds"
        );
        tree_budget.set(Budget::default(), PriceTable::default());
        assert_eq!(tree_budget.guard_for(&stored), None, "no budget: no limit");
        let raised = Budget {
            tokens: Some(5_000),
            usd: None,
        };
        tree_budget.set(raised, PriceTable::default());
        assert_eq!(
            tree_budget.guard_for(&stored).map(|guard| guard.budget),
            Some(raised)
        );
    }
}
