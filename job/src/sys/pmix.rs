//! The PMIx client (libpmix.so.2), loaded at run time so that sode runs
//! where it is absent. Only the calls the bootstrap needs: init, get,
//! put, commit, fence, finalize. The structure layouts are PMIx 4's
//! (`pmix_proc_t` 260 bytes, `pmix_value_t` 32 with its data at 8; no
//! `pmix_info_t` is passed), checked against the installed headers by
//! `ci/pmix.sh` in CI. A rank that never arrives fails the others
//! instead of hanging them: fences and gets are started without blocking
//! and given up by this process against a [`Deadline`], not by the
//! server. The server's clock runs on while the job is suspended
//! (`scontrol suspend` stops the tasks, not slurmstepd), so a call timed
//! there fails a job suspended past its timeout.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use crate::timeout::Deadline;

use libloading::Library;

/// `PMIX_MAX_NSLEN + 1`.
const NSPACE_LEN: usize = 256;
/// `PMIX_RANK_WILDCARD`: the job as a whole.
pub(crate) const RANK_WILDCARD: u32 = u32::MAX - 1;
const PMIX_SUCCESS: c_int = 0;
/// `PMIX_OPERATION_SUCCEEDED`: a non-blocking call done at once, with no
/// call back to come.
const PMIX_OPERATION_SUCCEEDED: c_int = -157;
const PMIX_GLOBAL: u8 = 3;
const PMIX_UINT16: u16 = 13;
const PMIX_UINT32: u16 = 14;
const PMIX_BYTE_OBJECT: u16 = 27;

/// `pmix_proc_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Proc {
    nspace: [c_char; NSPACE_LEN],
    rank: u32,
}

/// `pmix_value_t`: a type and a 24-byte union at offset 8.
#[repr(C)]
struct Value {
    ty: u16,
    data: [u64; 3],
}

type Init = unsafe extern "C" fn(*mut Proc, *const c_void, usize) -> c_int;
type Finalize = unsafe extern "C" fn(*const c_void, usize) -> c_int;
/// `pmix_value_cbfunc_t`.
type ValueDone = unsafe extern "C" fn(c_int, *mut Value, *mut c_void);
type GetNb = unsafe extern "C" fn(
    *const Proc,
    *const c_char,
    *const c_void,
    usize,
    Option<ValueDone>,
    *mut c_void,
) -> c_int;
type Put = unsafe extern "C" fn(u8, *const c_char, *const Value) -> c_int;
type Commit = unsafe extern "C" fn() -> c_int;
/// `pmix_op_cbfunc_t`.
type OpDone = unsafe extern "C" fn(c_int, *mut c_void);
type FenceNb = unsafe extern "C" fn(
    *const Proc,
    usize,
    *const c_void,
    usize,
    Option<OpDone>,
    *mut c_void,
) -> c_int;
type ErrorString = unsafe extern "C" fn(c_int) -> *const c_char;

/// A connected PMIx client; finalized on drop.
pub(crate) struct Pmix {
    me: Proc,
    finalize: Finalize,
    get_nb: GetNb,
    put: Put,
    commit: Commit,
    fence_nb: FenceNb,
    error_string: ErrorString,
    // Last: the functions above point into it.
    _lib: Library,
}

impl std::fmt::Debug for Pmix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pmix")
            .field("rank", &self.me.rank)
            .finish_non_exhaustive()
    }
}

fn symbol<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
    // SAFETY: every `T` above is the C prototype of `name` in pmix.h.
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| format!("libpmix has no {name}: {e}"))
}

