//! The scheduling algorithms and the one entry point that runs them.

mod exact;
mod greedy;
mod packing;
mod refine;
mod round_robin;

use crate::error::{Result, SchedError};
use crate::instance::{Instance, Piece};
use crate::pattern::Pattern;
use crate::plan::{assemble, timed_by, Constraints, Plan, Timed};
use crate::simulate::Runner;
use packing::{bottom_left, Rules};
use std::fmt;
use std::str::FromStr;

pub use exact::MAX_REQUESTS as EXACT_MAX_REQUESTS;

/// Patterns larger than this skip the simulator-guided candidates in `auto`
/// (their cost grows with the square of the pattern).
pub const AUTO_SIMULATED_CANDIDATES_MAX: usize = 64;

/// The most puts the bottom-left packers (`bl:K`, `bl-overhead`,
/// `bl-share`) and `greedy` plan: their work grows with the square of the
/// pattern (about 8 s for `bl:1` at this size on a 2 GHz core). Larger
/// patterns get [`SchedError::TooLargeForHeuristic`] from them, and `auto`
/// and `split` start from the round-robin plans instead.
pub const QUADRATIC_MAX_PUTS: usize = 16_384;

/// A scheduling algorithm, by its command-line name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// `round-robin:K`: request i on engine i mod K, input order (the paper's RoundRobin(K)).
    RoundRobin(usize),
    /// `bl:K`: the paper's BLbased(K): bottom-left packing, length descending
    /// then direction, no two commands on one link at once, at most K
    /// diagonal commands in flight.
    BottomLeft(usize),
    /// `bl-overhead`: rectangles include the per-command overhead, and puts
    /// shorter than that overhead fill the least-loaded engines regardless of
    /// links (the paper's section 5 proposal, made concrete).
    BottomLeftOverhead,
    /// `bl-share`: bottom-left packing that lets c puts share a link when c
    /// engines are needed to fill it (c = ceil(link / engine bandwidth)).
    BottomLeftShare,
    /// `greedy`: longest first, each put on the engine where the simulated
    /// exchange ends soonest.
    Greedy,
    /// `split`: local search from the best of the packing heuristics: move a
    /// put elsewhere, or cut it in two over two engines, while the simulated
    /// exchange ends sooner.
    Split,
    /// `exact`: branch and bound over the simulator's semantics, puts whole;
    /// for patterns of at most [`EXACT_MAX_REQUESTS`] puts.
    Exact,
    /// `auto`: the best of every heuristic by simulated makespan; never worse
    /// than any of the paper's algorithms.
    Auto,
}

impl Algorithm {
    /// The paper's six algorithms (for a machine with at least 4 engines).
    pub const PAPER: [Algorithm; 6] = [
        Algorithm::RoundRobin(1),
        Algorithm::RoundRobin(2),
        Algorithm::RoundRobin(4),
        Algorithm::BottomLeft(1),
        Algorithm::BottomLeft(2),
        Algorithm::BottomLeft(4),
    ];

    /// The paper's algorithms that fit a machine with `engines` engines, and
    /// the same two families at the full engine count.
    pub fn paper_for(engines: usize) -> Vec<Algorithm> {
        let mut ks: Vec<usize> = [1, 2, 4].into_iter().filter(|&k| k <= engines).collect();
        if !ks.contains(&engines) {
            ks.push(engines);
        }
        let mut out: Vec<Algorithm> = ks.iter().map(|&k| Algorithm::RoundRobin(k)).collect();
        out.extend(ks.iter().map(|&k| Algorithm::BottomLeft(k)));
        out
    }

    /// The heuristics `auto` runs for a pattern of `requests` puts before it
    /// refines the best of them with `split` (up to
    /// [`AUTO_SIMULATED_CANDIDATES_MAX`] puts); beyond
    /// [`QUADRATIC_MAX_PUTS`], the round-robin ones only.
    pub fn auto_candidates(engines: usize, requests: usize) -> Vec<Algorithm> {
        let mut out = Self::paper_for(engines);
        out.extend([Algorithm::BottomLeftOverhead, Algorithm::BottomLeftShare]);
        if requests <= AUTO_SIMULATED_CANDIDATES_MAX {
            out.push(Algorithm::Greedy);
        }
        Self::within_size(out, requests)
    }

