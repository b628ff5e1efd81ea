//! The Quadratic Assignment Problem: place rank i in slot p(i) to minimise
//! `sum_ij T[i][j] * D[p(i)][p(j)]`. GRASP construction (Li, Pardalos and
//! Resende) followed by robust tabu search (Taillard), restarted while the
//! budget lasts. Deterministic in its seed; no clocks: the caller sets an
//! iteration budget (the CLI turns `--seconds` into repeated calls).

// Matrix code: indices read more clearly than iterator chains here.
#![allow(clippy::needless_range_loop)]

use crate::error::{Result, SchedError};
use crate::patterns::SplitMix64;

/// A square matrix of costs or flows.
pub type Matrix = Vec<Vec<f64>>;

/// A QAP instance.
#[derive(Debug, Clone)]
pub struct Qap {
    traffic: Matrix,
    distance: Matrix,
}

/// A solution: `permutation[i]` is the slot of rank i.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// Slot of each rank.
    pub permutation: Vec<usize>,
    /// Its cost.
    pub cost: f64,
}

/// How hard to search.
#[derive(Debug, Clone, Copy)]
pub struct SolverOptions {
    /// GRASP restarts.
    pub restarts: usize,
    /// Tabu iterations per restart (0: n * 50).
    pub tabu_iterations: usize,
    /// Random seed.
    pub seed: u64,
}

impl Default for SolverOptions {
    fn default() -> Self {
        SolverOptions {
            restarts: 8,
            tabu_iterations: 0,
            seed: 1,
        }
    }
}

fn check_square(name: &'static str, m: &Matrix, n: usize) -> Result<()> {
    if m.len() != n {
        return Err(SchedError::InvalidMatrix(format!(
            "the {name} matrix has {} rows, expected {n}",
            m.len()
        )));
    }
    for (i, row) in m.iter().enumerate() {
        if row.len() != n {
            return Err(SchedError::InvalidMatrix(format!(
                "row {i} of the {name} matrix has {} entries, expected {n}: the matrix must be square",
                row.len()
            )));
        }
        if let Some(v) = row.iter().find(|v| !v.is_finite()) {
            return Err(SchedError::InvalidMatrix(format!(
                "row {i} of the {name} matrix holds {v}: entries must be finite"
            )));
        }
    }
    Ok(())
}

impl Qap {
    /// An instance from a traffic matrix T (ranks) and a distance matrix D (slots).
    ///
    /// # Errors
    ///
    /// [`SchedError::InvalidMatrix`](crate::SchedError::InvalidMatrix) when the matrices are empty, not square
    /// or of different sizes.
    pub fn new(traffic: Matrix, distance: Matrix) -> Result<Qap> {
        let n = traffic.len();
        if n == 0 {
            return Err(SchedError::InvalidMatrix(
                "the traffic matrix is empty".into(),
            ));
        }
        check_square("traffic", &traffic, n)?;
        check_square("distance", &distance, n)?;
        Ok(Qap { traffic, distance })
    }

    /// Ranks (= slots).
    pub fn size(&self) -> usize {
        self.traffic.len()
    }

    /// The cost of a placement.
    pub fn cost(&self, p: &[usize]) -> f64 {
        let n = self.size();
        let mut c = 0.0;
        for i in 0..n {
            for j in 0..n {
                c += self.traffic[i][j] * self.distance[p[i]][p[j]];
            }
        }
        c
    }

    /// Checks that `p` is a permutation of the slots.
    ///
    /// # Errors
    ///
    /// [`SchedError::InvalidMatrix`](crate::SchedError::InvalidMatrix) naming the slot that is out of range or
    /// taken twice.
    pub fn check_permutation(&self, p: &[usize]) -> Result<()> {
        let n = self.size();
        let mut seen = vec![false; n];
        if p.len() != n
            || p.iter()
                .any(|&s| s >= n || std::mem::replace(&mut seen[s], true))
        {
            return Err(SchedError::InvalidMatrix(format!(
                "{p:?} is not a permutation of 0..{n}"
            )));
        }
        Ok(())
    }

