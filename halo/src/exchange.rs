//! The halo exchange: the decomposition's messages, each neighbour on the
//! channel its locality calls for (decided once, at build), run with
//! `start` / `wait` every iteration through one progress loop.

use sode_job::Deadline;
use std::time::{Duration, Instant};

use bytemuck::Pod;
use sode_job::World;
use sode_scheduler::Algorithm;

use crate::channel::{start_shape, Locality};
use crate::decomp::{gather_runs, runs, scatter_runs, Decomposition, Neighbour, Region, PEER_TAG};
use crate::error::{HaloError, Result};
use crate::links::{Link, LinkExchange, LinkExchangeBuilder, LinkRuns, Message, SharedSets};
use crate::settings::{Model, SyncMode, Transport};
use crate::stats::ExchangeStats;

/// Builds a [`HaloExchange`]; collective over the job.
#[derive(Debug)]
pub struct HaloExchangeBuilder<'w> {
    world: &'w World,
    decomp: Decomposition,
    elem: usize,
    fields: usize,
    /// Sets of fields kept by sode (0: the caller's own arrays).
    shared: usize,
    /// The channel settings, for the link exchange underneath.
    links: LinkExchangeBuilder<'w>,
}

impl HaloExchangeBuilder<'_> {
    /// The machine model for scheduling (default: calibrated on this device).
    pub fn model(mut self, m: Model) -> Self {
        self.links = self.links.model(m);
        self
    }

    /// Pairwise credits (default) or pseudo-collective barriers.
    pub fn sync(mut self, s: SyncMode) -> Self {
        self.links = self.links.sync(s);
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

    /// Keeps the fields in memory sode allocates: `sets` sets of
    /// [`fields`](Self::fields) arrays each (two for a Jacobi sweep from
    /// one set into the other). Neighbours on this node then read their
    /// halos straight from this rank's arrays, one copy in all with no
    /// pack or unpack (small faces take a packed path inside `sode-shm`);
    /// other neighbours are packed by sode as usual. Run it with
    /// [`HaloExchange::shared_fields`], [`start_set`](HaloExchange::start_set)
    /// and [`wait_set`](HaloExchange::wait_set). Default 0: the caller's
    /// own arrays, passed to [`start`](HaloExchange::start) and
    /// [`wait`](HaloExchange::wait).
    pub fn shared_fields(mut self, sets: usize) -> Self {
        self.shared = sets;
        self
    }

    /// Which channels (default [`Transport::Auto`]).
    pub fn transport(mut self, t: Transport) -> Self {
        self.links = self.links.transport(t);
        self
    }

    /// RDMA queue pairs per neighbour (default 2).
    pub fn engines(mut self, e: usize) -> Self {
        self.links = self.links.engines(e);
        self
    }

    /// The scheduling algorithm for the RDMA writes (default `auto`).
    pub fn algorithm(mut self, a: Algorithm) -> Self {
        self.links = self.links.algorithm(a);
        self
    }

    /// How long setup may wait for the other ranks (default 60 s).
    pub fn setup_timeout(mut self, t: Duration) -> Self {
        self.links = self.links.setup_timeout(t);
        self
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
        Ok(())
    }

    /// Decides each neighbour's channel, sets up shared memory with the
    /// neighbours on this node and RDMA (device, keys, scheduled chains)
    /// with the others. Collective: every rank of the job calls it.
    ///
    /// # Errors
    ///
    /// [`HaloError::JobSize`] when the decomposition's grid is not the
    /// job's size; [`HaloError::Usage`] for settings that do not fit (no
    /// fields, a transport that cannot reach a neighbour);
    /// [`HaloError::Shm`], [`HaloError::Rdma`] or [`HaloError::TcpSetup`],
    /// naming the neighbours, when a channel cannot be set up;
    /// [`HaloError::Barrier`] when another rank does not arrive within the
    /// builder's timeout.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use sode::{Decomposition, HaloExchange, Stencil};
    ///
    /// // A job of one process (nothing launched it): its periodic axis
    /// // makes it its own neighbour, and the halo a copy.
    /// let world = sode_job::World::init(Duration::from_secs(10))?;
    /// let d = Decomposition::new(&[8, 4], &[1, 1], &[true, false], 1, Stencil::Faces)?;
    /// let mut halo = HaloExchange::builder(&world, &d).build()?;
    /// let ext = halo.local_extent().to_vec(); // [10, 6]: the block and its halo
    /// let mut u: Vec<f64> = (0..ext[0] * ext[1]).map(|i| i as f64).collect();
    /// halo.start(&[&u])?;
    /// halo.wait(Duration::from_secs(10), &mut [&mut u])?;
    /// // Cell 0 of row 1 is the halo below axis 0: the last owned cell of that row.
    /// assert_eq!(u[ext[0]], u[ext[0] + 8]);
    /// assert_eq!(halo.stats().exchanges, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn build(self) -> Result<HaloExchange> {
        self.check()?;
        let me = self.world.rank();
        let neighbours = self.decomp.neighbours(me);
        // Every face is packed at both ends (into sode's buffers, or
        // gathered from the shared sets), over RDMA too: nothing is
        // written in place, so every direction to a rank travels in one
        // message (as a face packed at both ends does in
        // `pattern::Grouping`).
        let carried = group_links(&neighbours);
        let links = carried
            .iter()
            .map(|c| self.link(&neighbours, c))
            .collect::<Result<Vec<_>>>()?;
        let ext = self.decomp.local_extent(me);
        let mut builder = self.links.with_links(links);
        if self.shared > 0 {
            builder = builder.shared_sets(shared_sets(
                &ext,
                self.elem,
                self.fields,
                self.shared,
                &neighbours,
                &carried,
            )?);
        }
        let mut exchange = builder.build()?;
        exchange.fill_sends_each_start()?;
        let faces = neighbours
            .iter()
            .map(|n| Face::of(n, &ext, self.elem))
            .collect();
        let mut link_of = vec![0; neighbours.len()];
        for (l, c) in carried.iter().enumerate() {
            c.send.iter().for_each(|&k| link_of[k] = l);
        }
        Ok(HaloExchange {
            ext,
            elem: self.elem,
            fields: self.fields,
            shared: self.shared,
            started: vec![true; self.fields],
            carrying_all: true,
            neighbours,
            carried,
            link_of,
            faces,
            depth: 0,
            by_depth: Vec::new(),
            exchange,
        })
    }

    /// The link carrying the faces `c` lists: its messages' bytes (every
    /// field) and tags, named by its peer and directions.
    fn link(&self, neighbours: &[Neighbour], c: &Carried) -> Result<Link> {
        let bytes = |list: &[usize], send: bool| {
            let cells = list.iter().try_fold(0usize, |sum, &k| {
                let n = &neighbours[k];
                sum.checked_add(if send { n.send.cells() } else { n.recv.cells() })
            });
            cells
                .and_then(|c| c.checked_mul(self.elem))
                .and_then(|b| b.checked_mul(self.fields))
                .ok_or_else(|| HaloError::Usage {
                    op: "build",
                    why: format!(
                        "the faces to rank {} of {} fields of {}-byte cells overflow the address space",
                        neighbours[list[0]].rank, self.fields, self.elem
                    ),
                })
        };
        let first = &neighbours[c.send[0]];
        let (send_tag, recv_tag) = match c.send.as_slice() {
            [_] => (first.send_tag(), first.recv_tag()),
            _ => (PEER_TAG, PEER_TAG),
        };
        let directions: Vec<String> = c.send.iter().map(|&k| neighbours[k].direction()).collect();
        Ok(Link {
            peer: first.rank,
            send: Some(Message {
                len: bytes(&c.send, true)?,
                tag: send_tag,
            }),
            recv: Some(Message {
                len: bytes(&c.recv, false)?,
                tag: recv_tag,
            }),
            offset: first.offset.clone(),
            name: format!("rank {} ({})", first.rank, directions.join(" / ")),
        })
    }
}

