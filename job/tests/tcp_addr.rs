//! `SODE_TCP_ADDR` names the address sode's listeners take the same way on
//! every node: here a list whose first item this host lacks and whose
//! second is the loopback interface. Three ranks (threads of this process,
//! so the setting is the whole process's: this file holds one test) meet
//! over the TCP rendezvous, open data streams to each other and send over
//! them; every socket of the process listening meanwhile, but the
//! rendezvous the launcher named, listens on 127.0.0.1 only, not on every
//! interface. A value that names nothing this host has fails every rank,
//! naming the setting and the interfaces there are.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use sode_job::{LaunchInfo, Secret, World, TCP_ADDR_VAR};

mod common;
use common::meet_and_send;

const RANKS: usize = 3;

#[test]
fn listeners_take_the_named_interface_s_address_only() {
    std::env::set_var(TCP_ADDR_VAR, "nosuch9");
    let root = sode_job::free_port().unwrap();
    let secret = Secret::random().unwrap();
    let told: Vec<String> = (0..RANKS)
        .map(|rank| {
            let secret = secret.clone();
            std::thread::spawn(move || {
                let launch = LaunchInfo::loopback(rank, RANKS, root, secret);
                let e = World::init_with(&launch, Duration::from_secs(30)).unwrap_err();
                sode_job::diag::chain(&e)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    for t in &told {
        assert!(
            t.contains("SODE_TCP_ADDR") && t.contains("nosuch9") && t.contains("lo 127.0.0.1"),
            "{t}"
        );
    }

    std::env::set_var(TCP_ADDR_VAR, "nosuch9,lo");
    let root = sode_job::free_port().unwrap();
    let found = meet_and_send(RANKS, root);
    println!("{TCP_ADDR_VAR}=nosuch9,lo: listening on {found:?} (the rendezvous {root})");
    let elsewhere: Vec<&SocketAddrV4> = found
        .iter()
        .filter(|a| a.port() != root && *a.ip() != Ipv4Addr::LOCALHOST)
        .collect();
    assert!(elsewhere.is_empty(), "listening elsewhere: {elsewhere:?}");
    // Each rank's listener for its peers' links at least.
    let on_loopback = found.iter().filter(|a| a.port() != root).count();
    assert!(on_loopback >= RANKS, "{found:?}");
}
