//! Tests of the tools against real project directories: each tool's results, refusals and
//! caps, and the schemas they offer.

use std::sync::Arc;

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
        (".env", "API_TOKEN=hunter2\n"),
        ("config/server.pem", "-----BEGIN PRIVATE KEY-----\n"),
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
        policy: Arc::new(ToolPolicy::default()),
        approver: Arc::new(AcceptAll),
        loop_id: "test-loop".to_owned(),
        buffers: Arc::new(NoBuffers),
        journal: Arc::new(NoJournal),
    };
    Project { _dir: dir, context }
}

async fn call(project: &Project, name: &str, input: Value) -> Result<String, ToolError> {
    let registry = ToolRegistry::for_loop(LoopType::Code, true);
    let tool = registry.get(name).expect("tool exists");
    tool.call(input, &project.context).await
}

/// `edit_file` of `path`, replacing `old` with `new`.
async fn edit(project: &Project, path: &str, old: &str, new: &str) -> Result<String, ToolError> {
    call(
        project,
        "edit_file",
        json!({"path": path, "old_string": old, "new_string": new}),
    )
    .await
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
    let huge = call(
        &project,
        "read_file",
        json!({"path": "src/main.rs", "start_line": usize::MAX}),
    )
    .await
    .expect_err("past the end");
    assert!(huge.to_string().contains("past the end"), "{huge}");
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
        ".env\n.gitignore\nconfig/server.pem\ndocs/guide.md\nimage.bin\nsrc/lib.rs\nsrc/main.rs\n"
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
        capped.ends_with("[5 more files not shown; narrow the listing with path or glob]\n"),
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
    let registry = ToolRegistry::for_loop(LoopType::Plan, false);
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

#[tokio::test]
async fn secret_files_are_never_read_searched_or_written() {
    let project = project();
    for (tool, input) in [
        ("read_file", json!({"path": ".env"})),
        ("read_file", json!({"path": "config/server.pem"})),
        (
            "edit_file",
            json!({"path": ".env", "old_string": "hunter2", "new_string": "x"}),
        ),
        ("write_file", json!({"path": ".env.local", "content": "x"})),
    ] {
        let err = call(&project, tool, input).await.expect_err(tool);
        assert!(matches!(err, ToolError::Denied(_)), "{tool}: {err}");
        assert!(err.to_string().contains("secret"), "{err}");
    }
    let found = call(&project, "grep", json!({"pattern": "hunter2|PRIVATE"}))
        .await
        .expect("grep");
    assert_eq!(found, "no matches for \"hunter2|PRIVATE\"\n");
    assert_eq!(
        std::fs::read_to_string(project.context.root.path().join(".env")).expect("read"),
        "API_TOKEN=hunter2\n"
    );
    assert!(!project.context.root.path().join(".env.local").exists());
}

#[tokio::test]
async fn write_file_creates_and_replaces_inside_the_root_only() {
    let project = project();
    let root = project.context.root.path().to_path_buf();
    let created = call(
        &project,
        "write_file",
        json!({"path": "src/cli/args.rs", "content": "pub fn parse() {}\n"}),
    )
    .await
    .expect("write");
    assert_eq!(created, "created src/cli/args.rs (18 bytes)");
    assert_eq!(
        std::fs::read_to_string(root.join("src/cli/args.rs")).expect("read"),
        "pub fn parse() {}\n"
    );
    let replaced = call(
        &project,
        "write_file",
        json!({"path": "src/lib.rs", "content": ""}),
    )
    .await
    .expect("write");
    assert_eq!(replaced, "replaced src/lib.rs (0 bytes)");
    let outside = root.parent().expect("parent").join("escaped.txt");
    for (path, expected) in [
        ("../escaped.txt".to_owned(), "contains '..'"),
        (outside.display().to_string(), "outside the project root"),
        (".git/config".to_owned(), "inside .git"),
        (".git/hooks/post-commit".to_owned(), "inside .git"),
    ] {
        let err = call(
            &project,
            "write_file",
            json!({"path": path, "content": "x"}),
        )
        .await
        .expect_err(&path);
        assert!(err.to_string().contains(expected), "{path}: {err}");
    }
    assert!(!outside.exists());
    assert_eq!(
        std::fs::read_to_string(root.join(".git/config")).expect("read"),
        "[core]\n"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn writes_through_a_symlink_that_leads_out_are_refused() {
    let project = project();
    let outside = tempfile::tempdir().expect("outside");
    let root = project.context.root.path();
    std::os::unix::fs::symlink(outside.path(), root.join("out")).expect("link");
    std::os::unix::fs::symlink(outside.path().join("target.txt"), root.join("file_link"))
        .expect("link");
    for path in ["out/new.txt", "file_link"] {
        let err = call(
            &project,
            "write_file",
            json!({"path": path, "content": "x"}),
        )
        .await
        .expect_err(path);
        assert!(
            err.to_string().contains("symlink that leads outside"),
            "{path}: {err}"
        );
        let err = call(
            &project,
            "edit_file",
            json!({"path": path, "old_string": "a", "new_string": "b"}),
        )
        .await
        .expect_err(path);
        assert!(
            err.to_string().contains("symlink that leads outside"),
            "{path}: {err}"
        );
    }
    assert_eq!(
        std::fs::read_dir(outside.path()).expect("read_dir").count(),
        0
    );
}

#[tokio::test]
async fn edit_file_replaces_a_unique_string_and_reports_counts_otherwise() {
    let project = project();
    let main = project.context.root.path().join("src/main.rs");
    let edited = edit(
        &project,
        "src/main.rs",
        "    run();\n",
        "    run();\n    done();\n",
    )
    .await
    .expect("edit");
    assert_eq!(edited, "edited src/main.rs");
    assert_eq!(
        std::fs::read_to_string(&main).expect("read"),
        "fn main() {\n    run();\n    done();\n}\n\nfn run() {}\n"
    );
    let twice = edit(&project, "src/main.rs", "run()", "go()")
        .await
        .expect_err("twice");
    assert!(twice.to_string().contains("occurs 2 times"), "{twice}");
    let never = edit(&project, "src/main.rs", "walk()", "go()")
        .await
        .expect_err("never");
    assert!(never.to_string().contains("does not occur"), "{never}");
    assert!(
        std::fs::read_to_string(&main)
            .expect("read")
            .contains("run();"),
        "failed edits change nothing"
    );
    let missing = edit(&project, "src/nope.rs", "a", "b")
        .await
        .expect_err("missing");
    assert!(
        missing.to_string().contains("create it with write_file"),
        "{missing}"
    );
}

#[tokio::test]
async fn run_command_reports_status_and_output_in_the_project() {
    let project = project();
    let output = call(
        &project,
        "run_command",
        json!({"command": "pwd; echo oops >&2; exit 3"}),
    )
    .await
    .expect("run");
    let root = project.context.root.path().display().to_string();
    assert_eq!(
        output,
        format!("exit status 3\n--- stdout ---\n{root}\n--- stderr ---\noops\n")
    );
    let in_src = call(
        &project,
        "run_command",
        json!({"command": "ls", "cwd": "src"}),
    )
    .await
    .expect("run");
    assert!(in_src.contains("lib.rs\nmain.rs"), "{in_src}");
    let long = call(&project, "run_command", json!({"command": "seq 1 100000"}))
        .await
        .expect("run");
    assert!(
        long.contains("bytes left out") && long.contains("\n100000\n"),
        "keeps the start and end"
    );
    assert!(long.len() < 20 * 1024, "{}", long.len());
}

#[tokio::test]
async fn a_command_that_leaves_a_background_process_returns_at_once_and_leaves_nothing() {
    let project = project();
    let output = call(
        &project,
        "run_command",
        json!({"command": "sleep 1000 & echo $! > bg.pid; echo started", "timeout_secs": 60}),
    )
    .await
    .expect("run");
    assert_eq!(
        output,
        "exit status 0\n--- stdout ---\nstarted\n--- stderr ---\n"
    );
    #[cfg(unix)]
    assert_child_gone(&project.context.root.path().join("bg.pid")).await;
}

#[tokio::test]
async fn commands_do_not_see_the_api_key() {
    let project = project();
    // SAFETY: tests in this binary do not read ANTHROPIC_API_KEY concurrently.
    unsafe { std::env::set_var("ANTHROPIC_API_KEY", "sk-ant-tool-test") };
    let output = call(
        &project,
        "run_command",
        json!({"command": "echo key=${ANTHROPIC_API_KEY:-unset}"}),
    )
    .await
    .expect("run");
    assert!(output.contains("key=unset"), "{output}");
}

#[tokio::test]
async fn denied_commands_never_run() {
    let project = project();
    let marker = project.context.root.path().join("ran");
    for command in [
        "sudo touch ran",
        "touch ran && git push origin main",
        "rm -rf / ; touch ran",
    ] {
        let err = call(&project, "run_command", json!({"command": command}))
            .await
            .expect_err(command);
        assert!(matches!(err, ToolError::Denied(_)), "{command}: {err}");
        assert!(err.to_string().contains("deny-list"), "{err}");
    }
    assert!(!marker.exists());
}

#[cfg(unix)]
#[tokio::test]
async fn a_timeout_or_cancel_kills_the_command_and_its_children() {
    let project = project();
    let output = call(
        &project,
        "run_command",
        json!({"command": "sleep 1000 & echo $! > child.pid; wait", "timeout_secs": 0.3}),
    )
    .await
    .expect("run");
    assert!(
        output.starts_with("killed after the 0.3s timeout"),
        "{output}"
    );
    assert_child_gone(&project.context.root.path().join("child.pid")).await;

    let cancel = project.context.cancel.clone();
    let pid_file = project.context.root.path().join("cancelled.pid");
    let running = call(
        &project,
        "run_command",
        json!({"command": "sleep 1000 & echo $! > cancelled.pid; wait"}),
    );
    let canceller = async {
        // The command has started once it wrote its child's pid.
        while !pid_file.exists()
            || std::fs::read_to_string(&pid_file)
                .unwrap_or_default()
                .trim()
                .is_empty()
        {
            tokio::task::yield_now().await;
        }
        cancel.cancel();
    };
    let (result, ()) = tokio::join!(running, canceller);
    assert!(matches!(result, Err(ToolError::Cancelled)), "{result:?}");
    assert_child_gone(&pid_file).await;
}

/// Waits, through a pidfd (no polling), until the process in `pid_file` has exited.
#[cfg(unix)]
async fn assert_child_gone(pid_file: &std::path::Path) {
    let pid: i32 = std::fs::read_to_string(pid_file)
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return;
    }
    let fd = i32::try_from(fd).expect("fd");
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    let owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: the descriptor is owned by the AsyncFd and registered nowhere else.
    let async_fd = unsafe { tokio::io::unix::AsyncFd::register(owned) }.expect("AsyncFd");
    let _exited = tokio::time::timeout(std::time::Duration::from_secs(10), async_fd.readable())
        .await
        .expect("the child was killed")
        .expect("pidfd readable");
}

/// Decides every request with `decision` and keeps what it was asked.
pub(crate) struct RecordingApprover {
    pub(crate) decision: Decision,
    pub(crate) asked: std::sync::Mutex<Vec<ApprovalRequest>>,
}

#[async_trait::async_trait]
impl Approver for RecordingApprover {
    async fn decide(
        &self,
        request: ApprovalRequest,
        _cancel: &CancellationToken,
    ) -> Option<Decision> {
        self.asked.lock().expect("lock").push(request);
        Some(self.decision.clone())
    }
}

#[tokio::test]
async fn a_rejected_change_returns_the_users_reason_and_changes_nothing() {
    let mut project = project();
    let approver = Arc::new(RecordingApprover {
        decision: Decision::Reject("keep main.rs minimal".to_owned()),
        asked: std::sync::Mutex::new(Vec::new()),
    });
    project.context.approver = approver.clone();
    let main = project.context.root.path().join("src/main.rs");
    let before = std::fs::read_to_string(&main).expect("read");
    let err = edit(
        &project,
        "src/main.rs",
        "    run();\n",
        "    run();\n    more();\n",
    )
    .await
    .expect_err("rejected");
    assert_eq!(
        err.to_string(),
        "the user rejected this change: keep main.rs minimal"
    );
    let err = call(&project, "run_command", json!({"command": "touch ran"}))
        .await
        .expect_err("rejected");
    assert!(matches!(err, ToolError::Rejected(_)), "{err}");
    assert_eq!(std::fs::read_to_string(&main).expect("read"), before);
    assert!(!project.context.root.path().join("ran").exists());
    let asked = approver.asked.lock().expect("lock").clone();
    assert_eq!(asked.len(), 2);
    assert_eq!(
        (asked[0].kind, asked[0].subject.as_str()),
        (ChangeKind::Edit, "src/main.rs")
    );
    assert!(
        asked[0].detail.contains("+    more();"),
        "{}",
        asked[0].detail
    );
    assert_eq!(
        (asked[1].kind, asked[1].subject.as_str()),
        (ChangeKind::Command, "touch ran")
    );
}

#[tokio::test]
async fn a_tool_from_a_closure_is_offered_and_called_like_any_other() {
    let project = project();
    let shout = fn_tool(
        "shout",
        "Upper-cases a word.",
        json!({"type": "object", "properties": {"word": {"type": "string", "description": "The word."}}, "required": ["word"]}),
        json!({"word": "loop"}),
        |input, _context| {
            let word = input["word"]
                .as_str()
                .ok_or_else(|| ToolError::InvalidInput("word must be a string".to_owned()))?;
            Ok(word.to_uppercase())
        },
    );
    let registry = ToolRegistry::of(vec![shout, Arc::new(ReadFileTool)]);
    assert_eq!(registry.names(), vec!["shout", "read_file"]);
    assert_eq!(
        registry.specs()[0].input_schema["required"],
        json!(["word"])
    );
    let tool = registry.get("shout").expect("tool");
    assert_eq!(
        tool.call(json!({"word": "loop"}), &project.context)
            .await
            .expect("call"),
        "LOOP"
    );
    assert!(matches!(
        tool.call(json!({"word": 3}), &project.context).await,
        Err(ToolError::InvalidInput(_))
    ));
}

/// Serves one HTTP response per connection on loopback.
async fn serve_once(content_type: &'static str, status: &'static str, body: String) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        if let Ok((mut socket, _)) = listener.accept().await {
            let mut request = [0u8; 4096];
            let _ = socket.read(&mut request).await;
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(response.as_bytes()).await;
        }
    });
    format!("http://{address}/page")
}

