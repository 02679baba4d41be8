//! What the unit tests of several modules share to make hostile project files and to watch
//! what reading them costs.

use std::time::Duration;

/// What `work` returns, run on a thread of its own; a panic naming `what` if it has not
/// returned within 20 s (the thread is left behind: it may be blocked for good).
pub fn returns_within<T: Send + 'static>(
    what: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(work());
    });
    receiver
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what} did not return within 20 s"))
}
