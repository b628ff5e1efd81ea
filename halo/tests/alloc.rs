//! The hot path allocates nothing: after a warm-up, `start`, every `test`
//! poll and `wait` of a halo exchange make no heap allocation (so format no
//! string), counted per thread by this test binary's allocator
//! (`allocation-counter`). Two ranks run as two threads of this process
//! over loopback: shared memory here; over RDMA too where a device works
//! (the SoftRoCE guest).

use std::time::{Duration, Instant};

use sode::field::{ElemType, FieldLayout, Order};
use sode::{Decomposition, FieldExchange, HaloExchange, Stencil, Transport};
mod common;
use common::{free_port, rdma_available, thread_world};

/// One counted job at a time in this binary: a rank's polls also move the
/// other exchanges in flight in the process (MPI's progress rule), and
/// another test's exchange, torn down or failing, may allocate its error
/// on this rank's thread.
fn one_job_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|p| p.into_inner())
}

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
/// stops at 256 KiB): every direction to the other rank, corners included,
/// travels in the one message read in place.
fn counted_on(transport: Transport, iters: usize, shared: bool) -> Vec<Counts> {
    let _alone = one_job_at_a_time();
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
                    if transport == Transport::Shm {
                        // Faces and corners: the six directions to the
                        // other rank (the other two are this rank's own).
                        assert_eq!(halo.halos_read_in_place(), 6, "the faces are read in place");
                    }
                    return steady(&mut halo, iters, |halo, step| match step {
                        Step::Start(it) => halo.start_set(it % 2).unwrap(),
                        Step::Wait(deadline) => halo.wait_set(deadline).unwrap(),
                    });
                }
                let cells: usize = halo.local_extent().iter().product();
                let (mut u, mut v) = (vec![rank as f64; cells], vec![1.5; cells]);
                steady(&mut halo, iters, |halo, step| match step {
                    Step::Start(_) => halo.start(&[&u, &v]).unwrap(),
                    Step::Wait(deadline) => halo.wait(deadline, &mut [&mut u, &mut v]).unwrap(),
                })
            })
        })
        .collect();
    ranks.into_iter().map(|r| r.join().unwrap()).collect()
}

/// A step of an iteration: its start (the iteration's number) or its wait
/// (the deadline).
enum Step {
    Start(usize),
    Wait(Instant),
}

/// An exchange `steady` polls.
trait Polled {
    fn poll(&mut self) -> bool;
}

impl Polled for HaloExchange {
    fn poll(&mut self) -> bool {
        self.test().unwrap()
    }
}

impl Polled for FieldExchange {
    fn poll(&mut self) -> bool {
        self.test().unwrap()
    }
}

