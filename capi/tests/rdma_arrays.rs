//! Other arrays per start over RDMA with faces in place: four ranks on a
//! periodic 2 x 2 grid, every neighbour over RDMA, one exchange committed
//! on each rank's first array and started, iteration after iteration, on
//! one of three arrays, each rank on another one than its neighbours
//! (so each side of each message is staged on its own: in place to
//! staged, staged to in place, both and neither). After every exchange,
//! every halo cell of the array started holds the owners' values of that
//! iteration, and the two arrays not started are exactly as they were
//! (the device wrote into no array but the one started). Faces in place
//! on every rank, and mixed: ranks 0 and 3 in place, 1 and 2 packed; then
//! with the two other arrays lent (`sode_exchange_lend_arrays`), so that
//! no start goes through sode's buffers (the stats count none), where
//! without them every start on another array does.
//!
//! Then starts on part of such an exchange: two fields with halos two
//! wide, started in turn on both, on one, at a depth of one layer, and on
//! one field's other array at that depth. Every halo cell the start moves
//! holds its owner's value of that iteration, and every other one (the
//! field left out, the outer layer) holds what it held, though the owned
//! cells of every field changed.
//!
//! It needs an RDMA device (the SoftRoCE guest in CI): without one it
//! says so and passes, unless `SODE_REQUIRE_RDMA` is set.

// It calls the C ABI as a C program does, through its `unsafe` functions.
#![allow(unsafe_code)]

mod common;

use std::ffi::{c_int, c_void};

use common::{add_f64, comm, hub, last_error, ok, on_every_rank, periodic_2d};
use sode_capi::sys::*;
use sode_capi::{SODE_TRANSPORT_RDMA, SODE_ZERO_COPY_ALWAYS, SODE_ZERO_COPY_NEVER};

/// The partial starts' fields: owned cells a side, halo width, cells a
/// side.
const P_OWN: usize = 12;
const P_HALO: usize = 2;
const P_SIDE: usize = P_OWN + 2 * P_HALO;

/// Owned cells a side (columns are 16 runs of one cell in place).
const OWN: usize = 16;
/// Cells a side, the halo (1 wide) included.
const SIDE: usize = OWN + 2;
/// Ranks a side of the grid.
const GRID: usize = 2;
/// Arrays each rank starts the exchange on in turn.
const ARRAYS: usize = 3;
/// What a halo cell holds before an exchange.
const UNTOUCHED: f64 = -1.0;

/// The owner's value of global cell (`y`, `x`), wrapped, in iteration `it`.
fn value(it: usize, y: i64, x: i64) -> f64 {
    let n = (GRID * OWN) as i64;
    (it * 1_000_000) as f64 + (y.rem_euclid(n) * 1000 + x.rem_euclid(n)) as f64
}

/// Rank `me`'s global cell of local cell (`y`, `x`).
fn global(me: usize, y: usize, x: usize) -> (i64, i64) {
    let (cy, cx) = (me / GRID, me % GRID);
    ((cy * OWN + y) as i64 - 1, (cx * OWN + x) as i64 - 1)
}

fn halo(y: usize, x: usize) -> bool {
    y == 0 || x == 0 || y == SIDE - 1 || x == SIDE - 1
}

/// Rank `me`'s array for iteration `it`: owned cells by [`value`], halo
/// cells [`UNTOUCHED`].
fn fill(me: usize, it: usize, a: &mut [f64]) {
    for y in 0..SIDE {
        for x in 0..SIDE {
            let (gy, gx) = global(me, y, x);
            a[y * SIDE + x] = if halo(y, x) {
                UNTOUCHED
            } else {
                value(it, gy, gx)
            };
        }
    }
}

/// The first halo cell of `a` that does not hold its owner's value of
/// iteration `it`.
fn check(me: usize, it: usize, a: &[f64]) -> Result<(), String> {
    for y in 0..SIDE {
        for x in (0..SIDE).filter(|&x| halo(y, x)) {
            let (gy, gx) = global(me, y, x);
            let (got, want) = (a[y * SIDE + x], value(it, gy, gx));
            if got != want {
                return Err(format!(
                    "rank {me}, iteration {it}: halo cell ({y}, {x}) holds {got}, not {want}"
                ));
            }
        }
    }
    Ok(())
}

