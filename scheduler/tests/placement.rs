//! MC-MPI's algorithms: latency estimation, bounding graph, QAP placement.

// Matrix code: indices read more clearly than iterator chains here.
#![allow(clippy::needless_range_loop)]

use sode_scheduler::placement::{
    bounding_graph, capped_graph, default_bound, estimate_latencies, hostname_placement,
    multi_cluster_latencies, parse_qaplib, stencil_traffic, topology_distance, Locality, Matrix,
    Qap, SolverOptions,
};
use std::path::PathBuf;

fn clusters(per_cluster: usize, seed: u64) -> Matrix {
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
        0.1,
        seed,
    )
    .unwrap()
}

#[test]
fn latency_estimation_saves_measurements_and_bounds_its_error() {
    let truth = clusters(32, 1);
    let n = truth.len();
    let mut previous_measurements = 0;
    for alpha in [3.0, 5.0, 10.0] {
        let e = estimate_latencies(&truth, alpha, 2).unwrap();
        assert_eq!(e.all_pairs, n * (n - 1));
        // Far fewer measurements than all pairs: the clusters are inferred.
        assert!(
            e.measurements * 2 < e.all_pairs,
            "alpha {alpha}: {} of {}",
            e.measurements,
            e.all_pairs
        );
        // A larger alpha infers less, so it measures at least as much.
        assert!(e.measurements + n >= previous_measurements, "alpha {alpha}");
        previous_measurements = e.measurements;
        // Bounded error: inside a factor set by alpha and the jitter.
        assert!(
            e.worst_relative_error < 0.5,
            "alpha {alpha}: {}",
            e.worst_relative_error
        );
        for p in 0..n {
            assert_eq!(e.matrix[p][p], 0.0);
            for q in 0..n {
                assert!(e.matrix[p][q] >= 0.0);
            }
        }
    }
    // Without clusters there is nothing to infer: measure (almost) everything.
    let flat = multi_cluster_latencies(&[40], &[100.0], &vec![vec![0.0]], 0.5, 3).unwrap();
    let e = estimate_latencies(&flat, 5.0, 4).unwrap();
    assert_eq!(e.measurements, e.all_pairs);
    assert_eq!(e.worst_relative_error, 0.0);
    assert!(estimate_latencies(&flat, 1.0, 4).is_err());
}

#[test]
fn bounding_graph_grows_logarithmically_and_stays_connected() {
    let mut per_process = Vec::new();
    for per_cluster in [16, 32, 64, 128] {
        let latency = clusters(per_cluster, 5);
        let n = latency.len();
        let traffic = vec![vec![1.0; n]; n];
        // Cluster 3 accepts no inbound connection.
        let firewall = move |p: usize, q: usize| !(q / per_cluster == 3 && p / per_cluster != 3);
        let g = bounding_graph(&latency, &traffic, &firewall, 2, 9).unwrap();
        assert!(g.connected, "n = {n}");
        // Every process picks at most beta log2(n / beta) + beta - 1 peers (and is picked by others).
        assert!(g.attempted <= n * (2 * ((n as f64 / 2.0).log2().ceil() as usize + 1) + 1));
        for &(p, q) in &g.connections {
            assert!(firewall(p, q), "a forbidden connection {p} -> {q} was made");
        }
        // Routes: next hops lead to the destination along bounding-graph edges.
        for p in (0..n).step_by(7) {
            for q in (0..n).step_by(5) {
                let mut at = p;
                let mut hops = 0;
                while at != q {
                    at = g.next_hop[at][q].expect("route");
                    hops += 1;
                    assert!(hops <= n, "routing loop");
                }
            }
        }
        // The spanning tree reaches the root from everywhere.
        let mut edges = 0;
        for v in 1..n {
            let parent = g.tree_parent[v].expect("parent");
            edges += 1;
            assert!(g
                .connections
                .iter()
                .any(|&(a, b)| (a, b) == (v, parent) || (a, b) == (parent, v)));
        }
        assert_eq!(edges, n - 1);
        per_process.push((n, g.connections_per_process()));
    }
    // O(log n): doubling n adds a roughly constant number of connections.
    for w in per_process.windows(2) {
        let (growth, share) = (w[1].1 - w[0].1, w[1].1 / (w[1].0 - 1) as f64);
        assert!(growth > 0.0 && growth < 8.0, "{per_process:?}");
        assert!(share < 0.5, "{per_process:?}");
    }
    assert!(per_process.last().unwrap().1 / (per_process.last().unwrap().0 as f64) < 0.1);
}

