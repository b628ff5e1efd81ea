//! The pattern every exchange reduces to: per peer, at most one message sent
//! and one received each iteration. [`LinkExchange`] decides once per link
//! how to reach the peer (a copy within this rank, shared memory on this
//! node, RDMA to another), builds the channels, and runs them through one
//! progress loop. [`HaloExchange`](crate::HaloExchange) packs a Cartesian
//! decomposition's regions into its messages; the C ABI packs the user's
//! fields.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sode_job::{Backoff, Lifecycle, World};
use sode_scheduler::Algorithm;

use crate::channel::{Channel, Locality, ShmChannel};
use crate::error::{HaloError, Result};
use crate::exchange::{Model, SyncMode, Transport};

/// One message: bytes per iteration, and a tag that tells it apart from the
/// other messages between the same two ranks (the sender's send tag is the
/// receiver's receive tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    /// Bytes per iteration (at least 1).
    pub len: usize,
    /// The tag.
    pub tag: u32,
}

/// What this rank exchanges with one peer: a message sent, one received, or
/// both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// The peer's rank (this rank itself for a periodic axis of one
    /// process: the message is copied within the rank).
    pub peer: usize,
    /// What this rank sends it.
    pub send: Option<Message>,
    /// What this rank receives from it.
    pub recv: Option<Message>,
    /// The direction to the peer in the process grid, each axis -1, 0 or
    /// +1, when there is one: the RDMA scheduler routes puts by it.
    pub offset: Vec<i32>,
    /// How errors and reports name it (`rank 3 (NE)`).
    pub name: String,
}

/// Where one side of a link travels.
#[derive(Debug, Clone, Copy)]
enum Route {
    /// Message `message` of channel `channel`.
    Channel { channel: usize, message: usize },
    /// A buffer of this rank: `self_bufs[buffer]`.
    Local { buffer: usize },
}

/// Builds a [`LinkExchange`]; collective over the job.
#[derive(Debug)]
pub struct LinkExchangeBuilder<'w> {
    world: &'w World,
    links: Vec<Link>,
    transport: Transport,
    engines: usize,
    algorithm: Algorithm,
    timeout: Duration,
    sync: SyncMode,
    model: Model,
}

impl<'w> LinkExchangeBuilder<'w> {
    /// A builder for `links` over the ranks of `world`.
    pub fn new(world: &'w World, links: Vec<Link>) -> Self {
        LinkExchangeBuilder {
            world,
            links,
            transport: Transport::Auto,
            engines: 2,
            algorithm: Algorithm::Auto,
            timeout: Duration::from_secs(60),
            sync: SyncMode::Pairwise,
            model: Model::Calibrated,
        }
    }

    /// Replaces the links (a builder configured before its links are known).
    pub(crate) fn with_links(mut self, links: Vec<Link>) -> Self {
        self.links = links;
        self
    }

    /// The machine model for scheduling (default: calibrated on this device).
    pub fn model(mut self, m: Model) -> Self {
        self.model = m;
        self
    }

    /// Pairwise credits (default) or pseudo-collective barriers.
    pub fn sync(mut self, s: SyncMode) -> Self {
        self.sync = s;
        self
    }

    /// Which channels (default [`Transport::Auto`]).
    pub fn transport(mut self, t: Transport) -> Self {
        self.transport = t;
        self
    }

    /// RDMA queue pairs per peer (default 2).
    pub fn engines(mut self, e: usize) -> Self {
        self.engines = e;
        self
    }

    /// The scheduling algorithm for the RDMA writes (default `auto`).
    pub fn algorithm(mut self, a: Algorithm) -> Self {
        self.algorithm = a;
        self
    }

    /// How long setup may wait for the other ranks (default 60 s).
    pub fn setup_timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// How rank `a` reaches rank `b`: the same answer on every rank.
    fn locality(&self, a: usize, b: usize) -> Locality {
        locality(self.world, self.transport, a, b)
    }

