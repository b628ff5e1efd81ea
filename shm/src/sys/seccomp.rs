//! Denying cross-memory attach to the calling process with a seccomp filter.
//!
//! This exists so tests (and `sode-shm-check deny-cma=1`) can exercise the
//! fallback against a real kernel denial rather than a flag.

use std::io;

/// Installs a seccomp filter that makes `process_vm_readv` and
/// `process_vm_writev` fail with `EPERM` in this process and its children.
/// Irreversible for the process.
///
/// # Errors
///
/// The kernel's error when it refuses the filter.
pub fn deny_cross_memory_attach() -> io::Result<()> {
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
    let deny = RET_ERRNO | libc::EPERM as u32;
    let filter = [
        // seccomp_data.arch at offset 4; a foreign ABI is left alone.
        stmt(LD_W_ABS, 4),
        jump(arch, 1, 0),
        stmt(RET_K, RET_ALLOW),
        // seccomp_data.nr at offset 0.
        stmt(LD_W_ABS, 0),
        jump(libc::SYS_process_vm_readv as u32, 2, 0),
        jump(libc::SYS_process_vm_writev as u32, 1, 0),
        stmt(RET_K, RET_ALLOW),
        stmt(RET_K, deny),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
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