#[tokio::test]
async fn web_fetch_reduces_html_to_text_and_refuses_what_is_not_a_web_page() {
    let project = project();
    let page = serve_once(
        "text/html; charset=utf-8",
        "200 OK",
        "<html><head><style>p{}</style></head><body><h1>Release notes</h1><p>Version <b>0.3.1</b> adds --version.</p></body></html>".to_owned(),
    )
    .await;
    // The test server listens on loopback, which the real tool refuses.
    let tool = WebFetchTool::with_address_check(|address| {
        (!address.is_loopback()).then_some("not the test server")
    });
    let call = |_: &Project, _: &str, input: Value| tool.call(input, &project.context);
    let text = call(&project, "web_fetch", json!({"url": page}))
        .await
        .expect("fetch");
    assert!(text.contains("Release notes"), "{text}");
    assert!(text.contains("Version 0.3.1 adds --version."), "{text}");
    assert!(!text.contains("<p>") && !text.contains("p{}"), "{text}");

    for url in ["file:///etc/passwd", "ftp://example.com/x", "not a url"] {
        let err = call(&project, "web_fetch", json!({"url": url}))
            .await
            .expect_err(url);
        assert!(matches!(err, ToolError::InvalidInput(_)), "{url}: {err}");
    }
    let missing = serve_once("text/html", "404 Not Found", "gone".to_owned()).await;
    let err = call(&project, "web_fetch", json!({"url": missing}))
        .await
        .expect_err("404");
    assert!(err.to_string().contains("HTTP 404"), "{err}");
    let binary = serve_once(
        "application/octet-stream",
        "200 OK",
        "\u{1}\u{2}".to_owned(),
    )
    .await;
    let err = call(&project, "web_fetch", json!({"url": binary}))
        .await
        .expect_err("binary");
    assert!(err.to_string().contains("not text"), "{err}");
}

