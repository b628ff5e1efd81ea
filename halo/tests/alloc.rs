//! The hot path allocates nothing: after a warm-up, `start`, every `test`
//! poll and `wait` of a halo exchange make no heap allocation (so format no
//! string), counted per thread by this test binary's allocator
//! (`allocation-counter`). Two ranks run as two threads of this process
//! over loopback: shared memory here; over RDMA too where a device works
//! (the SoftRoCE guest).

use std::time::{Duration, Instant};

use sode::{Decomposition, HaloExchange, Stencil, Transport};
mod common;
use common::{free_port, rdma_available, thread_world};

/// Allocations of one rank's steady state, by phase.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    start: u64,
    polls: u64,
    poll_calls: u64,
    wait: u64,
}

/// Runs `iters` exchanges after a warm-up on each of 2 ranks (a periodic
/// 2 x 1 grid, 8 neighbours: messages to the other rank and copies within
/// each) and returns each rank's counts.
fn counted(transport: Transport, iters: usize) -> Vec<Counts> {
    counted_on(transport, iters, false)
}

/// [`counted`], or with the fields sode keeps (two sets, alternating) on a
/// 1 x 2 grid whose faces (two fields of 2 rows of 512 KiB) are read in
/// place over shared memory whatever this machine measures (the probe
/// stops at 256 KiB), the corners packed.
fn counted_on(transport: Transport, iters: usize, shared: bool) -> Vec<Counts> {
    let port = free_port();
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let w = thread_world(rank, 2, port, "alloc-test");
                let (global, grid) = if shared {
                    ([65536, 8], [1, 2])
                } else {
                    ([64, 48], [2, 1])
                };
                let d =
                    Decomposition::new(&global, &grid, &[true, true], 2, Stencil::Full).unwrap();
                let mut halo = HaloExchange::builder(&w, &d)
                    .transport(transport)
                    .fields(2)
                    .shared_fields(if shared { 2 } else { 0 })
                    .build()
                    .unwrap();
                if shared {
                    return shared_counts(&mut halo, transport, iters);
                }
                let cells: usize = halo.local_extent().iter().product();
                let (mut u, mut v) = (vec![rank as f64; cells], vec![1.5; cells]);
                let deadline = || Instant::now() + Duration::from_secs(30);
                let mut c = Counts::default();
                for it in 0..iters + 3 {
                    let warm = it >= 3;
                    let n = allocation_counter::measure(|| halo.start(&[&u, &v]).unwrap());
                    c.start += u64::from(warm) * n.count_total;
                    let mut done = false;
                    while !done {
                        let n = allocation_counter::measure(|| done = halo.test().unwrap());
                        c.polls += u64::from(warm) * n.count_total;
                        c.poll_calls += u64::from(warm);
                    }
                    let n = allocation_counter::measure(|| {
                        halo.wait(deadline(), &mut [&mut u, &mut v]).unwrap()
                    });
                    c.wait += u64::from(warm) * n.count_total;
                }
                c
            })
        })
        .collect();
    ranks.into_iter().map(|r| r.join().unwrap()).collect()
}

/// The steady state of [`counted_on`] with shared fields.
fn shared_counts(halo: &mut HaloExchange, transport: Transport, iters: usize) -> Counts {
    if transport == Transport::Shm {
        assert_eq!(halo.halos_read_in_place(), 2, "the faces are read in place");
    }
    let deadline = || Instant::now() + Duration::from_secs(30);
    let mut c = Counts::default();
    for it in 0..iters + 3 {
        let warm = it >= 3;
        let n = allocation_counter::measure(|| halo.start_set(it % 2).unwrap());
        c.start += u64::from(warm) * n.count_total;
        let mut done = false;
        while !done {
            let n = allocation_counter::measure(|| done = halo.test().unwrap());
            c.polls += u64::from(warm) * n.count_total;
            c.poll_calls += u64::from(warm);
        }
        let n = allocation_counter::measure(|| halo.wait_set(deadline()).unwrap());
        c.wait += u64::from(warm) * n.count_total;
    }
    c
}

fn assert_none(what: &str, counts: &[Counts]) {
    for (rank, c) in counts.iter().enumerate() {
        println!("{what}, rank {rank}: {c:?}");
        assert!(c.poll_calls > 0, "{what}: no test() poll was counted");
        assert_eq!(
            (c.start, c.polls, c.wait),
            (0, 0, 0),
            "{what}, rank {rank}: allocations in start, {} test() polls, wait",
            c.poll_calls
        );
    }
}

#[test]
fn start_test_and_wait_allocate_nothing_over_shared_memory() {
    assert_none("shared memory", &counted(Transport::Shm, 50));
}

#[test]
fn start_test_and_wait_allocate_nothing_with_shared_fields() {
    assert_none(
        "shared fields, shared memory",
        &counted_on(Transport::Shm, 50, true),
    );
    assert_none("shared fields, TCP", &counted_on(Transport::Tcp, 20, true));
}

#[test]
fn the_counter_sees_an_allocation() {
    // The counter counts on this thread: a test that cannot fail is no test.
    let n = allocation_counter::measure(|| {
        std::hint::black_box(vec![1u8; 100]);
    });
    assert!(n.count_total >= 1);
}

#[test]
fn start_test_and_wait_allocate_nothing_over_rdma() {
    if !rdma_available() {
        return;
    }
    assert_none("RDMA", &counted(Transport::Rdma, 20));
}

#[test]
fn start_test_and_wait_allocate_nothing_over_tcp() {
    assert_none("TCP", &counted(Transport::Tcp, 50));
}
