//! Cartesian decompositions: which rank owns which block, its neighbours,
//! and the regions each neighbour pair exchanges.

use crate::error::{HaloError, Result};

/// Which neighbours a stencil needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stencil {
    /// Across faces only: 4 neighbours in 2-D, 6 in 3-D.
    Faces,
    /// Faces and edges: 18 neighbours in 3-D (the same as `Full` in 2-D: 8).
    FacesEdges,
    /// Faces, edges and corners: 8 in 2-D, 26 in 3-D.
    Full,
}

/// A box of cells in a rank's local array (halo included), per axis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// First cell per axis.
    pub start: Vec<usize>,
    /// Cells per axis.
    pub size: Vec<usize>,
}

impl Region {
    /// Number of cells.
    pub fn cells(&self) -> usize {
        self.size.iter().product()
    }

    /// This face of a message to or from the neighbour at `toward` (each
    /// axis -1, 0 or +1), cut to `depth` layers: along each axis it
    /// crosses, the `depth` layers nearest the edge between the two ranks
    /// (all of them when it has fewer). A sent face lies inside the owned
    /// box, so its nearest layers are the last towards a neighbour above
    /// and the first towards one below; a received face lies outside, the
    /// other way round. Both ends of a message cut it alike, so a halo
    /// committed `w` layers wide can move fewer.
    pub fn at_depth(&self, toward: &[i32], depth: usize, sent: bool) -> Region {
        let mut cut = self.clone();
        for (a, &o) in toward.iter().enumerate() {
            let (Some(start), Some(size)) = (cut.start.get_mut(a), cut.size.get_mut(a)) else {
                continue;
            };
            if o == 0 {
                continue;
            }
            let keep = depth.min(*size);
            // Above and sent, or below and received: the last layers.
            if (o > 0) == sent {
                *start += *size - keep;
            }
            *size = keep;
        }
        cut
    }
}

/// One neighbour of a rank: the direction to it, its rank, what is sent to
/// it (interior cells) and where what it sends lands (halo cells).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    /// Offset in the process grid, each axis -1, 0 or +1.
    pub offset: Vec<i32>,
    /// Its rank (may be this rank, when an axis with one process is periodic).
    pub rank: usize,
    /// Interior cells sent to it.
    pub send: Region,
    /// Halo cells it fills.
    pub recv: Region,
}

impl Neighbour {
    /// A tag unique to the direction, the same for both ends of a message:
    /// the sender's offset.
    pub fn send_tag(&self) -> u32 {
        direction_tag(&self.offset)
    }

    /// The tag of what this neighbour sends us (its offset to us is ours
    /// negated).
    pub fn recv_tag(&self) -> u32 {
        direction_tag(&self.offset.iter().map(|o| -o).collect::<Vec<_>>())
    }

    /// The direction's name: `E`, `NW`, ... in 2-D, `x+y-` in 3-D.
    pub fn direction(&self) -> String {
        if self.offset.len() == 2 {
            let ns = match self.offset[1] {
                1 => "N",
                -1 => "S",
                _ => "",
            };
            let ew = match self.offset[0] {
                1 => "E",
                -1 => "W",
                _ => "",
            };
            format!("{ns}{ew}")
        } else {
            let mut s = String::new();
            for (a, &o) in self.offset.iter().enumerate() {
                if o != 0 {
                    s.push(['x', 'y', 'z'][a]);
                    s.push(if o > 0 { '+' } else { '-' });
                }
            }
            s
        }
    }
}

/// A tag unique to a direction in the process grid (each axis -1, 0, +1).
pub fn direction_tag(offset: &[i32]) -> u32 {
    offset.iter().fold(0u32, |t, &o| t * 3 + (o + 1) as u32)
}

/// The tag of the one message each way between two ranks whose every
/// direction travels together (3^3: above any direction's tag).
pub const PEER_TAG: u32 = 27;

/// Whether a direction crosses more than one axis: an edge or a corner of
/// the block, whose pieces are small. Over RDMA, where each face travels in
/// a message of its own (written in place when its runs allow, the faces
/// spread over the engines by direction), every edge and corner to a rank
/// still travels in one message: a write each would cost more than the
/// few cells it carries.
pub fn crosses_axes(offset: &[i32]) -> bool {
    offset.iter().filter(|&&o| o != 0).count() > 1
}

