//! Which tasks of a phase are done: the ones the code loop marks with `mark_tasks_done` as it
//! goes, and every one once the phase is complete. Kept beside the phase loop's artifact
//! (`task_progress.json`), not as a new iteration, and for the artifact iteration it was made
//! for, so a revised phase starts with nothing ticked. Each change ticks the boxes of that
//! iteration's phase.md in place and tells the shells, which show the file again.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::context::{LoopContext, LoopError};
use super::events::{LoopEvent, NoticeLevel};
use super::jobs;
use super::turn::CallResult;
use crate::artifacts::{PhaseArtifact, render_phase, set_task_boxes};
use crate::llm::ToolSpec;
use crate::schema::input_schema_for;
use crate::store::{LoopId, LoopRecord, ProjectLayout, write_atomic, write_atomic_keeping_mode};
use crate::tools::parse_input;

pub const MARK_TASKS_DONE: &str = "mark_tasks_done";

/// Say which of the phase's tasks are done.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct MarkTasksDoneInput {
    /// The numbers of the tasks now done, as phase.md numbers them (the first task is 1).
    tasks: Vec<usize>,
}

/// The `mark_tasks_done` tool as offered to a code loop's model.
pub(super) fn mark_tasks_done_spec() -> ToolSpec {
    ToolSpec::offered(
        MARK_TASKS_DONE,
        "Call as you finish tasks of the phase, with their numbers as phase.md shows them, so \
         the user sees them ticked. Tasks marked before stay done.",
        &input_schema_for::<MarkTasksDoneInput>(),
        Some(serde_json::json!({"tasks": [1, 2]})),
    )
}

/// `task_progress.json`.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
struct StoredProgress {
    /// The phase loop's artifact iteration the ticks were made for.
    iteration: u32,
    /// The numbers of the done tasks, from 1.
    done: BTreeSet<usize>,
}

/// The numbers of the done tasks of iteration `iteration` of the phase loop `phase`'s
/// artifact: none when nothing was stored for that iteration.
pub fn done_tasks(layout: &ProjectLayout, phase: &LoopId, iteration: u32) -> BTreeSet<usize> {
    let path = layout.task_progress(phase);
    let stored = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice::<StoredProgress>(&bytes).map_err(|err| {
            tracing::warn!(path = %path.display(), error = %err, "unreadable task progress; no task counts as done");
        }),
        Err(_) => Err(()),
    };
    stored
        .ok()
        .filter(|stored| stored.iteration == iteration)
        .map(|stored| stored.done)
        .unwrap_or_default()
}

/// Answers the code loop's `mark_tasks_done` call on `phase`: a number that is no task's is
/// refused (nothing is marked) with the numbers there are.
pub(super) async fn mark_tasks_done(
    context: &LoopContext,
    phase: &PhaseArtifact,
    input: Value,
) -> Result<CallResult, LoopError> {
    let input = match parse_input::<MarkTasksDoneInput>(MARK_TASKS_DONE, input) {
        Ok(input) => input,
        Err(err) => return Ok(CallResult::error(err.to_string())),
    };
    let count = phase.tasks.len();
    let numbers = match checked_numbers(&input.tasks, count) {
        Ok(numbers) => numbers,
        Err(refusal) => return Ok(CallResult::error(refusal)),
    };
    let done = record(context, phase, numbers.clone()).await?;
    let named: Vec<String> = numbers.iter().map(ToString::to_string).collect();
    Ok(CallResult::ok(format!(
        "Marked task{} {} done in phase.md ({} of {count} done).",
        if named.len() == 1 { "" } else { "s" },
        named.join(", "),
        done.len()
    )))
}

/// Once a code loop completed its phase, every task counts as done. Its code is done whatever
/// happens here: a failure to store the ticks is only told.
pub(super) async fn mark_all_done(context: &LoopContext) {
    let ticked = match jobs::parent_artifact::<PhaseArtifact>(&context.record, &context.layout) {
        Ok((_, phase)) => {
            let every = (1..=phase.tasks.len()).collect();
            record(context, &phase, every).await.map(drop)
        }
        Err(err) => Err(LoopError::Job(err)),
    };
    if let Err(err) = ticked {
        tracing::warn!(loop_id = %context.record.id, error = %err, "the tasks of a complete phase could not be ticked");
        context.events.emit(LoopEvent::Notice {
            loop_id: context.record.id.to_string(),
            level: NoticeLevel::Warn,
            message: format!(
                "the phase is complete, but its tasks could not be ticked in phase.md: {err}"
            ),
        });
    }
}

/// `numbers` as a set, or why they are refused: each must be a task's number, 1 to `count`.
fn checked_numbers(numbers: &[usize], count: usize) -> Result<BTreeSet<usize>, String> {
    let numbering = match count {
        1 => "phase.md has one task, number 1".to_owned(),
        _ => format!("phase.md numbers its tasks 1 to {count}"),
    };
    if numbers.is_empty() {
        return Err(format!(
            "no task numbers given: {numbering}; call {MARK_TASKS_DONE} with the numbers of \
             the tasks you finished"
        ));
    }
    let missing: Vec<String> = numbers
        .iter()
        .filter(|number| **number == 0 || **number > count)
        .map(ToString::to_string)
        .collect();
    match missing.as_slice() {
        [] => Ok(numbers.iter().copied().collect()),
        [one] => Err(format!(
            "task {one} does not exist: {numbering}; call {MARK_TASKS_DONE} again with those \
             numbers"
        )),
        several => Err(format!(
            "tasks {} do not exist: {numbering}; call {MARK_TASKS_DONE} again with those \
             numbers",
            several.join(", ")
        )),
    }
}

