//! Queue pairs, the buffers their chains read from, and the chains, owned
//! together so that posting is safe.

use std::io;

use sideway::ibverbs::queue_pair::{BasicQueuePair, QueuePair, QueuePairAttribute, QueuePairState};

use super::chain::{ChainEntry, WriteChain};
use super::region::RegisteredBuffer;

/// How a chain is handed to the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Posting {
    /// The whole chain in one `ibv_post_send`.
    Chain,
    /// One `ibv_post_send` per request (the benchmarks' baseline).
    PerRequest,
}

/// A chain's handle in its [`ChainSet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChainId(usize);

/// The data path of one exchange: its queue pairs, the registered buffers
/// its chains read from (and its windows live in), and its pre-built chains.
///
/// Posting is safe because every chain was checked, when added, to read only
/// from buffers of this set under their own local keys, and this set drops
/// its queue pairs (which stops the device) before the chains and the
/// buffers (field order is drop order). A send queue without room makes the
/// post fail with an error, never corrupt memory.
pub(crate) struct ChainSet {
    qps: Vec<BasicQueuePair>,
    chains: Vec<WriteChain>,
    buffers: Vec<RegisteredBuffer>,
}

impl ChainSet {
    /// A set over `qps` and `buffers`, with no chains yet.
    pub(crate) fn new(qps: Vec<BasicQueuePair>, buffers: Vec<RegisteredBuffer>) -> ChainSet {
        ChainSet {
            qps,
            chains: Vec::new(),
            buffers,
        }
    }

    /// Adds a chain of `entries`, or says which entry reads memory this set
    /// does not own under a key it holds.
    pub(crate) fn add(&mut self, entries: &[ChainEntry]) -> Result<ChainId, String> {
        for (i, e) in entries.iter().enumerate() {
            let pieces: Vec<(u64, u32)> = if e.gather.is_empty() {
                vec![(e.local_addr, e.len)]
            } else {
                e.gather.clone()
            };
            for (addr, len) in pieces.into_iter().filter(|&(_, len)| len > 0) {
                let owned = self
                    .buffers
                    .iter()
                    .any(|b| b.reads_under(addr, u64::from(len), e.lkey, e.inline));
                if !owned {
                    return Err(format!(
                        "request {i} reads {len} bytes at {addr:#x} (lkey {:#x}), which no buffer of this exchange holds under that key",
                        e.lkey
                    ));
                }
            }
        }
        self.chains.push(WriteChain::new(entries));
        Ok(ChainId(self.chains.len() - 1))
    }

    /// Makes request `entry` of `chain` write its first `len` bytes (at
    /// most those it was built with); see [`WriteChain::set_len`].
    pub(crate) fn set_len(&mut self, chain: ChainId, entry: usize, len: u32) -> Result<(), String> {
        self.chains[chain.0].set_len(entry, len)
    }

    /// Sets the immediate of the requests `entries` of `chain`.
    pub(crate) fn set_imm(&mut self, chain: ChainId, imm: u32, entries: &[usize]) {
        self.chains[chain.0].set_imm(imm, entries);
    }

    /// Posts `chain` on queue pair `qp`. On failure, returns the error and
    /// the index of the first request not posted.
    pub(crate) fn post(
        &mut self,
        chain: ChainId,
        qp: usize,
        how: Posting,
    ) -> Result<(), (io::Error, usize)> {
        let (c, q) = (&mut self.chains[chain.0], &self.qps[qp]);
        // SAFETY: `add` checked that every request of the chain reads only
        // from `self.buffers` under their keys; those buffers are dropped
        // after `self.qps`, so the memory stays registered until the device
        // can no longer touch it; remote targets are the peer's registered
        // windows, guarded by its device (a bad one fails the request).
        match how {
            Posting::Chain => unsafe { c.post(q) },
            Posting::PerRequest => unsafe { c.post_each(q) },
        }
    }

    /// The queue pairs, in the order given.
    pub(crate) fn qps(&self) -> &[BasicQueuePair] {
        &self.qps
    }

    /// Moves every queue pair to the error state: the device flushes what is
    /// queued and touches none of the buffers again.
    pub(crate) fn stop(&mut self) {
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Error);
        for qp in &mut self.qps {
            let _ = qp.modify(&attr);
        }
    }

    /// The buffers, in the order given.
    pub(crate) fn buffers(&self) -> &[RegisteredBuffer] {
        &self.buffers
    }

    /// The buffers, writable (the caller lends them only between exchanges).
    pub(crate) fn buffers_mut(&mut self) -> &mut [RegisteredBuffer] {
        &mut self.buffers
    }
}

impl std::fmt::Debug for ChainSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainSet")
            .field("queue_pairs", &self.qps.len())
            .field("chains", &self.chains.len())
            .field("buffers", &self.buffers.len())
            .finish()
    }
}
