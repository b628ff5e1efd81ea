//! A halo pattern over fields laid out as the caller's arrays hold them
//! ([`FieldLayout`]): which neighbours a Cartesian process grid gives a
//! rank, or which boxes an explicit description sends and receives; the
//! links those make, each message a list of [`Piece`]s laid out alike at
//! both ends; and the packing of the pieces from the caller's arrays into
//! the links' buffers and back, per start, on any arrays and any subset of
//! the fields. Every language binds this one model: the C and Fortran ABI
//! keeps handles, status codes and the job-wide agreement only.

use std::time::Instant;

use crate::decomp::{crosses_axes, direction_tag, face_bit, Region, Stencil, PEER_TAG};
use crate::error::{HaloError, Result};
use crate::field::{FieldLayout, Piece};
use crate::links::{Link, LinkExchange, LocalCopy, Message};

/// One neighbour in a process grid: which way, and who.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GridNeighbour {
    /// Offset in the process grid, each axis -1, 0 or +1.
    pub offset: Vec<i32>,
    /// Its rank.
    pub rank: usize,
}

/// A Cartesian process grid with every position's rank.
#[derive(Debug, Clone, Copy)]
pub struct ProcessGrid<'a> {
    /// Processes per axis.
    pub dims: &'a [usize],
    /// Periodic axes.
    pub periodic: &'a [bool],
    /// Which neighbours the stencil reads.
    pub stencil: Stencil,
    /// Rank at each grid position ([`grid_position`]: axis 0 slowest).
    pub at: &'a [usize],
}

impl ProcessGrid<'_> {
    /// Whether the grid has an axis at least, a periodic flag per axis,
    /// and a rank of the job's `ranks` for each of its places (`what`:
    /// processes, domains).
    ///
    /// # Errors
    /// What does not fit.
    pub fn check(&self, what: &str, ranks: usize) -> std::result::Result<(), String> {
        let d = self.dims.len();
        if d == 0 || self.periodic.len() != d {
            return Err(format!(
                "a grid of {d} axes with {} periodic flags: give an axis at least, a flag per axis",
                self.periodic.len()
            ));
        }
        let places = self
            .dims
            .iter()
            .try_fold(1usize, |n, &g| n.checked_mul(g))
            .filter(|&n| n > 0);
        if places != Some(self.at.len()) {
            return Err(format!(
                "a grid of {:?} {what}, but {} ranks given for them: give one for each",
                self.dims,
                self.at.len()
            ));
        }
        match self.at.iter().position(|&r| r >= ranks) {
            Some(p) => Err(format!(
                "place {p} of the grid belongs to rank {}, but the job has {ranks} ranks",
                self.at[p]
            )),
            None => Ok(()),
        }
    }

    /// The position one step `offset` from `coords`, across periodic
    /// edges; `None` past the others.
    pub fn step(&self, coords: &[usize], offset: &[i32]) -> Option<usize> {
        let mut c = Vec::with_capacity(coords.len());
        for (a, &o) in offset.iter().enumerate() {
            let x = coords[a] as i64 + i64::from(o);
            let g = self.dims[a] as i64;
            if (x < 0 || x >= g) && !self.periodic[a] {
                return None;
            }
            c.push(x.rem_euclid(g) as usize);
        }
        Some(grid_position(self.dims, &c))
    }

    /// The neighbours of the rank at `coords`, in offset order (axis 0
    /// slowest); none across the edges of non-periodic axes.
    pub fn neighbours(&self, coords: &[usize]) -> Vec<GridNeighbour> {
        crate::decomp::stencil_offsets(self.dims.len(), self.stencil)
            .into_iter()
            .filter_map(|offset| {
                Some(GridNeighbour {
                    rank: *self.at.get(self.step(coords, &offset)?)?,
                    offset,
                })
            })
            .collect()
    }
}

/// The position of `coords` in a grid of `dims`, axis 0 slowest.
pub fn grid_position(dims: &[usize], coords: &[usize]) -> usize {
    coords.iter().zip(dims).fold(0, |i, (&c, &d)| i * d + c)
}

/// One of this rank's domains (tiles) in a Cartesian grid of domains: its
/// coordinates in the grid, and its index along the last axis of every
/// field's array, where a tiled model keeps its tiles
/// (`u(1-OL:SX+OL, 1-OL:SY+OL, NR, NT)`: the tile axis after the grid axes
/// and any further ones).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tile {
    /// Coordinates in the grid of domains.
    pub coords: Vec<usize>,
    /// Index along the arrays' last axis (0-based).
    pub index: usize,
}

/// The rank whose tiles are meant, and the job's ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileRank {
    /// This rank.
    pub rank: usize,
    /// Ranks in the job.
    pub ranks: usize,
}

/// What a rank of a tiled exchange sends and receives: one box per
/// (tile, direction, field), to the rank that holds the neighbouring tile
/// (this one, for a neighbour it holds too: a copy).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TileBoxes {
    /// Boxes sent.
    pub sends: Vec<BoxMessage>,
    /// Boxes received.
    pub recvs: Vec<BoxMessage>,
}

