//! What every channel promises, checked alike on each: the in-memory
//! channel, shared memory, TCP and, where a device is (the SoftRoCE guest
//! in CI), RDMA. Each case runs thread ranks of one job, each with its
//! channel set up as `links.rs` sets it up, and drives it through the
//! [`Channel`] trait alone:
//!
//! - the bytes of every message arrive intact, iteration after
//!   iteration, several messages to one peer told apart by their tags;
//! - a shortened message carries its first bytes only, and the full
//!   length comes back;
//! - ranks that start different shapes are both told so, naming the
//!   peer (by the start or on the way to completion), and equal shapes
//!   pass;
//! - a receiver that expects another length than its sender carries is
//!   told so, naming the peer (but over RDMA, whose receiver counts
//!   writes, not bytes: there the lengths follow from the shape, checked
//!   above);
//! - a late peer is not an error: the channel waits, says whom it waits
//!   for, and completes once the peer starts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sode_job::{LaunchInfo, Secret, World};

use super::memory::{Hub, MemoryChannel};
use super::{Channel, Member, Message, Setup, ShmChannel, TcpChannel};

/// The channels the suite runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Memory,
    Shm,
    Tcp,
    #[cfg(feature = "rdma")]
    Rdma,
}

/// The channels this machine can run: RDMA where a device is, and
/// required where `SODE_REQUIRE_RDMA` says one must be.
fn kinds() -> Vec<Kind> {
    #[cfg_attr(not(feature = "rdma"), allow(unused_mut))]
    let mut kinds = vec![Kind::Memory, Kind::Shm, Kind::Tcp];
    let device = std::path::Path::new("/sys/class/infiniband")
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some());
    assert!(
        device || std::env::var_os("SODE_REQUIRE_RDMA").is_none(),
        "SODE_REQUIRE_RDMA is set but /sys/class/infiniband lists no device"
    );
    #[cfg(feature = "rdma")]
    if device {
        kinds.push(Kind::Rdma);
    }
    kinds
}

/// One link of a case: the peer and the messages each way.
#[derive(Debug, Clone)]
struct Spec {
    peer: usize,
    send: Option<Message>,
    recv: Option<Message>,
    name: String,
}

/// A link to `peer` sending `send` and receiving `recv` (length, tag).
fn link(peer: usize, send: Option<(usize, u32)>, recv: Option<(usize, u32)>) -> Spec {
    let message = |(len, tag)| Message { len, tag };
    Spec {
        peer,
        send: send.map(message),
        recv: recv.map(message),
        name: format!("rank {peer}"),
    }
}

/// Waits for the iteration in flight until `within` has passed, parking
/// where the channel can: whether it completed.
fn complete(ch: &mut dyn Channel, within: Duration) -> crate::Result<bool> {
    let until = Instant::now() + within;
    loop {
        let nap = (Instant::now() + Duration::from_millis(5)).min(until);
        let done = match ch.park(nap) {
            Some(r) => r?,
            None => ch.test()?,
        };
        if done {
            return Ok(true);
        }
        if Instant::now() >= until {
            return Ok(false);
        }
        std::thread::yield_now();
    }
}

/// The error chain of `e`, as a user reads it.
fn told(e: &crate::HaloError) -> String {
    sode_job::diag::chain(e)
}

/// An RDMA channel with `members`, every message packed, planned for
/// a fixed model (no calibration).
#[cfg(feature = "rdma")]
fn rdma(setup: &Setup<'_>, members: &[Member<'_>]) -> super::Built {
    let job = super::RdmaJob {
        transport: crate::Transport::Rdma,
        fabrics: &[],
        engines: 2,
        algorithm: sode_scheduler::Algorithm::Auto,
        model: crate::Model::KComputer,
        lent: Vec::new(),
    };
    super::RdmaChannel::set_up(setup, job, members, &[])
        .unwrap()
        .unwrap()
}

/// The channel's numbers of a rank's sends and receives, in the order of
/// its links.
#[derive(Debug)]
struct Ends {
    send: Vec<usize>,
    recv: Vec<usize>,
}

