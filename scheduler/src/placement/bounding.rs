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
///
/// # Errors
///
/// [`SchedError::InvalidMatrix`](crate::SchedError::InvalidMatrix) when the matrices are not square and of
/// one size, or `beta` is 0.
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
///
/// # Errors
///
/// The errors of [`select_connections`].
pub fn bounding_graph(
    latency: &Matrix,
    traffic: &Matrix,
    allowed: &dyn Fn(usize, usize) -> bool,
    beta: usize,
    seed: u64,
) -> Result<BoundingGraph> {
    let (connections, attempted) = select_connections(latency, traffic, allowed, beta, seed)?;
    Ok(routed(latency, connections, attempted))
}

/// MC-MPI's default bound on connections per process for `n` processes:
/// the bounding graph's size with beta = 2, `beta - 1 + beta log2(n / beta)`
/// rounded up (at least 2), so O(log n).
pub fn default_bound(n: usize) -> usize {
    let bands = (n.max(2) as f64 / 2.0).log2().ceil() as usize;
    (1 + 2 * bands).max(2)
}

/// A bounding graph in which no process has more than `bound`
/// connections (a hard cap, where MC-MPI's is O(log n) on average).
///
/// Connections are chosen among the pairs `allowed` admits (either way: a
/// connection made by either side serves both):
/// 1. joining: by traffic (heaviest first), then latency, then nearest in
///    rank order, a pair whose processes are not yet joined and both have
///    room, until all are joined (a spanning tree with degrees at most
///    `bound`);
/// 2. short cuts (up to [`SHORTCUTS_UP_TO`] processes): while two
///    processes with room are two hops apart or more, the pair that saves
///    the most bytes times hops (then the most hops), so that heavy pairs
///    talk directly and routes, hence forwarding rounds, stay short;
/// 3. above that size, the remaining pairs that exchange bytes, heaviest
///    first, then the bounding graph's own choices (beta = `bound`), while
///    both have room.
///
/// Fails when `bound` is 0 or when the passes leave the processes apart
/// (a bound of 1 joins only pairs; forbidden pairs can cut a job in two).
///
/// # Errors
///
/// [`SchedError::InvalidMatrix`](crate::SchedError::InvalidMatrix) when `bound` is 0, the matrices do not
/// agree, or the connections leave the processes apart.
pub fn capped_graph(
    latency: &Matrix,
    traffic: &Matrix,
    allowed: &dyn Fn(usize, usize) -> bool,
    bound: usize,
    seed: u64,
) -> Result<BoundingGraph> {
    if bound == 0 {
        return Err(SchedError::InvalidMatrix(
            "a bound of 0 connections per process: give at least 1 (2 to join more than two processes)".into(),
        ));
    }
    let (chosen, _) = select_connections(latency, traffic, allowed, bound, seed)?;
    let n = latency.len();
    let weight = |p: usize, q: usize| traffic[p][q] + traffic[q][p];
    let mut pairs: Vec<(usize, usize)> = (0..n)
        .flat_map(|p| (p + 1..n).map(move |q| (p, q)))
        .filter(|&(p, q)| allowed(p, q) || allowed(q, p))
        .collect();
    pairs.sort_by(|&(a, b), &(c, d)| {
        weight(c, d)
            .total_cmp(&weight(a, b))
            .then(latency[a][b].total_cmp(&latency[c][d]))
            // Neighbours in rank order first: equals join into chains, not
            // stars whose hub has no room left for short cuts.
            .then((b - a).cmp(&(d - c)))
            .then((a, b).cmp(&(c, d)))
    });
    let mut graph = Capped::new(n, bound);
    for &(p, q) in &pairs {
        if graph.apart(p, q) {
            graph.connect(p, q);
        }
    }
    if graph.groups > 1 {
        return Err(SchedError::InvalidMatrix(format!(
            "{n} processes with at most {bound} connection(s) each{} stay in {} groups that cannot be joined: raise the bound{}",
            if pairs.len() < n * (n - 1) / 2 { " and the pairs forbidden" } else { "" },
            graph.groups,
            if pairs.len() < n * (n - 1) / 2 { " or allow more pairs" } else { "" },
        )));
    }
    if n <= SHORTCUTS_UP_TO {
        graph.shortcuts(&pairs, &weight);
    } else {
        for &(p, q) in pairs.iter().filter(|&&(p, q)| weight(p, q) > 0.0) {
            graph.connect(p, q);
        }
        for (p, q) in chosen {
            graph.connect(p, q);
        }
    }
    let attempted = graph.connections.len();
    Ok(routed(latency, graph.connections, attempted))
}

