//! A Cartesian exchange as the C ABI describes it, checked across the whole
//! job: every rank checks every rank's description (gathered at commit), so
//! all of them reach the same verdict and fail alike.

use serde::{Deserialize, Serialize};

use sode::{stencil_offsets, Stencil};

use crate::field::FieldCard;

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
            if self.halo_lo[a] > 1 << 20 || self.halo_hi[a] > 1 << 20 {
                return Err(format!("axis {a}: a halo wider than 2^20 cells"));
            }
        }
        Ok(())
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

/// One neighbour of this rank: where, and who.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    /// Offset in the process grid, each axis -1, 0 or +1.
    pub offset: Vec<i32>,
    /// Its rank.
    pub rank: usize,
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
            let i = position(&c.cart.dims, &c.cart.coords);
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
    fn neighbours(&self, rank: usize) -> Vec<Neighbour> {
        let cart = &self.cards[rank].cart;
        stencil_offsets(cart.dims.len(), cart.shape.stencil())
            .into_iter()
            .filter_map(|offset| {
                let mut c = Vec::with_capacity(offset.len());
                for (a, &o) in offset.iter().enumerate() {
                    let x = cart.coords[a] as i64 + i64::from(o);
                    let g = cart.dims[a] as i64;
                    if (x < 0 || x >= g) && !cart.periodic[a] {
                        return None;
                    }
                    c.push(x.rem_euclid(g) as usize);
                }
                Some(Neighbour {
                    rank: self.at[position(&cart.dims, &c)],
                    offset,
                })
            })
            .collect()
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

fn position(dims: &[usize], coords: &[usize]) -> usize {
    coords.iter().zip(dims).fold(0, |i, (&c, &d)| i * d + c)
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
) -> Result<Vec<Neighbour>, String> {
    if cards.is_empty() || me >= cards.len() {
        return Err(format!("rank {me} in a job of {} ranks", cards.len()));
    }
    let mut job = Job::new(cards)?;
    job.counting = counting;
    job.check_shapes()?;
    Ok(job.neighbours(me))
}

/// A direction as C callers index the process grid: `axis 0+`,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field::ElemType;

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

    #[test]
    fn directions_are_named_by_the_callers_axis_index() {
        assert_eq!(direction_name(&[1, 0]), "axis 0+");
        assert_eq!(direction_name(&[0, -1, 1]), "axis 1-, axis 2+");
        assert_eq!(direction_name(&[0, 0]), "itself");
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

    #[test]
    fn shapes_are_sodes_stencils() {
        assert_eq!(stencil_offsets(3, Shape::Star.stencil()).len(), 6);
        assert_eq!(stencil_offsets(3, Shape::Edges.stencil()).len(), 18);
        assert_eq!(stencil_offsets(3, Shape::Box.stencil()).len(), 26);
    }
}
