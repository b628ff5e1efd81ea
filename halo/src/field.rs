//! A field as the caller's array holds it, in every language sode binds:
//! element type, extents and strides of the whole array (C or Fortran
//! order, padded or not), the owned box, halo widths per axis and side, and
//! the cells a staggered field shares with its neighbours; and the packing
//! of its regions into messages, in memory order.

use serde::{Deserialize, Serialize};

use crate::decomp::Region;
use crate::error::HaloError;

/// Most axes a field may have.
pub const MAX_AXES: usize = 8;

/// Most bytes an element of a field may have ([`ElemType::Bytes`]).
pub const MAX_ELEM_BYTES: usize = 4096;

/// The element types a field may have; only their size matters to the
/// copies (bit for bit), the type is checked to agree across ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ElemType {
    /// `float`, `real(real32)`.
    F32,
    /// `double`, `real(real64)`.
    F64,
    /// `int32_t`, `integer(int32)`.
    I32,
    /// `int64_t`, `integer(int64)`.
    I64,
    /// `float _Complex`, `complex(real32)`, `[f32; 2]`.
    C32,
    /// `double _Complex`, `complex(real64)`, `[f64; 2]`.
    C64,
    /// Elements of this many bytes (1 to [`MAX_ELEM_BYTES`]), copied as
    /// they are: a struct, a derived type, a fixed-length string.
    Bytes(usize),
}

impl ElemType {
    /// The type with C code `code`: `SODE_F32` (0) to `SODE_C64` (5), or
    /// `SODE_BYTES(n)`, which is `-n`.
    pub fn from_code(code: i32) -> Option<ElemType> {
        Some(match code {
            0 => ElemType::F32,
            1 => ElemType::F64,
            2 => ElemType::I32,
            3 => ElemType::I64,
            4 => ElemType::C32,
            5 => ElemType::C64,
            n if n < 0 => {
                let bytes = usize::try_from(n.unsigned_abs()).ok()?;
                if bytes > MAX_ELEM_BYTES {
                    return None;
                }
                ElemType::Bytes(bytes)
            }
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ElemType::F32 | ElemType::I32 => 4,
            ElemType::F64 | ElemType::I64 | ElemType::C32 => 8,
            ElemType::C64 => 16,
            ElemType::Bytes(n) => n,
        }
    }
}

/// One piece of a message: field `field`'s cells in `region`. A message is
/// its pieces one after the other, each in the field's memory order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// Which field (its number in the order added).
    pub field: usize,
    /// Its cells.
    pub region: Region,
    /// The direction of the neighbour it goes to or comes from, each axis
    /// -1, 0 or +1 (empty for a box of an exchange described by its
    /// messages): along the axes it crosses, its layers lie in order of
    /// their distance from the owned box's edge.
    pub toward: Vec<i32>,
}

impl Piece {
    /// One piece per field, field `f` in `regions[f]`.
    pub fn per_field(regions: Vec<Region>) -> Vec<Piece> {
        regions
            .into_iter()
            .enumerate()
            .map(|(field, region)| Piece {
                field,
                region,
                toward: Vec::new(),
            })
            .collect()
    }

    /// The piece at `depth` layers ([`Region::at_depth`]): both ends of
    /// a message cut it alike.
    pub fn at_depth(&self, depth: usize, send: bool) -> Piece {
        let region = self.region.at_depth(&self.toward, depth, send);
        Piece {
            field: self.field,
            region,
            toward: self.toward.clone(),
        }
    }
}

/// The cells at each end of a field's owned box, per process-grid axis,
/// that the neighbour on that side owns too: a staggered field's edge node,
/// computed by both ranks and never sent. Empty: none on any axis.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overlap {
    /// Shared with the neighbour below, per axis.
    pub lo: Vec<usize>,
    /// Shared with the neighbour above, per axis.
    pub hi: Vec<usize>,
}

impl Overlap {
    /// Below, along axis `a`.
    pub fn below(&self, a: usize) -> usize {
        self.lo.get(a).copied().unwrap_or(0)
    }

    /// Above, along axis `a`.
    pub fn above(&self, a: usize) -> usize {
        self.hi.get(a).copied().unwrap_or(0)
    }

    /// Every axis of `grid_axes` spelt out, for comparing across ranks.
    fn spelt_out(&self, grid_axes: usize) -> Overlap {
        Overlap {
            lo: (0..grid_axes).map(|a| self.below(a)).collect(),
            hi: (0..grid_axes).map(|a| self.above(a)).collect(),
        }
    }
}

/// How a contiguous array's axes lie in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// The last axis contiguous: C, C++, Rust arrays of arrays.
    C,
    /// The first axis contiguous: Fortran.
    Fortran,
}

