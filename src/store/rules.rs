//! The loop rules, each answered once: which loops an approval, a retry, a cancel or a code
//! loop reaches, which ones run or wait, and which were undone. Every rule reads a loop as the
//! user sees it (a running loop whose host is gone is `Interrupted`). The store's transactions,
//! the manager's choice of a default loop and the shells' replies and events all ask these
//! functions, so no shell keeps a copy of a rule (a shell that cannot call them, across a
//! process boundary, is sent their answers).

use serde::{Deserialize, Serialize};

use super::records::{LoopRecord, LoopStatus, LoopType};

/// How the note of a code loop whose changes were undone begins; the loop keeps its status.
pub const UNDONE_NOTE_PREFIX: &str = "undone:";

/// The word a status list shows for a loop whose changes were undone, in place of the status
/// it keeps for every rule.
pub const UNDONE_SHOWN_STATUS: &str = "undone";

/// How the note of a code loop whose changes a rewind took back begins; the loop keeps its
/// status, and a run of its plan or spec implements its phase again.
pub const REWOUND_NOTE_PREFIX: &str = "rewound:";

/// The word a status list shows for a loop whose changes a rewind took back.
pub const REWOUND_SHOWN_STATUS: &str = "rewound";

impl LoopStatus {
    /// Not finished: running, or able to run or be approved later.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            LoopStatus::Pending
                | LoopStatus::Running
                | LoopStatus::AwaitingApproval
                | LoopStatus::Paused
        )
    }

    /// Neither running nor waiting to run: nothing is under way for it, so what it last
    /// reported is over.
    pub fn is_idle(self) -> bool {
        !matches!(self, LoopStatus::Pending | LoopStatus::Running)
    }

    /// What a cancel ends: an active loop, or an interrupted one (its host is gone, so
    /// nothing else would ever stop it).
    pub fn is_cancellable(self) -> bool {
        self.is_active() || self == LoopStatus::Interrupted
    }
}

/// A code loop that holds the working tree: it runs, or it stopped midway with its changes in
/// the tree (awaiting their approval, or paused at its tree's budget), where another code loop
/// would edit over changes not yet reviewed and mix them into this phase's commit and rewind.
/// One code loop of a project works in the tree at a time; the others wait their turn, pending.
pub fn holds_working_tree(record: &LoopRecord) -> bool {
    record.loop_type == LoopType::Code
        && matches!(
            record.status,
            LoopStatus::Running | LoopStatus::AwaitingApproval | LoopStatus::Paused
        )
}

/// The code loop a pending code loop waits its turn for, among `records` (as the user sees
/// them: a running loop whose host is gone, interrupted, holds nothing).
pub fn code_turn_holder<'a>(
    record: &LoopRecord,
    records: &'a [LoopRecord],
) -> Option<&'a LoopRecord> {
    if record.loop_type != LoopType::Code || record.status != LoopStatus::Pending {
        return None;
    }
    records
        .iter()
        .find(|other| other.id != record.id && holds_working_tree(other))
}

/// The code loop whose changes are being committed (`committing`) that a pending code loop
/// waits its turn for: no code loop starts while a phase's commit is made.
pub fn waits_for_commit<'a>(
    record: &LoopRecord,
    committing: Option<&'a LoopRecord>,
) -> Option<&'a LoopRecord> {
    if record.loop_type != LoopType::Code || record.status != LoopStatus::Pending {
        return None;
    }
    committing.filter(|code| code.id != record.id)
}

/// A loop that ended without success, which a retry runs again.
pub fn retryable(status: LoopStatus) -> bool {
    matches!(
        status,
        LoopStatus::Failed | LoopStatus::Cancelled | LoopStatus::Interrupted
    )
}

/// How the note of a loop that failed because a loop it depends on ended begins.
pub const DEPENDENCY_ENDED_PREFIX: &str = "its dependency ";

/// The note of a loop that failed because its dependency `name` ended `status`.
pub fn dependency_ended_note(name: &str, status: LoopStatus) -> String {
    format!("{DEPENDENCY_ENDED_PREFIX}{name} ended {}", status.as_str())
}

/// A dependency of a loop that is not complete yet: its name, and the sibling of that name
/// (spawned by the same parent artifact) if there is one.
#[derive(Debug)]
pub struct Awaited<'a> {
    pub name: &'a str,
    pub sibling: Option<&'a LoopRecord>,
}

