//! References: the `references` lists of plan specs, spec phases and phase tasks. Each one is
//! checked against what is knowable when the artifact is accepted (its own markdown, its
//! parent's markdown, the names of the plan's outputs, the file system through a probe) and
//! rendered as a link that works from where the artifact's markdown is written.

use std::collections::HashMap;
use std::fmt::Write;
use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;

use crate::schema::InputIssue;

/// The forms a reference may take, as every reference issue names them.
pub const ACCEPTED_FORMS: &str = "a reference is one of: \"#anchor\" (the GitHub slug of a \
     heading of this artifact's markdown or of its parent's: lowercase, spaces become hyphens, \
     punctuation removed, \"-1\", \"-2\" added for repeated headings), \"output:<name>\" (a spec \
     or phase of this plan by name), an http:// or https:// URL, or an absolute path that exists";

/// A markdown document references can point into: the artifact's own, or its parent's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkedDocument {
    /// How reports name it: "this spec", "plan.md".
    pub name: String,
    /// The link to it from the artifact's own markdown; empty for the artifact's own.
    pub href: String,
    /// Its headings' slugs, in document order.
    pub slugs: Vec<String>,
    /// The outputs (specs or phases) it describes, each with the slug of its section, when
    /// that section is found.
    pub outputs: Vec<(String, Option<String>)>,
}

impl LinkedDocument {
    /// The artifact's own document, from its markdown as rendered before links are known
    /// (references never change headings) and the heading line of each output it names.
    pub fn own(
        name: &str,
        markdown: &str,
        outputs: impl IntoIterator<Item = (String, u32)>,
    ) -> LinkedDocument {
        LinkedDocument::at(name, String::new(), markdown, outputs)
    }

    /// A document at `href` from the artifact's markdown, with the heading line of each
    /// output in `markdown`.
    pub fn at(
        name: &str,
        href: String,
        markdown: &str,
        outputs: impl IntoIterator<Item = (String, u32)>,
    ) -> LinkedDocument {
        let headings = heading_slugs(markdown);
        let outputs = outputs
            .into_iter()
            .map(|(output, line)| {
                let slug = headings
                    .iter()
                    .find(|(heading_line, _)| *heading_line == line)
                    .map(|(_, slug)| slug.clone());
                (output, slug)
            })
            .collect();
        LinkedDocument {
            name: name.to_owned(),
            href,
            slugs: headings.into_iter().map(|(_, slug)| slug).collect(),
            outputs,
        }
    }

    /// Keeps only the output sections whose slug `stored` (the markdown on disk) has, so a
    /// link never names a heading the file lacks.
    pub fn confirmed_by(mut self, stored: &str) -> LinkedDocument {
        let slugs: Vec<String> = heading_slugs(stored)
            .into_iter()
            .map(|(_, slug)| slug)
            .collect();
        for (_, section) in &mut self.outputs {
            if section.as_ref().is_some_and(|slug| !slugs.contains(slug)) {
                *section = None;
            }
        }
        self.slugs = slugs;
        self
    }

    fn link_to(&self, slug: Option<&str>) -> String {
        match slug {
            Some(slug) => format!("{}#{slug}", self.href),
            // The document itself; an empty href would be no link at all.
            None if self.href.is_empty() => "#".to_owned(),
            None => self.href.clone(),
        }
    }
}

/// What a reference may point at besides the artifact's own markdown.
pub struct ReferenceScope<'a> {
    /// The parent's markdown (plan.md for a spec, spec.md for a phase); none for a plan.
    pub parent: Option<LinkedDocument>,
    /// Whether an absolute path exists; answered by the caller, so checking stays free of I/O.
    pub path_exists: &'a dyn Fn(&Path) -> bool,
}

/// The link each accepted reference renders as, by its text. Empty, references render as
/// code.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReferenceLinks(HashMap<String, String>);

impl ReferenceLinks {
    pub fn none() -> ReferenceLinks {
        ReferenceLinks::default()
    }

    /// Links `reference` (a requirement id a task cites) to `href`.
    pub fn link(&mut self, reference: &str, href: String) {
        self.0.insert(reference.to_owned(), href);
    }

