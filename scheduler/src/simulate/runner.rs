//! Runs engine lists through the simulator, many times over: one set of
//! buffers and one memo of rates for all runs, runs given up once they
//! cannot beat a bound, and runs resumed from a recorded run's state at
//! the first decision in which they differ from it.

use super::{Flow, Phase, Ran, SimState};
use crate::instance::{Instance, Piece};
use std::ops::Range;

/// Simulates engine lists one after another on one set of buffers: a
/// search that simulates thousands of candidates allocates once.
#[derive(Debug)]
pub(crate) struct Runner<'a> {
    state: SimState<'a>,
    cursor: Vec<usize>,
    /// Per engine, from each position of its list on, the time its pieces
    /// take at the least (each alone on an idle machine): `tails[e][k]` for
    /// the pieces from k on, `tails[e][len] = 0`.
    tails: Vec<Vec<f64>>,
    /// The state at every decision of the last recorded run.
    recording: Recording,
}

/// The state of a run at the start of each of its decision batches (the
/// moments at least one engine is idle and takes its next piece or
/// closes), and in which batch each engine decided each position of its
/// list. Another run of lists that agree with the recorded ones on every
/// decision before batch b is, up to batch b, the recorded run: it can
/// start there.
#[derive(Debug, Default)]
struct Recording {
    engines: usize,
    batches: Vec<Batch>,
    /// Per batch, one entry per engine.
    engines_at: Vec<EngineAt>,
    /// The flows under way, batch after batch (see [`Batch::flows`]).
    flows: Vec<Flow>,
    /// What the recorded run ran; each batch's is a prefix of it.
    ran: Vec<Vec<Ran>>,
    /// `decided[e][k]`: the batch in which engine e took position k of its
    /// list, or closed (k = its length).
    decided: Vec<Vec<usize>>,
}

/// The state at the start of a batch, but for its engines'.
#[derive(Debug, Clone)]
struct Batch {
    now: f64,
    /// Its flows, in `Recording::flows`.
    flows: Range<usize>,
}

/// One engine's state at the start of a batch.
#[derive(Debug, Clone, Copy)]
struct EngineAt {
    phase: Phase,
    started_at: f64,
    /// Its position in its list.
    cursor: usize,
    /// How many of its commands had run.
    ran: usize,
}

impl Recording {
    fn clear(&mut self, engines: usize) {
        self.engines = engines;
        self.batches.clear();
        self.engines_at.clear();
        self.flows.clear();
        self.decided.resize(engines, Vec::new());
        for d in &mut self.decided {
            d.clear();
        }
    }

    fn push(&mut self, state: &SimState<'_>, cursor: &[usize]) {
        let first = self.flows.len();
        self.flows.extend_from_slice(&state.flows);
        self.batches.push(Batch {
            now: state.now,
            flows: first..self.flows.len(),
        });
        self.engines_at.extend((0..self.engines).map(|e| EngineAt {
            phase: state.phases[e],
            started_at: state.started_at[e],
            cursor: cursor[e],
            ran: state.ran[e].len(),
        }));
    }

    /// Forgets the batches from `batch` on.
    fn truncate(&mut self, batch: usize) {
        self.flows.truncate(self.batches[batch].flows.start);
        self.batches.truncate(batch);
        self.engines_at.truncate(batch * self.engines);
        for d in &mut self.decided {
            while d.last().is_some_and(|&b| b >= batch) {
                d.pop();
            }
        }
    }

    fn batches(&self) -> usize {
        self.batches.len()
    }
}

impl<'a> Runner<'a> {
    /// A runner for many runs: it remembers rates across them.
    pub fn new(instance: &'a Instance) -> Self {
        let mut runner = Runner::once(instance);
        runner.state.memo = Some(Box::default());
        runner
    }

    /// A runner for a run or two: no memo.
    pub fn once(instance: &'a Instance) -> Self {
        Runner {
            state: SimState::new(instance),
            cursor: vec![0; instance.machine.engines],
            tails: vec![Vec::new(); instance.machine.engines],
            recording: Recording::default(),
        }
    }