/// One rank: commits on its first array with faces in place (`mode`),
/// the next `lent` arrays lent a set each, then starts on array
/// `(it + me) % ARRAYS` in iteration `it`. The exchange's sides in place.
fn rank(
    hub: std::sync::Arc<common::Hub>,
    me: usize,
    mode: c_int,
    lent: usize,
) -> Result<usize, String> {
    let mut comm = comm(&hub, me);
    let mut arrays = vec![vec![UNTOUCHED; SIDE * SIDE]; ARRAYS];
    // SAFETY (every call below): valid handles and arrays of the sizes the
    // calls document, alive until the exchange and communicator are freed.
    unsafe {
        let g = GRID as c_int;
        let coords = [(me / GRID) as c_int, (me % GRID) as c_int];
        let mut x = periodic_2d(comm, [g, g], coords, 1, SODE_TRANSPORT_RDMA);
        ok(sode_exchange_set_zero_copy(x, mode), "zero copy");
        let (ext, lo, own) = ([SIDE as i64; 2], [1; 2], [OWN as i64; 2]);
        add_f64(x, &mut arrays[0], ext, lo, own);
        for set in arrays.iter_mut().skip(1).take(lent) {
            let a: *mut c_void = set.as_mut_ptr().cast();
            ok(sode_exchange_lend_arrays(x, 1, &a), "lend");
        }
        ok(sode_exchange_commit(x), "commit");
        let in_place = sides_in_place(x);
        let mut staged = 0;
        for it in 0..4 * ARRAYS {
            let k = (it + me) % ARRAYS;
            staged += u64::from(in_place > 0 && k > lent);
            fill(me, it, &mut arrays[k]);
            let before: Vec<Vec<f64>> = arrays.clone();
            let given: *mut c_void = arrays[k].as_mut_ptr().cast();
            ok(sode_exchange_start_arrays(x, 1, &given), "start");
            let rc = sode_exchange_wait(x, 60.0);
            if rc != sode_capi::SODE_OK {
                return Err(format!("rank {me}, iteration {it}: {}", last_error()));
            }
            check(me, it, &arrays[k])?;
            if let Some(j) = (0..ARRAYS).find(|&j| j != k && arrays[j] != before[j]) {
                return Err(format!(
                    "rank {me}, iteration {it}: array {j} changed, but the start was on array {k}"
                ));
            }
        }
        let mut counted = u64::MAX;
        ok(
            sode_exchange_staged_starts(x, &mut counted),
            "staged starts",
        );
        if counted != staged {
            return Err(format!(
                "rank {me}: {counted} starts through sode's buffers, {staged} expected with {lent} arrays lent"
            ));
        }
        ok(sode_exchange_free(&mut x), "free");
        ok(sode_comm_free(&mut comm), "free comm");
        Ok(in_place)
    }
}

/// How many sides of the exchange's messages travel in place, from its
/// description.
///
/// # Safety
///
/// `x` is a live exchange.
unsafe fn sides_in_place(x: *mut sode_capi::sys::ExchangeHandle) -> usize {
    let mut text = vec![0u8; 1 << 16];
    let mut needed = 0;
    // SAFETY: a buffer of the size given; `x` the caller's.
    let rc =
        unsafe { sode_exchange_describe(x, text.as_mut_ptr().cast(), text.len(), &mut needed) };
    ok(rc, "describe");
    let text = String::from_utf8_lossy(&text[..needed.min(text.len())]).into_owned();
    text.lines()
        .flat_map(|l| l.split(';').skip(1))
        .filter(|side| side.contains("in place"))
        .count()
}

/// Whether this machine has an RDMA device; a missing one fails where
/// `SODE_REQUIRE_RDMA` says there must be one.
fn device() -> bool {
    let found = std::path::Path::new("/sys/class/infiniband")
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some());
    assert!(
        found || std::env::var_os("SODE_REQUIRE_RDMA").is_none(),
        "SODE_REQUIRE_RDMA is set but /sys/class/infiniband lists no device"
    );
    if !found {
        eprintln!("no RDMA device: skipped");
    }
    found
}

fn every_rank(modes: [c_int; 4], lent: usize) -> Vec<usize> {
    all_ok(on_every_rank(&hub(GRID * GRID), move |hub, me| {
        rank(hub, me, modes[me], lent)
    }))
}

