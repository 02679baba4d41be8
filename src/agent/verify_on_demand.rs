//! A verification asked on demand (`LoopType::Verify`): what it checks, gathered from the
//! stored artifacts (a phase's tasks and the requirements its spec assigned it, or a whole
//! spec's requirements and its phases' tasks), and how its outcome is told. It reads the
//! project and the store and changes neither: no command runs, no artifact gets an iteration.

use std::path::PathBuf;

use super::jobs::{JobError, parent_artifact, read_json};
use super::tasks::listed_phase;
use crate::artifacts::{
    PhaseArtifact, PhaseRequirements, Requirement, Severity, SpecArtifact, StoredVerification,
    TaskItem, VerificationScope,
};
use crate::next_step::NextStep;
use crate::store::{LoopId, LoopRecord, LoopType, ProjectLayout};

/// What a verification asked on demand checks the working tree against.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifySubject {
    pub scope: VerificationScope,
    /// The phase or spec loop whose artifact it is verified against (where its result is
    /// stored).
    pub artifact_loop: LoopId,
    pub tasks: Vec<TaskItem>,
    pub requirements: Vec<Requirement>,
    /// The directory of the phase's newest code loop, whose baseline gives the diff; `None`
    /// for a spec, or for a phase no code loop ran for (code written without Loopr).
    pub baseline_dir: Option<PathBuf>,
}

/// The subject of verification loop `record` among the project's `records`. Reads the
/// stored artifacts: run it on the blocking pool.
pub fn verify_subject(
    record: &LoopRecord,
    records: &[LoopRecord],
    layout: &ProjectLayout,
) -> Result<VerifySubject, JobError> {
    let target = record
        .parent
        .as_ref()
        .and_then(|parent| records.iter().find(|candidate| &candidate.id == parent))
        .ok_or_else(|| JobError::Parent {
            path: "(none)".to_owned(),
            message: "the phase or spec this verification was asked of is gone".to_owned(),
        })?;
    let name = target.name.clone().unwrap_or_default();
    if target.loop_type == LoopType::Spec {
        let (_, spec) = parent_artifact::<SpecArtifact>(record, layout)?;
        let tasks = records
            .iter()
            .rev()
            .filter(|phase| listed_phase(phase) && phase.parent.as_ref() == Some(&target.id))
            .filter_map(|phase| {
                let path = layout
                    .artifacts_dir(&phase.id, phase.iteration)
                    .join("phase.json");
                let artifact: PhaseArtifact =
                    serde_json::from_value(read_json(&path).ok()?).ok()?;
                Some(artifact.tasks)
            })
            .flatten()
            .collect();
        return Ok(VerifySubject {
            scope: VerificationScope::Spec(name),
            artifact_loop: target.id.clone(),
            tasks,
            requirements: spec.requirements_or_criteria(),
            baseline_dir: None,
        });
    }
    let (_, phase) = parent_artifact::<PhaseArtifact>(record, layout)?;
    let (_, spec) = parent_artifact::<SpecArtifact>(target, layout)?;
    let assigned = PhaseRequirements::of_spec(&spec, &phase.name, None);
    let requirements = assigned
        .assigned
        .iter()
        .filter_map(|id| assigned.known.iter().find(|known| &known.id == id))
        .cloned()
        .collect();
    // Records are newest first: the first code loop of the phase is its newest.
    let baseline_dir = records
        .iter()
        .find(|code| code.loop_type == LoopType::Code && code.parent.as_ref() == Some(&target.id))
        .map(|code| layout.loop_dir(&code.id))
        .filter(|dir| dir.is_dir());
    Ok(VerifySubject {
        scope: VerificationScope::Phase(name),
        artifact_loop: target.id.clone(),
        tasks: phase.tasks,
        requirements,
        baseline_dir,
    })
}