    fn check(&self) -> Result<()> {
        let me = self.world.rank();
        let size = self.world.size();
        let usage = |why: String| Err(HaloError::Usage { op: "build", why });
        let mut sends = HashMap::new();
        let mut recvs = HashMap::new();
        for (i, l) in self.links.iter().enumerate() {
            if l.peer >= size {
                return usage(format!(
                    "link {i} ({}) names rank {}, but the job has {size} ranks",
                    l.name, l.peer
                ));
            }
            if l.send.is_none() && l.recv.is_none() {
                return usage(format!("link {i} ({}) neither sends nor receives", l.name));
            }
            for m in l.send.iter().chain(&l.recv) {
                if m.len == 0 {
                    return usage(format!("link {i} ({}) has a message of 0 bytes", l.name));
                }
            }
            if let Some(m) = l.send {
                if let Some(j) = sends.insert((l.peer, m.tag), i) {
                    return usage(format!(
                        "links {j} and {i} both send tag {} to rank {}",
                        m.tag, l.peer
                    ));
                }
            }
            if let Some(m) = l.recv {
                if let Some(j) = recvs.insert((l.peer, m.tag), i) {
                    return usage(format!(
                        "links {j} and {i} both receive tag {} from rank {}",
                        m.tag, l.peer
                    ));
                }
            }
            if l.peer == me {
                continue;
            }
            if self.transport == Transport::Shm && !self.world.same_node(l.peer) {
                return Err(HaloError::Locality {
                    rank: l.peer,
                    direction: l.name.clone(),
                    why: "it runs on another node, and the transport is shm: use auto or rdma"
                        .into(),
                });
            }
            if cfg!(not(feature = "rdma")) && self.locality(me, l.peer) == Locality::Rdma {
                return Err(HaloError::Locality {
                    rank: l.peer,
                    direction: l.name.clone(),
                    why: "it needs RDMA, and this sode was built without the rdma feature: run the job on one node, or build with --features rdma".into(),
                });
            }
        }
        Ok(())
    }

    /// Routes the links that stay within this rank: each receive to the
    /// buffer of the send with its tag.
    fn local_routes(
        &self,
        sends: &mut [Option<Route>],
        recvs: &mut [Option<Route>],
    ) -> Result<usize> {
        let me = self.world.rank();
        let mut buffers = 0;
        let mut by_tag = HashMap::new();
        for (i, l) in self.links.iter().enumerate().filter(|(_, l)| l.peer == me) {
            if let Some(m) = l.send {
                by_tag.insert(m.tag, (buffers, m.len));
                sends[i] = Some(Route::Local { buffer: buffers });
                buffers += 1;
            }
        }
        for (i, l) in self.links.iter().enumerate().filter(|(_, l)| l.peer == me) {
            if let Some(m) = l.recv {
                match by_tag.get(&m.tag) {
                    Some(&(buffer, len)) if len == m.len => recvs[i] = Some(Route::Local { buffer }),
                    found => {
                        return Err(HaloError::Usage {
                            op: "build",
                            why: format!(
                                "link {i} ({}) receives {} bytes with tag {} from this rank itself, but this rank sends {}",
                                l.name,
                                m.len,
                                m.tag,
                                found.map_or("no message with that tag".into(), |f| format!("{} bytes with it", f.1))
                            ),
                        })
                    }
                }
            }
        }
        Ok(buffers)
    }

