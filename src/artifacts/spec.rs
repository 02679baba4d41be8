//! The spec artifact (`create_spec`): its structure, the tool offered to the model, its
//! validation (3 to 7 phases), and how its phases' references link to its sections.

use serde_json::{Value, json};

use super::references::{LinkedDocument, ReferenceLinks, ReferenceScope, check_references};
use super::render::{RenderedSections, render_spec};
use super::requirements::spec_requirement_issues;
use super::shapes::SpecArtifact;
use super::validation::{
    Checked, ValidationReport, name_issues, parse_against_schema, sparseness_issue,
};
use crate::llm::ToolSpec;
use crate::schema::{InputIssue, input_schema_for};

pub const CREATE_SPEC: &str = "create_spec";
const MIN_PHASES: usize = 3;
const MAX_PHASES: usize = 7;
/// The seed's minimum content for a spec, in characters outside headings.
const MIN_SPEC_CONTENT: usize = 300;

pub fn create_spec_spec() -> ToolSpec {
    ToolSpec::offered(
        CREATE_SPEC,
        "Deliver the spec with its phases, once you understand the part of the project it \
         touches. The host checks it, stores it and renders spec.md.",
        &input_schema_for::<SpecArtifact>(),
        Some(spec_example()),
    )
}

/// A small spec as a model would write it, of the first spec of `create_plan`'s example:
/// what `create_spec`'s example call shows.
fn spec_example() -> Value {
    json!({
        "name": "version-flag",
        "title": "Parse and print --version",
        "overview": "src/cli.rs parses the arguments with clap: add a version flag there and \
                     print env!(\"CARGO_PKG_VERSION\") when it is set.",
        "requirements": [
            {
                "id": "R1",
                "text": "WHEN run with --version THE SYSTEM SHALL print the version",
                "check": "tests/cli.rs runs it"
            }
        ],
        "phases": [
            {
                "name": "parse-flag",
                "title": "Parse the flag",
                "description": "Add --version to the arguments.",
                "files": ["src/cli.rs"],
                "requirements": ["R1"]
            },
            {
                "name": "print-version",
                "title": "Print the version",
                "description": "Print the version and exit 0 when the flag is set.",
                "files": ["src/main.rs"],
                "requirements": ["R1"]
            },
            {
                "name": "test-flag",
                "title": "Test the flag",
                "description": "Run the binary with --version in a test.",
                "files": ["tests/cli.rs"],
                "validation": "cargo test --test cli"
            }
        ],
        "acceptance_criteria": ["`demo --version` prints the version and exits 0"],
        "test_strategy": "An integration test runs the built binary."
    })
}

/// Checks a `create_spec` input: the schema, the name of the spec it was spawned for, 3–7
/// phases with unique kebab-case names, requirements each covered by a phase, references that
/// resolve, and enough content.
pub fn validate_spec(
    input: &Value,
    expected_name: &str,
    scope: &ReferenceScope,
) -> Result<Checked<SpecArtifact>, ValidationReport> {
    let spec: SpecArtifact = parse_against_schema(CREATE_SPEC, input)?;
    let mut issues = Vec::new();
    if spec.name != expected_name {
        issues.push(InputIssue::rule(
            "name",
            format!(
                "{:?} is not the spec you were asked for; this spec is named {expected_name:?} \
                 in the plan, use exactly that",
                spec.name
            ),
        ));
    }
    if !(MIN_PHASES..=MAX_PHASES).contains(&spec.phases.len()) {
        issues.push(InputIssue::rule(
            "phases",
            format!(
                "has {} phases; a spec has {MIN_PHASES} to {MAX_PHASES} phases (Rule of Five)",
                spec.phases.len()
            ),
        ));
    }
    name_issues(
        "phases",
        spec.phases.iter().map(|phase| phase.name.as_str()),
        &mut issues,
    );
    spec_requirement_issues(&spec, &mut issues);
    let draft = render_spec(&spec, &ReferenceLinks::none());
    let own = spec_document(&spec, &draft, "this spec", String::new());
    let mut links = ReferenceLinks::none();
    for (index, phase) in spec.phases.iter().enumerate() {
        check_references(
            &format!("phases[{index}].references"),
            &phase.references,
            &own,
            scope,
            &mut links,
            &mut issues,
        );
    }
    issues.extend(sparseness_issue("spec", &draft.markdown, MIN_SPEC_CONTENT));
    if issues.is_empty() {
        Ok(Checked {
            markdown: render_spec(&spec, &links).markdown,
            artifact: spec,
        })
    } else {
        Err(ValidationReport {
            tool: CREATE_SPEC,
            issues,
        })
    }
}

/// A stored spec as its phases' references see it: spec.md at `href` (from the phase's
/// markdown), its headings as `stored_markdown` has them, each phase by the section that
/// describes it.
pub fn linked_spec_document(
    spec: &SpecArtifact,
    href: String,
    stored_markdown: &str,
) -> LinkedDocument {
    let rendered = render_spec(spec, &ReferenceLinks::none());
    spec_document(spec, &rendered, "spec.md", href).confirmed_by(stored_markdown)
}

