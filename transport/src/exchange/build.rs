//! Building a [`PersistentWrites`]: local checks, registrations, queues,
//! the exchange of connection details with each peer, then the chains.
//! Each phase hands the next a named struct.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{BasicQueuePair, QueuePair};
use sode_job::{PeerLink, World};

use super::connect::{self, ConnInfo, QpSizes, WindowDesc};
use super::run::{self, Chain, Peer};
use super::{
    CqLayout, PersistentWrites, PlannedWrite, RdmaExchangeBuilder, Twin, Write, MAX_WRITE,
    RECV_DEPTH,
};
use crate::error::{Result, TransportError};
use crate::verbs::{ChainEntry, ChainId, ChainSet, CompletionPoller, CqEvents, Keys, RecvRing};

/// Who this rank exchanges with: every peer it writes to and every writer
/// of one of its windows, in rank order.
struct Peers {
    list: Vec<usize>,
    /// The writers into this rank's windows (they get credits).
    writers_here: BTreeSet<usize>,
    /// Writes per (peer, engine): each such chain is one post per exchange.
    chain_len: BTreeMap<(usize, usize), usize>,
    /// Per peer in `list`, how far ahead this rank grants it credits: 1
    /// when every window it writes here has two slots, else 0.
    grant_lead: Vec<u32>,
}

/// The queues of the exchange, before they are connected.
struct Queues {
    /// `peer index * engines + engine`.
    qps: Vec<BasicQueuePair>,
    psns: Vec<u32>,
    send_cqs: Vec<Arc<BasicCompletionQueue>>,
    recv_cq: Arc<BasicCompletionQueue>,
    recv_rings: Vec<RecvRing>,
    inline: u32,
    /// The channel the queues report to, when waits may block.
    events: Option<CqEvents>,
}