/// Runs `body` on `size` thread ranks of one job, each with its channel
/// of `kind` set up for the links `links(rank)` gives; each rank's
/// answer.
fn on_ranks<T: Send + 'static>(
    kind: Kind,
    size: usize,
    links: fn(usize) -> Vec<Spec>,
    body: fn(usize, &mut dyn Channel, &Ends, &World) -> T,
) -> Vec<T> {
    let port = sode_job::free_port().unwrap();
    let hub = Arc::new(Hub::default());
    let job = format!("conformance-{kind:?}-{port}").to_lowercase();
    let ranks: Vec<_> = (0..size)
        .map(|rank| {
            let (hub, job) = (hub.clone(), job.clone());
            std::thread::spawn(move || {
                let secret = Secret::from_hex(&"5d".repeat(32)).unwrap();
                let launch = LaunchInfo {
                    job_id: (rank == 0).then_some(job),
                    ..LaunchInfo::loopback(rank, size, port, secret)
                };
                let world = World::init_with(&launch, Duration::from_secs(30)).unwrap();
                let specs = links(rank);
                let members: Vec<Member<'_>> = specs
                    .iter()
                    .map(|s| Member {
                        peer: s.peer,
                        send: s.send,
                        recv: s.recv,
                        name: &s.name,
                        offset: &[],
                    })
                    .collect();
                let setup = Setup {
                    world: &world,
                    timeout: Duration::from_secs(30),
                };
                let built = match kind {
                    Kind::Memory => MemoryChannel::set_up(&hub, rank, &members),
                    Kind::Shm => ShmChannel::set_up(&setup, "c0", &members, &[], None).unwrap(),
                    Kind::Tcp => TcpChannel::set_up(&setup, &members).unwrap(),
                    #[cfg(feature = "rdma")]
                    Kind::Rdma => rdma(&setup, &members),
                };
                let ends = Ends {
                    send: built.placed.iter().filter_map(|p| p.send).collect(),
                    recv: built.placed.iter().filter_map(|p| p.recv).collect(),
                };
                let mut channel = built.channel;
                let answer = body(rank, channel.as_mut(), &ends, &world);
                // No rank drops its channel while another still uses it.
                world.barrier(Duration::from_secs(30)).unwrap();
                answer
            })
        })
        .collect();
    ranks.into_iter().map(|r| r.join().unwrap()).collect()
}

/// The byte `i` of the message `from` sends `to` with `tag` in iteration
/// `it`: differs between messages, iterations and positions.
fn byte(from: usize, tag: u32, it: usize, i: usize) -> u8 {
    (from * 31 + tag as usize * 7 + it * 13 + i % 251) as u8
}

/// Three ranks in a ring: each sends its right neighbour two messages
/// (tags 1 and 2, 1 byte and 70,001 bytes) and its left one a third (tag
/// 3, 4,097 bytes), and receives the matching three.
fn ring(rank: usize) -> Vec<Spec> {
    let (right, left) = ((rank + 1) % 3, (rank + 2) % 3);
    vec![
        link(right, Some((1, 1)), Some((4097, 3))),
        link(left, Some((4097, 3)), Some((1, 1))),
        // The second message to the right: its own link, as the halo
        // layer gives a link per face over RDMA.
        Spec {
            name: format!("rank {right} (second)"),
            ..link(right, Some((70_001, 2)), None)
        },
        Spec {
            name: format!("rank {left} (second)"),
            ..link(left, None, Some((70_001, 2)))
        },
    ]
}

/// Who sent receive `r` of `rank` in the ring, and with which tag.
fn ring_source(rank: usize, r: usize) -> (usize, u32) {
    let (right, left) = ((rank + 1) % 3, (rank + 2) % 3);
    [(right, 3), (left, 1), (left, 2)][r]
}

/// Fills each send of `ends` with its bytes of iteration `it`, the sends'
/// tags in order.
fn fill(ch: &mut dyn Channel, ends: &Ends, rank: usize, it: usize, tags: &[u32]) {
    for (&s, &tag) in ends.send.iter().zip(tags) {
        for (i, b) in ch.send_buf(s).unwrap().iter_mut().enumerate() {
            *b = byte(rank, tag, it, i);
        }
    }
}

#[test]
fn every_message_arrives_intact_iteration_after_iteration() {
    for kind in kinds() {
        let wrong = on_ranks(kind, 3, ring, |rank, ch, ends, _| {
            let mut wrong = Vec::new();
            for it in 0..6 {
                fill(ch, ends, rank, it, &[1, 3, 2]);
                ch.start().unwrap();
                assert!(
                    complete(ch, Duration::from_secs(20)).unwrap(),
                    "{}",
                    ch.outstanding()
                );
                for r in 0..3 {
                    let (from, tag) = ring_source(rank, r);
                    let got = ch.recv_buf(ends.recv[r]).unwrap();
                    let bad = (0..got.len())
                        .filter(|&i| got[i] != byte(from, tag, it, i))
                        .count();
                    if bad > 0 {
                        wrong.push(format!("iteration {it}, tag {tag}: {bad} bytes wrong"));
                    }
                }
            }
            wrong
        });
        assert!(wrong.iter().all(Vec::is_empty), "{kind:?}: {wrong:?}");
    }
}

/// Two ranks, one message of 10,000 bytes each way.
fn pair(rank: usize) -> Vec<Spec> {
    vec![link(1 - rank, Some((10_000, 4)), Some((10_000, 4)))]
}

