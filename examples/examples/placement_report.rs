//! MC-MPI's algorithms, measured: latency estimation for several alpha, the
//! bounding graph's connections per process and connectivity, QAP gaps on
//! QAPLIB, and stencil placement against identity and hostname order.
//!
//! Run: `cargo run --release -p sode-examples --example placement_report`
//! (QAPLIB rows need `../shared/data/qaplib/`, or set SODE_QAPLIB=DIR.)

use sode_scheduler::placement::{
    bounding_graph, estimate_latencies, four_sites, hostname_placement, is_connected, parse_qaplib,
    select_connections, stencil_traffic, topology_distance, Locality, Matrix, Qap, SolverOptions,
};
use std::path::PathBuf;
use std::time::Instant;

fn four_clusters(per_cluster: usize) -> Matrix {
    // RTTs in microseconds: four sites, 50-100 us inside, 2-20 ms between.
    four_sites(per_cluster, 0.2, 7).expect("latencies")
}

fn main() {
    latency_section();
    bounding_section();
    disconnection_section();
    stencil_section();
    qaplib_section();
}

fn latency_section() {
    println!("### Latency estimation (4 clusters x 64 processes)\n");
    println!("| alpha | measurements | of all pairs | worst relative error |");
    println!("|---:|---:|---:|---:|");
    let truth = four_clusters(64);
    for alpha in [1.5, 2.0, 3.0, 5.0, 10.0] {
        let e = estimate_latencies(&truth, alpha, 1).expect("estimate");
        println!(
            "| {alpha} | {} | {:.1}% | {:.1}% |",
            e.measurements,
            100.0 * e.measurements as f64 / e.all_pairs as f64,
            100.0 * e.worst_relative_error
        );
    }
}

fn bounding_section() {
    println!("\n### Bounding graph (4 clusters; cluster 3 accepts no inbound connection)\n");
    println!("| processes | beta | connections per process | share of all pairs | connected |");
    println!("|---:|---:|---:|---:|---|");
    for per_cluster in [16, 32, 64, 128] {
        let latency = four_clusters(per_cluster);
        let n = latency.len();
        let traffic = vec![vec![1.0; n]; n];
        let firewalled = move |p: usize, q: usize| !(q / per_cluster == 3 && p / per_cluster != 3);
        for beta in [1, 2, 4] {
            let g = bounding_graph(&latency, &traffic, &firewalled, beta, 3).expect("graph");
            println!(
                "| {n} | {beta} | {:.1} | {:.1}% | {} |",
                g.connections_per_process(),
                100.0 * g.connections_per_process() / (n - 1) as f64,
                g.connected
            );
        }
    }
}

fn disconnection_section() {
    println!("\n### How often the bounding graph is disconnected (the paper's 3FW: clusters 1-3 refuse inbound connections)\n");
    println!("| processes | beta = 1 | beta = 2 | beta = 4 |");
    println!("|---:|---:|---:|---:|");
    let trials = 2_000;
    for per_cluster in [2, 4, 8, 16, 32, 64] {
        let latency = four_clusters(per_cluster);
        let n = latency.len();
        let traffic = vec![vec![1.0; n]; n];
        let three_firewalls =
            move |p: usize, q: usize| q / per_cluster == 0 || q / per_cluster == p / per_cluster;
        let mut row = format!("| {n} |");
        for beta in [1, 2, 4] {
            let disconnected = (0..trials)
                .filter(|&t| {
                    let (c, _) = select_connections(&latency, &traffic, &three_firewalls, beta, t)
                        .expect("graph");
                    !is_connected(n, &c)
                })
                .count();
            row += &format!(" {:.2}% |", 100.0 * disconnected as f64 / trials as f64);
        }
        println!("{row}");
    }
}

fn stencil_section() {
    println!("\n### Stencil placement (16 x 16 ranks, 5-point and 9-point halo; 8 nodes x 2 NUMA x 16 cores; network = 10)\n");
    println!(
        "| stencil | identity (launch order) | hostname-sorted | QAP (GRASP + tabu) | QAP time |"
    );
    println!("|---|---:|---:|---:|---:|");
    let locality = Locality {
        nodes: 8,
        numa_per_node: 2,
        cores_per_numa: 16,
    };
    let distance = topology_distance(&locality, 10.0);
    for (name, corners) in [("5-point", None), ("9-point", Some(0.1))] {
        let traffic = stencil_traffic(16, 16, true, 1.0, corners).expect("traffic");
        let qap = Qap::new(traffic, distance.clone()).expect("qap");
        let identity: Vec<usize> = (0..qap.size()).collect();
        let start = Instant::now();
        let hostname = hostname_placement(&locality);
        let options = SolverOptions {
            restarts: 2,
            tabu_iterations: 1_000,
            seed: 1,
        };
        let best = qap
            .solve_from(&[identity.clone(), hostname.clone()], &options)
            .expect("placement");
        println!(
            "| {name} | {:.0} | {:.0} | {:.0} | {:.2} s |",
            qap.cost(&identity),
            qap.cost(&hostname),
            best.cost,
            start.elapsed().as_secs_f64()
        );
    }
}

fn qaplib_section() {
    let dir = std::env::var_os("SODE_QAPLIB")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("../shared/data/qaplib"));
    println!("\n### QAPLIB ({})\n", dir.display());
    if !dir.is_dir() {
        println!("skipped: no QAPLIB folder");
        return;
    }
    println!("| instance | n | optimum | found | gap | time |");
    println!("|---|---:|---:|---:|---:|---:|");
    for name in [
        "nug12", "had12", "tai12a", "chr20a", "had20", "nug20", "tai20a", "nug30", "tai30a",
    ] {
        let (Ok(dat), Ok(sln)) = (
            std::fs::read_to_string(dir.join(format!("{name}.dat"))),
            std::fs::read_to_string(dir.join(format!("{name}.sln"))),
        ) else {
            continue;
        };
        let qap = parse_qaplib(&dat).expect("QAPLIB instance");
        let optimum: f64 = sln
            .split_whitespace()
            .nth(1)
            .and_then(|w| w.parse().ok())
            .expect("optimum");
        let start = Instant::now();
        let best = qap.solve(&SolverOptions {
            restarts: 10,
            tabu_iterations: 200 * qap.size(),
            seed: 1,
        });
        println!(
            "| {name} | {} | {optimum} | {} | {:.2}% | {:.2} s |",
            qap.size(),
            best.cost,
            100.0 * (best.cost - optimum) / optimum,
            start.elapsed().as_secs_f64()
        );
    }
}
