//! Local search on the simulated makespan: starting from a plan, move a
//! piece to another place, or cut it in two and send one half to another
//! engine, while that ends the exchange sooner.

use crate::instance::{Instance, Piece};
use crate::simulate::Runner;

/// Pieces are cut at multiples of this many bytes (a cache line), so a cut
/// never tears an element.
const SPLIT_ALIGN: u64 = 64;
/// Improvement rounds at most (each applies one improving move).
const MAX_ROUNDS: usize = 32;
/// A move must gain at least this much (microseconds) to count.
const MIN_GAIN_US: f64 = 1e-6;
/// Pieces the search may simulate, summed over the candidate moves it
/// tries (each simulates at most every piece): the search stops there with
/// the best plan so far. A bound on work, not on time, so that a plan
/// stays a pure function of its input; about a second on a 2 GHz core,
/// and more than any pattern of up to a few thousand puts needs.
pub(crate) const MAX_SIMULATED_PIECES: usize = 200_000_000;

/// The search's objective: the makespan, then (to cross plateaus where one
/// move alone cannot shorten the exchange) the sum of the puts' completion
/// times.
#[derive(Debug, Clone, Copy)]
struct Score {
    makespan: f64,
    completion_sum: f64,
}

/// Scores candidates on one simulator's buffers.
#[derive(Debug)]
struct Scorer<'r, 'a> {
    instance: &'a Instance,
    runner: &'r mut Runner<'a>,
    /// Per put, when its last piece ended.
    done: Vec<f64>,
    /// Candidate moves it may still simulate.
    left: usize,
}

impl<'r, 'a> Scorer<'r, 'a> {
    fn new(runner: &'r mut Runner<'a>) -> Self {
        let instance = runner.instance();
        let pieces = instance.puts.len().max(1);
        Scorer {
            instance,
            runner,
            done: vec![0.0; instance.puts.len()],
            left: MAX_SIMULATED_PIECES / pieces,
        }
    }

    /// The score of `lists`, which differ from the recorded run's at
    /// `changes` (engine, first position that differs), or `None` when it
    /// cannot beat `current` (its simulation passed `current`'s makespan by
    /// more than the gain a move must make, and was cut short there).
    fn against(
        &mut self,
        lists: &[Vec<Piece>],
        changes: &[(usize, usize)],
        current: &Score,
    ) -> Option<Score> {
        self.left = self.left.checked_sub(1)?;
        let bound = current.makespan - self.instance.machine.fixed_overhead_us + 2.0 * MIN_GAIN_US;
        let from = self.runner.first_change(changes);
        let makespan = self.runner.resume_within(lists, from, bound)?;
        Some(self.score(makespan))
    }

    /// The score of the run just made, which ended at `makespan`.
    fn score(&mut self, makespan: f64) -> Score {
        self.done.fill(0.0);
        for r in self.runner.ran().iter().flatten() {
            self.done[r.piece.put] = self.done[r.piece.put].max(r.end_us);
        }
        Score {
            makespan,
            completion_sum: self.done.iter().sum(),
        }
    }
}

impl Score {
    fn beats(&self, other: &Score) -> bool {
        self.makespan < other.makespan - MIN_GAIN_US
            || (self.makespan <= other.makespan + MIN_GAIN_US
                && self.completion_sum < other.completion_sum - MIN_GAIN_US)
    }
}

/// Improves `lists` by relocations and (with `allow_split`) halvings of the
/// pieces on the engines that finish last, taking the first move that
/// improves the score, until none does or the work allowed
/// ([`MAX_SIMULATED_PIECES`]) is spent.
pub(crate) fn refine(
    runner: &mut Runner<'_>,
    mut lists: Vec<Vec<Piece>>,
    allow_split: bool,
) -> Vec<Vec<Piece>> {
    let engines = runner.instance().machine.engines;
    lists.resize(engines, Vec::new());
    let mut scorer = Scorer::new(runner);
    for _ in 0..MAX_ROUNDS {
        // Recorded: each candidate starts at its first change.
        let makespan = scorer.runner.record(&lists);
        let current = scorer.score(makespan);
        let finish: Vec<f64> = scorer
            .runner
            .ran()
            .iter()
            .map(|r| r.last().map_or(0.0, |c| c.end_us))
            .collect();
        let latest = finish.iter().copied().fold(0.0, f64::max);
        let mut targets: Vec<usize> = (0..engines).collect();
        targets.sort_by(|&a, &b| finish[a].total_cmp(&finish[b]).then(a.cmp(&b)));
        let critical: Vec<usize> = (0..engines)
            .filter(|&e| finish[e] >= latest - MIN_GAIN_US)
            .collect();
        let moves = Moves {
            critical: &critical,
            targets: &targets,
            allow_split,
        };
        if first_improvement(&mut scorer, &mut lists, &current, &moves).is_none()
            || scorer.left == 0
        {
            break;
        }
    }
    lists
}

