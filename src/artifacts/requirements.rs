//! Requirement tracing: a spec's requirements (R1, R2, ...) each covered by one of its phases,
//! and each requirement a phase was assigned cited by one of its tasks. The rules report every
//! break with its fix, for the model.

use std::collections::{HashMap, HashSet};

use super::shapes::{PhaseArtifact, Requirement, SpecArtifact};
use crate::schema::InputIssue;

/// Issues of a spec's requirements: ids that repeat, phases naming an id the spec does not
/// have, and requirements no phase covers.
pub fn spec_requirement_issues(spec: &SpecArtifact, issues: &mut Vec<InputIssue>) {
    let mut first_index: HashMap<&str, usize> = HashMap::new();
    for (index, requirement) in spec.requirements.iter().enumerate() {
        let id = requirement.id.as_str();
        if let Some(first) = first_index.get(id) {
            issues.push(InputIssue::rule(
                format!("requirements[{index}].id"),
                format!(
                    "{id:?} is already the id of requirements[{first}]; number the requirements \
                     R1, R2, ... with each id once"
                ),
            ));
        } else {
            first_index.insert(id, index);
        }
    }
    let mut covered: HashSet<&str> = HashSet::new();
    for (phase_index, phase) in spec.phases.iter().enumerate() {
        for (index, id) in phase.requirements.iter().enumerate() {
            if first_index.contains_key(id.as_str()) {
                covered.insert(id);
            } else {
                issues.push(InputIssue::rule(
                    format!("phases[{phase_index}].requirements[{index}]"),
                    format!(
                        "{id:?} is not the id of a requirement of this spec ({}); name one of \
                         them or add the requirement to `requirements`",
                        id_list(&spec.requirements)
                    ),
                ));
            }
        }
    }
    for (index, requirement) in spec.requirements.iter().enumerate() {
        if !covered.contains(requirement.id.as_str()) {
            issues.push(InputIssue::rule(
                format!("requirements[{index}]"),
                format!(
                    "{} is covered by no phase; add {:?} to the `requirements` of the phase \
                     that implements it",
                    requirement.id, requirement.id
                ),
            ));
        }
    }
}

/// What a phase's tasks may cite: its spec's requirements, those the spec assigned to the
/// phase, and where spec.md is from phase.md (to link each citation to its anchor).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PhaseRequirements {
    pub known: Vec<Requirement>,
    pub assigned: Vec<String>,
    /// spec.md from phase.md; `None` when spec.md has no requirement anchors (a spec stored
    /// before requirements existed), so citations stay plain ids.
    pub spec_href: Option<String>,
}

impl PhaseRequirements {
    /// The requirements `spec` gives the phase named `phase`; `spec_href` links to spec.md,
    /// when it is readable.
    pub fn of_spec(
        spec: &SpecArtifact,
        phase: &str,
        spec_href: Option<String>,
    ) -> PhaseRequirements {
        let assigned = spec
            .phases
            .iter()
            .find(|reference| reference.name == phase)
            .map(|reference| reference.requirements.clone())
            .unwrap_or_default();
        PhaseRequirements {
            known: spec.requirements_or_criteria(),
            assigned,
            spec_href: spec_href.filter(|_| !spec.requirements.is_empty()),
        }
    }

    /// The requirements `phase` is verified against, with their text, in the spec's order:
    /// those the spec assigned it and those its tasks cite. The one rule for a code loop's
    /// verification rounds and a verification asked on demand.
    pub fn verified_against(&self, phase: &PhaseArtifact) -> Vec<Requirement> {
        self.known
            .iter()
            .filter(|requirement| {
                self.assigned.contains(&requirement.id)
                    || phase
                        .tasks
                        .iter()
                        .any(|task| task.requirements.contains(&requirement.id))
            })
            .cloned()
            .collect()
    }

    /// The link of requirement `id` in spec.md, when spec.md has anchors.
    pub fn href(&self, id: &str) -> Option<String> {
        self.spec_href.as_ref().map(|href| format!("{href}#{id}"))
    }
}

