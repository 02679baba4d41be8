//! The rules of a run of a plan or a spec, pure: which phases it covers, in what order, and
//! what it does next. Specs run after the specs they depend on, phases in their spec's order
//! (after the phases they depend on); a phase is done once a code loop's work stands for it
//! (`work_stands`: complete, approved when gated, neither undone nor rewound). The run
//! starts the first phase that is not done, waits while something it needs is under way
//! (an artifact not written or awaiting review, a code loop running or awaiting approval),
//! and stops when a loop it needs ended without success.

use crate::store::{LoopId, LoopRecord, LoopStatus, LoopType, runnable_phase, work_stands};

/// What a run does next.
#[derive(Debug, PartialEq)]
pub enum RunStep<'a> {
    /// Start a code loop for this phase.
    Start(&'a LoopRecord),
    /// Nothing to do until `on` moves.
    Wait { on: &'a LoopRecord, why: Waiting },
    /// `at` (a phase, a spec or the plan) cannot go on: the user retries or cancels.
    Stopped { at: &'a LoopRecord, reason: String },
    /// Every phase is done.
    Done,
}

/// Why a run waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// A plan, spec or phase whose artifact is not written yet.
    NotWritten,
    /// A plan, spec or phase whose artifact awaits the user's review.
    AwaitsReview,
    /// The phase's code loop is pending or running.
    CodeRuns,
    /// The phase's code loop is done and awaits the user's approval of its changes.
    CodeAwaitsApproval,
    /// The plan tree waits for its budget.
    Budget,
}

/// Where a run stands: its phases in order, how many are done, the one it is at and its
/// next step.
#[derive(Debug)]
pub struct RunView<'a> {
    /// The phases known so far, in the order the run takes them.
    pub phases: Vec<&'a LoopRecord>,
    /// How many of them are done.
    pub done: usize,
    /// The 1-based position of the phase the step is about, when it is about a phase.
    pub at: Option<usize>,
    pub step: RunStep<'a>,
}

impl RunView<'_> {
    /// `phase 3 of 7`, or `6 of 6 phases` once done.
    pub fn position(&self) -> String {
        match (&self.step, self.at) {
            (RunStep::Done, _) => format!("{} of {} phases done", self.done, self.phases.len()),
            (_, Some(at)) => format!("phase {at} of {}", self.phases.len()),
            _ => format!("{} of {} phases done", self.done, self.phases.len()),
        }
    }
}

impl RunView<'_> {
    /// `phase 3 of 7 (parse)`: the position, and the phase it is at.
    pub fn place(&self) -> String {
        let position = self.position();
        match self.at.and_then(|at| self.phases.get(at - 1)) {
            Some(phase) => format!("{position} ({})", phase.name.as_deref().unwrap_or("?")),
            None => position,
        }
    }

    /// Where the run stands, in words for a status list or a notice: `phase 3 of 7 (parse):
    /// its code loop runs`.
    pub fn words(&self) -> String {
        let at = self.place();
        match &self.step {
            RunStep::Start(_)
            | RunStep::Wait {
                why: Waiting::CodeRuns,
                ..
            } => {
                format!("{at}: its code loop runs")
            }
            RunStep::Wait { on, why } => match why {
                Waiting::NotWritten => format!("{at}: waits for {} to be written", on.label()),
                Waiting::AwaitsReview => format!("{at}: waits for the review of {}", on.label()),
                Waiting::CodeAwaitsApproval => format!("{at}: its changes await approval"),
                Waiting::Budget => format!("{at}: waits for the plan tree's budget"),
                Waiting::CodeRuns => format!("{at}: its code loop runs"),
            },
            RunStep::Stopped { reason, .. } => format!("stopped at {at}: {reason}"),
            RunStep::Done => at,
        }
    }
}

/// One stop on the run's way: a phase to implement, or a plan or spec it must wait for first.
enum Stop<'a> {
    Phase(&'a LoopRecord),
    Blocked(&'a LoopRecord, RunStep<'a>),
}

