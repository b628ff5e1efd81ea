//! Which ranks reach each other directly over TCP, and through which
//! gateway ranks the others do (MPI/SP's gateway nodes between clusters).
//!
//! Every rank reports the IPv4 networks of its node's interfaces (or the
//! group names the user gave in [`GROUPS_VAR`]) and, when its node is on
//! more than one network, a relay it can run. Two ranks reach each other
//! directly when they share a node, a network (an address of each inside
//! one subnet, the two addresses different) or a group name; when either
//! reports nothing, directly too, as before routes existed (the network
//! may route between subnets). Otherwise the route is the shortest chain of
//! nodes that reach each other directly, each intermediate node's gateway
//! (its lowest rank that offered a relay) forwarding ([`crate::relay`]).
//! Every rank computes the same routes from the same reports, keeping a
//! node's first rank's as the node's.

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::{JobError, Result};
use crate::nets::{usable_order, Net};
use crate::node::Nodes;
use crate::relay::RelayOffer;
use crate::wire::{Reader, Writer};

/// The variable naming the networks this node is on, comma-separated (for
/// example `site-a,site-b` on a gateway node), where the subnets of its
/// interfaces do not tell (networks routed between subnets, or subnets
/// that look alike on unconnected clusters). Ranks that both name groups
/// reach each other directly exactly when they share one.
pub const GROUPS_VAR: &str = "SODE_GROUPS";

/// What a rank tells the others about how it can be reached.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Reach {
    /// Its node's networks (loopback left out).
    pub(crate) nets: Vec<Net>,
    /// The groups the user named ([`GROUPS_VAR`]).
    pub(crate) groups: Option<Vec<String>>,
    /// Where it forwards for others, when its node is on several networks.
    pub(crate) relay: Option<RelayOffer>,
}

impl Reach {
    /// A rank on `nets` offering `relay`, with the groups in
    /// [`GROUPS_VAR`], checked.
    pub(crate) fn local(nets: Vec<Net>, relay: Option<RelayOffer>) -> Result<Reach> {
        Ok(Reach {
            nets,
            groups: parse_groups(std::env::var(GROUPS_VAR).ok().as_deref())?,
            relay,
        })
    }

    /// Writes this reach into a setup record ([`crate::wire`]).
    pub(crate) fn write(&self, w: &mut Writer) -> Result<()> {
        w.count(self.nets.len(), "networks")?;
        for n in &self.nets {
            w.bytes(&n.addr.octets()).u8(n.prefix);
        }
        match &self.groups {
            None => {
                w.u8(0);
            }
            Some(groups) => {
                w.u8(1).count(groups.len(), "groups in SODE_GROUPS")?;
                for g in groups {
                    w.short(g.as_bytes(), "a group name in SODE_GROUPS")?;
                }
            }
        }
        match &self.relay {
            None => {
                w.u8(0);
            }
            Some(offer) => offer.write(w.u8(1))?,
        }
        Ok(())
    }

    /// What [`Reach::write`] wrote.
    pub(crate) fn read(r: &mut Reader<'_>) -> Option<Reach> {
        let nets = (0..r.count()?)
            .map(|_| {
                Some(Net {
                    addr: r.array::<4>()?.into(),
                    prefix: r.u8()?,
                })
            })
            .collect::<Option<_>>()?;
        let groups = match r.u8()? {
            0 => None,
            1 => Some((0..r.count()?).map(|_| r.text()).collect::<Option<_>>()?),
            _ => return None,
        };
        let relay = match r.u8()? {
            0 => None,
            1 => Some(RelayOffer::read(r)?),
            _ => return None,
        };
        Some(Reach {
            nets,
            groups,
            relay,
        })
    }
}

/// `SODE_GROUPS`: names separated by commas; unset or blank for none.
pub(crate) fn parse_groups(value: Option<&str>) -> Result<Option<Vec<String>>> {
    let Some(text) = value.map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let names: Vec<String> = text.split(',').map(|n| n.trim().to_string()).collect();
    if names.iter().any(|n| n.is_empty()) {
        return Err(JobError::InvalidSetting {
            name: GROUPS_VAR.into(),
            value: text.into(),
            why: "a group name is empty: give names separated by single commas, such as site-a,site-b".into(),
        });
    }
    Ok(Some(names))
}

