//! Denying system calls to the calling process with a seccomp filter.
//!
//! This exists so tests (and `sode-shm-check deny-cma=1` or `deny-pidfd=1`)
//! can exercise what sode does without them against a real kernel denial
//! rather than a flag.

use std::io;

/// Installs a seccomp filter that makes `process_vm_readv` and
/// `process_vm_writev` fail with `EPERM` in this process and its children.
/// Irreversible for the process.
///
/// # Errors
///
/// The kernel's error when it refuses the filter.
pub fn deny_cross_memory_attach() -> io::Result<()> {
    deny(&[
        (libc::SYS_process_vm_readv, libc::EPERM),
        (libc::SYS_process_vm_writev, libc::EPERM),
    ])
}

/// Installs a seccomp filter that makes `pidfd_open` fail with `ENOSYS` in
/// this process and its children, as a kernel before 5.3 or valgrind 3.19
/// does. Irreversible for the process.
///
/// # Errors
///
/// The kernel's error when it refuses the filter.
pub fn deny_pidfd() -> io::Result<()> {
    deny(&[(libc::SYS_pidfd_open, libc::ENOSYS)])
}

/// Installs a filter that fails each system call of `calls` with its errno.
fn deny(calls: &[(libc::c_long, libc::c_int)]) -> io::Result<()> {
    const RET_ALLOW: u32 = 0x7fff_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    const AUDIT_ARCH_AARCH64: u32 = 0xc000_00b7;
    let arch = if cfg!(target_arch = "x86_64") {
        AUDIT_ARCH_X86_64
    } else {
        AUDIT_ARCH_AARCH64
    };
    let stmt = |code: u16, k: u32| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: JEQ_K,
        jt,
        jf,
        k,
    };
    // seccomp_data.arch at offset 4; a foreign ABI is left alone. Then
    // seccomp_data.nr at offset 0, and per call: if it is this one, return
    // its errno, else go on to the next.
    let mut filter = vec![
        stmt(LD_W_ABS, 4),
        jump(arch, 1, 0),
        stmt(RET_K, RET_ALLOW),
        stmt(LD_W_ABS, 0),
    ];
    for &(nr, errno) in calls {
        filter.push(jump(nr as u32, 0, 1));
        filter.push(stmt(RET_K, RET_ERRNO | errno as u32));
    }
    filter.push(stmt(RET_K, RET_ALLOW));
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `prog` points at `filter`, which outlives the call; the kernel
    // copies the program during prctl.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
