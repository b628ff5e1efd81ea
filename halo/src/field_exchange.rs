//! [`FieldExchange`]: the field and pattern model ([`crate::field`],
//! [`crate::pattern`]) as one handle, built once and started every
//! iteration on whatever arrays the caller holds, typed as they are.
//!
//! What the handle adds to the toolkit: the ranks agree at build that they
//! described the same fields and grid (a rank that did not fails every
//! rank alike, naming it and what differs); each field's array is checked
//! per start against the layout it was built with (its element type and
//! the bytes it spans); the pieces, grouping, shapes and carried lengths
//! are its own. Over RDMA it packs every message into sode's registered
//! buffers, unless the caller lends it arrays
//! ([`FieldExchangeBuilder::lend`]): starts on those keep long faces in
//! place, as the C ABI's committed arrays do.

use sode_job::Deadline;
use std::time::Duration;

use bytemuck::Pod;
use sode_job::World;

use crate::channel::{start_shape, StartMemory};
use crate::error::{HaloError, Result};
use crate::field::{common_digest, ElemType, FieldLayout};
use crate::links::LinkExchange;
use crate::pattern::{
    self, BoxMessage, FieldArrays, Grouping, LinkPieces, PlannedLinks, ProcessGrid,
};
use crate::settings::Transport;
use crate::stats::ExchangeStats;
use crate::zero_copy::{self, ZeroCopy};
use crate::Locality;

/// A Rust element type a field may have: `f32`, `f64`, `i32`, `i64`, and
/// complex numbers as `[f32; 2]` and `[f64; 2]` (real, imaginary). Any
/// other plain type goes as its bytes: [`Array::pod`].
pub trait Element: Pod + sealed::Sealed {
    /// Its [`ElemType`].
    const TYPE: ElemType;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
    impl Sealed for [f32; 2] {}
    impl Sealed for [f64; 2] {}
}

impl Element for f32 {
    const TYPE: ElemType = ElemType::F32;
}
impl Element for f64 {
    const TYPE: ElemType = ElemType::F64;
}
impl Element for i32 {
    const TYPE: ElemType = ElemType::I32;
}
impl Element for i64 {
    const TYPE: ElemType = ElemType::I64;
}
impl Element for [f32; 2] {
    const TYPE: ElemType = ElemType::C32;
}
impl Element for [f64; 2] {
    const TYPE: ElemType = ElemType::C64;
}

/// One field's array, read at a start: `(&u[..]).into()`.
#[derive(Debug, Clone, Copy)]
pub struct Array<'a> {
    ty: ElemType,
    bytes: &'a [u8],
}

impl<'a> Array<'a> {
    /// An array of any plain type `T` (a `#[repr(C)]` struct without
    /// padding, say), for a field of [`ElemType::Bytes`] of its size.
    pub fn pod<T: Pod>(a: &'a [T]) -> Self {
        Array {
            ty: ElemType::Bytes(std::mem::size_of::<T>()),
            bytes: bytemuck::cast_slice(a),
        }
    }
}

impl<'a, T: Element> From<&'a [T]> for Array<'a> {
    fn from(a: &'a [T]) -> Self {
        Array {
            ty: T::TYPE,
            bytes: bytemuck::cast_slice(a),
        }
    }
}

impl<'a, T: Element> From<&'a Vec<T>> for Array<'a> {
    fn from(a: &'a Vec<T>) -> Self {
        Array::from(a.as_slice())
    }
}

/// One field's array, whose halos a wait fills: `(&mut u[..]).into()`.
#[derive(Debug)]
pub struct ArrayMut<'a> {
    ty: ElemType,
    bytes: &'a mut [u8],
}

impl<'a> ArrayMut<'a> {
    /// As [`Array::pod`].
    pub fn pod<T: Pod>(a: &'a mut [T]) -> Self {
        ArrayMut {
            ty: ElemType::Bytes(std::mem::size_of::<T>()),
            bytes: bytemuck::cast_slice_mut(a),
        }
    }
}

impl<'a, T: Element> From<&'a mut [T]> for ArrayMut<'a> {
    fn from(a: &'a mut [T]) -> Self {
        ArrayMut {
            ty: T::TYPE,
            bytes: bytemuck::cast_slice_mut(a),
        }
    }
}

impl<'a, T: Element> From<&'a mut Vec<T>> for ArrayMut<'a> {
    fn from(a: &'a mut Vec<T>) -> Self {
        ArrayMut::from(a.as_mut_slice())
    }
}

/// Builds a [`FieldExchange`]: the fields, then the pattern, which builds
/// it (collective).
#[derive(Debug)]
pub struct FieldExchangeBuilder<'w> {
    world: &'w World,
    layouts: Vec<FieldLayout>,
    transport: Transport,
    timeout: Duration,
    /// Each field's array, lent for faces in place over RDMA, per lent
    /// set.
    #[cfg(feature = "rdma")]
    lent: Vec<Vec<sode_transport::UserMemory>>,
    zero_copy: Option<ZeroCopy>,
}

