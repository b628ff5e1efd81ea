//! Which machine a rank runs on.

use serde::{Deserialize, Serialize};

/// Which machine a rank runs on: ranks with equal identities share memory.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeId {
    /// The host name.
    pub hostname: String,
    /// The kernel's boot id (tells apart containers or VMs with one name).
    pub boot_id: String,
}

impl NodeId {
    /// This machine's identity.
    pub fn local() -> NodeId {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let hostname = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| read("/proc/sys/kernel/hostname"));
        NodeId {
            hostname,
            boot_id: read("/proc/sys/kernel/random/boot_id"),
        }
    }

    /// Eight bytes that tell this machine from others (a digest of its
    /// name and boot id), for records every rank of a job receives.
    pub(crate) fn digest(&self) -> [u8; 8] {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(self.hostname.as_bytes());
        h.update([0]);
        h.update(self.boot_id.as_bytes());
        let mut out = [0; 8];
        out.copy_from_slice(&h.finalize()[..8]);
        out
    }
}
