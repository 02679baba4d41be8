//! Sets the `linux_apis` cfg where the host may use what only Linux has (the bubblewrap and
//! Landlock sandboxes, seccomp, `PR_SET_PDEATHSIG`, `O_PATH`): on Linux, unless
//! `LOOPR_CHECK_PORTABLE=1`, which builds the path every other OS (macOS) takes, so that it can
//! be checked on Linux (`scripts/test.sh` runs clippy on it). The code is gated on this cfg, not
//! on `target_os`; the Linux-only crates stay in Cargo.toml's Linux target table.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(linux_apis)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=LOOPR_CHECK_PORTABLE");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let portable = std::env::var("LOOPR_CHECK_PORTABLE").is_ok_and(|value| value == "1");
    if linux && !portable {
        println!("cargo::rustc-cfg=linux_apis");
    }
}
