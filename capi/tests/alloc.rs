//! The C ABI's hot path allocates nothing either: after a warm-up,
//! `sode_exchange_start`, `sode_exchange_start_arrays` (after the Fortran
//! module's check of the array, `sode_exchange_check_array_f`),
//! `sode_exchange_start_fields` (and a start at a depth), every
//! `sode_exchange_test` poll and `sode_exchange_wait` make no heap
//! allocation, counted per thread by this test binary's allocator (`allocation-counter`). Two ranks run as two
//! threads of this process, meeting through an allgather of their own
//! (`sode_comm_create_allgather`), over shared memory and over TCP.

// It calls the C ABI as a C program does, through its `unsafe` functions.
#![allow(unsafe_code)]

mod common;

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use common::{add_f64, comm, hub, ok, on_every_rank, periodic_2d, Hub};
use sode_capi::sys::*;
use sode_capi::{SODE_F64, SODE_TRANSPORT_SHM, SODE_TRANSPORT_TCP};

/// Cells a side, halo included.
const SIDE: usize = 34;

/// Allocations counted in one rank's steady state.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Counts {
    starts: u64,
    polls: u64,
    waits: u64,
    poll_calls: u64,
}

/// One rank: a periodic 2 x 1 grid, two fields, `iters` iterations after
/// a warm-up of each kind of start.
fn rank(hub: Arc<Hub>, me: usize, transport: c_int, iters: usize) -> Counts {
    let mut comm = comm(&hub, me);
    // SAFETY (every call below): valid handles and arrays of the sizes the
    // calls document, alive until the exchange and communicator are freed.
    unsafe {
        let mut x = periodic_2d(comm, [2, 1], [me as c_int, 0], 1, transport);
        let mut fields = vec![vec![me as f64; SIDE * SIDE]; 3];
        let (ext, lo, own) = ([SIDE as i64; 2], [1i64; 2], [SIDE as i64 - 2; 2]);
        for f in &mut fields[..2] {
            add_f64(x, f, ext, lo, own);
        }
        ok(sode_exchange_commit(x), "commit");
        // Field 0 on its own array, field 1 on the third: a stage array.
        let arrays: [*mut c_void; 2] = [std::ptr::null_mut(), fields[2].as_mut_ptr().cast()];
        let one = [1 as c_int];
        let shape = [SIDE as i64; 2];
        // As the Fortran module's typed `sode_start_arrays` does: each
        // array checked against its field, then the start.
        let fortran_start = || {
            let checked = sode_exchange_check_array_f(x, 0, 1, SODE_F64, 2, shape.as_ptr(), 1);
            if checked != 0 {
                return checked;
            }
            sode_exchange_start_arrays(x, 2, arrays.as_ptr())
        };
        // The last at a depth (of the halo's one layer: its messages made
        // at the first such start, kept for the next).
        let starts: [&dyn Fn() -> c_int; 4] = [
            &|| sode_exchange_start(x),
            &fortran_start,
            &|| sode_exchange_start_fields(x, 1, one.as_ptr(), std::ptr::null()),
            &|| sode_exchange_start(x),
        ];
        let mut c = Counts::default();
        for it in 0..iters + 8 {
            // Each kind of start twice before counting.
            let warm = u64::from(it >= 8);
            ok(
                sode_exchange_set_depth(x, c_int::from(it % 4 == 3)),
                "depth",
            );
            let n = allocation_counter::measure(|| ok(starts[it % 4](), "start"));
            c.starts += warm * n.count_total;
            let mut done: c_int = 0;
            while done == 0 {
                let n =
                    allocation_counter::measure(|| ok(sode_exchange_test(x, &mut done), "test"));
                c.polls += warm * n.count_total;
                c.poll_calls += warm;
            }
            ok(sode_exchange_start(x), "start after test");
            let n = allocation_counter::measure(|| ok(sode_exchange_wait(x, 30.0), "wait"));
            c.waits += warm * n.count_total;
        }
        ok(sode_exchange_free(&mut x), "free");
        ok(sode_comm_free(&mut comm), "free comm");
        // Row 0 (a halo from the other rank along axis 0) holds its
        // number: the exchange ran.
        let other = (1 - me) as f64;
        assert_eq!(fields[0][1], other, "rank {me}: halo row of field 0");
        c
    }
}

fn counted(transport: c_int, iters: usize) -> Vec<Counts> {
    on_every_rank(&hub(2), move |hub, me| rank(hub, me, transport, iters))
}

fn assert_none(what: &str, counts: &[Counts]) {
    for (r, c) in counts.iter().enumerate() {
        println!("{what}, rank {r}: {c:?}");
        assert!(c.poll_calls > 0, "{what}: no test poll was counted");
        assert_eq!(
            (c.starts, c.polls, c.waits),
            (0, 0, 0),
            "{what}, rank {r}: allocations in starts, {} test polls, waits",
            c.poll_calls
        );
    }
}

#[test]
fn the_c_abi_allocates_nothing_in_start_test_and_wait() {
    assert_none("shared memory", &counted(SODE_TRANSPORT_SHM, 60));
    assert_none("TCP", &counted(SODE_TRANSPORT_TCP, 30));
}

#[test]
fn the_counter_sees_an_allocation() {
    // A test that cannot fail is no test: the counter counts this thread's.
    let n = allocation_counter::measure(|| {
        std::hint::black_box(vec![1u8; 100]);
    });
    assert!(n.count_total >= 1);
}