    /// Decides each link's channel, sets up shared memory with the peers on
    /// this node and RDMA (device, keys, scheduled chains) with the others.
    /// Collective: every rank of the job calls it.
    pub fn build(self) -> Result<LinkExchange> {
        self.check()?;
        let n = self.links.len();
        let (mut sends, mut recvs) = (vec![None; n], vec![None; n]);
        let locals = self.local_routes(&mut sends, &mut recvs)?;
        let mut self_bufs = vec![Vec::new(); locals];
        for (l, r) in self.links.iter().zip(&sends) {
            if let (Some(Route::Local { buffer }), Some(m)) = (r, l.send) {
                self_bufs[*buffer] = vec![0u8; m.len];
            }
        }
        let mut channels: Vec<Box<dyn Channel>> = Vec::new();
        let shm = self.members(Locality::Shm);
        if !shm.is_empty() {
            let peers = shm.iter().map(|&i| {
                let l = &self.links[i];
                let mut p = sode_shm::Peer::new(l.peer);
                if let Some(m) = l.send {
                    p = p.send(m.len, m.tag);
                }
                if let Some(m) = l.recv {
                    p = p.recv(m.len, m.tag);
                }
                p
            });
            let names = self.names(&shm);
            let mut ctx =
                sode_shm::Context::from_world(self.world).map_err(|source| HaloError::Shm {
                    neighbours: names.clone(),
                    source: Box::new(source),
                })?;
            let ch = ShmChannel::build(&mut ctx, peers.collect(), names, self.timeout)?;
            for (message, &i) in shm.iter().enumerate() {
                let route = Route::Channel {
                    channel: channels.len(),
                    message,
                };
                sends[i] = self.links[i].send.map(|_| route);
                recvs[i] = self.links[i].recv.map(|_| route);
            }
            channels.push(Box::new(ch));
        }
        let summary = self.build_rdma(&mut sends, &mut recvs, &mut channels)?;
        Ok(LinkExchange {
            rank: self.world.rank(),
            sends,
            recvs,
            self_bufs,
            done: vec![false; channels.len()],
            channels,
            lifecycle: Lifecycle::Idle,
            plan_summary: summary,
            barrier: (self.sync == SyncMode::PseudoCollective).then(|| self.world.clone()),
            timeout: self.timeout,
            links: self.links,
        })
    }

    /// The links whose peer the locality `l` reaches.
    fn members(&self, l: Locality) -> Vec<usize> {
        let me = self.world.rank();
        (0..self.links.len())
            .filter(|&i| self.links[i].peer != me && self.locality(me, self.links[i].peer) == l)
            .collect()
    }