/// Whether `other` is a sibling of `record`: a loop of the same kind spawned by the same
/// parent artifact, among which dependencies are named. A verification below a spec or a
/// phase reads that same artifact and bears its name, yet is no sibling of the loops it
/// spawned (a phase never waits for it, nor fails with it).
pub fn siblings(record: &LoopRecord, other: &LoopRecord) -> bool {
    record.parent.is_some()
        && other.parent == record.parent
        && other.triggered_by == record.triggered_by
        && other.loop_type == record.loop_type
}

/// The dependencies of `record` that are not complete, among `records` (its siblings: the
/// loops of the same parent artifact count; others are ignored). A loop starts only when
/// none is left.
pub fn awaited<'a>(record: &'a LoopRecord, records: &'a [LoopRecord]) -> Vec<Awaited<'a>> {
    if record.parent.is_none() {
        return Vec::new();
    }
    record
        .depends_on
        .iter()
        .map(|name| Awaited {
            name: name.as_str(),
            sibling: records.iter().find(|sibling| {
                siblings(record, sibling) && sibling.name.as_deref() == Some(name.as_str())
            }),
        })
        .filter(|awaited| {
            awaited
                .sibling
                .is_none_or(|sibling| sibling.status != LoopStatus::Complete)
        })
        .collect()
}

/// What a retry of `target` runs again, `target` first: it, the loops it waits for that
/// ended without success (a loop cannot start before them), and the loops that failed
/// because one of these ended (they wait for it again), among `records`.
pub fn retried_with<'a>(target: &'a LoopRecord, records: &'a [LoopRecord]) -> Vec<&'a LoopRecord> {
    let mut retried = vec![target];
    let mut index = 0;
    while index < retried.len() {
        let current = retried[index];
        index += 1;
        let dependencies = awaited(current, records)
            .into_iter()
            .filter_map(|awaited| awaited.sibling)
            .filter(|sibling| retryable(sibling.status));
        let dependents = records.iter().filter(|other| {
            other.status == LoopStatus::Failed
                && siblings(current, other)
                && other
                    .error
                    .as_deref()
                    .is_some_and(|note| note.starts_with(DEPENDENCY_ENDED_PREFIX))
                && current
                    .name
                    .as_ref()
                    .is_some_and(|name| other.depends_on.contains(name))
        });
        for record in dependencies.chain(dependents).collect::<Vec<_>>() {
            if !retried.iter().any(|known| known.id == record.id) {
                retried.push(record);
            }
        }
    }
    retried
}

/// Whether `record` is work of its plan tree: every loop but a verification asked on demand,
/// which only reads. A tree's readiness and a retry without a loop named leave it out.
pub fn tree_work(record: &LoopRecord) -> bool {
    record.loop_type != LoopType::Verify
}

/// The loop a retry without a loop named takes, among `records` (newest first): the newest
/// loop of the tree's work that ended without success, or, when it waits for a loop that did
/// too, the loop at the root of that wait (retrying a loop whose dependency failed would
/// leave it waiting). A failed verification is retried only when named.
pub fn default_retry(records: &[LoopRecord]) -> Option<&LoopRecord> {
    let mut current = records
        .iter()
        .find(|record| tree_work(record) && retryable(record.status))?;
    // At most one step per loop, so a dependency cycle cannot hang it.
    for _ in 0..records.len() {
        let failed_dependency = awaited(current, records)
            .into_iter()
            .filter_map(|awaited| awaited.sibling)
            .find(|sibling| retryable(sibling.status));
        match failed_dependency {
            Some(dependency) => current = dependency,
            None => break,
        }
    }
    Some(current)
}

/// A pending loop the scheduler holds back because its plan tree reached its budget: its
/// `error` says so (a pending loop has no other error), until an approval or a budget that
/// allows more clears it, or the scheduler starts it.
pub fn held_at_budget(record: &LoopRecord) -> bool {
    held(record.status, record.error.as_deref())
}

fn held(status: LoopStatus, error: Option<&str>) -> bool {
    status == LoopStatus::Pending && error.is_some()
}

/// A loop that waits for its plan tree's budget: paused, or held before it started.
pub fn waits_for_budget(record: &LoopRecord) -> bool {
    record.status == LoopStatus::Paused || held_at_budget(record)
}