/// The neighbours one link carries: every direction to its peer when the
/// peer is reached by a copy, shared memory or TCP (one message each
/// way); over RDMA (which writes faces in place and spreads them over its
/// engines), one face, or every edge and corner to the peer.
#[derive(Debug)]
struct Carried {
    /// The neighbours (indices into the neighbour list) whose faces it
    /// sends, in the order packed: by direction.
    send: Vec<usize>,
    /// The same neighbours, in the order their halos are unpacked: by the
    /// opposite direction, the order in which the peer packs them.
    recv: Vec<usize>,
}

/// The links of `neighbours`, one a rank, in the order of each rank's
/// first neighbour.
fn group_links(neighbours: &[Neighbour]) -> Vec<Carried> {
    let mut carried: Vec<Carried> = Vec::new();
    let mut peers: Vec<usize> = Vec::new(); // each link's rank
    for (k, n) in neighbours.iter().enumerate() {
        match peers.iter().position(|&p| p == n.rank) {
            Some(l) => carried[l].send.push(k),
            None => {
                peers.push(n.rank);
                carried.push(Carried {
                    send: vec![k],
                    recv: Vec::new(),
                });
            }
        }
    }
    for c in &mut carried {
        c.send
            .sort_by(|&a, &b| neighbours[a].offset.cmp(&neighbours[b].offset));
        c.recv = c.send.clone();
        let opposite = |k: usize| {
            neighbours[k]
                .offset
                .iter()
                .map(|o| -o)
                .collect::<Vec<i32>>()
        };
        c.recv.sort_by_key(|&k| opposite(k));
    }
    carried
}

