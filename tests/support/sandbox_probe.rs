//! What the sandbox tests run as a command, to try what a hostile command would: each way out
//! is made with raw system calls (no Python, no libc wrapper that might take another path).
//!
//! - `unix-escapes <stream-socket> <datagram-socket>`: every way to reach a Unix socket
//!   outside (plain `socket`, io_uring's `IORING_OP_SOCKET`, a `socketpair` end connected or
//!   sent elsewhere), one line each: `<way>: connected`, or `<way>: <step>: <error>`;
//! - `refused-syscalls`: calls the sandbox refuses, made harmless, one line each:
//!   `<call>: ok` or `<call>: <error>`;
//! - `ordinary-work`: what builds need (threads, processes, pipes, socket pairs, inet and
//!   netlink sockets), `<what>: ok` or the error; exits 1 if anything failed;
//! - `set-xattr <path>`: sets `user.loopr` on `path`; exits 1 if refused.

use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["unix-escapes", stream, datagram] => {
            unix_escapes(Path::new(stream), Path::new(datagram));
            0
        }
        ["refused-syscalls"] => {
            refused_syscalls();
            0
        }
        ["ordinary-work"] => ordinary_work(),
        ["set-xattr", path] => report("set-xattr", set_xattr(Path::new(path))),
        _ => {
            eprintln!("loopr-test-sandbox-probe: unknown arguments {args:?}");
            2
        }
    };
    std::process::exit(code);
}

/// One way to reach the sockets at (stream, datagram): `Err` says where it was stopped.
type Way = fn(&Path, &Path) -> Result<(), String>;
/// One call or check.
type Check = fn() -> io::Result<()>;

/// Prints `name: ok` or `name: <error>`; 0 or 1 as an exit status.
fn report(name: &str, result: io::Result<()>) -> i32 {
    match result {
        Ok(()) => {
            println!("{name}: ok");
            0
        }
        Err(err) => {
            println!("{name}: {err}");
            1
        }
    }
}

/// A syscall's return value, or the error it set.
fn checked(result: libc::c_long) -> io::Result<libc::c_long> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: a descriptor the kernel just returned, owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

fn step<T>(name: &'static str, result: io::Result<T>) -> Result<T, String> {
    result.map_err(|err| format!("{name}: {err}"))
}

fn unix_escapes(stream: &Path, datagram: &Path) {
    let ways: [(&str, Way); 5] = [
        ("socket", |stream, _| connect_new(stream, plain_unix_socket)),
        ("io_uring", |stream, _| {
            connect_new(stream, io_uring_unix_socket)
        }),
        ("socketpair-stream", |stream, _| {
            connect_new(stream, || socketpair_end(libc::SOCK_STREAM))
        }),
        ("socketpair-datagram-connect", |_, datagram| {
            connect_new(datagram, || socketpair_end(libc::SOCK_DGRAM))
        }),
        ("socketpair-datagram-sendto", |_, datagram| {
            send_to(datagram)
        }),
    ];
    for (way, attempt) in ways {
        match attempt(stream, datagram) {
            Ok(()) => println!("{way}: connected"),
            Err(why) => println!("{way}: {why}"),
        }
    }
}

fn connect_new(path: &Path, make: impl Fn() -> Result<OwnedFd, String>) -> Result<(), String> {
    let socket = make()?;
    let (address, length) = unix_address(path);
    // SAFETY: a valid socket and a sockaddr_un of `length` bytes.
    step(
        "connect",
        checked(
            unsafe { libc::connect(socket.as_raw_fd(), (&raw const address).cast(), length) }
                .into(),
        ),
    )?;
    // Proof for the listener: something arrives if the way worked.
    // SAFETY: writes one byte from a valid buffer.
    unsafe { libc::write(socket.as_raw_fd(), b"x".as_ptr().cast(), 1) };
    Ok(())
}