/// The route from p to q over `g`, hop by hop (p excluded, q included).
fn route(g: &sode_scheduler::placement::BoundingGraph, p: usize, q: usize) -> Vec<usize> {
    let mut at = p;
    let mut hops = Vec::new();
    while at != q {
        at = g.next_hop[at][q].expect("route");
        hops.push(at);
        assert!(hops.len() <= g.next_hop.len(), "routing loop {p} -> {q}");
    }
    hops
}

#[test]
fn a_capped_graph_never_exceeds_its_bound_and_routes_everyone() {
    for (n, bound, seed) in [
        (8usize, 2usize, 1u64),
        (16, 2, 2),
        (16, 3, 3),
        (33, 3, 4),
        (64, 4, 5),
        (5, 7, 6),
    ] {
        let latency = clusters(n.div_ceil(4), seed);
        let n = latency.len();
        // A random sparse traffic pattern, one pair in five.
        let mut traffic = vec![vec![0.0; n]; n];
        for p in 0..n {
            for q in 0..n {
                if p != q && (p * 7 + q * 3 + seed as usize) % 5 == 0 {
                    traffic[p][q] = (1 + (p + q) % 4) as f64;
                }
            }
        }
        // Rank 1 may not connect to rank 2 directly, nor either way.
        let allowed = |p: usize, q: usize| (p.min(q), p.max(q)) != (1, 2);
        let g = capped_graph(&latency, &traffic, &allowed, bound, seed).unwrap();
        let mut degree = vec![0; n];
        for &(p, q) in &g.connections {
            assert!(allowed(p, q), "forbidden {p}-{q} connected");
            degree[p] += 1;
            degree[q] += 1;
        }
        assert!(
            degree.iter().all(|&d| d <= bound),
            "n {n}, bound {bound}: {degree:?}"
        );
        assert!(g.connected, "n {n}, bound {bound}");
        for p in 0..n {
            for q in 0..n {
                let mut at = p;
                for hop in route(&g, p, q) {
                    assert!(
                        g.connections.contains(&(at, hop)) || g.connections.contains(&(hop, at)),
                        "{p} -> {q} hops {at} -> {hop}, not a connection"
                    );
                    at = hop;
                }
            }
        }
        assert!(
            !route(&g, 1, 2).is_empty() && route(&g, 1, 2).len() >= 2,
            "1 -> 2 goes around"
        );
    }
}

#[test]
fn a_capped_graph_puts_the_heavy_pairs_on_direct_connections() {
    let n = 12;
    let latency = vec![vec![1.0; n]; n];
    // A ring of heavy pairs and a light all-to-all: with room for two
    // connections, the ring is the graph.
    let mut traffic = vec![vec![1.0; n]; n];
    for p in 0..n {
        traffic[p][(p + 1) % n] = 1000.0;
    }
    let g = capped_graph(&latency, &traffic, &|_, _| true, 2, 1).unwrap();
    for p in 0..n {
        assert_eq!(
            route(&g, p, (p + 1) % n),
            vec![(p + 1) % n],
            "{:?}",
            g.connections
        );
    }
}

#[test]
fn a_capped_graph_names_a_bound_that_cannot_join_the_job() {
    let latency = vec![vec![1.0; 6]; 6];
    let traffic = vec![vec![1.0; 6]; 6];
    let e = capped_graph(&latency, &traffic, &|_, _| true, 0, 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("bound of 0"), "{e}");
    let e = capped_graph(&latency, &traffic, &|_, _| true, 1, 1)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("at most 1 connection(s) each stay in 3 groups"),
        "{e}"
    );
    // Rank 5 may talk to nobody: no bound joins it.
    let lonely = |p: usize, q: usize| p != 5 && q != 5;
    let e = capped_graph(&latency, &traffic, &lonely, 4, 1)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("2 groups") && e.contains("allow more pairs"),
        "{e}"
    );
    // Two ranks need only one connection each.
    let two = vec![vec![1.0; 2]; 2];
    assert!(
        capped_graph(&two, &two, &|_, _| true, 1, 1)
            .unwrap()
            .connected
    );
    assert_eq!(default_bound(16), 7);
    assert_eq!(default_bound(2), 2);
    assert_eq!(default_bound(1024), 19);
}

