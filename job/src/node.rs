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
        }
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
}
