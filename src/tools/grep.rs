//! The `grep` tool: searches the project's text files (honouring .gitignore) with a regular
//! expression and returns each match with its place, capped.

use std::path::Path;

use async_trait::async_trait;
use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::UTF8;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::output::{CappedOutput, clip_line};
use super::project_walk::project_walker;
use super::{
    ProjectFile, ProjectRoot, Tool, ToolContext, ToolError, ToolPolicy, parse_input, run_blocking,
    text_field,
};
use crate::schema::input_schema_for;

const DEFAULT_MAX_MATCHES: usize = 100;
const MAX_MATCHES_LIMIT: usize = 500;
const MAX_LINE_CHARS: usize = 300;
const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// Search the project's text files with a regular expression.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepInput {
    /// Regular expression (Rust syntax).
    pub pattern: String,
    /// File or directory to search (default: the root).
    #[serde(default)]
    pub path: Option<String>,
    /// Only files matching this glob, e.g. `*.rs`.
    #[serde(default)]
    pub glob: Option<String>,
    /// Ignore case.
    #[serde(default)]
    pub case_insensitive: bool,
    /// Most lines to return (default 100).
    #[serde(default)]
    #[schemars(range(min = 1, max = 500))]
    pub max_matches: Option<usize>,
}

pub struct GrepTool;

#[async_trait]
impl Tool for GrepTool {
    fn name(&self) -> &'static str {
        "grep"
    }

    fn description(&self) -> &'static str {
        "Search the project's text files for a regular expression, skipping what .gitignore \
         ignores; returns `path:line: text` for each matching line."
    }

    fn input_schema(&self) -> Value {
        input_schema_for::<GrepInput>()
    }

    fn example(&self) -> Value {
        json!({"pattern": "fn main", "path": "src"})
    }

    fn describe_call(&self, input: &Value) -> String {
        format!("searching for {:?}", text_field(input, "pattern"))
    }

    async fn call(&self, input: Value, context: &ToolContext) -> Result<String, ToolError> {
        let input: GrepInput = parse_input(self.name(), input)?;
        let target = context
            .root
            .resolve_existing(input.path.as_deref().unwrap_or("."))?;
        let root = context.root.clone();
        let policy = context.policy.clone();
        run_blocking(context, move || search(&root, &policy, &target, &input)).await
    }
}

fn search(
    root: &ProjectRoot,
    policy: &ToolPolicy,
    target: &Path,
    input: &GrepInput,
) -> Result<String, ToolError> {
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(input.case_insensitive)
        .build(&input.pattern)
        .map_err(|err| ToolError::InvalidInput(format!("pattern {:?}: {err}", input.pattern)))?;
    let max_matches = input
        .max_matches
        .unwrap_or(DEFAULT_MAX_MATCHES)
        .clamp(1, MAX_MATCHES_LIMIT);
    let mut searcher = SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .build();
    let mut output = CappedOutput::new(MAX_OUTPUT_BYTES);
    let mut matches = 0usize;
    let mut more_matches = false;
    for entry in project_walker(root, target, input.glob.as_deref())?.filter_map(Result::ok) {
        // Secret files are never read, so never searched either.
        if !entry.file_type().is_some_and(|kind| kind.is_file())
            || policy.secret_pattern(entry.path()).is_some()
        {
            continue;
        }
        // What is no longer a regular file reached without a link is skipped, like files
        // that cannot be read (permissions, invalid UTF-8 midway), as rg does.
        let Ok(file) = ProjectFile::open(root, entry.path()) else {
            continue;
        };
        let shown = root.relative_display(entry.path());
        let mut stop = false;
        let _ = searcher.search_reader(
            &matcher,
            file.into_reader(),
            UTF8(|line_number, line| {
                if matches >= max_matches || output.is_full() {
                    more_matches = true;
                    stop = true;
                    return Ok(false);
                }
                matches += 1;
                let line = clip_line(line.trim_end_matches(['\n', '\r']), MAX_LINE_CHARS);
                output.push_line(&format!("{shown}:{line_number}: {line}"));
                Ok(true)
            }),
        );
        if stop {
            break;
        }
    }
    if matches == 0 {
        return Ok(format!("no matches for {:?}\n", input.pattern));
    }
    let mut text = output.finish("narrow the search with path or glob");
    if more_matches {
        text.push_str(&format!(
            "[stopped after {matches} matches; narrow the search with path, glob or a more \
             specific pattern]\n"
        ));
    }
    Ok(text)
}
