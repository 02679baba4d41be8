//! Budget logic, in one place: the budget a plan tree is held to (`Budget`, with the prices
//! it is counted in: `BudgetGuard`), what the user last granted past it (`Grant`), whether a
//! tree has reached it or may go on and where it stands, and the budget a shell set for every
//! tree (`TreeBudget`). Pure but for that shared setting: the store keeps only the SQL that
//! sums a tree's tokens and records grants, pauses and holds (`store::db::budget`); the
//! manager and the turn ask this module and act on the answer.
//!
//! Once a shell sets the user's budget and prices (Neovim passes the user's to the host),
//! every tree whose loops this host runs or schedules is held to them from its next check on,
//! whatever its loops started with: raising the budget lets a paused tree go on, lowering it
//! pauses a running one at its next turn. Until a shell sets one (the CLI never does), a loop
//! is held to the budget stored with its settings.

use std::sync::{RwLock, RwLockReadGuard};

use serde::{Deserialize, Serialize};

use crate::llm::Usage;
use crate::pricing::{ModelUsage, PriceTable, all_tokens, total_usage};

/// A plan tree's limit: it pauses once its spend since the last grant reaches either.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Budget {
    /// Every token read or written, cached or not.
    #[schemars(range(min = 1))]
    pub tokens: Option<u64>,
    /// Estimated from the prices; models without a price count nothing.
    #[schemars(extend("exclusiveMinimum" = 0))]
    pub usd: Option<f64>,
}

/// What a tree had spent when the user last let it go on past its budget; the budget
/// counts from there.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Grant {
    pub tokens: u64,
    pub usd: f64,
}

impl Budget {
    pub fn is_set(&self) -> bool {
        self.tokens.is_some() || self.usd.is_some()
    }

    /// Rejects a budget nothing could be spent under.
    pub fn check(&self) -> Result<(), String> {
        if self.tokens == Some(0) {
            return Err(
                "budget.tokens must be at least 1 (leave it out for no token limit)".to_owned(),
            );
        }
        if let Some(usd) = self.usd
            && !(usd.is_finite() && usd > 0.0)
        {
            return Err(format!(
                "budget.usd is {usd}; give a number of dollars above 0 (leave it out for no \
                 dollar limit)"
            ));
        }
        Ok(())
    }

    /// How the tree's spend (`usage`, priced by `prices`) compares with the budget counted
    /// from `grant`: `Some(what was reached)` once a limit is reached. Dollars count only
    /// priced models.
    pub fn reached(
        &self,
        usage: &[ModelUsage],
        prices: &PriceTable,
        grant: Grant,
    ) -> Option<String> {
        let total = total_usage(usage);
        let tokens = all_tokens(&total).saturating_sub(grant.tokens);
        if let Some(limit) = self.tokens
            && tokens >= limit
        {
            return Some(format!("{}{tokens} of {limit} tokens", about(&total)));
        }
        if let Some(limit) = self.usd {
            let usd = prices.cost(usage).usd - grant.usd;
            if usd >= limit {
                return Some(format!("${usd:.4} of ${limit}"));
            }
        }
        None
    }

    /// Where the tree stands against the budget, as `reached` words it, for every limit set
    /// ("1100 of 5000 tokens, $0.0040 of $1"); "no budget" without one.
    pub fn standing(&self, usage: &[ModelUsage], prices: &PriceTable, grant: Grant) -> String {
        let mut parts = Vec::new();
        if let Some(limit) = self.tokens {
            let total = total_usage(usage);
            let tokens = all_tokens(&total).saturating_sub(grant.tokens);
            parts.push(format!("{}{tokens} of {limit} tokens", about(&total)));
        }
        if let Some(limit) = self.usd {
            let usd = (prices.cost(usage).usd - grant.usd).max(0.0);
            parts.push(format!("${usd:.4} of ${limit}"));
        }
        if parts.is_empty() {
            "no budget".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// `~` before a count of `usage` that Loopr estimated (in part).
fn about(usage: &Usage) -> &'static str {
    if usage.estimated { "~" } else { "" }
}

/// A loop's budget with the prices it is counted in, as its settings have them.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetGuard {
    pub budget: Budget,
    pub prices: PriceTable,
}

impl Grant {
    /// What a tree has spent now (`usage`, priced by `prices`): the grant that lets it go on
    /// with another budget's worth.
    pub fn of_spend(usage: &[ModelUsage], prices: &PriceTable) -> Grant {
        Grant {
            tokens: all_tokens(&total_usage(usage)),
            usd: prices.cost(usage).usd,
        }
    }
}

/// Whether a tree waiting for its budget may go on, held to `guard` (none: no budget), its
/// spend `usage` counted from `grant`: where it stands if it may, `None` while the budget is
/// still reached.
pub fn may_go_on(
    guard: Option<&BudgetGuard>,
    usage: &[ModelUsage],
    grant: Grant,
) -> Option<String> {
    match guard {
        Some(guard) if guard.reached(usage, grant).is_some() => None,
        Some(guard) => Some(guard.standing(usage, grant)),
        None => Some("no budget".to_owned()),
    }
}

impl BudgetGuard {
    /// The guard of settings with `budget` and `prices`; none when no budget is set.
    pub fn of(budget: Budget, prices: PriceTable) -> Option<BudgetGuard> {
        budget.is_set().then_some(BudgetGuard { budget, prices })
    }