/// The shared sets of `sets` x `fields` arrays of extent `ext`, each
/// [`SharedSets::array_stride`] apart, and each link's faces as runs of a
/// set (in the order [`HaloExchange::start`] packs them).
fn shared_sets(
    ext: &[usize],
    elem: usize,
    fields: usize,
    sets: usize,
    neighbours: &[Neighbour],
    carried: &[Carried],
) -> Result<SharedSets> {
    let overflow = || {
        HaloError::Usage {
        op: "build",
        why: format!("{sets} sets of {fields} arrays of {ext:?} cells of {elem} bytes overflow the address space"),
    }
    };
    let stride = ext
        .iter()
        .try_fold(elem, |b, &e| b.checked_mul(e))
        .and_then(SharedSets::array_stride)
        .ok_or_else(overflow)?;
    let set_len = stride.checked_mul(fields).ok_or_else(overflow)?;
    set_len.checked_mul(sets).ok_or_else(overflow)?;
    let runs = carried
        .iter()
        .map(|c| {
            let (mut send, mut recv) = (Vec::new(), Vec::new());
            for &k in &c.send {
                for f in 0..fields {
                    runs(ext, elem, &neighbours[k].send, f * stride, &mut send);
                }
            }
            for &k in &c.recv {
                for f in 0..fields {
                    runs(ext, elem, &neighbours[k].recv, f * stride, &mut recv);
                }
            }
            LinkRuns {
                send: Some(send),
                recv: Some(recv),
            }
        })
        .collect();
    Ok(SharedSets {
        sets,
        set_len,
        runs,
    })
}

/// A persistent halo exchange: `start` packs each neighbour's interior
/// cells and sends them; `wait` progresses every channel until all halos
/// have arrived and unpacks them.
#[derive(Debug)]
pub struct HaloExchange {
    ext: Vec<usize>,
    elem: usize,
    fields: usize,
    /// Sets of fields sode keeps (0: none).
    shared: usize,
    /// Per field, whether the exchange in flight (or the last) carries it.
    started: Vec<bool>,
    /// Whether every message carries every field at every layer (else
    /// only the fields of the last [`HaloExchange::start_fields`], or
    /// fewer layers).
    carrying_all: bool,
    neighbours: Vec<Neighbour>,
    /// Per link, the neighbours whose faces it carries.
    carried: Vec<Carried>,
    /// Per neighbour, the link that carries its faces.
    link_of: Vec<usize>,
    /// Per neighbour, its faces as runs of one field.
    faces: Vec<Face>,
    /// Layers of each halo the next starts move (0: every layer).
    depth: usize,
    /// The faces at each depth set, made when it was first set.
    by_depth: Vec<(usize, Vec<Face>)>,
    exchange: LinkExchange,
}

/// A neighbour's send and receive regions as runs (byte offset, bytes) of
/// one field's array, in the message's order: computed once, at build, so
/// packing is a copy per run.
#[derive(Debug)]
struct Face {
    send: Vec<sode_shm::Run>,
    recv: Vec<sode_shm::Run>,
    /// Bytes of one field's send and receive faces.
    send_bytes: usize,
    recv_bytes: usize,
}

impl Face {
    fn of(n: &Neighbour, ext: &[usize], elem: usize) -> Face {
        Face::between(&n.send, &n.recv, ext, elem)
    }

    /// The faces of `n` at `depth` layers ([`Region::at_depth`]).
    fn at_depth(n: &Neighbour, ext: &[usize], elem: usize, depth: usize) -> Face {
        let send = n.send.at_depth(&n.offset, depth, true);
        let recv = n.recv.at_depth(&n.offset, depth, false);
        Face::between(&send, &recv, ext, elem)
    }

