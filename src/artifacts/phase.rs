//! The phase artifact (`create_phase`): its structure, the tool offered to the model, and its
//! validation (tasks on files that exist or not as each task says, a validation command).

use std::path::{Component, Path};

use serde_json::{Value, json};

use super::references::{LinkedDocument, ReferenceLinks, ReferenceScope, check_references};
use super::render::{render_phase, render_phase_with};
use super::requirements::{PhaseRequirements, phase_requirement_issues};
use super::shapes::{PhaseArtifact, TaskAction, TaskItem};
use super::validation::{Checked, ValidationReport, parse_against_schema, sparseness_issue};
use crate::llm::ToolSpec;
use crate::schema::{InputIssue, input_schema_for};

pub const CREATE_PHASE: &str = "create_phase";
/// The seed's minimum content for a phase, in characters outside headings.
const MIN_PHASE_CONTENT: usize = 100;

/// What the project holds at a relative path; answered by the caller, so validation stays free
/// of I/O.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileState {
    File,
    Directory,
    Missing,
    /// The path leads outside the project (for example through a symlink).
    Outside,
}

pub fn create_phase_spec() -> ToolSpec {
    ToolSpec::offered(
        CREATE_PHASE,
        "Deliver the phase with its tasks and validation command, once you know exactly which \
         files change: files to modify or delete must exist, files to create must not. The \
         host checks it, stores it and renders phase.md.",
        &input_schema_for::<PhaseArtifact>(),
        Some(phase_example()),
    )
}

/// A small phase as a model would write it, of the first phase of `create_spec`'s example:
/// what `create_phase`'s example call shows.
fn phase_example() -> Value {
    json!({
        "name": "parse-flag",
        "title": "Parse the flag",
        "objective": "The argument parser accepts --version.",
        "tasks": [
            {
                "description": "Add a `version` flag to the Args struct.",
                "file": "src/cli.rs",
                "action": "modify",
                "requirements": ["R1"]
            }
        ],
        "validation_command": "cargo test --lib cli",
        "success_criteria": ["`demo --version` parses without an error"]
    })
}

/// Checks a `create_phase` input: the schema, the phase name it was spawned for, a
/// validation command, task files that are relative paths inside the project and exist (or,
/// for `create`, do not), references that resolve, each requirement the spec assigned to the
/// phase cited by a task, and enough content.
pub fn validate_phase(
    input: &Value,
    expected_name: &str,
    probe: &dyn Fn(&str) -> FileState,
    scope: &ReferenceScope,
    requirements: &PhaseRequirements,
) -> Result<Checked<PhaseArtifact>, ValidationReport> {
    let phase: PhaseArtifact = parse_against_schema(CREATE_PHASE, input)?;
    let mut issues = Vec::new();
    if phase.name != expected_name {
        issues.push(InputIssue::rule(
            "name",
            format!(
                "{:?} is not the phase you were asked for; this phase is named \
                 {expected_name:?} in the spec, use exactly that",
                phase.name
            ),
        ));
    }
    if phase.validation_command.trim().is_empty() {
        issues.push(InputIssue::rule(
            "validation_command",
            "is blank; give the shell command that passes when the phase is done, e.g. \
             \"cargo test\"",
        ));
    }
    let draft = render_phase(&phase).markdown;
    // A phase names no outputs of its own: its tasks have no names.
    let own = LinkedDocument::own("this phase", &draft, []);
    let mut links = ReferenceLinks::none();
    for (index, task) in phase.tasks.iter().enumerate() {
        issues.extend(task_issue(index, task, probe));
        check_references(
            &format!("tasks[{index}].references"),
            &task.references,
            &own,
            scope,
            &mut links,
            &mut issues,
        );
    }
    phase_requirement_issues(&phase, requirements, &mut issues);
    for id in phase.tasks.iter().flat_map(|task| &task.requirements) {
        if let Some(href) = requirements.href(id) {
            links.link(id, href);
        }
    }
    issues.extend(sparseness_issue("phase", &draft, MIN_PHASE_CONTENT));
    if issues.is_empty() {
        Ok(Checked {
            markdown: render_phase_with(&phase, &links).markdown,
            artifact: phase,
        })
    } else {
        Err(ValidationReport {
            tool: CREATE_PHASE,
            issues,
        })
    }
}

