//! A Cartesian exchange as the C ABI describes it, checked across the whole
//! job: every rank checks every rank's description (gathered at commit), so
//! all of them reach the same verdict and fail alike.
//!
//! What is gathered is a `Record` of fixed size per rank: its place in the
//! grid and digests of what the ranks must describe alike. Only when the
//! records disagree do the ranks gather their whole descriptions ([`Card`]),
//! to name what differs; a commit that succeeds costs each rank the same
//! bytes per rank of the job for one field or forty.

use serde::{Deserialize, Serialize};

use sode::field::FieldCard;
use sode::pattern::{direction_name, grid_position, GridNeighbour, ProcessGrid, Tile};
use sode::Stencil;

/// Which neighbours the stencil reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Shape {
    /// Across faces only (`SODE_STAR`).
    Star,
    /// Faces and edges, no corners (`SODE_STAR_EDGES`; the same as `Box` in
    /// 2-D).
    Edges,
    /// Faces, edges and corners (`SODE_BOX`).
    Box,
}

impl Shape {
    /// The shape with C code `code`.
    pub fn from_code(code: i32) -> Option<Shape> {
        Some(match code {
            0 => Shape::Star,
            1 => Shape::Edges,
            2 => Shape::Box,
            _ => return None,
        })
    }

    /// sode's name for it.
    pub fn stencil(self) -> Stencil {
        match self {
            Shape::Star => Stencil::Faces,
            Shape::Edges => Stencil::FacesEdges,
            Shape::Box => Stencil::Full,
        }
    }
}

/// This rank's place in a process grid and the exchange's halo widths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cart {
    /// Processes per axis.
    pub dims: Vec<usize>,
    /// This rank's coordinates.
    pub coords: Vec<usize>,
    /// Periodic axes.
    pub periodic: Vec<bool>,
    /// Widest halo below the owned box, per axis.
    pub halo_lo: Vec<usize>,
    /// Widest halo above it.
    pub halo_hi: Vec<usize>,
    /// Which neighbours.
    pub shape: Shape,
}

impl Cart {
    /// Checks the description of one rank.
    pub fn check(&self) -> Result<(), String> {
        let d = self.dims.len();
        if !(1..=3).contains(&d) {
            return Err(format!(
                "{d} axes: sode exchanges 1-D, 2-D and 3-D process grids"
            ));
        }
        for a in 0..d {
            if self.dims[a] == 0 || self.coords[a] >= self.dims[a] {
                return Err(format!(
                    "axis {a}: coordinate {} outside a process grid of {} (dims must be at least 1)",
                    self.coords[a], self.dims[a]
                ));
            }
        }
        check_halo_widths(&self.halo_lo, &self.halo_hi)
    }
}

/// Widest halo a side of an axis may have, in cells.
const MAX_HALO: usize = 1 << 20;

/// Whether every halo width (below and above, per axis) is at most
/// [`MAX_HALO`].
fn check_halo_widths(lo: &[usize], hi: &[usize]) -> Result<(), String> {
    match (0..lo.len().min(hi.len())).find(|&a| lo[a] > MAX_HALO || hi[a] > MAX_HALO) {
        Some(a) => Err(format!("axis {a}: a halo wider than 2^20 cells")),
        None => Ok(()),
    }
}

/// A grid of domains, several a rank (tiles, as tiled models keep them):
/// each domain's rank, this rank's domains (in the order of its fields'
/// last axis), and the halo widths and shape of a Cartesian exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TileGrid {
    /// Domains per axis.
    pub dims: Vec<usize>,
    /// Periodic axes.
    pub periodic: Vec<bool>,
    /// Each domain's rank, axis 0 slowest.
    pub owners: Vec<usize>,
    /// This rank's domains.
    pub tiles: Vec<Tile>,
    /// Widest halo below the owned box, per axis.
    pub halo_lo: Vec<usize>,
    /// Widest halo above it.
    pub halo_hi: Vec<usize>,
    /// Which neighbours.
    pub shape: Shape,
}

