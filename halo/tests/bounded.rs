//! Bounded connections with forwarding: every message of an all-to-all and
//! of a random sparse pattern arrives bit for bit while no rank holds more
//! than the bound of connections (counted: peers, and RDMA queue pairs in
//! the SoftRoCE guest); a forbidden pair is routed around; bad input is
//! named on every rank; a forwarder that dies is named with the routes it
//! broke (as separate processes, one killed).

use std::time::{Duration, Instant};

use sode::{BoundedExchange, HaloError, Link, Message, Transport};
use sode_job::World;
mod common;
use common::{free_port, output_of, rdma_available, spawn_rank, thread_world};

/// Byte `o` of message (`from`, `to`, `tag`) in iteration `it`.
fn byte(from: usize, to: usize, tag: u32, it: usize, o: usize) -> u8 {
    (from * 31 + to * 7 + tag as usize * 5 + it * 13 + o) as u8
}

/// The messages of a job: (from, to, tag, bytes).
type Pattern = Vec<(usize, usize, u32, usize)>;

/// Every rank sends every rank (itself too) `len` bytes.
fn all_to_all(n: usize, len: usize) -> Pattern {
    (0..n)
        .flat_map(|f| (0..n).map(move |t| (f, t, 1, len + (f + t) % 3)))
        .collect()
}

/// About three messages per rank to peers drawn by a fixed generator,
/// of 1 byte to 40 KiB, some pairs twice (two tags).
fn sparse(n: usize, seed: u64) -> Pattern {
    let mut x = seed;
    let mut next = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) as usize
    };
    let mut out: Pattern = Vec::new();
    for f in 0..n {
        for k in 0..3 {
            let t = next() % n;
            let tag = if out.iter().any(|&(a, b, _, _)| (a, b) == (f, t)) {
                2
            } else {
                1
            };
            if !out.iter().any(|&(a, b, g, _)| (a, b, g) == (f, t, tag)) {
                out.push((f, t, tag, 1 + next() % (40 << 10) * (k % 2)));
            }
        }
    }
    out
}

/// This rank's links for `pattern`: a link per (peer, tag) it sends or
/// receives on.
fn links_of(pattern: &Pattern, me: usize) -> Vec<Link> {
    let mut links: Vec<Link> = Vec::new();
    for &(f, t, tag, len) in pattern.iter().filter(|m| m.0 == me || m.1 == me) {
        let m = Some(Message { len, tag });
        let mut add = |peer: usize, send: bool| {
            let at = links
                .iter()
                .position(|l| l.peer == peer && (l.send.or(l.recv).map(|m| m.tag) == Some(tag)));
            let i = at.unwrap_or_else(|| {
                links.push(Link {
                    peer,
                    send: None,
                    recv: None,
                    offset: Vec::new(),
                    name: format!("rank {peer} tag {tag}"),
                });
                links.len() - 1
            });
            if send {
                links[i].send = m;
            } else {
                links[i].recv = m;
            }
        };
        if f == me {
            add(t, true);
        }
        if t == me {
            add(f, false);
        }
    }
    links
}

