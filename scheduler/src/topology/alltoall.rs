//! All-to-all schedules: the shift pattern, and the contention-free
//! schedules of the Latin-square fat-tree paper (whole machine, and
//! D = n k m servers).

use super::contention::{peak_link_load, throughput_ratio, Route};
use super::fat_tree::FatTree;
use super::latin_square::{LatinSquareFatTree, Server};
use super::plane::Point;
use crate::error::{Result, SchedError};

/// How a partial schedule moves a leaf by a vector [s, h] when s is finite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartialRule {
    /// The paper's definition (section 3.2.3): b_x = (a_x + h) mod k and
    /// b_y = a_y + s (b_x - a_x) mod n, the point of the line of slope s
    /// through a. Contention-free for every m <= k <= n.
    Geometric,
    /// b_y = a_y + s h mod n: the rule the paper's Table 3 was computed with.
    /// Equal to `Geometric` when no move wraps (k = n); with k < n a wrapped
    /// move leaves the line of slope s, and links can collide (e.g. 0.81 for
    /// n, k, m = 7, 6, 6).
    Tabulated,
}

/// What a schedule is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleKind {
    /// Phase i: the j-th server sends to the (j + i)-th, minimal routes.
    Shift,
    /// The whole Latin-square machine, shift triples (a, b, c).
    Whole,
    /// n k m servers of a Latin-square machine.
    Partial {
        /// Grid columns used.
        k: usize,
        /// Servers used per leaf.
        m: usize,
        /// The move rule.
        rule: PartialRule,
    },
}

#[derive(Debug, Clone)]
enum Network {
    Latin(LatinSquareFatTree),
    Fat(FatTree),
}

/// A vector of the partial schedule: slope (None = infinity) and hops, or zero.
type Vector = Option<(Option<usize>, usize)>;

/// An all-to-all schedule on a topology: its servers and, phase by phase,
/// who sends to whom over which links.
#[derive(Debug, Clone)]
pub struct Schedule {
    network: Network,
    kind: ScheduleKind,
    servers: Vec<usize>,
    triples: Vec<(usize, usize, usize)>,
    vectors: Vec<Vec<Vector>>,
}

fn check_k_m(n: usize, k: usize, m: usize) -> Result<()> {
    if !(1 <= m && m <= k && k <= n) {
        return Err(SchedError::InvalidTopology(format!(
            "k = {k}, m = {m} with n = {n}: the partial all-to-all needs 1 <= m <= k <= n"
        )));
    }
    Ok(())
}

impl Schedule {
    /// The whole Latin-square machine of order n, with the paper's triples.
    ///
    /// # Errors
    ///
    /// [`SchedError::InvalidTopology`](crate::SchedError::InvalidTopology) when `n` is not a prime up to 251.
    pub fn whole(n: usize) -> Result<Schedule> {
        let topology = LatinSquareFatTree::new(n)?;
        let servers = (0..topology.server_count()).collect();
        let mut triples = Vec::new();
        for a in 0..=n {
            for b in 0..=n {
                for c in 0..=n {
                    if b != 0 || c == 0 {
                        triples.push((a, b, c));
                    }
                }
            }
        }
        Ok(Schedule {
            network: Network::Latin(topology),
            kind: ScheduleKind::Whole,
            servers,
            triples,
            vectors: vec![],
        })
    }

    /// D = n k m servers: the n x k rectangle of grid leaves P(x, y), x < k,
    /// y < n, m servers under each.
    ///
    /// # Errors
    ///
    /// [`SchedError::InvalidTopology`](crate::SchedError::InvalidTopology) when `n` is not a prime up to 251, or
    /// `1 <= m <= k <= n` does not hold.
    pub fn partial(n: usize, k: usize, m: usize, rule: PartialRule) -> Result<Schedule> {
        check_k_m(n, k, m)?;
        let topology = LatinSquareFatTree::new(n)?;
        let servers = Self::rectangle(&topology, k, m);
        // Column 0: slope infinity (n - 1 vectors), slopes 0..n (k - 1 each), zero.
        let mut column: Vec<Vector> = (1..n).map(|h| Some((None, h))).collect();
        for s in 0..n {
            column.extend((1..k).map(|h| Some((Some(s), h))));
        }
        column.push(None);
        let groups = n * k;
        // Column j is column 0 shifted down by j (n - 1) rows.
        let vectors = (0..groups)
            .map(|g| {
                (0..m)
                    .map(|j| column[(g + groups * m - j * (n - 1)) % groups])
                    .collect()
            })
            .collect();
        Ok(Schedule {
            network: Network::Latin(topology),
            kind: ScheduleKind::Partial { k, m, rule },
            servers,
            triples: vec![],
            vectors,
        })
    }

    /// The shift pattern on a Latin-square machine: the whole machine, or
    /// with `k_m` the same n k m servers as the partial schedule.
    ///
    /// # Errors
    ///
    /// As [`Schedule::partial`].
    pub fn shift_latin_square(n: usize, k_m: Option<(usize, usize)>) -> Result<Schedule> {
        let topology = LatinSquareFatTree::new(n)?;
        let servers = match k_m {
            None => (0..topology.server_count()).collect(),
            Some((k, m)) => {
                check_k_m(n, k, m)?;
                Self::rectangle(&topology, k, m)
            }
        };
        Ok(Schedule {
            network: Network::Latin(topology),
            kind: ScheduleKind::Shift,
            servers,
            triples: vec![],
            vectors: vec![],
        })
    }

