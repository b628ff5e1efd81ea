//! Plans: per engine, the ordered command list, with predicted times.

use crate::bound::lower_bound_of;
use crate::error::{Result, SchedError};
use crate::instance::{Instance, Piece};
use crate::pattern::Pattern;
use serde::{Deserialize, Serialize};

/// One command of a plan: a whole put, or a piece of one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Command {
    /// The request this command writes (all of it, or the piece below).
    pub id: u32,
    /// The destination's receive engine.
    pub recv_engine: usize,
    /// Predicted start, microseconds from the start of the exchange.
    pub start_us: f64,
    /// Predicted end.
    pub end_us: f64,
    /// For a piece of a split put: where the piece starts in the put.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// For a piece of a split put: its length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// What an algorithm promises about its plan; [`Plan::validate`] checks it
/// against the plan's predicted times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Constraints {
    /// At most this many commands on one link at overlapping times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_share: Option<usize>,
    /// At most this many diagonal commands at overlapping times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagonal_in_flight: Option<usize>,
}

/// A schedule of an exchange's puts onto the node's engines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The algorithm that made it, as named on the command line.
    pub algorithm: String,
    /// Predicted makespan: the last predicted end plus the fixed overhead.
    pub makespan_us: f64,
    /// The lower bound for this kind of plan (with or without split puts).
    pub lower_bound_us: f64,
    /// The flow-level simulator's makespan for this plan.
    pub simulated_us: f64,
    /// The algorithm's promises.
    #[serde(default)]
    pub constraints: Constraints,
    /// `engines[e]` is engine e's command list, in posting order.
    pub engines: Vec<Vec<Command>>,
}

/// Time slack for comparing predicted times.
const EPS: f64 = 1e-6;

impl Plan {
    /// Parses a plan from JSON (not yet checked against a pattern).
    ///
    /// # Errors
    ///
    /// [`SchedError::Json`](crate::SchedError::Json) when `text` is not a plan.
    pub fn from_json(text: &str) -> Result<Plan> {
        serde_json::from_str(text).map_err(|e| SchedError::Json {
            what: "plan",
            detail: e.to_string(),
        })
    }

