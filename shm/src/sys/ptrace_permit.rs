//! Letting peers of the same user attach under Yama ptrace_scope=1.

use std::io;

/// Allows any process of this user to read our memory with cross-memory
/// attach, as Open MPI's CMA component does under Yama's "restricted" mode.
/// Only called when ptrace_scope is 1 (otherwise it changes nothing).
pub(crate) fn allow_any_ptracer() -> io::Result<()> {
    // SAFETY: PR_SET_PTRACER takes integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
