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
}

#[derive(Debug, Clone, Default)]
struct RateScratch {
    capacity: Vec<f64>,
    users: Vec<usize>,
    frozen: Vec<bool>,
    resources: Vec<usize>,
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
        }
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
        self.flows.push(Flow {
            engine,
            piece,
            remaining: piece.bytes as f64,
            rate: 0.0,
            links: self.instance.puts[piece.put].links,
        });
        self.phases[engine] = Phase::Flowing {
            flow: self.flows.len() - 1,
        };
        self.rates_stale = true;
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

    /// Max-min fair rates by progressive filling.
    fn compute_rates(&mut self) {
        let inst = self.instance;
        let e = inst.machine.engines;
        let l = inst.link_count;
        // Resources: send engines [0, e), receive engines [e, 2e), links [2e, 2e+l), node.
        let node = 2 * e + l;
        let RateScratch {
            capacity,
            users,
            frozen,
            resources: scratch,
        } = &mut self.scratch;
        capacity.clear();
        capacity.resize(node + 1, 0.0);
        capacity[..2 * e].fill(inst.engine_rate());
        capacity[2 * e..node].fill(inst.link_rate());
        capacity[node] = inst.node_rate();
        let n = self.flows.len();
        frozen.clear();
        frozen.resize(n, false);
        users.clear();
        users.resize(node + 1, 0);
        let resources = |f: &Flow, out: &mut Vec<usize>| {
            out.clear();
            out.push(f.engine);
            out.push(e + f.piece.recv_engine);
            let mut links = f.links;
            while links != 0 {
                out.push(2 * e + links.trailing_zeros() as usize);
                links &= links - 1;
            }
            out.push(node);
        };
        // Users per resource among the flows not yet frozen: counted once,
        // then decremented as flows freeze (what recounting each round
        // would give).
        for f in &self.flows {
            resources(f, scratch);
            for &r in scratch.iter() {
                users[r] += 1;
            }
        }
        let mut left = n;
        while left > 0 {
            let (bottleneck, share) = users
                .iter()
                .enumerate()
                .filter(|(_, &u)| u > 0)
                .map(|(r, &u)| (r, capacity[r].max(0.0) / u as f64))
                .fold((usize::MAX, f64::INFINITY), |best, x| {
                    if x.1 < best.1 {
                        x
                    } else {
                        best
                    }
                });
            // Whether a flow uses the bottleneck, without listing its
            // resources: send engine, receive engine, a link bit, the node.
            let uses = |f: &Flow| match bottleneck {
                r if r < e => f.engine == r,
                r if r < 2 * e => f.piece.recv_engine == r - e,
                r if r < node => f.links & (1u64 << (r - 2 * e)) != 0,
                _ => true,
            };
            for (flow, is_frozen) in self.flows.iter_mut().zip(frozen.iter_mut()) {
                if *is_frozen || !uses(flow) {
                    continue;
                }
                resources(flow, scratch);
                *is_frozen = true;
                left -= 1;
                flow.rate = share;
                for &r in scratch.iter() {
                    capacity[r] -= share;
                    users[r] -= 1;
                }
            }
        }
        self.rates_stale = false;
    }

    /// Runs until an engine needs a decision. Returns false when nothing is
    /// left to run (every engine closed or idle with no work under way).
    /// Every idle engine must have been decided before calling.
    pub fn advance(&mut self) -> bool {
        debug_assert!(self.idle_engine().is_none());
        loop {
            if self.flows.is_empty()
                && !self
                    .phases
                    .iter()
                    .any(|p| matches!(p, Phase::Overhead { .. }))
            {
                return false;
            }
            if self.rates_stale {
                self.compute_rates();
            }
            let mut next = f64::INFINITY;
            for p in &self.phases {
                if let Phase::Overhead { until, .. } = *p {
                    next = next.min(until);
                }
            }
            for f in &self.flows {
                next = next.min(self.now + f.remaining / f.rate);
            }
            let dt = next - self.now;
            for f in &mut self.flows {
                // A flow that ends at `next` is finished outright: where
                // `now` is large, `remaining / rate` can vanish below its
                // precision, and subtracting would never reach zero.
                if self.now + f.remaining / f.rate <= next {
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
            for engine in 0..self.phases.len() {
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
    run_lists_within(instance, lists, f64::INFINITY).expect("an unbounded run always finishes")
}

/// [`run_lists`], given up (`None`) as soon as the simulated clock passes
/// `bound`: the makespan is then certain to exceed `bound` plus the fixed
/// overhead, so a search comparing against a known makespan need not
/// finish the run.
pub(crate) fn run_lists_within(
    instance: &Instance,
    lists: &[Vec<Piece>],
    bound: f64,
) -> Option<(Vec<Vec<Ran>>, f64)> {
    let mut state = SimState::new(instance);
    let mut cursor = vec![0usize; instance.machine.engines];
    loop {
        while let Some(e) = state.idle_engine() {
            match lists.get(e).and_then(|l| l.get(cursor[e])) {
                Some(&piece) => {
                    cursor[e] += 1;
                    state.assign(e, piece);
                }
                None => state.close(e),
            }
        }
        if !state.advance() {
            break;
        }
        if state.now > bound {
            return None;
        }
    }
    let makespan = state.makespan();
    Some((state.ran, makespan))
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