    /// The plan as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a plan always serialises")
    }

    /// True when some put is split into pieces.
    pub fn splits_puts(&self) -> bool {
        self.engines.iter().flatten().any(|c| c.offset.is_some())
    }

    /// Checks the plan against its pattern: every byte of every request is
    /// written exactly once; engines and receive engines exist; each engine's
    /// commands follow one another (FIFO); no two commands use the same
    /// receive engine at overlapping times; and the algorithm's own
    /// constraints (link sharing, diagonals in flight) hold.
    ///
    /// # Errors
    ///
    /// The errors of [`Pattern::validate`](crate::Pattern::validate); [`SchedError::InvalidPlan`](crate::SchedError::InvalidPlan) naming
    /// the first constraint the plan breaks.
    pub fn validate(&self, pattern: &Pattern) -> Result<()> {
        let instance = Instance::new(pattern)?;
        self.validate_coverage(&instance)?;
        let pieces = self.pieces(&instance)?;
        let bad = |m: String| Err(SchedError::InvalidPlan(m));
        // Times: finite, ordered, FIFO per engine.
        for (e, list) in self.engines.iter().enumerate() {
            let mut previous_end = 0.0f64;
            for c in list {
                if !(c.start_us.is_finite()
                    && c.end_us.is_finite()
                    && c.start_us >= -EPS
                    && c.end_us >= c.start_us)
                {
                    return bad(format!(
                        "engine {e}, request {}: times {}..{} are not a valid interval",
                        c.id, c.start_us, c.end_us
                    ));
                }
                if c.start_us + EPS < previous_end {
                    return bad(format!(
                        "engine {e}, request {}: starts at {:.3} us before the previous command ends at {:.3} us (an engine runs its list in order)",
                        c.id, c.start_us, previous_end
                    ));
                }
                previous_end = c.end_us;
            }
        }
        let overlap =
            |a: &Command, b: &Command| a.start_us + EPS < b.end_us && b.start_us + EPS < a.end_us;
        let flat: Vec<(usize, &Command, Piece)> = pieces
            .iter()
            .map(|(e, p, i)| (*e, &self.engines[*e][*i], *p))
            .collect();
        for (i, (ea, a, _)) in flat.iter().enumerate() {
            for (eb, b, _) in &flat[i + 1..] {
                if ea != eb && a.recv_engine == b.recv_engine && overlap(a, b) {
                    return bad(format!(
                        "requests {} (engine {ea}) and {} (engine {eb}) use receive engine {} at overlapping times",
                        a.id, b.id, a.recv_engine
                    ));
                }
            }
        }
        // The algorithm's own promises, checked at every command start.
        for (_, a, pa) in &flat {
            let at = a.start_us;
            let active: Vec<&(usize, &Command, Piece)> = flat
                .iter()
                .filter(|(_, b, _)| {
                    b.start_us <= at + EPS && at + EPS < b.end_us && b.end_us > b.start_us + EPS
                })
                .collect();
            if let Some(limit) = self.constraints.link_share {
                let links = instance.puts[pa.put].links;
                for l in 0..instance.link_count {
                    if links & (1 << l) == 0 {
                        continue;
                    }
                    let n = active
                        .iter()
                        .filter(|(_, _, p)| instance.puts[p.put].links & (1 << l) != 0)
                        .count();
                    if n > limit {
                        return bad(format!(
                            "{n} commands share a link at {at:.3} us (request {} among them); the algorithm allows {limit}",
                            a.id
                        ));
                    }
                }
            }
            if let Some(limit) = self.constraints.diagonal_in_flight {
                let n = active
                    .iter()
                    .filter(|(_, _, p)| instance.puts[p.put].diagonal)
                    .count();
                if instance.puts[pa.put].diagonal && n > limit {
                    return bad(format!(
                        "{n} diagonal commands in flight at {at:.3} us; the algorithm allows {limit}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every byte of every request written exactly once, by existing engines.
    pub(crate) fn validate_coverage(&self, instance: &Instance) -> Result<()> {
        let pieces = self.pieces(instance)?;
        let bad = |m: String| Err(SchedError::InvalidPlan(m));
        // Coverage: sort each request's pieces by offset; they must tile [0, bytes).
        let mut by_put: Vec<Vec<(u64, u64)>> = vec![Vec::new(); instance.puts.len()];
        for (_, p, _) in &pieces {
            by_put[p.put].push((p.offset, p.bytes));
        }
        for (i, ranges) in by_put.iter_mut().enumerate() {
            let put = &instance.puts[i];
            ranges.sort_unstable();
            let mut next = 0u64;
            for &(offset, bytes) in ranges.iter() {
                if offset != next {
                    return bad(format!(
                        "request {}: bytes {}..{} are {}",
                        put.id,
                        next.min(offset),
                        next.max(offset),
                        if offset > next {
                            "never written"
                        } else {
                            "written twice"
                        }
                    ));
                }
                next = offset + bytes;
            }
            if next != put.bytes {
                return bad(format!(
                    "request {}: the plan writes {next} of its {} bytes",
                    put.id, put.bytes
                ));
            }
        }
        Ok(())
    }

    /// Resolves every command to (engine, piece, index in the engine list).
    pub(crate) fn pieces(&self, instance: &Instance) -> Result<Vec<(usize, Piece, usize)>> {
        let engines = instance.machine.engines;
        if self.engines.len() > engines {
            return Err(SchedError::InvalidPlan(format!(
                "the plan uses {} engines but the machine has {engines}",
                self.engines.len()
            )));
        }
        let mut out = Vec::new();
        for (e, list) in self.engines.iter().enumerate() {
            for (i, c) in list.iter().enumerate() {
                let Some(put) = instance.puts.iter().position(|p| p.id == c.id) else {
                    return Err(SchedError::InvalidPlan(format!(
                        "engine {e} names request {}, which the pattern does not have",
                        c.id
                    )));
                };
                if c.recv_engine >= engines {
                    return Err(SchedError::InvalidPlan(format!(
                        "request {}: receive engine {} does not exist (the machine has {engines})",
                        c.id, c.recv_engine
                    )));
                }
                let whole = instance.puts[put].bytes;
                let offset = c.offset.unwrap_or(0);
                let bytes = c.bytes.unwrap_or(whole.saturating_sub(offset));
                if bytes == 0 || offset.checked_add(bytes).is_none_or(|end| end > whole) {
                    return Err(SchedError::InvalidPlan(format!(
                        "request {}: piece at offset {offset} of {bytes} bytes does not fit its {whole} bytes",
                        c.id
                    )));
                }
                out.push((
                    e,
                    Piece {
                        put,
                        offset,
                        bytes,
                        recv_engine: c.recv_engine,
                    },
                    i,
                ));
            }
        }
        Ok(out)
    }

    /// The engine lists of the plan, as the simulator takes them.
    pub(crate) fn lists(&self, instance: &Instance) -> Result<Vec<Vec<Piece>>> {
        let mut lists = vec![Vec::new(); instance.machine.engines];
        for (e, piece, _) in self.pieces(instance)? {
            lists[e].push(piece);
        }
        Ok(lists)
    }
}

/// Predicted times of one piece.
pub(crate) type Timed = (Piece, f64, f64);

/// Builds a plan from per-engine timed pieces and their simulated makespan;
/// fills in the lower bound.
pub(crate) fn assemble(
    instance: &Instance,
    algorithm: &str,
    timed: Vec<Vec<Timed>>,
    constraints: Constraints,
    simulated: f64,
) -> Plan {
    let split = timed
        .iter()
        .flatten()
        .any(|(p, _, _)| p.bytes != instance.puts[p.put].bytes);
    let bound = lower_bound_of(instance);
    let last = timed.iter().flatten().map(|t| t.2).fold(0.0, f64::max);
    let mut engines: Vec<Vec<Command>> = timed
        .into_iter()
        .map(|list| {
            list.into_iter()
                .map(|(p, start, end)| {
                    let whole = p.bytes == instance.puts[p.put].bytes;
                    Command {
                        id: instance.puts[p.put].id,
                        recv_engine: p.recv_engine,
                        start_us: start,
                        end_us: end,
                        offset: (!whole).then_some(p.offset),
                        bytes: (!whole).then_some(p.bytes),
                    }
                })
                .collect()
        })
        .collect();
    while engines.last().is_some_and(|l| l.is_empty()) && engines.len() > 1 {
        engines.pop();
    }
    Plan {
        algorithm: algorithm.to_string(),
        makespan_us: last + instance.machine.fixed_overhead_us,
        lower_bound_us: if split {
            bound.with_splitting()
        } else {
            bound.without_splitting()
        },
        simulated_us: simulated,
        constraints,
        engines,
    }
}

/// Timed pieces and the makespan of a run of the lists on `runner`.
pub(crate) fn timed_by(
    runner: &mut crate::simulate::Runner<'_>,
    lists: &[Vec<Piece>],
) -> (Vec<Vec<Timed>>, f64) {
    let makespan = runner.run(lists);
    let timed = runner
        .ran()
        .iter()
        .map(|l| l.iter().map(|r| (r.piece, r.start_us, r.end_us)).collect())
        .collect();
    (timed, makespan)
}
