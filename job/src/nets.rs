//! The networks a node is on, and the order worth trying a peer's
//! addresses in from them. A leaf: the routes and the relays both use it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use serde::{Deserialize, Serialize};

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
