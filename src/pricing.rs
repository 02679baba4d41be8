//! What tokens cost. Pure: the store sums the tokens, the settings carry the user's prices,
//! and this module turns them into dollars. Whether a plan tree may go on is `budget`'s.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::llm::Usage;

/// USD per million tokens of each kind. Cache prices left out cost what input costs: never
/// less than the provider could charge.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Price {
    #[schemars(range(min = 0))]
    pub input: f64,
    #[schemars(range(min = 0))]
    pub output: f64,
    /// Defaults to input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub cache_write: Option<f64>,
    /// Defaults to input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub cache_read: Option<f64>,
}

impl Price {
    const fn of(input: f64, output: f64, cache_write: f64, cache_read: f64) -> Price {
        Price {
            input,
            output,
            cache_write: Some(cache_write),
            cache_read: Some(cache_read),
        }
    }

    /// What `usage` costs at this price, in USD.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let per_token = |tokens: u64, per_million: f64| tokens as f64 * per_million / 1_000_000.0;
        per_token(usage.input_tokens, self.input)
            + per_token(usage.output_tokens, self.output)
            + per_token(
                usage.cache_write_tokens,
                self.cache_write.unwrap_or(self.input),
            )
            + per_token(
                usage.cache_read_tokens,
                self.cache_read.unwrap_or(self.input),
            )
    }

    /// Why the price cannot be used, naming the model.
    fn problem(&self, model: &str) -> Option<String> {
        let fields = [
            ("input", Some(self.input)),
            ("output", Some(self.output)),
            ("cache_write", self.cache_write),
            ("cache_read", self.cache_read),
        ];
        fields.into_iter().find_map(|(field, value)| {
            let value = value?;
            (!value.is_finite() || value < 0.0).then(|| {
                format!(
                    "prices[{model:?}].{field} is {value}; give USD per million tokens, a number \
                     >= 0"
                )
            })
        })
    }
}

/// Published list prices (USD per million tokens, 5-minute cache writes) of current
/// Anthropic and OpenAI models, as of early 2026. A key is a model id or the start of one:
/// `claude-sonnet-4-5` also prices `claude-sonnet-4-5-20250929`.
const DEFAULT_PRICES: &[(&str, Price)] = &[
    ("claude-opus-4-6", Price::of(5.0, 25.0, 6.25, 0.5)),
    ("claude-opus-4-5", Price::of(5.0, 25.0, 6.25, 0.5)),
    ("claude-opus-4-1", Price::of(15.0, 75.0, 18.75, 1.5)),
    ("claude-opus-4", Price::of(15.0, 75.0, 18.75, 1.5)),
    ("claude-sonnet-4-6", Price::of(3.0, 15.0, 3.75, 0.3)),
    ("claude-sonnet-4-5", Price::of(3.0, 15.0, 3.75, 0.3)),
    ("claude-sonnet-4", Price::of(3.0, 15.0, 3.75, 0.3)),
    ("claude-3-7-sonnet", Price::of(3.0, 15.0, 3.75, 0.3)),
    ("claude-haiku-4-5", Price::of(1.0, 5.0, 1.25, 0.1)),
    ("claude-3-5-haiku", Price::of(0.8, 4.0, 1.0, 0.08)),
    ("claude-3-haiku", Price::of(0.25, 1.25, 0.3, 0.03)),
    // OpenAI charges nothing extra to write its cache: a write costs what input costs.
    ("gpt-5", Price::of(1.25, 10.0, 1.25, 0.125)),
    ("gpt-5-mini", Price::of(0.25, 2.0, 0.25, 0.025)),
    ("gpt-5-nano", Price::of(0.05, 0.4, 0.05, 0.005)),
    ("gpt-4.1", Price::of(2.0, 8.0, 2.0, 0.5)),
    ("gpt-4.1-mini", Price::of(0.4, 1.6, 0.4, 0.1)),
    ("gpt-4.1-nano", Price::of(0.1, 0.4, 0.1, 0.025)),
    ("gpt-4o", Price::of(2.5, 10.0, 2.5, 1.25)),
    ("gpt-4o-mini", Price::of(0.15, 0.6, 0.15, 0.075)),
    ("o3", Price::of(2.0, 8.0, 2.0, 0.5)),
    ("o4-mini", Price::of(1.1, 4.4, 1.1, 0.275)),
];

/// The prices in effect: the user's (the `prices` setting) over the defaults.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PriceTable {
    user: BTreeMap<String, Price>,
}

impl PriceTable {
    pub fn new(user: BTreeMap<String, Price>) -> PriceTable {
        PriceTable { user }
    }