/// Where a field's elements live. Host memory is the one kind sode
/// exchanges today; the kind is part of a layout so that device memory can
/// come without a new API.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemoryKind {
    /// Memory the CPU reads and writes: the process's own (stack, heap,
    /// mapped), including memory registered or pinned for a device.
    #[default]
    Host,
}

/// One field: `extents` and `strides` (in elements) of the whole array per
/// axis; the owned box `owned_lo .. owned_lo + owned_size`; the halo widths
/// below and above it on the axes of the process grid (the first axes),
/// and its overlap with the neighbours there. Along further axes
/// (components, levels) the owned range travels whole.
///
/// Built with [`with_halo`](Self::with_halo) (owned cells in the middle of
/// their halos, the common case) or [`new`](Self::new) and the setters
/// ([`owned`](Self::owned), [`halo`](Self::halo), [`strides`](Self::strides),
/// [`overlap`](Self::overlap), [`memory`](Self::memory)). An exchange
/// checks it ([`check`](Self::check)) when it is built.
///
/// ```
/// use sode::field::{ElemType, FieldLayout, Order};
/// // real(8) :: u(0:nx+1, 0:ny+1, nz): nx x ny owned cells a level,
/// // a halo of 1 along the two axes the process grid splits.
/// let (nx, ny, nz) = (64, 32, 10);
/// let u = FieldLayout::with_halo(ElemType::F64, &[nx, ny, nz], &[1, 1], Order::Fortran);
/// assert_eq!(u.extents, [nx + 2, ny + 2, nz]);
/// // The same array described by its extents.
/// let same = FieldLayout::new(ElemType::F64, &[nx + 2, ny + 2, nz], Order::Fortran)
///     .owned(&[1, 1, 0], &[nx, ny, nz])
///     .halo(&[1, 1], &[1, 1]);
/// assert_eq!(u, same);
/// // A vertex field: nx + 1 nodes along x, the node at each end shared
/// // with the neighbour there and never sent.
/// let v = FieldLayout::with_halo(ElemType::F32, &[nx + 1, ny], &[1, 1], Order::Fortran)
///     .overlap(&[1, 0], &[1, 0]);
/// assert!(v.check(2, &[1, 1], &[1, 1]).is_ok());
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldLayout {
    /// Element type.
    pub ty: ElemType,
    /// Elements per axis, halos included.
    pub extents: Vec<usize>,
    /// Elements between neighbours along each axis.
    pub strides: Vec<usize>,
    /// First owned element per axis.
    pub owned_lo: Vec<usize>,
    /// Owned elements per axis.
    pub owned_size: Vec<usize>,
    /// Halo width below the owned box, per process-grid axis.
    pub halo_lo: Vec<usize>,
    /// Halo width above it.
    pub halo_hi: Vec<usize>,
    /// Owned cells at each end that the neighbour there owns too.
    pub overlap: Overlap,
    /// Where the elements live.
    pub memory: MemoryKind,
}

/// What the other ranks must agree on about a field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldCard {
    /// Element type.
    pub ty: ElemType,
    /// Owned elements per axis.
    pub owned_size: Vec<usize>,
    /// Halo widths below.
    pub halo_lo: Vec<usize>,
    /// Halo widths above.
    pub halo_hi: Vec<usize>,
    /// Axes from fastest to slowest in memory (the packing order).
    pub order: Vec<usize>,
    /// Owned cells shared with the neighbours, every grid axis spelt out.
    #[serde(default)]
    pub overlap: Overlap,
}

impl FieldCard {
    /// `f64[10x12] halo 1/1,2/2 order 1,0`, for error messages.
    pub fn describe(&self) -> String {
        let halos: Vec<String> = self
            .halo_lo
            .iter()
            .zip(&self.halo_hi)
            .map(|(l, h)| format!("{l}/{h}"))
            .collect();
        let overlap = if self
            .overlap
            .lo
            .iter()
            .chain(&self.overlap.hi)
            .any(|&c| c > 0)
        {
            format!(" overlap {:?}/{:?}", self.overlap.lo, self.overlap.hi)
        } else {
            String::new()
        };
        format!(
            "{:?} owned {:?} halo {}{overlap} fastest axis {}",
            self.ty,
            self.owned_size,
            halos.join(","),
            self.order.first().copied().unwrap_or(0)
        )
    }
}

/// The byte range `0..span` a field's elements occupy, and checks that no
/// two elements share memory.
fn span_bytes(ty: ElemType, extents: &[usize], strides: &[usize]) -> Result<usize, String> {
    let mut order: Vec<usize> = (0..extents.len()).collect();
    order.sort_by_key(|&a| (strides[a], a));
    // Axes in stride order must nest: each stride at least the span of the
    // faster axes, so that distinct indices never share an element.
    let mut covered = 1usize;
    for &a in &order {
        if strides[a] < covered {
            return Err(format!(
                "axis {a}'s stride {} is smaller than the {covered} elements the faster axes span: elements would overlap",
                strides[a]
            ));
        }
        covered = (extents[a] - 1)
            .checked_mul(strides[a])
            .and_then(|x| x.checked_add(covered))
            .ok_or("the extents and strides overflow the address space")?;
    }
    covered
        .checked_mul(ty.size())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| "the extents and strides overflow the address space".into())
}