#[test]
fn web_fetch_is_offered_only_when_enabled() {
    assert!(
        !ToolRegistry::for_loop(LoopType::Code, false)
            .names()
            .contains(&"web_fetch")
    );
    assert!(
        ToolRegistry::for_loop(LoopType::Plan, true)
            .names()
            .contains(&"web_fetch")
    );
}

/// Approves after changing the file behind the tool's back, as a user saving meanwhile would.
struct ChangesFileWhileAsking(std::path::PathBuf);

#[async_trait::async_trait]
impl Approver for ChangesFileWhileAsking {
    async fn decide(
        &self,
        _request: ApprovalRequest,
        _cancel: &CancellationToken,
    ) -> Option<Decision> {
        std::fs::write(&self.0, "fn main() { /* the user's newer version */ }\n").expect("write");
        Some(Decision::Accept)
    }
}

#[tokio::test]
async fn a_file_changed_while_its_change_waited_for_approval_is_not_overwritten() {
    let mut project = project();
    let main = project.context.root.path().join("src/main.rs");
    project.context.approver = Arc::new(ChangesFileWhileAsking(main.clone()));
    let err = edit(&project, "src/main.rs", "    run();\n", "    go();\n")
        .await
        .expect_err("stale");
    assert!(
        err.to_string()
            .contains("changed while the change waited for approval"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&main).expect("read"),
        "fn main() { /* the user's newer version */ }\n"
    );
}

