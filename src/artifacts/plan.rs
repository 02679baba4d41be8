//! The plan artifact (`create_plan`): its structure, the tool offered to the model, its
//! validation (1 to 10 specs, dependencies without cycles), and how its specs' references link
//! to its sections.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use super::references::{LinkedDocument, ReferenceLinks, ReferenceScope, check_references};
use super::render::{RenderedSections, render_plan};
use super::shapes::PlanArtifact;
use super::validation::{
    Checked, ValidationReport, name_issues, parse_against_schema, sparseness_issue,
};
use crate::llm::ToolSpec;
use crate::schema::{InputIssue, input_schema_for};

pub const CREATE_PLAN: &str = "create_plan";
const MAX_SPECS: usize = 10;
/// The seed's minimum content for a plan, in characters outside headings.
const MIN_PLAN_CONTENT: usize = 200;

/// The `create_plan` tool as offered to the model.
pub fn create_plan_spec() -> ToolSpec {
    ToolSpec::offered(
        CREATE_PLAN,
        "Deliver the plan with its specs, once you understand the project well enough. The \
         host checks it, stores it and renders plan.md for the user to review.",
        &input_schema_for::<PlanArtifact>(),
        Some(plan_example()),
    )
}

/// A small plan as a model would write it: what `create_plan`'s example call shows.
fn plan_example() -> Value {
    json!({
        "title": "Add a --version flag",
        "overview": "The CLI prints its version from Cargo.toml on --version, so that users \
                     can say what they run.",
        "specs": [
            {
                "name": "version-flag",
                "title": "Parse and print --version",
                "description": "Add the flag to the argument parser in src/cli.rs and print \
                                the crate's version."
            },
            {
                "name": "version-docs",
                "title": "Document --version",
                "description": "Describe the flag in README.md.",
                "dependencies": ["version-flag"]
            }
        ],
        "non_goals": ["Other flags"]
    })
}

/// Checks a `create_plan` input against its schema and the plan rules: 1–10 specs, unique
/// kebab-case names, dependencies that name specs of the plan, no dependency cycles,
/// references that resolve, and enough content to act on.
pub fn validate_plan(
    input: &Value,
    scope: &ReferenceScope,
) -> Result<Checked<PlanArtifact>, ValidationReport> {
    let plan: PlanArtifact = parse_against_schema(CREATE_PLAN, input)?;
    let mut issues = rule_issues(&plan);
    let draft = render_plan(&plan, &ReferenceLinks::none());
    let own = plan_document(&plan, &draft, "this plan", String::new());
    let mut links = ReferenceLinks::none();
    for (index, spec) in plan.specs.iter().enumerate() {
        check_references(
            &format!("specs[{index}].references"),
            &spec.references,
            &own,
            scope,
            &mut links,
            &mut issues,
        );
    }
    issues.extend(sparseness_issue("plan", &draft.markdown, MIN_PLAN_CONTENT));
    if issues.is_empty() {
        Ok(Checked {
            markdown: render_plan(&plan, &links).markdown,
            artifact: plan,
        })
    } else {
        Err(ValidationReport {
            tool: CREATE_PLAN,
            issues,
        })
    }
}

/// A stored plan as its children's references see it: plan.md at `href` (from the child's
/// markdown), its headings as `stored_markdown` has them, each spec by the section that
/// describes it.
pub fn linked_plan_document(
    plan: &PlanArtifact,
    href: String,
    stored_markdown: &str,
) -> LinkedDocument {
    let rendered = render_plan(plan, &ReferenceLinks::none());
    plan_document(plan, &rendered, "plan.md", href).confirmed_by(stored_markdown)
}

/// The plan's markdown as references see it, each output by the section that describes
/// it.
pub(super) fn plan_document(
    plan: &PlanArtifact,
    rendered: &RenderedSections,
    name: &str,
    href: String,
) -> LinkedDocument {
    let outputs = plan.specs.iter().map(|spec| spec.name.clone());
    LinkedDocument::at(
        name,
        href,
        &rendered.markdown,
        outputs.zip(rendered.section_lines.iter().copied()),
    )
}

