//! The program built from the table, run by a classic BPF interpreter as the kernel would run
//! it, for what the sandbox tests cannot make a real process do (another ABI, stray high
//! bits); `tests/sandbox.rs` runs real calls under both mechanisms.

use super::*;

/// What the program answers for a call: `struct seccomp_data` built from its parts, the
/// program run over it.
fn verdict(nr: u32, arch: u32, args: [u64; 6]) -> u32 {
    let program = filter().expect("a filter for this architecture");
    let mut data = Vec::with_capacity(64);
    data.extend_from_slice(&nr.to_ne_bytes());
    data.extend_from_slice(&arch.to_ne_bytes());
    data.extend_from_slice(&0u64.to_ne_bytes());
    for arg in args {
        data.extend_from_slice(&arg.to_ne_bytes());
    }
    let instructions: Vec<Instruction> = program
        .chunks_exact(8)
        .map(|op| {
            (
                u16::from_ne_bytes([op[0], op[1]]),
                op[2],
                op[3],
                u32::from_ne_bytes([op[4], op[5], op[6], op[7]]),
            )
        })
        .collect();
    let (mut pc, mut a) = (0usize, 0u32);
    loop {
        let (code, jt, jf, k) = instructions[pc];
        pc += 1;
        let branch = |taken: bool| usize::from(if taken { jt } else { jf });
        match code {
            LD_W_ABS => {
                let at = k as usize;
                a = u32::from_ne_bytes(data[at..at + 4].try_into().expect("a word"));
            }
            ALU_AND_K => a &= k,
            JMP_JEQ_K => pc += branch(a == k),
            JMP_JGE_K => pc += branch(a >= k),
            JMP_JSET_K => pc += branch(a & k != 0),
            RET_K => return k,
            other => panic!("unexpected instruction {other:#x}"),
        }
    }
}

fn native(number: libc::c_long, args: [u64; 6]) -> u32 {
    verdict(call_number(number), NATIVE_ARCH.expect("known arch"), args)
}

fn fails_with(errno: i32) -> u32 {
    RET_ERRNO | errno.unsigned_abs()
}

fn args(first: i64, second: i64) -> [u64; 6] {
    [first as u64, second as u64, 0, 0, 0, 0]
}

#[test]
fn ordinary_calls_are_allowed() {
    let thread_flags = libc::CLONE_VM
        | libc::CLONE_FS
        | libc::CLONE_FILES
        | libc::CLONE_SIGHAND
        | libc::CLONE_THREAD
        | libc::CLONE_SYSVSEM;
    for (number, arguments) in [
        (libc::SYS_read, args(0, 0)),
        (libc::SYS_execve, args(0, 0)),
        (
            libc::SYS_socket,
            args(libc::AF_INET.into(), libc::SOCK_STREAM.into()),
        ),
        (
            libc::SYS_socket,
            args(libc::AF_INET6.into(), libc::SOCK_DGRAM.into()),
        ),
        (
            libc::SYS_socket,
            args(libc::AF_NETLINK.into(), libc::SOCK_RAW.into()),
        ),
        (
            libc::SYS_socketpair,
            args(
                libc::AF_UNIX.into(),
                (libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK).into(),
            ),
        ),
        (
            libc::SYS_socketpair,
            args(libc::AF_UNIX.into(), libc::SOCK_SEQPACKET.into()),
        ),
        (libc::SYS_clone, args(libc::SIGCHLD.into(), 0)),
        (libc::SYS_clone, args(thread_flags.into(), 0)),
        (libc::SYS_unshare, args(libc::CLONE_FILES.into(), 0)),
        (libc::SYS_ioctl, args(1, libc::TCGETS as i64)),
    ] {
        assert_eq!(
            native(number, arguments),
            RET_ALLOW,
            "{number} {arguments:?}"
        );
    }
}

/// Arguments no row refuses `number` for, to change one of.
fn allowed_arguments(number: libc::c_long) -> [u64; 6] {
    if number == libc::SYS_socketpair {
        args(libc::AF_UNIX.into(), libc::SOCK_STREAM.into())
    } else {
        args(libc::AF_INET.into(), 0)
    }
}

#[test]
fn every_row_refuses_its_call_with_its_errno() {
    for row in REFUSED {
        assert!(!row.why.is_empty(), "{row:?}");
        let mut arguments = allowed_arguments(row.number);
        match row.when {
            When::Always => {}
            When::ArgIs(arg, value) | When::ArgHasAny(arg, value) => {
                arguments[arg as usize] = value.into();
            }
            // A value none of the allowed ones is, under the mask.
            When::ArgNoneOf(arg, mask, allowed) => {
                arguments[arg as usize] = (0..=mask)
                    .find(|value| !allowed.contains(value))
                    .expect("a refused value")
                    .into();
            }
        }
        assert_eq!(
            native(row.number, arguments),
            fails_with(row.errno),
            "{row:?} {arguments:?}"
        );
    }
}

#[test]
fn unix_and_far_reaching_sockets_are_refused_whatever_the_high_bits_say() {
    let high = 1i64 << 32;
    assert_eq!(
        native(libc::SYS_socket, args(high | i64::from(libc::AF_UNIX), 1)),
        fails_with(libc::EPERM)
    );
    assert_eq!(
        native(libc::SYS_socket, args(libc::AF_VSOCK.into(), 1)),
        fails_with(libc::EAFNOSUPPORT)
    );
    assert_eq!(
        native(
            libc::SYS_socketpair,
            args(
                libc::AF_UNIX.into(),
                (libc::SOCK_DGRAM | libc::SOCK_CLOEXEC).into()
            )
        ),
        fails_with(libc::EPERM)
    );
    // SOCK_RAW pairs are datagram pairs for AF_UNIX.
    assert_eq!(
        native(
            libc::SYS_socketpair,
            args(libc::AF_UNIX.into(), libc::SOCK_RAW.into())
        ),
        fails_with(libc::EPERM)
    );
    assert_eq!(
        native(libc::SYS_ioctl, args(0, high | libc::TIOCSTI as i64)),
        fails_with(libc::EPERM)
    );
    assert_eq!(
        native(
            libc::SYS_clone,
            args((libc::CLONE_NEWUSER | libc::SIGCHLD).into(), 0)
        ),
        fails_with(libc::EPERM)
    );
}

#[test]
fn other_abis_are_refused() {
    let arch = NATIVE_ARCH.expect("known arch");
    // i386's read is 3, the same number as x86_64's close: another ABI means other calls.
    assert_eq!(verdict(3, 0x4000_0003, args(0, 0)), fails_with(libc::EPERM));
    assert_eq!(
        verdict(X32_SYSCALL_BIT | 39, arch, args(0, 0)),
        fails_with(libc::EPERM)
    );
}
