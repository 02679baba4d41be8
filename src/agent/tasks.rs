//! The tasks of phase artifacts, as places in the project: what a shell's task list shows.
//!
//! A task without a file points at its line in phase.md. That line comes from rendering
//! phase.json again, not from reading phase.md: phase.md is written by the same renderer from
//! the same JSON, so the lines agree, and no text the model wrote (an objective with a
//! "## Tasks" heading, a description that reads like a numbered list) can be mistaken for a
//! task. Re-rendering also needs no second file per artifact and works for artifacts stored
//! before the renderer reported lines.

use std::path::PathBuf;

use super::plan_tree::PlanTrees;
use super::task_progress::done_tasks;
use crate::artifacts::{PhaseArtifact, TaskAction, render_phase};
use crate::store::{LoopId, LoopRecord, LoopStatus, LoopType, ProjectLayout};
use crate::tools::ProjectRoot;

/// Which phases to list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PhaseSelector {
    /// Every current phase of the project.
    All,
    /// The phase a name means (`spec/phase` where specs share it).
    Named(String),
    /// The phase loop with this id; the manager takes another loop's id for its plan.
    Loop(String),
    /// The phases of the plan tree whose root is this plan loop.
    Plan(LoopId),
    /// The current plan's: the manager picks the newest plan with phases.
    CurrentPlan,
}

/// The tasks a list shows, and the plan they were picked from when the project has other
/// plans with phases too (so the list can say which).
#[derive(Clone, Debug, PartialEq)]
pub struct TaskList {
    pub plan: Option<LoopRecord>,
    pub phases: Vec<PhaseTasks>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PhaseTasks {
    pub loop_id: String,
    pub name: String,
    pub title: String,
    pub markdown_path: PathBuf,
    pub tasks: Vec<TaskPlace>,
}

/// One task at one place: the file it touches (which may not exist yet, for `create`), or
/// the task's line in phase.md when it names no file.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskPlace {
    pub path: PathBuf,
    /// Zero-based.
    pub line: u32,
    pub text: String,
    /// One-based, as phase.md numbers them.
    pub task_index: usize,
    pub action: Option<TaskAction>,
    /// The code loop marked it done, or completed its phase (`task_progress`).
    pub done: bool,
}

/// A current phase, whose tasks a list shows: not invalidated, with an artifact.
pub fn listed_phase(record: &LoopRecord) -> bool {
    record.loop_type == LoopType::Phase
        && record.status != LoopStatus::Invalidated
        && record.iteration > 0
}

/// The current phases (`listed_phase`) matching `selector`, oldest first (`CurrentPlan`
/// picks none: the manager resolves it).
pub fn phase_tasks(
    records: &[LoopRecord],
    selector: &PhaseSelector,
    root: &ProjectRoot,
    layout: &ProjectLayout,
) -> Vec<PhaseTasks> {
    let trees = PlanTrees::of(records);
    records
        .iter()
        .rev()
        .filter(|record| listed_phase(record))
        .filter(|record| match selector {
            PhaseSelector::All => true,
            PhaseSelector::Named(name) => record.name.as_deref() == Some(name.as_str()),
            PhaseSelector::Loop(id) => record.id.as_str() == id,
            PhaseSelector::Plan(plan) => &trees.root(&record.id) == plan,
            PhaseSelector::CurrentPlan => false,
        })
        .filter_map(|record| {
            let artifacts = layout.artifacts_dir(&record.id, record.iteration);
            let markdown_path = artifacts.join("phase.md");
            let phase: PhaseArtifact = super::jobs::current_artifact(record, layout).ok()?;
            let task_lines = render_phase(&phase).task_lines;
            let done = done_tasks(layout, &record.id, record.iteration);
            let tasks = phase
                .tasks
                .iter()
                .enumerate()
                .map(|(index, task)| {
                    let text = match task.action {
                        Some(action) => format!("{}: {}", action.as_str(), task.description),
                        None => task.description.clone(),
                    };
                    let (path, line) = match &task.file {
                        Some(file) => (root.path().join(file), 0),
                        None => (
                            markdown_path.clone(),
                            task_lines.get(index).copied().unwrap_or(0),
                        ),
                    };
                    TaskPlace {
                        path,
                        line,
                        text,
                        task_index: index + 1,
                        action: task.action,
                        done: done.contains(&(index + 1)),
                    }
                })
                .collect();
            Some(PhaseTasks {
                loop_id: record.id.to_string(),
                name: phase.name,
                title: phase.title,
                markdown_path,
                tasks,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LoopRecord;

    /// A phase whose objective and descriptions look like the task list: nothing but the
    /// renderer can say where the tasks are.
    fn tricky_phase() -> serde_json::Value {
        serde_json::json!({
            "name": "tricky",
            "title": "Tricky",
            "objective": "Steps so far:\n\n## Tasks\n\n1. an old step\n2. another\n3. and one more",
            "tasks": [
                {"description": "Explain the flag\n\n## Tasks\n3. in two lines"},
                {"description": "Edit main", "file": "src/main.rs", "action": "modify"},
                {"description": "Describe\nthe result"}
            ],
            "validation_command": "true",
            "success_criteria": ["done"]
        })
    }

    #[test]
    fn tasks_without_a_file_point_at_their_line_in_phase_md() {
        let temp = tempfile::tempdir().expect("tempdir");
        let project = temp.path().join("project");
        std::fs::create_dir_all(&project).expect("project");
        let root = ProjectRoot::new(&project).expect("root");
        let layout = ProjectLayout::new(&temp.path().join("home"), root.path());
        let mut record = LoopRecord::new_pending(LoopType::Phase, "t", "{}".to_owned());
        record.iteration = 1;
        record.status = LoopStatus::Complete;
        let phase: PhaseArtifact = serde_json::from_value(tricky_phase()).expect("phase");
        let artifacts = layout.artifacts_dir(&record.id, 1);
        std::fs::create_dir_all(&artifacts).expect("artifacts");
        std::fs::write(
            artifacts.join("phase.json"),
            serde_json::to_vec(&phase).expect("json"),
        )
        .expect("phase.json");
        let markdown = crate::artifacts::render_phase_markdown(&phase);
        std::fs::write(artifacts.join("phase.md"), &markdown).expect("phase.md");

        let phases = phase_tasks(&[record], &PhaseSelector::All, &root, &layout);

        let tasks = &phases[0].tasks;
        let markdown_lines: Vec<&str> = markdown.lines().collect();
        let line_text = |place: &TaskPlace| markdown_lines[place.line as usize];
        assert_eq!(tasks[0].path, artifacts.join("phase.md"));
        assert_eq!(
            line_text(&tasks[0]),
            "- [ ] 1. Explain the flag ## Tasks 3. in two lines"
        );
        assert_eq!(
            (tasks[1].path.clone(), tasks[1].line),
            (root.path().join("src/main.rs"), 0)
        );
        assert_eq!(line_text(&tasks[2]), "- [ ] 3. Describe the result");
    }
}
