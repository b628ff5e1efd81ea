//! Distances between the ranks of a job, measured where they run, for the
//! placement of [`crate::reorder`]: on one node, from the NUMA layout (the
//! NUMA node each rank's CPUs are on, and the kernel's distance table);
//! between nodes, from round trips measured at start-up between the nodes'
//! first ranks over their setup links (through gateways where the networks
//! need them, so a forwarded pair measures farther), as MC-MPI estimates
//! its latency matrix. A byte inside one NUMA node costs 1; between nodes,
//! [`OTHER_NODE`] times the pair's round trip over the median of all the
//! pairs measured, so that the nearest clusters weigh about the same as
//! before and farther ones more. A pair forwarded by gateways costs at
//! least the sum of its hops: each of its bytes crosses all of them.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sode_job::World;

use crate::error::{HaloError, Result};

/// A byte between nodes, at the median round trip, costs this many times a
/// byte inside one NUMA node.
pub(crate) const OTHER_NODE: f64 = 10.0;
/// Round trips measured per pair of nodes (after one to warm up); the
/// median is kept.
const PINGS: usize = 5;
/// Above this many nodes, each measures only its next few (a ring and its
/// chords) and unmeasured pairs take the median.
const MEASURE_ALL_UP_TO: usize = 32;
const CHORDS: usize = 4;

/// Where a rank runs, inside its node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Numa {
    /// The NUMA node all of the rank's allowed CPUs are on (none when they
    /// span several, or the kernel does not say).
    pub(crate) node: Option<usize>,
    /// Its row of the kernel's distance table (10 for itself).
    pub(crate) distances: Vec<u32>,
}

impl Numa {
    /// This process's NUMA node, from its allowed CPUs and sysfs.
    pub(crate) fn local() -> Numa {
        let allowed = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Cpus_allowed_list:").map(parse_cpulist))
            })
            .flatten();
        let Some(allowed) = allowed else {
            return Numa::default();
        };
        let base = std::path::Path::new("/sys/devices/system/node");
        for n in 0..1024 {
            let dir = base.join(format!("node{n}"));
            let Ok(list) = std::fs::read_to_string(dir.join("cpulist")) else {
                if !dir.exists() && n > 0 {
                    break;
                }
                continue;
            };
            let Some(cpus) = parse_cpulist(&list) else {
                continue;
            };
            if !allowed.is_empty() && allowed.is_subset(&cpus) {
                let distances = std::fs::read_to_string(dir.join("distance"))
                    .map(|d| {
                        d.split_whitespace()
                            .filter_map(|x| x.parse().ok())
                            .collect()
                    })
                    .unwrap_or_default();
                return Numa {
                    node: Some(n),
                    distances,
                };
            }
        }
        Numa::default()
    }
}

/// `0-3,8,10-11` as a set; none when it does not parse.
pub(crate) fn parse_cpulist(text: &str) -> Option<BTreeSet<usize>> {
    let mut out = BTreeSet::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => {
                out.insert(part.trim().parse().ok()?);
            }
        }
    }
    Some(out)
}

/// A round trip measured from one node's first rank to another's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct RoundTrip {
    /// The other node's first rank.
    pub(crate) to: usize,
    /// The median round trip, in microseconds.
    pub(crate) micros: f64,
}

/// The first rank of each node, in rank order.
pub(crate) fn node_leaders(world: &World) -> Vec<usize> {
    let mut seen = HashSet::new();
    (0..world.size())
        .filter(|&r| seen.insert(world.node_of(r)))
        .collect()
}

/// The leaders `leader` measures (the higher ones of its pairs).
fn measured_by(leaders: &[usize], i: usize) -> Vec<usize> {
    let n = leaders.len();
    if n <= MEASURE_ALL_UP_TO {
        return leaders[i + 1..].to_vec();
    }
    let mut out: Vec<usize> = (1..=CHORDS)
        .map(|k| (i + (1 << (k - 1))) % n)
        .filter(|&j| j > i)
        .map(|j| leaders[j])
        .collect();
    out.dedup();
    out
}