/// The boxes rank `job.rank` sends and receives for `tiles`, its domains in
/// `grid` (a grid of domains, `grid.at` each one's rank), every field of
/// `layouts` with its halo widths and overlap on the grid's axes. Each box
/// is tagged by the tile that sends it, the direction and the field, so
/// that both ends of a message compute the same tag.
///
/// # Errors
/// What is wrong with the grid, the tiles or a field's array, naming it.
pub fn tile_boxes(
    layouts: &[FieldLayout],
    grid: &ProcessGrid<'_>,
    tiles: &[Tile],
    job: TileRank,
) -> std::result::Result<TileBoxes, String> {
    check_tiles(layouts, grid, tiles, job)?;
    let offsets = crate::decomp::stencil_offsets(grid.dims.len(), grid.stencil);
    let directions = offsets.len();
    let tag = |tile: usize, direction: usize, field: usize| {
        tile.checked_mul(directions)
            .and_then(|t| t.checked_add(direction))
            .and_then(|t| t.checked_mul(layouts.len()))
            .and_then(|t| t.checked_add(field))
            .and_then(|t| u32::try_from(t).ok())
            .ok_or_else(|| {
                format!(
                    "a grid of {} domains, {directions} directions and {} fields needs more than 2^32 tags",
                    grid.at.len(),
                    layouts.len()
                )
            })
    };
    let mut out = TileBoxes::default();
    for t in tiles {
        let here = grid_position(grid.dims, &t.coords);
        for (d, o) in offsets.iter().enumerate() {
            let Some(there) = grid.step(&t.coords, o) else {
                continue;
            };
            let back: Vec<i32> = o.iter().map(|x| -x).collect();
            // Symmetric stencils: the opposite direction is one of them.
            let Some(d_back) = offsets.iter().position(|b| *b == back) else {
                continue;
            };
            let peer = grid.at[there];
            for (f, l) in layouts.iter().enumerate() {
                let sent = tile_box(peer, tag(here, d, f)?, f, &l.send_region(o), t.index);
                let received =
                    tile_box(peer, tag(there, d_back, f)?, f, &l.recv_region(o), t.index);
                out.sends.extend(sent);
                out.recvs.extend(received);
            }
        }
    }
    Ok(out)
}

/// The box of `region` in tile `index` (the arrays' last axis), unless it
/// holds no cells.
fn tile_box(
    peer: usize,
    tag: u32,
    field: usize,
    region: &Region,
    index: usize,
) -> Option<BoxMessage> {
    if region.cells() == 0 {
        return None;
    }
    let (mut lo, mut size) = (region.start.clone(), region.size.clone());
    *lo.last_mut()? = index;
    *size.last_mut()? = 1;
    Some(BoxMessage {
        peer,
        tag,
        lo,
        size,
        field: Some(field),
    })
}

/// The grid of domains, rank `job.rank`'s tiles on it and the fields' tile
/// axes, checked before any box is made.
fn check_tiles(
    layouts: &[FieldLayout],
    grid: &ProcessGrid<'_>,
    tiles: &[Tile],
    job: TileRank,
) -> std::result::Result<(), String> {
    check_tile_grid(grid, tiles, job)?;
    for (f, l) in layouts.iter().enumerate() {
        check_tile_axis(l, grid.dims.len(), tiles).map_err(|e| format!("field {f}: {e}"))?;
    }
    Ok(())
}

/// Whether `grid` is a grid with a rank for each domain ([`ProcessGrid::check`]),
/// and `tiles` are domains of rank `job.rank` on it, each once, with an index
/// each.
///
/// # Errors
/// What is wrong, naming the tile.
pub fn check_tile_grid(
    grid: &ProcessGrid<'_>,
    tiles: &[Tile],
    job: TileRank,
) -> std::result::Result<(), String> {
    grid.check("domains", job.ranks)?;
    let me = job.rank;
    let d = grid.dims.len();
    if tiles.is_empty() {
        return Err("no tiles: give this rank's domains (a rank without any takes no part)".into());
    }
    for (i, t) in tiles.iter().enumerate() {
        if t.coords.len() != d || (0..d).any(|a| t.coords[a] >= grid.dims[a]) {
            return Err(format!(
                "the tile at {:?} lies outside the grid of {:?} domains",
                t.coords, grid.dims
            ));
        }
        let owner = grid.at[grid_position(grid.dims, &t.coords)];
        if owner != me {
            return Err(format!(
                "the tile at {:?} is rank {owner}'s domain on the grid, not this rank's ({me})",
                t.coords
            ));
        }
        if let Some(u) = tiles[..i].iter().find(|u| u.coords == t.coords) {
            return Err(format!("the tile at {:?} is given twice", u.coords));
        }
        if let Some(u) = tiles[..i].iter().find(|u| u.index == t.index) {
            return Err(format!(
                "the tiles at {:?} and {:?} both sit at index {} of the tile axis",
                u.coords, t.coords, t.index
            ));
        }
    }
    Ok(())
}

/// Whether `layout` holds `tiles` along its last axis, after the grid's
/// `grid_axes`: each tile's index within its owned range there.
///
/// # Errors
/// What is wrong, naming the tile.
pub fn check_tile_axis(
    layout: &FieldLayout,
    grid_axes: usize,
    tiles: &[Tile],
) -> std::result::Result<(), String> {
    let axes = layout.extents.len();
    if axes <= grid_axes {
        return Err(format!(
            "{axes} axes: a tiled field has the grid's {grid_axes} and, last, one for the tiles"
        ));
    }
    let (lo, n) = (layout.owned_lo[axes - 1], layout.owned_size[axes - 1]);
    match tiles.iter().find(|t| !(lo..lo + n).contains(&t.index)) {
        None => Ok(()),
        Some(t) => Err(format!(
            "the tile at {:?} sits at index {} of the last axis, outside its owned {lo}..{} \
             (from 0): give the field room for every tile",
            t.coords,
            t.index,
            lo + n
        )),
    }
}

/// A direction as callers index the process grid: `axis 0+`,
/// `axis 0-, axis 1+` (`dims[0]` is axis 0, whatever the arrays' memory
/// order; "x" and "y" would name them differently in C and Fortran order).
pub fn direction_name(offset: &[i32]) -> String {
    let parts: Vec<String> = offset
        .iter()
        .enumerate()
        .filter(|(_, &o)| o != 0)
        .map(|(a, &o)| format!("axis {a}{}", if o > 0 { '+' } else { '-' }))
        .collect();
    if parts.is_empty() {
        "itself".into()
    } else {
        parts.join(", ")
    }
}