/// Adds `numbers` to the done tasks of the phase artifact the code loop of `context`
/// implements, stores them, ticks its phase.md and tells the shells; returns every done task.
async fn record(
    context: &LoopContext,
    phase: &PhaseArtifact,
    numbers: BTreeSet<usize>,
) -> Result<BTreeSet<usize>, LoopError> {
    let (phase_id, iteration) = implemented_artifact(&context.record)?;
    let task_lines = render_phase(phase).task_lines;
    let store_error = |source| LoopError::Artifact {
        kind: "task progress",
        source,
    };
    let id = phase_id.clone();
    let (done, markdown_path) = context
        .store(move |_, layout| {
            let mut done = done_tasks(layout, &id, iteration);
            done.extend(numbers);
            let stored = StoredProgress {
                iteration,
                done: done.clone(),
            };
            let json = serde_json::to_vec_pretty(&stored)
                .map_err(|err| store_error(std::io::Error::other(err)))?;
            write_atomic(&layout.task_progress(&id), &json).map_err(store_error)?;
            let markdown_path =
                tick_markdown(layout, &id, iteration, &task_lines, &done).map_err(store_error)?;
            Ok((done, markdown_path))
        })
        .await?;
    context.events.emit(LoopEvent::TasksUpdated {
        loop_id: phase_id,
        markdown_path,
        done: done.iter().copied().collect(),
    });
    Ok(done)
}

/// Ticks the boxes of `done` in the phase.md of iteration `iteration` of `phase_id`, in place;
/// returns its path.
fn tick_markdown(
    layout: &ProjectLayout,
    phase_id: &LoopId,
    iteration: u32,
    task_lines: &[u32],
    done: &BTreeSet<usize>,
) -> std::io::Result<PathBuf> {
    let path = layout.artifacts_dir(phase_id, iteration).join("phase.md");
    let markdown = std::fs::read_to_string(&path)?;
    let ticked: Vec<bool> = (1..=task_lines.len())
        .map(|number| done.contains(&number))
        .collect();
    let boxed = set_task_boxes(&markdown, task_lines, &ticked);
    if boxed != markdown {
        write_atomic_keeping_mode(&path, boxed.as_bytes())?;
    }
    Ok(path)
}

/// The phase loop a code loop implements, and the iteration of its artifact the code loop was
/// started for (`triggered_by`: `iterations/NNN/artifacts/phase.json`).
fn implemented_artifact(record: &LoopRecord) -> Result<(LoopId, u32), LoopError> {
    let iteration = record.triggered_by.as_deref().and_then(iteration_of);
    match (&record.parent, iteration) {
        (Some(parent), Some(iteration)) => Ok((parent.clone(), iteration)),
        _ => Err(LoopError::Artifact {
            kind: "task progress",
            source: std::io::Error::other(format!(
                "the code loop records no phase artifact it implements (parent {:?}, artifact {:?})",
                record.parent, record.triggered_by
            )),
        }),
    }
}

/// The iteration of `iterations/NNN/...`, a path relative to a loop's directory.
fn iteration_of(relative: &str) -> Option<u32> {
    let mut parts = Path::new(relative).components();
    if parts.next()?.as_os_str() != "iterations" {
        return None;
    }
    parts.next()?.as_os_str().to_str()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_that_is_no_task_is_refused_with_the_numbers_there_are() {
        assert_eq!(
            checked_numbers(&[3], 2),
            Err(
                "task 3 does not exist: phase.md numbers its tasks 1 to 2; call \
                 mark_tasks_done again with those numbers"
                    .to_owned()
            )
        );
        assert_eq!(
            checked_numbers(&[0, 1, 4], 1),
            Err(
                "tasks 0, 4 do not exist: phase.md has one task, number 1; call \
                 mark_tasks_done again with those numbers"
                    .to_owned()
            )
        );
        assert_eq!(
            checked_numbers(&[], 3),
            Err(
                "no task numbers given: phase.md numbers its tasks 1 to 3; call \
                 mark_tasks_done with the numbers of the tasks you finished"
                    .to_owned()
            )
        );
        assert_eq!(checked_numbers(&[2, 1, 2], 3), Ok(BTreeSet::from([1, 2])));
    }

    #[test]
    fn progress_counts_only_for_the_iteration_it_was_made_for() {
        let temp = tempfile::tempdir().expect("temp");
        let layout = ProjectLayout::new(&temp.path().join("home"), temp.path());
        let phase = LoopId::generate();
        assert!(done_tasks(&layout, &phase, 1).is_empty(), "nothing stored");
        std::fs::create_dir_all(layout.loop_dir(&phase)).expect("loop dir");
        let stored = StoredProgress {
            iteration: 1,
            done: BTreeSet::from([2]),
        };
        std::fs::write(
            layout.task_progress(&phase),
            serde_json::to_vec(&stored).expect("json"),
        )
        .expect("stored");
        assert_eq!(done_tasks(&layout, &phase, 1), BTreeSet::from([2]));
        assert!(
            done_tasks(&layout, &phase, 2).is_empty(),
            "a revised phase starts unticked"
        );
    }

    #[test]
    fn the_iteration_comes_from_the_artifact_path() {
        assert_eq!(
            iteration_of("iterations/012/artifacts/phase.json"),
            Some(12)
        );
        assert_eq!(iteration_of("artifacts/phase.json"), None);
    }
}