/// A loop that waits for the user's approval: its artifact waits for review, or it waits
/// for its plan tree's budget (an approval lets the tree go on). What an approval without
/// a loop named takes, newest first.
pub fn awaits_approval(record: &LoopRecord) -> bool {
    Standing::of(record.status, record.error.as_deref()).awaits_approval
}

/// A loop whose artifact the user may approve: one awaiting approval, or an artifact loop
/// whose revision or review failed after an earlier iteration produced an artifact (its last
/// good one).
pub fn approvable(record: &LoopRecord) -> bool {
    record.status == LoopStatus::AwaitingApproval
        || (record.status == LoopStatus::Failed
            && record.iteration > 0
            && record.loop_type != LoopType::Code)
}

/// A loop that may run again with the user's feedback: it has produced its artifact (a code
/// loop needs none: its feedback starts a new iteration) and it is neither running, nor
/// waiting to run, nor stale.
pub fn revisable(record: &LoopRecord) -> bool {
    !matches!(
        record.status,
        LoopStatus::Running | LoopStatus::Pending | LoopStatus::Invalidated
    ) && (record.iteration > 0 || record.loop_type == LoopType::Code)
}

/// A phase loop a code loop may start for: its artifact exists and is approved (a phase that
/// waits for review, or was invalidated, may not run).
pub fn runnable_phase(record: &LoopRecord) -> bool {
    record.loop_type == LoopType::Phase
        && record.iteration > 0
        && record.status == LoopStatus::Complete
}

/// A plan or spec loop a run of every phase of its tree may start for: one not replaced by a
/// revision (a run waits for what is not written or reviewed yet).
pub fn runs_as_a_tree(record: &LoopRecord) -> bool {
    matches!(record.loop_type, LoopType::Plan | LoopType::Spec)
        && record.status != LoopStatus::Invalidated
}

/// A phase or spec loop the working tree may be verified against: it has an artifact and was
/// not replaced by a revision (one that waits for review is verified against what it holds).
pub fn verifiable(record: &LoopRecord) -> bool {
    matches!(record.loop_type, LoopType::Phase | LoopType::Spec)
        && record.iteration > 0
        && record.status != LoopStatus::Invalidated
}

/// Whether a loop's error note says its changes were undone (it keeps the status it had).
pub fn undone(error: Option<&str>) -> bool {
    error.is_some_and(|note| note.starts_with(UNDONE_NOTE_PREFIX))
}

/// Whether a loop's error note says a rewind took its changes back (it keeps its status).
pub fn rewound(error: Option<&str>) -> bool {
    error.is_some_and(|note| note.starts_with(REWOUND_NOTE_PREFIX))
}

/// Whether a code loop's work stands in the working tree: it completed, and neither an undo
/// nor a rewind took its changes back. A plan or spec run counts a phase done by it.
pub fn work_stands(record: &LoopRecord) -> bool {
    record.loop_type == LoopType::Code
        && record.status == LoopStatus::Complete
        && !undone(record.error.as_deref())
        && !rewound(record.error.as_deref())
}

/// What a status list shows in a loop's status column: its status, or `undone` / `rewound`
/// when its changes were taken back. The loop keeps its status (a completed code loop stays
/// complete for retry, run and approval); only the user's view says what became of its work.
pub fn shown_status(status: LoopStatus, error: Option<&str>) -> &'static str {
    if undone(error) {
        UNDONE_SHOWN_STATUS
    } else if rewound(error) {
        REWOUND_SHOWN_STATUS
    } else {
        status.as_str()
    }
}

/// The part of a loop's error text that is a note about it, not an error: all of it once
/// its changes were undone or rewound (the note tells what was restored, and how the loop
/// had ended). A status list shows it apart from errors.
pub fn note(error: Option<&str>) -> Option<&str> {
    error.filter(|text| undone(Some(text)) || rewound(Some(text)))
}

