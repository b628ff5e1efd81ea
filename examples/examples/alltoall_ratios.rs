//! Throughput ratios of the shift pattern and the contention-free schedules
//! on the Latin-square fat-tree paper's configurations (Tables 4 and 5).
//!
//! Run: `cargo run --release -p sode-examples --example alltoall_ratios`

use sode_scheduler::topology::{PartialRule, Schedule};

/// Grid columns k and servers per leaf m of a partial all-to-all.
type KM = Option<(usize, usize)>;

fn main() -> Result<(), sode_scheduler::SchedError> {
    println!("| config | topology | servers used | shift | proposed |");
    println!("|---|---|---:|---:|---:|");
    let small: [(&str, usize, KM); 3] = [
        ("S1", 2, None),
        ("S2", 2, Some((2, 2))),
        ("S3", 3, Some((3, 3))),
    ];
    for (name, n, k_m) in small {
        report(name, n, k_m)?;
    }
    for (name, degree, servers) in [("S1'", 5, 25), ("S2'", 5, 10), ("S3'", 7, 28)] {
        let shift = Schedule::shift_fat_tree(degree, Some(servers))?;
        println!(
            "| {name} | fat-tree, degree {degree} | {servers} | {:.3} | - |",
            shift.throughput_ratio()
        );
    }
    let large: [(&str, usize, [KM; 3]); 6] = [
        ("L1", 3, [None, Some((3, 3)), Some((2, 2))]),
        ("L2", 5, [None, Some((5, 4)), Some((3, 3))]),
        ("L3", 7, [Some((7, 7)), Some((6, 6)), Some((4, 4))]),
        ("L4", 11, [Some((11, 10)), Some((9, 9)), Some((6, 6))]),
        ("L5", 13, [Some((13, 11)), Some((10, 10)), Some((7, 7))]),
        ("L6", 17, [Some((16, 16)), Some((13, 13)), Some((9, 9))]),
    ];
    for (name, n, parts) in large {
        report(&format!("{name} all"), n, None)?;
        for (share, k_m) in ["75%", "50%", "25%"].iter().zip(parts) {
            if let Some(k_m) = k_m {
                report(&format!("{name} {share}"), n, Some(k_m))?;
            }
        }
    }
    Ok(())
}

fn report(
    name: &str,
    n: usize,
    k_m: Option<(usize, usize)>,
) -> Result<(), sode_scheduler::SchedError> {
    let shift = Schedule::shift_latin_square(n, k_m)?;
    let proposed = match k_m {
        None => Schedule::whole(n)?,
        Some((k, m)) => Schedule::partial(n, k, m, PartialRule::Geometric)?,
    };
    let what = match k_m {
        None => format!("Latin square, n = {n}"),
        Some((k, m)) => format!("Latin square, n, k, m = {n}, {k}, {m}"),
    };
    println!(
        "| {name} | {what} | {} | {:.3} | {:.3} |",
        shift.servers().len(),
        shift.throughput_ratio(),
        proposed.throughput_ratio()
    );
    Ok(())
}