impl FieldExchangeBuilder<'_> {
    /// The channel between ranks on different nodes (default: RDMA where
    /// there is a device, else TCP; see [`Transport`]).
    pub fn transport(mut self, t: Transport) -> Self {
        self.transport = t;
        self
    }

    /// How long each collective step of the build may wait for the other
    /// ranks (default 60 s).
    pub fn setup_timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Lends each field's array (`memory[f]` for field `f`, at least the
    /// bytes its layout spans) to the RDMA channel, so that faces of long
    /// runs travel in place: the device reads them from the array and
    /// writes the halos into it, with no pack and no unpack, in every
    /// start on exactly these arrays. Each call lends one more set: lend
    /// the solution's arrays and each Runge-Kutta stage's (or both
    /// buffers of a double-buffered code), and a start on any one set's
    /// arrays travels in place (ranks may lend different numbers). A
    /// start on arrays no set holds, on some fields or at a depth goes
    /// through sode's buffers, as without lending. Which faces:
    /// [`zero_copy`](Self::zero_copy). The promises that make this safe
    /// are [`UserMemory::new`](sode_transport::UserMemory::new)'s.
    #[cfg(feature = "rdma")]
    pub fn lend(mut self, memory: Vec<sode_transport::UserMemory>) -> Self {
        self.lent.push(memory);
        self
    }

    /// Which faces of lent arrays travel in place over RDMA (default:
    /// `SODE_ZERO_COPY`, else [`ZeroCopy::Auto`]: faces of long runs).
    /// Without [`lend`](Self::lend) every face is packed whatever the mode.
    pub fn zero_copy(mut self, mode: ZeroCopy) -> Self {
        self.zero_copy = Some(mode);
        self
    }

    /// Builds the exchange of a Cartesian process grid: this rank is at
    /// `coords` of `grid`, and every field's halo comes from the
    /// neighbours `grid.stencil` reads. Collective: every rank of the job
    /// calls it with the same fields (their element types, halo widths,
    /// memory orders and overlaps; extents may differ) and the same grid.
    ///
    /// # Errors
    ///
    /// On every rank alike: [`HaloError::Usage`] when a rank's grid or
    /// fields are not valid, or differ from rank 0's, naming that rank
    /// and why; then as [`LinkExchange`]'s build.
    pub fn cartesian(self, grid: &ProcessGrid<'_>, coords: &[usize]) -> Result<FieldExchange> {
        let checked = self
            .check_grid(grid, coords)
            .and_then(|()| self.check_layouts(grid.dims.len()));
        let mine = checked.as_ref().map_err(Clone::clone).map(|_| {
            let stencil = format!("{:?}", grid.stencil);
            common_digest((grid.dims, grid.periodic, stencil, grid.at), &self.cards())
        });
        // Layouts not checked valid are not read: the step fails anyway.
        let my_packed = match checked {
            Ok(_) => zero_copy::packed_faces(&self.layouts, grid.dims.len(), self.lent_mode()),
            Err(_) => 0,
        };
        let packed = self.agree_telling(mine, my_packed);
        let (packed, spans) = packed.and_then(|p| Self::valid(checked).map(|s| (p, s)))?;
        let mut builder = LinkExchange::builder(self.world, Vec::new())
            .transport(self.transport)
            .setup_timeout(self.timeout);
        let grouped = grouped(&mut builder, self.world.size())?;
        let grouping = Grouping {
            whole: &grouped,
            my_packed,
            packed: &packed,
        };
        let planned = PlannedLinks::cartesian(&self.layouts, &grid.neighbours(coords), &grouping);
        self.finish(builder, planned, true, spans)
    }

    /// Builds an exchange described by its messages: the boxes this rank
    /// sends and receives, each paired with the peer's receive (or send)
    /// by its tag, in the fields' index space, on their first axes.
    /// Collective: every rank calls it with the same fields.
    ///
    /// # Errors
    ///
    /// On every rank alike: [`HaloError::Usage`] when a rank's fields or
    /// boxes are not valid (a box outside a field it carries, a peer or
    /// field out of range), or its fields differ from rank 0's; then as
    /// [`LinkExchange`]'s build, which fails where a send and its
    /// receive differ in length.
    pub fn boxes(self, sends: &[BoxMessage], recvs: &[BoxMessage]) -> Result<FieldExchange> {
        let axes = sends.iter().chain(recvs).map(|m| m.lo.len()).max();
        let axes = axes.unwrap_or_else(|| self.layouts.first().map_or(0, |l| l.halo_lo.len()));
        let checked = self
            .check_layouts(axes)
            .and_then(|spans| self.check_boxes(axes, sends, recvs).map(|()| spans));
        let mine = checked
            .as_ref()
            .map_err(Clone::clone)
            .map(|_| common_digest("boxes", &self.cards()));
        let spans = self.agree(mine).and(Self::valid(checked))?;
        let mut builder = LinkExchange::builder(self.world, Vec::new())
            .transport(self.transport)
            .setup_timeout(self.timeout);
        let grouped = grouped(&mut builder, self.world.size())?;
        let planned = PlannedLinks::boxes(&self.layouts, sends, recvs, &grouped);
        self.finish(builder, planned, false, spans)
    }

    /// Builds the exchange of a grid of domains, several a rank (tiles, as
    /// tiled ocean and atmosphere models keep them): `grid.at` gives each
    /// domain's rank, `tiles` this rank's, each at an index along the last
    /// axis of every field's array. Every field's halo comes from the
    /// neighbouring domains `grid.stencil` reads; a neighbour this rank
    /// holds too is copied, never sent. Collective: every rank calls it
    /// with the same fields and the same grid (a rank may hold any number
    /// of tiles, one at least).
    ///
    /// ```no_run
    /// # fn f(world: &sode_job::World) -> sode::Result<()> {
    /// use sode::field::{ElemType, FieldLayout, Order};
    /// use sode::pattern::{ProcessGrid, Tile};
    /// // u(1-2:16+2, 1-2:8+2, 2): two 16 x 8 tiles a rank, halo 2, on a
    /// // periodic 4 x 2 grid of tiles held by 4 ranks, two each along axis 0.
    /// let u = FieldLayout::with_halo(ElemType::F64, &[16, 8, 2], &[2, 2], Order::Fortran);
    /// let at: Vec<usize> = (0..8).map(|p| p / 2).collect();
    /// let grid = ProcessGrid { dims: &[2, 4], periodic: &[true, true], stencil: sode::Stencil::Full, at: &at };
    /// let me = world.rank();
    /// let tiles: Vec<Tile> = (0..2)
    ///     .map(|index| Tile { coords: vec![me / 2, 2 * (me % 2) + index], index })
    ///     .collect();
    /// let x = sode::FieldExchange::builder(world, vec![u]).tiles(&grid, &tiles)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// On every rank alike: [`HaloError::Usage`] when a rank's grid,
    /// tiles or fields are not valid (a tile outside the grid or held by
    /// another rank, a field without a tile axis), or differ from rank
    /// 0's, naming that rank and why; then as [`LinkExchange`]'s build.
    pub fn tiles(self, grid: &ProcessGrid<'_>, tiles: &[pattern::Tile]) -> Result<FieldExchange> {
        let job = pattern::TileRank {
            rank: self.world.rank(),
            ranks: self.world.size(),
        };
        // The boxes come from each field's own regions: inside its array.
        let checked = self
            .check_layouts(grid.dims.len())
            .and_then(|spans| Ok((spans, pattern::tile_boxes(&self.layouts, grid, tiles, job)?)));
        let mine = checked.as_ref().map_err(Clone::clone).map(|_| {
            let stencil = format!("{:?}", grid.stencil);
            common_digest(
                ("tiles", grid.dims, grid.periodic, stencil, grid.at),
                &self.cards(),
            )
        });
        let (spans, boxes) = self.agree(mine).and(Self::valid(checked))?;
        let mut builder = LinkExchange::builder(self.world, Vec::new())
            .transport(self.transport)
            .setup_timeout(self.timeout);
        let grouped = grouped(&mut builder, self.world.size())?;
        let planned = PlannedLinks::boxes(&self.layouts, &boxes.sends, &boxes.recvs, &grouped);
        self.finish(builder, planned, false, spans)
    }

    fn cards(&self) -> Vec<crate::field::FieldCard> {
        self.layouts.iter().map(FieldLayout::card).collect()
    }

    fn check_grid(
        &self,
        grid: &ProcessGrid<'_>,
        coords: &[usize],
    ) -> std::result::Result<(), String> {
        grid.check("processes", self.world.size())?;
        let d = grid.dims.len();
        if coords.len() != d {
            return Err(format!(
                "coordinates {coords:?} on a grid of {d} axes: give one per axis"
            ));
        }
        if let Some(a) = (0..d).find(|&a| coords[a] >= grid.dims[a]) {
            return Err(format!(
                "coordinates {coords:?} lie outside the grid {:?} along axis {a}",
                grid.dims
            ));
        }
        let me = pattern::grid_position(grid.dims, coords);
        if grid.at[me] != self.world.rank() {
            return Err(format!(
                "coordinates {coords:?} are rank {}'s on the grid, not this rank's",
                grid.at[me]
            ));
        }
        Ok(())
    }

    /// Every field valid with `axes` grid axes, and the arrays lent for
    /// them (if any) fit; the bytes each field's array spans.
    fn check_layouts(&self, axes: usize) -> std::result::Result<Vec<usize>, String> {
        if self.layouts.is_empty() {
            return Err("no fields: give at least one".into());
        }
        let widths = |w: &[usize]| {
            if w.len() == axes {
                w.to_vec()
            } else {
                vec![0; axes]
            }
        };
        let spans = (self.layouts.iter().enumerate())
            .map(|(f, l)| {
                l.check(axes, &widths(&l.halo_lo), &widths(&l.halo_hi))
                    .map_err(|e| format!("field {f}: {e}"))
            })
            .collect::<std::result::Result<Vec<usize>, String>>()?;
        self.check_lent(&spans)?;
        Ok(spans)
    }

    /// One lent array per field in each set, each at least its field's
    /// span, at most [`MAX_LENT_SETS`](crate::MAX_LENT_SETS) sets, and a
    /// known zero-copy mode; nothing to check without lending.
    #[cfg_attr(not(feature = "rdma"), allow(unused_variables))]
    fn check_lent(&self, spans: &[usize]) -> std::result::Result<(), String> {
        #[cfg(feature = "rdma")]
        if !self.lent.is_empty() {
            if self.lent.len() > crate::MAX_LENT_SETS {
                return Err(format!(
                    "{} sets of arrays lent: at most {}",
                    self.lent.len(),
                    crate::MAX_LENT_SETS
                ));
            }
            for (k, set) in self.lent.iter().enumerate() {
                if set.len() != self.layouts.len() {
                    return Err(format!(
                        "{} arrays lent in set {k} for {} fields: lend one per field, in field order",
                        set.len(),
                        self.layouts.len()
                    ));
                }
                for (f, (m, span)) in set.iter().zip(spans).enumerate() {
                    if m.len() < *span {
                        return Err(format!(
                            "field {f}: the array lent in set {k} holds {} bytes, but its layout spans {span}",
                            m.len()
                        ));
                    }
                }
            }
            self.mode()?;
        }
        Ok(())
    }

    /// The spans of a description every rank agreed was valid.
    fn valid<T>(checked: std::result::Result<T, String>) -> Result<T> {
        checked.map_err(|why| HaloError::Usage { op: "build", why })
    }

    /// The zero-copy mode faces are lent under (`None`: nothing is lent,
    /// or the mode is not valid).
    fn lent_mode(&self) -> Option<ZeroCopy> {
        #[cfg(feature = "rdma")]
        if !self.lent.is_empty() {
            return self.mode().ok();
        }
        None
    }

    /// The zero-copy mode: set, else `SODE_ZERO_COPY`'s.
    #[cfg(feature = "rdma")]
    fn mode(&self) -> std::result::Result<ZeroCopy, String> {
        self.zero_copy.map_or_else(ZeroCopy::from_env, Ok)
    }

    fn check_boxes(
        &self,
        axes: usize,
        sends: &[BoxMessage],
        recvs: &[BoxMessage],
    ) -> std::result::Result<(), String> {
        let size = self.world.size();
        for m in sends.iter().chain(recvs) {
            let what = format!("the box to or from rank {} with tag {}", m.peer, m.tag);
            if m.peer >= size {
                return Err(format!("{what}: the job has {size} ranks"));
            }
            if m.lo.len() != axes || m.size.len() != axes || m.size.contains(&0) {
                return Err(format!(
                    "{what}: every box needs {axes} axes of at least 1 cell, got lo {:?}, size {:?}",
                    m.lo, m.size
                ));
            }
            if let Some(f) = m.field.filter(|&f| f >= self.layouts.len()) {
                return Err(format!(
                    "{what} carries field {f}, but there are {} fields",
                    self.layouts.len()
                ));
            }
            for (f, l) in self
                .layouts
                .iter()
                .enumerate()
                .filter(|(f, _)| m.carries(*f))
            {
                pattern::box_fits(m, l, None).map_err(|e| format!("field {f}: {e}"))?;
            }
        }
        Ok(())
    }

    /// Every rank's verdict on its own description, gathered: fails alike
    /// on every rank unless each is valid and describes what rank 0 does.
    fn agree(&self, mine: std::result::Result<u64, String>) -> Result<()> {
        self.agree_telling(mine, 0).map(drop)
    }

    /// As [`agree`](Self::agree), each rank telling its faces packed at
    /// both sides ([`zero_copy::packed_faces`]) in the same step: every
    /// rank's, by rank.
    fn agree_telling(
        &self,
        mine: std::result::Result<u64, String>,
        packed: u64,
    ) -> Result<Vec<u64>> {
        let gather = |bytes: &[u8]| {
            self.world
                .allgather(bytes, self.timeout)
                .map_err(|source| HaloError::Barrier {
                    source: Box::new(source),
                })
        };
        const VERDICT: usize = 9;
        let mut record = vec![u8::from(mine.is_ok())];
        record.extend_from_slice(&mine.as_ref().map_or(0, |d| *d).to_le_bytes());
        record.extend_from_slice(&packed.to_le_bytes());
        let all = gather(&record)?;
        // Each rank's faces when its verdict is rank 0's and valid.
        let first = all.first().and_then(|r| r.get(..VERDICT));
        let packed_of = |r: &[u8]| -> Option<u64> {
            let (verdict, faces) = (r.get(..VERDICT)?, r.get(VERDICT..)?);
            (Some(verdict) == first && verdict[0] == 1).then_some(())?;
            Some(u64::from_le_bytes(faces.try_into().ok()?))
        };
        if let Some(packed) = all.iter().map(|r| packed_of(r)).collect() {
            return Ok(packed);
        }
        // Something differs: the descriptions travel, once, to be named.
        let told = match &mine {
            Ok(_) => format!("ok {:?}", self.cards()),
            Err(why) => format!("invalid {why}"),
        };
        let all = gather(told.as_bytes())?;
        let text = |r: usize| String::from_utf8_lossy(&all[r]).into_owned();
        let why = match (0..all.len()).find(|&r| text(r).starts_with("invalid ")) {
            Some(r) => format!("rank {r}: {}", &text(r)["invalid ".len()..]),
            None => {
                let r = (1..all.len()).find(|&r| all[r] != all[0]).unwrap_or(0);
                format!(
                    "rank {r} describes other fields or another grid than rank 0: {} against {}",
                    &text(r)["ok ".len()..],
                    &text(0)["ok ".len()..]
                )
            }
        };
        Err(HaloError::Usage { op: "build", why })
    }

    fn finish(
        self,
        builder: crate::links::LinkExchangeBuilder<'_>,
        planned: PlannedLinks,
        cartesian: bool,
        spans: Vec<usize>,
    ) -> Result<FieldExchange> {
        let builder = builder.with_links(planned.links);
        #[cfg(feature = "rdma")]
        let (builder, lent_at) = {
            let lent_at: Vec<Vec<usize>> = self
                .lent
                .iter()
                .map(|set| set.iter().map(|m| m.addr()).collect())
                .collect();
            match self.mode() {
                Ok(mode) if !self.lent.is_empty() => (
                    zero_copy::lend_in_place(
                        builder,
                        &self.layouts,
                        &planned.pieces,
                        self.lent,
                        mode,
                    ),
                    lent_at,
                ),
                _ => (builder, Vec::new()),
            }
        };
        #[cfg(not(feature = "rdma"))]
        let lent_at = Vec::new();
        let mut links = builder.build()?;
        links.fill_sends_each_start()?;
        links.copy_directly(pattern::local_copies(&links, &planned.pieces));
        let in_place = zero_copy::fields_in_place(&links, &planned.pieces, self.layouts.len());
        let fields = self.layouts.len();
        Ok(FieldExchange {
            links,
            pieces: planned.pieces,
            layouts: self.layouts,
            lent_at,
            in_place,
            memory: StartMemory::Set(0),
            spans,
            started: vec![false; fields],
            started_on: vec![(0, 0); fields],
            cartesian,
            depth: 0,
            by_depth: Vec::new(),
        })
    }
}

