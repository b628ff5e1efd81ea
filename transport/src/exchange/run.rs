//! Running a persistent set of writes: `start`, `wait`, and the completion
//! bookkeeping between them. The credit protocol itself is
//! [`CreditBook`](crate::CreditBook); this module feeds it what the device
//! reports and posts what it allows.

use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use sode_job::{Backoff, Lifecycle, PeerLink};

use super::{BufferId, PersistentWrites, PostMode, WindowId, Write, RECV_DEPTH};
use crate::credit::{
    CreditBook, CreditEvent, PeerRole, ProtocolViolation, EPOCH_BITS, EPOCH_MASK, SHAPE_MASK,
};
use crate::error::{Result, TransportError};
use crate::verbs::notify::WATCH_MAX;
use crate::verbs::{self, ChainId, Completion};

/// `wr_id` bit of credit sends (the rest is the peer's rank).
pub(crate) const CREDIT_TAG: u64 = 1 << 63;
/// Immediate bit of credits; the low 24 bits are the iteration number.
const IMM_CREDIT: u32 = 1 << 31;
/// Immediate bit of a credit whose sender's start is staged: write to its
/// staged targets ([`crate::Staged`]).
const IMM_STAGED: u32 = 1 << 30;
/// Where a credit names the lent set its sender's start receives in
/// (below [`IMM_STAGED`], above the iteration number).
const IMM_SET_SHIFT: u32 = EPOCH_BITS;
/// The set's bits, once shifted down (at most [`crate::MAX_LENT_SETS`] sets).
const IMM_SET_MASK: u32 = 0x3f;
/// How often `wait` checks that the peers it waits for are alive.
const LIVENESS_PERIOD: Duration = Duration::from_millis(2);
/// The longest sleep of [`PersistentWrites::park`] while the links of all
/// the peers it waits for are watched (a peer's death wakes it); without
/// them it sleeps [`LIVENESS_PERIOD`] at most.
const LONG_NAP: Duration = Duration::from_millis(50);
/// How long work with a peer may stay outstanding after its connection
/// closed before the peer is declared dead: completions already on their way
/// (from a peer that finished and exited) arrive well within it.
const PEER_GRACE: Duration = Duration::from_millis(200);

/// The writes of one engine towards one peer, in plan order.
#[derive(Debug)]
pub(crate) struct Chain {
    peer: usize,
    engine: usize,
    /// Per variant (what this rank's start reads and what the peer's
    /// lands in, each a lent set or staged: see [`variant`]), the chain
    /// into slot 0 and into slot 1 of two-slot windows (the same id where
    /// they do not differ); iteration `n` posts `ids[variant][n % 2]`.
    ids: ChainVariants,
    /// The commands it posts, in order; the last one's completion ends
    /// the chain (the only signalled one).
    commands: Vec<usize>,
    posted: bool,
    done: bool,
}

impl Chain {
    /// The chain of `commands` (not empty) to peer index `peer` on
    /// `engine`.
    pub(crate) fn new(
        peer: usize,
        engine: usize,
        ids: ChainVariants,
        commands: Vec<usize>,
    ) -> Chain {
        Chain {
            peer,
            engine,
            ids,
            commands,
            posted: false,
            done: false,
        }
    }
}

/// A chain's ids per variant and slot parity (see [`Chain`]).
pub(crate) type ChainVariants = Vec<[ChainId; 2]>;

/// The variant of a chain that reads memory `mine` and lands in the
/// peer's memory `theirs`, each a lent set (`0..sets`) or staged (`sets`).
pub(crate) fn variant(mine: usize, theirs: usize, sets: usize) -> usize {
    mine + (sets + 1) * theirs
}

/// How far ahead credits go between this rank and a peer (0 or 1 each way).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Leads {
    /// This rank grants the peer.
    pub grant: u32,
    /// The peer grants this rank.
    pub credit: u32,
}

/// One peer of the exchange.
#[derive(Debug)]
pub(crate) struct Peer {
    rank: usize,
    link: PeerLink,
    /// The credit this rank grants the peer each iteration, if it writes to us.
    credit: Option<ChainId>,
    credit_pending: bool,
    /// Chains the peer writes to this rank per iteration.
    arrivals: usize,
    /// When its setup link was first seen closed.
    closed_since: Option<Instant>,
    /// Receives still posted on each of its engines.
    recv_posted: Vec<usize>,
    /// Its chains (indices into the state's chains), so posting to one peer
    /// does not scan every chain.
    chains: Vec<usize>,
    leads: Leads,
    /// What the peer's last credit asked to land in: a lent set, or
    /// staged (the number of sets).
    target: usize,
}

impl Peer {
    /// Whether the iteration waits for the acknowledgement of the credit
    /// this rank grants the peer: yes for a credit of this iteration; no
    /// for one a step ahead (two slots), which the peer may never use (the
    /// last iteration's) and may already be gone.
    fn awaits_credit_ack(&self) -> bool {
        self.leads.grant == 0
    }

