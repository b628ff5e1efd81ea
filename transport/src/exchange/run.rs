//! Running a persistent set of writes: `start`, `wait`, and the completion
//! bookkeeping between them.

use std::time::{Duration, Instant};

use sideway::ibverbs::queue_pair::{QueuePair, QueuePairAttribute, QueuePairState};

use super::{BufferId, PersistentWrites, PostMode, WindowId, Write, RECV_DEPTH};
use crate::bootstrap::PeerLink;
use crate::error::{Result, TransportError};
use crate::verbs::{self, ChainEntry, Completion, WriteChain};

/// `wr_id` bit of credit sends (the rest is the peer's rank).
pub(crate) const CREDIT_TAG: u64 = 1 << 63;
/// Immediate bit of credits; the low 31 bits are the iteration number.
const IMM_CREDIT: u32 = 1 << 31;
const EPOCH_MASK: u32 = IMM_CREDIT - 1;
/// How often `wait` checks that the peers it waits for are alive.
const LIVENESS_PERIOD: Duration = Duration::from_millis(2);
/// How long work with a peer may stay outstanding after its connection
/// closed before the peer is declared dead: completions already on their way
/// (from a peer that finished and exited) arrive well within it.
const PEER_GRACE: Duration = Duration::from_millis(200);

pub(crate) struct Command {
    pub write: Write,
    pub entry: ChainEntry,
}

/// The writes of one engine towards one peer, in plan order.
pub(crate) struct Chain {
    peer_index: usize,
    engine: usize,
    chain: WriteChain,
    last: usize,
}

pub(crate) fn build_chains(commands: &[Command], peers: &[usize], engines: usize) -> Vec<Chain> {
    let mut chains = Vec::new();
    for (pi, &p) in peers.iter().enumerate() {
        for e in 0..engines {
            let ids: Vec<usize> = (0..commands.len())
                .filter(|&i| commands[i].write.peer == p && commands[i].write.engine == e)
                .collect();
            let Some(&last) = ids.last() else { continue };
            let mut entries: Vec<ChainEntry> =
                ids.iter().map(|&i| commands[i].entry.clone()).collect();
            let tail = entries.last_mut().expect("non-empty");
            tail.with_imm = true;
            tail.signaled = true;
            chains.push(Chain {
                peer_index: pi,
                engine: e,
                chain: WriteChain::new(&entries),
                last,
            });
        }
    }
    chains
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Idle,
    InFlight,
    Failed(String),
}

/// Counters of a [`PersistentWrites`] since it was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExchangeStats {
    /// Exchanges started.
    pub iterations: u64,
    /// `ibv_post_send` calls for data chains.
    pub post_calls: u64,
    /// Work requests posted in those calls.
    pub posted_requests: u64,
    /// Nanoseconds spent inside those calls.
    pub post_nanos: u64,
}

pub(crate) struct State {
    me: usize,
    peers: Vec<usize>,
    engines: usize,
    commands: Vec<Command>,
    chains: Vec<Chain>,
    chains_of_peer: Vec<Vec<usize>>,
    credit_chains: Vec<Option<WriteChain>>,
    expected_imms: Vec<usize>,
    links: Vec<PeerLink>,
    post_mode: PostMode,
    phase: Phase,
    epoch: u32,
    credits_received: Vec<u32>,
    chain_posted: Vec<bool>,
    chain_done: Vec<bool>,
    chains_done: usize,
    credit_pending: Vec<bool>,
    closed_since: Vec<Option<Instant>>,
    credits_done: usize,
    credits_posted: usize,
    arrivals: Vec<usize>,
    recv_posted: Vec<usize>,
    stats: ExchangeStats,
}

