//! Local search on the simulated makespan: starting from a plan, move a
//! piece to another place, or cut it in two and send one half to another
//! engine, while that ends the exchange sooner.

use crate::instance::{Instance, Piece};
use crate::simulate::run_lists;

/// Pieces are cut at multiples of this many bytes (a cache line), so a cut
/// never tears an element.
const SPLIT_ALIGN: u64 = 64;
/// Improvement rounds at most (each takes the best move of a full scan).
const MAX_ROUNDS: usize = 16;
/// A move must gain at least this much (microseconds) to count.
const MIN_GAIN_US: f64 = 1e-6;

/// The search's objective: the makespan, then (to cross plateaus where one
/// move alone cannot shorten the exchange) the sum of the puts' completion
/// times.
#[derive(Debug, Clone, Copy)]
struct Score {
    makespan: f64,
    completion_sum: f64,
}

impl Score {
    fn of(instance: &Instance, lists: &[Vec<Piece>]) -> Score {
        let (ran, makespan) = run_lists(instance, lists);
        let mut done = vec![0.0f64; instance.puts.len()];
        for r in ran.iter().flatten() {
            done[r.piece.put] = done[r.piece.put].max(r.end_us);
        }
        Score {
            makespan,
            completion_sum: done.iter().sum(),
        }
    }

    fn beats(&self, other: &Score) -> bool {
        self.makespan < other.makespan - MIN_GAIN_US
            || (self.makespan <= other.makespan + MIN_GAIN_US
                && self.completion_sum < other.completion_sum - MIN_GAIN_US)
    }
}

/// Improves `lists` by relocations and (with `allow_split`) halvings.
pub(crate) fn refine(
    instance: &Instance,
    mut lists: Vec<Vec<Piece>>,
    allow_split: bool,
) -> Vec<Vec<Piece>> {
    let engines = instance.machine.engines;
    lists.resize(engines, Vec::new());
    let mut current = Score::of(instance, &lists);
    for _ in 0..MAX_ROUNDS {
        let mut best: Option<(Score, Vec<Vec<Piece>>)> = None;
        let mut consider = |candidate: Vec<Vec<Piece>>| {
            let score = Score::of(instance, &candidate);
            let bar = best.as_ref().map_or(current, |b| b.0);
            if score.beats(&bar) {
                best = Some((score, candidate));
            }
        };
        for e in 0..engines {
            for i in 0..lists[e].len() {
                let piece = lists[e][i];
                for f in 0..engines {
                    // Relocate: take it out, insert it anywhere on engine f.
                    let mut without = lists.clone();
                    without[e].remove(i);
                    for j in 0..=without[f].len() {
                        if f == e && j == i {
                            continue;
                        }
                        let mut candidate = without.clone();
                        candidate[f].insert(
                            j,
                            Piece {
                                recv_engine: f,
                                ..piece
                            },
                        );
                        consider(candidate);
                    }
                    // Halve: keep the first half here, the second on engine f.
                    if allow_split && f != e && piece.bytes >= 2 * SPLIT_ALIGN {
                        let first = (piece.bytes / 2).div_ceil(SPLIT_ALIGN) * SPLIT_ALIGN;
                        let mut base = lists.clone();
                        base[e][i].bytes = first;
                        let second = Piece {
                            offset: piece.offset + first,
                            bytes: piece.bytes - first,
                            recv_engine: f,
                            ..piece
                        };
                        for j in 0..=base[f].len() {
                            let mut candidate = base.clone();
                            candidate[f].insert(j, second);
                            consider(candidate);
                        }
                    }
                }
            }
        }
        match best {
            Some((score, candidate)) => {
                current = score;
                lists = candidate;
            }
            None => break,
        }
    }
    lists
}