    pub(crate) fn new(
        rank: usize,
        link: PeerLink,
        credit: Option<ChainId>,
        arrivals: usize,
        leads: Leads,
    ) -> Peer {
        Peer {
            rank,
            link,
            credit,
            credit_pending: false,
            arrivals,
            closed_since: None,
            recv_posted: Vec::new(),
            chains: Vec::new(),
            leads,
            target: 0,
        }
    }
}

/// What one pass of progress achieved.
#[derive(Debug, Clone, Copy)]
struct Pass {
    progressed: bool,
    complete: bool,
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
    engines: usize,
    writes: Vec<Write>,
    /// Per command, whether it was built on memory the caller lent (it
    /// has a staged source), and whether it is carried short now: then
    /// only a staged start may post it, since what the caller's memory
    /// holds at that place is not what a shortened message carries.
    lent: Vec<bool>,
    short: Vec<bool>,
    /// How many commands built on lent memory are carried short.
    lent_short: usize,
    /// For each command, the chain it ends (if it is a chain's last).
    ends_chain: Vec<Option<usize>>,
    /// For each command, its chain and its place in it.
    placed: Vec<Option<(usize, usize)>>,
    /// What part of the exchange this rank's starts move (see
    /// [`PersistentWrites::set_shape`]).
    shape: u8,
    /// Lent sets the starts may name.
    sets: usize,
    /// What this rank's starts read and land in: a lent set, or staged
    /// (`sets`; see [`PersistentWrites::set_memory`]).
    memory: usize,
    chains: Vec<Chain>,
    peers: Vec<Peer>,
    book: CreditBook,
    lifecycle: Lifecycle,
    post_mode: PostMode,
    chains_done: usize,
    credits_posted: usize,
    credits_done: usize,
    stats: ExchangeStats,
    /// When the peers' setup links are next checked for a closed peer.
    next_liveness: Instant,
    /// A peer's early data of this iteration that carried another shape
    /// (found at start), told once this rank's own writes to that peer
    /// are out, so that the peer is told too rather than waiting out its
    /// deadline; the iteration does not complete meanwhile.
    deferred: Option<(usize, ProtocolViolation)>,
}

/// The exchange's write commands, in the order added, per command
/// whether it was built on memory the caller lent, and how many lent sets
/// the starts may name.
pub(crate) struct Commands {
    pub writes: Vec<Write>,
    pub lent: Vec<bool>,
    pub sets: usize,
}

impl State {
    pub(crate) fn new(
        me: usize,
        engines: usize,
        Commands { writes, lent, sets }: Commands,
        chains: Vec<Chain>,
        mut peers: Vec<Peer>,
        post_mode: PostMode,
    ) -> State {
        let mut ends_chain = vec![None; writes.len()];
        let mut placed = vec![None; writes.len()];
        for (ci, c) in chains.iter().enumerate() {
            if let Some(&last) = c.commands.last() {
                ends_chain[last] = Some(ci);
            }
            for (at, &command) in c.commands.iter().enumerate() {
                placed[command] = Some((ci, at));
            }
        }
        for p in &mut peers {
            p.recv_posted = vec![RECV_DEPTH; engines];
        }
        for (ci, c) in chains.iter().enumerate() {
            peers[c.peer].chains.push(ci);
        }
        let book = CreditBook::new(peers.iter().map(|p| PeerRole {
            grant_lead: p.leads.grant,
            credit_lead: p.leads.credit,
            ..PeerRole::new(!p.chains.is_empty(), p.arrivals)
        }));
        State {
            me,
            engines,
            short: vec![false; writes.len()],
            writes,
            lent,
            lent_short: 0,
            ends_chain,
            placed,
            shape: 0,
            sets,
            memory: 0,
            chains,
            peers,
            book,
            lifecycle: Lifecycle::Idle,
            post_mode,
            chains_done: 0,
            credits_posted: 0,
            credits_done: 0,
            stats: ExchangeStats::default(),
            next_liveness: Instant::now(),
            deferred: None,
        }
    }

    fn done(&self) -> bool {
        self.deferred.is_none()
            && self.chains_done == self.chains.len()
            && self.credits_done == self.credits_posted
            && self.book.arrivals_complete()
    }

    fn peer_index(&self, rank: usize) -> Option<usize> {
        self.peers.iter().position(|p| p.rank == rank)
    }
}