/// One box sent to, or received from, a peer, in an exchange described by
/// its messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoxMessage {
    /// The peer's rank.
    pub peer: usize,
    /// The tag pairing it with the peer's receive (or send).
    pub tag: u32,
    /// First index per axis, in the fields' index space (0-based).
    pub lo: Vec<usize>,
    /// Cells per axis.
    pub size: Vec<usize>,
    /// The one field it carries (`None`: every field): fields laid out
    /// differently (staggered, on another grid) need boxes of their own.
    pub field: Option<usize>,
}

impl BoxMessage {
    /// Whether it carries field `field`.
    pub fn carries(&self, field: usize) -> bool {
        self.field.is_none_or(|f| f == field)
    }
}

/// Whether box `m` lies inside `field`'s array.
///
/// # Errors
/// What is wrong, told from 0 or, with an `origin` (a Fortran caller's
/// lower bounds), in the arrays' own bounds.
pub fn box_fits(
    m: &BoxMessage,
    field: &FieldLayout,
    origin: Option<&[i64]>,
) -> std::result::Result<(), String> {
    for (a, (lo, size)) in m.lo.iter().zip(&m.size).enumerate() {
        let extent = field.extents.get(a).copied().unwrap_or(0);
        if lo.checked_add(*size).is_some_and(|end| end <= extent) {
            continue;
        }
        return Err(match origin {
            None => format!(
                "the box {lo}..{} along axis {a} (to or from rank {}, tag {}) leaves the array's {extent} cells",
                lo.saturating_add(*size),
                m.peer,
                m.tag
            ),
            Some(o) => {
                // Within i128: each term came from an i64 or a usize.
                let base = i128::from(o.get(a).copied().unwrap_or(0));
                let (lo, size, extent) = (*lo as i128, *size as i128, extent as i128);
                format!(
                    "dimension {}: the box {}:{} (to or from rank {}, tag {}) leaves the array's bounds {}:{}",
                    a + 1,
                    base + lo,
                    base + lo + size - 1,
                    m.peer,
                    m.tag,
                    base,
                    base + extent - 1
                )
            }
        });
    }
    Ok(())
}

/// One link's messages as pieces of the fields: those sent to its peer and
/// those received from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkPieces {
    /// What is sent (`None`: nothing is).
    pub send: Option<Vec<Piece>>,
    /// What is received (`None`: nothing is).
    pub recv: Option<Vec<Piece>>,
}

impl LinkPieces {
    /// The same messages at `depth` layers of each halo
    /// ([`Piece::at_depth`]).
    pub fn at_depth(&self, depth: usize) -> LinkPieces {
        let cut = |pieces: &Option<Vec<Piece>>, send: bool| {
            pieces
                .as_ref()
                .map(|ps| ps.iter().map(|p| p.at_depth(depth, send)).collect())
        };
        LinkPieces {
            send: cut(&self.send, true),
            recv: cut(&self.recv, false),
        }
    }
}

/// The bytes of a message made of `pieces`.
pub fn message_bytes(layouts: &[FieldLayout], pieces: &[Piece]) -> usize {
    pieces
        .iter()
        .map(|p| p.region.cells() * layouts[p.field].ty.size())
        .sum()
}

/// Which directions of a Cartesian exchange travel in one message to their
/// rank ([`PlannedLinks::cartesian`]). Both ends must decide alike, so
/// every input is known to both.
#[derive(Debug, Clone, Copy, Default)]
pub struct Grouping<'a> {
    /// Per rank, whether every direction to it travels together: it is
    /// reached by a copy, shared memory or TCP. Over RDMA, which writes
    /// faces in place and spreads them over its engines by direction, a
    /// face travels alone unless `packed` says both ends pack it.
    pub whole: &'a [bool],
    /// This rank's faces packed at both of its sides
    /// ([`zero_copy::packed_faces`](crate::zero_copy::packed_faces)).
    pub my_packed: u64,
    /// Every rank's such faces, by rank; empty when not known.
    pub packed: &'a [u64],
}

impl<'a> Grouping<'a> {
    /// Every direction to a rank `whole` marks together; over RDMA, each
    /// face alone.
    pub fn by_rank(whole: &'a [bool]) -> Grouping<'a> {
        Grouping {
            whole,
            ..Grouping::default()
        }
    }

    /// Whether the direction to `n` travels in the one message to its
    /// rank: its rank is `whole`, or it is an edge or a corner
    /// (`crosses_axes`), or it is a face that this rank packs and the
    /// rank across it packs too (nothing to write in place at either end,
    /// so a write of its own would only cost). The same answer at both
    /// ends: the peer asks of the opposite face.
    pub fn together(&self, n: &GridNeighbour) -> bool {
        if self.whole.get(n.rank).copied().unwrap_or(false) || crosses_axes(&n.offset) {
            return true;
        }
        let opposite: Vec<i32> = n.offset.iter().map(|o| -o).collect();
        let (Some(mine), Some(theirs)) = (face_bit(&n.offset), face_bit(&opposite)) else {
            return false;
        };
        let packed_there = self.packed.get(n.rank).copied().unwrap_or(0);
        self.my_packed & mine != 0 && packed_there & theirs != 0
    }
}

/// The pieces of the message toward `offset` alone, and of the one
/// received from there: what a link of that one direction carries.
pub fn direction_pieces(layouts: &[FieldLayout], offset: &[i32]) -> LinkPieces {
    let n = GridNeighbour {
        offset: offset.to_vec(),
        rank: 0,
    };
    direction_link(layouts, &[n]).map_or(
        LinkPieces {
            send: None,
            recv: None,
        },
        |(_, pieces)| pieces,
    )
}

/// Links and, beside each, its pieces: what a [`LinkExchange`] is built
/// from and what every start packs.
#[derive(Debug, Default)]
pub struct PlannedLinks {
    /// The links, for [`LinkExchange::builder`].
    pub links: Vec<Link>,
    /// Each link's pieces, in the same order.
    pub pieces: Vec<LinkPieces>,
}

impl PlannedLinks {
    fn push(&mut self, planned: Option<(Link, LinkPieces)>) {
        if let Some((link, pieces)) = planned {
            self.links.push(link);
            self.pieces.push(pieces);
        }
    }