#[test]
fn small_placements_are_exact() {
    use sode_scheduler::placement::EXHAUSTIVE_UP_TO;
    // Random instances up to the exhaustive size: the solver's cost equals
    // the best of every permutation, tried here independently.
    let mut x = 7u64;
    let mut next = || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        ((x >> 33) % 100) as f64
    };
    for n in 2..=EXHAUSTIVE_UP_TO.min(7) {
        let mut m = || {
            (0..n)
                .map(|_| (0..n).map(|_| next()).collect())
                .collect::<Matrix>()
        };
        let (t, d) = (m(), m());
        let q = Qap::new(t, d).unwrap();
        let found = q.solve(&SolverOptions {
            restarts: 1,
            tabu_iterations: 1,
            seed: 1,
        });
        let mut best = f64::INFINITY;
        let mut p: Vec<usize> = (0..n).collect();
        permute(&mut p, 0, &mut |p| best = best.min(q.cost(p)));
        assert!(
            (found.cost - best).abs() < 1e-6,
            "n {n}: {} vs {best}",
            found.cost
        );
    }
}

/// Calls `f` on every permutation of `p[k..]` (p[..k] fixed).
fn permute(p: &mut Vec<usize>, k: usize, f: &mut dyn FnMut(&[usize])) {
    if k == p.len() {
        f(p);
        return;
    }
    for i in k..p.len() {
        p.swap(k, i);
        permute(p, k + 1, f);
        p.swap(k, i);
    }
}

#[test]
fn traffic_decides_which_far_peers_are_chosen() {
    let latency = clusters(32, 6);
    let n = latency.len();
    // Process 0 talks only to process 100 (cluster 3): with traffic-weighted
    // draws, it connects to it.
    let mut traffic = vec![vec![0.0; n]; n];
    traffic[0][100] = 1.0;
    let g = bounding_graph(&latency, &traffic, &|_, _| true, 1, 1).unwrap();
    assert!(g.connections.contains(&(0, 100)));
}

#[test]
fn stencil_placement_beats_identity_and_hostname_order() {
    let locality = Locality {
        nodes: 4,
        numa_per_node: 2,
        cores_per_numa: 4,
    };
    let distance = topology_distance(&locality, 10.0);
    let traffic = stencil_traffic(8, 4, true, 1.0, Some(0.25)).unwrap();
    let qap = Qap::new(traffic, distance).unwrap();
    let identity: Vec<usize> = (0..qap.size()).collect();
    let hostname = hostname_placement(&locality);
    qap.check_permutation(&hostname).unwrap();
    let best = qap
        .solve_from(
            &[identity.clone(), hostname.clone()],
            &SolverOptions {
                restarts: 2,
                tabu_iterations: 500,
                seed: 3,
            },
        )
        .unwrap();
    qap.check_permutation(&best.permutation).unwrap();
    assert!((qap.cost(&best.permutation) - best.cost).abs() < 1e-6);
    assert!(
        best.cost < qap.cost(&hostname),
        "{} vs hostname {}",
        best.cost,
        qap.cost(&hostname)
    );
    assert!(qap.cost(&hostname) < qap.cost(&identity));
    // Heavy neighbours share a node: most traffic stays inside nodes.
    let n = qap.size();
    let traffic = stencil_traffic(8, 4, true, 1.0, Some(0.25)).unwrap();
    let (mut inside, mut total) = (0.0, 0.0);
    for i in 0..n {
        for j in 0..n {
            total += traffic[i][j];
            if locality.place(best.permutation[i]).0 == locality.place(best.permutation[j]).0 {
                inside += traffic[i][j];
            }
        }
    }
    assert!(inside / total > 0.5, "{inside} of {total} inside nodes");
}

