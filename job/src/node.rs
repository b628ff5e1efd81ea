//! Which machine a rank runs on.

use serde::{Deserialize, Serialize};

use crate::auth::{hex, unhex};
use crate::error::Result;
use crate::wire::{Reader, Writer};

/// Which machine a rank runs on: ranks with equal identities share memory.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeId {
    /// The host name.
    pub hostname: String,
    /// The kernel's boot id (tells apart containers or VMs with one name).
    pub boot_id: String,
    /// Which of the machine's processes can map each other's shared memory
    /// as sode does ([`NodeId::local`]): ranks of one machine that differ
    /// in it are on different nodes, and reach each other by network.
    #[serde(default)]
    pub shm_domain: u64,
}

impl NodeId {
    /// This machine's identity, and this process's shared-memory domain:
    /// the processes of one PID namespace (a peer's segment is opened
    /// through `/proc/<pid>`) that see one shared-memory directory
    /// (`SODE_SHM_DIR`, else `/dev/shm`). A container started for each
    /// rank with a PID namespace or a `/dev/shm` of its own (apptainer
    /// `--pid` or `--containall`) is another node for sode. So is a
    /// process that is not dumpable, to peers without `CAP_SYS_PTRACE`:
    /// the kernel lets no such peer open its files through `/proc`.
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
            shm_domain: shm_domain(),
        }
    }

    /// Writes this identity into a setup record ([`crate::wire`]): the host
    /// name, then the boot id, as its 16 bytes when it is a UUID as the
    /// kernel writes it (the usual case), else as text, then the
    /// shared-memory domain.
    pub(crate) fn write(&self, w: &mut Writer) -> Result<()> {
        w.short(self.hostname.as_bytes(), "the host name")?;
        match uuid_bytes(&self.boot_id) {
            Some(b) => {
                w.u8(1).bytes(&b);
            }
            None => {
                w.u8(0).short(self.boot_id.as_bytes(), "the boot id")?;
            }
        }
        w.bytes(&self.shm_domain.to_le_bytes());
        Ok(())
    }

    /// What [`NodeId::write`] wrote.
    pub(crate) fn read(r: &mut Reader<'_>) -> Option<NodeId> {
        let hostname = r.text()?;
        let boot_id = match r.u8()? {
            0 => r.text()?,
            1 => uuid_text(&r.array()?),
            _ => return None,
        };
        let shm_domain = u64::from_le_bytes(r.array()?);
        Some(NodeId {
            hostname,
            boot_id,
            shm_domain,
        })
    }

    /// Whether `other` runs on this machine (its name and boot), whatever
    /// its shared-memory domain.
    pub fn same_machine(&self, other: &NodeId) -> bool {
        self.hostname == other.hostname && self.boot_id == other.boot_id
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

/// Eight bytes of a digest of this process's PID namespace and its
/// shared-memory directory (see [`NodeId::local`]), and of its pid when
/// its peers cannot open its files ([`closed_to_peers`]); a part that
/// cannot be read counts as zeros.
fn shm_domain() -> u64 {
    use sha2::Digest;
    use std::os::unix::fs::MetadataExt;
    let identity = |path: &std::path::Path| {
        std::fs::metadata(path)
            .map(|m| (m.dev(), m.ino()))
            .unwrap_or_default()
    };
    let dir = std::env::var_os("SODE_SHM_DIR").unwrap_or_else(|| "/dev/shm".into());
    let mut h = sha2::Sha256::new();
    for (dev, ino) in [
        identity("/proc/self/ns/pid".as_ref()),
        identity(dir.as_ref()),
    ] {
        h.update(dev.to_le_bytes());
        h.update(ino.to_le_bytes());
    }
    if closed_to_peers() {
        h.update(std::process::id().to_le_bytes());
    }
    let mut out = [0; 8];
    out.copy_from_slice(&h.finalize()[..8]);
    u64::from_le_bytes(out)
}

/// Whether the ranks of this process's node cannot open its files through
/// `/proc/<pid>/fd` (where they open its shared-memory segment): it is not
/// dumpable (it runs a binary its user may not read, gained privileges,
/// or called `prctl(PR_SET_DUMPABLE, 0)`), and its peers, taken to hold
/// what it holds, lack `CAP_SYS_PTRACE`. Said once, since its ranks then
/// reach it by network.
fn closed_to_peers() -> bool {
    static WARNED: std::sync::Once = std::sync::Once::new();
    if nix::sys::prctl::get_dumpable().unwrap_or(true) || may_trace() {
        return false;
    }
    WARNED.call_once(|| tracing::info!(
        "this process is not dumpable (it runs a binary its user may not read, gained privileges, or called prctl(PR_SET_DUMPABLE, 0)), so the kernel lets no other rank open its shared memory: the ranks of its node reach it by network; make the program readable by its user (chmod u+r) to exchange through shared memory"
    ));
    true
}

/// Whether this process holds `CAP_SYS_PTRACE` (bit 19 of `CapEff` in
/// `/proc/self/status`).
fn may_trace() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let hex = s.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
            u64::from_str_radix(hex.trim(), 16).ok()
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_PTRACE) != 0)
}