    /// `rank 1 (E), rank 3 (N)`: the links a channel carries, for errors.
    fn names(&self, members: &[usize]) -> String {
        members
            .iter()
            .map(|&i| self.links[i].name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    #[cfg(not(feature = "rdma"))]
    fn build_rdma(
        &self,
        _: &mut [Option<Route>],
        _: &mut [Option<Route>],
        _: &mut Vec<Box<dyn Channel>>,
    ) -> Result<Option<String>> {
        Ok(None)
    }

    /// The RDMA channel, if any rank of the job needs one; its plan's
    /// summary.
    #[cfg(feature = "rdma")]
    fn build_rdma(
        &self,
        sends: &mut [Option<Route>],
        recvs: &mut [Option<Route>],
        channels: &mut Vec<Box<dyn Channel>>,
    ) -> Result<Option<String>> {
        use crate::channel::{RdmaChannel, RdmaRecv, RdmaSend, RdmaSettings};
        if !self.job_uses_rdma() {
            return Ok(None);
        }
        let members = self.members(Locality::Rdma);
        // Each receiver numbers its windows in the order of its RDMA
        // receives; every rank learns every numbering.
        let mine: Vec<(usize, u32)> = members
            .iter()
            .filter_map(|&i| self.links[i].recv.map(|m| (self.links[i].peer, m.tag)))
            .collect();
        let windows = self.gather_windows(&mine)?;
        if members.is_empty() {
            return Ok(None);
        }
        let me = self.world.rank();
        let mut rdma_sends = Vec::new();
        let mut rdma_recvs = Vec::new();
        for &i in &members {
            let l = &self.links[i];
            if let Some(m) = l.send {
                let target = windows[l.peer]
                    .iter()
                    .position(|&w| w == (me, m.tag))
                    .ok_or_else(|| HaloError::Usage {
                        op: "build",
                        why: format!(
                            "rank {} does not expect a message with tag {} from rank {me} ({}): the two ranks' links disagree",
                            l.peer, m.tag, l.name
                        ),
                    })?;
                sends[i] = Some(Route::Channel {
                    channel: channels.len(),
                    message: rdma_sends.len(),
                });
                rdma_sends.push(RdmaSend {
                    peer: l.peer,
                    len: m.len,
                    target,
                    offset: l.offset.clone(),
                });
            }
            if let Some(m) = l.recv {
                recvs[i] = Some(Route::Channel {
                    channel: channels.len(),
                    message: rdma_recvs.len(),
                });
                rdma_recvs.push(RdmaRecv {
                    peer: l.peer,
                    len: m.len,
                });
            }
        }
        let settings = RdmaSettings {
            engines: self.engines,
            algorithm: self.algorithm,
            model: self.model,
            timeout: self.timeout,
        };
        let ch = RdmaChannel::build(
            self.world,
            &rdma_sends,
            &rdma_recvs,
            &settings,
            self.names(&members),
        )?;
        let summary = ch.summary().to_string();
        channels.push(Box::new(ch));
        Ok(Some(summary))
    }

    /// Whether any pair of ranks of the job would talk over RDMA (the same
    /// answer on every rank, so all of them join the window allgather).
    #[cfg(feature = "rdma")]
    fn job_uses_rdma(&self) -> bool {
        let size = self.world.size();
        match self.transport {
            Transport::Shm => false,
            Transport::Rdma => size > 1,
            Transport::Auto => (1..size).any(|r| self.world.node_of(r) != self.world.node_of(0)),
        }
    }

    /// Every rank's RDMA receives, `(from, tag)` in window order.
    #[cfg(feature = "rdma")]
    fn gather_windows(&self, mine: &[(usize, u32)]) -> Result<Vec<Vec<(usize, u32)>>> {
        let body = serde_json::to_vec(mine).map_err(|e| HaloError::Usage {
            op: "build",
            why: e.to_string(),
        })?;
        let all = self
            .world
            .allgather(&body, self.timeout)
            .map_err(|source| HaloError::Barrier {
                source: Box::new(source),
            })?;
        all.iter()
            .enumerate()
            .map(|(r, b)| {
                serde_json::from_slice(b).map_err(|e| HaloError::Usage {
                    op: "build",
                    why: format!("rank {r} sent an unreadable window list: {e}"),
                })
            })
            .collect()
    }
}

/// How rank `a` reaches rank `b` under `transport`.
pub(crate) fn locality(world: &World, transport: Transport, a: usize, b: usize) -> Locality {
    if a == b {
        return Locality::SelfCopy;
    }
    match transport {
        Transport::Shm => Locality::Shm,
        Transport::Rdma => Locality::Rdma,
        Transport::Auto if world.node_of(a) == world.node_of(b) => Locality::Shm,
        Transport::Auto => Locality::Rdma,
    }
}

/// A persistent exchange of messages: fill [`send_buf`](Self::send_buf)s,
/// [`start`](Self::start), [`wait`](Self::wait) (or poll
/// [`test`](Self::test)), then read the [`recv_buf`](Self::recv_buf)s.
#[derive(Debug)]
pub struct LinkExchange {
    rank: usize,
    links: Vec<Link>,
    sends: Vec<Option<Route>>,
    recvs: Vec<Option<Route>>,
    self_bufs: Vec<Vec<u8>>,
    channels: Vec<Box<dyn Channel>>,
    /// Per channel: complete this iteration (reused, never reallocated).
    done: Vec<bool>,
    lifecycle: Lifecycle,
    plan_summary: Option<String>,
    /// The job, for the barriers of the pseudo-collective mode.
    barrier: Option<World>,
    timeout: Duration,
}

impl LinkExchange {
    /// A builder for `links` over the ranks of `world`.
    pub fn builder(world: &World, links: Vec<Link>) -> LinkExchangeBuilder<'_> {
        LinkExchangeBuilder::new(world, links)
    }

    /// The links, in the order they were given.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How each link's peer is reached, in the links' order.
    pub fn localities(&self) -> Vec<Locality> {
        self.sends
            .iter()
            .zip(&self.recvs)
            .map(|(s, r)| match s.or(*r) {
                Some(Route::Channel { channel, .. }) => self.channels[channel].locality(),
                _ => Locality::SelfCopy,
            })
            .collect()
    }

    /// The RDMA schedule, if any link is reached over RDMA.
    pub fn plan_summary(&self) -> Option<&str> {
        self.plan_summary.as_deref()
    }

    fn no_message(&self, op: &'static str, link: usize, what: &str) -> HaloError {
        HaloError::Usage {
            op,
            why: match self.links.get(link) {
                Some(l) => format!("link {link} ({}) {what}", l.name),
                None => format!("there is no link {link} ({} links)", self.links.len()),
            },
        }
    }

    /// Link `link`'s send buffer, to fill before [`start`](Self::start).
    pub fn send_buf(&mut self, link: usize) -> Result<&mut [u8]> {
        self.lifecycle.require_idle("send_buf")?;
        match self.sends.get(link).copied().flatten() {
            Some(Route::Local { buffer }) => Ok(&mut self.self_bufs[buffer]),
            Some(Route::Channel { channel, message }) => self.channels[channel].send_buf(message),
            None => Err(self.no_message("send_buf", link, "sends nothing")),
        }
    }

    /// Link `link`'s receive buffer, complete after [`wait`](Self::wait).
    pub fn recv_buf(&self, link: usize) -> Result<&[u8]> {
        self.lifecycle.require_idle("recv_buf")?;
        match self.recvs.get(link).copied().flatten() {
            Some(Route::Local { buffer }) => Ok(&self.self_bufs[buffer]),
            Some(Route::Channel { channel, message }) => self.channels[channel].recv_buf(message),
            None => Err(self.no_message("recv_buf", link, "receives nothing")),
        }
    }

    fn job_barrier(&mut self) -> Result<()> {
        if let Some(w) = &self.barrier {
            w.barrier(self.timeout)
                .map_err(|source| HaloError::Barrier {
                    source: Box::new(source),
                })?;
        }
        Ok(())
    }

    /// Starts an iteration on every channel; never blocks (but for the
    /// barrier of the pseudo-collective mode).
    pub fn start(&mut self) -> Result<()> {
        self.lifecycle.require_idle("start")?;
        self.job_barrier()?;
        for c in 0..self.channels.len() {
            if let Err(e) = self.channels[c].start() {
                self.lifecycle.fail(&e);
                return Err(e);
            }
        }
        self.done.iter_mut().for_each(|d| *d = false);
        self.lifecycle.start();
        Ok(())
    }

    /// One non-blocking pass over every channel: true once every message
    /// has arrived. Allocates nothing unless it fails.
    pub fn test(&mut self) -> Result<bool> {
        self.lifecycle.require_in_flight("test")?;
        let mut all = true;
        for (c, done) in self.channels.iter_mut().zip(self.done.iter_mut()) {
            if !*done {
                match c.test() {
                    Ok(d) => *done = d,
                    Err(e) => {
                        self.lifecycle.fail(&e);
                        return Err(e);
                    }
                }
            }
            all &= *done;
        }
        Ok(all)
    }

    /// Progresses every channel until every message has arrived (or
    /// `deadline` passes: [`HaloError::Timeout`], after which `wait` may be
    /// called again).
    pub fn wait(&mut self, deadline: Instant) -> Result<()> {
        self.lifecycle.require_in_flight("wait")?;
        // Every channel progresses in one loop: a rank never sits in one
        // while a peer waits for it in another.
        let mut backoff = Backoff::exchange();
        while !self.test()? {
            if Instant::now() >= deadline {
                let outstanding: Vec<String> = self
                    .channels
                    .iter()
                    .zip(&self.done)
                    .filter(|(_, &d)| !d)
                    .map(|(c, _)| c.outstanding())
                    .collect();
                return Err(HaloError::Timeout {
                    outstanding: outstanding.join("; "),
                });
            }
            backoff.snooze();
        }
        self.lifecycle.complete();
        self.job_barrier()
    }

    /// Whether an iteration is in flight (started, not yet waited for).
    pub fn in_flight(&self) -> bool {
        matches!(self.lifecycle, Lifecycle::InFlight)
    }
}
