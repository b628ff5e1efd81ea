//! Starts at a depth: an exchange committed with halos 2 wide moves 1
//! layer, then 2, then every layer again, on some of its fields or all,
//! over shared memory and over TCP; every halo cell is checked after each
//! exchange (the layers beyond the depth must keep what they held). Four
//! ranks on a periodic 2 x 2 grid, as threads of this process.

// It calls the C ABI as a C program does, through its `unsafe` functions.
#![allow(unsafe_code)]

mod common;

use std::ffi::c_int;
use std::sync::Arc;

use common::{add_f64, comm, hub, last_error, ok, on_every_rank, periodic_2d, Hub};
use sode_capi::sys::*;
use sode_capi::{SODE_ERR_ARG, SODE_ERR_STATE, SODE_OK, SODE_TRANSPORT_SHM, SODE_TRANSPORT_TCP};

/// Halo width on every side.
const HALO: usize = 2;
/// Owned cells a side.
const OWN: usize = 6;
/// Cells a side, halo included.
const SIDE: usize = OWN + 2 * HALO;
/// Ranks a side of the grid.
const GRID: usize = 2;
/// What a halo cell holds before an exchange.
const UNTOUCHED: f64 = -1.0;

/// The value of field `f` at global cell (`y`, `x`), wrapped.
fn value(f: usize, y: i64, x: i64) -> f64 {
    let n = (GRID * OWN) as i64;
    (f * 1_000_000) as f64 + (y.rem_euclid(n) * 1000 + x.rem_euclid(n)) as f64
}

/// A rank's arrays: owned cells by [`value`], halos [`UNTOUCHED`].
fn fresh(me: usize, fields: usize) -> Vec<Vec<f64>> {
    let (cy, cx) = (me / GRID, me % GRID);
    (0..fields)
        .map(|f| {
            let mut a = vec![UNTOUCHED; SIDE * SIDE];
            for y in HALO..HALO + OWN {
                for x in HALO..HALO + OWN {
                    let gy = (cy * OWN + y - HALO) as i64;
                    let gx = (cx * OWN + x - HALO) as i64;
                    a[y * SIDE + x] = value(f, gy, gx);
                }
            }
            a
        })
        .collect()
}

/// Layers outside the owned box along one axis (0 inside it).
fn outside(i: usize) -> usize {
    if i < HALO {
        HALO - i
    } else {
        (i + 1).saturating_sub(HALO + OWN)
    }
}

/// Checks every halo cell of field `f` after an exchange at `depth` (0:
/// every layer) that moved it (`moved`) or not.
fn check(me: usize, f: usize, a: &[f64], depth: usize, moved: bool) -> Result<usize, String> {
    let (cy, cx) = (me / GRID, me % GRID);
    let reach = if depth == 0 { HALO } else { depth };
    let mut filled = 0;
    for y in 0..SIDE {
        for x in 0..SIDE {
            let (oy, ox) = (outside(y), outside(x));
            if oy == 0 && ox == 0 {
                continue;
            }
            let gy = (cy * OWN) as i64 + y as i64 - HALO as i64;
            let gx = (cx * OWN) as i64 + x as i64 - HALO as i64;
            let want = if moved && oy <= reach && ox <= reach {
                filled += 1;
                value(f, gy, gx)
            } else {
                UNTOUCHED
            };
            let got = a[y * SIDE + x];
            if got != want {
                return Err(format!(
                    "rank {me}, field {f}, depth {depth}: cell ({y}, {x}) holds {got}, not {want}"
                ));
            }
        }
    }
    Ok(filled)
}

