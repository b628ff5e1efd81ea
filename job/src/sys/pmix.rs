//! The PMIx client (libpmix.so.2), loaded at run time so that sode runs
//! where it is absent. Only the calls the bootstrap needs: init, get,
//! put, commit, fence, finalize. The structure layouts are PMIx 4's
//! (`pmix_proc_t` 260 bytes, `pmix_value_t` 32 with its data at 8,
//! `pmix_info_t` 552 with its value at 520), checked against the installed
//! headers by `ci/pmix.sh` in CI. A rank that never arrives fails the others
//! instead of hanging them: gets carry `PMIX_TIMEOUT`, and a fence is
//! started without blocking and given up by this process against a
//! [`Deadline`], not by the server. The server's clock runs on while the
//! job is suspended (`scontrol suspend` stops the tasks, not slurmstepd),
//! so a fence timed there fails a job suspended past its timeout.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
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

/// `PMIX_MAX_KEYLEN + 1`.
const KEY_LEN: usize = 512;
const PMIX_INT: u16 = 6;
/// `PMIX_TIMEOUT`: seconds before the server gives the call up.
const TIMEOUT_KEY: &[u8] = b"pmix.timeout";

/// `pmix_info_t`: a key, directives, and a value at offset 520.
#[repr(C)]
struct Info {
    key: [c_char; KEY_LEN],
    flags: u32,
    value: Value,
}

impl Info {
    /// `PMIX_TIMEOUT` of `timeout`, in whole seconds (at least 1: 0 would
    /// mean no deadline).
    fn timeout(timeout: std::time::Duration) -> Info {
        let mut key = [0 as c_char; KEY_LEN];
        for (k, &b) in key.iter_mut().zip(TIMEOUT_KEY) {
            *k = b as c_char;
        }
        let secs = timeout.as_secs_f64().ceil().clamp(1.0, f64::from(i32::MAX)) as i32;
        Info {
            key,
            flags: 0,
            value: Value {
                ty: PMIX_INT,
                // The union's int, in its first 4 bytes (little-endian:
                // the low half of the first word).
                data: [u64::from(secs as u32), 0, 0],
            },
        }
    }
}

type Init = unsafe extern "C" fn(*mut Proc, *const c_void, usize) -> c_int;
type Finalize = unsafe extern "C" fn(*const c_void, usize) -> c_int;
type Get =
    unsafe extern "C" fn(*const Proc, *const c_char, *const Info, usize, *mut *mut Value) -> c_int;
type Put = unsafe extern "C" fn(u8, *const c_char, *const Value) -> c_int;
type Commit = unsafe extern "C" fn() -> c_int;
/// `pmix_op_cbfunc_t`.
type OpDone = unsafe extern "C" fn(c_int, *mut c_void);
type FenceNb = unsafe extern "C" fn(
    *const Proc,
    usize,
    *const Info,
    usize,
    Option<OpDone>,
    *mut c_void,
) -> c_int;
type Destruct = unsafe extern "C" fn(*mut Value);
type ErrorString = unsafe extern "C" fn(c_int) -> *const c_char;

/// A connected PMIx client; finalized on drop.
pub(crate) struct Pmix {
    me: Proc,
    finalize: Finalize,
    get: Get,
    put: Put,
    commit: Commit,
    fence_nb: FenceNb,
    destruct: Destruct,
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

/// A value PMIx returned, released on drop.
struct Got<'a> {
    value: *mut Value,
    pmix: &'a Pmix,
}

impl Drop for Got<'_> {
    fn drop(&mut self) {
        // SAFETY: `value` came from PMIx_Get, which allocates it with
        // malloc; PMIX_VALUE_RELEASE is destruct then free.
        unsafe {
            (self.pmix.destruct)(self.value);
            libc::free(self.value.cast());
        }
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
            get: symbol(&lib, "PMIx_Get")?,
            put: symbol(&lib, "PMIx_Put")?,
            commit: symbol(&lib, "PMIx_Commit")?,
            fence_nb: symbol(&lib, "PMIx_Fence_nb")?,
            destruct: symbol(&lib, "PMIx_Value_destruct")?,
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

    fn get_raw(
        &self,
        rank: u32,
        key: &str,
        timeout: std::time::Duration,
    ) -> Result<Got<'_>, String> {
        let proc_ = Proc { rank, ..self.me };
        let k = CString::new(key).map_err(|e| e.to_string())?;
        let mut value: *mut Value = std::ptr::null_mut();
        let info = Info::timeout(timeout);
        // SAFETY: a valid proc and key, one info that outlives the call;
        // PMIx allocates `value`.
        let rc = unsafe { (self.get)(&proc_, k.as_ptr(), &info, 1, &mut value) };
        self.check(&format!("PMIx_Get({key}) of rank {rank}"), rc)?;
        if value.is_null() {
            return Err(format!("PMIx_Get({key}) of rank {rank} returned nothing"));
        }
        Ok(Got { value, pmix: self })
    }

    /// An unsigned number (`uint16` or `uint32`) about `rank`.
    pub(crate) fn get_number(
        &self,
        rank: u32,
        key: &str,
        timeout: std::time::Duration,
    ) -> Result<u32, String> {
        let got = self.get_raw(rank, key, timeout)?;
        // SAFETY: a pmix_value_t PMIx filled; its union is read as the
        // type it says.
        let (ty, word) = unsafe { ((*got.value).ty, (*got.value).data[0]) };
        match ty {
            PMIX_UINT16 => Ok(u32::from(word as u16)),
            PMIX_UINT32 => Ok(word as u32),
            other => Err(format!(
                "PMIx_Get({key}): a value of type {other}, not a number"
            )),
        }
    }

    /// The bytes `rank` put under `key`.
    pub(crate) fn get_bytes(
        &self,
        rank: u32,
        key: &str,
        timeout: std::time::Duration,
    ) -> Result<Vec<u8>, String> {
        let got = self.get_raw(rank, key, timeout)?;
        // SAFETY: as above; a byte object is a pointer and a length.
        unsafe {
            let v = &*got.value;
            if v.ty != PMIX_BYTE_OBJECT {
                return Err(format!(
                    "PMIx_Get({key}): a value of type {}, not bytes",
                    v.ty
                ));
            }
            let (ptr, len) = (v.data[0] as *const u8, v.data[1] as usize);
            if len == 0 {
                return Ok(Vec::new());
            }
            if ptr.is_null() {
                return Err(format!(
                    "PMIx_Get({key}): a null byte object of {len} bytes"
                ));
            }
            Ok(std::slice::from_raw_parts(ptr, len).to_vec())
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
        let (given, entered) = (deadline, Instant::now());
        let mut deadline = Deadline::new(deadline);
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
        let mut backoff = Backoff::setup(Duration::from_millis(1));
        loop {
            let status = flight.status.load(Ordering::Acquire);
            if status != PENDING {
                return self.check("PMIx_Fence", status);
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
                    "PMIx_Fence: not every rank reached it within {:.1} s of this rank{stopped} (a rank that has not started, is stuck before it, or died)",
                    given.saturating_duration_since(entered).as_secs_f64(),
                ));
            }
            backoff.snooze();
        }
    }
}

/// `status` while a fence has not called back (no PMIx status is).
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

impl Drop for Pmix {
    fn drop(&mut self) {
        // SAFETY: connected in `connect`; no info.
        unsafe { (self.finalize)(std::ptr::null(), 0) };
    }
}