/// A face's bit in a mask of faces ([`zero_copy::packed_faces`](crate::zero_copy::packed_faces)):
/// bit `2a` for the face below axis `a`, `2a + 1` for the one above. `None`
/// for a direction that crosses no axis or several, or an axis past 31.
pub fn face_bit(offset: &[i32]) -> Option<u64> {
    let mut crossed = offset.iter().enumerate().filter(|(_, &o)| o != 0);
    let (axis, &o) = crossed.next()?;
    if crossed.next().is_some() || axis >= 32 {
        return None;
    }
    Some(1 << (2 * axis + usize::from(o > 0)))
}

/// A direction's name by axes, `x+y-` (empty for none).
pub fn axes_name(offset: &[i32]) -> String {
    offset
        .iter()
        .zip(['x', 'y', 'z'])
        .filter(|(&o, _)| o != 0)
        .map(|(&o, axis)| format!("{axis}{}", if o > 0 { '+' } else { '-' }))
        .collect()
}

/// The directions `stencil` reads in a `d`-axis grid, in lexicographic
/// order (axis 0 slowest).
pub fn stencil_offsets(d: usize, stencil: Stencil) -> Vec<Vec<i32>> {
    (0..3usize.pow(d as u32))
        .map(|code| {
            (0..d)
                .map(|a| ((code / 3usize.pow((d - 1 - a) as u32)) % 3) as i32 - 1)
                .collect::<Vec<i32>>()
        })
        .filter(|o| {
            let nonzero = o.iter().filter(|&&x| x != 0).count();
            match stencil {
                Stencil::Faces => nonzero == 1,
                Stencil::FacesEdges => nonzero == 1 || nonzero == 2,
                Stencil::Full => nonzero >= 1,
            }
        })
        .collect()
}

/// A global grid split over a grid of processes, block by block. Axis 0 is
/// the fastest-varying in memory (x), ranks are numbered with axis 0
/// fastest too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decomposition {
    /// Global cells per axis.
    pub global: Vec<usize>,
    /// Processes per axis.
    pub grid: Vec<usize>,
    /// Periodic axes.
    pub periodic: Vec<bool>,
    /// Halo width in cells.
    pub halo: usize,
    /// Which neighbours.
    pub stencil: Stencil,
}

impl Decomposition {
    /// Checks the description: 1, 2 or 3 axes, each with at least as many
    /// cells per process as the halo is wide.
    ///
    /// `global` cells per axis, `grid` processes per axis, `periodic` per
    /// axis, `halo` cells wide, `stencil` the neighbours read (faces,
    /// faces and edges, or all). Axis 0 is the fastest in memory.
    ///
    /// # Errors
    ///
    /// [`HaloError::Decomposition`], naming the axis, when the lengths of
    /// `global`, `grid` and `periodic` differ or are not 1 to 3, a grid
    /// axis is 0 or larger than its cells, or a block is narrower than
    /// the halo.
    ///
    /// # Examples
    ///
    /// ```
    /// use sode::{Decomposition, Stencil};
    ///
    /// // 512 x 256 cells on a 4 x 2 process grid, periodic along axis 0.
    /// let d = Decomposition::new(&[512, 256], &[4, 2], &[true, false], 1, Stencil::Full)?;
    /// assert_eq!(d.neighbours(0).len(), 5); // a wall below axis 1
    ///
    /// // A halo wider than a block is refused, by axis.
    /// let e = Decomposition::new(&[8, 8], &[8, 1], &[false, false], 2, Stencil::Faces);
    /// assert!(e.unwrap_err().to_string().contains("axis 0"));
    /// # Ok::<(), sode::HaloError>(())
    /// ```
    pub fn new(
        global: &[usize],
        grid: &[usize],
        periodic: &[bool],
        halo: usize,
        stencil: Stencil,
    ) -> Result<Decomposition> {
        let bad = |why: String| Err(HaloError::Decomposition { why });
        let d = global.len();
        if !(1..=3).contains(&d) {
            return bad(format!("{d} axes: sode decomposes 1-D, 2-D and 3-D grids"));
        }
        if grid.len() != d || periodic.len() != d {
            return bad(format!(
                "{} process-grid axes and {} periodic flags for a {d}-D grid",
                grid.len(),
                periodic.len()
            ));
        }
        if halo == 0 {
            return bad("a halo width of 0 exchanges nothing".into());
        }
        for a in 0..d {
            if grid[a] == 0 {
                return bad(format!("axis {a} has 0 processes"));
            }
            let smallest = global[a] / grid[a];
            if smallest < halo {
                return bad(format!(
                    "axis {a}: {} cells over {} processes leaves {smallest} cells on some, fewer than the halo width {halo}; use fewer processes or a narrower halo",
                    global[a], grid[a]
                ));
            }
        }
        Ok(Decomposition {
            global: global.to_vec(),
            grid: grid.to_vec(),
            periodic: periodic.to_vec(),
            halo,
            stencil,
        })
    }