fn send_to(path: &Path) -> Result<(), String> {
    let socket = socketpair_end(libc::SOCK_DGRAM)?;
    let (address, length) = unix_address(path);
    // SAFETY: one byte from a valid buffer to a sockaddr_un of `length` bytes.
    step(
        "sendto",
        checked(unsafe {
            libc::sendto(
                socket.as_raw_fd(),
                b"x".as_ptr().cast(),
                1,
                0,
                (&raw const address).cast(),
                length,
            )
        } as libc::c_long),
    )?;
    Ok(())
}

fn unix_address(path: &Path) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: sockaddr_un is plain data; zeroes are valid.
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (slot, byte) in address.sun_path.iter_mut().zip(path.as_os_str().as_bytes()) {
        *slot = *byte as libc::c_char;
    }
    (
        address,
        std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
    )
}

fn plain_unix_socket() -> Result<OwnedFd, String> {
    // SAFETY: plain socket creation.
    let fd = step(
        "socket",
        checked(
            unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) }
                .into(),
        ),
    )?;
    Ok(owned(fd))
}

/// One end of a fresh `socketpair(AF_UNIX, kind)`, its peer closed.
fn socketpair_end(kind: libc::c_int) -> Result<OwnedFd, String> {
    let (end, peer) = step("socketpair", socket_pair(kind))?;
    drop(peer);
    Ok(end)
}

/// `struct io_uring_params` with its offsets (uapi `linux/io_uring.h`).
#[repr(C)]
#[derive(Default)]
struct IoUringParams {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
    wq_fd: u32,
    resv: [u32; 3],
    sq_off: [u32; 10],
    cq_off: [u32; 10],
}

const IORING_OFF_SQ_RING: i64 = 0;
const IORING_OFF_CQ_RING: i64 = 0x800_0000;
const IORING_OFF_SQES: i64 = 0x1000_0000;
const IORING_OP_SOCKET: u8 = 45;
const IORING_ENTER_GETEVENTS: u32 = 1;
const SQE_SIZE: usize = 64;
const CQE_SIZE: usize = 16;

/// A shared mapping of the ring, unmapped on drop.
struct Mapping {
    at: *mut u8,
    length: usize,
}

impl Mapping {
    fn new(ring: &OwnedFd, length: usize, offset: i64) -> io::Result<Mapping> {
        // SAFETY: maps `length` bytes of the ring's fd at one of its documented offsets.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                length,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                ring.as_raw_fd(),
                offset,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            at: at.cast(),
            length,
        })
    }

    fn u32_at(&self, offset: u32) -> *mut u32 {
        // SAFETY: the offsets come from the kernel and lie inside the mapping.
        unsafe { self.at.add(offset as usize).cast() }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps what `new` mapped.
        unsafe { libc::munmap(self.at.cast(), self.length) };
    }
}

