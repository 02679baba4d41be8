//! A seccomp filter for sandboxed commands: no `socket(AF_UNIX, ...)`. A read-only mount does
//! not stop a process from connecting to a Unix socket on it, and a user's sockets (the
//! session bus, a Neovim server, ssh-agent, docker) run commands outside any sandbox. Pipes
//! and `socketpair` keep working; so does the network when it is allowed.
//!
//! The program is classic BPF, as `seccomp_export_bpf` writes it and `bwrap --seccomp` reads
//! it: an array of `struct sock_filter` in native byte order.

/// `struct seccomp_data` offsets.
const ARCH_OFFSET: u32 = 4;
const NR_OFFSET: u32 = 0;
/// The low half of `args[0]` (little-endian machines).
const ARG0_OFFSET: u32 = 16;

const LD_W_ABS: u16 = 0x20;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;

const RET_ALLOW: u32 = 0x7fff_0000;
/// `SECCOMP_RET_ERRNO | EPERM`: "Operation not permitted".
const RET_EPERM: u32 = 0x0005_0000 | 1;
const AF_UNIX: u32 = 1;
/// Syscall numbers from here up are another ABI (x32), which would get around the filter.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

#[cfg(target_arch = "x86_64")]
const NATIVE: Option<(u32, u32)> = Some((0xC000_003E, 41));
#[cfg(target_arch = "aarch64")]
const NATIVE: Option<(u32, u32)> = Some((0xC000_00B7, 198));
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const NATIVE: Option<(u32, u32)> = None;

/// The filter for this machine's architecture, or `None` where it is not known here.
pub fn unix_socket_filter() -> Option<Vec<u8>> {
    let (arch, socket) = NATIVE?;
    // (code, jump if true, jump if false, constant); jumps count instructions skipped.
    let program: [(u16, u8, u8, u32); 9] = [
        (LD_W_ABS, 0, 0, ARCH_OFFSET),
        // Another architecture's calls (32-bit compat) are refused outright.
        (JMP_JEQ_K, 1, 0, arch),
        (RET_K, 0, 0, RET_EPERM),
        (LD_W_ABS, 0, 0, NR_OFFSET),
        (JMP_JGE_K, 3, 0, X32_SYSCALL_BIT),
        (JMP_JEQ_K, 0, 3, socket),
        (LD_W_ABS, 0, 0, ARG0_OFFSET),
        (JMP_JEQ_K, 0, 1, AF_UNIX),
        (RET_K, 0, 0, RET_EPERM),
    ];
    let mut bytes = Vec::with_capacity((program.len() + 1) * 8);
    for (code, jt, jf, k) in program
        .iter()
        .chain(std::iter::once(&(RET_K, 0, 0, RET_ALLOW)))
    {
        bytes.extend_from_slice(&code.to_ne_bytes());
        bytes.push(*jt);
        bytes.push(*jf);
        bytes.extend_from_slice(&k.to_ne_bytes());
    }
    Some(bytes)
}