impl PersistentWrites {
    /// Starts one exchange: grants every writer a credit (this rank's
    /// windows are free again), then posts each engine's chain, with one
    /// post call, to every peer whose credit for this iteration has arrived
    /// (the others are posted from `wait` as their credits arrive).
    ///
    /// # Errors
    ///
    /// [`TransportError::State`](crate::TransportError::State) while an iteration is in flight or after a failure;
    /// [`TransportError::Verbs`](crate::TransportError::Verbs) when a post fails (the object then fails for good);
    /// [`TransportError::InvalidCommand`](crate::TransportError::InvalidCommand)
    /// when a command built on lent memory is carried short
    /// ([`carry`](Self::carry)) and the start is not staged.
    pub fn start(&mut self) -> Result<()> {
        self.state.lifecycle.require_idle("start")?;
        if self.state.lent_short > 0 && self.state.memory != self.state.sets {
            let command = self.state.short.iter().position(|&s| s).unwrap_or(0);
            return Err(TransportError::InvalidCommand {
                command,
                why: "it reads memory the caller lent and is carried short: only a staged start (set_memory(StartMemory::Staged)) can post it".into(),
            });
        }
        let s = &mut self.state;
        let began = s.book.start(s.shape);
        for c in &mut s.chains {
            c.posted = false;
            c.done = false;
        }
        s.chains_done = 0;
        s.credits_done = 0;
        s.credits_posted = 0;
        s.stats.iterations += 1;
        s.lifecycle.start();
        s.deferred = began.err();
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
        for pi in 0..self.state.peers.len() {
            let Some(credit) = self.state.peers[pi].credit else {
                continue;
            };
            let granted = self.state.book.grant(pi);
            let memory = match self.state.memory {
                m if m == self.state.sets => IMM_STAGED,
                set => (set as u32) << IMM_SET_SHIFT,
            };
            self.set
                .set_imm(credit, IMM_CREDIT | memory | granted, &[0]);
            let qp = pi * self.state.engines;
            self.set
                .post(credit, qp, verbs::Posting::Chain)
                .map_err(|(source, _)| TransportError::Verbs {
                    op: format!(
                        "ibv_post_send(credit to rank {})",
                        self.state.peers[pi].rank
                    ),
                    device: self.device.clone(),
                    source,
                })?;
            if self.state.peers[pi].awaits_credit_ack() {
                self.state.credits_posted += 1;
                self.state.peers[pi].credit_pending = true;
            }
        }
        Ok(())
    }

    /// Posts the chains to peer `pi` if its credit for this iteration is in.
    fn post_granted(&mut self, pi: usize) -> Result<()> {
        if !self.state.book.may_post(pi) {
            return Ok(());
        }
        let (epoch, how) = (self.state.book.epoch(), self.state.post_mode);
        let s = &self.state;
        let variant = variant(s.memory, s.peers[pi].target, s.sets);
        for k in 0..self.state.peers[pi].chains.len() {
            let ci = self.state.peers[pi].chains[k];
            let c = &self.state.chains[ci];
            if c.posted {
                continue;
            }
            let id = c.ids[variant][(epoch % 2) as usize];
            let (len, qp) = (c.commands.len(), pi * self.state.engines + c.engine);
            let shape = u32::from(self.state.shape) & SHAPE_MASK;
            self.set
                .set_imm(id, epoch | shape << EPOCH_BITS, &[len - 1]);
            let t0 = Instant::now();
            let posted = self.set.post(id, qp, how.posting());
            let s = &mut self.state;
            s.stats.post_nanos += t0.elapsed().as_nanos() as u64;
            s.stats.post_calls += match how {
                PostMode::Chain => 1,
                PostMode::PerRequest => len as u64,
            };
            s.stats.posted_requests += len as u64;
            posted.map_err(|(source, index)| TransportError::Verbs {
                op: format!(
                    "ibv_post_send(chain of {len} writes to rank {} on engine {}, failed at request {index})",
                    s.peers[pi].rank, s.chains[ci].engine
                ),
                device: self.device.clone(),
                source,
            })?;
            s.chains[ci].posted = true;
        }
        Ok(())
    }

    /// Waits until this rank's writes have completed and every writer's data
    /// has arrived, or `deadline` (an instant, or a timeout from now) passes
    /// ([`TransportError::Timeout`], the
    /// exchange stays in flight and `wait` may be called again). A failed
    /// write, a dead peer or a protocol violation fails the object for good.
    ///
    /// # Errors
    ///
    /// [`TransportError::Timeout`](crate::TransportError::Timeout) at `deadline`; [`TransportError::State`](crate::TransportError::State) without an iteration in
    /// flight; [`TransportError::Completion`](crate::TransportError::Completion), [`TransportError::PeerDied`](crate::TransportError::PeerDied) or [`TransportError::Protocol`](crate::TransportError::Protocol) for a
    /// failed write, a dead peer or a peer out of step.
    pub fn wait(&mut self, deadline: impl Into<sode_job::Deadline>) -> Result<()> {
        self.state.lifecycle.require_in_flight("wait")?;
        let began = Instant::now();
        let mut backoff = Backoff::exchange();
        // Time this process is stopped (a suspended job) does not count.
        let mut deadline = deadline.into();
        loop {
            if backoff.blocks() && self.parks() {
                if self.park(deadline.at())? {
                    return Ok(());
                }
            } else {
                let pass = self.pass()?;
                if pass.complete {
                    return Ok(());
                }
                if pass.progressed {
                    backoff.reset();
                } else {
                    backoff.snooze();
                }
            }
            if deadline.passed() {
                return Err(TransportError::Timeout {
                    waited: began.elapsed().saturating_sub(deadline.stopped()),
                    outstanding: self.outstanding(),
                });
            }
        }
    }