/// Where a loop stands, as its status (as seen) and its error note say: what it waits for and
/// what the user may do with it. The shells show these answers and keep no rule of their own
/// (serialised as they are with every loop record and status event a shell sends on).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Standing {
    /// An approval without a loop named takes it: it awaits review, or its plan tree's
    /// budget (`awaits_approval`).
    pub awaits_approval: bool,
    /// Not finished (`LoopStatus::is_active`).
    pub active: bool,
    /// Neither running nor waiting to run: what it last reported is over
    /// (`LoopStatus::is_idle`).
    pub idle: bool,
    /// A cancel ends it (`LoopStatus::is_cancellable`).
    pub cancellable: bool,
    /// A retry runs it again (`retryable`).
    pub retryable: bool,
    /// Its changes were undone; it keeps its status (`undone`).
    pub undone: bool,
    /// A rewind took its changes back; it keeps its status (`rewound`).
    pub rewound: bool,
    /// The word a status column shows for it: its status, or `undone` (`shown_status`).
    pub shown_status: &'static str,
}

impl Standing {
    pub fn of(status: LoopStatus, error: Option<&str>) -> Standing {
        Standing {
            awaits_approval: status == LoopStatus::AwaitingApproval
                || status == LoopStatus::Paused
                || held(status, error),
            active: status.is_active(),
            idle: status.is_idle(),
            cancellable: status.is_cancellable(),
            retryable: retryable(status),
            undone: undone(error),
            rewound: rewound(error),
            shown_status: shown_status(status, error),
        }
    }

    pub fn of_record(record: &LoopRecord) -> Standing {
        Standing::of(record.status, record.error.as_deref())
    }
}

/// What the user means to do with the loops a shell lists (to complete a command's argument,
/// say): each purpose admits exactly the loops its action takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    /// Loops an approval without a loop named chooses from (`awaits_approval`).
    Approve,
    /// Loops a cancel ends (`LoopStatus::is_cancellable`).
    Cancel,
    /// Loops a retry runs again (`retryable`).
    Retry,
    /// Phase loops a code loop may start for (`runnable_phase`), and plans and specs a run
    /// of their phases may start for (`runs_as_a_tree`).
    Run,
}

