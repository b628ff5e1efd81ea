//! Persistent sets of RDMA writes: described once, built once (collective),
//! run every iteration with `start` / `wait`.

mod build;
mod calibrate;
mod connect;
mod run;

use std::collections::BTreeSet;
use std::sync::Arc;

use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::protection_domain::ProtectionDomain;

use crate::device::Device;
use crate::error::{Result, TransportError};
use crate::verbs::{
    ChainSet, CompletionPoller, Keys, Posting, RecvRing, RegisteredBuffer, UserMemory,
};
pub use calibrate::{calibrate, Calibration};
pub use run::ExchangeStats;

/// A buffer of a [`PersistentWrites`] (index in creation order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BufferId(pub usize);

/// A receive window (index in creation order; peers name it by this index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowId(pub usize);

/// A window: a range of one buffer, its writers and, once built, the keys
/// of each writer (registered in that writer's protection domain).
#[derive(Debug, Clone)]
pub(crate) struct WindowSpec {
    pub buffer: BufferId,
    pub offset: usize,
    /// Bytes of one slot.
    pub len: usize,
    /// Slots, 1 or 2, one after the other from `offset`.
    pub slots: usize,
    pub writers: BTreeSet<usize>,
    pub keys: std::collections::BTreeMap<usize, Keys>,
}

/// One RDMA write of the plan: `len` bytes from `src` at `src_offset` into
/// window `window` of rank `peer` at `dst_offset`, on queue pair `engine`
/// towards that peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write {
    /// Destination rank.
    pub peer: usize,
    /// Engine (queue pair index towards `peer`), `0..engines`.
    pub engine: usize,
    /// Local source buffer.
    pub src: BufferId,
    /// Offset in the source buffer.
    pub src_offset: usize,
    /// The peer's window, by the peer's own numbering.
    pub window: WindowId,
    /// Offset in that window.
    pub dst_offset: usize,
    /// Bytes.
    pub len: usize,
}

/// Where send completions are reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqLayout {
    /// One send completion queue for every engine.
    Shared,
    /// One send completion queue per engine index.
    PerEngine,
}

/// How `start` hands each engine's chain to the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostMode {
    /// The whole chain in one `ibv_post_send` (the default).
    Chain,
    /// One `ibv_post_send` per request (for comparison).
    PerRequest,
}

impl PostMode {
    fn posting(self) -> Posting {
        match self {
            PostMode::Chain => Posting::Chain,
            PostMode::PerRequest => Posting::PerRequest,
        }
    }
}

/// One write as described: where it goes, the source pieces of a gather
/// write (empty: contiguous from `write.src_offset`), and where it reads
/// and lands in a staged start.
#[derive(Debug, Clone)]
struct PlannedWrite {
    write: Write,
    gather: Vec<(usize, usize)>,
    staged: Staged,
    /// Where it reads and lands in a start on each lent set beyond the
    /// first ([`RdmaExchangeBuilder::twins`]).
    twins: Vec<Twin>,
}

/// Where a write reads and lands when a start is staged: the way around
/// memory that cannot take part this time (the caller's arrays read or
/// received in place, when a start names other arrays). Each side is
/// chosen per start: the writer's source by
/// [`PersistentWrites::set_memory`] on the writer, its target by the same
/// call on the receiver, which says so in its credit. A write keeps its
/// length and its place in its chain, so the receiver counts the same
/// arrivals either way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Staged {
    /// Read instead contiguously from (buffer, offset) (`None`: as built).
    pub src: Option<(BufferId, usize)>,
    /// Land instead at (the peer's window, offset) (`None`: as built).
    pub dst: Option<(WindowId, usize)>,
}

/// Where a write reads and lands in a start on another set of lent memory
/// than the one it was built on: a Runge-Kutta stage's arrays beside the
/// solution's, each set registered at build. The write keeps its offsets,
/// length and gather list; only the buffer it reads and the peer's window
/// it lands in change. Each side is chosen per start, as a staged one is
/// ([`PersistentWrites::set_memory`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Twin {
    /// Read from this buffer instead (`None`: as built).
    pub src: Option<BufferId>,
    /// Land in this window of the peer instead (`None`: as built).
    pub dst: Option<WindowId>,
}

