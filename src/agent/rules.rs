//! The project's rules for agents (`AGENTS.md` and the like), read into each loop's system
//! prompt: the files the settings name at the root, and for a code loop the nearest
//! `AGENTS.md` above each file its phase works on. Files are read through the same
//! confinement and secret policy as `read_file`: nothing outside the root, no secret file.
//! Blocking (reads files): call it off the async threads.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use super::context::LoopContext;
use crate::markdown::char_boundary_at_or_before;
use crate::tools::{
    ProjectFile, ProjectRoot, ReadError, ToolPolicy, redact_credentials, redact_cut_end,
};

/// The rules for a loop run in `context` whose work touches `worked_on`, read on the
/// blocking threads; files refused are logged (`:checkhealth loopr` lists them too).
pub(super) async fn for_loop(context: &LoopContext, worked_on: Vec<String>) -> ProjectRules {
    let root = context.root.clone();
    let policy = context.policy.clone();
    let names = context.settings.rules_files.clone();
    let max_bytes = context.settings.rules_max_bytes as usize;
    let gathered = tokio::task::spawn_blocking(move || {
        ProjectRules::gather(&root, &policy, &names, &worked_on, max_bytes)
    })
    .await;
    let (rules, refused) = gathered.unwrap_or_default();
    for refused in refused {
        tracing::warn!(loop_id = %context.record.id, path = %refused.path, reason = %refused.reason, "a rules file is not read");
    }
    if !rules.files.is_empty() {
        tracing::info!(loop_id = %context.record.id, rules = ?rules.summary(), "project rules in the system prompt");
    }
    rules
}

/// The rules files at `root` a loop with `settings` would read (not the nested ones, which
/// depend on a phase's files), and those refused; for `:checkhealth loopr`.
pub fn project_rules(
    root: &Path,
    settings: &super::LoopSettings,
) -> Result<(ProjectRules, Vec<RefusedRules>), String> {
    let root =
        ProjectRoot::new(root).map_err(|err| format!("project root {}: {err}", root.display()))?;
    let policy = settings.tool_policy()?;
    Ok(ProjectRules::gather(
        &root,
        &policy,
        &settings.rules_files,
        &[],
        settings.rules_max_bytes as usize,
    ))
}

/// The file a directory's own rules live in.
const NESTED_RULES: &str = "AGENTS.md";

/// What a loop was told of the project's rules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProjectRules {
    pub files: Vec<RulesFile>,
    /// What all of them may take, in bytes.
    pub max_bytes: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RulesFile {
    /// Relative to the project root.
    pub path: String,
    pub text: String,
    /// The file's size, when `text` holds only its start.
    pub cut_from: Option<usize>,
    /// For a nested file, the directory whose files it covers.
    pub scope: Option<String>,
}

/// A rules file that exists but was not read, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedRules {
    pub path: String,
    pub reason: String,
}

impl ProjectRules {
    /// Reads `names` (relative to the root, in order), then the nearest `AGENTS.md` above
    /// each of `worked_on` (relative paths; the root's own is not read twice), keeping at
    /// most `max_bytes` of rules in all. The nested files, the most specific, are the last cut
    /// when the rules do not fit.
    pub fn gather(
        root: &ProjectRoot,
        policy: &ToolPolicy,
        names: &[String],
        worked_on: &[String],
        max_bytes: usize,
    ) -> (ProjectRules, Vec<RefusedRules>) {
        let mut candidates: Vec<(String, Option<String>)> =
            names.iter().map(|name| (name.clone(), None)).collect();
        for file in worked_on {
            if let Some(nested) = nearest_nested(root, file)
                && !candidates.iter().any(|(path, _)| *path == nested.0)
            {
                candidates.push(nested);
            }
        }
        let mut read = Vec::new();
        let mut refused = Vec::new();
        for (path, scope) in candidates {
            match read_rules(root, policy, &path, max_bytes) {
                Ok(None) => {}
                Ok(Some((text, cut_from))) => read.push(RulesFile {
                    path,
                    cut_from,
                    text,
                    scope,
                }),
                Err(reason) => refused.push(RefusedRules { path, reason }),
            }
        }
        let mut room = max_bytes;
        let (nested, general): (Vec<&mut RulesFile>, Vec<&mut RulesFile>) =
            read.iter_mut().partition(|file| file.scope.is_some());
        for file in nested.into_iter().chain(general) {
            if file.text.len() > room {
                let end = char_boundary_at_or_before(&file.text, room);
                file.cut_from.get_or_insert(file.text.len());
                file.text.truncate(end);
                if let Cow::Owned(redacted) = redact_cut_end(&file.text) {
                    file.text = redacted;
                }
            }
            room -= file.text.len();
        }
        (
            ProjectRules {
                files: read,
                max_bytes,
            },
            refused,
        )
    }