fn task_issue(
    index: usize,
    task: &TaskItem,
    probe: &dyn Fn(&str) -> FileState,
) -> Option<InputIssue> {
    let issue = |field: &str, message: String| {
        Some(InputIssue::rule(format!("tasks[{index}].{field}"), message))
    };
    let Some(file) = task.file.as_deref() else {
        return task.action.and_then(|action| {
            issue(
                "file",
                format!(
                    "is missing but action is {:?}; name the file to {}",
                    action.as_str(),
                    action.as_str()
                ),
            )
        });
    };
    let path = Path::new(file);
    if file.trim().is_empty() {
        return issue(
            "file",
            "is empty; give a path relative to the project root".to_owned(),
        );
    }
    if path.is_absolute() {
        return issue(
            "file",
            format!("{file:?} is absolute; give a path relative to the project root"),
        );
    }
    if path
        .components()
        .any(|component| component == Component::ParentDir)
    {
        return issue(
            "file",
            format!("{file:?} contains '..'; give a path inside the project"),
        );
    }
    let state = probe(file);
    if state == FileState::Outside {
        return issue(
            "file",
            format!("{file:?} leads outside the project; name a file inside it"),
        );
    }
    match (task.action, state) {
        (Some(TaskAction::Modify | TaskAction::Delete), FileState::Missing) => issue(
            "file",
            format!(
                "{file:?} does not exist, so it cannot be {}; use action \"create\" or name an existing file",
                if task.action == Some(TaskAction::Modify) {
                    "modified"
                } else {
                    "deleted"
                }
            ),
        ),
        (Some(TaskAction::Modify | TaskAction::Delete), FileState::Directory) => {
            issue("file", format!("{file:?} is a directory; name a file"))
        }
        (Some(TaskAction::Create), FileState::File | FileState::Directory) => issue(
            "file",
            format!("{file:?} already exists, so it cannot be created; use action \"modify\""),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::validation::{assert_has_issue, detached_scope};
    use serde_json::json;

    fn probe(path: &str) -> FileState {
        match path {
            "src/main.rs" | "README.md" => FileState::File,
            "src" => FileState::Directory,
            "leak" => FileState::Outside,
            _ => FileState::Missing,
        }
    }

    fn valid_phase() -> Value {
        json!({
            "name": "parse-flag",
            "title": "Parse the flag",
            "objective": "Recognise --version on the command line before any other argument handling.",
            "tasks": [
                {"description": "Match --version in main and print the version", "file": "src/main.rs", "action": "modify"},
                {"description": "Add a test for the flag", "file": "tests/version.rs", "action": "create"}
            ],
            "validation_command": "cargo test --test version",
            "success_criteria": ["sample --version prints the version"]
        })
    }

    /// `validate_phase` of the phase `parse-flag`, with no parent spec.
    fn validate_detached(input: &Value) -> Result<Checked<PhaseArtifact>, ValidationReport> {
        validate_phase(
            input,
            "parse-flag",
            &probe,
            &detached_scope(),
            &PhaseRequirements::default(),
        )
    }

    fn assert_issue(input: Value, location: &str, needle: &str) {
        let issues = validate_detached(&input).expect_err("rejected").issues;
        assert_has_issue(&issues, location, needle);
    }

    #[test]
    fn a_valid_phase_is_accepted() {
        let phase = validate_detached(&valid_phase()).expect("valid").artifact;
        assert_eq!(phase.tasks[1].action, Some(TaskAction::Create));
    }

    #[test]
    fn the_name_must_be_the_phase_it_was_spawned_for() {
        let mut input = valid_phase();
        input["name"] = json!("other");
        assert_issue(input, "name", "this phase is named \"parse-flag\"");
    }

    #[test]
    fn the_validation_command_is_required_and_not_blank() {
        let mut missing = valid_phase();
        missing
            .as_object_mut()
            .expect("object")
            .remove("validation_command");
        assert_issue(missing, "input", "validation_command");
        let mut blank = valid_phase();
        blank["validation_command"] = json!("   ");
        assert_issue(blank, "validation_command", "is blank");
    }

    #[test]
    fn task_files_must_be_relative_paths_inside_the_project() {
        for (file, needle) in [
            ("/etc/passwd", "is absolute"),
            ("../other/x.rs", "contains '..'"),
            ("leak", "leads outside the project"),
        ] {
            let mut input = valid_phase();
            input["tasks"][0]["file"] = json!(file);
            assert_issue(input, "tasks[0].file", needle);
        }
    }

    #[test]
    fn modify_and_delete_need_existing_files_and_create_a_new_one() {
        let mut modify_missing = valid_phase();
        modify_missing["tasks"][0]["file"] = json!("src/cli.rs");
        assert_issue(
            modify_missing,
            "tasks[0].file",
            "does not exist, so it cannot be modified",
        );
        let mut delete_missing = valid_phase();
        delete_missing["tasks"][0]["action"] = json!("delete");
        delete_missing["tasks"][0]["file"] = json!("gone.rs");
        assert_issue(delete_missing, "tasks[0].file", "cannot be deleted");
        let mut create_existing = valid_phase();
        create_existing["tasks"][1]["file"] = json!("README.md");
        assert_issue(create_existing, "tasks[1].file", "already exists");
        let mut action_without_file = valid_phase();
        action_without_file["tasks"][0]
            .as_object_mut()
            .expect("task")
            .remove("file");
        assert_issue(
            action_without_file,
            "tasks[0].file",
            "name the file to modify",
        );
    }

    #[test]
    fn an_unknown_action_is_rejected_by_the_schema() {
        let mut input = valid_phase();
        input["tasks"][0]["action"] = json!("rename");
        let issues = validate_detached(&input).expect_err("rejected").issues;
        assert!(
            issues
                .iter()
                .any(|issue| issue.location == "tasks[0].action"),
            "{issues:#?}"
        );
    }

    #[test]
    fn task_references_are_checked_and_stay_on_the_task_line() {
        let mut input = valid_phase();
        input["tasks"][1]["references"] = json!(["#objective", "https://example.com/a b"]);
        let issues = validate_detached(&input).expect_err("bad URL").issues;
        assert_eq!(issues.len(), 1, "{issues:#?}");
        assert_has_issue(&issues, "tasks[1].references[1]", "is not a valid URL");
        input["tasks"][1]["references"] = json!(["#objective"]);
        let checked = validate_detached(&input).expect("valid");
        let line = render_phase(&checked.artifact).task_lines[1] as usize;
        assert_eq!(
            checked.markdown.split('\n').nth(line),
            Some(
                "- [ ] 2. Add a test for the flag (`tests/version.rs`, create) — see \
                 [`#objective`](#objective)"
            )
        );
    }

    #[test]
    fn a_sparse_phase_is_rejected() {
        let input = json!({"name": "parse-flag", "title": "P", "objective": "O", "tasks": [{"description": "do"}], "validation_command": "true"});
        assert_issue(input, "input", "too sparse");
    }
}