impl Purpose {
    pub fn admits(self, record: &LoopRecord) -> bool {
        match self {
            Purpose::Approve => awaits_approval(record),
            Purpose::Cancel => record.status.is_cancellable(),
            Purpose::Retry => retryable(record.status),
            Purpose::Run => runnable_phase(record) || runs_as_a_tree(record),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUSES: [LoopStatus; 9] = [
        LoopStatus::Pending,
        LoopStatus::Running,
        LoopStatus::AwaitingApproval,
        LoopStatus::Complete,
        LoopStatus::Failed,
        LoopStatus::Cancelled,
        LoopStatus::Interrupted,
        LoopStatus::Invalidated,
        LoopStatus::Paused,
    ];

    fn record(status: LoopStatus, error: Option<&str>) -> LoopRecord {
        LoopRecord {
            status,
            error: error.map(str::to_owned),
            ..LoopRecord::new_pending(LoopType::Plan, "task", "{}".to_owned())
        }
    }

    #[test]
    fn a_standing_gives_the_answers_of_the_rules_it_names() {
        for status in STATUSES {
            for error in [
                None,
                Some("over budget"),
                Some("undone: 1 file(s) restored"),
            ] {
                let record = record(status, error);
                let standing = Standing::of_record(&record);
                assert_eq!(standing.awaits_approval, awaits_approval(&record));
                assert_eq!(standing.active, status.is_active());
                assert_eq!(standing.idle, status.is_idle());
                assert_eq!(standing.cancellable, Purpose::Cancel.admits(&record));
                assert_eq!(standing.retryable, Purpose::Retry.admits(&record));
                assert_eq!(
                    standing.undone,
                    error.is_some_and(|e| e.starts_with("undone:"))
                );
                assert_eq!(
                    standing.shown_status,
                    shown_status(status, error),
                    "{status:?} {error:?}"
                );
            }
        }
    }

    #[test]
    fn an_undone_loop_is_shown_as_undone_with_its_note_apart_from_errors() {
        let undone_note = Some("undone: 1 file(s) restored; it had ended with: tests fail");
        for status in STATUSES {
            assert_eq!(shown_status(status, undone_note), "undone");
            assert_eq!(note(undone_note), undone_note);
            assert_eq!(shown_status(status, Some("overloaded")), status.as_str());
            assert_eq!(shown_status(status, None), status.as_str());
        }
        assert_eq!(note(Some("overloaded")), None, "an error is no note");
        assert_eq!(note(None), None);
    }

    #[test]
    fn an_approval_takes_reviews_and_trees_waiting_for_their_budget() {
        let takes = |status, error| awaits_approval(&record(status, error));
        assert!(takes(LoopStatus::AwaitingApproval, None));
        assert!(takes(LoopStatus::Paused, Some("budget")));
        assert!(takes(LoopStatus::Pending, Some("budget")), "held");
        assert!(!takes(LoopStatus::Pending, None), "waits for a slot");
        assert!(!takes(LoopStatus::Failed, Some("overloaded")));
    }

    #[test]
    fn only_pending_and_running_loops_are_under_way() {
        let under_way: Vec<LoopStatus> = STATUSES.into_iter().filter(|s| !s.is_idle()).collect();
        assert_eq!(under_way, [LoopStatus::Pending, LoopStatus::Running]);
    }

    /// A plan's two specs, `b` depending on `a`, with the statuses and notes given.
    fn siblings(a: LoopStatus, b: (LoopStatus, Option<&str>)) -> Vec<LoopRecord> {
        let plan = record(LoopStatus::Complete, None);
        let spec = |name: &str, status, error: Option<&str>, depends_on: &[&str]| LoopRecord {
            parent: Some(plan.id.clone()),
            name: Some(name.to_owned()),
            triggered_by: Some("iterations/001/artifacts/plan.json".to_owned()),
            depends_on: depends_on.iter().map(|name| (*name).to_owned()).collect(),
            status,
            error: error.map(str::to_owned),
            ..LoopRecord::new_pending(LoopType::Spec, "task", "{}".to_owned())
        };
        let failed_note = dependency_ended_note("a", LoopStatus::Failed);
        let b_error = b.1.map(|note| {
            if note == "dependency" {
                failed_note.as_str()
            } else {
                note
            }
        });
        // Newest first, as the store lists them: b after a.
        vec![
            spec("b", b.0, b_error, &["a"]),
            spec("a", a, None, &[]),
            plan,
        ]
    }

    #[test]
    fn a_retry_without_a_loop_takes_the_failed_loop_others_wait_on() {
        let records = siblings(LoopStatus::Failed, (LoopStatus::Failed, Some("dependency")));
        let chosen = default_retry(&records).expect("a loop to retry");
        assert_eq!(chosen.name.as_deref(), Some("a"));
        let retried: Vec<_> = retried_with(chosen, &records)
            .iter()
            .map(|record| record.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(retried, ["a", "b"], "the dependent waits for it again");
        let dependent = &records[0];
        let retried: Vec<_> = retried_with(dependent, &records)
            .iter()
            .map(|record| record.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(
            retried,
            ["b", "a"],
            "a dependent named takes its failed root along"
        );
    }

    #[test]
    fn a_loop_that_failed_for_itself_is_retried_alone_and_waits_for_what_is_not_complete() {
        let records = siblings(
            LoopStatus::Running,
            (LoopStatus::Failed, Some("overloaded")),
        );
        let chosen = default_retry(&records).expect("a loop to retry");
        assert_eq!(chosen.name.as_deref(), Some("b"));
        assert_eq!(retried_with(chosen, &records).len(), 1);
        let waits: Vec<_> = awaited(chosen, &records).iter().map(|a| a.name).collect();
        assert_eq!(waits, ["a"]);
        let done = siblings(LoopStatus::Complete, (LoopStatus::Pending, None));
        assert!(awaited(&done[0], &done).is_empty());
    }

    /// A loop of `loop_type` named `name` below `parent`, spawned by its first artifact.
    fn child(
        loop_type: LoopType,
        parent: &LoopRecord,
        name: &str,
        status: LoopStatus,
        depends_on: &[&str],
    ) -> LoopRecord {
        LoopRecord {
            parent: Some(parent.id.clone()),
            name: Some(name.to_owned()),
            triggered_by: Some("iterations/001/artifacts/spec.json".to_owned()),
            depends_on: depends_on.iter().map(|name| (*name).to_owned()).collect(),
            status,
            ..LoopRecord::new_pending(loop_type, "task", "{}".to_owned())
        }
    }

    /// A complete loop of `loop_type` with its artifact.
    fn approved(loop_type: LoopType) -> LoopRecord {
        LoopRecord {
            loop_type,
            iteration: 1,
            ..record(LoopStatus::Complete, None)
        }
    }

    #[test]
    fn a_retry_without_a_loop_takes_the_failed_code_loop_not_a_failed_verification() {
        let phase = approved(LoopType::Phase);
        let code = child(LoopType::Code, &phase, "parse", LoopStatus::Failed, &[]);
        // The verification the user asked of the phase, after the code loop stopped at its
        // findings, was cancelled: it is the newest loop that ended without success.
        let verify = child(
            LoopType::Verify,
            &phase,
            "parse",
            LoopStatus::Cancelled,
            &[],
        );
        let records = vec![verify, code, phase];
        let chosen = default_retry(&records).expect("a loop to retry");
        assert_eq!(chosen.loop_type, LoopType::Code, "{chosen:?}");
        assert_eq!(chosen.id, records[1].id);
        assert!(tree_work(&records[1]) && !tree_work(&records[0]));
        let only_verify = vec![records[0].clone(), records[2].clone()];
        assert!(
            default_retry(&only_verify).is_none(),
            "a verification is retried only when named"
        );
    }

    #[test]
    fn a_verification_below_a_spec_is_no_sibling_of_its_phases() {
        let spec = approved(LoopType::Spec);
        // A phase named like its spec failed; the spec's verification bears the spec's name
        // and reads the same artifact the phases were spawned by, and it completed.
        let failed = child(LoopType::Phase, &spec, "cli", LoopStatus::Failed, &[]);
        let waiting = child(
            LoopType::Phase,
            &spec,
            "print",
            LoopStatus::Pending,
            &["cli"],
        );
        let verify = child(LoopType::Verify, &spec, "cli", LoopStatus::Complete, &[]);
        let records = vec![verify, waiting, failed, spec];
        let waits = awaited(&records[1], &records);
        assert_eq!(waits.len(), 1, "print still waits for phase cli: {waits:?}");
        assert_eq!(
            waits[0].sibling.map(|sibling| &sibling.id),
            Some(&records[2].id),
            "the phase named cli, not the verification"
        );
        assert!(!super::siblings(&records[1], &records[0]));
        let retried: Vec<LoopType> = retried_with(&records[2], &records)
            .iter()
            .map(|record| record.loop_type)
            .collect();
        assert_eq!(retried, [LoopType::Phase], "{retried:?}");
    }

    #[test]
    fn a_pending_code_loop_waits_its_turn_while_another_code_loop_runs() {
        let phase = approved(LoopType::Phase);
        let running = child(LoopType::Code, &phase, "parse", LoopStatus::Running, &[]);
        let waiting = child(LoopType::Code, &phase, "print", LoopStatus::Pending, &[]);
        let plan = record(LoopStatus::Running, None);
        let records = vec![waiting.clone(), running.clone(), plan.clone()];
        assert_eq!(
            code_turn_holder(&waiting, &records).map(|holder| &holder.id),
            Some(&running.id)
        );
        assert!(code_turn_holder(&running, &records).is_none(), "it runs");
        assert!(
            code_turn_holder(&plan, &records).is_none(),
            "only code loops wait"
        );
        for stopped_midway in [LoopStatus::AwaitingApproval, LoopStatus::Paused] {
            let holder = LoopRecord {
                status: stopped_midway,
                ..running.clone()
            };
            assert!(
                code_turn_holder(&waiting, &[waiting.clone(), holder]).is_some(),
                "its changes are still in the tree: {stopped_midway:?}"
            );
        }
        let interrupted = LoopRecord {
            status: LoopStatus::Interrupted,
            ..running
        };
        assert!(
            code_turn_holder(&waiting, &[waiting.clone(), interrupted]).is_none(),
            "a loop whose host is gone holds nothing"
        );
    }

    #[test]
    fn a_code_loop_starts_only_for_a_complete_phase_with_an_artifact() {
        let phase = |status, iteration| LoopRecord {
            loop_type: LoopType::Phase,
            iteration,
            ..record(status, None)
        };
        assert!(runnable_phase(&phase(LoopStatus::Complete, 1)));
        assert!(!runnable_phase(&phase(LoopStatus::Complete, 0)));
        assert!(!runnable_phase(&phase(LoopStatus::AwaitingApproval, 1)));
        assert!(!runnable_phase(&phase(LoopStatus::Invalidated, 1)));
        assert!(!runnable_phase(&LoopRecord {
            iteration: 1,
            ..record(LoopStatus::Complete, None)
        }));
    }
}
