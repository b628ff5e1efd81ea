//! The flow-level simulator: a deterministic, event-driven model of how a
//! plan runs.
//!
//! Each engine runs its list FIFO and back to back. A command holds its
//! engine alone for the command overhead, then becomes a flow; the engine is
//! busy until the flow has delivered its last byte. Active flows share
//! capacity by max-min fairness over the sending engine, every link they
//! use, the node's injection bandwidth and their receive engine (shared by
//! all flows with the same receive engine: every process runs the same
//! exchange, so a node receives exactly what it sends).
//!
//! The simulator is also a state machine that a search can drive: at every
//! decision point each idle engine is given its next piece or closed.

use crate::instance::{Instance, Piece};
use rustc_hash::FxHashMap;

mod runner;

pub(crate) use runner::Runner;

/// Bytes below which a flow counts as finished (absorbs rounding).
const DONE_BYTES: f64 = 1e-6;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Waiting for a decision: give it a piece or close it.
    Idle,
    /// Processing a command's overhead until the given time.
    Overhead { until: f64, piece: Piece },
    /// Transferring: index into the flow table.
    Flowing { flow: usize },
    /// Its list is done.
    Closed,
}

#[derive(Debug, Clone, Copy)]
struct Flow {
    engine: usize,
    piece: Piece,
    remaining: f64,
    rate: f64,
    links: u64,
    /// When the flow ends at its current rate (set as the clock advances).
    end: f64,
}

impl Flow {
    /// What fixes the flow's share of the machine, as one key: its send
    /// engine, its receive engine and its links (engines number at most
    /// 256, so each fits in 32 bits).
    fn resources(&self) -> u128 {
        (self.engine as u128) << 96
            | (self.piece.recv_engine as u128) << 64
            | u128::from(self.links)
    }
}

/// One command as it ran.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Ran {
    pub piece: Piece,
    pub start_us: f64,
    pub end_us: f64,
}

/// The state of a simulation in progress.
#[derive(Debug, Clone)]
pub(crate) struct SimState<'a> {
    instance: &'a Instance,
    pub now: f64,
    phases: Vec<Phase>,
    started_at: Vec<f64>,
    flows: Vec<Flow>,
    /// What ran, per engine, in order.
    pub ran: Vec<Vec<Ran>>,
    rates_stale: bool,
    /// Scratch space of the rate computation, kept to avoid allocating per event.
    scratch: RateScratch,
    /// Rates remembered across runs (a [`Runner`]'s); `None` for states a
    /// search clones.
    memo: Option<Box<RateMemo>>,
}

/// Flow sequences a memo keeps before it starts over.
const MEMO_ENTRIES: usize = 1 << 14;
/// Flows at once up to which rates are remembered (a key holds them inline,
/// so remembering allocates nothing but the table).
const MEMO_FLOWS: usize = 8;

/// Rates already computed, by the flows' resources in flow order.
#[derive(Debug, Default)]
struct RateMemo {
    rates: FxHashMap<MemoKey, [f64; MEMO_FLOWS]>,
}

/// The flows' resources in flow order (see [`Flow::resources`]); only the
/// first `len` count.
#[derive(Debug, Clone, Copy, Default)]
struct MemoKey {
    len: usize,
    flows: [u128; MEMO_FLOWS],
}

impl MemoKey {
    fn used(&self) -> &[u128] {
        &self.flows[..self.len]
    }
}

impl PartialEq for MemoKey {
    fn eq(&self, other: &Self) -> bool {
        self.used() == other.used()
    }
}

impl Eq for MemoKey {}

impl std::hash::Hash for MemoKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.used().hash(state);
    }
}

impl Clone for RateMemo {
    /// An empty memo: what a clone would copy is a cache.
    fn clone(&self) -> Self {
        RateMemo::default()
    }
}