impl State {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        me: usize,
        peers: Vec<usize>,
        engines: usize,
        commands: Vec<Command>,
        chains: Vec<Chain>,
        credit_chains: Vec<Option<WriteChain>>,
        expected_imms: Vec<usize>,
        mut links: Vec<PeerLink>,
        post_mode: PostMode,
    ) -> State {
        links.sort_by_key(|l| l.peer());
        let mut chains_of_peer = vec![Vec::new(); peers.len()];
        for (ci, c) in chains.iter().enumerate() {
            chains_of_peer[c.peer_index].push(ci);
        }
        let n = peers.len();
        State {
            me,
            engines,
            commands,
            chain_posted: vec![false; chains.len()],
            chain_done: vec![false; chains.len()],
            credit_pending: vec![false; n],
            closed_since: vec![None; n],
            chains,
            chains_of_peer,
            credit_chains,
            expected_imms,
            links,
            post_mode,
            phase: Phase::Idle,
            epoch: 0,
            credits_received: vec![0; n],
            chains_done: 0,
            credits_done: 0,
            credits_posted: 0,
            arrivals: vec![0; n],
            recv_posted: vec![RECV_DEPTH; n * engines],
            stats: ExchangeStats::default(),
            peers,
        }
    }
}

impl PersistentWrites {
    /// Starts one exchange: grants every writer a credit (this rank's
    /// windows are free again), then posts each engine's chain, with one
    /// post call, to every peer whose credit for this iteration has arrived
    /// (the others are posted from `wait` as their credits arrive).
    pub fn start(&mut self) -> Result<()> {
        self.require_phase("start", false)?;
        let s = &mut self.state;
        s.epoch = s.epoch.wrapping_add(1) & EPOCH_MASK;
        s.chain_posted.iter_mut().for_each(|p| *p = false);
        s.chain_done.iter_mut().for_each(|p| *p = false);
        s.chains_done = 0;
        s.credits_done = 0;
        s.credits_posted = 0;
        s.arrivals.iter_mut().for_each(|a| *a = 0);
        s.stats.iterations += 1;
        s.phase = Phase::InFlight;
        let result = self.post_credits().and_then(|()| {
            for pi in 0..self.state.peers.len() {
                self.post_granted(pi)?;
            }
            // Credits that came in before this start let their chains go now.
            self.progress().map(|_| ())
        });
        result.map_err(|e| self.fail(e))
    }

    fn post_credits(&mut self) -> Result<()> {
        let s = &mut self.state;
        for pi in 0..s.peers.len() {
            let Some(chain) = s.credit_chains[pi].as_mut() else {
                continue;
            };
            chain.set_imm(IMM_CREDIT | s.epoch, &[0]);
            // SAFETY: a credit is a zero-length send: it references no memory.
            unsafe { chain.post(&self.qps[pi * s.engines]) }.map_err(|(source, _)| {
                TransportError::Verbs {
                    op: format!("ibv_post_send(credit to rank {})", s.peers[pi]),
                    device: self.device.clone(),
                    source,
                }
            })?;
            s.credits_posted += 1;
            s.credit_pending[pi] = true;
        }
        Ok(())
    }

    /// Posts the chains to peer `pi` if its credit for this iteration is in.
    fn post_granted(&mut self, pi: usize) -> Result<()> {
        let s = &mut self.state;
        if s.credits_received[pi] != s.epoch {
            return Ok(());
        }
        for &ci in &s.chains_of_peer[pi] {
            if s.chain_posted[ci] {
                continue;
            }
            let c = &mut s.chains[ci];
            c.chain.set_imm(s.epoch, &[c.chain.len() - 1]);
            let qp = &self.qps[pi * s.engines + c.engine];
            let t0 = Instant::now();
            // SAFETY: every request's source lies in a RegisteredBuffer of this
            // object and its target in a window the peer registered for us;
            // both outlive the chain (the buffers are dropped after the
            // queue pairs, and `wait` reaps the chain before the next start);
            // the send queue was sized for the longest chain plus credits.
            let posted = match s.post_mode {
                PostMode::Chain => unsafe { c.chain.post(qp) },
                PostMode::PerRequest => unsafe { c.chain.post_each(qp) },
            };
            s.stats.post_nanos += t0.elapsed().as_nanos() as u64;
            s.stats.post_calls += match s.post_mode {
                PostMode::Chain => 1,
                PostMode::PerRequest => c.chain.len() as u64,
            };
            s.stats.posted_requests += c.chain.len() as u64;
            posted.map_err(|(source, index)| TransportError::Verbs {
                op: format!("ibv_post_send(chain of {} writes to rank {} on engine {}, failed at request {index})", c.chain.len(), s.peers[pi], c.engine),
                device: self.device.clone(),
                source,
            })?;
            s.chain_posted[ci] = true;
        }
        Ok(())
    }