    fn between(send_cells: &Region, recv_cells: &Region, ext: &[usize], elem: usize) -> Face {
        let (mut send, mut recv) = (Vec::new(), Vec::new());
        runs(ext, elem, send_cells, 0, &mut send);
        runs(ext, elem, recv_cells, 0, &mut recv);
        let bytes = |runs: &[sode_shm::Run]| runs.iter().map(|r| r.len).sum();
        Face {
            send_bytes: bytes(&send),
            recv_bytes: bytes(&recv),
            send,
            recv,
        }
    }
}

/// The faces at `depth` (0: `faces`, as built; else those made when it was
/// set).
fn faces_at<'a>(faces: &'a [Face], by_depth: &'a [(usize, Vec<Face>)], depth: usize) -> &'a [Face] {
    by_depth
        .iter()
        .find(|(d, _)| *d == depth && depth != 0)
        .map_or(faces, |(_, f)| f.as_slice())
}

/// How the fields' faces lie in the links' messages: each link's faces
/// (at the depth set), face by face and within a face field by field,
/// in the order both ends use.
struct Packing<'a> {
    carried: &'a [Carried],
    faces: &'a [Face],
    fields: usize,
}

impl Packing<'_> {
    /// Packs into each link's message the faces it sends of every field
    /// `array_of` gives an array for (field `f` from
    /// `arrays[array_of(f)]`).
    fn pack<T: Pod>(
        &self,
        exchange: &mut LinkExchange,
        arrays: &[&[T]],
        array_of: impl Fn(usize) -> Option<usize>,
    ) -> Result<()> {
        for (l, c) in self.carried.iter().enumerate() {
            let out = exchange.send_buf(l)?;
            let mut at = 0;
            for &k in &c.send {
                for a in (0..self.fields).filter_map(&array_of) {
                    let from = bytemuck::cast_slice(arrays[a]);
                    at += gather_runs(from, &self.faces[k].send, &mut out[at..]);
                }
            }
        }
        Ok(())
    }

    /// Unpacks each link's message into the halos it fills, as
    /// [`pack`](Self::pack) laid it out, then releases the receive
    /// buffers ([`LinkExchange::receives_read`]).
    fn unpack<T: Pod>(
        &self,
        exchange: &mut LinkExchange,
        arrays: &mut [&mut [T]],
        array_of: impl Fn(usize) -> Option<usize>,
    ) -> Result<()> {
        for (l, c) in self.carried.iter().enumerate() {
            let data = exchange.recv_buf(l)?;
            let mut at = 0;
            for &k in &c.recv {
                for a in (0..self.fields).filter_map(&array_of) {
                    let into = bytemuck::cast_slice_mut(&mut *arrays[a]);
                    at += scatter_runs(&data[at..], &self.faces[k].recv, into);
                }
            }
        }
        // Read: the next iteration's data may land before the next start.
        exchange.receives_read()
    }

    /// From the next start on, each link's messages carry `fields` of
    /// the fields.
    fn carry(&self, exchange: &mut LinkExchange, fields: usize) -> Result<()> {
        for (l, c) in self.carried.iter().enumerate() {
            let send: usize = c.send.iter().map(|&k| self.faces[k].send_bytes).sum();
            let recv: usize = c.recv.iter().map(|&k| self.faces[k].recv_bytes).sum();
            exchange.carry_send(l, send * fields)?;
            exchange.carry_recv(l, recv * fields)?;
        }
        Ok(())
    }
}

/// The packing of `carried`'s faces at `depth` (see [`faces_at`]).
fn packing<'a>(
    carried: &'a [Carried],
    faces: &'a [Face],
    by_depth: &'a [(usize, Vec<Face>)],
    depth: usize,
    fields: usize,
) -> Packing<'a> {
    Packing {
        carried,
        faces: faces_at(faces, by_depth, depth),
        fields,
    }
}

/// For a start on the fields `which` lists (`started` marks them): where
/// field `f`'s array is in the list, `None` for a field left out.
fn listed<'a>(started: &'a [bool], which: &'a [usize]) -> impl Fn(usize) -> Option<usize> + 'a {
    move |f| {
        started[f]
            .then(|| which.iter().position(|&w| w == f))
            .flatten()
    }
}

