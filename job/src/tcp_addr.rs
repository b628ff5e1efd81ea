//! `SODE_TCP_ADDR`: the address sode's TCP listeners take on this host.
//! A job's ranks on every node read the same value (a batch script's
//! `export`, `mpirun -x`), so it names the address as a cluster does: an
//! interface (`ib0`), a subnet (`10.1.0.0/16`) or an address; several,
//! comma-separated, stand for the first this host has (`ib0,ib1` on a
//! cluster whose nodes name their fast network differently).

use std::net::IpAddr;

use crate::error::{JobError, Result};

/// The variable that names where sode's TCP listeners (data streams and
/// setup links) listen and what they advertise: an interface, a subnet or
/// an address of this host, or several, comma-separated (the first this
/// host has); by default every interface that is up.
pub const TCP_ADDR_VAR: &str = "SODE_TCP_ADDR";

/// One address of one of this host's interfaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostAddr {
    /// The interface's name, as `ip addr` shows it.
    pub(crate) interface: String,
    /// Whether the interface is up.
    pub(crate) up: bool,
    /// The address.
    pub(crate) ip: IpAddr,
}

/// This host's addresses, in the kernel's order.
pub(crate) fn host_addrs() -> Vec<HostAddr> {
    let Ok(ifs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    ifs.filter_map(|a| {
        let sa = a.address?;
        let ip = match (sa.as_sockaddr_in(), sa.as_sockaddr_in6()) {
            (Some(v4), _) => IpAddr::V4(v4.ip()),
            (_, Some(v6)) => IpAddr::V6(v6.ip()),
            _ => return None,
        };
        Some(HostAddr {
            interface: a.interface_name,
            up: a.flags.contains(nix::net::if_::InterfaceFlags::IFF_UP),
            ip,
        })
    })
    .collect()
}

/// The address `SODE_TCP_ADDR` names on this host; `None` when it is
/// unset or empty (every interface).
///
/// # Errors
///
/// [`JobError::InvalidSetting`] when it names nothing this host has.
pub(crate) fn chosen() -> Result<Option<IpAddr>> {
    let Ok(value) = std::env::var(TCP_ADDR_VAR) else {
        return Ok(None);
    };
    if value.trim().is_empty() {
        return Ok(None);
    }
    resolve(&value, &host_addrs())
        .map(Some)
        .map_err(|why| JobError::InvalidSetting {
            name: TCP_ADDR_VAR.into(),
            value,
            why,
        })
}

/// What one comma-separated item of the setting names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wanted<'a> {
    Address(IpAddr),
    Subnet { net: IpAddr, prefix: u8 },
    Interface(&'a str),
}

impl<'a> Wanted<'a> {
    fn parse(item: &'a str) -> std::result::Result<Wanted<'a>, String> {
        if let Ok(ip) = item.parse() {
            return Ok(Wanted::Address(ip));
        }
        if let Some((net, prefix)) = item.split_once('/') {
            let net: IpAddr = net
                .parse()
                .map_err(|_| format!("{item:?}: {net:?} is not an IPv4 or IPv6 address"))?;
            let most = if net.is_ipv4() { 32 } else { 128 };
            let prefix = prefix
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= most)
                .ok_or_else(|| format!("{item:?}: the prefix length must be 0 to {most}"))?;
            return Ok(Wanted::Subnet { net, prefix });
        }
        let name_like = item
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:@".contains(c));
        if item.is_empty() || !name_like || item.len() > 15 {
            return Err(format!(
                "{item:?} is no interface name, subnet (10.1.0.0/16) or address"
            ));
        }
        Ok(Wanted::Interface(item))
    }

    /// The address of `host` this item names: an interface's first IPv4
    /// address (else its first IPv6 one that needs no scope); the first
    /// address in a subnet, loopback last; an address itself. Only
    /// interfaces that are up.
    fn find(self, host: &[HostAddr]) -> Option<IpAddr> {
        let usable = |a: &&HostAddr| a.up && !link_local_v6(a.ip);
        match self {
            Wanted::Address(ip) => host
                .iter()
                .filter(usable)
                .find(|a| a.ip == ip)
                .map(|a| a.ip),
            // Loopback only when the subnet holds nothing else: a wide
            // subnet (`0.0.0.0/0`) means the node's network. (The first
            // of equal keys wins.)
            Wanted::Subnet { net, prefix } => host
                .iter()
                .filter(usable)
                .filter(|a| in_subnet(a.ip, net, prefix))
                .min_by_key(|a| a.ip.is_loopback())
                .map(|a| a.ip),
            Wanted::Interface(name) => {
                let all: Vec<&HostAddr> = host
                    .iter()
                    .filter(usable)
                    .filter(|a| a.interface == name)
                    .collect();
                all.iter()
                    .find(|a| a.ip.is_ipv4())
                    .or_else(|| all.first())
                    .map(|a| a.ip)
            }
        }
    }
}

/// The address `value` names among `host`'s: the first item of the list
/// this host has.
fn resolve(value: &str, host: &[HostAddr]) -> std::result::Result<IpAddr, String> {
    let items: Vec<Wanted<'_>> = value
        .split(',')
        .map(str::trim)
        .map(Wanted::parse)
        .collect::<std::result::Result<_, _>>()?;
    if let Some(ip) = items.iter().find_map(|w| w.find(host)) {
        return Ok(ip);
    }
    let host_name = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "this host".into());
    let up: Vec<String> = host
        .iter()
        .filter(|a| a.up && !link_local_v6(a.ip))
        .map(|a| format!("{} {}", a.interface, a.ip))
        .collect();
    let down: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|name| host.iter().any(|a| !a.up && a.interface == *name))
        .collect();
    let down = if down.is_empty() {
        String::new()
    } else {
        format!(" ({} is down)", down.join(", "))
    };
    Err(format!(
        "{host_name} has no such interface, subnet or address{down}; its interfaces that are up: {}",
        if up.is_empty() {
            "none".to_string()
        } else {
            up.join(", ")
        }
    ))
}

