//! Rendering artifacts to markdown (plan.md, spec.md, phase.md), one way, with references as
//! code or as links, and where each section or task landed.

use std::fmt::Write;

use super::references::ReferenceLinks;
use super::shapes::{PhaseArtifact, PlanArtifact, Requirement, SpecArtifact};

/// A plan's or spec's markdown and the heading line of each spec's or phase's section, so a
/// reference can link to the section that describes an output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderedSections {
    pub markdown: String,
    /// The zero-based line of each section's heading, in spec or phase order.
    pub section_lines: Vec<u32>,
    /// spec.md only: the zero-based line of each requirement, in
    /// `SpecArtifact::requirements_or_criteria` order (a spec stored before requirements: its
    /// acceptance criteria, which read as R1..Rn). Empty for plan.md.
    pub requirement_lines: Vec<u32>,
}

/// plan.md, rendered from the structured plan with references as code. Rendering is one-way:
/// nothing parses it back.
pub fn render_plan_markdown(plan: &PlanArtifact) -> String {
    render_plan(plan, &ReferenceLinks::none()).markdown
}

/// plan.md with references rendered through `links`.
pub fn render_plan(plan: &PlanArtifact, links: &ReferenceLinks) -> RenderedSections {
    let mut md = String::new();
    let mut section_lines = Vec::with_capacity(plan.specs.len());
    // Writing to a String cannot fail; the results are ignored for that reason.
    let _ = writeln!(md, "# Plan: {}\n", one_line(&plan.title));
    let _ = writeln!(md, "## Overview\n\n{}\n", plan.overview.trim());
    let _ = writeln!(md, "## Specs\n");
    let _ = writeln!(
        md,
        "This plan will be implemented through the following {} spec{}:\n",
        plan.specs.len(),
        if plan.specs.len() == 1 { "" } else { "s" }
    );
    for (index, spec) in plan.specs.iter().enumerate() {
        section_lines.push(line_count(&md));
        let _ = writeln!(md, "### Spec {}: {}\n", index + 1, one_line(&spec.title));
        let _ = writeln!(md, "**Name:** `{}`\n", spec.name);
        let _ = writeln!(md, "{}\n", spec.description.trim());
        if !spec.dependencies.is_empty() {
            let names: Vec<String> = spec
                .dependencies
                .iter()
                .map(|name| format!("`{name}`"))
                .collect();
            let _ = writeln!(md, "**Depends on:** {}\n", names.join(", "));
        }
        write_references(&mut md, &spec.references, links);
    }
    write_list(&mut md, "Non-Goals", &plan.non_goals);
    write_list(&mut md, "Risks", &plan.risks);
    RenderedSections {
        markdown: finish(md),
        section_lines,
        requirement_lines: Vec::new(),
    }
}

/// spec.md, rendered from the structured spec with references as code.
pub fn render_spec_markdown(spec: &SpecArtifact) -> String {
    render_spec(spec, &ReferenceLinks::none()).markdown
}

/// spec.md with references rendered through `links`.
pub fn render_spec(spec: &SpecArtifact, links: &ReferenceLinks) -> RenderedSections {
    let mut md = String::new();
    let mut section_lines = Vec::with_capacity(spec.phases.len());
    let _ = writeln!(md, "# Spec: {}\n", one_line(&spec.title));
    let _ = writeln!(md, "**Name:** `{}`\n", spec.name);
    let _ = writeln!(md, "## Overview\n\n{}\n", spec.overview.trim());
    let mut requirement_lines = write_requirements(&mut md, &spec.requirements);
    let _ = writeln!(md, "## Phases\n");
    for (index, phase) in spec.phases.iter().enumerate() {
        section_lines.push(line_count(&md));
        let _ = writeln!(md, "### Phase {}: {}\n", index + 1, one_line(&phase.title));
        let _ = writeln!(md, "**Name:** `{}`\n", phase.name);
        let _ = writeln!(md, "{}\n", phase.description.trim());
        if !phase.files.is_empty() {
            let _ = writeln!(md, "**Files:**\n");
            for file in &phase.files {
                let _ = writeln!(md, "- `{}`", one_line(file));
            }
            md.push('\n');
        }
        if let Some(validation) = phase
            .validation
            .as_deref()
            .filter(|text| !text.trim().is_empty())
        {
            let _ = writeln!(md, "**Validation:** {}\n", one_line(validation));
        }
        write_references(&mut md, &phase.references, links);
        if !phase.requirements.is_empty() {
            let _ = writeln!(md, "**Covers:** {}\n", phase.requirements.join(", "));
        }
    }
    if !spec.acceptance_criteria.is_empty() {
        let _ = writeln!(md, "## Acceptance Criteria\n");
        // Read as the requirements of a spec stored before requirements existed.
        let criteria_are_requirements = spec.requirements.is_empty();
        for criterion in &spec.acceptance_criteria {
            if criteria_are_requirements {
                requirement_lines.push(line_count(&md));
            }
            let _ = writeln!(md, "- [ ] {}", one_line(criterion));
        }
        md.push('\n');
    }
    if let Some(strategy) = spec
        .test_strategy
        .as_deref()
        .filter(|text| !text.trim().is_empty())
    {
        let _ = writeln!(md, "## Test Strategy\n\n{}\n", strategy.trim());
    }
    RenderedSections {
        markdown: finish(md),
        section_lines,
        requirement_lines,
    }
}

