//! The coverage of a project's specs from what is stored: each current spec's artifact, the
//! latest verification of each of its current phases and its own (beside their artifacts;
//! only one of the artifact's current iteration counts),
//! read through the rules of `artifacts::spec_coverage`. What the status lists show on spec
//! and phase rows, and the requirements a spec has left to verify, each at its line in
//! spec.md.
//!
//! The line comes from rendering spec.json again, never from reading spec.md (as
//! `tasks.rs` does for phase.md): spec.md is written by the same renderer from the same
//! JSON, and references render on lines of their own, linked or not.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::agent::loop_names::{LoopNameError, LoopNames, Wanted};
use crate::artifacts::{
    PhaseVerification, ReferenceLinks, Requirement, SpecArtifact, SpecCoverage, StoredVerification,
    render_spec, spec_coverage,
};
use crate::store::{LoopId, LoopRecord, LoopStatus, LoopType, ProjectLayout};

/// What a status row shows of verification: a spec's requirements, a phase's latest
/// verification.
#[derive(Clone, Debug, PartialEq)]
pub enum LoopCoverage {
    Spec(SpecCoverage),
    Phase(PhaseVerification),
}

impl LoopCoverage {
    /// `requirements 5/6 verified`, `verified, 1 finding (1 minor)`, `not verified yet`.
    pub fn describe(&self) -> String {
        match self {
            LoopCoverage::Spec(coverage) => coverage.describe(),
            LoopCoverage::Phase(state) => state.describe(),
        }
    }
}

/// A spec's requirements not yet verified, each at its line in spec.md.
#[derive(Clone, Debug, PartialEq)]
pub struct RequirementsLeft {
    pub spec: String,
    pub loop_id: LoopId,
    pub markdown_path: PathBuf,
    /// `requirements 5/6 verified`.
    pub coverage: String,
    pub unverified: Vec<RequirementPlace>,
}

/// One requirement not yet verified.
#[derive(Clone, Debug, PartialEq)]
pub struct RequirementPlace {
    pub id: String,
    pub text: String,
    /// Zero-based, in spec.md.
    pub line: u32,
    /// `not verified yet`, `finding: <message>`, ...
    pub why: String,
}

/// A spec whose artifact the status lists read: current (not invalidated), written.
pub fn current_spec(record: &LoopRecord) -> bool {
    record.loop_type == LoopType::Spec
        && record.status != LoopStatus::Invalidated
        && record.iteration > 0
}

fn is_spec(record: &LoopRecord) -> bool {
    record.loop_type == LoopType::Spec
}

/// A spec, as a command about requirements reads its name: a current one.
const CURRENT_SPEC: Wanted<'static> = Wanted {
    noun: "spec",
    kind: &is_spec,
    eligible: &current_spec,
};

/// The current spec `selector` names (`spec`, `plan/spec`, its loop id).
pub fn resolve_spec<'a>(
    records: &'a [LoopRecord],
    selector: &str,
) -> Result<&'a LoopRecord, LoopNameError> {
    LoopNames::new(records).resolve(selector, &CURRENT_SPEC)
}

/// What to complete a spec argument with: the shortest name of every current spec. Sorted.
pub fn spec_selectors(records: &[LoopRecord]) -> Vec<String> {
    LoopNames::new(records).selectors(&CURRENT_SPEC, &current_spec)
}

/// The coverage of every current spec and phase among `records` (a project's loops); loops
/// whose artifact cannot be read are left out.
pub fn coverage_by_loop(
    layout: &ProjectLayout,
    records: &[LoopRecord],
) -> HashMap<LoopId, LoopCoverage> {
    let mut by_loop = HashMap::new();
    for spec_record in records.iter().filter(|record| current_spec(record)) {
        let latest = SpecVerifications::of(layout, records, &spec_record.id);
        for (phase, verification) in &latest.phases {
            by_loop.insert(
                phase.id.clone(),
                LoopCoverage::Phase(PhaseVerification::of(verification.as_ref())),
            );
        }
        if let Some(spec) = stored_spec(layout, spec_record) {
            by_loop.insert(
                spec_record.id.clone(),
                LoopCoverage::Spec(latest.coverage(&spec)),
            );
        }
    }
    by_loop
}

