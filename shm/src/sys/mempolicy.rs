//! Binding future memory allocations to NUMA nodes (set_mempolicy(2)); the
//! hwloc crate exposes CPU binding but not memory binding.

use std::io;

const MPOL_BIND: libc::c_int = 2;

/// Restricts this thread's future allocations to `nodes` (OS indices).
pub(crate) fn bind_memory_to(nodes: &[u32]) -> io::Result<()> {
    let max = nodes.iter().copied().max().unwrap_or(0) as usize;
    let words = max / 64 + 1;
    let mut mask = vec![0u64; words];
    for &n in nodes {
        mask[n as usize / 64] |= 1 << (n % 64);
    }
    // SAFETY: the kernel reads `maxnode` bits from `mask`, which holds
    // `words * 64` bits; nothing else is passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            MPOL_BIND,
            mask.as_ptr(),
            (words * 64) as libc::c_ulong,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