#[tokio::test]
async fn files_that_are_not_text_are_not_overwritten_blindly() {
    let project = project();
    let err = call(
        &project,
        "write_file",
        json!({"path": "image.bin", "content": "text"}),
    )
    .await
    .expect_err("binary");
    assert!(
        err.to_string().contains("cannot be edited as text"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(project.context.root.path().join("image.bin")).expect("read"),
        vec![0u8, 159, 146, 150]
    );
}

#[cfg(unix)]
#[tokio::test]
async fn a_fifo_is_refused_instead_of_blocking_the_read_forever() {
    let project = project();
    let fifo = project.context.root.path().join("events.fifo");
    let name = std::ffi::CString::new(fifo.display().to_string()).expect("path");
    // SAFETY: mkfifo reads a NUL-terminated path and creates a FIFO there.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    // Nothing ever writes to the FIFO: a blocking open or read would never return.
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        call(&project, "read_file", json!({"path": "events.fifo"})),
    )
    .await
    .expect("read_file returns")
    .expect_err("refused");
    assert!(
        read.to_string()
            .contains("a FIFO (named pipe), not a regular file"),
        "{read}"
    );
    let write = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        call(
            &project,
            "write_file",
            json!({"path": "events.fifo", "content": "x"}),
        ),
    )
    .await
    .expect("write_file returns")
    .expect_err("refused");
    assert!(write.to_string().contains("not a regular file"), "{write}");
    assert!(std::fs::symlink_metadata(&fifo).is_ok_and(|meta| {
        use std::os::unix::fs::FileTypeExt;
        meta.file_type().is_fifo()
    }));
}

