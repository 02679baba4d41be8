//! The verifier's own tools (`report_verification`, `show_diff`) and the checks a report
//! passes before it is accepted: each finding names a file of the project, lines within
//! it, and a requirement among those checked. A report that fails one is refused with
//! every problem and its fix, so the model corrects it.

use std::io::Read;
use std::path::{Component, Path};

use serde::Deserialize;

use crate::artifacts::VerificationReport;
use crate::llm::ToolSpec;
use crate::schema::input_schema_for;
use crate::tools::{ProjectFile, ProjectRoot};

pub const REPORT_VERIFICATION: &str = "report_verification";
pub const SHOW_DIFF: &str = "show_diff";

/// Show a changed file's whole diff.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShowDiffInput {
    /// The changed file, relative to the project root.
    #[schemars(length(min = 1))]
    pub file: String,
}

pub fn report_verification_spec() -> ToolSpec {
    ToolSpec::offered(
        REPORT_VERIFICATION,
        "Report the verification once you have checked every requirement: the verdict, a \
         summary, and each problem at its file and line as the files are now.",
        &input_schema_for::<VerificationReport>(),
        Some(serde_json::json!({
            "verdict": "fail",
            "summary": "R2 is not met: --version is parsed but nothing is printed.",
            "findings": [{
                "severity": "critical",
                "requirement": "R2",
                "file": "src/cli.rs",
                "line": 12,
                "message": "The version flag is parsed but never printed.",
                "fix": "Print env!(\"CARGO_PKG_VERSION\") and exit when args.version is set."
            }]
        })),
    )
}

pub fn show_diff_spec() -> ToolSpec {
    ToolSpec::offered(
        SHOW_DIFF,
        "Show the whole diff of one changed file against the code before the changes.",
        &input_schema_for::<ShowDiffInput>(),
        Some(serde_json::json!({"file": "src/cli.rs"})),
    )
}

/// Every problem with `report`'s findings, each with its fix: a requirement not among
/// `checked`, a file `lines_of` cannot count (it says why), a line past the file's end, an
/// end line before the line.
pub fn finding_problems(
    report: &VerificationReport,
    checked: &[String],
    lines_of: &mut dyn FnMut(&str) -> Result<u32, String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (index, finding) in report.findings.iter().enumerate() {
        let place = format!("finding {} ({})", index + 1, finding.file);
        if let Some(id) = &finding.requirement
            && !checked.contains(id)
        {
            problems.push(if checked.is_empty() {
                format!(
                    "{place}: no requirement was checked, so none is {id}; leave requirement out"
                )
            } else {
                format!(
                    "{place}: requirement {id} is not among those checked ({}); name one of \
                     them or leave requirement out",
                    checked.join(", ")
                )
            });
        }
        if finding.line == 0 {
            problems.push(format!("{place}: lines count from 1; cite line 1 or later"));
        }
        if let Some(end) = finding.end_line
            && end < finding.line
        {
            problems.push(format!(
                "{place}: end_line {end} is before line {}; give an end_line at or after \
                 line, or leave it out",
                finding.line
            ));
        }
        match lines_of(&finding.file) {
            Err(why) => problems.push(format!(
                "{place}: {} {why}; cite a file of the project by its path relative to the \
                 root, as list_files shows it",
                finding.file
            )),
            Ok(lines) => {
                let last = finding.end_line.unwrap_or(finding.line).max(finding.line);
                if last > lines {
                    problems.push(format!(
                        "{place}: {} has {lines} line{}, so line {last} is past its end; cite \
                         lines that exist (read_file shows them numbered)",
                        finding.file,
                        if lines == 1 { "" } else { "s" }
                    ));
                }
            }
        }
    }
    problems
}