    /// Whether its work grows with the square of the pattern.
    fn quadratic(self) -> bool {
        matches!(
            self,
            Algorithm::BottomLeft(_)
                | Algorithm::BottomLeftOverhead
                | Algorithm::BottomLeftShare
                | Algorithm::Greedy
        )
    }

    /// `candidates` without those too slow for `requests` puts.
    fn within_size(mut candidates: Vec<Algorithm>, requests: usize) -> Vec<Algorithm> {
        if requests > QUADRATIC_MAX_PUTS {
            candidates.retain(|a| !a.quadratic());
        }
        candidates
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Algorithm::RoundRobin(k) => write!(f, "round-robin:{k}"),
            Algorithm::BottomLeft(k) => write!(f, "bl:{k}"),
            Algorithm::BottomLeftOverhead => f.write_str("bl-overhead"),
            Algorithm::BottomLeftShare => f.write_str("bl-share"),
            Algorithm::Greedy => f.write_str("greedy"),
            Algorithm::Split => f.write_str("split"),
            Algorithm::Exact => f.write_str("exact"),
            Algorithm::Auto => f.write_str("auto"),
        }
    }
}

impl FromStr for Algorithm {
    type Err = SchedError;
    fn from_str(s: &str) -> Result<Self> {
        let unknown = || SchedError::UnknownAlgorithm(s.to_string());
        let lower = s.trim().to_ascii_lowercase();
        if let Some((family, k)) = lower.split_once(':') {
            let k: usize = k.parse().map_err(|_| unknown())?;
            if k == 0 {
                return Err(unknown());
            }
            return match family {
                "round-robin" | "rr" => Ok(Algorithm::RoundRobin(k)),
                "bl" | "blbased" => Ok(Algorithm::BottomLeft(k)),
                _ => Err(unknown()),
            };
        }
        match lower.as_str() {
            "bl-overhead" => Ok(Algorithm::BottomLeftOverhead),
            "bl-share" => Ok(Algorithm::BottomLeftShare),
            "greedy" => Ok(Algorithm::Greedy),
            "split" => Ok(Algorithm::Split),
            "exact" => Ok(Algorithm::Exact),
            "auto" => Ok(Algorithm::Auto),
            _ => Err(unknown()),
        }
    }
}

/// Plans `pattern` with `algorithm`: a pure function of both.
///
/// # Errors
///
/// [`SchedError::InvalidMachine`](crate::SchedError::InvalidMachine), [`SchedError::EmptyPattern`](crate::SchedError::EmptyPattern) or
/// [`SchedError::InvalidRequest`](crate::SchedError::InvalidRequest) for a pattern that does not validate;
/// [`SchedError::TooLargeForExact`](crate::SchedError::TooLargeForExact) or [`SchedError::ExactBudgetExhausted`](crate::SchedError::ExactBudgetExhausted)
/// from [`Algorithm::Exact`](crate::Algorithm::Exact).
pub fn plan(pattern: &Pattern, algorithm: Algorithm) -> Result<Plan> {
    let instance = Instance::new(pattern)?;
    plan_instance(&instance, algorithm)
}