#[test]
fn a_shortened_message_carries_its_first_bytes_and_the_full_length_comes_back() {
    for kind in kinds() {
        let wrong = on_ranks(kind, 2, pair, |rank, ch, ends, _| {
            let mut wrong = Vec::new();
            for (it, carried) in [(0, 10_000), (1, 1_000), (2, 1), (3, 10_000)] {
                ch.carry_send(ends.send[0], carried).unwrap();
                ch.carry_recv(ends.recv[0], carried).unwrap();
                // What the last iteration left, to tell old bytes from new.
                ch.send_buf(ends.send[0]).unwrap().fill(0xee);
                fill(ch, ends, rank, it, &[4]);
                ch.start().unwrap();
                assert!(
                    complete(ch, Duration::from_secs(20)).unwrap(),
                    "{}",
                    ch.outstanding()
                );
                let got = &ch.recv_buf(ends.recv[0]).unwrap()[..carried];
                let bad = (0..carried)
                    .filter(|&i| got[i] != byte(1 - rank, 4, it, i))
                    .count();
                if bad > 0 {
                    wrong.push(format!("{carried} bytes carried: {bad} wrong"));
                }
            }
            wrong
        });
        assert!(wrong.iter().all(Vec::is_empty), "{kind:?}: {wrong:?}");
    }
}

/// A rank's outcome of starting an iteration that may fail: its error
/// (at the start, where data of the peer's came early, or on the way to
/// completion), "" when it completed, or "timed out".
fn outcome(ch: &mut dyn Channel) -> String {
    if let Err(e) = ch.start() {
        return told(&e);
    }
    match complete(ch, Duration::from_secs(5)) {
        Ok(true) => String::new(),
        Ok(false) => format!("timed out: {}", ch.outstanding()),
        Err(e) => told(&e),
    }
}

#[test]
fn ranks_that_start_different_shapes_are_told_and_equal_shapes_pass() {
    for kind in kinds() {
        let told = on_ranks(kind, 2, pair, |rank, ch, ends, world| {
            ch.set_shape(7).unwrap();
            fill(ch, ends, rank, 0, &[4]);
            let equal = outcome(ch);
            let got = ch.recv_buf(ends.recv[0]).unwrap();
            let intact = (0..got.len()).all(|i| got[i] == byte(1 - rank, 4, 0, i));
            world.barrier(Duration::from_secs(30)).unwrap();
            ch.set_shape([5, 9][rank]).unwrap();
            (equal, intact, outcome(ch))
        });
        for (rank, (equal, intact, different)) in told.iter().enumerate() {
            assert_eq!(equal, "", "{kind:?}, rank {rank}: equal shapes");
            assert!(intact, "{kind:?}, rank {rank}: bytes of equal shapes");
            let peer = format!("rank {}", 1 - rank);
            assert!(
                different.contains("started different parts of the exchange")
                    && different.contains(&peer),
                "{kind:?}, rank {rank}: {different:?}"
            );
        }
    }
}

#[test]
fn a_receiver_expecting_another_length_is_told() {
    for kind in kinds() {
        #[cfg(feature = "rdma")]
        if kind == Kind::Rdma {
            continue;
        }
        let told = on_ranks(kind, 2, pair, |rank, ch, ends, _| {
            // Rank 0 carries 100 bytes to a rank 1 that expects 200.
            if rank == 0 {
                ch.carry_send(ends.send[0], 100).unwrap();
            } else {
                ch.carry_recv(ends.recv[0], 200).unwrap();
            }
            outcome(ch)
        });
        assert!(
            told[1].contains("this rank expects 200") && told[1].contains("rank 0"),
            "{kind:?}: {:?}",
            told[1]
        );
    }
}

#[test]
fn a_late_peer_is_waited_for_not_failed() {
    for kind in kinds() {
        let seen = on_ranks(kind, 2, pair, |rank, ch, ends, world| {
            fill(ch, ends, rank, 0, &[4]);
            if rank == 0 {
                ch.start().unwrap();
                let early = complete(ch, Duration::from_millis(300));
                let waiting = ch.outstanding();
                world.barrier(Duration::from_secs(30)).unwrap();
                let late = complete(ch, Duration::from_secs(20));
                let got = ch.recv_buf(ends.recv[0]).unwrap();
                let intact = (0..got.len()).all(|i| got[i] == byte(1, 4, 0, i));
                format!("{early:?} | {waiting} | {late:?} | {intact}")
            } else {
                world.barrier(Duration::from_secs(30)).unwrap();
                ch.start().unwrap();
                let done = complete(ch, Duration::from_secs(20));
                format!("{done:?}")
            }
        });
        let parts: Vec<&str> = seen[0].split(" | ").collect();
        assert_eq!(
            parts[0], "Ok(false)",
            "{kind:?}: rank 0 before its peer started"
        );
        assert!(
            parts[1].contains("rank 1"),
            "{kind:?}: outstanding {:?}",
            parts[1]
        );
        assert_eq!(&parts[2..], ["Ok(true)", "true"], "{kind:?}: rank 0 after");
        assert_eq!(seen[1], "Ok(true)", "{kind:?}: rank 1");
    }
}