    /// The instance the runs are of.
    pub fn instance(&self) -> &'a Instance {
        self.state.instance
    }

    /// Runs `lists` to completion; returns the makespan.
    pub fn run(&mut self, lists: &[Vec<Piece>]) -> f64 {
        self.run_within(lists, f64::INFINITY)
            .expect("an unbounded run always finishes")
    }

    /// Runs `lists`, given up (`None`) as soon as the simulated clock passes
    /// `bound`: the makespan is then certain to exceed `bound` plus the
    /// fixed overhead, so a search comparing against a known makespan need
    /// not finish the run. Otherwise returns the makespan; [`Runner::ran`]
    /// holds what ran.
    ///
    /// The run is also given up as soon as some engine cannot finish by
    /// `bound` even if each of its remaining pieces ran alone from now on: a
    /// floor no simulated run beats, so the answer is the same as running
    /// on, sooner.
    pub fn run_within(&mut self, lists: &[Vec<Piece>], bound: f64) -> Option<f64> {
        self.state.reset();
        self.cursor.fill(0);
        self.drive(lists, bound, false)
    }

    /// Runs `lists` to completion, recording the state at each decision
    /// for [`Runner::resume_within`]; returns the makespan.
    pub fn record(&mut self, lists: &[Vec<Piece>]) -> f64 {
        self.state.reset();
        self.cursor.fill(0);
        self.recording.clear(self.cursor.len());
        self.record_rest(lists)
    }

    /// The first batch of the recorded run whose decisions lists differing
    /// from the recorded ones at `changes` (engine, first position that
    /// differs) would change: the batch to resume from.
    pub fn first_change(&self, changes: &[(usize, usize)]) -> usize {
        changes
            .iter()
            .map(|&(e, k)| {
                let decided = &self.recording.decided[e];
                decided[k.min(decided.len() - 1)]
            })
            .min()
            .unwrap_or(0)
    }

    /// [`Runner::run_within`] for lists that agree with the recorded run's
    /// on every decision before `batch` (see [`Runner::first_change`]): the
    /// run starts from the recorded state there, and ends as a full run
    /// would, bit for bit.
    pub fn resume_within(&mut self, lists: &[Vec<Piece>], batch: usize, bound: f64) -> Option<f64> {
        if batch == 0 || batch >= self.recording.batches() {
            return self.run_within(lists, bound);
        }
        self.restore(batch);
        self.drive(lists, bound, false)
    }

    /// [`Runner::record`] for lists that agree with the recorded run's on
    /// every decision before `batch`: only the rest is run (and recorded).
    pub fn record_from(&mut self, lists: &[Vec<Piece>], batch: usize) -> f64 {
        if batch == 0 || batch >= self.recording.batches() {
            return self.record(lists);
        }
        self.restore(batch);
        self.recording.truncate(batch);
        self.record_rest(lists)
    }

    fn record_rest(&mut self, lists: &[Vec<Piece>]) -> f64 {
        let makespan = self
            .drive(lists, f64::INFINITY, true)
            .expect("an unbounded run always finishes");
        self.recording.ran.clone_from(&self.state.ran);
        makespan
    }

    /// Puts the state back to the recorded run's at the start of `batch`.
    fn restore(&mut self, batch: usize) {
        let rec = &self.recording;
        let at = &rec.batches[batch];
        let engines = &rec.engines_at[batch * rec.engines..(batch + 1) * rec.engines];
        let state = &mut self.state;
        state.now = at.now;
        // Every batch but the first starts after a flow ended or began, so
        // its rates were stale; recomputing gives the same rates anyway.
        state.rates_stale = true;
        state.flows.clear();
        state.flows.extend_from_slice(&rec.flows[at.flows.clone()]);
        for (e, engine) in engines.iter().enumerate() {
            state.phases[e] = engine.phase;
            state.started_at[e] = engine.started_at;
            self.cursor[e] = engine.cursor;
            state.ran[e].clear();
            state.ran[e].extend_from_slice(&rec.ran[e][..engine.ran]);
        }
    }

    /// Runs from the current state to the end, or to the bound.
    fn drive(&mut self, lists: &[Vec<Piece>], bound: f64, record: bool) -> Option<f64> {
        let floors = bound.is_finite();
        if floors {
            self.fill_tails(lists);
        }
        // Rounding of the floors against the simulated clock, far above
        // either's error.
        let limit = bound + 1e-9 * bound.abs().max(1.0);
        let state = &mut self.state;
        loop {
            if record {
                self.recording.push(state, &self.cursor);
            }
            while let Some(e) = state.idle_engine() {
                if record {
                    let batch = self.recording.batches() - 1;
                    self.recording.decided[e].push(batch);
                }
                match lists.get(e).and_then(|l| l.get(self.cursor[e])) {
                    Some(&piece) => {
                        self.cursor[e] += 1;
                        state.assign(e, piece);
                    }
                    None => state.close(e),
                }
            }
            if floors && floor(state, &self.cursor, &self.tails) > limit {
                return None;
            }
            if !state.advance() {
                break;
            }
            if state.now > bound {
                return None;
            }
        }
        Some(state.makespan())
    }

    fn fill_tails(&mut self, lists: &[Vec<Piece>]) {
        let instance = self.state.instance;
        for (e, tail) in self.tails.iter_mut().enumerate() {
            let list = lists.get(e).map_or(&[][..], Vec::as_slice);
            tail.clear();
            tail.resize(list.len() + 1, 0.0);
            for (k, piece) in list.iter().enumerate().rev() {
                tail[k] = tail[k + 1] + instance.alone_us(piece.bytes);
            }
        }
    }

    /// What the last run ran, per engine, in order.
    pub fn ran(&self) -> &[Vec<Ran>] {
        &self.state.ran
    }

    pub(super) fn into_ran(self) -> Vec<Vec<Ran>> {
        self.state.ran
    }
}