/// Every rank's answer, or a failure that gives every rank's error: the
/// first to fail is often not rank 0, which then only times out waiting
/// for it.
fn all_ok(outcomes: Vec<Result<usize, String>>) -> Vec<usize> {
    let errors: Vec<&String> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
    assert!(
        errors.is_empty(),
        "{} ranks failed:\n{}",
        errors.len(),
        errors
            .iter()
            .map(|e| e.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    outcomes.into_iter().flatten().collect()
}

#[test]
fn rdma_faces_in_place_take_another_array_per_start() {
    if !device() {
        return;
    }
    let in_place = every_rank([SODE_ZERO_COPY_ALWAYS; 4], 0);
    // 8 neighbours (4 of them rank 3 for rank 0, ...), each way.
    assert!(in_place.iter().all(|&n| n > 0), "in place: {in_place:?}");
}

/// Every array lent: neighbours on different arrays each name their own
/// set in their credits, and no start is staged.
#[test]
fn rdma_faces_in_place_take_every_lent_array() {
    if !device() {
        return;
    }
    let in_place = every_rank([SODE_ZERO_COPY_ALWAYS; 4], ARRAYS - 1);
    assert!(in_place.iter().all(|&n| n > 0), "in place: {in_place:?}");
    let (all, none) = (SODE_ZERO_COPY_ALWAYS, SODE_ZERO_COPY_NEVER);
    // Packed writers land in whichever set their peers name.
    let in_place = every_rank([all, none, none, all], ARRAYS - 1);
    assert_eq!((in_place[1], in_place[2]), (0, 0), "packed ranks");
}

#[test]
fn rdma_mixed_sides_take_another_array_per_start() {
    if !device() {
        return;
    }
    let (all, none) = (SODE_ZERO_COPY_ALWAYS, SODE_ZERO_COPY_NEVER);
    let in_place = every_rank([all, none, none, all], 0);
    assert!(in_place[0] > 0 && in_place[3] > 0, "in place: {in_place:?}");
    assert_eq!((in_place[1], in_place[2]), (0, 0), "packed ranks");
}

/// What iteration `it` of the partial starts moves: the fields (from 0),
/// the depth (0: every layer), and whether field 0 goes on its other
/// array.
fn partial_start(it: usize) -> (&'static [c_int], c_int, bool) {
    match it % 4 {
        0 => (&[0, 1], 0, false),
        1 => (&[1], 0, false),
        2 => (&[0, 1], 1, false),
        _ => (&[0], 1, true),
    }
}

/// The owner's value of field `f`'s global cell (`y`, `x`), wrapped, in
/// iteration `it`.
fn p_value(f: usize, it: usize, y: i64, x: i64) -> f64 {
    let n = (GRID * P_OWN) as i64;
    (f * 100_000_000 + it * 1_000_000) as f64 + (y.rem_euclid(n) * 1000 + x.rem_euclid(n)) as f64
}

/// How far local cell index `i` lies outside the owned range (0 inside).
fn layer(i: usize) -> usize {
    if i < P_HALO {
        P_HALO - i
    } else {
        i.saturating_sub(P_HALO + P_OWN - 1)
    }
}

/// Checks every halo cell of field `f`'s array `a` after iteration `it`:
/// its owner's value where the start moved it (`moved`: the field was
/// started, at `depth`), else `before`'s.
fn p_check(
    me: usize,
    (f, it): (usize, usize),
    a: &[f64],
    before: &[f64],
    moved: Option<c_int>,
) -> Result<(), String> {
    let (cy, cx) = (me / GRID, me % GRID);
    for y in 0..P_SIDE {
        for x in 0..P_SIDE {
            let far = layer(y).max(layer(x));
            if far == 0 {
                continue;
            }
            let reached = moved.is_some_and(|d| d == 0 || far <= d as usize);
            let (gy, gx) = (
                (cy * P_OWN + y) as i64 - P_HALO as i64,
                (cx * P_OWN + x) as i64 - P_HALO as i64,
            );
            let want = if reached {
                p_value(f, it, gy, gx)
            } else {
                before[y * P_SIDE + x]
            };
            let got = a[y * P_SIDE + x];
            if got != want {
                return Err(format!(
                    "rank {me}, iteration {it}: field {f} halo cell ({y}, {x}) holds {got}, not {want} (moved: {moved:?})"
                ));
            }
        }
    }
    Ok(())
}

/// One rank of the partial starts: fields 0 and 1 committed on arrays
/// 0 and 1, field 0 also started on array 2. Returns the sides in place.
fn partial_rank(hub: std::sync::Arc<common::Hub>, me: usize, mode: c_int) -> Result<usize, String> {
    let mut comm = comm(&hub, me);
    let mut arrays = vec![vec![UNTOUCHED; P_SIDE * P_SIDE]; 3];
    let (cy, cx) = (me / GRID, me % GRID);
    // SAFETY (every call below): valid handles and arrays of the sizes the
    // calls document, alive until the exchange and communicator are freed.
    unsafe {
        let g = GRID as c_int;
        let mut x = periodic_2d(
            comm,
            [g, g],
            [cy as c_int, cx as c_int],
            P_HALO as c_int,
            SODE_TRANSPORT_RDMA,
        );
        ok(sode_exchange_set_zero_copy(x, mode), "zero copy");
        let (ext, lo, own) = ([P_SIDE as i64; 2], [P_HALO as i64; 2], [P_OWN as i64; 2]);
        let (first, rest) = arrays.split_at_mut(1);
        add_f64(x, &mut first[0], ext, lo, own);
        add_f64(x, &mut rest[0], ext, lo, own);
        ok(sode_exchange_commit(x), "commit");
        let in_place = sides_in_place(x);
        for it in 0..12 {
            let (fields, depth, other) = partial_start(it);
            // Every field's owned cells change, started or not.
            for (k, a) in arrays.iter_mut().enumerate() {
                let f = k % 2;
                for y in P_HALO..P_HALO + P_OWN {
                    for x in P_HALO..P_HALO + P_OWN {
                        let (gy, gx) = (
                            (cy * P_OWN + y) as i64 - P_HALO as i64,
                            (cx * P_OWN + x) as i64 - P_HALO as i64,
                        );
                        a[y * P_SIDE + x] = p_value(f, it, gy, gx);
                    }
                }
            }
            let before = arrays.clone();
            ok(sode_exchange_set_depth(x, depth), "depth");
            let other_array: *mut c_void = arrays[2].as_mut_ptr().cast();
            let given = [other_array];
            let rc = sode_exchange_start_fields(
                x,
                fields.len() as c_int,
                fields.as_ptr(),
                if other {
                    given.as_ptr()
                } else {
                    std::ptr::null()
                },
            );
            if rc != sode_capi::SODE_OK {
                return Err(format!(
                    "rank {me}, iteration {it}: start: {}",
                    last_error()
                ));
            }
            let rc = sode_exchange_wait(x, 60.0);
            if rc != sode_capi::SODE_OK {
                return Err(format!("rank {me}, iteration {it}: {}", last_error()));
            }
            for (k, a) in arrays.iter().enumerate() {
                let f = k % 2;
                let started = fields.contains(&(f as c_int)) && (k == 2) == (other && f == 0);
                p_check(me, (f, it), a, &before[k], started.then_some(depth))?;
            }
        }
        ok(sode_exchange_free(&mut x), "free");
        ok(sode_comm_free(&mut comm), "free comm");
        Ok(in_place)
    }
}

fn every_rank_partial(modes: [c_int; 4]) -> Vec<usize> {
    all_ok(on_every_rank(&hub(GRID * GRID), move |hub, me| {
        partial_rank(hub, me, modes[me])
    }))
}

#[test]
fn rdma_faces_in_place_take_partial_starts() {
    if !device() {
        return;
    }
    let in_place = every_rank_partial([SODE_ZERO_COPY_ALWAYS; 4]);
    assert!(in_place.iter().all(|&n| n > 0), "in place: {in_place:?}");
}

#[test]
fn rdma_mixed_sides_take_partial_starts() {
    if !device() {
        return;
    }
    let (all, none) = (SODE_ZERO_COPY_ALWAYS, SODE_ZERO_COPY_NEVER);
    let in_place = every_rank_partial([all, none, none, all]);
    assert!(in_place[0] > 0 && in_place[3] > 0, "in place: {in_place:?}");
}
