//! The persistent all-to-all: every block of every iteration arrives, from
//! the right sender, over shared memory and over TCP (and over RDMA in the
//! SoftRoCE guest); misuse is a named error.

use std::time::{Duration, Instant};

use sode::{AllToAll, Transport};
mod common;
use common::{free_port, rdma_available, thread_world};

/// Byte `o` of the block `from` sends `to` in iteration `it`.
fn byte(from: usize, to: usize, it: usize, o: usize) -> u8 {
    (from * 31 + to * 7 + it * 13 + o) as u8
}

/// `n` ranks as threads, `iters` iterations of blocks of `block` bytes over
/// `transport`: every received byte checked; with `latin`, in the order of
/// the Latin-square fat-tree's phases.
fn run(n: usize, block: usize, transport: Transport, job: &'static str) {
    run_on(n, block, transport, None, job)
}

fn run_on(
    n: usize,
    block: usize,
    transport: Transport,
    latin: Option<(usize, usize, usize)>,
    job: &'static str,
) {
    let port = free_port();
    let handles: Vec<_> = (0..n)
        .map(|rank| {
            std::thread::spawn(move || {
                let w = thread_world(rank, n, port, job);
                let mut b = AllToAll::builder(&w, block).transport(transport);
                if let Some((ln, lk, lm)) = latin {
                    b = b.latin_square(ln, lk, lm);
                }
                let mut x = b.build().unwrap();
                let channels = x.channels();
                assert_eq!(channels[rank], "local");
                for it in 0..4 {
                    for peer in 0..n {
                        for (o, b) in x.send_block(peer).unwrap().iter_mut().enumerate() {
                            *b = byte(rank, peer, it, o);
                        }
                    }
                    x.start().unwrap();
                    x.wait(Instant::now() + Duration::from_secs(30)).unwrap();
                    for peer in 0..n {
                        let got = x.recv_block(peer).unwrap();
                        assert_eq!(got.len(), block);
                        for (o, &b) in got.iter().enumerate() {
                            assert_eq!(
                                b,
                                byte(peer, rank, it, o),
                                "rank {rank}, iteration {it}: byte {o} from rank {peer}"
                            );
                        }
                    }
                }
                channels
            })
        })
        .collect();
    let want = match transport {
        Transport::Shm => "shm",
        Transport::Tcp => "tcp",
        _ => "rdma",
    };
    for (rank, h) in handles.into_iter().enumerate() {
        let channels = h.join().unwrap();
        assert_eq!(channels.len(), n);
        for (peer, c) in channels.iter().enumerate() {
            if peer != rank {
                assert_eq!(*c, want, "rank {rank} reaches rank {peer} over {c}");
            }
        }
    }
}

#[test]
fn every_block_arrives_over_shared_memory() {
    run(4, 1000, Transport::Shm, "a2a-shm");
    run(3, 200_000, Transport::Shm, "a2a-shm-big");
}

#[test]
fn every_block_arrives_in_the_latin_square_order() {
    // n, k, m = 2, 2, 2: eight servers of the partial schedule.
    run_on(8, 500, Transport::Shm, Some((2, 2, 2)), "a2a-latin");
}

#[test]
fn a_latin_square_of_the_wrong_size_is_named() {
    let port = free_port();
    let hs: Vec<_> = (0..2)
        .map(|r| {
            std::thread::spawn(move || {
                let w = thread_world(r, 2, port, "a2a-latin-bad");
                AllToAll::builder(&w, 8)
                    .latin_square(2, 2, 2)
                    .build()
                    .unwrap_err()
                    .to_string()
            })
        })
        .collect();
    for h in hs {
        let e = h.join().unwrap();
        assert!(e.contains("8 servers for a job of 2 ranks"), "{e}");
    }
}

#[test]
fn a_bounded_all_to_all_forwards_what_it_does_not_connect() {
    let port = free_port();
    let n = 8;
    let hs: Vec<_> = (0..n)
        .map(|rank| {
            std::thread::spawn(move || {
                let w = thread_world(rank, n, port, "a2a-bounded");
                let mut x = AllToAll::builder(&w, 700)
                    .bound(2)
                    .transport(Transport::Shm)
                    .build()
                    .unwrap();
                for it in 0..3 {
                    for peer in 0..n {
                        for (o, b) in x.send_block(peer).unwrap().iter_mut().enumerate() {
                            *b = byte(rank, peer, it, o);
                        }
                    }
                    x.start().unwrap();
                    x.wait(Instant::now() + Duration::from_secs(30)).unwrap();
                    for peer in 0..n {
                        let got = x.recv_block(peer).unwrap();
                        assert!(
                            got.iter()
                                .enumerate()
                                .all(|(o, &b)| b == byte(peer, rank, it, o)),
                            "rank {rank} from {peer}"
                        );
                    }
                }
                x.channels()
            })
        })
        .collect();
    for (rank, h) in hs.into_iter().enumerate() {
        let channels = h.join().unwrap();
        assert_eq!(channels[rank], "local");
        assert_eq!(
            channels.iter().filter(|&&c| c == "shm").count(),
            2,
            "{channels:?}"
        );
        assert_eq!(
            channels.iter().filter(|&&c| c == "forwarded").count(),
            n - 3,
            "{channels:?}"
        );
    }
}

#[test]
fn every_block_arrives_over_tcp() {
    run(4, 1000, Transport::Tcp, "a2a-tcp");
    run(3, 200_000, Transport::Tcp, "a2a-tcp-big");
}

#[test]
fn every_block_arrives_over_rdma() {
    if !rdma_available() {
        return;
    }
    run(3, 4096, Transport::Rdma, "a2a-rdma");
}

#[test]
fn misuse_is_named() {
    let port = free_port();
    let w = thread_world(0, 1, port, "a2a-misuse");
    let e = AllToAll::builder(&w, 0).build().unwrap_err().to_string();
    assert!(e.contains("0 bytes per pair"), "{e}");
    let mut x = AllToAll::builder(&w, 8).build().unwrap();
    let e = x.send_block(1).unwrap_err().to_string();
    assert!(e.contains("rank 1 is not in the job"), "{e}");
    x.send_block(0).unwrap().fill(7);
    x.start().unwrap();
    let e = x.recv_block(0).unwrap_err().to_string();
    assert!(
        e.contains("recv_buf"),
        "reading before wait is refused: {e}"
    );
    x.wait(Instant::now() + Duration::from_secs(5)).unwrap();
    assert_eq!(x.recv_block(0).unwrap(), &[7u8; 8]);
}