    /// Whether [`park`](PersistentWrites::park) sleeps: the wait policy was
    /// `block` (`SODE_WAIT=block`) at build, so the queues report to a
    /// completion channel.
    pub fn parks(&self) -> bool {
        self.events.is_some()
    }

    /// [`test`](PersistentWrites::test), but when the pass finds nothing it
    /// sleeps on the completion channel until a queue reports, a peer's
    /// link closes or `until` passes (at most 50 ms at a time; 2 ms when a
    /// peer's link cannot be watched, so a dead peer is still noticed).
    /// For callers with only this exchange left to wait for. Returns
    /// whether the iteration is complete. Without a channel
    /// ([`parks`](PersistentWrites::parks) false) it only passes.
    ///
    /// # Errors
    ///
    /// As [`wait`](PersistentWrites::wait), but never a timeout.
    pub fn park(&mut self, until: Instant) -> Result<bool> {
        self.state.lifecycle.require_in_flight("park")?;
        let Some(events) = &self.events else {
            return self.test();
        };
        // Armed before the pass: a completion after it is reported, one
        // before it is reaped by it.
        let armed = std::iter::once(&self.recv_cq)
            .chain(&self.send_cqs)
            .try_for_each(|cq| events.arm(cq));
        if let Err(source) = armed {
            let e = self.verbs_error("ibv_req_notify_cq".into(), source);
            return Err(self.fail(e));
        }
        let pass = self.pass()?;
        if pass.complete || pass.progressed {
            return Ok(pass.complete);
        }
        // The links of the peers we wait for, watched while we sleep: when
        // every one is, a peer's death wakes us and the nap can be long.
        let mut links: [Option<BorrowedFd<'_>>; WATCH_MAX] = [None; WATCH_MAX];
        let mut watched = 0;
        let mut all_watched = true;
        for (pi, peer) in self.state.peers.iter().enumerate() {
            if !self.outstanding_with_peer(pi) {
                continue;
            }
            match (peer.closed_since, peer.link.liveness_fd()) {
                (None, Some(fd)) if watched < WATCH_MAX => {
                    links[watched] = Some(fd);
                    watched += 1;
                }
                _ => all_watched = false,
            }
        }
        let cap = if all_watched {
            LONG_NAP
        } else {
            LIVENESS_PERIOD
        };
        let nap = until.saturating_duration_since(Instant::now()).min(cap);
        if nap.is_zero() {
            return Ok(false);
        }
        let slept = match &self.events {
            Some(ev) => ev.sleep(nap, self.job.failure_fd(), links.iter().flatten().copied()),
            None => Ok(false),
        };
        match slept {
            // A peer's link closed (or a rank died somewhere): check the
            // peers at the next pass.
            Ok(true) => self.state.next_liveness = Instant::now(),
            Ok(false) => {}
            Err(source) => {
                let e = self.verbs_error("waiting on the completion channel".into(), source);
                return Err(self.fail(e));
            }
        }
        Ok(false)
    }

    /// One non-blocking pass of [`wait`](PersistentWrites::wait): reaps what
    /// has completed and returns whether the exchange is complete (then it
    /// is no longer in flight). For progressing several channels at once;
    /// allocates nothing unless it fails, and checks the peers' setup links
    /// (system calls) at most every 2 ms.
    ///
    /// # Errors
    ///
    /// As [`wait`](PersistentWrites::wait), but never a timeout.
    pub fn test(&mut self) -> Result<bool> {
        self.state.lifecycle.require_in_flight("test")?;
        Ok(self.pass()?.complete)
    }

    /// Reaps once, completes the iteration if it is done, and checks the
    /// peers when that is due; any error fails the object.
    fn pass(&mut self) -> Result<Pass> {
        let progressed = self.progress().map_err(|e| self.fail(e))?;
        if let Some(e) = self.deferred_due() {
            return Err(self.fail(e));
        }
        if self.state.done() {
            self.finish();
            return Ok(Pass {
                progressed,
                complete: true,
            });
        }
        let now = Instant::now();
        if now >= self.state.next_liveness {
            self.state.next_liveness = now + LIVENESS_PERIOD;
            if let Some(e) = self.check_peers(now) {
                return Err(self.fail(e));
            }
        }
        Ok(Pass {
            progressed,
            complete: false,
        })
    }

    fn finish(&mut self) {
        self.state.book.finish();
        self.state.lifecycle.complete();
    }

    /// What is still outstanding, per peer (for timeouts reported by callers
    /// that progress with [`test`](PersistentWrites::test)).
    pub fn outstanding_report(&self) -> String {
        self.outstanding()
    }

    /// [`wait`](PersistentWrites::wait) with a deadline `timeout` from now.
    ///
    /// # Errors
    ///
    /// As [`wait`](PersistentWrites::wait).
    pub fn wait_for(&mut self, timeout: Duration) -> Result<()> {
        self.wait(Instant::now() + timeout)
    }

    /// Reaps both completion queues once; true if anything was reaped.
    fn progress(&mut self) -> Result<bool> {
        let mut any = false;
        let n = self
            .recv_poller
            .poll(&self.recv_cq)
            .map_err(|e| self.poll_err("receive", e))?;
        for i in 0..n {
            let c = self.recv_poller.get(i);
            self.on_arrival(c)?;
            any = true;
        }
        for cq in 0..self.send_cqs.len() {
            let n = self
                .send_poller
                .poll(&self.send_cqs[cq])
                .map_err(|e| self.poll_err("send", e))?;
            for i in 0..n {
                let c = self.send_poller.get(i);
                self.on_send_completion(c)?;
                any = true;
            }
        }
        Ok(any)
    }

    fn poll_err(&self, which: &str, source: std::io::Error) -> TransportError {
        self.verbs_error(format!("ibv_poll_cq({which})"), source)
    }

    fn verbs_error(&self, op: String, source: std::io::Error) -> TransportError {
        TransportError::Verbs {
            op,
            device: self.device.clone(),
            source,
        }
    }

    /// The violation found at start, once this rank's writes to its peer
    /// have all completed.
    fn deferred_due(&mut self) -> Option<TransportError> {
        let s = &self.state;
        let pi = s.deferred.as_ref()?.0;
        if !s.peers[pi].chains.iter().all(|&ci| s.chains[ci].done) {
            return None;
        }
        let (pi, v) = self.state.deferred.take()?;
        Some(self.violation(pi, v))
    }

    fn violation(&self, pi: usize, v: ProtocolViolation) -> TransportError {
        TransportError::Protocol {
            peer: self.state.peers[pi].rank,
            why: v.to_string(),
        }
    }

    fn on_arrival(&mut self, c: Completion) -> Result<()> {
        let slot = c.wr_id as usize;
        let (pi, engine) = (slot / self.state.engines, slot % self.state.engines);
        if pi >= self.state.peers.len() {
            return Err(TransportError::UnexpectedCompletion {
                device: self.device.clone(),
                why: format!(
                    "a receive completion for queue-pair slot {slot}, which does not exist"
                ),
            });
        }
        if c.status != verbs::WC_SUCCESS {
            if c.status == verbs::WC_WR_FLUSH_ERR {
                // The queue pair is in error: its send side reports why.
                return Ok(());
            }
            return Err(self.completion_error(&c, "arrival", None, pi, engine, 0));
        }
        self.repost_receives(pi, engine, slot)?;
        let epoch = c.imm & EPOCH_MASK;
        let shape = ((c.imm >> EPOCH_BITS) & SHAPE_MASK) as u8;
        if c.imm & IMM_CREDIT != 0 && c.opcode == verbs::WC_RECV {
            // With one slot (the only windows that have staged or lent
            // twins) a credit comes only once this rank's writes of the
            // iteration before were all posted, so no post of those sees
            // it.
            let target = self.credit_target(pi, c.imm)?;
            self.state.peers[pi].target = target;
            let event = self.state.book.on_credit(pi, epoch);
            match event.map_err(|v| self.violation(pi, v))? {
                CreditEvent::PostNow => self.post_granted(pi)?,
                CreditEvent::Early => {}
            }
        } else if c.opcode == verbs::WC_RECV_RDMA_WITH_IMM {
            let arrival = self.state.book.on_data(pi, epoch, shape);
            arrival.map_err(|v| self.violation(pi, v))?;
        } else {
            return Err(TransportError::UnexpectedCompletion {
                device: self.device.clone(),
                why: format!(
                    "completion opcode {} from rank {} on engine {engine}",
                    c.opcode, self.state.peers[pi].rank
                ),
            });
        }
        Ok(())
    }

    /// Keeps at least half of each queue pair's receives posted.
    fn repost_receives(&mut self, pi: usize, engine: usize, slot: usize) -> Result<()> {
        let posted = &mut self.state.peers[pi].recv_posted[engine];
        *posted = posted.saturating_sub(1);
        if *posted > RECV_DEPTH / 2 {
            return Ok(());
        }
        let want = RECV_DEPTH - *posted;
        self.recv_rings[slot]
            .post(&self.set.qps()[slot], want)
            .map_err(|source| TransportError::Verbs {
                op: format!(
                    "ibv_post_recv(from rank {}, engine {engine})",
                    self.state.peers[pi].rank
                ),
                device: self.device.clone(),
                source,
            })?;
        self.state.peers[pi].recv_posted[engine] += want;
        Ok(())
    }

    fn on_send_completion(&mut self, c: Completion) -> Result<()> {
        if c.wr_id & CREDIT_TAG != 0 {
            let rank = (c.wr_id & !CREDIT_TAG) as usize;
            let Some(pi) = self.state.peer_index(rank) else {
                return Err(self.unknown_request(&c));
            };
            if c.status != verbs::WC_SUCCESS {
                return Err(self.completion_error(&c, "credit", None, pi, 0, 0));
            }
            if self.state.peers[pi].awaits_credit_ack() {
                self.state.credits_done += 1;
                self.state.peers[pi].credit_pending = false;
            }
            return Ok(());
        }
        let command = c.wr_id as usize;
        let Some(&w) = self.state.writes.get(command) else {
            return Err(self.unknown_request(&c));
        };
        let Some(pi) = self.state.peer_index(w.peer) else {
            return Err(self.unknown_request(&c));
        };
        if c.status != verbs::WC_SUCCESS {
            let what = format!("RDMA write command #{command}");
            return Err(self.completion_error(&c, &what, Some(command), pi, w.engine, w.len));
        }
        // Only the last request of each chain is signalled.
        if let Some(ci) = self.state.ends_chain[command] {
            let chain = &mut self.state.chains[ci];
            if chain.posted && !chain.done {
                chain.done = true;
                self.state.chains_done += 1;
            }
        }
        Ok(())
    }

    fn unknown_request(&self, c: &Completion) -> TransportError {
        TransportError::UnexpectedCompletion {
            device: self.device.clone(),
            why: format!(
                "a completion for request {:#x}, which this exchange never posted",
                c.wr_id
            ),
        }
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
            peer: self.state.peers[pi].rank,
            engine,
            bytes,
            status: verbs::status_str(c.status),
            status_code: c.status,
            vendor_err: c.vendor_err,
            hint: hint.into(),
        }
    }

