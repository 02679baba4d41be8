//! Points where a test can freeze the process, to kill it there and prove that a restart
//! loses nothing, or hold one thread to widen a race window. Inert unless
//! `LOOPR_TEST_HOOKS=1` and `LOOPR_TEST_PAUSE_AT` / `LOOPR_TEST_HOLD_AT` names the point.

use std::sync::OnceLock;

fn requested_point() -> Option<&'static str> {
    static POINT: OnceLock<Option<String>> = OnceLock::new();
    POINT
        .get_or_init(|| hook_variable("LOOPR_TEST_PAUSE_AT"))
        .as_deref()
}

fn hook_variable(name: &str) -> Option<String> {
    let enabled = std::env::var_os("LOOPR_TEST_HOOKS").is_some_and(|value| value == "1");
    enabled.then(|| std::env::var(name).ok()).flatten()
}

/// Freezes the whole process for good when `point` is the requested one, after saying so on
/// stderr (which is not the RPC channel).
pub fn pause_point(point: &str) {
    if requested_point() != Some(point) {
        return;
    }
    eprintln!("loopr: test hook: paused at {point}");
    tracing::warn!(point, "test hook: paused");
    loop {
        std::thread::park();
    }
}

/// Holds the calling thread, the n-th time a thread reaches `point`, until the test lets it
/// go. `LOOPR_TEST_HOLD_AT` names the point (`name` or `name#n`, n counting from 1) and
/// `LOOPR_TEST_HOLD_DIR` a directory with two FIFOs
/// the test made: opening `arrived` for writing tells the test the thread is here (the open
/// waits for the test's reader), and opening `release` for reading waits for the test's
/// writer. No polling on either side.
pub fn hold_point(point: &str) {
    static HOLD: OnceLock<Option<(String, std::path::PathBuf)>> = OnceLock::new();
    static ARRIVALS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let hold = HOLD.get_or_init(|| {
        Some((
            hook_variable("LOOPR_TEST_HOLD_AT")?,
            hook_variable("LOOPR_TEST_HOLD_DIR")?.into(),
        ))
    });
    let Some((wanted, dir)) = hold else { return };
    let (name, nth) = match wanted.split_once('#') {
        Some((name, nth)) => (name, nth.parse::<usize>().unwrap_or(1)),
        None => (wanted.as_str(), 1),
    };
    if name != point || ARRIVALS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 != nth {
        return;
    }
    tracing::warn!(point, "test hook: holding");
    let _arrived = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("arrived"));
    let _released = std::fs::File::open(dir.join("release"));
    tracing::warn!(point, "test hook: released");
}

/// Whether a test asked to treat bubblewrap as not installed (`LOOPR_TEST_NO_BWRAP=1`), to
/// see the fallback on a machine that has it.
pub fn bubblewrap_hidden() -> bool {
    hook_variable("LOOPR_TEST_NO_BWRAP").is_some_and(|value| value == "1")
}

/// Whether a test asked to act as on an architecture without a seccomp filter
/// (`LOOPR_TEST_NO_SECCOMP=1`), to see that no sandbox is claimed there.
pub fn seccomp_hidden() -> bool {
    hook_variable("LOOPR_TEST_NO_SECCOMP").is_some_and(|value| value == "1")
}

/// Whether a test lets `web_fetch` reach 127.0.0.1, where it serves its pages
/// (`LOOPR_TEST_FETCH_LOOPBACK=1`); every other address is checked as always.
pub fn loopback_fetch_allowed() -> bool {
    hook_variable("LOOPR_TEST_FETCH_LOOPBACK").is_some_and(|value| value == "1")
}
