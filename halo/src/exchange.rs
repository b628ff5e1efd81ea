//! The halo exchange: the decomposition's messages, each neighbour on the
//! channel its locality calls for (decided once, at build), run with
//! `start` / `wait` every iteration.

use std::time::{Duration, Instant};

use bytemuck::Pod;
use sode_scheduler::{Algorithm, Machine, Pattern, Request};
use sode_transport::{
    writes_from_plan, BufferId, Device, DeviceSelector, ExchangeBuilder, PersistentWrites,
    WindowId, World, Write,
};

use crate::decomp::{pack, unpack, Decomposition, Neighbour};
use crate::error::{HaloError, Result};

/// Which transport carries the messages between ranks.
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
pub enum Sync {
    /// Pairwise: each neighbour grants the other a credit when its halo is
    /// free again; no global barrier (the default).
    #[default]
    Pairwise,
    /// The RSched paper's pseudo-collective mode: a barrier of the whole job
    /// at the start of `start` and at the end of `wait`, as well.
    PseudoCollective,
}

impl std::str::FromStr for Sync {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "pairwise" => Ok(Sync::Pairwise),
            "pseudo-collective" => Ok(Sync::PseudoCollective),
            o => Err(format!(
                "unknown synchronisation {o:?} (pairwise, pseudo-collective)"
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Local,
    Shm,
    Rdma,
}

#[derive(Debug)]
enum Channel {
    /// Index of the message in the shared-memory exchange.
    Shm(usize),
    /// Offset of the message in the RDMA buffer, and its window.
    Rdma {
        send_offset: usize,
        window: WindowId,
    },
    /// This rank is its own neighbour (a periodic axis of one process): the
    /// halo is a copy of the send region of neighbour `from` (the opposite
    /// direction, also this rank).
    Local { from: usize },
}

/// Builds a [`HaloExchange`]; collective over the job.
#[derive(Debug)]
pub struct HaloExchangeBuilder<'w> {
    world: &'w mut World,
    decomp: Decomposition,
    elem: usize,
    fields: usize,
    transport: Transport,
    engines: usize,
    algorithm: String,
    timeout: Duration,
    sync: Sync,
    model: Model,
}

impl<'w> HaloExchangeBuilder<'w> {
    /// The machine model for scheduling (default: calibrated on this device).
    pub fn model(mut self, m: Model) -> Self {
        self.model = m;
        self
    }