impl TileGrid {
    /// The grid as the `sode` crate takes it.
    pub fn grid(&self) -> ProcessGrid<'_> {
        ProcessGrid {
            dims: &self.dims,
            periodic: &self.periodic,
            stencil: self.shape.stencil(),
            at: &self.owners,
        }
    }

    /// Checks the description of rank `me` in a job of `size` ranks.
    pub fn check(&self, me: usize, size: usize) -> Result<(), String> {
        let job = sode::pattern::TileRank {
            rank: me,
            ranks: size,
        };
        sode::pattern::check_tile_grid(&self.grid(), &self.tiles, job)?;
        check_halo_widths(&self.halo_lo, &self.halo_hi)
    }
}

/// What a rank tells the others at commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Card {
    /// Its place and the exchange's widths.
    pub cart: Cart,
    /// Its fields, in the order they were added.
    pub fields: Vec<FieldCard>,
}

/// What a rank tells every other at commit, of a fixed size whatever the
/// exchange (`crate::record`): enough for every rank to find every rank's neighbours and
/// check that the messages' shapes agree at both ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    /// Whether its description passed [`Cart::check`] (the rest means
    /// nothing otherwise).
    valid: bool,
    /// The transport it chose.
    transport: u8,
    /// A digest of what every rank must describe alike: the grid, its
    /// periodicity, halo widths and shape; the fields' types, halo widths,
    /// memory orders, overlaps and numbers of axes.
    common: u64,
    /// Its coordinates (0 beyond the grid's axes).
    coords: [u64; 3],
    /// Per grid axis, a digest of every field's owned cells along it; last,
    /// one of the axes beyond the grid.
    owned: [u64; 4],
    /// Its faces packed at both of its sides
    /// ([`sode::zero_copy::packed_faces`]): a face packed at both ends
    /// joins the one message to its rank over RDMA.
    pub(crate) packed: u64,
}

impl Record {
    /// The record of `card`, with `transport` and its faces `packed`.
    pub(crate) fn of(card: &Card, transport: u8, packed: u64) -> Record {
        let cart = &card.cart;
        let valid = cart.check().is_ok();
        let mut r = Record {
            valid,
            transport,
            common: 0,
            coords: [0; 3],
            owned: [0; 4],
            packed,
        };
        if !valid {
            return r;
        }
        let d = cart.dims.len();
        let layout = (
            &cart.dims,
            &cart.periodic,
            &cart.halo_lo,
            &cart.halo_hi,
            cart.shape,
        );
        r.common = crate::record::common_digest(layout, &card.fields);
        for a in 0..d {
            r.coords[a] = cart.coords[a] as u64;
            r.owned[a] = crate::record::digest(
                card.fields
                    .iter()
                    .flat_map(|f| crate::record::word(f.owned_size.get(a))),
            );
        }
        r.owned[3] = crate::record::digest(card.fields.iter().flat_map(|f| {
            let beyond = f.owned_size.get(d..).unwrap_or_default();
            crate::record::word(Some(&beyond.len()))
                .into_iter()
                .chain(beyond.iter().flat_map(|x| crate::record::word(Some(x))))
        }));
        r
    }

    /// How many words its record holds.
    pub(crate) const WORDS: usize = 9;

    /// Its bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut words = vec![self.common];
        words.extend(self.coords);
        words.extend(self.owned);
        words.push(self.packed);
        crate::record::encode(self.valid, self.transport, &words)
    }

    /// The record `bytes` encode; `None` for bytes no [`Record::encode`]
    /// made.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Record> {
        let (valid, transport, w) = crate::record::decode::<{ Record::WORDS }>(bytes)?;
        Some(Record {
            valid,
            transport,
            common: w[0],
            coords: [w[1], w[2], w[3]],
            owned: [w[4], w[5], w[6], w[7]],
            packed: w[8],
        })
    }
}

/// How many lanes [`opening_lanes`] gives.
pub(crate) const OPENING_LANES: usize = 9;

/// What every rank gives the reduction that opens a commit
/// ([`sode_job::World::reduce`]): whether its description is valid, its
/// transport, its digest of what every rank describes alike, whether it
/// sits where its rank falls in the grid's order (axis 0 slowest), its
/// digests of owned cells and its faces packed at both sides. When all
/// agree on the first three and every rank sits in order, each finds its
/// neighbours alone ([`neighbours_in_order`]); when every rank owns as
/// many cells and packs the same faces, the messages' shapes agree at
/// both ends of every link, and nothing more travels ([`Opening`]).
pub(crate) fn opening_lanes(record: &Record, cart: &Cart, me: usize, ranks: usize) -> Vec<u64> {
    let cells = cart.dims.iter().try_fold(1usize, |n, &g| n.checked_mul(g));
    let in_order =
        record.valid && cells == Some(ranks) && grid_position(&cart.dims, &cart.coords) == me;
    let mut lanes = vec![
        u64::from(record.valid),
        u64::from(record.transport),
        record.common,
        u64::from(in_order),
    ];
    lanes.extend(record.owned);
    lanes.push(record.packed);
    lanes
}