fn plan_instance(instance: &Instance, algorithm: Algorithm) -> Result<Plan> {
    // One simulator for every run the planning makes; the searches, which
    // make hundreds, also remember rates across them.
    let searches = match algorithm {
        Algorithm::Greedy | Algorithm::Split | Algorithm::Exact => true,
        Algorithm::Auto => instance.puts.len() <= AUTO_SIMULATED_CANDIDATES_MAX,
        _ => false,
    };
    let mut runner = if searches {
        Runner::new(instance)
    } else {
        Runner::once(instance)
    };
    if let Some(c) = candidate(&mut runner, algorithm)? {
        return Ok(c.assemble(&mut runner));
    }
    if algorithm == Algorithm::Split {
        let engines = instance.machine.engines;
        let candidates =
            Algorithm::within_size(Algorithm::auto_candidates(engines, 0), instance.puts.len());
        let start = best_of(&mut runner, &candidates)?;
        return refined(&mut runner, &algorithm.to_string(), &start);
    }
    auto(&mut runner)
}

/// An algorithm's engine lists, timed as the algorithm predicts, before
/// they become a plan.
#[derive(Debug)]
struct Candidate {
    algorithm: Algorithm,
    timed: Vec<Vec<Timed>>,
    constraints: Constraints,
    /// The simulated makespan, once known.
    simulated: Option<f64>,
}

impl Candidate {
    fn new(algorithm: Algorithm, timed: Vec<Vec<Timed>>, constraints: Constraints) -> Self {
        Candidate {
            algorithm,
            timed,
            constraints,
            simulated: None,
        }
    }

    /// Lists timed by the simulator itself, whose makespan is known.
    fn simulated(algorithm: Algorithm, (timed, makespan): (Vec<Vec<Timed>>, f64)) -> Self {
        Candidate {
            simulated: Some(makespan),
            ..Candidate::new(algorithm, timed, Constraints::default())
        }
    }

    fn simulated_us(&mut self, runner: &mut Runner<'_>) -> f64 {
        self.simulated_within(runner, f64::INFINITY)
            .expect("an unbounded run always finishes")
    }

    /// The simulated makespan, or `None` when the run's clock passes
    /// `bound` (the makespan is then above `bound` plus the fixed overhead).
    fn simulated_within(&mut self, runner: &mut Runner<'_>, bound: f64) -> Option<f64> {
        if self.simulated.is_none() {
            let lists: Vec<Vec<Piece>> = self
                .timed
                .iter()
                .map(|l| l.iter().map(|t| t.0).collect())
                .collect();
            self.simulated = Some(runner.run_within(&lists, bound)?);
        }
        self.simulated
    }

    fn assemble(mut self, runner: &mut Runner<'_>) -> Plan {
        let simulated = self.simulated_us(runner);
        assemble(
            runner.instance(),
            &self.algorithm.to_string(),
            self.timed,
            self.constraints,
            simulated,
        )
    }
}

/// The engine lists of `algorithm`; `None` for the searches over the
/// others (`split` and `auto`).
fn candidate(runner: &mut Runner<'_>, algorithm: Algorithm) -> Result<Option<Candidate>> {
    let instance = runner.instance();
    let engines = instance.machine.engines;
    if let Algorithm::RoundRobin(k) | Algorithm::BottomLeft(k) = algorithm {
        if k > engines {
            return Err(SchedError::TooManyEngines {
                algorithm: algorithm.to_string(),
                wanted: k,
                available: engines,
            });
        }
    }
    if algorithm.quadratic() && instance.puts.len() > QUADRATIC_MAX_PUTS {
        return Err(SchedError::TooLargeForHeuristic {
            algorithm: algorithm.to_string(),
            requests: instance.puts.len(),
            limit: QUADRATIC_MAX_PUTS,
        });
    }
    if let Some((rules, constraints)) = packing(instance, algorithm) {
        let timed = bottom_left(instance, &instance.longest_first, &rules);
        return Ok(Some(Candidate::new(algorithm, timed, constraints)));
    }
    Ok(Some(match algorithm {
        Algorithm::RoundRobin(k) => Candidate::new(
            algorithm,
            round_robin::round_robin(instance, k),
            Constraints::default(),
        ),
        Algorithm::Greedy => {
            let lists = greedy::greedy(runner, &instance.longest_first);
            Candidate::simulated(algorithm, timed_by(runner, &lists))
        }
        Algorithm::Exact => {
            let lists = exact_lists(runner)?;
            Candidate::simulated(algorithm, timed_by(runner, &lists))
        }
        _ => return Ok(None),
    }))
}

