//! Coverage: which of a spec's requirements the latest verifications found met, and how each
//! phase's latest verification stands. Pure: the stored verifications come in.
//!
//! A requirement is verified when the newest verification that checked it (by `at`; one
//! checked the requirements it lists, a spec's too: a requirement added since was not
//! checked) is not blocking and none of its findings at or
//! above its `block_on` concerns it.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::shapes::{Requirement, SpecArtifact};
use super::verification::{Finding, Severity, StoredVerification};

/// How many findings of each severity a verification reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FindingCounts {
    pub critical: u32,
    pub major: u32,
    pub minor: u32,
}

impl FindingCounts {
    pub fn of(findings: &[Finding]) -> FindingCounts {
        let mut counts = FindingCounts::default();
        for finding in findings {
            let count = match finding.severity {
                Severity::Critical => &mut counts.critical,
                Severity::Major => &mut counts.major,
                Severity::Minor => &mut counts.minor,
            };
            *count += 1;
        }
        counts
    }

    pub fn total(&self) -> u32 {
        self.critical + self.major + self.minor
    }

    /// `2 findings (1 critical, 1 minor)`, `1 finding (1 major)`; empty without findings.
    pub fn describe(&self) -> String {
        let total = self.total();
        if total == 0 {
            return String::new();
        }
        let by_severity: Vec<String> = [
            (self.critical, Severity::Critical),
            (self.major, Severity::Major),
            (self.minor, Severity::Minor),
        ]
        .into_iter()
        .filter(|(count, _)| *count > 0)
        .map(|(count, severity)| format!("{count} {}", severity.as_str()))
        .collect();
        let noun = if total == 1 { "finding" } else { "findings" };
        format!("{total} {noun} ({})", by_severity.join(", "))
    }
}

/// Where a phase's latest verification leaves it. (A verification under way shows as the
/// code loop's stage.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhaseVerification {
    NotVerified,
    /// It passed, perhaps with findings below its `block_on`.
    Passed(FindingCounts),
    /// It blocks the phase: a `fail` verdict or a finding at or above its `block_on`.
    Blocking(FindingCounts),
}

impl PhaseVerification {
    pub fn of(verification: Option<&StoredVerification>) -> PhaseVerification {
        match verification {
            None => PhaseVerification::NotVerified,
            Some(stored) => {
                let counts = FindingCounts::of(&stored.report.findings);
                if stored.blocking {
                    PhaseVerification::Blocking(counts)
                } else {
                    PhaseVerification::Passed(counts)
                }
            }
        }
    }

    /// `not verified yet`, `verified`, `verified, 1 finding (1 minor)`,
    /// `2 findings (1 critical, 1 minor), blocking`, `failed verification`.
    pub fn describe(&self) -> String {
        match self {
            PhaseVerification::NotVerified => "not verified yet".to_owned(),
            PhaseVerification::Passed(counts) if counts.total() == 0 => "verified".to_owned(),
            PhaseVerification::Passed(counts) => format!("verified, {}", counts.describe()),
            PhaseVerification::Blocking(counts) if counts.total() == 0 => {
                "failed verification".to_owned()
            }
            PhaseVerification::Blocking(counts) => format!("{}, blocking", counts.describe()),
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            PhaseVerification::NotVerified => "not_verified",
            PhaseVerification::Passed(_) => "verified",
            PhaseVerification::Blocking(_) => "blocking",
        }
    }

    pub fn counts(&self) -> FindingCounts {
        match self {
            PhaseVerification::NotVerified => FindingCounts::default(),
            PhaseVerification::Passed(counts) | PhaseVerification::Blocking(counts) => *counts,
        }
    }
}

/// Why a requirement is not verified.
#[derive(Clone, Debug, PartialEq)]
pub enum Unverified {
    /// No verification has checked it.
    NotChecked,
    /// The newest verification that checked it found this about it (the most severe
    /// finding at or above its `block_on`).
    Finding(Finding),
    /// The newest verification that checked it blocks for another reason (its verdict, or a
    /// finding about something else): its summary.
    Blocked(String),
}

impl Unverified {
    /// `not verified yet`, `finding: <message>`, `verification blocks: <summary>`.
    pub fn describe(&self) -> String {
        match self {
            Unverified::NotChecked => "not verified yet".to_owned(),
            Unverified::Finding(finding) => format!("finding: {}", finding.message),
            Unverified::Blocked(summary) => format!("verification blocks: {summary}"),
        }
    }
}

/// One requirement and whether it is verified.
#[derive(Clone, Debug, PartialEq)]
pub struct RequirementCoverage {
    pub requirement: Requirement,
    /// `None` when verified.
    pub unverified: Option<Unverified>,
}

/// A spec's requirements, each verified or not, in the spec's order.
#[derive(Clone, Debug, PartialEq)]
pub struct SpecCoverage {
    pub requirements: Vec<RequirementCoverage>,
}

impl SpecCoverage {
    pub fn verified(&self) -> usize {
        self.requirements
            .iter()
            .filter(|coverage| coverage.unverified.is_none())
            .count()
    }

    pub fn total(&self) -> usize {
        self.requirements.len()
    }