/// phase.md and where each task landed in it, so a shell can point at a task without
/// reading the markdown back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderedPhase {
    pub markdown: String,
    /// The zero-based line of each task, in task order.
    pub task_lines: Vec<u32>,
}

/// phase.md, rendered from the structured phase.
pub fn render_phase_markdown(phase: &PhaseArtifact) -> String {
    render_phase(phase).markdown
}

/// phase.md with the line of each task, references rendered as code. The lines are those of
/// the stored phase.md: a reference, linked or not, stays on its task's line.
pub fn render_phase(phase: &PhaseArtifact) -> RenderedPhase {
    render_phase_with(phase, &ReferenceLinks::none())
}

/// phase.md with the line of each task and references rendered through `links`.
pub fn render_phase_with(phase: &PhaseArtifact, links: &ReferenceLinks) -> RenderedPhase {
    let mut md = String::new();
    let _ = writeln!(md, "# Phase: {}\n", one_line(&phase.title));
    let _ = writeln!(md, "**Name:** `{}`\n", phase.name);
    let _ = writeln!(md, "## Objective\n\n{}\n", phase.objective.trim());
    let _ = writeln!(md, "## Tasks\n");
    let mut task_lines = Vec::with_capacity(phase.tasks.len());
    for (index, task) in phase.tasks.iter().enumerate() {
        let target = match (&task.file, task.action) {
            (Some(file), Some(action)) => format!(" (`{}`, {})", one_line(file), action.as_str()),
            (Some(file), None) => format!(" (`{}`)", one_line(file)),
            _ => String::new(),
        };
        let mut references = if task.references.is_empty() {
            String::new()
        } else {
            format!(" — see {}", links.render(&task.references))
        };
        if !task.requirements.is_empty() {
            let _ = write!(
                references,
                " — satisfies {}",
                links.render(&task.requirements)
            );
        }
        task_lines.push(line_count(&md));
        let _ = writeln!(
            md,
            "{OPEN_BOX}{}. {}{target}{references}",
            index + 1,
            one_line(&task.description)
        );
    }
    md.push('\n');
    if !phase.success_criteria.is_empty() {
        let _ = writeln!(md, "## Success Criteria\n");
        for criterion in &phase.success_criteria {
            let _ = writeln!(md, "- [ ] {}", one_line(criterion));
        }
        md.push('\n');
    }
    let fence = fence_for(&phase.validation_command);
    let _ = writeln!(
        md,
        "## Validation Command\n\n{fence}sh\n{}\n{fence}\n",
        phase.validation_command.trim()
    );
    RenderedPhase {
        markdown: finish(md),
        task_lines,
    }
}

/// A task's checkbox in phase.md, open and ticked; both the same width, so ticking a task moves
/// nothing.
const OPEN_BOX: &str = "- [ ] ";
const TICKED_BOX: &str = "- [x] ";