    /// Waits until this rank's writes have completed and every writer's data
    /// has arrived, or `deadline` passes ([`TransportError::Timeout`], the
    /// exchange stays in flight and `wait` may be called again). A failed
    /// write, a dead peer or a protocol violation fails the object for good.
    pub fn wait(&mut self, deadline: Instant) -> Result<()> {
        self.require_phase("wait", true)?;
        let began = Instant::now();
        let mut next_liveness = began + LIVENESS_PERIOD;
        let mut idle_rounds = 0u32;
        loop {
            let progressed = self.progress().map_err(|e| self.fail(e))?;
            if self.done() {
                self.state.phase = Phase::Idle;
                return Ok(());
            }
            let now = Instant::now();
            if now >= next_liveness {
                next_liveness = now + LIVENESS_PERIOD;
                if let Some(e) = self.check_peers(now) {
                    return Err(self.fail(e));
                }
            }
            if now >= deadline {
                return Err(TransportError::Timeout {
                    waited: now - began,
                    outstanding: self.outstanding(),
                });
            }
            if progressed {
                idle_rounds = 0;
            } else {
                idle_rounds = idle_rounds.saturating_add(1);
                // Spin briefly for latency, then let other ranks of this
                // node run (they may share our cores).
                if idle_rounds > 256 {
                    std::thread::yield_now();
                }
            }
        }
    }

    /// One non-blocking pass of [`wait`](PersistentWrites::wait): reaps what
    /// has completed and returns whether the exchange is complete (then it
    /// is no longer in flight). For progressing several transports at once.
    pub fn test(&mut self) -> Result<bool> {
        self.require_phase("test", true)?;
        self.progress().map_err(|e| self.fail(e))?;
        if self.done() {
            self.state.phase = Phase::Idle;
            return Ok(true);
        }
        if let Some(e) = self.check_peers(Instant::now()) {
            return Err(self.fail(e));
        }
        Ok(false)
    }

    /// What is still outstanding, per peer (for timeouts reported by callers
    /// that progress with [`test`](PersistentWrites::test)).
    pub fn outstanding_report(&self) -> String {
        self.outstanding()
    }

    /// [`wait`](PersistentWrites::wait) with a deadline `timeout` from now.
    pub fn wait_for(&mut self, timeout: Duration) -> Result<()> {
        self.wait(Instant::now() + timeout)
    }

    /// Fails unless an exchange is in flight (`in_flight`) or idle
    /// (`!in_flight`), or the object failed earlier.
    fn require_phase(&self, op: &'static str, in_flight: bool) -> Result<()> {
        match (&self.state.phase, in_flight) {
            (Phase::Failed(first), _) => Err(TransportError::Failed {
                first: first.clone(),
            }),
            (Phase::InFlight, true) | (Phase::Idle, false) => Ok(()),
            (Phase::InFlight, false) => Err(TransportError::State {
                op,
                why: "the previous exchange is still in flight: call wait first".into(),
            }),
            (Phase::Idle, true) => Err(TransportError::State {
                op,
                why: "no exchange in flight: call start first".into(),
            }),
        }
    }

    fn done(&self) -> bool {
        let s = &self.state;
        s.chains_done == s.chains.len()
            && s.credits_done == s.credits_posted
            && s.arrivals.iter().zip(&s.expected_imms).all(|(a, e)| a == e)
    }

