//! Reordered ranks, as `MPI_Cart_create(..., reorder = 1)`: the ranks of a
//! decomposition are renumbered so that the neighbours that exchange the
//! most bytes share a node. The traffic comes from the decomposition, the
//! distances from where the ranks run (same node or not), and the
//! assignment from the QAP solver of `sode_scheduler::placement`, started
//! from launch order so it is never worse than it. Rank 0 chooses and every
//! rank adopts its choice, so the ranks cannot disagree.

use std::time::Duration;

use sode_job::World;
use sode_scheduler::placement::{Matrix, Qap, SolverOptions};

use crate::decomp::Decomposition;
use crate::error::{HaloError, Result};

/// Distance between two ranks of one node, and of different nodes: a
/// byte between nodes costs this many times a byte inside one.
const SAME_NODE: f64 = 1.0;
const OTHER_NODE: f64 = 10.0;

/// A world renumbered for a decomposition, and what it gained.
#[derive(Debug, Clone)]
pub struct Reordered {
    /// The renumbered world: its rank `r` owns block `r` of the
    /// decomposition.
    pub world: World,
    /// `order[r]`: the launch rank (of the world given) that is now rank r.
    pub order: Vec<usize>,
    /// Bytes per exchange, over the whole job, between ranks on different
    /// nodes in launch order.
    pub launch_bytes_between_nodes: f64,
    /// The same in the new order.
    pub bytes_between_nodes: f64,
}

impl Reordered {
    /// Whether any rank got a new number.
    pub fn moved(&self) -> bool {
        self.order.iter().enumerate().any(|(r, &l)| r != l)
    }
}

/// Renumbers `world`'s ranks for `decomp`, each cell `cell_bytes` long
/// (all fields together); collective. The identity when no order moves
/// fewer bytes between nodes.
pub fn reorder(
    world: &World,
    decomp: &Decomposition,
    cell_bytes: usize,
    timeout: Duration,
) -> Result<Reordered> {
    let n = world.size();
    // Every rank takes part in the allgather, even with bad input, so that
    // all fail alike rather than some waiting for the others.
    let valid = decomp.ranks() == n;
    let traffic = if valid {
        traffic(decomp, cell_bytes)
    } else {
        Vec::new()
    };
    let node: Vec<_> = (0..n).map(|r| world.node_of(r).cloned()).collect();
    let between = |order: &[usize]| bytes_between_nodes(&traffic, &node, order);
    let identity: Vec<usize> = (0..n).collect();
    let card = Card {
        described: valid.then(|| format!("{decomp:?} {cell_bytes}")),
        order: match (world.rank(), valid) {
            (0, true) => choose(&traffic, &node, &between)?,
            _ => Vec::new(),
        },
    };
    let body = serde_json::to_vec(&card).map_err(|e| HaloError::Usage {
        op: "reorder",
        why: format!("the order does not serialise: {e}"),
    })?;
    let all = world
        .allgather(&body, timeout)
        .map_err(|source| HaloError::Barrier {
            source: Box::new(source),
        })?;
    let cards: Vec<Card> = all
        .iter()
        .map(|b| serde_json::from_slice(b))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| HaloError::Usage {
            op: "reorder",
            why: format!("a rank's reorder card does not parse: {e}"),
        })?;
    check_cards(&cards, decomp.ranks(), n)?;
    let order = cards[0].order.clone();
    let renumbered = world
        .renumbered(&order)
        .map_err(|source| HaloError::Barrier {
            source: Box::new(source),
        })?;
    let launch_bytes_between_nodes = between(&identity);
    let bytes_between_nodes = between(&order);
    tracing::debug!(
        ?order,
        launch_bytes_between_nodes,
        bytes_between_nodes,
        "reordered the ranks"
    );
    Ok(Reordered {
        world: renumbered,
        order,
        launch_bytes_between_nodes,
        bytes_between_nodes,
    })
}

/// What each rank contributes: the decomposition and cell size it
/// described, as text (none when its decomposition does not fit the job),
/// and rank 0 its order.
#[derive(serde::Serialize, serde::Deserialize)]
struct Card {
    described: Option<String>,
    order: Vec<usize>,
}

/// Fails, on every rank alike, unless every rank described the same
/// decomposition of this job's `n` ranks (`ranks` is this rank's).
fn check_cards(cards: &[Card], ranks: usize, n: usize) -> Result<()> {
    let usage = |why: String| HaloError::Usage { op: "reorder", why };
    let unfit: Vec<usize> = (0..n).filter(|&r| cards[r].described.is_none()).collect();
    if !unfit.is_empty() {
        return Err(usage(format!(
            "ranks {unfit:?} gave no decomposition of this job's {n} ranks (a bad argument, or a grid of another size: this rank's has {ranks} ranks)"
        )));
    }
    let differ: Vec<usize> = (1..n)
        .filter(|&r| cards[r].described != cards[0].described)
        .collect();
    if !differ.is_empty() {
        return Err(usage(format!(
            "ranks {differ:?} described another decomposition or cell size than rank 0: every rank must pass the same"
        )));
    }
    if cards[0].order.len() != n {
        return Err(usage(format!(
            "rank 0 chose an order of {} ranks for a job of {n}",
            cards[0].order.len()
        )));
    }
    Ok(())
}

/// Jobs up to this many ranks are placed by the QAP search; larger ones
/// (whose dense matrices and cubic search would cost seconds to minutes)
/// by filling the nodes in turn.
const QAP_MAX: usize = 256;