    /// Rejects a price no cost can be computed with, naming the model and the fix.
    pub fn check(user: &BTreeMap<String, Price>) -> Result<(), String> {
        for (model, price) in user {
            if model.trim().is_empty() {
                return Err(
                    "prices has an empty model name; key each price by a model id, \
                            e.g. prices = { [\"claude-sonnet-4-5\"] = { input = 3, output = 15 } }"
                        .to_owned(),
                );
            }
            if let Some(problem) = price.problem(model) {
                return Err(problem);
            }
        }
        Ok(())
    }

    /// The price of `model`: the user's entry that matches it most specifically, else the
    /// default that does; none for a model nobody priced (its cost is unknown, not guessed).
    pub fn price_of(&self, model: &str) -> Option<Price> {
        most_specific(
            self.user.iter().map(|(key, price)| (key.as_str(), price)),
            model,
        )
        .or_else(|| {
            most_specific(
                DEFAULT_PRICES.iter().map(|(key, price)| (*key, price)),
                model,
            )
        })
    }

    /// What `usage` (per model) costs: the dollars of the priced models, and the models
    /// without a price, whose tokens the dollars leave out. A model listed answered, so its
    /// cost is unknown without a price even if it counted no tokens. What a model's client
    /// reported it cost is its cost, in place of any price.
    pub fn cost(&self, usage: &[ModelUsage]) -> Cost {
        let mut cost = Cost::default();
        for entry in usage {
            if entry.reported_usd_micros > 0 {
                cost.usd += entry.reported_usd_micros as f64 / 1_000_000.0;
                cost.priced_any = true;
                continue;
            }
            match self.price_of(&entry.model) {
                Some(price) => {
                    cost.usd += price.cost(&entry.usage);
                    cost.priced_any = true;
                }
                None if !cost.unpriced.contains(&entry.model) => {
                    cost.unpriced.push(entry.model.clone())
                }
                None => {}
            }
        }
        cost
    }
}

/// The longest key that is `model` or starts it at a word boundary (`-`, `:`, `@`, `/`):
/// `gpt-4o` prices `gpt-4o-2024-08-06` but not `gpt-4o1`, and `gpt-5` not `gpt-5.2`.
fn most_specific<'a>(
    entries: impl Iterator<Item = (&'a str, &'a Price)>,
    model: &str,
) -> Option<Price> {
    entries
        .filter(|(key, _)| {
            model == *key
                || model
                    .strip_prefix(key)
                    .is_some_and(|rest| rest.starts_with(['-', ':', '@', '/']))
        })
        .max_by_key(|(key, _)| key.len())
        .map(|(_, price)| *price)
}

/// The tokens one model spent (in a loop, or summed over a tree).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelUsage {
    /// The model as the loop asked for it; empty for tokens an earlier version counted
    /// without recording the model.
    pub model: String,
    pub usage: Usage,
    /// What the model's own client said these tokens cost, in millionths of a US dollar (a
    /// coding agent over ACP reports its cost; no price is looked up then). Whole numbers, so
    /// that sums over turns and loops stay exact.
    pub reported_usd_micros: u64,
}

/// `usd` in the millionths `ModelUsage::reported_usd_micros` counts (none below 0).
pub fn usd_micros(usd: f64) -> u64 {
    if usd.is_finite() && usd > 0.0 {
        (usd * 1_000_000.0).round() as u64
    } else {
        0
    }
}

/// Tokens of every kind summed over models.
pub fn total_usage(usage: &[ModelUsage]) -> Usage {
    let mut total = Usage::default();
    for entry in usage {
        total.add(&entry.usage);
    }
    total
}

/// Every token the model read or wrote, the unit a token budget counts.
pub fn all_tokens(usage: &Usage) -> u64 {
    usage.total_input().saturating_add(usage.output_tokens)
}

/// An estimate in USD, and which models it leaves out for want of a price.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cost {
    pub usd: f64,
    pub unpriced: Vec<String>,
    /// Some model with tokens had a price (`usd` is then an estimate, if partial).
    pub priced_any: bool,
}

impl Cost {
    /// The estimate, unless tokens were spent and none of them could be priced: then the
    /// cost is unknown, never a made-up zero.
    pub fn known_usd(&self) -> Option<f64> {
        (self.priced_any || self.unpriced.is_empty()).then_some(self.usd)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn usage(input: u64, output: u64, cache_write: u64, cache_read: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cache_write_tokens: cache_write,
            cache_read_tokens: cache_read,
            estimated: false,
        }
    }

    pub(crate) fn of(model: &str, usage: Usage) -> ModelUsage {
        ModelUsage {
            model: model.to_owned(),
            usage,
            reported_usd_micros: 0,
        }
    }

