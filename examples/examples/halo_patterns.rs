//! Beyond SCALE-LES3: generic 2-D and 3-D halos, with many small puts,
//! where overhead-aware packing matters. Simulated us per exchange on the K
//! preset, and each algorithm over the best of the paper's six.
//!
//! Run: `cargo run --release -p sode-examples --example halo_patterns`

use sode_scheduler::patterns::{halo, random, HaloShape};
use sode_scheduler::{plan, Algorithm, Machine, Pattern};

fn main() -> Result<(), sode_scheduler::SchedError> {
    let m = Machine::K_COMPUTER;
    let shape = |size: Vec<u64>, h: u64, neighbours: usize| HaloShape {
        size,
        halo: h,
        element_bytes: 8,
        neighbours,
    };
    let cases: Vec<(String, Pattern)> = vec![
        (
            "2-D 16^2, halo 1, 8 nb".into(),
            halo(&shape(vec![16, 16], 1, 8), m)?,
        ),
        (
            "2-D 256^2, halo 2, 8 nb".into(),
            halo(&shape(vec![256, 256], 2, 8), m)?,
        ),
        (
            "3-D 4^3, halo 1, 18 nb".into(),
            halo(&shape(vec![4, 4, 4], 1, 18), m)?,
        ),
        (
            "3-D 8^3, halo 1, 26 nb".into(),
            halo(&shape(vec![8, 8, 8], 1, 26), m)?,
        ),
        (
            "3-D 16^3, halo 2, 26 nb".into(),
            halo(&shape(vec![16, 16, 16], 2, 26), m)?,
        ),
        (
            "3-D 64^3, halo 2, 26 nb".into(),
            halo(&shape(vec![64, 64, 64], 2, 26), m)?,
        ),
        ("random, 40 puts".into(), random(40, 3, m)?),
    ];
    let beyond = [
        Algorithm::BottomLeftOverhead,
        Algorithm::BottomLeftShare,
        Algorithm::Greedy,
        Algorithm::Split,
        Algorithm::Auto,
    ];
    print!("| pattern | puts | best paper |");
    for a in beyond {
        print!(" {a} |");
    }
    println!();
    println!("|---|---:|---|{}", "---:|".repeat(beyond.len()));
    for (name, p) in cases {
        let (best_name, best) = Algorithm::PAPER
            .iter()
            .map(|&a| plan(&p, a).map(|x| (a, x.simulated_us)))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .fold((Algorithm::RoundRobin(1), f64::INFINITY), |b, x| {
                if x.1 < b.1 {
                    x
                } else {
                    b
                }
            });
        print!(
            "| {name} | {} | {best_name} {best:.1} us |",
            p.requests.len()
        );
        for a in beyond {
            let t = plan(&p, a)?.simulated_us;
            print!(" {t:.1} ({:.3}) |", t / best);
        }
        println!();
    }
    Ok(())
}
