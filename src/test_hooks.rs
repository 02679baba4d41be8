//! Points where a test can freeze the process, to kill it there and prove that a restart
//! loses nothing. Inert unless `LOOPR_TEST_HOOKS=1` and `LOOPR_TEST_PAUSE_AT` names the point.

use std::sync::OnceLock;

fn requested_point() -> Option<&'static str> {
    static POINT: OnceLock<Option<String>> = OnceLock::new();
    POINT
        .get_or_init(|| {
            let enabled = std::env::var_os("LOOPR_TEST_HOOKS").is_some_and(|value| value == "1");
            enabled
                .then(|| std::env::var("LOOPR_TEST_PAUSE_AT").ok())
                .flatten()
        })
        .as_deref()
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
