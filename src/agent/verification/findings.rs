//! The verifier's own tools (`report_verification`, `show_diff`) and the checks a report
//! passes before it is accepted: each finding names a file of the project, lines within
//! it, and a requirement among those checked. A report that fails one is refused with
//! every problem and its fix, so the model corrects it.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use crate::artifacts::VerificationReport;
use crate::artifacts::{MAX_FINDING_TEXT_CHARS, MAX_FINDINGS, MAX_SUMMARY_CHARS};
use crate::llm::ToolSpec;
use crate::schema::input_schema_for;
use crate::tools::{ProjectFile, ProjectRoot, ToolPolicy};

/// The largest file a finding may cite: its lines are counted, and read_file reads no more.
pub const MAX_CITED_FILE_BYTES: u64 = 8 * 1024 * 1024;

pub const REPORT_VERIFICATION: &str = "report_verification";
pub const SHOW_DIFF: &str = "show_diff";

/// Show a changed file's diff, a page at a time.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShowDiffInput {
    /// The changed file, relative to the project root.
    #[schemars(length(min = 1))]
    pub file: String,
    /// The diff's first line to show, from 1 (default 1).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub offset: Option<usize>,
    /// How many lines to show at most (default: as many as fit in one answer).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub limit: Option<usize>,
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
        "Show the diff of one changed file against the code before the changes, a page at a \
         time: a long diff ends with the offset to call again with.",
        &input_schema_for::<ShowDiffInput>(),
        Some(serde_json::json!({"file": "src/cli.rs"})),
    )
}