/// This rank's round trips to the leaders it measures (empty unless it
/// leads its node); collective over the nodes' first ranks, which take
/// their pairs in one global order (lexicographic), so none waits on a
/// pair the other side has not reached.
pub(crate) fn measure_round_trips(world: &World, timeout: Duration) -> Result<Vec<RoundTrip>> {
    let leaders = node_leaders(world);
    let me = world.rank();
    let Some(i) = leaders.iter().position(|&l| l == me) else {
        return Ok(Vec::new());
    };
    if leaders.len() < 2 {
        return Ok(Vec::new());
    }
    let mine = measured_by(&leaders, i);
    let theirs: Vec<usize> = (0..i)
        .filter(|&j| measured_by(&leaders, j).contains(&me))
        .map(|j| leaders[j])
        .collect();
    let peers: BTreeSet<usize> = mine.iter().chain(&theirs).copied().collect();
    let setup = |source| HaloError::Barrier {
        source: Box::new(source),
    };
    let mut links = world.connect_peers(&peers, timeout).map_err(setup)?;
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    // Lower pairs first (they are answered), then ours, in rank order.
    for &p in &theirs {
        let link = links.get_mut(&p).ok_or_else(|| missing(p))?;
        for _ in 0..=PINGS {
            let n: u32 = link.recv(deadline).map_err(setup)?;
            link.send(&n).map_err(setup)?;
        }
    }
    for &p in &mine {
        let link = links.get_mut(&p).ok_or_else(|| missing(p))?;
        let mut samples = Vec::with_capacity(PINGS);
        for k in 0..=PINGS as u32 {
            let t0 = Instant::now();
            link.send(&k).map_err(setup)?;
            let echo: u32 = link.recv(deadline).map_err(setup)?;
            if echo != k {
                return Err(HaloError::Usage {
                    op: "reorder",
                    why: format!("rank {p} answered round trip {k} with {echo}"),
                });
            }
            if k > 0 {
                samples.push(t0.elapsed().as_secs_f64() * 1e6);
            }
        }
        samples.sort_by(f64::total_cmp);
        out.push(RoundTrip {
            to: p,
            micros: samples[samples.len() / 2],
        });
    }
    Ok(out)
}

fn missing(p: usize) -> HaloError {
    HaloError::Usage {
        op: "reorder",
        why: format!("no setup link to rank {p} to measure"),
    }
}

/// What the distances are built from: per rank, its node (an index), its
/// NUMA placement, and the round trips its node's leader measured.
#[derive(Debug)]
pub(crate) struct Layout {
    pub(crate) node: Vec<usize>,
    numa: Vec<Numa>,
    /// `(leader a, leader b)` with a < b: the measured round trip.
    pub(crate) round_trips: BTreeMap<(usize, usize), f64>,
    /// Each node's first rank, which speaks for it.
    leader: Vec<usize>,
    /// The median measured round trip (1 when none was).
    median: f64,
    /// `(node a, node b)` with a < b, for the pairs that reach each other
    /// only through gateways: the nodes of those gateways, in order.
    gateways: BTreeMap<(usize, usize), Vec<usize>>,
}

impl Layout {
    /// The layout of ranks on `node` (indices from 0), placed in their
    /// nodes as `numa` says, with the `round_trips` measured between
    /// nodes' first ranks.
    pub(crate) fn new(
        node: Vec<usize>,
        numa: Vec<Numa>,
        round_trips: BTreeMap<(usize, usize), f64>,
    ) -> Layout {
        let nodes = node.iter().max().map_or(0, |&m| m + 1);
        let mut leader = vec![usize::MAX; nodes];
        for (r, &nd) in node.iter().enumerate() {
            if leader[nd] == usize::MAX {
                leader[nd] = r;
            }
        }
        let mut samples: Vec<f64> = round_trips.values().copied().collect();
        samples.sort_by(f64::total_cmp);
        let median = samples
            .get(samples.len() / 2)
            .copied()
            .filter(|&m| m > 0.0)
            .unwrap_or(1.0);
        Layout {
            node,
            numa,
            round_trips,
            leader,
            median,
            gateways: BTreeMap::new(),
        }
    }

