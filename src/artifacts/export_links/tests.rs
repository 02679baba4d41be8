//! The export layout: every relative link of every file resolves, done tasks ticked, slugs.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::artifacts::heading_slugs;

fn plan() -> PlanArtifact {
    serde_json::from_value(json!({
        "title": "Add a --version flag",
        "overview": "Print the version.",
        "specs": [
            {"name": "version-flag", "title": "Parse [--version]", "description": "Parse it.",
             "dependencies": [], "references": ["output:version-docs", "#risks", "/etc/hosts"]},
            {"name": "version-docs", "title": "Document it", "description": "Docs.",
             "dependencies": ["version-flag"]},
            {"name": "not-yet", "title": "Later", "description": "Not written yet.",
             "dependencies": []}
        ],
        "non_goals": [],
        "risks": ["None"]
    }))
    .expect("plan")
}

fn spec(name: &str, phases: &[&str]) -> SpecArtifact {
    let phases: Vec<_> = phases
        .iter()
        .map(|phase| {
            json!({"name": phase, "title": format!("Do {phase}"), "description": "Work.",
                   "requirements": ["R1"],
                   "references": ["#risks", "output:version-docs", format!("output:{}", phases_first())]})
        })
        .collect();
    serde_json::from_value(json!({
        "name": name, "title": format!("Spec {name}"), "overview": "Overview.",
        "requirements": [{"id": "R1", "text": "It prints.", "check": "Run it."}],
        "phases": phases, "acceptance_criteria": [], "test_strategy": "Tests."
    }))
    .expect("spec")
}

fn phases_first() -> &'static str {
    "parse-flag"
}

fn phase(name: &str, done: &[usize]) -> ExportPhase {
    ExportPhase {
        phase: serde_json::from_value(json!({
            "name": name, "title": format!("Do {name}"), "objective": "Do it.",
            "tasks": [
                {"description": "First", "file": "src/main.rs", "action": "modify",
                 "requirements": ["R1"], "references": ["#overview", "output:print-it", "#tasks"]},
                {"description": "Second"}
            ],
            "validation_command": "cargo test", "success_criteria": []
        }))
        .expect("phase"),
        done: done.iter().copied().collect(),
    }
}

/// A plan of three specs: the first with its three phases, the second with one of its two,
/// the third not written yet.
fn tree() -> ExportTree {
    ExportTree {
        plan: plan(),
        specs: vec![
            ExportSpec {
                spec: spec("version-docs", &["readme", "changelog"]),
                phases: vec![phase("changelog", &[])],
            },
            ExportSpec {
                spec: spec("version-flag", &["parse-flag", "print-it", "exit-code"]),
                phases: vec![
                    phase("exit-code", &[]),
                    phase("parse-flag", &[1]),
                    phase("print-it", &[1, 2]),
                ],
            },
        ],
    }
}

/// The anchors a file has: its headings' slugs and the ids of its anchors.
fn anchors(markdown: &str) -> Vec<String> {
    let mut anchors: Vec<String> = heading_slugs(markdown)
        .into_iter()
        .map(|(_, slug)| slug)
        .collect();
    for (start, _) in markdown.match_indices("<a id=\"") {
        let rest = &markdown[start + 7..];
        anchors.push(rest[..rest.find('"').expect("closing quote")].to_owned());
    }
    anchors
}

/// Every link of every file that is not a URL, resolved from the file's folder: the file it
/// names is exported and has the anchor it names. Returns the links that name a file, as
/// (from, to).
fn resolve_every_link(files: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut resolved = Vec::new();
    for (path, markdown) in files {
        let folder = Path::new(path).parent().expect("a folder");
        for (start, _) in markdown.match_indices("](") {
            let rest = &markdown[start + 2..];
            let destination = match rest.strip_prefix('<') {
                Some(angled) => &angled[..angled.find('>').expect("closing >")],
                None => &rest[..rest.find(')').expect("closing )")],
            };
            assert!(
                !destination.starts_with("file:"),
                "{path}: {destination} names a file outside the repository"
            );
            if destination.contains("://") {
                continue;
            }
            let (file, fragment) = destination.split_once('#').unwrap_or((destination, ""));
            let target = if file.is_empty() {
                path.clone()
            } else {
                let mut joined = folder.to_path_buf();
                for part in file.split('/') {
                    if part == ".." {
                        assert!(
                            joined.pop(),
                            "{path}: {destination} leaves the plan's folder"
                        );
                    } else {
                        joined.push(part);
                    }
                }
                joined.to_string_lossy().into_owned()
            };
            let text = files
                .get(&target)
                .unwrap_or_else(|| panic!("{path}: {destination} -> {target} is not exported"));
            assert!(
                fragment.is_empty() || anchors(text).iter().any(|anchor| anchor == fragment),
                "{path}: {destination}: no anchor #{fragment} in {target}"
            );
            if !file.is_empty() {
                resolved.push((path.clone(), target));
            }
        }
    }
    resolved
}