    pub fn reached(&self, usage: &[ModelUsage], grant: Grant) -> Option<String> {
        self.budget.reached(usage, &self.prices, grant)
    }

    pub fn standing(&self, usage: &[ModelUsage], grant: Grant) -> String {
        self.budget.standing(usage, &self.prices, grant)
    }
}

/// The budget plan trees are held to, as a shell set it (see the module doc).
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

    /// The guard a loop whose settings hold `budget` and `prices` is held to now.
    pub fn guard_for(&self, budget: Budget, prices: PriceTable) -> Option<BudgetGuard> {
        self.guard_or(BudgetGuard::of(budget, prices))
    }

    /// The prices a tree is counted in now: the user's once a shell set them, else
    /// `stored_prices` (its loops' settings').
    pub fn prices_or(&self, stored_prices: impl FnOnce() -> PriceTable) -> PriceTable {
        match &*self.read() {
            Some((_, prices)) => prices.clone(),
            None => stored_prices(),
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
    use crate::pricing::tests::{of, usage};

    #[test]
    fn a_budget_is_reached_at_its_limit_counted_from_the_last_grant() {
        let table = PriceTable::default();
        let spent = [of("claude-haiku-4-5", usage(600, 100, 200, 100))];
        let budget = Budget {
            tokens: Some(1_000),
            usd: None,
        };
        assert_eq!(
            budget.reached(&spent, &table, Grant::default()).as_deref(),
            Some("1000 of 1000 tokens"),
            "every kind of token counts; the limit itself is reached"
        );
        let granted = Grant {
            tokens: 1_000,
            usd: 0.0,
        };
        assert_eq!(budget.reached(&spent, &table, granted), None);
        let more = [of("claude-haiku-4-5", usage(1_600, 100, 200, 100))];
        assert!(budget.reached(&more, &table, granted).is_some());

        let dollars = Budget {
            tokens: None,
            usd: Some(0.001),
        };
        // 600 * 1 + 100 * 5 + 200 * 1.25 + 100 * 0.1 = 1360 micro-dollars.
        assert!(dollars.reached(&spent, &table, Grant::default()).is_some());
        let unknown = [of("mystery-model", usage(1_000_000, 0, 0, 0))];
        assert_eq!(
            dollars.reached(&unknown, &table, Grant::default()),
            None,
            "an unpriced model's tokens cost no made-up dollars"
        );
    }

    #[test]
    fn a_budget_counts_estimated_tokens_and_says_they_are_estimates() {
        let table = PriceTable::default();
        let estimated = Usage {
            estimated: true,
            ..usage(900, 200, 0, 0)
        };
        let spent = [
            of("gemma3", estimated),
            of("claude-haiku-4-5", usage(5, 5, 0, 0)),
        ];
        let budget = Budget {
            tokens: Some(1_000),
            usd: None,
        };
        assert_eq!(
            budget.reached(&spent, &table, Grant::default()).as_deref(),
            Some("~1110 of 1000 tokens")
        );
        assert_eq!(
            budget.standing(&spent, &table, Grant::default()),
            "~1110 of 1000 tokens"
        );
    }

    #[test]
    fn the_standing_names_every_limit_counted_from_the_grant() {
        let table = PriceTable::default();
        let spent = [of("claude-haiku-4-5", usage(1_000_000, 0, 0, 0))];
        let both = Budget {
            tokens: Some(5_000_000),
            usd: Some(2.0),
        };
        let granted = Grant {
            tokens: 400_000,
            usd: 0.4,
        };
        assert_eq!(
            both.standing(&spent, &table, granted),
            "600000 of 5000000 tokens, $0.6000 of $2"
        );
        assert_eq!(
            Budget::default().standing(&spent, &table, granted),
            "no budget"
        );
    }

    #[test]
    fn budgets_nothing_could_be_spent_under_are_refused() {
        assert!(Budget::default().check().is_ok());
        let zero = Budget {
            tokens: Some(0),
            usd: None,
        };
        assert!(zero.check().expect_err("zero").contains("budget.tokens"));
        let negative = Budget {
            tokens: None,
            usd: Some(-2.0),
        };
        assert!(
            negative
                .check()
                .expect_err("negative")
                .contains("budget.usd")
        );
    }

    #[test]
    fn the_users_budget_once_set_wins_over_what_a_loop_started_with() {
        let stored = crate::agent::LoopSettings {
            budget: Budget {
                tokens: Some(1_000),
                usd: None,
            },
            ..crate::agent::LoopSettings::default()
        };
        let tree_budget = TreeBudget::default();
        assert_eq!(
            tree_budget
                .guard_for(stored.budget, stored.price_table())
                .map(|guard| guard.budget),
            Some(stored.budget),
            "until a shell sets one, the stored budget holds"
        );
        tree_budget.set(Budget::default(), PriceTable::default());
        assert_eq!(
            tree_budget.guard_for(stored.budget, stored.price_table()),
            None,
            "no budget: no limit"
        );
        let raised = Budget {
            tokens: Some(5_000),
            usd: None,
        };
        tree_budget.set(raised, PriceTable::default());
        assert_eq!(
            tree_budget
                .guard_for(stored.budget, stored.price_table())
                .map(|guard| guard.budget),
            Some(raised)
        );
    }
}
