//! Which phase a user means. Phase names are unique only within their spec, and a name may
//! be planned twice: a phase is named as `loop_names` says (`phase`, `spec/phase`,
//! `plan/phase`, `plan/spec/phase`, its loop id), the newest plan's phase winning.

use crate::agent::loop_names::{LoopNameError, LoopNames, Wanted};
use crate::store::{LoopRecord, LoopStatus, LoopType};

pub type PhaseLookupError = LoopNameError;

fn is_phase(record: &LoopRecord) -> bool {
    record.loop_type == LoopType::Phase
}

/// The phase loop of `records` that `selector` names and `eligible` accepts: one, or an
/// error that lists the candidates.
pub fn resolve_phase<'a>(
    records: &'a [LoopRecord],
    selector: &str,
    eligible: impl Fn(&LoopRecord) -> bool,
) -> Result<&'a LoopRecord, PhaseLookupError> {
    LoopNames::new(records).resolve(
        selector,
        &Wanted {
            noun: "phase",
            kind: &is_phase,
            eligible: &eligible,
        },
    )
}

/// What to complete a phase argument with: the shortest name of every current phase (its
/// bare name where that names it, else with its spec, then its plan; else its loop id).
/// Sorted.
pub fn phase_selectors(records: &[LoopRecord]) -> Vec<String> {
    let current =
        |record: &LoopRecord| record.status != LoopStatus::Invalidated && record.iteration > 0;
    LoopNames::new(records).selectors(
        &Wanted {
            noun: "phase",
            kind: &is_phase,
            eligible: &current,
        },
        &current,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::loop_names::tests::record;
    use crate::store::LoopId;

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