/// The IPv4 networks of this host's interfaces that are up, loopback left
/// out.
pub(crate) fn host_nets() -> Vec<Net> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for a in addrs {
        if !a.flags.contains(nix::net::if_::InterfaceFlags::IFF_UP) {
            continue;
        }
        let (Some(addr), Some(mask)) = (a.address, a.netmask) else {
            continue;
        };
        if let (Some(ip), Some(m)) = (addr.as_sockaddr_in(), mask.as_sockaddr_in()) {
            let net = Net {
                addr: ip.ip(),
                prefix: m.ip().to_bits().count_ones() as u8,
            };
            if !net.addr.is_loopback() && !out.contains(&net) {
                out.push(net);
            }
        }
    }
    out
}

/// The job's routes: who reaches whom directly, and the gateways between
/// the others. Ranks here are launch ranks. What a node's first rank
/// reported speaks for the node, so the table holds a report a node and
/// 4 bytes a rank.
#[derive(Debug)]
pub struct Routes {
    /// Each rank's node, as an index into the tables below.
    node: Vec<u32>,
    /// What each node's first rank reported.
    reach: Vec<Reach>,
    /// Each node's gateway: its lowest rank that offered a relay, and
    /// the offer.
    gateway: Vec<Option<(usize, RelayOffer)>>,
    /// A rank of each node, whose report speaks for the node.
    speaker: Vec<usize>,
}

impl Routes {
    /// Routes from every rank's report and node.
    pub(crate) fn new(reach: Vec<Reach>, nodes: &Nodes) -> Routes {
        let count = nodes.count();
        let mut gateway = vec![None; count];
        let mut speaker = vec![usize::MAX; count];
        let mut reports = vec![Reach::default(); count];
        let mut node = Vec::with_capacity(nodes.ranks());
        for (rank, report) in reach.into_iter().enumerate() {
            // A report past the table's ranks has no node to speak for.
            let Some(n) = nodes.index(rank) else { break };
            node.push(n as u32);
            if gateway[n].is_none() {
                gateway[n] = report.relay.clone().map(|offer| (rank, offer));
            }
            if speaker[n] == usize::MAX {
                speaker[n] = rank;
                reports[n] = report;
            }
        }
        Routes {
            node,
            reach: reports,
            gateway,
            speaker,
        }
    }

    /// Rank `rank`'s node, as an index into the tables.
    fn node_of(&self, rank: usize) -> Option<usize> {
        self.node.get(rank).map(|&n| n as usize)
    }

    /// What rank `rank`'s node reported.
    fn reach_of(&self, rank: usize) -> Option<&Reach> {
        self.reach.get(self.node_of(rank)?)
    }

    /// Whether ranks `a` and `b` reach each other without a gateway.
    fn direct(&self, a: usize, b: usize) -> bool {
        let (Some(na), Some(nb)) = (self.node_of(a), self.node_of(b)) else {
            return true;
        };
        if na == nb {
            return true;
        }
        let (ra, rb) = (&self.reach[na], &self.reach[nb]);
        if let (Some(ga), Some(gb)) = (&ra.groups, &rb.groups) {
            return ga.iter().any(|g| gb.contains(g));
        }
        if ra.nets.is_empty() || rb.nets.is_empty() {
            return true;
        }
        ra.nets.iter().any(|na| {
            rb.nets
                .iter()
                .any(|nb| na.prefix == nb.prefix && na.contains(nb.addr) && na.addr != nb.addr)
        })
    }

    /// The gateway ranks a connection from `from` to `to` passes, in order:
    /// none when they reach each other directly, or when no chain of
    /// gateways joins them (then directly as well: the network may route).
    pub fn gateways(&self, from: usize, to: usize) -> Vec<usize> {
        let (Some(start), Some(goal)) = (self.node_of(from), self.node_of(to)) else {
            return Vec::new();
        };
        if self.direct(from, to) {
            return Vec::new();
        }
        // Breadth first over nodes, passing only through nodes with a
        // gateway; nodes few, so a direct check per pair is cheap.
        let nodes = self.gateway.len();
        let mut came_from = vec![usize::MAX; nodes];
        came_from[start] = start;
        let mut queue = VecDeque::from([start]);
        while let Some(n) = queue.pop_front() {
            let via = if n == start {
                from
            } else {
                match &self.gateway[n] {
                    Some((g, _)) => *g,
                    None => continue,
                }
            };
            for m in 0..nodes {
                if came_from[m] != usize::MAX {
                    continue;
                }
                let target = if m == goal { to } else { self.speaker[m] };
                if !self.direct(via, target) {
                    continue;
                }
                came_from[m] = n;
                if m == goal {
                    return self.path_back(&came_from, start, goal);
                }
                queue.push_back(m);
            }
        }
        Vec::new()
    }

