//! Polling a completion queue into a reusable array.

use std::ffi::CStr;
use std::io;

use rdma_mummy_sys::{ibv_poll_cq, ibv_wc, ibv_wc_status_str};
use sideway::ibverbs::completion::{BasicCompletionQueue, CompletionQueue};

/// The fields of a work completion the transport uses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Completion {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    /// Host order.
    pub imm: u32,
}

/// `ibv_poll_cq` into an array allocated once.
pub(crate) struct CompletionPoller {
    wcs: Box<[ibv_wc]>,
}

impl CompletionPoller {
    pub(crate) fn new(batch: usize) -> Self {
        // SAFETY: ibv_wc is plain data; all-zero is valid for every field.
        let zero: ibv_wc = unsafe { std::mem::zeroed() };
        CompletionPoller {
            wcs: vec![zero; batch.max(1)].into_boxed_slice(),
        }
    }

    /// Polls once, without blocking; returns how many completions `get` holds.
    pub(crate) fn poll(&mut self, cq: &BasicCompletionQueue) -> io::Result<usize> {
        let n = self.wcs.len() as i32;
        // SAFETY: the CQ is live for the borrow of `cq`; the array has room
        // for `n` completions.
        let rc = unsafe { ibv_poll_cq(cq.cq().as_ptr(), n, self.wcs.as_mut_ptr()) };
        if rc < 0 {
            return Err(io::Error::from_raw_os_error(-rc));
        }
        Ok(rc as usize)
    }

    /// The `i`th completion of the last poll.
    pub(crate) fn get(&self, i: usize) -> Completion {
        let wc = &self.wcs[i];
        Completion {
            wr_id: wc.wr_id,
            status: wc.status,
            opcode: wc.opcode,
            vendor_err: wc.vendor_err,
            // SAFETY: both union members are u32; reading either is defined.
            imm: u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data }),
        }
    }
}

/// libibverbs' name for a completion status.
pub(crate) fn status_str(status: u32) -> String {
    // SAFETY: ibv_wc_status_str returns a static NUL-terminated string (or
    // null if libibverbs is not loaded, handled below).
    let p = unsafe { ibv_wc_status_str(status) };
    if p.is_null() {
        return format!("status {status}");
    }
    // SAFETY: non-null, static, NUL-terminated.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

impl std::fmt::Debug for CompletionPoller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionPoller")
            .field("len", &self.wcs.len())
            .finish()
    }
}
