//! Pattern generators: the paper's SCALE-LES3 benchmark, generic 2-D/3-D
//! halos, and random patterns for tests and benchmarks.

use crate::error::{Result, SchedError};
use crate::machine::Machine;
use crate::pattern::{Pattern, Request};
use std::str::FromStr;

/// The direction sets of the RSched paper's evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectionSet {
    /// East and west: 2 puts.
    Ew,
    /// North and south: 4 puts.
    Ns,
    /// E, W, N, S: 6 puts.
    Ewns,
    /// The four diagonals: 8 puts.
    Diag,
    /// All eight directions: 14 puts.
    All8,
}

impl DirectionSet {
    /// Every set, in the paper's order.
    pub const ALL: [DirectionSet; 5] = [Self::Ew, Self::Ns, Self::Ewns, Self::Diag, Self::All8];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ew => "ew",
            Self::Ns => "ns",
            Self::Ewns => "ewns",
            Self::Diag => "diag",
            Self::All8 => "all8",
        }
    }
}

impl FromStr for DirectionSet {
    type Err = SchedError;
    fn from_str(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|d| d.name() == s.to_ascii_lowercase())
            .ok_or_else(|| SchedError::InvalidPatternParameter {
                field: "directions",
                reason: format!("`{s}` is not one of ew, ns, ewns, diag, all8"),
            })
    }
}

/// The vertical sizes k of the paper's Table 1.
pub const SCALE_LES3_K: [u64; 11] = [60, 70, 80, 109, 218, 327, 436, 545, 654, 763, 872];

/// SCALE-LES3 halo put sizes for vertical size k (16 x 16 horizontal, halo 2,
/// 8-byte values), exactly as the paper's Table 1: (E/W, N/S, diagonal).
pub fn scale_les3_bytes(k: u64) -> (u64, u64, u64) {
    let (i, j, halo, value) = (16, 16, 2, 8);
    let column = halo + k + halo;
    (
        column * halo * i * value,
        column * j * value,
        column * halo * value,
    )
}

/// The SCALE-LES3 pattern of the paper for vertical size `k`.
///
/// Ranks form the paper's 2-D periodic grid of 48 processes (8 x 6); this
/// rank sits at (1, 1). On Tofu each of the eight neighbours is one hop away
/// on a link of its own, so every put occupies the link named after its
/// direction. Input order: diagonals first, then E, W, N, S (the order that
/// makes RoundRobin put same-direction puts on different engines at once, as
/// the paper chose it); N/S and diagonals send two puts each (one per halo row).
///
/// # Errors
///
/// [`SchedError::InvalidPatternParameter`] for `k` of 0 or too large; the
/// errors of [`Pattern::validate`](crate::Pattern::validate) for `machine`.
pub fn scale_les3(k: u64, set: DirectionSet, machine: Machine) -> Result<Pattern> {
    if k == 0 {
        return Err(SchedError::InvalidPatternParameter {
            field: "k",
            reason: "the vertical size must be at least 1".into(),
        });
    }
    // 512 bytes per vertical level at most (E/W): beyond what a put carries,
    // the products would overflow.
    if k > crate::pattern::MAX_PUT_BYTES / 512 {
        return Err(SchedError::InvalidPatternParameter {
            field: "k",
            reason: format!("a vertical size of {k} makes puts larger than a put carries (1 TiB)"),
        });
    }
    let (ew, ns, diag) = scale_les3_bytes(k);
    let (px, py, me) = (8i64, 6i64, (1i64, 1i64));
    let rank = |dx: i64, dy: i64| -> u32 {
        let x = (me.0 + dx).rem_euclid(px);
        let y = (me.1 + dy).rem_euclid(py);
        (x + px * y) as u32
    };
    let mut puts: Vec<(&str, (i64, i64), u64, usize)> = Vec::new();
    let with_diag = matches!(set, DirectionSet::Diag | DirectionSet::All8);
    let with_ew = matches!(
        set,
        DirectionSet::Ew | DirectionSet::Ewns | DirectionSet::All8
    );
    let with_ns = matches!(
        set,
        DirectionSet::Ns | DirectionSet::Ewns | DirectionSet::All8
    );
    if with_diag {
        for (d, off) in [
            ("NE", (1, 1)),
            ("NW", (-1, 1)),
            ("SE", (1, -1)),
            ("SW", (-1, -1)),
        ] {
            puts.push((d, off, diag, 2));
        }
    }
    if with_ew {
        puts.push(("E", (1, 0), ew, 1));
        puts.push(("W", (-1, 0), ew, 1));
    }
    if with_ns {
        puts.push(("N", (0, 1), ns, 2));
        puts.push(("S", (0, -1), ns, 2));
    }
    let mut requests = Vec::new();
    for (direction, (dx, dy), bytes, count) in puts {
        for _ in 0..count {
            requests.push(Request {
                id: requests.len() as u32,
                dest: rank(dx, dy),
                direction: direction.to_string(),
                links: vec![direction.to_string()],
                bytes,
            });
        }
    }
    let pattern = Pattern { machine, requests };
    pattern.validate()?;
    Ok(pattern)
}

/// Shape of a generic Cartesian halo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaloShape {
    /// Interior points per axis (2 or 3 axes).
    pub size: Vec<u64>,
    /// Halo width in points.
    pub halo: u64,
    /// Bytes per point (element size times fields).
    pub element_bytes: u64,
    /// 4 or 8 in 2-D; 6, 18 or 26 in 3-D.
    pub neighbours: usize,
}

