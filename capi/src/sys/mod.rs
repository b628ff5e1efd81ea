//! The C functions, and every `unsafe` of the crate: pointers and arrays
//! from C are checked for null and turned into owned Rust values here, at
//! the boundary; the user's field memory is reached only through
//! [`UserMemory`] (in [`memory`], which the exchange uses without
//! reaching back here). Each function runs inside `call`, which catches
//! panics and records the message for `sode_last_error`.

pub mod memory;
pub use crate::handle::ExchangeHandle;
use memory::UserMemory;

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::MutexGuard;
use std::time::Duration;

use sode_job::AllgatherFn;

use crate::cart::{Cart, Shape, TileGrid};
use crate::comm::{seconds, Comm};
use crate::error::{CapiError, Result};
use crate::exchange::{Exchange, FieldList};
use crate::explicit::BoxMessage;
use crate::handle::take_steps;
use crate::stats::{NeighbourStats, Stats};
use crate::{SODE_ABI_VERSION, SODE_ERR_ARG, SODE_OK, SODE_ORDER_C, SODE_ORDER_FORTRAN};
use sode::field::{ElemType, FieldLayout, Order, Overlap};
use sode::pattern::Tile;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// C and Fortran programs install no `tracing` subscriber: the library
/// installs sode's (stderr, filtered by `SODE_LOG`, warnings by default)
/// on its first call, unless the program has one.
static LOGGING: std::sync::Once = std::sync::Once::new();

fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

/// Runs `f` for C function `op`: its status, its message kept for
/// `sode_last_error` (empty on success), a panic caught and reported.
fn call(op: &'static str, f: impl FnOnce() -> Result<()>) -> c_int {
    LOGGING.call_once(sode_job::diag::init);
    let outcome = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        Err(CapiError::Internal { op, why })
    });
    match outcome {
        Ok(()) => {
            // Clearing an empty message would allocate on every call.
            LAST_ERROR.with(|l| {
                if !l.borrow().as_bytes().is_empty() {
                    *l.borrow_mut() = CString::default();
                }
            });
            SODE_OK
        }
        Err(e) => {
            let message = sode_job::diag::chain(&e);
            tracing::debug!(op, "{message}");
            set_last_error(&message);
            e.status()
        }
    }
}

/// `n` values from a C array; an error naming `arg` when it is null.
///
/// # Safety
/// A non-null `ptr` must point to `n` readable values.
unsafe fn array<T: Copy>(
    op: &'static str,
    arg: &'static str,
    ptr: *const T,
    n: usize,
) -> Result<Vec<T>> {
    if ptr.is_null() {
        return Err(CapiError::Null { op, arg });
    }
    // SAFETY: non-null, and the caller's contract gives `n` values.
    Ok(unsafe { std::slice::from_raw_parts(ptr, n) }.to_vec())
}

/// Non-negative C integers as sizes.
fn sizes<T: Copy + Into<i64>>(
    op: &'static str,
    arg: &'static str,
    values: &[T],
) -> Result<Vec<usize>> {
    values
        .iter()
        .enumerate()
        .map(|(a, &v)| {
            let v: i64 = v.into();
            usize::try_from(v).map_err(|_| CapiError::Invalid {
                op,
                why: format!("{arg}[{a}] is {v}: it must not be negative"),
            })
        })
        .collect()
}

/// One count per process-grid axis from `p` (`axes` values), or `default`
/// when `p` is NULL: halo widths, overlaps.
///
/// # Safety
/// `p` NULL or holding `axes` values.
unsafe fn per_axis(
    op: &'static str,
    arg: &'static str,
    p: *const c_int,
    axes: usize,
    default: &[usize],
) -> Result<Vec<usize>> {
    if p.is_null() {
        Ok(default.to_vec())
    } else {
        // SAFETY: the caller's contract.
        sizes(op, arg, &unsafe { array(op, arg, p, axes) }?)
    }
}

/// Writes a new handle to `out`.
///
/// # Safety
/// A non-null `out` must be valid for a write.
unsafe fn put<T>(op: &'static str, out: *mut *mut T, value: T) -> Result<()> {
    if out.is_null() {
        return Err(CapiError::Null { op, arg: "out" });
    }
    // SAFETY: non-null, and the caller's contract.
    unsafe { *out = Box::into_raw(Box::new(value)) };
    Ok(())
}

/// The handle behind a C pointer.
///
/// # Safety
/// A non-null `p` must come from the matching `create` and not be freed.
unsafe fn handle<'a, T>(op: &'static str, arg: &'static str, p: *mut T) -> Result<&'a mut T> {
    // SAFETY: the caller's contract.
    unsafe { p.as_mut() }.ok_or(CapiError::Null { op, arg })
}

/// The exchange behind a C pointer, held for call `op`: refused while
/// another thread's call holds it.
///
/// # Safety
/// A non-null `p` must come from a `sode_exchange_create*` and not be freed.
unsafe fn held<'a>(op: &'static str, p: *mut ExchangeHandle) -> Result<MutexGuard<'a, Exchange>> {
    // SAFETY: the caller's contract.
    unsafe { exchange_ref(op, p) }?.hold(op)
}

/// The handle behind a C pointer (shared: its exchange is taken through
/// its lock).
///
/// # Safety
/// As [`held`].
unsafe fn exchange_ref<'a>(op: &'static str, p: *mut ExchangeHandle) -> Result<&'a ExchangeHandle> {
    // SAFETY: the caller's contract.
    unsafe { p.as_ref() }.ok_or(CapiError::Null {
        op,
        arg: "exchange",
    })
}

/// The communicator behind a C pointer (shared: what changes in it is
/// behind its own locks).
///
/// # Safety
/// A non-null `p` must come from a `sode_comm_create_*` and not be freed.
unsafe fn comm_ref<'a>(op: &'static str, p: *mut Comm) -> Result<&'a Comm> {
    // SAFETY: the caller's contract.
    unsafe { p.as_ref() }.ok_or(CapiError::Null { op, arg: "comm" })
}

/// Fills `out` with what `exchange` has done since its commit (or
/// `sode_exchange_reset_stats`): iterations completed, seconds in start
/// and in wait/test calls (packing and unpacking included), bytes sent to
/// and received from other ranks, and the number of neighbours. Local;
/// `SODE_ERR_STATE` before the commit.
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange` or `out`); `SODE_ERR_STATE` before the commit.
///
/// # Safety
/// `exchange` from `sode_exchange_create*`, not freed; `out` valid for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_stats(
    exchange: *mut ExchangeHandle,
    out: *mut Stats,
) -> c_int {
    let op = "sode_exchange_stats";
    call(op, || {
        // SAFETY: the caller's contract.
        let mut x = unsafe { held(op, exchange) }?;
        // SAFETY: the caller's contract.
        let out = unsafe { handle(op, "out", out) }?;
        *out = Stats::of(&x.stats(op)?);
        Ok(())
    })
}

/// Sets `count` to the starts of `exchange` since its commit (or
/// `sode_exchange_reset_stats`) whose faces built to travel in place over
/// RDMA went through sode's buffers instead, packed and unpacked: starts
/// on arrays neither added nor lent (`sode_exchange_lend_arrays`), or on
/// some fields or fewer layers. 0 where every start travels as built (and
/// wherever nothing travels in place). Local.
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange` or `count`); `SODE_ERR_STATE` before the
/// commit.
///
/// # Safety
/// `exchange` from `sode_exchange_create*`, not freed; `count` valid for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_staged_starts(
    exchange: *mut ExchangeHandle,
    count: *mut u64,
) -> c_int {
    let op = "sode_exchange_staged_starts";
    call(op, || {
        // SAFETY: the caller's contract.
        let mut x = unsafe { held(op, exchange) }?;
        // SAFETY: the caller's contract.
        let count = unsafe { handle(op, "count", count) }?;
        *count = x.stats(op)?.staged_starts;
        Ok(())
    })
}

/// Fills `out` with neighbour `i` (0 to `neighbours - 1` of
/// `sode_exchange_stats`) of `exchange`: its rank, its channel and the
/// bytes one iteration sends it and receives from it (as the last start
/// carried). Each neighbouring rank is one neighbour, every direction to
/// it together, whatever its channel (a copy, where it is this rank
/// itself; shared memory; TCP; RDMA). Local.
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange` or `out`); `SODE_ERR_STATE` before the commit;
/// `SODE_ERR_ARG` for `i` out of range.
///
/// # Safety
/// As `sode_exchange_stats`.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_neighbour_stats(
    exchange: *mut ExchangeHandle,
    i: c_int,
    out: *mut NeighbourStats,
) -> c_int {
    let op = "sode_exchange_neighbour_stats";
    call(op, || {
        // SAFETY: the caller's contract.
        let mut x = unsafe { held(op, exchange) }?;
        // SAFETY: the caller's contract.
        let out = unsafe { handle(op, "out", out) }?;
        let s = x.stats(op)?;
        let n = usize::try_from(i)
            .ok()
            .and_then(|i| s.neighbours.get(i))
            .ok_or_else(|| CapiError::Invalid {
                op,
                why: format!(
                    "neighbour {i}: the exchange has {} (0 to {})",
                    s.neighbours.len(),
                    s.neighbours.len() as i64 - 1
                ),
            })?;
        *out = NeighbourStats::of(n);
        Ok(())
    })
}

/// Sets the counters of `sode_exchange_stats` to zero (after a warm-up,
/// say). Local.
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange`); `SODE_ERR_STATE` before the commit.
///
/// # Safety
/// `exchange` from `sode_exchange_create*`, not freed.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_reset_stats(exchange: *mut ExchangeHandle) -> c_int {
    let op = "sode_exchange_reset_stats";
    call(op, || {
        // SAFETY: the caller's contract.
        let mut x = unsafe { held(op, exchange) }?;
        x.reset_stats()
    })
}

/// The version of the ABI this library implements (`SODE_ABI_VERSION`).
#[no_mangle]
pub extern "C" fn sode_abi_version() -> c_int {
    SODE_ABI_VERSION
}

/// The version of this library, `"major.minor.patch"` (the
/// `SODE_VERSION_*` macros are the header's). A static string; any thread.
#[no_mangle]
pub extern "C" fn sode_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The name and meaning of a status code, as `"SODE_ERR_ARG: an invalid
/// argument"`; `"not a sode status code"` for any other number. A static
/// string; any thread. (`sode_last_error()` says what failed in the last
/// call.)
#[no_mangle]
pub extern "C" fn sode_strerror(status: c_int) -> *const c_char {
    crate::status_text(status).as_ptr()
}

/// The message of the last sode call on this thread: empty after a call
/// that succeeded. Valid until the next sode call on this thread.
#[no_mangle]
pub extern "C" fn sode_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// Records `message` as this thread's last error and returns `status`: for
/// libraries built on sode (`libsode_mpi`, the Fortran module) to report
/// their own failures the same way. A null `message` records an empty one.
///
/// # Statuses
/// `status`, whatever it is (the call records the message and hands the
/// status back).
///
/// # Safety
/// A non-null `message` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn sode_report_error(status: c_int, message: *const c_char) -> c_int {
    let text = if message.is_null() {
        String::new()
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::ffi::CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned()
    };
    set_last_error(&text);
    status
}

