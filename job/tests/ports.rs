//! `SODE_TCP_PORTS` keeps every listener of sode's within the ports a
//! cluster's firewall opens between its nodes. Three ranks (threads of this
//! process, so the setting is the whole process's: this file holds one
//! test) meet over the TCP rendezvous, open data streams to each other and
//! send over them; every socket of the process listening meanwhile, but the
//! rendezvous the launcher named, is on a port of the range.

use std::collections::BTreeSet;

use sode_job::TCP_PORTS_VAR;

mod common;
use common::meet_and_send;

/// The first of `len` consecutive ports that are all free now.
fn free_range(len: u16) -> u16 {
    loop {
        let first = sode_job::free_port().unwrap();
        let all_free = (first..first.saturating_add(len))
            .all(|p| std::net::TcpListener::bind(("0.0.0.0", p)).is_ok());
        if all_free && first.checked_add(len).is_some() {
            return first;
        }
    }
}

#[test]
fn every_listener_takes_a_port_of_the_range() {
    const RANKS: usize = 3;
    let first = free_range(12);
    let last = first + 11;
    std::env::set_var(TCP_PORTS_VAR, format!("{first}-{last}"));
    let root = sode_job::free_port().unwrap();
    let ports: BTreeSet<u16> = meet_and_send(RANKS, root)
        .iter()
        .map(|a| a.port())
        .collect();
    let outside: Vec<u16> = ports
        .iter()
        .copied()
        .filter(|&p| p != root && !(first..=last).contains(&p))
        .collect();
    println!("{TCP_PORTS_VAR}={first}-{last}: listening on {ports:?} (the rendezvous {root})");
    assert!(
        outside.is_empty(),
        "listening outside the range: {outside:?}"
    );
    // Each rank's listener for its peers' links at least.
    let inside = ports.iter().filter(|p| (first..=last).contains(*p)).count();
    assert!(
        inside >= RANKS,
        "{inside} listeners in the range: {ports:?}"
    );
}
