//! The files generated from the settings' definitions (`loopr generate`) are up to date: a
//! setting added or changed in Rust without regenerating fails here, naming the files and the
//! command that writes them.

use std::path::Path;
use std::process::Command;

#[test]
fn generated_files_match_the_definitions() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let stale = loopr::bridge::generate::stale(root).expect("rendering the generated files");
    assert!(
        stale.is_empty(),
        "stale generated files: {}; run `{}` and commit them",
        stale.join(", "),
        loopr::bridge::generate::COMMAND
    );
}

#[test]
fn the_check_subcommand_names_the_stale_file_and_the_fix() {
    let root = tempfile::tempdir().expect("temp dir");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(root.path().join("doc")).expect("doc dir");
    std::fs::copy(
        manifest.join("doc/loopr.txt"),
        root.path().join("doc/loopr.txt"),
    )
    .expect("copy the help");
    let check = |root: &Path| {
        Command::new(env!("CARGO_BIN_EXE_loopr"))
            .args(["generate", "--check", "--root"])
            .arg(root)
            .output()
            .expect("run loopr generate --check")
    };
    // The Lua files are missing here: stale until written.
    let before = check(root.path());
    let said = String::from_utf8_lossy(&before.stderr);
    assert_eq!(before.status.code(), Some(1), "{said}");
    assert!(said.contains("lua/loopr/generated/options.lua"), "{said}");
    assert!(said.contains("cargo run -- generate"), "{said}");
    let written = Command::new(env!("CARGO_BIN_EXE_loopr"))
        .args(["generate", "--root"])
        .arg(root.path())
        .output()
        .expect("run loopr generate");
    assert!(written.status.success(), "{written:?}");
    let after = check(root.path());
    assert!(after.status.success(), "{after:?}");
    for file in loopr::bridge::generate::files() {
        let ours = std::fs::read_to_string(manifest.join(file.path)).expect("ours");
        let theirs = std::fs::read_to_string(root.path().join(file.path)).expect("theirs");
        assert!(
            ours == theirs,
            "{} differs from what `loopr generate` writes",
            file.path
        );
    }
}