    /// `references` as markdown: links where known, code otherwise.
    pub fn render(&self, references: &[String]) -> String {
        let mut rendered = String::new();
        for (index, reference) in references.iter().enumerate() {
            if index > 0 {
                rendered.push_str(", ");
            }
            let text = code_span(reference);
            match self.0.get(reference) {
                Some(href) => {
                    let _ = write!(rendered, "[{text}]({})", link_destination(href));
                }
                None => rendered.push_str(&text),
            }
        }
        rendered
    }
}

/// Checks each of `references` (the list at `location`), reporting what is wrong with each
/// and recording the link of each accepted one.
pub fn check_references(
    location: &str,
    references: &[String],
    own: &LinkedDocument,
    scope: &ReferenceScope,
    links: &mut ReferenceLinks,
    issues: &mut Vec<InputIssue>,
) {
    for (index, reference) in references.iter().enumerate() {
        match resolve(reference, own, scope) {
            Ok(href) => {
                links.0.insert(reference.clone(), href);
            }
            Err(problem) => issues.push(InputIssue::rule(
                format!("{location}[{index}]"),
                format!("{problem}; {ACCEPTED_FORMS}"),
            )),
        }
    }
}

/// The link destination of an accepted reference, or what is wrong with it.
fn resolve(
    reference: &str,
    own: &LinkedDocument,
    scope: &ReferenceScope,
) -> Result<String, String> {
    if reference.chars().any(char::is_control) {
        return Err(format!(
            "{reference:?} contains a line break or control character; give one reference per item"
        ));
    }
    if let Some(anchor) = reference.strip_prefix('#') {
        return resolve_anchor(reference, anchor, own, scope.parent.as_ref());
    }
    if let Some(name) = reference.strip_prefix("output:") {
        return resolve_output(reference, name, own, scope.parent.as_ref());
    }
    let lowered = reference.to_ascii_lowercase();
    if lowered.starts_with("http://") || lowered.starts_with("https://") {
        return resolve_url(reference);
    }
    let path = Path::new(reference);
    if path.is_absolute() {
        if !(scope.path_exists)(path) {
            return Err(format!("{reference:?} does not exist"));
        }
        return url::Url::from_file_path(path)
            .map(String::from)
            .map_err(|()| format!("{reference:?} cannot be written as a file link"));
    }
    Err(format!("{reference:?} is not an accepted reference"))
}

fn resolve_anchor(
    reference: &str,
    anchor: &str,
    own: &LinkedDocument,
    parent: Option<&LinkedDocument>,
) -> Result<String, String> {
    if anchor.is_empty() {
        return Err(format!("{reference:?} names no heading"));
    }
    // The artifact's own heading wins when both documents have the slug: it is the nearer.
    for document in std::iter::once(own).chain(parent) {
        if document.slugs.iter().any(|slug| slug == anchor) {
            return Ok(document.link_to(Some(anchor)));
        }
    }
    let mut problem = format!("{reference:?} is not a heading of {}", own.name);
    if let Some(parent) = parent {
        let _ = write!(problem, " or of {}", parent.name);
    }
    let suggestion = github_slug(anchor);
    let known = |document: &LinkedDocument| document.slugs.contains(&suggestion);
    if suggestion != anchor && (known(own) || parent.is_some_and(known)) {
        let _ = write!(problem, "; did you mean \"#{suggestion}\"?");
    }
    let _ = write!(problem, "; its headings are {}", slug_list(&own.slugs));
    if let Some(parent) = parent {
        let _ = write!(
            problem,
            ", {}'s are {}",
            parent.name,
            slug_list(&parent.slugs)
        );
    }
    Err(problem)
}