/// Strides of a contiguous array in `order`; a stride past the address
/// space saturates, which [`FieldLayout::check`] reports.
fn contiguous_strides(extents: &[usize], order: Order) -> Vec<usize> {
    let mut strides = vec![0; extents.len()];
    let mut s = 1usize;
    let mut fill = |a: usize| {
        strides[a] = s;
        s = s.saturating_mul(extents[a]);
    };
    match order {
        Order::C => (0..extents.len()).rev().for_each(&mut fill),
        Order::Fortran => (0..extents.len()).for_each(&mut fill),
    }
    strides
}

impl FieldLayout {
    /// A contiguous array of `extents` elements per axis in `order`, all of
    /// it owned, with no halo and no process-grid axis yet: give the owned
    /// box with [`owned`](Self::owned) and the halo widths with
    /// [`halo`](Self::halo).
    pub fn new(ty: ElemType, extents: &[usize], order: Order) -> FieldLayout {
        FieldLayout {
            ty,
            extents: extents.to_vec(),
            strides: contiguous_strides(extents, order),
            owned_lo: vec![0; extents.len()],
            owned_size: extents.to_vec(),
            halo_lo: Vec::new(),
            halo_hi: Vec::new(),
            overlap: Overlap::default(),
            memory: MemoryKind::Host,
        }
    }

    /// A contiguous array in `order` holding `owned` cells per axis and,
    /// along the first `halo.len()` axes (the process grid's), `halo[a]`
    /// halo cells on each side: `u(1-h:nx+h, 1-h:ny+h, nz)` is
    /// `with_halo(ty, &[nx, ny, nz], &[h, h], Order::Fortran)`. Further
    /// axes hold no halo.
    pub fn with_halo(ty: ElemType, owned: &[usize], halo: &[usize], order: Order) -> FieldLayout {
        let extents: Vec<usize> = owned
            .iter()
            .enumerate()
            .map(|(a, &n)| {
                let h = halo.get(a).copied().unwrap_or(0);
                n.saturating_add(h.saturating_mul(2))
            })
            .collect();
        let owned_lo = (0..owned.len())
            .map(|a| halo.get(a).copied().unwrap_or(0))
            .collect();
        FieldLayout {
            owned_lo,
            owned_size: owned.to_vec(),
            halo_lo: halo.to_vec(),
            halo_hi: halo.to_vec(),
            ..FieldLayout::new(ty, &extents, order)
        }
    }

    /// The owned box: `size[a]` cells from index `lo[a]` (counted from 0,
    /// the array's first element) along every axis.
    pub fn owned(mut self, lo: &[usize], size: &[usize]) -> FieldLayout {
        self.owned_lo = lo.to_vec();
        self.owned_size = size.to_vec();
        self
    }

    /// The halo widths below (`lo`) and above (`hi`) the owned box along
    /// each process-grid axis, which are the array's first axes.
    pub fn halo(mut self, lo: &[usize], hi: &[usize]) -> FieldLayout {
        self.halo_lo = lo.to_vec();
        self.halo_hi = hi.to_vec();
        self
    }

    /// Elements between neighbours along each axis, for a padded array or
    /// a section of a larger one (the order's strides otherwise).
    pub fn strides(mut self, strides: &[usize]) -> FieldLayout {
        self.strides = strides.to_vec();
        self
    }

    /// The owned cells at the low (`lo`) and high (`hi`) end of each
    /// process-grid axis that the neighbour there owns too: a staggered
    /// field's shared edge nodes, never sent ([`Overlap`]).
    pub fn overlap(mut self, lo: &[usize], hi: &[usize]) -> FieldLayout {
        self.overlap = Overlap {
            lo: lo.to_vec(),
            hi: hi.to_vec(),
        };
        self
    }

    /// Where the elements live ([`MemoryKind::Host`] unless set).
    pub fn memory(mut self, memory: MemoryKind) -> FieldLayout {
        self.memory = memory;
        self
    }

    /// Checks the field against an exchange with `grid_axes` process-grid
    /// axes and halo widths `max_lo`, `max_hi`; returns the bytes it spans.
    ///
    /// # Errors
    /// [`HaloError::Layout`], naming the axis and what does not fit.
    pub fn check(
        &self,
        grid_axes: usize,
        max_lo: &[usize],
        max_hi: &[usize],
    ) -> Result<usize, HaloError> {
        self.problem(grid_axes, max_lo, max_hi)
            .map_err(|why| HaloError::Layout { why })
    }