    /// A peer whose setup link closed while work with it stayed outstanding
    /// for longer than [`PEER_GRACE`]: it freed the exchange, exited or died.
    fn check_peers(&mut self, now: Instant) -> Option<TransportError> {
        for pi in 0..self.state.peers.len() {
            if !self.outstanding_with_peer(pi) {
                continue;
            }
            let peer = &mut self.state.peers[pi];
            let since = match peer.closed_since {
                Some(t) => t,
                None if peer.link.closed() => *peer.closed_since.insert(now),
                None => continue,
            };
            if now.duration_since(since) >= PEER_GRACE {
                return Some(TransportError::PeerDied {
                    peer: self.state.peers[pi].rank,
                    outstanding: self.outstanding(),
                });
            }
        }
        None
    }

    /// Whether anything is outstanding with peer `pi` (allocates nothing).
    fn outstanding_with_peer(&self, pi: usize) -> bool {
        let s = &self.state;
        s.peers[pi].chains.iter().any(|&ci| !s.chains[ci].done)
            || s.peers[pi].credit_pending
            || s.book.arrivals_missing(pi) > 0
    }

    /// What is still outstanding with peer `pi`, if anything.
    fn describe_outstanding(&self, pi: usize) -> Option<String> {
        let s = &self.state;
        let mut parts = Vec::new();
        let mine = || s.peers[pi].chains.iter().map(|&ci| &s.chains[ci]);
        let unposted = mine().filter(|c| !c.posted).count();
        if unposted > 0 {
            parts.push(format!(
                "its credit for iteration {} ({unposted} chains not posted)",
                s.book.epoch()
            ));
        }
        let unfinished = mine().filter(|c| c.posted && !c.done).count();
        if unfinished > 0 {
            parts.push(format!(
                "{unfinished} chains to it posted but not completed"
            ));
        }
        if s.peers[pi].credit_pending {
            parts.push("its credit not completed".into());
        }
        let missing = s.book.arrivals_missing(pi);
        if missing > 0 {
            parts.push(format!(
                "data from {missing} of {} engines",
                s.peers[pi].arrivals
            ));
        }
        (!parts.is_empty()).then(|| format!("rank {}: {}", s.peers[pi].rank, parts.join(", ")))
    }

