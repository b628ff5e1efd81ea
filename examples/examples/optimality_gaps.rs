//! Each heuristic's optimality gap: its simulated makespan over the exact
//! solver's (puts kept whole), on the paper's patterns small enough for the
//! exact solver and on random 8-put patterns. A ratio below 1 means the
//! heuristic beat the whole-put optimum by splitting puts.
//!
//! Run: `cargo run --release -p sode-examples --example optimality_gaps`

use sode_scheduler::patterns::{random, scale_les3, DirectionSet, SCALE_LES3_K};
use sode_scheduler::{plan, Algorithm, Machine, Pattern};

fn algorithms() -> Vec<Algorithm> {
    let mut all = Algorithm::auto_candidates(4, 0);
    all.extend([Algorithm::Split, Algorithm::Auto]);
    all
}

fn ratios(p: &Pattern) -> Vec<f64> {
    let exact = plan(p, Algorithm::Exact).expect("exact").simulated_us;
    algorithms()
        .iter()
        .map(|&a| plan(p, a).expect("plan").simulated_us / exact)
        .collect()
}

fn row(label: &str, r: &[f64]) {
    print!("| {label} |");
    for x in r {
        print!(" {x:.3} |");
    }
    println!();
}

fn main() {
    print!("| pattern |");
    for a in algorithms() {
        print!(" {a} |");
    }
    println!();
    println!("|---|{}", "---:|".repeat(algorithms().len()));
    for set in [
        DirectionSet::Ew,
        DirectionSet::Ns,
        DirectionSet::Ewns,
        DirectionSet::Diag,
    ] {
        let mut worst = vec![0.0f64; algorithms().len()];
        for k in SCALE_LES3_K {
            let r = ratios(&scale_les3(k, set, Machine::K_COMPUTER).expect("pattern"));
            worst.iter_mut().zip(&r).for_each(|(w, x)| *w = w.max(*x));
        }
        row(&format!("{} (worst of 11 k)", set.name()), &worst);
    }
    let seeds = 50;
    let mut mean = vec![0.0f64; algorithms().len()];
    let mut worst = vec![0.0f64; algorithms().len()];
    for seed in 0..seeds {
        let r = ratios(&random(8, seed, Machine::K_COMPUTER).expect("pattern"));
        for i in 0..r.len() {
            mean[i] += r[i] / seeds as f64;
            worst[i] = worst[i].max(r[i]);
        }
    }
    row(&format!("random 8 puts (mean of {seeds})"), &mean);
    row(&format!("random 8 puts (worst of {seeds})"), &worst);
}