/// Every problem with `report`'s findings, each with its fix: more findings or longer text
/// than a report may hold, a requirement not among `checked`, a file `lines_of` cannot
/// count (it says why), a line past the file's end, an end line before the line. Each file
/// is counted once.
pub fn finding_problems(
    report: &VerificationReport,
    checked: &[String],
    lines_of: &mut dyn FnMut(&str) -> Result<u32, String>,
) -> Vec<String> {
    if report.findings.len() > MAX_FINDINGS {
        // Not one file is read for a report that must shrink anyway.
        return vec![format!(
            "the report has {} findings, more than the {MAX_FINDINGS} it may hold; merge \
             findings at one place and keep those that matter most",
            report.findings.len()
        )];
    }
    let mut problems = Vec::new();
    let summary_chars = report.summary.chars().count();
    if summary_chars > MAX_SUMMARY_CHARS {
        problems.push(format!(
            "the summary is {summary_chars} characters, more than the {MAX_SUMMARY_CHARS} it \
             may hold; say it in fewer words (the findings give the detail)"
        ));
    }
    let mut counted: HashMap<&str, Result<u32, String>> = HashMap::new();
    for (index, finding) in report.findings.iter().enumerate() {
        let place = format!("finding {} ({})", index + 1, finding.file);
        let texts = [
            ("message", Some(&finding.message)),
            ("fix", finding.fix.as_ref()),
        ];
        for (field, text) in texts {
            let chars = text.map_or(0, |text| text.chars().count());
            if chars > MAX_FINDING_TEXT_CHARS {
                problems.push(format!(
                    "{place}: its {field} is {chars} characters, more than the \
                     {MAX_FINDING_TEXT_CHARS} it may hold; say it in fewer words"
                ));
            }
        }
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
        let lines = counted
            .entry(finding.file.as_str())
            .or_insert_with(|| lines_of(&finding.file))
            .clone();
        match lines {
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

/// `file` as a path relative to the project root, its `.` parts dropped (`src/lib.rs`
/// for ` ./src/lib.rs` or the absolute path): what a finding is checked and stored by.
pub fn checked_path(root: &ProjectRoot, file: &str) -> Result<PathBuf, String> {
    let requested = Path::new(file.trim());
    let relative = if requested.is_absolute() {
        requested
            .strip_prefix(root.path())
            .map_err(|_| "is outside the project".to_owned())?
    } else {
        requested
    };
    let mut checked = PathBuf::new();
    for component in relative.components() {
        match component {
            Component::Normal(part) => checked.push(part),
            Component::CurDir => {}
            _ => return Err("is not a path of a file inside the project".to_owned()),
        }
    }
    if checked.as_os_str().is_empty() {
        return Err("is not a path of a file inside the project".to_owned());
    }
    Ok(checked)
}

/// Each finding's file as `checked_path` reads it, so what the shells open is the file
/// that was checked.
pub fn cite_checked_paths(root: &ProjectRoot, report: &mut VerificationReport) {
    for finding in &mut report.findings {
        if let Ok(checked) = checked_path(root, &finding.file) {
            finding.file = checked.to_string_lossy().into_owned();
        }
    }
}

/// The number of lines of `file` (relative to the root) in the project, read without
/// following a link out of it; why not when it is no regular file of the project, a secret
/// one (`policy`: not even whether it exists is told) or one larger than
/// `MAX_CITED_FILE_BYTES` (not read). Blocking.
pub fn line_count(root: &ProjectRoot, policy: &ToolPolicy, file: &str) -> Result<u32, String> {
    let relative = checked_path(root, file)?;
    if let Some(pattern) = policy.secret_pattern(&relative) {
        return Err(format!(
            "matches the secret-file pattern {pattern:?}; secret files are never read or cited"
        ));
    }
    let opened =
        ProjectFile::open(root, &root.path().join(relative)).map_err(|err| err.to_string())?;
    if opened.size() > MAX_CITED_FILE_BYTES {
        return Err(format!(
            "is {} bytes, too large to cite (the limit is {MAX_CITED_FILE_BYTES} bytes); cite \
             the code that writes or reads it",
            opened.size()
        ));
    }
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
        assert_eq!(
            line_count(&root, &ToolPolicy::default(), "three.txt"),
            Ok(3)
        );
        assert_eq!(
            line_count(&root, &ToolPolicy::default(), "./two.txt"),
            Ok(2)
        );
        assert_eq!(
            line_count(&root, &ToolPolicy::default(), "missing.txt"),
            Err("does not exist".to_owned())
        );
        assert!(
            line_count(&root, &ToolPolicy::default(), "link.txt")
                .unwrap_err()
                .contains("symbolic link")
        );
        assert!(line_count(&root, &ToolPolicy::default(), "../x").is_err());
        let secret = outside.path().join("secret.txt");
        assert_eq!(
            line_count(&root, &ToolPolicy::default(), &secret.display().to_string()),
            Err("is outside the project".to_owned())
        );
    }

    #[test]
    fn a_file_cited_many_times_is_counted_once_per_report() {
        let mut counted = Vec::new();
        let mut lines_of = |file: &str| {
            counted.push(file.to_owned());
            Ok(10)
        };
        let cited = report(
            (1..=20)
                .map(|line| finding("data/huge.bin", line % 10 + 1, None, "R1"))
                .collect(),
        );
        assert!(finding_problems(&cited, &["R1".to_owned()], &mut lines_of).is_empty());
        assert_eq!(counted, vec!["data/huge.bin".to_owned()]);
    }

    #[test]
    fn a_file_too_large_to_cite_is_refused_unread() {
        let project = tempfile::tempdir().unwrap();
        let huge = std::fs::File::create(project.path().join("huge.bin")).unwrap();
        // Sparse: its size costs nothing, reading it would.
        huge.set_len(MAX_CITED_FILE_BYTES + 1).unwrap();
        let root = ProjectRoot::new(project.path()).unwrap();
        let why = line_count(&root, &ToolPolicy::default(), "huge.bin").unwrap_err();
        assert!(why.contains("too large to cite"), "{why}");
    }

    #[test]
    fn a_secret_file_cannot_be_cited() {
        let project = tempfile::tempdir().unwrap();
        std::fs::write(project.path().join(".env"), "KEY=1\nOTHER=2\n").unwrap();
        let root = ProjectRoot::new(project.path()).unwrap();
        let why = line_count(&root, &ToolPolicy::default(), ".env").unwrap_err();
        assert!(why.contains("secret"), "{why}");
        assert!(!why.contains('2'), "the answer tells the line count: {why}");
    }

    #[test]
    fn findings_keep_the_path_that_was_checked() {
        let project = tempfile::tempdir().unwrap();
        std::fs::create_dir(project.path().join("src")).unwrap();
        std::fs::write(project.path().join("src/lib.rs"), "a\n").unwrap();
        let root = ProjectRoot::new(project.path()).unwrap();
        let absolute = project.path().join("src/lib.rs").display().to_string();
        let mut cited = report(vec![
            finding(" ./src/lib.rs ", 1, None, "R1"),
            finding(&absolute, 1, None, "R1"),
        ]);
        cite_checked_paths(&root, &mut cited);
        let files: Vec<&str> = cited.findings.iter().map(|f| f.file.as_str()).collect();
        assert_eq!(files, vec!["src/lib.rs", "src/lib.rs"]);
    }

    #[test]
    fn a_report_past_its_size_limits_is_refused_with_each_limit() {
        use crate::artifacts::{MAX_FINDING_TEXT_CHARS, MAX_FINDINGS, MAX_SUMMARY_CHARS};
        let mut lines_of = |_: &str| Ok(10);
        let checked = ["R1".to_owned()];
        let mut long = finding("src/lib.rs", 1, None, "R1");
        long.message = "x".repeat(MAX_FINDING_TEXT_CHARS + 1);
        long.fix = Some("y".repeat(MAX_FINDING_TEXT_CHARS + 1));
        let mut wordy = report(vec![long]);
        wordy.summary = "z".repeat(MAX_SUMMARY_CHARS + 1);
        let problems = finding_problems(&wordy, &checked, &mut lines_of);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(
            problems[0].starts_with("the summary is 2001 characters"),
            "{problems:?}"
        );
        assert!(
            problems[1].contains("message is 1001 characters"),
            "{problems:?}"
        );
        assert!(
            problems[2].contains("fix is 1001 characters"),
            "{problems:?}"
        );
        let many = report(
            (0..=MAX_FINDINGS)
                .map(|_| finding("src/lib.rs", 1, None, "R1"))
                .collect(),
        );
        let problems = finding_problems(&many, &checked, &mut lines_of);
        assert_eq!(
            problems,
            vec![format!(
                "the report has {} findings, more than the {MAX_FINDINGS} it may hold; \
                 merge findings at one place and keep those that matter most",
                MAX_FINDINGS + 1
            )]
        );
        let schema = input_schema_for::<VerificationReport>().to_string();
        assert!(
            schema.contains(&format!("\"maxItems\":{MAX_FINDINGS}")),
            "{schema}"
        );
        assert!(
            schema.contains(&format!("\"maxLength\":{MAX_SUMMARY_CHARS}")),
            "{schema}"
        );
    }
}