    /// Reaps both completion queues once; true if anything was reaped.
    fn progress(&mut self) -> Result<bool> {
        let mut any = false;
        let n = self
            .pollers
            .1
            .poll(&self.recv_cq)
            .map_err(|e| self.poll_err("receive", e))?;
        for i in 0..n {
            let c = self.pollers.1.get(i);
            self.on_arrival(c)?;
            any = true;
        }
        for cq in 0..self.send_cqs.len() {
            let n = self
                .pollers
                .0
                .poll(&self.send_cqs[cq])
                .map_err(|e| self.poll_err("send", e))?;
            for i in 0..n {
                let c = self.pollers.0.get(i);
                self.on_send_completion(c)?;
                any = true;
            }
        }
        Ok(any)
    }

    fn poll_err(&self, which: &str, source: std::io::Error) -> TransportError {
        TransportError::Verbs {
            op: format!("ibv_poll_cq({which})"),
            device: self.device.clone(),
            source,
        }
    }

    fn on_arrival(&mut self, c: Completion) -> Result<()> {
        let slot = c.wr_id as usize;
        let (pi, engine) = (slot / self.state.engines, slot % self.state.engines);
        let peer = self.state.peers[pi];
        if c.status != verbs::WC_SUCCESS {
            if c.status == verbs::WC_WR_FLUSH_ERR {
                // The queue pair is in error: its send side reports why.
                return Ok(());
            }
            return Err(self.completion_error(&c, "arrival", None, pi, engine, 0));
        }
        let s = &mut self.state;
        s.recv_posted[slot] -= 1;
        if s.recv_posted[slot] <= RECV_DEPTH / 2 {
            let want = RECV_DEPTH - s.recv_posted[slot];
            self.recv_rings[slot]
                .post(&self.qps[slot], want)
                .map_err(|source| TransportError::Verbs {
                    op: format!("ibv_post_recv(from rank {peer}, engine {engine})"),
                    device: self.device.clone(),
                    source,
                })?;
            s.recv_posted[slot] += want;
        }
        let is_credit = c.imm & IMM_CREDIT != 0 && c.opcode == verbs::WC_RECV;
        let epoch = c.imm & EPOCH_MASK;
        if is_credit {
            let expected = s.credits_received[pi].wrapping_add(1) & EPOCH_MASK;
            if epoch != expected {
                return Err(TransportError::Protocol {
                    whom: format!("rank {peer}"),
                    why: format!("credit for iteration {epoch}, expected {expected}: the ranks' start/wait calls are out of step"),
                });
            }
            s.credits_received[pi] = epoch;
            if s.phase == Phase::InFlight {
                self.post_granted(pi)?;
            }
        } else if c.opcode == verbs::WC_RECV_RDMA_WITH_IMM {
            if epoch != s.epoch || s.phase != Phase::InFlight {
                return Err(TransportError::Protocol {
                    whom: format!("rank {peer}"),
                    why: format!(
                        "data of iteration {epoch} arrived during iteration {} on engine {engine}",
                        s.epoch
                    ),
                });
            }
            s.arrivals[pi] += 1;
            if s.arrivals[pi] > s.expected_imms[pi] {
                return Err(TransportError::Protocol {
                    whom: format!("rank {peer}"),
                    why: format!(
                        "{} arrivals in one iteration, {} announced",
                        s.arrivals[pi], s.expected_imms[pi]
                    ),
                });
            }
        } else {
            return Err(TransportError::Protocol {
                whom: format!("rank {peer}"),
                why: format!("unexpected completion opcode {}", c.opcode),
            });
        }
        Ok(())
    }

