//! A plan tree as files for a code forge: plan, specs and phases laid out in folders with
//! relative links between them (plan to specs to phases and back up) that resolve on GitHub
//! or GitLab. Rendered through the same markdown rendering as the stored artifacts; only the
//! links differ. Pure: the caller reads the artifacts and writes the files.

use std::collections::BTreeSet;
use std::fmt::Write;
use std::path::Path;

use super::plan::plan_document;
use super::references::{LinkedDocument, ReferenceLinks, ReferenceScope, check_references};
use super::render::{render_phase_with, render_plan, render_spec, set_task_boxes};
use super::requirements::PhaseRequirements;
use super::shapes::{PhaseArtifact, PlanArtifact, SpecArtifact};
use super::spec::spec_document;
use super::{linked_plan_document, linked_spec_document};

/// The file every folder opens with on a forge: the plan's, and each spec's.
const FOLDER_PAGE: &str = "README.md";

/// The longest slug a file or folder name gets, so paths stay readable.
const MAX_SLUG_CHARS: usize = 48;

/// What is exported of a plan tree: the plan and the specs and phases that have an artifact.
#[derive(Clone, Debug)]
pub struct ExportTree {
    pub plan: PlanArtifact,
    /// In any order: they are laid out in the plan's order; one the plan does not name is
    /// left out.
    pub specs: Vec<ExportSpec>,
}

#[derive(Clone, Debug)]
pub struct ExportSpec {
    pub spec: SpecArtifact,
    /// In any order, laid out in the spec's order.
    pub phases: Vec<ExportPhase>,
}

#[derive(Clone, Debug)]
pub struct ExportPhase {
    pub phase: PhaseArtifact,
    /// The numbers (from 1) of the tasks done, ticked in the file.
    pub done: BTreeSet<usize>,
}

/// One exported file: its path below the plan's folder (`/`-separated) and its markdown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportedFile {
    pub path: String,
    pub markdown: String,
}

/// `text` as a file or folder name that is safe everywhere and needs no escaping in a link:
/// lowercase ASCII letters, digits and single hyphens, at most `MAX_SLUG_CHARS`; `fallback`
/// when nothing is left.
pub fn path_slug(text: &str, fallback: &str) -> String {
    let mut slug = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
        if slug.len() >= MAX_SLUG_CHARS {
            break;
        }
    }
    let slug = slug.trim_end_matches('-');
    if slug.is_empty() {
        fallback.to_owned()
    } else {
        slug.to_owned()
    }
}

/// `base`, or `base-2`, `base-3`... the first that `taken` does not hold.
pub fn unique_slug(base: &str, taken: impl Fn(&str) -> bool) -> String {
    if !taken(base) {
        return base.to_owned();
    }
    (2..)
        .map(|number| format!("{base}-{number}"))
        .find(|candidate| !taken(candidate))
        .unwrap_or_else(|| base.to_owned())
}

/// Where each spec and phase of the plan lands, by the plan's and specs' order.
struct Layout<'a> {
    /// Each exported spec with its folder, in the plan's order.
    specs: Vec<(&'a ExportSpec, String)>,
}

