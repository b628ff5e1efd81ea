//! The halo exchange: the decomposition's messages, each neighbour on the
//! channel its locality calls for (decided once, at build), run with
//! `start` / `wait` every iteration through one progress loop.

use std::time::{Duration, Instant};

use bytemuck::Pod;
use sode_job::{Backoff, Lifecycle, World};
use sode_scheduler::{Algorithm, Machine};

use crate::channel::{Channel, Locality, ShmChannel};
use crate::decomp::{pack, unpack, Decomposition, Neighbour};
use crate::error::{HaloError, Result};

/// Which channel carries the messages between ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// Shared memory with ranks on this node, RDMA with the others.
    #[default]
    Auto,
    /// Shared memory only (every neighbour must be on this node).
    Shm,
    /// RDMA with every other rank, on this node too.
    Rdma,
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(Transport::Auto),
            "shm" => Ok(Transport::Shm),
            "rdma" => Ok(Transport::Rdma),
            o => Err(format!("unknown transport {o:?} (auto, shm, rdma)")),
        }
    }
}

/// The machine model the RDMA writes are scheduled for.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Model {
    /// Measured on this device at build time (`sode_transport::calibrate`):
    /// per-command overhead, per-queue-pair and node bandwidth (the default).
    #[default]
    Calibrated,
    /// The K computer, as the RSched paper measured it.
    KComputer,
    /// Given.
    Given(Machine),
}

/// How the ranks of an exchange keep in step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// Pairwise: each neighbour grants the other a credit when its halo is
    /// free again; no global barrier (the default).
    #[default]
    Pairwise,
    /// The RSched paper's pseudo-collective mode: a barrier of the whole job
    /// at the start of `start` and at the end of `wait`, as well.
    PseudoCollective,
}

impl std::str::FromStr for SyncMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "pairwise" => Ok(SyncMode::Pairwise),
            "pseudo-collective" => Ok(SyncMode::PseudoCollective),
            o => Err(format!(
                "unknown synchronisation {o:?} (pairwise, pseudo-collective)"
            )),
        }
    }
}

/// Where a neighbour's message travels.
#[derive(Debug, Clone, Copy)]
enum Route {
    /// Message `message` of channel `channel`.
    Channel { channel: usize, message: usize },
    /// A copy within this rank of neighbour `from`'s send region (the
    /// opposite direction of a periodic axis of one process).
    SelfCopy { from: usize },
}

/// Builds a [`HaloExchange`]; collective over the job.
#[derive(Debug)]
pub struct HaloExchangeBuilder<'w> {
    world: &'w World,
    decomp: Decomposition,
    elem: usize,
    fields: usize,
    transport: Transport,
    engines: usize,
    algorithm: Algorithm,
    timeout: Duration,
    sync: SyncMode,
    model: Model,
}

