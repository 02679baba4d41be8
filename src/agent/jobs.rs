//! What each level of the hierarchy asks of the model, and what its artifact spawns. All of
//! it comes from structured data: the record and the parent's stored JSON, never markdown.

use std::path::Path;

use serde_json::Value;

use super::prompts;
use crate::artifacts::{
    ArtifactKind, Checked, FileState, LinkedDocument, PhaseArtifact, PhaseRequirements,
    PlanArtifact, ReferenceScope, SpecArtifact, ValidationReport, create_phase_spec,
    create_plan_spec, create_spec_spec, linked_plan_document, linked_spec_document, validate_phase,
    validate_plan, validate_spec,
};
use crate::llm::ToolSpec;
use crate::store::{LoopRecord, LoopType, ProjectLayout};
use crate::tools::{PathError, ProjectRoot};

/// An artifact the host accepted: what is stored, and what the model is told.
#[derive(Clone, Debug)]
pub struct Accepted {
    pub json: Value,
    pub markdown: String,
    pub summary: String,
}

/// A loop an artifact spawns, from its structured data.
#[derive(Clone, Debug, PartialEq)]
pub struct ChildLoop {
    pub loop_type: LoopType,
    pub name: String,
    pub task: String,
    pub depends_on: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("loop type {0} does not produce an artifact")]
    NoArtifact(&'static str),
    #[error("the {kind} loop has no name; it must be spawned from a parent artifact")]
    Unnamed { kind: &'static str },
    #[error("reading the parent artifact {path}: {message}")]
    Parent { path: String, message: String },
    #[error("reading the artifact {path}: {message}")]
    Artifact { path: String, message: String },
    #[error("the parent artifact {path} has no {kind} named {name:?}")]
    NotInParent {
        path: String,
        kind: &'static str,
        name: String,
    },
}

pub fn artifact_kind(loop_type: LoopType) -> Result<ArtifactKind, JobError> {
    match loop_type {
        LoopType::Plan => Ok(ArtifactKind::Plan),
        LoopType::Spec => Ok(ArtifactKind::Spec),
        LoopType::Phase => Ok(ArtifactKind::Phase),
        LoopType::Code => Err(JobError::NoArtifact("code")),
        LoopType::Verify => Err(JobError::NoArtifact("verify")),
    }
}

pub fn artifact_tool(kind: ArtifactKind) -> ToolSpec {
    match kind {
        ArtifactKind::Plan => create_plan_spec(),
        ArtifactKind::Spec => create_spec_spec(),
        ArtifactKind::Phase => create_phase_spec(),
    }
}

/// The first user message of a loop: its task, the context from its parent's artifact, and,
/// when it is being revised, the previous artifact and the user's feedback.
pub fn first_message(
    record: &LoopRecord,
    layout: &ProjectLayout,
    previous_artifact: Option<&Value>,
) -> Result<String, JobError> {
    let kind = artifact_kind(record.loop_type)?;
    let mut message = match kind {
        ArtifactKind::Plan => prompts::plan_task_message(&record.task),
        ArtifactKind::Spec => {
            let name = required_name(record, kind)?;
            let (path, plan) = parent_artifact::<PlanArtifact>(record, layout)?;
            let spec = plan
                .specs
                .iter()
                .find(|spec| spec.name == name)
                .ok_or_else(|| not_in_parent(&path, "spec", name))?;
            prompts::spec_task_message(&plan, spec)
        }
        ArtifactKind::Phase => {
            let name = required_name(record, kind)?;
            let (path, spec) = parent_artifact::<SpecArtifact>(record, layout)?;
            let index = spec
                .phases
                .iter()
                .position(|phase| phase.name == name)
                .ok_or_else(|| not_in_parent(&path, "phase", name))?;
            prompts::phase_task_message(&spec, index)
        }
    };
    if let (Some(feedback), Some(previous)) = (record.feedback.as_deref(), previous_artifact) {
        message.push_str(&prompts::revision_request(
            kind,
            record.iteration,
            previous,
            feedback,
        ));
    }
    Ok(message)
}

/// Validates an artifact tool's input for this loop and renders it, references linked. Reads
/// the parent's stored artifact and markdown (what references may point into) and probes the
/// project and absolute paths: run it on the blocking pool.
pub fn accept(
    record: &LoopRecord,
    root: &ProjectRoot,
    layout: &ProjectLayout,
    input: &Value,
) -> Result<Result<Accepted, ValidationReport>, JobError> {
    let kind = artifact_kind(record.loop_type)?;
    let path_exists = |path: &Path| path.exists();
    Ok(match kind {
        ArtifactKind::Plan => {
            let scope = ReferenceScope {
                parent: None,
                path_exists: &path_exists,
            };
            validate_plan(input, &scope)
                .map(|checked| plan_accepted(checked.artifact, checked.markdown))
        }
        ArtifactKind::Spec => {
            let name = required_name(record, kind)?;
            let scope = ReferenceScope {
                parent: parent_document(record, layout, |plan: &PlanArtifact, href, stored| {
                    linked_plan_document(plan, href, stored)
                })?,
                path_exists: &path_exists,
            };
            validate_spec(input, name, &scope)
                .map(|checked| spec_accepted(checked.artifact, checked.markdown))
        }
        ArtifactKind::Phase => {
            let name = required_name(record, kind)?;
            let mut spec_href = None;
            let scope = ReferenceScope {
                parent: parent_document(record, layout, |spec: &SpecArtifact, href, stored| {
                    spec_href = Some(href.clone());
                    linked_spec_document(spec, href, stored)
                })?,
                path_exists: &path_exists,
            };
            let (_, spec) = parent_artifact::<SpecArtifact>(record, layout)?;
            let requirements = PhaseRequirements::of_spec(&spec, name, spec_href);
            let probe = |file: &str| probe_file(root, file);
            validate_phase(input, name, &probe, &scope, &requirements).map(
                |checked: Checked<PhaseArtifact>| {
                    phase_accepted(checked.artifact, checked.markdown)
                },
            )
        }
    })
}

/// The parent's markdown as the child's references see it, linked from where the child's
/// markdown is written. The parent's JSON must be readable (the loop's task came from it); its
/// markdown only serves links, so without it the child can still reference its own headings.
fn parent_document<T: serde::de::DeserializeOwned>(
    record: &LoopRecord,
    layout: &ProjectLayout,
    link: impl FnOnce(&T, String, &str) -> LinkedDocument,
) -> Result<Option<LinkedDocument>, JobError> {
    let (_, parent) = parent_artifact::<T>(record, layout)?;
    let (Some(parent_id), Some(triggered_by)) = (&record.parent, &record.triggered_by) else {
        return Ok(None);
    };
    let in_loop = Path::new(triggered_by).with_extension("md");
    let stored_path = layout.loop_dir(parent_id).join(&in_loop);
    match std::fs::read_to_string(&stored_path) {
        Ok(stored) => {
            let href = ProjectLayout::from_artifacts_dir(parent_id, &in_loop)
                .to_string_lossy()
                .into_owned();
            Ok(Some(link(&parent, href, &stored)))
        }
        Err(err) => {
            tracing::warn!(path = %stored_path.display(), error = %err, "the parent's markdown is unreadable; references cannot point into it");
            Ok(None)
        }
    }
}

/// The loops a stored artifact spawns (after a crash between storing it and recording it, or
/// on approval), without running the rules again: they held when it was stored.
pub fn spawned_by(kind: ArtifactKind, json: &Value) -> Option<Vec<ChildLoop>> {
    match kind {
        ArtifactKind::Plan => serde_json::from_value(json.clone())
            .ok()
            .map(|plan: PlanArtifact| plan_children(&plan)),
        ArtifactKind::Spec => serde_json::from_value(json.clone())
            .ok()
            .map(|spec: SpecArtifact| spec_children(&spec)),
        ArtifactKind::Phase => serde_json::from_value::<PhaseArtifact>(json.clone())
            .ok()
            .map(|_| Vec::new()),
    }
}

fn plan_children(plan: &PlanArtifact) -> Vec<ChildLoop> {
    plan.specs
        .iter()
        .map(|spec| ChildLoop {
            loop_type: LoopType::Spec,
            name: spec.name.clone(),
            task: spec.title.clone(),
            depends_on: spec.dependencies.clone(),
        })
        .collect()
}

fn spec_children(spec: &SpecArtifact) -> Vec<ChildLoop> {
    spec.phases
        .iter()
        .map(|phase| ChildLoop {
            loop_type: LoopType::Phase,
            name: phase.name.clone(),
            task: phase.title.clone(),
            depends_on: Vec::new(),
        })
        .collect()
}

fn plan_accepted(plan: PlanArtifact, markdown: String) -> Accepted {
    Accepted {
        markdown,
        summary: format!(
            "Plan accepted with {} spec(s); plan.md was written for review.",
            plan.specs.len()
        ),
        json: serde_json::to_value(&plan).unwrap_or_default(),
    }
}

fn spec_accepted(spec: SpecArtifact, markdown: String) -> Accepted {
    Accepted {
        markdown,
        summary: format!(
            "Spec accepted with {} phase(s); spec.md was written.",
            spec.phases.len()
        ),
        json: serde_json::to_value(&spec).unwrap_or_default(),
    }
}

fn phase_accepted(phase: PhaseArtifact, markdown: String) -> Accepted {
    Accepted {
        markdown,
        summary: format!(
            "Phase accepted with {} task(s); phase.md was written.",
            phase.tasks.len()
        ),
        json: serde_json::to_value(&phase).unwrap_or_default(),
    }
}

fn probe_file(root: &ProjectRoot, file: &str) -> FileState {
    match root.resolve_existing(file) {
        Ok(path) if path.is_dir() => FileState::Directory,
        Ok(_) => FileState::File,
        // Missing, but would writing it stay inside (no symlinked directory leading out)?
        Err(PathError::NotFound { .. }) => match root.resolve_for_write(file) {
            Ok(_) => FileState::Missing,
            Err(_) => FileState::Outside,
        },
        Err(_) => FileState::Outside,
    }
}

fn required_name(record: &LoopRecord, kind: ArtifactKind) -> Result<&str, JobError> {
    record.name.as_deref().ok_or(JobError::Unnamed {
        kind: kind.as_str(),
    })
}

fn not_in_parent(path: &str, kind: &'static str, name: &str) -> JobError {
    JobError::NotInParent {
        path: path.to_owned(),
        kind,
        name: name.to_owned(),
    }
}

/// The parent's artifact that triggered `record`, read from the parent's loop directory.
pub fn parent_artifact<T: serde::de::DeserializeOwned>(
    record: &LoopRecord,
    layout: &ProjectLayout,
) -> Result<(String, T), JobError> {
    let (Some(parent), Some(triggered_by)) = (&record.parent, &record.triggered_by) else {
        return Err(JobError::Parent {
            path: "(none)".to_owned(),
            message: "the loop records no parent artifact".to_owned(),
        });
    };
    let path = layout.loop_dir(parent).join(triggered_by);
    let shown = path.display().to_string();
    let value = read_json(&path).map_err(|message| JobError::Parent {
        path: shown.clone(),
        message,
    })?;
    let parsed = serde_json::from_value(value).map_err(|err| JobError::Parent {
        path: shown.clone(),
        message: err.to_string(),
    })?;
    Ok((shown, parsed))
}

/// `record`'s own artifact as it stands (`<kind>.json` of its current iteration).
pub fn current_artifact<T: serde::de::DeserializeOwned>(
    record: &LoopRecord,
    layout: &ProjectLayout,
) -> Result<T, JobError> {
    let kind = artifact_kind(record.loop_type)?;
    let path = layout
        .artifacts_dir(&record.id, record.iteration)
        .join(format!("{}.json", kind.as_str()));
    let unreadable = |message: String| JobError::Artifact {
        path: path.display().to_string(),
        message,
    };
    let value = read_json(&path).map_err(unreadable)?;
    serde_json::from_value(value).map_err(|err| unreadable(err.to_string()))
}

pub fn read_json(path: &Path) -> Result<Value, String> {
    let bytes = std::fs::read(path).map_err(|err| err.to_string())?;
    serde_json::from_slice(&bytes).map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::artifact_store::store_artifact;
    use crate::artifacts::heading_slugs;
    use serde_json::json;

    fn long(text: &str) -> String {
        format!(
            "{text} This sentence is here so the artifact is detailed enough to be accepted by the sparseness rule."
        )
    }

    /// Accepts `input` for `record` and stores it as iteration 1, returning its markdown.
    fn accept_and_store(
        record: &LoopRecord,
        root: &ProjectRoot,
        layout: &ProjectLayout,
        input: Value,
    ) -> String {
        let kind = artifact_kind(record.loop_type).expect("artifact loop");
        let accepted = accept(record, root, layout, &input)
            .expect("job")
            .unwrap_or_else(|report| panic!("{report}"));
        store_artifact(
            layout,
            &record.id,
            1,
            kind,
            &accepted.json,
            &accepted.markdown,
            None,
        )
        .expect("stored");
        accepted.markdown
    }

    fn child_of(parent: &LoopRecord, loop_type: LoopType, name: &str) -> LoopRecord {
        let kind = artifact_kind(parent.loop_type).expect("artifact loop");
        LoopRecord {
            parent: Some(parent.id.clone()),
            name: Some(name.to_owned()),
            triggered_by: Some(format!("iterations/001/artifacts/{}.json", kind.as_str())),
            ..LoopRecord::new_pending(loop_type, name, "{}".to_owned())
        }
    }

    /// Every link of `markdown` (written in `dir`) that is not a URL: its file exists and has
    /// the heading its fragment names. Returns how many relative links there were.
    fn assert_links_resolve(markdown: &str, dir: &Path) -> usize {
        let own_slugs: Vec<String> = heading_slugs(markdown)
            .into_iter()
            .map(|(_, slug)| slug)
            .collect();
        let mut relative = 0;
        for (start, _) in markdown.match_indices("](") {
            let rest = &markdown[start + 2..];
            let destination = match rest.strip_prefix('<') {
                Some(angled) => &angled[..angled.find('>').expect("closing >")],
                None => &rest[..rest.find(')').expect("closing )")],
            };
            if destination.contains("://") {
                continue;
            }
            let (file, fragment) = destination.split_once('#').unwrap_or((destination, ""));
            let slugs = if file.is_empty() {
                own_slugs.clone()
            } else {
                relative += 1;
                let target = dir.join(file);
                let text = std::fs::read_to_string(&target)
                    .unwrap_or_else(|err| panic!("{destination} -> {}: {err}", target.display()));
                heading_slugs(&text)
                    .into_iter()
                    .map(|(_, slug)| slug)
                    .collect()
            };
            assert!(
                fragment.is_empty() || slugs.iter().any(|slug| slug == fragment),
                "{destination}: no heading #{fragment} in {slugs:?}"
            );
        }
        relative
    }

    #[test]
    fn every_relative_link_of_a_child_resolves_to_a_stored_file_and_heading() {
        let temp = tempfile::tempdir().expect("temp");
        let project = temp.path().join("project");
        std::fs::create_dir_all(&project).expect("project");
        std::fs::write(project.join("notes.md"), "notes").expect("notes");
        let root = ProjectRoot::new(&project).expect("root");
        let layout = ProjectLayout::new(&temp.path().join("home"), root.path());
        let notes = root.path().join("notes.md").display().to_string();

        let plan = LoopRecord::new_pending(LoopType::Plan, "version", "{}".to_owned());
        accept_and_store(
            &plan,
            &root,
            &layout,
            json!({
                "title": "Add a --version flag",
                "overview": long("Print the version."),
                "specs": [
                    {"name": "version-flag", "title": "Parse it: flags & values", "description": long("Parse --version."),
                     "references": ["#risks", "output:docs", notes]},
                    {"name": "docs", "title": "Document it", "description": long("Write the docs.")}
                ],
                "risks": ["Drift between the docs and the flag"]
            }),
        );

        let spec = child_of(&plan, LoopType::Spec, "version-flag");
        let phase = |name: &str, references: Value| {
            json!({
                "name": name, "title": format!("Phase {name}"), "description": long("Do it."), "references": references
            })
        };
        let spec_markdown = accept_and_store(
            &spec,
            &root,
            &layout,
            json!({
                "name": "version-flag",
                "title": "Parse --version",
                "overview": long("Teach the CLI the flag."),
                "requirements": [{"id": "R1", "text": "WHEN run with --version THE SYSTEM SHALL exit 0", "check": "Run it."}],
                "phases": [
                    phase("parse", json!(["#risks", "#spec-1-parse-it-flags--values", "output:docs", "#overview"])),
                    phase("print", json!(["output:parse", "output:version-flag"])),
                    {"name": "exit", "title": "Phase exit", "description": long("Do it."), "requirements": ["R1"]}
                ],
                "test_strategy": "An integration test runs the binary."
            }),
        );
        let spec_dir = layout.artifacts_dir(&spec.id, 1);
        assert_eq!(
            assert_links_resolve(&spec_markdown, &spec_dir),
            4,
            "{spec_markdown}"
        );

        let phase_record = child_of(&spec, LoopType::Phase, "print");
        let phase_markdown = accept_and_store(
            &phase_record,
            &root,
            &layout,
            json!({
                "name": "print",
                "title": "Print the version",
                "objective": long("Print it."),
                "tasks": [
                    {"description": "Print CARGO_PKG_VERSION", "references": ["#objective", "#phase-1-phase-parse", "output:exit", "#test-strategy"]}
                ],
                "validation_command": "cargo test"
            }),
        );
        let phase_dir = layout.artifacts_dir(&phase_record.id, 1);
        assert_eq!(
            assert_links_resolve(&phase_markdown, &phase_dir),
            3,
            "{phase_markdown}"
        );
        assert!(
            phase_markdown.contains("[`#objective`](#objective)"),
            "{phase_markdown}"
        );
    }

    #[test]
    fn a_reference_into_an_unreadable_parent_markdown_is_reported_not_fatal() {
        let temp = tempfile::tempdir().expect("temp");
        let root = ProjectRoot::new(temp.path()).expect("root");
        let layout = ProjectLayout::new(&temp.path().join("home"), root.path());
        let plan = LoopRecord::new_pending(LoopType::Plan, "version", "{}".to_owned());
        let plan_json = json!({
            "title": "T", "overview": "O",
            "specs": [{"name": "only", "title": "Only", "description": "D"}]
        });
        let dir = layout.artifacts_dir(&plan.id, 1);
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("plan.json"), plan_json.to_string()).expect("plan.json");
        let spec = child_of(&plan, LoopType::Spec, "only");
        let input = json!({
            "name": "only", "title": "Only", "overview": long("Overview."),
            "requirements": [{"id": "R1", "text": "THE SYSTEM SHALL do A", "check": "Look."}],
            "phases": [
                {"name": "a", "title": "A", "description": long("A."), "references": ["#overview"], "requirements": ["R1"]},
                {"name": "b", "title": "B", "description": long("B."), "references": ["#spec-1-only"]},
                {"name": "c", "title": "C", "description": long("C.")}
            ]
        });
        let report = accept(&spec, &root, &layout, &input)
            .expect("job")
            .expect_err("plan.md is missing");
        assert_eq!(report.issues.len(), 1, "{report}");
        assert_eq!(report.issues[0].location, "phases[1].references[0]");
    }

    #[cfg(unix)]
    #[test]
    fn a_new_file_behind_a_symlink_that_leads_out_is_outside() {
        let project = tempfile::tempdir().expect("project");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::create_dir_all(project.path().join("src")).expect("mkdir");
        std::os::unix::fs::symlink(outside.path(), project.path().join("leakdir")).expect("link");
        let root = ProjectRoot::new(project.path()).expect("root");
        assert_eq!(probe_file(&root, "leakdir/new.rs"), FileState::Outside);
        assert_eq!(probe_file(&root, "src/new.rs"), FileState::Missing);
        assert_eq!(probe_file(&root, "src"), FileState::Directory);
    }
}