    fn on_send_completion(&mut self, c: Completion) -> Result<()> {
        if c.wr_id & CREDIT_TAG != 0 {
            let peer = (c.wr_id & !CREDIT_TAG) as usize;
            let pi = self
                .state
                .peers
                .iter()
                .position(|&p| p == peer)
                .unwrap_or(0);
            if c.status != verbs::WC_SUCCESS {
                return Err(self.completion_error(&c, "credit", None, pi, 0, 0));
            }
            self.state.credits_done += 1;
            self.state.credit_pending[pi] = false;
            return Ok(());
        }
        let command = c.wr_id as usize;
        let Some(cmd) = self.state.commands.get(command) else {
            return Err(TransportError::Protocol {
                whom: "the device".into(),
                why: format!("completion for unknown request {}", c.wr_id),
            });
        };
        let w = cmd.write;
        let pi = self
            .state
            .peers
            .iter()
            .position(|&p| p == w.peer)
            .expect("write peers are connected");
        if c.status != verbs::WC_SUCCESS {
            return Err(self.completion_error(
                &c,
                &format!("RDMA write command #{command}"),
                Some(command),
                pi,
                w.engine,
                w.len,
            ));
        }
        // Only the last request of each chain is signalled.
        if let Some(ci) = self.state.chains.iter().position(|ch| ch.last == command) {
            debug_assert!(self.state.chain_posted[ci]);
            self.state.chain_done[ci] = true;
            self.state.chains_done += 1;
        }
        Ok(())
    }

    fn completion_error(
        &self,
        c: &Completion,
        what: &str,
        command: Option<usize>,
        pi: usize,
        engine: usize,
        bytes: usize,
    ) -> TransportError {
        let hint = match c.status {
            verbs::WC_REM_ACCESS_ERR => ": the peer refused the access (an rkey it did not give us, or a range outside its window)",
            verbs::WC_RETRY_EXC_ERR => ": the peer stopped acknowledging (it died, or the path to it is down)",
            verbs::WC_WR_FLUSH_ERR => ": flushed after an earlier request on this queue pair failed",
            _ => "",
        };
        TransportError::Completion {
            what: what.into(),
            command,
            peer: self.state.peers[pi],
            engine,
            bytes,
            status: verbs::status_str(c.status),
            status_code: c.status,
            vendor_err: c.vendor_err,
            hint: hint.into(),
        }
    }

    /// A peer whose bootstrap connection closed while work with it stayed
    /// outstanding for longer than [`PEER_GRACE`]: it exited or died.
    fn check_peers(&mut self, now: Instant) -> Option<TransportError> {
        for pi in 0..self.state.peers.len() {
            if self.outstanding_with(pi).is_none() {
                continue;
            }
            let since = match self.state.closed_since[pi] {
                Some(t) => t,
                None if self.state.links[pi].closed() => *self.state.closed_since[pi].insert(now),
                None => continue,
            };
            if now.duration_since(since) >= PEER_GRACE {
                return Some(TransportError::PeerDied {
                    peer: self.state.peers[pi],
                    outstanding: self.outstanding(),
                });
            }
        }
        None
    }

    /// What is still outstanding with peer `pi`, if anything.
    fn outstanding_with(&self, pi: usize) -> Option<String> {
        let s = &self.state;
        let mut parts = Vec::new();
        let chains = &s.chains_of_peer[pi];
        let unposted = chains.iter().filter(|&&ci| !s.chain_posted[ci]).count();
        if unposted > 0 {
            parts.push(format!(
                "its credit for iteration {} ({unposted} chains not posted)",
                s.epoch
            ));
        }
        let unfinished = chains
            .iter()
            .filter(|&&ci| s.chain_posted[ci] && !s.chain_done[ci])
            .count();
        if unfinished > 0 {
            parts.push(format!(
                "{unfinished} chains to it posted but not completed"
            ));
        }
        if s.credit_pending[pi] {
            parts.push("its credit not completed".into());
        }
        if s.arrivals[pi] < s.expected_imms[pi] {
            parts.push(format!(
                "data from {} of {} engines",
                s.expected_imms[pi] - s.arrivals[pi],
                s.expected_imms[pi]
            ));
        }
        (!parts.is_empty()).then(|| format!("rank {}: {}", s.peers[pi], parts.join(", ")))
    }