impl HaloExchangeBuilder<'_> {
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

    /// Bytes per cell value (default 8, an `f64`).
    pub fn element_size(mut self, bytes: usize) -> Self {
        self.elem = bytes;
        self
    }

    /// Fields exchanged together (each a whole local array; default 1).
    pub fn fields(mut self, n: usize) -> Self {
        self.fields = n;
        self
    }

    /// Which channels (default [`Transport::Auto`]).
    pub fn transport(mut self, t: Transport) -> Self {
        self.transport = t;
        self
    }

    /// RDMA queue pairs per neighbour (default 2).
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

    /// How rank `a` reaches rank `b`: the same answer on every rank, so
    /// each can tell how its neighbours number their own channels.
    fn locality(&self, a: usize, b: usize) -> Locality {
        if a == b {
            return Locality::SelfCopy;
        }
        match self.transport {
            Transport::Shm => Locality::Shm,
            Transport::Rdma => Locality::Rdma,
            Transport::Auto if self.world.node_of(a) == self.world.node_of(b) => Locality::Shm,
            Transport::Auto => Locality::Rdma,
        }
    }

    fn check(&self) -> Result<()> {
        let d = &self.decomp;
        if self.world.size() != d.ranks() {
            return Err(HaloError::JobSize {
                job: self.world.size(),
                grid: d.grid.clone(),
                needed: d.ranks(),
            });
        }
        if self.elem == 0 || self.fields == 0 {
            return Err(HaloError::Usage {
                op: "build",
                why: "element size and field count must be at least 1".into(),
            });
        }
        let me = self.world.rank();
        for n in d.neighbours(me) {
            let other_node = n.rank != me && !self.world.same_node(n.rank);
            if self.transport == Transport::Shm && other_node {
                return Err(HaloError::Locality {
                    rank: n.rank,
                    direction: n.direction(),
                    why: "it runs on another node, and the transport is shm: use auto or rdma"
                        .into(),
                });
            }
            if cfg!(not(feature = "rdma")) && self.locality(me, n.rank) == Locality::Rdma {
                return Err(HaloError::Locality {
                    rank: n.rank,
                    direction: n.direction(),
                    why: "it needs RDMA, and this sode was built without the rdma feature: run the job on one node, or build with --features rdma".into(),
                });
            }
        }
        Ok(())
    }

    /// Decides each neighbour's channel, sets up shared memory with the
    /// neighbours on this node and RDMA (device, keys, scheduled chains)
    /// with the others. Collective: every rank of the job calls it.
    pub fn build(self) -> Result<HaloExchange> {
        self.check()?;
        let me = self.world.rank();
        let neighbours = self.decomp.neighbours(me);
        let msg_len = |n: &Neighbour| n.send.cells() * self.elem * self.fields;
        let mut routes = self_copies(me, &neighbours)?;
        let mut channels: Vec<Box<dyn Channel>> = Vec::new();
        let shm: Vec<usize> = self.indices(&neighbours, Locality::Shm);
        if !shm.is_empty() {
            let peers = shm
                .iter()
                .map(|&i| {
                    let n = &neighbours[i];
                    sode_shm::Peer::new(n.rank)
                        .send(msg_len(n), n.send_tag())
                        .recv(msg_len(n), n.recv_tag())
                })
                .collect();
            let names = names(&neighbours, &shm);
            let mut ctx =
                sode_shm::Context::from_world(self.world).map_err(|source| HaloError::Shm {
                    neighbours: names.clone(),
                    source: Box::new(source),
                })?;
            let ch = ShmChannel::build(&mut ctx, peers, names, self.timeout)?;
            add_channel(&mut routes, &mut channels, &shm, Box::new(ch));
        }
        let summary = self.build_rdma(&neighbours, &mut routes, &mut channels)?;
        let barrier = (self.sync == SyncMode::PseudoCollective).then(|| self.world.clone());
        let scratch = neighbours
            .iter()
            .map(|n| n.recv.cells() * self.elem)
            .max()
            .unwrap_or(0);
        Ok(HaloExchange {
            rank: me,
            ext: self.decomp.local_extent(me),
            elem: self.elem,
            fields: self.fields,
            routes: routes
                .into_iter()
                .map(|r| r.expect("every neighbour routed"))
                .collect(),
            neighbours,
            done: vec![false; channels.len()],
            channels,
            scratch: vec![0u8; scratch],
            lifecycle: Lifecycle::Idle,
            plan_summary: summary,
            barrier,
            timeout: self.timeout,
        })
    }

    fn indices(&self, neighbours: &[Neighbour], l: Locality) -> Vec<usize> {
        let me = self.world.rank();
        (0..neighbours.len())
            .filter(|&i| self.locality(me, neighbours[i].rank) == l)
            .collect()
    }

    #[cfg(not(feature = "rdma"))]
    fn build_rdma(
        &self,
        _: &[Neighbour],
        _: &mut [Option<Route>],
        _: &mut Vec<Box<dyn Channel>>,
    ) -> Result<Option<String>> {
        Ok(None)
    }

    /// The RDMA channel, if any neighbour needs one; its plan's summary.
    #[cfg(feature = "rdma")]
    fn build_rdma(
        &self,
        neighbours: &[Neighbour],
        routes: &mut [Option<Route>],
        channels: &mut Vec<Box<dyn Channel>>,
    ) -> Result<Option<String>> {
        use crate::channel::{rdma_message, RdmaChannel, RdmaSettings};
        let rdma = self.indices(neighbours, Locality::Rdma);
        if rdma.is_empty() {
            return Ok(None);
        }
        let me = self.world.rank();
        let messages = rdma
            .iter()
            .map(|&i| {
                let n = &neighbours[i];
                // The receiver numbers its RDMA windows as it numbers its
                // RDMA neighbours: find us, seen from the opposite direction.
                let theirs: Vec<Neighbour> = self
                    .decomp
                    .neighbours(n.rank)
                    .into_iter()
                    .filter(|m| self.locality(n.rank, m.rank) == Locality::Rdma)
                    .collect();
                rdma_message(me, n, &theirs, n.send.cells() * self.elem * self.fields)
            })
            .collect::<Result<Vec<_>>>()?;
        let settings = RdmaSettings {
            engines: self.engines,
            algorithm: self.algorithm,
            model: self.model,
            timeout: self.timeout,
        };
        let ch = RdmaChannel::build(self.world, &messages, &settings, names(neighbours, &rdma))?;
        let summary = ch.summary().to_string();
        add_channel(routes, channels, &rdma, Box::new(ch));
        Ok(Some(summary))
    }
}

