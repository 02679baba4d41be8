//! Where a validation run's failures are, read from the output of the common test runners
//! and compilers: cargo and rustc, pytest, go test, jest, vitest and node, tsc. A shell
//! offers these when the user's own reading of the output (Neovim's 'errorformat') finds
//! nothing to jump to. Reading the output is pure (`runner_locations`); `in_project` keeps
//! the places in files of the project that exist. A new runner is one more `Pattern` here.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::sync::LazyLock;

use regex::Regex;

use crate::tools::{ProjectRoot, project_walker};

/// A place in a file that a runner's output names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailureLocation {
    /// As the output wrote it (relative, or absolute); after `in_project`, relative to the
    /// project root with `/` separators.
    pub path: String,
    pub line: u32,
    /// 1-based; 0 when the runner names only the line.
    pub column: u32,
    /// What the output says of it, on one line.
    pub text: String,
}

/// The most places one run gives: a long log's later places are mostly the first ones again,
/// and a quickfix list of thousands helps nobody.
const MAX_LOCATIONS: usize = 100;

/// The most characters of what the output says of a place: a runner's line may be megabytes
/// (a dumped value), a quickfix entry is read on one screen line.
const MAX_TEXT_CHARS: usize = 300;

/// One way a runner writes a place: a line pattern with the groups `path`, `line`, and
/// optionally `column` and `text` (what the line itself says of the place).
struct Pattern {
    regex: Regex,
    /// Where the text comes from when the line has none.
    text: TextFrom,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum TextFrom {
    /// The line's own `text` group.
    Line,
    /// The headline before it (rustc's `error[E0308]: …`).
    Headline,
    /// The next line (a Rust panic's message).
    NextLine,
    /// The test and error seen last (a JavaScript stack frame).
    LastError,
}

/// The patterns are constants, and the tests run each: they compile.
fn compiled(regex: &str) -> Regex {
    Regex::new(regex).unwrap_or_else(|err| panic!("pattern {regex:?}: {err}"))
}

/// A path as runners print one: no blanks, no colon (a Windows drive letter aside).
const PATH: &str = r"(?P<path>(?:[A-Za-z]:)?[^\s:()'`]+)";
/// `:line:column`.
const POSITION: &str = r":(?P<line>\d+):(?P<column>\d+)";

/// Each runner's ways of writing a place, `PATH` and `POSITION` standing for the patterns
/// of those names; what a line says of the place comes from where `TextFrom` says.
const RUNNER_LINES: [(TextFrom, &str); 9] = [
    // rustc and cargo: `  --> src/lib.rs:2:22` under `error[E0308]: mismatched types`.
    (TextFrom::Headline, r"^\s*--> PATHPOSITION\s*$"),
    // A Rust panic: `thread 'adds' (25897) panicked at tests/fail.rs:3:5:`, its message on
    // the next line; before Rust 1.73: `panicked at 'message', src/main.rs:2:5`.
    (
        TextFrom::Line,
        r"panicked at '(?P<text>.*)', PATHPOSITION\s*$",
    ),
    (TextFrom::NextLine, r"panicked at PATHPOSITION:?\s*$"),
    // pytest: `tests/test_calc.py:6: AssertionError`, `tests/test_calc.py:14: in test_x`.
    (
        TextFrom::Line,
        r"^(?P<path>[^\s:]+\.py):(?P<line>\d+):(?:\s+(?P<text>.*))?$",
    ),
    // go test: `    parse_test.go:12: got 1, want 2` (the file in its package's folder).
    (
        TextFrom::Line,
        r"^\s+(?P<path>[^\s:]+\.go):(?P<line>\d+): (?P<text>.+)$",
    ),
    // tsc: `src/x.ts(3,5): error TS2322: …`, and `src/x.ts:3:5 - error TS2322: …` pretty.
    (
        TextFrom::Line,
        r"^PATH\((?P<line>\d+),(?P<column>\d+)\): (?P<text>.+)$",
    ),
    (
        TextFrom::Line,
        r"^PATHPOSITION - (?P<text>(?:error|warning).*)$",
    ),
    // vitest: ` ❯ src/x.test.ts:3:5`, or ` ❯ add src/math.ts:3:9` with the function.
    (TextFrom::LastError, r"^\s*❯ (?:\S+ )?PATHPOSITION\s*$"),
    // A V8 stack frame (jest, node): `    at Object.<anonymous> (src/x.test.ts:3:5)`,
    // `    at file:///home/me/x.mjs:3:5`.
    (
        TextFrom::LastError,
        r"^\s+at (?:.*? \()?(?:file://)?PATHPOSITION\)?\s*$",
    ),
];

static PATTERNS: LazyLock<Vec<Pattern>> = LazyLock::new(|| {
    RUNNER_LINES
        .iter()
        .map(|(text, template)| Pattern {
            regex: compiled(&template.replace("PATH", PATH).replace("POSITION", POSITION)),
            text: *text,
        })
        .collect()
});

/// rustc's headline of a diagnostic: `error[E0308]: mismatched types`, `warning: unused`.
static HEADLINE: LazyLock<Regex> =
    LazyLock::new(|| compiled(r"^(?:error|warning)(?:\[\w+\])?: .+$"));

/// A JavaScript test's name (jest's `● suite › test`, vitest's `FAIL  src/x.test.ts > test`).
static TEST_NAME: LazyLock<Regex> = LazyLock::new(|| compiled(r"^\s*(?:●|FAIL)\s+(?P<name>.+)$"));

/// An error's first line: `TypeError: x is undefined`, `AssertionError: expected 2 to be 3`.
static ERROR_LINE: LazyLock<Regex> =
    LazyLock::new(|| compiled(r"^\s*(?P<error>\w*(?:Error|Exception)(?: \[\w+\])?: .+)$"));

/// A frame of a Rust backtrace (`   4: fail::adds`): the `at` line under it repeats a place
/// the panic line names, or one in the test harness.
static RUST_FRAME: LazyLock<Regex> = LazyLock::new(|| compiled(r"^\s*\d+: \S"));

/// The places `output` names, in the order it names them, each once; paths as written.
pub fn runner_locations(output: &str) -> Vec<FailureLocation> {
    let lines: Vec<String> = output.lines().map(without_colours).collect();
    let mut found: Vec<FailureLocation> = Vec::new();
    let mut headline = "";
    let mut test_name = "";
    let mut error = "";
    for (index, line) in lines.iter().enumerate() {
        let line = line.as_str();
        if HEADLINE.is_match(line) {
            headline = line;
        }
        if let Some(captures) = TEST_NAME.captures(line) {
            test_name = captures.name("name").map_or("", |name| name.as_str());
            error = "";
        }
        if let Some(captures) = ERROR_LINE.captures(line) {
            error = captures.name("error").map_or("", |found| found.as_str());
        }
        let after_rust_frame = index > 0
            && RUST_FRAME.is_match(&lines[index - 1])
            && line.trim_start().starts_with("at ");
        if after_rust_frame {
            continue;
        }
        let Some((pattern, captures)) = PATTERNS
            .iter()
            .find_map(|pattern| Some((pattern, pattern.regex.captures(line)?)))
        else {
            continue;
        };
        let group = |name: &str| captures.name(name).map_or("", |found| found.as_str());
        let path = group("path");
        if !plausible_path(path) {
            continue;
        }
        let text = match pattern.text {
            TextFrom::Line => group("text").trim().to_owned(),
            TextFrom::Headline => headline.to_owned(),
            TextFrom::NextLine => lines
                .get(index + 1)
                .map(|next| next.trim().to_owned())
                .unwrap_or_default(),
            TextFrom::LastError => [test_name, error]
                .into_iter()
                .filter(|part| !part.is_empty())
                .collect::<Vec<_>>()
                .join(": "),
        };
        let location = FailureLocation {
            path: path.to_owned(),
            line: group("line").parse().unwrap_or(0),
            column: group("column").parse().unwrap_or(0),
            text: crate::agent::short_text::one_line(&text, MAX_TEXT_CHARS),
        };
        let known = found.iter().any(|seen| {
            (&seen.path, seen.line, seen.column) == (&location.path, location.line, location.column)
        });
        if location.line > 0 && !known {
            found.push(location);
            if found.len() == MAX_LOCATIONS {
                break;
            }
        }
    }
    found
}

/// Not a runtime's own code (`node:internal/…`, `<anonymous>`) nor a dependency's.
fn plausible_path(path: &str) -> bool {
    !(path.is_empty()
        || path.starts_with("node:")
        || path.starts_with('<')
        || path.contains("node_modules/")
        || path.starts_with("/rustc/"))
}

/// `line` without the terminal's colour and style sequences (`ESC [ … m`).
fn without_colours(line: &str) -> String {
    let mut text = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            // Parameters and intermediates up to the final byte, a letter.
            for next in chars.by_ref() {
                if next.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            text.push(c);
        }
    }
    text
}