/// Where the run of `target` (a plan or spec loop) stands among `records` (the project's
/// loops as the user sees them, newest first). `current_code` is the code loop the run last
/// started or waited for: when it ended without success the run stops there; an older code
/// loop that failed does not stop it (a new run starts the phase again).
pub fn evaluate<'a>(
    target: &'a LoopRecord,
    records: &'a [LoopRecord],
    current_code: Option<&LoopId>,
) -> RunView<'a> {
    let mut stops = Vec::new();
    match target.loop_type {
        LoopType::Plan => match blocked(target) {
            Some(step) => stops.push(Stop::Blocked(target, step)),
            None => {
                for spec in in_order(children(records, target, LoopType::Spec)) {
                    spec_stops(spec, records, &mut stops);
                }
            }
        },
        _ => spec_stops(target, records, &mut stops),
    }
    let phases: Vec<&LoopRecord> = stops
        .iter()
        .filter_map(|stop| match stop {
            Stop::Phase(phase) => Some(*phase),
            Stop::Blocked(record, _) if record.loop_type == LoopType::Phase => Some(*record),
            Stop::Blocked(..) => None,
        })
        .collect();
    let mut done = 0;
    for stop in stops {
        let step = match stop {
            Stop::Blocked(_, step) => step,
            Stop::Phase(phase) => match phase_step(phase, records, current_code) {
                Some(step) => step,
                None => {
                    done += 1;
                    continue;
                }
            },
        };
        let at = match &step {
            RunStep::Start(phase) => Some(*phase),
            RunStep::Wait { on, .. } | RunStep::Stopped { at: on, .. } => Some(*on),
            RunStep::Done => None,
        }
        .and_then(|record| phase_of(record, records))
        .and_then(|phase| phases.iter().position(|known| known.id == phase.id))
        .map(|index| index + 1);
        return RunView {
            phases,
            done,
            at,
            step,
        };
    }
    RunView {
        done,
        phases,
        at: None,
        step: RunStep::Done,
    }
}

/// The phase a record is about: itself, or the phase a code loop implements.
fn phase_of<'a>(record: &'a LoopRecord, records: &'a [LoopRecord]) -> Option<&'a LoopRecord> {
    match record.loop_type {
        LoopType::Phase => Some(record),
        LoopType::Code => records
            .iter()
            .find(|phase| Some(&phase.id) == record.parent.as_ref()),
        _ => None,
    }
}

/// The stops of `spec`: it, when it holds the run up, else its phases in order.
fn spec_stops<'a>(spec: &'a LoopRecord, records: &'a [LoopRecord], stops: &mut Vec<Stop<'a>>) {
    if let Some(step) = blocked(spec) {
        stops.push(Stop::Blocked(spec, step));
        return;
    }
    for phase in in_order(children(records, spec, LoopType::Phase)) {
        match blocked(phase) {
            Some(step) => stops.push(Stop::Blocked(phase, step)),
            None => stops.push(Stop::Phase(phase)),
        }
    }
}

/// What an artifact loop the run needs holds it up with, if anything: it is not written,
/// awaits review or its budget, or ended without success.
fn blocked(record: &LoopRecord) -> Option<RunStep<'_>> {
    let wait = |why| Some(RunStep::Wait { on: record, why });
    match record.status {
        LoopStatus::Complete if record.iteration > 0 => None,
        LoopStatus::AwaitingApproval => wait(Waiting::AwaitsReview),
        LoopStatus::Paused => wait(Waiting::Budget),
        LoopStatus::Pending | LoopStatus::Running | LoopStatus::Complete => {
            wait(Waiting::NotWritten)
        }
        LoopStatus::Invalidated => Some(RunStep::Stopped {
            at: record,
            reason: format!("{} was replaced by a revision", record.label()),
        }),
        LoopStatus::Failed | LoopStatus::Cancelled | LoopStatus::Interrupted => {
            Some(RunStep::Stopped {
                at: record,
                reason: ended_without_success(record),
            })
        }
    }
}

