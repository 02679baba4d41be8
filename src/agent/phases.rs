//! Which phase a user means. Phase names are unique only within their spec, so a phase is
//! named by its loop id, by `spec/phase`, or by its bare name when only one phase has it.

use std::collections::HashMap;

use crate::store::{LoopId, LoopRecord, LoopStatus, LoopType};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PhaseLookupError {
    #[error("no phase {0:?}")]
    NotFound(String),
    #[error(
        "{selector:?} names {} phases: {}; say which with spec/phase (or the loop id)",
        .candidates.len(),
        .candidates.join(", ")
    )]
    Ambiguous {
        selector: String,
        candidates: Vec<String>,
    },
}

/// The phase loops of `records` that `selector` names and `eligible` accepts: one, or an
/// error that lists the candidates.
pub fn resolve_phase<'a>(
    records: &'a [LoopRecord],
    selector: &str,
    eligible: impl Fn(&LoopRecord) -> bool,
) -> Result<&'a LoopRecord, PhaseLookupError> {
    let selector = selector.trim();
    let specs = spec_names(records);
    let matches: Vec<&LoopRecord> = records
        .iter()
        .filter(|record| record.loop_type == LoopType::Phase && eligible(record))
        .filter(|record| names(record, &specs, selector))
        .collect();
    // A revision leaves the phases it replaced behind, invalidated, under the same
    // `spec/phase`: a name means the current phase, and reaches a replaced one only when no
    // current phase qualifies (then its loop id tells replaced ones apart).
    let current: Vec<&LoopRecord> = matches
        .iter()
        .copied()
        .filter(|record| record.status != LoopStatus::Invalidated)
        .collect();
    let matches = if current.is_empty() { matches } else { current };
    match matches.as_slice() {
        [only] => Ok(only),
        [] => Err(PhaseLookupError::NotFound(selector.to_owned())),
        several => Err(PhaseLookupError::Ambiguous {
            selector: selector.to_owned(),
            candidates: several
                .iter()
                .map(|record| {
                    format!(
                        "{} (loop {}, {})",
                        qualified_name(record, &specs),
                        record.id,
                        record.status.as_str()
                    )
                })
                .collect(),
        }),
    }
}

/// What to complete a phase argument with: every current phase by its bare name where that
/// is unique, else as `spec/phase`, else by loop id. Sorted.
pub fn phase_selectors(records: &[LoopRecord]) -> Vec<String> {
    let specs = spec_names(records);
    let current: Vec<&LoopRecord> = records
        .iter()
        .filter(|record| {
            record.loop_type == LoopType::Phase
                && record.status != LoopStatus::Invalidated
                && record.iteration > 0
        })
        .collect();
    let count = |key: &dyn Fn(&LoopRecord) -> String, wanted: &str| {
        current
            .iter()
            .filter(|record| key(record) == wanted)
            .count()
    };
    let bare = |record: &LoopRecord| record.name.clone().unwrap_or_default();
    let qualified = |record: &LoopRecord| qualified_name(record, &specs);
    let mut selectors: Vec<String> = current
        .iter()
        .map(|record| {
            if count(&bare, &bare(record)) == 1 {
                bare(record)
            } else if count(&qualified, &qualified(record)) == 1 {
                qualified(record)
            } else {
                record.id.to_string()
            }
        })
        .collect();
    selectors.sort();
    selectors.dedup();
    selectors
}

fn spec_names(records: &[LoopRecord]) -> HashMap<&LoopId, &str> {
    records
        .iter()
        .filter(|record| record.loop_type == LoopType::Spec)
        .filter_map(|record| Some((&record.id, record.name.as_deref()?)))
        .collect()
}

fn qualified_name(record: &LoopRecord, specs: &HashMap<&LoopId, &str>) -> String {
    let spec = record
        .parent
        .as_ref()
        .and_then(|parent| specs.get(parent).copied())
        .unwrap_or("?");
    format!("{spec}/{}", record.name.as_deref().unwrap_or("?"))
}

