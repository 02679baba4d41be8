//! Agents started so that they die with the host, whatever ends it (Neovim closing, a
//! signal, a crash): each is spawned from one thread that lives as long as the host, and
//! asks the kernel (`PR_SET_PDEATHSIG`) for SIGKILL when that thread ends. The signal follows
//! the *thread* that forked, not the process: spawned from one of tokio's threads, which come
//! and go, an agent would be killed for nothing.
//!
//! Without Linux (`linux_apis`, build.rs; macOS has no `PR_SET_PDEATHSIG`) the agent is only
//! spawned. It still leads its own process group, which its handle kills when dropped: on every
//! end of the host that unwinds (Neovim closing, a request that panics). A host killed outright
//! (SIGKILL, a crash) leaves the agent to notice its stdin close, which an ACP agent reads
//! until it does; one that ignores that outlives the host.

#[cfg(linux_apis)]
use std::sync::mpsc;
#[cfg(linux_apis)]
use std::sync::{Mutex, OnceLock, PoisonError};

use process_wrap::tokio::{ChildWrapper, CommandWrap};

type Spawned = std::io::Result<Box<dyn ChildWrapper>>;
#[cfg(linux_apis)]
type Job = Box<dyn FnOnce() + Send>;

/// The spawning thread's queue, started at the first agent.
#[cfg(linux_apis)]
static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();

#[cfg(linux_apis)]
fn spawner() -> &'static Mutex<mpsc::Sender<Job>> {
    SPAWNER.get_or_init(|| {
        let (sender, jobs) = mpsc::channel::<Job>();
        let started = std::thread::Builder::new()
            .name("acp-spawner".to_owned())
            .spawn(move || {
                for job in jobs {
                    job();
                }
            });
        if let Err(err) = started {
            // The jobs then fail at once: their answers' senders are dropped unanswered.
            tracing::error!("starting the thread that spawns coding agents: {err}");
        }
        Mutex::new(sender)
    })
}

/// Spawns `build()`'s command on the lasting thread (in this tokio runtime), set to be
/// killed when the host ends.
#[cfg(linux_apis)]
pub(super) fn spawn_dying_with_host(
    build: impl FnOnce() -> CommandWrap + Send + 'static,
) -> Spawned {
    let runtime = tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
    let (answer, answered) = mpsc::sync_channel::<Spawned>(1);
    let job: Job = Box::new(move || {
        let _runtime = runtime.enter();
        let mut wrapped = build();
        let host = std::process::id();
        // SAFETY: between fork and exec the child only calls prctl and getppid, both
        // async-signal-safe, and touches no memory of the parent's.
        unsafe {
            wrapped.command_mut().pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The host may have ended before the request above: then no signal comes.
                if u32::try_from(libc::getppid()).ok() != Some(host) {
                    return Err(std::io::Error::other("the host ended while it started"));
                }
                Ok(())
            });
        }
        let _ = answer.send(wrapped.spawn());
    });
    spawner()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .send(job)
        .map_err(|_| std::io::Error::other("the thread that spawns coding agents is gone"))?;
    answered
        .recv()
        .map_err(|_| std::io::Error::other("the thread that spawns coding agents is gone"))?
}

/// Spawns `build()`'s command; what kills it with the host is in the module doc.
#[cfg(not(linux_apis))]
pub(super) fn spawn_dying_with_host(build: impl FnOnce() -> CommandWrap) -> Spawned {
    build().spawn()
}
