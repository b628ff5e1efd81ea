//! A rank that gives up its part of an exchange's setup tells the job
//! (`World::give_up_setup`), and a neighbour waiting for that part (its
//! shared-memory segment, its setup link and data connection) stops
//! waiting at once, naming it and its reason, rather than at the setup
//! timeout. Two ranks run as threads of this process: rank 1 gives up
//! instead of building, rank 0 builds with a 30 s setup timeout.

use std::time::{Duration, Instant};

use sode::{HaloError, Link, LinkExchange, Message, Transport};
mod common;
use common::{free_port, thread_world};

/// What rank 0's build returned, and how long it took, with rank 1
/// giving up the same exchange after `after`.
fn build_while_the_peer_gives_up(transport: Transport, after: Duration) -> (String, Duration) {
    let port = free_port();
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let w = thread_world(rank, 2, port, "gave-up-test");
                let peer = 1 - rank;
                let link = Link {
                    peer,
                    send: Some(Message { len: 64, tag: 1 }),
                    recv: Some(Message { len: 64, tag: 1 }),
                    offset: Vec::new(),
                    name: format!("rank {peer}"),
                };
                let builder = LinkExchange::builder(&w, vec![link])
                    .transport(transport)
                    .setup_timeout(Duration::from_secs(30));
                if rank == 1 {
                    std::thread::sleep(after);
                    w.give_up_setup(builder.name(), 3, "no memory for its segment");
                    // Stays in the job while rank 0 hears it.
                    w.barrier(Duration::from_secs(30)).unwrap();
                    return None;
                }
                let began = Instant::now();
                let built = builder.build();
                let took = began.elapsed();
                w.barrier(Duration::from_secs(30)).unwrap();
                Some(match built {
                    Ok(_) => ("built".to_string(), took),
                    Err(e @ HaloError::PeerGaveUp { rank: 1, .. }) => (e.to_string(), took),
                    Err(e) => (format!("another error: {e}"), took),
                })
            })
        })
        .collect();
    let mut out = ranks.into_iter().map(|h| h.join().unwrap());
    out.next().flatten().unwrap()
}

fn stops_waiting(transport: Transport) {
    let (got, took) = build_while_the_peer_gives_up(transport, Duration::from_millis(300));
    assert_eq!(
        got, "rank 1 gave up setting up this exchange: no memory for its segment",
        "{transport:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "{transport:?}: rank 0 waited {took:?} for a rank that gave up (setup timeout 30 s)"
    );
}

#[test]
fn a_neighbour_stops_waiting_for_a_shared_memory_segment_that_will_not_come() {
    stops_waiting(Transport::Shm);
}

#[test]
fn a_neighbour_stops_waiting_for_a_connection_that_will_not_come() {
    stops_waiting(Transport::Tcp);
}
