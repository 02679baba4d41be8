//! `loopr sandbox-exec`: runs one command under Landlock in namespaces of its own (the host
//! side and the reasons for this shape are in `landlock.rs`).
//!
//! Two processes: this one, the supervisor, stays in the host's PID namespace, watches the
//! host through a pidfd and relays the command's exit status; its child is PID 1 of a new PID
//! namespace, confines itself and becomes `sh -c`. When PID 1 exits the kernel kills everything
//! else in its namespace, daemons and `setsid` children included. The child dies with the
//! supervisor (`PR_SET_PDEATHSIG`: the supervisor is single-threaded), and the supervisor kills
//! the child when the host dies, however it dies.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use super::exec_request::{ExecRequest, SETUP_FAILED, SetupError, failed};
use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope,
};

/// The newest Landlock ABI these rules were written and tested for; older kernels get what
/// they support of it (the host refuses kernels without truncate control).
const TARGET_ABI: ABI = ABI::V7;

/// Device files commands may write as they would anywhere (`> /dev/null`).
const WRITABLE_DEVICES: [&str; 5] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

fn check(result: libc::c_long, step: impl Into<String>) -> Result<libc::c_long, SetupError> {
    if result < 0 {
        Err(failed(step)(io::Error::last_os_error()))
    } else {
        Ok(result)
    }
}

/// Runs the request's command confined; returns the exit status to exit with (the command's,
/// or 128 + the signal that killed it).
pub fn sandbox_exec(request: &ExecRequest) -> Result<i32, SetupError> {
    let host = pidfd_open(request.parent_pid).map_err(failed("watching the host"))?;
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != request.parent_pid {
        // The host died before its pidfd was taken: nothing may run.
        return Ok(128 + libc::SIGKILL);
    }
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut namespaces = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS;
    if !request.network {
        namespaces |= libc::CLONE_NEWNET;
    }
    // SAFETY: unshare only changes this (single-threaded) process's namespaces.
    check(
        unsafe { libc::unshare(namespaces) }.into(),
        "creating the namespaces (user namespaces may be disabled)",
    )?;
    // The binary made itself non-dumpable, which leaves /proc/self/uid_map to root.
    // SAFETY: PR_SET_DUMPABLE with 1 only changes who may inspect this process.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
    // The same user inside: files it creates are yours, and it has no privilege over yours
    // once it runs the command.
    std::fs::write("/proc/self/setgroups", "deny").map_err(failed("denying setgroups"))?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))
        .map_err(failed("mapping the user id"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))
        .map_err(failed("mapping the group id"))?;
    let supervisor = i32::try_from(std::process::id())
        .map_err(io::Error::other)
        .and_then(pidfd_open)
        .map_err(failed("watching itself"))?;
    // SAFETY: this process is single-threaded (no runtime was started), so the child may do
    // anything until it execs.
    let child = check(unsafe { libc::fork() }.into(), "starting the command")?;
    if child == 0 {
        let error = confine_and_exec(request, &supervisor);
        eprintln!("Loopr: the sandbox could not be set up: {error}");
        // SAFETY: leaves the child without unwinding into the supervisor's code.
        unsafe { libc::_exit(SETUP_FAILED) };
    }
    drop(supervisor);
    let child = libc::pid_t::try_from(child).unwrap_or(-1);
    supervise(child, &host)
}

/// Waits for the command, killing it if the host dies first.
fn supervise(child: libc::pid_t, host: &OwnedFd) -> Result<i32, SetupError> {
    let command = pidfd_open(child).map_err(failed("watching the command"))?;
    loop {
        let mut fds = [
            libc::pollfd {
                fd: command.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: host.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: fds is a valid array of two pollfd.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if ready < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(failed("waiting for the command")(err));
        }
        if fds[0].revents != 0 {
            break;
        }
        if fds[1].revents != 0 {
            // SAFETY: SIGKILL to our own child (PID 1 of its namespace: all of it goes).
            unsafe { libc::kill(child, libc::SIGKILL) };
            break;
        }
    }
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child; status is a valid pointer.
        let waited = unsafe { libc::waitpid(child, &mut status, 0) };
        if waited >= 0 {
            break;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(failed("waiting for the command")(err));
        }
    }
    Ok(if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    })
}