/// What a runnable phase needs next; `None` once it is done.
fn phase_step<'a>(
    phase: &'a LoopRecord,
    records: &'a [LoopRecord],
    current_code: Option<&LoopId>,
) -> Option<RunStep<'a>> {
    debug_assert!(runnable_phase(phase));
    // Newest first, as the records are.
    let Some(code) = records.iter().find(|record| {
        record.loop_type == LoopType::Code && record.parent.as_ref() == Some(&phase.id)
    }) else {
        return Some(RunStep::Start(phase));
    };
    if work_stands(code) {
        return None;
    }
    match code.status {
        LoopStatus::AwaitingApproval => Some(RunStep::Wait {
            on: code,
            why: Waiting::CodeAwaitsApproval,
        }),
        LoopStatus::Paused => Some(RunStep::Wait {
            on: code,
            why: Waiting::Budget,
        }),
        LoopStatus::Pending | LoopStatus::Running => Some(RunStep::Wait {
            on: code,
            why: Waiting::CodeRuns,
        }),
        LoopStatus::Failed | LoopStatus::Cancelled | LoopStatus::Interrupted
            if current_code == Some(&code.id) =>
        {
            Some(RunStep::Stopped {
                at: code,
                reason: ended_without_success(code),
            })
        }
        // Undone, rewound, invalidated, or a failure from before this run: it runs again.
        _ => Some(RunStep::Start(phase)),
    }
}

/// `its code loop failed: tests fail`, `spec "cli" was cancelled`.
fn ended_without_success(record: &LoopRecord) -> String {
    let who = if record.loop_type == LoopType::Code {
        "its code loop".to_owned()
    } else {
        record.label()
    };
    let how = match record.status {
        LoopStatus::Cancelled => "was cancelled",
        LoopStatus::Interrupted => "was interrupted",
        _ => "failed",
    };
    match record.error.as_deref().map(str::trim) {
        Some(error) if !error.is_empty() => format!("{who} {how}: {error}"),
        _ => format!("{who} {how}"),
    }
}

/// The current children of `parent` of `loop_type` (not replaced by a revision), oldest
/// first.
fn children<'a>(
    records: &'a [LoopRecord],
    parent: &LoopRecord,
    loop_type: LoopType,
) -> Vec<&'a LoopRecord> {
    let mut children: Vec<&LoopRecord> = records
        .iter()
        .filter(|record| {
            record.loop_type == loop_type
                && record.parent.as_ref() == Some(&parent.id)
                && record.status != LoopStatus::Invalidated
        })
        .collect();
    children.reverse();
    children
}