impl RdmaExchangeBuilder<'_> {
    /// Connects to every peer this rank writes to and every peer named as a
    /// writer of one of its windows, exchanges queue-pair numbers and keys
    /// (each window's rkey only to its writers), checks each write against
    /// the window it targets, and pre-builds the chains. Collective among
    /// those peers.
    ///
    /// # Errors
    ///
    /// [`TransportError::Setup`](crate::TransportError::Setup) when a peer's setup message does not arrive in time or
    /// does not fit; [`TransportError::InvalidWindow`](crate::TransportError::InvalidWindow) or [`TransportError::InvalidCommand`](crate::TransportError::InvalidCommand) for a write
    /// that does not fit the window it targets; [`TransportError::Verbs`](crate::TransportError::Verbs) or
    /// [`TransportError::MemlockTooLow`](crate::TransportError::MemlockTooLow) when registering or connecting fails.
    pub fn build(mut self, world: &World, timeout: Duration) -> Result<PersistentWrites> {
        let deadline = Instant::now() + timeout;
        self.check_writes(world)?;
        let peers = self.peers(world)?;
        // A protection domain per peer: its queue pairs and the
        // registrations it may use live there, so a key given to one peer is
        // refused on any other peer's connection.
        let pds: Vec<Arc<ProtectionDomain>> = peers
            .list
            .iter()
            .map(|_| self.dev.alloc_pd())
            .collect::<Result<_>>()?;
        let src_keys = self.register_sources(&peers, &pds)?;
        self.register_windows(&peers, &pds)?;
        let mut queues = self.queues(world.rank(), &peers, &pds)?;
        let whom = || format!("ranks {:?}", peers.list);
        let mut links = world
            .connect_peers(
                &peers.list.iter().copied().collect(),
                deadline.saturating_duration_since(Instant::now()),
            )
            .map_err(|source| TransportError::Setup {
                step: "connecting",
                whom: whom(),
                source: Box::new(source),
            })?;
        let remote = self.swap_details(world.rank(), &mut links, &peers, &queues, deadline)?;
        // Each write per variant (which memory this side reads, which the
        // peer lands in: a lent set or staged), into slot 0 and (for
        // two-slot windows) slot 1.
        let choices = self.sets + 1;
        let mut entries: Vec<[Vec<ChainEntry>; 2]> = Vec::with_capacity(choices * choices);
        for variant in 0..choices * choices {
            let mut pair: [Vec<ChainEntry>; 2] = Default::default();
            for (parity, e) in pair.iter_mut().enumerate() {
                let how = Variant {
                    parity: parity as u64,
                    src: variant % choices,
                    dst: variant / choices,
                    staged: self.sets,
                };
                *e = self.entries(world.rank(), &remote, &src_keys, queues.inline, how)?;
            }
            entries.push(pair);
        }
        for (pi, &p) in peers.list.iter().enumerate() {
            for e in 0..self.engines {
                let slot = pi * self.engines + e;
                connect::connect_qp(
                    self.dev,
                    &mut queues.qps[slot],
                    queues.psns[slot],
                    &remote[&p],
                    e,
                )?;
            }
        }
        // Nobody sends before both ends of every pair are ready to receive.
        handshake(&mut links, &peers.list, deadline)?;
        self.assemble(world, peers, queues, links, &remote, entries)
    }

    /// Every write against what this rank knows alone: peers, engines,
    /// source ranges, sizes.
    fn check_writes(&self, world: &World) -> Result<()> {
        let (me, size) = (world.rank(), world.size());
        if self.engines == 0 {
            return Err(TransportError::InvalidSetting {
                name: "engines".into(),
                value: "0".into(),
                why: "at least one queue pair per peer".into(),
            });
        }
        if !(1..=super::MAX_LENT_SETS).contains(&self.sets) {
            return Err(TransportError::InvalidSetting {
                name: "sets".into(),
                value: self.sets.to_string(),
                why: format!("from 1 to {} sets of lent memory", super::MAX_LENT_SETS),
            });
        }
        for (i, planned) in self.writes.iter().enumerate() {
            let w = &planned.write;
            if w.peer >= size || w.peer == me {
                return Err(TransportError::UnknownPeer {
                    peer: w.peer,
                    why: format!("write #{i}: the job has ranks 0..{size} and this is rank {me}"),
                });
            }
            self.check_write(i, planned)
                .map_err(|why| TransportError::InvalidCommand { command: i, why })?;
        }
        Ok(())
    }

    fn check_write(&self, i: usize, planned: &PlannedWrite) -> std::result::Result<(), String> {
        let w = &planned.write;
        if w.engine >= self.engines {
            return Err(format!(
                "engine {} but there are {} engines per peer",
                w.engine, self.engines
            ));
        }
        let Some(src) = self.buffers.get(w.src.0) else {
            return Err(format!(
                "buffer {} does not exist ({} made)",
                w.src.0,
                self.buffers.len()
            ));
        };
        if w.len > MAX_WRITE {
            return Err(format!(
                "{} bytes is more than one RDMA write carries ({MAX_WRITE}); split it",
                w.len
            ));
        }
        let inside =
            |off: usize, len: usize| off.checked_add(len).is_some_and(|end| end <= src.len());
        if !inside(w.src_offset, w.len) {
            return Err(format!(
                "source range {}..{}+{} is outside buffer {} of {} bytes (write #{i})",
                w.src_offset,
                w.src_offset,
                w.len,
                w.src.0,
                src.len()
            ));
        }
        if let Some(&(off, len)) = planned.gather.iter().find(|&&(o, l)| !inside(o, l)) {
            return Err(format!(
                "gathered piece {off}..{off}+{len} is outside buffer {} of {} bytes",
                w.src.0,
                src.len()
            ));
        }
        if planned.twins.len() >= self.sets {
            return Err(format!(
                "{} twins, but the starts name {} lent sets: one twin per set beyond the first",
                planned.twins.len(),
                self.sets
            ));
        }
        for (k, twin) in planned.twins.iter().enumerate() {
            let Some(b) = twin.src else { continue };
            let fits = |off: usize, len: usize| {
                self.buffers
                    .get(b.0)
                    .is_some_and(|b| off.checked_add(len).is_some_and(|end| end <= b.len()))
            };
            if !fits(w.src_offset, w.len) || !planned.gather.iter().all(|&(o, l)| fits(o, l)) {
                return Err(format!(
                    "its twin in lent set {} reads buffer {}, which does not hold its source range or pieces",
                    k + 1,
                    b.0
                ));
            }
        }
        if let Some((buffer, off)) = planned.staged.src {
            let fits = self
                .buffers
                .get(buffer.0)
                .is_some_and(|b| off.checked_add(w.len).is_some_and(|end| end <= b.len()));
            if !fits {
                return Err(format!(
                    "its staged source {off}..{off}+{} is not inside buffer {}",
                    w.len, buffer.0
                ));
            }
        }
        Ok(())
    }

    /// Each source buffer is registered once for local reads in the domain
    /// of each peer it is written to, however many writes read from it.
    fn register_sources(
        &mut self,
        peers: &Peers,
        pds: &[Arc<ProtectionDomain>],
    ) -> Result<BTreeMap<(usize, usize), Keys>> {
        let mut keys = BTreeMap::new();
        let pairs: BTreeSet<(usize, usize)> = self
            .writes
            .iter()
            .flat_map(|p| {
                let peer = p.write.peer;
                let staged = p.staged.src.map(|(b, _)| (b.0, peer));
                let twins = p.twins.iter().filter_map(move |t| Some((t.src?.0, peer)));
                std::iter::once((p.write.src.0, peer))
                    .chain(staged)
                    .chain(twins)
            })
            .collect();
        for (src, peer) in pairs {
            let pd = &pds[peer_index(peers, peer)?];
            let len = self.buffers[src].len();
            let k = self.register(super::BufferId(src), len, pd, |b, pd| b.local(pd))?;
            keys.insert((src, peer), k);
        }
        Ok(keys)
    }

    /// Each window, once per writer, in that writer's domain.
    fn register_windows(&mut self, peers: &Peers, pds: &[Arc<ProtectionDomain>]) -> Result<()> {
        for w in 0..self.windows.len() {
            let spec = &self.windows[w];
            // Every slot: the key covers them all and nothing else.
            let (buffer, offset, len) = (spec.buffer, spec.offset, spec.len * spec.slots);
            let writers: Vec<usize> = spec.writers.iter().copied().collect();
            for writer in writers {
                let pd = &pds[peer_index(peers, writer)?];
                let keys = self.register(buffer, len, pd, |b, pd| b.window(pd, offset, len))?;
                self.windows[w].keys.insert(writer, keys);
            }
        }
        Ok(())
    }

    fn peers(&self, world: &World) -> Result<Peers> {
        let me = world.rank();
        let mut writers_here = BTreeSet::new();
        for &w in self.windows.iter().flat_map(|win| &win.writers) {
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
        let mut all: BTreeSet<usize> = self.writes.iter().map(|p| p.write.peer).collect();
        all.extend(&writers_here);
        let mut chain_len = BTreeMap::new();
        for p in &self.writes {
            *chain_len.entry((p.write.peer, p.write.engine)).or_default() += 1;
        }
        let list: Vec<usize> = all.into_iter().collect();
        let grant_lead = list.iter().map(|&p| self.grant_lead(p)).collect();
        Ok(Peers {
            list,
            writers_here,
            chain_len,
            grant_lead,
        })
    }

    /// Completion queues, queue pairs (in INIT) and posted receives, sized
    /// from the plan: each chain ends with one signalled request; credits
    /// are signalled too.
    fn queues(&self, me: usize, peers: &Peers, pds: &[Arc<ProtectionDomain>]) -> Result<Queues> {
        let max_chain = peers.chain_len.values().copied().max().unwrap_or(0);
        // A credit may be posted while the chain of the same iteration is in
        // flight, and one of the next iteration before this one's reaped.
        let send_wr = (max_chain + 2).max(4) as u32;
        let inline = if self
            .writes
            .iter()
            .any(|p| p.write.len > 0 && p.write.len as u64 <= u64::from(self.inline_max))
        {
            self.inline_max
        } else {
            0
        };
        let engines = self.engines;
        let n_send_cqs = match self.cq_layout {
            CqLayout::Shared => 1,
            CqLayout::PerEngine => engines,
        };
        let qps_per_cq = peers.list.len() * engines / n_send_cqs;
        let send_cq_depth = ((send_wr as usize) * qps_per_cq.max(1)).max(16) as u32;
        // Only a process whose waits may block pays for the channel (and
        // the system call that arms it, on some providers).
        let events = if sode_job::WaitPolicy::current() == sode_job::WaitPolicy::Block {
            let device = self.dev.caps().device.clone();
            Some(
                CqEvents::new(&self.dev.ctx).map_err(|source| TransportError::Verbs {
                    op: "ibv_create_comp_channel".into(),
                    device,
                    source,
                })?,
            )
        } else {
            None
        };
        let recv_cq = self.dev.create_cq_reporting(
            (RECV_DEPTH * peers.list.len() * engines).max(16) as u32,
            events.as_ref(),
        )?;
        let send_cqs: Vec<Arc<BasicCompletionQueue>> = (0..n_send_cqs)
            .map(|_| self.dev.create_cq_reporting(send_cq_depth, events.as_ref()))
            .collect::<Result<_>>()?;
        let sizes = QpSizes {
            send_wr,
            send_sge: self
                .writes
                .iter()
                .map(|p| p.gather.len())
                .max()
                .unwrap_or(0)
                .max(1) as u32,
            recv_wr: RECV_DEPTH as u32,
            inline,
        };
        let mut qps = Vec::with_capacity(peers.list.len() * engines);
        let mut psns = Vec::with_capacity(qps.capacity());
        for (pi, &p) in peers.list.iter().enumerate() {
            for e in 0..engines {
                let cq = &send_cqs[if n_send_cqs == 1 { 0 } else { e }];
                qps.push(connect::create_qp(
                    self.dev, &pds[pi], cq, &recv_cq, &sizes,
                )?);
                psns.push(connect::initial_psn(me, p, e));
            }
        }
        // Receives go up before the peer can send (still in INIT).
        let mut recv_rings = Vec::with_capacity(qps.len());
        for (slot, qp) in qps.iter().enumerate() {
            let mut ring = RecvRing::new(RECV_DEPTH, slot as u64);
            ring.post(qp, RECV_DEPTH)
                .map_err(|source| TransportError::Verbs {
                    op: "ibv_post_recv".into(),
                    device: self.dev.caps().device.clone(),
                    source,
                })?;
            recv_rings.push(ring);
        }
        Ok(Queues {
            qps,
            psns,
            send_cqs,
            recv_cq,
            recv_rings,
            inline,
            events,
        })
    }

    /// Sends each peer this rank's queue-pair numbers and the windows it may
    /// write into, and receives the same from it.
    fn swap_details(
        &self,
        me: usize,
        links: &mut BTreeMap<usize, PeerLink>,
        peers: &Peers,
        queues: &Queues,
        deadline: Instant,
    ) -> Result<BTreeMap<usize, ConnInfo>> {
        let caps = self.dev.caps();
        let e_count = self.engines;
        for (pi, &p) in peers.list.iter().enumerate() {
            let info = ConnInfo {
                qpns: queues.qps[pi * e_count..(pi + 1) * e_count]
                    .iter()
                    .map(|q| q.qp_number())
                    .collect(),
                psns: queues.psns[pi * e_count..(pi + 1) * e_count].to_vec(),
                gid: caps.gid,
                lid: caps.lid,
                mtu: caps.active_mtu,
                windows: self.windows_for(p),
                engines_used: (0..e_count)
                    .filter(|e| peers.chain_len.contains_key(&(p, *e)))
                    .collect(),
                lead: peers.grant_lead[pi],
            };
            link(links, p)?
                .send(&info)
                .map_err(setup("sending connection details", p))?;
        }
        let mut remote = BTreeMap::new();
        for &p in &peers.list {
            let info: ConnInfo = link(links, p)?
                .recv(deadline)
                .map_err(setup("receiving connection details", p))?;
            if info.qpns.len() != e_count || info.psns.len() != e_count {
                return Err(TransportError::Protocol {
                    peer: p,
                    why: format!("it opened {} engines towards rank {me}, which opened {e_count}: every rank must use the same number of engines", info.qpns.len()),
                });
            }
            if info.engines_used.iter().any(|&e| e >= e_count) {
                return Err(TransportError::Protocol {
                    peer: p,
                    why: "it names an engine out of range".into(),
                });
            }
            remote.insert(p, info);
        }
        Ok(remote)
    }

    /// How far ahead this rank grants `peer` credits: 1 when every window
    /// it writes here has two slots, else 0.
    fn grant_lead(&self, peer: usize) -> u32 {
        let mut theirs = self
            .windows
            .iter()
            .filter(|w| w.writers.contains(&peer))
            .peekable();
        u32::from(theirs.peek().is_some() && theirs.all(|w| w.slots == 2))
    }

    /// The windows `peer` may write into: only those that name it.
    fn windows_for(&self, peer: usize) -> Vec<WindowDesc> {
        self.windows
            .iter()
            .enumerate()
            .filter_map(|(id, w)| {
                let keys = w.keys.get(&peer)?;
                Some(WindowDesc {
                    id,
                    addr: keys.addr,
                    len: w.len as u64,
                    rkey: keys.rkey,
                    slots: w.slots as u32,
                })
            })
            .collect()
    }

    /// Every write as a work request, checked against the window it
    /// targets as its owner described it, in variant `how`.
    fn entries(
        &self,
        me: usize,
        remote: &BTreeMap<usize, ConnInfo>,
        src_keys: &BTreeMap<(usize, usize), Keys>,
        inline: u32,
        how: Variant,
    ) -> Result<Vec<ChainEntry>> {
        let mut entries = Vec::with_capacity(self.writes.len());
        for (i, planned) in self.writes.iter().enumerate() {
            let w = &planned.write;
            let (window, dst_offset) = match (planned.staged.dst, how.dst) {
                (Some(staged), d) if d == how.staged => staged,
                (_, d) => (twin(planned, d).dst.unwrap_or(w.window), w.dst_offset),
            };
            let (src_buffer, src_offset, gather) = match (planned.staged.src, how.src) {
                (Some((b, off)), s) if s == how.staged => (b, off, &[][..]),
                (_, s) => (
                    twin(planned, s).src.unwrap_or(w.src),
                    w.src_offset,
                    &planned.gather[..],
                ),
            };
            let info = &remote[&w.peer];
            let bad = |why: String| TransportError::InvalidCommand { command: i, why };
            let Some(win) = info.windows.iter().find(|d| d.id == window.0) else {
                return Err(bad(format!(
                    "rank {} has no window {} that rank {me} may write into (it offers {:?}); the window must list this rank among its writers",
                    w.peer,
                    window.0,
                    info.windows.iter().map(|d| d.id).collect::<Vec<_>>()
                )));
            };
            if (dst_offset as u64)
                .checked_add(w.len as u64)
                .is_none_or(|end| end > win.len)
            {
                return Err(bad(format!(
                    "destination range {}..{} is outside window {} of rank {} ({} bytes)",
                    dst_offset,
                    dst_offset + w.len,
                    window.0,
                    w.peer,
                    win.len
                )));
            }
            let src = src_keys[&(src_buffer.0, w.peer)];
            let slot = if win.slots == 2 {
                how.parity * win.len
            } else {
                0
            };
            let mut target = (win.addr + slot + dst_offset as u64, win.rkey);
            if self.wrong_rkey == Some(i) {
                target.1 ^= 0x5a5a_0000;
            }
            if let Some((_, addr, rkey)) = self.target_override.filter(|t| t.0 == i) {
                target = (addr, rkey);
            }
            entries.push(ChainEntry {
                wr_id: i as u64,
                local_addr: src.addr + src_offset as u64,
                lkey: src.lkey,
                len: w.len as u32,
                remote: Some(target),
                inline: w.len > 0 && w.len as u64 <= u64::from(inline) && gather.is_empty(),
                with_imm: false,
                signaled: false,
                gather: gather
                    .iter()
                    .map(|&(off, len)| (src.addr + off as u64, len as u32))
                    .collect(),
            });
        }
        Ok(entries)
    }

    /// The chains (one per peer and engine, in plan order, the last request
    /// signalled and carrying the iteration) and the credits, in one
    /// [`ChainSet`] with the buffers they read.
    fn assemble(
        self,
        world: &World,
        peers: Peers,
        queues: Queues,
        mut links: BTreeMap<usize, PeerLink>,
        remote: &BTreeMap<usize, ConnInfo>,
        entries: Vec<[Vec<ChainEntry>; 2]>,
    ) -> Result<PersistentWrites> {
        let me = world.rank();
        let mut set = ChainSet::new(queues.qps, self.buffers);
        let writes: Vec<Write> = self.writes.iter().map(|p| p.write).collect();
        let lent: Vec<bool> = self.writes.iter().map(|p| p.staged.src.is_some()).collect();
        let mut chains = Vec::new();
        let mut run_peers = Vec::with_capacity(peers.list.len());
        for (pi, &p) in peers.list.iter().enumerate() {
            for e in 0..self.engines {
                let ids: Vec<usize> = (0..writes.len())
                    .filter(|&i| writes[i].peer == p && writes[i].engine == e)
                    .collect();
                if ids.is_empty() {
                    continue;
                }
                let variants = add_variants(&mut set, &entries, &ids)?;
                chains.push(Chain::new(pi, e, variants, ids));
            }
            let credit = if peers.writers_here.contains(&p) {
                Some(add_chain(&mut set, &[credit_entry(p)])?)
            } else {
                None
            };
            let link = links.remove(&p).ok_or_else(|| missing_link(p))?;
            let leads = run::Leads {
                grant: peers.grant_lead[pi],
                credit: remote[&p].lead.min(1),
            };
            run_peers.push(Peer::new(
                p,
                link,
                credit,
                remote[&p].engines_used.len(),
                leads,
            ));
        }
        Ok(PersistentWrites {
            state: run::State::new(
                me,
                self.engines,
                run::Commands {
                    writes,
                    lent,
                    sets: self.sets,
                },
                chains,
                run_peers,
                self.post_mode,
            ),
            recv_rings: queues.recv_rings,
            set,
            send_poller: CompletionPoller::new(64),
            recv_poller: CompletionPoller::new(64),
            send_cqs: queues.send_cqs,
            recv_cq: queues.recv_cq,
            events: queues.events,
            windows: self.windows,
            offered: remote
                .iter()
                .map(|(&p, info)| (p, info.windows.clone()))
                .collect(),
            device: self.dev.caps().device.clone(),
            job: world.clone(),
        })
    }
}