    /// Pairwise credits (default) or pseudo-collective barriers.
    pub fn sync(mut self, s: Sync) -> Self {
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

    /// Which transport (default [`Transport::Auto`]).
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
    pub fn algorithm(mut self, a: &str) -> Self {
        self.algorithm = a.into();
        self
    }

    /// How long setup may wait for the other ranks (default 60 s).
    pub fn setup_timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    fn kind(&self, a: usize, b: usize) -> Kind {
        if a == b {
            return Kind::Local;
        }
        match self.transport {
            Transport::Shm => Kind::Shm,
            Transport::Rdma => Kind::Rdma,
            Transport::Auto => {
                if self.world.node_of(a) == self.world.node_of(b) {
                    Kind::Shm
                } else {
                    Kind::Rdma
                }
            }
        }
    }

    /// Decides each neighbour's channel, sets up shared memory with the
    /// neighbours on this node and RDMA (device, keys, scheduled chains)
    /// with the others. Collective: every rank of the job calls it.
    pub fn build(self) -> Result<HaloExchange> {
        let me = self.world.rank();
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
        let neighbours = d.neighbours(me);
        let ext = d.local_extent(me);
        let msg = |n: &Neighbour| n.send.cells() * self.elem * self.fields;
        let kinds: Vec<Kind> = neighbours.iter().map(|n| self.kind(me, n.rank)).collect();
        if self.transport == Transport::Shm {
            if let Some(n) = neighbours
                .iter()
                .find(|n| n.rank != me && self.world.node_of(n.rank) != self.world.node_of(me))
            {
                return Err(HaloError::Locality {
                    rank: n.rank,
                    direction: n.direction(),
                    why: "it runs on another node, and the transport is shm: use auto or rdma"
                        .into(),
                });
            }
        }
        let names = |k: Kind| {
            neighbours
                .iter()
                .zip(&kinds)
                .filter(|(_, &kk)| kk == k)
                .map(|(n, _)| format!("rank {} ({})", n.rank, n.direction()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (shm_names, rdma_names) = (names(Kind::Shm), names(Kind::Rdma));
        let mut channels: Vec<Channel> = Vec::with_capacity(neighbours.len());

        // Shared memory, with the neighbours on this node.
        let shm_err = |source: sode_shm::ShmError| HaloError::Shm {
            neighbours: shm_names.clone(),
            source: Box::new(source),
        };
        let mut shm = None;
        let mut shm_list = Vec::new();
        for (n, &k) in neighbours.iter().zip(&kinds) {
            if k == Kind::Shm {
                channels.push(Channel::Shm(shm_list.len()));
                shm_list.push(
                    sode_shm::Neighbour::new(n.rank)
                        .send(msg(n), n.send_tag())
                        .recv(msg(n), n.recv_tag()),
                );
            } else if k == Kind::Local {
                let back: Vec<i32> = n.offset.iter().map(|o| -o).collect();
                let from = neighbours
                    .iter()
                    .position(|m| m.rank == me && m.offset == back)
                    .expect("periodic self-neighbours come in pairs");
                channels.push(Channel::Local { from });
            } else {
                // Set below, with the RDMA buffer's layout.
                channels.push(Channel::Rdma {
                    send_offset: usize::MAX,
                    window: WindowId(usize::MAX),
                });
            }
        }
        if !shm_list.is_empty() {
            let mut ctx = sode_shm::Context::from_env().map_err(shm_err)?;
            let ex = ctx
                .exchange()
                .neighbours(shm_list)
                .setup_timeout(self.timeout)
                .build()
                .map_err(shm_err)?;
            shm = Some(ex);
        }

        // RDMA, with the others.
        let rdma_idx: Vec<usize> = (0..neighbours.len())
            .filter(|&i| kinds[i] == Kind::Rdma)
            .collect();
        let mut rdma = None;
        let mut rdma_buf = None;
        let mut plan_summary = None;
        if !rdma_idx.is_empty() {
            let rdma_err = |source: sode_transport::TransportError| HaloError::Rdma {
                neighbours: rdma_names.clone(),
                source: Box::new(source),
            };
            let dev =
                Device::open(&DeviceSelector::from_env().map_err(rdma_err)?).map_err(rdma_err)?;
            let mut b = ExchangeBuilder::new(&dev).engines(self.engines);
            let sends: usize = rdma_idx.iter().map(|&i| msg(&neighbours[i])).sum();
            let recvs: usize = sends; // each message is as long as its reply
            let buf = b.buffer(sends + recvs).map_err(rdma_err)?;
            let mut send_offsets = Vec::new();
            let mut at = 0;
            for &i in &rdma_idx {
                send_offsets.push(at);
                at += msg(&neighbours[i]);
            }
            for (j, &i) in rdma_idx.iter().enumerate() {
                let n = &neighbours[i];
                b.window_in(buf, at, msg(n), &[n.rank]).map_err(rdma_err)?;
                channels[i] = Channel::Rdma {
                    send_offset: send_offsets[j],
                    window: WindowId(j),
                };
                at += msg(n);
            }
            // Where each message lands: the window the receiver made for
            // (us, the opposite direction), numbered as the receiver numbers
            // its RDMA neighbours.
            let mut targets = Vec::new();
            for &i in &rdma_idx {
                let n = &neighbours[i];
                let back: Vec<i32> = n.offset.iter().map(|o| -o).collect();
                let theirs: Vec<Neighbour> = d
                    .neighbours(n.rank)
                    .into_iter()
                    .filter(|m| self.kind(n.rank, m.rank) == Kind::Rdma)
                    .collect();
                let w = theirs
                    .iter()
                    .position(|m| m.rank == me && m.offset == back)
                    .expect("neighbour relations are symmetric");
                targets.push(w);
            }
            let machine = match self.model {
                Model::Calibrated => sode_transport::calibrate(&dev, self.engines)
                    .map_err(rdma_err)?
                    .machine(),
                Model::KComputer => Machine {
                    engines: self.engines,
                    ..Machine::K_COMPUTER
                },
                Model::Given(m) => Machine {
                    engines: self.engines,
                    ..m
                },
            };
            let pattern = Pattern {
                machine,
                requests: rdma_idx
                    .iter()
                    .enumerate()
                    .map(|(j, &i)| {
                        let n = &neighbours[i];
                        Request {
                            id: j as u32,
                            dest: n.rank as u32,
                            direction: n.direction(),
                            // Routed in dimension order: a link per axis crossed.
                            links: n
                                .offset
                                .iter()
                                .enumerate()
                                .filter(|(_, &o)| o != 0)
                                .map(|(a, &o)| {
                                    format!(
                                        "{}{}",
                                        ['x', 'y', 'z'][a],
                                        if o > 0 { '+' } else { '-' }
                                    )
                                })
                                .collect(),
                            bytes: msg(n) as u64,
                        }
                    })
                    .collect(),
            };
            let algorithm: Algorithm =
                self.algorithm
                    .parse()
                    .map_err(|e: sode_scheduler::SchedError| HaloError::Usage {
                        op: "algorithm",
                        why: e.to_string(),
                    })?;
            let plan = sode_scheduler::plan(&pattern, algorithm).map_err(Box::new)?;
            plan_summary = Some(format!(
                "{} on {} engines, simulated {:.1} us for a model of {:.3} GB/s per queue pair, {:.1} us per command",
                plan.algorithm, self.engines, plan.simulated_us, machine.engine_gbps, machine.command_overhead_us
            ));
            let writes = writes_from_plan(&plan, |id| {
                let j = id as usize;
                let n = &neighbours[*rdma_idx.get(j)?];
                Some(Write {
                    peer: n.rank,
                    engine: 0,
                    src: buf,
                    src_offset: send_offsets[j],
                    window: WindowId(targets[j]),
                    dst_offset: 0,
                    len: msg(n),
                })
            })
            .map_err(rdma_err)?;
            for w in writes {
                b.write(w);
            }
            rdma = Some(b.build(self.world, self.timeout).map_err(rdma_err)?);
            rdma_buf = Some(buf);
        }
        let barrier = match self.sync {
            Sync::Pairwise => None,
            Sync::PseudoCollective => {
                Some(
                    self.world
                        .try_clone()
                        .map_err(|source| HaloError::Barrier {
                            source: Box::new(source),
                        })?,
                )
            }
        };
        let scratch = vec![
            0u8;
            neighbours
                .iter()
                .map(|n| n.recv.cells() * self.elem)
                .max()
                .unwrap_or(0)
        ];
        Ok(HaloExchange {
            rank: me,
            ext,
            elem: self.elem,
            fields: self.fields,
            neighbours,
            channels,
            shm,
            shm_names,
            rdma,
            rdma_names,
            rdma_buf,
            scratch,
            in_flight: false,
            plan_summary,
            barrier,
            timeout: self.timeout,
        })
    }
}

/// A persistent halo exchange: `start` packs each neighbour's interior
/// cells and sends them; `wait` progresses every channel until all halos
/// have arrived and unpacks them.
pub struct HaloExchange {
    rank: usize,
    ext: Vec<usize>,
    elem: usize,
    fields: usize,
    neighbours: Vec<Neighbour>,
    channels: Vec<Channel>,
    shm: Option<sode_shm::Exchange>,
    shm_names: String,
    rdma: Option<PersistentWrites>,
    rdma_names: String,
    rdma_buf: Option<BufferId>,
    scratch: Vec<u8>,
    in_flight: bool,
    plan_summary: Option<String>,
    /// The job, for the barriers of the pseudo-collective mode.
    barrier: Option<World>,
    timeout: Duration,
}

impl std::fmt::Debug for HaloExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HaloExchange")
            .field("rank", &self.rank)
            .field("neighbours", &self.neighbours.len())
            .field("shm", &self.shm_names)
            .field("rdma", &self.rdma_names)
            .finish_non_exhaustive()
    }
}

impl HaloExchange {
    /// A builder for `decomp` over the ranks of `world`.
    pub fn builder<'w>(world: &'w mut World, decomp: &Decomposition) -> HaloExchangeBuilder<'w> {
        HaloExchangeBuilder {
            world,
            decomp: decomp.clone(),
            elem: 8,
            fields: 1,
            transport: Transport::Auto,
            engines: 2,
            algorithm: "auto".into(),
            timeout: Duration::from_secs(60),
            sync: Sync::Pairwise,
            model: Model::Calibrated,
        }
    }