fn names(record: &LoopRecord, specs: &HashMap<&LoopId, &str>, selector: &str) -> bool {
    if record.id.as_str() == selector {
        return true;
    }
    match selector.split_once('/') {
        Some(_) => qualified_name(record, specs) == selector,
        None => record.name.as_deref() == Some(selector),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, loop_type: LoopType, parent: Option<&str>, name: &str) -> LoopRecord {
        LoopRecord {
            id: LoopId::parse(id).expect("id"),
            parent: parent.and_then(LoopId::parse),
            name: Some(name.to_owned()),
            status: LoopStatus::Complete,
            iteration: 1,
            ..LoopRecord::new_pending(loop_type, "task", "{}".to_owned())
        }
    }

    fn project() -> Vec<LoopRecord> {
        vec![
            record("s1", LoopType::Spec, Some("p"), "cli"),
            record("s2", LoopType::Spec, Some("p"), "docs"),
            record("ph1", LoopType::Phase, Some("s1"), "parse"),
            record("ph2", LoopType::Phase, Some("s2"), "parse"),
            record("ph3", LoopType::Phase, Some("s2"), "readme"),
        ]
    }

    #[test]
    fn a_name_two_specs_share_is_an_error_listing_both() {
        let records = project();
        let err = resolve_phase(&records, "parse", |_| true).expect_err("ambiguous");
        let text = err.to_string();
        assert!(text.contains("cli/parse (loop ph1"), "{text}");
        assert!(text.contains("docs/parse (loop ph2"), "{text}");
        assert!(text.contains("spec/phase"), "{text}");
    }

    #[test]
    fn spec_slash_phase_bare_unique_names_and_ids_resolve() {
        let records = project();
        let id = |selector: &str| {
            resolve_phase(&records, selector, |_| true)
                .map(|record| record.id.to_string())
                .expect("resolves")
        };
        assert_eq!(id("docs/parse"), "ph2");
        assert_eq!(id("cli/parse"), "ph1");
        assert_eq!(id("readme"), "ph3");
        assert_eq!(id("ph1"), "ph1");
        assert_eq!(
            resolve_phase(&records, "cli/readme", |_| true).map(|record| record.id.clone()),
            Err(PhaseLookupError::NotFound("cli/readme".to_owned()))
        );
    }

    #[test]
    fn only_eligible_phases_compete_for_a_name() {
        let mut records = project();
        records[2].status = LoopStatus::Invalidated;
        let found = resolve_phase(&records, "parse", |record| {
            record.status != LoopStatus::Invalidated
        })
        .expect("one current phase named parse");
        assert_eq!(found.id.as_str(), "ph2");
    }

    #[test]
    fn a_current_phase_wins_over_the_phases_a_revision_replaced() {
        let mut records = project();
        let mut replaced = record("ph0", LoopType::Phase, Some("s1"), "parse");
        replaced.status = LoopStatus::Invalidated;
        records.push(replaced);
        let id = |selector: &str| {
            resolve_phase(&records, selector, |_| true)
                .map(|record| record.id.to_string())
                .expect("resolves")
        };
        assert_eq!(id("cli/parse"), "ph1");
        assert_eq!(id("ph0"), "ph0", "a replaced phase is reached by its id");
        let only_replaced = |record: &LoopRecord| record.id.as_str() != "ph1";
        assert_eq!(
            resolve_phase(&records, "cli/parse", only_replaced).map(|record| record.id.clone()),
            Ok(LoopId::parse("ph0").expect("id")),
            "without a current candidate the replaced one qualifies"
        );
    }

    #[test]
    fn completion_qualifies_only_shared_names() {
        assert_eq!(
            phase_selectors(&project()),
            vec!["cli/parse", "docs/parse", "readme"]
        );
    }
}