    /// The gateways of the nodes between `start` and `goal`, in order.
    fn path_back(&self, came_from: &[usize], start: usize, goal: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut n = came_from[goal];
        while n != start {
            out.extend(self.gateway[n].as_ref().map(|(g, _)| *g));
            n = came_from[n];
        }
        out.reverse();
        out
    }

    /// Whether `rank` forwards for others: its node's gateway, with
    /// ranks of other nodes that do not reach each other directly.
    pub(crate) fn forwards(&self, rank: usize) -> bool {
        self.node_of(rank).is_some_and(|n| {
            self.gateway[n].as_ref().map(|(g, _)| *g) == Some(rank) && self.any_pair_needs(n)
        })
    }

    /// Whether two other nodes that reach node `n` do not reach each other.
    fn any_pair_needs(&self, n: usize) -> bool {
        let gw = self.speaker[n];
        let near: Vec<usize> = (0..self.speaker.len())
            .filter(|&m| m != n && self.direct(gw, self.speaker[m]))
            .collect();
        near.iter().enumerate().any(|(i, &a)| {
            near[i + 1..]
                .iter()
                .any(|&b| !self.direct(self.speaker[a], self.speaker[b]))
        })
    }

    /// Connects rank `from` to `addrs`, where rank `to` listens: directly
    /// or through the gateways between them.
    pub(crate) fn dial(
        &self,
        from: usize,
        to: usize,
        addrs: &[SocketAddr],
        deadline: Instant,
        whom: &str,
    ) -> Result<TcpStream> {
        let hops: Vec<(usize, RelayOffer)> = self
            .gateways(from, to)
            .into_iter()
            .filter_map(|g| self.gateway[self.node_of(g)?].clone())
            .collect();
        let mine = self.reach_of(from).map_or(&[][..], |r| &r.nets[..]);
        if hops.is_empty() {
            let same_node = self.node_of(from) == self.node_of(to);
            let ordered = usable_order(mine, same_node, addrs);
            let joined = self.direct(from, to);
            return crate::dial::connect_any(&ordered, deadline, whom).map_err(|e| match e {
                JobError::Bootstrap { step, whom, source } if !joined => JobError::Bootstrap {
                    step: format!(
                        "{step}; the two ranks share no network and no gateway joins them (run a rank on a node of both networks, or name the networks in {GROUPS_VAR})"
                    ),
                    whom,
                    source,
                },
                other => other,
            });
        }
        crate::relay::through(mine, &hops, addrs, deadline, whom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(text: &str) -> Net {
        let (a, p) = text.split_once('/').unwrap();
        Net {
            addr: a.parse().unwrap(),
            prefix: p.parse().unwrap(),
        }
    }

    fn node(name: &str) -> crate::NodeId {
        crate::NodeId {
            hostname: name.into(),
            boot_id: name.into(),
            shm_domain: 0,
        }
    }

    fn offer() -> Option<RelayOffer> {
        Some(RelayOffer {
            addrs: vec!["127.0.0.1:1".parse().unwrap()],
            token: [7; 32],
        })
    }

    fn reach(nets: &[&str], relay: bool) -> Reach {
        Reach {
            nets: nets.iter().map(|n| net(n)).collect(),
            groups: None,
            relay: if relay { offer() } else { None },
        }
    }

    /// The three VMs of ci/softroce/three-nodes.sh: a and b on one wire,
    /// b and c on another, a and c on none; two ranks per node.
    fn three_nodes() -> Routes {
        let a = reach(&["10.78.0.1/24"], false);
        let b = reach(&["10.78.0.2/24", "10.79.0.2/24"], true);
        let c = reach(&["10.79.0.3/24"], false);
        let nodes = Nodes::new(["a", "a", "b", "b", "c", "c"].map(node));
        Routes::new(vec![a.clone(), a, b.clone(), b, c.clone(), c], &nodes)
    }

    #[test]
    fn nodes_on_no_common_network_go_through_the_gateway_between_them() {
        let r = three_nodes();
        assert_eq!(r.gateways(0, 4), vec![2]);
        assert_eq!(r.gateways(5, 1), vec![2]);
        assert!(r.gateways(0, 1).is_empty(), "the same node");
        assert!(r.gateways(0, 3).is_empty(), "one wire");
        assert!(r.gateways(3, 5).is_empty(), "the other wire");
        assert!(r.forwards(2));
        assert!(!r.forwards(3), "rank 2 is node b's gateway");
        assert!(!r.forwards(0));
    }

    #[test]
    fn a_node_is_held_once_and_its_gateway_is_its_lowest_rank_that_offers_a_relay() {
        // Node b's first rank offers no relay; its second does.
        let a = reach(&["10.78.0.1/24"], false);
        let b = reach(&["10.78.0.2/24", "10.79.0.2/24"], false);
        let c = reach(&["10.79.0.3/24"], false);
        let b_relay = reach(&["10.78.0.2/24", "10.79.0.2/24"], true);
        let nodes = Nodes::new(["a", "b", "b", "b", "c"].map(node));
        let r = Routes::new(vec![a, b.clone(), b_relay.clone(), b_relay, c], &nodes);
        assert_eq!((r.node.len(), r.reach.len()), (5, 3));
        assert_eq!(r.gateways(0, 4), vec![2]);
        assert!(r.forwards(2) && !r.forwards(1) && !r.forwards(3));
    }

    #[test]
    fn a_chain_of_clusters_passes_every_gateway_in_order() {
        let nodes = Nodes::new(["a", "b", "c", "d"].map(node));
        let reaches = vec![
            reach(&["10.1.0.1/24"], false),
            reach(&["10.1.0.2/24", "10.2.0.2/24"], true),
            reach(&["10.2.0.3/24", "10.3.0.3/24"], true),
            reach(&["10.3.0.4/24"], false),
        ];
        let r = Routes::new(reaches, &nodes);
        assert_eq!(r.gateways(0, 3), vec![1, 2]);
        assert_eq!(r.gateways(3, 0), vec![2, 1]);
        assert_eq!(r.gateways(0, 2), vec![1]);
    }

    #[test]
    fn unknown_or_unjoined_networks_are_tried_directly() {
        // No gateway between them: directly (the network may route).
        let nodes = Nodes::new(["a", "b"].map(node));
        let r = Routes::new(
            vec![
                reach(&["10.1.0.1/24"], false),
                reach(&["10.2.0.1/24"], false),
            ],
            &nodes,
        );
        assert!(r.gateways(0, 1).is_empty());
        // Trying it anyway, a failure says why the two may not meet.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let nowhere = [closed.local_addr().unwrap()];
        drop(closed);
        let soon = Instant::now() + std::time::Duration::from_millis(200);
        let e = r
            .dial(0, 1, &nowhere, soon, "rank 1")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no gateway joins them") && e.contains(GROUPS_VAR),
            "{e}"
        );
        // A node that reports no network is reached directly.
        let r = Routes::new(
            vec![reach(&[], false), reach(&["10.2.0.1/24"], true)],
            &nodes,
        );
        assert!(r.gateways(0, 1).is_empty());
    }

    #[test]
    fn the_same_private_address_on_two_hosts_is_not_a_shared_network() {
        // docker0 on every host: 172.17.0.1/16 twice is not one network.
        let nodes = Nodes::new(["a", "g", "b"].map(node));
        let r = Routes::new(
            vec![
                reach(&["10.1.0.1/24", "172.17.0.1/16"], false),
                reach(&["10.1.0.2/24", "10.2.0.2/24"], true),
                reach(&["10.2.0.3/24", "172.17.0.1/16"], false),
            ],
            &nodes,
        );
        assert_eq!(r.gateways(0, 2), vec![1]);
        let mine = [net("10.1.0.1/24"), net("172.17.0.1/16")];
        let theirs: Vec<SocketAddr> = ["172.17.0.1:9", "10.9.0.3:9", "10.1.0.7:9", "127.0.0.1:9"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        assert_eq!(
            usable_order(&mine, false, &theirs),
            vec![theirs[2], theirs[1]],
            "the peer's address on our network first, our own and loopback never"
        );
        assert_eq!(usable_order(&mine, true, &theirs)[0], theirs[3]);
    }

    #[test]
    fn named_groups_replace_the_subnets() {
        let mut a = reach(&["10.1.0.1/24"], false);
        let mut b = reach(&["10.1.0.2/24", "10.2.0.2/24"], true);
        let mut c = reach(&["10.1.0.3/24"], false);
        a.groups = Some(vec!["x".into()]);
        b.groups = Some(vec!["x".into(), "y".into()]);
        c.groups = Some(vec!["y".into()]);
        let r = Routes::new(vec![a, b, c], &Nodes::new(["a", "b", "c"].map(node)));
        assert_eq!(r.gateways(0, 2), vec![1], "one subnet, but other groups");
        assert_eq!(
            parse_groups(Some(" x, y ")).unwrap(),
            Some(vec!["x".into(), "y".into()])
        );
        assert_eq!(parse_groups(Some(" ")).unwrap(), None);
        let e = parse_groups(Some("x,,y")).unwrap_err().to_string();
        assert!(e.contains("SODE_GROUPS"), "{e}");
    }
}
