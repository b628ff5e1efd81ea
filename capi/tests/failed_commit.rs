//! A commit that fails on one rank alone fails on every rank, naming that
//! rank and its reason, and leaves the communicator's ranks in step: the
//! next exchange commits and delivers its halos. Ranks run as threads of
//! this process, over an allgather of their own (as a program lends its
//! MPI communicator's).

// It calls the C ABI as a C program does, through its `unsafe` functions.
#![allow(unsafe_code)]

mod common;

use std::ffi::c_int;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use common::{add_f64, comm, hub, last_error, ok, periodic_2d, Hub};
use sode_capi::sys::*;
use sode_capi::{SODE_ERR_ARG, SODE_ERR_STATE, SODE_TRANSPORT_SHM};

/// Cells a side of a block, halo included.
const SIDE: usize = 8;
const DIMS: [c_int; 2] = [2, 2];

/// How a rank's first commit goes wrong, if it does.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    /// It adds no field.
    NoField,
    /// It commits the exchange every rank committed already, while the
    /// others commit a new one.
    Twice,
}

/// What the commit that went wrong returned on a rank, and the halo cell
/// the exchange after it brought (from the rank above, periodic).
struct Outcome {
    status: c_int,
    message: String,
    halo: f64,
}

/// One rank: an exchange committed by every rank; then a commit that goes
/// wrong on rank `faulty` (`fault`); then another exchange, committed and
/// run once.
fn rank(hub: Arc<Hub>, me: usize, faulty: usize, fault: Fault) -> Outcome {
    let mut comm = comm(&hub, me);
    let coords = [me as c_int / DIMS[1], me as c_int % DIMS[1]];
    let (ext, lo, own) = ([SIDE as i64; 2], [1i64; 2], [SIDE as i64 - 2; 2]);
    let mut arrays = vec![vec![me as f64; SIDE * SIDE]; 3];
    // SAFETY (every call below): valid handles and arrays of the sizes the
    // calls document, alive until the exchanges and communicator are freed.
    unsafe {
        let mut a = periodic_2d(comm, DIMS, coords, 1, SODE_TRANSPORT_SHM);
        add_f64(a, &mut arrays[0], ext, lo, own);
        ok(sode_exchange_commit(a), "the first commit");
        let mut b = periodic_2d(comm, DIMS, coords, 1, SODE_TRANSPORT_SHM);
        if !(me == faulty && fault == Fault::NoField) {
            add_f64(b, &mut arrays[1], ext, lo, own);
        }
        let status = if me == faulty && fault == Fault::Twice {
            sode_exchange_commit(a)
        } else {
            sode_exchange_commit(b)
        };
        let message = last_error();
        ok(sode_exchange_free(&mut b), "free the second");
        ok(sode_exchange_free(&mut a), "free the first");
        let mut c = periodic_2d(comm, DIMS, coords, 1, SODE_TRANSPORT_SHM);
        add_f64(c, &mut arrays[2], ext, lo, own);
        ok(sode_exchange_commit(c), "the third commit");
        ok(sode_exchange_start(c), "start");
        ok(sode_exchange_wait(c, 30.0), "wait");
        ok(sode_exchange_free(&mut c), "free the third");
        ok(sode_comm_free(&mut comm), "free comm");
        Outcome {
            status,
            message,
            halo: arrays[2][1],
        }
    }
}

/// Every rank's outcome; fails the test if a rank has not returned within
/// a minute (ranks out of step wait for each other in the allgather).
fn job(faulty: usize, fault: Fault) -> Vec<Outcome> {
    let hub = hub((DIMS[0] * DIMS[1]) as usize);
    let (tx, rx) = mpsc::channel();
    for me in 0..hub.ranks {
        let (hub, tx) = (hub.clone(), tx.clone());
        std::thread::spawn(move || tx.send((me, rank(hub, me, faulty, fault))));
    }
    let mut out: Vec<Option<Outcome>> = (0..hub.ranks).map(|_| None).collect();
    for _ in 0..hub.ranks {
        let (me, o) = rx.recv_timeout(Duration::from_secs(60)).expect(
            "every rank returns within a minute: the ranks' collective steps are out of step",
        );
        out[me] = Some(o);
    }
    out.into_iter().map(Option::unwrap).collect()
}

fn check(outcomes: &[Outcome], faulty: usize, status: c_int, reason: &str) {
    for (r, o) in outcomes.iter().enumerate() {
        assert_eq!(o.status, status, "rank {r}: {}", o.message);
        assert!(o.message.contains(reason), "rank {r}: {}", o.message);
        if r != faulty {
            assert!(
                o.message
                    .contains(&format!("sode_exchange_commit failed on rank {faulty}: ")),
                "rank {r}: {}",
                o.message
            );
        }
        // The first halo row comes from the rank above (periodic).
        let above = (r as c_int / DIMS[1] + DIMS[0] - 1) % DIMS[0] * DIMS[1] + r as c_int % DIMS[1];
        assert_eq!(
            o.halo,
            f64::from(above),
            "rank {r}: the second exchange's halo"
        );
    }
}

#[test]
fn a_rank_without_fields_fails_every_ranks_commit_and_the_next_one_commits() {
    let outcomes = job(2, Fault::NoField);
    check(&outcomes, 2, SODE_ERR_ARG, "no field was added");
}

#[test]
fn a_rank_that_commits_twice_fails_every_ranks_commit_and_the_next_one_commits() {
    let outcomes = job(1, Fault::Twice);
    check(&outcomes, 1, SODE_ERR_STATE, "already committed");
}
