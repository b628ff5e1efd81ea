//! What a rank receives when it sets up an exchange: through the
//! program's allgather, a card of fixed size from each rank when the
//! communicator is made (where it listens, its networks); and for an
//! exchange of a grid in its ranks' order, committed, bytes that do not
//! grow with the job, however many fields the exchange has. The job's
//! collective steps then travel a tree of its own links, merging
//! reductions on their way, and neighbours trade their records alone;
//! the fields are checked by their digests, and described in full only
//! when two ranks disagree (the error then names what differs). Ranks
//! run as threads of this process, meeting through an allgather of their
//! own that counts the bytes it delivers; the communicator counts what
//! its own links bring.

// It calls the C ABI as a C program does, through its `unsafe` functions.
#![allow(unsafe_code)]

mod common;

use std::ffi::c_int;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use common::{add_f64, comm, hub, last_error, ok, on_every_rank, periodic_2d, Hub};
use sode_capi::comm::Comm;
use sode_capi::sys::*;
use sode_capi::{SODE_OK, SODE_TRANSPORT_SHM};

/// Cells a side of a block, halo included.
const SIDE: usize = 12;

/// Adds every array of `arrays` (each `SIDE x SIDE`, halo 1, owning
/// `owned`) to `x`, then commits it; the bytes the commit brought rank
/// `me`, or its error.
///
/// # Safety
///
/// `x` is a live exchange, and `arrays` outlive it.
unsafe fn add_and_commit(
    hub: &Hub,
    me: usize,
    comm: *mut Comm,
    x: *mut sode_capi::sys::ExchangeHandle,
    arrays: &mut [Vec<f64>],
    owned: [i64; 2],
) -> Result<u64, String> {
    let (ext, lo) = ([SIDE as i64; 2], [1i64; 2]);
    for a in arrays {
        // SAFETY: as the function's contract.
        unsafe { add_f64(x, a, ext, lo, owned) };
    }
    let before = received(hub, me, comm);
    // SAFETY: as the function's contract.
    let rc = unsafe { sode_exchange_commit(x) };
    let brought = received(hub, me, comm) - before;
    if rc != SODE_OK {
        return Err(last_error());
    }
    // SAFETY: as the function's contract.
    unsafe {
        ok(sode_exchange_start(x), "start");
        ok(sode_exchange_wait(x, 30.0), "wait");
    }
    Ok(brought)
}

/// The bytes rank `me` has received: through the program's allgather, and
/// through its communicator `comm`'s own links (its collective steps and
/// trades).
fn received(hub: &Hub, me: usize, comm: *mut Comm) -> u64 {
    // SAFETY: `comm` is a live communicator of this rank's.
    let links = unsafe { (*comm).world.gathered_bytes() };
    hub.received[me].load(Ordering::Relaxed) + links
}

/// What a rank received in setting up an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bytes {
    /// In its communicator's creation.
    comm: u64,
    /// From then to its exchange's commit, the exchange's creation included.
    exchange: u64,
    /// In the commit.
    commit: u64,
}

/// One test of this file at a time: the memory measures are the whole
/// process's, and another test's threads allocating beside a measure
/// would be counted as this one's (or, freed later, hide its growth).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn alone() -> MutexGuard<'static, ()> {
    // A test that failed while holding it does not stop the others.
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The bytes the process's heap has handed out and not taken back (glibc's
/// `mallinfo2`: in use in its arenas, and mapped for large blocks).
fn heap_bytes() -> u64 {
    // SAFETY: no arguments; glibc reads its own counters.
    let m = unsafe { libc::mallinfo2() };
    (m.uordblks + m.hblkhd) as u64
}

/// The process's resident memory (`VmRSS`).
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap();
    kb * 1024
}

/// One rank of a periodic `dims` grid: commits an exchange of `fields`
/// fields (or fails to, when `owned` differs from the other ranks'), runs
/// it once and checks a halo cell; the bytes the commit brought it, or the
/// commit's error.
fn rank(
    hub: Arc<Hub>,
    me: usize,
    dims: [c_int; 2],
    fields: usize,
    owned: i64,
) -> Result<Bytes, String> {
    let from = hub.received[me].load(Ordering::Relaxed);
    let mut comm = comm(&hub, me);
    let made = received(&hub, me, comm);
    let coords = [me as c_int / dims[1], me as c_int % dims[1]];
    let mut arrays = vec![vec![me as f64; SIDE * SIDE]; fields];
    // SAFETY (every call below): valid handles and arrays of the sizes the
    // calls document, alive until the exchange and communicator are freed.
    unsafe {
        let mut x = periodic_2d(comm, dims, coords, 1, SODE_TRANSPORT_SHM);
        let out = add_and_commit(&hub, me, comm, x, &mut arrays, [owned, SIDE as i64 - 2]).map(
            |commit| Bytes {
                comm: made - from,
                exchange: received(&hub, me, comm) - made,
                commit,
            },
        );
        if out.is_ok() {
            // The first halo row comes from the rank above (periodic).
            let above = ((coords[0] + dims[0] - 1) % dims[0]) * dims[1] + coords[1];
            for a in &arrays {
                assert_eq!(a[1], f64::from(above), "rank {me}: a halo cell");
            }
            hub.barrier.wait();
            if me == 0 {
                hub.resident.store(resident_bytes(), Ordering::Relaxed);
                hub.heap.store(heap_bytes(), Ordering::Relaxed);
            }
            hub.barrier.wait();
        }
        ok(sode_exchange_free(&mut x), "free");
        ok(sode_comm_free(&mut comm), "free comm");
        out
    }
}