fn slug_list(slugs: &[String]) -> String {
    if slugs.is_empty() {
        return "none".to_owned();
    }
    slugs
        .iter()
        .map(|slug| format!("#{slug}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn resolve_output(
    reference: &str,
    name: &str,
    own: &LinkedDocument,
    parent: Option<&LinkedDocument>,
) -> Result<String, String> {
    // The artifact's own outputs first: a spec's phase before a plan's spec of the same name.
    for document in std::iter::once(own).chain(parent) {
        if let Some((_, section)) = document.outputs.iter().find(|(output, _)| output == name) {
            return Ok(document.link_to(section.as_deref()));
        }
    }
    let known: Vec<&str> = std::iter::once(own)
        .chain(parent)
        .flat_map(|document| document.outputs.iter().map(|(output, _)| output.as_str()))
        .collect();
    if name.is_empty() {
        return Err(format!(
            "{reference:?} names no output; name one of [{}]",
            known.join(", ")
        ));
    }
    Err(format!(
        "{reference:?} names no spec or phase known here; name one of [{}]",
        known.join(", ")
    ))
}

fn resolve_url(reference: &str) -> Result<String, String> {
    let url = url::Url::parse(reference)
        .map_err(|err| format!("{reference:?} is not a valid URL ({err})"))?;
    if !url.has_host() || url.host_str().is_some_and(str::is_empty) {
        return Err(format!("{reference:?} is not a valid URL (it has no host)"));
    }
    if reference.chars().any(char::is_whitespace) {
        return Err(format!(
            "{reference:?} is not a valid URL (it contains spaces; percent-encode them as %20)"
        ));
    }
    Ok(url.into())
}

/// A destination that cannot end the link early: in angle brackets when it holds parentheses
/// or spaces, which a bare destination cannot.
fn link_destination(href: &str) -> String {
    if href.contains(['(', ')', ' ']) {
        format!("<{href}>")
    } else {
        href.to_owned()
    }
}

/// `text` as inline code, fenced by more backticks than it holds in a row.
fn code_span(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    if text.starts_with('`') || text.ends_with('`') {
        format!("{fence} {text} {fence}")
    } else {
        format!("{fence}{text}{fence}")
    }
}

/// What GitHub (github-slugger) removes from a heading's text: everything but letters, marks,
/// numbers, connector punctuation (`_`), spaces and hyphens.
static NOT_IN_SLUG: LazyLock<Regex> = LazyLock::new(|| {
    // A constant pattern: every test that slugs a heading would catch it not compiling.
    Regex::new(r"[^\p{L}\p{M}\p{N}\p{Pc} -]").expect("the slug pattern compiles")
});

/// The anchor GitHub gives a heading's text, before duplicates are numbered: lowercase,
/// punctuation removed, each space a hyphen ("JWT auth: tokens & keys" is
/// "jwt-auth-tokens--keys").
pub fn github_slug(text: &str) -> String {
    NOT_IN_SLUG
        .replace_all(&text.trim().to_lowercase(), "")
        .replace(' ', "-")
}

/// Every ATX heading of `markdown` outside fenced code, as its zero-based line and its slug,
/// numbered as GitHub numbers repeated headings (`setup`, `setup-1`, `setup-2`).
pub fn heading_slugs(markdown: &str) -> Vec<(u32, String)> {
    let mut occurrences: HashMap<String, usize> = HashMap::new();
    let mut headings = Vec::new();
    let mut fence: Option<(char, usize)> = None;
    for (line_index, line) in markdown.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let indent = line.len() - line.trim_start_matches(' ').len();
        if indent > 3 {
            continue;
        }
        let trimmed = &line[indent..];
        if let Some((marker, length)) = fence {
            let run = trimmed.len() - trimmed.trim_start_matches(marker).len();
            if run >= length && trimmed[run..].trim().is_empty() {
                fence = None;
            }
            continue;
        }
        if let Some(opening) = fence_opening(trimmed) {
            fence = Some(opening);
            continue;
        }
        let Some(text) = atx_heading_text(trimmed) else {
            continue;
        };
        let original = github_slug(text);
        let mut slug = original.clone();
        // github-slugger's numbering: "a", "a" then "a-1" taken by a heading of its own
        // gives "a", "a-1", "a-1-1".
        while occurrences.contains_key(&slug) {
            let count = occurrences.entry(original.clone()).or_insert(0);
            *count += 1;
            slug = format!("{original}-{count}");
        }
        occurrences.insert(slug.clone(), 0);
        headings.push((u32::try_from(line_index).unwrap_or(u32::MAX), slug));
    }
    headings
}

/// The marker and length of a code fence opened by `line`.
fn fence_opening(line: &str) -> Option<(char, usize)> {
    let marker = line.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let run = line.len() - line.trim_start_matches(marker).len();
    // A backtick fence's info string may not hold a backtick.
    let valid = run >= 3 && (marker == '~' || !line[run..].contains('`'));
    valid.then_some((marker, run))
}

/// The text of an ATX heading (`## Text ##`), without its markers.
fn atx_heading_text(line: &str) -> Option<&str> {
    let level = line.len() - line.trim_start_matches('#').len();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &line[level..];
    if !rest.is_empty() && !rest.starts_with([' ', '\t']) {
        return None;
    }
    let text = rest.trim();
    // A closing sequence of '#'s counts only after a space (or as the whole text).
    let without_closing = text.trim_end_matches('#');
    let text = if without_closing.is_empty() || without_closing.ends_with([' ', '\t']) {
        without_closing.trim_end()
    } else {
        text
    };
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exists(path: &Path) -> bool {
        path == Path::new("/docs/design.md") || path == Path::new("/docs/with space (1).md")
    }

    fn own() -> LinkedDocument {
        LinkedDocument::own(
            "this plan",
            "# Plan: Auth\n\n## Overview\n\ntext\n\n## Setup\n\n## Setup\n\n### Spec 1: JWT auth: tokens & keys\n",
            [("jwt".to_owned(), 10)],
        )
    }

    fn parent() -> LinkedDocument {
        LinkedDocument::at(
            "plan.md",
            "../../../../p/iterations/001/artifacts/plan.md".to_owned(),
            "# Plan: P\n\n## Risks\n\n### Spec 1: Login\n",
            [("login".to_owned(), 4)],
        )
    }

    fn check(reference: &str, parent: Option<LinkedDocument>) -> Result<String, String> {
        let scope = ReferenceScope {
            parent,
            path_exists: &exists,
        };
        let mut links = ReferenceLinks::none();
        let mut issues = Vec::new();
        check_references(
            "specs[0].references",
            &[reference.to_owned()],
            &own(),
            &scope,
            &mut links,
            &mut issues,
        );
        match issues.as_slice() {
            [] => Ok(links.0.get(reference).cloned().expect("a link")),
            [issue] => {
                assert_eq!(issue.location, "specs[0].references[0]");
                Err(issue.message.clone())
            }
            more => panic!("one reference, several issues: {more:#?}"),
        }
    }

    #[test]
    fn github_slugs_lowercase_hyphenate_each_space_and_drop_punctuation() {
        assert_eq!(
            github_slug("JWT auth: tokens & keys"),
            "jwt-auth-tokens--keys"
        );
        assert_eq!(
            github_slug("Spec 1: Parse `--version`"),
            "spec-1-parse---version"
        );
        assert_eq!(github_slug("  Hello, World!  "), "hello-world");
        assert_eq!(github_slug("snake_case stays"), "snake_case-stays");
        assert_eq!(github_slug("Über Größe"), "über-größe");
        assert_eq!(github_slug("C++ & C#: why?"), "c--c-why");
    }

    #[test]
    fn repeated_headings_are_numbered_as_github_numbers_them() {
        let slugs: Vec<String> = heading_slugs("## Setup\n\n## Setup\n\n# Setup\n\n## Setup 1\n")
            .into_iter()
            .map(|(_, slug)| slug)
            .collect();
        assert_eq!(slugs, ["setup", "setup-1", "setup-2", "setup-1-1"]);
    }

    #[test]
    fn headings_are_found_only_where_markdown_makes_them() {
        let markdown = "# Title #\n#not a heading\n    # indented code\n```sh\n# a comment\n```\n\
                        ~~~~\n```\n# still code\n~~~~\n####### seven\n## Closing ##   \n###\n";
        let headings = heading_slugs(markdown);
        assert_eq!(
            headings,
            [
                (0, "title".to_owned()),
                (11, "closing".to_owned()),
                (12, String::new())
            ]
        );
    }

    #[test]
    fn an_anchor_of_the_artifact_links_within_it() {
        assert_eq!(check("#setup-1", None).as_deref(), Ok("#setup-1"));
        assert_eq!(
            check("#spec-1-jwt-auth-tokens--keys", None).as_deref(),
            Ok("#spec-1-jwt-auth-tokens--keys")
        );
    }

    #[test]
    fn an_anchor_of_the_parent_links_into_the_parent_file() {
        assert_eq!(
            check("#risks", Some(parent())).as_deref(),
            Ok("../../../../p/iterations/001/artifacts/plan.md#risks")
        );
        // Both have it: the artifact's own heading is the nearer.
        let mut parent = parent();
        parent.slugs.push("overview".to_owned());
        assert_eq!(check("#overview", Some(parent)).as_deref(), Ok("#overview"));
    }

    #[test]
    fn an_unknown_anchor_lists_the_headings_and_suggests_the_slug() {
        let message = check("#Setup", Some(parent())).expect_err("not a slug");
        assert!(message.contains("did you mean \"#setup\""), "{message}");
        assert!(
            message.contains("its headings are #plan-auth, #overview, #setup, #setup-1"),
            "{message}"
        );
        assert!(
            message.contains("plan.md's are #plan-p, #risks"),
            "{message}"
        );
        assert!(message.ends_with(ACCEPTED_FORMS), "{message}");
        let message = check("#risks", None).expect_err("no parent");
        assert!(
            message.contains("is not a heading of this plan;"),
            "{message}"
        );
    }

    #[test]
    fn outputs_link_to_the_section_that_describes_them() {
        assert_eq!(
            check("output:jwt", Some(parent())).as_deref(),
            Ok("#spec-1-jwt-auth-tokens--keys")
        );
        assert_eq!(
            check("output:login", Some(parent())).as_deref(),
            Ok("../../../../p/iterations/001/artifacts/plan.md#spec-1-login")
        );
        let message = check("output:signup", Some(parent())).expect_err("unknown");
        assert!(message.contains("name one of [jwt, login]"), "{message}");
        assert!(message.ends_with(ACCEPTED_FORMS), "{message}");
    }

    #[test]
    fn an_output_whose_section_the_stored_file_lacks_links_to_the_file() {
        let parent = parent().confirmed_by("# Plan: P\n\n## Risks\n");
        assert_eq!(
            check("output:login", Some(parent)).as_deref(),
            Ok("../../../../p/iterations/001/artifacts/plan.md")
        );
    }

    #[test]
    fn urls_are_checked_for_syntax_only() {
        assert_eq!(
            check("https://docs.rs/url/latest/url/", None).as_deref(),
            Ok("https://docs.rs/url/latest/url/")
        );
        assert_eq!(
            check("HTTP://Example.com/a_(b)", None).as_deref(),
            Ok("http://example.com/a_(b)")
        );
        for bad in ["https://", "http://exa mple.com", "https://[::1"] {
            let message = check(bad, None).expect_err(bad);
            assert!(message.contains("is not a valid URL"), "{message}");
            assert!(message.ends_with(ACCEPTED_FORMS), "{message}");
        }
    }

    #[test]
    fn absolute_paths_must_exist_and_link_as_files() {
        assert_eq!(
            check("/docs/design.md", None).as_deref(),
            Ok("file:///docs/design.md")
        );
        assert_eq!(
            check("/docs/with space (1).md", None).as_deref(),
            Ok("file:///docs/with%20space%20(1).md")
        );
        let message = check("/docs/missing.md", None).expect_err("missing");
        assert!(
            message.contains("\"/docs/missing.md\" does not exist"),
            "{message}"
        );
        assert!(message.ends_with(ACCEPTED_FORMS), "{message}");
    }

    #[test]
    fn anything_else_is_rejected_naming_the_accepted_forms() {
        for bad in [
            "src/main.rs",
            "ftp://example.com/x",
            "mailto:me@example.com",
            "see the plan",
            "",
            "#",
            "output:",
            "#setup\n#overview",
        ] {
            let message = check(bad, None).expect_err(bad);
            assert!(message.ends_with(ACCEPTED_FORMS), "{bad:?}: {message}");
        }
    }

    #[test]
    fn references_render_as_links_when_known_and_as_code_otherwise() {
        let mut links = ReferenceLinks::none();
        links.0.insert("#setup".to_owned(), "#setup".to_owned());
        links
            .0
            .insert("/a (1).md".to_owned(), "file:///a%20(1).md".to_owned());
        let rendered = links.render(&[
            "#setup".to_owned(),
            "/a (1).md".to_owned(),
            "`odd`".to_owned(),
        ]);
        assert_eq!(
            rendered,
            "[`#setup`](#setup), [`/a (1).md`](<file:///a%20(1).md>), `` `odd` ``"
        );
    }
}