/// The requirements of spec loop `spec_record` not yet verified, each at its line in its
/// spec.md; `None` when its artifact cannot be read.
pub fn requirements_left(
    layout: &ProjectLayout,
    records: &[LoopRecord],
    spec_record: &LoopRecord,
) -> Option<RequirementsLeft> {
    let spec = stored_spec(layout, spec_record)?;
    let coverage = SpecVerifications::of(layout, records, &spec_record.id).coverage(&spec);
    let lines = render_spec(&spec, &ReferenceLinks::none()).requirement_lines;
    let unverified = coverage
        .requirements
        .iter()
        .zip(lines.iter().copied().chain(std::iter::repeat(0)))
        .filter_map(|(entry, line)| {
            let why = entry.unverified.as_ref()?.describe();
            Some(RequirementPlace {
                id: entry.requirement.id.clone(),
                text: entry.requirement.text.clone(),
                line,
                why,
            })
        })
        .collect();
    Some(RequirementsLeft {
        spec: spec.name,
        loop_id: spec_record.id.clone(),
        markdown_path: layout
            .artifacts_dir(&spec_record.id, spec_record.iteration)
            .join("spec.md"),
        coverage: coverage.describe(),
        unverified,
    })
}

/// The requirements of its spec that phase loop `phase`'s current verification found met (none
/// without one, or when the spec cannot be read).
pub fn requirements_met_by_phase(
    layout: &ProjectLayout,
    records: &[LoopRecord],
    phase: &LoopRecord,
) -> Vec<Requirement> {
    let Some(verification) = current_verification(layout, phase) else {
        return Vec::new();
    };
    let Some(spec) = records
        .iter()
        .find(|record| Some(&record.id) == phase.parent.as_ref())
        .and_then(|record| stored_spec(layout, record))
    else {
        return Vec::new();
    };
    spec_coverage(&spec, &[&verification])
        .requirements
        .into_iter()
        .filter(|entry| entry.unverified.is_none())
        .map(|entry| entry.requirement)
        .collect()
}

/// The latest verification of each current (not invalidated) phase of a spec, and the
/// spec's own.
struct SpecVerifications<'a> {
    phases: Vec<(&'a LoopRecord, Option<StoredVerification>)>,
    own: Option<StoredVerification>,
}

impl<'a> SpecVerifications<'a> {
    fn of(layout: &ProjectLayout, records: &'a [LoopRecord], spec: &LoopId) -> Self {
        let phases = records
            .iter()
            .filter(|record| {
                record.loop_type == LoopType::Phase
                    && record.parent.as_ref() == Some(spec)
                    && record.status != LoopStatus::Invalidated
            })
            .map(|phase| (phase, current_verification(layout, phase)))
            .collect();
        SpecVerifications {
            phases,
            own: records
                .iter()
                .find(|record| &record.id == spec)
                .and_then(|record| current_verification(layout, record)),
        }
    }

    fn coverage(&self, spec: &SpecArtifact) -> SpecCoverage {
        let verifications: Vec<&StoredVerification> = self
            .phases
            .iter()
            .map(|(_, verification)| verification)
            .chain([&self.own])
            .flatten()
            .collect();
        spec_coverage(spec, &verifications)
    }
}

fn stored_spec(layout: &ProjectLayout, record: &LoopRecord) -> Option<SpecArtifact> {
    super::jobs::current_artifact(record, layout)
        .map_err(|err| tracing::warn!("{err}"))
        .ok()
}

/// The latest verification stored beside `record`'s artifact, if it checked the artifact's
/// current iteration: one of an iteration since revised is stale, as is one that finished
/// after a revision landed.
fn current_verification(layout: &ProjectLayout, record: &LoopRecord) -> Option<StoredVerification> {
    read_stored::<StoredVerification>(&layout.verification(&record.id), "a verification")
        .filter(|verification| verification.checked_iteration(record.iteration))
}

/// The JSON file at `path`, if there is one; one that does not read as `what` is logged and
/// counts as none, so one damaged file leaves the rest of the status whole.
fn read_stored<T: serde::de::DeserializeOwned>(path: &std::path::Path, what: &str) -> Option<T> {
    let bytes = std::fs::read(path).ok()?;
    match serde_json::from_slice(&bytes) {
        Ok(value) => Some(value),
        Err(err) => {
            tracing::warn!("{} does not read as {what}: {err}", path.display());
            None
        }
    }
}