    /// Change in cost from swapping the slots of ranks r and s (Taillard's formula).
    fn delta(&self, p: &[usize], r: usize, s: usize) -> f64 {
        let (a, b) = (&self.traffic, &self.distance);
        let (pr, ps) = (p[r], p[s]);
        let mut d = (a[r][r] - a[s][s]) * (b[ps][ps] - b[pr][pr])
            + (a[r][s] - a[s][r]) * (b[ps][pr] - b[pr][ps]);
        for k in 0..p.len() {
            if k != r && k != s {
                let pk = p[k];
                d += (a[k][r] - a[k][s]) * (b[pk][ps] - b[pk][pr])
                    + (a[r][k] - a[s][k]) * (b[ps][pk] - b[pr][pk]);
            }
        }
        d
    }

    /// Greedy randomized construction: the heaviest-traffic rank pairs go to
    /// the closest slot pairs, chosen at random among the best few.
    fn construct(&self, rng: &mut SplitMix64) -> Vec<usize> {
        let n = self.size();
        if n == 1 {
            return vec![0];
        }
        let mut rank_pairs: Vec<(usize, usize)> = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .collect();
        rank_pairs.sort_by(|x, y| {
            let fx = self.traffic[x.0][x.1] + self.traffic[x.1][x.0];
            let fy = self.traffic[y.0][y.1] + self.traffic[y.1][y.0];
            fy.total_cmp(&fx)
        });
        let mut slot_pairs = rank_pairs.clone();
        slot_pairs.sort_by(|x, y| {
            let dx = self.distance[x.0][x.1] + self.distance[x.1][x.0];
            let dy = self.distance[y.0][y.1] + self.distance[y.1][y.0];
            dx.total_cmp(&dy)
        });
        let pick = (rank_pairs.len() / 8).max(1) as u64;
        let (i, j) = rank_pairs[rng.below(pick) as usize];
        let (k, l) = slot_pairs[rng.below(pick) as usize];
        let mut p = vec![usize::MAX; n];
        let mut used = vec![false; n];
        p[i] = k;
        p[j] = l;
        used[k] = true;
        used[l] = true;
        let mut placed = vec![i, j];
        while placed.len() < n {
            // The free rank that talks most with the placed ones goes next,
            // to one of the few free slots that add the least cost.
            let r = (0..n)
                .filter(|&r| p[r] == usize::MAX)
                .max_by(|&x, &y| {
                    let fx: f64 = placed
                        .iter()
                        .map(|&q| self.traffic[x][q] + self.traffic[q][x])
                        .sum();
                    let fy: f64 = placed
                        .iter()
                        .map(|&q| self.traffic[y][q] + self.traffic[q][y])
                        .sum();
                    fx.total_cmp(&fy).then(y.cmp(&x))
                })
                .expect("a free rank");
            let mut options: Vec<(f64, usize)> = (0..n)
                .filter(|&s| !used[s])
                .map(|s| {
                    let add: f64 = placed
                        .iter()
                        .map(|&q| {
                            self.traffic[r][q] * self.distance[s][p[q]]
                                + self.traffic[q][r] * self.distance[p[q]][s]
                        })
                        .sum();
                    (add, s)
                })
                .collect();
            options.sort_by(|x, y| x.0.total_cmp(&y.0));
            let rcl = options.len().clamp(1, 3) as u64;
            let (_, s) = options[rng.below(rcl) as usize];
            p[r] = s;
            used[s] = true;
            placed.push(r);
        }
        p
    }

