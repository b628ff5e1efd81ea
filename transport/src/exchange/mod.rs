//! Persistent sets of RDMA writes: described once, built once (collective),
//! run every iteration with `start` / `wait`.

mod calibrate;
mod connect;
mod plan;
mod run;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::queue_pair::{BasicQueuePair, QueuePair};

use crate::bootstrap::{PeerLink, World};
use crate::device::Device;
use crate::error::{Result, TransportError};
use crate::verbs::{ChainEntry, CompletionPoller, Keys, RecvRing, RegisteredBuffer, WriteChain};
pub use calibrate::{calibrate, Calibration};
use connect::{ConnInfo, QpSizes, WindowDesc};
pub use plan::writes_from_plan;
pub use run::ExchangeStats;
use sideway::ibverbs::protection_domain::ProtectionDomain;

/// A buffer of a [`PersistentWrites`] (index in creation order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BufferId(pub usize);

/// A receive window (index in creation order; peers name it by this index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowId(pub usize);

/// A window: a range of one buffer, its writers and its keys.
#[derive(Debug, Clone)]
pub(crate) struct WindowSpec {
    pub buffer: BufferId,
    pub offset: usize,
    pub len: usize,
    pub writers: BTreeSet<usize>,
    pub keys: Keys,
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

/// Collects buffers, windows and writes, then builds a [`PersistentWrites`].
#[derive(Debug)]
pub struct ExchangeBuilder<'d> {
    dev: &'d Device,
    engines: usize,
    cq_layout: CqLayout,
    post_mode: PostMode,
    inline_max: u32,
    buffers: Vec<RegisteredBuffer>,
    windows: Vec<WindowSpec>,
    writes: Vec<Write>,
    /// Per write: the source pieces of a gather write (empty: contiguous).
    gathers: Vec<Vec<(usize, usize)>>,
    registered: u64,
    wrong_rkey: Option<usize>,
}

/// Most bytes one RDMA write may carry (RC messages are at most 2^31 bytes).
pub const MAX_WRITE: usize = 1 << 31;

