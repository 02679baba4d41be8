//! Verifying the working tree on demand: a verification loop below the phase or spec it is
//! asked of, which reads the project and changes nothing in it.

use std::path::Path;

use super::{LoopManager, ManagerError};
use crate::agent::loop_names::{LoopNameError, LoopNames, Wanted};
use crate::agent::settings::LoopSettings;
use crate::artifacts::StoredVerification;
use crate::store::{LoopId, LoopRecord, LoopStatus, LoopType, ProjectLayout, verifiable};

fn phase_or_spec(record: &LoopRecord) -> bool {
    matches!(record.loop_type, LoopType::Phase | LoopType::Spec)
}

/// What a verification's name may mean: a current phase or spec with an artifact.
const VERIFY_TARGET: Wanted<'static> = Wanted {
    noun: "phase or spec",
    kind: &phase_or_spec,
    eligible: &verifiable,
};

impl LoopManager {
    /// Starts verifying the working tree against the phase or spec `name` means (empty: the
    /// one the project has) and returns the verification loop's id at once; it runs in the
    /// background, reports through events and stores what it found beside the artifact.
    pub fn start_verification(
        &self,
        root: &Path,
        name: &str,
        settings: LoopSettings,
    ) -> Result<LoopId, ManagerError> {
        let project = self.project_for_a_new_loop(root, &settings)?;
        let records = project.db.list()?;
        let target = verify_target(&records, name)?;
        let artifact = match target.loop_type {
            LoopType::Spec => "artifacts/spec.json",
            _ => "artifacts/phase.json",
        };
        let record = LoopRecord {
            parent: Some(target.id.clone()),
            name: target.name.clone(),
            triggered_by: Some(
                ProjectLayout::iteration_relative(target.iteration)
                    .join(artifact)
                    .to_string_lossy()
                    .into_owned(),
            ),
            ..LoopRecord::new_pending(LoopType::Verify, &target.task, settings.to_json())
        };
        project.db.insert(&record, self.shared.host_pid)?;
        tracing::info!(loop_id = %record.id, target = %target.id, "verification created");
        self.emit_status(&record.id, record.loop_type, LoopStatus::Pending, None);
        self.schedule(&project);
        Ok(record.id)
    }

    /// What verification loop `id` found, once it finished: the copy it keeps of what it
    /// stored beside its phase's or spec's artifact. Blocking (it reads a file).
    pub fn verification_of(
        &self,
        root: &Path,
        id: &LoopId,
    ) -> Result<Option<StoredVerification>, ManagerError> {
        let path = self.project(root)?.layout.verification(id);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|err| {
                ManagerError::StoredArtifact {
                    id: id.to_string(),
                    message: format!("{}: {err}", path.display()),
                }
            }),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(ManagerError::StoredArtifact {
                id: id.to_string(),
                message: format!("{}: {err}", path.display()),
            }),
        }
    }

    /// What to complete a verification's argument with: the shortest name of every phase and
    /// spec it takes.
    pub fn verify_selectors(&self, root: &Path) -> Result<Vec<String>, ManagerError> {
        let records = self.status(root)?;
        Ok(verify_choices(&records))
    }
}

fn verify_choices(records: &[LoopRecord]) -> Vec<String> {
    LoopNames::new(records).selectors(&VERIFY_TARGET, &|_| true)
}

/// The phase or spec `name` means among `records`; without a name, the only one there is.
fn verify_target<'a>(
    records: &'a [LoopRecord],
    name: &str,
) -> Result<&'a LoopRecord, ManagerError> {
    let choices = || verify_choices(records);
    if name.trim().is_empty() {
        let mut targets = records.iter().filter(|record| verifiable(record));
        return match (targets.next(), targets.next()) {
            (Some(only), None) => Ok(only),
            (None, _) => Err(ManagerError::NoVerifyTarget),
            _ => Err(ManagerError::WhichToVerify { choices: choices() }),
        };
    }
    LoopNames::new(records)
        .resolve(name, &VERIFY_TARGET)
        .map_err(|err| match err {
            LoopNameError::NotFound(_) => ManagerError::NothingToVerify {
                name: name.trim().to_owned(),
                choices: choices(),
            },
            ambiguous => ManagerError::Name(ambiguous),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::loop_names::tests::record;

    fn project() -> Vec<LoopRecord> {
        vec![
            record("s1", LoopType::Spec, Some("p"), "cli"),
            record("ph1", LoopType::Phase, Some("s1"), "parse"),
            record("ph2", LoopType::Phase, Some("s1"), "print"),
            record("c1", LoopType::Code, Some("ph1"), "parse"),
        ]
    }

    #[test]
    fn a_phase_or_a_spec_is_named_and_an_unknown_name_lists_them() {
        let records = project();
        let id = |name: &str| verify_target(&records, name).map(|record| record.id.to_string());
        assert_eq!(id("parse").ok().as_deref(), Some("ph1"));
        assert_eq!(id("cli").ok().as_deref(), Some("s1"));
        assert_eq!(id("cli/print").ok().as_deref(), Some("ph2"));
        match verify_target(&records, "nope") {
            Err(ManagerError::NothingToVerify { name, choices }) => {
                assert_eq!(name, "nope");
                assert_eq!(choices, vec!["cli", "parse", "print"]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn without_a_name_the_only_phase_or_spec_is_meant_else_the_choices_are_listed() {
        let records = project();
        assert!(matches!(
            verify_target(&records, " "),
            Err(ManagerError::WhichToVerify { choices }) if choices.len() == 3
        ));
        let lone = vec![record("s1", LoopType::Spec, Some("p"), "cli")];
        assert_eq!(
            verify_target(&lone, "").map(|r| r.id.as_str()).ok(),
            Some("s1")
        );
        assert!(matches!(
            verify_target(&[], ""),
            Err(ManagerError::NoVerifyTarget)
        ));
    }
}