/// `siblings` (oldest first) with each after the siblings it depends on; among those free
/// to go, the oldest first. A dependency on a name no sibling has is ignored, and a cycle
/// keeps the rest in creation order, so every sibling is taken once.
fn in_order(siblings: Vec<&LoopRecord>) -> Vec<&LoopRecord> {
    let mut left = siblings;
    let mut ordered: Vec<&LoopRecord> = Vec::with_capacity(left.len());
    while !left.is_empty() {
        let free = left.iter().position(|record| {
            record.depends_on.iter().all(|name| {
                !left
                    .iter()
                    .any(|other| other.name.as_deref() == Some(name.as_str()))
            })
        });
        ordered.push(left.remove(free.unwrap_or(0)));
    }
    ordered
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(
        loop_type: LoopType,
        parent: Option<&LoopRecord>,
        name: &str,
        status: LoopStatus,
        depends_on: &[&str],
    ) -> LoopRecord {
        LoopRecord {
            parent: parent.map(|parent| parent.id.clone()),
            name: Some(name.to_owned()),
            depends_on: depends_on.iter().map(|name| (*name).to_owned()).collect(),
            status,
            iteration: 1,
            ..LoopRecord::new_pending(loop_type, name, "{}".to_owned())
        }
    }

    /// A plan of specs `b` (depending on `a`, listed first) and `a`, each of phases `1`,
    /// `2` (`2` of `a` before `1`, which depends on it), all approved; newest first.
    fn tree() -> Vec<LoopRecord> {
        let plan = record(LoopType::Plan, None, "plan", LoopStatus::Complete, &[]);
        let b = record(
            LoopType::Spec,
            Some(&plan),
            "b",
            LoopStatus::Complete,
            &["a"],
        );
        let a = record(LoopType::Spec, Some(&plan), "a", LoopStatus::Complete, &[]);
        let phases = [
            record(LoopType::Phase, Some(&b), "b1", LoopStatus::Complete, &[]),
            record(LoopType::Phase, Some(&b), "b2", LoopStatus::Complete, &[]),
            record(
                LoopType::Phase,
                Some(&a),
                "a1",
                LoopStatus::Complete,
                &["a2"],
            ),
            record(LoopType::Phase, Some(&a), "a2", LoopStatus::Complete, &[]),
        ];
        let mut records = vec![plan, b, a];
        records.extend(phases);
        records.reverse();
        records
    }

    fn named<'a>(records: &'a [LoopRecord], name: &str) -> &'a LoopRecord {
        records
            .iter()
            .find(|record| record.name.as_deref() == Some(name))
            .expect(name)
    }

    /// A code loop of `phase` in `status`, as the newest loop.
    fn code(records: &mut Vec<LoopRecord>, phase: &str, status: LoopStatus) -> LoopId {
        let phase = named(records, phase).clone();
        let code = record(
            LoopType::Code,
            Some(&phase),
            phase.name.as_deref().unwrap_or(""),
            status,
            &[],
        );
        let id = code.id.clone();
        records.insert(0, code);
        id
    }

    fn plan(records: &[LoopRecord]) -> &LoopRecord {
        records
            .iter()
            .find(|record| record.loop_type == LoopType::Plan)
            .expect("plan")
    }

    fn started(view: &RunView<'_>) -> String {
        match &view.step {
            RunStep::Start(phase) => phase.name.clone().unwrap_or_default(),
            other => panic!("not a start: {other:?}"),
        }
    }

    #[test]
    fn specs_follow_their_dependencies_and_phases_theirs() {
        let records = tree();
        let view = evaluate(plan(&records), &records, None);
        let order: Vec<&str> = view
            .phases
            .iter()
            .filter_map(|phase| phase.name.as_deref())
            .collect();
        assert_eq!(order, ["a2", "a1", "b1", "b2"]);
        assert_eq!(started(&view), "a2");
        assert_eq!(view.position(), "phase 1 of 4");
    }

    #[test]
    fn a_phase_is_done_when_its_code_stands_and_runs_again_when_undone() {
        let mut records = tree();
        code(&mut records, "a2", LoopStatus::Complete);
        let id = code(&mut records, "a1", LoopStatus::Running);
        let view = evaluate(plan(&records), &records, Some(&id));
        assert_eq!(view.done, 1);
        assert_eq!(view.position(), "phase 2 of 4");
        assert!(matches!(
            view.step,
            RunStep::Wait {
                why: Waiting::CodeRuns,
                ..
            }
        ));
        records[0].status = LoopStatus::Complete;
        records[0].error = Some("undone: 1 file(s) restored".to_owned());
        assert_eq!(
            started(&evaluate(plan(&records), &records, Some(&id))),
            "a1"
        );
    }

    #[test]
    fn the_run_stops_where_its_code_loop_failed_but_not_for_an_older_failure() {
        let mut records = tree();
        let id = code(&mut records, "a2", LoopStatus::Failed);
        records[0].error = Some("tests fail".to_owned());
        let view = evaluate(plan(&records), &records, Some(&id));
        match &view.step {
            RunStep::Stopped { at, reason } => {
                assert_eq!(at.id, id);
                assert_eq!(reason, "its code loop failed: tests fail");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(view.position(), "phase 1 of 4");
        assert_eq!(started(&evaluate(plan(&records), &records, None)), "a2");
    }

    #[test]
    fn a_gated_code_loop_and_unwritten_specs_hold_the_run() {
        let mut records = tree();
        code(&mut records, "a2", LoopStatus::AwaitingApproval);
        let view = evaluate(plan(&records), &records, None);
        assert!(matches!(
            view.step,
            RunStep::Wait {
                why: Waiting::CodeAwaitsApproval,
                ..
            }
        ));
        let mut records = tree();
        code(&mut records, "a2", LoopStatus::Complete);
        code(&mut records, "a1", LoopStatus::Complete);
        for record in &mut records {
            if record.name.as_deref() == Some("b") {
                record.status = LoopStatus::Running;
            }
        }
        let view = evaluate(plan(&records), &records, None);
        match view.step {
            RunStep::Wait { on, why } => {
                assert_eq!(on.name.as_deref(), Some("b"));
                assert_eq!(why, Waiting::NotWritten);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            view.position(),
            "2 of 2 phases done",
            "b's phases are not known yet"
        );
    }

    #[test]
    fn a_spec_runs_only_its_phases_and_is_done_when_they_are() {
        let mut records = tree();
        let spec = named(&records, "b").clone();
        code(&mut records, "b1", LoopStatus::Complete);
        code(&mut records, "b2", LoopStatus::Complete);
        let view = evaluate(&spec, &records, None);
        assert_eq!(view.step, RunStep::Done);
        assert_eq!(view.position(), "2 of 2 phases done");
    }
}