    fn outstanding(&self) -> String {
        let s = &self.state;
        let mut parts: Vec<String> = (0..s.peers.len())
            .filter_map(|pi| self.describe_outstanding(pi))
            .collect();
        let posted = s.chains.iter().filter(|c| c.posted).count();
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
        if self.state.lifecycle.fail(&e) {
            self.set.stop();
        }
        e
    }

    /// Whether an earlier error failed the object.
    pub fn failed(&self) -> bool {
        self.state.lifecycle.is_failed()
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.state.me
    }

    /// The peers this exchange is connected to (writers and targets), in
    /// rank order.
    pub fn peers(&self) -> Vec<usize> {
        self.state.peers.iter().map(|p| p.rank).collect()
    }

    /// Counters since the object was built.
    pub fn stats(&self) -> ExchangeStats {
        self.state.stats
    }

    /// The number of write commands in the plan.
    pub fn commands(&self) -> usize {
        self.state.writes.len()
    }

    /// Makes command `command` write its first `bytes` bytes from the next
    /// start on (at most the bytes it was planned with; the rest of its
    /// target keeps what it held), so that an exchange that moves less
    /// than its messages hold (some fields, fewer layers) puts less on the
    /// wire. A command of no bytes still carries its chain's immediate.
    /// Only a command that reads one run (not a gather list) can be
    /// shortened.
    ///
    /// # Errors
    ///
    /// [`TransportError::State`](crate::TransportError::State) while an
    /// iteration is in flight or after a failure;
    /// [`TransportError::InvalidCommand`](crate::TransportError::InvalidCommand)
    /// for a command that does not exist, gathers several runs (unless
    /// built on lent memory with a staged source), or was planned with
    /// fewer bytes. A command built on lent memory and carried short makes
    /// every start that is not staged fail ([`set_memory`](Self::set_memory)).
    pub fn carry(&mut self, command: usize, bytes: usize) -> Result<()> {
        self.state.lifecycle.require_idle("carry")?;
        let invalid = |why: String| TransportError::InvalidCommand { command, why };
        let Some(Some((chain, at))) = self.state.placed.get(command).copied() else {
            return Err(invalid(format!(
                "the exchange has {} commands, in chains",
                self.state.writes.len()
            )));
        };
        let len = u32::try_from(bytes)
            .map_err(|_| invalid(format!("{bytes} bytes do not fit one request")))?;
        // Every distinct chain the command is in (no allocation: a start
        // on other fields may call this); for a command built on lent
        // memory, only the chains of staged starts, which read it from its
        // staged source in one run: those reading the caller's memory keep
        // it whole (a gather list cannot be cut, and a shortened message's
        // bytes are not the caller's memory's at that place).
        let lent = self.state.lent.get(command).copied().unwrap_or(false);
        let choices = self.state.sets + 1;
        let ids = self.state.chains[chain].ids.as_flattened();
        for (k, &id) in ids.iter().enumerate() {
            let reads_lent_memory = lent && (k / 2) % choices != self.state.sets;
            if !reads_lent_memory && !ids[..k].contains(&id) {
                self.set.set_len(id, at, len).map_err(invalid)?;
            }
        }
        let short = lent && bytes < self.state.writes[command].len;
        let s = &mut self.state;
        if std::mem::replace(&mut s.short[command], short) != short {
            s.lent_short = if short {
                s.lent_short + 1
            } else {
                s.lent_short - 1
            };
        }
        Ok(())
    }