/// A communicator from the launcher's environment: `sode-run`, or
/// `SODE_ROOT` and `SODE_JOB_SECRET` with Slurm's, Open MPI's or PMI's rank
/// variables; a process nothing launched is a job of one. Collective.
/// `timeout_s` bounds this call and every later commit on the
/// communicator (`INFINITY`: no deadline).
///
/// # Statuses
/// `SODE_ERR_NULL` (`comm`); `SODE_ERR_ARG` for a timeout that is not a
/// positive number of seconds, `INFINITY` or `SODE_TIMEOUT_DEFAULT`. A
/// rank whose `comm` or timeout is wrong still takes part, only to make the
/// call fail on every rank: it returns that status, and the others the
/// same with "sode_comm_create_env failed on rank R: " and its message
/// (rather than wait for it). `SODE_ERR_BOOTSTRAP` when the launcher's variables do not make sense (a
/// rank beyond the size, a bad `SODE_JOB_SECRET`) or the ranks cannot meet (a
/// rank that does not arrive within `timeout_s`, a refused or broken
/// connection).
///
/// # Safety
/// `comm` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sode_comm_create_env(timeout_s: f64, comm: *mut *mut Comm) -> c_int {
    let op = "sode_comm_create_env";
    call(op, || {
        let timeout = match own_arguments(op, timeout_s, comm) {
            Ok(t) => t,
            Err(refusal) => return Err(Comm::refuse_env(refusal)),
        };
        let c = Comm::from_env(timeout)?;
        // SAFETY: the caller's contract.
        unsafe { put(op, comm, c) }
    })
}

/// The timeout of a communicator's creation, when this rank's arguments
/// are right; else the error it refuses the creation with (the other ranks
/// are told: see `Comm::refuse_env`).
fn own_arguments(op: &'static str, timeout_s: f64, comm: *mut *mut Comm) -> Result<Duration> {
    let timeout = seconds(op, timeout_s)?;
    if comm.is_null() {
        return Err(CapiError::Null { op, arg: "comm" });
    }
    Ok(timeout)
}

/// A fixed-size allgather lent by the program: `all` receives every rank's
/// `bytes` bytes of `mine`, in rank order; returns 0 on success.
pub type SodeAllgatherFn = Option<
    unsafe extern "C" fn(
        mine: *const c_void,
        all: *mut c_void,
        bytes: usize,
        ctx: *mut c_void,
    ) -> c_int,
>;

/// Called once with the allgather's `ctx` when sode no longer needs it.
pub type SodeReleaseFn = Option<unsafe extern "C" fn(ctx: *mut c_void)>;

/// The program's allgather (`allgather` with `ctx`, `release` when done)
/// as sode calls it, for rank `rank` of `size`.
fn lent_allgather(
    op: &'static str,
    rank: c_int,
    size: c_int,
    allgather: SodeAllgatherFn,
    ctx: *mut c_void,
    release: SodeReleaseFn,
) -> Result<(usize, usize, AllgatherFn)> {
    let gather = allgather.ok_or(CapiError::Null {
        op,
        arg: "allgather",
    })?;
    let lent = Lent {
        gather,
        ctx,
        release,
    };
    let [rank, size] =
        <[usize; 2]>::try_from(sizes(op, "rank and size", &[rank, size])?).map_err(|_| {
            CapiError::Internal {
                op,
                why: "two sizes".into(),
            }
        })?;
    let f: AllgatherFn = Box::new(move |mine: &[u8], all: &mut [u8], _| lent.gather(mine, all));
    Ok((rank, size, f))
}

/// A program's allgather, callable from Rust.
struct Lent {
    gather: unsafe extern "C" fn(*const c_void, *mut c_void, usize, *mut c_void) -> c_int,
    ctx: *mut c_void,
    release: SodeReleaseFn,
}

// SAFETY: sode calls the allgather only from inside sode calls on the
// communicator's handles, on the threads the program makes them from, as
// sode_comm_create_allgather documents; the context travels with it.
unsafe impl Send for Lent {}

impl Lent {
    fn gather(&self, mine: &[u8], all: &mut [u8]) -> std::result::Result<(), String> {
        // The function may say why it failed through sode_report_error.
        set_last_error("");
        // SAFETY: `mine` and `all` are live Rust buffers of the sizes the
        // allgather contract names (`all` is `bytes` times the ranks); the
        // program's function with its own context.
        let rc = unsafe {
            (self.gather)(
                mine.as_ptr().cast(),
                all.as_mut_ptr().cast(),
                mine.len(),
                self.ctx,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let why = LAST_ERROR.with(|l| l.borrow().to_string_lossy().into_owned());
        if why.is_empty() {
            Err(format!("it returned {rc}"))
        } else {
            Err(format!("it returned {rc}: {why}"))
        }
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(release) = self.release {
            // SAFETY: the program gave `release` for this `ctx`, called once.
            unsafe { release(self.ctx) };
        }
    }
}

/// A communicator over the program's own allgather (`libsode_mpi` lends an
/// MPI communicator's): sode's ranks are its ranks. `release(ctx)` is
/// called when the last handle using it is freed. Collective.
///
/// # Statuses
/// `SODE_ERR_NULL` (`allgather` or `comm`); `SODE_ERR_ARG` for a negative
/// rank or size, or a timeout as `sode_comm_create_env` refuses (a null
/// `comm` or a bad timeout on one rank: that status on every rank, as
/// `sode_comm_create_env`);
/// `SODE_ERR_BOOTSTRAP` for a rank not below `size`, when the allgather fails
/// (its own non-zero return, with its message) or the ranks cannot connect
/// within `timeout_s`.
///
/// # Safety
/// `allgather` must be callable with `ctx` from the threads that make sode
/// calls, until `release` is called; `comm` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sode_comm_create_allgather(
    rank: c_int,
    size: c_int,
    allgather: SodeAllgatherFn,
    ctx: *mut c_void,
    release: SodeReleaseFn,
    timeout_s: f64,
    comm: *mut *mut Comm,
) -> c_int {
    let op = "sode_comm_create_allgather";
    call(op, || {
        let (rank, size, f) = lent_allgather(op, rank, size, allgather, ctx, release)?;
        let timeout = match own_arguments(op, timeout_s, comm) {
            Ok(t) => t,
            Err(refusal) => {
                let meeting = sode_job::default_wait_timeout().unwrap_or(sode_job::NO_DEADLINE);
                return Err(Comm::refuse_over_allgather(rank, size, f, refusal, meeting));
            }
        };
        let c = Comm::over_allgather(rank, size, f, timeout)?;
        // SAFETY: the caller's contract.
        unsafe { put(op, comm, c) }
    })
}

/// Takes part in a communicator's creation over the program's allgather,
/// which the other ranks make with `sode_comm_create_allgather`, only to
/// make it fail on every rank: for a wrapper whose own checks fail on this
/// rank alone (`libsode_mpi`'s `sode_comm_create_mpi` given a null `out`),
/// so that the other ranks are not left waiting for it. Each of them
/// returns `status` with "FUNCTION failed on rank R: MESSAGE"; this rank
/// returns `status` with `message` as its last error. `timeout_s` bounds
/// the meeting (as `sode_comm_create_allgather`'s; `SODE_TIMEOUT_DEFAULT`
/// for the job's); `release(ctx)` is called before it returns when
/// `allgather` is given.
///
/// # Statuses
/// `status` (`SODE_ERR_ARG` in its place when it is `SODE_OK`), also when
/// the other ranks could not be told (a warning says so); as
/// `sode_comm_create_allgather` for a null `allgather` or a bad rank, size
/// or timeout, when no one can be told.
///
/// # Safety
/// As `sode_comm_create_allgather`'s; `message` NULL or a NUL-terminated
/// string.
#[no_mangle]
pub unsafe extern "C" fn sode_comm_refuse_allgather(
    rank: c_int,
    size: c_int,
    allgather: SodeAllgatherFn,
    ctx: *mut c_void,
    release: SodeReleaseFn,
    timeout_s: f64,
    status: c_int,
    message: *const c_char,
) -> c_int {
    let op = "sode_comm_refuse_allgather";
    call(op, || {
        let (rank, size, f) = lent_allgather(op, rank, size, allgather, ctx, release)?;
        let timeout = seconds(op, timeout_s)?;
        let message = if message.is_null() {
            format!("{op}: (no message)")
        } else {
            // SAFETY: the caller's contract: a NUL-terminated string.
            unsafe { CStr::from_ptr(message) }
                .to_string_lossy()
                .into_owned()
        };
        let status = if status == SODE_OK {
            SODE_ERR_ARG
        } else {
            status
        };
        Err(Comm::refuse_over_allgather(
            rank,
            size,
            f,
            CapiError::Refused { status, message },
            timeout,
        ))
    })
}

/// This rank in `comm`.
///
/// # Statuses
/// `SODE_ERR_NULL` (`comm` or `rank`).
///
/// # Safety
/// `comm` from a `sode_comm_create_*`, not freed; `rank` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sode_comm_rank(comm: *mut Comm, rank: *mut c_int) -> c_int {
    let op = "sode_comm_rank";
    call(op, || {
        // SAFETY: the caller's contract.
        let c = unsafe { comm_ref(op, comm) }?;
        // SAFETY: the caller's contract.
        let out = unsafe { handle(op, "rank", rank) }?;
        *out = c.world.rank() as c_int;
        Ok(())
    })
}

/// The number of ranks in `comm`.
///
/// # Statuses
/// `SODE_ERR_NULL` (`comm` or `size`).
///
/// # Safety
/// `comm` from a `sode_comm_create_*`, not freed; `size` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sode_comm_size(comm: *mut Comm, size: *mut c_int) -> c_int {
    let op = "sode_comm_size";
    call(op, || {
        // SAFETY: the caller's contract.
        let c = unsafe { comm_ref(op, comm) }?;
        // SAFETY: the caller's contract.
        let out = unsafe { handle(op, "size", size) }?;
        *out = c.world.size() as c_int;
        Ok(())
    })
}

/// A communicator with the ranks of `comm` renumbered for a Cartesian
/// process grid, as `MPI_Cart_create` with `reorder`: `ndims` (2 or 3)
/// axes of `dims` processes, `periodic` axes (non-zero), each rank owning
/// `block` cells per axis of `cell_bytes` bytes (every field together),
/// halos `halo` cells wide, `shape` neighbours (`SODE_STAR`,
/// `SODE_STAR_EDGES`, `SODE_BOX`). The neighbours that exchange the most
/// bytes end up on one node; launch order is kept when that moves no fewer
/// bytes between nodes. `coords` receives this rank's place in the grid,
/// for `sode_exchange_create_cart` on `*reordered`. Collective: every rank
/// passes the same grid, and a rank's bad argument fails every rank.
///
/// # Statuses
/// `SODE_ERR_NULL` (a required pointer); `SODE_ERR_ARG` for a grid that does
/// not match the communicator's size or an invalid block, halo or shape (on
/// every rank alike); `SODE_ERR_BOOTSTRAP` when the ranks cannot agree or
/// meet again in time. Collective: every rank returns the same status.
///
/// # Safety
/// `comm` from a `sode_comm_create_*`; the arrays hold `ndims` values;
/// `coords` writable for `ndims` values; `reordered` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sode_comm_reorder_cart(
    comm: *mut Comm,
    ndims: c_int,
    dims: *const c_int,
    periodic: *const c_int,
    block: *const c_int,
    halo: c_int,
    shape: c_int,
    cell_bytes: usize,
    coords: *mut c_int,
    reordered: *mut *mut Comm,
) -> c_int {
    let op = "sode_comm_reorder_cart";
    call(op, || {
        // SAFETY: the caller's contract.
        let c = unsafe { comm_ref(op, comm) }?;
        let _steps = take_steps(c.steps(), op)?;
        // SAFETY: the caller's contract: `ndims` values each.
        let grid =
            unsafe { reorder_grid(op, ndims, dims, periodic, block, halo, shape, cell_bytes) }
                .and_then(|d| match (coords.is_null(), reordered.is_null()) {
                    (true, _) => Err(CapiError::Null { op, arg: "coords" }),
                    (_, true) => Err(CapiError::Null {
                        op,
                        arg: "reordered",
                    }),
                    _ => Ok(d),
                });
        let size = c.world.size();
        let (decomp, local_error) = match grid {
            Ok(d) => (d, None),
            // Still take part, with a grid that fits no job of more than
            // one rank, so every rank fails rather than waits.
            Err(e) if size > 1 => {
                let one = sode::Decomposition::new(
                    &[1, 1],
                    &[1, 1],
                    &[false, false],
                    1,
                    sode::Stencil::Faces,
                )
                .map_err(|source| CapiError::Exchange { op, source })?;
                (one, Some(e))
            }
            Err(e) => return Err(e),
        };
        let r = sode::reorder(&c.world, &decomp, cell_bytes.max(1), c.timeout);
        if let Some(e) = local_error {
            return Err(e);
        }
        let r = r.map_err(|source| CapiError::Exchange { op, source })?;
        let mine = decomp.coords(r.world.rank());
        for (a, &v) in mine.iter().enumerate() {
            // SAFETY: the caller's contract: `ndims` writable values.
            unsafe { *coords.add(a) = v as c_int };
        }
        let out = c.renumbered(r.world);
        // SAFETY: the caller's contract.
        unsafe { put(op, reordered, out) }
    })
}