/// Allocations of `iters` iterations after 3 of warm-up: `step` starts and
/// waits, `test` polls between.
fn steady<X: Polled>(halo: &mut X, iters: usize, mut step: impl FnMut(&mut X, Step)) -> Counts {
    let mut c = Counts::default();
    for it in 0..iters + 3 {
        let warm = u64::from(it >= 3);
        let n = allocation_counter::measure(|| step(halo, Step::Start(it)));
        c.start += warm * n.count_total;
        let mut done = false;
        while !done {
            let n = allocation_counter::measure(|| done = halo.poll());
            c.polls += warm * n.count_total;
            c.poll_calls += warm;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let n = allocation_counter::measure(|| step(halo, Step::Wait(deadline)));
        c.wait += warm * n.count_total;
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

/// [`counted`] through a `FieldExchange` on a periodic 2 x 1 grid: an f64
/// and an f32 field (halo 2), each rank alternating between two arrays of
/// each, and every other iteration on the f64 field alone. With `lend`
/// (over RDMA), both pairs of arrays are lent, a set each, every face in
/// place: starts switch sets, and the subsets are staged.
fn counted_fields(transport: Transport, iters: usize, lend: bool) -> Vec<Counts> {
    let _alone = one_job_at_a_time();
    let port = free_port();
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let w = thread_world(rank, 2, port, "alloc-fields-test");
                let layout = |ty| FieldLayout::with_halo(ty, &[32, 24], &[2, 2], Order::C);
                let grid = common::periodic_two_by_one();
                // Declared before the exchange, which may hold them lent.
                let mut u = [vec![rank as f64; 36 * 28], vec![0.5; 36 * 28]];
                let mut v = [vec![1.5f32; 36 * 28], vec![2.5f32; 36 * 28]];
                let builder =
                    FieldExchange::builder(&w, vec![layout(ElemType::F64), layout(ElemType::F32)])
                        .transport(transport);
                let builder = if lend {
                    lend_both(builder, &mut u, &mut v)
                } else {
                    builder
                };
                let mut x = builder.cartesian(&grid, &[rank, 0]).unwrap();
                assert_eq!(x.in_place(), [lend, lend]);
                let mut cur = 0;
                steady(&mut x, iters, |x, step| match step {
                    Step::Start(it) => {
                        cur = it;
                        let s = it / 2 % 2;
                        if it % 2 == 0 {
                            x.start(&[(&u[s]).into(), (&v[s]).into()]).unwrap();
                        } else {
                            x.start_fields(&[0], &[(&u[s]).into()]).unwrap();
                        }
                    }
                    Step::Wait(deadline) => {
                        let s = cur / 2 % 2;
                        if cur % 2 == 0 {
                            let arrays = &mut [(&mut u[s]).into(), (&mut v[s]).into()];
                            x.wait(deadline, arrays).unwrap();
                        } else {
                            x.wait_fields(deadline, &[0], &mut [(&mut u[s]).into()])
                                .unwrap();
                        }
                    }
                })
            })
        })
        .collect();
    ranks.into_iter().map(|r| r.join().unwrap()).collect()
}

/// The builder with both pairs of arrays lent, a set each, every face in
/// place.
#[cfg(feature = "rdma")]
#[allow(unsafe_code)]
fn lend_both<'w>(
    mut builder: sode::FieldExchangeBuilder<'w>,
    u: &mut [Vec<f64>; 2],
    v: &mut [Vec<f32>; 2],
) -> sode::FieldExchangeBuilder<'w> {
    let memory = |bytes: &mut [u8]| {
        // SAFETY: the arrays outlive the exchange (declared before it),
        // are never resized, and nothing touches them between a start and
        // its wait.
        unsafe { sode::UserMemory::new(bytes.as_mut_ptr(), bytes.len()) }.unwrap()
    };
    for (us, vs) in u.iter_mut().zip(v.iter_mut()) {
        builder = builder.lend(vec![
            memory(bytemuck::cast_slice_mut(us)),
            memory(bytemuck::cast_slice_mut(vs)),
        ]);
    }
    builder.zero_copy(sode::zero_copy::ZeroCopy::Always)
}

#[cfg(not(feature = "rdma"))]
fn lend_both<'w>(
    builder: sode::FieldExchangeBuilder<'w>,
    _: &mut [Vec<f64>; 2],
    _: &mut [Vec<f32>; 2],
) -> sode::FieldExchangeBuilder<'w> {
    builder
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
fn a_field_exchange_allocates_nothing_on_stage_arrays_and_subsets() {
    assert_none(
        "fields, shared memory",
        &counted_fields(Transport::Shm, 40, false),
    );
    assert_none("fields, TCP", &counted_fields(Transport::Tcp, 20, false));
    if rdma_available() {
        assert_none("fields, RDMA", &counted_fields(Transport::Rdma, 20, false));
        assert_none(
            "fields lent in two sets, RDMA",
            &counted_fields(Transport::Rdma, 20, true),
        );
    }
}

#[test]
fn start_test_and_wait_allocate_nothing_over_tcp() {
    assert_none("TCP", &counted(Transport::Tcp, 50));
}