fn rule_issues(plan: &PlanArtifact) -> Vec<InputIssue> {
    let mut issues = Vec::new();
    if plan.specs.is_empty() || plan.specs.len() > MAX_SPECS {
        issues.push(InputIssue::rule(
            "specs",
            format!(
                "has {} specs; a plan has 1 to {MAX_SPECS} specs",
                plan.specs.len()
            ),
        ));
    }
    let first_index = name_issues(
        "specs",
        plan.specs.iter().map(|spec| spec.name.as_str()),
        &mut issues,
    );
    let known: Vec<&str> = plan.specs.iter().map(|spec| spec.name.as_str()).collect();
    for (index, spec) in plan.specs.iter().enumerate() {
        for (dep_index, dependency) in spec.dependencies.iter().enumerate() {
            let location = format!("specs[{index}].dependencies[{dep_index}]");
            if dependency == &spec.name {
                issues.push(InputIssue::rule(
                    location,
                    format!(
                        "spec {:?} depends on itself; remove this dependency",
                        spec.name
                    ),
                ));
            } else if !first_index.contains_key(dependency.as_str()) {
                issues.push(InputIssue::rule(
                    location,
                    format!(
                        "{dependency:?} is not a spec of this plan; name one of [{}] or remove it",
                        known.join(", ")
                    ),
                ));
            }
        }
    }
    if let Some(cycle) = dependency_cycle(plan) {
        issues.push(InputIssue::rule(
            "specs",
            format!(
                "dependencies form a cycle: {}; remove one of these dependencies so the specs \
                 can run in order",
                cycle.join(" -> ")
            ),
        ));
    }
    issues
}

/// The first dependency cycle (of length two or more) found, as spec names ending where it
/// started. Self-dependencies are reported separately.
fn dependency_cycle(plan: &PlanArtifact) -> Option<Vec<String>> {
    let edges: HashMap<&str, Vec<&str>> = plan
        .specs
        .iter()
        .map(|spec| {
            let deps = spec
                .dependencies
                .iter()
                .map(String::as_str)
                .filter(|dep| *dep != spec.name)
                .collect();
            (spec.name.as_str(), deps)
        })
        .collect();
    let mut finished: HashSet<&str> = HashSet::new();
    for spec in &plan.specs {
        let mut path: Vec<&str> = Vec::new();
        if let Some(cycle) = visit(spec.name.as_str(), &edges, &mut path, &mut finished) {
            return Some(cycle);
        }
    }
    None
}