/// The axes of a process grid: `lowest` to 3.
fn grid_axes(op: &'static str, ndims: c_int, lowest: usize) -> Result<usize> {
    match usize::try_from(ndims) {
        Ok(d) if (lowest..=3).contains(&d) => Ok(d),
        _ => Err(CapiError::Invalid {
            op,
            why: format!("ndims is {ndims}: sode takes process grids of {lowest} to 3 axes"),
        }),
    }
}

/// A stencil shape code, checked.
fn grid_shape(op: &'static str, shape: c_int) -> Result<Shape> {
    Shape::from_code(shape).ok_or_else(|| CapiError::Invalid {
        op,
        why: format!("shape {shape}: use SODE_STAR, SODE_STAR_EDGES or SODE_BOX"),
    })
}

/// The decomposition `sode_comm_reorder_cart` describes, checked.
///
/// # Safety
/// Non-null arrays hold `ndims` values.
#[allow(clippy::too_many_arguments)]
unsafe fn reorder_grid(
    op: &'static str,
    ndims: c_int,
    dims: *const c_int,
    periodic: *const c_int,
    block: *const c_int,
    halo: c_int,
    shape: c_int,
    cell_bytes: usize,
) -> Result<sode::Decomposition> {
    // Reordering weighs 2-D and 3-D stencils.
    let d = grid_axes(op, ndims, 2)?;
    let shape = grid_shape(op, shape)?;
    // SAFETY: the caller's contract: `ndims` values each.
    let (dims, periodic, block) = unsafe {
        (
            array(op, "dims", dims, d)?,
            array(op, "periodic", periodic, d)?,
            array(op, "block", block, d)?,
        )
    };
    let dims = sizes(op, "dims", &dims)?;
    let block = sizes(op, "block", &block)?;
    let halo = sizes(op, "halo", &[halo])?[0];
    if cell_bytes == 0 {
        return Err(CapiError::Invalid {
            op,
            why: "cell_bytes is 0: give the bytes of one cell of every field together".into(),
        });
    }
    let global = dims
        .iter()
        .zip(&block)
        .map(|(&p, &b)| p.checked_mul(b))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| CapiError::Invalid {
            op,
            why: "dims times block overflows".into(),
        })?;
    let periodic: Vec<bool> = periodic.iter().map(|&p| p != 0).collect();
    sode::Decomposition::new(&global, &dims, &periodic, halo, shape.stencil())
        .map_err(|source| CapiError::Exchange { op, source })
}

/// Frees a communicator and sets `*comm` to NULL (exchanges made from it
/// keep what they need). NULL or `*comm == NULL` is a no-op.
///
/// # Statuses
/// `SODE_OK` always (NULL and `*comm == NULL` included).
///
/// # Safety
/// `*comm` from a `sode_comm_create_*`, not freed before.
#[no_mangle]
pub unsafe extern "C" fn sode_comm_free(comm: *mut *mut Comm) -> c_int {
    call("sode_comm_free", || {
        if comm.is_null() {
            return Ok(());
        }
        // SAFETY: the caller's contract: `*comm` is null or ours.
        let Some(c) = (unsafe { (*comm).as_ref() }) else {
            return Ok(());
        };
        drop(take_steps(c.steps(), "sode_comm_free")?);
        // SAFETY: ours, and no collective call is inside it.
        unsafe {
            drop(Box::from_raw(*comm));
            *comm = std::ptr::null_mut();
        }
        Ok(())
    })
}

/// A Cartesian exchange: `ndims` (1, 2 or 3) axes, `dims` processes per axis,
/// this rank's `coords`, `periodic` axes (non-zero), halo widths below
/// (`halo_lo`) and above (`halo_hi`) the owned box per axis (the widest of
/// any field), and `shape` (`SODE_STAR`, `SODE_STAR_EDGES`, `SODE_BOX`).
/// Axis `a` of the grid is axis `a` (index position `a`) of every field.
///
/// # Statuses
/// `SODE_ERR_NULL` (`comm`, an array, or `exchange`); `SODE_ERR_ARG` for
/// `ndims` outside 1 to 3, a negative value, a coordinate outside the grid, a
/// halo wider than 2^20 cells, an unknown shape, or an invalid
/// `SODE_TRANSPORT`. (A grid that does not match the communicator's ranks is
/// found by the commit.)
///
/// # Safety
/// `comm` from a `sode_comm_create_*`; the arrays hold `ndims` values;
/// `exchange` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_create_cart(
    comm: *mut Comm,
    ndims: c_int,
    dims: *const c_int,
    coords: *const c_int,
    periodic: *const c_int,
    halo_lo: *const c_int,
    halo_hi: *const c_int,
    shape: c_int,
    exchange: *mut *mut ExchangeHandle,
) -> c_int {
    let op = "sode_exchange_create_cart";
    call(op, || {
        // SAFETY: the caller's contract.
        let c = unsafe { comm_ref(op, comm) }?;
        let d = grid_axes(op, ndims, 1)?;
        let shape = grid_shape(op, shape)?;
        // SAFETY: the caller's contract: `ndims` values each.
        let (dims, coords, periodic, lo, hi) = unsafe {
            (
                array(op, "dims", dims, d)?,
                array(op, "coords", coords, d)?,
                array(op, "periodic", periodic, d)?,
                array(op, "halo_lo", halo_lo, d)?,
                array(op, "halo_hi", halo_hi, d)?,
            )
        };
        let cart = Cart {
            dims: sizes(op, "dims", &dims)?,
            coords: sizes(op, "coords", &coords)?,
            periodic: periodic.iter().map(|&p| p != 0).collect(),
            halo_lo: sizes(op, "halo_lo", &lo)?,
            halo_hi: sizes(op, "halo_hi", &hi)?,
            shape,
        };
        let x = Exchange::cartesian(c.world.clone(), c.timeout, cart)?;
        // SAFETY: the caller's contract.
        unsafe { put(op, exchange, ExchangeHandle::new(x, c.steps().clone())) }
    })
}

/// Most domains a tiled exchange's grid may have: the owner map is read
/// whole.
const MAX_DOMAINS: usize = 1 << 24;

/// An exchange of a grid of domains, several a rank (tiles, as tiled ocean
/// and atmosphere models keep them): `ndims` (1, 2 or 3) axes, `dims`
/// domains per axis, `periodic` axes (non-zero), `owners` the rank of each
/// domain (`dims[0] * dims[1] * ...` values, the last axis fastest), and
/// this rank's `ntiles` domains, tile `t` at coordinates
/// `tile_coords[t * ndims + a]` and at index `t` along the last axis of
/// every field's array (`u[nt][ny + 2h][nx + 2h]` in C order, `u(1-h:nx+h,
/// 1-h:ny+h, nt)` in Fortran). Halo widths and `shape` as in
/// `sode_exchange_create_cart`. Each tile's halo comes from the
/// neighbouring domains; a neighbour this rank holds too is copied, never
/// sent.
///
/// # Statuses
/// `SODE_ERR_NULL` (`comm`, an array, or `exchange`); `SODE_ERR_ARG` for
/// `ndims` outside 1 to 3, a negative value, more than 2^24 domains, a
/// tile outside the grid, held by another rank or given twice, no tiles,
/// an owner outside the communicator, a halo wider than 2^20 cells, an
/// unknown shape, or an invalid `SODE_TRANSPORT`. (Grids that differ
/// between ranks are found by the commit.)
///
/// # Safety
/// `comm` from a `sode_comm_create_*`; `dims`, `periodic`, `halo_lo` and
/// `halo_hi` hold `ndims` values, `owners` one per domain, `tile_coords`
/// `ntiles * ndims`; `exchange` valid for a write.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn sode_exchange_create_tiles(
    comm: *mut Comm,
    ndims: c_int,
    dims: *const c_int,
    periodic: *const c_int,
    owners: *const c_int,
    ntiles: c_int,
    tile_coords: *const c_int,
    halo_lo: *const c_int,
    halo_hi: *const c_int,
    shape: c_int,
    exchange: *mut *mut ExchangeHandle,
) -> c_int {
    let op = "sode_exchange_create_tiles";
    call(op, || {
        // SAFETY: the caller's contract.
        let c = unsafe { comm_ref(op, comm) }?;
        let d = grid_axes(op, ndims, 1)?;
        let shape = grid_shape(op, shape)?;
        // SAFETY: the caller's contract: `ndims` values each.
        let (dims, periodic, lo, hi) = unsafe {
            (
                array(op, "dims", dims, d)?,
                array(op, "periodic", periodic, d)?,
                array(op, "halo_lo", halo_lo, d)?,
                array(op, "halo_hi", halo_hi, d)?,
            )
        };
        let dims = sizes(op, "dims", &dims)?;
        let domains = dims
            .iter()
            .try_fold(1usize, |n, &g| n.checked_mul(g))
            .filter(|&n| n <= MAX_DOMAINS)
            .ok_or_else(|| CapiError::Invalid {
                op,
                why: format!("dims {dims:?}: more than 2^24 domains"),
            })?;
        let ntiles = sizes(op, "ntiles", &[ntiles])?[0];
        if ntiles > domains {
            return Err(CapiError::Invalid {
                op,
                why: format!("ntiles is {ntiles}, but the grid has {domains} domains"),
            });
        }
        // SAFETY: the caller's contract: a value per domain, `ndims` per
        // tile.
        let (owners, coords) = unsafe {
            (
                array(op, "owners", owners, domains)?,
                array(op, "tile_coords", tile_coords, ntiles * d)?,
            )
        };
        let coords = sizes(op, "tile_coords", &coords)?;
        let tiles = TileGrid {
            dims,
            periodic: periodic.iter().map(|&p| p != 0).collect(),
            owners: sizes(op, "owners", &owners)?,
            tiles: coords
                .chunks(d)
                .enumerate()
                .map(|(index, c)| Tile {
                    coords: c.to_vec(),
                    index,
                })
                .collect(),
            halo_lo: sizes(op, "halo_lo", &lo)?,
            halo_hi: sizes(op, "halo_hi", &hi)?,
            shape,
        };
        let x = Exchange::tiles(c.world.clone(), c.timeout, tiles)?;
        // SAFETY: the caller's contract.
        unsafe { put(op, exchange, ExchangeHandle::new(x, c.steps().clone())) }
    })
}

