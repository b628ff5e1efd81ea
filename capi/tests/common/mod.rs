//! What the C ABI tests share: ranks as threads of the test process,
//! meeting through an allgather of their own that counts the bytes it
//! delivers to each rank.

// It calls the C ABI as a C program does, through its `unsafe` functions.
#![allow(unsafe_code, dead_code)]

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use sode_capi::comm::Comm;
use sode_capi::sys::*;
use sode_capi::{SODE_BOX, SODE_F64, SODE_OK, SODE_ORDER_C};

/// The ranks' meeting place: each call, every rank's bytes side by side.
pub struct Hub {
    pub ranks: usize,
    pub barrier: Barrier,
    slots: Mutex<Vec<Vec<u8>>>,
    /// Per rank, bytes of the other ranks' blocks delivered to it.
    pub received: Vec<AtomicU64>,
    /// What a test records once every rank has reached a point.
    pub resident: AtomicU64,
    /// The same, of another measure.
    pub heap: AtomicU64,
}

/// A hub for `ranks` ranks.
pub fn hub(ranks: usize) -> Arc<Hub> {
    Arc::new(Hub {
        ranks,
        barrier: Barrier::new(ranks),
        slots: Mutex::new(vec![Vec::new(); ranks]),
        received: (0..ranks).map(|_| AtomicU64::new(0)).collect(),
        resident: AtomicU64::new(0),
        heap: AtomicU64::new(0),
    })
}

/// One rank's context for [`gather`].
struct Lent {
    hub: Arc<Hub>,
    rank: usize,
}

pub unsafe extern "C" fn gather(
    mine: *const c_void,
    all: *mut c_void,
    bytes: usize,
    ctx: *mut c_void,
) -> c_int {
    // SAFETY: `ctx` is the `Lent` handed to sode_comm_create_allgather,
    // `mine` holds `bytes` bytes and `all` every rank's worth (its
    // contract).
    let (lent, mine, all) = unsafe {
        let lent = &*(ctx as *const Lent);
        let mine = std::slice::from_raw_parts(mine.cast::<u8>(), bytes);
        let all = std::slice::from_raw_parts_mut(all.cast::<u8>(), bytes * lent.hub.ranks);
        (lent, mine, all)
    };
    let hub = &lent.hub;
    hub.slots.lock().unwrap()[lent.rank] = mine.to_vec();
    hub.barrier.wait();
    for (r, slot) in hub.slots.lock().unwrap().iter().enumerate() {
        all[r * bytes..(r + 1) * bytes].copy_from_slice(slot);
    }
    hub.received[lent.rank].fetch_add((bytes * (hub.ranks - 1)) as u64, Ordering::Relaxed);
    // No rank writes the next call's bytes before every rank has read these.
    hub.barrier.wait();
    0
}

pub unsafe extern "C" fn release(ctx: *mut c_void) {
    // SAFETY: the `Box<Lent>` leaked at creation, released once.
    drop(unsafe { Box::from_raw(ctx.cast::<Lent>()) });
}

/// Rank `me`'s context for [`gather`] over the hub, which [`release`]
/// frees.
pub fn lent(hub: &Arc<Hub>, me: usize) -> *mut c_void {
    Box::into_raw(Box::new(Lent {
        hub: hub.clone(),
        rank: me,
    }))
    .cast::<c_void>()
}

/// Rank `me`'s communicator over the hub.
pub fn comm(hub: &Arc<Hub>, me: usize) -> *mut Comm {
    let lent = lent(hub, me);
    let mut comm = std::ptr::null_mut();
    // SAFETY: a valid allgather and context, released by sode.
    let rc = unsafe {
        sode_comm_create_allgather(
            me as c_int,
            hub.ranks as c_int,
            Some(gather),
            lent,
            Some(release),
            30.0,
            &mut comm,
        )
    };
    ok(rc, "comm");
    comm
}

/// Runs `rank(hub, me)` on every rank of `hub`, each on a thread; their
/// results by rank.
pub fn on_every_rank<T: Send + 'static>(
    hub: &Arc<Hub>,
    rank: impl Fn(Arc<Hub>, usize) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let rank = Arc::new(rank);
    let threads: Vec<_> = (0..hub.ranks)
        .map(|me| {
            let (hub, rank) = (hub.clone(), rank.clone());
            std::thread::spawn(move || rank(hub, me))
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// Rank `me`'s periodic 2-D exchange with every neighbour (`SODE_BOX`)
/// at `coords` of a `dims` grid, halos `halo` wide, over `transport`.
pub fn periodic_2d(
    comm: *mut Comm,
    dims: [c_int; 2],
    coords: [c_int; 2],
    halo: c_int,
    transport: c_int,
) -> *mut ExchangeHandle {
    let (periodic, halo) = ([1, 1], [halo; 2]);
    let mut x = std::ptr::null_mut();
    // SAFETY: arrays of the sizes the call documents; `comm` the caller's.
    let rc = unsafe {
        sode_exchange_create_cart(
            comm,
            2,
            dims.as_ptr(),
            coords.as_ptr(),
            periodic.as_ptr(),
            halo.as_ptr(),
            halo.as_ptr(),
            SODE_BOX,
            &mut x,
        )
    };
    ok(rc, "create");
    // SAFETY: the exchange just made.
    ok(
        unsafe { sode_exchange_set_transport(x, transport) },
        "transport",
    );
    x
}

/// Adds `array` to `x` as a field of doubles, `ext` cells in C order,
/// owning `own` cells from `lo`.
///
/// # Safety
///
/// `x` is a live exchange, and `array` outlives it.
pub unsafe fn add_f64(
    x: *mut ExchangeHandle,
    array: &mut [f64],
    ext: [i64; 2],
    lo: [i64; 2],
    own: [i64; 2],
) {
    assert_eq!(array.len() as i64, ext[0] * ext[1], "the array's cells");
    // SAFETY: as the function's contract.
    let rc = unsafe {
        sode_exchange_add_field(
            x,
            array.as_mut_ptr().cast(),
            SODE_F64,
            2,
            ext.as_ptr(),
            lo.as_ptr(),
            own.as_ptr(),
            std::ptr::null(),
            std::ptr::null(),
            SODE_ORDER_C,
        )
    };
    ok(rc, "add");
}

pub fn ok(rc: c_int, what: &str) {
    assert_eq!(rc, SODE_OK, "{what}: {}", last_error());
}

pub fn last_error() -> String {
    // SAFETY: sode_last_error returns a NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(sode_last_error()) }
        .to_string_lossy()
        .into_owned()
}