/// Adds one chain of requests to `set`.
fn add_chain(set: &mut ChainSet, entries: &[ChainEntry]) -> Result<ChainId> {
    set.add(entries)
        .map_err(|why| TransportError::InvalidCommand {
            command: entries[0].wr_id as usize,
            why,
        })
}

/// The chain of writes `ids` (one peer's on one engine, in plan order, the
/// last request signalled and carrying the iteration) in each variant,
/// into slot 0 and into slot 1, added to `set`; a chain equal to one added
/// already is that one.
fn add_variants(
    set: &mut ChainSet,
    entries: &[[Vec<ChainEntry>; 2]],
    ids: &[usize],
) -> Result<Vec<[ChainId; 2]>> {
    let mut added: Vec<(Vec<ChainEntry>, ChainId)> = Vec::new();
    let mut id_of = |variant: usize, parity: usize| -> Result<ChainId> {
        let mut chain: Vec<ChainEntry> = ids
            .iter()
            .map(|&i| entries[variant][parity][i].clone())
            .collect();
        let tail = chain.last_mut().expect("non-empty");
        tail.with_imm = true;
        tail.signaled = true;
        if let Some(&(_, id)) = added.iter().find(|(seen, _)| *seen == chain) {
            return Ok(id);
        }
        let id = add_chain(set, &chain)?;
        added.push((chain, id));
        Ok(id)
    };
    (0..entries.len())
        .map(|variant| Ok([id_of(variant, 0)?, id_of(variant, 1)?]))
        .collect()
}

