//! What a coding agent's turn spent, as the budget counts it: the tokens it reported (its
//! context's size as it goes, its answer's `usage` once it ends) and the cost it reported
//! (`usage_update`'s `cost`, the session's so far). A cost in US dollars counts as the agent's
//! cost in place of any price (`ModelUsage::reported_usd_micros`); a cost in another
//! currency cannot be counted in dollars: the user is told once, and its tokens still count.

use agent_client_protocol::v1::schema::{Usage as AcpUsage, UsageUpdate};

use super::AgentTurn;
use crate::agent::context::{LoopContext, LoopError};
use crate::budget::BudgetGuard;
use crate::llm::Usage;
use crate::pricing::{ModelUsage, usd_micros};

/// The agent of one loop's run, as its usage names it, and the cost it reported in its
/// session so far.
#[derive(Debug)]
pub(in crate::agent::code_loop) struct AgentMeter {
    /// How the loop's usage names the agent.
    pub model: String,
    /// The session's cost the agent last reported, in US dollars.
    session_usd: f64,
    /// The user was told the agent's cost is in another currency.
    told_currency: bool,
}

/// The session's cost the agent reported before the turn and since.
#[derive(Debug, Default)]
pub(super) struct TurnCost {
    before_usd: f64,
    now_usd: f64,
    /// The currency of a cost it reported in other than US dollars.
    other_currency: Option<String>,
}

impl AgentMeter {
    pub(in crate::agent::code_loop) fn new(model: String) -> AgentMeter {
        AgentMeter {
            model,
            session_usd: 0.0,
            told_currency: false,
        }
    }

    /// A turn's cost, starting from what the session cost so far.
    pub(super) fn turn_cost(&self) -> TurnCost {
        TurnCost {
            before_usd: self.session_usd,
            now_usd: self.session_usd,
            other_currency: None,
        }
    }

    /// Notes what the session cost after `turn`; tells the user, once, of a cost it cannot
    /// count.
    pub(super) fn after(&mut self, context: &LoopContext, turn: &AgentTurn) {
        self.session_usd = turn.cost.now_usd;
        if let Some(currency) = &turn.cost.other_currency
            && !self.told_currency
        {
            self.told_currency = true;
            tracing::warn!(loop_id = %context.record.id, currency, "the coding agent reports its cost in another currency");
            context.progress(format!(
                "the agent reports its cost in {currency}, not US dollars: a dollar budget \
                 cannot count it (its tokens still count, at the price set for {:?}, if any)",
                self.model
            ));
        }
    }
}

impl AgentTurn {
    /// Takes a `usage_update` in: the most the agent's context held, as the turn's input
    /// tokens, and the session's cost; whether either grew.
    pub(super) fn took_usage(&mut self, update: UsageUpdate) -> bool {
        let mut grew = false;
        if update.used > self.usage.input_tokens {
            self.usage.input_tokens = update.used;
            grew = true;
        }
        if let Some(cost) = update.cost {
            if !cost.currency.trim().eq_ignore_ascii_case("USD") {
                self.cost.other_currency = Some(cost.currency);
            } else if cost.amount.is_finite() && cost.amount > self.cost.now_usd {
                self.cost.now_usd = cost.amount;
                grew = true;
            }
        }
        grew
    }

    /// What the agent reported the turn cost, in millionths of a dollar.
    pub(in crate::agent::code_loop) fn reported_usd_micros(&self) -> u64 {
        usd_micros(self.cost.now_usd - self.cost.before_usd)
    }
}

/// The tokens of a turn as the agent's answer reports them.
pub(super) fn turn_usage(usage: &AcpUsage) -> Usage {
    Usage {
        input_tokens: usage.input_tokens,
        // Reasoning is written by the model: it is billed as output.
        output_tokens: usage
            .output_tokens
            .saturating_add(usage.thought_tokens.unwrap_or(0)),
        cache_write_tokens: usage.cached_write_tokens.unwrap_or(0),
        cache_read_tokens: usage.cached_read_tokens.unwrap_or(0),
        estimated: false,
    }
}

/// Whether the tree's spend, with what `turn` spent so far (as `meter` names the agent),
/// reaches `guard`'s budget.
pub(super) async fn budget_reached(
    context: &LoopContext,
    guard: &BudgetGuard,
    meter: &AgentMeter,
    turn: &AgentTurn,
) -> Result<Option<LoopError>, LoopError> {
    let id = context.record.id.clone();
    let spend = context.store(move |db, _| Ok(db.tree_spend(&id)?)).await?;
    let mut spent = spend.usage;
    spent.push(ModelUsage {
        model: meter.model.clone(),
        usage: turn.usage,
        reported_usd_micros: turn.reported_usd_micros(),
    });
    Ok(guard
        .reached(&spent, spend.grant)
        .map(|reached| LoopError::BudgetReached {
            root: spend.root,
            reached,
        }))
}

#[cfg(test)]
mod tests {
    use agent_client_protocol::v1::schema::Cost;

    use super::*;

    fn turn_after(meter: &AgentMeter, updates: Vec<UsageUpdate>) -> AgentTurn {
        let mut turn = AgentTurn {
            cost: meter.turn_cost(),
            ..AgentTurn::default()
        };
        for update in updates {
            turn.took_usage(update);
        }
        turn
    }

    #[test]
    fn a_turn_counts_the_dollars_its_session_cost_grew_by() {
        let mut meter = AgentMeter::new("agent test".to_owned());
        let first = turn_after(
            &meter,
            vec![
                UsageUpdate::new(1_000, 200_000).cost(Cost::new(0.25, "USD")),
                UsageUpdate::new(1_200, 200_000).cost(Cost::new(0.5, "usd")),
            ],
        );
        assert_eq!(first.reported_usd_micros(), 500_000);
        assert_eq!(first.usage.input_tokens, 1_200);
        meter.session_usd = first.cost.now_usd;
        let second = turn_after(
            &meter,
            vec![UsageUpdate::new(900, 200_000).cost(Cost::new(0.8, "USD"))],
        );
        assert_eq!(second.reported_usd_micros(), 300_000, "only what it added");
    }

    #[test]
    fn a_cost_in_another_currency_is_not_counted_in_dollars() {
        let meter = AgentMeter::new("agent test".to_owned());
        let turn = turn_after(
            &meter,
            vec![UsageUpdate::new(1_000, 200_000).cost(Cost::new(3.0, "EUR"))],
        );
        assert_eq!(turn.reported_usd_micros(), 0);
        assert_eq!(turn.cost.other_currency.as_deref(), Some("EUR"));
        assert_eq!(turn.usage.input_tokens, 1_000, "its tokens count");
    }
}