/// Issues of a phase's citations: tasks citing an id the spec does not have, and requirements
/// the spec assigned to the phase that no task cites.
pub fn phase_requirement_issues(
    phase: &PhaseArtifact,
    requirements: &PhaseRequirements,
    issues: &mut Vec<InputIssue>,
) {
    let known: HashSet<&str> = requirements
        .known
        .iter()
        .map(|requirement| requirement.id.as_str())
        .collect();
    let mut cited: HashSet<&str> = HashSet::new();
    for (task_index, task) in phase.tasks.iter().enumerate() {
        for (index, id) in task.requirements.iter().enumerate() {
            if known.contains(id.as_str()) {
                cited.insert(id);
            } else {
                issues.push(InputIssue::rule(
                    format!("tasks[{task_index}].requirements[{index}]"),
                    format!(
                        "{id:?} is not a requirement of the spec ({}); cite one of them or none",
                        id_list(&requirements.known)
                    ),
                ));
            }
        }
    }
    for id in &requirements.assigned {
        if !cited.contains(id.as_str()) {
            let text = requirements
                .known
                .iter()
                .find(|requirement| &requirement.id == id)
                .map(|requirement| format!(" ({})", requirement.text))
                .unwrap_or_default();
            issues.push(InputIssue::rule(
                "tasks",
                format!(
                    "the spec assigns {id}{text} to this phase but no task cites it; add {id:?} \
                     to the `requirements` of the task that satisfies it, or add that task"
                ),
            ));
        }
    }
}