    /// `requirements 5/6 verified`.
    pub fn describe(&self) -> String {
        format!("requirements {}/{} verified", self.verified(), self.total())
    }
}

/// The coverage of `spec`'s requirements (`SpecArtifact::requirements_or_criteria`) by
/// `verifications`: the latest of each of its phases and its own, in any order.
pub fn spec_coverage(spec: &SpecArtifact, verifications: &[&StoredVerification]) -> SpecCoverage {
    let requirements = spec
        .requirements_or_criteria()
        .into_iter()
        .map(|requirement| {
            let newest = verifications
                .iter()
                .copied()
                .filter(|verification| checked(verification, &requirement.id))
                .max_by_key(|verification| answered_at(verification));
            RequirementCoverage {
                unverified: unverified(&requirement.id, newest),
                requirement,
            }
        })
        .collect();
    SpecCoverage { requirements }
}

/// Whether `verification` checked requirement `id`: it lists it (a spec's lists the
/// requirements the spec had then).
fn checked(verification: &StoredVerification, id: &str) -> bool {
    verification
        .requirements
        .iter()
        .any(|checked| checked == id)
}

/// When the verifier answered; a time that does not parse sorts first, so it never hides a
/// verification that does.
fn answered_at(verification: &StoredVerification) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(&verification.at, &Rfc3339).ok()
}