/// What a finished verification found, for the user: `print-version: 2 findings (1
/// critical, 1 minor)` with the step to see them, or `print-version verified: no findings`.
pub fn outcome_message(name: &str, verification: &StoredVerification) -> String {
    let findings = &verification.report.findings;
    if findings.is_empty() && !verification.blocking {
        return format!("{name} verified: no findings");
    }
    let verdict = if verification.blocking {
        "does not pass verification"
    } else {
        "passes verification"
    };
    if findings.is_empty() {
        let summary = super::short_text::one_line(&verification.report.summary, 200);
        return format!("{name} {verdict}: {summary}");
    }
    let counts: Vec<String> = [Severity::Critical, Severity::Major, Severity::Minor]
        .into_iter()
        .filter_map(|severity| {
            let count = findings
                .iter()
                .filter(|finding| finding.severity == severity)
                .count();
            (count > 0).then(|| format!("{count} {}", severity.as_str()))
        })
        .collect();
    let noun = if findings.len() == 1 {
        "finding"
    } else {
        "findings"
    };
    NextStep::ShowFindings.attach(&format!(
        "{name} {verdict}: {} {noun} ({})",
        findings.len(),
        counts.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::{Finding, VerificationReport, VerificationVerdict};
    use crate::store::LoopStatus;

    /// A loop with its artifact (`kind`.json, `json`) stored at iteration 1, below `parent`.
    fn stored(
        layout: &ProjectLayout,
        loop_type: LoopType,
        parent: Option<&LoopRecord>,
        name: &str,
        json: serde_json::Value,
    ) -> LoopRecord {
        let parent_kind = parent.map(|parent| parent.loop_type.as_str());
        let record = LoopRecord {
            parent: parent.map(|parent| parent.id.clone()),
            name: Some(name.to_owned()),
            triggered_by: parent_kind.map(|kind| format!("iterations/001/artifacts/{kind}.json")),
            iteration: 1,
            status: LoopStatus::Complete,
            ..LoopRecord::new_pending(loop_type, "task", "{}".to_owned())
        };
        let artifacts = layout.artifacts_dir(&record.id, 1);
        std::fs::create_dir_all(&artifacts).expect("artifacts");
        let file = artifacts.join(format!("{}.json", loop_type.as_str()));
        std::fs::write(file, serde_json::to_vec(&json).expect("json")).expect("write");
        record
    }

    fn phase_json(name: &str, cites: &str) -> serde_json::Value {
        serde_json::json!({
            "name": name, "title": name, "objective": "o",
            "tasks": [{"description": format!("do {name}"), "requirements": [cites]}],
            "validation_command": "true"
        })
    }

    fn verify_of(target: &LoopRecord) -> LoopRecord {
        LoopRecord {
            parent: Some(target.id.clone()),
            name: target.name.clone(),
            triggered_by: Some(format!(
                "iterations/001/artifacts/{}.json",
                target.loop_type.as_str()
            )),
            ..LoopRecord::new_pending(LoopType::Verify, "task", "{}".to_owned())
        }
    }

    #[test]
    fn a_phase_is_verified_against_its_tasks_and_assigned_requirements_a_spec_against_all() {
        let temp = tempfile::tempdir().expect("tempdir");
        let layout = ProjectLayout::new(&temp.path().join("home"), temp.path());
        let requirement = |id: &str| serde_json::json!({"id": id, "text": format!("THE SYSTEM SHALL {id}"), "check": "c"});
        let phase_ref = |name: &str, id: &str| serde_json::json!({"name": name, "title": name, "description": "d", "requirements": [id]});
        let spec = stored(
            &layout,
            LoopType::Spec,
            None,
            "cli",
            serde_json::json!({
                "name": "cli", "title": "t", "overview": "o",
                "requirements": [requirement("R1"), requirement("R2")],
                "phases": [phase_ref("parse", "R1"), phase_ref("print", "R2"), phase_ref("exit", "R2")]
            }),
        );
        let parse = stored(
            &layout,
            LoopType::Phase,
            Some(&spec),
            "parse",
            phase_json("parse", "R1"),
        );
        let print = stored(
            &layout,
            LoopType::Phase,
            Some(&spec),
            "print",
            phase_json("print", "R2"),
        );
        // Newest first, as the store lists them.
        let mut records = vec![print.clone(), parse.clone(), spec.clone()];

        let subject = verify_subject(&verify_of(&parse), &records, &layout).expect("phase");
        assert_eq!(subject.scope, VerificationScope::Phase("parse".to_owned()));
        assert_eq!(subject.artifact_loop, parse.id);
        let ids = |subject: &VerifySubject| -> Vec<String> {
            subject.requirements.iter().map(|r| r.id.clone()).collect()
        };
        assert_eq!(ids(&subject), vec!["R1"]);
        assert_eq!(subject.tasks[0].description, "do parse");
        assert_eq!(subject.baseline_dir, None, "no code loop ran");

        let code = LoopRecord {
            parent: Some(parse.id.clone()),
            ..LoopRecord::new_pending(LoopType::Code, "task", "{}".to_owned())
        };
        std::fs::create_dir_all(layout.loop_dir(&code.id)).expect("code dir");
        records.insert(0, code.clone());
        let subject = verify_subject(&verify_of(&parse), &records, &layout).expect("phase");
        assert_eq!(subject.baseline_dir, Some(layout.loop_dir(&code.id)));

        let whole = verify_subject(&verify_of(&spec), &records, &layout).expect("spec");
        assert_eq!(whole.scope, VerificationScope::Spec("cli".to_owned()));
        assert_eq!(ids(&whole), vec!["R1", "R2"]);
        let tasks: Vec<&str> = whole.tasks.iter().map(|t| t.description.as_str()).collect();
        assert_eq!(
            tasks,
            vec!["do parse", "do print"],
            "its phases' tasks, in order"
        );
        assert_eq!(whole.baseline_dir, None);
    }

    fn verification(verdict: VerificationVerdict, severities: &[Severity]) -> StoredVerification {
        let report = VerificationReport {
            verdict,
            summary: "The flag is not parsed.".to_owned(),
            findings: severities
                .iter()
                .map(|severity| Finding {
                    severity: *severity,
                    requirement: None,
                    file: "src/main.rs".to_owned(),
                    line: 1,
                    end_line: None,
                    message: "wrong".to_owned(),
                    fix: None,
                })
                .collect(),
        };
        StoredVerification {
            scope: VerificationScope::Phase("print-version".to_owned()),
            at: "2026-11-26T10:00:00Z".to_owned(),
            requirements: vec!["R1".to_owned()],
            round: 0,
            block_on: Severity::Critical,
            blocking: report.blocks(Severity::Critical),
            report,
        }
    }

    #[test]
    fn the_outcome_counts_findings_by_severity_and_says_where_to_see_them() {
        let found = outcome_message(
            "print-version",
            &verification(
                VerificationVerdict::Fail,
                &[Severity::Minor, Severity::Critical],
            ),
        );
        assert_eq!(
            crate::next_step::split(&found),
            (
                "print-version does not pass verification: 2 findings (1 critical, 1 minor)",
                Some(NextStep::ShowFindings)
            )
        );
        let passed = verification(VerificationVerdict::Pass, &[]);
        assert_eq!(
            outcome_message("print-version", &passed),
            "print-version verified: no findings"
        );
        let minor = verification(VerificationVerdict::Pass, &[Severity::Minor]);
        assert_eq!(
            crate::next_step::split(&outcome_message("print-version", &minor)).0,
            "print-version passes verification: 1 finding (1 minor)"
        );
        let failed = verification(VerificationVerdict::Fail, &[]);
        assert_eq!(
            outcome_message("print-version", &failed),
            "print-version does not pass verification: The flag is not parsed."
        );
    }
}