/// Which faces travel in place over RDMA (read from the sender's field and
/// written into the receiver's halo by the device, with no copy):
/// `SODE_ZERO_COPY_AUTO` (faces of long contiguous runs; the default, or
/// what the `SODE_ZERO_COPY` variable says: `auto`, `always`, `never`),
/// `SODE_ZERO_COPY_ALWAYS` or `SODE_ZERO_COPY_NEVER` (pack every face).
/// Before commit; ranks may choose differently (each side of a message
/// decides for itself).
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange`); `SODE_ERR_ARG` for an unknown mode;
/// `SODE_ERR_STATE` after the commit.
///
/// # Safety
/// `exchange` from `sode_exchange_create_*`, not freed.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_set_zero_copy(
    exchange: *mut ExchangeHandle,
    mode: c_int,
) -> c_int {
    let op = "sode_exchange_set_zero_copy";
    // SAFETY: the caller's contract.
    unsafe {
        with_exchange(op, exchange, |x| {
            let m = match mode {
                crate::SODE_ZERO_COPY_AUTO => sode::zero_copy::ZeroCopy::Auto,
                crate::SODE_ZERO_COPY_ALWAYS => sode::zero_copy::ZeroCopy::Always,
                crate::SODE_ZERO_COPY_NEVER => sode::zero_copy::ZeroCopy::Never,
                other => {
                    return Err(CapiError::Invalid {
                        op,
                        why: format!(
                            "mode {other}: use SODE_ZERO_COPY_AUTO, SODE_ZERO_COPY_ALWAYS or SODE_ZERO_COPY_NEVER"
                        ),
                    })
                }
            };
            x.set_zero_copy(m)
        })
    }
}

/// Makes the starts that follow move at most `depth` layers of each halo:
/// the layers nearest the owned cells, along every axis a message crosses
/// (corners `depth` by `depth`); 0 (the default) moves every layer, as
/// committed. A code whose steps need halos of different widths commits
/// one exchange at the widest and sets the depth before each start
/// (`sode_exchange_start_fields` picks the fields). Every channel then
/// moves only those layers. Any time but while an exchange is in
/// flight, after commit or before; every rank alike, like the fields
/// started.
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange`); `SODE_ERR_ARG` for a negative depth, or a
/// depth on an exchange described by its boxes or whose fields sode keeps;
/// `SODE_ERR_STATE` while an exchange is in flight. Where faces travel
/// in place over RDMA (`sode_exchange_set_zero_copy`), a start at a depth
/// packs and unpacks them through sode's buffers, as if they were packed.
///
/// # Safety
/// `exchange` from `sode_exchange_create_*`, not freed.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_set_depth(
    exchange: *mut ExchangeHandle,
    depth: c_int,
) -> c_int {
    let op = "sode_exchange_set_depth";
    // SAFETY: the caller's contract.
    unsafe {
        with_exchange(op, exchange, |x| {
            let d = usize::try_from(depth).map_err(|_| CapiError::Invalid {
                op,
                why: format!("depth {depth}: give the layers to move (0: every layer)"),
            })?;
            x.set_depth(d)
        })
    }
}

/// Which channels carry the exchange's messages: `SODE_TRANSPORT_AUTO`
/// (shared memory inside a node; between nodes RDMA where both have a
/// device, TCP otherwise; the default),
/// `SODE_TRANSPORT_SHM`, `SODE_TRANSPORT_RDMA` (RDMA inside a node too) or
/// `SODE_TRANSPORT_TCP` (TCP inside a node too). Overrides `SODE_TRANSPORT`.
/// Before commit, the same on every rank.
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange`); `SODE_ERR_ARG` for an unknown transport;
/// `SODE_ERR_STATE` after the commit.
///
/// # Safety
/// `exchange` from `sode_exchange_create_*`, not freed.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_set_transport(
    exchange: *mut ExchangeHandle,
    transport: c_int,
) -> c_int {
    let op = "sode_exchange_set_transport";
    // SAFETY: the caller's contract.
    unsafe {
        with_exchange(op, exchange, |x| {
            let t = match transport {
                crate::SODE_TRANSPORT_AUTO => sode::Transport::Auto,
                crate::SODE_TRANSPORT_SHM => sode::Transport::Shm,
                crate::SODE_TRANSPORT_RDMA => sode::Transport::Rdma,
                crate::SODE_TRANSPORT_TCP => sode::Transport::Tcp,
                other => {
                    return Err(CapiError::Invalid {
                        op,
                        why: format!(
                            "transport {other}: use SODE_TRANSPORT_AUTO, SODE_TRANSPORT_SHM, SODE_TRANSPORT_RDMA or SODE_TRANSPORT_TCP"
                        ),
                    })
                }
            };
            x.set_transport(t)
        })
    }
}

/// An exchange described by its messages, for codes with their own
/// decomposition: boxes of `ndims` axes (the fields' first axes) sent to
/// and received from named ranks, added with `sode_exchange_add_send` and
/// `sode_exchange_add_recv`.
///
/// # Statuses
/// `SODE_ERR_NULL` (`comm` or `exchange`); `SODE_ERR_ARG` for `ndims` outside
/// 1 to 8, or an invalid `SODE_TRANSPORT`.
///
/// # Safety
/// `comm` from a `sode_comm_create_*`; `exchange` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_create(
    comm: *mut Comm,
    ndims: c_int,
    exchange: *mut *mut ExchangeHandle,
) -> c_int {
    let op = "sode_exchange_create";
    call(op, || {
        // SAFETY: the caller's contract.
        let c = unsafe { comm_ref(op, comm) }?;
        let d = sizes(op, "ndims", &[ndims])?[0];
        let x = Exchange::explicit(c.world.clone(), c.timeout, d)?;
        // SAFETY: the caller's contract.
        unsafe { put(op, exchange, ExchangeHandle::new(x, c.steps().clone())) }
    })
}

/// The Fortran module's `sode_exchange_create`: as
/// `sode_exchange_create`, its boxes given in the arrays' own bounds,
/// each axis `k` starting at `lbounds[k]` (`sode_exchange_add_send_f`),
/// and every field's first `ndims` dimensions starting there too; its
/// messages count fields and dimensions from 1.
///
/// # Statuses
/// As `sode_exchange_create`; `SODE_ERR_NULL` for a null `lbounds` too.
///
/// # Safety
/// As `sode_exchange_create`; `lbounds` holds `ndims` values.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_create_f(
    comm: *mut Comm,
    ndims: c_int,
    lbounds: *const i64,
    exchange: *mut *mut ExchangeHandle,
) -> c_int {
    let op = "sode_exchange_create";
    call(op, || {
        // SAFETY: the caller's contract.
        let c = unsafe { comm_ref(op, comm) }?;
        let d = sizes(op, "ndims", &[ndims])?[0];
        let mut x = Exchange::explicit(c.world.clone(), c.timeout, d)?;
        // SAFETY: the caller's contract: `ndims` values.
        let first = unsafe { array(op, "lbounds", lbounds, d) }?;
        x.count_boxes_from(first);
        // SAFETY: the caller's contract.
        unsafe { put(op, exchange, ExchangeHandle::new(x, c.steps().clone())) }
    })
}

/// Refuses an array whose first dimensions do not start where the
/// exchange's boxes count from (boxes given in the arrays' own bounds).
fn check_origin(op: &'static str, origin: Option<&[i64]>, lbounds: &[i64]) -> Result<()> {
    let Some(origin) = origin else {
        return Ok(());
    };
    match origin.iter().zip(lbounds).position(|(o, l)| o != l) {
        None => Ok(()),
        Some(k) => Err(CapiError::Invalid {
            op,
            why: format!(
                "dimension {}: the array's lower bound is {}, but the exchange's boxes count from {} (sode_exchange_create's lbounds): every field's first dimensions must start there",
                k + 1,
                lbounds[k],
                origin[k]
            ),
        }),
    }
}

/// A box's peer and tag, checked.
fn peer_and_tag(op: &'static str, rank: c_int, tag: c_int) -> Result<(usize, u32)> {
    let peer = sizes(op, "rank", &[rank])?[0];
    let tag = u32::try_from(tag).map_err(|_| CapiError::Invalid {
        op,
        why: format!("tag {tag}: tags are non-negative"),
    })?;
    Ok((peer, tag))
}

/// The field a box of field `field` carries, numbered from `first` (0 in
/// C, 1 in Fortran).
fn box_field(op: &'static str, field: c_int, first: c_int) -> Result<usize> {
    usize::try_from(i64::from(field) - i64::from(first)).map_err(|_| CapiError::Invalid {
        op,
        why: format!("field {field}: fields are numbered from {first} in the order added"),
    })
}

/// Which list a box joins (sends or receives) and the one field it
/// carries (`None`: every field).
#[derive(Clone, Copy)]
struct BoxKind {
    send: bool,
    field: Option<usize>,
}

/// # Safety
/// As `sode_exchange_add_send`.
unsafe fn add_box(
    op: &'static str,
    exchange: *mut ExchangeHandle,
    rank: c_int,
    tag: c_int,
    lo: *const i64,
    size: *const i64,
    BoxKind { send, field }: BoxKind,
) -> Result<()> {
    // SAFETY: the caller's contract.
    let mut x = unsafe { held(op, exchange) }?;
    let d = x.dims();
    let (peer, tag) = peer_and_tag(op, rank, tag)?;
    // SAFETY: the caller's contract: the exchange's `ndims` values each.
    let (lo, size) = unsafe { (array(op, "lo", lo, d)?, array(op, "size", size, d)?) };
    let m = BoxMessage {
        peer,
        tag,
        lo: sizes(op, "lo", &lo)?,
        size: sizes(op, "size", &size)?,
        field,
    };
    x.add_box(m, send)
}

/// Sends the box `lo .. lo + size` (0-based, the exchange's `ndims` axes)
/// of every field to `rank` each iteration; it fills that rank's receive
/// from this one with the same `tag`.
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange`, `lo` or `size`); `SODE_ERR_ARG` for a rank
/// outside the job, a negative tag, a box of no cells, or a box that leaves a
/// field added before; `SODE_ERR_STATE` on a Cartesian exchange or after the
/// commit.
///
/// # Safety
/// `exchange` from `sode_exchange_create`, not freed; `lo` and `size` hold
/// the exchange's `ndims` values.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_add_send(
    exchange: *mut ExchangeHandle,
    rank: c_int,
    tag: c_int,
    lo: *const i64,
    size: *const i64,
) -> c_int {
    let op = "sode_exchange_add_send";
    // SAFETY: the caller's contract.
    call(op, || unsafe {
        add_box(
            op,
            exchange,
            rank,
            tag,
            lo,
            size,
            BoxKind {
                send: true,
                field: None,
            },
        )
    })
}

/// Receives into the box `lo .. lo + size` of every field what `rank` sends
/// this one with `tag`.
///
/// # Statuses
/// As `sode_exchange_add_send`.
///
/// # Safety
/// As `sode_exchange_add_send`.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_add_recv(
    exchange: *mut ExchangeHandle,
    rank: c_int,
    tag: c_int,
    lo: *const i64,
    size: *const i64,
) -> c_int {
    let op = "sode_exchange_add_recv";
    // SAFETY: the caller's contract.
    call(op, || unsafe {
        add_box(
            op,
            exchange,
            rank,
            tag,
            lo,
            size,
            BoxKind {
                send: false,
                field: None,
            },
        )
    })
}

/// As `sode_exchange_add_send`, for field `field` alone (numbered from 0
/// in the order added, added already): fields laid out differently
/// (staggered, on another grid) send boxes of their own. The receive with
/// the same `tag` must be for the same field (`sode_exchange_add_recv_field`),
/// checked at commit.
///
/// # Statuses
/// As `sode_exchange_add_send`; `SODE_ERR_ARG` also for a field not added
/// yet.
///
/// # Safety
/// As `sode_exchange_add_send`.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_add_send_field(
    exchange: *mut ExchangeHandle,
    field: c_int,
    rank: c_int,
    tag: c_int,
    lo: *const i64,
    size: *const i64,
) -> c_int {
    let op = "sode_exchange_add_send_field";
    // SAFETY: the caller's contract.
    call(op, || unsafe {
        let field = box_field(op, field, 0)?;
        add_box(
            op,
            exchange,
            rank,
            tag,
            lo,
            size,
            BoxKind {
                send: true,
                field: Some(field),
            },
        )
    })
}