/// One rank: commits 2 fields with halos `HALO` wide, then exchanges at
/// depth 1, 2 and 0, all fields and field 1 alone; each time checks every
/// halo cell. The halo cells it saw filled.
fn rank(hub: Arc<Hub>, me: usize, transport: c_int) -> Result<usize, String> {
    let mut comm = comm(&hub, me);
    let mut arrays = fresh(me, 2);
    let mut filled = 0;
    // SAFETY (every call below): valid handles and arrays of the sizes the
    // calls document, alive until the exchange and communicator are freed.
    unsafe {
        let g = GRID as c_int;
        let coords = [(me / GRID) as c_int, (me % GRID) as c_int];
        let mut x = periodic_2d(comm, [g, g], coords, HALO as c_int, transport);
        let (ext, lo, own) = ([SIDE as i64; 2], [HALO as i64; 2], [OWN as i64; 2]);
        for a in &mut arrays {
            add_f64(x, a, ext, lo, own);
        }
        assert_eq!(
            sode_exchange_set_depth(x, -1),
            SODE_ERR_ARG,
            "a negative depth"
        );
        ok(sode_exchange_commit(x), "commit");
        let one = [1 as c_int];
        for (depth, only_1) in [
            (1, false),
            (2, false),
            (0, false),
            (1, true),
            (0, true),
            (1, false),
        ] {
            // In place: the exchange holds the arrays added.
            for (a, f) in arrays.iter_mut().zip(fresh(me, 2)) {
                a.copy_from_slice(&f);
            }
            ok(sode_exchange_set_depth(x, depth as c_int), "depth");
            if only_1 {
                ok(
                    sode_exchange_start_fields(x, 1, one.as_ptr(), std::ptr::null()),
                    "start field 1",
                );
            } else {
                ok(sode_exchange_start(x), "start");
            }
            assert_eq!(
                sode_exchange_set_depth(x, 2),
                SODE_ERR_STATE,
                "a depth while in flight"
            );
            ok(sode_exchange_wait(x, 30.0), "wait");
            for (f, a) in arrays.iter().enumerate() {
                filled += check(me, f, a, depth, f == 1 || !only_1)?;
            }
        }
        ok(sode_exchange_free(&mut x), "free");
        ok(sode_comm_free(&mut comm), "free comm");
    }
    Ok(filled)
}

fn every_rank(transport: c_int) {
    let outcomes = on_every_rank(&hub(GRID * GRID), move |hub, me| rank(hub, me, transport));
    for (r, o) in outcomes.iter().enumerate() {
        match o {
            // Per field and exchange: 1 layer fills 28 cells, 2 fill 64.
            Ok(filled) => assert_eq!(
                *filled,
                28 * 2 + 64 * 2 + 64 * 2 + 28 + 64 + 28 * 2,
                "rank {r}"
            ),
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn over_shared_memory_each_depth_moves_its_layers_only() {
    every_rank(SODE_TRANSPORT_SHM);
}

#[test]
fn over_tcp_each_depth_moves_its_layers_only() {
    every_rank(SODE_TRANSPORT_TCP);
}

#[test]
fn a_depth_is_refused_where_it_cannot_apply() {
    let outcomes = on_every_rank(&hub(1), |hub, me| {
        let mut comm = comm(&hub, me);
        // SAFETY: valid handles.
        unsafe {
            let mut x = std::ptr::null_mut();
            ok(sode_exchange_create(comm, 2, &mut x), "create");
            let rc = sode_exchange_set_depth(x, 1);
            let boxes = (rc, last_error());
            ok(sode_exchange_set_depth(x, 0), "depth 0 on boxes");
            ok(sode_exchange_free(&mut x), "free");
            ok(sode_comm_free(&mut comm), "free comm");
            boxes
        }
    });
    let (rc, e) = &outcomes[0];
    assert_eq!(*rc, SODE_ERR_ARG);
    assert!(e.contains("moves each box whole"), "{e}");
}

#[test]
fn ranks_at_different_depths_are_told_not_given_stale_cells() {
    // Rank 0 moves one layer, rank 1 two: each is told at once, instead of
    // unpacking stale cells as halo, that the peer's start has another
    // shape (over shared memory whatever its path, and over TCP).
    for transport in [SODE_TRANSPORT_SHM, SODE_TRANSPORT_TCP] {
        let outcomes = on_every_rank(&hub(2), move |hub, me| {
            let mut comm = comm(&hub, me);
            let mut arrays = fresh(me, 1);
            // SAFETY: valid handles and arrays, alive until freed.
            unsafe {
                let mut x = periodic_2d(comm, [2, 1], [me as c_int, 0], HALO as c_int, transport);
                add_f64(
                    x,
                    &mut arrays[0],
                    [SIDE as i64; 2],
                    [HALO as i64; 2],
                    [OWN as i64; 2],
                );
                ok(sode_exchange_commit(x), "commit");
                ok(sode_exchange_set_depth(x, 1 + me as c_int), "depth");
                ok(sode_exchange_start(x), "start");
                let rc = sode_exchange_wait(x, 3.0);
                let told = last_error();
                // A failed exchange is broken; its handle can be freed.
                let _ = sode_exchange_free(&mut x);
                ok(sode_comm_free(&mut comm), "free comm");
                (rc, told)
            }
        });
        for (r, (rc, told)) in outcomes.iter().enumerate() {
            assert_ne!(
                *rc, SODE_OK,
                "transport {transport}, rank {r}: the wait succeeded"
            );
            assert!(
                told.contains("different parts of the exchange"),
                "transport {transport}, rank {r}: {told}"
            );
        }
    }
}