/// What the reduction of [`opening_lanes`] says of the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opening {
    /// The ranks must gather their records: they sit in another order,
    /// or something differs (the records gathered name what).
    Gather,
    /// Each rank finds its neighbours alone, and trades records with them
    /// to check that their faces agree.
    Trade,
    /// Each rank finds its neighbours alone, and every rank owns as many
    /// cells and packs these faces at both sides: nothing more travels.
    Uniform { packed: u64 },
}

impl Opening {
    /// What `spreads`, the reduction of [`opening_lanes`], say.
    pub(crate) fn of(spreads: &[sode_job::Spread]) -> Opening {
        let in_order = matches!(spreads, [valid, transport, common, in_order, ..]
            if valid.least == 1 && transport.agreed() && common.agreed() && in_order.least == 1);
        match spreads.get(4..) {
            _ if !in_order => Opening::Gather,
            Some(rest @ [.., packed]) if rest.iter().all(sode_job::Spread::agreed) => {
                Opening::Uniform {
                    packed: packed.least,
                }
            }
            _ => Opening::Trade,
        }
    }
}

/// `me`'s neighbours in a grid every rank sits in by its rank's order
/// ([`Opening`]).
pub(crate) fn neighbours_in_order(me: usize, mine: &Cart) -> Vec<GridNeighbour> {
    let at: Vec<usize> = (0..mine.dims.iter().product()).collect();
    let grid = ProcessGrid {
        dims: &mine.dims,
        periodic: &mine.periodic,
        stencil: mine.shape.stencil(),
        at: &at,
    };
    debug_assert_eq!(grid_position(&mine.dims, &mine.coords), me);
    grid.neighbours(&mine.coords)
}

/// Whether every message between `mine` and its neighbours has the same
/// shape at both ends: `theirs` holds each neighbour's record (this rank's
/// own where it neighbours itself).
pub(crate) fn faces_agree(
    mine: &Record,
    neighbours: &[GridNeighbour],
    theirs: impl Fn(usize) -> Option<Record>,
) -> bool {
    neighbours.iter().all(|n| {
        let Some(t) = theirs(n.rank) else {
            return false;
        };
        let mut along = n.offset.iter().enumerate().filter(|(_, &o)| o == 0);
        t.valid
            && t.common == mine.common
            && !along.any(|(a, _)| t.owned[a] != mine.owned[a])
            && t.owned[3] == mine.owned[3]
    })
}

/// `me`'s neighbours when every rank's record (`records`, by rank) agrees
/// with `mine`'s grid: the same description and transport, each position
/// of the grid taken once, and every message's shape the same at both
/// ends. `None` otherwise: the ranks then compare their whole cards
/// ([`neighbours_of`]), which names what differs. Every rank answers alike
/// from the same records.
pub(crate) fn neighbours_by_records(
    me: usize,
    records: &[Record],
    mine: &Cart,
) -> Option<Vec<GridNeighbour>> {
    let first = records.first()?;
    let agree = |r: &Record| r.valid && r.transport == first.transport && r.common == first.common;
    if !records.iter().all(agree) || me >= records.len() {
        return None;
    }
    let d = mine.dims.len();
    let cells = mine
        .dims
        .iter()
        .try_fold(1usize, |n, &g| n.checked_mul(g))?;
    if cells != records.len() {
        return None;
    }
    let coords = |r: &Record| -> Vec<usize> { r.coords[..d].iter().map(|&c| c as usize).collect() };
    let mut at = vec![usize::MAX; cells];
    for (rank, r) in records.iter().enumerate() {
        let c = coords(r);
        if c.iter().zip(&mine.dims).any(|(&x, &g)| x >= g) {
            return None;
        }
        let i = grid_position(&mine.dims, &c);
        if at[i] != usize::MAX {
            return None;
        }
        at[i] = rank;
    }
    let grid = ProcessGrid {
        dims: &mine.dims,
        periodic: &mine.periodic,
        stencil: mine.shape.stencil(),
        at: &at,
    };
    for (rank, r) in records.iter().enumerate() {
        if !faces_agree(r, &grid.neighbours(&coords(r)), |q| records.get(q).copied()) {
            return None;
        }
        if rank == me && coords(r) != mine.coords {
            return None;
        }
    }
    Some(grid.neighbours(&mine.coords))
}

