//! Traffic and distance matrices for placing a stencil code on a cluster.

// Matrix code: indices read more clearly than iterator chains here.
#![allow(clippy::needless_range_loop)]

use super::qap::Matrix;
use crate::error::{Result, SchedError};

/// The traffic matrix of a 2-D stencil on a px x py process grid (rank =
/// x + px y): `face_bytes` to each of the 4 face neighbours and, with
/// `corners`, `corner_bytes` to the 4 diagonal ones.
///
/// # Errors
///
/// [`SchedError::InvalidMatrix`](crate::SchedError::InvalidMatrix) for an empty grid.
pub fn stencil_traffic(
    px: usize,
    py: usize,
    periodic: bool,
    face_bytes: f64,
    corner_bytes: Option<f64>,
) -> Result<Matrix> {
    if px == 0 || py == 0 {
        return Err(SchedError::InvalidMatrix(
            "the process grid needs at least one process per axis".into(),
        ));
    }
    let n = px * py;
    let mut t = vec![vec![0.0; n]; n];
    let offsets: Vec<(i64, i64, f64)> = [(1, 0), (-1, 0), (0, 1), (0, -1)]
        .iter()
        .map(|&(dx, dy)| (dx, dy, face_bytes))
        .chain(
            corner_bytes
                .into_iter()
                .flat_map(|c| [(1, 1, c), (1, -1, c), (-1, 1, c), (-1, -1, c)]),
        )
        .collect();
    for y in 0..py as i64 {
        for x in 0..px as i64 {
            for &(dx, dy, bytes) in &offsets {
                let (nx, ny) = (x + dx, y + dy);
                let inside = (0..px as i64).contains(&nx) && (0..py as i64).contains(&ny);
                if !inside && !periodic {
                    continue;
                }
                let (nx, ny) = (nx.rem_euclid(px as i64), ny.rem_euclid(py as i64));
                let (me, them) = ((x + px as i64 * y) as usize, (nx + px as i64 * ny) as usize);
                if me != them {
                    t[me][them] += bytes;
                }
            }
        }
    }
    Ok(t)
}

/// Where slots are: `nodes` nodes of `numa_per_node` NUMA domains of
/// `cores_per_numa` cores. Slots are numbered in launch order, and the
/// launcher deals them out to the nodes in turn (slot s on node s mod nodes),
/// as `--map-by node` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Locality {
    /// Nodes.
    pub nodes: usize,
    /// NUMA domains per node.
    pub numa_per_node: usize,
    /// Cores per NUMA domain.
    pub cores_per_numa: usize,
}

impl Locality {
    /// Slots: one per core.
    pub fn slots(&self) -> usize {
        self.nodes * self.numa_per_node * self.cores_per_numa
    }
    /// (node, NUMA domain) of a slot.
    pub fn place(&self, slot: usize) -> (usize, usize) {
        (slot % self.nodes, (slot / self.nodes) / self.cores_per_numa)
    }
}

/// Distances between slots: 0 on the same core, 1 in one NUMA domain, 2
/// across NUMA domains of a node, `network` between nodes.
pub fn topology_distance(locality: &Locality, network: f64) -> Matrix {
    let n = locality.slots();
    (0..n)
        .map(|a| {
            (0..n)
                .map(|b| {
                    let ((na, ma), (nb, mb)) = (locality.place(a), locality.place(b));
                    if a == b {
                        0.0
                    } else if na != nb {
                        network
                    } else if ma != mb {
                        2.0
                    } else {
                        1.0
                    }
                })
                .collect()
        })
        .collect()
}

/// The hostname-sorted placement: ranks in order fill one node after the
/// other (rank i gets the i-th slot when slots are sorted by node).
pub fn hostname_placement(locality: &Locality) -> Vec<usize> {
    let mut slots: Vec<usize> = (0..locality.slots()).collect();
    slots.sort_by_key(|&s| (locality.place(s).0, s));
    slots
}