/// An AF_UNIX socket made by io_uring (`IORING_OP_SOCKET`), never by `socket(2)`.
fn io_uring_unix_socket() -> Result<OwnedFd, String> {
    let mut params = IoUringParams::default();
    // SAFETY: io_uring_setup fills `params`, which lives across the call.
    let ring = owned(step(
        "io_uring_setup",
        checked(unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, &raw mut params) }),
    )?);
    let (sq, cq) = (params.sq_off, params.cq_off);
    let sq_length = sq[6] as usize + params.sq_entries as usize * 4;
    let cq_length = cq[5] as usize + params.cq_entries as usize * CQE_SIZE;
    let sq_ring = step("mmap", Mapping::new(&ring, sq_length, IORING_OFF_SQ_RING))?;
    let cq_ring = step("mmap", Mapping::new(&ring, cq_length, IORING_OFF_CQ_RING))?;
    let sqes = step(
        "mmap",
        Mapping::new(
            &ring,
            params.sq_entries as usize * SQE_SIZE,
            IORING_OFF_SQES,
        ),
    )?;
    // SAFETY: every pointer is inside a mapping above, at the kernel's offsets; one entry is
    // written before the tail that publishes it moves.
    unsafe {
        let sqe = sqes.at;
        std::ptr::write_bytes(sqe, 0, SQE_SIZE);
        *sqe = IORING_OP_SOCKET;
        sqe.add(4).cast::<i32>().write(libc::AF_UNIX);
        sqe.add(8)
            .cast::<u64>()
            .write((libc::SOCK_STREAM | libc::SOCK_CLOEXEC) as u64);
        let tail = sq_ring.u32_at(sq[1]);
        let mask = *sq_ring.u32_at(sq[2]);
        let index = *tail & mask;
        *sq_ring.u32_at(sq[6]).add(index as usize) = 0;
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        *tail = tail.read_volatile() + 1;
    }
    // SAFETY: submits the one entry and waits for its completion.
    step(
        "io_uring_enter",
        checked(unsafe {
            libc::syscall(
                libc::SYS_io_uring_enter,
                ring.as_raw_fd(),
                1u32,
                1u32,
                IORING_ENTER_GETEVENTS,
                std::ptr::null::<libc::c_void>(),
                0usize,
            )
        }),
    )?;
    // SAFETY: the completion queue's head entry, at the kernel's offsets.
    let result = unsafe {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        let head = *cq_ring.u32_at(cq[0]);
        let mask = *cq_ring.u32_at(cq[2]);
        let cqe = cq_ring
            .at
            .add(cq[5] as usize + (head & mask) as usize * CQE_SIZE);
        cqe.add(8).cast::<i32>().read_volatile()
    };
    if result < 0 {
        return Err(format!(
            "IORING_OP_SOCKET: {}",
            io::Error::from_raw_os_error(-result)
        ));
    }
    Ok(owned(result.into()))
}

