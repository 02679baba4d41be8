//! The runtime every bench runs on: the host's shape (multi-thread, 2 workers), so figures
//! compare with what the host does.

/// Runs `future` to completion on a fresh 2-worker runtime.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}