fn axis_name(axis: usize) -> char {
    ['x', 'y', 'z'][axis]
}

/// A 2-D or 3-D halo exchange: one put per neighbour, sized from the
/// subdomain, halo width and element size. Puts are routed in dimension
/// order, so a diagonal put occupies one link per axis it crosses (`x+`,
/// `y-`, ...): by symmetry every node forwards its neighbours' diagonal puts
/// on those links.
///
/// # Errors
///
/// [`SchedError::InvalidPatternParameter`] for a shape of neither 2 nor 3
/// axes, an unknown neighbour count, or a zero size, halo or element size;
/// the errors of
/// [`Pattern::validate`](crate::Pattern::validate) for `machine`.
pub fn halo(shape: &HaloShape, machine: Machine) -> Result<Pattern> {
    let dims = shape.size.len();
    let allowed: &[usize] = match dims {
        2 => &[4, 8],
        3 => &[6, 18, 26],
        _ => {
            return Err(SchedError::InvalidPatternParameter {
                field: "size",
                reason: format!("{dims} axes given: a halo pattern has 2 or 3"),
            })
        }
    };
    if !allowed.contains(&shape.neighbours) {
        return Err(SchedError::InvalidPatternParameter {
            field: "neighbours",
            reason: format!(
                "{} neighbours in {dims}-D: use one of {allowed:?}",
                shape.neighbours
            ),
        });
    }
    if shape.size.contains(&0) || shape.halo == 0 || shape.element_bytes == 0 {
        return Err(SchedError::InvalidPatternParameter {
            field: "size",
            reason: "subdomain sizes, halo width and element size must all be at least 1".into(),
        });
    }
    // Neighbours with at most `max_axes` non-zero offsets: faces (1), edges (2), corners (3).
    let max_axes = match shape.neighbours {
        4 | 6 => 1,
        8 | 18 => 2,
        _ => 3,
    };
    let mut offsets: Vec<Vec<i8>> = Vec::new();
    let mut current = vec![-1i8; dims];
    loop {
        let nonzero = current.iter().filter(|&&o| o != 0).count();
        if nonzero >= 1 && nonzero <= max_axes {
            offsets.push(current.clone());
        }
        let mut axis = 0;
        loop {
            if axis == dims {
                break;
            }
            if current[axis] < 1 {
                current[axis] += 1;
                break;
            }
            current[axis] = -1;
            axis += 1;
        }
        if axis == dims {
            break;
        }
    }
    // Faces first, then edges, then corners, as a halo code usually lists them.
    offsets.sort_by_key(|o| o.iter().filter(|&&v| v != 0).count());
    let mut requests = Vec::new();
    for (index, offset) in offsets.iter().enumerate() {
        let mut points: Option<u64> = Some(1);
        let mut direction = String::new();
        let mut links = Vec::new();
        for (axis, &o) in offset.iter().enumerate() {
            if o == 0 {
                points = points.and_then(|p| p.checked_mul(shape.size[axis]));
            } else {
                points = points.and_then(|p| p.checked_mul(shape.halo));
                let name = format!("{}{}", axis_name(axis), if o > 0 { '+' } else { '-' });
                direction.push_str(&name);
                links.push(name);
            }
        }
        let bytes = points
            .and_then(|p| p.checked_mul(shape.element_bytes))
            .ok_or_else(|| SchedError::InvalidPatternParameter {
                field: "size",
                reason: format!(
                    "the {direction} put of {:?} points of {} bytes overflows 64 bits",
                    shape.size, shape.element_bytes
                ),
            })?;
        requests.push(Request {
            id: index as u32,
            dest: index as u32 + 1,
            direction,
            links,
            bytes,
        });
    }
    let pattern = Pattern { machine, requests };
    pattern.validate()?;
    Ok(pattern)
}

/// A small deterministic generator (splitmix64), so that patterns are a pure
/// function of their seed.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// A random 2-D pattern of `n` puts over the eight compass directions, with
/// sizes spread log-uniformly from 64 B to 1 MiB; diagonal puts occupy their
/// own link, as on Tofu.
///
/// # Errors
///
/// [`SchedError::EmptyPattern`] for `n` of 0;
/// [`SchedError::InvalidPatternParameter`] for more puts than a pattern
/// may hold; the errors of [`Pattern::validate`](crate::Pattern::validate) for `machine`.
pub fn random(n: usize, seed: u64, machine: Machine) -> Result<Pattern> {
    if n == 0 {
        return Err(SchedError::EmptyPattern);
    }
    // Checked before anything is allocated for the puts.
    if n > crate::pattern::MAX_REQUESTS {
        return Err(SchedError::InvalidPatternParameter {
            field: "n",
            reason: format!(
                "{n} puts in one exchange; the scheduler takes at most {}",
                crate::pattern::MAX_REQUESTS
            ),
        });
    }
    const DIRS: [&str; 8] = ["E", "W", "N", "S", "NE", "NW", "SE", "SW"];
    let mut rng = SplitMix64::new(seed);
    let requests = (0..n)
        .map(|i| {
            let d = DIRS[rng.below(8) as usize];
            let exponent = 6 + rng.below(15);
            let bytes = (1u64 << exponent) + rng.below(1 << exponent);
            Request {
                id: i as u32,
                dest: 1 + DIRS.iter().position(|x| *x == d).unwrap_or(0) as u32,
                direction: d.to_string(),
                links: vec![d.to_string()],
                bytes,
            }
        })
        .collect();
    let pattern = Pattern { machine, requests };
    pattern.validate()?;
    Ok(pattern)
}
