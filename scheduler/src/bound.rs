//! Lower bounds on the makespan of any plan for a pattern.

use crate::error::Result;
use crate::instance::Instance;
use crate::pattern::Pattern;

/// The parts of the lower bound, each a time no plan can beat (microseconds,
/// without the fixed overhead).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LowerBound {
    /// The busiest link's bytes over the link bandwidth.
    pub link_us: f64,
    /// All bytes over the node's injection bandwidth.
    pub node_us: f64,
    /// All engine time (overhead plus bytes at engine speed) spread over every engine.
    pub engine_us: f64,
    /// The longest single put alone (does not hold when puts may be split).
    pub longest_put_us: f64,
    /// The fixed per-exchange overhead.
    pub fixed_us: f64,
}

impl LowerBound {
    /// The bound for plans that may split puts.
    pub fn with_splitting(&self) -> f64 {
        self.fixed_us + self.link_us.max(self.node_us).max(self.engine_us)
    }
    /// The bound for plans that keep every put whole.
    pub fn without_splitting(&self) -> f64 {
        self.with_splitting()
            .max(self.fixed_us + self.longest_put_us)
    }
}

/// Computes the lower bound of a pattern.
///
/// # Errors
///
/// The errors of [`Pattern::validate`](crate::Pattern::validate).
pub fn lower_bound(pattern: &Pattern) -> Result<LowerBound> {
    Ok(lower_bound_of(&Instance::new(pattern)?))
}

pub(crate) fn lower_bound_of(instance: &Instance) -> LowerBound {
    let m = &instance.machine;
    let mut per_link = vec![0u64; instance.link_count];
    let mut total = 0u64;
    let mut longest = 0.0f64;
    for p in &instance.puts {
        total += p.bytes;
        for (l, load) in per_link.iter_mut().enumerate() {
            if p.links & (1 << l) != 0 {
                *load += p.bytes;
            }
        }
        longest = longest.max(instance.alone_us(p.bytes));
    }
    let link_us = per_link.iter().copied().max().unwrap_or(0) as f64 / instance.link_rate();
    let engine_total: f64 = instance
        .puts
        .iter()
        .map(|p| m.command_overhead_us + p.bytes as f64 / instance.engine_rate())
        .sum();
    LowerBound {
        link_us,
        node_us: total as f64 / instance.node_rate(),
        engine_us: engine_total / m.engines as f64,
        longest_put_us: longest,
        fixed_us: m.fixed_overhead_us,
    }
}