/// Per rank of the job, whether every message to it travels as one (a
/// copy within the rank, shared memory or TCP; RDMA spreads faces over its
/// engines, and sends the edges and corners together).
fn grouped(builder: &mut crate::links::LinkExchangeBuilder<'_>, size: usize) -> Result<Vec<bool>> {
    (0..size)
        .map(|peer| Ok(builder.locality_of(peer)? != Locality::Rdma))
        .collect()
}

/// The halo exchange of fields laid out as the caller's arrays hold them:
/// built once, started every iteration on any arrays of those layouts
/// (Runge-Kutta stages, double buffers), on all the fields or some.
///
/// ```no_run
/// # fn f(world: &sode_job::World, cells: sode::field::FieldLayout, grid: sode::pattern::ProcessGrid<'_>,
/// #      coords: &[usize], stages: &mut [Vec<f64>]) -> sode::Result<()> {
/// use std::time::Duration;
/// let mut x = sode::FieldExchange::builder(world, vec![cells]).cartesian(&grid, coords)?;
/// for s in 0..stages.len() {
///     x.start(&[(&stages[s]).into()])?;
///     x.wait(Duration::from_secs(10), &mut [(&mut stages[s]).into()])?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct FieldExchange {
    links: LinkExchange,
    pieces: Vec<LinkPieces>,
    layouts: Vec<FieldLayout>,
    /// Per lent set, the address of each field's array (empty: none lent).
    lent_at: Vec<Vec<usize>>,
    /// Per field, whether a side of some link carries it in place.
    in_place: Vec<bool>,
    /// What the start in flight reads and lands in where messages were
    /// built to travel in place: the lent set that holds its arrays, or
    /// staged through sode's buffers.
    memory: StartMemory,
    /// Bytes each field's array must hold.
    spans: Vec<usize>,
    /// The fields of the start in flight (or the last one).
    started: Vec<bool>,
    /// Where each started field's array lay at the start (address and
    /// length): its wait must name the same arrays.
    started_on: Vec<(usize, usize)>,
    /// Built from a process grid (a depth applies), not from boxes.
    cartesian: bool,
    /// Layers of each halo the next starts move (0: every layer).
    depth: usize,
    /// The messages at each depth a start has used, made at its first.
    by_depth: Vec<(usize, Vec<LinkPieces>)>,
}

