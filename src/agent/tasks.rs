//! The tasks of phase artifacts, as places in the project: what `:LooprTasks` lists.

use std::path::PathBuf;

use crate::artifacts::{PhaseArtifact, TaskAction};
use crate::store::{LoopRecord, LoopStatus, LoopType, ProjectLayout};
use crate::tools::ProjectRoot;

/// Which phases to list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PhaseSelector {
    All,
    Named(String),
    Loop(String),
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
}

/// The current phases (not invalidated, with an artifact) matching `selector`, oldest first.
pub fn phase_tasks(
    records: &[LoopRecord],
    selector: &PhaseSelector,
    root: &ProjectRoot,
    layout: &ProjectLayout,
) -> Vec<PhaseTasks> {
    records
        .iter()
        .rev()
        .filter(|record| {
            record.loop_type == LoopType::Phase
                && record.status != LoopStatus::Invalidated
                && record.iteration > 0
        })
        .filter(|record| match selector {
            PhaseSelector::All => true,
            PhaseSelector::Named(name) => record.name.as_deref() == Some(name.as_str()),
            PhaseSelector::Loop(id) => record.id.as_str() == id,
        })
        .filter_map(|record| {
            let artifacts = layout.artifacts_dir(&record.id, record.iteration);
            let markdown_path = artifacts.join("phase.md");
            let bytes = std::fs::read(artifacts.join("phase.json")).ok()?;
            let phase: PhaseArtifact = serde_json::from_slice(&bytes).ok()?;
            let markdown = std::fs::read_to_string(&markdown_path).unwrap_or_default();
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
                        None => (markdown_path.clone(), task_line(&markdown, index + 1)),
                    };
                    TaskPlace {
                        path,
                        line,
                        text,
                        task_index: index + 1,
                        action: task.action,
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

/// The zero-based line of task `number` in the rendered phase.md (`N. ...` under `## Tasks`).
fn task_line(markdown: &str, number: usize) -> u32 {
    let prefix = format!("{number}. ");
    let mut in_tasks = false;
    for (index, line) in markdown.lines().enumerate() {
        if line.starts_with("## ") {
            in_tasks = line == "## Tasks";
        } else if in_tasks && line.starts_with(&prefix) {
            return u32::try_from(index).unwrap_or(0);
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_lines_are_found_under_the_tasks_heading() {
        let markdown =
            "# Phase: X\n\n## Objective\n\n1. not a task\n\n## Tasks\n\n1. first\n2. second\n";
        assert_eq!(task_line(markdown, 1), 8);
        assert_eq!(task_line(markdown, 2), 9);
        assert_eq!(task_line(markdown, 3), 0);
    }
}
