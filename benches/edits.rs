//! The cost of the code loop's file changes and commands: on a large file, the approval diff,
//! the changes list's hunks and a whole `write_file` replacing a 3 MB file; the baseline of a
//! project of 5,000 files, which every code loop records when it starts; and a command writing
//! 1 GB of output, of which the tool keeps only the start and end. Prints figures only.
//! Run with `cargo bench --bench edits`.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use loopr::agent::Baseline;
use loopr::store::LoopType;
use loopr::tools::{
    AcceptAll, NoBuffers, ProjectRoot, ToolContext, ToolPolicy, ToolRegistry, file_diff, run_shell,
};

const LINES: usize = 60_000;

/// About 3 MB of text, and a replacement in which every line differs.
fn texts() -> (String, String) {
    let old: String = (0..LINES)
        .map(|i| format!("let value_{i} = compute({i}, \"the old text of this line\");\n"))
        .collect();
    let new: String = (0..LINES)
        .map(|i| {
            format!(
                "let other_{i} = derive({}, \"a new text for every line\");\n",
                i * 7
            )
        })
        .collect();
    (old, new)
}

fn timed<T>(label: &str, work: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let value = work();
    println!(
        "{label:<48} {:>9.1} ms",
        started.elapsed().as_secs_f64() * 1000.0
    );
    value
}

fn main() {
    let (old, new) = texts();
    println!("old {} bytes, new {} bytes", old.len(), new.len());
    // What the approval diff cost before it was bounded: an exact Myers diff, whose time
    // grows with the product of the sizes when most lines differ.
    let exact = timed("exact line diff (unbounded, as before)", || {
        similar::TextDiff::from_lines(old.as_str(), new.as_str())
            .ops()
            .len()
    });
    println!("  ops: {exact}");
    let diff = timed("approval diff (file_diff, bounded)", || {
        file_diff("big.rs", &old, &new)
    });
    println!("  diff: {} bytes", diff.len());

    let project = tempfile::tempdir().expect("project");
    let state = tempfile::tempdir().expect("state");
    std::fs::write(project.path().join("big.rs"), &old).expect("write");
    let root = ProjectRoot::new(project.path()).expect("root");
    let policy = ToolPolicy::default();
    let baseline = Baseline::at(state.path());
    timed("baseline record", || {
        baseline
            .record(&root, &policy, &CancellationToken::new())
            .expect("record")
    });

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let context = ToolContext {
        root: root.clone(),
        cancel: CancellationToken::new(),
        policy: Arc::new(policy.clone()),
        approver: Arc::new(AcceptAll),
        loop_id: "bench".to_owned(),
        buffers: Arc::new(NoBuffers),
        journal: Arc::new(Baseline::at(state.path())),
    };
    let registry = ToolRegistry::for_loop(LoopType::Code, false);
    let tool = registry.get("write_file").expect("write_file");
    timed("write_file replacing the whole file", || {
        runtime
            .block_on(tool.call(json!({"path": "big.rs", "content": new}), &context))
            .expect("write")
    });
    let hunks = timed("changes list hunks (Baseline::changes)", || {
        baseline.changes(&root).expect("changes")
    });
    println!("  hunks: {}", hunks.len());

    many_files_baseline(&policy);
    command_output_flood(&runtime, &policy);
}

/// Recording the baseline of a project of 5,000 small files (what a code loop does before it
/// starts): its cost is in the writes and syncs of the copies it keeps.
fn many_files_baseline(policy: &ToolPolicy) {
    const FILES: usize = 5_000;
    let project = tempfile::tempdir().expect("project");
    for i in 0..FILES {
        let dir = project.path().join(format!("src/module_{}", i / 100));
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(
            dir.join(format!("file_{i}.rs")),
            format!("pub fn f{i}() -> usize {{ {i} }}\n"),
        )
        .expect("write");
    }
    let root = ProjectRoot::new(project.path()).expect("root");
    // The state directory on the same filesystem as a real `$LOOPR_HOME` would be.
    let state = tempfile::tempdir_in(std::env::temp_dir()).expect("state");
    let baseline = Baseline::at(state.path());
    timed(&format!("baseline record, {FILES} files"), || {
        baseline
            .record(&root, policy, &CancellationToken::new())
            .expect("record")
    });
}

/// A command writing 1 GB to its standard output, read to the end by `run_command`'s reader,
/// which keeps the start and the end.
fn command_output_flood(runtime: &tokio::runtime::Runtime, policy: &ToolPolicy) {
    let project = tempfile::tempdir().expect("project");
    let output = timed("command writing 1 GB of output", || {
        runtime
            .block_on(run_shell(
                "head -c 1000000000 /dev/zero",
                project.path(),
                std::time::Duration::from_secs(600),
                &CancellationToken::new(),
                &policy.sandbox,
                project.path(),
            ))
            .expect("command")
    });
    println!("  kept: {} bytes of stdout", output.stdout.len());
}