impl FieldExchange {
    /// A builder for an exchange of `layouts` (field `f` is `layouts[f]`)
    /// among the ranks of `world`.
    pub fn builder(world: &World, layouts: Vec<FieldLayout>) -> FieldExchangeBuilder<'_> {
        FieldExchangeBuilder {
            world,
            layouts,
            transport: Transport::default(),
            timeout: Duration::from_secs(60),
            #[cfg(feature = "rdma")]
            lent: Vec::new(),
            zero_copy: None,
        }
    }

    /// The fields, in the order built.
    pub fn layouts(&self) -> &[FieldLayout] {
        &self.layouts
    }

    /// Starts the exchange of every field: `arrays[f]` is field `f`'s
    /// array, read now (its owned cells that neighbours need).
    ///
    /// # Errors
    ///
    /// [`HaloError::Usage`] for not one array per field, or an array not
    /// of its field's element type or shorter than its layout spans;
    /// [`HaloError::State`] while an exchange is in flight; a channel's
    /// error or [`HaloError::JobFailed`] when a peer failed or died.
    pub fn start(&mut self, arrays: &[Array<'_>]) -> Result<()> {
        self.start_on("start", None, arrays)
    }

    /// [`start`](Self::start) on some fields: `arrays[k]` is field
    /// `which[k]`'s array. Only those fields move; the others' halos are
    /// left as they are. Every neighbour must start the same fields.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start); [`HaloError::Usage`] also for a field
    /// listed twice or beyond those built, or for no field.
    pub fn start_fields(&mut self, which: &[usize], arrays: &[Array<'_>]) -> Result<()> {
        self.start_on("start_fields", Some(which), arrays)
    }

    /// One non-blocking pass over every channel: true once all halos have
    /// arrived (then [`wait`](Self::wait) unpacks them).
    ///
    /// # Errors
    ///
    /// As [`wait`](Self::wait), but never [`HaloError::Timeout`].
    pub fn test(&mut self) -> Result<bool> {
        self.links.test()
    }

    /// Waits until every halo of the started fields has arrived (or
    /// `deadline` passes: [`HaloError::Timeout`], and `wait` may be called
    /// again), then fills them into `arrays`: the arrays of the
    /// [`start`](Self::start), one per field.
    ///
    /// `deadline` is a timeout (a `Duration`, from when the wait begins) or
    /// an `Instant`; time this process is stopped does not count against it
    /// ([`Deadline`]).
    ///
    /// # Errors
    ///
    /// [`HaloError::Timeout`] at the deadline; [`HaloError::Usage`] for
    /// other arrays than the start's, or after
    /// [`start_fields`](Self::start_fields);
    /// [`HaloError::State`] without an exchange in flight; a channel's
    /// error or [`HaloError::JobFailed`] when a peer failed or died.
    pub fn wait(
        &mut self,
        deadline: impl Into<Deadline>,
        arrays: &mut [ArrayMut<'_>],
    ) -> Result<()> {
        self.wait_on("wait", deadline.into(), None, arrays)
    }

    /// [`wait`](Self::wait) for an exchange started with
    /// [`start_fields`](Self::start_fields): `arrays[k]` is field
    /// `which[k]`'s array, the same fields as at the start.
    ///
    /// # Errors
    ///
    /// As [`wait`](Self::wait); [`HaloError::Usage`] also when `which`
    /// is not the list the exchange was started with.
    pub fn wait_fields(
        &mut self,
        deadline: impl Into<Deadline>,
        which: &[usize],
        arrays: &mut [ArrayMut<'_>],
    ) -> Result<()> {
        self.wait_on("wait_fields", deadline.into(), Some(which), arrays)
    }

    /// From the next start on, moves only the `depth` layers of each halo
    /// nearest the owned cells (0: every layer, as built): a code whose
    /// steps read fewer layers than it keeps (TeaLeaf's solvers) moves
    /// those only. Every neighbour must start at the same depth.
    ///
    /// # Errors
    ///
    /// [`HaloError::Usage`] for a depth other than 0 on an exchange built
    /// from boxes (each box moves whole); [`HaloError::State`] while an
    /// exchange is in flight.
    pub fn set_depth(&mut self, depth: usize) -> Result<()> {
        if self.links.in_flight() {
            return self.links.start();
        }
        if depth != 0 && !self.cartesian {
            return Err(HaloError::Usage {
                op: "set_depth",
                why: format!("depth {depth}: an exchange built from boxes moves each box whole; a depth applies to one built from a process grid"),
            });
        }
        self.depth = depth;
        Ok(())
    }

    /// Per field, whether some of its faces travel in place over RDMA in
    /// starts on the arrays lent at build ([`FieldExchangeBuilder::lend`]);
    /// all false without lending.
    pub fn in_place(&self) -> &[bool] {
        &self.in_place
    }

    /// What it has done since it was built: iterations, time in start and
    /// wait, bytes per neighbour.
    pub fn stats(&self) -> ExchangeStats {
        self.links.stats()
    }

    fn start_on(
        &mut self,
        op: &'static str,
        which: Option<&[usize]>,
        arrays: &[Array<'_>],
    ) -> Result<()> {
        if self.links.in_flight() {
            // The state error, naming `start`.
            return self.links.start();
        }
        self.check_which(op, which)?;
        let types = arrays.iter().map(|a| (a.ty, a.bytes.len()));
        self.check_arrays(op, which, arrays.len(), types)?;
        for (f, s) in self.started.iter_mut().enumerate() {
            *s = which.is_none_or(|w| w.contains(&f));
        }
        for (k, a) in arrays.iter().enumerate() {
            let f = which.map_or(k, |w| w[k]);
            self.started_on[f] = (a.bytes.as_ptr() as usize, a.bytes.len());
        }
        self.memory = self.memory_of(which, arrays);
        self.links.set_memory(self.memory)?;
        let at = self.at_depth();
        let pieces = match at {
            None => &self.pieces,
            Some(i) => &self.by_depth[i].1,
        };
        let given = Given {
            layouts: &self.layouts,
            started: &self.started,
            which,
            arrays,
        };
        pattern::carry(&mut self.links, pieces, &given)?;
        let shape = start_shape(self.started.iter().copied(), self.depth);
        self.links.set_shape(shape)?;
        pattern::pack_and_start(&mut self.links, pieces, &given)
    }

    fn wait_on(
        &mut self,
        op: &'static str,
        deadline: Deadline,
        which: Option<&[usize]>,
        arrays: &mut [ArrayMut<'_>],
    ) -> Result<()> {
        if !self.links.in_flight() {
            // The state error: nothing started, or failed earlier.
            return self.links.wait(deadline);
        }
        self.check_which(op, which)?;
        let listed = |f: usize| which.is_none_or(|w| w.contains(&f));
        if (0..self.started.len()).any(|f| self.started[f] != listed(f)) {
            let list: Vec<usize> = (0..self.started.len())
                .filter(|&f| self.started[f])
                .collect();
            return Err(HaloError::Usage {
                op,
                why: format!(
                    "the exchange was started on fields {list:?}: wait with the same fields (wait_fields after start_fields)"
                ),
            });
        }
        let types = arrays.iter().map(|a| (a.ty, a.bytes.len()));
        self.check_arrays(op, which, arrays.len(), types)?;
        self.check_wait_arrays(op, which, arrays)?;
        let pieces = match self.at_depth() {
            None => &self.pieces,
            Some(i) => &self.by_depth[i].1,
        };
        let mut given = GivenMut {
            layouts: &self.layouts,
            started: &self.started,
            which,
            arrays,
        };
        pattern::copy_to_self(&mut self.links, pieces, &mut given)?;
        self.links.wait(deadline)?;
        pattern::unpack(&mut self.links, pieces, &mut given)
    }

    /// Where in `by_depth` the messages at the depth set are (made the
    /// first time a start uses it); `None` at depth 0 (every layer).
    fn at_depth(&mut self) -> Option<usize> {
        let depth = self.depth;
        if depth == 0 {
            return None;
        }
        let i = self.by_depth.iter().position(|(d, _)| *d == depth);
        Some(i.unwrap_or_else(|| {
            let cut = self.pieces.iter().map(|p| p.at_depth(depth)).collect();
            self.by_depth.push((depth, cut));
            self.by_depth.len() - 1
        }))
    }

    /// What a start on `arrays` (of the fields `which` lists, or all)
    /// reads and lands in where messages travel in place
    /// ([`zero_copy::start_memory`]).
    fn memory_of(&self, which: Option<&[usize]>, arrays: &[Array<'_>]) -> StartMemory {
        let set_of = |f: usize| {
            let at = arrays[array_of(which, f)?].bytes.as_ptr() as usize;
            self.lent_at.iter().position(|set| set.get(f) == Some(&at))
        };
        let carried = (0..self.layouts.len()).filter(|&f| self.in_place[f]);
        zero_copy::start_memory(carried.map(set_of), which.is_some() || self.depth != 0)
    }

    /// A wait names the arrays of its start: halos may arrive in place
    /// in them (a lent set, over RDMA), and a rank that is its own
    /// neighbour copies those halos from them as the wait begins
    /// ([`pattern::local_copies`]).
    fn check_wait_arrays(
        &self,
        op: &'static str,
        which: Option<&[usize]>,
        arrays: &[ArrayMut<'_>],
    ) -> Result<()> {
        for (k, a) in arrays.iter().enumerate() {
            let f = which.map_or(k, |w| w[k]);
            if self.started_on[f] == (a.bytes.as_ptr() as usize, a.bytes.len()) {
                continue;
            }
            let why = match self.memory {
                StartMemory::Set(set) if self.in_place[f] => format!("field {f}: the exchange was started on the array lent for it in set {set}, whose halos arrive in place: wait with that array"),
                _ => format!("field {f}: not the array the exchange was started on (halos arrive in it, in place or copied at the wait): wait with the arrays of the start"),
            };
            return Err(HaloError::Usage { op, why });
        }
        Ok(())
    }

    /// Each field listed once, and within those built.
    fn check_which(&self, op: &'static str, which: Option<&[usize]>) -> Result<()> {
        let Some(which) = which else {
            return Ok(());
        };
        let n = self.layouts.len();
        let bad = |why: String| Err(HaloError::Usage { op, why });
        if which.is_empty() {
            return bad("no field listed: list at least one".into());
        }
        for (k, &f) in which.iter().enumerate() {
            if f >= n {
                return bad(format!(
                    "field {f} listed, but there are {n} (numbered from 0)"
                ));
            }
            if which[..k].contains(&f) {
                return bad(format!("field {f} listed twice"));
            }
        }
        Ok(())
    }

    /// One array per field started, each of its field's type and long
    /// enough for its layout.
    fn check_arrays(
        &self,
        op: &'static str,
        which: Option<&[usize]>,
        count: usize,
        arrays: impl Iterator<Item = (ElemType, usize)>,
    ) -> Result<()> {
        let wanted = which.map_or(self.layouts.len(), <[usize]>::len);
        if count != wanted {
            return Err(HaloError::Usage {
                op,
                why: format!("{count} arrays for {wanted} fields: give one per field"),
            });
        }
        for (k, (ty, len)) in arrays.enumerate() {
            let f = which.map_or(k, |w| w[k]);
            let (want, span) = (self.layouts[f].ty, self.spans[f]);
            let why = if ty != want {
                format!("field {f} is of {want:?}, its array of {ty:?}")
            } else if len < span {
                format!("field {f}'s array holds {len} bytes, but its layout spans {span}")
            } else {
                continue;
            };
            return Err(HaloError::Usage { op, why });
        }
        Ok(())
    }
}

/// The position of field `f` among the arrays given.
fn array_of(which: Option<&[usize]>, f: usize) -> Option<usize> {
    match which {
        None => Some(f),
        Some(w) => w.iter().position(|&x| x == f),
    }
}

/// A start's arrays, as the pattern reads them.
struct Given<'s, 'a> {
    layouts: &'s [FieldLayout],
    started: &'s [bool],
    which: Option<&'s [usize]>,
    arrays: &'s [Array<'a>],
}

impl FieldArrays for Given<'_, '_> {
    fn layout(&self, field: usize) -> &FieldLayout {
        &self.layouts[field]
    }
    fn started(&self, field: usize) -> bool {
        self.started[field]
    }
    fn bytes(&self, field: usize) -> Option<&[u8]> {
        Some(self.arrays.get(array_of(self.which, field)?)?.bytes)
    }
    fn bytes_mut(&mut self, _field: usize) -> Option<(&FieldLayout, &mut [u8])> {
        None
    }
}

/// A wait's arrays, as the pattern fills them.
struct GivenMut<'s, 'a> {
    layouts: &'s [FieldLayout],
    started: &'s [bool],
    which: Option<&'s [usize]>,
    arrays: &'s mut [ArrayMut<'a>],
}

impl FieldArrays for GivenMut<'_, '_> {
    fn layout(&self, field: usize) -> &FieldLayout {
        &self.layouts[field]
    }
    fn started(&self, field: usize) -> bool {
        self.started[field]
    }
    fn bytes(&self, field: usize) -> Option<&[u8]> {
        Some(&*self.arrays.get(array_of(self.which, field)?)?.bytes)
    }
    fn bytes_mut(&mut self, field: usize) -> Option<(&FieldLayout, &mut [u8])> {
        let k = array_of(self.which, field)?;
        let layouts = self.layouts;
        Some((&layouts[field], &mut *self.arrays.get_mut(k)?.bytes))
    }
}