/// As `sode_exchange_add_recv`, into field `field` alone (as
/// `sode_exchange_add_send_field`).
///
/// # Statuses
/// As `sode_exchange_add_send_field`.
///
/// # Safety
/// As `sode_exchange_add_send`.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_add_recv_field(
    exchange: *mut ExchangeHandle,
    field: c_int,
    rank: c_int,
    tag: c_int,
    lo: *const i64,
    size: *const i64,
) -> c_int {
    let op = "sode_exchange_add_recv_field";
    // SAFETY: the caller's contract.
    call(op, || unsafe {
        let field = box_field(op, field, 0)?;
        add_box(
            op,
            exchange,
            rank,
            tag,
            lo,
            size,
            BoxKind {
                send: false,
                field: Some(field),
            },
        )
    })
}

/// # Safety
/// As `sode_exchange_add_send_f`.
unsafe fn add_box_f(
    exchange: *mut ExchangeHandle,
    rank: c_int,
    tag: c_int,
    n: c_int,
    first: *const i64,
    last: *const i64,
    BoxKind { send, field }: BoxKind,
) -> Result<()> {
    let op = if send {
        "sode_exchange_add_send"
    } else {
        "sode_exchange_add_recv"
    };
    // SAFETY: the caller's contract.
    let mut x = unsafe { held(op, exchange) }?;
    let Some(origin) = x.box_origin().map(<[i64]>::to_vec) else {
        return Err(CapiError::State {
            op,
            why: "the exchange counts its boxes from 0: make it with the Fortran module's sode_exchange_create".into(),
        });
    };
    let (peer, tag) = peer_and_tag(op, rank, tag)?;
    let d = origin.len();
    if usize::try_from(n).ok() != Some(d) {
        return Err(CapiError::Invalid {
            op,
            why: format!("first and last hold {n} indices each, but the exchange's boxes have {d} dimensions (the size of sode_exchange_create's lbounds)"),
        });
    }
    // SAFETY: the caller's contract: the exchange's `ndims` values each.
    let (first, last) = unsafe { (array(op, "first", first, d)?, array(op, "last", last, d)?) };
    let mut lo = Vec::with_capacity(d);
    let mut size = Vec::with_capacity(d);
    for k in 0..d {
        let (o, f, l) = (origin[k] as i128, first[k] as i128, last[k] as i128);
        let dim = k + 1;
        if f > l {
            return Err(CapiError::Invalid {
                op,
                why: format!("dimension {dim}: the box {f}:{l} holds no cells"),
            });
        }
        let offset = usize::try_from(f - o).map_err(|_| CapiError::Invalid {
            op,
            why: format!("dimension {dim}: the box {f}:{l} starts below the arrays' lower bound {o} (sode_exchange_create's lbounds)"),
        })?;
        let cells = usize::try_from(l - f + 1).map_err(|_| CapiError::Invalid {
            op,
            why: format!("dimension {dim}: the box {f}:{l} is too large"),
        })?;
        lo.push(offset);
        size.push(cells);
    }
    x.add_box(
        BoxMessage {
            peer,
            tag,
            lo,
            size,
            field,
        },
        send,
    )
}

/// The Fortran module's `sode_add_send`: sends the cells `first[k]` to
/// `last[k]` (the arrays' own bounds, inclusive) of every field to `rank`;
/// `n`, the indices each holds, must be the exchange's `ndims`.
///
/// # Statuses
/// As `sode_exchange_add_send`; `SODE_ERR_ARG` also when `n` is not the
/// exchange's `ndims`, or a box starts below its lower bounds;
/// `SODE_ERR_STATE` on an exchange not made by `sode_exchange_create_f`.
///
/// # Safety
/// `exchange` from `sode_exchange_create_f`, not freed; `first` and
/// `last` hold `n` values.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_add_send_f(
    exchange: *mut ExchangeHandle,
    rank: c_int,
    tag: c_int,
    n: c_int,
    first: *const i64,
    last: *const i64,
) -> c_int {
    let op = "sode_exchange_add_send";
    // SAFETY: the caller's contract.
    call(op, || unsafe {
        add_box_f(
            exchange,
            rank,
            tag,
            n,
            first,
            last,
            BoxKind {
                send: true,
                field: None,
            },
        )
    })
}

/// The Fortran module's `sode_add_recv`: receives into the cells
/// `first[k]` to `last[k]` of every field what `rank` sends with `tag`.
///
/// # Statuses
/// As `sode_exchange_add_send_f`.
///
/// # Safety
/// As `sode_exchange_add_send_f`.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_add_recv_f(
    exchange: *mut ExchangeHandle,
    rank: c_int,
    tag: c_int,
    n: c_int,
    first: *const i64,
    last: *const i64,
) -> c_int {
    let op = "sode_exchange_add_recv";
    // SAFETY: the caller's contract.
    call(op, || unsafe {
        add_box_f(
            exchange,
            rank,
            tag,
            n,
            first,
            last,
            BoxKind {
                send: false,
                field: None,
            },
        )
    })
}

/// The Fortran module's `sode_add_send` and `sode_add_recv` with a
/// `field`: as `sode_exchange_add_send_f` (`send` nonzero) or
/// `sode_exchange_add_recv_f`, for field `field` alone, numbered from 1.
///
/// # Statuses
/// As `sode_exchange_add_send_f`; `SODE_ERR_ARG` also for a field not
/// added yet.
///
/// # Safety
/// As `sode_exchange_add_send_f`.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_add_box_field_f(
    exchange: *mut ExchangeHandle,
    send: c_int,
    field: c_int,
    rank: c_int,
    tag: c_int,
    n: c_int,
    first: *const i64,
    last: *const i64,
) -> c_int {
    let op = if send != 0 {
        "sode_exchange_add_send"
    } else {
        "sode_exchange_add_recv"
    };
    // SAFETY: the caller's contract.
    call(op, || unsafe {
        let field = box_field(op, field, 1)?;
        add_box_f(
            exchange,
            rank,
            tag,
            n,
            first,
            last,
            BoxKind {
                send: send != 0,
                field: Some(field),
            },
        )
    })
}

/// `SODE_ORDER_C` or `SODE_ORDER_FORTRAN`.
fn order_of(op: &'static str, order: c_int) -> Result<Order> {
    match order {
        SODE_ORDER_C => Ok(Order::C),
        SODE_ORDER_FORTRAN => Ok(Order::Fortran),
        _ => Err(CapiError::Invalid {
            op,
            why: format!("order {order}: use SODE_ORDER_C or SODE_ORDER_FORTRAN"),
        }),
    }
}

/// The raw arguments of an `add_field` call.
struct FieldArgs {
    base: *mut c_void,
    ty: c_int,
    ndims: c_int,
    extents: *const i64,
    strides: Option<*const i64>,
    order: c_int,
    owned_lo: *const i64,
    owned_size: *const i64,
    halo_lo: *const c_int,
    halo_hi: *const c_int,
}

/// # Safety
/// As `sode_exchange_add_field_strided`.
unsafe fn add_field(
    op: &'static str,
    exchange: *mut ExchangeHandle,
    args: FieldArgs,
) -> Result<()> {
    // SAFETY: the caller's contract.
    let mut x = unsafe { held(op, exchange) }?;
    let ty = ElemType::from_code(args.ty).ok_or_else(|| CapiError::Invalid {
        op,
        why: format!(
            "element type {}: use SODE_F32, SODE_F64, SODE_I32, SODE_I64, SODE_C32, SODE_C64 or SODE_BYTES(n) for elements of n bytes (1 to SODE_MAX_ELEM_BYTES = 4096)",
            args.ty
        ),
    })?;
    let d = usize::try_from(args.ndims)
        .ok()
        .filter(|d| (1..=8).contains(d))
        .ok_or_else(|| CapiError::Invalid {
            op,
            why: format!("ndims is {}: a field has 1 to 8 axes", args.ndims),
        })?;
    let g = x.dims();
    // SAFETY: the caller's contract: `ndims` values each, the halo arrays
    // as many as the exchange has axes.
    let (extents, owned_lo, owned_size) = unsafe {
        (
            sizes(op, "extents", &array(op, "extents", args.extents, d)?)?,
            sizes(op, "owned_lo", &array(op, "owned_lo", args.owned_lo, d)?)?,
            sizes(
                op,
                "owned_size",
                &array(op, "owned_size", args.owned_size, d)?,
            )?,
        )
    };
    let mut spec = match args.strides {
        // SAFETY: as above.
        Some(p) => {
            FieldLayout::new(ty, &extents, Order::C).strides(&sizes(op, "strides", &unsafe {
                array(op, "strides", p, d)
            }?)?)
        }
        None => FieldLayout::new(ty, &extents, order_of(op, args.order)?),
    };
    let (max_lo, max_hi) = x.halo_widths();
    // SAFETY (both): the caller's contract, one width per grid axis.
    let widths = |p, name, max: &[usize]| unsafe { per_axis(op, name, p, g, max) };
    spec = spec.owned(&owned_lo, &owned_size).halo(
        &widths(args.halo_lo, "halo_lo", &max_lo)?,
        &widths(args.halo_hi, "halo_hi", &max_hi)?,
    );
    let base = args.base.cast::<u8>();
    // SAFETY: the caller promised the array spans the extents and strides
    // given (checked to be `span` bytes) and outlives the exchange. NULL:
    // sode keeps the field (refused unless shared fields were chosen).
    x.add_field(spec, |span| {
        (!base.is_null()).then(|| unsafe { UserMemory::new(base, span) })
    })
}