    /// Makes the starts that follow read and land in `memory`: a lent
    /// set (the writes' [`Twin`](crate::Twin)s in it; set 0 as built), or
    /// staged: the writes read from their staged sources, and the credits
    /// ask each writer to land in its staged targets ([`crate::Staged`]).
    /// Both sides are chosen per start, by each rank alone: a credit names
    /// the set its sender receives in. The layer above names the set that
    /// holds a start's arrays, and stages a start on memory no set holds,
    /// packing and unpacking through the staged buffers instead.
    ///
    /// # Errors
    ///
    /// [`TransportError::State`](crate::TransportError::State) while an
    /// iteration is in flight or after a failure;
    /// [`TransportError::InvalidSetting`](crate::TransportError::InvalidSetting)
    /// for a set that was not lent.
    pub fn set_memory(&mut self, memory: crate::StartMemory) -> Result<()> {
        self.state.lifecycle.require_idle("set_memory")?;
        self.state.memory = match memory {
            crate::StartMemory::Staged => self.state.sets,
            crate::StartMemory::Set(k) if k < self.state.sets => k,
            crate::StartMemory::Set(k) => {
                return Err(TransportError::InvalidSetting {
                    name: "lent set".into(),
                    value: k.to_string(),
                    why: format!(
                        "{} sets were lent at build (0 to {})",
                        self.state.sets,
                        self.state.sets - 1
                    ),
                })
            }
        };
        Ok(())
    }

    /// What peer `pi`'s credit with immediate `imm` asks to land in: a
    /// lent set of this exchange, or staged.
    fn credit_target(&self, pi: usize, imm: u32) -> Result<usize> {
        let sets = self.state.sets;
        if imm & IMM_STAGED != 0 {
            return Ok(sets);
        }
        let set = ((imm >> IMM_SET_SHIFT) & IMM_SET_MASK) as usize;
        if set >= sets {
            return Err(TransportError::Protocol {
                peer: self.state.peers[pi].rank,
                why: format!(
                    "its credit asks for lent set {set}, but {sets} sets were lent here: the ranks lent different numbers of sets"
                ),
            });
        }
        Ok(set)
    }