fn id_list(requirements: &[Requirement]) -> String {
    if requirements.is_empty() {
        return "it has none".to_owned();
    }
    requirements
        .iter()
        .map(|requirement| requirement.id.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::ReferenceLinks;
    use crate::artifacts::render::{render_phase_with, render_spec_markdown};
    use crate::artifacts::validation::assert_has_issue;
    use serde_json::json;

    fn spec(requirements: serde_json::Value, covers: [serde_json::Value; 3]) -> SpecArtifact {
        let [a, b, c] = covers;
        let phase = |name: &str, covers: serde_json::Value| json!({"name": name, "title": name, "description": "D", "requirements": covers});
        serde_json::from_value(json!({
            "name": "s", "title": "S", "overview": "O",
            "requirements": requirements,
            "phases": [phase("a", a), phase("b", b), phase("c", c)]
        }))
        .expect("spec")
    }

    fn requirement(id: &str) -> serde_json::Value {
        json!({"id": id, "text": format!("THE SYSTEM SHALL do {id}"), "check": "Look."})
    }

    fn spec_issues(spec: &SpecArtifact) -> Vec<InputIssue> {
        let mut issues = Vec::new();
        spec_requirement_issues(spec, &mut issues);
        issues
    }

    #[test]
    fn every_requirement_covered_by_a_known_phase_is_accepted() {
        let spec = spec(
            json!([requirement("R1"), requirement("R2")]),
            [json!(["R1"]), json!(["R1", "R2"]), json!([])],
        );
        assert_eq!(spec_issues(&spec), Vec::new());
    }

    #[test]
    fn a_requirement_no_phase_covers_is_named_with_its_fix() {
        let spec = spec(
            json!([requirement("R1"), requirement("R2")]),
            [json!(["R1"]), json!([]), json!([])],
        );
        assert_has_issue(
            &spec_issues(&spec),
            "requirements[1]",
            "R2 is covered by no phase; add \"R2\" to the `requirements` of the phase",
        );
    }

    #[test]
    fn a_phase_naming_an_unknown_id_is_told_the_known_ones() {
        let spec = spec(
            json!([requirement("R1")]),
            [json!(["R1"]), json!(["R7"]), json!([])],
        );
        assert_has_issue(
            &spec_issues(&spec),
            "phases[1].requirements[0]",
            "\"R7\" is not the id of a requirement of this spec (R1); name one of them",
        );
    }

    #[test]
    fn repeated_ids_are_refused() {
        let spec = spec(
            json!([requirement("R1"), requirement("R1")]),
            [json!(["R1"]), json!([]), json!([])],
        );
        assert_has_issue(
            &spec_issues(&spec),
            "requirements[1].id",
            "\"R1\" is already the id of requirements[0]",
        );
    }

    fn phase(citations: [serde_json::Value; 2]) -> PhaseArtifact {
        let [first, second] = citations;
        serde_json::from_value(json!({
            "name": "b", "title": "B", "objective": "O", "validation_command": "true",
            "tasks": [
                {"description": "One", "requirements": first},
                {"description": "Two", "requirements": second}
            ]
        }))
        .expect("phase")
    }

    fn assigned(spec: &SpecArtifact) -> PhaseRequirements {
        PhaseRequirements::of_spec(spec, "b", Some("../s/spec.md".to_owned()))
    }

    fn phase_issues(phase: &PhaseArtifact, requirements: &PhaseRequirements) -> Vec<InputIssue> {
        let mut issues = Vec::new();
        phase_requirement_issues(phase, requirements, &mut issues);
        issues
    }

    #[test]
    fn a_phase_must_cite_each_requirement_its_spec_assigned_it() {
        let spec = spec(
            json!([requirement("R1"), requirement("R2")]),
            [json!(["R1"]), json!(["R1", "R2"]), json!([])],
        );
        let requirements = assigned(&spec);
        assert_eq!(requirements.assigned, ["R1", "R2"]);
        let uncited = phase([json!(["R1"]), json!([])]);
        assert_has_issue(
            &phase_issues(&uncited, &requirements),
            "tasks",
            "the spec assigns R2 (THE SYSTEM SHALL do R2) to this phase but no task cites it",
        );
        let cited = phase([json!(["R1"]), json!(["R2"])]);
        assert_eq!(phase_issues(&cited, &requirements), Vec::new());
    }

    #[test]
    fn a_task_citing_an_unknown_id_is_refused() {
        let spec = spec(
            json!([requirement("R1")]),
            [json!(["R1"]), json!([]), json!([])],
        );
        let issues = phase_issues(&phase([json!(["R9"]), json!([])]), &assigned(&spec));
        assert_has_issue(
            &issues,
            "tasks[0].requirements[0]",
            "\"R9\" is not a requirement of the spec (R1); cite one of them or none",
        );
    }

    #[test]
    fn spec_md_anchors_each_requirement_and_phase_md_links_to_it() {
        let spec = spec(
            json!([requirement("R1")]),
            [json!([]), json!(["R1"]), json!([])],
        );
        let markdown = render_spec_markdown(&spec);
        assert!(
            markdown.contains(
                "## Requirements\n\n- <a id=\"R1\"></a>**R1:** THE SYSTEM SHALL do R1 *Check:* Look.\n"
            ),
            "{markdown}"
        );
        assert!(markdown.contains("**Covers:** R1\n"), "{markdown}");
        let requirements = assigned(&spec);
        let mut links = ReferenceLinks::none();
        links.link("R1", requirements.href("R1").expect("anchored"));
        let phase = phase([json!(["R1"]), json!([])]);
        let rendered = render_phase_with(&phase, &links).markdown;
        assert!(
            rendered.contains("1. One — satisfies [`R1`](../s/spec.md#R1)\n"),
            "{rendered}"
        );
    }

    #[test]
    fn a_spec_stored_before_requirements_reads_its_criteria_as_requirements() {
        let old: SpecArtifact = serde_json::from_value(json!({
            "name": "s", "title": "S", "overview": "O",
            "phases": [
                {"name": "a", "title": "A", "description": "D"},
                {"name": "b", "title": "B", "description": "D"},
                {"name": "c", "title": "C", "description": "D"}
            ],
            "acceptance_criteria": ["It prints the version", "It exits 0"]
        }))
        .expect("a spec in the format stored before requirements loads");
        let ids: Vec<String> = old
            .requirements_or_criteria()
            .into_iter()
            .map(|requirement| format!("{}: {}", requirement.id, requirement.text))
            .collect();
        assert_eq!(ids, ["R1: It prints the version", "R2: It exits 0"]);
        assert_eq!(spec_issues(&old), Vec::new());
        let markdown = render_spec_markdown(&old);
        assert!(markdown.contains("## Acceptance Criteria\n\n- [ ] It prints the version\n"));
        assert!(!markdown.contains("## Requirements"), "{markdown}");
        // Its phases cite nothing, and may cite the criteria by id, unlinked (spec.md has no
        // anchors).
        let requirements = assigned(&old);
        assert_eq!(requirements.href("R1"), None);
        let unciting = phase([json!([]), json!([])]);
        assert_eq!(phase_issues(&unciting, &requirements), Vec::new());
        let citing = phase([json!(["R2"]), json!([])]);
        assert_eq!(phase_issues(&citing, &requirements), Vec::new());
    }
}