    /// The same layout, where the nodes of each pair `(a, b)` (a < b) of
    /// `gateways` reach each other through the gateways on the nodes
    /// listed, in order.
    pub(crate) fn with_gateways(
        mut self,
        gateways: BTreeMap<(usize, usize), Vec<usize>>,
    ) -> Layout {
        self.gateways = gateways;
        self
    }

    /// The distance between ranks `a` and `b` (launch order).
    pub(crate) fn distance(&self, a: usize, b: usize) -> f64 {
        if a == b {
            return 0.0;
        }
        let (na, nb) = (self.node[a], self.node[b]);
        if na == nb {
            return self.inside(a, b);
        }
        let measured = self.between_nodes(na, nb);
        // A forwarded byte crosses every link on its way and is copied by
        // each gateway: it costs at least the sum of its hops, whatever
        // one round trip (latency only, and noisy) said.
        match self.gateways.get(&(na.min(nb), na.max(nb))) {
            Some(via) if !via.is_empty() => {
                let (mut hops, mut from) = (0.0, na);
                for &g in via.iter().chain([&nb]) {
                    hops += self.between_nodes(from, g);
                    from = g;
                }
                measured.max(hops)
            }
            _ => measured,
        }
    }

    /// Between nodes `na` and `nb`, from the round trip their leaders
    /// measured (the median pair's when they measured none).
    fn between_nodes(&self, na: usize, nb: usize) -> f64 {
        if na == nb {
            return 0.0;
        }
        let (la, lb) = (self.leader[na], self.leader[nb]);
        match self.round_trips.get(&(la.min(lb), la.max(lb))) {
            Some(&rtt) => (OTHER_NODE * rtt / self.median).max(OTHER_NODE / 2.0),
            None => OTHER_NODE,
        }
    }

    /// Every distance, for the QAP search (small jobs only: n x n).
    pub(crate) fn matrix(&self) -> Vec<Vec<f64>> {
        let n = self.node.len();
        (0..n)
            .map(|a| (0..n).map(|b| self.distance(a, b)).collect())
            .collect()
    }

    /// Between two ranks of one node: 1 on one NUMA node, the kernel's
    /// distance over 10 on two (2.0-3.2 on common machines; the larger of
    /// the two ranks' readings, so that the matrix is symmetric whatever
    /// they read).
    fn inside(&self, a: usize, b: usize) -> f64 {
        let (na, nb) = (&self.numa[a], &self.numa[b]);
        match (na.node, nb.node) {
            (Some(x), Some(y)) if x != y => {
                let read = [na.distances.get(y), nb.distances.get(x)];
                let d = read.into_iter().flatten().copied().max().unwrap_or(10);
                (f64::from(d) / 10.0).max(1.0)
            }
            _ => 1.0,
        }
    }
}

/// Every rank's `mine`, through the job's allgather (as JSON); `op` names
/// the caller in errors.
pub(crate) fn gather<T: serde::Serialize + serde::de::DeserializeOwned>(
    world: &World,
    mine: &T,
    timeout: Duration,
    op: &'static str,
) -> Result<Vec<T>> {
    let body = serde_json::to_vec(mine).map_err(|e| HaloError::Usage {
        op,
        why: format!("a message of the job's allgather does not serialise: {e}"),
    })?;
    let all = world
        .allgather(&body, timeout)
        .map_err(|source| HaloError::Barrier {
            source: Box::new(source),
        })?;
    all.iter()
        .map(|b| serde_json::from_slice(b))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| HaloError::Usage {
            op,
            why: format!("a rank's message in the job's allgather does not parse: {e}"),
        })
}

