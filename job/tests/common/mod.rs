//! Helpers shared by the job crate's integration tests.
#![allow(dead_code)]

use std::collections::{BTreeSet, HashSet};
use std::net::{Ipv4Addr, SocketAddrV4};

/// The addresses of this process's listening IPv4 TCP sockets (an IPv6
/// socket, which sode does not open unless told to, as `[::]` port 0).
pub fn listening() -> BTreeSet<SocketAddrV4> {
    let ours: HashSet<String> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|t| {
            let t = t.to_string_lossy().into_owned();
            Some(t.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let mut found = BTreeSet::new();
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local address, state (0A: listening), inode.
            let (local, state, inode) = (f[1], f[3], f[9]);
            if state != "0A" || !ours.contains(inode) {
                continue;
            }
            let (ip, port) = local.split_once(':').unwrap();
            let port = u16::from_str_radix(port, 16).unwrap();
            // The kernel prints an IPv4 address's bytes as one native word.
            let ip = match u32::from_str_radix(ip, 16) {
                Ok(word) => Ipv4Addr::from(word.to_ne_bytes()),
                Err(_) => Ipv4Addr::UNSPECIFIED,
            };
            found.insert(SocketAddrV4::new(ip, port));
        }
    }
    found
}