    /// Marks the starts that follow as moving part `shape` of the exchange
    /// (7 bits; 0 as built): each data write carries it, and a receiver
    /// whose own start has another shape fails the iteration
    /// ([`TransportError::Protocol`](crate::TransportError::Protocol),
    /// naming the writer) rather than take data laid out otherwise. The
    /// layer above sets it from what a start moves (its fields, its depth),
    /// alike on every rank.
    ///
    /// # Errors
    ///
    /// [`TransportError::State`](crate::TransportError::State) while an
    /// iteration is in flight or after a failure.
    pub fn set_shape(&mut self, shape: u8) -> Result<()> {
        self.state.lifecycle.require_idle("set_shape")?;
        self.state.shape = shape & SHAPE_MASK as u8;
        Ok(())
    }

    /// A buffer, to fill (or read) between exchanges.
    ///
    /// # Errors
    ///
    /// [`TransportError::State`](crate::TransportError::State) while an iteration is in flight; [`TransportError::NoSuch`](crate::TransportError::NoSuch) for an
    /// unknown id; [`TransportError::LentMemory`](crate::TransportError::LentMemory) for memory the caller lent.
    pub fn buffer_mut(&mut self, id: BufferId) -> Result<&mut [u8]> {
        self.state.lifecycle.require_idle("buffer_mut")?;
        let count = self.set.buffers().len();
        let b = self
            .set
            .buffers_mut()
            .get_mut(id.0)
            .ok_or(TransportError::NoSuch {
                op: "buffer_mut",
                what: "buffer",
                index: id.0,
                count,
            })?;
        b.as_mut_slice().ok_or(TransportError::LentMemory {
            op: "buffer_mut",
            buffer: id.0,
        })
    }

    /// A buffer, between exchanges.
    ///
    /// # Errors
    ///
    /// As [`buffer_mut`](PersistentWrites::buffer_mut).
    pub fn buffer(&self, id: BufferId) -> Result<&[u8]> {
        self.state.lifecycle.require_idle("buffer")?;
        let count = self.set.buffers().len();
        let b = self.set.buffers().get(id.0).ok_or(TransportError::NoSuch {
            op: "buffer",
            what: "buffer",
            index: id.0,
            count,
        })?;
        b.as_slice().ok_or(TransportError::LentMemory {
            op: "buffer",
            buffer: id.0,
        })
    }

    fn window_range(
        &self,
        op: &'static str,
        id: WindowId,
    ) -> Result<(usize, std::ops::Range<usize>)> {
        self.state.lifecycle.require_idle(op)?;
        let w = self.windows.get(id.0).ok_or(TransportError::NoSuch {
            op,
            what: "window",
            index: id.0,
            count: self.windows.len(),
        })?;
        // A two-slot window: the slot of the last iteration.
        let at = w.offset + (self.state.book.epoch() as usize % w.slots) * w.len;
        Ok((w.buffer.0, at..at + w.len))
    }

    /// A receive window (its range of its buffer, the slot of the last
    /// iteration for a two-slot window), to read after `wait`.
    ///
    /// # Errors
    ///
    /// [`TransportError::State`](crate::TransportError::State) while an iteration is in flight; [`TransportError::NoSuch`](crate::TransportError::NoSuch) for an
    /// unknown id; [`TransportError::LentMemory`](crate::TransportError::LentMemory) for a window in lent memory.
    pub fn window(&self, id: WindowId) -> Result<&[u8]> {
        let (b, range) = self.window_range("window", id)?;
        let all = self.set.buffers()[b]
            .as_slice()
            .ok_or(TransportError::LentMemory {
                op: "window",
                buffer: b,
            })?;
        Ok(&all[range])
    }

    /// A receive window, writable (e.g. to clear it) between exchanges.
    ///
    /// # Errors
    ///
    /// As [`window`](PersistentWrites::window).
    pub fn window_mut(&mut self, id: WindowId) -> Result<&mut [u8]> {
        let (b, range) = self.window_range("window_mut", id)?;
        let all = self.set.buffers_mut()[b]
            .as_mut_slice()
            .ok_or(TransportError::LentMemory {
                op: "window_mut",
                buffer: b,
            })?;
        Ok(&mut all[range])
    }

    /// Where peer `peer` told this rank to write into its window `window`
    /// (address, rkey): for tests that try a key on the wrong connection.
    #[doc(hidden)]
    pub fn offered_window(&self, peer: usize, window: WindowId) -> Option<(u64, u32)> {
        self.offered
            .get(&peer)?
            .iter()
            .find(|w| w.id == window.0)
            .map(|w| (w.addr, w.rkey))
    }

    /// Memory registrations made for this exchange: one per source buffer
    /// and peer, and one per distinct window range and writer.
    pub fn registrations(&self) -> usize {
        self.set.buffers().iter().map(|b| b.registrations()).sum()
    }

    /// Queue pairs this exchange holds: one per engine and peer.
    pub fn queue_pairs(&self) -> usize {
        self.set.qps().len()
    }
}
