use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::*;

struct Project {
    _dir: tempfile::TempDir,
    context: ToolContext,
}

fn project() -> Project {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = [
        (".gitignore", "target/\n*.log\n"),
        ("src/main.rs", "fn main() {\n    run();\n}\n\nfn run() {}\n"),
        ("src/lib.rs", "pub fn RUN() {}\n"),
        ("docs/guide.md", "# Guide\nrun it\n"),
        ("target/out.rs", "fn main() {}\n"),
        ("debug.log", "fn main() in a log\n"),
        (".git/config", "[core]\n"),
    ];
    for (path, content) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, content).expect("write");
    }
    std::fs::write(dir.path().join("image.bin"), [0u8, 159, 146, 150]).expect("write");
    let context = ToolContext {
        root: ProjectRoot::new(dir.path()).expect("root"),
        cancel: CancellationToken::new(),
    };
    Project { _dir: dir, context }
}

async fn call(project: &Project, name: &str, input: Value) -> Result<String, ToolError> {
    let registry = ToolRegistry::for_loop(LoopType::Plan);
    let tool = registry.get(name).expect("tool exists");
    tool.call(input, &project.context).await
}

#[tokio::test]
async fn read_file_numbers_lines_and_pages() {
    let project = project();
    let whole = call(&project, "read_file", json!({"path": "src/main.rs"}))
        .await
        .expect("read");
    assert_eq!(
        whole,
        "     1\tfn main() {\n     2\t    run();\n     3\t}\n     4\t\n     5\tfn run() {}\n"
    );
    let part = call(
        &project,
        "read_file",
        json!({"path": "src/main.rs", "start_line": 2, "end_line": 3}),
    )
    .await
    .expect("read");
    assert_eq!(
        part,
        "     2\t    run();\n     3\t}\n[lines 2-3 of 5; call read_file with start_line 4 for more]\n"
    );
}

#[tokio::test]
async fn read_file_refuses_binaries_directories_bad_ranges_and_unknown_fields() {
    let project = project();
    let binary = call(&project, "read_file", json!({"path": "image.bin"}))
        .await
        .expect_err("binary");
    assert!(binary.to_string().contains("binary file"), "{binary}");
    let dir = call(&project, "read_file", json!({"path": "src"}))
        .await
        .expect_err("dir");
    assert!(dir.to_string().contains("use list_files"), "{dir}");
    let past = call(
        &project,
        "read_file",
        json!({"path": "src/main.rs", "start_line": 9}),
    )
    .await
    .expect_err("past the end");
    assert!(past.to_string().contains("has 5 lines"), "{past}");
    let unknown = call(&project, "read_file", json!({"file": "src/main.rs"}))
        .await
        .expect_err("bad input");
    assert!(
        unknown.to_string().contains("unknown field `file`"),
        "{unknown}"
    );
    let escape = call(&project, "read_file", json!({"path": "../etc/passwd"}))
        .await
        .expect_err("escape");
    assert!(
        matches!(escape, ToolError::Path(PathError::ParentComponent { .. })),
        "{escape}"
    );
}

#[tokio::test]
async fn list_files_honours_gitignore_skips_git_and_filters_by_glob() {
    let project = project();
    let all = call(&project, "list_files", json!({})).await.expect("list");
    assert_eq!(
        all,
        ".gitignore\ndocs/guide.md\nimage.bin\nsrc/lib.rs\nsrc/main.rs\n"
    );
    let rust = call(&project, "list_files", json!({"glob": "*.rs"}))
        .await
        .expect("list");
    assert_eq!(rust, "src/lib.rs\nsrc/main.rs\n");
    let in_docs = call(&project, "list_files", json!({"path": "docs"}))
        .await
        .expect("list");
    assert_eq!(in_docs, "docs/guide.md\n");
    let capped = call(&project, "list_files", json!({"max_results": 2}))
        .await
        .expect("list");
    assert!(
        capped.ends_with("[3 more files not shown; narrow the listing with path or glob]\n"),
        "{capped}"
    );
}

#[tokio::test]
async fn grep_finds_matches_with_locations_and_reports_bad_patterns() {
    let project = project();
    let found = call(&project, "grep", json!({"pattern": r"fn\s+main"}))
        .await
        .expect("grep");
    assert_eq!(
        found, "src/main.rs:1: fn main() {\n",
        "ignored files are not searched"
    );
    let insensitive = call(
        &project,
        "grep",
        json!({"pattern": "run", "case_insensitive": true, "glob": "*.rs"}),
    )
    .await
    .expect("grep");
    assert_eq!(
        insensitive,
        "src/lib.rs:1: pub fn RUN() {}\nsrc/main.rs:2:     run();\nsrc/main.rs:5: fn run() {}\n"
    );
    let capped = call(
        &project,
        "grep",
        json!({"pattern": "run", "max_matches": 1}),
    )
    .await
    .expect("grep");
    assert!(capped.contains("[stopped after 1 matches"), "{capped}");
    let none = call(&project, "grep", json!({"pattern": "zebra"}))
        .await
        .expect("grep");
    assert_eq!(none, "no matches for \"zebra\"\n");
    let bad = call(&project, "grep", json!({"pattern": "(unclosed"}))
        .await
        .expect_err("bad regex");
    assert!(matches!(bad, ToolError::InvalidInput(_)), "{bad}");
}

#[test]
fn every_tool_offers_an_object_schema_with_descriptions() {
    let registry = ToolRegistry::for_loop(LoopType::Plan);
    assert_eq!(registry.names(), vec!["read_file", "list_files", "grep"]);
    for spec in registry.specs() {
        assert_eq!(spec.input_schema["type"], "object", "{}", spec.name);
        let properties = spec.input_schema["properties"]
            .as_object()
            .expect("properties");
        for (field, schema) in properties {
            assert!(
                schema["description"].is_string(),
                "{}.{field} lacks a description",
                spec.name
            );
        }
    }
}

#[tokio::test]
async fn a_cancelled_context_stops_a_tool() {
    let project = project();
    project.context.cancel.cancel();
    let result = call(&project, "list_files", json!({})).await;
    assert!(matches!(result, Err(ToolError::Cancelled)), "{result:?}");
}