/// In PID 1 of the new namespace: everything between fork and `sh -c`. Returns only on error.
fn confine_and_exec(request: &ExecRequest, supervisor: &OwnedFd) -> SetupError {
    match confine(request, supervisor) {
        Ok(()) => {
            // By its path: the host may have no PATH to pass on.
            let error = std::process::Command::new("/bin/sh")
                .arg("-c")
                .arg(&request.shell_command)
                .exec();
            failed("running /bin/sh")(error)
        }
        Err(error) => error,
    }
}

fn confine(request: &ExecRequest, supervisor: &OwnedFd) -> Result<(), SetupError> {
    // SAFETY: only asks for a signal when the parent (the supervisor) dies.
    check(
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) }.into(),
        "tying the command to its supervisor",
    )?;
    if has_exited(supervisor) {
        return Err(failed("starting the command")(io::Error::other(
            "the supervisor is gone",
        )));
    }
    // A session of its own: no controlling terminal to inject keystrokes into.
    // SAFETY: setsid has no preconditions; a fresh child is not a group leader.
    check(unsafe { libc::setsid() }.into(), "starting a new session")?;
    mount(None, "/", None, libc::MS_REC | libc::MS_PRIVATE, None)
        .map_err(failed("making the mounts private"))?;

    let mut writable_dirs = mount_files(request)?;
    writable_dirs.push(PathBuf::from("/tmp"));
    if Path::new("/dev/shm").is_dir()
        && mount(
            Some("tmpfs"),
            "/dev/shm",
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some("mode=1777"),
        )
        .is_ok()
    {
        writable_dirs.push(PathBuf::from("/dev/shm"));
    }
    let mut writable_devices: Vec<PathBuf> = WRITABLE_DEVICES.iter().map(PathBuf::from).collect();
    // Terminals of its own (for `script`, `expect`...), none of yours; without them, none.
    if mount(
        Some("devpts"),
        "/dev/pts",
        Some("devpts"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )
    .is_ok()
        && mount(
            Some("/dev/pts/ptmx"),
            "/dev/ptmx",
            None,
            libc::MS_BIND,
            None,
        )
        .is_ok()
    {
        writable_dirs.push(PathBuf::from("/dev/pts"));
        writable_devices.push(PathBuf::from("/dev/ptmx"));
    }
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )
    .map_err(failed("mounting /proc"))?;
    if !request.network {
        // Like bubblewrap: the namespace's own loopback works, the host's is not there.
        bring_up_loopback().map_err(failed("bringing up the loopback interface"))?;
    }
    drop_capabilities();
    restrict_files(&writable_dirs, &writable_devices)?;
    // After Landlock, which set no_new_privs: the filter needs it to load without privilege.
    load_seccomp_filter()?;
    std::env::set_current_dir(&request.cwd)
        .map_err(failed(format!("entering {}", request.cwd.display())))?;
    Ok(())
}

/// The files as the command sees them: every mount read-only, a private `/tmp`, the writable
/// places bound back writable and what stays read-only in them bound over them. Returns the
/// writable places.
fn mount_files(request: &ExecRequest) -> Result<Vec<PathBuf>, SetupError> {
    let mut writable_dirs: Vec<PathBuf> = vec![request.root.clone()];
    writable_dirs.extend(
        request
            .writable
            .iter()
            .filter(|path| path.exists())
            .cloned(),
    );
    // Copies of the writable places as they are, taken before everything is made read-only
    // (and before /tmp is covered: a project or writable path under /tmp comes back).
    let trees: Vec<(PathBuf, OwnedFd, bool)> = writable_dirs
        .iter()
        .map(|path| {
            clone_tree(path)
                .map(|tree| (path.clone(), tree, path.is_dir()))
                .map_err(failed(format!("copying the mount of {}", path.display())))
        })
        .collect::<Result<_, _>>()?;
    // Landlock leaves metadata alone (chmod, utimes, extended attributes): a read-only mount
    // does not, for every file and every mount under /.
    set_read_only(libc::AT_FDCWD, c"/", 0).map_err(failed("making / read-only"))?;
    mount(
        Some("tmpfs"),
        "/tmp",
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=1777"),
    )
    .map_err(failed("mounting a private /tmp"))?;
    for (path, tree, is_dir) in &trees {
        if path.starts_with("/tmp") {
            recreate_in_tmp(path, *is_dir)?;
        }
        attach(tree, path).map_err(failed(format!("binding {} writable", path.display())))?;
    }
    drop(trees);
    // Last, so that no writable place covers them. One gone since the host found it has
    // nothing left to keep.
    for path in &request.read_only {
        if let Err(err) = bind_read_only(path)
            && err.kind() != io::ErrorKind::NotFound
        {
            return Err(failed(format!("keeping {} read-only", path.display()))(err));
        }
    }
    Ok(writable_dirs)
}

