//! Zero-length receives that write-with-immediate arrivals consume.

use std::io;
use std::ptr::null_mut;

use rdma_mummy_sys::{ibv_post_recv, ibv_recv_wr};
use sideway::ibverbs::queue_pair::{BasicQueuePair, QueuePair};

/// An array of receive requests without gather entries (an RDMA write with
/// immediate, or a zero-length send, needs no receive buffer), all tagged with
/// the same `wr_id`, re-posted in batches.
pub(crate) struct RecvRing {
    wrs: Box<[ibv_recv_wr]>,
}

// SAFETY: the requests hold only null pointers and the links posted are set
// and cleared within `post`.
unsafe impl Send for RecvRing {}

impl RecvRing {
    pub(crate) fn new(capacity: usize, wr_id: u64) -> Self {
        let wrs = (0..capacity.max(1))
            .map(|_| ibv_recv_wr {
                wr_id,
                next: null_mut(),
                sg_list: null_mut(),
                num_sge: 0,
            })
            .collect();
        RecvRing { wrs }
    }

    /// Posts `count` (at most the capacity) receives with one call.
    pub(crate) fn post(&mut self, qp: &BasicQueuePair, count: usize) -> io::Result<()> {
        let count = count.min(self.wrs.len());
        if count == 0 {
            return Ok(());
        }
        let base = self.wrs.as_mut_ptr();
        for i in 0..count {
            // SAFETY: i + 1 < count <= len when linking; stays in the array.
            self.wrs[i].next = if i + 1 < count {
                unsafe { base.add(i + 1) }
            } else {
                null_mut()
            };
        }
        let mut bad: *mut ibv_recv_wr = null_mut();
        // SAFETY: a well-formed list of zero-SGE receives; the QP is live for
        // the borrow of `qp`. Zero-SGE receives reference no memory.
        let rc = unsafe { ibv_post_recv(qp.qp().as_ptr(), base, &mut bad) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(())
    }
}

impl std::fmt::Debug for RecvRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvRing")
            .field("len", &self.wrs.len())
            .finish()
    }
}