impl<'d> ExchangeBuilder<'d> {
    /// A builder on `dev` with one engine per peer, a shared send CQ, chained
    /// posts and writes of up to 64 bytes (or the device's limit) inline.
    pub fn new(dev: &'d Device) -> Self {
        ExchangeBuilder {
            dev,
            engines: 1,
            cq_layout: CqLayout::Shared,
            post_mode: PostMode::Chain,
            inline_max: dev.caps().max_inline.min(64),
            buffers: Vec::new(),
            windows: Vec::new(),
            writes: Vec::new(),
            gathers: Vec::new(),
            registered: 0,
            wrong_rkey: None,
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

    /// Registers through `f` (which consults the buffer's cache), counting
    /// `len` more locked bytes when it registers, and names the memlock limit
    /// when that is what failed.
    fn register(
        &mut self,
        buffer: BufferId,
        len: usize,
        f: impl FnOnce(&mut RegisteredBuffer, &Arc<ProtectionDomain>) -> std::io::Result<Keys>,
    ) -> Result<Keys> {
        let total = self.registered + len.max(1) as u64;
        let dev = self.dev;
        let buf = &mut self.buffers[buffer.0];
        let before = buf.registrations();
        let keys = f(buf, &dev.pd).map_err(|source| {
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
    pub fn buffer(&mut self, len: usize) -> Result<BufferId> {
        let b = RegisteredBuffer::new(len)
            .map_err(|source| TransportError::Allocate { len, source })?;
        self.buffers.push(b);
        Ok(BufferId(self.buffers.len() - 1))
    }

    /// A buffer that is only a window of `len` bytes that the ranks in
    /// `writers` (and only they) may write into.
    pub fn window(&mut self, len: usize, writers: &[usize]) -> Result<WindowId> {
        let b = self.buffer(len)?;
        self.window_in(b, 0, len, writers)
    }

    /// Bytes `offset..offset + len` of `buffer` as a window that the ranks in
    /// `writers` (and only they) may write into: that range alone is
    /// registered for remote writes, and its rkey is sent to those ranks
    /// alone. The same range named twice is registered once.
    pub fn window_in(
        &mut self,
        buffer: BufferId,
        offset: usize,
        len: usize,
        writers: &[usize],
    ) -> Result<WindowId> {
        let id = self.windows.len();
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
        if offset.checked_add(len).is_none_or(|end| end > buf.len()) {
            return Err(TransportError::InvalidWindow {
                window: id,
                why: format!(
                    "range {offset}..{offset}+{len} is outside buffer {} of {} bytes",
                    buffer.0,
                    buf.len()
                ),
            });
        }
        self.dev
            .check_memlock(self.registered + len.max(1) as u64)?;
        let keys = self.register(buffer, len, |b, pd| b.window(pd, offset, len))?;
        self.windows.push(WindowSpec {
            buffer,
            offset,
            len,
            writers: writers.iter().copied().collect(),
            keys,
        });
        Ok(WindowId(id))
    }

    /// Adds a write to the plan (checked at build against the peer's window).
    pub fn write(&mut self, w: Write) -> &mut Self {
        self.writes.push(w);
        self.gathers.push(Vec::new());
        self
    }

    /// Adds one RDMA write whose source is `pieces` (offset, length) of
    /// `w.src`, gathered in order by the device (one gather entry each) and
    /// landing contiguously at `w.dst_offset`: a strided face without
    /// packing. `w.src_offset` and `w.len` are set from the pieces.
    pub fn write_gather(&mut self, mut w: Write, pieces: &[(usize, usize)]) -> &mut Self {
        w.src_offset = pieces.first().map_or(0, |p| p.0);
        w.len = pieces.iter().map(|p| p.1).sum();
        self.writes.push(w);
        self.gathers.push(pieces.to_vec());
        self
    }

    /// Connects to every peer this rank writes to and every peer named as a
    /// writer of one of its windows, exchanges queue-pair numbers and keys
    /// (each window's rkey only to its writers), checks each write against
    /// the window it targets, and pre-builds the chains. Collective among
    /// those peers.
    pub fn build(mut self, world: &mut World, timeout: Duration) -> Result<PersistentWrites> {
        let deadline = Instant::now() + timeout;
        let me = world.rank();
        let e_count = self.engines;
        let caps = self.dev.caps().clone();
        if e_count == 0 {
            return Err(TransportError::InvalidSetting {
                name: "engines".into(),
                value: "0".into(),
                why: "at least one queue pair per peer".into(),
            });
        }
        // Local checks of every write first: they need no peer.
        for (i, w) in self.writes.iter().enumerate() {
            let bad = |why: String| Err(TransportError::InvalidCommand { command: i, why });
            if w.peer >= world.size() || w.peer == me {
                return Err(TransportError::UnknownPeer {
                    peer: w.peer,
                    why: format!(
                        "write #{i}: the job has ranks 0..{} and this is rank {me}",
                        world.size()
                    ),
                });
            }
            if w.engine >= e_count {
                return bad(format!(
                    "engine {} but there are {e_count} engines per peer",
                    w.engine
                ));
            }
            let Some(src) = self.buffers.get(w.src.0) else {
                return bad(format!(
                    "buffer {} does not exist ({} made)",
                    w.src.0,
                    self.buffers.len()
                ));
            };
            if w.len > MAX_WRITE {
                return bad(format!(
                    "{} bytes is more than one RDMA write carries ({MAX_WRITE}); split it",
                    w.len
                ));
            }
            if w.src_offset
                .checked_add(w.len)
                .is_none_or(|end| end > src.len())
            {
                return bad(format!(
                    "source range {}..{}+{} is outside buffer {} of {} bytes",
                    w.src_offset,
                    w.src_offset,
                    w.len,
                    w.src.0,
                    src.len()
                ));
            }
            for &(off, len) in &self.gathers[i] {
                if off.checked_add(len).is_none_or(|end| end > src.len()) {
                    return bad(format!(
                        "gathered piece {off}..{off}+{len} is outside buffer {} of {} bytes",
                        w.src.0,
                        src.len()
                    ));
                }
            }
        }
        // Each source buffer is registered once for local reads, however many
        // writes read from it.
        let mut src_keys: BTreeMap<usize, Keys> = BTreeMap::new();
        for w in &self.writes.clone() {
            if let std::collections::btree_map::Entry::Vacant(v) = src_keys.entry(w.src.0) {
                let len = self.buffers[w.src.0].len();
                self.dev.check_memlock(self.registered + len as u64)?;
                v.insert(self.register(w.src, len, |b, pd| b.local(pd))?);
            }
        }
        let mut writers_here: BTreeSet<usize> = BTreeSet::new();
        for win in &self.windows {
            for &w in &win.writers {
                if w >= world.size() || w == me {
                    return Err(TransportError::UnknownPeer {
                        peer: w,
                        why: format!(
                            "named as writer of a window of rank {me}, in a job of {} ranks",
                            world.size()
                        ),
                    });
                }
                writers_here.insert(w);
            }
        }
        let targets: BTreeSet<usize> = self.writes.iter().map(|w| w.peer).collect();
        let peers: BTreeSet<usize> = targets.union(&writers_here).copied().collect();

        // Queues. Each chain ends with one signalled request; credits are
        // signalled too. Depths follow from the plan.
        let mut chain_len: BTreeMap<(usize, usize), usize> = BTreeMap::new();
        for w in &self.writes {
            *chain_len.entry((w.peer, w.engine)).or_default() += 1;
        }
        let max_chain = chain_len.values().copied().max().unwrap_or(0);
        // A credit may be posted while the chain of the same iteration is in
        // flight, and one of the next iteration before this one's reaped.
        let send_wr = (max_chain + 2).max(4) as u32;
        let recv_wr = RECV_DEPTH as u32;
        let inline = if self
            .writes
            .iter()
            .any(|w| w.len as u64 <= u64::from(self.inline_max) && w.len > 0)
        {
            self.inline_max
        } else {
            0
        };
        let n_send_cqs = match self.cq_layout {
            CqLayout::Shared => 1,
            CqLayout::PerEngine => e_count,
        };
        let qps_per_cq = peers.len() * e_count / n_send_cqs;
        let send_cq_depth = ((send_wr as usize) * qps_per_cq.max(1)).max(16) as u32;
        let recv_cq_depth = (RECV_DEPTH * peers.len() * e_count).max(16) as u32;
        let recv_cq = self.dev.create_cq(recv_cq_depth)?;
        let send_cqs: Vec<Arc<BasicCompletionQueue>> = (0..n_send_cqs)
            .map(|_| self.dev.create_cq(send_cq_depth))
            .collect::<Result<_>>()?;
        let send_sge = self
            .gathers
            .iter()
            .map(|g| g.len())
            .max()
            .unwrap_or(0)
            .max(1) as u32;
        let sizes = QpSizes {
            send_wr,
            send_sge,
            recv_wr,
            inline,
        };
        let peer_list: Vec<usize> = peers.iter().copied().collect();
        let mut qps: Vec<BasicQueuePair> = Vec::with_capacity(peer_list.len() * e_count);
        let mut psns = Vec::with_capacity(qps.capacity());
        for &p in &peer_list {
            for e in 0..e_count {
                let cq = &send_cqs[match self.cq_layout {
                    CqLayout::Shared => 0,
                    CqLayout::PerEngine => e,
                }];
                qps.push(connect::create_qp(self.dev, cq, &recv_cq, &sizes)?);
                psns.push(connect::initial_psn(me, p, e));
            }
        }
        // Receives go up before the peer can send (still in INIT).
        let mut recv_rings: Vec<RecvRing> = (0..qps.len())
            .map(|slot| RecvRing::new(RECV_DEPTH, slot as u64))
            .collect();
        for (slot, qp) in qps.iter().enumerate() {
            recv_rings[slot]
                .post(qp, RECV_DEPTH)
                .map_err(|e| TransportError::Verbs {
                    op: "ibv_post_recv".into(),
                    device: caps.device.clone(),
                    source: e,
                })?;
        }

        // Keys and queue-pair numbers, pairwise.
        let mut links =
            world.connect_peers(&peers, deadline.saturating_duration_since(Instant::now()))?;
        let mut remote: BTreeMap<usize, ConnInfo> = BTreeMap::new();
        for (pi, &p) in peer_list.iter().enumerate() {
            let engines_used: Vec<usize> = (0..e_count)
                .filter(|e| chain_len.contains_key(&(p, *e)))
                .collect();
            let windows = self
                .windows
                .iter()
                .enumerate()
                .filter(|(_, w)| w.writers.contains(&p))
                .map(|(id, w)| WindowDesc {
                    id,
                    addr: w.keys.addr,
                    len: w.len as u64,
                    rkey: w.keys.rkey,
                })
                .collect();
            let info = ConnInfo {
                qpns: qps[pi * e_count..(pi + 1) * e_count]
                    .iter()
                    .map(|q| q.qp_number())
                    .collect(),
                psns: psns[pi * e_count..(pi + 1) * e_count].to_vec(),
                gid: caps.gid,
                lid: caps.lid,
                mtu: caps.active_mtu,
                windows,
                engines_used,
            };
            links.get_mut(&p).expect("connected").send(&info)?;
        }
        for &p in &peer_list {
            let info: ConnInfo = links.get_mut(&p).expect("connected").recv(deadline)?;
            if info.qpns.len() != e_count || info.psns.len() != e_count {
                return Err(TransportError::Protocol {
                    whom: format!("rank {p}"),
                    why: format!("it opened {} engines towards rank {me}, which opened {e_count}: every rank must use the same number of engines", info.qpns.len()),
                });
            }
            if info.engines_used.iter().any(|&e| e >= e_count) {
                return Err(TransportError::Protocol {
                    whom: format!("rank {p}"),
                    why: "it names an engine out of range".into(),
                });
            }
            remote.insert(p, info);
        }

        // Every write against the window it targets, as its owner described it.
        let mut commands = Vec::with_capacity(self.writes.len());
        for (i, w) in self.writes.iter().enumerate() {
            let info = &remote[&w.peer];
            let Some(win) = info.windows.iter().find(|d| d.id == w.window.0) else {
                return Err(TransportError::InvalidCommand {
                    command: i,
                    why: format!(
                        "rank {} has no window {} that rank {me} may write into (it offers {:?}); the window must list this rank among its writers",
                        w.peer,
                        w.window.0,
                        info.windows.iter().map(|d| d.id).collect::<Vec<_>>()
                    ),
                });
            };
            if (w.dst_offset as u64)
                .checked_add(w.len as u64)
                .is_none_or(|end| end > win.len)
            {
                return Err(TransportError::InvalidCommand {
                    command: i,
                    why: format!(
                        "destination range {}..{} is outside window {} of rank {} ({} bytes)",
                        w.dst_offset,
                        w.dst_offset + w.len,
                        w.window.0,
                        w.peer,
                        win.len
                    ),
                });
            }
            let src = src_keys[&w.src.0];
            let rkey = if self.wrong_rkey == Some(i) {
                win.rkey ^ 0x5a5a_0000
            } else {
                win.rkey
            };
            commands.push(run::Command {
                write: *w,
                entry: ChainEntry {
                    wr_id: i as u64,
                    local_addr: src.addr + w.src_offset as u64,
                    lkey: src.lkey,
                    len: w.len as u32,
                    remote: Some((win.addr + w.dst_offset as u64, rkey)),
                    inline: w.len > 0
                        && w.len as u64 <= u64::from(inline)
                        && self.gathers[i].is_empty(),
                    with_imm: false,
                    signaled: false,
                    gather: self.gathers[i]
                        .iter()
                        .map(|&(off, len)| (src.addr + off as u64, len as u32))
                        .collect(),
                },
            });
        }

        for (pi, &p) in peer_list.iter().enumerate() {
            for e in 0..e_count {
                let slot = pi * e_count + e;
                connect::connect_qp(self.dev, &mut qps[slot], psns[slot], &remote[&p], e)?;
            }
        }
        // Nobody sends before both ends of every pair are ready to receive.
        for &p in &peer_list {
            links.get_mut(&p).expect("connected").send(&"ready")?;
        }
        for &p in &peer_list {
            let _: String = links.get_mut(&p).expect("connected").recv(deadline)?;
        }

        let chains = run::build_chains(&commands, &peer_list, e_count);
        let expected_imms: Vec<usize> = peer_list
            .iter()
            .map(|p| remote[p].engines_used.len())
            .collect();
        let credit_chains: Vec<Option<WriteChain>> = peer_list
            .iter()
            .map(|p| {
                writers_here.contains(p).then(|| {
                    WriteChain::new(&[ChainEntry {
                        wr_id: run::CREDIT_TAG | *p as u64,
                        local_addr: 0,
                        lkey: 0,
                        len: 0,
                        remote: None,
                        inline: false,
                        with_imm: true,
                        signaled: true,
                        gather: Vec::new(),
                    }])
                })
            })
            .collect();
        Ok(PersistentWrites {
            state: run::State::new(
                me,
                peer_list,
                e_count,
                commands,
                chains,
                credit_chains,
                expected_imms,
                links.into_values().collect::<Vec<PeerLink>>(),
                self.post_mode,
            ),
            recv_rings,
            pollers: (CompletionPoller::new(64), CompletionPoller::new(64)),
            qps,
            send_cqs,
            recv_cq,
            buffers: self.buffers,
            windows: self.windows,
            device: caps.device,
        })
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
// Field order is drop order: queue pairs before their completion queues,
// registrations (in the state's chains) before the memory they name.
pub struct PersistentWrites {
    state: run::State,
    recv_rings: Vec<RecvRing>,
    pollers: (CompletionPoller, CompletionPoller),
    qps: Vec<BasicQueuePair>,
    send_cqs: Vec<Arc<BasicCompletionQueue>>,
    recv_cq: Arc<BasicCompletionQueue>,
    buffers: Vec<RegisteredBuffer>,
    windows: Vec<WindowSpec>,
    device: String,
}

impl std::fmt::Debug for PersistentWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentWrites")
            .field("device", &self.device)
            .field("queue_pairs", &self.qps.len())
            .field("buffers", &self.buffers.len())
            .field("windows", &self.windows.len())
            .finish_non_exhaustive()
    }
}
