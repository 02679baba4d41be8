use std::fmt::Write;

use super::PlanArtifact;

/// plan.md, rendered from the structured plan. Rendering is one-way: nothing parses it back.
pub fn render_plan_markdown(plan: &PlanArtifact) -> String {
    let mut md = String::new();
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
    }
    write_list(&mut md, "Non-Goals", &plan.non_goals);
    write_list(&mut md, "Risks", &plan.risks);
    md.truncate(md.trim_end().len());
    md.push('\n');
    md
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
    use super::*;
    use crate::artifacts::SpecReference;

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
                },
                SpecReference {
                    name: "docs".to_owned(),
                    title: "Document the flag".to_owned(),
                    description: "Mention it in README.md and the man page.".to_owned(),
                    dependencies: vec!["cli-flag".to_owned()],
                },
            ],
            non_goals: vec!["A `version` subcommand".to_owned()],
            risks: vec!["Version drift between Cargo.toml and docs; read it from\nCARGO_PKG_VERSION".to_owned()],
        }
    }

    #[test]
    fn plan_markdown_snapshot() {
        insta::assert_snapshot!(render_plan_markdown(&plan()));
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
}