/// Adds a field of element type `type` (`SODE_F32`, `SODE_F64`,
/// `SODE_I32`, `SODE_I64`, `SODE_C32`, `SODE_C64`, or `SODE_BYTES(n)`:
/// elements of `n` bytes copied as they are) at `base`: an array
/// of `ndims` axes with `extents` elements each (halos included), in
/// `order` (`SODE_ORDER_C` or `SODE_ORDER_FORTRAN`), owning the box
/// `owned_lo .. owned_lo + owned_size` (0-based) with halo widths
/// `halo_lo` / `halo_hi` on the process grid's axes (NULL: the exchange's;
/// at most the exchange's). Axes beyond the grid's travel whole (their
/// owned range). Every rank adds the same fields in the same order.
///
/// Over RDMA, faces made of long contiguous runs are read from and written
/// into the field in place (no copy; `SODE_ZERO_COPY=auto|always|never`
/// chooses, see `sode_exchange_describe`): between `sode_exchange_start`
/// and the end of the wait that completes it, the cells a rank sends must
/// not be written and its halos must be neither read nor written.
///
/// `base` is NULL (and only then) when sode keeps the fields
/// (`sode_exchange_set_shared_fields`).
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange`, an array, or `base` where the caller keeps
/// the fields); `SODE_ERR_ARG` for an unknown type or order, a field that
/// does not fit its array or whose halo exceeds the exchange's, a box that
/// leaves it, a size that overflows, memory that cannot be had, or a `base`
/// where sode keeps the fields; `SODE_ERR_STATE` after the commit.
///
/// # Safety
/// `base` must stay valid for the whole array until the exchange is freed,
/// and not be accessed by other threads during sode calls on it, nor, while
/// an exchange is in flight, where it sends or receives (above); the arrays
/// hold `ndims` values (the halo arrays the exchange's `ndims`).
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_add_field(
    exchange: *mut ExchangeHandle,
    base: *mut c_void,
    r#type: c_int,
    ndims: c_int,
    extents: *const i64,
    owned_lo: *const i64,
    owned_size: *const i64,
    halo_lo: *const c_int,
    halo_hi: *const c_int,
    order: c_int,
) -> c_int {
    let op = "sode_exchange_add_field";
    let args = FieldArgs {
        base,
        ty: r#type,
        ndims,
        extents,
        strides: None,
        order,
        owned_lo,
        owned_size,
        halo_lo,
        halo_hi,
    };
    // SAFETY: the caller's contract.
    call(op, || unsafe { add_field(op, exchange, args) })
}

/// An array's bounds and owned cells as the Fortran module passes them,
/// one value a dimension each.
struct FortranBounds<'a> {
    lbounds: &'a [i64],
    ubounds: &'a [i64],
    first: &'a [i64],
    last: &'a [i64],
}

/// A Fortran array's shape as `sode_exchange_add_field` takes it: extents,
/// and the owned cells' offset from the lower bounds and size.
struct FortranShape {
    extents: Vec<i64>,
    owned_lo: Vec<i64>,
    owned_size: Vec<i64>,
}

impl FortranShape {
    /// Checks every dimension's owned cells, with the halo widths around
    /// them, against the array's bounds, in the caller's own terms
    /// (dimensions counted from 1); widths missing for an axis are 0.
    fn of(
        op: &'static str,
        b: &FortranBounds<'_>,
        halo_below: &[usize],
        halo_above: &[usize],
    ) -> Result<FortranShape> {
        let d = b.lbounds.len();
        let mut shape = FortranShape {
            extents: Vec::with_capacity(d),
            owned_lo: Vec::with_capacity(d),
            owned_size: Vec::with_capacity(d),
        };
        let to_i64 = |x: i128| {
            i64::try_from(x).map_err(|_| CapiError::Invalid {
                op,
                why: "the array's bounds overflow 64 bits".into(),
            })
        };
        for k in 0..d {
            let (hl, hh) = match (halo_below.get(k), halo_above.get(k)) {
                (Some(&l), Some(&h)) => (l as i128, h as i128),
                _ => (0, 0),
            };
            let (l, u, f, e) = (
                i128::from(b.lbounds[k]),
                i128::from(b.ubounds[k]),
                i128::from(b.first[k]),
                i128::from(b.last[k]),
            );
            let dim = k + 1;
            if f > e {
                return Err(CapiError::Invalid {
                    op,
                    why: format!("dimension {dim}: no owned cells (first {f}, last {e})"),
                });
            }
            if f - hl < l || e + hh > u {
                return Err(CapiError::Invalid {
                    op,
                    why: format!(
                        "dimension {dim}: the owned cells {f}:{e}, with {hl} halo cells below and {hh} above, need the bounds {}:{}; the array's are {l}:{u}",
                        f - hl,
                        e + hh
                    ),
                });
            }
            shape.extents.push(to_i64(u - l + 1)?);
            shape.owned_lo.push(to_i64(f - l)?);
            shape.owned_size.push(to_i64(e - f + 1)?);
        }
        Ok(shape)
    }
}

/// The Fortran module's `sode_add_field`: as `sode_exchange_add_field`
/// for an array in Fortran order with the bounds `lbounds(k):ubounds(k)`,
/// owning `first(k):last(k)`, whose errors are told in those terms
/// (dimensions counted from 1, the caller's own bounds).
///
/// # Statuses
/// As `sode_exchange_add_field`, its messages in the array's own bounds;
/// `SODE_ERR_ARG` also for lower bounds other than those of
/// `sode_exchange_create_f`.
///
/// # Safety
/// As `sode_exchange_add_field`; the bound arrays hold `ndims` values.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_add_field_f(
    exchange: *mut ExchangeHandle,
    base: *mut c_void,
    r#type: c_int,
    ndims: c_int,
    lbounds: *const i64,
    ubounds: *const i64,
    first: *const i64,
    last: *const i64,
    halo_lo: *const c_int,
    halo_hi: *const c_int,
) -> c_int {
    // Elements of a size, not a type: the module's sode_add_field_bytes.
    let op = if r#type < 0 {
        "sode_add_field_bytes"
    } else {
        "sode_add_field"
    };
    call(op, || {
        let d = usize::try_from(ndims)
            .ok()
            .filter(|d| (1..=8).contains(d))
            .ok_or_else(|| CapiError::Invalid {
                op,
                why: format!("an array of rank {ndims}: a field has rank 1 to 8"),
            })?;
        // SAFETY: the caller's contract: `ndims` values each.
        let (lb, ub, first, last) = unsafe {
            (
                array(op, "lbounds", lbounds, d)?,
                array(op, "ubounds", ubounds, d)?,
                array(op, "first", first, d)?,
                array(op, "last", last, d)?,
            )
        };
        let (halo_below, halo_above) = {
            // SAFETY: the caller's contract.
            let x = unsafe { held(op, exchange) }?;
            check_origin(op, x.box_origin(), &lb)?;
            let (max_lo, max_hi) = x.halo_widths();
            let g = x.dims();
            // SAFETY (both): the caller's contract, one width per grid axis.
            let widths = |p, name, max: &[usize]| unsafe { per_axis(op, name, p, g, max) };
            (
                widths(halo_lo, "halo_lo", &max_lo)?,
                widths(halo_hi, "halo_hi", &max_hi)?,
            )
        };
        let shape = FortranShape::of(
            op,
            &FortranBounds {
                lbounds: &lb,
                ubounds: &ub,
                first: &first,
                last: &last,
            },
            &halo_below,
            &halo_above,
        )?;
        let (extents, owned_lo, owned_size) = (shape.extents, shape.owned_lo, shape.owned_size);
        let args = FieldArgs {
            base,
            ty: r#type,
            ndims,
            extents: extents.as_ptr(),
            strides: None,
            order: SODE_ORDER_FORTRAN,
            owned_lo: owned_lo.as_ptr(),
            owned_size: owned_size.as_ptr(),
            halo_lo,
            halo_hi,
        };
        // Before the field is added, so that its own messages count from 1.
        // SAFETY: the caller's contract.
        unsafe { held(op, exchange) }?.count_as_fortran();
        // SAFETY: the caller's contract; the vectors outlive the call.
        unsafe { add_field(op, exchange, args) }
    })
}

/// As `sode_exchange_add_field`, with explicit `strides` (in elements, per
/// axis) instead of an order: padded or sub-arrays.
///
/// # Statuses
/// As `sode_exchange_add_field`; `SODE_ERR_ARG` also for strides under which
/// elements would overlap.
///
/// # Safety
/// As `sode_exchange_add_field`; `strides` holds `ndims` values.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_add_field_strided(
    exchange: *mut ExchangeHandle,
    base: *mut c_void,
    r#type: c_int,
    ndims: c_int,
    extents: *const i64,
    strides: *const i64,
    owned_lo: *const i64,
    owned_size: *const i64,
    halo_lo: *const c_int,
    halo_hi: *const c_int,
) -> c_int {
    let op = "sode_exchange_add_field_strided";
    call(op, || {
        if strides.is_null() {
            return Err(CapiError::Null { op, arg: "strides" });
        }
        let args = FieldArgs {
            base,
            ty: r#type,
            ndims,
            extents,
            strides: Some(strides),
            order: SODE_ORDER_C,
            owned_lo,
            owned_size,
            halo_lo,
            halo_hi,
        };
        // SAFETY: the caller's contract.
        unsafe { add_field(op, exchange, args) }
    })
}

/// The number of fields added to `exchange` so far (they are numbered
/// from 0 in that order).
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange` or `count`).
///
/// # Safety
/// `exchange` from `sode_exchange_create_*`, not freed; `count` valid for
/// a write.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_field_count(
    exchange: *mut ExchangeHandle,
    count: *mut c_int,
) -> c_int {
    let op = "sode_exchange_field_count";
    call(op, || {
        // SAFETY: the caller's contract.
        let x = unsafe { held(op, exchange) }?;
        // SAFETY: the caller's contract.
        let out = unsafe { handle(op, "count", count) }?;
        *out = c_int::try_from(x.field_count()).unwrap_or(c_int::MAX);
        Ok(())
    })
}

/// A field's number (from 0, in the order added) as an index.
fn field_number(op: &'static str, field: c_int) -> Result<usize> {
    usize::try_from(field).map_err(|_| CapiError::Invalid {
        op,
        why: format!("field {field}: fields are numbered from 0 in the order added"),
    })
}

/// Marks the cells at each end of field `field`'s owned box (fields are
/// numbered from 0 in the order added) that the neighbour on that side
/// owns too: `overlap_lo[a]` below and `overlap_hi[a]` above, along each
/// process-grid axis `a` (NULL: none). A staggered field's edge node,
/// computed by both ranks, is never sent: with an overlap of 1 below and a
/// halo of `d`, the neighbour below receives the `d` cells after the
/// shared one. Before commit, on a Cartesian exchange; every rank the same
/// (commit checks).
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange`); `SODE_ERR_ARG` for a field that does not
/// exist, a negative count, an overlap along an axis the grid does not split,
/// owned cells too few for the halo and the overlap, or an explicit exchange;
/// `SODE_ERR_STATE` after the commit.
///
/// # Safety
/// `exchange` from `sode_exchange_create_*`, not freed; the arrays NULL or
/// holding one value per axis of the exchange.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_set_overlap(
    exchange: *mut ExchangeHandle,
    field: c_int,
    overlap_lo: *const c_int,
    overlap_hi: *const c_int,
) -> c_int {
    let op = "sode_exchange_set_overlap";
    call(op, || {
        // SAFETY: the caller's contract.
        let mut x = unsafe { held(op, exchange) }?;
        let g = x.dims();
        let none = vec![0; g];
        // SAFETY (both): the caller's contract, one count per grid axis.
        let counts = |p, name| unsafe { per_axis(op, name, p, g, &none) };
        let overlap = Overlap {
            lo: counts(overlap_lo, "overlap_lo")?,
            hi: counts(overlap_hi, "overlap_hi")?,
        };
        x.set_overlap(field_number(op, field)?, overlap)
    })
}

/// Says where field `field`'s arrays live (fields are numbered from 0 in
/// the order added): `SODE_MEMORY_HOST`, the default and the one kind sode
/// exchanges today. A memory kind is part of a field's layout so that
/// device memory can come without a new call. Before commit.
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange`); `SODE_ERR_ARG` for a field that does not
/// exist or a kind other than `SODE_MEMORY_HOST`; `SODE_ERR_STATE` after
/// the commit.
///
/// # Safety
/// `exchange` from `sode_exchange_create_*`, not freed.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_set_memory_kind(
    exchange: *mut ExchangeHandle,
    field: c_int,
    kind: c_int,
) -> c_int {
    let op = "sode_exchange_set_memory_kind";
    // SAFETY: the caller's contract.
    unsafe {
        with_exchange(op, exchange, |x| {
            x.set_memory_kind(field_number(op, field)?, kind)
        })
    }
}

/// The exchange behind a handle, for the calls below.
///
/// # Safety
/// `x` from `sode_exchange_create_*`, not freed.
unsafe fn with_exchange(
    op: &'static str,
    x: *mut ExchangeHandle,
    f: impl FnOnce(&mut Exchange) -> Result<()>,
) -> c_int {
    // SAFETY: the caller's contract.
    call(op, || f(&mut *unsafe { held(op, x) }?))
}