/// Scratch space of the rate computation, kept to avoid allocating per
/// event. Only the resources some flow uses are touched: a machine has
/// 2 x engines + links + 1 resources, an event's flows use a dozen.
#[derive(Debug, Clone, Default)]
struct RateScratch {
    /// Capacity left per resource; valid only for resources in use.
    capacity: Vec<f64>,
    /// Unfrozen flows per resource; zero outside `touched` between calls.
    users: Vec<usize>,
    /// The resources in use, in first-use order.
    touched: Vec<usize>,
    /// Every flow's resources, one after another; flow i's are
    /// `flat[starts[i]..starts[i + 1]]`.
    flat: Vec<usize>,
    starts: Vec<usize>,
    frozen: Vec<bool>,
}

impl<'a> SimState<'a> {
    pub fn new(instance: &'a Instance) -> Self {
        let e = instance.machine.engines;
        SimState {
            instance,
            now: 0.0,
            phases: vec![Phase::Idle; e],
            started_at: vec![0.0; e],
            flows: Vec::with_capacity(e),
            ran: vec![Vec::new(); e],
            rates_stale: false,
            scratch: RateScratch::default(),
            memo: None,
        }
    }

    /// Back to time zero with every engine idle, keeping the buffers.
    fn reset(&mut self) {
        self.now = 0.0;
        self.phases.fill(Phase::Idle);
        self.started_at.fill(0.0);
        self.flows.clear();
        for r in &mut self.ran {
            r.clear();
        }
        self.rates_stale = false;
    }

    /// The lowest-numbered engine waiting for a decision.
    pub fn idle_engine(&self) -> Option<usize> {
        self.phases.iter().position(|p| *p == Phase::Idle)
    }

    /// Engines still able to take work (not closed).
    pub fn open_engines(&self) -> usize {
        self.phases.iter().filter(|p| **p != Phase::Closed).count()
    }

    /// Starts `piece` on the idle `engine` now.
    pub fn assign(&mut self, engine: usize, piece: Piece) {
        debug_assert_eq!(self.phases[engine], Phase::Idle);
        self.started_at[engine] = self.now;
        let until = self.now + self.instance.machine.command_overhead_us;
        if self.instance.machine.command_overhead_us > 0.0 {
            self.phases[engine] = Phase::Overhead { until, piece };
        } else {
            self.start_flow(engine, piece);
        }
    }

    /// Declares that the idle `engine` takes no more commands.
    pub fn close(&mut self, engine: usize) {
        debug_assert_eq!(self.phases[engine], Phase::Idle);
        self.phases[engine] = Phase::Closed;
    }

    fn start_flow(&mut self, engine: usize, piece: Piece) {
        let links = self.instance.puts[piece.put].links;
        self.flows.push(Flow {
            engine,
            piece,
            remaining: piece.bytes as f64,
            rate: 0.0,
            end: f64::INFINITY,
            links,
        });
        self.phases[engine] = Phase::Flowing {
            flow: self.flows.len() - 1,
        };
        self.rates_stale = true;
    }

    /// The earliest `engine` can be done with the command it holds: the
    /// rest of its overhead, then its bytes left at the alone rate (no flow
    /// runs faster; `per_byte` is its inverse). `now` for an idle or closed
    /// engine.
    fn busy_floor(&self, engine: usize, per_byte: f64) -> f64 {
        match self.phases[engine] {
            Phase::Overhead { until, piece } => until + piece.bytes as f64 * per_byte,
            Phase::Flowing { flow } => self.now + self.flows[flow].remaining * per_byte,
            Phase::Idle | Phase::Closed => self.now,
        }
    }

