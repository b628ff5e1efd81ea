//! What this machine lets the channel do, probed once, with the reason when
//! something is unavailable.

use std::io::IoSliceMut;
use std::sync::Mutex;

use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;

/// Whether a feature can be used, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// Usable.
    Available,
    /// Not usable, with the reason and what to do.
    Unavailable(String),
}

impl Availability {
    /// True when usable.
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available)
    }
}

/// The node's capabilities relevant to the intra-node channel.
#[derive(Debug, Clone)]
pub struct ShmCaps {
    /// Cross-memory attach (`process_vm_readv`), needed by the get path.
    pub cross_memory_attach: Availability,
    /// `kernel.yama.ptrace_scope`, if Yama is present.
    pub yama_ptrace_scope: Option<u32>,
    /// This process's seccomp mode (0 none, 1 strict, 2 filter).
    pub seccomp_mode: Option<u32>,
    /// The soft RLIMIT_MEMLOCK in bytes (`None`: unlimited).
    pub memlock_limit: Option<u64>,
    /// Notes on what the probe changed (e.g. PR_SET_PTRACER under Yama 1).
    pub notes: Vec<String>,
}

fn read_number(path: &str) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn seccomp_mode() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The setting that forbids letting peers attach (`off`).
pub const PTRACE_VAR: &str = "SODE_SHM_PTRACE";

/// Whether peers should be let attach for the get path: only where Yama's
/// scope 1 would stop them, and not when `setting` (from `SODE_SHM_PTRACE`)
/// is `off`.
pub(crate) fn should_allow_attach(yama: Option<u32>, setting: Option<&str>) -> bool {
    yama == Some(1) && setting.is_none_or(|v| v != "off")
}

/// Reads `len` bytes at `addr` in process `pid` into `dst`.
pub(crate) fn cma_read(pid: i32, addr: u64, dst: &mut [u8]) -> nix::Result<usize> {
    let len = dst.len();
    let mut local = [IoSliceMut::new(dst)];
    let remote = [RemoteIoVec {
        base: addr as usize,
        len,
    }];
    process_vm_readv(Pid::from_raw(pid), &mut local, &remote)
}

/// Explains a cross-memory-attach failure.
pub(crate) fn cma_denied_reason(err: nix::Error, whose: &str) -> String {
    let seccomp = seccomp_mode();
    let yama = read_number("/proc/sys/kernel/yama/ptrace_scope");
    let mut why = format!("process_vm_readv of {whose} failed with {err}");
    if err == nix::Error::EPERM {
        if seccomp == Some(2) {
            why.push_str(
                "; a seccomp filter is active in this process (container or sandbox profile): allow process_vm_readv in it",
            );
        } else if let Some(scope) = yama.filter(|s| *s >= 1) {
            why.push_str(&format!(
                "; Yama ptrace_scope={scope} restricts attach: set kernel.yama.ptrace_scope=0 (sysctl), or run the ranks as children of one launcher"
            ));
        } else {
            why.push_str("; the peer runs as another user or is not dumpable: run all ranks of a node as one user");
        }
    } else if err == nix::Error::ENOSYS {
        why.push_str("; the kernel lacks CONFIG_CROSS_MEMORY_ATTACH");
    }
    why
}

impl ShmCaps {
    /// Lets processes of the same user read this one's memory (the get
    /// path) under Yama ptrace_scope=1, as Open MPI does
    /// (PR_SET_PTRACER_ANY), once; only called for exchanges that may use
    /// the get path, and refused with `SODE_SHM_PTRACE=off` (the get path
    /// then falls back to eager, saying why). Records what it did in
    /// `notes`.
    pub fn allow_peers_to_attach(&mut self) {
        let setting = std::env::var(PTRACE_VAR).ok();
        if !should_allow_attach(self.yama_ptrace_scope, setting.as_deref())
            || self.notes.iter().any(|n| n.contains("PR_SET_PTRACER"))
        {
            return;
        }
        match crate::sys::ptrace_permit::allow_any_ptracer() {
            Ok(()) => self.notes.push(
                "Yama ptrace_scope=1: allowed same-user peers to attach for the get path (PR_SET_PTRACER_ANY; SODE_SHM_PTRACE=off refuses)".into(),
            ),
            Err(e) => self.notes.push(format!("PR_SET_PTRACER failed: {e}")),
        }
    }

    /// Probes the machine. Changes nothing: whether peers may attach to
    /// this process is decided by [`ShmCaps::allow_peers_to_attach`], when
    /// an exchange may use the get path.
    pub fn probe() -> ShmCaps {
        let yama = read_number("/proc/sys/kernel/yama/ptrace_scope");
        let notes = Vec::new();
        let probe = 0x5eed_5eed_u64.to_le_bytes();
        let mut got = [0u8; 8];
        let cross_memory_attach = if yama == Some(3) {
            Availability::Unavailable("Yama ptrace_scope=3 forbids all attach until reboot".into())
        } else {
            match cma_read(std::process::id() as i32, probe.as_ptr() as u64, &mut got) {
                Ok(8) if got == probe => Availability::Available,
                Ok(n) => Availability::Unavailable(format!(
                    "process_vm_readv returned {n} bytes of 8 on this process"
                )),
                Err(e) => Availability::Unavailable(cma_denied_reason(e, "this process")),
            }
        };
        let memlock_limit =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK)
                .ok()
                .and_then(|(soft, _)| (soft != libc::RLIM_INFINITY).then_some(soft));
        ShmCaps {
            cross_memory_attach,
            yama_ptrace_scope: yama,
            seccomp_mode: seccomp_mode(),
            memlock_limit,
            notes,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_let_attach_only_under_yama_1_and_not_when_refused() {
        assert!(should_allow_attach(Some(1), None));
        assert!(should_allow_attach(Some(1), Some("on")));
        assert!(!should_allow_attach(Some(1), Some("off")));
        for scope in [None, Some(0), Some(2), Some(3)] {
            assert!(!should_allow_attach(scope, None), "{scope:?}");
        }
        // Probing changes nothing.
        assert!(ShmCaps::probe()
            .notes
            .iter()
            .all(|n| !n.contains("PR_SET_PTRACER")));
    }
}