    /// The links to `neighbours` carrying every field of `layouts`, in
    /// one message each way per rank where `grouping` says so
    /// ([`Grouping::together`]); every other direction in a message of its
    /// own. Both ends lay each message out alike.
    pub fn cartesian(
        layouts: &[FieldLayout],
        neighbours: &[GridNeighbour],
        grouping: &Grouping<'_>,
    ) -> PlannedLinks {
        let mut out = PlannedLinks::default();
        let mut peers: Vec<usize> = Vec::new();
        for n in neighbours {
            if !grouping.together(n) {
                out.push(direction_link(layouts, std::slice::from_ref(n)));
            } else if !peers.contains(&n.rank) {
                peers.push(n.rank);
            }
        }
        for peer in peers {
            let group: Vec<GridNeighbour> = neighbours
                .iter()
                .filter(|n| n.rank == peer && grouping.together(n))
                .cloned()
                .collect();
            out.push(direction_link(layouts, &group));
        }
        out
    }

    /// The links of an explicit exchange carrying every field of
    /// `layouts` in each box: every box to (and from) a rank `grouped`
    /// marks travels in one message each way, the boxes in the order of
    /// their tags on both ends; other ranks' boxes keep a message each.
    pub fn boxes(
        layouts: &[FieldLayout],
        sends: &[BoxMessage],
        recvs: &[BoxMessage],
        grouped: &[bool],
    ) -> PlannedLinks {
        let mut out = PlannedLinks::default();
        let mut peers: Vec<usize> = Vec::new();
        let sides = sends.iter().map(|m| (m, true));
        for (m, send) in sides.chain(recvs.iter().map(|m| (m, false))) {
            if grouped.get(m.peer).copied().unwrap_or(false) {
                if !peers.contains(&m.peer) {
                    peers.push(m.peer);
                }
                continue;
            }
            let (list, none): (&[&BoxMessage], &[&BoxMessage]) = (&[m], &[]);
            let (to, from) = if send { (list, none) } else { (none, list) };
            out.push(boxes_link(layouts, m.peer, to, from));
        }
        fn by_tag(boxes: &[BoxMessage], peer: usize) -> Vec<&BoxMessage> {
            let mut theirs: Vec<&BoxMessage> = boxes.iter().filter(|m| m.peer == peer).collect();
            theirs.sort_by_key(|m| m.tag);
            theirs
        }
        for peer in peers {
            let (to, from) = (by_tag(sends, peer), by_tag(recvs, peer));
            out.push(boxes_link(layouts, peer, &to, &from));
        }
        out
    }
}

/// One link to the rank of every neighbour in `group` (all the same rank),
/// carrying each direction's pieces: sent in the order of the directions,
/// received in the order of their opposites, so that both ends lay the
/// message out alike. `None` when nothing travels.
fn direction_link(layouts: &[FieldLayout], group: &[GridNeighbour]) -> Option<(Link, LinkPieces)> {
    let first = group.first()?;
    let pieces = |offsets: &[&Vec<i32>], send: bool| -> Vec<Piece> {
        offsets
            .iter()
            .flat_map(|o| {
                layouts.iter().enumerate().map(move |(field, f)| Piece {
                    field,
                    region: if send {
                        f.send_region(o)
                    } else {
                        f.recv_region(o)
                    },
                    toward: o.to_vec(),
                })
            })
            .filter(|p| p.region.cells() > 0)
            .collect()
    };
    let mut sends: Vec<&Vec<i32>> = group.iter().map(|n| &n.offset).collect();
    sends.sort();
    let mut recvs = sends.clone();
    recvs.sort_by_key(|o| o.iter().map(|x| -x).collect::<Vec<i32>>());
    let (send, recv) = (pieces(&sends, true), pieces(&recvs, false));
    let (send_tag, recv_tag) = match group {
        [one] => (
            direction_tag(&one.offset),
            direction_tag(&one.offset.iter().map(|o| -o).collect::<Vec<_>>()),
        ),
        _ => (PEER_TAG, PEER_TAG),
    };
    let directions: Vec<String> = sends.iter().map(|o| direction_name(o)).collect();
    let link = Link {
        peer: first.rank,
        send: None,
        recv: None,
        name: format!("rank {} ({})", first.rank, directions.join(" / ")),
        offset: first.offset.clone(),
    };
    carrying(layouts, link, (send, send_tag), (recv, recv_tag))
}

/// One link to `peer` carrying the boxes `sends` and `recvs` (in that
/// order, every field each box carries); a single box keeps its own tag.
/// `None` when nothing travels.
fn boxes_link(
    layouts: &[FieldLayout],
    peer: usize,
    sends: &[&BoxMessage],
    recvs: &[&BoxMessage],
) -> Option<(Link, LinkPieces)> {
    let pieces = |boxes: &[&BoxMessage]| -> Vec<Piece> {
        boxes
            .iter()
            .flat_map(|m| {
                let carried = layouts.iter().enumerate().filter(|(f, _)| m.carries(*f));
                carried.map(|(field, f)| Piece {
                    field,
                    region: f.box_region(&m.lo, &m.size),
                    toward: Vec::new(),
                })
            })
            .filter(|p| p.region.cells() > 0)
            .collect()
    };
    let tag = |boxes: &[&BoxMessage]| match boxes {
        [one] => one.tag,
        _ => PEER_TAG,
    };
    let tags = |boxes: &[&BoxMessage]| -> String {
        let t: Vec<String> = boxes.iter().map(|m| m.tag.to_string()).collect();
        t.join(", ")
    };
    let name = match (sends.is_empty(), recvs.is_empty()) {
        (false, true) => format!("rank {peer} (boxes to it, tags {})", tags(sends)),
        (true, false) => format!("rank {peer} (boxes from it, tags {})", tags(recvs)),
        _ => format!(
            "rank {peer} (boxes to it, tags {}; from it, tags {})",
            tags(sends),
            tags(recvs)
        ),
    };
    let link = Link {
        peer,
        send: None,
        recv: None,
        offset: Vec::new(),
        name,
    };
    carrying(
        layouts,
        link,
        (pieces(sends), tag(sends)),
        (pieces(recvs), tag(recvs)),
    )
}

/// `link` with the messages of its pieces sent and received (each with its
/// tag), and its pieces; `None` when neither carries a byte.
fn carrying(
    layouts: &[FieldLayout],
    mut link: Link,
    (send, send_tag): (Vec<Piece>, u32),
    (recv, recv_tag): (Vec<Piece>, u32),
) -> Option<(Link, LinkPieces)> {
    let message = |p: &[Piece], tag| {
        let len = message_bytes(layouts, p);
        (len > 0).then_some(Message { len, tag })
    };
    link.send = message(&send, send_tag);
    link.recv = message(&recv, recv_tag);
    if link.send.is_none() && link.recv.is_none() {
        return None;
    }
    let pieces = LinkPieces {
        send: link.send.is_some().then_some(send),
        recv: link.recv.is_some().then_some(recv),
    };
    Some((link, pieces))
}

/// The arrays a start packs from and its completion unpacks into, field by
/// field as the pattern numbers them, and which fields it carries.
pub trait FieldArrays {
    /// The fields' layouts.
    fn layout(&self, field: usize) -> &FieldLayout;
    /// Whether this start carries `field`.
    fn started(&self, field: usize) -> bool;
    /// `field`'s array, its bytes from its base (`None`: it has none).
    fn bytes(&self, field: usize) -> Option<&[u8]>;
    /// The same to unpack into, beside its layout.
    fn bytes_mut(&mut self, field: usize) -> Option<(&FieldLayout, &mut [u8])>;
    /// Where `field`'s array lies: its address and length in bytes.
    fn span(&self, field: usize) -> Option<(usize, usize)> {
        self.bytes(field).map(|b| (b.as_ptr() as usize, b.len()))
    }
}

/// The error of a field with no array (its caller checked it had one).
fn no_array(op: &'static str, field: usize) -> HaloError {
    HaloError::Usage {
        op,
        why: format!("field {field} has no array"),
    }
}

/// The messages this rank sends itself that can be copied straight from
/// the cells sent into the halo cells received
/// ([`LinkExchange::copy_directly`]), with the same outcome as through a
/// buffer: each local send whose pieces match its receive's one for one
/// (the same field and size per axis). None at all if a cell such a copy
/// writes is also sent or received by another piece, or a cell it reads
/// is received: through a buffer the sends are read at the start and the
/// receives written in order at the end, which a direct copy at the end
/// matches only when it touches no cell another piece does.
pub fn local_copies(links: &LinkExchange, pieces: &[LinkPieces]) -> Vec<LocalCopy> {
    let pairs: Vec<LocalCopy> = links
        .local_pairs()
        .filter(|c| copies_one_for_one(pieces, *c))
        .collect();
    let sends = || pieces.iter().flat_map(|p| p.send.iter().flatten());
    let recvs = || pieces.iter().flat_map(|p| p.recv.iter().flatten());
    let clash = |a: &Piece, b: &Piece| {
        !std::ptr::eq(a, b) && a.field == b.field && intersect(&a.region, &b.region)
    };
    for c in &pairs {
        // Both are there: `copies_one_for_one` checked.
        let written = pieces[c.recv].recv.iter().flatten();
        let read = pieces[c.send].send.iter().flatten();
        for w in written {
            if sends().chain(recvs()).any(|p| clash(w, p)) {
                return Vec::new();
            }
        }
        for r in read {
            if recvs().any(|p| clash(r, p)) {
                return Vec::new();
            }
        }
    }
    pairs
}

/// Whether local send `c.send`'s pieces are its receive's, one for one.
fn copies_one_for_one(pieces: &[LinkPieces], c: LocalCopy) -> bool {
    let (Some(Some(send)), Some(Some(recv))) = (
        pieces.get(c.send).map(|p| &p.send),
        pieces.get(c.recv).map(|p| &p.recv),
    ) else {
        return false;
    };
    send.len() == recv.len()
        && send
            .iter()
            .zip(recv)
            .all(|(s, r)| s.field == r.field && s.region.size == r.region.size)
}

/// Whether two regions share a cell.
fn intersect(a: &Region, b: &Region) -> bool {
    a.cells() > 0
        && b.cells() > 0
        && a.start
            .iter()
            .zip(&a.size)
            .zip(b.start.iter().zip(&b.size))
            .all(|((&a0, &an), (&b0, &bn))| a0 < b0 + bn && b0 < a0 + an)
}

/// Whether this start's messages to itself are copied directly (as its
/// wait begins, from the same arrays): there are some, and no two started
/// fields' arrays overlap (with arrays that alias, a copy could read or
/// write cells another piece writes).
fn direct_now(links: &mut LinkExchange, pieces: &[LinkPieces], fields: &impl FieldArrays) -> bool {
    // The pieces at a depth are cut from those the pairs were chosen on:
    // still within them, but checked to match again.
    let copies = links.direct_copies();
    if copies.is_empty() || !copies.iter().all(|&c| copies_one_for_one(pieces, c)) {
        return false;
    }
    let started = (0..field_count(pieces)).filter(|&f| fields.started(f));
    links.arrays_apart(started.map(|f| fields.span(f)))
}

/// How many fields the pieces name (one past the highest).
fn field_count(pieces: &[LinkPieces]) -> usize {
    pieces
        .iter()
        .flat_map(|p| p.send.iter().chain(&p.recv).flatten())
        .map(|p| p.field + 1)
        .max()
        .unwrap_or(0)
}

/// Copies every started field's pieces of each message to itself that is
/// copied directly (as the start decided: [`direct_now`]).
fn copy_locals(
    links: &LinkExchange,
    pieces: &[LinkPieces],
    fields: &mut impl FieldArrays,
) -> Result<()> {
    for c in links.direct_copies() {
        let send = pieces.get(c.send).and_then(|p| p.send.as_ref());
        let recv = pieces.get(c.recv).and_then(|p| p.recv.as_ref());
        let (Some(send), Some(recv)) = (send, recv) else {
            continue;
        };
        for (s, r) in send.iter().zip(recv) {
            if !fields.started(s.field) {
                continue;
            }
            let (layout, array) = fields
                .bytes_mut(s.field)
                .ok_or_else(|| no_array("wait", s.field))?;
            layout.copy_region(array, &s.region, &r.region);
        }
    }
    Ok(())
}

/// Tells every link how many bytes of its messages the started fields
/// fill, so that its channel moves those only.
///
/// # Errors
/// As [`LinkExchange::carry_send`] and [`LinkExchange::carry_recv`].
pub fn carry(
    links: &mut LinkExchange,
    pieces: &[LinkPieces],
    fields: &impl FieldArrays,
) -> Result<()> {
    let bytes = |pieces: &[Piece]| -> usize {
        pieces
            .iter()
            .filter(|p| fields.started(p.field))
            .map(|p| p.region.cells() * fields.layout(p.field).ty.size())
            .sum()
    };
    for (i, p) in pieces.iter().enumerate() {
        if let Some(send) = &p.send {
            links.carry_send(i, bytes(send))?;
        }
        if let Some(recv) = &p.recv {
            links.carry_recv(i, bytes(recv))?;
        }
    }
    Ok(())
}

/// Packs every started field's pieces of every message not read in place
/// into its link's send buffer, then starts the exchange.
///
/// # Errors
/// [`HaloError::Usage`] for a started field without an array; otherwise
/// as [`LinkExchange::send_buf`] and [`LinkExchange::start`].
pub fn pack_and_start(
    links: &mut LinkExchange,
    pieces: &[LinkPieces],
    fields: &impl FieldArrays,
) -> Result<()> {
    let began = Instant::now();
    let direct = direct_now(links, pieces, fields);
    links.set_copying_directly(direct);
    for (i, send) in pieces
        .iter()
        .enumerate()
        .filter_map(|(i, p)| Some((i, p.send.as_ref()?)))
    {
        if links.in_place_now(i).send
            || (direct && links.direct_copies().iter().any(|c| c.send == i))
        {
            continue;
        }
        let out = links.send_buf(i)?;
        let mut at = 0;
        for p in send.iter().filter(|p| fields.started(p.field)) {
            let layout = fields.layout(p.field);
            let n = p.region.cells() * layout.ty.size();
            let array = fields
                .bytes(p.field)
                .ok_or_else(|| no_array("start", p.field))?;
            layout.pack(array, &p.region, &mut out[at..at + n]);
            at += n;
        }
    }
    links.add_start_time(began.elapsed());
    links.start()
}

/// Makes the start's copies to this rank itself (see [`local_copies`]),
/// straight from the cells it sends, unless made already for this start:
/// called as a wait begins, they overlap the other messages' travel
/// (the cells they read and write are no other message's).
///
/// # Errors
/// [`HaloError::Usage`] for a started field without an array.
pub fn copy_to_self(
    links: &mut LinkExchange,
    pieces: &[LinkPieces],
    fields: &mut impl FieldArrays,
) -> Result<()> {
    if !links.take_direct_copies() {
        return Ok(());
    }
    let began = Instant::now();
    copy_locals(links, pieces, fields)?;
    links.add_wait_time(began.elapsed());
    Ok(())
}

/// Unpacks every started field's pieces of every message not received in
/// place, once the exchange is complete (and makes the copies to itself,
/// unless [`copy_to_self`] made them); then the receive buffers are
/// released ([`LinkExchange::receives_read`]).
///
/// # Errors
/// [`HaloError::Usage`] for a started field without an array; otherwise
/// as [`LinkExchange::recv_buf`].
pub fn unpack(
    links: &mut LinkExchange,
    pieces: &[LinkPieces],
    fields: &mut impl FieldArrays,
) -> Result<()> {
    copy_to_self(links, pieces, fields)?;
    let began = Instant::now();
    let direct = links.copying_directly();
    for (i, recv) in pieces
        .iter()
        .enumerate()
        .filter_map(|(i, p)| Some((i, p.recv.as_ref()?)))
    {
        if links.in_place_now(i).recv
            || (direct && links.direct_copies().iter().any(|c| c.recv == i))
        {
            continue;
        }
        let data = links.recv_buf(i)?;
        let mut at = 0;
        for p in recv {
            if !fields.started(p.field) {
                continue;
            }
            let (layout, array) = fields
                .bytes_mut(p.field)
                .ok_or_else(|| no_array("wait", p.field))?;
            let n = p.region.cells() * layout.ty.size();
            layout.unpack(&data[at..at + n], &p.region, array);
            at += n;
        }
    }
    // Read: the next iteration's data may land before the next start.
    links.receives_read()?;
    links.add_wait_time(began.elapsed());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field::{ElemType, Order};

    fn grid_at(dims: &[usize]) -> Vec<usize> {
        (0..dims.iter().product()).collect()
    }

    #[test]
    fn neighbours_wrap_on_periodic_axes_only() {
        let at = grid_at(&[3, 2]);
        let grid = ProcessGrid {
            dims: &[3, 2],
            periodic: &[true, false],
            stencil: Stencil::Faces,
            at: &at,
        };
        let n = grid.neighbours(&[0, 0]);
        let offsets: Vec<(Vec<i32>, usize)> = n.into_iter().map(|n| (n.offset, n.rank)).collect();
        // Axis 0 wraps (rank at (2, 0) is 4); axis 1 does not go below 0.
        assert_eq!(
            offsets,
            vec![(vec![-1, 0], 4), (vec![0, 1], 1), (vec![1, 0], 2)]
        );
    }

    #[test]
    fn directions_are_named_by_the_callers_axis_index() {
        assert_eq!(direction_name(&[1, 0]), "axis 0+");
        assert_eq!(direction_name(&[0, -1, 1]), "axis 1-, axis 2+");
        assert_eq!(direction_name(&[0, 0]), "itself");
    }

    /// A C-order 2-D f64 field owned 2 x 3 with halo 1.
    fn layout() -> FieldLayout {
        FieldLayout::with_halo(ElemType::F64, &[2, 3], &[1, 1], Order::C)
    }

    #[test]
    fn grouped_directions_share_one_link_laid_out_alike_at_both_ends() {
        let layouts = [layout(), layout()];
        // A periodic 1 x 2 grid: rank 1 is both axis 1- and axis 1+.
        let n = [
            GridNeighbour {
                offset: vec![0, -1],
                rank: 1,
            },
            GridNeighbour {
                offset: vec![0, 1],
                rank: 1,
            },
        ];
        let apart = PlannedLinks::cartesian(&layouts, &n, &Grouping::by_rank(&[false, false]));
        assert_eq!(apart.links.len(), 2);
        let one = PlannedLinks::cartesian(&layouts, &n, &Grouping::by_rank(&[false, true]));
        assert_eq!(one.links.len(), 1);
        let (link, pieces) = (&one.links[0], &one.pieces[0]);
        assert_eq!(link.send.map(|m| m.tag), Some(PEER_TAG));
        // Two directions x two fields x two cells (a column of 2) x 8 B.
        assert_eq!(link.send.map(|m| m.len), Some(2 * 2 * 2 * 8));
        // Sent: axis 1- then 1+; received: the opposites' order (what the
        // peer sends first, toward 1-, lands in this rank's 1+ halo).
        let send = pieces.send.as_ref().unwrap();
        let recv = pieces.recv.as_ref().unwrap();
        assert_eq!(
            (&send[0].toward, &send[2].toward),
            (&vec![0, -1], &vec![0, 1])
        );
        assert_eq!(
            (&recv[0].toward, &recv[2].toward),
            (&vec![0, 1], &vec![0, -1])
        );
    }

    /// Every direction of a `d`-axis box stencil, each to rank 1.
    fn all_to_rank_1(d: usize) -> Vec<GridNeighbour> {
        crate::decomp::stencil_offsets(d, Stencil::Full)
            .into_iter()
            .filter(|o| o.iter().any(|&x| x != 0))
            .map(|offset| GridNeighbour { offset, rank: 1 })
            .collect()
    }

    #[test]
    fn over_rdma_each_face_travels_alone_and_the_edges_and_corners_together() {
        let layouts = [layout(), layout()];
        let n = all_to_rank_1(2);
        let rdma = PlannedLinks::cartesian(&layouts, &n, &Grouping::by_rank(&[false, false]));
        // 4 faces, and 1 message of the 4 corners.
        assert_eq!(rdma.links.len(), 5);
        let faces: Vec<&Link> = rdma
            .links
            .iter()
            .filter(|l| l.send.unwrap().tag != PEER_TAG)
            .collect();
        assert_eq!(faces.len(), 4);
        let corners = &rdma.links[4];
        assert_eq!(corners.send.map(|m| m.tag), Some(PEER_TAG));
        // Four corners x two fields x one cell x 8 B, each way.
        assert_eq!(corners.send.map(|m| m.len), Some(4 * 2 * 8));
        assert_eq!(corners.recv.map(|m| m.len), Some(4 * 2 * 8));
        let send = rdma.pieces[4].send.as_ref().unwrap();
        let recv = rdma.pieces[4].recv.as_ref().unwrap();
        assert!(send.iter().chain(recv).all(|p| crosses_axes(&p.toward)));
        // The peer's first corner sent (toward -1, -1) lands in this
        // rank's (+1, +1) halo corner: received in the opposites' order.
        assert_eq!(
            (&send[0].toward, &recv[0].toward),
            (&vec![-1, -1], &vec![1, 1])
        );
        // Reached by shared memory or TCP: one message.
        assert_eq!(
            PlannedLinks::cartesian(&layouts, &n, &Grouping::by_rank(&[false, true]))
                .links
                .len(),
            1
        );
        // 3-D: 6 faces, and the 12 edges and 8 corners in one message.
        let cube = FieldLayout::with_halo(ElemType::F64, &[2, 3, 4], &[1, 1, 1], Order::C);
        let rdma = PlannedLinks::cartesian(
            &[cube],
            &all_to_rank_1(3),
            &Grouping::by_rank(&[false, false]),
        );
        assert_eq!(rdma.links.len(), 7);
        let edges_and_corners = rdma.pieces[6].send.as_ref().unwrap();
        assert_eq!(edges_and_corners.len(), 20);
    }

    #[test]
    fn over_rdma_faces_both_ends_pack_join_the_edges_and_corners() {
        let layouts = [layout(), layout()];
        // Two ranks of a periodic 2 x 1 grid reach each other over RDMA,
        // every direction to the other. Rank 0 packs the faces of axis 1
        // (bits 2, 3) and the one below axis 0 (bit 0); rank 1 those of
        // axis 1 only.
        let packed = [0b1101, 0b1100];
        let plan = |me: usize| {
            let mut n = all_to_rank_1(2);
            for x in &mut n {
                x.rank = 1 - me;
            }
            let grouping = Grouping {
                whole: &[false, false],
                my_packed: packed[me],
                packed: &packed,
            };
            PlannedLinks::cartesian(&layouts, &n, &grouping)
        };
        let (zero, one) = (plan(0), plan(1));
        // Axis 0's faces alone (rank 1 packs neither), the rest together.
        for p in [&zero, &one] {
            assert_eq!(p.links.len(), 3);
            let together = p.pieces[2].send.as_ref().unwrap();
            let faces = together.iter().filter(|x| !crosses_axes(&x.toward));
            assert_eq!(faces.count(), 2 * 2, "two faces of two fields");
        }
        // Every message one end sends, the other receives: same tag,
        // length and cells, piece by piece.
        for (from, to) in [(&zero, &one), (&one, &zero)] {
            for (l, pieces) in from.links.iter().zip(&from.pieces) {
                let sent = l.send.unwrap();
                let k = to
                    .links
                    .iter()
                    .position(|m| m.recv.unwrap().tag == sent.tag);
                let k = k.unwrap_or_else(|| panic!("no receive of tag {}", sent.tag));
                assert_eq!(to.links[k].recv.unwrap().len, sent.len);
                let cells = |p: &Option<Vec<Piece>>| -> Vec<usize> {
                    p.iter().flatten().map(|x| x.region.cells()).collect()
                };
                assert_eq!(cells(&pieces.send), cells(&to.pieces[k].recv));
            }
        }
        // Not told the peer's faces: each face alone, as before.
        let grouping = Grouping {
            my_packed: 0b1111,
            ..Grouping::by_rank(&[false, false])
        };
        let alone = PlannedLinks::cartesian(&layouts, &all_to_rank_1(2), &grouping);
        assert_eq!(alone.links.len(), 5);
    }

    /// A C-order f64 field of `own` cells with halo widths 1 below and 2
    /// above on both axes (so that a piece laid out against the wrong
    /// direction has the wrong size).
    fn field_of(own: [usize; 2]) -> FieldLayout {
        FieldLayout::new(ElemType::F64, &[own[0] + 3, own[1] + 3], Order::C)
            .owned(&[1, 1], &own)
            .halo(&[1, 1], &[2, 2])
    }

    /// Every direction between two ranks of a periodic 2 x 2 grid (each is
    /// the other's neighbour along axis 0 both ways, and diagonally) as one
    /// message: what one end sends, piece by piece, is what the other
    /// receives, in the same order and shape.
    #[test]
    fn both_ends_of_a_peer_link_lay_the_message_out_alike() {
        let offsets = |a1: i32| -> Vec<GridNeighbour> {
            [-1, 1]
                .iter()
                .flat_map(|&a0| [0, a1].map(|b| (a0, b)))
                .map(|(a0, b)| GridNeighbour {
                    offset: vec![a0, b],
                    rank: 1,
                })
                .collect()
        };
        // Rank 0 at (0, 0) sees rank 2 at (±1, 0) and (±1, ±1) of one
        // sign along axis 1; the other end sees the opposites.
        let (here, there) = (offsets(1), offsets(-1));
        let specs = [field_of([5, 7]), field_of([5, 7])];
        let (link, sent) = direction_link(&specs, &here).unwrap();
        let (back, received) = direction_link(&specs, &there).unwrap();
        let (sent, received) = (sent.send.unwrap(), received.recv.unwrap());
        assert_eq!(sent.len(), 8, "4 directions, 2 fields");
        let shapes = |pieces: &[Piece]| -> Vec<(usize, Vec<usize>)> {
            pieces
                .iter()
                .map(|p| (p.field, p.region.size.clone()))
                .collect()
        };
        assert_eq!(shapes(&sent), shapes(&received));
        assert_eq!(link.send.unwrap().tag, back.recv.unwrap().tag);
        assert_eq!(link.send.unwrap().len, back.recv.unwrap().len);
        assert!(link.name.contains(" / "), "{}", link.name);
        // A single direction keeps its direction's tags.
        let (one, _) = direction_link(&specs, &here[..1]).unwrap();
        assert_eq!(one.send.unwrap().tag, direction_tag(&here[0].offset));
    }

    #[test]
    fn a_box_of_one_field_carries_that_field_alone() {
        let layouts = [field_of([5, 7]), field_of([6, 7])];
        let boxed = |field| BoxMessage {
            peer: 1,
            tag: 4,
            lo: vec![1, 1],
            size: vec![1, 7],
            field,
        };
        let all = PlannedLinks::boxes(&layouts, &[boxed(None)], &[], &[false, false]);
        let one = PlannedLinks::boxes(&layouts, &[boxed(Some(1))], &[], &[false, false]);
        let fields = |p: &PlannedLinks| -> Vec<usize> {
            p.pieces[0].send.iter().flatten().map(|p| p.field).collect()
        };
        assert_eq!((fields(&all), fields(&one)), (vec![0, 1], vec![1]));
        assert_eq!(one.links[0].send.map(|m| (m.tag, m.len)), Some((4, 7 * 8)));
    }
}
