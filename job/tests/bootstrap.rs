//! The TCP bootstrap under attack, over real sockets: strangers who knock
//! on the rendezvous or on a peer listener (a wrong secret, garbage, an
//! oversized length, silence, a reset) are dropped; the job still meets in a
//! few seconds, and no stranger receives more than the 32-byte challenge.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use sode_job::{LaunchInfo, OutOfBand, Secret, TcpRendezvous, World};

fn free_port() -> u16 {
    sode_job::free_port().unwrap()
}

fn launch(rank: usize, size: usize, port: u16, secret: &Secret) -> LaunchInfo {
    LaunchInfo {
        job_id: Some("attacked".into()),
        ..LaunchInfo::loopback(rank, size, port, secret.clone())
    }
}

/// What a stranger does once connected.
#[derive(Debug, Clone, Copy)]
enum Stranger {
    /// Answers the challenge as the protocol says, with another secret.
    WrongSecret,
    /// Sends bytes that are no message at all.
    Garbage,
    /// Sends a length prefix of 4 GiB and nothing more.
    Oversized,
    /// Says nothing.
    Silent,
    /// Resets the connection at once.
    Reset,
}

/// Connects to `addr`, behaves as `kind`, and returns every byte it was
/// sent until the other side closed (or 10 s passed).
fn knock(addr: SocketAddr, kind: Stranger) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    match kind {
        Stranger::WrongSecret => {
            let mut challenge = [0u8; 32];
            s.read_exact(&mut challenge).unwrap();
            // A well-formed answer under a secret the job does not have.
            let _ = s.write_all(&[0x42; 64]);
            let mut got = challenge.to_vec();
            let _ = s.read_to_end(&mut got);
            return got;
        }
        Stranger::Garbage => {
            let _ =
                s.write_all(b"GET / HTTP/1.1\r\nHost: sode\r\n\r\n{\"rank\": 1, \"size\": 3}\r\n");
        }
        Stranger::Oversized => {
            let _ = s.write_all(&u32::MAX.to_le_bytes());
        }
        Stranger::Silent => {}
        Stranger::Reset => {
            // SO_LINGER 0: closing sends RST instead of FIN.
            let reset = nix::libc::linger {
                l_onoff: 1,
                l_linger: 0,
            };
            nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::Linger, &reset).unwrap();
            return Vec::new();
        }
    }
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    got
}

/// Ranks `ranks` of a job of `size` meeting at `port`, each starting
/// `World::init_with` on a thread of its own.
fn start_ranks(
    ranks: std::ops::Range<usize>,
    size: usize,
    port: u16,
    secret: &Secret,
) -> Vec<std::thread::JoinHandle<sode_job::Result<World>>> {
    ranks
        .map(|r| {
            let l = launch(r, size, port, secret);
            std::thread::spawn(move || World::init_with(&l, Duration::from_secs(60)))
        })
        .collect()
}

fn wait_listening(addr: SocketAddr) {
    let until = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < until, "rank 0 never listened");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn strangers_at_the_rendezvous_are_dropped_and_the_job_meets() {
    let secret = Secret::random().unwrap();
    let port = free_port();
    let root: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let size = 3;
    let t0 = Instant::now();
    let rank0 = start_ranks(0..1, size, port, &secret);
    wait_listening(root);
    let strangers: Vec<_> = [
        Stranger::WrongSecret,
        Stranger::Garbage,
        Stranger::Oversized,
        Stranger::Silent,
        Stranger::Reset,
    ]
    .into_iter()
    .map(|k| (k, std::thread::spawn(move || knock(root, k))))
    .collect();
    // Let the strangers reach the listener before the real ranks do.
    std::thread::sleep(Duration::from_millis(200));
    let others = start_ranks(1..size, size, port, &secret);
    let worlds: Vec<World> = rank0
        .into_iter()
        .chain(others)
        .map(|h| h.join().unwrap().expect("the real ranks meet"))
        .collect();
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "the strangers held the job for {:?}",
        t0.elapsed()
    );
    for w in &worlds {
        assert_eq!(w.size(), size);
        assert_eq!(w.job_id(), worlds[0].job_id());
        assert!(w.job_id().starts_with("attacked-"), "{}", w.job_id());
    }
    for (kind, h) in strangers {
        let got = h.join().unwrap();
        assert!(
            told_nothing(&got),
            "{kind:?} received {} bytes, more than the challenge and the refusal",
            got.len()
        );
    }
}

