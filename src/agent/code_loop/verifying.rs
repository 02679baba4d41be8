//! The code loop's verification rounds: once the phase's validation passes (and
//! `verify.enabled`), its changes are verified; findings that block the phase go back to the
//! model (or the coding agent) as its next iteration, then, after the next passing validation, verification runs
//! again, at most `verify.max_rounds` times. The round under way is in the loop's run state,
//! so a host killed meanwhile resumes it.

use super::{CodeRunState, check_again};
use crate::agent::context::{LoopContext, LoopError, VerifyLimit};
use crate::agent::jobs;
use crate::agent::turn::Conversation;
use crate::agent::verification::{VerificationInput, record_verification, run_verification};
use crate::agent::verification_text;
use crate::artifacts::{
    PhaseArtifact, PhaseRequirements, Requirement, SpecArtifact, StoredVerification,
    VerificationScope,
};
use crate::llm::Usage;
use crate::store::{LoopRecord, ProjectLayout, write_atomic};

/// What came of a passing validation.
pub(super) enum Settled {
    /// The phase is complete: verified, or verification is off.
    Complete,
    /// The findings went back to the model: the loop goes on with the next iteration.
    Again,
}

/// The validation of `state.iteration` passed (its turn not yet committed): the phase is
/// complete, or verified first.
pub(super) async fn after_validation(
    context: &LoopContext,
    conversation: &mut Conversation,
    state: &mut CodeRunState,
    phase: &PhaseArtifact,
) -> Result<Settled, LoopError> {
    if !context.settings.verify.enabled {
        state.passed = true;
        conversation.commit(state).await?;
        return Ok(Settled::Complete);
    }
    state.verify_rounds += 1;
    state.verifying = Some(state.verify_rounds);
    conversation.commit(state).await?;
    verify(context, conversation, state, phase).await
}

/// Runs the verification round `state.verifying` (begun, or resumed) of the validated
/// iteration, and settles what it found.
pub(super) async fn verify(
    context: &LoopContext,
    conversation: &mut Conversation,
    state: &mut CodeRunState,
    phase: &PhaseArtifact,
) -> Result<Settled, LoopError> {
    let round = state.verifying.unwrap_or(state.verify_rounds).max(1);
    let max_rounds = context.settings.verify.max_rounds.max(1);
    let id = context.record.id.clone();
    let dir = context.layout.iteration_dir(&id, state.iteration);
    let log = dir.join("validation.log");
    let validation_output = context
        .store(move |_, _| Ok(validation_log_tail(&log)))
        .await?;
    let input = VerificationInput {
        scope: VerificationScope::Phase(phase.name.clone()),
        tasks: phase.tasks.clone(),
        requirements: phase_requirements(context, phase).await?,
        baseline_dir: Some(context.layout.loop_dir(&id)),
        validation_output,
        round,
    };
    let verification = run_verification(context, input, dir.join("verification.jsonl")).await?;
    // The verification's tokens are in the loop's record now: counted on from there.
    let record_id = id.clone();
    if let Some(record) = context.store(move |db, _| Ok(db.get(&record_id)?)).await? {
        conversation.count_from(Usage {
            input_tokens: record.tokens_in,
            output_tokens: record.tokens_out,
            ..Usage::default()
        });
    }
    keep_round(context, &dir, &verification).await?;
    if let Some(phase_loop) = &context.record.parent {
        record_verification(context, phase_loop, phase.name.clone(), &verification).await?;
    }
    state.verifying = None;
    if !verification.blocking {
        context.progress(format!("verification round {round} passed"));
        conversation.add_user_text(verification_text::verification_passed(&verification));
        state.passed = true;
        conversation.commit(state).await?;
        return Ok(Settled::Complete);
    }
    context.progress(format!(
        "verification round {round}/{max_rounds} found {}",
        verification_text::findings_counted(&verification.report)
    ));
    conversation.add_user_text(verification_text::verification_findings(
        &verification,
        max_rounds,
        &check_again(context),
    ));
    let max_iterations = context.settings.code_max_iterations;
    let out_of_iterations = state.iteration >= state.last_allowed_iteration(max_iterations);
    state.iteration += 1;
    if let Some(limit) = stopping_limit(round, max_rounds, out_of_iterations, max_iterations) {
        // A retry has the model fix the findings, with its rounds anew.
        state.verify_rounds = 0;
        conversation.commit(state).await?;
        let worst = verification
            .report
            .findings
            .iter()
            .max_by_key(|finding| finding.severity)
            .map(|finding| {
                format!(
                    "{}:{}: {}",
                    finding.file,
                    finding.line,
                    verification_text::finding_text(finding)
                )
            });
        return Err(LoopError::VerificationBlocking {
            loop_id: id,
            phase: phase.name.clone(),
            rounds: round,
            limit,
            findings: verification_text::findings_counted(&verification.report),
            first: worst,
        });
    }
    Ok(Settled::Again)
}

/// The limit that stops a code loop whose round `round` still blocks, if one does: the
/// rounds `verify.max_rounds` allows, else the iterations (`out_of_iterations`).
fn stopping_limit(
    round: u32,
    max_rounds: u32,
    out_of_iterations: bool,
    max_iterations: u32,
) -> Option<VerifyLimit> {
    if round >= max_rounds {
        Some(VerifyLimit::Rounds { max_rounds })
    } else if out_of_iterations {
        Some(VerifyLimit::Iterations { max_iterations })
    } else {
        None
    }
}