    #[test]
    fn the_most_specific_default_prices_a_model_and_dated_ids_match_their_family() {
        let table = PriceTable::default();
        assert_eq!(
            table.price_of("claude-sonnet-4-5-20250929"),
            Some(Price::of(3.0, 15.0, 3.75, 0.3))
        );
        assert_eq!(
            table.price_of("gpt-4o-mini-2024-07-18"),
            Some(Price::of(0.15, 0.6, 0.15, 0.075)),
            "gpt-4o-mini, not gpt-4o"
        );
        assert_eq!(table.price_of("gpt-5.2"), None, "not gpt-5's price");
        assert_eq!(table.price_of("qwen3:8b"), None);
        assert_eq!(
            table.price_of("claude-opus-4-1"),
            Some(Price::of(15.0, 75.0, 18.75, 1.5))
        );
    }

    #[test]
    fn the_users_prices_win_over_the_defaults_and_cache_prices_default_to_input() {
        let user = BTreeMap::from([
            (
                "claude-sonnet".to_owned(),
                Price {
                    input: 2.0,
                    output: 10.0,
                    cache_write: None,
                    cache_read: Some(0.5),
                },
            ),
            ("qwen3".to_owned(), Price::of(0.0, 0.0, 0.0, 0.0)),
        ]);
        let table = PriceTable::new(user);
        let price = table.price_of("claude-sonnet-4-5").expect("priced");
        assert_eq!(price.input, 2.0, "a user entry beats a longer default");
        // 1M input at 2, 0.5M output at 10, 0.25M cache writes at input's 2, 2M reads at 0.5.
        let cost = price.cost(&usage(1_000_000, 500_000, 250_000, 2_000_000));
        assert!((cost - (2.0 + 5.0 + 0.5 + 1.0)).abs() < 1e-12, "{cost}");
        assert_eq!(table.price_of("qwen3:8b").map(|p| p.output), Some(0.0));
    }

    #[test]
    fn a_cost_sums_priced_models_and_names_the_others() {
        let table = PriceTable::default();
        let cost = table.cost(&[
            of("claude-haiku-4-5", usage(1_000, 200, 0, 10_000)),
            of("mystery-model", usage(5, 5, 0, 0)),
            of("mystery-model", usage(1, 1, 0, 0)),
        ]);
        let expected = (1_000.0 * 1.0 + 200.0 * 5.0 + 10_000.0 * 0.1) / 1_000_000.0;
        assert!((cost.usd - expected).abs() < 1e-15, "{}", cost.usd);
        assert_eq!(cost.unpriced, vec!["mystery-model".to_owned()]);
        assert_eq!(cost.known_usd(), Some(cost.usd), "partial, but an estimate");
        let unknown = table.cost(&[of("mystery-model", usage(5, 5, 0, 0))]);
        assert_eq!(unknown.known_usd(), None);
        assert_eq!(
            table.cost(&[]).known_usd(),
            Some(0.0),
            "nothing spent costs nothing"
        );
    }

    #[test]
    fn a_model_without_a_price_costs_unknown_even_when_no_tokens_were_counted() {
        // What a llama.cpp server's loops stored before their tokens were estimated.
        let table = PriceTable::default();
        let cost = table.cost(&[of("gemma3", Usage::default())]);
        assert_eq!(cost.known_usd(), None, "never a made-up $0.0000");
        assert_eq!(cost.unpriced, vec!["gemma3".to_owned()]);
        let priced = table.cost(&[of("claude-haiku-4-5", Usage::default())]);
        assert_eq!(priced.known_usd(), Some(0.0));
    }

    #[test]
    fn prices_that_cannot_be_used_are_refused_with_the_fix() {
        let bad = BTreeMap::from([(
            "m".to_owned(),
            Price {
                input: -1.0,
                output: 1.0,
                cache_write: None,
                cache_read: None,
            },
        )]);
        let err = PriceTable::check(&bad).expect_err("negative");
        assert!(err.contains("prices[\"m\"].input is -1"), "{err}");
        assert!(PriceTable::check(&BTreeMap::new()).is_ok());
    }

    #[test]
    fn a_reported_cost_is_the_cost_of_a_model_nobody_priced() {
        let table = PriceTable::default();
        let agent = ModelUsage {
            reported_usd_micros: usd_micros(0.75),
            ..of("agent claude", usage(1_200, 0, 0, 0))
        };
        let cost = table.cost(&[agent, of("claude-haiku-4-5", usage(1_000_000, 0, 0, 0))]);
        assert!((cost.usd - 1.75).abs() < 1e-9, "{}", cost.usd);
        assert!(cost.unpriced.is_empty(), "{:?}", cost.unpriced);
        assert_eq!(usd_micros(-1.0), 0);
        assert_eq!(usd_micros(f64::NAN), 0);
    }
}
