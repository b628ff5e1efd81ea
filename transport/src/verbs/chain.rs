//! Work-request chains built once and posted with one call.

use std::io;
use std::ptr::null_mut;

use rdma_mummy_sys::{ibv_post_send, ibv_send_flags, ibv_send_wr, ibv_sge, ibv_wr_opcode};
use sideway::ibverbs::queue_pair::{BasicQueuePair, QueuePair};

/// One request of a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChainEntry {
    /// Returned in the completion; the caller's command index.
    pub wr_id: u64,
    /// Local source address and its key (unused for inline requests).
    pub local_addr: u64,
    pub lkey: u32,
    pub len: u32,
    /// `Some((remote_addr, rkey))`: an RDMA write; `None`: a zero-length send
    /// (only with an immediate).
    pub remote: Option<(u64, u32)>,
    /// Copy the payload into the request at post time.
    pub inline: bool,
    /// Carries the chain's immediate (set per post with [`WriteChain::set_imm`]).
    pub with_imm: bool,
    /// Asks for a completion on success.
    pub signaled: bool,
    /// When not empty, the request's source instead of `local_addr`/`len`:
    /// pieces (address, length) gathered in order, one gather entry each.
    pub gather: Vec<(u64, u32)>,
}

/// A chain of send requests whose requests, gather entries and links are
/// built once. The arrays live on the heap and are never resized, so the
/// links stay valid when the chain itself moves.
pub(crate) struct WriteChain {
    wrs: Box<[ibv_send_wr]>,
    /// Owned here because the requests point into it.
    sges: Box<[ibv_sge]>,
    /// Per request, the bytes it was built to read from one gather entry
    /// (at `first`), the most [`WriteChain::set_len`] may give it; `None`
    /// for a gather list, which always travels whole.
    single: Box<[Option<SingleSource>]>,
}

/// A request reading one run: where its gather entry is, and its length
/// as built.
#[derive(Debug, Clone, Copy)]
struct SingleSource {
    first: usize,
    built: u32,
}

// SAFETY: the raw pointers inside the requests point into this chain's own
// heap arrays (links, gather lists) or at registered memory whose owner keeps
// it alive; nothing is shared with another thread through them.
unsafe impl Send for WriteChain {}

impl WriteChain {
    pub(crate) fn new(entries: &[ChainEntry]) -> Self {
        // Each request's gather entries, consecutive in one array.
        let mut sges: Box<[ibv_sge]> = entries
            .iter()
            .flat_map(|e| {
                let pieces = if e.gather.is_empty() {
                    vec![(e.local_addr, e.len)]
                } else {
                    e.gather.clone()
                };
                pieces.into_iter().map(move |(addr, length)| ibv_sge {
                    addr,
                    length,
                    lkey: e.lkey,
                })
            })
            .collect();
        let counts: Vec<usize> = entries.iter().map(|e| e.gather.len().max(1)).collect();
        let mut first = 0;
        let single = entries
            .iter()
            .zip(&counts)
            .map(|(e, &count)| {
                let s = e.gather.is_empty().then_some(SingleSource {
                    first,
                    built: e.len,
                });
                first += count;
                s
            })
            .collect();
        let mut wrs: Box<[ibv_send_wr]> = entries
            .iter()
            .map(|e| {
                // SAFETY: ibv_send_wr is plain data (integers, raw pointers,
                // unions of those); all-zero is a valid value of each field.
                let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
                wr.wr_id = e.wr_id;
                let mut flags = 0;
                if e.inline {
                    flags |= ibv_send_flags::IBV_SEND_INLINE.0;
                }
                if e.signaled {
                    flags |= ibv_send_flags::IBV_SEND_SIGNALED.0;
                }
                wr.send_flags = flags;
                wr.opcode = match (e.remote, e.with_imm) {
                    (Some(_), false) => ibv_wr_opcode::IBV_WR_RDMA_WRITE,
                    (Some(_), true) => ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM,
                    (None, _) => ibv_wr_opcode::IBV_WR_SEND_WITH_IMM,
                };
                if let Some((remote_addr, rkey)) = e.remote {
                    wr.wr.rdma = rdma_mummy_sys::rdma_t { remote_addr, rkey };
                }
                wr
            })
            .collect();
        let n = wrs.len();
        let wr_base = wrs.as_mut_ptr();
        let sge_base = sges.as_mut_ptr();
        let mut first = 0;
        for (i, wr) in wrs.iter_mut().enumerate() {
            let count = counts[i];
            let bytes: u64 = sges[first..first + count]
                .iter()
                .map(|g| u64::from(g.length))
                .sum();
            if bytes > 0 {
                // SAFETY: first + count <= sges.len(): the counts partition the array.
                wr.sg_list = unsafe { sge_base.add(first) };
                wr.num_sge = count as i32;
            }
            first += count;
            // SAFETY: i + 1 < n, so the pointer stays inside the array.
            wr.next = if i + 1 < n {
                unsafe { wr_base.add(i + 1) }
            } else {
                null_mut()
            };
        }
        WriteChain { wrs, sges, single }
    }