/// What a rank saw: its connections, queue pairs, rounds and routes.
#[derive(Debug)]
struct Seen {
    connections: Vec<(usize, &'static str)>,
    queue_pairs: usize,
    rounds: usize,
    routes: Vec<String>,
}

/// Runs `pattern` over `n` thread ranks with at most `bound` connections
/// each and `forbid`den pairs; every received byte checked, in 3
/// iterations.
fn run(
    n: usize,
    pattern: Pattern,
    bound: usize,
    forbid: &'static [(usize, usize)],
    transport: Transport,
    job: &'static str,
) -> Vec<Seen> {
    let port = free_port();
    let pattern = std::sync::Arc::new(pattern);
    let handles: Vec<_> = (0..n)
        .map(|me| {
            let pattern = pattern.clone();
            std::thread::spawn(move || {
                let w = thread_world(me, n, port, job);
                let links = links_of(&pattern, me);
                let mut b = BoundedExchange::builder(&w, links.clone())
                    .bound(bound)
                    .transport(transport)
                    .setup_timeout(Duration::from_secs(120));
                for &(a, c) in forbid {
                    b = b.forbid(a, c);
                }
                let mut x = b.build().unwrap();
                for it in 0..3 {
                    for (i, l) in links.iter().enumerate() {
                        if let Some(m) = l.send {
                            for (o, b) in x.send_buf(i).unwrap().iter_mut().enumerate() {
                                *b = byte(me, l.peer, m.tag, it, o);
                            }
                        }
                    }
                    x.start().unwrap();
                    x.wait(Instant::now() + Duration::from_secs(120)).unwrap();
                    for (i, l) in links.iter().enumerate() {
                        if let Some(m) = l.recv {
                            let got = x.recv_buf(i).unwrap();
                            assert_eq!(got.len(), m.len);
                            for (o, &b) in got.iter().enumerate() {
                                let want = byte(l.peer, me, m.tag, it, o);
                                assert_eq!(
                                    b, want,
                                    "rank {me}, iteration {it}: byte {o} of {}",
                                    l.name
                                );
                            }
                        }
                    }
                }
                Seen {
                    connections: x.connections().into_iter().collect(),
                    queue_pairs: x.queue_pairs(),
                    rounds: x.rounds(),
                    routes: x.routes(),
                }
            })
        })
        .collect();
    let seen: Vec<Seen> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for (me, s) in seen.iter().enumerate() {
        let peers = s.connections.iter().filter(|c| c.0 != me).count();
        assert!(
            peers <= bound,
            "rank {me} holds {peers} connections, bound {bound}: {s:?}"
        );
        assert!(
            s.queue_pairs <= bound,
            "rank {me} holds {} queue pairs: {s:?}",
            s.queue_pairs
        );
        for &(a, c) in forbid {
            if me == a || me == c {
                let other = if me == a { c } else { a };
                assert!(
                    !s.connections.iter().any(|x| x.0 == other),
                    "rank {me} connected to forbidden {other}"
                );
            }
        }
    }
    seen
}

#[test]
fn a_bounded_all_to_all_arrives_whole_over_shared_memory_and_tcp() {
    // Two connections each: a ring, the far ranks four hops away.
    let seen = run(
        8,
        all_to_all(8, 300),
        2,
        &[],
        Transport::Shm,
        "bounded-a2a-shm",
    );
    assert!(seen[0].rounds >= 4, "{:?}", seen[0]);
    assert!(seen.iter().all(|s| !s.routes.is_empty()), "{seen:?}");
    let seen = run(
        8,
        all_to_all(8, 5000),
        3,
        &[],
        Transport::Tcp,
        "bounded-a2a-tcp",
    );
    assert!(seen
        .iter()
        .all(|s| s.connections.iter().all(|c| c.1 == "tcp")));
}

#[test]
fn a_random_sparse_pattern_of_16_ranks_arrives_whole() {
    for (bound, seed) in [(2, 1), (3, 2)] {
        let seen = run(
            16,
            sparse(16, seed),
            bound,
            &[],
            Transport::Shm,
            "bounded-sparse",
        );
        assert!(
            seen.iter().any(|s| !s.routes.is_empty()),
            "bound {bound}: nothing forwarded"
        );
    }
}

#[test]
fn a_forbidden_pair_is_routed_around() {
    // 0 and 1 exchange 64 KiB each way, but may not connect.
    let mut pattern = sparse(6, 3);
    pattern.retain(|m| (m.0.min(m.1), m.0.max(m.1)) != (0, 1));
    pattern.push((0, 1, 7, 64 << 10));
    pattern.push((1, 0, 7, 64 << 10));
    let seen = run(6, pattern, 3, &[(0, 1)], Transport::Tcp, "bounded-forbid");
    let around = |s: &Seen| {
        s.routes
            .iter()
            .any(|r| r.starts_with("0 -> ") && r.ends_with("-> 1 (tag 7)"))
    };
    assert!(around(&seen[0]) && around(&seen[1]), "{:?}", seen[0]);
}

#[test]
fn over_rdma_no_rank_holds_more_queue_pairs_than_the_bound() {
    if !rdma_available() {
        return;
    }
    for (n, bound) in [(8, 2), (16, 3)] {
        let seen = run(
            n,
            all_to_all(n, 2000),
            bound,
            &[],
            Transport::Rdma,
            "bounded-rdma-a2a",
        );
        for s in &seen {
            let rdma = s.connections.iter().filter(|c| c.1 == "rdma").count();
            assert_eq!(
                s.queue_pairs, rdma,
                "one queue pair per RDMA connection: {s:?}"
            );
            assert!(rdma > 0);
        }
        run(
            n,
            sparse(n, n as u64),
            bound,
            &[(0, 1)],
            Transport::Rdma,
            "bounded-rdma-sparse",
        );
    }
}

/// Each rank's build error, `links` giving its links.
fn build_errors(
    n: usize,
    job: &'static str,
    links: fn(usize) -> Vec<Link>,
    bound: fn(usize) -> usize,
) -> Vec<String> {
    let port = free_port();
    let hs: Vec<_> = (0..n)
        .map(|me| {
            std::thread::spawn(move || {
                let w = thread_world(me, n, port, job);
                let e = BoundedExchange::builder(&w, links(me))
                    .bound(bound(me))
                    .build()
                    .unwrap_err();
                sode_job::diag::chain(&e).to_string()
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

fn ring(me: usize) -> Vec<Link> {
    links_of(&all_to_all(4, 8), me)
}

#[test]
fn bad_input_is_named_on_every_rank() {
    for e in build_errors(4, "bounded-zero", ring, |_| 0) {
        assert!(e.contains("bound of 0"), "{e}");
    }
    for e in build_errors(4, "bounded-one", ring, |_| 1) {
        assert!(e.contains("stay in 2 groups"), "{e}");
    }
    for e in build_errors(4, "bounded-differ", ring, |r| 2 + r % 2) {
        assert!(e.contains("rank 1 asked for a bound of Some(3)"), "{e}");
    }
    let unmatched = |me: usize| {
        let mut l = ring(me);
        if me == 2 {
            l[0].send.as_mut().unwrap().len += 1;
        }
        l
    };
    for e in build_errors(4, "bounded-unmatched", unmatched, |_| 2) {
        assert!(
            e.contains("rank 2 sends rank 0 11 bytes with tag 1, which expects 10"),
            "{e}"
        );
    }
    let beyond = |me: usize| {
        let mut l = ring(me);
        if me == 3 {
            l[1].peer = 9;
        }
        l
    };
    for e in build_errors(4, "bounded-beyond", beyond, |_| 2) {
        assert!(
            e.contains("rank 3: link 1") && e.contains("names rank 9"),
            "{e}"
        );
    }
}

const ROLE: &str = "SODE_BOUNDED_TEST";
/// The forwarder that dies, and the iteration it dies in.
const DOOMED: usize = 1;
const DIE_AT: usize = 20;

/// One rank of the forwarding job, when run as a child: an all-to-all of
/// four ranks over a ring (bound 2), rank 1 killed mid-run.
#[test]
fn rank() {
    if std::env::var_os(ROLE).is_none() {
        return;
    }
    let w = World::init(Duration::from_secs(30)).unwrap();
    let me = w.rank();
    let mut x = BoundedExchange::builder(&w, ring(me))
        .bound(2)
        .build()
        .unwrap();
    println!("rank {me}: routes {:?}", x.routes());
    for iteration in 0..100_000 {
        if me == DOOMED && iteration == DIE_AT {
            nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL).unwrap();
        }
        let t0 = Instant::now();
        let step = x
            .start()
            .and_then(|()| x.wait(Instant::now() + Duration::from_secs(20)));
        if let Err(e) = step {
            assert!(matches!(e, HaloError::Forwarding { .. }), "{e:?}");
            println!(
                "rank {me}: failed after {} ms: {}",
                t0.elapsed().as_millis(),
                sode_job::diag::chain(&e)
            );
            std::thread::sleep(Duration::from_secs(3));
            return;
        }
    }
    panic!("rank {me}: no failure in 100000 iterations");
}

#[test]
fn a_dead_forwarder_is_named_with_the_routes_it_broke() {
    let port = free_port();
    let job = format!("bounded{}", std::process::id());
    let children: Vec<_> = (0..4)
        .map(|r| {
            spawn_rank(
                r,
                4,
                port,
                &job,
                (ROLE, "1"),
                &[("SODE_HEALTH_TIMEOUT", "2")],
            )
        })
        .collect();
    let texts: Vec<String> = children.into_iter().map(|c| output_of(c).1).collect();
    let mut named_routes = 0;
    let through = format!(" -> {DOOMED} -> ");
    for (r, text) in texts.iter().enumerate().filter(|(r, _)| *r != DOOMED) {
        let line = text
            .lines()
            .find_map(|l| l.find(&format!("rank {r}: failed after")).map(|i| &l[i..]))
            .unwrap_or_else(|| panic!("rank {r} reported no failure:\n{text}"));
        println!("{line}");
        assert!(
            line.contains("round ") && line.contains(&format!("rank {DOOMED}")),
            "{line}"
        );
        let ms: u64 = line
            .split("failed after ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|t| t.parse().ok())
            .unwrap();
        assert!(ms < 5000, "{line}");
        // A rank whose messages rank 1 forwarded names those routes.
        let routes = text
            .lines()
            .find(|l| l.contains(&format!("rank {r}: routes")))
            .unwrap_or("");
        if routes.contains(&through) {
            assert!(
                line.contains(&format!("rank {DOOMED}, which died, forwarded ")),
                "{line}"
            );
            named_routes += 1;
        }
    }
    assert!(
        named_routes >= 1,
        "rank {DOOMED} forwarded nothing: {texts:?}"
    );
}
