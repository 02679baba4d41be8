//! The `list_files` tool: lists the project's files below a directory, honouring .gitignore,
//! optionally filtered by a glob, capped.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::output::CappedOutput;
use super::project_walk::project_walker;
use super::{ProjectRoot, Tool, ToolContext, ToolError, parse_input, run_blocking, text_field};
use crate::schema::input_schema_for;

const DEFAULT_MAX_RESULTS: usize = 500;
const MAX_RESULTS_LIMIT: usize = 2000;
const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// List the project's files, honouring .gitignore.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFilesInput {
    /// Directory to list (default: the root).
    #[serde(default)]
    pub path: Option<String>,
    /// Glob the files must match, gitignore-style, e.g. `*.rs`.
    #[serde(default)]
    pub glob: Option<String>,
    /// Most paths to return (default 500).
    #[serde(default)]
    #[schemars(range(min = 1, max = 2000))]
    pub max_results: Option<usize>,
}

pub struct ListFilesTool;

#[async_trait]
impl Tool for ListFilesTool {
    fn name(&self) -> &'static str {
        "list_files"
    }

    fn description(&self) -> &'static str {
        "List the project's files recursively, skipping .git and what .gitignore ignores."
    }

    fn input_schema(&self) -> Value {
        input_schema_for::<ListFilesInput>()
    }

    fn example(&self) -> Value {
        json!({"path": "src", "glob": "*.rs"})
    }

    fn describe_call(&self, input: &Value) -> String {
        match (text_field(input, "path"), text_field(input, "glob")) {
            ("", "") => "listing files".to_owned(),
            (path, "") => format!("listing files in {path}"),
            ("", glob) => format!("listing files matching {glob}"),
            (path, glob) => format!("listing files in {path} matching {glob}"),
        }
    }

    async fn call(&self, input: Value, context: &ToolContext) -> Result<String, ToolError> {
        let input: ListFilesInput = parse_input(self.name(), input)?;
        let dir = context
            .root
            .resolve_existing(input.path.as_deref().unwrap_or("."))?;
        let root = context.root.clone();
        run_blocking(context, move || list(&root, &dir, &input)).await
    }
}

fn list(root: &ProjectRoot, dir: &Path, input: &ListFilesInput) -> Result<String, ToolError> {
    let max_results = input
        .max_results
        .unwrap_or(DEFAULT_MAX_RESULTS)
        .clamp(1, MAX_RESULTS_LIMIT);
    let files: Vec<PathBuf> = project_walker(root, dir, input.glob.as_deref())?
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_some_and(|kind| !kind.is_dir()))
        .map(ignore::DirEntry::into_path)
        .collect();
    if files.is_empty() {
        return Ok("no files match\n".to_owned());
    }
    let mut output = CappedOutput::new(MAX_OUTPUT_BYTES);
    for file in files.iter().take(max_results) {
        if !output.push_line(&root.relative_display(file)) {
            break;
        }
    }
    let mut text = output.finish("narrow the listing with path or glob");
    if files.len() > max_results {
        text.push_str(&format!(
            "[{} more files not shown; narrow the listing with path or glob]\n",
            files.len() - max_results
        ));
    }
    Ok(text)
}
