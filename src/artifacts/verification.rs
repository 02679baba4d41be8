//! A verification's answer and its record: the verdict and findings a verifier reports on
//! code against a phase's (or a spec's) requirements, how severe a finding is, and whether a
//! report blocks the phase from counting as done. Pure.

use serde::{Deserialize, Serialize};

/// The most findings a report may hold: each goes back to the code loop's model.
pub const MAX_FINDINGS: usize = 50;
/// The most characters of a finding's message, and of its fix.
pub const MAX_FINDING_TEXT_CHARS: usize = 1000;
/// The most characters of a report's summary.
pub const MAX_SUMMARY_CHARS: usize = 2000;

/// How much a finding matters; ordered `Minor < Major < Critical`.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth a note; does not stop the phase.
    Minor,
    /// Wrong or missing behaviour that should be fixed.
    Major,
    /// A requirement is not met, or the change breaks something.
    #[default]
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Minor => "minor",
            Severity::Major => "major",
            Severity::Critical => "critical",
        }
    }
}

/// The verifier's overall judgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerificationVerdict {
    /// The code does what the requirements ask.
    Pass,
    /// It does not: the findings say where and why.
    Fail,
}

/// One problem the verifier found, at a place in the project.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    pub severity: Severity,
    /// The id of the requirement it concerns (`R2`), if one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirement: Option<String>,
    /// The file, relative to the project root.
    #[schemars(length(min = 1))]
    pub file: String,
    /// The first line concerned, from 1.
    #[schemars(range(min = 1))]
    pub line: u32,
    /// The last line concerned, when more than one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub end_line: Option<u32>,
    /// What is wrong, in a sentence or two.
    #[schemars(length(min = 1, max = MAX_FINDING_TEXT_CHARS))]
    pub message: String,
    /// How to fix it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_FINDING_TEXT_CHARS))]
    pub fix: Option<String>,
}

/// A verification's answer: what the verifier's tool takes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VerificationReport {
    pub verdict: VerificationVerdict,
    /// The judgement in a few sentences.
    #[schemars(length(min = 1, max = MAX_SUMMARY_CHARS))]
    pub summary: String,
    /// Every problem found; empty when none.
    #[serde(default)]
    #[schemars(length(max = MAX_FINDINGS))]
    pub findings: Vec<Finding>,
}

impl VerificationReport {
    /// Whether the report stops the phase: a `fail` verdict or a finding at or above
    /// `block_on`.
    pub fn blocks(&self, block_on: Severity) -> bool {
        self.verdict == VerificationVerdict::Fail
            || self
                .findings
                .iter()
                .any(|finding| finding.severity >= block_on)
    }
}

/// What was verified: one phase, or a whole spec.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "scope", content = "name", rename_all = "snake_case")]
pub enum VerificationScope {
    Phase(String),
    Spec(String),
}

/// A verification as stored (`verification.json` beside the phase's or spec's artifact):
/// the latest one of that artifact.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredVerification {
    #[serde(flatten)]
    pub scope: VerificationScope,
    /// RFC 3339, when the verifier answered.
    pub at: String,
    /// The ids of the requirements it checked.
    pub requirements: Vec<String>,
    /// The iteration of the phase's (or spec's) artifact it checked; a verification of
    /// another iteration than the artifact's current one is stale and counts as none.
    /// `None` (a record from before iterations were kept) is never current.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_iteration: Option<u32>,
    /// The code loop's verification round (1, 2, ...); 0 for one asked on demand.
    pub round: u32,
    /// The `block_on` it was judged with: `blocking` is `report.blocks(block_on)`.
    pub block_on: Severity,
    pub blocking: bool,
    pub report: VerificationReport,
}

impl StoredVerification {
    /// Whether it checked iteration `iteration` of its artifact (the current one, or it is
    /// stale).
    pub fn checked_iteration(&self, iteration: u32) -> bool {
        self.artifact_iteration == Some(iteration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(severity: Severity) -> Finding {
        Finding {
            severity,
            requirement: Some("R1".to_owned()),
            file: "src/lib.rs".to_owned(),
            line: 3,
            end_line: None,
            message: "wrong".to_owned(),
            fix: None,
        }
    }

    #[test]
    fn a_report_blocks_on_a_fail_verdict_or_a_finding_at_or_above_the_threshold() {
        let report = |verdict, findings| VerificationReport {
            verdict,
            summary: "s".to_owned(),
            findings,
        };
        let pass = VerificationVerdict::Pass;
        assert!(!report(pass, vec![finding(Severity::Major)]).blocks(Severity::Critical));
        assert!(report(pass, vec![finding(Severity::Major)]).blocks(Severity::Major));
        assert!(report(pass, vec![finding(Severity::Critical)]).blocks(Severity::Critical));
        assert!(!report(pass, vec![finding(Severity::Minor)]).blocks(Severity::Major));
        assert!(report(VerificationVerdict::Fail, vec![]).blocks(Severity::Critical));
    }

    #[test]
    fn a_stored_verification_names_its_scope_flat() {
        let stored = StoredVerification {
            scope: VerificationScope::Phase("add-flag".to_owned()),
            at: "2026-11-26T10:00:00Z".to_owned(),
            requirements: vec!["R1".to_owned()],
            artifact_iteration: Some(2),
            round: 1,
            block_on: Severity::Critical,
            blocking: false,
            report: VerificationReport {
                verdict: VerificationVerdict::Pass,
                summary: "ok".to_owned(),
                findings: vec![finding(Severity::Minor)],
            },
        };
        let json = serde_json::to_value(&stored).unwrap();
        assert_eq!(json["scope"], "phase");
        assert_eq!(json["name"], "add-flag");
        assert_eq!(json["report"]["findings"][0]["severity"], "minor");
        let back: StoredVerification = serde_json::from_value(json).unwrap();
        assert_eq!(back, stored);
    }
}