/// Checks the exchange across the job and sets up its channels.
/// Collective: every rank returns the same status.
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange`); `SODE_ERR_STATE` when committed already;
/// `SODE_ERR_ARG` for an exchange without fields or whose fields do not fit
/// its decomposition; `SODE_ERR_MISMATCH` when the ranks describe different
/// exchanges (named: which ranks, which field or box); `SODE_ERR_BOOTSTRAP`
/// or `SODE_ERR_TIMEOUT` when the ranks cannot meet within the communicator's
/// timeout; `SODE_ERR_CHANNEL` when a channel cannot be set up (shared
/// memory, RDMA, TCP), or a rank of the job is dead (at once, naming it,
/// when its health watcher finds it). Collective: every rank returns the
/// same status. A commit that fails on one rank alone (no field, committed already, a
/// channel it cannot set up) fails every rank's at once, each naming that
/// rank (`sode_exchange_commit failed on rank 1: ...`), and the ranks stay in step for
/// the communicator's next commit.
///
/// # Safety
/// `exchange` from `sode_exchange_create_*`, not freed.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_commit(exchange: *mut ExchangeHandle) -> c_int {
    let op = "sode_exchange_commit";
    call(op, || {
        // SAFETY: the caller's contract.
        let handle = unsafe { exchange_ref(op, exchange) }?;
        let mut x = handle.hold(op)?;
        // Two commits on one communicator at once would interleave their
        // collective steps, differently on each rank.
        let _steps = handle.collective(op)?;
        x.commit()
    })
}

/// Writes how each neighbour is reached, one line per link (after a
/// commit): `rank 1 (axis 0+): rdma; sends 8192 bytes in place (2 runs);
/// receives 8192 bytes packed`. The text goes into `buf` (`size` bytes,
/// NUL-terminated, cut short when too small; `buf` may be NULL when `size`
/// is 0); `*needed` (when not NULL) receives the bytes the whole text needs,
/// its NUL included.
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange`, or `buf` with a `size` above 0);
/// `SODE_ERR_STATE` before the commit. A text cut short is no error
/// (`*needed` says how much it wanted).
///
/// # Safety
/// `exchange` from `sode_exchange_create_*`, not freed; `buf` valid for
/// `size` bytes; `needed` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_describe(
    exchange: *mut ExchangeHandle,
    buf: *mut c_char,
    size: usize,
    needed: *mut usize,
) -> c_int {
    let op = "sode_exchange_describe";
    // SAFETY: the caller's contract.
    unsafe {
        with_exchange(op, exchange, |x| {
            let text = x.describe()?;
            let bytes = text.as_bytes();
            if let Some(n) = needed.as_mut() {
                *n = bytes.len() + 1;
            }
            if size == 0 {
                return Ok(());
            }
            if buf.is_null() {
                return Err(CapiError::Null { op, arg: "buf" });
            }
            let n = bytes.len().min(size - 1);
            // SAFETY: `buf` holds `size` > n bytes (the caller's contract).
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
            Ok(())
        })
    }
}

/// Lets sode keep the fields, `sets` copies of each (two for a sweep from
/// one into the other), in memory it allocates: shared memory that the
/// neighbours on this node read faces from straight, with no pack or
/// unpack. Call it before adding fields, and add each with a NULL base;
/// after commit, `sode_exchange_shared_field` gives each array and
/// `sode_exchange_start_set` exchanges one set (then wait or test as
/// usual). Before commit, the same on every rank.
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange`); `SODE_ERR_ARG` for `sets` outside 1 to 16;
/// `SODE_ERR_STATE` once fields were added, or after the commit.
///
/// # Safety
/// `exchange` from `sode_exchange_create_*`, not freed.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_set_shared_fields(
    exchange: *mut ExchangeHandle,
    sets: c_int,
) -> c_int {
    let op = "sode_exchange_set_shared_fields";
    // SAFETY: the caller's contract.
    unsafe {
        with_exchange(op, exchange, |x| {
            let sets = usize::try_from(sets)
                .ok()
                .filter(|s| (1..=16).contains(s))
                .ok_or_else(|| CapiError::Invalid {
                    op,
                    why: format!("{sets} sets: keep 1 to 16"),
                })?;
            x.set_shared_fields(sets)
        })
    }
}

/// Sets `*array` to field `field` (in the order added, from 0) of shared
/// set `set`: an array laid out as the field was described, valid until
/// the exchange is freed. Write the owned cells before
/// `sode_exchange_start_set`; its halos are filled when the wait that
/// completes it returns. Between the two, the cells it sends must not be
/// written nor its halos read (as with MPI's buffers).
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange` or `array`); `SODE_ERR_ARG` for a set or field
/// that does not exist; `SODE_ERR_STATE` before the commit or when the caller
/// keeps the fields.
///
/// # Safety
/// `exchange` from `sode_exchange_create_*`, committed, not freed; `array`
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_shared_field(
    exchange: *mut ExchangeHandle,
    set: c_int,
    field: c_int,
    array: *mut *mut c_void,
) -> c_int {
    let op = "sode_exchange_shared_field";
    // SAFETY: the caller's contract.
    unsafe {
        with_exchange(op, exchange, |x| {
            let out = handle(op, "array", array)?;
            let (set, field) = set_and_field(op, set, field)?;
            *out = x.shared_field(set, field)?.cast::<c_void>();
            Ok(())
        })
    }
}

/// A set's and a field's numbers (from 0) as indices.
fn set_and_field(op: &'static str, set: c_int, field: c_int) -> Result<(usize, usize)> {
    let set = usize::try_from(set).map_err(|_| CapiError::Invalid {
        op,
        why: format!("set {set}: sets are numbered from 0"),
    })?;
    Ok((set, field_number(op, field)?))
}

/// The element type and extents the Fortran module gives for memory of
/// its own (a pointer's or an array's): `type`'s code, and `ndims` values
/// of `shape`.
///
/// # Safety
/// `shape` holds `ndims` values.
unsafe fn fortran_memory(
    op: &'static str,
    r#type: c_int,
    ndims: c_int,
    shape: *const i64,
) -> Result<(ElemType, Extents)> {
    let ty = ElemType::from_code(r#type).ok_or_else(|| CapiError::Invalid {
        op,
        why: format!("element type {type}", type = r#type),
    })?;
    let d = usize::try_from(ndims)
        .map_err(|_| CapiError::Invalid {
            op,
            why: format!("ndims is {ndims}: it must not be negative"),
        })?
        .min(Extents::MAX);
    if shape.is_null() {
        return Err(CapiError::Null { op, arg: "shape" });
    }
    // SAFETY: non-null, and the caller's contract gives `ndims` values.
    let given = unsafe { std::slice::from_raw_parts(shape, d) };
    let mut extents = Extents {
        len: d,
        dims: [0; Extents::MAX],
    };
    for (k, (&v, out)) in given.iter().zip(&mut extents.dims).enumerate() {
        *out = usize::try_from(v).map_err(|_| CapiError::Invalid {
            op,
            why: format!("shape[{k}] is {v}: it must not be negative"),
        })?;
    }
    Ok((ty, extents))
}

/// A Fortran array's extents, held without allocating: the module checks
/// one array per field at every start on stage arrays.
struct Extents {
    len: usize,
    dims: [usize; Extents::MAX],
}

impl Extents {
    /// More dimensions than any field has (Fortran's arrays have at most
    /// 15; the module's, 7): a rank beyond is refused by the comparison
    /// with the field, not read whole.
    const MAX: usize = 8;

    fn as_slice(&self) -> &[usize] {
        &self.dims[..self.len]
    }
}

/// The Fortran module's `sode_shared_field`: as
/// `sode_exchange_shared_field`, for a pointer to elements of `type` over
/// `shape[k]` elements along each of `ndims` dimensions, which must be the
/// field's element type and extents as added (a pointer over other
/// memory is refused, not returned). Sets and fields are numbered from 0.
///
/// # Statuses
/// As `sode_exchange_shared_field`; `SODE_ERR_ARG` also for another
/// element type, rank or extent than the field's.
///
/// # Safety
/// As `sode_exchange_shared_field`; `shape` holds `ndims` values.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_shared_field_f(
    exchange: *mut ExchangeHandle,
    set: c_int,
    field: c_int,
    r#type: c_int,
    ndims: c_int,
    shape: *const i64,
    array: *mut *mut c_void,
) -> c_int {
    let op = "sode_exchange_shared_field";
    // SAFETY: the caller's contract.
    unsafe {
        with_exchange(op, exchange, |x| {
            let out = handle(op, "array", array)?;
            let (set, field) = set_and_field(op, set, field)?;
            let (ty, shape) = fortran_memory(op, r#type, ndims, shape)?;
            *out = x
                .shared_field_as(set, field, ty, shape.as_slice())?
                .cast::<c_void>();
            Ok(())
        })
    }
}

/// Starts exchanging shared set `set` of the fields sode keeps (see
/// `sode_exchange_set_shared_fields`); returns at once.
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange`); `SODE_ERR_ARG` for a set that does not
/// exist; `SODE_ERR_STATE` before the commit, while the previous exchange is
/// in flight, or when the caller keeps the fields; `SODE_ERR_CHANNEL` when a
/// neighbour is gone.
///
/// # Safety
/// `exchange` from `sode_exchange_create_*`, not freed.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_start_set(
    exchange: *mut ExchangeHandle,
    set: c_int,
) -> c_int {
    let op = "sode_exchange_start_set";
    // SAFETY: the caller's contract.
    unsafe {
        with_exchange(op, exchange, |x| {
            let set = usize::try_from(set).map_err(|_| CapiError::Invalid {
                op,
                why: format!("set {set}: it must not be negative"),
            })?;
            x.start_set(set)
        })
    }
}

/// Packs every field's faces (but those read in place, see
/// `sode_exchange_add_field`) and starts the exchange; returns at once.
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange`); `SODE_ERR_STATE` before the commit, while
/// the previous exchange is in flight, or when sode keeps the fields;
/// `SODE_ERR_CHANNEL` when a neighbour or the job failed.
///
/// # Safety
/// `exchange` from `sode_exchange_create_*`, not freed.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_start(exchange: *mut ExchangeHandle) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { with_exchange("sode_exchange_start", exchange, Exchange::start) }
}

/// The number of pointers in a caller's list of `nfields` arrays (one per
/// field), refused when negative or when the list is NULL.
fn array_count(op: &'static str, nfields: c_int, arrays: *const *mut c_void) -> Result<usize> {
    let n = usize::try_from(nfields).map_err(|_| CapiError::Invalid {
        op,
        why: format!("nfields is {nfields}: give the exchange's field count"),
    })?;
    if arrays.is_null() {
        return Err(CapiError::Null { op, arg: "arrays" });
    }
    Ok(n)
}

/// Lends one more set of arrays, before commit: `arrays[f]` for field `f`
/// (in the order added; `nfields` is the exchange's field count), each
/// laid out as its field was described. Where faces travel in place over
/// RDMA (see `sode_exchange_set_zero_copy`), a start on exactly one lent
/// set's arrays (`sode_exchange_start_arrays`) travels in place as a start
/// on the arrays added does: lend each Runge-Kutta stage's arrays, or the
/// other buffer of a double-buffered sweep, and no start packs. Each call
/// lends one set (at most 62 beside the arrays added); ranks may lend
/// different numbers of sets. Elsewhere lending changes nothing.
/// `sode_exchange_staged_starts` counts the starts that went through
/// sode's buffers instead.
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange`, `arrays`, or an entry of it);
/// `SODE_ERR_STATE` after the commit; `SODE_ERR_ARG` for a count other
/// than the fields' (or no field), an array added or lent already, fields
/// sode keeps, or too many sets.
///
/// # Safety
/// `exchange` from `sode_exchange_create_*`, not freed; `arrays` holds
/// `nfields` pointers, each valid for reads and writes of its whole field
/// until the exchange is freed, with the rules of `sode_exchange_add_field`.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_lend_arrays(
    exchange: *mut ExchangeHandle,
    nfields: c_int,
    arrays: *const *mut c_void,
) -> c_int {
    let op = "sode_exchange_lend_arrays";
    let lend = |x: &mut Exchange| {
        let n = array_count(op, nfields, arrays)?;
        x.lend_arrays(op, n, |f, bytes| {
            // SAFETY: `f < n` (lend_arrays asks for the fields given only,
            // after checking `n` is their count), so within the caller's
            // `nfields` pointers.
            let base = unsafe { *arrays.add(f) }.cast::<u8>();
            // SAFETY: a non-NULL array is valid for its field's bytes until
            // the exchange is freed, by the caller's contract.
            (!base.is_null()).then(|| unsafe { UserMemory::new(base, bytes) })
        })
    };
    // SAFETY: the caller's contract.
    unsafe { with_exchange(op, exchange, lend) }
}