#[tokio::test]
async fn edit_file_matches_text_copied_from_read_file_in_a_crlf_file_and_keeps_crlf() {
    let project = project();
    let path = project.context.root.path().join("win.txt");
    std::fs::write(&path, "first\r\nsecond\r\nthird\r\n").expect("write");
    let shown = call(&project, "read_file", json!({"path": "win.txt"}))
        .await
        .expect("read");
    assert_eq!(shown, "     1\tfirst\n     2\tsecond\n     3\tthird\n");
    edit(
        &project,
        "win.txt",
        "first\nsecond\n",
        "first\nnew\nsecond\n",
    )
    .await
    .expect("edit");
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        "first\r\nnew\r\nsecond\r\nthird\r\n"
    );
    let twice = edit(&project, "win.txt", "d\n", "D\n")
        .await
        .expect_err("ambiguous");
    assert!(twice.to_string().contains("occurs 2 times"), "{twice}");
}

/// An editor whose buffer of every file holds unsaved changes, from the start (`check` says
/// so) or only once the change was accepted (`check` says ready).
struct UnsavedBuffers {
    from_the_start: bool,
}

#[async_trait::async_trait]
impl OpenBuffers for UnsavedBuffers {
    async fn apply(&self, _path: &std::path::Path, _old: &str, _new: &str) -> BufferEdit {
        BufferEdit::UnsavedChanges
    }

    async fn check(&self, _path: &std::path::Path) -> BufferCheck {
        if self.from_the_start {
            BufferCheck::UnsavedChanges
        } else {
            BufferCheck::Ready
        }
    }

    async fn reload(&self, _paths: &[std::path::PathBuf]) {}
}

/// Accepts everything and keeps what it hears about failed changes.
#[derive(Default)]
struct AcceptingListener {
    asked: std::sync::Mutex<Vec<ApprovalRequest>>,
    failures: std::sync::Mutex<Vec<(String, String)>>,
}

#[async_trait::async_trait]
impl Approver for AcceptingListener {
    async fn decide(
        &self,
        request: ApprovalRequest,
        _cancel: &CancellationToken,
    ) -> Option<Decision> {
        self.asked.lock().expect("lock").push(request);
        Some(Decision::Accept)
    }

    fn change_failed(&self, request: &ApprovalRequest, message: &str) {
        self.failures
            .lock()
            .expect("lock")
            .push((request.subject.clone(), message.to_owned()));
    }
}

