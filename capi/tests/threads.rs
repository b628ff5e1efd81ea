//! Calls that must not overlap, made at once from two threads of one rank
//! (every OpenMP thread of a parallel region calling `sode_exchange_wait`
//! on one exchange, say): the second is refused with `SODE_ERR_STATE`,
//! naming the rule, where it would race on the exchange's state, and the
//! first goes on to deliver its halos. Ranks run as threads of this
//! process.

// It calls the C ABI as a C program does, through its `unsafe` functions.
#![allow(unsafe_code)]

mod common;

use std::ffi::c_int;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{add_f64, comm, hub, last_error, ok, on_every_rank, periodic_2d};
use sode_capi::comm::Comm;
use sode_capi::sys::*;
use sode_capi::{SODE_ERR_STATE, SODE_TRANSPORT_SHM};

/// Cells a side of a block, halo included.
const SIDE: usize = 8;

/// A handle another thread of the rank uses too.
struct Shared<T>(*mut T);

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Shared<T> {}

impl<T> Shared<T> {
    /// The handle (a method, so that a closure takes the whole `Shared`).
    fn ptr(self) -> *mut T {
        self.0
    }
}

// SAFETY: the C ABI lets any thread call on a handle; what the test checks
// is that overlapping calls are refused.
unsafe impl<T> Send for Shared<T> {}

/// A rank's field: its own rank in every cell.
fn field(me: usize) -> Vec<f64> {
    vec![me as f64; SIDE * SIDE]
}

/// Rank `me`'s exchange on a periodic 2 x 1 grid, `u` added.
fn exchange(comm: *mut Comm, me: usize, u: &mut [f64]) -> Shared<ExchangeHandle> {
    let x = periodic_2d(comm, [2, 1], [me as c_int, 0], 1, SODE_TRANSPORT_SHM);
    let side = SIDE as i64;
    // SAFETY: `u` outlives the exchange (freed by the caller first).
    unsafe { add_f64(x, u, [side, side], [1, 1], [side - 2, side - 2]) };
    Shared(x)
}

/// Calls `probe` until another thread's call on the same handle has it
/// refused (within 5 s): that thread is then inside its call.
fn until_refused(what: &str, mut probe: impl FnMut() -> c_int) {
    let began = Instant::now();
    loop {
        if probe() == SODE_ERR_STATE && last_error().contains("another thread") {
            return;
        }
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "{what}: never found the other thread inside its call: {}",
            last_error()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `rc` is the refusal of an overlapping call, naming `holder`.
fn refused(what: &str, rc: c_int, holder: &str) {
    let e = last_error();
    assert_eq!(rc, SODE_ERR_STATE, "{what}: {e}");
    assert!(
        e.contains(holder) && e.contains("must not overlap") && e.contains("omp master"),
        "{what}: {e}"
    );
}

/// The first halo row came from the other rank (periodic along axis 0).
fn halo_from_other(me: usize, u: &[f64]) {
    let other = (1 - me) as f64;
    assert!(
        u[1..SIDE - 1].iter().all(|&c| c == other),
        "rank {me}: {:?}",
        &u[..SIDE]
    );
}

#[test]
fn a_call_on_an_exchange_another_thread_is_in_is_refused() {
    let go = Arc::new(Barrier::new(2));
    on_every_rank(&hub(2), move |hub, me| {
        let mut c = comm(&hub, me);
        let mut u = field(me);
        let x = exchange(c, me, &mut u);
        // SAFETY (every call below): live handles; `u` outlives them.
        unsafe {
            ok(sode_exchange_commit(x.ptr()), "commit");
            if me == 1 {
                // Rank 0's second thread checks its refusals first.
                go.wait();
                ok(sode_exchange_start(x.ptr()), "start");
            } else {
                ok(sode_exchange_start(x.ptr()), "start");
                let go = go.clone();
                let other = std::thread::spawn(move || {
                    let mut count = 0u64;
                    until_refused("staged starts", || {
                        sode_exchange_staged_starts(x.ptr(), &mut count)
                    });
                    let holder = "another thread is in a call on this exchange";
                    refused("start", sode_exchange_start(x.ptr()), holder);
                    refused("wait", sode_exchange_wait(x.ptr(), 1.0), holder);
                    let mut done = 0;
                    refused("test", sode_exchange_test(x.ptr(), &mut done), holder);
                    let mut freed = x.ptr();
                    refused("free", sode_exchange_free(&mut freed), holder);
                    assert!(!freed.is_null(), "a refused free cleared the handle");
                    go.wait();
                });
                // Inside until rank 1 starts, after the other thread's checks.
                ok(sode_exchange_wait(x.ptr(), 30.0), "wait");
                other.join().unwrap();
            }
            if me == 1 {
                ok(sode_exchange_wait(x.ptr(), 30.0), "wait");
            }
            halo_from_other(me, &u);
            let mut x = x.ptr();
            ok(sode_exchange_free(&mut x), "free");
            ok(sode_comm_free(&mut c), "free comm");
        }
    });
}

#[test]
fn a_collective_call_overlapping_another_on_its_communicator_is_refused() {
    let go = Arc::new(Barrier::new(2));
    on_every_rank(&hub(2), move |hub, me| {
        let mut c = comm(&hub, me);
        let (mut u, mut v) = (field(me), field(me));
        let (first, second) = (exchange(c, me, &mut u), exchange(c, me, &mut v));
        // SAFETY (every call below): live handles; the arrays outlive them.
        unsafe {
            if me == 1 {
                // Rank 0's second thread checks its refusals first.
                go.wait();
                ok(sode_exchange_commit(first.ptr()), "commit");
            } else {
                let (go, shared_comm) = (go.clone(), Shared(c));
                let other = std::thread::spawn(move || {
                    let mut count = 0u64;
                    // The first commit holds its exchange, then its
                    // communicator's steps: give it time for the second.
                    until_refused("staged starts", || {
                        sode_exchange_staged_starts(first.ptr(), &mut count)
                    });
                    std::thread::sleep(Duration::from_millis(100));
                    let holder = "another thread is in a collective call on this communicator";
                    refused("second commit", sode_exchange_commit(second.ptr()), holder);
                    let mut freed = shared_comm.ptr();
                    refused("free comm", sode_comm_free(&mut freed), holder);
                    assert!(!freed.is_null(), "a refused free cleared the handle");
                    go.wait();
                });
                // Inside until rank 1 commits, after the other thread's checks.
                ok(sode_exchange_commit(first.ptr()), "commit");
                other.join().unwrap();
            }
            ok(sode_exchange_start(first.ptr()), "start");
            ok(sode_exchange_wait(first.ptr(), 30.0), "wait");
            halo_from_other(me, &u);
            for x in [first, second] {
                let mut x = x.ptr();
                ok(sode_exchange_free(&mut x), "free");
            }
            ok(sode_comm_free(&mut c), "free comm");
        }
    });
}