    fn problem(
        &self,
        grid_axes: usize,
        max_lo: &[usize],
        max_hi: &[usize],
    ) -> Result<usize, String> {
        let bytes = self.ty.size();
        if bytes == 0 || bytes > MAX_ELEM_BYTES {
            return Err(format!(
                "elements of {bytes} bytes: a field's elements have 1 to {MAX_ELEM_BYTES}"
            ));
        }
        let d = self.extents.len();
        let per_axis = [
            ("strides", self.strides.len()),
            ("owned_lo", self.owned_lo.len()),
            ("owned_size", self.owned_size.len()),
        ];
        if let Some((name, len)) = per_axis.iter().find(|(_, len)| *len != d) {
            return Err(format!(
                "the array has {d} axes (its extents) but {len} {name}: give one per axis"
            ));
        }
        for (name, len) in [
            ("halo_lo", self.halo_lo.len()),
            ("halo_hi", self.halo_hi.len()),
        ] {
            if len != grid_axes {
                return Err(format!(
                    "{len} {name} widths for a process grid of {grid_axes} axes: give one per grid axis (FieldLayout::halo)"
                ));
            }
        }
        if d < grid_axes || d > MAX_AXES {
            return Err(format!(
                "a field of {d} axes in an exchange of {grid_axes}: a field has the process grid's axes first, then at most {} more",
                MAX_AXES - grid_axes
            ));
        }
        for a in 0..d {
            let (n, lo, size) = (self.extents[a], self.owned_lo[a], self.owned_size[a]);
            if n == 0 || size == 0 || self.strides[a] == 0 {
                return Err(format!(
                    "axis {a}: extents, owned sizes and strides must be at least 1"
                ));
            }
            let (hl, hh) = if a < grid_axes {
                (self.halo_lo[a], self.halo_hi[a])
            } else {
                (0, 0)
            };
            if a < grid_axes && (hl > max_lo[a] || hh > max_hi[a]) {
                return Err(format!(
                    "axis {a}: its halo {hl}/{hh} is wider than the exchange's {}/{}",
                    max_lo[a], max_hi[a]
                ));
            }
            // Counted from the owned cells, so that the messages read the
            // same whatever the caller's lower bound (C's 0, Fortran's own).
            let Some(above) = lo.checked_add(size).and_then(|end| n.checked_sub(end)) else {
                return Err(format!(
                    "axis {a}: the {size} owned cells, {lo} cells into the array, run past its {n} cells"
                ));
            };
            if lo < hl || above < hh {
                return Err(format!(
                    "axis {a}: the owned cells do not fit the array with their halo: {hl} halo cells below and {hh} above are needed, the array has {lo} cells below the first owned one and {above} above the last (of {n} along the axis)",
                ));
            }
            let (ol, oh) = (self.overlap.below(a), self.overlap.above(a));
            if a >= grid_axes && (ol > 0 || oh > 0) {
                return Err(format!(
                    "axis {a}: an overlap along an axis the process grid does not split"
                ));
            }
            // What the neighbour below fills its upper halo with starts
            // past the cells both own; likewise above.
            if a < grid_axes && (ol + hh > size || oh + hl > size) {
                return Err(format!(
                    "axis {a}: {size} owned elements, fewer than a halo width ({hl}/{hh}) plus the overlap at that end ({ol}/{oh}): a neighbour's halo would need cells this rank does not own",
                ));
            }
        }
        span_bytes(self.ty, &self.extents, &self.strides)
    }