/// Routes of the neighbours that are this rank itself; the others are
/// routed when their channel is built.
fn self_copies(me: usize, neighbours: &[Neighbour]) -> Result<Vec<Option<Route>>> {
    neighbours
        .iter()
        .map(|n| {
            if n.rank != me {
                return Ok(None);
            }
            let back: Vec<i32> = n.offset.iter().map(|o| -o).collect();
            let from = neighbours
                .iter()
                .position(|m| m.rank == me && m.offset == back)
                .ok_or_else(|| HaloError::Decomposition {
                    why: format!(
                        "rank {me} is its own neighbour {} but not its own opposite neighbour",
                        n.direction()
                    ),
                })?;
            Ok(Some(Route::SelfCopy { from }))
        })
        .collect()
}

fn add_channel(
    routes: &mut [Option<Route>],
    channels: &mut Vec<Box<dyn Channel>>,
    members: &[usize],
    channel: Box<dyn Channel>,
) {
    let c = channels.len();
    for (message, &i) in members.iter().enumerate() {
        routes[i] = Some(Route::Channel {
            channel: c,
            message,
        });
    }
    channels.push(channel);
}

/// `rank 1 (E), rank 3 (N)`: the neighbours a channel carries, for errors.
fn names(neighbours: &[Neighbour], members: &[usize]) -> String {
    members
        .iter()
        .map(|&i| {
            format!(
                "rank {} ({})",
                neighbours[i].rank,
                neighbours[i].direction()
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A persistent halo exchange: `start` packs each neighbour's interior
/// cells and sends them; `wait` progresses every channel until all halos
/// have arrived and unpacks them.
#[derive(Debug)]
pub struct HaloExchange {
    rank: usize,
    ext: Vec<usize>,
    elem: usize,
    fields: usize,
    neighbours: Vec<Neighbour>,
    routes: Vec<Route>,
    channels: Vec<Box<dyn Channel>>,
    /// Per channel: complete this iteration (reused, never reallocated).
    done: Vec<bool>,
    scratch: Vec<u8>,
    lifecycle: Lifecycle,
    plan_summary: Option<String>,
    /// The job, for the barriers of the pseudo-collective mode.
    barrier: Option<World>,
    timeout: Duration,
}

impl HaloExchange {
    /// A builder for `decomp` over the ranks of `world`.
    pub fn builder<'w>(world: &'w World, decomp: &Decomposition) -> HaloExchangeBuilder<'w> {
        HaloExchangeBuilder {
            world,
            decomp: decomp.clone(),
            elem: 8,
            fields: 1,
            transport: Transport::Auto,
            engines: 2,
            algorithm: Algorithm::Auto,
            timeout: Duration::from_secs(60),
            sync: SyncMode::Pairwise,
            model: Model::Calibrated,
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

    /// The neighbours, in the decomposition's order.
    pub fn neighbours(&self) -> &[Neighbour] {
        &self.neighbours
    }

    /// Cells per axis of this rank's local array (halo included).
    pub fn local_extent(&self) -> &[usize] {
        &self.ext
    }

    /// How each neighbour is reached, in the decomposition's order.
    pub fn localities(&self) -> Vec<Locality> {
        self.routes
            .iter()
            .map(|r| match r {
                Route::SelfCopy { .. } => Locality::SelfCopy,
                Route::Channel { channel, .. } => self.channels[*channel].locality(),
            })
            .collect()
    }

    /// Which channel each neighbour uses: `shm`, `rdma` or `local`.
    pub fn channels(&self) -> Vec<&'static str> {
        self.localities().into_iter().map(Locality::name).collect()
    }

    /// The RDMA schedule, if any neighbour is reached over RDMA.
    pub fn plan_summary(&self) -> Option<&str> {
        self.plan_summary.as_deref()
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Bytes this rank sends per exchange.
    pub fn bytes_per_exchange(&self) -> usize {
        self.neighbours
            .iter()
            .map(|n| n.send.cells() * self.elem * self.fields)
            .sum()
    }

    fn check<T: Pod>(
        &self,
        op: &'static str,
        fields: usize,
        lens: impl Iterator<Item = usize>,
    ) -> Result<()> {
        if std::mem::size_of::<T>() != self.elem {
            return Err(HaloError::Usage {
                op,
                why: format!(
                    "cells of {} bytes, but the exchange was built for {}",
                    std::mem::size_of::<T>(),
                    self.elem
                ),
            });
        }
        if fields != self.fields {
            return Err(HaloError::Usage {
                op,
                why: format!("{fields} fields given, {} expected", self.fields),
            });
        }
        let cells: usize = self.ext.iter().product();
        for (f, len) in lens.enumerate() {
            if len != cells {
                return Err(HaloError::Usage {
                    op,
                    why: format!(
                        "field {f} has {len} cells, the local array {:?} has {cells}",
                        self.ext
                    ),
                });
            }
        }
        Ok(())
    }

    /// Packs every neighbour's interior cells from `fields` and starts the
    /// exchange on every channel.
    pub fn start<T: Pod>(&mut self, fields: &[&[T]]) -> Result<()> {
        self.lifecycle.require_idle("start")?;
        self.check::<T>("start", fields.len(), fields.iter().map(|f| f.len()))?;
        self.job_barrier()?;
        let (elem, ext) = (self.elem, &self.ext);
        for (n, route) in self.neighbours.iter().zip(&self.routes) {
            let Route::Channel { channel, message } = *route else {
                continue;
            };
            let part = n.send.cells() * elem;
            let out = self.channels[channel].send_buf(message)?;
            for (f, field) in fields.iter().enumerate() {
                pack(
                    bytemuck::cast_slice(field),
                    ext,
                    elem,
                    &n.send,
                    &mut out[f * part..(f + 1) * part],
                );
            }
        }
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

    /// One non-blocking pass over every channel: true once all halos have
    /// arrived (then call [`wait`](HaloExchange::wait) to unpack them).
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

    /// Progresses every channel until all halos have arrived (or `deadline`
    /// passes: [`HaloError::Timeout`], after which `wait` may be called
    /// again), then unpacks them into `fields`.
    pub fn wait<T: Pod>(&mut self, deadline: Instant, fields: &mut [&mut [T]]) -> Result<()> {
        self.lifecycle.require_in_flight("wait")?;
        self.check::<T>("wait", fields.len(), fields.iter().map(|f| f.len()))?;
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
        self.job_barrier()?;
        self.unpack_all(fields)
    }

    fn unpack_all<T: Pod>(&mut self, fields: &mut [&mut [T]]) -> Result<()> {
        let (elem, ext) = (self.elem, &self.ext);
        for (n, route) in self.neighbours.iter().zip(&self.routes) {
            let part = n.recv.cells() * elem;
            let data: &[u8] = match *route {
                Route::Channel { channel, message } => self.channels[channel].recv_buf(message)?,
                Route::SelfCopy { from } => {
                    let from = &self.neighbours[from];
                    for field in fields.iter_mut() {
                        let bytes: &mut [u8] = bytemuck::cast_slice_mut(field);
                        pack(bytes, ext, elem, &from.send, &mut self.scratch[..part]);
                        unpack(&self.scratch[..part], ext, elem, &n.recv, bytes);
                    }
                    continue;
                }
            };
            for (f, field) in fields.iter_mut().enumerate() {
                unpack(
                    &data[f * part..(f + 1) * part],
                    ext,
                    elem,
                    &n.recv,
                    bytemuck::cast_slice_mut(field),
                );
            }
        }
        Ok(())
    }
}