/// What the writes of the starts that follow read and land in
/// ([`PersistentWrites::set_memory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StartMemory {
    /// Lent set `k`: 0 is the memory the writes were built on, `k` above
    /// it their [`Twin`]s of index `k - 1`.
    Set(usize),
    /// The staged sources and targets ([`Staged`]): memory that no lent
    /// set holds takes part through the channel's buffers.
    Staged,
}

/// Most lent sets of one exchange: a receiver names the set it receives
/// in within its credit's immediate, in 6 bits.
pub const MAX_LENT_SETS: usize = 63;

/// Collects buffers, windows and writes, then builds a [`PersistentWrites`].
#[derive(Debug)]
pub struct RdmaExchangeBuilder<'d> {
    dev: &'d Device,
    engines: usize,
    cq_layout: CqLayout,
    post_mode: PostMode,
    inline_max: u32,
    buffers: Vec<RegisteredBuffer>,
    windows: Vec<WindowSpec>,
    writes: Vec<PlannedWrite>,
    /// Lent sets the starts may name ([`sets`](Self::sets)).
    sets: usize,
    registered: u64,
    wrong_rkey: Option<usize>,
    target_override: Option<(usize, u64, u32)>,
}

/// Most bytes one RDMA write may carry (RC messages are at most 2^31 bytes).
pub const MAX_WRITE: usize = 1 << 31;

impl<'d> RdmaExchangeBuilder<'d> {
    /// A builder on `dev` with one engine per peer, a shared send CQ, chained
    /// posts and writes of up to 64 bytes (or the device's limit) inline.
    pub fn new(dev: &'d Device) -> Self {
        RdmaExchangeBuilder {
            dev,
            engines: 1,
            cq_layout: CqLayout::Shared,
            post_mode: PostMode::Chain,
            inline_max: dev.caps().max_inline.min(64),
            buffers: Vec::new(),
            windows: Vec::new(),
            writes: Vec::new(),
            sets: 1,
            registered: 0,
            wrong_rkey: None,
            target_override: None,
        }
    }

    /// Queue pairs per peer (the machine model's engines per node).
    pub fn engines(mut self, engines: usize) -> Self {
        self.engines = engines;
        self
    }

    /// One send CQ for all engines, or one per engine.
    pub fn cq_layout(mut self, layout: CqLayout) -> Self {
        self.cq_layout = layout;
        self
    }

    /// One post per chain (default) or per request.
    pub fn post_mode(mut self, mode: PostMode) -> Self {
        self.post_mode = mode;
        self
    }

    /// Writes of at most `bytes` are sent inline (0 disables inline).
    pub fn inline_max(mut self, bytes: u32) -> Self {
        self.inline_max = bytes;
        self
    }

    /// Fault injection for tests: write `command` with an rkey the peer never
    /// issued, so the peer's device refuses it.
    #[doc(hidden)]
    pub fn inject_wrong_rkey(mut self, command: usize) -> Self {
        self.wrong_rkey = Some(command);
        self
    }

    /// Fault injection for tests: write `command` to `addr` under `rkey`
    /// instead of its window (a key stolen from another connection).
    #[doc(hidden)]
    pub fn inject_target(mut self, command: usize, addr: u64, rkey: u32) -> Self {
        self.target_override = Some((command, addr, rkey));
        self
    }

    /// Registers in `pd` through `f` (which consults the buffer's cache),
    /// counting `len` more locked bytes when it registers, and names the
    /// memlock limit when that is what failed.
    fn register(
        &mut self,
        buffer: BufferId,
        len: usize,
        pd: &Arc<ProtectionDomain>,
        f: impl FnOnce(&mut RegisteredBuffer, &Arc<ProtectionDomain>) -> std::io::Result<Keys>,
    ) -> Result<Keys> {
        let total = self.registered + len.max(1) as u64;
        let dev = self.dev;
        dev.check_memlock(total)?;
        let buf = &mut self.buffers[buffer.0];
        let before = buf.registrations();
        let keys = f(buf, pd).map_err(|source| {
            let caps = dev.caps();
            let memlock = matches!(
                source.raw_os_error(),
                Some(libc::ENOMEM) | Some(libc::EPERM) | Some(libc::EAGAIN)
            );
            match caps.memlock_limit {
                Some(l) if memlock => TransportError::MemlockTooLow {
                    needed: total,
                    limit: format!("{l} bytes"),
                },
                _ => TransportError::Verbs {
                    op: format!("ibv_reg_mr({len} bytes)"),
                    device: caps.device.clone(),
                    source,
                },
            }
        })?;
        if self.buffers[buffer.0].registrations() > before {
            self.registered = total;
        }
        Ok(keys)
    }

