//! Helpers shared by the job crate's integration tests.
#![allow(dead_code)]

use std::collections::{BTreeSet, HashSet};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use sode_job::{LaunchInfo, Secret, World};

/// Runs a job of `ranks` thread ranks meeting at the rendezvous port
/// `root`, each opening a data stream to every other and sending a byte
/// over each (checked at the far end); what the process listened on
/// ([`listening`]) once every stream carried its byte.
pub fn meet_and_send(ranks: usize, root: u16) -> BTreeSet<SocketAddrV4> {
    let secret = Secret::random().unwrap();
    let barrier = Arc::new(Barrier::new(ranks));
    let threads: Vec<_> = (0..ranks)
        .map(|rank| {
            let (secret, barrier) = (secret.clone(), barrier.clone());
            std::thread::spawn(move || {
                let launch = LaunchInfo::loopback(rank, ranks, root, secret);
                let world = World::init_with(&launch, Duration::from_secs(30)).unwrap();
                let others: BTreeSet<usize> = (0..ranks).filter(|&r| r != rank).collect();
                let mut streams = world
                    .connect_streams(&others, Duration::from_secs(30))
                    .unwrap();
                for (&peer, s) in streams.iter_mut() {
                    s.write_all(&[(rank * 10 + peer) as u8]).unwrap();
                }
                for (&peer, s) in streams.iter_mut() {
                    let mut got = [0u8];
                    s.read_exact(&mut got).unwrap();
                    assert_eq!(got[0] as usize, peer * 10 + rank, "from rank {peer}");
                }
                // Every listener is open until rank 0 has looked.
                barrier.wait();
                let found = (rank == 0).then(listening);
                barrier.wait();
                found
            })
        })
        .collect();
    threads
        .into_iter()
        .filter_map(|t| t.join().unwrap())
        .next()
        .unwrap()
}

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
