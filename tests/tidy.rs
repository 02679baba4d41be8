//! Rules of the source tree that no compiler checks.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

/// Whether `code` calls `name` itself (`eprintln!(` is not `println!(`).
fn calls(code: &str, name: &str) -> bool {
    code.match_indices(name).any(|(at, _)| {
        !code[..at]
            .chars()
            .next_back()
            .is_some_and(|before| before.is_alphanumeric() || before == '_')
    })
}

/// In `loopr rpc` stdout carries msgpack-RPC: one stray byte breaks Neovim's channel. Only
/// the command line's own output (`cli.rs`) and `main.rs`'s subcommands that never serve RPC
/// may print to it.
#[test]
fn only_the_command_line_writes_to_stdout() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let allowed = [src.join("cli.rs"), src.join("main.rs")];
    let mut offending = Vec::new();
    for file in files.iter().filter(|file| !allowed.contains(file)) {
        let text = std::fs::read_to_string(file).expect("read");
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if ["print!(", "println!(", "stdout()", "dbg!("]
                .iter()
                .any(|writes| calls(code, writes))
            {
                offending.push(format!(
                    "{}:{}: {}",
                    file.display(),
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(offending.is_empty(), "{}", offending.join("\n"));
}