    /// Makes request `i` write its first `len` bytes from the next post on:
    /// at most the length it was built with (so it reads only memory
    /// checked when the chain was added), from a request of one run (a
    /// gather list travels whole). 0 leaves a write of no bytes, whose
    /// immediate (if it carries one) still arrives.
    pub(crate) fn set_len(&mut self, i: usize, len: u32) -> Result<(), String> {
        let Some(Some(source)) = self.single.get(i).copied() else {
            return Err(format!(
                "request {i} gathers several runs (or does not exist): it travels whole"
            ));
        };
        if len > source.built {
            return Err(format!(
                "request {i} was built to write {} bytes, not {len}",
                source.built
            ));
        }
        self.sges[source.first].length = len;
        let wr = &mut self.wrs[i];
        if len == 0 {
            wr.sg_list = null_mut();
            wr.num_sge = 0;
        } else {
            // SAFETY: `first` indexes this chain's own gather array (set in
            // `new`), which is never resized.
            wr.sg_list = unsafe { self.sges.as_mut_ptr().add(source.first) };
            wr.num_sge = 1;
        }
        Ok(())
    }

    /// Sets the immediate (host order; sent in network order) of every
    /// request that carries one.
    pub(crate) fn set_imm(&mut self, imm: u32, entries_with_imm: &[usize]) {
        for &i in entries_with_imm {
            self.wrs[i].imm_data_invalidated_rkey_union.imm_data = imm.to_be();
        }
    }

    /// Posts the whole chain with one `ibv_post_send`. On failure, returns
    /// the error and the index of the first request not posted.
    ///
    /// # Safety
    ///
    /// Every non-inline request's local memory (address, length, lkey) and
    /// remote target must stay registered until its completion (or the
    /// queue pair's flush) has been reaped, and the send queue must have room
    /// for the whole chain.
    pub(crate) unsafe fn post(&mut self, qp: &BasicQueuePair) -> Result<(), (io::Error, usize)> {
        let mut bad: *mut ibv_send_wr = null_mut();
        // SAFETY: the chain is well formed (built in `new`, links into its own
        // array); the QP pointer is live for the borrow of `qp`; the memory
        // contract is the caller's.
        let rc = unsafe { ibv_post_send(qp.qp().as_ptr(), self.wrs.as_mut_ptr(), &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        let index = if bad.is_null() {
            0
        } else {
            // SAFETY: the provider returns a pointer into the list it was given.
            (unsafe { bad.offset_from(self.wrs.as_ptr()) }).max(0) as usize
        };
        Err((io::Error::from_raw_os_error(rc), index))
    }

    /// Posts the chain one request per `ibv_post_send` call (the baseline the
    /// benchmarks compare one post per chain against).
    ///
    /// # Safety
    ///
    /// As for [`WriteChain::post`].
    pub(crate) unsafe fn post_each(
        &mut self,
        qp: &BasicQueuePair,
    ) -> Result<(), (io::Error, usize)> {
        let n = self.wrs.len();
        for i in 0..n {
            let next = self.wrs[i].next;
            self.wrs[i].next = null_mut();
            let mut bad: *mut ibv_send_wr = null_mut();
            // SAFETY: as in `post`, with a one-request list.
            let rc = unsafe { ibv_post_send(qp.qp().as_ptr(), &mut self.wrs[i], &mut bad) };
            self.wrs[i].next = next;
            if rc != 0 {
                return Err((io::Error::from_raw_os_error(rc), i));
            }
        }
        Ok(())
    }
}

impl std::fmt::Debug for WriteChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteChain")
            .field("len", &self.wrs.len())
            .finish()
    }
}