/// A credit: a zero-length send with an immediate, signalled.
fn credit_entry(peer: usize) -> ChainEntry {
    ChainEntry {
        wr_id: run::CREDIT_TAG | peer as u64,
        local_addr: 0,
        lkey: 0,
        len: 0,
        remote: None,
        inline: false,
        with_imm: true,
        signaled: true,
        gather: Vec::new(),
    }
}

/// Which copy of each write [`RdmaExchangeBuilder::entries`] makes: into
/// which slot, and what it reads and lands in: a lent set (0 as built) or,
/// at `staged`, where a staged start does.
#[derive(Debug, Clone, Copy)]
struct Variant {
    parity: u64,
    src: usize,
    dst: usize,
    /// The choice that means staged (the number of lent sets).
    staged: usize,
}

/// A write's twin in lent set `set` (as built in set 0, or where it has
/// none there).
fn twin(planned: &PlannedWrite, set: usize) -> Twin {
    set.checked_sub(1)
        .and_then(|k| planned.twins.get(k))
        .copied()
        .unwrap_or_default()
}

fn handshake(
    links: &mut BTreeMap<usize, PeerLink>,
    peers: &[usize],
    deadline: Instant,
) -> Result<()> {
    for &p in peers {
        link(links, p)?
            .send(&"ready")
            .map_err(setup("sending ready", p))?;
    }
    for &p in peers {
        let _: String = link(links, p)?
            .recv(deadline)
            .map_err(setup("receiving ready", p))?;
    }
    Ok(())
}

fn peer_index(peers: &Peers, peer: usize) -> Result<usize> {
    peers
        .list
        .iter()
        .position(|&p| p == peer)
        .ok_or_else(|| missing_link(peer))
}

fn link(links: &mut BTreeMap<usize, PeerLink>, peer: usize) -> Result<&mut PeerLink> {
    links.get_mut(&peer).ok_or_else(|| missing_link(peer))
}

fn missing_link(peer: usize) -> TransportError {
    TransportError::UnknownPeer {
        peer,
        why: "the job layer returned no setup link to it".into(),
    }
}

fn setup(step: &'static str, peer: usize) -> impl Fn(sode_job::JobError) -> TransportError {
    move |source| TransportError::Setup {
        step,
        whom: format!("rank {peer}"),
        source: Box::new(source),
    }
}