/// A project whose buffers hold unsaved changes (see `UnsavedBuffers`), with an approver that
/// accepts everything and keeps what it is told.
fn project_with_unsaved_buffers(from_the_start: bool) -> (Project, Arc<AcceptingListener>) {
    let mut project = project();
    let approver = Arc::new(AcceptingListener::default());
    project.context.approver = approver.clone();
    project.context.buffers = Arc::new(UnsavedBuffers { from_the_start });
    (project, approver)
}

#[tokio::test]
async fn a_change_an_open_buffer_cannot_take_is_refused_before_the_user_is_asked() {
    let (project, approver) = project_with_unsaved_buffers(true);
    let err = edit(&project, "src/main.rs", "    run();\n", "    go();\n")
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("unsaved changes"), "{err}");
    assert!(
        approver.asked.lock().expect("lock").is_empty(),
        "never asked"
    );
    assert!(approver.failures.lock().expect("lock").is_empty());
}

#[tokio::test]
async fn an_accepted_change_that_cannot_be_made_is_reported_to_the_approver() {
    let (project, approver) = project_with_unsaved_buffers(false);
    let main = project.context.root.path().join("src/main.rs");
    let before = std::fs::read_to_string(&main).expect("read");
    let err = edit(&project, "src/main.rs", "    run();\n", "    go();\n")
        .await
        .expect_err("not applied");
    assert!(err.to_string().contains("unsaved changes"), "{err}");
    assert_eq!(approver.asked.lock().expect("lock").len(), 1);
    assert_eq!(
        approver.failures.lock().expect("lock").clone(),
        vec![(
            "src/main.rs".to_owned(),
            "the accepted change of src/main.rs was not made: its buffer has unsaved changes. \
             Save (:w) or discard (:e!) them; the model was told"
                .to_owned()
        )]
    );
    assert_eq!(std::fs::read_to_string(&main).expect("read"), before);
}

/// Keeps every change the tools report.
#[derive(Default)]
struct RecordingJournal(std::sync::Mutex<Vec<String>>);

impl ChangeJournal for RecordingJournal {
    fn tool_changed(&self, relative: &str, before: Option<&[u8]>, after: &[u8]) {
        self.0.lock().expect("lock").push(format!(
            "tool {relative}: {:?} -> {:?}",
            before.map(String::from_utf8_lossy),
            String::from_utf8_lossy(after)
        ));
    }

    fn command_changed(
        &self,
        _root: &ProjectRoot,
        relative: &str,
        before: Option<FileStat>,
        _budget: &ReadBudget,
    ) {
        self.0.lock().expect("lock").push(format!(
            "command {relative}: existed before: {}",
            before.is_some()
        ));
    }
}

#[tokio::test]
async fn every_change_of_the_writing_tools_and_commands_is_journaled() {
    let mut project = project();
    let journal = Arc::new(RecordingJournal::default());
    project.context.journal = journal.clone();
    edit(&project, "src/lib.rs", "RUN", "run")
        .await
        .expect("edit");
    call(
        &project,
        "write_file",
        json!({"path": "src/new.rs", "content": "new\n"}),
    )
    .await
    .expect("write");
    call(
        &project,
        "run_command",
        json!({"command": "echo made > made.txt; echo more >> docs/guide.md; rm src/main.rs; echo x > target/ignored.rs; echo y > .env"}),
    )
    .await
    .expect("command");
    assert_eq!(
        journal.0.lock().expect("lock").clone(),
        vec![
            "tool src/lib.rs: Some(\"pub fn RUN() {}\\n\") -> \"pub fn run() {}\\n\"",
            "tool src/new.rs: None -> \"new\\n\"",
            // Ignored and secret files are not the project's: not recorded, never restored.
            "command docs/guide.md: existed before: true",
            "command made.txt: existed before: false",
            "command src/main.rs: existed before: true",
        ]
    );
}