/// Largest job whose short cuts [`capped_graph`] chooses one by one
/// (ranks cubed times the bound).
pub const SHORTCUTS_UP_TO: usize = 256;

/// The connections of [`capped_graph`] as they are chosen.
struct Capped {
    bound: usize,
    degree: Vec<usize>,
    adjacent: Vec<Vec<bool>>,
    /// Union-find over the processes joined so far.
    parent: Vec<usize>,
    groups: usize,
    connections: Vec<(usize, usize)>,
}

impl Capped {
    fn new(n: usize, bound: usize) -> Capped {
        Capped {
            bound,
            degree: vec![0; n],
            adjacent: vec![vec![false; n]; n],
            parent: (0..n).collect(),
            groups: n,
            connections: Vec::new(),
        }
    }

    fn root(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }

    /// True when p and q are not yet joined (by any path).
    fn apart(&mut self, p: usize, q: usize) -> bool {
        self.root(p) != self.root(q)
    }

    /// Adds, one at a time, the allowed pair with room at both ends that
    /// saves the most bytes times hops, then the most hops, until no two
    /// processes with room are two hops apart or more.
    fn shortcuts(&mut self, pairs: &[(usize, usize)], weight: &dyn Fn(usize, usize) -> f64) {
        let mut hops = self.hops();
        loop {
            let best = pairs
                .iter()
                .filter(|&&(p, q)| {
                    hops[p][q] >= 2 && self.degree[p] < self.bound && self.degree[q] < self.bound
                })
                .map(|&(p, q)| {
                    let saved = f64::from(hops[p][q] - 1);
                    ((weight(p, q) * saved, saved), (p, q))
                })
                // The first of equals: pairs come in the caller's order.
                .fold(
                    None,
                    |best: Option<((f64, f64), (usize, usize))>, c| match best {
                        Some(b)
                            if b.0
                                 .0
                                .total_cmp(&c.0 .0)
                                .then(b.0 .1.total_cmp(&c.0 .1))
                                .is_ge() =>
                        {
                            Some(b)
                        }
                        _ => Some(c),
                    },
                );
            let Some((_, (p, q))) = best else {
                return;
            };
            self.connect(p, q);
            // A path through the new connection, either way.
            let n = hops.len();
            for i in 0..n {
                for j in 0..n {
                    let via = (hops[i][p].saturating_add(1).saturating_add(hops[q][j]))
                        .min(hops[i][q].saturating_add(1).saturating_add(hops[p][j]));
                    hops[i][j] = hops[i][j].min(via);
                }
            }
        }
    }

    /// Hops between every two processes over the connections so far
    /// (breadth first from each).
    fn hops(&self) -> Vec<Vec<u32>> {
        let n = self.degree.len();
        let mut out = vec![vec![u32::MAX; n]; n];
        for (s, row) in out.iter_mut().enumerate() {
            row[s] = 0;
            let mut queue = std::collections::VecDeque::from([s]);
            while let Some(v) = queue.pop_front() {
                for w in 0..n {
                    if self.adjacent[v][w] && row[w] == u32::MAX {
                        row[w] = row[v] + 1;
                        queue.push_back(w);
                    }
                }
            }
        }
        out
    }

    /// Connects p and q if they are not yet connected and both have room.
    fn connect(&mut self, p: usize, q: usize) {
        if p == q
            || self.adjacent[p][q]
            || self.degree[p] >= self.bound
            || self.degree[q] >= self.bound
        {
            return;
        }
        self.adjacent[p][q] = true;
        self.adjacent[q][p] = true;
        self.degree[p] += 1;
        self.degree[q] += 1;
        let (a, b) = (self.root(p), self.root(q));
        if a != b {
            self.parent[a] = b;
            self.groups -= 1;
        }
        self.connections.push((p, q));
    }
}

/// The routes over `connections`: shortest by latency (distance vector
/// converges to these; computed by Floyd-Warshall), and the spanning tree
/// to process 0.
fn routed(latency: &Matrix, connections: Vec<(usize, usize)>, attempted: usize) -> BoundingGraph {
    let n = latency.len();
    let mut adjacent = vec![vec![false; n]; n];
    for &(p, q) in &connections {
        adjacent[p][q] = true;
        adjacent[q][p] = true;
    }
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
    BoundingGraph {
        connections,
        attempted,
        route_latency: dist,
        next_hop: next,
        tree_parent,
        connected,
    }
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