/// The places in files of the project that exist, their paths made relative to its root.
/// A bare file name that is not at the root (go test names a test file in its package's
/// folder) is the one file of that name in the project, if there is only one.
pub fn in_project(root: &ProjectRoot, found: Vec<FailureLocation>) -> Vec<FailureLocation> {
    // The project is walked once, for the first bare name, however many the output has.
    let mut by_name: Option<FilesByName> = None;
    found
        .into_iter()
        .filter_map(|mut location| {
            let path = resolve(root, &location.path, &mut by_name)?;
            location.path = root.relative_display(&path);
            Some(location)
        })
        .collect()
}

/// The project's files (as the tools see them) by file name: the path of the one file of
/// that name, none when several have it.
type FilesByName = HashMap<OsString, Option<PathBuf>>;

fn resolve(
    root: &ProjectRoot,
    written: &str,
    by_name: &mut Option<FilesByName>,
) -> Option<PathBuf> {
    match root.resolve_existing(written) {
        Ok(path) => path.is_file().then_some(path),
        Err(_) if !written.contains(['/', '\\']) => by_name
            .get_or_insert_with(|| files_by_name(root))
            .get(OsStr::new(written))
            .cloned()
            .flatten(),
        Err(_) => None,
    }
}

fn files_by_name(root: &ProjectRoot) -> FilesByName {
    let mut files = FilesByName::new();
    let Ok(walk) = project_walker(root, root.path(), None) else {
        return files;
    };
    for entry in walk.filter_map(Result::ok) {
        if entry.file_type().is_some_and(|kind| kind.is_file()) {
            files
                .entry(entry.file_name().to_os_string())
                .and_modify(|one| *one = None)
                .or_insert_with(|| Some(entry.into_path()));
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Output captured from the runners (see tests/fixtures/runner_output/README.md).
    fn output(name: &str) -> String {
        let path = format!(
            "{}/tests/fixtures/runner_output/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path}: {err}"))
    }

    fn places(output: &str) -> Vec<(String, u32, u32)> {
        runner_locations(output)
            .into_iter()
            .map(|location| (location.path, location.line, location.column))
            .collect()
    }

    fn place(path: &str, line: u32, column: u32) -> (String, u32, u32) {
        (path.to_owned(), line, column)
    }

    #[test]
    fn what_a_line_says_of_a_place_is_cut_to_one_screen_line() {
        let huge = format!("src/x.ts(3,5): error TS2322: {}", "x".repeat(1_000_000));
        let found = runner_locations(&huge);
        assert_eq!(found.len(), 1, "{:?}", found.first().map(|f| &f.path));
        assert!(found[0].text.chars().count() <= MAX_TEXT_CHARS + 1, "cut");
        assert!(
            found[0].text.starts_with("error TS2322: xxx"),
            "{}",
            &found[0].text[..40]
        );
    }

    #[test]
    fn cargo_test_panics_are_found_with_their_messages_and_not_their_backtraces() {
        let found = runner_locations(&output("cargo_test.txt"));
        assert_eq!(
            found,
            vec![
                FailureLocation {
                    path: "tests/fail.rs".to_owned(),
                    line: 3,
                    column: 5,
                    text: "assertion `left == right` failed: two and two".to_owned(),
                },
                FailureLocation {
                    path: "tests/fail.rs".to_owned(),
                    line: 9,
                    column: 13,
                    text: "a value".to_owned(),
                },
            ]
        );
    }

    #[test]
    fn rustc_errors_are_found_under_their_headlines() {
        let found = runner_locations(&output("cargo_build.txt"));
        let seen: Vec<(String, u32, u32, String)> = found
            .into_iter()
            .map(|l| (l.path, l.line, l.column, l.text))
            .collect();
        assert_eq!(
            seen,
            vec![
                (
                    "src/lib.rs".to_owned(),
                    2,
                    22,
                    "error[E0308]: mismatched types".to_owned()
                ),
                (
                    "src/lib.rs".to_owned(),
                    3,
                    5,
                    "error[E0308]: mismatched types".to_owned()
                ),
            ]
        );
    }

    #[test]
    fn a_panic_before_rust_1_73_names_its_message_on_the_same_line() {
        let found = runner_locations(
            "thread 'main' panicked at 'called `Option::unwrap()` on a `None` value', src/main.rs:4:37\n",
        );
        assert_eq!(found.len(), 1);
        assert_eq!(
            (
                found[0].path.as_str(),
                found[0].line,
                found[0].column,
                found[0].text.as_str()
            ),
            (
                "src/main.rs",
                4,
                37,
                "called `Option::unwrap()` on a `None` value"
            )
        );
    }

    #[test]
    fn pytest_tracebacks_are_found_in_the_long_and_the_short_style() {
        let long = runner_locations(&output("pytest.txt"));
        let texts: Vec<(u32, &str)> = long.iter().map(|l| (l.line, l.text.as_str())).collect();
        assert_eq!(
            texts,
            vec![(6, "AssertionError"), (14, ""), (10, "ValueError")]
        );
        assert!(long.iter().all(|l| l.path == "tests/test_calc.py"));
        assert_eq!(
            places(&output("pytest_short.txt")),
            vec![
                place("tests/test_calc.py", 6, 0),
                place("tests/test_calc.py", 14, 0),
                place("tests/test_calc.py", 10, 0),
            ]
        );
    }

    #[test]
    fn go_test_failures_are_found_by_file_name() {
        let found = runner_locations(&output("go_test.txt"));
        let seen: Vec<(&str, u32, &str)> = found
            .iter()
            .map(|l| (l.path.as_str(), l.line, l.text.as_str()))
            .collect();
        assert_eq!(
            seen,
            vec![
                ("parse_test.go", 12, "Parse(\"1.2\") = 1, want 1.2"),
                ("parse_test.go", 19, "empty input: got no error"),
            ]
        );
    }

    fn described(output: &str) -> Vec<(String, u32, u32, String)> {
        runner_locations(output)
            .into_iter()
            .map(|l| (l.path, l.line, l.column, l.text))
            .collect()
    }

    fn at(path: &str, line: u32, column: u32, text: &str) -> (String, u32, u32, String) {
        (path.to_owned(), line, column, text.to_owned())
    }

    #[test]
    fn jest_failures_are_found_at_their_frames_with_the_test_and_error() {
        let json_error = "parse › reads JSON: SyntaxError: Expected property name or '}' in \
                          JSON at position 1";
        assert_eq!(
            described(&output("jest.txt")),
            vec![
                at("src/sum.test.js", 5, 23, "sum › adds two numbers"),
                at("src/sum.js", 5, 15, json_error),
                at("src/sum.test.js", 11, 12, json_error),
            ]
        );
    }

    #[test]
    fn vitest_failures_are_found_at_their_arrows_with_the_test_and_error() {
        let json_error = "src/parse.test.ts > reads JSON: SyntaxError: Expected property name \
                          or '}' in JSON at position 1";
        assert_eq!(
            described(&output("vitest.txt")),
            vec![
                at("src/parse.ts", 2, 15, json_error),
                at("src/parse.test.ts", 5, 10, json_error),
                at(
                    "src/sum.test.ts",
                    6,
                    23,
                    "src/sum.test.ts > sum > adds two numbers: AssertionError: expected 1 to be \
                     3 // Object.is equality"
                ),
            ]
        );
    }

    #[test]
    fn node_stack_frames_are_found_but_not_nodes_own() {
        assert_eq!(
            places(&output("node_throw.txt")),
            vec![
                place("/tmp/rt/jsproj/src/throw.js", 2, 15),
                place("/tmp/rt/jsproj/src/throw.js", 4, 1),
            ]
        );
    }

    #[test]
    fn tsc_errors_are_found_in_the_plain_and_the_pretty_style() {
        let plain = runner_locations(&output("tsc.txt"));
        assert_eq!(
            plain
                .iter()
                .map(|l| (l.path.as_str(), l.line, l.column))
                .collect::<Vec<_>>(),
            vec![("src/sum.ts", 2, 3), ("src/sum.ts", 5, 5)]
        );
        assert!(
            plain[0].text.starts_with("error TS2322: "),
            "{:?}",
            plain[0]
        );
        assert_eq!(
            places(&output("tsc_pretty.txt")),
            vec![place("src/sum.ts", 2, 3), place("src/sum.ts", 5, 5)]
        );
    }

    #[test]
    fn colours_do_not_hide_a_place() {
        let coloured = "\u{1b}[31m\u{1b}[1merror[E0425]\u{1b}[0m: cannot find value `x`\n \u{1b}[34m--> \u{1b}[0msrc/lib.rs:7:3\n";
        let found = runner_locations(coloured);
        assert_eq!(
            (
                found[0].path.as_str(),
                found[0].line,
                found[0].column,
                found[0].text.as_str()
            ),
            ("src/lib.rs", 7, 3, "error[E0425]: cannot find value `x`")
        );
    }

    #[test]
    fn output_that_names_no_place_gives_none() {
        assert!(runner_locations("running 1 test\ntest adds ... ok\nall good: 3:4\n").is_empty());
    }

    #[test]
    fn only_existing_files_inside_the_project_are_kept_relative_to_its_root() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("tests")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join("pkg/parse")).expect("mkdir");
        std::fs::write(dir.path().join("tests/fail.rs"), "").expect("write");
        std::fs::write(dir.path().join("pkg/parse/parse_test.go"), "").expect("write");
        std::fs::write(outside.path().join("secret.rs"), "").expect("write");
        let root = ProjectRoot::new(dir.path()).expect("root");
        let at = |path: String| FailureLocation {
            path,
            line: 1,
            column: 0,
            text: String::new(),
        };
        let written = vec![
            at("tests/fail.rs".to_owned()),
            at(format!("{}/tests/fail.rs", root.path().display())),
            at("./tests/fail.rs".to_owned()),
            at("parse_test.go".to_owned()),
            at("tests/missing.rs".to_owned()),
            at("tests".to_owned()),
            at("../secret.rs".to_owned()),
            at(outside.path().join("secret.rs").display().to_string()),
        ];
        let kept: Vec<String> = in_project(&root, written)
            .into_iter()
            .map(|location| location.path)
            .collect();
        assert_eq!(
            kept,
            vec![
                "tests/fail.rs",
                "tests/fail.rs",
                "tests/fail.rs",
                "pkg/parse/parse_test.go"
            ]
        );
    }

    #[test]
    fn a_bare_file_name_found_twice_is_no_place() {
        let dir = tempfile::tempdir().expect("tempdir");
        for folder in ["a", "b"] {
            std::fs::create_dir_all(dir.path().join(folder)).expect("mkdir");
            std::fs::write(dir.path().join(folder).join("x_test.go"), "").expect("write");
        }
        let root = ProjectRoot::new(dir.path()).expect("root");
        let location = FailureLocation {
            path: "x_test.go".to_owned(),
            line: 3,
            column: 0,
            text: String::new(),
        };
        assert!(in_project(&root, vec![location]).is_empty());
    }
}
