//! Latency (RTT) matrices: a multi-cluster model, and MC-MPI's estimation
//! algorithm (its Fig. 1), run against the true matrix as an oracle.

// Matrix code: indices read more clearly than iterator chains here.
#![allow(clippy::needless_range_loop)]

use super::qap::Matrix;
use crate::error::{Result, SchedError};
use crate::patterns::SplitMix64;

/// A multi-cluster RTT matrix: `sizes[c]` processes in cluster c, `intra[c]`
/// RTT inside cluster c, `inter[c][d]` RTT between clusters (its diagonal is not used); each pair gets
/// up to `jitter` (a fraction) of random spread. Symmetric, zero diagonal.
///
/// # Errors
///
/// [`SchedError::InvalidMatrix`](crate::SchedError::InvalidMatrix) when the per-cluster lists disagree in
/// length, a round-trip time is not positive, or `jitter` is outside
/// [0, 1).
pub fn multi_cluster_latencies(
    sizes: &[usize],
    intra: &[f64],
    inter: &Matrix,
    jitter: f64,
    seed: u64,
) -> Result<Matrix> {
    let c = sizes.len();
    if c == 0 || intra.len() != c || inter.len() != c || inter.iter().any(|r| r.len() != c) {
        return Err(SchedError::InvalidMatrix(format!(
            "{c} clusters need {c} intra-cluster RTTs and a {c} x {c} inter-cluster matrix"
        )));
    }
    let off_diagonal = inter.iter().enumerate().flat_map(|(i, row)| {
        row.iter()
            .enumerate()
            .filter(move |(j, _)| *j != i)
            .map(|(_, v)| v)
    });
    if intra
        .iter()
        .chain(off_diagonal)
        .any(|v| !(v.is_finite() && *v > 0.0))
        || !(0.0..1.0).contains(&jitter)
    {
        return Err(SchedError::InvalidMatrix(
            "RTTs must be positive and jitter in [0, 1)".into(),
        ));
    }
    let cluster: Vec<usize> = sizes
        .iter()
        .enumerate()
        .flat_map(|(i, &s)| std::iter::repeat_n(i, s))
        .collect();
    let n = cluster.len();
    let mut rng = SplitMix64::new(seed);
    let mut m = vec![vec![0.0; n]; n];
    for i in 0..n {
        for j in i + 1..n {
            let base = if cluster[i] == cluster[j] {
                intra[cluster[i]]
            } else {
                inter[cluster[i]][cluster[j]]
            };
            let spread = 1.0 + jitter * (rng.below(1_000_001) as f64 / 1e6);
            m[i][j] = base * spread;
            m[j][i] = m[i][j];
        }
    }
    Ok(m)
}

/// Four sites in the spirit of MC-MPI's testbed: `per_cluster` processes
/// each, 50-100 us inside a site, 2-20 ms between sites.
///
/// # Errors
///
/// The errors of [`multi_cluster_latencies`].
pub fn four_sites(per_cluster: usize, jitter: f64, seed: u64) -> Result<Matrix> {
    let inter = vec![
        vec![0.0, 2_000.0, 8_000.0, 20_000.0],
        vec![2_000.0, 0.0, 9_000.0, 18_000.0],
        vec![8_000.0, 9_000.0, 0.0, 12_000.0],
        vec![20_000.0, 18_000.0, 12_000.0, 0.0],
    ];
    multi_cluster_latencies(
        &[per_cluster; 4],
        &[60.0, 80.0, 100.0, 50.0],
        &inter,
        jitter,
        seed,
    )
}

/// What the estimation produced and what it cost.
#[derive(Debug, Clone)]
pub struct Estimate {
    /// The estimated RTT matrix (measured entries are exact).
    pub matrix: Matrix,
    /// RTT measurements made, over all processes.
    pub measurements: usize,
    /// Measurements a full all-pairs survey would make: n (n - 1).
    pub all_pairs: usize,
    /// The largest |estimate - truth| / truth over all pairs.
    pub worst_relative_error: f64,
}

/// MC-MPI's Fig. 1: each process p repeatedly measures a random r whose RTT
/// it does not know, receives r's known RTTs to the processes p does not
/// know, and infers rtt(p, q) = rtt(p, r) when rtt(p, r) > alpha rtt(r, q),
/// or rtt(r, q) when rtt(p, r) < rtt(r, q) / alpha. Processes take turns,
/// one measurement each per round, as they would run concurrently.
///
/// # Errors
///
/// [`SchedError::InvalidMatrix`](crate::SchedError::InvalidMatrix) when `truth` is not square or is empty,
/// or `alpha` is not above 1.
pub fn estimate_latencies(truth: &Matrix, alpha: f64, seed: u64) -> Result<Estimate> {
    let n = truth.len();
    if n == 0 || truth.iter().any(|r| r.len() != n) {
        return Err(SchedError::InvalidMatrix(
            "the RTT matrix must be square and non-empty".into(),
        ));
    }
    if !(alpha.is_finite() && alpha > 1.0) {
        return Err(SchedError::InvalidMatrix(format!(
            "alpha = {alpha}: it must be greater than 1"
        )));
    }
    let mut rng = SplitMix64::new(seed);
    let mut known: Vec<Vec<Option<f64>>> = (0..n)
        .map(|p| (0..n).map(|q| (p == q).then_some(0.0)).collect())
        .collect();
    let mut unknown: Vec<Vec<usize>> = (0..n)
        .map(|p| (0..n).filter(|&q| q != p).collect())
        .collect();
    let mut measurements = 0;
    while unknown.iter().any(|u| !u.is_empty()) {
        for p in 0..n {
            if unknown[p].is_empty() {
                continue;
            }
            let r = unknown[p][rng.below(unknown[p].len() as u64) as usize];
            let rtt_pr = truth[p][r];
            measurements += 1;
            known[p][r] = Some(rtt_pr);
            for &q in &unknown[p] {
                if q == r {
                    continue;
                }
                if let Some(rtt_rq) = known[r][q] {
                    if rtt_pr > alpha * rtt_rq {
                        known[p][q] = Some(rtt_pr);
                    } else if rtt_pr < rtt_rq / alpha {
                        known[p][q] = Some(rtt_rq);
                    }
                }
            }
            let row = &known[p];
            unknown[p].retain(|&q| row[q].is_none());
        }
    }
    let matrix: Matrix = known
        .into_iter()
        .map(|row| row.into_iter().map(|v| v.unwrap_or(0.0)).collect())
        .collect();
    let mut worst = 0.0f64;
    for p in 0..n {
        for q in 0..n {
            if p != q && truth[p][q] > 0.0 {
                worst = worst.max((matrix[p][q] - truth[p][q]).abs() / truth[p][q]);
            }
        }
    }
    Ok(Estimate {
        matrix,
        measurements,
        all_pairs: n * (n - 1),
        worst_relative_error: worst,
    })
}