/// Loads the seccomp filter bubblewrap gets too (`seccomp.rs`).
fn load_seccomp_filter() -> Result<(), SetupError> {
    // Without its filter the sandbox has holes (Unix sockets, io_uring): no command runs.
    let Some(program) = super::seccomp::filter() else {
        return Err(failed("loading the seccomp filter")(io::Error::other(
            super::seccomp::NO_FILTER_HERE,
        )));
    };
    let mut filter: Vec<libc::sock_filter> = program
        .chunks_exact(8)
        .map(|op| libc::sock_filter {
            code: u16::from_ne_bytes([op[0], op[1]]),
            jt: op[2],
            jf: op[3],
            k: u32::from_ne_bytes([op[4], op[5], op[6], op[7]]),
        })
        .collect();
    let program = libc::sock_fprog {
        len: u16::try_from(filter.len()).unwrap_or(u16::MAX),
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: seccomp reads `program`, which points at `filter`, alive for the call.
    check(
        unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                &program as *const libc::sock_fprog,
            )
        },
        "loading the seccomp filter",
    )?;
    Ok(())
}

/// Landlock: read and execute everywhere, write only beneath `dirs` and to `devices`. Also
/// sets `no_new_privs`, and from here on mounts are refused.
fn restrict_files(dirs: &[PathBuf], devices: &[PathBuf]) -> Result<(), SetupError> {
    let landlock_error = |step: &str| {
        let step = step.to_owned();
        move |err: landlock::RulesetError| SetupError {
            step,
            source: io::Error::other(err),
        }
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TARGET_ABI))
        .map_err(landlock_error("Landlock"))?
        // Signals only to its own processes (they are the only ones it sees anyway), and no
        // abstract Unix socket outside (with the network on, the host's would be there).
        .scope(Scope::Signal | Scope::AbstractUnixSocket)
        .map_err(landlock_error("Landlock"))?
        .create()
        .map_err(landlock_error("Landlock"))?
        .add_rule(PathBeneath::new(
            PathFd::new("/").map_err(|err| SetupError {
                step: "opening /".to_owned(),
                source: io::Error::other(err),
            })?,
            AccessFs::from_read(TARGET_ABI),
        ))
        .map_err(landlock_error("Landlock rule for /"))?;
    let rules = dirs
        .iter()
        .map(|dir| (dir, AccessFs::from_all(TARGET_ABI)))
        .chain(
            devices
                .iter()
                .filter(|device| device.exists())
                .map(|device| (device, AccessFs::from_file(TARGET_ABI))),
        );
    for (path, access) in rules {
        let fd = PathFd::new(path).map_err(|err| SetupError {
            step: format!("opening {}", path.display()),
            source: io::Error::other(err),
        })?;
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(landlock_error(&format!(
                "Landlock rule for {}",
                path.display()
            )))?;
    }
    let status = ruleset
        .restrict_self()
        .map_err(landlock_error("applying Landlock"))?;
    if status.ruleset == RulesetStatus::NotEnforced || !status.no_new_privs {
        return Err(failed("applying Landlock")(io::Error::other(
            "the kernel did not enforce it",
        )));
    }
    Ok(())
}