/// One rank of a ring described by its messages: `boxes` one-cell boxes
/// of its last owned row to the next rank, received from the previous into
/// the first halo row (each with its own tag), over 2 fields; the bytes
/// the commit brought it, checked halo cells included.
fn ring_rank(hub: Arc<Hub>, me: usize, boxes: usize) -> Result<u64, String> {
    let n = hub.ranks;
    let mut comm = comm(&hub, me);
    let mut arrays = vec![vec![me as f64; SIDE * SIDE]; 2];
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    // SAFETY (every call below): valid handles and arrays of the sizes the
    // calls document, alive until the exchange and communicator are freed.
    unsafe {
        let mut x = std::ptr::null_mut();
        ok(sode_exchange_create(comm, 2, &mut x), "create");
        for k in 0..boxes {
            let (tag, col, one) = (k as c_int + 1, k as i64 + 1, [1i64, 1]);
            let (from, into) = ([SIDE as i64 - 2, col], [0, col]);
            ok(
                sode_exchange_add_send(x, next as c_int, tag, from.as_ptr(), one.as_ptr()),
                "send",
            );
            ok(
                sode_exchange_add_recv(x, prev as c_int, tag, into.as_ptr(), one.as_ptr()),
                "recv",
            );
        }
        let side = SIDE as i64 - 2;
        let out = add_and_commit(&hub, me, comm, x, &mut arrays, [side, side]);
        if out.is_ok() {
            for a in &arrays {
                for k in 0..boxes {
                    assert_eq!(a[k + 1], prev as f64, "rank {me}: box {k}");
                }
                assert_eq!(a[boxes + 1], me as f64, "rank {me}: no box there");
            }
        }
        ok(sode_exchange_free(&mut x), "free");
        ok(sode_comm_free(&mut comm), "free comm");
        out
    }
}

/// Every rank's outcome; rank 3 owns `odd_owned` cells along axis 0 (the
/// others `SIDE - 2`).
fn job(
    hub: &Arc<Hub>,
    dims: [c_int; 2],
    fields: usize,
    odd_owned: i64,
) -> Vec<Result<Bytes, String>> {
    on_every_rank(hub, move |hub, me| {
        let owned = if me == 3 { odd_owned } else { SIDE as i64 - 2 };
        rank(hub, me, dims, fields, owned)
    })
}

/// Every rank's outcome, one field, the ranks of odd rows of the grid
/// owning a row fewer (`SIDE - 3`): the ranks own unlike blocks, and each
/// checks its faces with its neighbours.
fn job_of_unlike_rows(hub: &Arc<Hub>, dims: [c_int; 2]) -> Vec<Result<Bytes, String>> {
    on_every_rank(hub, move |hub, me| {
        let row = me as i64 / i64::from(dims[1]);
        rank(hub, me, dims, 1, SIDE as i64 - 2 - row % 2)
    })
}

#[test]
fn a_commit_brings_each_rank_the_same_bytes_for_1_and_for_40_fields() {
    let _alone = alone();
    let side = SIDE as i64 - 2;
    let bytes = |fields| -> Vec<u64> {
        job(&hub(6), [2, 3], fields, side)
            .into_iter()
            .map(|r| r.unwrap().commit)
            .collect()
    };
    let (one, forty) = (bytes(1), bytes(40));
    println!("bytes a commit brought each of 6 ranks: 1 field {one:?}, 40 fields {forty:?}");
    assert_eq!(one, forty, "bytes received at commit, by rank");
    // A few short messages from its parent and children in the tree of
    // steps (rank 0: five children) and a record from each neighbour.
    assert!(one.iter().all(|&b| b <= 1200), "{one:?}");
}

#[test]
fn fields_that_disagree_across_a_face_are_still_named_on_every_rank() {
    let _alone = alone();
    // Rank 3 (row 1, column 0) owns 7 rows where the others own 10: its
    // neighbours along axis 1 must own as many along axis 0.
    let outcomes = job(&hub(6), [2, 3], 40, 7);
    for (r, o) in outcomes.iter().enumerate() {
        let e = o.as_ref().expect_err("a mismatch fails every rank");
        assert!(
            e.contains("rank 3 owns 7 cells along axis 0") && e.contains("owns 10"),
            "rank {r}: {e}"
        );
    }
}