#[test]
fn every_relative_link_of_every_exported_file_resolves_to_an_exported_file_and_anchor() {
    let files: BTreeMap<String, String> = export_files(&tree())
        .into_iter()
        .map(|file| (file.path, file.markdown))
        .collect();
    let paths: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            "README.md",
            "version-docs/02-changelog.md",
            "version-docs/README.md",
            "version-flag/01-parse-flag.md",
            "version-flag/02-print-it.md",
            "version-flag/03-exit-code.md",
            "version-flag/README.md",
        ]
    );
    let links = resolve_every_link(&files);
    let has = |from: &str, to: &str| links.iter().any(|(f, t)| f == from && t == to);
    // Down the tree and back up.
    assert!(has("README.md", "version-flag/README.md"), "{links:#?}");
    assert!(has("version-flag/README.md", "version-flag/02-print-it.md"));
    assert!(has("version-flag/README.md", "README.md"));
    assert!(has("version-flag/02-print-it.md", "version-flag/README.md"));
    assert!(has("version-flag/02-print-it.md", "README.md"));
    // A reference to an output links to the output's own file.
    assert!(has("version-flag/README.md", "version-docs/README.md"));
    assert!(has(
        "version-flag/01-parse-flag.md",
        "version-flag/02-print-it.md"
    ));
    // A requirement a task cites links to its anchor in the spec.
    assert!(files["version-flag/01-parse-flag.md"].contains("](README.md#R1)"));
}

#[test]
fn what_is_not_exported_is_named_without_a_link_and_absolute_paths_stay_code() {
    let files = export_files(&tree());
    let plan = &files[0].markdown;
    assert!(plan.contains("- Spec 3: Later (not written yet)"), "{plan}");
    assert!(plan.contains("[Spec 1: Parse \\[--version\\]](version-flag/README.md)"));
    assert!(plan.contains("`/etc/hosts`"), "{plan}");
    let docs = files
        .iter()
        .find(|file| file.path == "version-docs/README.md")
        .expect("the docs spec");
    assert!(
        docs.markdown
            .contains("- Phase 1: Do readme (not written yet)")
    );
    assert!(
        docs.markdown
            .contains("- [Phase 2: Do changelog](02-changelog.md)")
    );
}

#[test]
fn done_tasks_are_ticked() {
    let files = export_files(&tree());
    let boxes = |path: &str| -> Vec<String> {
        let file = files.iter().find(|file| file.path == path).expect(path);
        file.markdown
            .lines()
            .filter(|line| line.starts_with("- [") && line[6..].starts_with(char::is_numeric))
            .map(|line| line[..8].to_owned())
            .collect()
    };
    assert_eq!(
        boxes("version-flag/01-parse-flag.md"),
        ["- [x] 1.", "- [ ] 2."]
    );
    assert_eq!(
        boxes("version-flag/02-print-it.md"),
        ["- [x] 1.", "- [x] 2."]
    );
    assert_eq!(
        boxes("version-flag/03-exit-code.md"),
        ["- [ ] 1.", "- [ ] 2."]
    );
}

#[test]
fn slugs_are_safe_names_and_made_unique() {
    assert_eq!(
        path_slug("Add_a --version flag!", "plan"),
        "add-a-version-flag"
    );
    assert_eq!(path_slug("../../etc", "plan"), "etc");
    assert_eq!(path_slug("Größe ändern", "plan"), "gr-e-ndern");
    assert_eq!(path_slug("%%%", "plan"), "plan");
    assert_eq!(path_slug(&"a".repeat(100), "plan").len(), MAX_SLUG_CHARS);
    let taken = ["auth", "auth-2"];
    assert_eq!(unique_slug("auth", |s| taken.contains(&s)), "auth-3");
    assert_eq!(unique_slug("login", |s| taken.contains(&s)), "login");
}