/// Empties the capability bounding set, so that the command gets no capability in its user
/// namespace even when you are root (it would otherwise, on exec).
fn drop_capabilities() {
    for capability in 0..64 {
        // SAFETY: PR_CAPBSET_DROP only shrinks this process's bounding set; unknown
        // capabilities give EINVAL, which is fine.
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0) };
    }
}

fn mount(
    source: Option<&str>,
    target: impl AsRef<Path>,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let c_string = |text: &[u8]| {
        CString::new(text).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))
    };
    let source = source.map(|text| c_string(text.as_bytes())).transpose()?;
    let target = c_string(target.as_ref().as_os_str().as_bytes())?;
    let fstype = fstype.map(|text| c_string(text.as_bytes())).transpose()?;
    let data = data.map(|text| c_string(text.as_bytes())).transpose()?;
    let pointer = |text: &Option<CString>| text.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is null or a valid NUL-terminated string living across the call.
    let result = unsafe {
        libc::mount(
            pointer(&source),
            target.as_ptr(),
            pointer(&fstype),
            flags,
            pointer(&data).cast(),
        )
    };
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `open_tree` flags and `mount_setattr`'s structure (uapi `linux/mount.h`; Linux 5.12 and
/// later have them all, and Landlock ABI 3 needs 6.2).
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;
const MOUNT_ATTR_RDONLY: u64 = 1;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// A detached copy of the mounts at and under `path`, with their flags as they are now.
fn clone_tree(path: &Path) -> io::Result<OwnedFd> {
    let c_path = c_path(path)?;
    // SAFETY: a NUL-terminated path and flags; the kernel returns a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c_path.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_RECURSIVE as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(io::Error::other)?;
    // SAFETY: fd was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Mounts the detached `tree` on `path`.
fn attach(tree: &OwnedFd, path: &Path) -> io::Result<()> {
    let c_path = c_path(path)?;
    // SAFETY: a detached mount's descriptor, an empty path for it, and a NUL-terminated target.
    let result = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            c_path.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Makes the mount at `path` (from `dir`) and every mount under it read-only. Only adds the
/// flag: whatever the kernel locked on mounts inherited into this namespace (nosuid,
/// nodev...) stays as it is.
fn set_read_only(dir: libc::c_int, path: &CStr, flags: libc::c_int) -> io::Result<()> {
    let attributes = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a NUL-terminated path and a mount_attr of the size passed, alive for the call.
    let result = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dir,
            path.as_ptr(),
            (flags | libc::AT_RECURSIVE) as libc::c_uint,
            &raw const attributes,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Binds `path` (and what is mounted under it) over itself read-only.
fn bind_read_only(path: &Path) -> io::Result<()> {
    let tree = clone_tree(path)?;
    set_read_only(tree.as_raw_fd(), c"", libc::AT_EMPTY_PATH)?;
    attach(&tree, path)
}

/// Makes room in the private /tmp for a writable place that was under the real one.
fn recreate_in_tmp(path: &Path, is_dir: bool) -> Result<(), SetupError> {
    let parent = path.parent().unwrap_or(Path::new("/tmp"));
    std::fs::create_dir_all(if is_dir { path } else { parent })
        .map_err(failed(format!("recreating {} in /tmp", path.display())))?;
    if !is_dir {
        std::fs::write(path, "").map_err(failed(format!("recreating {}", path.display())))?;
    }
    Ok(())
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))
}

fn bring_up_loopback() -> io::Result<()> {
    // SAFETY: a plain socket call; the fd is owned right away.
    let socket = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if socket < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socket is a fresh, valid fd nobody else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(socket) };
    // SAFETY: ifreq is plain data; all zeroes is a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS fills the ifreq named "lo".
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut request) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFFLAGS set the flags member of the union.
    unsafe {
        request.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    // SAFETY: SIOCSIFFLAGS reads the ifreq.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &request) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(io::Error::other)?;
    // SAFETY: fd was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn has_exited(process: &OwnedFd) -> bool {
    let mut fd = libc::pollfd {
        fd: process.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no waiting.
    unsafe { libc::poll(&mut fd, 1, 0) > 0 }
}