/// The spec's markdown as references see it, each output by the section that describes
/// it.
pub(super) fn spec_document(
    spec: &SpecArtifact,
    rendered: &RenderedSections,
    name: &str,
    href: String,
) -> LinkedDocument {
    let outputs = spec.phases.iter().map(|phase| phase.name.clone());
    LinkedDocument::at(
        name,
        href,
        &rendered.markdown,
        outputs.zip(rendered.section_lines.iter().copied()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::validation::{assert_has_issue, detached_scope};
    use serde_json::json;

    fn valid_spec() -> Value {
        let phase = |name: &str, title: &str| {
            json!({
                "name": name,
                "title": title,
                "description": format!("{title}: change the code and cover it with unit tests so the behaviour is pinned down."),
                "files": ["src/main.rs"],
                "validation": "cargo test",
                "requirements": ["R1"]
            })
        };
        json!({
            "name": "version-flag",
            "title": "Parse --version",
            "overview": "Teach the CLI to recognise --version and print the version from Cargo.toml, then exit with status 0 without running anything else.",
            "requirements": [{"id": "R1", "text": "WHEN run as `sample --version` THE SYSTEM SHALL print `sample 0.3.1`", "check": "Run the binary."}],
            "phases": [phase("parse-flag", "Parse the flag"), phase("print-version", "Print the version"), phase("exit-code", "Exit cleanly")],
            "acceptance_criteria": ["`sample --version` prints `sample 0.3.1`"],
            "test_strategy": "Unit tests for parsing, an integration test running the binary."
        })
    }

    fn assert_issue(input: Value, location: &str, needle: &str) {
        let issues = validate_spec(&input, "version-flag", &detached_scope())
            .expect_err("rejected")
            .issues;
        assert_has_issue(&issues, location, needle);
    }

    #[test]
    fn a_valid_spec_is_accepted() {
        let spec = validate_spec(&valid_spec(), "version-flag", &detached_scope())
            .expect("valid")
            .artifact;
        assert_eq!(spec.phases.len(), 3);
    }

    #[test]
    fn the_name_must_be_the_spec_it_was_spawned_for() {
        let mut input = valid_spec();
        input["name"] = json!("other-spec");
        assert_issue(input, "name", "this spec is named \"version-flag\"");
    }

    #[test]
    fn fewer_than_three_or_more_than_seven_phases_break_the_rule_of_five() {
        let mut two = valid_spec();
        two["phases"].as_array_mut().expect("phases").truncate(2);
        assert_issue(two, "phases", "change the number of items");
        let mut eight = valid_spec();
        let first = eight["phases"][0].clone();
        let phases = eight["phases"].as_array_mut().expect("phases");
        for index in 0..5 {
            let mut extra = first.clone();
            extra["name"] = json!(format!("extra-{index}"));
            phases.push(extra);
        }
        assert_issue(eight, "phases", "change the number of items");
    }

    #[test]
    fn phase_names_must_be_unique_and_kebab_case() {
        let mut duplicate = valid_spec();
        duplicate["phases"][2]["name"] = json!("parse-flag");
        assert_issue(duplicate, "phases[2].name", "already the name of phases[0]");
        let mut shouty = valid_spec();
        shouty["phases"][1]["name"] = json!("PrintVersion");
        assert_issue(
            shouty,
            "phases[1].name",
            "lowercase words joined by hyphens",
        );
    }

    #[test]
    fn phase_references_may_point_into_the_plan() {
        let plan: crate::artifacts::PlanArtifact = serde_json::from_value(json!({
            "title": "Version", "overview": "Add a flag.",
            "specs": [{"name": "version-flag", "title": "Flag", "description": "Parse it."},
                      {"name": "docs", "title": "Docs", "description": "Write them."}]
        }))
        .expect("plan");
        let stored = crate::artifacts::render_plan_markdown(&plan);
        let parent =
            crate::artifacts::linked_plan_document(&plan, "../p/plan.md".to_owned(), &stored);
        let scope = ReferenceScope {
            parent: Some(parent),
            path_exists: &|_| false,
        };
        let mut input = valid_spec();
        input["phases"][2]["references"] = json!([
            "#overview",
            "#spec-2-docs",
            "output:docs",
            "output:parse-flag"
        ]);
        let checked = validate_spec(&input, "version-flag", &scope).expect("valid");
        assert!(
            checked.markdown.contains(
                "**References:** [`#overview`](#overview), \
                 [`#spec-2-docs`](../p/plan.md#spec-2-docs), \
                 [`output:docs`](../p/plan.md#spec-2-docs), \
                 [`output:parse-flag`](#phase-1-parse-the-flag)\n"
            ),
            "{}",
            checked.markdown
        );
        input["phases"][2]["references"] = json!(["#risks"]);
        let issues = validate_spec(&input, "version-flag", &scope)
            .expect_err("no such heading")
            .issues;
        assert_has_issue(
            &issues,
            "phases[2].references[0]",
            "\"#risks\" is not a heading of this spec or of plan.md",
        );
    }

    #[test]
    fn requirements_are_required_with_well_formed_ids() {
        let mut none = valid_spec();
        none.as_object_mut().expect("spec").remove("requirements");
        assert_issue(none, "input", "\"requirements\" is a required property");
        let mut malformed = valid_spec();
        malformed["requirements"][0]["id"] = json!("req-1");
        assert_issue(
            malformed,
            "requirements[0].id",
            "does not match \"^R[1-9][0-9]*$\"; write \"R\" and a number, e.g. \"R1\"",
        );
        let mut uncovered = valid_spec();
        for phase in uncovered["phases"].as_array_mut().expect("phases") {
            phase.as_object_mut().expect("phase").remove("requirements");
        }
        assert_issue(uncovered, "requirements[0]", "R1 is covered by no phase");
    }

    #[test]
    fn a_sparse_spec_is_rejected() {
        let phase = |name: &str| json!({"name": name, "title": "T", "description": "D", "requirements": ["R1"]});
        let input = json!({"name": "version-flag", "title": "V", "overview": "O",
            "requirements": [{"id": "R1", "text": "T", "check": "C"}],
            "phases": [phase("a"), phase("b"), phase("c")]});
        assert_issue(input, "input", "too sparse");
    }
}