    /// Robust tabu search from `p`: best non-tabu swap each iteration, with
    /// aspiration when a swap beats the best so far.
    fn tabu_search(&self, mut p: Vec<usize>, iterations: usize, rng: &mut SplitMix64) -> Placement {
        let n = self.size();
        let mut cost = self.cost(&p);
        let mut best = Placement {
            permutation: p.clone(),
            cost,
        };
        if n < 2 {
            return best;
        }
        let mut delta = vec![vec![0.0f64; n]; n];
        for r in 0..n {
            for s in r + 1..n {
                delta[r][s] = self.delta(&p, r, s);
            }
        }
        // tabu[rank][slot]: iteration until which the rank may not return to the slot.
        let mut tabu = vec![vec![0usize; n]; n];
        let (low, high) = ((n * 9 / 10).max(1) as u64, (n * 11 / 10).max(2) as u64);
        for iteration in 1..=iterations {
            let mut chosen: Option<(f64, usize, usize)> = None;
            for r in 0..n {
                for s in r + 1..n {
                    let d = delta[r][s];
                    let forbidden = tabu[r][p[s]] > iteration && tabu[s][p[r]] > iteration;
                    let aspires = cost + d < best.cost - 1e-9;
                    if (!forbidden || aspires) && chosen.is_none_or(|c| d < c.0) {
                        chosen = Some((d, r, s));
                    }
                }
            }
            let Some((d, r, s)) = chosen else { continue };
            let tenure = (low + rng.below(high - low + 1)) as usize;
            tabu[r][p[r]] = iteration + tenure;
            tabu[s][p[s]] = iteration + tenure;
            p.swap(r, s);
            cost += d;
            if cost < best.cost - 1e-9 {
                best = Placement {
                    permutation: p.clone(),
                    cost,
                };
            }
            // Update every delta; O(n) for pairs touching r or s, O(1) otherwise.
            for i in 0..n {
                for j in i + 1..n {
                    delta[i][j] = if i == r || i == s || j == r || j == s {
                        self.delta(&p, i, j)
                    } else {
                        let (a, b) = (&self.traffic, &self.distance);
                        let (pi, pj, pr, ps) = (p[i], p[j], p[r], p[s]);
                        delta[i][j]
                            + (a[i][r] - a[i][s] + a[j][s] - a[j][r])
                                * (b[pj][pr] - b[pj][ps] + b[pi][ps] - b[pi][pr])
                            + (a[r][i] - a[s][i] + a[s][j] - a[r][j])
                                * (b[pr][pj] - b[ps][pj] + b[ps][pi] - b[pr][pi])
                    };
                }
            }
        }
        // Recompute to shed accumulated rounding.
        best.cost = self.cost(&best.permutation);
        best
    }

    /// The optimum, by trying every permutation (Heap's order; the first of
    /// equals, from the identity).
    fn exhaustive(&self) -> Placement {
        let n = self.size();
        let mut p: Vec<usize> = (0..n).collect();
        let mut best = Placement {
            cost: self.cost(&p),
            permutation: p.clone(),
        };
        let mut counter = vec![0usize; n];
        let mut i = 1;
        while i < n {
            if counter[i] < i {
                let other = if i % 2 == 0 { 0 } else { counter[i] };
                p.swap(other, i);
                let cost = self.cost(&p);
                if cost < best.cost - 1e-9 {
                    best = Placement {
                        permutation: p.clone(),
                        cost,
                    };
                }
                counter[i] += 1;
                i = 1;
            } else {
                counter[i] = 0;
                i += 1;
            }
        }
        best
    }

    /// GRASP + robust tabu search.
    pub fn solve(&self, options: &SolverOptions) -> Placement {
        self.solve_from(&[], options).expect("no starts to check")
    }

    /// Tabu search from each of `starts` (e.g. the identity and the
    /// hostname-sorted placements, so the result is never worse than them),
    /// then from GRASP constructions.
    ///
    /// # Errors
    ///
    /// The errors of [`Qap::check_permutation`] for a start that is not a
    /// permutation.
    pub fn solve_from(&self, starts: &[Vec<usize>], options: &SolverOptions) -> Result<Placement> {
        for start in starts {
            self.check_permutation(start)?;
        }
        let n = self.size();
        if n <= EXHAUSTIVE_UP_TO {
            return Ok(self.exhaustive());
        }
        let given = starts.len();
        let (restarts, iterations) = budgeted(n, given, options);
        let mut rng = SplitMix64::new(options.seed);
        let mut best: Option<Placement> = None;
        for round in 0..given + restarts {
            let start = if round < given {
                starts[round].clone()
            } else {
                self.construct(&mut rng)
            };
            let found = self.tabu_search(start, iterations, &mut rng);
            if best.as_ref().is_none_or(|b| found.cost < b.cost - 1e-9) {
                best = Some(found);
            }
        }
        Ok(best.expect("at least one restart"))
    }
}

/// Pair evaluations (one swap's cost change) the default search may make
/// in all: seconds (3 s for 400 ranks on a 2-core VM, where the paper's
/// settings took more than ten minutes). The search is bounded by work,
/// not by a clock (the scheduler has none), so its result stays the same
/// on every run; below about 100 ranks the bound never binds.
pub const SEARCH_BUDGET: u64 = 1_000_000_000;