    /// A buffer of `len` zeroed, page-aligned bytes, owned by the exchange:
    /// a source of writes, a home for windows, or both (a field with its
    /// halo). It is registered when first used, once per use.
    ///
    /// # Errors
    ///
    /// [`TransportError::Allocate`](crate::TransportError::Allocate) when the memory cannot be had.
    pub fn buffer(&mut self, len: usize) -> Result<BufferId> {
        let b = RegisteredBuffer::new(len)
            .map_err(|source| TransportError::Allocate { len, source })?;
        self.buffers.push(b);
        Ok(BufferId(self.buffers.len() - 1))
    }

    /// The caller's memory as a buffer: writes read straight from it and
    /// its windows receive straight into it, with no copy. It is
    /// registered like an owned buffer (once per peer for reads, once per
    /// window and writer for remote writes); [`PersistentWrites::buffer`]
    /// and [`PersistentWrites::window`] refuse it (the caller has its own
    /// pointer). The promises that make this safe were made when the
    /// [`UserMemory`] was created.
    pub fn user_buffer(&mut self, memory: UserMemory) -> BufferId {
        self.buffers.push(RegisteredBuffer::user(memory));
        BufferId(self.buffers.len() - 1)
    }

    /// A buffer that is only a window of `len` bytes that the ranks in
    /// `writers` (and only they) may write into.
    ///
    /// # Errors
    ///
    /// As [`buffer`](Self::buffer).
    pub fn window(&mut self, len: usize, writers: &[usize]) -> Result<WindowId> {
        let b = self.buffer(len)?;
        self.window_in(b, 0, len, writers)
    }

    /// Bytes `offset..offset + len` of `buffer` as a window that the ranks in
    /// `writers` (and only they) may write into: at build that range alone
    /// is registered for remote writes, once per writer in that writer's
    /// protection domain, and each writer receives its own rkey, valid on
    /// its own connection only. The same range named twice for the same
    /// writer is registered once.
    ///
    /// # Errors
    ///
    /// [`TransportError::InvalidWindow`](crate::TransportError::InvalidWindow) when `buffer` does not exist or the
    /// range leaves it.
    pub fn window_in(
        &mut self,
        buffer: BufferId,
        offset: usize,
        len: usize,
        writers: &[usize],
    ) -> Result<WindowId> {
        self.window_in_slots(buffer, offset, len, 1, writers)
    }

    /// As [`window_in`](Self::window_in), with `slots` (1 or 2) slots of
    /// `len` bytes one after the other from `offset`: iteration `n` lands
    /// in slot `n % slots`, and with two the receiver grants each writer
    /// iteration `n + 1` when it starts `n` (when every window that writer
    /// writes here has two), so the credit is off the critical path.
    /// [`PersistentWrites::window`] gives the slot of the last iteration.
    ///
    /// # Errors
    ///
    /// As [`window_in`](Self::window_in); also when `slots` is not 1 or 2.
    pub fn window_in_slots(
        &mut self,
        buffer: BufferId,
        offset: usize,
        len: usize,
        slots: usize,
        writers: &[usize],
    ) -> Result<WindowId> {
        let id = self.windows.len();
        if !(1..=2).contains(&slots) {
            return Err(TransportError::InvalidWindow {
                window: id,
                why: format!("{slots} slots: a window has 1 or 2"),
            });
        }
        let Some(buf) = self.buffers.get(buffer.0) else {
            return Err(TransportError::InvalidWindow {
                window: id,
                why: format!(
                    "buffer {} does not exist ({} made)",
                    buffer.0,
                    self.buffers.len()
                ),
            });
        };
        let span = len.checked_mul(slots);
        if span
            .and_then(|span| offset.checked_add(span))
            .is_none_or(|end| end > buf.len())
        {
            return Err(TransportError::InvalidWindow {
                window: id,
                why: format!(
                    "range {offset}..{offset}+{slots}x{len} is outside buffer {} of {} bytes",
                    buffer.0,
                    buf.len()
                ),
            });
        }
        let span = span.unwrap_or(len);
        // What registering it for every writer will lock, checked now.
        let planned: u64 = self
            .windows
            .iter()
            .map(|w| ((w.len * w.slots).max(1) * w.writers.len().max(1)) as u64)
            .sum();
        self.dev.check_memlock(
            self.registered + planned + (span.max(1) * writers.len().max(1)) as u64,
        )?;
        self.windows.push(WindowSpec {
            buffer,
            offset,
            len,
            slots,
            writers: writers.iter().copied().collect(),
            keys: std::collections::BTreeMap::new(),
        });
        Ok(WindowId(id))
    }