    fn outstanding(&self) -> String {
        let s = &self.state;
        let mut parts: Vec<String> = (0..s.peers.len())
            .filter_map(|pi| self.outstanding_with(pi))
            .collect();
        let posted = s.chain_posted.iter().filter(|&&p| p).count();
        if s.chains_done < posted {
            parts.push(format!(
                "{} of {posted} posted chains not completed",
                posted - s.chains_done
            ));
        }
        if s.credits_done < s.credits_posted {
            parts.push(format!(
                "{} credits not completed",
                s.credits_posted - s.credits_done
            ));
        }
        if parts.is_empty() {
            "nothing".into()
        } else {
            parts.join("; ")
        }
    }

    /// Marks the object failed and stops the device touching its memory
    /// (every queue pair to the error state, which flushes what is queued).
    fn fail(&mut self, e: TransportError) -> TransportError {
        if !matches!(self.state.phase, Phase::Failed(_)) {
            self.state.phase = Phase::Failed(e.to_string());
            let mut attr = QueuePairAttribute::new();
            attr.setup_state(QueuePairState::Error);
            for qp in &mut self.qps {
                let _ = qp.modify(&attr);
            }
        }
        e
    }

    /// Whether an earlier error failed the object.
    pub fn failed(&self) -> bool {
        matches!(self.state.phase, Phase::Failed(_))
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.state.me
    }

    /// The peers this exchange is connected to (writers and targets).
    pub fn peers(&self) -> &[usize] {
        &self.state.peers
    }

    /// Counters since the object was built.
    pub fn stats(&self) -> ExchangeStats {
        self.state.stats
    }

    /// The number of write commands in the plan.
    pub fn commands(&self) -> usize {
        self.state.commands.len()
    }

    fn idle(&self, op: &'static str) -> Result<()> {
        if self.state.phase == Phase::InFlight {
            return Err(TransportError::State {
                op,
                why:
                    "an exchange is in flight: the device may be using the buffer; call wait first"
                        .into(),
            });
        }
        Ok(())
    }

    /// A buffer, to fill (or read) between exchanges.
    pub fn buffer_mut(&mut self, id: BufferId) -> Result<&mut [u8]> {
        self.idle("buffer_mut")?;
        let n = self.buffers.len();
        self.buffers
            .get_mut(id.0)
            .map(|b| b.as_mut_slice())
            .ok_or_else(|| TransportError::State {
                op: "buffer_mut",
                why: format!("buffer {} does not exist ({n} made)", id.0),
            })
    }

    /// A buffer, between exchanges.
    pub fn buffer(&self, id: BufferId) -> Result<&[u8]> {
        self.idle("buffer")?;
        self.buffers
            .get(id.0)
            .map(|b| b.as_slice())
            .ok_or_else(|| TransportError::State {
                op: "buffer",
                why: format!(
                    "buffer {} does not exist ({} made)",
                    id.0,
                    self.buffers.len()
                ),
            })
    }

    fn window_range(
        &self,
        op: &'static str,
        id: WindowId,
    ) -> Result<(usize, std::ops::Range<usize>)> {
        self.idle(op)?;
        let w = self
            .windows
            .get(id.0)
            .ok_or_else(|| TransportError::State {
                op,
                why: format!(
                    "window {} does not exist ({} made)",
                    id.0,
                    self.windows.len()
                ),
            })?;
        Ok((w.buffer.0, w.offset..w.offset + w.len))
    }

    /// A receive window (its range of its buffer), to read after `wait`.
    pub fn window(&self, id: WindowId) -> Result<&[u8]> {
        let (b, range) = self.window_range("window", id)?;
        Ok(&self.buffers[b].as_slice()[range])
    }

    /// A receive window, writable (e.g. to clear it) between exchanges.
    pub fn window_mut(&mut self, id: WindowId) -> Result<&mut [u8]> {
        let (b, range) = self.window_range("window_mut", id)?;
        Ok(&mut self.buffers[b].as_mut_slice()[range])
    }

    /// Memory registrations made for this exchange: one per source buffer
    /// and one per distinct window range.
    pub fn registrations(&self) -> usize {
        self.buffers.iter().map(|b| b.registrations()).sum()
    }
}