#[tokio::test]
async fn common_credential_files_are_refused_in_any_case_and_id_map_go_is_not() {
    let project = project();
    let secrets = [
        ".env.staging",
        ".git-credentials",
        ".netrc",
        ".npmrc",
        ".pypirc",
        ".aws/credentials",
        "certs/ca.PEM",
        "tls/server.key",
        "gcp/credentials.json",
        ".ssh/id_rsa",
        ".ssh/id_rsa.pub",
        ".ssh/ID_ED25519",
        ".ssh/id_ecdsa",
        ".ssh/id_dsa",
    ];
    for secret in secrets {
        let path = project.context.root.path().join(secret);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, "the secret\n").expect("write");
    }
    for secret in secrets {
        let read = call(&project, "read_file", json!({"path": secret}))
            .await
            .expect_err(secret);
        assert!(matches!(read, ToolError::Denied(_)), "{secret}: {read}");
        let write = call(
            &project,
            "write_file",
            json!({"path": secret, "content": "replaced\n"}),
        )
        .await
        .expect_err(secret);
        assert!(matches!(write, ToolError::Denied(_)), "{secret}: {write}");
        assert_eq!(
            std::fs::read_to_string(project.context.root.path().join(secret)).expect("read"),
            "the secret\n",
            "{secret}"
        );
    }
    std::fs::write(
        project.context.root.path().join("id_map.go"),
        "package ids\n",
    )
    .expect("write");
    let ordinary = call(&project, "read_file", json!({"path": "id_map.go"}))
        .await
        .expect("id_map.go is an ordinary file");
    assert_eq!(ordinary, "     1\tpackage ids\n");
}

/// A tool call run on a runtime of its own on another thread, failing the test if it has not
/// returned within 20 s instead of hanging it (a runtime waits for its blocking work when
/// dropped, so the test's own could not give up on a call blocked for good).
fn call_within(project: &Project, name: &'static str, input: Value) -> Result<String, ToolError> {
    let context = project.context.clone();
    crate::test_support::returns_within(name, move || {
        let registry = ToolRegistry::for_loop(LoopType::Code, true);
        let tool = registry.get(name).expect("tool exists").clone();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(async move { tool.call(input, &context).await })
    })
}

#[cfg(unix)]
#[test]
fn ignore_files_that_are_fifos_or_device_links_never_hang_a_listing_search_or_watch() {
    use crate::test_support::{mkfifo, returns_within};
    let project = project();
    let root = project.context.root.path().to_path_buf();
    // Opening a FIFO for reading blocks until a writer comes; /dev/zero never ends.
    mkfifo(&root.join("docs/.gitignore"));
    std::os::unix::fs::symlink("/dev/zero", root.join("src/.gitignore")).expect("link");
    std::os::unix::fs::symlink("/dev/zero", root.join("src/.ignore")).expect("link");
    let listed = call_within(&project, "list_files", json!({})).expect("list");
    assert_eq!(
        listed,
        ".env\n.gitignore\nconfig/server.pem\ndocs/.gitignore\ndocs/guide.md\nimage.bin\n\
         src/.gitignore\nsrc/.ignore\nsrc/lib.rs\nsrc/main.rs\n",
        "the root's .gitignore still hides target/ and *.log"
    );
    let found = call_within(&project, "grep", json!({"pattern": "run"})).expect("grep");
    assert_eq!(
        found,
        "docs/guide.md:2: run it\nsrc/main.rs:2:     run();\nsrc/main.rs:5: fn run() {}\n"
    );
    let tree = {
        let root = project.context.root.clone();
        returns_within("capturing the tree", move || {
            TreeStats::capture(&root, &ToolPolicy::default(), &CancellationToken::new())
        })
        .expect("capture")
    };
    assert_eq!(
        tree.files.keys().collect::<Vec<_>>(),
        [
            ".gitignore",
            "docs/guide.md",
            "image.bin",
            "src/lib.rs",
            "src/main.rs"
        ],
        "only regular files, secret ones left out"
    );
}

#[test]
fn a_flood_of_command_output_keeps_its_start_and_end_and_says_how_much_was_left_out() {
    let project = project();
    let flooded = 300 * 1024 * 1024;
    let output = call_within(
        &project,
        "run_command",
        json!({"command": format!("printf START; head -c {flooded} /dev/zero | tr '\\0' x; printf END")}),
    )
    .expect("command");
    let (stdout, stderr) = output.split_once("--- stderr ---\n").expect("two streams");
    let stdout = stdout
        .strip_prefix("exit status 0\n--- stdout ---\n")
        .expect("stdout");
    assert_eq!(stderr, "");
    let left_out = flooded + "STARTEND".len() - 4 * 1024 - 12 * 1024;
    let marker = format!("\n[... {left_out} bytes left out ...]\n");
    let (head, tail) = stdout.split_once(&marker).expect("the cut is marked");
    assert_eq!(head, format!("START{}", "x".repeat(4 * 1024 - 5)));
    assert_eq!(tail, format!("{}END\n", "x".repeat(12 * 1024 - 3)));
}