/// The job's layout from every rank's NUMA placement and the round trips
/// it measured (checked by the caller), in rank order.
pub(crate) fn layout_of(
    world: &World,
    cards: impl IntoIterator<Item = (Numa, Vec<RoundTrip>)>,
) -> Layout {
    // Nodes numbered in order of their first rank, in one pass.
    let mut index = HashMap::new();
    let node: Vec<usize> = (0..world.size())
        .map(|r| {
            let next = index.len();
            *index.entry(world.node_of(r)).or_insert(next)
        })
        .collect();
    let mut round_trips = BTreeMap::new();
    let mut numa = Vec::with_capacity(world.size());
    for (r, (placed, measured)) in cards.into_iter().enumerate() {
        for t in measured {
            round_trips.insert((r.min(t.to), r.max(t.to)), t.micros);
        }
        numa.push(placed);
    }
    let leaders = node_leaders(world);
    let mut gateways = BTreeMap::new();
    // Each pair's path is a search over the nodes: beyond the jobs whose
    // pairs are all measured, forwarded pairs keep their round trip.
    let traced = if leaders.len() <= MEASURE_ALL_UP_TO {
        leaders.len()
    } else {
        0
    };
    for (i, &a) in leaders[..traced].iter().enumerate() {
        for &b in &leaders[i + 1..] {
            let via: Vec<usize> = world
                .gateways_between(a, b)
                .into_iter()
                .filter_map(|g| node.get(g).copied())
                .collect();
            if !via.is_empty() {
                gateways.insert((node[a].min(node[b]), node[a].max(node[b])), via);
            }
        }
    }
    Layout::new(node, numa, round_trips).with_gateways(gateways)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists_parse_and_refuse_nonsense() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11\n")
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpulist("").unwrap().len(), 0);
        assert!(parse_cpulist("3-1").is_none());
        assert!(parse_cpulist("a").is_none());
        assert!(parse_cpulist("0-99999999").is_none());
    }

    #[test]
    fn distances_follow_numa_and_measured_round_trips() {
        let numa = |node: usize| Numa {
            node: Some(node),
            distances: vec![10, 21],
        };
        // Ranks 0-1 on node 0 (NUMA 0 and 1), 2 on node 1, 3 on node 2.
        let layout = Layout::new(
            vec![0, 0, 1, 2],
            vec![numa(0), numa(1), numa(0), Numa::default()],
            BTreeMap::from([((0, 2), 100.0), ((0, 3), 300.0), ((2, 3), 200.0)]),
        );
        let d = layout.matrix();
        assert_eq!(d[0][1], 2.1, "two NUMA nodes of one machine");
        assert_eq!(d[0][0], 0.0);
        assert_eq!(d[0][2], 5.0, "half the median, the floor");
        assert_eq!(d[1][2], 5.0, "rank 1 speaks through its node's leader");
        assert_eq!(d[2][3], OTHER_NODE, "the median");
        assert_eq!(d[3][0], 15.0, "1.5 times the median");
        assert_eq!(
            d,
            (0..4)
                .map(|a| (0..4).map(|b| d[b][a]).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn many_nodes_measure_a_ring_and_chords_once_each() {
        let leaders: Vec<usize> = (0..100).map(|i| i * 4).collect();
        let mut pairs = BTreeSet::new();
        for i in 0..leaders.len() {
            for p in measured_by(&leaders, i) {
                assert!(p > leaders[i]);
                assert!(pairs.insert((leaders[i], p)), "measured twice");
            }
        }
        assert!(pairs.len() < 100 * CHORDS, "{}", pairs.len());
        let few: Vec<usize> = (0..5).collect();
        assert_eq!(measured_by(&few, 1), vec![2, 3, 4]);
    }
}
