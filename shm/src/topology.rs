//! The node's topology through hwloc, and binding a process to a core and
//! its memory to that core's NUMA node.
//!
//! Segments are placed by first touch: the owner of a segment (the receiver
//! of the windows and rings in it) creates and touches it after binding, so
//! its pages land on the receiver's NUMA node, where they are read.

use hwloc2::{CpuBindFlags, ObjectType, Topology};

use crate::error::{Result, ShmError};

/// A summary of the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTopology {
    /// Processor packages (sockets).
    pub packages: usize,
    /// NUMA nodes.
    pub numa_nodes: usize,
    /// Cores.
    pub cores: usize,
    /// Hardware threads.
    pub processing_units: usize,
    /// Last-level cache size in bytes, if reported.
    pub last_level_cache: Option<u64>,
}

/// Where a process was bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// Logical index of the core.
    pub core: usize,
    /// OS indices of its hardware threads.
    pub processing_units: Vec<u32>,
    /// OS indices of the NUMA nodes its memory is bound to (empty when the
    /// machine reports none or memory binding failed).
    pub numa_nodes: Vec<u32>,
    /// Why memory was not bound, if it was not.
    pub memory_note: Option<String>,
}

fn load() -> Result<Topology> {
    Topology::new().ok_or_else(|| ShmError::Topology {
        what: "hwloc could not load this machine's topology".into(),
    })
}

fn count(topo: &Topology, t: ObjectType) -> usize {
    topo.objects_with_type(&t).map(|v| v.len()).unwrap_or(0)
}

fn bits(set: &hwloc2::Bitmap) -> Vec<u32> {
    let (first, last) = (set.first(), set.last());
    if first < 0 || last < 0 {
        return Vec::new();
    }
    (first as u32..=last as u32)
        .filter(|&i| set.is_set(i))
        .collect()
}

impl NodeTopology {
    /// Reads the topology.
    ///
    /// # Errors
    ///
    /// [`ShmError::Topology`] when hwloc cannot read it.
    pub fn probe() -> Result<NodeTopology> {
        let topo = load()?;
        let llc = [ObjectType::L3Cache, ObjectType::L2Cache]
            .iter()
            .find_map(|t| {
                topo.objects_with_type(t).ok().and_then(|v| {
                    v.first()
                        .and_then(|o| o.cache_attributes().map(|c| c.size()))
                })
            });
        Ok(NodeTopology {
            packages: count(&topo, ObjectType::Package).max(1),
            // hwloc 2 keeps NUMA nodes at a virtual depth that the hwloc2
            // crate's per-type lookup cannot index; the root's nodeset
            // counts them instead.
            numa_nodes: topo
                .object_at_root()
                .nodeset()
                .map(|n| n.weight().max(1) as usize)
                .unwrap_or(1),
            cores: count(&topo, ObjectType::Core).max(1),
            processing_units: count(&topo, ObjectType::PU).max(1),
            last_level_cache: llc,
        })
    }
}

/// Binds this process to core `local_rank % cores` and its future memory to
/// that core's NUMA node(s). Call before building exchanges so segments are
/// placed there.
///
/// # Errors
///
/// [`ShmError::Topology`] when the topology cannot be read or the
/// binding is refused.
pub fn bind_to_core(local_rank: usize) -> Result<Binding> {
    let mut topo = load()?;
    let cores = topo
        .objects_with_type(&ObjectType::Core)
        .map_err(|e| ShmError::Topology {
            what: format!("no core level: {e:?}"),
        })?;
    if cores.is_empty() {
        return Err(ShmError::Topology {
            what: "hwloc reports no cores".into(),
        });
    }
    let core_index = local_rank % cores.len();
    let core = cores[core_index];
    let cpuset = core.cpuset().ok_or_else(|| ShmError::Topology {
        what: format!("core {core_index} has no cpuset"),
    })?;
    let pus = bits(&cpuset);
    let nodes = core.nodeset().map(|n| bits(&n)).unwrap_or_default();
    topo.set_cpubind(cpuset, CpuBindFlags::CPUBIND_PROCESS)
        .map_err(|e| ShmError::Topology {
            what: format!("binding to core {core_index} failed: {e:?}"),
        })?;
    let (numa_nodes, memory_note) = if nodes.is_empty() {
        (
            nodes,
            Some("hwloc reports no NUMA node for this core".to_string()),
        )
    } else {
        match crate::sys::mempolicy::bind_memory_to(&nodes) {
            Ok(()) => (nodes, None),
            Err(e) => (Vec::new(), Some(format!("set_mempolicy failed: {e}"))),
        }
    };
    Ok(Binding {
        core: core_index,
        processing_units: pus,
        numa_nodes,
        memory_note,
    })
}