    /// Axes from fastest to slowest in memory.
    pub fn order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.extents.len()).collect();
        order.sort_by_key(|&a| (self.strides[a], a));
        order
    }

    /// What the other ranks must agree on.
    pub fn card(&self) -> FieldCard {
        FieldCard {
            ty: self.ty,
            owned_size: self.owned_size.clone(),
            halo_lo: self.halo_lo.clone(),
            halo_hi: self.halo_hi.clone(),
            order: self.order(),
            overlap: self.overlap.spelt_out(self.halo_lo.len()),
        }
    }

    /// The cells sent to the neighbour at `offset` (process-grid axes):
    /// the owned cells that fill its halo, past those both own. Empty when
    /// it has no halo there.
    pub fn send_region(&self, offset: &[i32]) -> Region {
        self.region(offset, |a, o, lo, n| match o {
            -1 => (lo + self.overlap.below(a), self.halo_hi[a]),
            1 => (
                lo + n - self.overlap.above(a) - self.halo_lo[a],
                self.halo_lo[a],
            ),
            _ => (lo, n),
        })
    }

    /// The halo cells the neighbour at `offset` fills.
    pub fn recv_region(&self, offset: &[i32]) -> Region {
        self.region(offset, |a, o, lo, n| match o {
            -1 => (lo - self.halo_lo[a], self.halo_lo[a]),
            1 => (lo + n, self.halo_hi[a]),
            _ => (lo, n),
        })
    }

    /// Box `lo .. lo + size` on the first axes; the owned range on the
    /// others.
    pub fn box_region(&self, lo: &[usize], size: &[usize]) -> Region {
        let (start, size) = (0..self.extents.len())
            .map(|a| match (lo.get(a), size.get(a)) {
                (Some(&l), Some(&n)) => (l, n),
                _ => (self.owned_lo[a], self.owned_size[a]),
            })
            .unzip();
        Region { start, size }
    }

    fn region(
        &self,
        offset: &[i32],
        along: impl Fn(usize, i32, usize, usize) -> (usize, usize),
    ) -> Region {
        let (start, size) = (0..self.extents.len())
            .map(|a| {
                let (lo, n) = (self.owned_lo[a], self.owned_size[a]);
                match offset.get(a) {
                    Some(&o) => along(a, o, lo, n),
                    // Axes beyond the process grid: the owned range.
                    None => (lo, n),
                }
            })
            .unzip();
        Region { start, size }
    }

    /// Calls `run(element_offset, elements)` for each contiguous run of
    /// `r`, in memory order (fastest axis innermost), each as long as
    /// memory allows: a region that spans whole inner axes (a weather
    /// model's levels, a face of a Fortran array's first axes) is one run
    /// across them, not a run per row. Allocates nothing.
    pub fn runs(&self, r: &Region, mut run: impl FnMut(usize, usize)) {
        let d = self.extents.len().min(MAX_AXES);
        if r.cells() == 0 {
            return;
        }
        // Axes fastest first (insertion sort: at most 8).
        let mut order = [0usize; MAX_AXES];
        for a in 0..d {
            let mut k = a;
            while k > 0 && (self.strides[order[k - 1]], order[k - 1]) > (self.strides[a], a) {
                order[k] = order[k - 1];
                k -= 1;
            }
            order[k] = a;
        }
        let (run_len, inner) = self.run_across(r, &order[..d]);
        let outer = &order[inner..d];
        let mut idx = [0usize; MAX_AXES];
        let mut at: usize = (0..d).map(|a| r.start[a] * self.strides[a]).sum();
        loop {
            run(at, run_len);
            // Odometer over the outer axes, fastest first.
            let mut k = 0;
            loop {
                let Some(&a) = outer.get(k) else {
                    return;
                };
                idx[k] += 1;
                at += self.strides[a];
                if idx[k] < r.size[a] {
                    break;
                }
                at -= idx[k] * self.strides[a];
                idx[k] = 0;
                k += 1;
            }
        }
    }

    /// Copies region `from` of the field (`field`: its bytes from its
    /// base) onto region `to`, of the same size per axis: a message a rank
    /// sends itself, with no buffer between.
    pub fn copy_region(&self, field: &mut [u8], from: &Region, to: &Region) {
        let e = self.ty.size();
        let base = |r: &Region| -> usize {
            r.start
                .iter()
                .zip(&self.strides)
                .map(|(i, stride)| i * stride)
                .sum()
        };
        let (from_base, to_base) = (base(from), base(to));
        self.runs(from, |at, n| {
            // Both regions step alike: only their bases differ.
            let dst = at - from_base + to_base;
            move_run(field, at * e, dst * e, n * e);
        });
    }

    /// How many elements a run of `r` holds, and across how many of the
    /// axes in `order` (fastest first) it runs: from the first axis whose
    /// elements are adjacent, each next one while the region spans every
    /// axis before it whole and it starts where they end. An axis of one
    /// element steps over nothing: it joins the run wherever it sorts.
    fn run_across(&self, r: &Region, order: &[usize]) -> (usize, usize) {
        let (mut len, mut axes) = (1, 0);
        // Whether the run so far spans its axes whole, and where they end.
        let (mut whole, mut end) = (true, 1);
        for &a in order {
            if self.extents[a] == 1 {
                axes += 1;
                continue;
            }
            if !whole || self.strides[a] != end {
                break;
            }
            len *= r.size[a];
            axes += 1;
            whole = r.size[a] == self.extents[a];
            let Some(next_end) = self.strides[a].checked_mul(self.extents[a]) else {
                break;
            };
            end = next_end;
        }
        (len, axes)
    }

    /// Copies region `r` of the field (`field`: its bytes from its base)
    /// into `out`, in memory order.
    pub fn pack(&self, field: &[u8], r: &Region, out: &mut [u8]) {
        let e = self.ty.size();
        let mut k = 0;
        self.runs(r, |at, n| {
            crate::decomp::copy_run(&mut out[k..k + n * e], &field[at * e..(at + n) * e]);
            k += n * e;
        });
    }

    /// The inverse of [`pack`](Self::pack).
    pub fn unpack(&self, data: &[u8], r: &Region, field: &mut [u8]) {
        let e = self.ty.size();
        let mut k = 0;
        self.runs(r, |at, n| {
            crate::decomp::copy_run(&mut field[at * e..(at + n) * e], &data[k..k + n * e]);
            k += n * e;
        });
    }
}

