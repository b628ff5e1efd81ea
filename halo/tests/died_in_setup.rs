//! A rank killed while its neighbour sets up their exchange (before it
//! made its part: its shared-memory segment, its connection) ends the
//! neighbour's wait as soon as the job's health watcher finds it dead,
//! naming it, rather than at the setup timeout (or never, with none).
//! Two ranks run as processes (this test executable run again): rank 1
//! kills itself with SIGKILL once the job is up, rank 0 builds an exchange
//! with it with a 30 s setup timeout, then takes a barrier, which must fail
//! at once naming the dead rank too. Shared memory and TCP run on the
//! host; RDMA in the SoftRoCE guest (`ci/softroce/tests.sh`).

use std::time::{Duration, Instant};

use sode::{LinkExchange, Transport};
use sode_job::World;
mod common;
use common::{free_port, link_to, output_of, rdma_available, spawn_rank};

const ROLE: &str = "SODE_DIED_IN_SETUP_TEST";
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// One rank, when run as a child with `ROLE` naming the transport.
#[test]
fn rank() {
    let Some(transport) = std::env::var_os(ROLE) else {
        return;
    };
    let w = World::init(Duration::from_secs(30)).unwrap();
    if w.rank() == 1 {
        // Late enough that rank 0 waits for this rank's part.
        std::thread::sleep(Duration::from_millis(300));
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL).unwrap();
    }
    let transport = match transport.to_str() {
        Some("shm") => Transport::Shm,
        Some("rdma") => Transport::Rdma,
        _ => Transport::Tcp,
    };
    let link = link_to(1);
    let began = Instant::now();
    // As the C ABI's commit, which compares the transports in a step of
    // its own: the build takes no collective step on one node, so rank 0
    // waits for the dead rank's segment or connection, the wait under
    // test (a death during a collective step is `job`'s tests').
    let built = LinkExchange::builder(&w, vec![link])
        .transport(transport)
        .transports_agreed()
        .setup_timeout(SETUP_TIMEOUT)
        .build();
    let took = began.elapsed();
    let Err(e) = built else {
        panic!("an exchange with a dead rank was built");
    };
    println!(
        "build: {} ms: {}",
        took.as_millis(),
        sode_job::diag::chain(&e)
    );
    let began = Instant::now();
    let step = w.barrier(SETUP_TIMEOUT);
    let took = began.elapsed();
    let e = step.expect_err("a barrier with a dead rank passed");
    println!(
        "barrier: {} ms: {}",
        took.as_millis(),
        sode_job::diag::chain(&e)
    );
}

/// What rank 0 printed about its build and its barrier, with rank 1
/// killed, over `transport`.
fn survivor_of_a_death_in_setup(transport: &str) -> String {
    let port = free_port();
    let job = format!("died{}{transport}", std::process::id());
    let ranks: Vec<_> = (0..2)
        .map(|r| spawn_rank(r, 2, port, &job, (ROLE, transport), &[]))
        .collect();
    let mut ranks = ranks.into_iter();
    let survivor = ranks.next().unwrap();
    let _ = ranks.next().unwrap().wait();
    let (ok, text) = output_of(survivor);
    assert!(ok, "{transport}: rank 0 failed:\n{text}");
    text
}

/// The milliseconds and message after `what` in rank 0's output `text`
/// (the test harness may print its own words before it).
fn line<'t>(text: &'t str, what: &str) -> (u64, &'t str) {
    let l = text
        .lines()
        .find_map(|l| l.split_once(what).map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("no {what:?} line in:\n{text}"));
    let (ms, message) = l.split_once(" ms: ").unwrap();
    (ms.trim().parse().unwrap(), message)
}

/// What rank 0 printed, once it ended, over `transport`; the build within
/// 5 s and the barrier within 1 s.
fn ends_at_the_death(transport: &str) -> String {
    let text = survivor_of_a_death_in_setup(transport);
    let (ms, _) = line(&text, "build: ");
    assert!(
        ms < 5_000,
        "{transport}: rank 0 waited {ms} ms for a dead rank (setup timeout {SETUP_TIMEOUT:?}):\n{text}"
    );
    let (ms, _) = line(&text, "barrier: ");
    assert!(ms < 1_000, "{transport}: the barrier took {ms} ms:\n{text}");
    text
}

/// Waiting for the dead rank's part, rank 0 learns of the death from the
/// health watcher, and says so; so does the barrier after.
fn ends_naming_the_death(transport: &str) {
    if std::env::var_os(ROLE).is_some() {
        return;
    }
    let text = ends_at_the_death(transport);
    let (_, message) = line(&text, "build: ");
    assert!(
        message.contains("the job failed: rank 1 (on ")
            && message.contains("closed its health link without finishing"),
        "{transport}: {message}"
    );
    let (_, message) = line(&text, "barrier: ");
    assert!(
        message.starts_with("the job failed: rank 1 (on "),
        "{transport}: {message}"
    );
}

#[test]
fn a_neighbour_stops_waiting_for_the_segment_of_a_dead_rank() {
    ends_naming_the_death("shm");
}

#[test]
fn a_neighbour_stops_waiting_for_the_connection_of_a_dead_rank() {
    ends_naming_the_death("tcp");
}

/// Over RDMA rank 0 waits in a collective step first (the device models'
/// allgather), where the dead rank's closed link may end the wait before
/// the health watcher's verdict: the error then names its link to rank 1.
#[test]
fn a_neighbour_stops_waiting_for_an_rdma_peer_that_died() {
    if std::env::var_os(ROLE).is_some() || !rdma_available() {
        return;
    }
    let text = ends_at_the_death("rdma");
    for what in ["build: ", "barrier: "] {
        let (_, message) = line(&text, what);
        assert!(
            message.contains("rank 1"),
            "rdma: the {what:?} error does not name rank 1: {message}"
        );
    }
}
