//! A rank that gives up its part of an exchange's setup tells the job
//! (`World::give_up_setup`), and a neighbour waiting for that part (its
//! shared-memory segment, its setup link and data connection) stops
//! waiting at once, naming it and its reason, rather than at the setup
//! timeout. Two ranks run as threads of this process: rank 1 gives up
//! instead of building, rank 0 builds with a 30 s setup timeout. Each then
//! gives up in the job's next collective step, as the C ABI's commit does
//! (over RDMA, rank 0 waits in one: the device models' allgather).

use std::time::{Duration, Instant};

use sode::{Link, LinkExchange, Transport};
use sode_job::{JobError, World};
mod common;
use common::{free_port, link_to, rdma_available, thread_world};

/// What rank 0's build returned, and how long it took, with rank 1
/// giving up the same exchange after `after`.
fn build_while_the_peer_gives_up(transport: Transport, after: Duration) -> (String, Duration) {
    let mut out = two_ranks("gave-up-test", move |rank, w, link| {
        // As the C ABI's commit, which compares the transports in a
        // step of its own: on one node the build takes none.
        let builder = LinkExchange::builder(w, vec![link])
            .transport(transport)
            .transports_agreed()
            .setup_timeout(Duration::from_secs(30));
        let patience = Duration::from_secs(60);
        if rank == 1 {
            std::thread::sleep(after);
            let why = "no memory for its segment";
            w.give_up_setup(builder.name(), 3, why);
            let _ = w.give_up(3, why, patience);
            w.barrier(patience).unwrap();
            return None;
        }
        let began = Instant::now();
        let built = builder.build();
        let took = began.elapsed();
        // As the C ABI's commit: a rank that did not learn of the
        // failure in a collective step of its own gives up in the
        // next, so that both take the same steps (the barrier
        // after checks they did).
        if let Err(e) = &built {
            if JobError::gave_up_in(e).is_none() {
                let _ = w.give_up(1, &e.to_string(), patience);
            }
        }
        w.barrier(patience).unwrap();
        Some(match built {
            Ok(_) => ("built".to_string(), took),
            Err(e) => (sode_job::diag::chain(&e), took),
        })
    });
    out.remove(0).unwrap()
}

/// Runs `each` on two ranks, threads of this process in a job named
/// `job`, each with its world and a link of 64 bytes each way to the
/// other; what each returned, rank 0's first.
fn two_ranks<T: Send + 'static>(
    job: &'static str,
    each: impl Fn(usize, &World, Link) -> T + Send + Clone + 'static,
) -> Vec<T> {
    let port = free_port();
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            let each = each.clone();
            std::thread::spawn(move || {
                let w = thread_world(rank, 2, port, job);
                let peer = 1 - rank;
                let link = link_to(peer);
                each(rank, &w, link)
            })
        })
        .collect();
    ranks.into_iter().map(|h| h.join().unwrap()).collect()
}

fn stops_waiting(transport: Transport) {
    let (got, took) = build_while_the_peer_gives_up(transport, Duration::from_millis(300));
    // Told by the notice while it waited for a peer; over RDMA, by the
    // give-up in the models' allgather it waited in.
    let named = match transport {
        Transport::Rdma => "job barrier: rank 1 gave up: no memory for its segment",
        _ => "rank 1 gave up setting up this exchange: no memory for its segment",
    };
    assert_eq!(got, named, "{transport:?}");
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

#[test]
fn a_neighbour_stops_waiting_for_an_rdma_peer_that_will_not_come() {
    if rdma_available() {
        stops_waiting(Transport::Rdma);
    }
}

/// A rank whose own part of the setup fails (here its links refused once
/// the job's collective step is taken: shared sets of no bytes) tells the
/// job by itself, so that its neighbour, which waits for its segment or
/// connection, stops at once, naming it and why; and nothing is posted
/// when the builder is told not to (the C ABI's commit posts its own).
fn peer_fails_its_own_part(transport: Transport, tell: bool) -> (String, Duration) {
    let out = two_ranks("own-part-test", move |rank, w, link| {
        let mut builder = LinkExchange::builder(w, vec![link])
            .transport(transport)
            .setup_timeout(Duration::from_secs(if tell { 30 } else { 2 }))
            .tell_job_on_failure(tell);
        if rank == 1 {
            builder = builder.shared_sets(sode::SharedSets::default());
        }
        let began = Instant::now();
        let built = builder.build();
        let took = began.elapsed();
        // Both ranks end the setup in step before their worlds go.
        w.barrier(Duration::from_secs(60)).unwrap();
        match built {
            Ok(_) => ("built".to_string(), took),
            Err(e) => (sode_job::diag::chain(&e), took),
        }
    });
    let [(got, took), (own, _)] = <[_; 2]>::try_from(out).unwrap();
    assert!(own.contains("0 shared sets of 0 bytes"), "rank 1: {own}");
    (got, took)
}

fn told_by_the_failing_rank(transport: Transport) {
    let (got, took) = peer_fails_its_own_part(transport, true);
    assert!(
        got.starts_with("rank 1 gave up setting up this exchange: ")
            && got.contains("0 shared sets of 0 bytes"),
        "{transport:?}: {got}"
    );
    assert!(
        took < Duration::from_secs(5),
        "{transport:?}: rank 0 waited {took:?} for a rank whose setup failed (setup timeout 30 s)"
    );
    // Not told: rank 0 learns only at its own timeout.
    let (got, took) = peer_fails_its_own_part(transport, false);
    assert!(!got.contains("gave up"), "{transport:?}: {got}");
    assert!(
        took >= Duration::from_secs(2),
        "{transport:?}: {took:?}: {got}"
    );
}

#[test]
fn a_rank_whose_own_shared_memory_setup_fails_tells_its_neighbour() {
    told_by_the_failing_rank(Transport::Shm);
}

#[test]
fn a_rank_whose_own_connection_setup_fails_tells_its_neighbour() {
    told_by_the_failing_rank(Transport::Tcp);
}

/// Ranks of one node given different transports (`SODE_TRANSPORT` set on
/// some ranks only) are told so at once, on both, naming the transports,
/// rather than each wait out its timeout for a segment or a connection the
/// other never makes.
#[test]
fn ranks_of_one_node_given_different_transports_are_told_at_once() {
    let out = two_ranks("transports-test", |rank, w, link| {
        let transport = if rank == 0 {
            Transport::Auto
        } else {
            Transport::Tcp
        };
        let began = Instant::now();
        let built = LinkExchange::builder(w, vec![link])
            .transport(transport)
            .setup_timeout(Duration::from_secs(30))
            .build();
        let took = began.elapsed();
        match built {
            Ok(_) => panic!("rank {rank}: built over different transports"),
            Err(e) => (
                matches!(e, sode::HaloError::Disagree { .. }),
                e.to_string(),
                took,
            ),
        }
    });
    for (rank, (disagree, e, took)) in out.into_iter().enumerate() {
        assert!(disagree, "rank {rank}: {e}");
        assert!(e.contains("chose the"), "rank {rank}: {e}");
        let (mine, theirs) = if rank == 0 {
            ("auto", "tcp")
        } else {
            ("tcp", "auto")
        };
        assert!(
            e.contains(&format!("chose the {theirs} transport"))
                && e.contains(&format!("the {mine} transport")),
            "rank {rank}: {e}"
        );
        assert!(
            took < Duration::from_secs(10),
            "rank {rank}: told after {took:?}"
        );
    }
}