/// `markdown`, a phase.md as `render_phase_with` wrote it, with the box of task `i` (its line
/// `task_lines[i]`) ticked when `done[i]` is true and open otherwise. The stored phase.md keeps
/// the links its references were resolved to when the phase was accepted, which cannot be
/// resolved again later; so only the boxes change, on the lines the renderer reported, and a
/// line that does not start with a box (none should) is left as it is.
pub fn set_task_boxes(markdown: &str, task_lines: &[u32], done: &[bool]) -> String {
    let mut lines: Vec<String> = markdown.split('\n').map(str::to_owned).collect();
    for (line, ticked) in task_lines.iter().zip(done) {
        let Some(text) = usize::try_from(*line)
            .ok()
            .and_then(|line| lines.get_mut(line))
        else {
            continue;
        };
        let rest = text
            .strip_prefix(OPEN_BOX)
            .or_else(|| text.strip_prefix(TICKED_BOX));
        if let Some(rest) = rest {
            let boxed = if *ticked { TICKED_BOX } else { OPEN_BOX };
            *text = format!("{boxed}{rest}");
        }
    }
    lines.join("\n")
}

/// The number of complete lines in `text`, which is the zero-based line the next write starts
/// on. Only `\n` counts, as in Neovim: a lone `\r` stays inside its line.
fn line_count(text: &str) -> u32 {
    let newlines = text.bytes().filter(|byte| *byte == b'\n').count();
    u32::try_from(newlines).unwrap_or(u32::MAX)
}

/// A backtick fence longer than any run of backticks in `text`, so the text cannot close it.
fn fence_for(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    "`".repeat(longest.max(2) + 1)
}

fn finish(mut md: String) -> String {
    md.truncate(md.trim_end().len());
    md.push('\n');
    md
}

/// The requirements section: each requirement anchored by its id, so spec.md#R1 (from
/// phase.md or a quickfix list) lands on it. Returns the line of each requirement.
fn write_requirements(md: &mut String, requirements: &[Requirement]) -> Vec<u32> {
    let mut lines = Vec::with_capacity(requirements.len());
    if requirements.is_empty() {
        return lines;
    }
    let _ = writeln!(md, "## Requirements\n");
    for requirement in requirements {
        lines.push(line_count(md));
        let _ = writeln!(
            md,
            "- <a id=\"{id}\"></a>**{id}:** {} *Check:* {}",
            one_line(&requirement.text),
            one_line(&requirement.check),
            id = requirement.id,
        );
    }
    md.push('\n');
    lines
}

fn write_references(md: &mut String, references: &[String], links: &ReferenceLinks) {
    if !references.is_empty() {
        let _ = writeln!(md, "**References:** {}\n", links.render(references));
    }
}

fn write_list(md: &mut String, heading: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    let _ = writeln!(md, "## {heading}\n");
    for item in items {
        let _ = writeln!(md, "- {}", one_line(item));
    }
    md.push('\n');
}