    /// The system prompt's section with the rules, empty when there are none.
    pub fn prompt_section(&self) -> String {
        if self.files.is_empty() {
            return String::new();
        }
        let mut section = String::from(
            "\n\n# Project rules\n\nThe project's own instructions for agents working on \
             it. Follow them unless the task says otherwise.",
        );
        for file in &self.files {
            section.push_str(&format!("\n\n## {}", file.path));
            if let Some(scope) = &file.scope {
                section.push_str(&format!(" (for files under {scope}/)"));
            }
            section.push_str("\n\n");
            section.push_str(file.text.trim_end());
            if let Some(size) = file.cut_from {
                section.push_str(&format!(
                    "\n\n[Loopr cut {} here: it has {size} bytes, the rules may take {} in \
                     all (rules_max_bytes); read the rest with read_file if you need it]",
                    file.path, self.max_bytes
                ));
            }
        }
        section
    }

    /// One line per file, for the transcript and the log: `AGENTS.md (1,204 bytes)`.
    pub fn summary(&self) -> Vec<String> {
        self.files
            .iter()
            .map(|file| match file.cut_from {
                Some(size) => format!("{} (cut at {} of {size} bytes)", file.path, file.text.len()),
                None => format!("{} ({} bytes)", file.path, file.text.len()),
            })
            .collect()
    }
}

/// The `AGENTS.md` nearest above `file` (in its directory or one between it and the root,
/// not the root's own), with the directory it covers.
fn nearest_nested(root: &ProjectRoot, file: &str) -> Option<(String, Option<String>)> {
    let mut dir = Path::new(file.trim()).parent()?.to_path_buf();
    while dir.components().next().is_some() {
        let candidate = dir.join(NESTED_RULES);
        if root.path().join(&candidate).is_file() {
            let scope = dir.to_string_lossy().into_owned();
            return Some((candidate.to_string_lossy().into_owned(), Some(scope)));
        }
        if !dir.pop() {
            break;
        }
    }
    None
}