/// The number of lines of `file` (relative to the root) in the project, read without
/// following a link out of it; why not when it is no regular file of the project.
/// Blocking.
pub fn line_count(root: &ProjectRoot, file: &str) -> Result<u32, String> {
    let requested = Path::new(file.trim());
    let relative = if requested.is_absolute() {
        requested
            .strip_prefix(root.path())
            .map_err(|_| "is outside the project".to_owned())?
    } else {
        requested
    };
    if relative.as_os_str().is_empty()
        || relative
            .components()
            .any(|component| !matches!(component, Component::Normal(_) | Component::CurDir))
    {
        return Err("is not a path of a file inside the project".to_owned());
    }
    let opened =
        ProjectFile::open(root, &root.path().join(relative)).map_err(|err| err.to_string())?;
    let mut reader = opened.into_reader();
    let mut buffer = [0u8; 64 * 1024];
    let (mut newlines, mut last) = (0u64, None);
    loop {
        let read = reader.read(&mut buffer).map_err(|err| err.to_string())?;
        if read == 0 {
            break;
        }
        newlines += buffer[..read].iter().filter(|byte| **byte == b'\n').count() as u64;
        last = Some(buffer[read - 1]);
    }
    let lines = match last {
        None => 0,
        Some(b'\n') => newlines,
        Some(_) => newlines + 1,
    };
    Ok(u32::try_from(lines).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::{Finding, Severity, VerificationVerdict};

    fn report(findings: Vec<Finding>) -> VerificationReport {
        VerificationReport {
            verdict: VerificationVerdict::Fail,
            summary: "s".to_owned(),
            findings,
        }
    }

    fn finding(file: &str, line: u32, end_line: Option<u32>, requirement: &str) -> Finding {
        Finding {
            severity: Severity::Critical,
            requirement: Some(requirement.to_owned()),
            file: file.to_owned(),
            line,
            end_line,
            message: "wrong".to_owned(),
            fix: None,
        }
    }

    #[test]
    fn each_bad_finding_is_named_with_its_fix() {
        let checked = vec!["R1".to_owned(), "R2".to_owned()];
        let mut lines_of = |file: &str| match file {
            "src/lib.rs" => Ok(10),
            _ => Err("does not exist".to_owned()),
        };
        let good = report(vec![finding("src/lib.rs", 3, Some(10), "R2")]);
        assert_eq!(
            finding_problems(&good, &checked, &mut lines_of),
            Vec::<String>::new()
        );
        let bad = report(vec![
            finding("src/missing.rs", 1, None, "R1"),
            finding("src/lib.rs", 11, None, "R1"),
            finding("src/lib.rs", 5, Some(4), "R9"),
        ]);
        let problems = finding_problems(&bad, &checked, &mut lines_of);
        assert_eq!(
            problems,
            vec![
                "finding 1 (src/missing.rs): src/missing.rs does not exist; cite a file of the \
                 project by its path relative to the root, as list_files shows it",
                "finding 2 (src/lib.rs): src/lib.rs has 10 lines, so line 11 is past its end; \
                 cite lines that exist (read_file shows them numbered)",
                "finding 3 (src/lib.rs): requirement R9 is not among those checked (R1, R2); \
                 name one of them or leave requirement out",
                "finding 3 (src/lib.rs): end_line 4 is before line 5; give an end_line at or \
                 after line, or leave it out",
            ]
        );
    }

    #[test]
    fn a_line_count_follows_no_link_and_leaves_no_root() {
        let project = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(project.path().join("three.txt"), "a\nb\nc").unwrap();
        std::fs::write(project.path().join("two.txt"), "a\nb\n").unwrap();
        std::fs::write(outside.path().join("secret.txt"), "1\n2\n3\n4\n").unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("secret.txt"),
            project.path().join("link.txt"),
        )
        .unwrap();
        let root = ProjectRoot::new(project.path()).unwrap();
        assert_eq!(line_count(&root, "three.txt"), Ok(3));
        assert_eq!(line_count(&root, "./two.txt"), Ok(2));
        assert_eq!(
            line_count(&root, "missing.txt"),
            Err("does not exist".to_owned())
        );
        assert!(
            line_count(&root, "link.txt")
                .unwrap_err()
                .contains("symbolic link")
        );
        assert!(line_count(&root, "../x").is_err());
        let secret = outside.path().join("secret.txt");
        assert_eq!(
            line_count(&root, &secret.display().to_string()),
            Err("is outside the project".to_owned())
        );
    }
}
