//! A persistent all-to-all: every rank sends every rank (itself included)
//! one block of the same size each iteration, over the channels of the
//! halo exchange (shared memory on the node; RDMA or TCP between nodes,
//! chosen per peer as for halos). It is a [`LinkExchange`] with one link
//! per peer, listed in the order of the schedule's phases (shift: at phase
//! k a rank sends to rank + k; or the contention-free phases of a
//! Latin-square fat-tree), which is the order the channels post them in.

use sode_job::Deadline;
use std::time::Duration;

use sode_job::World;

use crate::bounded::BoundedExchange;
use crate::error::{HaloError, Result};
use crate::links::{Link, LinkExchange, Message};
use crate::settings::Transport;

/// Builds an [`AllToAll`]; collective over the job.
#[derive(Debug)]
pub struct AllToAllBuilder<'w> {
    world: &'w World,
    block: usize,
    transport: Transport,
    engines: usize,
    timeout: Duration,
    /// The Latin-square fat-tree (n, k, m) the ranks sit on, in order.
    latin: Option<(usize, usize, usize)>,
    /// At most this many connections per rank, the rest forwarded.
    bound: Option<usize>,
}

impl AllToAllBuilder<'_> {
    /// The ranks are, in order, the n k m servers of a partial Latin-square
    /// fat-tree (`sode-sched alltoall`): each rank then sends in the order
    /// of the contention-free schedule's phases rather than by shift.
    pub fn latin_square(mut self, n: usize, k: usize, m: usize) -> Self {
        self.latin = Some((n, k, m));
        self
    }

    /// The peers this rank sends to, phase by phase.
    fn peer_order(&self) -> Result<Vec<usize>> {
        let (size, me) = (self.world.size(), self.world.rank());
        let Some((n, k, m)) = self.latin else {
            // Phase k: send to me + k, receive from me - k.
            return Ok((0..size).map(|k| (me + k) % size).collect());
        };
        let bad = |why: String| HaloError::Usage {
            op: "AllToAll::latin_square",
            why,
        };
        let schedule = sode_scheduler::topology::Schedule::partial(
            n,
            k,
            m,
            sode_scheduler::topology::PartialRule::Geometric,
        )
        .map_err(|e| bad(e.to_string()))?;
        let servers = schedule.servers();
        if servers.len() != size {
            return Err(bad(format!(
                "n k m = {n} x {k} x {m} = {} servers for a job of {size} ranks: they must match",
                servers.len()
            )));
        }
        let mine = servers[me] as u32;
        let order: Vec<usize> = schedule
            .phases()
            .filter_map(|phase| phase.into_iter().find(|r| r.src == mine))
            .filter_map(|r| servers.iter().position(|&s| s as u32 == r.dst))
            .collect();
        let mut seen = vec![false; size];
        order.iter().for_each(|&p| seen[p] = true);
        if order.len() != size || seen.contains(&false) {
            return Err(bad(format!(
                "the schedule's phases do not send rank {me} to every rank once ({order:?})"
            )));
        }
        Ok(order)
    }
    /// At most `bound` connections per rank: the blocks of the other pairs
    /// are forwarded by the ranks between ([`BoundedExchange`]; one RDMA
    /// queue pair per connection).
    pub fn bound(mut self, bound: usize) -> Self {
        self.bound = Some(bound);
        self
    }

    /// Which channels to use (default [`Transport::Auto`]).
    pub fn transport(mut self, t: Transport) -> Self {
        self.transport = t;
        self
    }

    /// RDMA queue pairs per peer (default 2).
    pub fn engines(mut self, e: usize) -> Self {
        self.engines = e;
        self
    }

    /// Deadline for setting up (default 60 s).
    pub fn setup_timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Connects the channels; collective.
    ///
    /// # Errors
    ///
    /// [`HaloError::Usage`] for a block of 0 bytes; otherwise as
    /// [`LinkExchangeBuilder::build`](crate::LinkExchangeBuilder::build)
    /// (or the bounded exchange's build, with a bound).
    pub fn build(self) -> Result<AllToAll> {
        let n = self.world.size();
        if self.block == 0 {
            return Err(HaloError::Usage {
                op: "AllToAll::build",
                why: "a block of 0 bytes per pair: give at least 1".into(),
            });
        }
        let order = self.peer_order()?;
        let links: Vec<Link> = order
            .iter()
            .map(|&peer| Link {
                peer,
                send: Some(Message {
                    len: self.block,
                    tag: 1,
                }),
                recv: Some(Message {
                    len: self.block,
                    tag: 1,
                }),
                offset: Vec::new(),
                name: format!("rank {peer}"),
            })
            .collect();
        let x = match self.bound {
            None => Runner::Direct(Box::new(
                LinkExchange::builder(self.world, links)
                    .transport(self.transport)
                    .engines(self.engines)
                    .setup_timeout(self.timeout)
                    .build()?,
            )),
            Some(bound) => Runner::Bounded(Box::new(
                BoundedExchange::builder(self.world, links)
                    .bound(bound)
                    .transport(self.transport)
                    .setup_timeout(self.timeout)
                    .build()?,
            )),
        };
        let mut link_of = vec![0; n];
        for (l, &peer) in order.iter().enumerate() {
            link_of[peer] = l;
        }
        Ok(AllToAll { x, link_of })
    }
}