/// The bottom-left packers' rules and the constraints their plans promise,
/// for the algorithms that are bottom-left packings.
fn packing(instance: &Instance, algorithm: Algorithm) -> Option<(Rules, Constraints)> {
    let engines = instance.machine.engines;
    let rules = Rules {
        engines,
        link_share: 1,
        diagonal_limit: engines,
        with_overhead: true,
        assumed_sharing: 1,
        small_puts_fill: false,
    };
    Some(match algorithm {
        Algorithm::BottomLeft(k) => (
            Rules {
                diagonal_limit: k,
                with_overhead: false,
                ..rules
            },
            Constraints {
                link_share: Some(1),
                diagonal_in_flight: Some(k),
            },
        ),
        Algorithm::BottomLeftOverhead => (
            Rules {
                small_puts_fill: true,
                ..rules
            },
            Constraints::default(),
        ),
        Algorithm::BottomLeftShare => {
            let c = instance.machine.link_fill_count();
            (
                Rules {
                    link_share: c,
                    assumed_sharing: c,
                    ..rules
                },
                Constraints {
                    link_share: Some(c),
                    diagonal_in_flight: None,
                },
            )
        }
        _ => return None,
    })
}

/// Branch and bound from the greedy plan, for small patterns.
fn exact_lists(runner: &mut Runner<'_>) -> Result<Vec<Vec<Piece>>> {
    let instance = runner.instance();
    let n = instance.puts.len();
    if n > EXACT_MAX_REQUESTS {
        return Err(SchedError::TooLargeForExact {
            requests: n,
            limit: EXACT_MAX_REQUESTS,
        });
    }
    let incumbent = greedy::greedy(runner, &instance.longest_first);
    exact::exact(instance, &incumbent)
}

/// The best of every candidate by simulated makespan, refined by local
/// search when the pattern is small enough.
fn auto(runner: &mut Runner<'_>) -> Result<Plan> {
    let instance = runner.instance();
    let n = instance.puts.len();
    let engines = instance.machine.engines;
    let mut best = best_of(runner, &Algorithm::auto_candidates(engines, n))?;
    if n <= AUTO_SIMULATED_CANDIDATES_MAX {
        let split = refined(runner, "split", &best)?;
        if split.simulated_us < best.simulated_us - 1e-9 {
            best = split;
        }
    }
    best.algorithm = format!("auto={}", best.algorithm);
    Ok(best)
}

/// The plan of `candidates` that the simulator finds fastest (the first on
/// ties). Only that one is assembled into a plan.
fn best_of(runner: &mut Runner<'_>, candidates: &[Algorithm]) -> Result<Plan> {
    let fixed = runner.instance().machine.fixed_overhead_us;
    let mut best: Option<(f64, Candidate)> = None;
    for &algorithm in candidates {
        let Some(mut c) = candidate(runner, algorithm)? else {
            continue;
        };
        // A run that passes the best makespan so far (less the fixed
        // overhead) cannot win: it is given up there.
        let bound = best.as_ref().map_or(f64::INFINITY, |(b, _)| b - fixed);
        let Some(simulated) = c.simulated_within(runner, bound) else {
            continue;
        };
        if best.as_ref().is_none_or(|(b, _)| simulated < b - 1e-9) {
            best = Some((simulated, c));
        }
    }
    let (_, best) = best.expect("at least one candidate");
    Ok(best.assemble(runner))
}

/// `start` improved by local search with splitting.
fn refined(runner: &mut Runner<'_>, name: &str, start: &Plan) -> Result<Plan> {
    let instance = runner.instance();
    let lists = refine::refine(runner, start.lists(instance)?, true);
    let (timed, simulated) = timed_by(runner, &lists);
    Ok(assemble(
        instance,
        name,
        timed,
        Constraints::default(),
        simulated,
    ))
}