/// The job as every rank described it: checked for agreement.
struct Job<'a> {
    cards: &'a [Card],
    /// How the caller counts fields and axes in messages.
    counting: Counting,
    /// Rank at each grid position (axis 0 slowest).
    at: Vec<usize>,
}

impl<'a> Job<'a> {
    fn new(cards: &'a [Card]) -> Result<Job<'a>, String> {
        let first = &cards[0];
        for (r, c) in cards.iter().enumerate() {
            c.cart
                .check()
                .map_err(|e| format!("rank {r}'s exchange: {e}"))?;
            let same = c.cart.dims == first.cart.dims
                && c.cart.periodic == first.cart.periodic
                && c.cart.halo_lo == first.cart.halo_lo
                && c.cart.halo_hi == first.cart.halo_hi
                && c.cart.shape == first.cart.shape;
            if !same {
                return Err(format!(
                    "ranks 0 and {r} describe different exchanges: rank 0 a {:?} grid, periodic {:?}, halo {:?}/{:?}, {:?}; rank {r} a {:?} grid, periodic {:?}, halo {:?}/{:?}, {:?}",
                    first.cart.dims, first.cart.periodic, first.cart.halo_lo, first.cart.halo_hi, first.cart.shape,
                    c.cart.dims, c.cart.periodic, c.cart.halo_lo, c.cart.halo_hi, c.cart.shape
                ));
            }
            check_same_fields(&first.fields, &c.fields, r)?;
        }
        let cells: usize = first.cart.dims.iter().product();
        if cells != cards.len() {
            return Err(format!(
                "the process grid {:?} has {cells} positions, the job {} ranks",
                first.cart.dims,
                cards.len()
            ));
        }
        let mut at = vec![usize::MAX; cells];
        for (r, c) in cards.iter().enumerate() {
            let i = grid_position(&c.cart.dims, &c.cart.coords);
            if at[i] != usize::MAX {
                return Err(format!(
                    "ranks {} and {r} both claim coordinates {:?}",
                    at[i], c.cart.coords
                ));
            }
            at[i] = r;
        }
        Ok(Job {
            cards,
            at,
            counting: Counting::C,
        })
    }

    /// The neighbours of `rank`, in offset order; none across the edges of
    /// non-periodic axes.
    fn neighbours(&self, rank: usize) -> Vec<GridNeighbour> {
        let cart = &self.cards[rank].cart;
        ProcessGrid {
            dims: &cart.dims,
            periodic: &cart.periodic,
            stencil: cart.shape.stencil(),
            at: &self.at,
        }
        .neighbours(&cart.coords)
    }

    /// Checks that each message's shape is the same at both ends: along the
    /// axes a message runs parallel to, sender and receiver own as many
    /// cells.
    fn check_shapes(&self) -> Result<(), String> {
        for (r, card) in self.cards.iter().enumerate() {
            for n in self.neighbours(r) {
                let theirs = &self.cards[n.rank];
                for (f, (mine, other)) in card.fields.iter().zip(&theirs.fields).enumerate() {
                    for (a, &o) in n.offset.iter().enumerate() {
                        if o == 0 && mine.owned_size[a] != other.owned_size[a] {
                            return Err(format!(
                                "{}: rank {r} owns {} cells along {} and its neighbour rank {} ({}) owns {}: neighbours across an axis must own as many cells along the other axes",
                                self.counting.field(f), mine.owned_size[a], self.counting.axis(a), n.rank, direction_name(&n.offset), other.owned_size[a]
                            ));
                        }
                    }
                    // The lengths agree: checked with the field lists.
                    let d = n.offset.len();
                    if mine.owned_size[d..] != other.owned_size[d..] {
                        return Err(format!(
                            "{}: ranks {r} and {} have different extents along the axes beyond the process grid ({:?} vs {:?})",
                            self.counting.field(f), n.rank, &mine.owned_size[d..], &other.owned_size[d..]
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Whether rank `r`'s fields are rank 0's: count, types, halo widths,
/// memory order and axes.
pub fn check_same_fields(
    first: &[FieldCard],
    theirs: &[FieldCard],
    r: usize,
) -> Result<(), String> {
    let agree = |a: &FieldCard, b: &FieldCard| {
        a.ty == b.ty
            && a.halo_lo == b.halo_lo
            && a.halo_hi == b.halo_hi
            && a.order == b.order
            && a.overlap == b.overlap
            && a.owned_size.len() == b.owned_size.len()
    };
    let same = theirs.len() == first.len() && theirs.iter().zip(first).all(|(a, b)| agree(a, b));
    if same {
        return Ok(());
    }
    let list = |fields: &[FieldCard]| {
        fields
            .iter()
            .map(FieldCard::describe)
            .collect::<Vec<_>>()
            .join("; ")
    };
    Err(format!(
        "ranks 0 and {r} added different fields (every rank must add the same fields, in the same order, with the same type, halo widths, overlap and memory order): rank 0 [{}], rank {r} [{}]",
        list(first),
        list(theirs)
    ))
}

/// How a caller counts fields and axes, as its messages name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Counting {
    /// Fields and axes from 0 (C and Rust).
    #[default]
    C,
    /// Fields and dimensions from 1 (the Fortran module).
    Fortran,
}

impl Counting {
    /// `field 0` (C) or `field 1` (Fortran) for field index `f`.
    pub fn field(self, f: usize) -> String {
        match self {
            Counting::C => format!("field {f}"),
            Counting::Fortran => format!("field {}", f + 1),
        }
    }

    /// `set 0` (C) or `set 1` (Fortran) for set index `s`.
    pub fn set(self, s: usize) -> String {
        format!("set {}", s + self.first())
    }

    /// The number of the first field, set or dimension: 0 (C) or 1
    /// (Fortran).
    pub fn first(self) -> usize {
        match self {
            Counting::C => 0,
            Counting::Fortran => 1,
        }
    }

    /// `axis 0` (C) or `dimension 1` (Fortran) for axis index `a`.
    pub fn axis(self, a: usize) -> String {
        match self {
            Counting::C => format!("axis {a}"),
            Counting::Fortran => format!("dimension {}", a + 1),
        }
    }
}

/// Checks every rank's card and returns `me`'s neighbours, the messages
/// counting as `counting` says. Every rank reaches the same verdict from
/// the same cards.
pub fn neighbours_of(
    me: usize,
    cards: &[Card],
    counting: Counting,
) -> Result<Vec<GridNeighbour>, String> {
    if cards.is_empty() || me >= cards.len() {
        return Err(format!("rank {me} in a job of {} ranks", cards.len()));
    }
    let mut job = Job::new(cards)?;
    job.counting = counting;
    job.check_shapes()?;
    Ok(job.neighbours(me))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sode::field::ElemType;

    fn card(dims: &[usize], coords: &[usize], periodic: &[bool], owned: &[usize]) -> Card {
        let d = dims.len();
        Card {
            cart: Cart {
                dims: dims.to_vec(),
                coords: coords.to_vec(),
                periodic: periodic.to_vec(),
                halo_lo: vec![1; d],
                halo_hi: vec![1; d],
                shape: Shape::Box,
            },
            fields: vec![FieldCard {
                ty: ElemType::F64,
                owned_size: owned.to_vec(),
                halo_lo: vec![1; d],
                halo_hi: vec![1; d],
                order: (0..d).rev().collect(),
                overlap: Default::default(),
            }],
        }
    }

    /// The opening reduction of `cards` (rank by rank), as every rank
    /// reads it.
    fn opening(cards: &[Card]) -> Opening {
        let lanes: Vec<Vec<u64>> = cards
            .iter()
            .enumerate()
            .map(|(r, c)| opening_lanes(&Record::of(c, 1, 0), &c.cart, r, cards.len()))
            .collect();
        assert!(lanes.iter().all(|l| l.len() == OPENING_LANES));
        let spreads: Vec<sode_job::Spread> = (0..lanes[0].len())
            .map(|i| sode_job::Spread {
                least: lanes.iter().map(|l| l[i]).min().unwrap(),
                most: lanes.iter().map(|l| l[i]).max().unwrap(),
            })
            .collect();
        Opening::of(&spreads)
    }

    #[test]
    fn the_opening_reduction_says_when_ranks_find_their_neighbours_alone() {
        let grid = |owned: &dyn Fn(usize) -> usize, coords: &dyn Fn(usize) -> [usize; 2]| {
            (0..6)
                .map(|r| card(&[2, 3], &coords(r), &[true, true], &[owned(r), 4]))
                .collect::<Vec<_>>()
        };
        let in_order = |r: usize| [r / 3, r % 3];
        // Every rank owns as many cells: nothing more travels.
        let same = grid(&|_| 4, &in_order);
        assert_eq!(opening(&same), Opening::Uniform { packed: 0 });
        // Rows of unlike blocks: neighbours trade their records.
        assert_eq!(opening(&grid(&|r| 4 + r / 3, &in_order)), Opening::Trade);
        // Ranks placed in another order (column-major), or one that
        // describes another grid: every rank's record is gathered.
        let by_columns = |r: usize| [r % 2, r / 2];
        assert_eq!(opening(&grid(&|_| 4, &by_columns)), Opening::Gather);
        let mut other = same.clone();
        other[4].cart.periodic = vec![false, true];
        assert_eq!(opening(&other), Opening::Gather);
        // Ranks are found alone, and the neighbours are the grid's.
        let n = neighbours_in_order(4, &same[4].cart);
        assert!(n.iter().all(|n| n.rank < 6) && n.len() == 8, "{n:?}");
        let left = n.iter().find(|n| n.offset == [0, -1]).unwrap();
        assert_eq!(left.rank, 3);
    }

    #[test]
    fn neighbours_wrap_on_periodic_axes_only() {
        // A 1 x 2 grid, periodic along axis 1 only.
        let cards = [
            card(&[1, 2], &[0, 0], &[false, true], &[4, 4]),
            card(&[1, 2], &[0, 1], &[false, true], &[4, 4]),
        ];
        let n = neighbours_of(0, &cards, Counting::C).unwrap();
        let got: Vec<(Vec<i32>, usize)> = n.into_iter().map(|n| (n.offset, n.rank)).collect();
        assert_eq!(got, vec![(vec![0, -1], 1), (vec![0, 1], 1)]);
    }

    #[test]
    fn disagreements_fail_on_every_rank_alike() {
        let good = || {
            vec![
                card(&[2, 1], &[0, 0], &[false, false], &[4, 5]),
                card(&[2, 1], &[1, 0], &[false, false], &[3, 5]),
            ]
        };
        assert!(neighbours_of(0, &good(), Counting::C).is_ok());
        let mut cards = good();
        cards[1].fields[0].ty = ElemType::F32;
        let e0 = neighbours_of(0, &cards, Counting::C).unwrap_err();
        assert_eq!(e0, neighbours_of(1, &cards, Counting::C).unwrap_err());
        assert!(e0.contains("different fields"), "{e0}");
        let mut cards = good();
        cards[1].cart.coords = vec![0, 0];
        assert!(neighbours_of(0, &cards, Counting::C)
            .unwrap_err()
            .contains("both claim"));
        let mut cards = good();
        cards[1].fields[0].owned_size = vec![3, 6];
        let e = neighbours_of(1, &cards, Counting::C).unwrap_err();
        assert!(
            e.starts_with("field 0: ") && e.contains("along axis 1"),
            "{e}"
        );
        // The Fortran module's callers count from 1.
        let e = neighbours_of(1, &cards, Counting::Fortran).unwrap_err();
        assert!(
            e.starts_with("field 1: ") && e.contains("along dimension 2"),
            "{e}"
        );
        let mut cards = good();
        cards[0].cart.periodic = vec![true, false];
        assert!(neighbours_of(1, &cards, Counting::C)
            .unwrap_err()
            .contains("different exchanges"));
        let cards = vec![card(&[2, 2], &[0, 0], &[false, false], &[4, 4])];
        assert!(neighbours_of(0, &cards, Counting::C)
            .unwrap_err()
            .contains("4 positions, the job 1"));
    }

    /// What the records say for each rank: the same neighbours as the
    /// whole cards when they agree, `None` when the cards find fault.
    fn records_match_cards(cards: &[Card]) {
        let records: Vec<Record> = cards
            .iter()
            .map(|c| Record::decode(&Record::of(c, 0, 0).encode()).unwrap())
            .collect();
        for me in 0..cards.len() {
            let by_records = neighbours_by_records(me, &records, &cards[me].cart);
            match neighbours_of(me, cards, Counting::C) {
                Ok(n) => assert_eq!(by_records, Some(n), "rank {me} of {cards:?}"),
                Err(e) => assert_eq!(by_records, None, "rank {me}: the cards say {e}"),
            }
        }
    }

    /// Every rank of a `dims` grid (rank order row-major), each owning
    /// `owned` (or `odd` at rank `odd_rank`).
    fn grid(
        dims: &[usize],
        periodic: &[bool],
        owned: &[usize],
        odd: Option<(usize, Vec<usize>)>,
    ) -> Vec<Card> {
        let n: usize = dims.iter().product();
        (0..n)
            .map(|r| {
                let mut coords = vec![0; dims.len()];
                let mut rest = r;
                for a in (0..dims.len()).rev() {
                    coords[a] = rest % dims[a];
                    rest /= dims[a];
                }
                let own = match &odd {
                    Some((at, o)) if *at == r => o.clone(),
                    _ => owned.to_vec(),
                };
                card(dims, &coords, periodic, &own)
            })
            .collect()
    }

    #[test]
    fn records_find_the_neighbours_the_whole_cards_find_and_every_fault() {
        for shape in [Shape::Star, Shape::Edges, Shape::Box] {
            for (dims, periodic) in [
                (vec![5], vec![true]),
                (vec![4], vec![false]),
                (vec![3, 2], vec![true, false]),
                (vec![2, 2], vec![true, true]),
                (vec![1, 3], vec![false, true]),
                (vec![2, 3, 2], vec![true, false, true]),
                (vec![3, 1, 2], vec![false, false, false]),
            ] {
                let d = dims.len();
                let mut cards = grid(&dims, &periodic, &vec![4; d], None);
                for c in &mut cards {
                    c.cart.shape = shape;
                }
                records_match_cards(&cards);
                // One rank owning another extent along each axis in turn.
                for a in 0..d {
                    let mut odd = vec![4; d];
                    odd[a] = 3;
                    let last = cards.len() - 1;
                    let mut bad = grid(&dims, &periodic, &vec![4; d], Some((last, odd)));
                    for c in &mut bad {
                        c.cart.shape = shape;
                    }
                    records_match_cards(&bad);
                }
            }
        }
        let good = || grid(&[2, 2], &[true, false], &[4, 4], None);
        let mut faults: Vec<Vec<Card>> = Vec::new();
        let mut c = good();
        c[1].fields[0].ty = ElemType::F32;
        faults.push(c);
        let mut c = good();
        c[2].cart.coords = vec![0, 0];
        faults.push(c);
        let mut c = good();
        c[3].cart.periodic = vec![true, true];
        faults.push(c);
        let mut c = good();
        c[0].cart.coords = vec![2, 0];
        faults.push(c);
        let mut c = good();
        c[1].fields[0].owned_size = vec![4, 4, 2];
        faults.push(c);
        let mut c = good();
        let again = c[2].fields[0].clone();
        c[2].fields.push(again);
        faults.push(c);
        faults.push(good()[..3].to_vec());
        for cards in &faults {
            assert!(neighbours_of(0, cards, Counting::C).is_err(), "{cards:?}");
            records_match_cards(cards);
        }
        // Axes beyond the grid: the same on every rank, or a fault.
        let mut c = good();
        for card in &mut c {
            card.fields[0].owned_size = vec![4, 4, 7];
            card.fields[0].halo_lo.push(0);
            card.fields[0].halo_hi.push(0);
            card.fields[0].order = vec![2, 1, 0];
        }
        records_match_cards(&c);
        assert!(neighbours_of(0, &c, Counting::C).is_ok());
        c[3].fields[0].owned_size[2] = 6;
        assert!(neighbours_of(0, &c, Counting::C).is_err());
        records_match_cards(&c);
    }

    #[test]
    fn shapes_are_sodes_stencils() {
        assert_eq!(sode::stencil_offsets(3, Shape::Star.stencil()).len(), 6);
        assert_eq!(sode::stencil_offsets(3, Shape::Edges.stencil()).len(), 18);
        assert_eq!(sode::stencil_offsets(3, Shape::Box.stencil()).len(), 26);
    }
}
