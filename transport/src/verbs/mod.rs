//! Every `unsafe` block of sode-transport lives under this module.
//!
//! sideway's safe API opens devices, allocates protection domains, creates
//! completion queues and queue pairs and moves them through their states. What
//! it does not offer, and the data path needs, is here, on its raw
//! `rdma-mummy-sys` handles:
//!
//! - [`RegisteredBuffer`]: an owned, page-aligned mapping (or a
//!   [`UserMemory`] the caller lends, under its `# Safety` contract) with the
//!   registrations made over it (cached: one per range and access), always
//!   dropped before its memory;
//! - [`WriteChain`]: a work-request chain built once (requests, gather
//!   entries, links) and posted with one `ibv_post_send` per exchange, where
//!   sideway's guards rebuild and reallocate the list on every post;
//! - [`CompletionPoller`]: `ibv_poll_cq` into a reusable array, where
//!   sideway's poller allocates one per call;
//! - [`ChainSet`]: queue pairs, buffers and chains owned together, so that
//!   posting a chain that was checked against the buffers is safe;
//! - [`RecvRing`]: zero-length receives for write-with-immediate arrivals,
//!   re-posted from a pre-linked array;
//! - [`CqEvents`]: sleeping on a completion channel until a queue reports,
//!   for `SODE_WAIT=block`.

mod chain;
pub(crate) mod notify;
mod poll;
mod recv;
mod region;
mod set;

pub(crate) use chain::ChainEntry;
pub(crate) use notify::CqEvents;
pub(crate) use poll::{status_str, Completion, CompletionPoller};
pub(crate) use recv::RecvRing;
pub use region::UserMemory;
pub(crate) use region::{Keys, RegisteredBuffer};
pub(crate) use set::{ChainId, ChainSet, Posting};

/// `ibv_wc_status` of a successful completion.
pub(crate) const WC_SUCCESS: u32 = rdma_mummy_sys::ibv_wc_status::IBV_WC_SUCCESS;
/// `ibv_wc_status` of a remote access error (bad rkey, out of bounds).
pub(crate) const WC_REM_ACCESS_ERR: u32 = rdma_mummy_sys::ibv_wc_status::IBV_WC_REM_ACCESS_ERR;
/// `ibv_wc_status` of requests flushed after a queue pair entered the error state.
pub(crate) const WC_WR_FLUSH_ERR: u32 = rdma_mummy_sys::ibv_wc_status::IBV_WC_WR_FLUSH_ERR;
/// `ibv_wc_status` when the peer stopped acknowledging.
pub(crate) const WC_RETRY_EXC_ERR: u32 = rdma_mummy_sys::ibv_wc_status::IBV_WC_RETRY_EXC_ERR;
/// `ibv_wc_opcode` of an arrived write-with-immediate.
pub(crate) const WC_RECV_RDMA_WITH_IMM: u32 =
    rdma_mummy_sys::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM;
/// `ibv_wc_opcode` of an arrived send (with immediate).
pub(crate) const WC_RECV: u32 = rdma_mummy_sys::ibv_wc_opcode::IBV_WC_RECV;
