//! MC-MPI's bounding graph: each process connects to its beta - 1 nearest
//! peers and, in each exponentially wider band of farther peers, to beta
//! peers drawn with probability proportional to traffic; connections a
//! firewall forbids fail. Routes over it by distance vector (RTT metric), and
//! the spanning tree that carries connection requests.

// Matrix code: indices read more clearly than iterator chains here.
#![allow(clippy::needless_range_loop)]

use super::qap::Matrix;
use crate::error::{Result, SchedError};
use crate::patterns::SplitMix64;

/// The bounding graph and what is computed over it.
#[derive(Debug, Clone)]
pub struct BoundingGraph {
    /// Connections that succeeded, as (initiator, acceptor).
    pub connections: Vec<(usize, usize)>,
    /// Connections attempted (including those a firewall refused).
    pub attempted: usize,
    /// Shortest RTT route length between every pair (infinite: unreachable).
    pub route_latency: Matrix,
    /// `next_hop[p][q]`: where p forwards a message for q.
    pub next_hop: Vec<Vec<Option<usize>>>,
    /// The spanning tree rooted at process 0: each process's parent.
    pub tree_parent: Vec<Option<usize>>,
    /// True when every process can reach every other.
    pub connected: bool,
}

impl BoundingGraph {
    /// Mean connections per process (each counted at both ends).
    pub fn connections_per_process(&self) -> f64 {
        2.0 * self.connections.len() as f64 / self.next_hop.len() as f64
    }
}

/// The connections of the bounding graph that succeed, as (initiator,
/// acceptor), and how many were attempted. `allowed(p, q)` says whether p may
/// open a connection to q (firewalls).
pub fn select_connections(
    latency: &Matrix,
    traffic: &Matrix,
    allowed: &dyn Fn(usize, usize) -> bool,
    beta: usize,
    seed: u64,
) -> Result<(Vec<(usize, usize)>, usize)> {
    let n = latency.len();
    if n == 0 || latency.iter().chain(traffic.iter()).any(|r| r.len() != n) || traffic.len() != n {
        return Err(SchedError::InvalidMatrix(
            "latency and traffic must be square matrices of the same size".into(),
        ));
    }
    if beta == 0 {
        return Err(SchedError::InvalidMatrix("beta must be at least 1".into()));
    }
    let mut rng = SplitMix64::new(seed);
    let mut adjacent = vec![vec![false; n]; n];
    let mut connections = Vec::new();
    let mut attempted = 0;
    for p in 0..n {
        let mut peers: Vec<usize> = (0..n).filter(|&q| q != p).collect();
        peers.sort_by(|&a, &b| latency[p][a].total_cmp(&latency[p][b]).then(a.cmp(&b)));
        // peers[k - 1] is q_k of the paper (1-based).
        let mut chosen: Vec<usize> = peers.iter().take(beta - 1).copied().collect();
        let mut start = beta; // q_beta
        let mut width = beta;
        while start <= peers.len() {
            let band: Vec<usize> = peers[start - 1..(start - 1 + width).min(peers.len())].to_vec();
            chosen.extend(draw_by_traffic(
                &band,
                |q| traffic[p][q] + traffic[q][p],
                beta,
                &mut rng,
            ));
            start += width;
            width *= 2;
        }
        for q in chosen {
            if adjacent[p][q] {
                continue;
            }
            attempted += 1;
            if allowed(p, q) {
                adjacent[p][q] = true;
                adjacent[q][p] = true;
                connections.push((p, q));
            }
        }
    }
    Ok((connections, attempted))
}

/// Builds the bounding graph, its routes and its spanning tree.
pub fn bounding_graph(
    latency: &Matrix,
    traffic: &Matrix,
    allowed: &dyn Fn(usize, usize) -> bool,
    beta: usize,
    seed: u64,
) -> Result<BoundingGraph> {
    let (connections, attempted) = select_connections(latency, traffic, allowed, beta, seed)?;
    let n = latency.len();
    let mut adjacent = vec![vec![false; n]; n];
    for &(p, q) in &connections {
        adjacent[p][q] = true;
        adjacent[q][p] = true;
    }
    // Distance-vector routing converges to the shortest paths: Floyd-Warshall.
    let mut dist = vec![vec![f64::INFINITY; n]; n];
    let mut next = vec![vec![None; n]; n];
    for p in 0..n {
        dist[p][p] = 0.0;
        next[p][p] = Some(p);
        for q in 0..n {
            if adjacent[p][q] {
                dist[p][q] = latency[p][q];
                next[p][q] = Some(q);
            }
        }
    }
    for k in 0..n {
        for i in 0..n {
            if dist[i][k].is_infinite() {
                continue;
            }
            for j in 0..n {
                let via = dist[i][k] + dist[k][j];
                if via < dist[i][j] {
                    dist[i][j] = via;
                    next[i][j] = next[i][k];
                }
            }
        }
    }
    let connected = dist.iter().all(|row| row.iter().all(|d| d.is_finite()));
    let tree_parent = (0..n)
        .map(|v| if v == 0 { None } else { next[v][0] })
        .collect();
    Ok(BoundingGraph {
        connections,
        attempted,
        route_latency: dist,
        next_hop: next,
        tree_parent,
        connected,
    })
}

/// Draws up to `count` of `band` without replacement, each with probability
/// proportional to its weight (uniformly among the weightless once the
/// weighted ones are gone).
fn draw_by_traffic(
    band: &[usize],
    weight: impl Fn(usize) -> f64,
    count: usize,
    rng: &mut SplitMix64,
) -> Vec<usize> {
    let mut left: Vec<(usize, f64)> = band.iter().map(|&q| (q, weight(q).max(0.0))).collect();
    let mut out = Vec::new();
    while out.len() < count && !left.is_empty() {
        let total: f64 = left.iter().map(|x| x.1).sum();
        let index = if total > 0.0 {
            let mut target = rng.below(1 << 53) as f64 / (1u64 << 53) as f64 * total;
            left.iter()
                .position(|x| {
                    target -= x.1;
                    target < 0.0 && x.1 > 0.0
                })
                .unwrap_or(left.len() - 1)
        } else {
            rng.below(left.len() as u64) as usize
        };
        out.push(left.swap_remove(index).0);
    }
    out
}

/// True when `connections` join all `n` processes (union-find; cheap enough
/// to estimate how often a bounding graph is disconnected).
pub fn is_connected(n: usize, connections: &[(usize, usize)]) -> bool {
    fn root(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    let mut parent: Vec<usize> = (0..n).collect();
    let mut groups = n;
    for &(p, q) in connections {
        let (a, b) = (root(&mut parent, p), root(&mut parent, q));
        if a != b {
            parent[a] = b;
            groups -= 1;
        }
    }
    groups <= 1
}