fn unverified(id: &str, newest: Option<&StoredVerification>) -> Option<Unverified> {
    let Some(verification) = newest else {
        return Some(Unverified::NotChecked);
    };
    let about_it = verification
        .report
        .findings
        .iter()
        .filter(|finding| finding.requirement.as_deref() == Some(id))
        .filter(|finding| finding.severity >= verification.block_on)
        .max_by_key(|finding| finding.severity);
    match (about_it, verification.blocking) {
        (Some(finding), _) => Some(Unverified::Finding(finding.clone())),
        (None, true) => Some(Unverified::Blocked(verification.report.summary.clone())),
        (None, false) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::verification::{
        VerificationReport, VerificationScope, VerificationVerdict,
    };

    fn spec(requirements: &[&str]) -> SpecArtifact {
        let requirements: Vec<serde_json::Value> = requirements
            .iter()
            .map(|id| serde_json::json!({"id": id, "text": format!("{id} holds"), "check": "test"}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "name": "cli",
            "title": "CLI",
            "overview": "o",
            "requirements": requirements,
            "phases": [],
        }))
        .expect("spec")
    }

    fn finding(severity: Severity, requirement: &str, message: &str) -> Finding {
        Finding {
            severity,
            requirement: Some(requirement.to_owned()),
            file: "src/main.rs".to_owned(),
            line: 1,
            end_line: None,
            message: message.to_owned(),
            fix: None,
        }
    }

    /// A verification of `scope` at `at` that checked `requirements`, judged as the engine
    /// judges it (`blocks(block_on)`).
    fn verification(
        scope: VerificationScope,
        at: &str,
        requirements: &[&str],
        verdict: VerificationVerdict,
        findings: Vec<Finding>,
    ) -> StoredVerification {
        let report = VerificationReport {
            verdict,
            summary: "the summary".to_owned(),
            findings,
        };
        StoredVerification {
            scope,
            at: at.to_owned(),
            requirements: requirements.iter().map(|id| (*id).to_owned()).collect(),
            artifact_iteration: Some(1),
            round: 1,
            block_on: Severity::Critical,
            blocking: report.blocks(Severity::Critical),
            report,
        }
    }

    fn phase(name: &str) -> VerificationScope {
        VerificationScope::Phase(name.to_owned())
    }

    fn states(coverage: &SpecCoverage) -> Vec<(String, String)> {
        coverage
            .requirements
            .iter()
            .map(|entry| {
                let state = entry
                    .unverified
                    .as_ref()
                    .map_or("verified".to_owned(), Unverified::describe);
                (entry.requirement.id.clone(), state)
            })
            .collect()
    }

    const PASS: VerificationVerdict = VerificationVerdict::Pass;
    const FAIL: VerificationVerdict = VerificationVerdict::Fail;

    #[test]
    fn a_passing_verification_verifies_what_it_checked_and_nothing_else() {
        let passed = verification(
            phase("parse"),
            "2026-11-26T10:00:00Z",
            &["R1"],
            PASS,
            vec![finding(Severity::Minor, "R1", "a nit")],
        );
        let coverage = spec_coverage(&spec(&["R1", "R2"]), &[&passed]);
        assert_eq!(
            states(&coverage),
            [
                ("R1".to_owned(), "verified".to_owned()),
                ("R2".to_owned(), "not verified yet".to_owned()),
            ]
        );
        assert_eq!(coverage.describe(), "requirements 1/2 verified");
    }

    #[test]
    fn a_blocking_verification_leaves_its_requirements_unverified_with_the_reason() {
        let blocking = verification(
            phase("parse"),
            "2026-11-26T10:00:00Z",
            &["R1", "R2"],
            PASS,
            vec![
                finding(Severity::Major, "R1", "a major one"),
                finding(Severity::Critical, "R1", "flag ignored"),
            ],
        );
        let failed = verification(
            phase("print"),
            "2026-11-26T10:00:00Z",
            &["R3"],
            FAIL,
            vec![],
        );
        let coverage = spec_coverage(&spec(&["R1", "R2", "R3"]), &[&blocking, &failed]);
        assert_eq!(
            states(&coverage),
            [
                ("R1".to_owned(), "finding: flag ignored".to_owned()),
                (
                    "R2".to_owned(),
                    "verification blocks: the summary".to_owned()
                ),
                (
                    "R3".to_owned(),
                    "verification blocks: the summary".to_owned()
                ),
            ]
        );
        assert_eq!(coverage.describe(), "requirements 0/3 verified");
    }

    #[test]
    fn the_newest_verification_that_checked_a_requirement_wins() {
        let passed_at = |at: &str| verification(phase("parse"), at, &["R1"], PASS, vec![]);
        let verified_with = |verifications: &[&StoredVerification]| {
            spec_coverage(&spec(&["R1"]), verifications).verified()
        };
        // Later by its time than 09:00:00Z, though it sorts first as text.
        let new_block = verification(
            VerificationScope::Spec("cli".to_owned()),
            "2026-11-26T09:00:00.5Z",
            &["R1"],
            PASS,
            vec![finding(Severity::Critical, "R1", "broken since")],
        );
        assert_eq!(
            verified_with(&[&new_block, &passed_at("2026-11-26T09:00:00Z")]),
            0
        );
        // 08:30 UTC: older, though later as text.
        assert_eq!(
            verified_with(&[&new_block, &passed_at("2026-11-26T09:30:00+01:00")]),
            0
        );
        assert_eq!(
            verified_with(&[&passed_at("2026-11-26T09:00:01Z"), &new_block]),
            1
        );
    }

    /// A passing verification of the whole spec when it had R1..R3.
    fn whole_spec_passed() -> StoredVerification {
        verification(
            VerificationScope::Spec("cli".to_owned()),
            "2026-11-26T10:00:00Z",
            &["R1", "R2", "R3"],
            PASS,
            vec![],
        )
    }

    #[test]
    fn a_spec_verification_covers_every_requirement() {
        let whole = whole_spec_passed();
        let coverage = spec_coverage(&spec(&["R1", "R2", "R3"]), &[&whole]);
        assert_eq!(coverage.describe(), "requirements 3/3 verified");
    }

    #[test]
    fn a_spec_verification_leaves_a_requirement_added_since_unverified() {
        let whole = whole_spec_passed();
        let coverage = spec_coverage(&spec(&["R1", "R2", "R3", "R4"]), &[&whole]);
        assert_eq!(coverage.describe(), "requirements 3/4 verified");
        assert_eq!(
            states(&coverage)[3],
            ("R4".to_owned(), "not verified yet".to_owned())
        );
    }

    #[test]
    fn an_old_spec_reads_its_criteria_as_r1_to_rn() {
        let old: SpecArtifact = serde_json::from_value(serde_json::json!({
            "name": "cli",
            "title": "CLI",
            "overview": "o",
            "phases": [],
            "acceptance_criteria": ["prints the version", "exits 0"],
        }))
        .expect("old spec");
        let passed = verification(
            phase("parse"),
            "2026-11-26T10:00:00Z",
            &["R2"],
            PASS,
            vec![],
        );
        let coverage = spec_coverage(&old, &[&passed]);
        assert_eq!(
            states(&coverage),
            [
                ("R1".to_owned(), "not verified yet".to_owned()),
                ("R2".to_owned(), "verified".to_owned()),
            ]
        );
        assert_eq!(
            coverage.requirements[0].requirement.text,
            "prints the version"
        );
    }

    #[test]
    fn a_phase_reads_its_latest_verification_and_counts_findings_by_severity() {
        assert_eq!(PhaseVerification::of(None).describe(), "not verified yet");
        let passed = verification(phase("p"), "2026-11-26T10:00:00Z", &["R1"], PASS, vec![]);
        assert_eq!(PhaseVerification::of(Some(&passed)).describe(), "verified");
        let with_nits = verification(
            phase("p"),
            "2026-11-26T10:00:00Z",
            &["R1"],
            PASS,
            vec![
                finding(Severity::Minor, "R1", "a"),
                finding(Severity::Major, "R1", "b"),
            ],
        );
        assert_eq!(
            PhaseVerification::of(Some(&with_nits)).describe(),
            "verified, 2 findings (1 major, 1 minor)"
        );
        let blocking = verification(
            phase("p"),
            "2026-11-26T10:00:00Z",
            &["R1"],
            PASS,
            vec![finding(Severity::Critical, "R1", "a")],
        );
        let state = PhaseVerification::of(Some(&blocking));
        assert_eq!(state.describe(), "1 finding (1 critical), blocking");
        assert_eq!(state.counts().critical, 1);
        let failed = verification(phase("p"), "2026-11-26T10:00:00Z", &["R1"], FAIL, vec![]);
        assert_eq!(
            PhaseVerification::of(Some(&failed)).describe(),
            "failed verification"
        );
    }
}
