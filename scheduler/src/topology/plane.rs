//! The finite projective plane of prime order n, in the paper's naming:
//! points P, P(c), P(c, r) and lines L, L(c), L(c, r).

use crate::error::{Result, SchedError};

/// True when `n` is prime.
pub fn is_prime(n: usize) -> bool {
    n >= 2 && (2..).take_while(|d| d * d <= n).all(|d| n % d != 0)
}

/// A point of the plane (a leaf switch of the Latin-square fat-tree).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Point {
    /// P.
    P,
    /// P(c).
    Pc(usize),
    /// P(c, r): the grid part.
    Pcr(usize, usize),
}

/// A line of the plane (a spine switch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Line {
    /// L = {P} + {P(c)}.
    L,
    /// L(c) = {P} + {P(c, i)}.
    Lc(usize),
    /// L(c, r) = {P(c)} + {P(i, (r + c i) mod n)}.
    Lcr(usize, usize),
}

impl Point {
    /// The point's coordinates as the JSON `leaf` array: `[]` for P, `[c]`, `[c, r]`.
    pub fn coordinates(self) -> Vec<usize> {
        match self {
            Point::P => vec![],
            Point::Pc(c) => vec![c],
            Point::Pcr(c, r) => vec![c, r],
        }
    }
}

/// The plane, with incidence tables for fast look-ups.
#[derive(Debug, Clone)]
pub struct ProjectivePlane {
    n: usize,
    points_on: Vec<Vec<usize>>,
    lines_through: Vec<Vec<usize>>,
    /// `line_of[a * size + b]`: the one line through points a != b.
    line_of: Vec<u32>,
}

impl ProjectivePlane {
    /// The plane of prime order `n`.
    ///
    /// # Errors
    ///
    /// [`SchedError::InvalidTopology`](crate::SchedError::InvalidTopology) when `n` is not a prime up to 251.
    pub fn new(n: usize) -> Result<Self> {
        if !is_prime(n) {
            return Err(SchedError::InvalidTopology(format!(
                "order n = {n} is not prime: the construction needs a prime n (2, 3, 5, 7, 11, 13, 17, ...)"
            )));
        }
        if n > 251 {
            return Err(SchedError::InvalidTopology(format!(
                "order n = {n} is too large: at most 251"
            )));
        }
        let size = n * n + n + 1;
        let mut points_on = Vec::with_capacity(size);
        points_on.push((0..=n).collect::<Vec<_>>());
        for c in 0..n {
            let mut line = vec![0];
            line.extend((0..n).map(|i| Self::index_of_static(n, Point::Pcr(c, i))));
            points_on.push(line);
        }
        for c in 0..n {
            for r in 0..n {
                let mut line = vec![Self::index_of_static(n, Point::Pc(c))];
                line.extend(
                    (0..n).map(|i| Self::index_of_static(n, Point::Pcr(i, (r + c * i) % n))),
                );
                points_on.push(line);
            }
        }
        let mut lines_through = vec![Vec::with_capacity(n + 1); size];
        for (l, points) in points_on.iter().enumerate() {
            for &p in points {
                lines_through[p].push(l);
            }
        }
        let mut line_of = vec![u32::MAX; size * size];
        for (l, points) in points_on.iter().enumerate() {
            for &a in points {
                for &b in points {
                    if a != b {
                        line_of[a * size + b] = l as u32;
                    }
                }
            }
        }
        Ok(ProjectivePlane {
            n,
            points_on,
            lines_through,
            line_of,
        })
    }

    fn index_of_static(n: usize, p: Point) -> usize {
        match p {
            Point::P => 0,
            Point::Pc(c) => 1 + c,
            Point::Pcr(c, r) => 1 + n + c * n + r,
        }
    }

    /// The order n.
    pub fn order(&self) -> usize {
        self.n
    }
    /// Points (and lines): n^2 + n + 1.
    pub fn size(&self) -> usize {
        self.points_on.len()
    }
    /// The index of a point (P, then P(c), then P(c, r) row by row).
    pub fn point_index(&self, p: Point) -> usize {
        Self::index_of_static(self.n, p)
    }
    /// The point of an index.
    pub fn point(&self, index: usize) -> Point {
        let n = self.n;
        match index {
            0 => Point::P,
            i if i <= n => Point::Pc(i - 1),
            i => Point::Pcr((i - 1 - n) / n, (i - 1 - n) % n),
        }
    }
    /// The line of an index (L, then L(c), then L(c, r)).
    pub fn line(&self, index: usize) -> Line {
        let n = self.n;
        match index {
            0 => Line::L,
            i if i <= n => Line::Lc(i - 1),
            i => Line::Lcr((i - 1 - n) / n, (i - 1 - n) % n),
        }
    }
    /// Points on line `l`, in port order.
    pub fn points_on(&self, l: usize) -> &[usize] {
        &self.points_on[l]
    }
    /// Lines through point `p`, in port order.
    pub fn lines_through(&self, p: usize) -> &[usize] {
        &self.lines_through[p]
    }
    /// The one line through two distinct points.
    pub fn line_through(&self, a: usize, b: usize) -> Option<usize> {
        let l = self.line_of[a * self.size() + b];
        (l != u32::MAX).then_some(l as usize)
    }
}
