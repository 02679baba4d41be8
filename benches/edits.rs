//! The cost of the code loop's file changes on a large file: the approval diff, the changes
//! list's hunks, and a whole `write_file` replacing a 3 MB file. Prints figures only.
//! Run with `cargo bench --bench edits`.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use loopr::agent::Baseline;
use loopr::store::LoopType;
use loopr::tools::{
    AcceptAll, NoBuffers, ProjectRoot, ToolContext, ToolPolicy, ToolRegistry, file_diff,
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
}