impl HaloExchange {
    /// A builder for `decomp` over the ranks of `world`.
    pub fn builder<'w>(world: &'w World, decomp: &Decomposition) -> HaloExchangeBuilder<'w> {
        HaloExchangeBuilder {
            world,
            decomp: decomp.clone(),
            elem: 8,
            fields: 1,
            shared: 0,
            links: LinkExchangeBuilder::new(world, Vec::new()),
        }
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
        let by_link = self.exchange.localities();
        self.link_of.iter().map(|&l| by_link[l]).collect()
    }

    /// How each neighbour is reached, in the decomposition's order, as
    /// text: the channel, and for TCP the gateways passed (`tcp via rank 2`).
    pub fn paths(&self) -> Vec<String> {
        let by_link = self.exchange.paths();
        self.link_of.iter().map(|&l| by_link[l].clone()).collect()
    }

    /// Which channel each neighbour uses: `shm`, `rdma` or `local`.
    pub fn channels(&self) -> Vec<&'static str> {
        self.localities().into_iter().map(Locality::name).collect()
    }

    /// How many neighbours' halos are read straight from their owner's
    /// array ([`HaloExchangeBuilder::shared_fields`]); the others are
    /// packed.
    pub fn halos_read_in_place(&self) -> usize {
        self.link_of
            .iter()
            .filter(|&&l| self.exchange.read_in_place(l))
            .count()
    }

    /// Per neighbour on this node, the shared-memory thresholds its halo
    /// was given a path by and where they were measured; see
    /// [`LinkExchange::calibrations`].
    pub fn calibrations(&self) -> Vec<sode_shm::PeerCalibration> {
        self.exchange.calibrations()
    }

    /// The RDMA schedule, if any neighbour is reached over RDMA.
    pub fn plan_summary(&self) -> Option<&str> {
        self.exchange.plan_summary()
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.exchange.rank()
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
        self.check_arrays::<T>(op, fields, self.fields, lens)
    }

    /// Whether `given` arrays of `lens` cells each, of `T`, are the
    /// `expected` arrays of the exchange's layout.
    fn check_arrays<T: Pod>(
        &self,
        op: &'static str,
        given: usize,
        expected: usize,
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
        if given != expected {
            return Err(HaloError::Usage {
                op,
                why: format!("{given} fields given, {expected} expected"),
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

    /// The error of `start` / `wait` with the caller's arrays on an
    /// exchange whose fields sode keeps.
    fn not_shared(&self, op: &'static str) -> Result<()> {
        if self.shared == 0 {
            return Ok(());
        }
        Err(HaloError::Usage {
            op,
            why: "the exchange keeps its fields (shared_fields): write them through shared_fields() and exchange with start_set / wait_set".into(),
        })
    }

    /// The fields sode keeps ([`HaloExchangeBuilder::shared_fields`]):
    /// every array, set `s`'s field `f` at `s * fields + f`, each of the
    /// local extent. Borrowable while an exchange is in flight, to compute
    /// then; as with MPI's buffers, the set in flight's interior cells its
    /// neighbours read must not change, nor its halo be read, before
    /// [`wait_set`](Self::wait_set) returns.
    ///
    /// # Errors
    ///
    /// [`HaloError::Usage`] when the exchange keeps no fields, or when `T`
    /// is not the element type (size or alignment) it was built for.
    pub fn shared_fields<T: Pod>(&mut self) -> Result<Vec<&mut [T]>> {
        let op = "shared_fields";
        if self.shared == 0 {
            return Err(HaloError::Usage {
                op,
                why: "the exchange keeps no fields: build it with shared_fields(sets)".into(),
            });
        }
        self.check::<T>(op, self.fields, std::iter::empty())?;
        let array = self.ext.iter().product::<usize>() * self.elem;
        // Checked at build.
        let stride = SharedSets::array_stride(array).unwrap_or(usize::MAX);
        let mut rest = self.exchange.shared_sets_mut()?;
        let mut out = Vec::with_capacity(self.shared * self.fields);
        for _ in 0..self.shared * self.fields {
            let (this, next) = rest.split_at_mut(stride.min(rest.len()));
            let cast = bytemuck::try_cast_slice_mut::<u8, T>(&mut this[..array]).map_err(|e| {
                HaloError::Usage {
                    op,
                    why: format!("the shared fields cannot hold cells of this type ({e})"),
                }
            })?;
            out.push(cast);
            rest = next;
        }
        Ok(out)
    }

    /// Starts exchanging set `set` of the fields sode keeps: neighbours on
    /// this node read its interior faces in place, the others get them
    /// packed. Compute between this and [`wait_set`](Self::wait_set) with
    /// [`shared_fields`](Self::shared_fields).
    ///
    /// # Errors
    ///
    /// [`HaloError::Usage`] for a set it does not keep;
    /// [`HaloError::State`] while an exchange is in flight; a channel's
    /// error ([`HaloError::Shm`], [`HaloError::Rdma`], [`HaloError::Tcp`])
    /// or [`HaloError::JobFailed`] when a peer failed or died.
    pub fn start_set(&mut self, set: usize) -> Result<()> {
        self.exchange.start_set(set)
    }

    /// Progresses every channel until every halo of the set in flight has
    /// arrived in it (or `deadline`, a timeout or an instant as for
    /// [`wait`](Self::wait), passes: [`HaloError::Timeout`], after which
    /// `wait_set` may be called again).
    ///
    /// # Errors
    ///
    /// [`HaloError::Timeout`] at the deadline, naming what is outstanding
    /// (the exchange stays in flight); [`HaloError::State`] without an
    /// exchange in flight; a channel's error or [`HaloError::JobFailed`]
    /// when a peer failed or died (the exchange cannot be used again).
    pub fn wait_set(&mut self, deadline: impl Into<Deadline>) -> Result<()> {
        self.exchange.wait(deadline)
    }

    /// Packs every neighbour's interior cells from `fields` and starts the
    /// exchange on every channel.
    ///
    /// # Errors
    ///
    /// [`HaloError::Usage`] when `fields` are not as many as built, not of
    /// the local extent, or not of the element type, or when the exchange
    /// keeps its fields (use [`start_set`](Self::start_set));
    /// [`HaloError::State`] while an exchange is in flight; a channel's
    /// error or [`HaloError::JobFailed`] when a peer failed or died.
    pub fn start<T: Pod>(&mut self, fields: &[&[T]]) -> Result<()> {
        if self.exchange.in_flight() {
            // The state error, naming `start` rather than a buffer.
            return self.exchange.start();
        }
        self.not_shared("start")?;
        self.check::<T>("start", fields.len(), fields.iter().map(|f| f.len()))?;
        self.carry_all()?;
        let began = Instant::now();
        packing(
            &self.carried,
            &self.faces,
            &self.by_depth,
            self.depth,
            self.fields,
        )
        .pack(&mut self.exchange, fields, Some)?;
        self.exchange.add_start_time(began.elapsed());
        self.exchange.start()
    }

    /// One non-blocking pass over every channel: true once all halos have
    /// arrived (then call [`wait`](HaloExchange::wait) to unpack them).
    ///
    /// # Errors
    ///
    /// As [`wait`](Self::wait), but never [`HaloError::Timeout`].
    pub fn test(&mut self) -> Result<bool> {
        self.exchange.test()
    }

    /// Progresses every channel until all halos have arrived (or `deadline`
    /// passes: [`HaloError::Timeout`], after which `wait` may be called
    /// again), then unpacks them into `fields`.
    ///
    /// `deadline` is a timeout (a `Duration`, from when the wait begins) or
    /// an `Instant`; time this process is stopped does not count against it
    /// ([`Deadline`]).
    ///
    /// # Errors
    ///
    /// [`HaloError::Timeout`] at the deadline, naming what is outstanding
    /// (the exchange stays in flight; nothing is unpacked);
    /// [`HaloError::Usage`] for `fields` unlike those given to
    /// [`start`](Self::start); [`HaloError::State`] without an exchange in
    /// flight; a channel's error or [`HaloError::JobFailed`] when a peer
    /// failed or died (the exchange cannot be used again).
    pub fn wait<T: Pod>(
        &mut self,
        deadline: impl Into<Deadline>,
        fields: &mut [&mut [T]],
    ) -> Result<()> {
        self.not_shared("wait")?;
        self.check::<T>("wait", fields.len(), fields.iter().map(|f| f.len()))?;
        if !self.started.iter().all(|&s| s) {
            return Err(HaloError::Usage {
                op: "wait",
                why: "the exchange was started on some fields: finish it with wait_fields".into(),
            });
        }
        self.exchange.wait(deadline)?;
        let began = Instant::now();
        packing(
            &self.carried,
            &self.faces,
            &self.by_depth,
            self.depth,
            self.fields,
        )
        .unpack(&mut self.exchange, fields, Some)?;
        self.exchange.add_wait_time(began.elapsed());
        Ok(())
    }

    /// Every message carries every field (at the depth set), after starts
    /// on some or at another depth.
    fn carry_all(&mut self) -> Result<()> {
        self.started.iter_mut().for_each(|s| *s = true);
        if self.carrying_all && self.depth == 0 {
            return Ok(());
        }
        self.carrying_all = false;
        packing(
            &self.carried,
            &self.faces,
            &self.by_depth,
            self.depth,
            self.fields,
        )
        .carry(&mut self.exchange, self.fields)?;
        let shape = start_shape(self.started.iter().copied(), self.depth);
        self.exchange.set_shape(shape)?;
        self.carrying_all = self.depth == 0;
        Ok(())
    }

    /// Makes the starts that follow move at most `depth` layers of each
    /// halo: the layers nearest the owned cells, along every axis a message
    /// crosses (corners `depth` by `depth`); 0 (as built) moves every
    /// layer. A code whose steps need halos of different widths builds one
    /// exchange at the widest and sets the depth before each start
    /// ([`start_fields`](Self::start_fields) picks the fields). Every
    /// channel then moves only those layers (RDMA shortens its writes);
    /// the outer layers keep what they held. Every rank sets the same
    /// depth.
    ///
    /// # Errors
    ///
    /// [`HaloError::Usage`] while an exchange is in flight, or for a depth
    /// on an exchange that keeps its fields (their halos move whole).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(halo: &mut sode::HaloExchange, u: &mut [f64]) -> sode::Result<()> {
    /// # let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    /// halo.set_depth(1)?; // this step reads one layer of a halo built 2 wide
    /// halo.start(&[&u[..]])?;
    /// halo.wait(deadline, &mut [&mut u[..]])?;
    /// halo.set_depth(0)?; // every layer again
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_depth(&mut self, depth: usize) -> Result<()> {
        let op = "set_depth";
        if self.exchange.in_flight() {
            return Err(HaloError::Usage {
                op,
                why: "an exchange is in flight: wait for it first".into(),
            });
        }
        if depth != 0 && self.shared > 0 {
            return Err(HaloError::Usage {
                op,
                why: format!(
                    "depth {depth}: the exchange keeps its fields, whose halos move whole"
                ),
            });
        }
        if depth != 0 && !self.by_depth.iter().any(|(d, _)| *d == depth) {
            let faces = self
                .neighbours
                .iter()
                .map(|n| Face::at_depth(n, &self.ext, self.elem, depth))
                .collect();
            self.by_depth.push((depth, faces));
        }
        self.depth = depth;
        Ok(())
    }

    /// Marks the fields `which` lists as started, the others not; refuses
    /// a field listed twice or one the exchange lacks.
    fn select(&mut self, op: &'static str, which: &[usize]) -> Result<()> {
        let fields = self.fields;
        let misuse = |why: String| HaloError::Usage { op, why };
        self.started.iter_mut().for_each(|s| *s = false);
        for &f in which {
            let Some(s) = self.started.get_mut(f) else {
                return Err(misuse(format!(
                    "field {f}: the exchange has {fields} fields, numbered from 0"
                )));
            };
            if std::mem::replace(s, true) {
                return Err(misuse(format!(
                    "field {f} is listed twice: list each field once"
                )));
            }
        }
        Ok(())
    }

    /// [`start`](Self::start) on some of the fields only: `arrays[k]` is
    /// the array of field `which[k]` (numbered from 0, each once). Each
    /// message carries those fields alone, on every channel, and
    /// [`wait_fields`](Self::wait_fields) fills their halos only: the
    /// other fields' halos are left as they are. Every neighbour must
    /// start the same fields. For a code that exchanges different sets of
    /// its fields at different points through one exchange.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start); [`HaloError::Usage`] also for a field
    /// listed twice or beyond those built, or not one array per field
    /// listed.
    pub fn start_fields<T: Pod>(&mut self, which: &[usize], arrays: &[&[T]]) -> Result<()> {
        let op = "start_fields";
        if self.exchange.in_flight() {
            return self.exchange.start();
        }
        self.not_shared(op)?;
        self.check_arrays::<T>(
            op,
            arrays.len(),
            which.len(),
            arrays.iter().map(|a| a.len()),
        )?;
        self.select(op, which)?;
        self.carrying_all = false;
        let began = Instant::now();
        let packing = packing(
            &self.carried,
            &self.faces,
            &self.by_depth,
            self.depth,
            self.fields,
        );
        packing.carry(&mut self.exchange, which.len())?;
        let shape = start_shape(self.started.iter().copied(), self.depth);
        self.exchange.set_shape(shape)?;
        // In field order, whatever the list's: both ends lay the message
        // out alike.
        packing.pack(&mut self.exchange, arrays, listed(&self.started, which))?;
        self.exchange.add_start_time(began.elapsed());
        self.exchange.start()
    }

    /// [`wait`](Self::wait) for an exchange started with
    /// [`start_fields`](Self::start_fields): unpacks the halos of the
    /// fields `which` lists (the same as at start) into `arrays`.
    ///
    /// # Errors
    ///
    /// As [`wait`](Self::wait); [`HaloError::Usage`] also when `which`
    /// is not the list the exchange was started with.
    pub fn wait_fields<T: Pod>(
        &mut self,
        deadline: impl Into<Deadline>,
        which: &[usize],
        arrays: &mut [&mut [T]],
    ) -> Result<()> {
        let op = "wait_fields";
        self.not_shared(op)?;
        self.check_arrays::<T>(
            op,
            arrays.len(),
            which.len(),
            arrays.iter().map(|a| a.len()),
        )?;
        let started = self.started.iter().filter(|&&s| s).count();
        let same =
            which.len() == started && which.iter().all(|&f| self.started.get(f) == Some(&true));
        if !same {
            let list: Vec<usize> = (0..self.fields).filter(|&f| self.started[f]).collect();
            return Err(HaloError::Usage {
                op,
                why: format!(
                    "fields {which:?} asked for, but the exchange was started on {list:?}"
                ),
            });
        }
        self.exchange.wait(deadline)?;
        let began = Instant::now();
        let packing = packing(
            &self.carried,
            &self.faces,
            &self.by_depth,
            self.depth,
            self.fields,
        );
        packing.unpack(&mut self.exchange, arrays, listed(&self.started, which))?;
        self.exchange.add_wait_time(began.elapsed());
        Ok(())
    }

    /// What it has done since it was built or
    /// [`reset_stats`](Self::reset_stats): iterations completed, time in
    /// start (packing included) and in wait (unpacking included), bytes
    /// sent and received, and per neighbouring rank its channel and bytes
    /// per iteration, every direction to it together.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(halo: &mut sode::HaloExchange) {
    /// let s = halo.stats();
    /// if s.exchanges > 0 {
    ///     let per = |t: std::time::Duration| t.as_secs_f64() * 1e6 / s.exchanges as f64;
    ///     println!("{:.1} us in start, {:.1} us in wait, per exchange", per(s.start_time), per(s.wait_time));
    /// }
    /// for n in &s.neighbours {
    ///     println!("rank {} over {}: {} bytes out, {} in", n.rank, n.channel.name(), n.bytes_sent, n.bytes_received);
    /// }
    /// # }
    /// ```
    pub fn stats(&self) -> ExchangeStats {
        self.exchange.stats()
    }

    /// Sets the counters of [`stats`](Self::stats) to zero.
    pub fn reset_stats(&mut self) {
        self.exchange.reset_stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decomp::Stencil;

    #[test]
    fn every_direction_to_a_rank_is_one_link_laid_out_alike_at_both_ends() {
        // A periodic 2 x 2 grid: rank 0's four corners are all rank 3,
        // both faces of each axis rank 1 or 2.
        let d = Decomposition::new(&[8, 8], &[2, 2], &[true, true], 1, Stencil::Full).unwrap();
        let neighbours = d.neighbours(0);
        let carried = group_links(&neighbours);
        assert_eq!(carried.len(), 3);
        assert!(carried.iter().all(|c| {
            let rank = neighbours[c.send[0]].rank;
            c.send
                .iter()
                .chain(&c.recv)
                .all(|&k| neighbours[k].rank == rank)
        }));
        let corners: Vec<&Carried> = carried.iter().filter(|c| c.send.len() == 4).collect();
        assert_eq!(corners.len(), 1);
        let c = corners[0];
        assert!(c.send.iter().all(|&k| neighbours[k].rank == 3));
        // Sent by direction; received in the order the peer sends them (by
        // the opposite direction).
        let sent: Vec<&Vec<i32>> = c.send.iter().map(|&k| &neighbours[k].offset).collect();
        let got: Vec<&Vec<i32>> = c.recv.iter().map(|&k| &neighbours[k].offset).collect();
        assert_eq!(
            sent,
            [&vec![-1, -1], &vec![-1, 1], &vec![1, -1], &vec![1, 1]]
        );
        assert_eq!(
            got,
            [&vec![1, 1], &vec![1, -1], &vec![-1, 1], &vec![-1, -1]]
        );
        // Without periodicity each neighbour is another rank: a link each.
        let d = Decomposition::new(&[8, 8], &[2, 2], &[false, false], 1, Stencil::Full).unwrap();
        assert_eq!(group_links(&d.neighbours(0)).len(), 3);
    }
}