/// The start of rules file `path`, at most `max_bytes` of it, and the file's size when that
/// start is not all of it: `None` when there is none, an error naming why an existing one is
/// not read.
fn read_rules(
    root: &ProjectRoot,
    policy: &ToolPolicy,
    path: &str,
    max_bytes: usize,
) -> Result<Option<(String, Option<usize>)>, String> {
    let resolved: PathBuf = match root.resolve_existing(path) {
        Ok(resolved) => resolved,
        Err(crate::tools::PathError::NotFound { .. }) => return Ok(None),
        Err(err) => return Err(err.to_string()),
    };
    let relative = resolved
        .strip_prefix(root.path())
        .unwrap_or(&resolved)
        .to_path_buf();
    if let Some(pattern) = policy.secret_pattern(&relative) {
        return Err(format!("it matches the secret pattern {pattern:?}"));
    }
    let file = match ProjectFile::open(root, &resolved) {
        Ok(file) => file,
        Err(ReadError::NotFound | ReadError::NotRegular("a directory")) => return Ok(None),
        Err(err) => return Err(format!("it {err}")),
    };
    let size = usize::try_from(file.size()).unwrap_or(usize::MAX);
    let mut bytes = file
        .read_start(max_bytes as u64)
        .map_err(|err| format!("reading it failed: {err}"))?;
    let cut_from = (bytes.len() < size).then_some(size);
    if bytes.len() < size {
        // Cut, maybe inside a character: the cut leaves out what is left of it.
        let whole = match std::str::from_utf8(&bytes) {
            Ok(_) => bytes.len(),
            Err(err) if err.error_len().is_none() => err.valid_up_to(),
            Err(_) => bytes.len(),
        };
        bytes.truncate(whole);
    }
    // A clone URL with a token in a README goes to the provider with the prompt: never the
    // token.
    let text = String::from_utf8_lossy(&bytes);
    let text = match cut_from {
        // The cut may go through a URL: what came of its credentials goes too.
        Some(_) => redact_cut_end(&text).into_owned(),
        None => text.into_owned(),
    };
    Ok(Some((redact_credentials(&text).into_owned(), cut_from)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(files: &[(&str, &str)]) -> (tempfile::TempDir, ProjectRoot) {
        let dir = tempfile::tempdir().expect("tempdir");
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
            std::fs::write(path, text).expect("write");
        }
        let root = ProjectRoot::new(dir.path()).expect("root");
        (dir, root)
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn root_files_in_order_then_the_nearest_nested_one_of_each_file_worked_on() {
        let (_dir, root) = project(&[
            ("AGENTS.md", "Use nextest.\n"),
            (".loopr/rules.md", "Never unwrap.\n"),
            ("src/server/AGENTS.md", "Handlers return Result.\n"),
            ("src/server/http/handler.rs", ""),
        ]);
        let (rules, refused) = ProjectRules::gather(
            &root,
            &ToolPolicy::default(),
            &names(&["AGENTS.md", "CLAUDE.md", ".loopr/rules.md"]),
            &names(&[
                "src/server/http/handler.rs",
                "src/server/lib.rs",
                "README.md",
            ]),
            10_000,
        );
        assert!(refused.is_empty(), "{refused:?}");
        let paths: Vec<&str> = rules.files.iter().map(|file| file.path.as_str()).collect();
        assert_eq!(
            paths,
            ["AGENTS.md", ".loopr/rules.md", "src/server/AGENTS.md"]
        );
        let section = rules.prompt_section();
        assert!(
            section.contains("## AGENTS.md\n\nUse nextest."),
            "{section}"
        );
        assert!(
            section.contains(
                "## src/server/AGENTS.md (for files under src/server/)\n\nHandlers return Result."
            ),
            "{section}"
        );
    }

    #[test]
    fn rules_over_the_cap_are_cut_with_a_note_saying_so() {
        let big = "x".repeat(5000);
        let (_dir, root) = project(&[("AGENTS.md", &big), ("CLAUDE.md", "second")]);
        let (rules, _) = ProjectRules::gather(
            &root,
            &ToolPolicy::default(),
            &names(&["AGENTS.md", "CLAUDE.md"]),
            &[],
            1000,
        );
        assert_eq!(rules.files[0].text.len(), 1000);
        assert_eq!(rules.files[0].cut_from, Some(5000));
        assert_eq!(rules.files[1].text, "", "nothing is left for the second");
        assert!(
            rules
                .prompt_section()
                .contains("[Loopr cut AGENTS.md here: it has 5000 bytes")
        );
        assert_eq!(rules.summary()[0], "AGENTS.md (cut at 1000 of 5000 bytes)");
    }

    #[test]
    fn secret_files_and_files_outside_the_root_are_never_read() {
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(outside.path().join("rules.md"), "from outside").expect("write");
        let (dir, root) = project(&[(".env", "KEY=secret")]);
        std::os::unix::fs::symlink(
            outside.path().join("rules.md"),
            dir.path().join("AGENTS.md"),
        )
        .expect("symlink");
        let (rules, refused) = ProjectRules::gather(
            &root,
            &ToolPolicy::default(),
            &names(&["AGENTS.md", ".env", "../rules.md"]),
            &[],
            1000,
        );
        assert!(rules.files.is_empty(), "{rules:?}");
        let reasons: Vec<(&str, &str)> = refused
            .iter()
            .map(|refused| (refused.path.as_str(), refused.reason.as_str()))
            .collect();
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        assert!(reasons[1].1.contains("secret pattern"), "{reasons:?}");
    }

    #[test]
    fn credentials_in_urls_of_a_rules_file_never_reach_the_prompt() {
        let (_dir, root) = project(&[(
            "AGENTS.md",
            "Clone with git clone https://oauth2:glpat-s3cr3t@gitlab.example.com/app.git\n",
        )]);
        let (rules, _) = ProjectRules::gather(
            &root,
            &ToolPolicy::default(),
            &names(&["AGENTS.md"]),
            &[],
            1000,
        );
        let prompt = rules.prompt_section();
        assert!(!prompt.contains("glpat-s3cr3t"), "{prompt}");
        assert!(
            prompt.contains("https://[REDACTED]@gitlab.example.com/app.git"),
            "{prompt}"
        );
        assert!(!prompt.contains("[Loopr cut"), "nothing was cut: {prompt}");
        assert!(!rules.summary()[0].contains("cut"), "{:?}", rules.summary());
    }

    #[test]
    fn a_rules_file_cut_inside_a_url_keeps_no_part_of_its_credentials() {
        let text = "Push with https://ci:glpat-0123456789abcdef@gitlab.example.com/app.git\n";
        let (_dir, root) = project(&[("AGENTS.md", text)]);
        let cap = "Push with https://ci:glpat-0123".len();
        let (rules, _) = ProjectRules::gather(
            &root,
            &ToolPolicy::default(),
            &names(&["AGENTS.md"]),
            &[],
            cap,
        );
        let prompt = rules.prompt_section();
        assert!(
            !prompt.contains("glpat") && !prompt.contains("ci:"),
            "{prompt}"
        );
        assert!(prompt.contains("https://[REDACTED]"), "{prompt}");
    }

    #[test]
    fn only_the_cap_of_a_huge_rules_file_is_read() {
        use crate::test_support::bytes_read_by_this_thread;
        let (dir, root) = project(&[]);
        let huge = 256 * 1024 * 1024;
        // What `truncate -s` makes: a sparse file, read as zeros.
        std::fs::File::create(dir.path().join("AGENTS.md"))
            .and_then(|file| file.set_len(huge))
            .expect("sparse file");
        let read_before = bytes_read_by_this_thread();
        let (rules, refused) = ProjectRules::gather(
            &root,
            &ToolPolicy::default(),
            &names(&["AGENTS.md"]),
            &[],
            1000,
        );
        let read = bytes_read_by_this_thread() - read_before;
        assert!(read < 64 * 1024, "{read} bytes read for a 1000-byte cap");
        assert!(refused.is_empty(), "{refused:?}");
        assert_eq!(rules.files[0].text.len(), 1000);
        assert_eq!(rules.files[0].cut_from, Some(huge as usize));
    }
}
