//! Prints how long each algorithm takes to plan the paper's all8 pattern.
use sode_scheduler::patterns::{scale_les3, DirectionSet};
use sode_scheduler::{plan, Algorithm, Machine};
use std::time::Instant;

fn main() {
    let p = scale_les3(872, DirectionSet::All8, Machine::K_COMPUTER).expect("pattern");
    for a in Algorithm::auto_candidates(4, 14)
        .into_iter()
        .chain([Algorithm::Split, Algorithm::Auto])
    {
        let n = 200;
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(plan(&p, a).expect("plan"));
        }
        println!(
            "{a:>14}: {:8.1} us",
            t.elapsed().as_secs_f64() * 1e6 / n as f64
        );
    }
}