/// Whether a stranger received nothing but the 32-byte challenge and, for
/// a wrong proof, the fixed 32-byte refusal (which tells it only that its
/// proof was wrong).
fn told_nothing(got: &[u8]) -> bool {
    got.len() <= 32 || (got.len() == 64 && &got[32..] == b"sode/1 refused: not this job's!!")
}

#[test]
fn a_stranger_at_a_peer_listener_is_dropped_and_the_peers_pair_up() {
    let secret = Secret::random().unwrap();
    let port = free_port();
    let joins: Vec<_> = (0..2)
        .map(|r| {
            let l = launch(r, 2, port, &secret);
            std::thread::spawn(move || {
                TcpRendezvous::join(&l, Instant::now() + Duration::from_secs(30)).unwrap()
            })
        })
        .collect();
    let mut ranks: Vec<TcpRendezvous> = joins.into_iter().map(|h| h.join().unwrap()).collect();
    let target = ranks[1].peer_listener().unwrap();
    let strangers: Vec<_> = [Stranger::WrongSecret, Stranger::Garbage]
        .into_iter()
        .map(|k| (k, std::thread::spawn(move || knock(target, k))))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut rank1 = ranks.pop().unwrap();
    let mut rank0 = ranks.pop().unwrap();
    let accepting = std::thread::spawn(move || {
        let mut links = rank1
            .connect(
                &BTreeSet::from([0]),
                Instant::now() + Duration::from_secs(30),
            )
            .unwrap();
        let got: String = links
            .get_mut(&0)
            .unwrap()
            .recv(Instant::now() + Duration::from_secs(10))
            .unwrap();
        got
    });
    let mut links = rank0
        .connect(
            &BTreeSet::from([1]),
            Instant::now() + Duration::from_secs(30),
        )
        .unwrap();
    links.get_mut(&1).unwrap().send(&"keys for rank 1").unwrap();
    assert_eq!(accepting.join().unwrap(), "keys for rank 1");
    for (kind, h) in strangers {
        let got = h.join().unwrap();
        assert!(told_nothing(&got), "{kind:?} received {} bytes", got.len());
    }
}

