//! The summary table `loopr plan`, `run`, `resume` and `status` print: one row per loop,
//! its tokens and their estimated cost, its error and what it shows of verification.

use std::collections::HashMap;
use std::io::Write;

use super::words::hinted;
use crate::agent::{LoopCoverage, LoopSettings};
use crate::pricing::{Cost, ModelUsage, PriceTable};
use crate::store::{LoopId, LoopRecord};

/// What each loop spent, and the prices to cost it with (else those it started with).
pub(super) struct Spent<'a> {
    pub(super) usage: &'a HashMap<LoopId, Vec<ModelUsage>>,
    pub(super) prices: Option<&'a PriceTable>,
}

/// The summary table: one row per loop, with its tokens and their estimated cost, priced by
/// `spent.prices` or, without, by the prices the loop started with (its `--settings`), and
/// last its error and what it shows of verification (a spec's requirements verified, a
/// phase's latest verification). Each column is as wide as its widest cell, so the rows line
/// up under the heads.
pub(super) fn write_table(
    out: &mut impl Write,
    records: &[LoopRecord],
    spent: &Spent<'_>,
    coverage: &HashMap<LoopId, LoopCoverage>,
) -> anyhow::Result<()> {
    let Spent { usage, prices } = *spent;
    const HEADS: [&str; 9] = [
        "ID", "TYPE", "NAME", "STATUS", "ITER", "REVIEW", "IN", "OUT", "COST",
    ];
    // Counts and money read best aligned right.
    const RIGHT_FROM: usize = 4;
    let mut rows: Vec<([String; 9], String)> = Vec::with_capacity(records.len());
    for record in records {
        let spent = usage.get(&record.id).map_or(&[][..], Vec::as_slice);
        let cost = match prices {
            Some(prices) => prices.cost(spent),
            None => LoopSettings::from_stored(&record.settings)
                .price_table()
                .cost(spent),
        };
        // Estimated when the server reported no usage for some turn.
        let estimated = spent.iter().any(|entry| entry.usage.estimated);
        let cells = [
            record.id.as_str().to_owned(),
            record.loop_type.as_str().to_owned(),
            name_cell(record),
            crate::store::shown_status(record.status, record.error.as_deref()).to_owned(),
            record.iteration.to_string(),
            record.review_passes.to_string(),
            tokens_cell(record.tokens_in, estimated),
            tokens_cell(record.tokens_out, estimated),
            cost_cell(&cost),
        ];
        let error = [
            record.error.as_deref().map(hinted),
            coverage.get(&record.id).map(LoopCoverage::describe),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<String>>()
        .join(" · ");
        rows.push((
            cells.map(|cell| crate::terminal_text::for_terminal(&cell).into_owned()),
            error,
        ));
    }
    let mut widths = HEADS.map(str::len);
    for (cells, _) in &rows {
        for (width, cell) in widths.iter_mut().zip(cells) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &[&str], error: &str| -> String {
        let mut line = String::new();
        for (column, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if column > 0 {
                line.push(' ');
            }
            if column >= RIGHT_FROM {
                line.push_str(&format!("{cell:>width$}"));
            } else {
                line.push_str(&format!("{cell:<width$}"));
            }
        }
        format!("{line}  {error}")
    };
    writeln!(out, "{}", line(&HEADS, "ERROR/VERIFICATION").trim_end())?;
    for (cells, error) in &rows {
        let cells: Vec<&str> = cells.iter().map(String::as_str).collect();
        let row = line(&cells, &crate::terminal_text::for_terminal(error));
        writeln!(out, "{row}")?;
    }
    Ok(())
}

/// A loop's name; a plan, which has none, by the name a command takes for it (its task's
/// first words joined by `_`, |loopr-loop-names|): scripts split the table at whitespace,
/// and a hyphen would make it read like the name of one of its specs or phases.
fn name_cell(record: &LoopRecord) -> String {
    match &record.name {
        Some(name) => name.clone(),
        None => Some(crate::agent::plan_name(&record.task))
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| "-".to_owned()),
    }
}

/// A token count, `~1.2k` when Loopr estimated (some of) it.
fn tokens_cell(count: u64, estimated: bool) -> String {
    if estimated {
        crate::agent::approximate_tokens(count)
    } else {
        count.to_string()
    }
}

/// An estimate as the status views show it: `?` when no model is priced, `+?` after an
/// estimate that leaves some model out.
fn cost_cell(cost: &Cost) -> String {
    let Some(usd) = cost.known_usd() else {
        return "?".to_owned();
    };
    let dollars = if usd < 0.1 {
        format!("${usd:.4}")
    } else if usd < 10.0 {
        format!("${usd:.3}")
    } else {
        format!("${usd:.2}")
    };
    if cost.unpriced.is_empty() {
        dollars
    } else {
        format!("{dollars}+?")
    }
}