    /// Work still under way: (engine, piece, bytes left, overhead left).
    pub fn in_progress(&self) -> impl Iterator<Item = (usize, Piece, f64, f64)> + '_ {
        self.phases
            .iter()
            .enumerate()
            .filter_map(move |(e, p)| match *p {
                Phase::Overhead { until, piece } => {
                    Some((e, piece, piece.bytes as f64, until - self.now))
                }
                Phase::Flowing { flow } => {
                    let f = &self.flows[flow];
                    Some((e, f.piece, f.remaining, 0.0))
                }
                _ => None,
            })
    }

    /// The flows' rates, remembered when this state has a memo.
    fn compute_rates(&mut self) {
        if self.memo.is_none() || self.flows.len() > MEMO_FLOWS {
            self.compute_rates_now();
        } else {
            self.compute_rates_remembered();
        }
        self.rates_stale = false;
    }

    /// The rates of the flows from the memo, computed and remembered when
    /// this sequence of flows has not been seen: the rates are a function
    /// of the flows' resources in flow order (the order fixes the
    /// arithmetic), and a search meets the same few sequences again and
    /// again.
    fn compute_rates_remembered(&mut self) {
        let mut key = MemoKey {
            len: self.flows.len(),
            ..MemoKey::default()
        };
        for (slot, flow) in key.flows.iter_mut().zip(&self.flows) {
            *slot = flow.resources();
        }
        let memo = self.memo.as_mut().expect("memoizing");
        if let Some(rates) = memo.rates.get(&key) {
            for (flow, &rate) in self.flows.iter_mut().zip(rates) {
                flow.rate = rate;
            }
            return;
        }
        self.compute_rates_now();
        let memo = self.memo.as_mut().expect("memoizing");
        if memo.rates.len() >= MEMO_ENTRIES {
            memo.rates.clear();
        }
        let mut rates = [0.0; MEMO_FLOWS];
        for (slot, flow) in rates.iter_mut().zip(&self.flows) {
            *slot = flow.rate;
        }
        memo.rates.insert(key, rates);
    }

    /// Max-min fair rates by progressive filling: the resource with the
    /// smallest fair share freezes its flows at that share, until every flow
    /// is frozen. The arithmetic (which resource, in which order capacity is
    /// taken) is that of a scan over every resource; only resources in use
    /// are visited.
    fn compute_rates_now(&mut self) {
        let inst = self.instance;
        let e = inst.machine.engines;
        // Resources: send engines [0, e), receive engines [e, 2e), links [2e, 2e+l), node.
        let node = 2 * e + inst.link_count;
        let s = &mut self.scratch;
        if s.users.len() != node + 1 {
            s.users = vec![0; node + 1];
            s.capacity = vec![0.0; node + 1];
        }
        s.touched.clear();
        s.flat.clear();
        s.starts.clear();
        for f in &self.flows {
            s.starts.push(s.flat.len());
            s.flat.push(f.engine);
            s.flat.push(e + f.piece.recv_engine);
            let mut links = f.links;
            while links != 0 {
                s.flat.push(2 * e + links.trailing_zeros() as usize);
                links &= links - 1;
            }
            s.flat.push(node);
        }
        s.starts.push(s.flat.len());
        for &r in &s.flat {
            if s.users[r] == 0 {
                s.touched.push(r);
                s.capacity[r] = match r {
                    r if r < 2 * e => inst.engine_rate(),
                    r if r < node => inst.link_rate(),
                    _ => inst.node_rate(),
                };
            }
            s.users[r] += 1;
        }
        s.frozen.clear();
        s.frozen.resize(self.flows.len(), false);
        let mut left = self.flows.len();
        while left > 0 {
            let (mut bottleneck, mut share) = (usize::MAX, f64::INFINITY);
            for &r in &s.touched {
                let u = s.users[r];
                if u > 0 {
                    let x = s.capacity[r].max(0.0) / u as f64;
                    // Ties go to the lowest resource, as in a scan of
                    // every resource in order.
                    if x < share || (x == share && r < bottleneck) {
                        (bottleneck, share) = (r, x);
                    }
                }
            }
            // Whether a flow uses the bottleneck, without listing its
            // resources: send engine, receive engine, a link bit, the node.
            let uses = |f: &Flow| match bottleneck {
                r if r < e => f.engine == r,
                r if r < 2 * e => f.piece.recv_engine == r - e,
                r if r < node => f.links & (1u64 << (r - 2 * e)) != 0,
                _ => true,
            };
            for (i, flow) in self.flows.iter_mut().enumerate() {
                if s.frozen[i] || !uses(flow) {
                    continue;
                }
                s.frozen[i] = true;
                left -= 1;
                flow.rate = share;
                for &r in &s.flat[s.starts[i]..s.starts[i + 1]] {
                    s.capacity[r] -= share;
                    s.users[r] -= 1;
                }
            }
        }
    }

    /// Runs until an engine needs a decision. Returns false when nothing is
    /// left to run (every engine closed or idle with no work under way).
    /// Every idle engine must have been decided before calling.
    pub fn advance(&mut self) -> bool {
        debug_assert!(self.idle_engine().is_none());
        loop {
            // The first overhead to end (infinite when none is under way).
            let mut overhead_ends = f64::INFINITY;
            for p in &self.phases {
                if let Phase::Overhead { until, .. } = *p {
                    overhead_ends = overhead_ends.min(until);
                }
            }
            if self.flows.is_empty() && overhead_ends == f64::INFINITY {
                return false;
            }
            if self.rates_stale {
                self.compute_rates();
            }
            let mut next = overhead_ends;
            for f in &mut self.flows {
                f.end = self.now + f.remaining / f.rate;
                next = next.min(f.end);
            }
            let dt = next - self.now;
            for f in &mut self.flows {
                // A flow that ends at `next` is finished outright: where
                // `now` is large, `remaining / rate` can vanish below its
                // precision, and subtracting would never reach zero.
                if f.end <= next {
                    f.remaining = 0.0;
                } else {
                    f.remaining -= f.rate * dt;
                }
            }
            self.now = next;
            let mut decision = false;
            // Finished flows free their engine.
            let mut i = 0;
            while i < self.flows.len() {
                if self.flows[i].remaining <= DONE_BYTES.max(self.flows[i].rate * 1e-12) {
                    let f = self.flows.swap_remove(i);
                    self.ran[f.engine].push(Ran {
                        piece: f.piece,
                        start_us: self.started_at[f.engine],
                        end_us: self.now,
                    });
                    self.phases[f.engine] = Phase::Idle;
                    if i < self.flows.len() {
                        let moved = self.flows[i].engine;
                        self.phases[moved] = Phase::Flowing { flow: i };
                    }
                    self.rates_stale = true;
                    decision = true;
                } else {
                    i += 1;
                }
            }
            let overheads_ended = if overhead_ends <= self.now {
                self.phases.len()
            } else {
                0
            };
            for engine in 0..overheads_ended {
                if let Phase::Overhead { until, piece } = self.phases[engine] {
                    if until <= self.now {
                        self.start_flow(engine, piece);
                    }
                }
            }
            if decision {
                return true;
            }
        }
    }

    /// The makespan so far: the last end plus the fixed overhead.
    pub fn makespan(&self) -> f64 {
        let last = self
            .ran
            .iter()
            .flat_map(|r| r.iter().map(|c| c.end_us))
            .fold(0.0, f64::max);
        last + self.instance.machine.fixed_overhead_us
    }
}