/// The moves a round tries: pieces of the engines that finish last, to
/// every engine, the earliest-finishing first.
#[derive(Debug)]
struct Moves<'m> {
    critical: &'m [usize],
    targets: &'m [usize],
    allow_split: bool,
}

/// What each engine's list takes at the least: its pieces one after
/// another, each alone on an idle machine (the simulator runs one piece at
/// a time per engine, at no more than the slowest resource's full rate).
/// A move whose floor cannot beat the current makespan is rejected without
/// simulating it.
#[derive(Debug, Clone)]
struct Floors {
    busy: Vec<f64>,
    fixed: f64,
    /// Above this makespan floor a candidate cannot beat `current` (with a
    /// margin far above the simulator's rounding).
    limit: f64,
}

impl Floors {
    fn of(instance: &Instance, lists: &[Vec<Piece>], current: &Score) -> Floors {
        Floors {
            busy: lists
                .iter()
                .map(|l| l.iter().map(|p| instance.alone_us(p.bytes)).sum())
                .collect(),
            fixed: instance.machine.fixed_overhead_us,
            limit: current.makespan + MIN_GAIN_US + 1e-9 * current.makespan.abs().max(1.0),
        }
    }

    /// Whether the lists after a move, which change engine `a`'s floor by
    /// `da` and engine `b`'s by `db`, can still beat the current plan.
    fn admits(&self, (a, da): (usize, f64), (b, db): (usize, f64)) -> bool {
        let floor = self
            .busy
            .iter()
            .enumerate()
            .map(|(e, &t)| t + if e == a { da } else { 0.0 } + if e == b { db } else { 0.0 })
            .fold(0.0, f64::max);
        floor + self.fixed <= self.limit
    }
}

/// The first move of a piece on a critical engine that beats `current`:
/// `lists` is left as that move made it, and its score returned; with no
/// such move, `lists` is left as it was. Moves are tried in place (made,
/// simulated, undone), so the search allocates nothing per candidate.
fn first_improvement(
    scorer: &mut Scorer<'_, '_>,
    lists: &mut [Vec<Piece>],
    current: &Score,
    moves: &Moves<'_>,
) -> Option<Score> {
    let instance = scorer.instance;
    let floors = Floors::of(instance, lists, current);
    let mut better = |lists: &[Vec<Piece>], changes: &[(usize, usize)]| {
        let score = scorer.against(lists, changes, current)?;
        score.beats(current).then_some(score)
    };
    for &e in moves.critical {
        for i in (0..lists[e].len()).rev() {
            let piece = lists[e][i];
            let alone = instance.alone_us(piece.bytes);
            for &f in moves.targets {
                // Relocate: take it out, insert it anywhere on engine f.
                if floors.admits((e, -alone), (f, alone)) {
                    lists[e].remove(i);
                    let moved = Piece {
                        recv_engine: f,
                        ..piece
                    };
                    for j in positions(lists[f].len()) {
                        if f == e && j == i {
                            continue;
                        }
                        lists[f].insert(j, moved);
                        let changes = if f == e {
                            [(e, i.min(j)), (e, i.min(j))]
                        } else {
                            [(e, i), (f, j)]
                        };
                        if let Some(found) = better(lists, &changes) {
                            return Some(found);
                        }
                        lists[f].remove(j);
                    }
                    lists[e].insert(i, piece);
                }
                // Halve: keep the first half here, the second on engine f.
                if moves.allow_split && f != e && worth_halving(instance, piece.bytes) {
                    let first = (piece.bytes / 2).div_ceil(SPLIT_ALIGN) * SPLIT_ALIGN;
                    let (kept, moved) = (
                        instance.alone_us(first),
                        instance.alone_us(piece.bytes - first),
                    );
                    if !floors.admits((e, kept - alone), (f, moved)) {
                        continue;
                    }
                    lists[e][i].bytes = first;
                    let second = Piece {
                        offset: piece.offset + first,
                        bytes: piece.bytes - first,
                        recv_engine: f,
                        ..piece
                    };
                    for j in positions(lists[f].len()) {
                        lists[f].insert(j, second);
                        if let Some(found) = better(lists, &[(e, i), (f, j)]) {
                            return Some(found);
                        }
                        lists[f].remove(j);
                    }
                    lists[e][i] = piece;
                }
            }
        }
    }
    None
}

/// Where a moved piece may go in a list of `len`: last, or first. (Every
/// position finds little more on the paper's patterns and costs a
/// simulation each.)
fn positions(len: usize) -> impl Iterator<Item = usize> {
    std::iter::once(len).chain((len > 0).then_some(0))
}

/// Halving pays a second command overhead; only a piece whose transfer
/// takes longer than two overheads can gain from it.
fn worth_halving(instance: &Instance, bytes: u64) -> bool {
    bytes >= 2 * SPLIT_ALIGN
        && bytes as f64 / instance.engine_rate().min(instance.link_rate())
            > 2.0 * instance.machine.command_overhead_us
}