fn visit<'a>(
    node: &'a str,
    edges: &HashMap<&'a str, Vec<&'a str>>,
    path: &mut Vec<&'a str>,
    finished: &mut HashSet<&'a str>,
) -> Option<Vec<String>> {
    if finished.contains(node) {
        return None;
    }
    if let Some(start) = path.iter().position(|on_path| *on_path == node) {
        let mut cycle: Vec<String> = path[start..].iter().map(|name| name.to_string()).collect();
        cycle.push(node.to_owned());
        return Some(cycle);
    }
    path.push(node);
    for next in edges.get(node).into_iter().flatten() {
        if let Some(cycle) = visit(next, edges, path, finished) {
            return Some(cycle);
        }
    }
    path.pop();
    finished.insert(node);
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::validation::{assert_has_issue, detached_scope};
    use serde_json::json;

    fn valid_input() -> Value {
        json!({
            "title": "Add a --version flag",
            "overview": "Print the crate version when --version is given.",
            "specs": [
                {"name": "cli-flag", "title": "CLI flag", "description": "Parse --version.", "dependencies": []},
                {"name": "release-notes", "title": "Docs", "description": "Document it.", "dependencies": ["cli-flag"]}
            ],
            "non_goals": ["Changing other flags"],
            "risks": ["None worth noting"]
        })
    }

    fn issues_of(input: Value) -> Vec<InputIssue> {
        validate_plan(&input, &detached_scope())
            .expect_err("should be rejected")
            .issues
    }

    fn assert_issue(input: Value, location: &str, needle: &str) {
        assert_has_issue(&issues_of(input), location, needle);
    }

    #[test]
    fn a_valid_plan_is_accepted_with_optional_fields_defaulted() {
        let plan = validate_plan(&valid_input(), &detached_scope())
            .expect("valid")
            .artifact;
        assert_eq!(plan.specs.len(), 2);
        let mut minimal = valid_input();
        minimal.as_object_mut().expect("object").remove("risks");
        minimal["specs"][0]
            .as_object_mut()
            .expect("object")
            .remove("dependencies");
        let plan = validate_plan(&minimal, &detached_scope())
            .expect("valid")
            .artifact;
        assert!(plan.risks.is_empty() && plan.specs[0].dependencies.is_empty());
    }

    #[test]
    fn missing_required_fields_are_named() {
        let mut input = valid_input();
        input.as_object_mut().expect("object").remove("overview");
        assert_issue(input, "input", "overview");
    }

    #[test]
    fn zero_specs_are_rejected() {
        let mut input = valid_input();
        input["specs"] = json!([]);
        assert_issue(input, "specs", "change the number of items");
    }

    #[test]
    fn more_than_ten_specs_are_rejected() {
        let mut input = valid_input();
        input["specs"] = Value::Array(
            (0..11)
                .map(|i| json!({"name": format!("spec-{i}"), "title": "t", "description": "d"}))
                .collect(),
        );
        assert_issue(input, "specs", "change the number of items");
    }

    #[test]
    fn names_that_are_not_kebab_case_are_rejected() {
        for bad in ["User Auth", "userAuth", "user_auth", "-auth", "auth-"] {
            let mut input = valid_input();
            input["specs"][0]["name"] = json!(bad);
            input["specs"][1]["dependencies"] = json!([]);
            assert_issue(input, "specs[0].name", "lowercase words joined by hyphens");
        }
    }

    #[test]
    fn duplicate_names_are_rejected() {
        let mut input = valid_input();
        input["specs"][1]["name"] = json!("cli-flag");
        input["specs"][1]["dependencies"] = json!([]);
        assert_issue(input, "specs[1].name", "already the name of specs[0]");
    }

    #[test]
    fn unknown_dependencies_are_rejected_with_the_known_names() {
        let mut input = valid_input();
        input["specs"][1]["dependencies"] = json!(["auth"]);
        assert_issue(
            input,
            "specs[1].dependencies[0]",
            "\"auth\" is not a spec of this plan; name one of [cli-flag, release-notes]",
        );
    }

    #[test]
    fn self_dependencies_are_rejected() {
        let mut input = valid_input();
        input["specs"][0]["dependencies"] = json!(["cli-flag"]);
        assert_issue(input, "specs[0].dependencies[0]", "depends on itself");
    }

    #[test]
    fn dependency_cycles_are_rejected_with_the_cycle_spelled_out() {
        let mut input = valid_input();
        input["specs"][0]["dependencies"] = json!(["release-notes"]);
        assert_issue(input, "specs", "cli-flag -> release-notes -> cli-flag");
    }

    #[test]
    fn unknown_fields_and_wrong_types_are_rejected() {
        let mut input = valid_input();
        input["priority"] = json!("high");
        assert_issue(
            input,
            "input",
            "remove the fields the schema does not define",
        );
        let mut input = valid_input();
        input["risks"] = json!("one big risk");
        assert_issue(input, "risks", "use the type the schema gives");
    }

    #[test]
    fn a_sparse_plan_is_rejected() {
        let input = json!({
            "title": "Flag",
            "overview": "Add it.",
            "specs": [{"name": "flag", "title": "Flag", "description": "Do it."}]
        });
        assert_issue(input, "input", "too sparse");
    }

    #[test]
    fn references_are_checked_where_they_stand_and_rendered_as_links() {
        let mut input = valid_input();
        input["specs"][1]["references"] = json!(["#risks", "output:cli-flag", "src/main.rs"]);
        let issues = issues_of(input.clone());
        assert_eq!(issues.len(), 1, "{issues:#?}");
        assert_has_issue(
            &issues,
            "specs[1].references[2]",
            "\"src/main.rs\" is not an accepted reference; a reference is one of: \"#anchor\"",
        );
        input["specs"][1]["references"] = json!(["#risks", "output:cli-flag"]);
        let checked = validate_plan(&input, &detached_scope()).expect("valid");
        assert!(
            checked.markdown.contains(
                "**References:** [`#risks`](#risks), [`output:cli-flag`](#spec-1-cli-flag)\n"
            ),
            "{}",
            checked.markdown
        );
        assert_eq!(checked.artifact.specs[1].references.len(), 2);
    }

    #[test]
    fn the_report_tells_the_model_to_call_again() {
        let mut input = valid_input();
        input["specs"][1]["dependencies"] = json!(["auth"]);
        let text = validate_plan(&input, &detached_scope())
            .expect_err("invalid")
            .to_string();
        assert!(
            text.starts_with("create_plan rejected the input (1 problem)"),
            "{text}"
        );
        assert!(text.contains("call create_plan again"), "{text}");
    }

    #[test]
    fn the_schema_uses_the_seed_field_names_and_limits() {
        let schema = create_plan_spec().input_schema;
        assert_eq!(schema["type"], "object");
        for field in ["title", "overview", "specs", "non_goals", "risks"] {
            assert!(schema["properties"].get(field).is_some(), "{field}");
        }
        let required: Vec<&str> = schema["required"]
            .as_array()
            .expect("required")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(required, vec!["title", "overview", "specs"]);
        let specs = &schema["properties"]["specs"];
        assert_eq!(
            (specs["minItems"].as_u64(), specs["maxItems"].as_u64()),
            (Some(1), Some(10))
        );
        let item = &specs["items"];
        for field in ["name", "title", "description", "dependencies"] {
            assert!(item["properties"].get(field).is_some(), "{field}");
        }
        assert!(schema.get("$defs").is_none() && !schema.to_string().contains("$ref"));
    }
}