/// Copies the `len` bytes at `src` of `bytes` to `dst`: as two slices when
/// they do not overlap (so that a run of one cell is one move), else as
/// `copy_within` does.
fn move_run(bytes: &mut [u8], src: usize, dst: usize, len: usize) {
    if src.saturating_add(len) <= dst {
        let (lo, hi) = bytes.split_at_mut(dst);
        crate::decomp::copy_run(&mut hi[..len], &lo[src..src + len]);
    } else if dst.saturating_add(len) <= src {
        let (lo, hi) = bytes.split_at_mut(src);
        crate::decomp::copy_run(&mut lo[dst..dst + len], &hi[..len]);
    } else {
        bytes.copy_within(src..src + len, dst);
    }
}

/// FNV-1a: the same digest of the same bytes on every rank (the ranks run
/// one sode; no rank of the job is an adversary of the others).
pub fn digest(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// A digest of `layout` (what the ranks' layouts must share) and of what
/// every rank must describe alike about its fields: types, halo widths,
/// memory orders, overlaps and numbers of axes (not their extents).
pub fn common_digest(layout: impl Serialize, fields: &[FieldCard]) -> u64 {
    let fields: Vec<_> = fields
        .iter()
        .map(|f| {
            (
                f.ty,
                &f.halo_lo,
                &f.halo_hi,
                &f.order,
                &f.overlap,
                f.owned_size.len(),
            )
        })
        .collect();
    digest(serde_json::to_vec(&(layout, fields)).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_codes_name_every_type_and_records_up_to_the_limit() {
        let sizes: Vec<Option<usize>> = (-1..=6)
            .map(|c| ElemType::from_code(c).map(ElemType::size))
            .collect();
        assert_eq!(
            sizes,
            [
                Some(1),
                Some(4),
                Some(8),
                Some(4),
                Some(8),
                Some(8),
                Some(16),
                None
            ]
        );
        assert_eq!(ElemType::from_code(-24), Some(ElemType::Bytes(24)));
        assert_eq!(ElemType::from_code(-4096), Some(ElemType::Bytes(4096)));
        assert_eq!(ElemType::from_code(-4097), None);
        assert_eq!(ElemType::from_code(i32::MIN), None);
    }

    /// A 2-D field of f64, C order (axis 1 fastest), owned 4 x 3 with halo
    /// widths 1/2 on axis 0 and 2/1 on axis 1.
    fn c_order() -> FieldLayout {
        FieldLayout::new(ElemType::F64, &[7, 6], Order::C)
            .owned(&[1, 2], &[4, 3])
            .halo(&[1, 2], &[2, 1])
    }

    #[test]
    fn constructors_give_the_order_s_strides_and_the_owned_box_inside_the_halo() {
        assert_eq!(c_order().strides, [6, 1]);
        let f = FieldLayout::new(ElemType::F32, &[7, 6, 3], Order::Fortran);
        assert_eq!(f.strides, [1, 7, 42]);
        assert_eq!((f.owned_lo, f.owned_size), (vec![0, 0, 0], vec![7, 6, 3]));
        let f = FieldLayout::with_halo(ElemType::I32, &[4, 5, 3], &[2, 1], Order::C);
        assert_eq!(f.extents, [8, 7, 3]);
        assert_eq!(f.strides, [21, 3, 1]);
        assert_eq!(f.owned_lo, [2, 1, 0]);
        assert_eq!(f.memory, MemoryKind::Host);
        assert_eq!(f.check(2, &[2, 1], &[2, 1]).unwrap(), 8 * 7 * 3 * 4);
        // Extents past the address space: the saturated stride is an
        // error of check, not a wrapped layout.
        let huge = FieldLayout::new(ElemType::F64, &[1 << 40, 1 << 40, 2], Order::Fortran);
        assert!(huge
            .check(0, &[], &[])
            .unwrap_err()
            .to_string()
            .contains("overflow"));
    }

    #[test]
    fn regions_follow_the_halo_widths_of_the_receiving_side() {
        let f = c_order();
        assert_eq!(f.check(2, &[1, 2], &[2, 1]).unwrap(), 7 * 6 * 8);
        // To the low neighbour on axis 0: the rows filling its high halo (2).
        let r = f.send_region(&[-1, 0]);
        assert_eq!((r.start, r.size), (vec![1, 2], vec![2, 3]));
        let r = f.recv_region(&[1, 1]);
        assert_eq!((r.start, r.size), (vec![5, 5], vec![2, 1]));
        let r = f.send_region(&[1, -1]);
        assert_eq!((r.start, r.size), (vec![4, 2], vec![1, 1]));
    }

    #[test]
    fn pack_and_unpack_round_trip_in_memory_order() {
        let f = c_order();
        let field: Vec<u8> = (0..7 * 6 * 8).map(|i| i as u8).collect();
        let r = f.send_region(&[-1, 0]);
        let mut out = vec![0u8; r.cells() * 8];
        f.pack(&field, &r, &mut out);
        // Row 1, columns 2..5, then row 2.
        let cell = |i: usize, j: usize| &field[(i * 6 + j) * 8..(i * 6 + j + 1) * 8];
        assert_eq!(&out[..8], cell(1, 2));
        assert_eq!(&out[8..16], cell(1, 3));
        assert_eq!(&out[24..32], cell(2, 2));
        let mut back = vec![0u8; field.len()];
        f.unpack(&out, &r, &mut back);
        assert_eq!(
            &back[(6 + 2) * 8..(6 + 5) * 8],
            &field[(6 + 2) * 8..(6 + 5) * 8]
        );
        assert!(back[..(6 + 2) * 8].iter().all(|&b| b == 0));
    }

    /// A layout of `extents` in `order`, its fastest axis padded by
    /// `pad` elements (explicit strides, as a padded array), and a region
    /// of it: per axis, `cut`'s start and length, each folded into what
    /// fits.
    fn layout_and_region(
        extents: &[usize],
        order: Order,
        pad: usize,
        cut: &[(usize, usize)],
    ) -> (FieldLayout, Region) {
        let mut f = FieldLayout::new(ElemType::F64, extents, order);
        if pad > 0 {
            let mut padded = extents.to_vec();
            let fastest = if order == Order::C {
                extents.len() - 1
            } else {
                0
            };
            padded[fastest] += pad;
            f.strides = FieldLayout::new(ElemType::F64, &padded, order).strides;
        }
        let (start, size) = extents
            .iter()
            .zip(cut)
            .map(|(&e, &(s, n))| {
                let start = s % e;
                (start, 1 + n % (e - start))
            })
            .unzip();
        (f, Region { start, size })
    }

    proptest::proptest! {
        /// Whatever the layout and region, the runs cover exactly the
        /// region's cells in memory order, and no run ends where the next
        /// begins (two that could be one are one).
        #[test]
        fn runs_are_the_region_in_memory_order_each_as_long_as_it_can_be(
            extents in proptest::collection::vec(1usize..6, 1..5),
            fortran in proptest::bool::ANY,
            pad in 0usize..2,
            cut in proptest::collection::vec((0usize..6, 0usize..6), 4),
        ) {
            let order = if fortran { Order::Fortran } else { Order::C };
            let (f, r) = layout_and_region(&extents, order, pad, &cut);
            let mut want: Vec<usize> = Vec::new();
            for cell in 0..r.cells() {
                let (mut rem, mut at) = (cell, 0);
                for a in 0..extents.len() {
                    at += (r.start[a] + rem % r.size[a]) * f.strides[a];
                    rem /= r.size[a];
                }
                want.push(at);
            }
            want.sort_unstable();
            let mut runs: Vec<(usize, usize)> = Vec::new();
            f.runs(&r, |at, n| runs.push((at, n)));
            let got: Vec<usize> = runs.iter().flat_map(|&(at, n)| at..at + n).collect();
            proptest::prop_assert_eq!(got, want);
            for pair in runs.windows(2) {
                proptest::prop_assert_ne!(pair[0].0 + pair[0].1, pair[1].0, "runs {:?}", runs);
            }
        }
    }

    #[test]
    fn a_region_spanning_the_inner_axes_whole_is_one_run() {
        // A weather field in C order, levels last: (x, y, level).
        let f = FieldLayout::with_halo(ElemType::F64, &[4, 5, 3], &[2, 2], Order::C);
        let mut runs = Vec::new();
        // The face of x = 2..4, every y of the owned box: rows of (y, level)
        // apart, one run per x row.
        let face = Region {
            start: vec![2, 2, 0],
            size: vec![2, 5, 3],
        };
        f.runs(&face, |at, n| runs.push((at, n)));
        assert_eq!(runs, vec![(2 * 9 * 3 + 2 * 3, 15), (3 * 9 * 3 + 2 * 3, 15)]);
        // Every y of an x row: the whole row is one run, and two rows one.
        runs.clear();
        let rows = Region {
            start: vec![2, 0, 0],
            size: vec![2, 9, 3],
        };
        f.runs(&rows, |at, n| runs.push((at, n)));
        assert_eq!(runs, vec![(2 * 9 * 3, 2 * 9 * 3)]);
        // Axes of one element sort among the others by their strides, but
        // step over nothing: two whole rows of 5 are still one run.
        let f = FieldLayout::new(ElemType::F64, &[1, 3, 5, 1], Order::C);
        runs.clear();
        let two_rows = Region {
            start: vec![0, 0, 0, 0],
            size: vec![1, 2, 5, 1],
        };
        f.runs(&two_rows, |at, n| runs.push((at, n)));
        assert_eq!(runs, vec![(0, 10)]);
    }

    #[test]
    fn a_strided_axis_is_packed_element_by_element() {
        // Fortran order with padding: axis 0 fastest but stride 2.
        let f = FieldLayout {
            strides: vec![2, 14],
            ..c_order()
        };
        assert!(f.check(2, &[1, 2], &[2, 1]).is_ok());
        let field: Vec<u8> = (0..14 * 6 * 8).map(|i| (i / 8) as u8).collect();
        let r = f.recv_region(&[0, -1]);
        let mut out = vec![0u8; r.cells() * 8];
        f.pack(&field, &r, &mut out);
        let elems: Vec<u8> = out.chunks(8).map(|c| c[0]).collect();
        // Axis 0 fastest: (1,0) (2,0) .. (4,0), then (1,1) ..
        assert_eq!(elems, vec![2, 4, 6, 8, 16, 18, 20, 22]);
    }

    #[test]
    fn bad_fields_are_named() {
        let err = |f: FieldLayout| f.check(2, &[1, 2], &[2, 1]).unwrap_err().to_string();
        assert!(err(FieldLayout {
            halo_lo: vec![2, 2],
            owned_lo: vec![2, 2],
            ..c_order()
        })
        .contains("wider than the exchange's"));
        assert!(err(FieldLayout {
            owned_lo: vec![0, 2],
            ..c_order()
        })
        .contains("1 halo cells below and 2 above are needed, the array has 0 cells below the first owned one and 3 above the last"));
        assert!(err(FieldLayout {
            owned_lo: vec![4, 2],
            ..c_order()
        })
        .contains("the 4 owned cells, 4 cells into the array, run past its 7 cells"));
        assert!(err(FieldLayout {
            strides: vec![6, 2],
            ..c_order()
        })
        .contains("overlap"));
        let one_axis = FieldLayout {
            extents: vec![7],
            strides: vec![1],
            owned_lo: vec![1],
            owned_size: vec![4],
            ..c_order()
        };
        assert!(err(one_axis).contains("axes"));
        // A layout whose halo was never given.
        assert!(err(FieldLayout::new(ElemType::F64, &[7, 6], Order::C))
            .contains("0 halo_lo widths for a process grid of 2 axes"));
        assert!(err(c_order().owned(&[1], &[4, 3])).contains("2 axes (its extents) but 1 owned_lo"));
        assert!(err(FieldLayout {
            strides: vec![usize::MAX / 2, 1],
            ..c_order()
        })
        .contains("overflow"));
        assert!(err(FieldLayout {
            owned_size: vec![1, 3],
            extents: vec![4, 6],
            ..c_order()
        })
        .contains("fewer than a halo width"));
        assert!(err(FieldLayout {
            overlap: Overlap {
                lo: vec![3, 0],
                hi: vec![0, 0]
            },
            ..c_order()
        })
        .contains("plus the overlap"));
    }

    /// A vertex field of a 1-D grid: nodes 1..=n+1 owned, node 1 shared
    /// with the rank below and node n+1 with the rank above; halo 2.
    #[test]
    fn an_overlap_keeps_the_shared_nodes_home() {
        let n = 6;
        let f = FieldLayout::new(ElemType::F64, &[n + 5], Order::C)
            .owned(&[2], &[n + 1])
            .halo(&[2], &[2])
            .overlap(&[1], &[1]);
        assert!(f.check(1, &[2], &[2]).is_ok());
        // Index 2 is node 1: below, nodes 2..=3 go and nodes -1..=0 come.
        let r = f.send_region(&[-1]);
        assert_eq!((r.start, r.size), (vec![3], vec![2]));
        let r = f.recv_region(&[-1]);
        assert_eq!((r.start, r.size), (vec![0], vec![2]));
        // Above: nodes n-1..=n go (node n+1 stays), nodes n+2.. come.
        let r = f.send_region(&[1]);
        assert_eq!((r.start, r.size), (vec![n], vec![2]));
        let r = f.recv_region(&[1]);
        assert_eq!((r.start, r.size), (vec![n + 3], vec![2]));
        // Both ranks must agree on it.
        assert_ne!(
            f.card(),
            FieldLayout {
                overlap: Overlap::default(),
                ..f.clone()
            }
            .card()
        );
    }
}