#[test]
fn a_commit_of_boxes_brings_each_rank_the_same_bytes_for_1_and_for_10_boxes() {
    let _alone = alone();
    let bytes = |boxes| -> Vec<u64> {
        on_every_rank(&hub(5), move |hub, me| ring_rank(hub, me, boxes))
            .into_iter()
            .map(|r| r.unwrap())
            .collect()
    };
    let (one, ten) = (bytes(1), bytes(10));
    println!("bytes a commit of boxes brought each of 5 ranks: 1 box {one:?}, 10 boxes {ten:?}");
    assert_eq!(one, ten, "bytes received at commit, by rank");
    // A record of fixed size from each other rank (boxes are gathered),
    // and the commit's opening reduction.
    assert!(one.iter().all(|&b| b <= 4 * 160 + 4 * 200), "{one:?}");
}

#[test]
fn an_exchange_brings_each_rank_the_same_bytes_from_16_to_512_ranks() {
    let _alone = alone();
    // Two-dimensional periodic grids of thread ranks (8 neighbours each),
    // one field: the communicator's creation, then the exchange's. Rows
    // of unlike blocks: each rank trades its record with its neighbours
    // (where every rank owns as many cells, a reduction alone checks).
    println!(
        "ranks  communicator bytes a rank  per other rank  exchange bytes a rank (most)  of which commit  resident KiB a rank  heap bytes a rank"
    );
    let mut comm_per_other = Vec::new();
    let mut exchange = Vec::new();
    let mut resident = Vec::new();
    let mut heap = Vec::new();
    let before = resident_bytes();
    let heap_before = heap_bytes();
    for dims in [[4, 4], [8, 8], [16, 16], [16, 32]] {
        let hub = hub((dims[0] * dims[1]) as usize);
        let n = hub.ranks;
        let bytes: Vec<Bytes> = job_of_unlike_rows(&hub, dims)
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        let comm = bytes[0].comm;
        let most = bytes.iter().map(|b| b.exchange).max().unwrap();
        let commit = bytes.iter().map(|b| b.commit).max().unwrap();
        let others = (n - 1) as u64;
        let kib = hub.resident.load(Ordering::Relaxed).saturating_sub(before) / n as u64 / 1024;
        let held = hub.heap.load(Ordering::Relaxed).saturating_sub(heap_before) / n as u64;
        println!(
            "{n:>5}  {comm:>24}  {:>14}  {most:>28}  {commit:>15}  {kib:>19}  {held:>17}",
            comm / others,
        );
        // Every rank alike: no rank gathers for the others.
        assert!(bytes.iter().all(|b| b.comm == comm), "{n} ranks: {bytes:?}");
        assert_eq!(
            comm % others,
            0,
            "{n} ranks: {comm} bytes is not a card per other rank"
        );
        comm_per_other.push(comm / others);
        exchange.push(most);
        resident.push(kib);
        heap.push((n as u64, held));
    }
    assert!(
        comm_per_other.iter().all(|p| *p == comm_per_other[0]),
        "communicator bytes per other rank: {comm_per_other:?}"
    );
    // The cards are binary: under 200 bytes on a host with one network
    // and a short name; each network or character of the name adds a few.
    assert!(comm_per_other[0] < 400, "{comm_per_other:?}");
    // From 64 ranks on, the tree of steps has a rank with a parent and 8
    // children, the most a rank takes steps over: the exchange brings the
    // busiest rank as many bytes at 512 ranks as at 64; and at 16 about
    // as many.
    assert_eq!(
        exchange[1], exchange[3],
        "exchange bytes, most a rank: {exchange:?}"
    );
    assert_eq!(
        exchange[2], exchange[3],
        "exchange bytes, most a rank: {exchange:?}"
    );
    assert!(
        exchange[3] < 2 * exchange[0],
        "exchange bytes, most a rank: {exchange:?}"
    );
    // Memory a rank holds grows with its neighbours, not the job (allowing
    // for the allocator's noise).
    assert!(
        resident[3] <= 2 * resident[0] + 256,
        "resident KiB a rank: {resident:?}"
    );
    // What a rank keeps of the whole job (its tables of machines, routes
    // and listening addresses) costs it a few bytes a rank of the job.
    let ((n0, h0), (n1, h1)) = (heap[0], heap[3]);
    let per_job_rank = h1.saturating_sub(h0) / (n1 - n0);
    assert!(
        per_job_rank < 64,
        "the heap a rank holds grows by {per_job_rank} bytes a rank of the job: {heap:?}"
    );
}