impl<'a> Layout<'a> {
    fn of(tree: &'a ExportTree) -> Layout<'a> {
        let mut folders: Vec<String> = Vec::new();
        let mut specs = Vec::new();
        for (index, planned) in tree.plan.specs.iter().enumerate() {
            let Some(exported) = tree.specs.iter().find(|s| s.spec.name == planned.name) else {
                continue;
            };
            let base = path_slug(&planned.name, &format!("spec-{}", index + 1));
            let folder = unique_slug(&base, |candidate| folders.iter().any(|f| f == candidate));
            folders.push(folder.clone());
            specs.push((exported, folder));
        }
        Layout { specs }
    }

    /// The path of the spec named `name`, when it is exported.
    fn spec_path(&self, name: &str) -> Option<String> {
        self.specs
            .iter()
            .find(|(spec, _)| spec.spec.name == name)
            .map(|(_, folder)| format!("{folder}/{FOLDER_PAGE}"))
    }

    /// The path of the phase named `name` of the spec in `folder`, when it is exported.
    fn phase_path(spec: &ExportSpec, folder: &str, name: &str) -> Option<String> {
        Layout::phase_file_name(spec, name).map(|file| format!("{folder}/{file}"))
    }

    /// The file name of the phase named `name` of `spec` (`02-print-it.md`: its place in the
    /// spec, then its name), when it is exported.
    fn phase_file_name(spec: &ExportSpec, name: &str) -> Option<String> {
        spec.phases.iter().find(|p| p.phase.name == name)?;
        let position = spec.spec.phases.iter().position(|p| p.name == name)?;
        let slug = path_slug(name, "phase");
        Some(format!("{:02}-{slug}.md", position + 1))
    }
}

/// The files of `tree`: the plan's `README.md`, each spec's `<spec>/README.md` and each
/// phase's `<spec>/<nn>-<phase>.md`, with references that name a spec or phase linked to its
/// file, headings linked as the forge anchors them, and links up and down the tree.
pub fn export_files(tree: &ExportTree) -> Vec<ExportedFile> {
    let layout = Layout::of(tree);
    let plan_markdown = plan_file(tree, &layout);
    let mut files = vec![ExportedFile {
        path: FOLDER_PAGE.to_owned(),
        markdown: plan_markdown.clone(),
    }];
    for (exported, folder) in &layout.specs {
        let spec_markdown = spec_file(tree, &layout, exported, folder, &plan_markdown);
        for (index, planned) in exported.spec.phases.iter().enumerate() {
            let Some(phase) = exported
                .phases
                .iter()
                .find(|p| p.phase.name == planned.name)
            else {
                continue;
            };
            let Some(path) = Layout::phase_path(exported, folder, &planned.name) else {
                continue;
            };
            let markdown = phase_file(tree, exported, phase, index, &spec_markdown);
            files.push(ExportedFile { path, markdown });
        }
        files.push(ExportedFile {
            path: format!("{folder}/{FOLDER_PAGE}"),
            markdown: spec_markdown,
        });
    }
    files
}

fn plan_file(tree: &ExportTree, layout: &Layout) -> String {
    let plan = &tree.plan;
    let draft = render_plan(plan, &ReferenceLinks::none());
    let own = plan_document(plan, &draft, "this plan", String::new());
    let mut links = links_for(&own, None, plan.specs.iter().map(|s| &s.references));
    link_outputs(
        &mut links,
        plan.specs.iter().map(|s| &s.references),
        |name| layout.spec_path(name),
    );
    let mut markdown = render_plan(plan, &links).markdown;
    markdown.push_str("\n---\n\n**Specs of this plan:**\n\n");
    for (index, spec) in plan.specs.iter().enumerate() {
        let title = format!("Spec {}: {}", index + 1, link_text(&spec.title));
        let _ = match layout.spec_path(&spec.name) {
            Some(path) => writeln!(markdown, "- [{title}]({path})"),
            None => writeln!(markdown, "- {title} (not written yet)"),
        };
    }
    markdown.push_str(MIRROR_NOTE);
    markdown
}

fn spec_file(
    tree: &ExportTree,
    layout: &Layout,
    exported: &ExportSpec,
    folder: &str,
    plan_markdown: &str,
) -> String {
    let spec = &exported.spec;
    let draft = render_spec(spec, &ReferenceLinks::none());
    let own = spec_document(spec, &draft, "this spec", String::new());
    let parent = linked_plan_document(&tree.plan, format!("../{FOLDER_PAGE}"), plan_markdown);
    let references = || spec.phases.iter().map(|p| &p.references);
    let mut links = links_for(&own, Some(parent), references());
    link_outputs(&mut links, references(), |name| {
        Layout::phase_path(exported, folder, name)
            .or_else(|| layout.spec_path(name))
            .map(|path| relative_to(folder, &path))
    });
    let mut markdown = render_spec(spec, &links).markdown;
    let _ = write!(
        markdown,
        "\n---\n\n**Plan:** [Plan: {}](../{FOLDER_PAGE})\n\n**Phases of this spec:**\n\n",
        link_text(&tree.plan.title)
    );
    for (index, phase) in spec.phases.iter().enumerate() {
        let title = format!("Phase {}: {}", index + 1, link_text(&phase.title));
        let _ = match Layout::phase_path(exported, folder, &phase.name) {
            Some(path) => writeln!(markdown, "- [{title}]({})", relative_to(folder, &path)),
            None => writeln!(markdown, "- {title} (not written yet)"),
        };
    }
    markdown.push_str(MIRROR_NOTE);
    markdown
}

fn phase_file(
    tree: &ExportTree,
    exported: &ExportSpec,
    phase: &ExportPhase,
    index: usize,
    spec_markdown: &str,
) -> String {
    let artifact = &phase.phase;
    let spec = &exported.spec;
    let draft = render_phase_with(artifact, &ReferenceLinks::none()).markdown;
    let own = LinkedDocument::own("this phase", &draft, []);
    let parent = linked_spec_document(spec, FOLDER_PAGE.to_owned(), spec_markdown);
    let references = || artifact.tasks.iter().map(|task| &task.references);
    let mut links = links_for(&own, Some(parent), references());
    link_outputs(&mut links, references(), |name| {
        // A sibling phase, in the same folder.
        Layout::phase_file_name(exported, name)
    });
    let requirements =
        PhaseRequirements::of_spec(spec, &artifact.name, Some(FOLDER_PAGE.to_owned()));
    for id in artifact.tasks.iter().flat_map(|task| &task.requirements) {
        if let Some(href) = requirements.href(id) {
            links.link(id, href);
        }
    }
    let rendered = render_phase_with(artifact, &links);
    let ticked: Vec<bool> = (1..=rendered.task_lines.len())
        .map(|number| phase.done.contains(&number))
        .collect();
    let mut markdown = set_task_boxes(&rendered.markdown, &rendered.task_lines, &ticked);
    let _ = write!(
        markdown,
        "\n---\n\n**Spec:** [Spec: {}]({FOLDER_PAGE}) (phase {} of {}) · **Plan:** [Plan: {}](../{FOLDER_PAGE})\n",
        link_text(&spec.title),
        index + 1,
        spec.phases.len(),
        link_text(&tree.plan.title)
    );
    markdown.push_str(MIRROR_NOTE);
    markdown
}

/// Said at the end of every file, so a reader of the repository knows where it comes from.
const MIRROR_NOTE: &str = "\n*Mirrored by Loopr from its plan; Loopr updates this file while \
                           it is as Loopr wrote it, and leaves it alone once edited.*\n";

/// The links of `references` as the artifacts' own rules resolve them, against `own` and
/// `parent` as they stand in the export. A reference that does not resolve here (an absolute
/// path: no use in a repository) renders as code.
fn links_for<'a>(
    own: &LinkedDocument,
    parent: Option<LinkedDocument>,
    references: impl IntoIterator<Item = &'a Vec<String>>,
) -> ReferenceLinks {
    let scope = ReferenceScope {
        parent,
        path_exists: &|_: &Path| false,
    };
    let mut links = ReferenceLinks::none();
    let mut unresolved = Vec::new();
    for list in references {
        check_references("references", list, own, &scope, &mut links, &mut unresolved);
    }
    links
}

/// Links each `output:<name>` reference whose output has a file of its own to that file
/// (`path_of`, relative to the file being rendered), rather than to a section describing it.
fn link_outputs<'a>(
    links: &mut ReferenceLinks,
    references: impl IntoIterator<Item = &'a Vec<String>>,
    path_of: impl Fn(&str) -> Option<String>,
) {
    for reference in references.into_iter().flatten() {
        if let Some(path) = reference.strip_prefix("output:").and_then(&path_of) {
            links.link(reference, path);
        }
    }
}

/// `path` (below the plan's folder) as a link from a file in `folder` (`""`: the plan's).
fn relative_to(folder: &str, path: &str) -> String {
    match path.split_once('/') {
        Some((dir, name)) if dir == folder => name.to_owned(),
        _ if folder.is_empty() => path.to_owned(),
        _ => format!("../{path}"),
    }
}

/// `text` on one line, safe inside a link's brackets.
fn link_text(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut escaped = String::with_capacity(line.len());
    for c in line.chars() {
        if matches!(c, '[' | ']' | '\\' | '<' | '>' | '`' | '*' | '_') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests;
