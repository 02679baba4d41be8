//! A verification asked on demand (`LoopType::Verify`): what it checks, gathered from the
//! stored artifacts (a phase's tasks and the requirements it is verified against, or a whole
//! spec's requirements and its phases' tasks), and its run. It reads the project and changes
//! nothing there: no command runs, no artifact gets an iteration; what it found is stored
//! beside the artifact, and in its own directory.

use std::path::PathBuf;

use super::context::{LoopContext, LoopError};
use super::jobs::{JobError, current_artifact, parent_artifact};
use super::task_progress::iteration_of;
use super::tasks::listed_phase;
use super::verification::{VerificationInput, record_verification, run_verification};
use crate::artifacts::{
    PhaseArtifact, PhaseRequirements, Requirement, SpecArtifact, TaskItem, VerificationScope,
};
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
    /// The directory of the phase's newest ended code loop of its current iteration, whose
    /// baseline gives the diff; `None` for a spec, or for a phase no such code loop ran for
    /// (code written without Loopr).
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
            .filter_map(|phase| current_artifact::<PhaseArtifact>(phase, layout).ok())
            .flat_map(|artifact| artifact.tasks)
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
    let requirements =
        PhaseRequirements::of_spec(&spec, &phase.name, None).verified_against(&phase);
    let baseline_dir = diff_base(target, records)
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

/// The code loop whose baseline gives phase `target`'s diff: its newest (records are newest
/// first) that implemented the phase's current iteration and has ended.
/// One of an older iteration changed other code; one still running has a partial diff.
fn diff_base<'a>(target: &LoopRecord, records: &'a [LoopRecord]) -> Option<&'a LoopRecord> {
    records.iter().find(|code| {
        code.loop_type == LoopType::Code
            && code.parent.as_ref() == Some(&target.id)
            && code.triggered_by.as_deref().and_then(iteration_of) == Some(target.iteration)
            && !code.status.is_active()
    })
}

/// Runs verification loop `context.record`: verifies the working tree against its phase or
/// spec (no validation output: nothing runs), keeps what it found in its own directory (what
/// `loopr verify` prints) and stores it beside the artifact, whose event the shells show.
pub async fn run_verify_loop(context: &LoopContext) -> Result<(), LoopError> {
    let record = context.record.clone();
    let subject = context
        .store(move |db, layout| {
            let records = db.list()?;
            Ok(verify_subject(&record, &records, layout)?)
        })
        .await?;
    let name = match &subject.scope {
        VerificationScope::Phase(name) | VerificationScope::Spec(name) => name.clone(),
    };
    let input = VerificationInput {
        scope: subject.scope,
        tasks: subject.tasks,
        requirements: subject.requirements,
        baseline_dir: subject.baseline_dir,
        validation_output: None,
        round: 0,
    };
    let journal = context.layout.journal(&context.record.id);
    let verification = run_verification(context, input, journal).await?;
    let json = serde_json::to_vec_pretty(&verification).map_err(|err| LoopError::Artifact {
        kind: "verification",
        source: std::io::Error::other(err),
    })?;
    let own = context.record.id.clone();
    context
        .store(move |_, layout| {
            crate::store::write_atomic(&layout.verification(&own), &json).map_err(|source| {
                LoopError::Artifact {
                    kind: "verification",
                    source,
                }
            })
        })
        .await?;
    record_verification(context, &subject.artifact_loop, name, &verification).await
}

#[cfg(test)]
mod tests {
    use super::*;
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

        // A code loop of the phase's iteration `iteration`, in `status`.
        let code_loop = |iteration: u32, status: LoopStatus| {
            let code = LoopRecord {
                parent: Some(parse.id.clone()),
                triggered_by: Some(format!("iterations/{iteration:03}/artifacts/phase.json")),
                status,
                ..LoopRecord::new_pending(LoopType::Code, "task", "{}".to_owned())
            };
            std::fs::create_dir_all(layout.loop_dir(&code.id)).expect("code dir");
            code
        };
        let code = code_loop(1, LoopStatus::Complete);
        records.insert(0, code.clone());
        let subject = verify_subject(&verify_of(&parse), &records, &layout).expect("phase");
        assert_eq!(subject.baseline_dir, Some(layout.loop_dir(&code.id)));
        // Newer ones still running, or of another iteration of the phase, are no diff base.
        records.insert(0, code_loop(1, LoopStatus::Running));
        records.insert(0, code_loop(2, LoopStatus::Complete));
        let subject = verify_subject(&verify_of(&parse), &records, &layout).expect("phase");
        assert_eq!(
            subject.baseline_dir,
            Some(layout.loop_dir(&code.id)),
            "the newest ended code loop of the phase's current iteration"
        );

        // A phase is verified against what its tasks cite too, as its code loop's rounds are.
        let exit = stored(
            &layout,
            LoopType::Phase,
            Some(&spec),
            "exit",
            phase_json("exit", "R1"),
        );
        let mut with_exit = records.clone();
        with_exit.insert(0, exit.clone());
        let subject = verify_subject(&verify_of(&exit), &with_exit, &layout).expect("phase");
        assert_eq!(ids(&subject), vec!["R1", "R2"], "cited R1, assigned R2");

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
}