/// A persistent all-to-all of equal blocks: fill [`send_block`]s, `start`,
/// `wait`, read [`recv_block`]s.
///
/// [`send_block`]: AllToAll::send_block
/// [`recv_block`]: AllToAll::recv_block
#[derive(Debug)]
pub struct AllToAll {
    x: Runner,
    /// The link of each peer.
    link_of: Vec<usize>,
}

impl AllToAll {
    /// A builder for blocks of `bytes_per_pair` bytes between every two
    /// ranks of `world`.
    pub fn builder(world: &World, bytes_per_pair: usize) -> AllToAllBuilder<'_> {
        AllToAllBuilder {
            world,
            block: bytes_per_pair,
            transport: Transport::Auto,
            engines: 2,
            timeout: Duration::from_secs(60),
            latin: None,
            bound: None,
        }
    }

    /// The link that carries this rank's blocks with `peer`.
    fn link(&self, op: &'static str, peer: usize) -> Result<usize> {
        self.link_of
            .get(peer)
            .copied()
            .ok_or_else(|| HaloError::Usage {
                op,
                why: format!(
                    "rank {peer} is not in the job (ranks 0..{})",
                    self.link_of.len()
                ),
            })
    }

    /// The block for `peer`, to fill before [`start`](Self::start).
    ///
    /// # Errors
    ///
    /// [`HaloError::Usage`] for a rank not in the job;
    /// [`HaloError::State`] while an exchange is in flight or after a
    /// failure.
    pub fn send_block(&mut self, peer: usize) -> Result<&mut [u8]> {
        let l = self.link("send_block", peer)?;
        match &mut self.x {
            Runner::Direct(x) => x.send_buf(l),
            Runner::Bounded(x) => x.send_buf(l),
        }
    }

    /// The block from `peer`, complete after [`wait`](Self::wait).
    ///
    /// # Errors
    ///
    /// As [`send_block`](Self::send_block).
    pub fn recv_block(&mut self, peer: usize) -> Result<&[u8]> {
        let l = self.link("recv_block", peer)?;
        match &mut self.x {
            Runner::Direct(x) => x.recv_buf(l),
            Runner::Bounded(x) => x.recv_buf(l),
        }
    }

    /// Sends every block; never blocks.
    ///
    /// # Errors
    ///
    /// [`HaloError::State`] while an exchange is in flight or after a
    /// failure; a channel's error, or [`HaloError::JobFailed`] when a peer
    /// failed or died.
    pub fn start(&mut self) -> Result<()> {
        match &mut self.x {
            Runner::Direct(x) => x.start(),
            Runner::Bounded(x) => x.start(),
        }
    }

    /// Progresses without blocking; true once every block has arrived.
    ///
    /// # Errors
    ///
    /// As [`wait`](Self::wait), but never a timeout.
    pub fn test(&mut self) -> Result<bool> {
        match &mut self.x {
            Runner::Direct(x) => x.test(),
            Runner::Bounded(x) => x.test(),
        }
    }

    /// Waits until every block has arrived, or `deadline`.
    ///
    /// `deadline` is a timeout (a `Duration`, from when the wait begins) or
    /// an `Instant`; time this process is stopped does not count against it
    /// ([`Deadline`]).
    ///
    /// # Errors
    ///
    /// [`HaloError::Timeout`] at the deadline ([`HaloError::Forwarding`]
    /// with a bound), after which `wait` may be called again;
    /// [`HaloError::State`] without an exchange in flight; a channel's
    /// error, or [`HaloError::JobFailed`] when a peer failed or died.
    pub fn wait(&mut self, deadline: impl Into<Deadline>) -> Result<()> {
        match &mut self.x {
            Runner::Direct(x) => x.wait(deadline),
            Runner::Bounded(x) => x.wait(deadline),
        }
    }

    /// Which channel reaches each rank, by rank (`local` for this one;
    /// `forwarded` for a rank beyond the bound).
    pub fn channels(&self) -> Vec<&'static str> {
        match &self.x {
            Runner::Direct(x) => {
                let by_link = x.localities();
                self.link_of.iter().map(|&l| by_link[l].name()).collect()
            }
            Runner::Bounded(x) => {
                let connected = x.connections();
                (0..self.link_of.len())
                    .map(|peer| match connected.get(&peer) {
                        Some(name) => name,
                        None if peer == x.rank() => "local",
                        None => "forwarded",
                    })
                    .collect()
            }
        }
    }

    /// The bounded exchange underneath, when a bound was given.
    pub fn bounded(&self) -> Option<&BoundedExchange> {
        match &self.x {
            Runner::Bounded(x) => Some(x),
            Runner::Direct(_) => None,
        }
    }
}

/// What runs the blocks: every pair connected, or at most a bound.
#[derive(Debug)]
enum Runner {
    Direct(Box<LinkExchange>),
    Bounded(Box<BoundedExchange>),
}
