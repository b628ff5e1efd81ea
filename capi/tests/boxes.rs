//! An exchange described box by box with a box per field: a periodic ring
//! of three ranks, each owning `n` cells of a cell field and the `n + 1`
//! nodes around them of a staggered node field. A rank's first and last
//! nodes are its neighbours' too: they are never sent. Each field sends
//! and receives boxes of its own (`sode_exchange_add_send_field`), over
//! shared memory and TCP; every halo cell holds its owner's value and
//! every shared node keeps its own, bit for bit. A receive into another
//! field than the send's fails the commit on every rank, naming both.
//! Three ranks as threads of this process.

// It calls the C ABI as a C program does, through its `unsafe` functions.
#![allow(unsafe_code)]

mod common;

use std::ffi::c_int;

use common::{comm, hub, last_error, ok, on_every_rank};
use sode_capi::comm::Comm;
use sode_capi::sys::*;
use sode_capi::{
    SODE_ERR_MISMATCH, SODE_F64, SODE_OK, SODE_ORDER_C, SODE_TRANSPORT_SHM, SODE_TRANSPORT_TCP,
};

const RANKS: usize = 3;
/// What a halo cell holds before an exchange.
const UNTOUCHED: f64 = -1.0;

/// Cells rank `r` owns (unequal, as a code's own decomposition may be).
fn cells(r: usize) -> usize {
    4 + r
}

/// Rank `r`'s first global cell (and node).
fn first(r: usize) -> usize {
    (0..r).map(cells).sum()
}

/// Cells (and nodes) around the ring.
fn total() -> i64 {
    (0..RANKS).map(cells).sum::<usize>() as i64
}

/// A cell's value and a node's, wrapped around the ring.
fn cell(g: i64, it: usize) -> f64 {
    (it * 1000) as f64 + g.rem_euclid(total()) as f64
}
fn node(g: i64, it: usize) -> f64 {
    (it * 1000) as f64 + 0.5 + g.rem_euclid(total()) as f64
}

/// Rank `me`'s exchange: field 0, cells `1..=n` of `n + 2`; field 1,
/// nodes `1..=n + 1` of `n + 3` (node `k` of the rank at index `k + 1`).
/// With `wrong`, rank 1 receives its right neighbour's node box into the
/// cell field.
fn exchange(
    comm: *mut Comm,
    me: usize,
    transport: c_int,
    wrong: bool,
    arrays: &mut [Vec<f64>; 2],
) -> *mut ExchangeHandle {
    let n = cells(me) as i64;
    let (left, right) = ((me + RANKS - 1) % RANKS, (me + 1) % RANKS);
    let mut x = std::ptr::null_mut();
    // SAFETY: valid handles and arrays of the sizes the calls document,
    // alive until the exchange is freed (the caller's).
    unsafe {
        ok(sode_exchange_create(comm, 1, &mut x), "create");
        ok(sode_exchange_set_transport(x, transport), "transport");
        for (f, a) in arrays.iter_mut().enumerate() {
            let (ext, lo, own) = ([a.len() as i64], [1i64], [n + f as i64]);
            let rc = sode_exchange_add_field(
                x,
                a.as_mut_ptr().cast(),
                SODE_F64,
                1,
                ext.as_ptr(),
                lo.as_ptr(),
                own.as_ptr(),
                std::ptr::null(),
                std::ptr::null(),
                SODE_ORDER_C,
            );
            ok(rc, "add");
        }
        let one = [1i64];
        let (l, r) = (left as c_int, right as c_int);
        let boxes = |field: c_int, send: [i64; 2], recv: [i64; 2], tags: [c_int; 2]| {
            // Tags: tags[0] travels rightward, tags[1] leftward.
            ok(
                sode_exchange_add_send_field(x, field, l, tags[1], &send[0], one.as_ptr()),
                "send left",
            );
            ok(
                sode_exchange_add_send_field(x, field, r, tags[0], &send[1], one.as_ptr()),
                "send right",
            );
            ok(
                sode_exchange_add_recv_field(x, field, l, tags[0], &recv[0], one.as_ptr()),
                "recv left",
            );
            // The wrong receive lands in the cell field's halo cell.
            let (into, at) = match wrong && me == 1 && field == 1 {
                true => (0, recv[1] - 1),
                false => (field, recv[1]),
            };
            ok(
                sode_exchange_add_recv_field(x, into, r, tags[1], &at, one.as_ptr()),
                "recv right",
            );
        };
        // Cells: the first and last owned go, the halo cells come.
        boxes(0, [1, n], [0, n + 1], [0, 1]);
        // Nodes: past the shared ones (indices 1 and n + 1) go, the
        // halo nodes come; the shared nodes stay home.
        boxes(1, [2, n], [0, n + 2], [2, 3]);
    }
    x
}