/// Rank 0's choice, `order[new] = launch rank`: the better of launch
/// order and the best placement found, by bytes between nodes.
fn choose<N: Eq + std::hash::Hash>(
    traffic: &Traffic,
    node: &[N],
    between: &dyn Fn(&[usize]) -> f64,
) -> Result<Vec<usize>> {
    let n = node.len();
    let identity: Vec<usize> = (0..n).collect();
    // Launch ranks grouped by node, nodes in order of their first rank,
    // launch order within: near the best for a decomposition numbered
    // along its axes.
    let mut first = std::collections::HashMap::new();
    for (r, nd) in node.iter().enumerate() {
        first.entry(nd).or_insert(r);
    }
    let mut node_filling = identity.clone();
    node_filling.sort_by_key(|&r| (first[&node[r]], r));
    let best = if n <= QAP_MAX {
        search(traffic, node, &[identity.clone(), node_filling])?
    } else {
        node_filling
    };
    Ok(if between(&best) < between(&identity) {
        best
    } else {
        identity
    })
}

/// The QAP search, bounded to about SWAP_BUDGET swap evaluations (under
/// a second), from each of `starts`.
fn search<N: Eq>(traffic: &Traffic, node: &[N], starts: &[Vec<usize>]) -> Result<Vec<usize>> {
    const SWAP_BUDGET: usize = 20_000_000;
    let n = node.len();
    let mut dense = vec![vec![0.0; n]; n];
    for (a, row) in traffic.iter().enumerate() {
        for &(b, bytes) in row {
            dense[a][b] += bytes;
        }
    }
    let usage = |e: sode_scheduler::SchedError| HaloError::Usage {
        op: "reorder",
        why: e.to_string(),
    };
    let qap = Qap::new(dense, distance(node)).map_err(usage)?;
    let options = SolverOptions {
        restarts: if n <= 32 { 4 } else { 1 },
        tabu_iterations: (SWAP_BUDGET / (n * n).max(1)).clamp(1, 50 * n.max(1)),
        seed: 1,
    };
    Ok(qap.solve_from(starts, &options).map_err(usage)?.permutation)
}

/// Per rank, the ranks it sends to and the bytes per exchange.
type Traffic = Vec<Vec<(usize, f64)>>;

/// Distances between the ranks of launch order, from their nodes.
fn distance<N: PartialEq>(node: &[N]) -> Matrix {
    let n = node.len();
    (0..n)
        .map(|a| {
            (0..n)
                .map(|b| match (a == b, node[a] == node[b]) {
                    (true, _) => 0.0,
                    (false, true) => SAME_NODE,
                    (false, false) => OTHER_NODE,
                })
                .collect()
        })
        .collect()
}

/// Bytes per exchange between ranks on different nodes when new rank `r`
/// runs where launch rank `order[r]` does.
fn bytes_between_nodes<N: PartialEq>(traffic: &Traffic, node: &[N], order: &[usize]) -> f64 {
    let mut bytes = 0.0;
    for (a, row) in traffic.iter().enumerate() {
        for &(b, t) in row {
            if node[order[a]] != node[order[b]] {
                bytes += t;
            }
        }
    }
    bytes
}

/// What each rank sends its neighbours per exchange.
fn traffic(decomp: &Decomposition, cell_bytes: usize) -> Traffic {
    (0..decomp.ranks())
        .map(|a| {
            decomp
                .neighbours(a)
                .into_iter()
                .filter(|nb| nb.rank != a)
                .map(|nb| (nb.rank, (nb.send.cells() * cell_bytes) as f64))
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decomp::Stencil;

    #[test]
    fn traffic_of_a_chain() {
        let d = Decomposition::new(&[40, 4], &[4, 1], &[false, false], 1, Stencil::Faces).unwrap();
        let t = traffic(&d, 8);
        // Faces of 4 cells of 8 bytes, to each neighbour of the chain.
        assert_eq!(t[0], vec![(1, 32.0)]);
        assert_eq!(t[1].len(), 2);
        assert!(t[1].contains(&(0, 32.0)) && t[1].contains(&(2, 32.0)));
        assert_eq!(t[3], vec![(2, 32.0)]);
    }

    #[test]
    fn a_scrambled_chain_is_put_back_in_node_order() {
        let d = Decomposition::new(&[40, 4], &[4, 1], &[false, false], 1, Stencil::Faces).unwrap();
        let t = traffic(&d, 8);
        let identity: Vec<usize> = (0..4).collect();
        // Launch order puts ranks 0 and 2 on node A, 1 and 3 on node B:
        // every link of the chain 0-1-2-3 crosses.
        let scrambled = ["a", "b", "a", "b"];
        let between = |o: &[usize]| bytes_between_nodes(&t, &scrambled, o);
        let order = choose(&t, &scrambled, &between).unwrap();
        assert_eq!(between(&identity), 6.0 * 32.0, "three links, both ways");
        assert_eq!(between(&order), 2.0 * 32.0, "one link crosses: {order:?}");
        // Already in node order: kept as launched.
        let sorted = ["a", "a", "b", "b"];
        let between = |o: &[usize]| bytes_between_nodes(&t, &sorted, o);
        assert_eq!(choose(&t, &sorted, &between).unwrap(), identity);
    }

    #[test]
    fn large_jobs_are_placed_quickly() {
        // 1024 ranks dealt round-robin to 4 nodes: the QAP is skipped.
        let d =
            Decomposition::new(&[512, 512], &[32, 32], &[true, true], 1, Stencil::Full).unwrap();
        let t = traffic(&d, 8);
        let node: Vec<usize> = (0..1024).map(|r| r % 4).collect();
        let between = |o: &[usize]| bytes_between_nodes(&t, &node, o);
        let identity: Vec<usize> = (0..1024).collect();
        let t0 = std::time::Instant::now();
        let order = choose(&t, &node, &between).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert!(between(&order) < between(&identity) / 4.0);
    }
}
