//! The networks a node is on, the order worth trying a peer's addresses
//! in from them, and the directory of where every rank listens. A leaf:
//! the routes, the relays and the bootstrap use it.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use serde::{Deserialize, Serialize};

/// Where every rank of a job accepts peer links. A rank's addresses share
/// one port, and the ranks of a node share their addresses: each distinct
/// list of addresses is held once, and a rank costs 6 bytes (its port and
/// its list's index) in a table every rank keeps of the whole job.
#[derive(Debug, Clone, Default)]
pub(crate) struct Directory {
    port: Vec<u16>,
    list: Vec<u32>,
    lists: Vec<Vec<IpAddr>>,
    /// Ranks whose addresses do not share one port, as they gave them.
    odd: BTreeMap<usize, Vec<SocketAddr>>,
}

impl Directory {
    /// The directory of ranks listening at `listen[r]`, rank by rank.
    pub(crate) fn new(listen: impl IntoIterator<Item = Vec<SocketAddr>>) -> Directory {
        let mut d = Directory::default();
        let mut index: HashMap<Vec<IpAddr>, u32> = HashMap::new();
        for (rank, addrs) in listen.into_iter().enumerate() {
            let port = addrs.first().map_or(0, SocketAddr::port);
            if addrs.iter().any(|a| a.port() != port) {
                d.odd.insert(rank, addrs);
                d.port.push(0);
                d.list.push(0);
                continue;
            }
            let ips: Vec<IpAddr> = addrs.iter().map(SocketAddr::ip).collect();
            let next = d.lists.len() as u32;
            let i = *index.entry(ips).or_insert_with_key(|ips| {
                d.lists.push(ips.clone());
                next
            });
            d.port.push(port);
            d.list.push(i);
        }
        d
    }

    /// Where rank `rank` listens, in the order to try; none for a rank
    /// outside the job.
    pub(crate) fn addrs(&self, rank: usize) -> Vec<SocketAddr> {
        if let Some(odd) = self.odd.get(&rank) {
            return odd.clone();
        }
        match (self.port.get(rank), self.list.get(rank)) {
            (Some(&port), Some(&i)) => self.lists[i as usize]
                .iter()
                .map(|&ip| SocketAddr::new(ip, port))
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// An IPv4 network an interface of a node is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Net {
    pub(crate) addr: Ipv4Addr,
    pub(crate) prefix: u8,
}

impl Net {
    pub(crate) fn contains(&self, ip: Ipv4Addr) -> bool {
        let keep = u32::MAX
            .checked_shl(32 - u32::from(self.prefix.min(32)))
            .unwrap_or(0);
        u32::from(self.addr) & keep == u32::from(ip) & keep
    }
}

/// `addrs` of a peer in the order worth trying from a host on `mine`:
/// on the same node, loopback first; on another, addresses inside one of
/// `mine` first, and none of this host's own addresses (a peer's address
/// equal to one of ours is another host's copy of a private network).
pub(crate) fn usable_order(mine: &[Net], same_node: bool, addrs: &[SocketAddr]) -> Vec<SocketAddr> {
    if same_node {
        let mut out = addrs.to_vec();
        out.sort_by_key(|a| !a.ip().is_loopback());
        return out;
    }
    let v4 = |a: &SocketAddr| match a.ip() {
        IpAddr::V4(ip) => Some(ip),
        IpAddr::V6(_) => None,
    };
    let mut near = Vec::new();
    let mut rest = Vec::new();
    for a in addrs {
        let ip = v4(a);
        if a.ip().is_loopback() || ip.is_some_and(|ip| mine.iter().any(|n| n.addr == ip)) {
            continue;
        }
        if ip.is_some_and(|ip| mine.iter().any(|n| n.contains(ip))) {
            near.push(*a);
        } else {
            rest.push(*a);
        }
    }
    near.extend(rest);
    if near.is_empty() {
        return addrs.to_vec();
    }
    near
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_gives_back_every_rank_s_addresses_in_order() {
        let a = |t: &str| -> SocketAddr { t.parse().unwrap() };
        let listen = vec![
            vec![a("10.0.0.1:5"), a("127.0.0.1:5")],
            vec![a("10.0.0.1:6"), a("127.0.0.1:6")],
            vec![a("10.0.0.2:5")],
            vec![a("10.0.0.3:7"), a("10.0.0.3:8")],
            Vec::new(),
        ];
        let d = Directory::new(listen.clone());
        for (r, addrs) in listen.iter().enumerate() {
            assert_eq!(&d.addrs(r), addrs, "rank {r}");
        }
        assert_eq!(d.lists.len(), 3, "ranks 0 and 1 share their node's list");
        assert!(d.addrs(5).is_empty());
    }
}
