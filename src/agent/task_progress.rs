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
    stored_progress(layout, phase)
        .filter(|stored| stored.iteration == iteration)
        .map(|stored| stored.done)
        .unwrap_or_default()
}

/// What `task_progress.json` of the phase loop `phase` holds, if it can be read.
fn stored_progress(layout: &ProjectLayout, phase: &LoopId) -> Option<StoredProgress> {
    let path = layout.task_progress(phase);
    let bytes = std::fs::read(&path).ok()?;
    serde_json::from_slice(&bytes)
        .map_err(|err| {
            tracing::warn!(path = %path.display(), error = %err, "unreadable task progress; no task counts as done");
        })
        .ok()
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
    // The phase's artifact is a file read and parsed: the blocking pool's work.
    let code_loop = context.record.clone();
    let phase = context
        .store(move |_, layout| {
            jobs::parent_artifact::<PhaseArtifact>(&code_loop, layout).map_err(LoopError::Job)
        })
        .await;
    let ticked = match phase {
        Ok((_, phase)) => {
            let every = (1..=phase.tasks.len()).collect();
            record(context, &phase, every).await.map(drop)
        }
        Err(err) => Err(err),
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
    let id = phase_id.clone();
    let ticked = context
        .store(move |_, layout| {
            store_ticks(layout, &id, iteration, numbers, &task_lines).map_err(|source| {
                LoopError::Artifact {
                    kind: "task progress",
                    source,
                }
            })
        })
        .await?;
    let Some((done, markdown_path)) = ticked else {
        tracing::info!(loop_id = %context.record.id, "the phase was revised since; its progress is left alone");
        return Ok(BTreeSet::new());
    };
    context.events.emit(LoopEvent::TasksUpdated {
        loop_id: phase_id,
        markdown_path,
        done: done.iter().copied().collect(),
    });
    Ok(done)
}

/// Adds `numbers` to the done tasks of iteration `iteration` of the phase loop `phase_id`'s
/// artifact, stores them and ticks its phase.md (whose tasks are on `task_lines`); returns
/// every done task and phase.md's path. Leaves everything as it is (`None`) when progress of a
/// newer iteration is stored: the phase was revised since the loop started.
fn store_ticks(
    layout: &ProjectLayout,
    phase_id: &LoopId,
    iteration: u32,
    numbers: BTreeSet<usize>,
    task_lines: &[u32],
) -> std::io::Result<Option<(BTreeSet<usize>, PathBuf)>> {
    let stored = stored_progress(layout, phase_id);
    if stored
        .as_ref()
        .is_some_and(|stored| stored.iteration > iteration)
    {
        return Ok(None);
    }
    let mut done = stored
        .filter(|stored| stored.iteration == iteration)
        .map(|stored| stored.done)
        .unwrap_or_default();
    done.extend(numbers);
    let stored = StoredProgress {
        iteration,
        done: done.clone(),
    };
    let json = serde_json::to_vec_pretty(&stored).map_err(std::io::Error::other)?;
    write_atomic(&layout.task_progress(phase_id), &json)?;
    let markdown_path = tick_markdown(layout, phase_id, iteration, task_lines, &done)?;
    Ok(Some((done, markdown_path)))
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
pub(super) fn iteration_of(relative: &str) -> Option<u32> {
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

    /// A phase loop with iterations 1 and 2 of a two-task phase stored, as the store lays
    /// them out.
    fn revised_phase(layout: &ProjectLayout) -> (LoopId, Vec<u32>) {
        let phase: PhaseArtifact = serde_json::from_value(serde_json::json!({
            "name": "p", "title": "P", "objective": "O",
            "tasks": [{"description": "First"}, {"description": "Second"}],
            "validation_command": "true"
        }))
        .expect("phase");
        let id = LoopId::generate();
        for iteration in [1, 2] {
            let dir = layout.artifacts_dir(&id, iteration);
            std::fs::create_dir_all(&dir).expect("artifacts");
            let markdown = crate::artifacts::render_phase_markdown(&phase);
            std::fs::write(dir.join("phase.md"), markdown).expect("phase.md");
        }
        (id, render_phase(&phase).task_lines)
    }

    fn boxes(layout: &ProjectLayout, id: &LoopId, iteration: u32) -> Vec<String> {
        let path = layout.artifacts_dir(id, iteration).join("phase.md");
        std::fs::read_to_string(path)
            .expect("phase.md")
            .lines()
            .filter(|line| line.starts_with("- ["))
            .map(|line| line[..8].to_owned())
            .collect()
    }

    #[test]
    fn ticks_add_up_for_their_iteration_and_a_revision_starts_unticked() {
        let temp = tempfile::tempdir().expect("temp");
        let layout = ProjectLayout::new(&temp.path().join("home"), temp.path());
        let (id, lines) = revised_phase(&layout);
        assert!(done_tasks(&layout, &id, 1).is_empty(), "nothing stored");

        store_ticks(&layout, &id, 1, BTreeSet::from([2]), &lines).expect("stored");
        let (done, path) = store_ticks(&layout, &id, 1, BTreeSet::from([1]), &lines)
            .expect("stored")
            .expect("ticked");
        assert_eq!(done, BTreeSet::from([1, 2]));
        assert_eq!(path, layout.artifacts_dir(&id, 1).join("phase.md"));
        assert_eq!(boxes(&layout, &id, 1), ["- [x] 1.", "- [x] 2."]);
        assert_eq!(done_tasks(&layout, &id, 1), BTreeSet::from([1, 2]));
        assert!(
            done_tasks(&layout, &id, 2).is_empty(),
            "a revised phase starts unticked"
        );

        store_ticks(&layout, &id, 2, BTreeSet::from([2]), &lines).expect("stored");
        assert_eq!(boxes(&layout, &id, 2), ["- [ ] 1.", "- [x] 2."]);
        assert_eq!(
            store_ticks(&layout, &id, 1, BTreeSet::from([1]), &lines).expect("read"),
            None,
            "a loop of the older iteration leaves the newer one's progress alone"
        );
        assert_eq!(done_tasks(&layout, &id, 2), BTreeSet::from([2]));
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