/// Headings and list items must stay on one line or the markdown structure breaks.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::artifacts::references::{LinkedDocument, ReferenceScope, check_references};
    use crate::artifacts::{SpecReference, linked_plan_document, linked_spec_document};

    /// Where a spec's or phase's markdown finds its parent's, as the layout lays them out.
    const PARENT_DIR: &str = "../../../../20261120-000000-abcd/iterations/001/artifacts";

    fn exists(path: &Path) -> bool {
        path == Path::new("/usr/share/man/man1")
    }

    /// The links `references` render as, every one of them accepted.
    fn links_for<'a>(
        own: &LinkedDocument,
        parent: Option<LinkedDocument>,
        references: impl IntoIterator<Item = &'a Vec<String>>,
    ) -> ReferenceLinks {
        let scope = ReferenceScope {
            parent,
            path_exists: &exists,
        };
        let mut links = ReferenceLinks::none();
        let mut issues = Vec::new();
        for list in references {
            check_references("references", list, own, &scope, &mut links, &mut issues);
        }
        assert!(issues.is_empty(), "{issues:#?}");
        links
    }

    fn own_document(
        name: &str,
        rendered: &RenderedSections,
        outputs: Vec<String>,
    ) -> LinkedDocument {
        LinkedDocument::own(
            name,
            &rendered.markdown,
            outputs
                .into_iter()
                .zip(rendered.section_lines.iter().copied()),
        )
    }

    fn plan_markdown_with_links(plan: &PlanArtifact) -> String {
        let draft = render_plan(plan, &ReferenceLinks::none());
        let names = plan.specs.iter().map(|spec| spec.name.clone()).collect();
        let own = own_document("this plan", &draft, names);
        let links = links_for(&own, None, plan.specs.iter().map(|spec| &spec.references));
        render_plan(plan, &links).markdown
    }

    fn spec() -> SpecArtifact {
        serde_json::from_value(serde_json::json!({
            "name": "version-flag",
            "title": "Parse --version",
            "overview": "Teach the CLI to print its version.",
            "phases": [
                {"name": "parse-flag", "title": "Parse the flag", "description": "Match --version.", "files": ["src/main.rs"], "validation": "cargo test",
                 "references": ["#test-strategy", "#risks", "output:docs"]},
                {"name": "print-version", "title": "Print it", "description": "Use CARGO_PKG_VERSION.",
                 "references": ["output:cli-flag", "#spec-1-parse-the-flag"]},
                {"name": "docs", "title": "Document it", "description": "README.", "files": ["README.md"]}
            ],
            "acceptance_criteria": ["`sample --version` prints `sample 0.3.1`"],
            "test_strategy": "An integration test runs the binary."
        }))
        .expect("spec")
    }

    fn plan() -> PlanArtifact {
        PlanArtifact {
            title: "Add a --version flag\nto the CLI".to_owned(),
            overview: "Print the crate version and exit when `--version` is given.\n\nUse clap's built-in support.".to_owned(),
            specs: vec![
                SpecReference {
                    name: "cli-flag".to_owned(),
                    title: "Parse the flag".to_owned(),
                    description: "Add `--version` to the argument parser.".to_owned(),
                    dependencies: vec![],
                    references: vec![
                        "https://docs.rs/clap/latest/clap/_derive/#arg-attributes".to_owned(),
                        "output:docs".to_owned(),
                        "#risks".to_owned(),
                        "/usr/share/man/man1".to_owned(),
                    ],
                },
                SpecReference {
                    name: "docs".to_owned(),
                    title: "Document the flag".to_owned(),
                    description: "Mention it in README.md and the man page.".to_owned(),
                    dependencies: vec!["cli-flag".to_owned()],
                    references: vec![],
                },
            ],
            non_goals: vec!["A `version` subcommand".to_owned()],
            risks: vec!["Version drift between Cargo.toml and docs; read it from\nCARGO_PKG_VERSION".to_owned()],
        }
    }

    #[test]
    fn plan_markdown_snapshot() {
        insta::assert_snapshot!(plan_markdown_with_links(&plan()));
    }

    #[test]
    fn unlinked_references_render_as_code() {
        let md = render_plan_markdown(&plan());
        assert!(
            md.contains(
                "**References:** `https://docs.rs/clap/latest/clap/_derive/#arg-attributes`, \
                 `output:docs`, `#risks`, `/usr/share/man/man1`\n"
            ),
            "{md}"
        );
    }

    #[test]
    fn spec_markdown_snapshot() {
        let spec = spec();
        let parent = linked_plan_document(
            &plan(),
            format!("{PARENT_DIR}/plan.md"),
            &plan_markdown_with_links(&plan()),
        );
        let draft = render_spec(&spec, &ReferenceLinks::none());
        let names = spec.phases.iter().map(|phase| phase.name.clone()).collect();
        let own = own_document("this spec", &draft, names);
        let links = links_for(
            &own,
            Some(parent),
            spec.phases.iter().map(|phase| &phase.references),
        );
        insta::assert_snapshot!(render_spec(&spec, &links).markdown);
    }

    #[test]
    fn phase_markdown_snapshot() {
        let phase: PhaseArtifact = serde_json::from_value(serde_json::json!({
            "name": "parse-flag",
            "title": "Parse the flag",
            "objective": "Recognise --version first.",
            "tasks": [
                {"description": "Match --version in main", "file": "src/main.rs", "action": "modify",
                 "references": ["#objective", "#phase-2-print-it", "output:docs"]},
                {"description": "Add a test", "file": "tests/version.rs", "action": "create"},
                {"description": "Run the formatter", "references": ["https://rust-lang.github.io/rustfmt/"]}
            ],
            "validation_command": "cargo test --test version && echo ```done```",
            "success_criteria": ["The flag works"]
        }))
        .expect("phase");
        let spec = spec();
        let parent = linked_spec_document(
            &spec,
            format!("{PARENT_DIR}/spec.md"),
            &render_spec_markdown(&spec),
        );
        let own = LinkedDocument::own("this phase", &render_phase_markdown(&phase), []);
        let links = links_for(
            &own,
            Some(parent),
            phase.tasks.iter().map(|task| &task.references),
        );
        let rendered = render_phase_with(&phase, &links);
        assert_eq!(rendered.task_lines, render_phase(&phase).task_lines);
        insta::assert_snapshot!(rendered.markdown);
    }

    #[test]
    fn empty_optional_sections_are_left_out() {
        let mut plan = plan();
        plan.non_goals.clear();
        plan.risks.clear();
        let md = render_plan_markdown(&plan);
        assert!(
            !md.contains("## Non-Goals") && !md.contains("## Risks"),
            "{md}"
        );
        assert!(
            md.ends_with("the man page.\n\n**Depends on:** `cli-flag`\n"),
            "{md:?}"
        );
    }

    #[test]
    fn task_lines_point_at_the_tasks_whatever_the_objective_and_descriptions_contain() {
        let phase: PhaseArtifact = serde_json::from_value(serde_json::json!({
            "name": "tricky",
            "title": "Tricky\ntitle",
            "objective": "Looks like a list:\n\n## Tasks\n\n1. not a task\n2. nor this\r\n\n## Notes",
            "tasks": [
                {"description": "First line\n2. still the first task\n\n## Tasks", "file": "src/a.rs", "action": "modify"},
                {"description": "Second"},
                {"description": "Third\nacross lines"}
            ],
            "validation_command": "true",
            "success_criteria": []
        }))
        .expect("phase");
        let rendered = render_phase(&phase);
        let lines: Vec<&str> = rendered.markdown.split('\n').collect();
        let found: Vec<&str> = rendered
            .task_lines
            .iter()
            .map(|line| lines[*line as usize])
            .collect();
        assert_eq!(
            found,
            [
                "- [ ] 1. First line 2. still the first task ## Tasks (`src/a.rs`, modify)",
                "- [ ] 2. Second",
                "- [ ] 3. Third across lines",
            ],
            "{}",
            rendered.markdown
        );
        assert_eq!(render_phase_markdown(&phase), rendered.markdown);
    }

    #[test]
    fn ticking_tasks_changes_only_their_boxes() {
        let phase: PhaseArtifact = serde_json::from_value(serde_json::json!({
            "name": "ticks",
            "title": "Ticks",
            "objective": "- [ ] a box in the objective is no task",
            "tasks": [
                {"description": "First"},
                {"description": "Second", "file": "src/b.rs", "action": "create"},
                {"description": "Third"}
            ],
            "validation_command": "true",
            "success_criteria": ["Every box ticked"]
        }))
        .expect("phase");
        let rendered = render_phase(&phase);
        let ticked = set_task_boxes(
            &rendered.markdown,
            &rendered.task_lines,
            &[true, false, true],
        );
        let changed: Vec<(&str, &str)> = rendered
            .markdown
            .split('\n')
            .zip(ticked.split('\n'))
            .filter(|(before, after)| before != after)
            .collect();
        assert_eq!(
            changed,
            [
                ("- [ ] 1. First", "- [x] 1. First"),
                ("- [ ] 3. Third", "- [x] 3. Third"),
            ],
            "{ticked}"
        );
        assert!(ticked.ends_with("```\n"), "{ticked:?}");
        let untouched = set_task_boxes(&ticked, &rendered.task_lines, &[false, false, false]);
        assert_eq!(
            untouched, rendered.markdown,
            "unticking restores the render"
        );
    }

    #[test]
    fn requirement_lines_point_at_the_anchors_or_at_an_old_specs_criteria() {
        let mut spec = spec();
        let lines_of = |spec: &SpecArtifact| {
            let rendered = render_spec(spec, &ReferenceLinks::none());
            let lines: Vec<String> = rendered.markdown.split('\n').map(str::to_owned).collect();
            rendered
                .requirement_lines
                .iter()
                .map(|line| lines[*line as usize].clone())
                .collect::<Vec<String>>()
        };
        // Stored before requirements: the acceptance criterion reads as R1.
        assert_eq!(
            lines_of(&spec),
            ["- [ ] `sample --version` prints `sample 0.3.1`"]
        );
        spec.requirements = vec![
            Requirement {
                id: "R1".to_owned(),
                text: "WHEN asked\nTHE SYSTEM SHALL print".to_owned(),
                check: "run it".to_owned(),
            },
            Requirement {
                id: "R2".to_owned(),
                text: "Exit 0".to_owned(),
                check: "status".to_owned(),
            },
        ];
        assert_eq!(
            lines_of(&spec),
            [
                "- <a id=\"R1\"></a>**R1:** WHEN asked THE SYSTEM SHALL print *Check:* run it",
                "- <a id=\"R2\"></a>**R2:** Exit 0 *Check:* status",
            ]
        );
    }
}
