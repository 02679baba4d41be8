//! The seccomp filter every sandboxed command runs under, under bubblewrap (`--seccomp`) and
//! under Landlock (`exec.rs` loads it): the system calls that reach past the sandbox's files,
//! network and processes, refused. A read-only mount does not stop a process from connecting
//! to a Unix socket on it, and the user's sockets (the session bus, a Neovim server,
//! ssh-agent, docker) run commands outside any sandbox; io_uring does what system calls do
//! without this filter seeing them; new user namespaces, mounts, eBPF, keyrings and the like
//! reach the kernel's privileged or shared parts. Everything else is allowed: the filter is a
//! deny-list of ways out, not a profile of what builds use.
//!
//! `REFUSED` is the table, one row per call with its errno and why; `:help loopr-sandbox`
//! says the same to the user. The program is classic BPF built from it, as
//! `seccomp_export_bpf` writes it and `bwrap --seccomp` reads it: an array of
//! `struct sock_filter` in native byte order. (The `seccompiler` crate builds the same kind of
//! program, but its architecture check lets the x32 ABI's numbers through a deny-list, and this
//! table needs no more than it offers.)

/// When a call is refused, from its arguments. Every rule reads the low 32 bits of an
/// argument: where the kernel reads an `int` (a family, an ioctl request) and where the flags
/// tested live, whatever a caller puts in the high half.
#[derive(Clone, Copy, Debug)]
enum When {
    Always,
    /// Argument `.0` is `.1`.
    ArgIs(u32, u32),
    /// Argument `.0` has one of the bits `.1`.
    ArgHasAny(u32, u32),
    /// Argument `.0`, masked with `.1`, is none of `.2`.
    ArgNoneOf(u32, u32, &'static [u32]),
}

/// One row of the table: the call of this number (on this architecture) refused `when`,
/// failing with `errno`, for the reason `why`.
#[derive(Clone, Copy, Debug)]
struct Refused {
    number: libc::c_long,
    when: When,
    errno: i32,
    /// For people (and the tests) reading the table: the filter needs the rest.
    #[cfg_attr(not(test), allow(dead_code))]
    why: &'static str,
}

const fn refused(number: libc::c_long, when: When, errno: i32, why: &'static str) -> Refused {
    Refused {
        number,
        when,
        errno,
        why,
    }
}

use When::{Always, ArgHasAny, ArgIs, ArgNoneOf};
use libc::{
    EAFNOSUPPORT, ENOSYS, EPERM, SYS_add_key, SYS_bpf, SYS_clone, SYS_clone3, SYS_delete_module,
    SYS_finit_module, SYS_fsconfig, SYS_fsmount, SYS_fsopen, SYS_fspick, SYS_init_module,
    SYS_io_uring_enter, SYS_io_uring_register, SYS_io_uring_setup, SYS_ioctl, SYS_kexec_file_load,
    SYS_kexec_load, SYS_keyctl, SYS_mount, SYS_mount_setattr, SYS_move_mount,
    SYS_name_to_handle_at, SYS_open_by_handle_at, SYS_open_tree, SYS_perf_event_open,
    SYS_pidfd_getfd, SYS_pivot_root, SYS_process_vm_readv, SYS_process_vm_writev, SYS_ptrace,
    SYS_request_key, SYS_setns, SYS_socket, SYS_socketpair, SYS_umount2, SYS_unshare,
    SYS_userfaultfd,
};

// The values the rules compare, as the filter reads them (32 bits).
const AF_UNIX: u32 = libc::AF_UNIX as u32;
const AF_INET: u32 = libc::AF_INET as u32;
const AF_INET6: u32 = libc::AF_INET6 as u32;
const AF_NETLINK: u32 = libc::AF_NETLINK as u32;
const SOCK_STREAM: u32 = libc::SOCK_STREAM as u32;
const SOCK_SEQPACKET: u32 = libc::SOCK_SEQPACKET as u32;
const SOCKET_TYPE_MASK: u32 = 0xf;
const CLONE_NEWUSER: u32 = libc::CLONE_NEWUSER as u32;
const TIOCSTI: u32 = libc::TIOCSTI as u32;
const TIOCLINUX: u32 = libc::TIOCLINUX as u32;
/// `open_tree_attr` (Linux 6.15, the same number everywhere), not yet in `libc`.
const SYS_OPEN_TREE_ATTR: libc::c_long = 467;

const UNIX_SOCKETS: &str = "a Unix socket reaches any of the user's servers by its path \
    (a Neovim server, the session bus, ssh-agent, docker), read-only mount or not";
const IO_URING: &str = "io_uring makes sockets, opens files and more without the system \
    calls this filter sees";
const OTHER_PROCESSES: &str = "reads or changes another process's memory or descriptors";
const KEYRINGS: &str = "the kernel's keyrings are shared with the user's other processes \
    (their user keyring holds their keys and tickets)";
const USER_NAMESPACES: &str = "a new user namespace gives back every capability inside it, \
    and with them the kernel's privileged surface (mounts, netfilter...)";
const MOUNTS: &str = "the mount table is the sandbox's view of the files; no command needs \
    to change it";
const KERNEL_SURFACE: &str = "kernel attack surface no build needs";
const KERNEL_CODE: &str = "loads code into the kernel";
const FILE_HANDLES: &str = "opens any file of a filesystem by its handle, around the mounts \
    (the classic container escape); making handles goes with it";
const TERMINAL: &str = "pushes keystrokes into a terminal's input";

/// What is refused, and why.
#[rustfmt::skip]
const REFUSED: &[Refused] = &[
    refused(SYS_socket, ArgIs(0, AF_UNIX), EPERM, UNIX_SOCKETS),
    refused(SYS_socket, ArgNoneOf(0, u32::MAX, &[AF_INET, AF_INET6, AF_NETLINK]), EAFNOSUPPORT,
        "other families reach past the network namespace (vsock to the hypervisor, \
         Bluetooth) or are kernel surface no build needs; netlink stays, it talks only to \
         the kernel of the command's own network namespace (getaddrinfo and ip use it)"),
    refused(SYS_socketpair, ArgNoneOf(0, u32::MAX, &[AF_UNIX]), EAFNOSUPPORT, KERNEL_SURFACE),
    refused(SYS_socketpair, ArgNoneOf(1, SOCKET_TYPE_MASK, &[SOCK_STREAM, SOCK_SEQPACKET]), EPERM,
        "a datagram socket, even one of a pair, sends to any datagram Unix socket by its \
         path; stream and seqpacket pairs stay connected to each other"),
    refused(SYS_io_uring_setup, Always, EPERM, IO_URING),
    refused(SYS_io_uring_enter, Always, EPERM, IO_URING),
    refused(SYS_io_uring_register, Always, EPERM, IO_URING),
    refused(SYS_ptrace, Always, EPERM, OTHER_PROCESSES),
    refused(SYS_process_vm_readv, Always, EPERM, OTHER_PROCESSES),
    refused(SYS_process_vm_writev, Always, EPERM, OTHER_PROCESSES),
    refused(SYS_pidfd_getfd, Always, EPERM, OTHER_PROCESSES),
    refused(SYS_keyctl, Always, EPERM, KEYRINGS),
    refused(SYS_add_key, Always, EPERM, KEYRINGS),
    refused(SYS_request_key, Always, EPERM, KEYRINGS),
    refused(SYS_unshare, ArgHasAny(0, CLONE_NEWUSER), EPERM, USER_NAMESPACES),
    refused(SYS_clone, ArgHasAny(0, CLONE_NEWUSER), EPERM, USER_NAMESPACES),
    refused(SYS_clone3, Always, ENOSYS,
        "its flags are in a structure seccomp cannot read; \"not implemented\" makes libc \
         fall back to clone, whose flags it can"),
    refused(SYS_setns, Always, EPERM, "joins another namespace"),
    refused(SYS_mount, Always, EPERM, MOUNTS),
    refused(SYS_umount2, Always, EPERM, MOUNTS),
    refused(SYS_pivot_root, Always, EPERM, MOUNTS),
    refused(SYS_move_mount, Always, EPERM, MOUNTS),
    refused(SYS_open_tree, Always, EPERM, MOUNTS),
    refused(SYS_OPEN_TREE_ATTR, Always, EPERM, MOUNTS),
    refused(SYS_fsopen, Always, EPERM, MOUNTS),
    refused(SYS_fsconfig, Always, EPERM, MOUNTS),
    refused(SYS_fsmount, Always, EPERM, MOUNTS),
    refused(SYS_fspick, Always, EPERM, MOUNTS),
    refused(SYS_mount_setattr, Always, EPERM, MOUNTS),
    refused(SYS_bpf, Always, EPERM, KERNEL_SURFACE),
    refused(SYS_perf_event_open, Always, EPERM, KERNEL_SURFACE),
    refused(SYS_userfaultfd, Always, EPERM, KERNEL_SURFACE),
    refused(SYS_kexec_load, Always, EPERM, KERNEL_CODE),
    refused(SYS_kexec_file_load, Always, EPERM, KERNEL_CODE),
    refused(SYS_init_module, Always, EPERM, KERNEL_CODE),
    refused(SYS_finit_module, Always, EPERM, KERNEL_CODE),
    refused(SYS_delete_module, Always, EPERM, KERNEL_CODE),
    refused(SYS_open_by_handle_at, Always, EPERM, FILE_HANDLES),
    refused(SYS_name_to_handle_at, Always, EPERM, FILE_HANDLES),
    refused(SYS_ioctl, ArgIs(1, TIOCSTI), EPERM, TERMINAL),
    refused(SYS_ioctl, ArgIs(1, TIOCLINUX), EPERM, TERMINAL),
];

/// Why there is no sandbox where there is no filter: without it, Unix sockets and io_uring
/// reach past any mount or Landlock rule.
pub const NO_FILTER_HERE: &str = "Loopr has no seccomp filter for this architecture (it has \
    one for x86_64 and aarch64), and without one a command reaches the user's Unix sockets";

/// `AUDIT_ARCH_*` of this machine's native ABI: calls of another (32-bit compat) are refused
/// outright, as their numbers mean other calls.
#[cfg(target_arch = "x86_64")]
const NATIVE_ARCH: Option<u32> = Some(0xC000_003E);
#[cfg(target_arch = "aarch64")]
const NATIVE_ARCH: Option<u32> = Some(0xC000_00B7);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const NATIVE_ARCH: Option<u32> = None;

/// Numbers from here up are the x32 ABI's (x86_64 only), which share the native arch: refused,
/// or each of them would get around the table.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// `struct seccomp_data` offsets.
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;
const ARGS_OFFSET: u32 = 16;

const LD_W_ABS: u16 = 0x20;
const ALU_AND_K: u16 = 0x54;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JGE_K: u16 = 0x35;
const JMP_JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;

/// One `struct sock_filter`: code, jump if true, jump if false (instructions skipped), k.
type Instruction = (u16, u8, u8, u32);

/// The filter for this machine's architecture, or `None` where it is not known here.
pub fn filter() -> Option<Vec<u8>> {
    if crate::test_hooks::seccomp_hidden() {
        return None;
    }
    let arch = NATIVE_ARCH?;
    let mut program: Vec<Instruction> = vec![
        (LD_W_ABS, 0, 0, ARCH_OFFSET),
        (JMP_JEQ_K, 1, 0, arch),
        refuse(EPERM),
        (LD_W_ABS, 0, 0, NR_OFFSET),
        (JMP_JGE_K, 0, 1, X32_SYSCALL_BIT),
        refuse(EPERM),
    ];
    for row in REFUSED {
        let test = test(row);
        program.push((LD_W_ABS, 0, 0, NR_OFFSET));
        program.push((JMP_JEQ_K, 0, jump(test.len()), call_number(row.number)));
        program.extend(test);
    }
    program.push((RET_K, 0, 0, RET_ALLOW));
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for (code, jt, jf, k) in program {
        bytes.extend_from_slice(&code.to_ne_bytes());
        bytes.push(jt);
        bytes.push(jf);
        bytes.extend_from_slice(&k.to_ne_bytes());
    }
    Some(bytes)
}

fn refuse(errno: i32) -> Instruction {
    (RET_K, 0, 0, RET_ERRNO | errno.unsigned_abs())
}

/// The instructions after a row's call matched: they return its errno when its arguments say
/// so, else fall through to the next row.
fn test(row: &Refused) -> Vec<Instruction> {
    // Little-endian: the low half of argument `n` comes first.
    let load = |arg: u32| (LD_W_ABS, 0, 0, ARGS_OFFSET + 8 * arg);
    match row.when {
        When::Always => vec![refuse(row.errno)],
        When::ArgIs(arg, value) => vec![load(arg), (JMP_JEQ_K, 0, 1, value), refuse(row.errno)],
        When::ArgHasAny(arg, bits) => {
            vec![load(arg), (JMP_JSET_K, 0, 1, bits), refuse(row.errno)]
        }
        When::ArgNoneOf(arg, mask, allowed) => {
            let mut test = vec![load(arg)];
            if mask != u32::MAX {
                test.push((ALU_AND_K, 0, 0, mask));
            }
            for (index, value) in allowed.iter().enumerate() {
                // An allowed value skips the remaining comparisons and the refusal.
                test.push((JMP_JEQ_K, jump(allowed.len() - index), 0, *value));
            }
            test.push(refuse(row.errno));
            test
        }
    }
}

fn jump(instructions: usize) -> u8 {
    u8::try_from(instructions)
        .unwrap_or_else(|_| unreachable!("a row's test is a few instructions"))
}

fn call_number(number: libc::c_long) -> u32 {
    u32::try_from(number).unwrap_or_else(|_| unreachable!("system call numbers are small"))
}

#[cfg(test)]
mod tests;