/// The capability's number (`linux/capability.h`).
const CAP_SYS_PTRACE: u32 = 19;

/// The 16 bytes of a UUID written as the kernel writes one (lowercase hex,
/// dashed 8-4-4-4-12); none for any other text, which would not read back
/// the same from [`uuid_text`].
fn uuid_bytes(text: &str) -> Option<[u8; 16]> {
    let bytes: [u8; 16] = unhex(&text.replace('-', ""))?.try_into().ok()?;
    (uuid_text(&bytes) == text).then_some(bytes)
}

/// A UUID's text from its 16 bytes, as the kernel writes it.
fn uuid_text(bytes: &[u8; 16]) -> String {
    let h = hex(bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Which machine each rank of a job runs on, as an index into the job's
/// distinct machines: a table of the whole job costs each rank 4 bytes a
/// rank, however long the machines' names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Nodes {
    of_rank: Vec<u32>,
    ids: Vec<NodeId>,
}

impl Nodes {
    /// The table of ranks on `ids[r]`, rank by rank.
    pub(crate) fn new(ids: impl IntoIterator<Item = NodeId>) -> Nodes {
        let mut index = std::collections::HashMap::new();
        let mut table = Nodes::default();
        for id in ids {
            let next = table.ids.len() as u32;
            let i = *index.entry(id).or_insert_with_key(|id| {
                table.ids.push(id.clone());
                next
            });
            table.of_rank.push(i);
        }
        table
    }

    /// Rank `rank`'s machine.
    pub(crate) fn get(&self, rank: usize) -> Option<&NodeId> {
        self.index(rank).map(|i| &self.ids[i])
    }

    /// Rank `rank`'s machine as an index, below [`Nodes::count`].
    pub(crate) fn index(&self, rank: usize) -> Option<usize> {
        self.of_rank.get(rank).map(|&i| i as usize)
    }

    /// The job's ranks.
    pub(crate) fn ranks(&self) -> usize {
        self.of_rank.len()
    }

    /// The job's distinct machines.
    pub(crate) fn count(&self) -> usize {
        self.ids.len()
    }

    /// The table with rank `r` of the new numbering on `order[r]`'s machine.
    pub(crate) fn renumbered(&self, order: &[usize]) -> Nodes {
        Nodes {
            of_rank: order.iter().map(|&r| self.of_rank[r]).collect(),
            ids: self.ids.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> NodeId {
        NodeId {
            hostname: name.into(),
            boot_id: format!("boot of {name}"),
            shm_domain: 7,
        }
    }

    #[test]
    fn an_identity_reads_back_and_a_kernel_boot_id_takes_16_bytes() {
        let here = NodeId::local();
        let odd = NodeId {
            hostname: "h".into(),
            boot_id: "0E6A9F4C-2B1D-4C3E-9F00-1234567890AB".into(),
            shm_domain: u64::MAX,
        };
        let short = NodeId {
            hostname: "h".into(),
            boot_id: String::new(),
            shm_domain: 0,
        };
        for id in [here, odd.clone(), short] {
            let mut w = Writer::new(0);
            id.write(&mut w).unwrap();
            let rec = w.finish();
            let mut r = Reader::new(&rec, 0).unwrap();
            assert_eq!(NodeId::read(&mut r).as_ref(), Some(&id));
            assert_eq!(r.end(()), Some(()));
        }
        let kernel = "0e6a9f4c-2b1d-4c3e-9f00-1234567890ab";
        assert_eq!(uuid_text(&uuid_bytes(kernel).unwrap()), kernel);
        assert_eq!(uuid_bytes(&odd.boot_id), None, "uppercase stays text");
        assert_eq!(uuid_bytes("0e6a9f4c-2b1d-4c3e-9f00-1234567890a"), None);
        assert_eq!(uuid_bytes("0e6a9f4c+2b1d-4c3e-9f00-1234567890ab"), None);
    }

    #[test]
    fn a_job_table_keeps_each_machine_once() {
        let t = Nodes::new(["a", "b", "a", "c", "b"].map(id));
        assert_eq!((t.ranks(), t.count()), (5, 3));
        assert_eq!(t.get(2), Some(&id("a")));
        assert_eq!(t.index(4), t.index(1));
        assert_ne!(t.index(3), t.index(0));
        assert_eq!(t.get(5), None);
        let r = t.renumbered(&[3, 0]);
        assert_eq!((r.get(0), r.get(1)), (Some(&id("c")), Some(&id("a"))));
    }

    /// One machine, two shared-memory domains (a container per rank with
    /// its own PID namespace): two nodes.
    #[test]
    fn one_machine_in_two_shared_memory_domains_is_two_nodes() {
        let other = NodeId {
            shm_domain: 8,
            ..id("a")
        };
        let t = Nodes::new([id("a"), other.clone(), id("a")]);
        assert_eq!(t.count(), 2);
        assert_ne!(t.index(1), t.index(0));
        assert_eq!(t.index(2), t.index(0));
        assert_eq!(NodeId::local().shm_domain, NodeId::local().shm_domain);
    }
}
