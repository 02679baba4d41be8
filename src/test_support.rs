//! What the unit tests of several modules share to make hostile project files, to watch
//! what reading them costs, and to run git as a user.

use std::path::Path;
use std::time::Duration;

/// Makes a FIFO at `path`: opening it for reading blocks until a writer comes, and none does.
pub fn mkfifo(path: &Path) {
    let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: mkfifo reads a NUL-terminated path and creates a FIFO there.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// Runs git in `dir` as a user would (a name and address for commits and stashes); its
/// standard output. A failure fails the test with git's words.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .args(["-c", "user.name=T", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

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

/// The bytes this thread has read through read(2) and the like so far (`rchar` of
/// `/proc/thread-self/io`), to tell how much of a file a call read.
pub fn bytes_read_by_this_thread() -> u64 {
    let io = std::fs::read_to_string("/proc/thread-self/io").expect("/proc/thread-self/io");
    io.lines()
        .find_map(|line| line.strip_prefix("rchar: "))
        .and_then(|value| value.trim().parse().ok())
        .expect("rchar")
}