    /// Number of ranks.
    pub fn ranks(&self) -> usize {
        self.grid.iter().product()
    }

    /// Axes.
    pub fn dims(&self) -> usize {
        self.global.len()
    }

    /// The process-grid coordinates of `rank`.
    pub fn coords(&self, rank: usize) -> Vec<usize> {
        let mut r = rank;
        self.grid
            .iter()
            .map(|&g| {
                let c = r % g;
                r /= g;
                c
            })
            .collect()
    }

    /// The rank at process-grid coordinates `c`.
    pub fn rank_of(&self, c: &[usize]) -> usize {
        c.iter()
            .zip(&self.grid)
            .rev()
            .fold(0, |r, (&ci, &g)| r * g + ci)
    }

    /// First global cell and cells per axis owned by `rank` (the first
    /// `global % grid` processes of an axis get one cell more).
    pub fn block(&self, rank: usize) -> (Vec<usize>, Vec<usize>) {
        let c = self.coords(rank);
        (0..self.dims())
            .map(|a| {
                let (n, p, i) = (self.global[a], self.grid[a], c[a]);
                let (q, r) = (n / p, n % p);
                (i * q + i.min(r), q + usize::from(i < r))
            })
            .unzip()
    }

    /// Cells per axis of `rank`'s local array: its block plus the halo on
    /// both sides.
    pub fn local_extent(&self, rank: usize) -> Vec<usize> {
        self.block(rank)
            .1
            .iter()
            .map(|s| s + 2 * self.halo)
            .collect()
    }

    /// `rank`'s neighbours in a fixed order (offsets in lexicographic
    /// order, axis 0 slowest), missing across non-periodic edges.
    pub fn neighbours(&self, rank: usize) -> Vec<Neighbour> {
        let d = self.dims();
        let c = self.coords(rank);
        let (_, size) = self.block(rank);
        let h = self.halo;
        let mut out = Vec::new();
        for offset in stencil_offsets(d, self.stencil) {
            let mut nc = Vec::with_capacity(d);
            let mut exists = true;
            for a in 0..d {
                let x = c[a] as i64 + i64::from(offset[a]);
                let g = self.grid[a] as i64;
                if x < 0 || x >= g {
                    if !self.periodic[a] {
                        exists = false;
                        break;
                    }
                    nc.push(x.rem_euclid(g) as usize);
                } else {
                    nc.push(x as usize);
                }
            }
            if !exists {
                continue;
            }
            let (mut send, mut recv) = (
                Region {
                    start: vec![],
                    size: vec![],
                },
                Region {
                    start: vec![],
                    size: vec![],
                },
            );
            for a in 0..d {
                let (ss, rs, n) = match offset[a] {
                    -1 => (h, 0, h),
                    1 => (size[a], size[a] + h, h),
                    _ => (h, h, size[a]),
                };
                send.start.push(ss);
                send.size.push(n);
                recv.start.push(rs);
                recv.size.push(n);
            }
            out.push(Neighbour {
                offset,
                rank: self.rank_of(&nc),
                send,
                recv,
            });
        }
        out
    }
}

/// Copies region `r` of a local array with extent `ext` (cells of `elem`
/// bytes) into `out`, axis 0 fastest.
pub fn pack(array: &[u8], ext: &[usize], elem: usize, r: &Region, out: &mut [u8]) {
    let mut k = 0;
    for_rows(ext, r, |at| {
        let n = r.size[0] * elem;
        copy_run(&mut out[k..k + n], &array[at * elem..at * elem + n]);
        k += n;
    });
}

/// The inverse of [`pack`].
pub fn unpack(data: &[u8], ext: &[usize], elem: usize, r: &Region, array: &mut [u8]) {
    let mut k = 0;
    for_rows(ext, r, |at| {
        let n = r.size[0] * elem;
        copy_run(&mut array[at * elem..at * elem + n], &data[k..k + n]);
        k += n;
    });
}

/// The runs (byte offset, bytes) of region `r` of an array of extent `ext`
/// and `elem`-byte cells that starts `base` bytes into its memory, in
/// [`pack`]'s order, adjacent runs merged.
pub(crate) fn runs(
    ext: &[usize],
    elem: usize,
    r: &Region,
    base: usize,
    out: &mut Vec<sode_shm::Run>,
) {
    let n = r.size[0] * elem;
    if n == 0 {
        return;
    }
    for_rows(ext, r, |at| {
        let offset = base + at * elem;
        match out.last_mut() {
            Some(last) if last.offset + last.len == offset => last.len += n,
            _ => out.push(sode_shm::Run { offset, len: n }),
        }
    });
}