#[test]
fn bad_matrices_are_named() {
    let err = Qap::new(vec![vec![0.0, 1.0], vec![1.0]], vec![vec![0.0; 2]; 2]).unwrap_err();
    assert!(err.to_string().contains("must be square"), "{err}");
    let err = Qap::new(vec![vec![0.0; 2]; 2], vec![vec![0.0; 3]; 3]).unwrap_err();
    assert!(err.to_string().contains("expected 2"), "{err}");
    assert!(Qap::new(vec![], vec![]).is_err());
    assert!(Qap::new(vec![vec![f64::NAN]], vec![vec![0.0]]).is_err());
    assert!(parse_qaplib("3\n1 2 3")
        .unwrap_err()
        .to_string()
        .contains("ends inside matrix A"));
    let q = Qap::new(vec![vec![0.0; 2]; 2], vec![vec![0.0; 2]; 2]).unwrap();
    assert!(q
        .solve_from(&[vec![0, 0]], &SolverOptions::default())
        .is_err());
}

/// QAPLIB gaps to the known optima; skips cleanly without the folder.
#[test]
fn qaplib_gaps() {
    let dir = std::env::var_os("SODE_QAPLIB")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/qaplib")
        });
    if !dir.is_dir() {
        eprintln!("skipped: no QAPLIB folder at {}", dir.display());
        return;
    }
    for (name, max_gap) in [
        ("nug12", 0.0),
        ("had12", 0.0),
        ("tai12a", 0.01),
        ("had20", 0.01),
        ("nug20", 0.01),
        ("chr20a", 0.08),
        ("tai20a", 0.02),
    ] {
        let qap = parse_qaplib(&std::fs::read_to_string(dir.join(format!("{name}.dat"))).unwrap())
            .unwrap();
        let sln = std::fs::read_to_string(dir.join(format!("{name}.sln"))).unwrap();
        let mut words = sln.split_whitespace();
        let n: usize = words.next().unwrap().parse().unwrap();
        let optimum: f64 = words.next().unwrap().parse().unwrap();
        let known: Vec<usize> = words.map(|w| w.parse::<usize>().unwrap() - 1).collect();
        assert_eq!((qap.size(), known.len()), (n, n));
        // The cost function agrees with QAPLIB's on the known optimum.
        assert_eq!(
            qap.cost(&known),
            optimum,
            "{name}: cost of the published solution"
        );
        let best = qap.solve(&SolverOptions {
            restarts: 6,
            tabu_iterations: 100 * n,
            seed: 1,
        });
        let gap = (best.cost - optimum) / optimum;
        assert!(gap >= 0.0 && gap <= max_gap, "{name}: gap {gap}");
    }
}

/// The paper's Fig. 6 trend under 3FW (three clusters refuse inbound
/// connections): disconnection gets rarer with more processes and with a
/// larger beta, and never happens at beta = 4.
#[test]
fn disconnection_becomes_rare_as_in_the_paper() {
    use sode_scheduler::placement::{is_connected, select_connections};
    let rate = |per_cluster: usize, beta: usize| {
        let latency = clusters(per_cluster, 11);
        let n = latency.len();
        let traffic = vec![vec![1.0; n]; n];
        let three_firewalls =
            move |p: usize, q: usize| q / per_cluster == 0 || q / per_cluster == p / per_cluster;
        (0..300u64)
            .filter(|&t| {
                !is_connected(
                    n,
                    &select_connections(&latency, &traffic, &three_firewalls, beta, t)
                        .unwrap()
                        .0,
                )
            })
            .count()
    };
    let (small, large) = (rate(2, 1), rate(32, 1));
    assert!(
        small > 0 && large < small,
        "beta 1: {small} vs {large} disconnected of 300"
    );
    assert!(rate(2, 2) < small);
    for per_cluster in [2, 8, 32] {
        assert_eq!(rate(per_cluster, 4), 0);
    }
    assert!(!is_connected(3, &[(0, 1)]) && is_connected(3, &[(0, 1), (2, 1)]));
}
