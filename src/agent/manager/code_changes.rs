//! What a code loop changed, and undoing it.

use std::path::Path;

use super::{LoopManager, ManagerError, Project};
use crate::agent::baseline::{Baseline, ChangedHunk, UndoReport};
use crate::agent::phases::{PhaseLookupError, resolve_phase};
use crate::store::{LoopId, LoopRecord, LoopStatus, LoopType, UNDONE_NOTE_PREFIX, rewound, undone};

impl LoopManager {
    /// What the newest code loop of `phase` changed, one entry per hunk. Blocking (it reads
    /// and diffs files): call it off the async threads.
    pub fn changes(
        &self,
        root: &Path,
        phase: &str,
    ) -> Result<(LoopId, Vec<ChangedHunk>), ManagerError> {
        let project = self.project(root)?;
        let code = newest_code_loop(&project, phase)?;
        let hunks = Baseline::at(&project.layout.loop_dir(&code.id))
            .changes(&project.root)
            .map_err(|err| ManagerError::Baseline(err.to_string()))?;
        Ok((code.id, hunks))
    }

    /// Undoes what the newest code loop of `phase` changed: the files its tools and commands
    /// changed go back to what they held before (through open buffers), except files
    /// changed since, which only `force` restores, and files open with unsaved changes.
    /// The loop's record and status event say it was undone.
    pub async fn undo(
        &self,
        root: &Path,
        phase: &str,
        force: bool,
    ) -> Result<(LoopId, UndoReport), ManagerError> {
        let project = self.project(root)?;
        let code = newest_code_loop(&project, phase)?;
        if code.status.is_active() {
            return Err(ManagerError::WrongState {
                id: code.id.to_string(),
                status: code.status.as_str(),
                hint: code_loop_busy(code.status),
            });
        }
        if rewound(code.error.as_deref()) {
            return self.undo_rewind(&project, &code, force).await;
        }
        let report = Baseline::at(&project.layout.loop_dir(&code.id))
            .undo(&project.root, self.shared.buffers.as_ref(), force)
            .await
            .map_err(|err| ManagerError::Baseline(err.to_string()))?;
        tracing::info!(
            loop_id = %code.id,
            restored = report.restored.len(),
            skipped = report.skipped.len(),
            "undid a code loop's changes"
        );
        if !report.restored.is_empty() {
            let mut note = format!(
                "{UNDONE_NOTE_PREFIX} {} file(s) restored",
                report.restored.len()
            );
            if !report.skipped.is_empty() {
                note.push_str(&format!("; {} not restored", report.skipped.len()));
            }
            if let Some(ended) = code.error.as_deref().filter(|e| !undone(Some(e))) {
                // The end's next step stays with the note, for the shells to word.
                let (ended, next_step) = crate::next_step::split(ended);
                note.push_str(&format!("; it had ended with: {ended}"));
                if let Some(step) = next_step {
                    note = step.attach(&note);
                }
            }
            let db = project.db.clone();
            let (id, status, stored_note) = (code.id.clone(), code.status, note.clone());
            // Only while the loop is as undo found it: the buffer round-trips take a while, and
            // a retry or revision meanwhile gave it a newer status this note must not replace.
            let noted = tokio::task::spawn_blocking(move || {
                db.set_error_if_status(&id, status, Some(&stored_note))
            })
            .await
            .map_err(|err| {
                ManagerError::Baseline(format!("recording the undo crashed: {err}"))
            })??;
            if noted {
                self.emit_status(&code.id, code.loop_type, code.status, Some(note));
            } else {
                tracing::info!(loop_id = %code.id, "the loop changed state during the undo; its record is left as it is");
            }
        }
        Ok((code.id, report))
    }
}

/// Why an undo or a rewind waits for a code loop that is `status` (active), and what lets it
/// go on.
pub(super) fn code_loop_busy(status: LoopStatus) -> &'static str {
    if status == LoopStatus::AwaitingApproval {
        "its changes await approval: approve them to keep them, revise it to send it back, or \
         cancel it, then undo or rewind"
    } else {
        "a code loop still runs; cancel it first"
    }
}

/// The newest code loop of the phase `phase` names (a phase name, `spec/phase`, a phase
/// loop id) or the code loop with id `phase`. Only phases that had a code loop compete for a
/// name.
pub(super) fn newest_code_loop(project: &Project, phase: &str) -> Result<LoopRecord, ManagerError> {
    let records = project.db.list()?;
    let newest_code_loop_of = |phase_id: &LoopId| {
        records
            .iter()
            .find(|record| {
                record.loop_type == LoopType::Code && record.parent.as_ref() == Some(phase_id)
            })
            .cloned()
    };
    if let Some(code) = records
        .iter()
        .find(|record| record.loop_type == LoopType::Code && record.id.as_str() == phase.trim())
    {
        return Ok(code.clone());
    }
    let phase_record = resolve_phase(&records, phase, |record| {
        newest_code_loop_of(&record.id).is_some()
    })
    .map_err(|err| match err {
        PhaseLookupError::NotFound(_) => ManagerError::NoCodeLoop(phase.to_owned()),
        ambiguous => ManagerError::Name(ambiguous),
    })?;
    newest_code_loop_of(&phase_record.id).ok_or_else(|| ManagerError::NoCodeLoop(phase.to_owned()))
}