fn refused_syscalls() {
    let calls: &[(&str, Check)] = &[
        ("io_uring_setup", || {
            let mut params = IoUringParams::default();
            // SAFETY: io_uring_setup fills `params`.
            let ring =
                checked(unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, &raw mut params) })?;
            drop(owned(ring));
            Ok(())
        }),
        ("ptrace", || {
            in_child(|| {
                // SAFETY: lets the parent trace this child, which exits at once.
                checked(unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) }).map(drop)
            })
        }),
        ("process_vm_readv", || {
            process_vm(libc::SYS_process_vm_readv)
        }),
        ("process_vm_writev", || {
            process_vm(libc::SYS_process_vm_writev)
        }),
        ("pidfd_getfd", || {
            // SAFETY: a pidfd of this very process.
            let own = owned(checked(unsafe {
                libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0)
            })?);
            // SAFETY: copies this process's own stdout descriptor.
            let copy =
                checked(unsafe { libc::syscall(libc::SYS_pidfd_getfd, own.as_raw_fd(), 1, 0) })?;
            drop(owned(copy));
            Ok(())
        }),
        ("unshare(CLONE_NEWUSER)", || {
            in_child(|| {
                // SAFETY: a new user namespace for this child only, which exits at once.
                checked(unsafe { libc::unshare(libc::CLONE_NEWUSER) }.into()).map(drop)
            })
        }),
        ("clone(CLONE_NEWUSER)", || {
            // SAFETY: fork-like clone (no new stack); the child exits at once.
            let child = checked(unsafe {
                libc::syscall(
                    libc::SYS_clone,
                    (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong,
                    0usize,
                    0usize,
                    0usize,
                    0usize,
                )
            })?;
            reap(child)
        }),
        ("clone3", || {
            // struct clone_args: flags, pidfd, child_tid, parent_tid, exit_signal, stack,
            // stack_size, tls (the size of version 0).
            let mut arguments = [0u64; 8];
            arguments[4] = libc::SIGCHLD as u64;
            // SAFETY: fork-like clone3 (no new stack); the child exits at once.
            let child = checked(unsafe {
                libc::syscall(
                    libc::SYS_clone3,
                    arguments.as_mut_ptr(),
                    std::mem::size_of_val(&arguments),
                )
            })?;
            reap(child)
        }),
        ("setns", || {
            // SAFETY: an invalid descriptor: nothing is joined.
            checked(unsafe { libc::setns(-1, 0) }.into()).map(drop)
        }),
        ("bpf", || {
            // SAFETY: an unknown command with no attributes.
            checked(unsafe { libc::syscall(libc::SYS_bpf, 0xffff, std::ptr::null::<u8>(), 0usize) })
                .map(drop)
        }),
        ("perf_event_open", || {
            // SAFETY: no attributes: nothing is opened.
            checked(unsafe {
                libc::syscall(
                    libc::SYS_perf_event_open,
                    std::ptr::null::<u8>(),
                    0,
                    -1,
                    -1,
                    0usize,
                )
            })
            .map(drop)
        }),
        ("userfaultfd", || {
            const UFFD_USER_MODE_ONLY: libc::c_int = 1;
            // SAFETY: a user-mode-only userfaultfd, closed at once.
            let fd = checked(unsafe {
                libc::syscall(libc::SYS_userfaultfd, UFFD_USER_MODE_ONLY | libc::O_CLOEXEC)
            })?;
            drop(owned(fd));
            Ok(())
        }),
        ("keyctl", || {
            const KEYCTL_GET_KEYRING_ID: libc::c_long = 0;
            const KEY_SPEC_SESSION_KEYRING: libc::c_long = -3;
            // SAFETY: asks the session keyring's id, creating nothing.
            checked(unsafe {
                libc::syscall(
                    libc::SYS_keyctl,
                    KEYCTL_GET_KEYRING_ID,
                    KEY_SPEC_SESSION_KEYRING,
                    0usize,
                )
            })
            .map(drop)
        }),
        ("add_key", || {
            const KEY_SPEC_PROCESS_KEYRING: libc::c_long = -2;
            // SAFETY: valid NUL-terminated strings and a one-byte payload; the key goes to
            // this process's own keyring, gone when it exits.
            checked(unsafe {
                libc::syscall(
                    libc::SYS_add_key,
                    c"user".as_ptr(),
                    c"loopr-probe".as_ptr(),
                    b"x".as_ptr(),
                    1usize,
                    KEY_SPEC_PROCESS_KEYRING,
                )
            })
            .map(drop)
        }),
        ("request_key", || {
            // SAFETY: valid NUL-terminated strings; no callout.
            checked(unsafe {
                libc::syscall(
                    libc::SYS_request_key,
                    c"user".as_ptr(),
                    c"loopr-probe-missing".as_ptr(),
                    std::ptr::null::<u8>(),
                    0,
                )
            })
            .map(drop)
        }),
        ("mount", || {
            // SAFETY: a bind onto a path that does not exist: nothing is mounted.
            checked(
                unsafe {
                    libc::mount(
                        c"/".as_ptr(),
                        c"/loopr-probe-missing".as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND,
                        std::ptr::null(),
                    )
                }
                .into(),
            )
            .map(drop)
        }),
        ("umount2", || {
            // SAFETY: a path that does not exist: nothing is unmounted.
            checked(unsafe { libc::umount2(c"/loopr-probe-missing".as_ptr(), 0) }.into()).map(drop)
        }),
        ("open_tree", || {
            // SAFETY: a path that does not exist, no flags (no clone).
            let fd = checked(unsafe {
                libc::syscall(
                    libc::SYS_open_tree,
                    libc::AT_FDCWD,
                    c"/loopr-probe-missing".as_ptr(),
                    0,
                )
            })?;
            drop(owned(fd));
            Ok(())
        }),
        ("mount_setattr", || {
            // SAFETY: invalid flags: nothing is changed.
            checked(unsafe {
                libc::syscall(
                    libc::SYS_mount_setattr,
                    libc::AT_FDCWD,
                    c"/".as_ptr(),
                    0x8000_0000u32,
                    std::ptr::null::<u8>(),
                    0usize,
                )
            })
            .map(drop)
        }),
        ("name_to_handle_at", || {
            // struct file_handle with no room: the kernel only says how much it needs.
            let mut handle = [0u32; 2];
            let mut mount_id = 0;
            // SAFETY: a valid path, a file_handle header and an int out pointer.
            checked(unsafe {
                libc::syscall(
                    libc::SYS_name_to_handle_at,
                    libc::AT_FDCWD,
                    c"/".as_ptr(),
                    handle.as_mut_ptr(),
                    &raw mut mount_id,
                    0,
                )
            })
            .map(drop)
        }),
        ("open_by_handle_at", || {
            let mut handle = [8u32, 1, 0, 0];
            // SAFETY: a bad mount descriptor and a made-up handle: nothing is opened.
            let fd = checked(unsafe {
                libc::syscall(
                    libc::SYS_open_by_handle_at,
                    -1,
                    handle.as_mut_ptr(),
                    libc::O_RDONLY,
                )
            })?;
            drop(owned(fd));
            Ok(())
        }),
        ("ioctl(TIOCSTI)", || terminal_ioctl(libc::TIOCSTI)),
        ("ioctl(TIOCLINUX)", || terminal_ioctl(libc::TIOCLINUX)),
        ("socket(AF_UNIX)", || {
            new_socket(libc::AF_UNIX, libc::SOCK_STREAM, 0)
        }),
        ("socket(AF_ALG)", || {
            new_socket(libc::AF_ALG, libc::SOCK_SEQPACKET, 0)
        }),
        ("socket(AF_VSOCK)", || {
            new_socket(libc::AF_VSOCK, libc::SOCK_STREAM, 0)
        }),
        ("socketpair(AF_UNIX, SOCK_DGRAM)", || {
            socket_pair(libc::SOCK_DGRAM).map(drop)
        }),
        #[cfg(target_arch = "x86_64")]
        ("x32 getpid", || {
            const X32_SYSCALL_BIT: libc::c_long = 0x4000_0000;
            // SAFETY: getpid through the x32 ABI's number.
            checked(unsafe { libc::syscall(X32_SYSCALL_BIT | libc::SYS_getpid) }).map(drop)
        }),
    ];
    for (name, call) in calls {
        match call() {
            Ok(()) => println!("{name}: ok"),
            Err(err) => println!("{name}: {err}"),
        }
    }
}