/// Three ranks link up where rank 0 names rank 2 as a peer and rank 2
/// names rank 1 alone: `first` reaches rank 2 one second before the other
/// dials, and rank 2 stays `staying` past its links (as a rank at its next
/// step would). Each rank's outcome, its error in full.
fn disagreeing_links(first: usize, staying: Duration) -> Vec<Result<(), String>> {
    let secret = Secret::random().unwrap();
    let port = free_port();
    let peers = [vec![2], vec![2], vec![1]];
    let late = if first == 0 { 1 } else { 0 };
    let ranks: Vec<_> = peers
        .into_iter()
        .enumerate()
        .map(|(r, peers)| {
            let l = launch(r, 3, port, &secret);
            std::thread::spawn(move || {
                let mut rv = TcpRendezvous::join(&l, Instant::now() + Duration::from_secs(30))
                    .map_err(|e| sode_job::diag::chain(&e))?;
                if r == late {
                    std::thread::sleep(Duration::from_secs(1));
                }
                let peers = BTreeSet::from_iter(peers);
                let linked = rv.connect(&peers, Instant::now() + Duration::from_secs(3));
                if r == 2 {
                    std::thread::sleep(staying);
                }
                linked.map(|_| ()).map_err(|e| sode_job::diag::chain(&e))
            })
        })
        .collect();
    ranks.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn a_link_only_one_of_its_ranks_names_is_never_taken_and_its_dialler_asks_whether_it_is_listed() {
    // Rank 0's link reaches rank 2 first: rank 2 cannot tell it from a
    // link of its next call (a rank a call ahead), drops it unaccepted,
    // and takes rank 1's; rank 0 dials again until its deadline.
    let outcomes = disagreeing_links(0, Duration::from_secs(5));
    assert!(outcomes[1].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
    let told = outcomes[0]
        .as_ref()
        .expect_err("rank 2 does not name rank 0");
    assert!(
        told.contains("rank 2 did not take this link: does it list rank 0 as a peer?"),
        "{told}"
    );
}

#[test]
fn a_link_its_peer_does_not_name_and_never_takes_fails_asking_whether_it_is_listed() {
    // Rank 1's link comes first: rank 2 has every link it expects, and
    // rank 0's is never taken (rank 2 stays past rank 0's deadline).
    let outcomes = disagreeing_links(1, Duration::from_secs(5));
    assert!(outcomes[1].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
    let told = outcomes[0]
        .as_ref()
        .expect_err("rank 2 took a link from rank 0, which it does not name");
    assert!(
        told.contains("rank 2 did not take this link: does it list rank 0 as a peer?"),
        "{told}"
    );
}

#[test]
fn a_rank_with_another_secret_cannot_join_and_the_missing_rank_is_named() {
    let port = free_port();
    let (good, bad) = (Secret::random().unwrap(), Secret::random().unwrap());
    let rank0 = {
        let l = launch(0, 2, port, &good);
        std::thread::spawn(move || World::init_with(&l, Duration::from_secs(4)))
    };
    let intruder = {
        let l = launch(1, 2, port, &bad);
        std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            (World::init_with(&l, Duration::from_secs(4)), t0.elapsed())
        })
    };
    let e = rank0.join().unwrap().unwrap_err().to_string();
    assert!(
        e.contains("ranks 1") && e.contains("SODE_JOB_SECRET"),
        "{e}"
    );
    // The rank given another secret is told at once (it learns nothing
    // else), rather than dialling again until its deadline.
    let (joined, took) = intruder.join().unwrap();
    let e = sode_job::diag::chain(&joined.unwrap_err());
    assert!(
        e.contains("refused this rank") && e.contains("SODE_JOB_SECRET"),
        "{e}"
    );
    assert!(took < Duration::from_secs(2), "told after {took:?}: {e}");
}

/// Keeps `n` silent connections open to `addr` until `stop`, opening a
/// new one for each the other side closes; returns how many it opened and
/// the most it held open at once.
fn flood(
    addr: SocketAddr,
    n: usize,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> (usize, usize) {
    use std::sync::atomic::Ordering;
    let mut open: Vec<TcpStream> = Vec::new();
    let (mut opened, mut most) = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        while open.len() < n && !stop.load(Ordering::Relaxed) {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
                Ok(s) => {
                    s.set_nonblocking(true).unwrap();
                    open.push(s);
                    opened += 1;
                }
                Err(_) => break,
            }
        }
        // Drop the ones the other side closed (reading the challenge
        // keeps the others' buffers empty; nothing is ever answered).
        open.retain_mut(|s| {
            let mut buf = [0u8; 64];
            match s.read(&mut buf) {
                Ok(0) => false,
                Ok(_) => true,
                Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
            }
        });
        most = most.max(open.len());
        std::thread::sleep(Duration::from_millis(5));
    }
    (opened, most)
}