    /// Adds a write to the plan (checked at build against the peer's window).
    pub fn write(&mut self, w: Write) -> &mut Self {
        self.writes.push(PlannedWrite {
            write: w,
            gather: Vec::new(),
            staged: Staged::default(),
            twins: Vec::new(),
        });
        self
    }

    /// Adds one RDMA write whose source is `pieces` (offset, length) of
    /// `w.src`, gathered in order by the device (one gather entry each) and
    /// landing contiguously at `w.dst_offset`: a strided face without
    /// packing. `w.src_offset` and `w.len` are set from the pieces.
    pub fn write_gather(&mut self, mut w: Write, pieces: &[(usize, usize)]) -> &mut Self {
        w.src_offset = pieces.first().map_or(0, |p| p.0);
        w.len = pieces.iter().map(|p| p.1).sum();
        self.writes.push(PlannedWrite {
            write: w,
            gather: pieces.to_vec(),
            staged: Staged::default(),
            twins: Vec::new(),
        });
        self
    }

    /// Gives the write added last where it reads and lands in a staged
    /// start ([`Staged`]); checked at build like the write itself.
    pub fn staged(&mut self, staged: Staged) -> &mut Self {
        if let Some(last) = self.writes.last_mut() {
            last.staged = staged;
        }
        self
    }

    /// How many sets of lent memory the starts may name (default 1: the
    /// memory the writes are built on); each write then has a [`Twin`]
    /// per set beyond the first ([`twins`](Self::twins)). At most
    /// [`MAX_LENT_SETS`], checked at build.
    pub fn sets(&mut self, sets: usize) -> &mut Self {
        self.sets = sets;
        self
    }

    /// Gives the write added last where it reads and lands in a start on
    /// each lent set beyond the first, in set order; checked at build like
    /// the write itself.
    pub fn twins(&mut self, twins: &[Twin]) -> &mut Self {
        if let Some(last) = self.writes.last_mut() {
            last.twins = twins.to_vec();
        }
        self
    }
}

/// Receives kept posted per queue pair (credits and arrivals of at most two
/// iterations are ever outstanding).
const RECV_DEPTH: usize = 16;

/// A persistent set of RDMA writes, built once, run with [`start`] and
/// [`wait`] every iteration.
///
/// The receiver grants each writer a credit at `start` (its windows are free
/// again); a writer posts its chains to a peer once that peer's credit for
/// the iteration arrived, so no global barrier is needed. The last write of
/// each chain carries an immediate: `wait` returns when every chain of this
/// rank has completed and an immediate has arrived from every engine of
/// every writer.
///
/// [`start`]: PersistentWrites::start
/// [`wait`]: PersistentWrites::wait
// Field order is drop order: the queue pairs (in `set`) before their
// completion queues; `set` drops its queue pairs before its buffers.
pub struct PersistentWrites {
    state: run::State,
    recv_rings: Vec<RecvRing>,
    set: ChainSet,
    send_poller: CompletionPoller,
    recv_poller: CompletionPoller,
    send_cqs: Vec<Arc<BasicCompletionQueue>>,
    recv_cq: Arc<BasicCompletionQueue>,
    /// Where the queues report when armed (`SODE_WAIT=block` at build).
    events: Option<crate::verbs::CqEvents>,
    windows: Vec<WindowSpec>,
    /// The windows each peer offered this rank (for fault-injection tests).
    offered: std::collections::BTreeMap<usize, Vec<connect::WindowDesc>>,
    device: String,
    /// The job, whose verdict on a dead rank wakes a sleeping wait.
    job: sode_job::World,
}

impl std::fmt::Debug for PersistentWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentWrites")
            .field("device", &self.device)
            .field("chains", &self.set)
            .field("windows", &self.windows.len())
            .finish_non_exhaustive()
    }
}