#[test]
fn a_cancel_stops_a_walk_of_the_tree() {
    let project = project();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let walked = TreeStats::capture(&project.context.root, &ToolPolicy::default(), &cancel);
    assert!(matches!(walked, Err(ToolError::Cancelled)), "{walked:?}");
}

#[test]
fn a_set_of_tools_answers_for_its_own_tools_and_the_loops_own_get_the_defaults() {
    let registry = ToolRegistry::for_loop(LoopType::Code, false);
    assert_eq!(
        registry.describe_call("read_file", &json!({"path": "a.rs"})),
        Some("reading a.rs".to_owned())
    );
    assert_eq!(
        registry.reread_hint("write_file"),
        Some("call write_file again with the same input.".to_owned())
    );
    assert_eq!(registry.describe_call("complete_phase", &json!({})), None);
    let own = vec![ToolSpec::offered(
        "complete_phase",
        "Say the phase is done.",
        &json!({"type": "object"}),
        None,
    )];
    assert_eq!(
        own.describe_call("complete_phase", &json!({})),
        Some("calling complete_phase".to_owned())
    );
    assert_eq!(
        own.reread_hint("complete_phase"),
        Some("call complete_phase again with the same input.".to_owned())
    );
    assert_eq!(own.reread_hint("read_file"), None);
    let kinds: Vec<_> = registry
        .iter()
        .map(|tool| (tool.name(), tool.change_kind()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("read_file", None),
            ("list_files", None),
            ("grep", None),
            ("write_file", Some(ChangeKind::Write)),
            ("edit_file", Some(ChangeKind::Edit)),
            ("run_command", Some(ChangeKind::Command)),
        ]
    );
}

/// The non-test code of a source file: up to its `#[cfg(test)] mod … {`.
fn non_test_code(text: &str) -> &str {
    let test_module = regex::Regex::new(r"(?m)^#\[cfg\(test\)\]\s*\n(pub(\(\w+\))? )?mod \w+ \{")
        .expect("a pattern");
    test_module
        .find(text)
        .map_or(text, |found| &text[..found.start()])
}

/// The files of `src` declared as test modules (`#[cfg(test)] mod name;`).
fn test_module_files(files: &[(std::path::PathBuf, String)]) -> Vec<std::path::PathBuf> {
    let declaration =
        regex::Regex::new(r"(?m)^#\[cfg\(test\)\]\s*\nmod (\w+);").expect("a pattern");
    let mut found = Vec::new();
    for (path, text) in files {
        let parent_dir = match path.file_stem().and_then(|stem| stem.to_str()) {
            Some("lib" | "main" | "mod") => path.parent().map(std::path::Path::to_path_buf),
            _ => Some(path.with_extension("")),
        };
        let Some(dir) = parent_dir else { continue };
        for module in declaration.captures_iter(text) {
            found.push(dir.join(format!("{}.rs", &module[1])));
            found.push(dir.join(&module[1]).join("mod.rs"));
        }
    }
    found
}

/// What each built-in tool is (its progress words, how its result is read again, its kind of
/// change and approval) is answered by the tool itself: no other source file names it as a
/// string to match on. A test names tools freely.
#[test]
fn a_tool_is_named_in_its_own_file_only() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files: Vec<(std::path::PathBuf, String)> = walkdir(&src)
        .into_iter()
        .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a source file");
            (path, text)
        })
        .collect();
    let test_files = test_module_files(&files);
    // Each file's non-test code once, not once per tool: the pattern is compiled per call.
    let code: Vec<(&std::path::PathBuf, &str)> = files
        .iter()
        .filter(|(path, _)| !test_files.contains(path))
        .map(|(path, text)| (path, non_test_code(text)))
        .collect();
    let mut problems = Vec::new();
    for name in ToolRegistry::for_loop(LoopType::Code, true).names() {
        let quoted = format!("\"{name}\"");
        let naming: Vec<String> = code
            .iter()
            .filter(|(_, text)| text.contains(&quoted))
            .map(|(path, _)| {
                path.strip_prefix(&src)
                    .unwrap_or(path)
                    .display()
                    .to_string()
            })
            .collect();
        if naming.len() != 1 {
            problems.push(format!("{quoted} is named in {naming:?}"));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// Every file under `dir`.
fn walkdir(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("a directory").flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}