/// A time before which a run cannot end, whatever happens next: each
/// engine's work left (`tails` from its `cursor`), each piece alone on an
/// idle machine. (Valid because no flow runs faster than alone; computed
/// with the alone rate's inverse, a rounding far below the margin the
/// floor is compared with.)
fn floor(state: &SimState<'_>, cursor: &[usize], tails: &[Vec<f64>]) -> f64 {
    let per_byte = 1.0 / state.instance.alone_rate();
    let mut floor = state.now;
    for (e, (&k, tail)) in cursor.iter().zip(tails).enumerate() {
        // A list of n pieces has n + 1 tails, and its cursor is at most n.
        floor = floor.max(state.busy_floor(e, per_byte) + tail[k]);
    }
    floor
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Machine;
    use crate::patterns::{random, SplitMix64};

    /// Random engine lists of every put of a random pattern, some cut in two.
    fn lists_of(instance: &Instance, rng: &mut SplitMix64) -> Vec<Vec<Piece>> {
        let engines = instance.machine.engines;
        let mut lists = vec![Vec::new(); engines];
        for put in 0..instance.puts.len() {
            let e = rng.below(engines as u64) as usize;
            let piece = Piece::whole(instance, put, e);
            if piece.bytes >= 128 && rng.below(4) == 0 {
                let f = rng.below(engines as u64) as usize;
                let first = piece.bytes / 2;
                lists[e].push(Piece {
                    bytes: first,
                    ..piece
                });
                lists[f].push(Piece {
                    offset: first,
                    bytes: piece.bytes - first,
                    recv_engine: f,
                    ..piece
                });
            } else {
                lists[e].push(piece);
            }
        }
        lists
    }

    /// The lists with one piece moved: what the searches try.
    fn moved(lists: &[Vec<Piece>], rng: &mut SplitMix64) -> (Vec<Vec<Piece>>, [(usize, usize); 2]) {
        let mut out = lists.to_vec();
        let engines = out.len();
        let e = (0..engines)
            .cycle()
            .skip(rng.below(engines as u64) as usize)
            .find(|&e| !out[e].is_empty())
            .expect("a piece somewhere");
        let i = rng.below(out[e].len() as u64) as usize;
        let piece = out[e].remove(i);
        let f = rng.below(engines as u64) as usize;
        let j = rng.below(out[f].len() as u64 + 1) as usize;
        out[f].insert(
            j,
            Piece {
                recv_engine: f,
                ..piece
            },
        );
        let changes = if e == f {
            [(e, i.min(j)); 2]
        } else {
            [(e, i), (f, j)]
        };
        (out, changes)
    }

    /// A run resumed from a recorded one, with the memo, is the full run
    /// without it, bit for bit: makespan and every command's times.
    #[test]
    fn resumed_runs_are_full_runs_bit_for_bit() {
        let mut rng = SplitMix64::new(11);
        let mut resumed_late = 0;
        // 64 engines: more resources than a u128 has bits.
        let wide = Machine {
            engines: 64,
            ..Machine::K_COMPUTER
        };
        for (seed, machine) in
            (0..60).zip([Machine::K_COMPUTER, Machine::TOFU_D, wide].iter().cycle())
        {
            let pattern = random(3 + seed as usize % 20, seed, *machine).expect("pattern");
            let instance = Instance::new(&pattern).expect("instance");
            let base = lists_of(&instance, &mut rng);
            let mut runner = Runner::new(&instance);
            runner.record(&base);
            for _ in 0..10 {
                let (candidate, changes) = moved(&base, &mut rng);
                let from = runner.first_change(&changes);
                resumed_late += usize::from(from > 0);
                let resumed = runner.resume_within(&candidate, from, f64::INFINITY);
                let resumed_ran = runner.ran().to_vec();
                let mut fresh = Runner::once(&instance);
                let full = fresh.run(&candidate);
                assert_eq!(
                    resumed.map(f64::to_bits),
                    Some(full.to_bits()),
                    "seed {seed}"
                );
                assert_eq!(resumed_ran, fresh.ran(), "seed {seed}");
            }
            // Recording from a later batch gives what recording all would.
            let (next, changes) = moved(&base, &mut rng);
            let from = runner.first_change(&changes);
            let recorded = runner.record_from(&next, from);
            assert_eq!(
                recorded.to_bits(),
                Runner::once(&instance).run(&next).to_bits()
            );
            let (after, changes) = moved(&next, &mut rng);
            let again = runner.resume_within(&after, runner.first_change(&changes), f64::INFINITY);
            assert_eq!(
                again.map(f64::to_bits),
                Some(Runner::once(&instance).run(&after).to_bits())
            );
        }
        assert!(
            resumed_late > 100,
            "only {resumed_late} runs resumed past the start"
        );
    }

    /// A run given up at a bound is one whose full run ends past it, and a
    /// run that ends within the bound is never given up.
    #[test]
    fn bounded_runs_are_given_up_exactly_when_they_end_past_the_bound() {
        let mut rng = SplitMix64::new(5);
        let mut given_up = 0;
        for seed in 0..80 {
            let pattern =
                random(2 + seed as usize % 16, seed, Machine::K_COMPUTER).expect("pattern");
            let instance = Instance::new(&pattern).expect("instance");
            let lists = lists_of(&instance, &mut rng);
            let mut runner = Runner::new(&instance);
            runner.run(&lists);
            let last_end = runner
                .ran()
                .iter()
                .flatten()
                .map(|r| r.end_us)
                .fold(0.0, f64::max);
            for factor in [0.3, 0.7, 0.95, 0.999, 1.0, 1.001, 1.5] {
                let bound = last_end * factor;
                let within = runner.run_within(&lists, bound);
                if last_end > bound * (1.0 + 1e-6) {
                    assert!(
                        within.is_none(),
                        "seed {seed}: ran past {bound} to {last_end}"
                    );
                    given_up += 1;
                } else if last_end <= bound {
                    assert!(
                        within.is_some(),
                        "seed {seed}: given up at {bound}, ends {last_end}"
                    );
                }
            }
        }
        assert!(given_up > 200);
    }
}