/// Copies the `runs` of `src`, in order, to the front of `out`; the bytes
/// copied.
pub(crate) fn gather_runs(src: &[u8], runs: &[sode_shm::Run], out: &mut [u8]) -> usize {
    let mut at = 0;
    for r in runs {
        copy_run(&mut out[at..at + r.len], &src[r.offset..r.offset + r.len]);
        at += r.len;
    }
    at
}

/// `dst.copy_from_slice(src)`, for one run of a face: runs of one cell of
/// 4, 8 or 16 bytes (faces across the fastest axis) are copied by a
/// fixed-size move. A call to `memcpy` per 8-byte cell made the exchange
/// of such faces take about twice as long (`stencil --exchange-only`, 3-D
/// 32 on `2,1,1`: 3.9-4.1 against 2.0-2.1 us, alternating the builds).
///
/// Public for `sode-capi`'s packing, not part of the API (hidden from the
/// docs): it panics, as `copy_from_slice` does, if the lengths differ.
#[doc(hidden)]
#[inline(always)]
pub fn copy_run(dst: &mut [u8], src: &[u8]) {
    if !(fixed::<8>(dst, src) || fixed::<4>(dst, src) || fixed::<16>(dst, src)) {
        dst.copy_from_slice(src);
    }
}

/// Copies `src` to `dst` if both are `N` bytes long.
#[inline(always)]
fn fixed<const N: usize>(dst: &mut [u8], src: &[u8]) -> bool {
    match (<&mut [u8; N]>::try_from(dst), <&[u8; N]>::try_from(src)) {
        (Ok(d), Ok(s)) => {
            *d = *s;
            true
        }
        _ => false,
    }
}

/// The inverse of [`gather_runs`]: the front of `data`, in order, into the
/// `runs` of `dst`; the bytes copied.
pub(crate) fn scatter_runs(data: &[u8], runs: &[sode_shm::Run], dst: &mut [u8]) -> usize {
    let mut at = 0;
    for r in runs {
        copy_run(&mut dst[r.offset..r.offset + r.len], &data[at..at + r.len]);
        at += r.len;
    }
    at
}

