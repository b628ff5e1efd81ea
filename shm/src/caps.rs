//! What this machine lets the channel do, probed once.

use std::sync::Mutex;

/// The node's capabilities relevant to the intra-node channel. (No path
/// needs cross-memory attach or ptrace permission: the get path copies out
/// of the sender's segment, which the receiver maps.)
#[derive(Debug, Clone)]
pub struct ShmCaps {
    /// This process's seccomp mode (0 none, 1 strict, 2 filter).
    pub seccomp_mode: Option<u32>,
    /// The soft RLIMIT_MEMLOCK in bytes (`None`: unlimited).
    pub memlock_limit: Option<u64>,
    /// How peer processes are held, to notice their deaths: `Ok` with
    /// pidfds, or why not, and what stands in for them.
    pub process_handles: Result<(), String>,
}

fn seccomp_mode() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .and_then(|v| v.trim().parse().ok())
}

impl ShmCaps {
    /// Probes the machine. Changes nothing.
    pub fn probe() -> ShmCaps {
        let memlock_limit =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK)
                .ok()
                .and_then(|(soft, _)| (soft != libc::RLIM_INFINITY).then_some(soft));
        ShmCaps {
            seccomp_mode: seccomp_mode(),
            memlock_limit,
            process_handles: crate::sys::process::handles(),
        }
    }
}

static WARNED: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// Reports a warning (through `tracing`) the first time `key` is seen in
/// this process; the same text stays in the exchange's report.
pub(crate) fn warn_once(key: &'static str, message: &str) {
    let mut seen = WARNED.lock().unwrap_or_else(|p| p.into_inner());
    if seen.contains(&key) {
        return;
    }
    seen.push(key);
    tracing::warn!("{message}");
}