/// Rank `me`'s arrays of iteration `it`: owned values, halos untouched.
fn fill(me: usize, it: usize, arrays: &mut [Vec<f64>; 2]) {
    let (n, g0) = (cells(me), first(me) as i64);
    for (i, v) in arrays[0].iter_mut().enumerate() {
        *v = if (1..=n).contains(&i) {
            cell(g0 + i as i64 - 1, it)
        } else {
            UNTOUCHED
        };
    }
    for (i, v) in arrays[1].iter_mut().enumerate() {
        *v = if (1..=n + 1).contains(&i) {
            node(g0 + i as i64 - 1, it)
        } else {
            UNTOUCHED
        };
    }
}

/// Every element of rank `me`'s arrays against what it must hold: index
/// `i` is global cell (or node) `first + i - 1` in both fields, the halo
/// ones their neighbours'.
fn check(me: usize, it: usize, arrays: &[Vec<f64>; 2]) -> Result<(), String> {
    let g0 = first(me) as i64;
    for (f, a) in arrays.iter().enumerate() {
        for (i, &got) in a.iter().enumerate() {
            let g = g0 + i as i64 - 1;
            let want = if f == 0 { cell(g, it) } else { node(g, it) };
            if got != want {
                return Err(format!(
                    "rank {me}, iteration {it}: field {f} element {i} holds {got}, not {want}"
                ));
            }
        }
    }
    Ok(())
}

fn rank(hub: std::sync::Arc<common::Hub>, me: usize, transport: c_int) -> Result<(), String> {
    let mut comm = comm(&hub, me);
    let n = cells(me);
    let mut arrays = [vec![UNTOUCHED; n + 2], vec![UNTOUCHED; n + 3]];
    let mut x = exchange(comm, me, transport, false, &mut arrays);
    // SAFETY: the exchange and communicator just made, the arrays alive.
    unsafe {
        ok(sode_exchange_commit(x), "commit");
        for it in 1..=5 {
            fill(me, it, &mut arrays);
            ok(sode_exchange_start(x), "start");
            if sode_exchange_wait(x, 30.0) != SODE_OK {
                return Err(format!("rank {me}, iteration {it}: {}", last_error()));
            }
            check(me, it, &arrays)?;
        }
        ok(sode_exchange_free(&mut x), "free");
        ok(sode_comm_free(&mut comm), "free comm");
    }
    Ok(())
}

fn every_rank(transport: c_int) {
    for outcome in on_every_rank(&hub(RANKS), move |hub, me| rank(hub, me, transport)) {
        outcome.unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn over_shared_memory_each_field_sends_its_own_boxes() {
    every_rank(SODE_TRANSPORT_SHM);
}

#[test]
fn over_tcp_each_field_sends_its_own_boxes() {
    every_rank(SODE_TRANSPORT_TCP);
}

#[test]
fn a_box_received_into_another_field_fails_every_commit() {
    let outcomes = on_every_rank(&hub(RANKS), |hub, me| {
        let mut comm = comm(&hub, me);
        let n = cells(me);
        let mut arrays = [vec![UNTOUCHED; n + 2], vec![UNTOUCHED; n + 3]];
        let mut x = exchange(comm, me, SODE_TRANSPORT_TCP, true, &mut arrays);
        // SAFETY: the exchange and communicator just made.
        unsafe {
            let told = (sode_exchange_commit(x), last_error());
            ok(sode_exchange_free(&mut x), "free");
            ok(sode_comm_free(&mut comm), "free comm");
            told
        }
    });
    for (me, (rc, e)) in outcomes.iter().enumerate() {
        assert_eq!(*rc, SODE_ERR_MISMATCH, "rank {me}: {e}");
        assert!(
            e.contains("a box of field 1 with tag 3 to rank 1, which receives it into field 0"),
            "rank {me}: {e}"
        );
    }
}