/// Restarts and tabu iterations for `n` ranks and `given` starts: the
/// options' when they name iterations, else the defaults cut to
/// [`SEARCH_BUDGET`] (a tabu iteration costs about 1.5 n^2 evaluations, a
/// construction and the first deltas n^3 each), at least one restart and
/// one iteration and one round, so the best placement found so far is
/// always returned.
fn budgeted(n: usize, given: usize, options: &SolverOptions) -> (usize, usize) {
    let restarts = options.restarts.max(1);
    if options.tabu_iterations != 0 {
        return (restarts, options.tabu_iterations);
    }
    let n64 = n as u64;
    let cube = n64.saturating_mul(n64).saturating_mul(n64).max(1);
    // Each round's setup (construction, first deltas) costs about 2 n^3.
    let affordable_rounds = (SEARCH_BUDGET / cube.saturating_mul(2)).max(1) as usize;
    // Given starts always run; constructions only as far as the budget
    // goes (at least one when nothing was given).
    let restarts = restarts.min(
        affordable_rounds
            .saturating_sub(given)
            .max(usize::from(given == 0)),
    );
    let rounds = (given + restarts) as u64;
    let per_iteration = n64.saturating_mul(n64).saturating_mul(3) / 2;
    let left = SEARCH_BUDGET.saturating_sub(cube.saturating_mul(2).saturating_mul(rounds));
    let affordable = (left / rounds.max(1) / per_iteration.max(1)).max(1);
    let iterations = (n64.saturating_mul(50)).min(affordable) as usize;
    (restarts, iterations.max(1))
}

/// Largest instance solved exactly, by trying every permutation (8! =
/// 40,320 of them): below this size robust tabu search, whose tenure is
/// about n, can forbid nearly every move and stall in a local optimum (a
/// 6-rank placement over three nodes needed 30,000 iterations).
pub const EXHAUSTIVE_UP_TO: usize = 8;

/// Largest QAPLIB instance the parser reads (n x n matrices).
pub const MAX_QAP_SIZE: usize = 10_000;

/// Parses a QAPLIB `.dat` file: n, then the n x n matrix A, then B.
///
/// # Errors
///
/// [`SchedError::InvalidMatrix`](crate::SchedError::InvalidMatrix) when the text is empty, a number does not
/// parse, or the matrices are short.
pub fn parse_qaplib(text: &str) -> Result<Qap> {
    let mut words = text.split_whitespace();
    let first = words
        .next()
        .ok_or_else(|| SchedError::InvalidMatrix("empty QAPLIB file".into()))?;
    let n: usize = first
        .parse()
        .ok()
        .filter(|&n| (1..=MAX_QAP_SIZE).contains(&n))
        .ok_or_else(|| {
            SchedError::InvalidMatrix(format!(
                "the QAPLIB size `{first}` is not a whole number from 1 to {MAX_QAP_SIZE}"
            ))
        })?;
    let mut numbers = words.map(|w| {
        w.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| {
                SchedError::InvalidMatrix(format!(
                    "`{w}` is not a finite number in the QAPLIB file"
                ))
            })
    });
    let mut read = |name: &str| -> Result<Matrix> {
        (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| {
                        numbers.next().unwrap_or_else(|| {
                            Err(SchedError::InvalidMatrix(format!(
                                "the QAPLIB file ends inside matrix {name} at ({i}, {j})"
                            )))
                        })
                    })
                    .collect()
            })
            .collect()
    };
    let a = read("A")?;
    let b = read("B")?;
    Qap::new(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_is_bounded_by_its_budget_and_unchanged_below_it() {
        let defaults = SolverOptions::default();
        // Small: the paper's settings stand.
        assert_eq!(budgeted(64, 1, &defaults), (8, 64 * 50));
        // Explicit iterations are the caller's.
        let set = SolverOptions {
            tabu_iterations: 7,
            ..defaults
        };
        assert_eq!(budgeted(2000, 1, &set), (8, 7));
        for n in [100usize, 400, 2000, 10_000] {
            let (restarts, iterations) = budgeted(n, 1, &defaults);
            let n64 = n as u64;
            let rounds = 1 + restarts as u64;
            let setup = 2 * n64.pow(3) * rounds;
            let search = rounds * iterations as u64 * n64 * n64 * 3 / 2;
            assert!(iterations >= 1 && restarts <= 8, "n = {n}");
            // Over budget only by the setup of the one round that must run.
            assert!(
                setup + search <= SEARCH_BUDGET.max(2 * n64.pow(3) + n64 * n64 * 3 / 2),
                "n = {n}: {restarts} restarts x {iterations} iterations"
            );
        }
        assert_eq!(
            budgeted(10_000, 0, &defaults).0,
            1,
            "one construction without a start"
        );
    }
}
