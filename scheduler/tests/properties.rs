//! Properties of every algorithm on random patterns and machines.

use proptest::prelude::*;
use sode_scheduler::{lower_bound, plan, simulate, Algorithm, Machine, Pattern, Plan, Request};

const DIRECTIONS: [&str; 10] = ["E", "W", "N", "S", "NE", "NW", "SE", "SW", "x+y+z-", "z+"];
const LINKS: [&str; 6] = ["E", "W", "N", "S", "up", "down"];

fn machine() -> impl Strategy<Value = Machine> {
    (
        1usize..=6,
        1.0f64..10.0,
        1.0f64..10.0,
        2.0f64..40.0,
        0.0f64..2.0,
        0.0f64..20.0,
    )
        .prop_map(
            |(
                engines,
                engine_gbps,
                link_gbps,
                node_gbps,
                command_overhead_us,
                fixed_overhead_us,
            )| Machine {
                engines,
                engine_gbps,
                link_gbps,
                node_gbps,
                command_overhead_us,
                fixed_overhead_us,
            },
        )
}

fn pattern(max_puts: usize) -> impl Strategy<Value = Pattern> {
    let request = (
        0usize..DIRECTIONS.len(),
        1u64..63,
        1u64..300_000,
        any::<bool>(),
    );
    (machine(), prop::collection::vec(request, 1..=max_puts)).prop_map(|(machine, reqs)| Pattern {
        machine,
        requests: reqs
            .into_iter()
            .enumerate()
            .map(|(i, (d, link_mask, bytes, small))| Request {
                id: i as u32 * 3 + 1,
                dest: d as u32,
                direction: DIRECTIONS[d].to_string(),
                links: LINKS
                    .iter()
                    .enumerate()
                    .filter(|(l, _)| link_mask & (1 << l) != 0)
                    .map(|(_, n)| n.to_string())
                    .collect(),
                bytes: if small { bytes % 4096 + 1 } else { bytes },
            })
            .collect(),
    })
}

fn heuristics(engines: usize) -> Vec<Algorithm> {
    let mut all = Algorithm::auto_candidates(engines, 0);
    all.push(Algorithm::Auto);
    all
}

fn check_plan(p: &Pattern, plan: &Plan) -> Result<(), TestCaseError> {
    plan.validate(p)
        .map_err(|e| TestCaseError::fail(format!("{}: {e}", plan.algorithm)))?;
    let bound = lower_bound(p).expect("bound");
    let floor = if plan.splits_puts() {
        bound.with_splitting()
    } else {
        bound.without_splitting()
    };
    prop_assert!((plan.lower_bound_us - floor).abs() < 1e-9);
    prop_assert!(
        plan.simulated_us >= floor - 1e-6,
        "{}: simulated {} below bound {}",
        plan.algorithm,
        plan.simulated_us,
        floor
    );
    let again = simulate(p, plan).expect("simulate");
    prop_assert!(
        (again.makespan_us - plan.simulated_us).abs() < 1e-9,
        "the simulator is deterministic"
    );
    let json = Plan::from_json(&plan.to_json()).expect("plan JSON round trip");
    prop_assert_eq!(&json.engines.len(), &plan.engines.len());
    json.validate(p).expect("round-tripped plan stays valid");
    Ok(())
}

proptest! {
    // PROPTEST_CASES raises the count for a deeper run by hand.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(96),
        ..ProptestConfig::default()
    })]

    /// Every byte scheduled once, constraints hold, simulation >= bound,
    /// auto never worse than any of the paper's algorithms.
    #[test]
    fn every_algorithm_gives_valid_plans(p in pattern(10)) {
        let pattern_json = Pattern::from_json(&p.to_json()).expect("pattern JSON round trip");
        prop_assert_eq!(&pattern_json, &p);
        let mut times = Vec::new();
        for a in heuristics(p.machine.engines) {
            let plan = plan(&p, a).expect("plan");
            check_plan(&p, &plan)?;
            times.push((a, plan.simulated_us));
        }
        let auto = times.iter().find(|(a, _)| *a == Algorithm::Auto).map(|t| t.1).expect("auto");
        for (a, t) in &times {
            if matches!(a, Algorithm::RoundRobin(_) | Algorithm::BottomLeft(_)) {
                prop_assert!(auto <= t + 1e-9, "{a} ({t}) beats auto ({auto})");
            }
        }
    }

    /// The exact solver is never worse than any heuristic that keeps puts
    /// whole (it is seeded with `greedy` only, so this tests its search).
    #[test]
    fn exact_is_never_worse_than_a_heuristic(p in pattern(6)) {
        let exact = plan(&p, Algorithm::Exact).expect("exact");
        check_plan(&p, &exact)?;
        prop_assert!(!exact.splits_puts());
        for a in heuristics(p.machine.engines) {
            let h = plan(&p, a).expect("plan");
            if !h.splits_puts() {
                prop_assert!(exact.simulated_us <= h.simulated_us + 1e-6, "{a} ({}) beats exact ({})", h.simulated_us, exact.simulated_us);
            }
        }
    }
}