impl Pmix {
    /// Loads libpmix and connects to the launcher's PMIx server.
    pub(crate) fn connect() -> Result<Pmix, String> {
        let lib = ["libpmix.so.2", "libpmix.so"]
            .iter()
            // SAFETY: loading the PMIx client runs its initialisers, which
            // have no preconditions.
            .find_map(|name| unsafe { Library::new(name) }.ok())
            .ok_or("cannot load libpmix.so.2 (install libpmix2, or start the job with sode-run or SODE_ROOT)")?;
        let init: Init = symbol(&lib, "PMIx_Init")?;
        let mut me = Proc {
            nspace: [0; NSPACE_LEN],
            rank: 0,
        };
        let mut pmix = Pmix {
            me,
            finalize: symbol(&lib, "PMIx_Finalize")?,
            get_nb: symbol(&lib, "PMIx_Get_nb")?,
            put: symbol(&lib, "PMIx_Put")?,
            commit: symbol(&lib, "PMIx_Commit")?,
            fence_nb: symbol(&lib, "PMIx_Fence_nb")?,
            error_string: symbol(&lib, "PMIx_Error_string")?,
            _lib: lib,
        };
        // SAFETY: `me` is a pmix_proc_t to fill; no info array.
        let rc = unsafe { init(&mut me, std::ptr::null(), 0) };
        if rc != PMIX_SUCCESS {
            // Not connected: nothing to finalize.
            let why = pmix.describe(rc);
            std::mem::forget(pmix);
            return Err(format!("PMIx_Init: {why}"));
        }
        pmix.me = me;
        Ok(pmix)
    }

    fn describe(&self, rc: c_int) -> String {
        // SAFETY: PMIx_Error_string returns a static string for any code.
        let s = unsafe { (self.error_string)(rc) };
        if s.is_null() {
            format!("status {rc}")
        } else {
            // SAFETY: a NUL-terminated static string.
            format!("{} ({rc})", unsafe { CStr::from_ptr(s) }.to_string_lossy())
        }
    }

    fn check(&self, call: &str, rc: c_int) -> Result<(), String> {
        if rc == PMIX_SUCCESS {
            Ok(())
        } else {
            Err(format!("{call}: {}", self.describe(rc)))
        }
    }

    /// This process's rank in its namespace.
    pub(crate) fn rank(&self) -> u32 {
        self.me.rank
    }