#[test]
fn a_sustained_flood_of_silent_connections_does_not_stop_the_job() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let secret = Secret::random().unwrap();
    let port = free_port();
    let root: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let size = 4;
    let rank0 = start_ranks(0..1, size, port, &secret);
    wait_listening(root);
    // 500 silent connections, kept open and refilled, from 4 threads.
    let stop = Arc::new(AtomicBool::new(false));
    let flooders: Vec<_> = (0..4)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || flood(root, 125, stop))
        })
        .collect();
    // Let the flood fill the rendezvous, and its first connections time
    // out and be refilled, before the real ranks come.
    std::thread::sleep(sode_job::HANDSHAKE_TIMEOUT + Duration::from_secs(1));
    let t0 = Instant::now();
    let others = start_ranks(1..size, size, port, &secret);
    let worlds: Vec<World> = rank0
        .into_iter()
        .chain(others)
        .map(|h| {
            h.join()
                .unwrap()
                .expect("the real ranks meet under the flood")
        })
        .collect();
    let took = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (opened, most) = flooders
        .into_iter()
        .map(|h| h.join().unwrap())
        .fold((0, 0), |(o, m), (o2, m2)| (o + o2, m + m2));
    assert!(
        most >= 450,
        "the flood held only {most} connections open at once"
    );
    assert!(
        opened > most,
        "no connection was refilled ({opened} opened)"
    );
    assert!(
        took < Duration::from_secs(10),
        "the flood held the job for {took:?}"
    );
    for w in &worlds {
        assert_eq!(w.size(), size);
    }
    eprintln!(
        "met in {took:?} under a flood of {most} silent connections at once ({opened} opened)"
    );
}

#[test]
fn ranks_that_skip_a_collective_step_are_named_on_every_rank_that_took_it() {
    let port = free_port();
    let secret = Secret::random().unwrap();
    let worlds: Vec<World> = start_ranks(0..4, 4, port, &secret)
        .into_iter()
        .map(|h| h.join().unwrap().unwrap())
        .collect();
    // Ranks 2 and 3 stay alive but skip the barrier (a commit made on some
    // ranks only). Rank 1 begins it before rank 0, so that its own
    // deadline passes before rank 0 names the missing.
    let timeout = Duration::from_secs(1);
    let took = |w: &World, after: Duration| {
        std::thread::sleep(after);
        let t0 = Instant::now();
        let e = w
            .barrier(timeout)
            .expect_err("a barrier without ranks 2 and 3");
        (sode_job::diag::chain(&e), t0.elapsed())
    };
    let outcomes: Vec<(String, Duration)> = std::thread::scope(|s| {
        let first = s.spawn(|| took(&worlds[0], Duration::from_millis(300)));
        let second = s.spawn(|| took(&worlds[1], Duration::ZERO));
        vec![first.join().unwrap(), second.join().unwrap()]
    });
    for (r, (e, took)) in outcomes.iter().enumerate() {
        assert!(
            e.contains("ranks 2, 3 did not take a collective step within 1.0 s")
                && e.contains("not making the same call"),
            "rank {r}: {e}"
        );
        assert!(
            *took < Duration::from_secs(3),
            "rank {r} told after {took:?}"
        );
    }
    // A rank that comes to the step late is told at once who missed it.
    let t0 = Instant::now();
    let e = worlds[2]
        .barrier(Duration::from_secs(5))
        .expect_err("a barrier rank 0 gave up");
    let e = sode_job::diag::chain(&e);
    assert!(
        e.contains("ranks 2, 3 did not take a collective step"),
        "rank 2: {e}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "rank 2 told after {:?}",
        t0.elapsed()
    );
}

#[test]
fn a_rank_that_refuses_the_creation_fails_it_on_every_rank_at_once() {
    let port = free_port();
    let secret = Secret::random().unwrap();
    let t0 = Instant::now();
    let mut others = start_ranks(0..1, 3, port, &secret);
    others.extend(start_ranks(2..3, 3, port, &secret));
    let refuser = {
        let l = launch(1, 3, port, &secret);
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            let oob = TcpRendezvous::join(&l, deadline)?;
            World::refuse(Box::new(oob), 7, "its `out` is a null pointer", deadline)
        })
    };
    refuser.join().unwrap().expect("the refusal is delivered");
    for (r, h) in [0, 2].into_iter().zip(others) {
        match h.join().unwrap() {
            Err(sode_job::JobError::GaveUp {
                rank: 1,
                code: 7,
                message,
            }) => assert_eq!(message, "its `out` is a null pointer", "rank {r}"),
            other => panic!("rank {r}: {other:?}"),
        }
    }
    // Told in the first step, not left to the 60 s deadline.
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
}