/// Whether `ip` is an IPv6 link-local address (usable only with a scope,
/// which an address on the wire does not carry).
fn link_local_v6(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
}

/// Whether `ip` lies in `net`/`prefix` (both of one family).
fn in_subnet(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            ip.to_bits() & mask == net.to_bits() & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            ip.to_bits() & mask == net.to_bits() & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Vec<HostAddr> {
        let a = |interface: &str, up: bool, ip: &str| HostAddr {
            interface: interface.into(),
            up,
            ip: ip.parse().unwrap(),
        };
        vec![
            a("lo", true, "127.0.0.1"),
            a("eth0", true, "fe80::1"),
            a("eth0", true, "192.0.2.2"),
            a("ib0", true, "fd00::7"),
            a("ib0", true, "10.1.4.7"),
            a("ib1", false, "10.2.4.7"),
            a("v6only", true, "fd00::9"),
        ]
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_interface_a_subnet_or_an_address_names_one_address_of_this_host() {
        let h = host();
        assert_eq!(resolve("ib0", &h), Ok(ip("10.1.4.7")), "IPv4 first");
        assert_eq!(resolve("eth0", &h), Ok(ip("192.0.2.2")));
        assert_eq!(resolve("v6only", &h), Ok(ip("fd00::9")));
        assert_eq!(resolve("10.1.0.0/16", &h), Ok(ip("10.1.4.7")));
        assert_eq!(resolve("10.0.0.0/8", &h), Ok(ip("10.1.4.7")), "ib1 is down");
        assert_eq!(resolve("fd00::/64", &h), Ok(ip("fd00::7")));
        assert_eq!(
            resolve("0.0.0.0/0", &h),
            Ok(ip("192.0.2.2")),
            "loopback last"
        );
        assert_eq!(resolve("127.0.0.0/8", &h), Ok(ip("127.0.0.1")));
        assert_eq!(resolve("192.0.2.2", &h), Ok(ip("192.0.2.2")));
        assert_eq!(resolve(" 127.0.0.1 ", &h), Ok(ip("127.0.0.1")));
    }

    #[test]
    fn a_list_names_the_first_item_this_host_has() {
        let h = host();
        assert_eq!(resolve("ib3,ib1,ib0,eth0", &h), Ok(ip("10.1.4.7")));
        assert_eq!(resolve("10.9.0.0/16, eth0", &h), Ok(ip("192.0.2.2")));
    }

    #[test]
    fn nothing_this_host_has_is_named_with_what_it_has() {
        let h = host();
        let why = resolve("ib1", &h).unwrap_err();
        assert!(why.contains("ib1 is down"), "{why}");
        assert!(
            why.contains("ib0 10.1.4.7") && why.contains("lo 127.0.0.1"),
            "{why}"
        );
        assert!(!why.contains("fe80"), "link-local is no choice: {why}");
        let why = resolve("10.3.0.0/16", &h).unwrap_err();
        assert!(
            why.contains("no such interface, subnet or address"),
            "{why}"
        );
        assert!(resolve("192.0.2.99", &h).is_err(), "not an address here");
        assert!(resolve("fe80::1", &h).is_err(), "link-local");
    }

    #[test]
    fn a_malformed_item_is_named() {
        let h = host();
        for (value, says) in [
            ("10.1.0.0/33", "prefix length must be 0 to 32"),
            ("10.1.0/16", "is not an IPv4 or IPv6 address"),
            ("ib0;rm -rf", "no interface name"),
            ("ib0,,eth0", "no interface name"),
            ("a-name-far-too-long", "no interface name"),
        ] {
            let why = resolve(value, &h).unwrap_err();
            assert!(why.contains(says), "{value}: {why}");
        }
    }
}
