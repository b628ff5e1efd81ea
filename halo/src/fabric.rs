//! Which RDMA fabric a rank's device is on, so that two ranks use RDMA only
//! when their devices can reach each other, and TCP otherwise.
//!
//! InfiniBand ports are named by their GID's subnet prefix; RoCE ports by
//! the IP network of their GID (the interface's address and netmask). Two
//! devices on the same fabric give the same name. A RoCE GID whose network
//! is not found on this host is named `roce` alone: one fabric with every
//! other such port, as before fabrics were told apart.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An interface address of this host and its prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Network {
    pub addr: IpAddr,
    pub prefix: u8,
}

/// The fabric of a port with `link_layer` (`InfiniBand` or `Ethernet`) and
/// source GID `gid`, given this host's interface networks.
pub(crate) fn fabric_of(link_layer: &str, gid: [u8; 16], networks: &[Network]) -> String {
    let v6 = Ipv6Addr::from(gid);
    if link_layer == "InfiniBand" {
        let prefix: Vec<String> = v6.segments()[..4]
            .iter()
            .map(|s| format!("{s:x}"))
            .collect();
        return format!("ib {}", prefix.join(":"));
    }
    let ip = match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    };
    match networks.iter().find(|n| n.addr == ip) {
        Some(n) => format!("roce {}/{}", masked(ip, n.prefix), n.prefix),
        None => "roce".into(),
    }
}

/// `ip` with all but its first `prefix` bits cleared.
fn masked(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let keep = u32::MAX
                .checked_shl(32 - u32::from(prefix.min(32)))
                .unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & keep))
        }
        IpAddr::V6(a) => {
            let keep = u128::MAX
                .checked_shl(128 - u32::from(prefix.min(128)))
                .unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & keep))
        }
    }
}

/// This host's interface addresses with their prefix lengths.
pub(crate) fn host_networks() -> Vec<Network> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for a in addrs {
        let (Some(addr), Some(mask)) = (a.address, a.netmask) else {
            continue;
        };
        if let (Some(ip), Some(m)) = (addr.as_sockaddr_in(), mask.as_sockaddr_in()) {
            out.push(Network {
                addr: IpAddr::V4(ip.ip()),
                prefix: m.ip().to_bits().count_ones() as u8,
            });
        } else if let (Some(ip), Some(m)) = (addr.as_sockaddr_in6(), mask.as_sockaddr_in6()) {
            out.push(Network {
                addr: IpAddr::V6(ip.ip()),
                prefix: m.ip().to_bits().count_ones() as u8,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped(a: [u8; 4]) -> [u8; 16] {
        Ipv4Addr::from(a).to_ipv6_mapped().octets()
    }

    #[test]
    fn roce_ports_on_one_subnet_share_a_fabric_and_others_do_not() {
        let nets = [
            Network {
                addr: "10.78.0.1".parse().unwrap(),
                prefix: 24,
            },
            Network {
                addr: "192.168.5.9".parse().unwrap(),
                prefix: 16,
            },
        ];
        let a = fabric_of("Ethernet", mapped([10, 78, 0, 1]), &nets);
        assert_eq!(a, "roce 10.78.0.0/24");
        let other_node = [Network {
            addr: "10.78.0.2".parse().unwrap(),
            prefix: 24,
        }];
        assert_eq!(
            fabric_of("Ethernet", mapped([10, 78, 0, 2]), &other_node),
            a
        );
        assert_eq!(
            fabric_of("Ethernet", mapped([192, 168, 5, 9]), &nets),
            "roce 192.168.0.0/16"
        );
        // A GID whose address is on no interface: one unnamed fabric.
        assert_eq!(
            fabric_of("Ethernet", mapped([172, 16, 0, 1]), &nets),
            "roce"
        );
    }

    #[test]
    fn infiniband_ports_are_named_by_their_subnet_prefix() {
        let mut gid = [0u8; 16];
        gid[..2].copy_from_slice(&[0xfe, 0x80]);
        gid[8..].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(fabric_of("InfiniBand", gid, &[]), "ib fe80:0:0:0");
        gid[7] = 9;
        assert_eq!(fabric_of("InfiniBand", gid, &[]), "ib fe80:0:0:9");
    }

    #[test]
    fn masks_cut_at_the_prefix() {
        assert_eq!(
            masked("10.78.3.200".parse().unwrap(), 20),
            "10.78.0.0".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            masked("10.78.3.200".parse().unwrap(), 0),
            "0.0.0.0".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            masked("fd00::1:2".parse().unwrap(), 64),
            "fd00::".parse::<IpAddr>().unwrap()
        );
        assert!(!host_networks().is_empty());
    }
}