    /// The namespace (the job's name at the launcher).
    pub(crate) fn namespace(&self) -> String {
        // SAFETY: PMIx_Init filled a NUL-terminated string of at most 255
        // characters; the array is zeroed beyond it.
        unsafe { CStr::from_ptr(self.me.nspace.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    /// The value `rank` has under `key`, as the call back copied it, given
    /// up at `deadline` moved on by the time this process was stopped.
    fn get(&self, rank: u32, key: &str, deadline: Instant) -> Result<Fetched, String> {
        let call = format!("PMIx_Get({key}) of rank {rank}");
        let flight = Arc::new(GetInFlight {
            from: Proc { rank, ..self.me },
            key: CString::new(key).map_err(|e| e.to_string())?,
            status: AtomicI32::new(PENDING),
            value: Mutex::new(None),
        });
        // One reference for PMIx, which `get_done` takes back: the proc
        // and key must outlive the call back even if this rank gives up.
        let for_pmix = Arc::into_raw(Arc::clone(&flight));
        // SAFETY: a proc and a key that live as long as `for_pmix`; no
        // info; `get_done` matches pmix_value_cbfunc_t.
        let rc = unsafe {
            (self.get_nb)(
                &flight.from,
                flight.key.as_ptr(),
                std::ptr::null(),
                0,
                Some(get_done),
                for_pmix.cast_mut().cast(),
            )
        };
        if rc != PMIX_SUCCESS {
            // SAFETY: PMIx will not call back: the reference is ours again.
            drop(unsafe { Arc::from_raw(for_pmix) });
            self.check(&call, rc)?;
        }
        let late = Late {
            call: &call,
            what: "no answer",
            why: "the server did not answer for the rank: it died, or the server is stuck",
        };
        let status = Self::complete_by(&flight.status, deadline, late)?;
        self.check(&call, status)?;
        let value = flight
            .value
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        value.ok_or_else(|| format!("{call} returned nothing"))
    }

    /// An unsigned number (`uint16` or `uint32`) about `rank`.
    pub(crate) fn get_number(
        &self,
        rank: u32,
        key: &str,
        deadline: Instant,
    ) -> Result<u32, String> {
        match self.get(rank, key, deadline)? {
            Fetched::Number { value, .. } => Ok(value),
            other => Err(format!(
                "PMIx_Get({key}): a value of type {}, not a number",
                other.type_code()
            )),
        }
    }

    /// The bytes `rank` put under `key`.
    pub(crate) fn get_bytes(
        &self,
        rank: u32,
        key: &str,
        deadline: Instant,
    ) -> Result<Vec<u8>, String> {
        match self.get(rank, key, deadline)? {
            Fetched::Bytes(b) => Ok(b),
            Fetched::NullBytes(len) => Err(format!(
                "PMIx_Get({key}): a null byte object of {len} bytes"
            )),
            other => Err(format!(
                "PMIx_Get({key}): a value of type {}, not bytes",
                other.type_code()
            )),
        }
    }

    /// Publishes `bytes` under `key` for every rank, then commits.
    pub(crate) fn put_bytes(&self, key: &str, bytes: &[u8]) -> Result<(), String> {
        let k = CString::new(key).map_err(|e| e.to_string())?;
        let value = Value {
            ty: PMIX_BYTE_OBJECT,
            data: [bytes.as_ptr() as u64, bytes.len() as u64, 0],
        };
        // SAFETY: PMIx_Put copies the value; `bytes` outlives the call.
        let rc = unsafe { (self.put)(PMIX_GLOBAL, k.as_ptr(), &value) };
        self.check(&format!("PMIx_Put({key})"), rc)?;
        // SAFETY: no arguments.
        let rc = unsafe { (self.commit)() };
        self.check("PMIx_Commit", rc)
    }

    /// A fence over the whole namespace, given up at `deadline`, moved on
    /// by the time this process was stopped (as every [`Deadline`] made
    /// from the same instant, so a setup's steps share one).
    pub(crate) fn fence(&self, deadline: Instant) -> Result<(), String> {
        let flight = Arc::new(FenceInFlight {
            all: Proc {
                rank: RANK_WILDCARD,
                ..self.me
            },
            status: AtomicI32::new(PENDING),
        });
        // One reference for PMIx, which `fence_done` takes back: the
        // procs must outlive the call back even if this rank gives up.
        let for_pmix = Arc::into_raw(Arc::clone(&flight));
        // SAFETY: one proc (the namespace's wildcard) that lives as long
        // as `for_pmix`; no info; `fence_done` matches pmix_op_cbfunc_t.
        let rc = unsafe {
            (self.fence_nb)(
                &flight.all,
                1,
                std::ptr::null(),
                0,
                Some(fence_done),
                for_pmix.cast_mut().cast(),
            )
        };
        if rc != PMIX_SUCCESS {
            // SAFETY: PMIx will not call back: the reference is ours again.
            drop(unsafe { Arc::from_raw(for_pmix) });
            return match rc {
                PMIX_OPERATION_SUCCEEDED => Ok(()),
                _ => self.check("PMIx_Fence_nb", rc),
            };
        }
        let late = Late {
            call: "PMIx_Fence",
            what: "not every rank reached it",
            why: "a rank that has not started, is stuck before it, or died",
        };
        let status = Self::complete_by(&flight.status, deadline, late)?;
        self.check("PMIx_Fence", status)
    }

    /// Polls `status` (set by a call back) until it is not [`PENDING`],
    /// or `deadline` (moved on by the time this process was stopped)
    /// passes: then an error naming the call, what was late and how long
    /// it waited (`late` as the call's, "not every rank reached it
    /// within", and its `why`).
    fn complete_by(status: &AtomicI32, deadline: Instant, late: Late<'_>) -> Result<c_int, String> {
        let (given, entered) = (deadline, Instant::now());
        let mut deadline = Deadline::new(deadline);
        let mut backoff = Backoff::setup(Duration::from_millis(1));
        loop {
            let now = status.load(Ordering::Acquire);
            if now != PENDING {
                return Ok(now);
            }
            if deadline.passed() {
                let stopped = match deadline.stopped() {
                    d if d.is_zero() => String::new(),
                    d => format!(
                        ", not counting {:.1} s this process was stopped",
                        d.as_secs_f64()
                    ),
                };
                return Err(format!(
                    "{}: {} within {:.1} s of this rank{stopped} ({})",
                    late.call,
                    late.what,
                    given.saturating_duration_since(entered).as_secs_f64(),
                    late.why,
                ));
            }
            backoff.snooze();
        }
    }
}

/// What a call given up at its deadline says: the call, what was late,
/// and why that may be.
struct Late<'a> {
    call: &'a str,
    what: &'a str,
    why: &'a str,
}

/// `status` while a fence or get has not called back (no PMIx status is).
const PENDING: c_int = c_int::MIN;

/// A fence PMIx was asked for: what it reads until it calls back, and the
/// status it calls back with.
struct FenceInFlight {
    all: Proc,
    status: AtomicI32,
}

/// Called back by PMIx's progress thread once a fence is done.
unsafe extern "C" fn fence_done(status: c_int, cbdata: *mut c_void) {
    // SAFETY: `cbdata` is the reference `fence` gave PMIx with
    // `Arc::into_raw`; PMIx calls back once.
    let flight = unsafe { Arc::from_raw(cbdata.cast_const().cast::<FenceInFlight>()) };
    flight.status.store(status, Ordering::Release);
}

/// A get PMIx was asked for: what it reads until it calls back, the
/// status it calls back with, and the value it brought, copied.
struct GetInFlight {
    from: Proc,
    key: CString,
    status: AtomicI32,
    value: Mutex<Option<Fetched>>,
}

/// A value a get brought, copied out of PMIx's before it is released.
enum Fetched {
    /// A `uint16` or a `uint32` (`ty`), widened.
    Number {
        value: u32,
        ty: u16,
    },
    Bytes(Vec<u8>),
    /// A byte object with a null pointer and this many bytes.
    NullBytes(usize),
    /// Any other type, by its PMIx code.
    Other(u16),
}

impl Fetched {
    /// PMIx's code of the type.
    fn type_code(&self) -> u16 {
        match self {
            Fetched::Number { ty, .. } => *ty,
            Fetched::Bytes(_) | Fetched::NullBytes(_) => PMIX_BYTE_OBJECT,
            Fetched::Other(code) => *code,
        }
    }

    /// A copy of `value`, which PMIx releases once its call back returns.
    ///
    /// # Safety
    /// `value` is a `pmix_value_t` PMIx filled, valid for the call.
    unsafe fn copy(value: &Value) -> Fetched {
        let (ptr, len) = (value.data[0] as *const u8, value.data[1] as usize);
        match value.ty {
            PMIX_UINT16 => Fetched::Number {
                value: u32::from(value.data[0] as u16),
                ty: PMIX_UINT16,
            },
            PMIX_UINT32 => Fetched::Number {
                value: value.data[0] as u32,
                ty: PMIX_UINT32,
            },
            PMIX_BYTE_OBJECT if len == 0 => Fetched::Bytes(Vec::new()),
            PMIX_BYTE_OBJECT if ptr.is_null() => Fetched::NullBytes(len),
            // SAFETY: a byte object is a pointer to `len` bytes PMIx owns
            // for the call.
            PMIX_BYTE_OBJECT => {
                Fetched::Bytes(unsafe { std::slice::from_raw_parts(ptr, len) }.to_vec())
            }
            other => Fetched::Other(other),
        }
    }
}

/// Called back by PMIx's progress thread once a get is done, with the
/// value it found (released by PMIx after this returns).
unsafe extern "C" fn get_done(status: c_int, value: *mut Value, cbdata: *mut c_void) {
    // SAFETY: `cbdata` is the reference `get` gave PMIx with
    // `Arc::into_raw`; PMIx calls back once.
    let flight = unsafe { Arc::from_raw(cbdata.cast_const().cast::<GetInFlight>()) };
    if status == PMIX_SUCCESS && !value.is_null() {
        // SAFETY: a value PMIx filled, valid during the call back.
        let copied = unsafe { Fetched::copy(&*value) };
        *flight
            .value
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(copied);
    }
    flight.status.store(status, Ordering::Release);
}

impl Drop for Pmix {
    fn drop(&mut self) {
        // SAFETY: connected in `connect`; no info.
        unsafe { (self.finalize)(std::ptr::null(), 0) };
    }
}