    /// The shift pattern on a conventional fat-tree of degree d, over its
    /// first `servers` servers (whole leaves first); all of them by default.
    ///
    /// # Errors
    ///
    /// [`SchedError::InvalidTopology`](crate::SchedError::InvalidTopology) for a degree outside 2 to 1024, or
    /// `servers` outside 1 to the tree's servers.
    pub fn shift_fat_tree(degree: usize, servers: Option<usize>) -> Result<Schedule> {
        let topology = FatTree::new(degree)?;
        let count = servers.unwrap_or(topology.server_count());
        if count == 0 || count > topology.server_count() {
            return Err(SchedError::InvalidTopology(format!(
                "{count} servers on a fat-tree of degree {degree}: use 1 to {}",
                topology.server_count()
            )));
        }
        Ok(Schedule {
            network: Network::Fat(topology),
            kind: ScheduleKind::Shift,
            servers: (0..count).collect(),
            triples: vec![],
            vectors: vec![],
        })
    }

    fn rectangle(topology: &LatinSquareFatTree, k: usize, m: usize) -> Vec<usize> {
        let n = topology.plane().order();
        let mut servers = Vec::with_capacity(n * k * m);
        for y in 0..n {
            for x in 0..k {
                for id in 0..m {
                    servers.push(topology.server_index(Server {
                        leaf: Point::Pcr(x, y),
                        id,
                    }));
                }
            }
        }
        servers
    }

    /// What the schedule is.
    pub fn kind(&self) -> ScheduleKind {
        self.kind
    }
    /// The servers taking part (global numbers), in schedule order.
    pub fn servers(&self) -> &[usize] {
        &self.servers
    }
    /// The Latin-square topology, when the schedule runs on one.
    pub fn latin_square(&self) -> Option<&LatinSquareFatTree> {
        match &self.network {
            Network::Latin(t) => Some(t),
            Network::Fat(_) => None,
        }
    }
    /// Links of the topology.
    pub fn link_count(&self) -> usize {
        match &self.network {
            Network::Latin(t) => t.link_count(),
            Network::Fat(t) => t.link_count(),
        }
    }
    /// Phases: as many as servers.
    pub fn phase_count(&self) -> usize {
        match self.kind {
            ScheduleKind::Whole => self.triples.len(),
            _ => self.servers.len(),
        }
    }

    fn minimal_route(&self, src: usize, dst: usize) -> Route {
        match &self.network {
            Network::Latin(t) => t.route(src, dst),
            Network::Fat(t) => t.route(src, dst),
        }
    }

    /// Phase `t`: one route per server.
    pub fn phase(&self, t: usize) -> Vec<Route> {
        match (self.kind, &self.network) {
            (ScheduleKind::Shift, _) => {
                let d = self.servers.len();
                (0..d)
                    .map(|j| self.minimal_route(self.servers[j], self.servers[(j + t) % d]))
                    .collect()
            }
            (ScheduleKind::Whole, Network::Latin(topology)) => {
                let (a, b, c) = self.triples[t];
                let plane = topology.plane();
                let d = topology.servers_per_leaf();
                (0..topology.server_count())
                    .map(|s| {
                        let (p, x) = (s / d, s % d);
                        let l = plane.lines_through(p)[(x + a) % d];
                        let q = plane.points_on(l)[(topology.spine_port(p, l) + b) % d];
                        let out = (topology.leaf_port(q, l) + c) % d;
                        topology.route_via(s, q * d + out, l)
                    })
                    .collect()
            }
            (ScheduleKind::Partial { k, m, rule }, Network::Latin(topology)) => {
                let n = topology.plane().order();
                let (group, i) = (t / m, t % m);
                self.servers
                    .iter()
                    .map(|&s| {
                        let server = topology.server(s);
                        let Point::Pcr(ax, ay) = server.leaf else {
                            unreachable!("partial servers are on the grid")
                        };
                        let (bx, by) = match self.vectors[group][server.id] {
                            None => (ax, ay),
                            Some((None, h)) => (ax, (ay + h) % n),
                            Some((Some(slope), h)) => {
                                let bx = (ax + h) % k;
                                let rise = match rule {
                                    PartialRule::Geometric => {
                                        slope as i64 * (bx as i64 - ax as i64)
                                    }
                                    PartialRule::Tabulated => (slope * h) as i64,
                                };
                                (bx, (ay as i64 + rise).rem_euclid(n as i64) as usize)
                            }
                        };
                        let dst = topology.server_index(Server {
                            leaf: Point::Pcr(bx, by),
                            id: (i + server.id) % m,
                        });
                        self.minimal_route(s, dst)
                    })
                    .collect()
            }
            (_, Network::Fat(_)) => {
                unreachable!("only the shift pattern runs on a conventional fat-tree")
            }
        }
    }

    /// Every phase, one after the other.
    pub fn phases(&self) -> impl Iterator<Item = Vec<Route>> + '_ {
        (0..self.phase_count()).map(|t| self.phase(t))
    }

    /// The paper's throughput ratio of this schedule.
    pub fn throughput_ratio(&self) -> f64 {
        throughput_ratio(self.link_count(), self.phases())
    }

    /// The most flows one link carries in any phase (1: contention-free).
    pub fn peak_link_load(&self) -> u32 {
        peak_link_load(self.link_count(), self.phases())
    }
}
