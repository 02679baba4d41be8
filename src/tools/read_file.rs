//! The `read_file` tool: a project text file with numbered lines, a range of them at a time,
//! refusing binaries and files too large to read.

use std::fmt::Write as _;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::output::{CappedOutput, clip_line};
use super::{
    ProjectRoot, ReadError, Tool, ToolContext, ToolError, parse_input, read_regular, refuse_secret,
    run_blocking, text_field,
};
use crate::schema::input_schema_for;

/// The largest file read.
pub const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;
const MAX_LINES: usize = 2000;
const MAX_LINE_CHARS: usize = 2000;
const MAX_OUTPUT_BYTES: usize = 100 * 1024;

/// Read a text file of the project with numbered lines.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileInput {
    /// Relative to the project root.
    pub path: String,
    /// First line to return, counting from 1 (default 1).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub start_line: Option<usize>,
    /// Last line to return, inclusive (default: 1999 lines after start_line).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub end_line: Option<usize>,
}

pub struct ReadFileTool;

#[async_trait]
impl Tool for ReadFileTool {
    fn name(&self) -> &'static str {
        "read_file"
    }

    fn description(&self) -> &'static str {
        "Read a text file of the project, its lines numbered; at most 2000 lines a call (page \
         through a long file with start_line and end_line)."
    }

    fn input_schema(&self) -> Value {
        input_schema_for::<ReadFileInput>()
    }

    fn example(&self) -> Value {
        json!({"path": "README.md", "start_line": 1, "end_line": 80})
    }

    fn describe_call(&self, input: &Value) -> String {
        format!("reading {}", text_field(input, "path"))
    }

    fn reread_hint(&self) -> String {
        "call read_file again with the same input; start_line and end_line read just the lines \
         you need."
            .to_owned()
    }

    async fn call(&self, input: Value, context: &ToolContext) -> Result<String, ToolError> {
        let input: ReadFileInput = parse_input(self.name(), input)?;
        let path = context.root.resolve_existing(&input.path)?;
        refuse_secret(context, &path)?;
        let shown = context.root.relative_display(&path);
        let root = context.root.clone();
        run_blocking(context, move || read_numbered(&root, &path, &shown, &input)).await
    }
}

/// The number of lines `str::lines` yields, counted without decoding characters.
fn line_count(text: &str) -> usize {
    let newlines = text.bytes().filter(|&byte| byte == b'\n').count();
    newlines + usize::from(!text.is_empty() && !text.ends_with('\n'))
}

fn read_numbered(
    root: &ProjectRoot,
    path: &std::path::Path,
    shown: &str,
    input: &ReadFileInput,
) -> Result<String, ToolError> {
    let file_error = |message: String| ToolError::File {
        path: shown.to_owned(),
        message,
    };
    let metadata = std::fs::metadata(path).map_err(|err| file_error(err.to_string()))?;
    if metadata.is_dir() {
        return Err(file_error(
            "is a directory; use list_files to see its files".to_owned(),
        ));
    }
    let bytes = read_regular(root, path, MAX_FILE_BYTES).map_err(|err| match err {
        ReadError::TooLarge(size) => file_error(format!(
            "is {size} bytes, larger than the {MAX_FILE_BYTES}-byte limit; use grep to find the \
             part you need"
        )),
        other => file_error(other.to_string()),
    })?;
    if bytes.iter().take(8192).any(|&byte| byte == 0) {
        return Err(file_error(
            "is a binary file; only text files can be read".to_owned(),
        ));
    }
    let text = match std::str::from_utf8(&bytes) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(&bytes),
    };
    let start = input.start_line.unwrap_or(1).max(1);
    let end = input
        .end_line
        .unwrap_or(start.saturating_add(MAX_LINES - 1));
    if end < start {
        return Err(ToolError::InvalidInput(format!(
            "end_line {end} is before start_line {start}"
        )));
    }
    let total_lines = line_count(&text);
    if total_lines == 0 {
        return Ok(format!("{shown} is empty\n"));
    }
    if start > total_lines {
        return Err(ToolError::InvalidInput(format!(
            "start_line {start} is past the end of {shown}, which has {total_lines} lines"
        )));
    }
    let last = end
        .min(total_lines)
        .min(start.saturating_add(MAX_LINES - 1));
    let mut output = CappedOutput::new(MAX_OUTPUT_BYTES);
    // One buffer for every numbered line: a long read is thousands of lines.
    let mut numbered = String::new();
    for (index, line) in text
        .lines()
        .enumerate()
        .skip(start - 1)
        .take(last + 1 - start)
    {
        numbered.clear();
        let _ = write!(numbered, "{:>6}\t", index + 1);
        numbered.push_str(&clip_line(line, MAX_LINE_CHARS));
        if !output.push_line(&numbered) {
            break;
        }
    }
    let mut result = output.finish("read a smaller line range");
    if last < total_lines {
        result.push_str(&format!(
            "[lines {start}-{last} of {total_lines}; call read_file with start_line {} for more]\n",
            last + 1
        ));
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::line_count;

    #[test]
    fn lines_are_counted_as_str_lines_counts_them() {
        for text in [
            "",
            "a",
            "a\n",
            "a\nb",
            "\n",
            "\n\n",
            "a\r\nb\r\n",
            "a\n\nb\n",
            "é\nü",
        ] {
            assert_eq!(line_count(text), text.lines().count(), "{text:?}");
        }
    }
}