/// Starts the exchange on other arrays than the fields were added with:
/// `arrays[f]` stands for field `f` (in the order added; `nfields` is the
/// exchange's field count), NULL for a field's own array. Each must be
/// laid out as its field was described (type, extents, order or strides).
/// The wait or test that completes this exchange unpacks the halos into the
/// same arrays; the next start uses the fields' own arrays again unless
/// given others. One committed exchange so serves every Runge-Kutta stage
/// or both buffers of a double-buffered sweep, as MPI takes a buffer per
/// call. Where faces travel in place over RDMA (see
/// `sode_exchange_set_zero_copy`), the device reads and writes only the
/// arrays added and lent (`sode_exchange_lend_arrays`): a start on one
/// lent set's arrays travels in place too; a start that gives another
/// array for such a field packs and unpacks the faces of its messages
/// through sode's buffers instead, as if they were packed, and the next
/// start on arrays added or lent travels in place again. Each rank decides
/// for itself, so neighbours may start on different arrays. Allocates
/// nothing.
///
/// # Statuses
/// As `sode_exchange_start`; `SODE_ERR_NULL` for a null `arrays` with
/// `nfields` above 0; `SODE_ERR_ARG` for a count other than the fields'.
///
/// # Safety
/// `exchange` from `sode_exchange_create_*`, not freed; `arrays` holds
/// `nfields` pointers; each non-NULL one is valid for reads and writes of
/// its whole field from this call to the end of the wait that completes the
/// exchange, with the rules of `sode_exchange_add_field` while in flight.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_start_arrays(
    exchange: *mut ExchangeHandle,
    nfields: c_int,
    arrays: *const *mut c_void,
) -> c_int {
    let op = "sode_exchange_start_arrays";
    let start = |x: &mut Exchange| {
        let n = array_count(op, nfields, arrays)?;
        x.start_arrays(op, n, |f, bytes| {
            // SAFETY: `f < n` (start_arrays asks for the fields given
            // only), so within the caller's `nfields` pointers.
            let base = unsafe { *arrays.add(f) }.cast::<u8>();
            // SAFETY: a non-NULL array is valid for its field's bytes
            // until the exchange completes, by the caller's contract.
            (!base.is_null()).then(|| unsafe { UserMemory::for_call(base, bytes) })
        })
    };
    // SAFETY: the caller's contract.
    unsafe { with_exchange(op, exchange, start) }
}

/// Starts the exchange on some of its fields only: the `nfields` fields
/// `fields` lists (numbered from 0 in the order added, each once), on the
/// arrays `arrays` gives for them in the same order (NULL `arrays`, or a
/// NULL entry: a field's own array; as `sode_exchange_start_arrays`).
/// Each message carries the listed fields' faces only (on every channel),
/// and the wait or test that completes the
/// exchange fills their halos only: the other fields' halos are left as
/// they are. Every neighbour must start the same fields (at the same
/// depth): a neighbour that started others is reported as
/// `SODE_ERR_CHANNEL` ("different parts of the exchange") on every
/// channel. So one committed exchange serves a code
/// that exchanges different sets of its fields at different points,
/// where MPI takes a buffer per call. Where faces travel in place over
/// RDMA (see `sode_exchange_set_zero_copy`), such a start packs and
/// unpacks them through sode's buffers, as if they were packed; a start
/// on every field travels in place again. Allocates nothing.
///
/// # Statuses
/// As `sode_exchange_start_arrays`; `SODE_ERR_ARG` also for a field that does
/// not exist or is listed twice.
///
/// # Safety
/// `exchange` from `sode_exchange_create_*`, not freed; `fields` holds
/// `nfields` values; `arrays` is NULL or holds `nfields` pointers, with
/// the rules of `sode_exchange_start_arrays`.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_start_fields(
    exchange: *mut ExchangeHandle,
    nfields: c_int,
    fields: *const c_int,
    arrays: *const *mut c_void,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        start_fields(
            "sode_exchange_start_fields",
            0,
            exchange,
            nfields,
            fields,
            arrays,
        )
    }
}

/// The Fortran module's `sode_start_fields`: as
/// `sode_exchange_start_fields` with the fields numbered from 1 and
/// `narrays` arrays (0: the fields' own).
///
/// # Statuses
/// As `sode_exchange_start_fields`, fields numbered from 1.
///
/// # Safety
/// As `sode_exchange_start_fields`; `arrays` holds `narrays` pointers.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_start_fields_f(
    exchange: *mut ExchangeHandle,
    nfields: c_int,
    fields: *const c_int,
    narrays: c_int,
    arrays: *const *mut c_void,
) -> c_int {
    let op = "sode_start_fields";
    if narrays != 0 && narrays != nfields {
        let why = format!("{narrays} arrays for {nfields} fields: give one array per field listed");
        return call(op, || Err(CapiError::Invalid { op, why }));
    }
    let arrays = if narrays == 0 {
        std::ptr::null()
    } else {
        arrays
    };
    // SAFETY: the caller's contract.
    unsafe { start_fields(op, 1, exchange, nfields, fields, arrays) }
}

/// The Fortran module's check of an array it gives in place of field
/// `field` (numbered from 0), before it lends it or starts on it: of
/// element `type`, `shape[k]` elements along each of `ndims` dimensions
/// (the field's type and extents as added), contiguous in memory
/// (`contiguous` not 0). `routine` names the module's call the message
/// names: 0 `sode_start_arrays`, 1 `sode_lend_arrays`, 2
/// `sode_start_fields`.
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange`, `shape`); `SODE_ERR_ARG` for a field that
/// does not exist, another element type, rank or extent than the field's,
/// or an array not contiguous.
///
/// # Safety
/// `exchange` from `sode_exchange_create_*`, not freed; `shape` holds
/// `ndims` values.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_check_array_f(
    exchange: *mut ExchangeHandle,
    routine: c_int,
    field: c_int,
    r#type: c_int,
    ndims: c_int,
    shape: *const i64,
    contiguous: c_int,
) -> c_int {
    let op = match routine {
        0 => "sode_start_arrays",
        1 => "sode_lend_arrays",
        _ => "sode_start_fields",
    };
    // SAFETY: the caller's contract.
    unsafe {
        with_exchange(op, exchange, |x| {
            let field = field_number(op, field)?;
            let (ty, shape) = fortran_memory(op, r#type, ndims, shape)?;
            x.check_array_for(op, field, ty, shape.as_slice(), contiguous != 0)
        })
    }
}

/// `sode_exchange_start_fields` with the fields numbered from `first`.
///
/// # Safety
/// As `sode_exchange_start_fields`.
unsafe fn start_fields(
    op: &'static str,
    first: c_int,
    exchange: *mut ExchangeHandle,
    nfields: c_int,
    fields: *const c_int,
    arrays: *const *mut c_void,
) -> c_int {
    let start = |x: &mut Exchange| {
        let n = usize::try_from(nfields).map_err(|_| CapiError::Invalid {
            op,
            why: format!("nfields is {nfields}: give how many fields are listed"),
        })?;
        let ids: &[c_int] = if n == 0 {
            &[]
        } else if fields.is_null() {
            return Err(CapiError::Null { op, arg: "fields" });
        } else {
            // SAFETY: the caller's contract: `nfields` values.
            unsafe { std::slice::from_raw_parts(fields, n) }
        };
        let list = FieldList { ids, first };
        let given = if arrays.is_null() { 0 } else { n };
        x.start_fields(op, Some(&list), given, |k, bytes| {
            // SAFETY: `k < n` (start_fields asks for the fields listed
            // only), so within the caller's `nfields` pointers.
            let base = unsafe { *arrays.add(k) }.cast::<u8>();
            // SAFETY: a non-NULL array is valid for its field's bytes
            // until the exchange completes, by the caller's contract.
            (!base.is_null()).then(|| unsafe { UserMemory::for_call(base, bytes) })
        })
    };
    // SAFETY: the caller's contract.
    unsafe { with_exchange(op, exchange, start) }
}

/// One pass: `*done` is 1 once every halo has arrived and is unpacked
/// (the exchange is then complete), else 0. Polled without completing
/// for `SODE_WAIT_WARN` seconds (60 unless set), it says so on stderr as
/// a wait does.
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange` or `done`); `SODE_ERR_STATE` before the commit
/// or when nothing was started; `SODE_ERR_CHANNEL` when a neighbour or the
/// job failed (naming the rank).
///
/// # Safety
/// `exchange` from `sode_exchange_create_*`, not freed; `done` valid for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_test(
    exchange: *mut ExchangeHandle,
    done: *mut c_int,
) -> c_int {
    let op = "sode_exchange_test";
    // SAFETY: the caller's contract.
    unsafe {
        with_exchange(op, exchange, |x| {
            let out = handle(op, "done", done)?;
            *out = c_int::from(x.test()?);
            Ok(())
        })
    }
}

/// Waits up to `timeout_s` seconds for every halo and unpacks them;
/// `SODE_ERR_TIMEOUT` when the time ran out (call it again). `INFINITY`
/// waits without deadline (as MPI does: a rank that dies is reported by
/// the job's health all the same); `SODE_TIMEOUT_DEFAULT` waits as long
/// as `SODE_TIMEOUT` says (no deadline when it is unset). Time in which
/// this process is stopped (a suspended job, a debugger) does not count.
///
/// # Statuses
/// `SODE_ERR_NULL` (`exchange`); `SODE_ERR_ARG` for a timeout that is not a
/// positive number of seconds, `INFINITY` or `SODE_TIMEOUT_DEFAULT`;
/// `SODE_ERR_STATE` before the commit or when nothing was started;
/// `SODE_ERR_TIMEOUT` when the time ran out (the exchange is still in flight:
/// wait again); `SODE_ERR_CHANNEL` when a neighbour or the job failed (naming
/// the rank).
///
/// # Safety
/// `exchange` from `sode_exchange_create_*`, not freed.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_wait(
    exchange: *mut ExchangeHandle,
    timeout_s: f64,
) -> c_int {
    let op = "sode_exchange_wait";
    // SAFETY: the caller's contract.
    unsafe { with_exchange(op, exchange, |x| x.wait(seconds(op, timeout_s)?)) }
}

/// Frees an exchange and sets `*exchange` to NULL; refused
/// (`SODE_ERR_STATE`, nothing freed) while an exchange is in flight. NULL
/// or `*exchange == NULL` is a no-op.
///
/// # Statuses
/// `SODE_ERR_STATE` while an exchange is in flight (nothing freed: wait
/// first); `SODE_OK` otherwise (NULL and `*exchange == NULL` included).
///
/// # Safety
/// `*exchange` from `sode_exchange_create_*`, not freed before.
#[no_mangle]
pub unsafe extern "C" fn sode_exchange_free(exchange: *mut *mut ExchangeHandle) -> c_int {
    call("sode_exchange_free", || {
        if exchange.is_null() {
            return Ok(());
        }
        // SAFETY: the caller's contract: `*exchange` is null or ours.
        if unsafe { *exchange }.is_null() {
            return Ok(());
        }
        // SAFETY: as above; let go before the handle is dropped.
        unsafe { held("sode_exchange_free", *exchange) }?.check_free()?;
        // SAFETY: ours, and no call holds it (a call another thread makes
        // on an exchange as it is freed is the program's race, as with any
        // handle).
        unsafe {
            drop(Box::from_raw(*exchange));
            *exchange = std::ptr::null_mut();
        }
        Ok(())
    })
}