/// Runs engine lists to completion; returns what ran and the makespan.
pub(crate) fn run_lists(instance: &Instance, lists: &[Vec<Piece>]) -> (Vec<Vec<Ran>>, f64) {
    // One run: a memo would only cost its allocations.
    let mut runner = Runner::once(instance);
    let makespan = runner.run(lists);
    (runner.into_ran(), makespan)
}

/// The outcome of simulating a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Simulation {
    /// Last byte delivered plus the fixed overhead, microseconds.
    pub makespan_us: f64,
    /// Per engine, each command's simulated (start, end), in posting order.
    pub times_us: Vec<Vec<(f64, f64)>>,
}

/// Simulates `plan` running `pattern` (the plan is checked to cover the
/// pattern first).
///
/// # Errors
///
/// The errors of [`Pattern::validate`](crate::Pattern::validate);
/// [`SchedError`](crate::SchedError)`::InvalidPlan` when `plan` does not cover `pattern`.
pub fn simulate(pattern: &crate::Pattern, plan: &crate::Plan) -> crate::Result<Simulation> {
    let instance = Instance::new(pattern)?;
    plan.validate_coverage(&instance)?;
    let lists = plan.lists(&instance)?;
    let (ran, makespan_us) = run_lists(&instance, &lists);
    Ok(Simulation {
        makespan_us,
        times_us: ran
            .into_iter()
            .map(|l| l.into_iter().map(|r| (r.start_us, r.end_us)).collect())
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Machine;
    use crate::patterns::{random, SplitMix64};

    /// Progressive filling as first written: every resource scanned in
    /// index order each round, the first smallest share the bottleneck.
    fn reference_rates(instance: &Instance, flows: &[Flow]) -> Vec<f64> {
        let e = instance.machine.engines;
        let node = 2 * e + instance.link_count;
        let resources = |f: &Flow| {
            let mut out = vec![f.engine, e + f.piece.recv_engine];
            out.extend(
                (0..64)
                    .filter(|l| f.links & (1 << l) != 0)
                    .map(|l| 2 * e + l),
            );
            out.push(node);
            out
        };
        let mut capacity = vec![instance.engine_rate(); 2 * e];
        capacity.extend(vec![instance.link_rate(); instance.link_count]);
        capacity.push(instance.node_rate());
        let mut users = vec![0usize; node + 1];
        for f in flows {
            resources(f).iter().for_each(|&r| users[r] += 1);
        }
        let mut rates = vec![None; flows.len()];
        while rates.iter().any(Option::is_none) {
            let (mut bottleneck, mut share) = (usize::MAX, f64::INFINITY);
            for (r, &u) in users.iter().enumerate().filter(|(_, &u)| u > 0) {
                let x = capacity[r].max(0.0) / u as f64;
                if x < share {
                    (bottleneck, share) = (r, x);
                }
            }
            for (f, rate) in flows.iter().zip(rates.iter_mut()) {
                let mine = resources(f);
                if rate.is_none() && mine.contains(&bottleneck) {
                    *rate = Some(share);
                    for r in mine {
                        capacity[r] -= share;
                        users[r] -= 1;
                    }
                }
            }
        }
        rates.into_iter().map(|r| r.expect("frozen")).collect()
    }

    /// The rate computation (resources in first-use order, ties to the
    /// lowest) gives the reference's rates bit for bit, on the flows of
    /// random pieces, machines of 4, 6 and 64 engines.
    #[test]
    fn rates_are_progressive_filling_bit_for_bit() {
        let mut rng = SplitMix64::new(3);
        let wide = Machine {
            engines: 64,
            ..Machine::K_COMPUTER
        };
        for seed in 0..300 {
            let machine = [Machine::K_COMPUTER, Machine::TOFU_D, wide][seed as usize % 3];
            let pattern = random(2 + seed as usize % 30, seed, machine).expect("pattern");
            let instance = Instance::new(&pattern).expect("instance");
            let mut state = SimState::new(&instance);
            for engine in 0..machine.engines {
                if rng.below(5) == 0 {
                    continue;
                }
                let put = rng.below(instance.puts.len() as u64) as usize;
                let recv = rng.below(machine.engines as u64) as usize;
                state.start_flow(engine, Piece::whole(&instance, put, recv));
            }
            state.compute_rates_now();
            let rates: Vec<u64> = state.flows.iter().map(|f| f.rate.to_bits()).collect();
            let reference: Vec<u64> = reference_rates(&instance, &state.flows)
                .into_iter()
                .map(f64::to_bits)
                .collect();
            assert_eq!(rates, reference, "seed {seed}");
            assert!(state.flows.iter().all(|f| f.rate > 0.0), "seed {seed}");
        }
    }
}