/// Calls `f` with the cell index of the start of each contiguous row
/// (along axis 0) of region `r`.
fn for_rows(ext: &[usize], r: &Region, mut f: impl FnMut(usize)) {
    let rows: usize = r.size[1..].iter().product();
    for row in 0..rows {
        let mut rem = row;
        let mut at = 0;
        let mut stride = 1;
        for (a, &e) in ext.iter().enumerate() {
            let i = if a == 0 {
                r.start[0]
            } else {
                let i = r.start[a] + rem % r.size[a];
                rem /= r.size[a];
                i
            };
            at += i * stride;
            stride *= e;
        }
        f(at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_face_has_a_bit_of_its_own_and_edges_none() {
        assert_eq!(face_bit(&[-1, 0]), Some(1));
        assert_eq!(face_bit(&[1, 0]), Some(2));
        assert_eq!(face_bit(&[0, 0, -1]), Some(16));
        assert_eq!(face_bit(&[0, 1, 0]), Some(8));
        assert_eq!(face_bit(&[1, -1]), None, "an edge");
        assert_eq!(face_bit(&[0, 0]), None, "itself");
        let mut far = vec![0; 33];
        far[32] = 1;
        assert_eq!(face_bit(&far), None);
        far[31] = 1;
        far[32] = 0;
        assert_eq!(face_bit(&far), Some(1 << 63));
    }

    #[test]
    fn runs_of_every_length_gather_and_scatter_back() {
        let src: Vec<u8> = (0..512).map(|i| (i * 13 % 253) as u8 + 1).collect();
        let at = |offset, len| sode_shm::Run { offset, len };
        // One cell of 4, 8 and 16 bytes (fixed-size moves), and others.
        let runs = [
            at(64, 8),
            at(0, 4),
            at(200, 16),
            at(300, 3),
            at(400, 100),
            at(8, 1),
        ];
        let mut line = vec![0u8; 132];
        assert_eq!(gather_runs(&src, &runs, &mut line), 132);
        let expected: Vec<u8> = runs
            .iter()
            .flat_map(|r| src[r.offset..r.offset + r.len].to_vec())
            .collect();
        assert_eq!(line, expected);
        let mut back = vec![0u8; 512];
        assert_eq!(scatter_runs(&line, &runs, &mut back), 132);
        for (i, (&b, &s)) in back.iter().zip(&src).enumerate() {
            let inside = runs
                .iter()
                .any(|r| (r.offset..r.offset + r.len).contains(&i));
            assert_eq!(b, if inside { s } else { 0 }, "byte {i}");
        }
    }

    #[test]
    fn neighbour_counts_for_every_stencil() {
        let d2 = |s, p| Decomposition::new(&[12, 9], &[3, 3], &[p, p], 1, s).unwrap();
        let d3 = |s, p| Decomposition::new(&[9, 9, 9], &[3, 3, 3], &[p, p, p], 1, s).unwrap();
        // The centre rank has every neighbour; periodic grids give every rank all.
        assert_eq!(d2(Stencil::Faces, false).neighbours(4).len(), 4);
        assert_eq!(d2(Stencil::Full, false).neighbours(4).len(), 8);
        assert_eq!(
            d2(Stencil::Full, false).neighbours(0).len(),
            3,
            "a corner rank"
        );
        assert_eq!(d3(Stencil::Faces, false).neighbours(13).len(), 6);
        assert_eq!(d3(Stencil::FacesEdges, false).neighbours(13).len(), 18);
        assert_eq!(d3(Stencil::Full, false).neighbours(13).len(), 26);
        assert_eq!(d3(Stencil::Full, true).neighbours(0).len(), 26);
        assert_eq!(d3(Stencil::Full, false).neighbours(0).len(), 7);
    }

    #[test]
    fn each_message_matches_the_receivers_region() {
        // Odd sizes, periodic in one axis, halo 2, every stencil.
        for (g, p, per) in [
            (vec![13, 11], vec![3, 2], vec![true, false]),
            (vec![7, 9, 10], vec![2, 3, 2], vec![false, true, true]),
        ] {
            for s in [Stencil::Faces, Stencil::FacesEdges, Stencil::Full] {
                let dec = Decomposition::new(&g, &p, &per, 2, s).unwrap();
                for r in 0..dec.ranks() {
                    for n in dec.neighbours(r) {
                        // The receiver has us at the opposite offset, with the
                        // same tag and as many cells.
                        let back = dec
                            .neighbours(n.rank)
                            .into_iter()
                            .find(|m| m.rank == r && m.recv_tag() == n.send_tag())
                            .unwrap();
                        assert_eq!(
                            back.recv.size, n.send.size,
                            "{g:?} {s:?} rank {r} -> {}",
                            n.rank
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn blocks_tile_the_grid_and_small_blocks_are_refused() {
        let dec = Decomposition::new(&[10, 7], &[3, 2], &[false, false], 1, Stencil::Full).unwrap();
        let mut seen = vec![0; 70];
        for r in 0..6 {
            let (st, sz) = dec.block(r);
            for y in st[1]..st[1] + sz[1] {
                for x in st[0]..st[0] + sz[0] {
                    seen[y * 10 + x] += 1;
                }
            }
        }
        assert!(seen.iter().all(|&c| c == 1));
        let e = Decomposition::new(&[5, 8], &[3, 1], &[false, false], 2, Stencil::Faces)
            .unwrap_err()
            .to_string();
        assert!(e.contains("axis 0") && e.contains("halo width 2"), "{e}");
        // 1 to 3 axes.
        assert!(Decomposition::new(&[8], &[2], &[true], 1, Stencil::Faces).is_ok());
        let e = Decomposition::new(&[8; 4], &[1; 4], &[false; 4], 1, Stencil::Faces)
            .unwrap_err()
            .to_string();
        assert!(e.contains("4 axes"), "{e}");
    }

    #[test]
    fn pack_and_unpack_are_inverse_on_strided_regions() {
        let ext = [5, 4, 3];
        let array: Vec<u8> = (0..60 * 2).map(|i| i as u8).collect();
        let r = Region {
            start: vec![1, 1, 0],
            size: vec![3, 2, 2],
        };
        let mut buf = vec![0u8; r.cells() * 2];
        pack(&array, &ext, 2, &r, &mut buf);
        // First row: cells (1,1,0),(2,1,0),(3,1,0) -> index 6,7,8.
        assert_eq!(&buf[..6], &[12, 13, 14, 15, 16, 17]);
        let mut back = vec![0u8; 120];
        unpack(&buf, &ext, 2, &r, &mut back);
        for z in 0..3 {
            for y in 0..4 {
                for x in 0..5 {
                    let i = (z * 4 + y) * 5 + x;
                    let inside = (1..4).contains(&x) && (1..3).contains(&y) && z < 2;
                    assert_eq!(back[2 * i], if inside { array[2 * i] } else { 0 });
                }
            }
        }
    }
}