    fn job_barrier(&mut self) -> Result<()> {
        if let Some(w) = self.barrier.as_mut() {
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

    /// Which channel each neighbour uses: `shm`, `rdma` or `local`.
    pub fn channels(&self) -> Vec<&'static str> {
        self.channels
            .iter()
            .map(|c| match c {
                Channel::Shm(_) => "shm",
                Channel::Rdma { .. } => "rdma",
                Channel::Local { .. } => "local",
            })
            .collect()
    }

    /// The RDMA schedule, if any neighbour is reached over RDMA.
    pub fn plan_summary(&self) -> Option<&str> {
        self.plan_summary.as_deref()
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
        if self.in_flight {
            return Err(HaloError::Usage {
                op: "start",
                why: "the previous exchange is in flight: call wait first".into(),
            });
        }
        self.check::<T>("start", fields.len(), fields.iter().map(|f| f.len()))?;
        self.job_barrier()?;
        let (elem, ext) = (self.elem, &self.ext);
        for (n, ch) in self.neighbours.iter().zip(&self.channels) {
            let part = n.send.cells() * elem;
            let out: &mut [u8] = match ch {
                Channel::Shm(i) => {
                    let names = &self.shm_names;
                    self.shm
                        .as_mut()
                        .expect("shm channel")
                        .send_buf_mut(*i)
                        .map_err(|source| HaloError::Shm {
                            neighbours: names.clone(),
                            source: Box::new(source),
                        })?
                }
                Channel::Rdma { send_offset, .. } => {
                    let names = &self.rdma_names;
                    let buf = self.rdma_buf.expect("rdma channel");
                    let all = self
                        .rdma
                        .as_mut()
                        .expect("rdma channel")
                        .buffer_mut(buf)
                        .map_err(|source| HaloError::Rdma {
                            neighbours: names.clone(),
                            source: Box::new(source),
                        })?;
                    &mut all[*send_offset..*send_offset + part * fields.len()]
                }
                Channel::Local { .. } => continue,
            };
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
        if let Some(s) = self.shm.as_mut() {
            s.start().map_err(|source| HaloError::Shm {
                neighbours: self.shm_names.clone(),
                source: Box::new(source),
            })?;
        }
        if let Some(r) = self.rdma.as_mut() {
            r.start().map_err(|source| HaloError::Rdma {
                neighbours: self.rdma_names.clone(),
                source: Box::new(source),
            })?;
        }
        self.in_flight = true;
        Ok(())
    }

    /// Progresses every channel until all halos have arrived (or `deadline`
    /// passes: [`HaloError::Timeout`], after which `wait` may be called
    /// again), then unpacks them into `fields`.
    pub fn wait<T: Pod>(&mut self, deadline: Instant, fields: &mut [&mut [T]]) -> Result<()> {
        if !self.in_flight {
            return Err(HaloError::Usage {
                op: "wait",
                why: "no exchange in flight: call start first".into(),
            });
        }
        self.check::<T>("wait", fields.len(), fields.iter().map(|f| f.len()))?;
        let mut shm_done = self.shm.is_none();
        let mut rdma_done = self.rdma.is_none();
        // One transport: its own wait, with its own spin-then-yield policy.
        let timeout = |outstanding: String| HaloError::Timeout { outstanding };
        if rdma_done && !shm_done {
            match self.shm.as_mut().expect("shm").wait(deadline) {
                Ok(()) => shm_done = true,
                Err(sode_shm::ShmError::Timeout { pending, .. }) => {
                    return Err(timeout(format!(
                        "shared memory with {}: {pending}",
                        self.shm_names
                    )))
                }
                Err(source) => {
                    return Err(HaloError::Shm {
                        neighbours: self.shm_names.clone(),
                        source: Box::new(source),
                    })
                }
            }
        } else if shm_done && !rdma_done {
            match self.rdma.as_mut().expect("rdma").wait(deadline) {
                Ok(()) => rdma_done = true,
                Err(sode_transport::TransportError::Timeout { outstanding, .. }) => {
                    return Err(timeout(format!(
                        "RDMA with {}: {outstanding}",
                        self.rdma_names
                    )))
                }
                Err(source) => {
                    return Err(HaloError::Rdma {
                        neighbours: self.rdma_names.clone(),
                        source: Box::new(source),
                    })
                }
            }
        }
        let mut idle = 0u32;
        // Both channels progress in one loop: a rank never sits in one
        // while a peer waits for it in the other.
        while !(shm_done && rdma_done) {
            if !shm_done {
                match self.shm.as_mut().expect("shm").wait(Instant::now()) {
                    Ok(()) => shm_done = true,
                    Err(sode_shm::ShmError::Timeout { .. }) => {}
                    Err(source) => {
                        return Err(HaloError::Shm {
                            neighbours: self.shm_names.clone(),
                            source: Box::new(source),
                        })
                    }
                }
            }
            if !rdma_done {
                rdma_done =
                    self.rdma
                        .as_mut()
                        .expect("rdma")
                        .test()
                        .map_err(|source| HaloError::Rdma {
                            neighbours: self.rdma_names.clone(),
                            source: Box::new(source),
                        })?;
            }
            if shm_done && rdma_done {
                break;
            }
            if Instant::now() >= deadline {
                let mut parts = Vec::new();
                if !shm_done {
                    parts.push(format!("shared memory with {}", self.shm_names));
                }
                if !rdma_done {
                    parts.push(format!(
                        "RDMA with {}: {}",
                        self.rdma_names,
                        self.rdma.as_ref().expect("rdma").outstanding_report()
                    ));
                }
                return Err(HaloError::Timeout {
                    outstanding: parts.join("; "),
                });
            }
            idle += 1;
            if idle > 64 {
                std::thread::yield_now();
            }
        }
        self.in_flight = false;
        self.job_barrier()?;
        let (elem, ext) = (self.elem, &self.ext);
        for (n, ch) in self.neighbours.iter().zip(&self.channels) {
            let part = n.recv.cells() * elem;
            let data: &[u8] = match ch {
                Channel::Shm(i) => {
                    self.shm
                        .as_ref()
                        .expect("shm")
                        .recv_buf(*i)
                        .map_err(|source| HaloError::Shm {
                            neighbours: self.shm_names.clone(),
                            source: Box::new(source),
                        })?
                }
                Channel::Rdma { window, .. } => self
                    .rdma
                    .as_ref()
                    .expect("rdma")
                    .window(*window)
                    .map_err(|source| HaloError::Rdma {
                    neighbours: self.rdma_names.clone(),
                    source: Box::new(source),
                })?,
                Channel::Local { from } => {
                    let from = &self.neighbours[*from];
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
