//! A rank whose own arguments to a communicator's creation are wrong (a
//! null out pointer, a bad timeout) fails the creation on every rank at
//! once, each returning its status and naming it, instead of leaving the
//! others waiting for it (forever, without a deadline); the ranks stay in
//! step, and their next creation makes a communicator that exchanges.
//! Ranks run as threads of this process, over an allgather of their own
//! (as `libsode_mpi` lends an MPI communicator's).

// It calls the C ABI as a C program does, through its `unsafe` functions.
#![allow(unsafe_code)]

mod common;

use std::ffi::{c_int, CString};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{add_f64, comm, gather, hub, last_error, lent, ok, periodic_2d, release, Hub};
use sode_capi::comm::Comm;
use sode_capi::sys::*;
use sode_capi::{SODE_ERR_ARG, SODE_ERR_NULL, SODE_ERR_STATE, SODE_TRANSPORT_SHM};

const RANKS: usize = 4;
const DIMS: [c_int; 2] = [2, 2];
const SIDE: usize = 6;

/// What the refusing rank does wrong.
#[derive(Clone, Copy)]
enum Wrong {
    /// Passes a null out pointer.
    NullOut,
    /// Passes a timeout of -2 s (-1 is `SODE_TIMEOUT_DEFAULT`).
    Timeout,
    /// Calls `sode_comm_refuse_allgather` with a status and message of
    /// its own (as a wrapper whose own check failed).
    Wrapper,
}

/// A rank's creation's status and message, and the halo cell its next
/// communicator's exchange brought (from the rank above, periodic).
struct Outcome {
    status: c_int,
    message: String,
    halo: f64,
}

fn rank(hub: Arc<Hub>, me: usize, refuser: usize, wrong: Wrong) -> Outcome {
    let mut c = std::ptr::null_mut();
    let ctx = lent(&hub, me);
    let why = CString::new("my_wrapper: the grid is not 2-D").unwrap();
    let (rank, ranks) = (me as c_int, RANKS as c_int);
    let out: *mut *mut Comm = &mut c;
    let (timeout, out) = match wrong {
        _ if me != refuser => (30.0, out),
        Wrong::NullOut => (30.0, std::ptr::null_mut()),
        Wrong::Timeout => (-2.0, out),
        Wrong::Wrapper => (30.0, out),
    };
    // SAFETY: a valid allgather over the hub and its context, released by
    // sode; `out` null or valid for a write.
    let status = unsafe {
        if me == refuser && matches!(wrong, Wrong::Wrapper) {
            sode_comm_refuse_allgather(
                rank,
                ranks,
                Some(gather),
                ctx,
                Some(release),
                timeout,
                SODE_ERR_STATE,
                why.as_ptr(),
            )
        } else {
            sode_comm_create_allgather(rank, ranks, Some(gather), ctx, Some(release), timeout, out)
        }
    };
    let message = last_error();
    assert!(
        c.is_null(),
        "rank {me}: a communicator from a failed creation"
    );
    // The next creation, on every rank, makes one that exchanges.
    let mut comm = comm(&hub, me);
    let coords = [me as c_int / DIMS[1], me as c_int % DIMS[1]];
    let mut array = vec![me as f64; SIDE * SIDE];
    // SAFETY: valid handles and an array of the size the calls document,
    // alive until the exchange is freed.
    unsafe {
        let mut x = periodic_2d(comm, DIMS, coords, 1, SODE_TRANSPORT_SHM);
        add_f64(
            x,
            &mut array,
            [SIDE as i64; 2],
            [1; 2],
            [SIDE as i64 - 2; 2],
        );
        ok(sode_exchange_commit(x), "commit");
        ok(sode_exchange_start(x), "start");
        ok(sode_exchange_wait(x, 30.0), "wait");
        ok(sode_exchange_free(&mut x), "free");
        ok(sode_comm_free(&mut comm), "free comm");
    }
    Outcome {
        status,
        message,
        halo: array[1],
    }
}

/// Every rank's outcome, and how long the failed creation took them all;
/// fails the test if a rank has not returned within a minute.
fn job(refuser: usize, wrong: Wrong) -> (Vec<Outcome>, Duration) {
    let hub = hub(RANKS);
    let (tx, rx) = mpsc::channel();
    let t0 = Instant::now();
    for me in 0..RANKS {
        let (hub, tx) = (hub.clone(), tx.clone());
        std::thread::spawn(move || tx.send((me, rank(hub, me, refuser, wrong))));
    }
    let mut out: Vec<Option<Outcome>> = (0..RANKS).map(|_| None).collect();
    for _ in 0..RANKS {
        let (me, o) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("every rank returns within a minute: a rank waits for the one that refused");
        out[me] = Some(o);
    }
    (out.into_iter().map(Option::unwrap).collect(), t0.elapsed())
}

fn check(refuser: usize, wrong: Wrong, status: c_int, own: &str) {
    let (outcomes, took) = job(refuser, wrong);
    for (r, o) in outcomes.iter().enumerate() {
        assert_eq!(o.status, status, "rank {r}: {}", o.message);
        if r == refuser {
            assert_eq!(o.message, own, "rank {r}");
        } else {
            assert_eq!(
                o.message,
                format!("sode_comm_create_allgather failed on rank {refuser}: {own}"),
                "rank {r}"
            );
        }
        let above = (r as c_int / DIMS[1] + DIMS[0] - 1) % DIMS[0] * DIMS[1] + r as c_int % DIMS[1];
        assert_eq!(
            o.halo,
            f64::from(above),
            "rank {r}: the next communicator's halo"
        );
    }
    // Told in the creation's first steps, not at a deadline (30 s).
    assert!(took < Duration::from_secs(20), "{took:?}");
}

#[test]
fn a_null_out_pointer_on_one_rank_fails_the_creation_on_every_rank() {
    check(
        2,
        Wrong::NullOut,
        SODE_ERR_NULL,
        "sode_comm_create_allgather: `comm` is a null pointer",
    );
}

#[test]
fn a_bad_timeout_on_one_rank_fails_the_creation_on_every_rank() {
    check(
        0,
        Wrong::Timeout,
        SODE_ERR_ARG,
        "sode_comm_create_allgather: a timeout of -2 s: give a positive number of seconds, INFINITY for no deadline, or SODE_TIMEOUT_DEFAULT for the job's (SODE_TIMEOUT)",
    );
}

#[test]
fn a_wrapper_refusing_on_one_rank_fails_the_creation_on_every_rank_with_its_status() {
    check(
        3,
        Wrong::Wrapper,
        SODE_ERR_STATE,
        "my_wrapper: the grid is not 2-D",
    );
}
