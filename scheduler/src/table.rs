//! The comparison table of `sode-sched table`: every Table 1 row, every
//! direction set, every algorithm, simulated.

use crate::algorithms::{plan, Algorithm};
use crate::bound::lower_bound;
use crate::error::Result;
use crate::machine::Machine;
use crate::patterns::{scale_les3, DirectionSet, SCALE_LES3_K};
use std::fmt::Write;

/// One row: a k, a direction set, each algorithm's simulated time.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Vertical size.
    pub k: u64,
    /// Direction set.
    pub set: DirectionSet,
    /// Simulated microseconds per exchange, in the order of [`Table::algorithms`].
    pub simulated_us: Vec<f64>,
    /// The lower bound (puts may be split).
    pub lower_bound_us: f64,
}

/// The whole table.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Column order.
    pub algorithms: Vec<Algorithm>,
    /// One row per (k, set).
    pub rows: Vec<Row>,
}

impl Row {
    /// Index of the fastest algorithm (the first on ties).
    pub fn winner(&self) -> usize {
        let mut best = 0;
        for (i, &t) in self.simulated_us.iter().enumerate() {
            if t < self.simulated_us[best] - 1e-9 {
                best = i;
            }
        }
        best
    }
}

/// Computes the table for a machine.
///
/// # Errors
///
/// The errors of [`Machine::validate`](crate::Machine::validate) for `machine`.
pub fn table(machine: Machine) -> Result<Table> {
    let mut algorithms = Algorithm::paper_for(machine.engines);
    algorithms.extend([
        Algorithm::BottomLeftOverhead,
        Algorithm::BottomLeftShare,
        Algorithm::Greedy,
        Algorithm::Split,
        Algorithm::Auto,
    ]);
    let mut rows = Vec::new();
    for set in DirectionSet::ALL {
        for k in SCALE_LES3_K {
            let pattern = scale_les3(k, set, machine)?;
            let simulated_us = algorithms
                .iter()
                .map(|&a| plan(&pattern, a).map(|p| p.simulated_us))
                .collect::<Result<Vec<_>>>()?;
            rows.push(Row {
                k,
                set,
                simulated_us,
                lower_bound_us: lower_bound(&pattern)?.with_splitting(),
            });
        }
    }
    Ok(Table { algorithms, rows })
}

impl Table {
    /// As a Markdown table; `*` marks each row's winner (auto excluded, as it
    /// is the best of the others by construction).
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = write!(out, "| set | k |");
        for a in &self.algorithms {
            let _ = write!(out, " {a} |");
        }
        let _ = writeln!(out, " bound | auto / best paper |");
        let _ = write!(out, "|---|---:|");
        for _ in &self.algorithms {
            let _ = write!(out, "---:|");
        }
        let _ = writeln!(out, "---:|---:|");
        let auto = self.algorithms.iter().position(|a| *a == Algorithm::Auto);
        let paper: Vec<usize> = (0..self.algorithms.len())
            .filter(|&i| {
                matches!(
                    self.algorithms[i],
                    Algorithm::RoundRobin(_) | Algorithm::BottomLeft(_)
                )
            })
            .collect();
        for row in &self.rows {
            let mut without_auto = row.clone();
            if let Some(a) = auto {
                without_auto.simulated_us[a] = f64::INFINITY;
            }
            let winner = without_auto.winner();
            let _ = write!(out, "| {} | {} |", row.set.name(), row.k);
            for (i, t) in row.simulated_us.iter().enumerate() {
                let mark = if i == winner { "*" } else { "" };
                let _ = write!(out, " {t:.1}{mark} |");
            }
            let best_paper = paper
                .iter()
                .map(|&i| row.simulated_us[i])
                .fold(f64::INFINITY, f64::min);
            let ratio = auto
                .map(|a| row.simulated_us[a] / best_paper)
                .unwrap_or(f64::NAN);
            let _ = writeln!(out, " {:.1} | {ratio:.3} |", row.lower_bound_us);
        }
        out
    }
}
