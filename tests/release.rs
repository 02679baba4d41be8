//! The release workflow's steps as `scripts/release.sh` runs them on the forge, run here on
//! real files: the tag must match Cargo.toml's version, each asset is a tarball holding the
//! single file `loopr`, and `SHA256SUMS` is what `sha256sum --check` accepts.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn release_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/release.sh")
}

fn run(args: &[&str], dir: &Path) -> Output {
    Command::new(release_script())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run scripts/release.sh")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_tag_that_is_not_cargo_tomls_version_is_refused_with_both_named() {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let version = env!("CARGO_PKG_VERSION");

    let matching = run(&["version", &format!("v{version}")], manifest_dir);
    assert!(matching.status.success(), "{}", text(&matching.stderr));
    assert_eq!(text(&matching.stdout), format!("{version}\n"));

    let wrong = run(&["version", "v9.9.9"], manifest_dir);
    assert!(!wrong.status.success());
    assert_eq!(
        text(&wrong.stderr),
        format!(
            "release.sh: tag v9.9.9 does not match Cargo.toml's version {version}; \
             tag v{version}, or change the version in Cargo.toml\n"
        )
    );
}

#[test]
fn assets_hold_the_single_file_loopr_and_sha256sums_checks_them() {
    let work = tempfile::tempdir().expect("tempdir");
    let binary = work.path().join("build/loopr");
    std::fs::create_dir_all(binary.parent().expect("parent")).expect("mkdir");
    std::fs::write(&binary, b"#!/bin/sh\necho loopr 1.2.3\n").expect("write");
    let assets = work.path().join("assets");

    for target in ["x86_64-unknown-linux-musl", "aarch64-apple-darwin"] {
        let packaged = run(
            &[
                "package",
                binary.to_str().expect("utf-8"),
                "1.2.3",
                target,
                assets.to_str().expect("utf-8"),
            ],
            work.path(),
        );
        assert!(packaged.status.success(), "{}", text(&packaged.stderr));
        assert_eq!(
            text(&packaged.stdout),
            format!(
                "{}\n",
                assets
                    .join(format!("loopr-1.2.3-{target}.tar.gz"))
                    .display()
            )
        );
    }
    let listing = Command::new("tar")
        .args(["-tzf", "loopr-1.2.3-x86_64-unknown-linux-musl.tar.gz"])
        .current_dir(&assets)
        .output()
        .expect("tar");
    assert_eq!(text(&listing.stdout), "loopr\n");

    let summed = run(&["checksums", assets.to_str().expect("utf-8")], work.path());
    assert!(summed.status.success(), "{}", text(&summed.stderr));
    let sums = std::fs::read_to_string(assets.join("SHA256SUMS")).expect("SHA256SUMS");
    let names: Vec<&str> = sums
        .lines()
        .map(|line| line.split_once("  ").expect("<sha256>  <name>").1)
        .collect();
    assert_eq!(
        names,
        [
            "loopr-1.2.3-aarch64-apple-darwin.tar.gz",
            "loopr-1.2.3-x86_64-unknown-linux-musl.tar.gz"
        ]
    );
    let checked = Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(&assets)
        .output()
        .expect("sha256sum");
    assert!(checked.status.success(), "{}", text(&checked.stdout));
}