/// The round's verification, kept in the validated iteration's directory too.
async fn keep_round(
    context: &LoopContext,
    dir: &std::path::Path,
    verification: &StoredVerification,
) -> Result<(), LoopError> {
    let store_error = |source| LoopError::Artifact {
        kind: "verification",
        source,
    };
    let json = serde_json::to_vec_pretty(verification)
        .map_err(|err| store_error(std::io::Error::other(err)))?;
    let path = dir.join("verification.json");
    context
        .store(move |_, _| write_atomic(&path, &json).map_err(store_error))
        .await
}

/// The requirements the phase is verified against (`PhaseRequirements::verified_against`;
/// a spec stored before requirements: its acceptance criteria as R1..Rn). Read on the
/// blocking pool.
async fn phase_requirements(
    context: &LoopContext,
    phase: &PhaseArtifact,
) -> Result<Vec<Requirement>, LoopError> {
    let Some(spec) = spec_of(context).await? else {
        return Ok(Vec::new());
    };
    Ok(PhaseRequirements::of_spec(&spec, &phase.name, None).verified_against(phase))
}

/// The spec of the phase this code loop implements, as far as it can be read (on the
/// blocking pool: a database read and a file).
async fn spec_of(context: &LoopContext) -> Result<Option<SpecArtifact>, LoopError> {
    let Some(parent) = context.record.parent.clone() else {
        return Ok(None);
    };
    context
        .store(move |db, layout| {
            Ok(db
                .get(&parent)
                .ok()
                .flatten()
                .and_then(|phase_record| spec_of_phase(&phase_record, layout)))
        })
        .await
}

/// The spec of phase loop `phase_record`, as far as it can be read. Blocking.
pub(super) fn spec_of_phase(
    phase_record: &LoopRecord,
    layout: &ProjectLayout,
) -> Option<SpecArtifact> {
    jobs::parent_artifact::<SpecArtifact>(phase_record, layout)
        .ok()
        .map(|(_, spec)| spec)
}

/// The bytes of the validation log's end a verification reads.
const VALIDATION_LOG_TAIL_BYTES: u64 = 64 * 1024;

/// The end of the validation log at `path` (where a runner sums up), read lossily so a
/// stray byte loses no more than itself; `None` when there is none.
fn validation_log_tail(path: &std::path::Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut log = std::fs::File::open(path).ok()?;
    let size = log.metadata().ok()?.len();
    let start = size.saturating_sub(VALIDATION_LOG_TAIL_BYTES);
    log.seek(SeekFrom::Start(start)).ok()?;
    let mut bytes = Vec::new();
    log.take(VALIDATION_LOG_TAIL_BYTES)
        .read_to_end(&mut bytes)
        .ok()?;
    // A line cut at the start is dropped whole.
    let whole_lines = match bytes.iter().position(|byte| *byte == b'\n') {
        Some(newline) if start > 0 => &bytes[newline + 1..],
        _ => &bytes[..],
    };
    Some(String::from_utf8_lossy(whole_lines).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_validation_log_with_a_stray_byte_is_read_to_its_bounded_end() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("validation.log");
        let mut bytes = "compiling\n".repeat(100_000).into_bytes();
        bytes.extend_from_slice(b"warning: \xff odd byte\ntest result: FAILED. 1 failed\n");
        std::fs::write(&log, &bytes).unwrap();
        let tail = validation_log_tail(&log).expect("the log is read");
        assert!(tail.ends_with("test result: FAILED. 1 failed\n"), "{tail}");
        assert!(tail.contains("warning: \u{fffd} odd byte"), "{tail}");
        assert!(
            tail.len() as u64 <= VALIDATION_LOG_TAIL_BYTES,
            "{} bytes read",
            tail.len()
        );
        assert_eq!(validation_log_tail(&dir.path().join("missing.log")), None);
    }

    fn stopped_by(limit: VerifyLimit) -> String {
        LoopError::VerificationBlocking {
            loop_id: crate::store::LoopId::generate(),
            phase: "print-version".to_owned(),
            rounds: 1,
            limit,
            findings: "1 critical finding".to_owned(),
            first: None,
        }
        .to_string()
    }

    #[test]
    fn a_loop_stopped_by_its_iterations_says_so_and_names_the_setting_that_raises_them() {
        let limit = stopping_limit(1, 3, true, 2).expect("stopped");
        assert_eq!(
            stopped_by(limit),
            "print-version: verification still fails after 1 round, and the phase's iterations \
             ran out first (code_max_iterations is 2); raise it for more: 1 critical finding"
        );
    }

    #[test]
    fn a_loop_stopped_by_its_rounds_names_verify_max_rounds() {
        let limit = stopping_limit(1, 1, true, 2).expect("stopped");
        assert_eq!(
            stopped_by(limit),
            "print-version: verification still fails after 1 round, all verify.max_rounds (1) \
             allows; raise it for more rounds: 1 critical finding"
        );
        assert_eq!(stopping_limit(1, 2, false, 5), None, "a round left");
    }
}