/// Reads (or writes back) a word of this process's own memory through `process_vm_*v`.
fn process_vm(call: libc::c_long) -> io::Result<()> {
    let mut word = 7u64;
    let iovec = libc::iovec {
        iov_base: (&raw mut word).cast(),
        iov_len: 8,
    };
    // SAFETY: both vectors name `word`, alive across the call, in this very process.
    checked(unsafe {
        libc::syscall(
            call,
            libc::getpid(),
            &raw const iovec,
            1usize,
            &raw const iovec,
            1usize,
            0usize,
        )
    })
    .map(drop)
}

/// Runs `call` in a forked child (a call that would change this process), its error as the
/// child's exit status.
fn in_child(call: impl Fn() -> io::Result<()>) -> io::Result<()> {
    // SAFETY: the child only makes the call and exits.
    let child = checked(unsafe { libc::fork() }.into())?;
    if child == 0 {
        let code = match call() {
            Ok(()) => 0,
            Err(err) => err.raw_os_error().unwrap_or(255),
        };
        // SAFETY: leaves without running the parent's code.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    checked(unsafe { libc::waitpid(child as libc::pid_t, &raw mut status, 0) }.into())?;
    match libc::WEXITSTATUS(status) {
        0 if libc::WIFEXITED(status) => Ok(()),
        code if libc::WIFEXITED(status) => Err(io::Error::from_raw_os_error(code)),
        _ => Err(io::Error::other(format!(
            "the child ended with status {status}"
        ))),
    }
}

fn reap(child: libc::c_long) -> io::Result<()> {
    if child == 0 {
        // SAFETY: the child leaves at once, without running the parent's code.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(child as libc::pid_t, &raw mut status, 0) };
    Ok(())
}

fn terminal_ioctl(request: libc::Ioctl) -> io::Result<()> {
    let null = std::fs::File::open("/dev/null")?;
    let byte = b'x';
    // SAFETY: an ioctl on an open descriptor with a pointer to one byte.
    checked(unsafe { libc::ioctl(null.as_raw_fd(), request, &raw const byte) }.into()).map(drop)
}

fn new_socket(family: libc::c_int, kind: libc::c_int, protocol: libc::c_int) -> io::Result<()> {
    // SAFETY: plain socket creation; closed at once.
    let fd = checked(unsafe { libc::socket(family, kind | libc::SOCK_CLOEXEC, protocol) }.into())?;
    drop(owned(fd));
    Ok(())
}

fn socket_pair(kind: libc::c_int) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors.
    let made = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            kind | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    checked(made.into())?;
    Ok((owned(fds[0].into()), owned(fds[1].into())))
}

fn ordinary_work() -> i32 {
    let checks: [(&str, Check); 8] = [
        ("threads", || {
            let handles: Vec<_> = (0..4).map(|n| std::thread::spawn(move || n * 2)).collect();
            let sum: i32 = handles
                .into_iter()
                .map(|handle| handle.join().unwrap_or(-100))
                .sum();
            if sum == 12 {
                Ok(())
            } else {
                Err(io::Error::other(format!("threads summed {sum}")))
            }
        }),
        ("child process", || {
            let output = std::process::Command::new("sh")
                .args(["-c", "echo child | cat"])
                .output()?;
            if output.status.success() && output.stdout == b"child\n" {
                Ok(())
            } else {
                Err(io::Error::other(format!("{output:?}")))
            }
        }),
        ("fork", || {
            // SAFETY: the child exits at once.
            let child = checked(unsafe { libc::fork() }.into())?;
            reap(child)
        }),
        ("socketpair(AF_UNIX, SOCK_STREAM)", || {
            let (mut left, mut right) = std::os::unix::net::UnixStream::pair()?;
            left.write_all(b"ping")?;
            let mut answer = [0; 4];
            right.read_exact(&mut answer)?;
            if &answer == b"ping" {
                Ok(())
            } else {
                Err(io::Error::other("the pair garbled the bytes"))
            }
        }),
        ("socketpair(AF_UNIX, SOCK_SEQPACKET)", || {
            socket_pair(libc::SOCK_SEQPACKET).map(drop)
        }),
        ("tcp on loopback", || {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
            let mut client = std::net::TcpStream::connect(listener.local_addr()?)?;
            client.write_all(b"hi")?;
            let (mut server, _) = listener.accept()?;
            let mut answer = [0; 2];
            server.read_exact(&mut answer)?;
            Ok(())
        }),
        ("socket(AF_INET6)", || {
            new_socket(libc::AF_INET6, libc::SOCK_DGRAM, 0)
        }),
        ("socket(AF_NETLINK, NETLINK_ROUTE)", || {
            new_socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE)
        }),
    ];
    let mut failed = 0;
    for (name, check) in checks {
        failed |= report(name, check());
    }
    failed
}

fn set_xattr(path: &Path) -> io::Result<()> {
    let path = CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: NUL-terminated path and name, a five-byte value.
    checked(
        unsafe {
            libc::setxattr(
                path.as_ptr(),
                c"user.loopr".as_ptr(),
                b"probe".as_ptr().cast(),
                5,
                0,
            )
        }
        .into(),
    )
    .map(drop)
}
