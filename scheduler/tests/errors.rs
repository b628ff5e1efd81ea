//! Bad input gets a clear error naming what was wrong, never a panic.

use sode_scheduler::patterns::{halo, scale_les3, DirectionSet, HaloShape};
use sode_scheduler::{plan, Algorithm, Machine, Pattern, Plan, SchedError};
use std::process::Command;

fn one_put(machine: Machine) -> Pattern {
    Pattern {
        machine,
        requests: vec![sode_scheduler::Request {
            id: 0,
            dest: 1,
            direction: "E".into(),
            links: vec!["E".into()],
            bytes: 10,
        }],
    }
}

#[test]
fn bad_machines_are_named() {
    for (field, m) in [
        (
            "engine_gbps",
            Machine {
                engine_gbps: 0.0,
                ..Machine::K_COMPUTER
            },
        ),
        (
            "link_gbps",
            Machine {
                link_gbps: -5.0,
                ..Machine::K_COMPUTER
            },
        ),
        (
            "node_gbps",
            Machine {
                node_gbps: f64::NAN,
                ..Machine::K_COMPUTER
            },
        ),
        (
            "engines",
            Machine {
                engines: 0,
                ..Machine::K_COMPUTER
            },
        ),
        (
            "command_overhead_us",
            Machine {
                command_overhead_us: -1.0,
                ..Machine::K_COMPUTER
            },
        ),
    ] {
        let err = plan(&one_put(m), Algorithm::Auto).unwrap_err();
        assert!(
            matches!(err, SchedError::InvalidMachine { field: f, .. } if f == field),
            "{err}"
        );
        assert!(err.to_string().contains(field));
    }
}

#[test]
fn bad_patterns_are_named() {
    let empty = Pattern {
        machine: Machine::K_COMPUTER,
        requests: vec![],
    };
    assert_eq!(
        plan(&empty, Algorithm::Auto).unwrap_err(),
        SchedError::EmptyPattern
    );
    let mut p = one_put(Machine::K_COMPUTER);
    p.requests[0].direction = "UP".into();
    assert!(
        matches!(plan(&p, Algorithm::Auto).unwrap_err(), SchedError::UnknownDirection(d) if d == "UP")
    );
    let mut p = one_put(Machine::K_COMPUTER);
    p.requests[0].bytes = 0;
    assert!(plan(&p, Algorithm::Auto)
        .unwrap_err()
        .to_string()
        .contains("bytes is 0"));
    let mut p = one_put(Machine::K_COMPUTER);
    p.requests.push(p.requests[0].clone());
    assert!(plan(&p, Algorithm::Auto)
        .unwrap_err()
        .to_string()
        .contains("used twice"));
    let mut p = one_put(Machine::K_COMPUTER);
    p.requests[0].links.clear();
    assert!(plan(&p, Algorithm::Auto)
        .unwrap_err()
        .to_string()
        .contains("no links"));
}

#[test]
fn too_many_engines_and_unknown_algorithms() {
    let p = scale_les3(60, DirectionSet::All8, Machine::K_COMPUTER).unwrap();
    let err = plan(&p, Algorithm::RoundRobin(8)).unwrap_err();
    assert!(
        matches!(
            err,
            SchedError::TooManyEngines {
                wanted: 8,
                available: 4,
                ..
            }
        ),
        "{err}"
    );
    assert!(plan(&p, Algorithm::BottomLeft(5)).is_err());
    for bad in ["bl:0", "bl:x", "fastest", "round-robin:"] {
        assert!(
            matches!(
                bad.parse::<Algorithm>(),
                Err(SchedError::UnknownAlgorithm(_))
            ),
            "{bad}"
        );
    }
    let err = plan(&p, Algorithm::Exact).unwrap_err();
    assert!(
        matches!(err, SchedError::TooLargeForExact { requests: 14, .. }),
        "{err}"
    );
}

#[test]
fn quadratic_heuristics_refuse_huge_patterns_and_auto_stays_fast() {
    let n = sode_scheduler::QUADRATIC_MAX_PUTS + 1;
    let p = sode_scheduler::patterns::random(n, 7, Machine::K_COMPUTER).unwrap();
    for a in [
        Algorithm::BottomLeft(1),
        Algorithm::BottomLeftShare,
        Algorithm::BottomLeftOverhead,
        Algorithm::Greedy,
    ] {
        let r = plan(&p, a);
        assert!(
            matches!(&r, Err(SchedError::TooLargeForHeuristic { requests, .. }) if *requests == n),
            "{a}: {:?}",
            r.map(|p| p.algorithm)
        );
        let msg = r.unwrap_err().to_string();
        assert!(msg.contains("use auto, split or round-robin:K"), "{msg}");
    }
    // auto plans it from the round-robin candidates, in seconds at most.
    let t = std::time::Instant::now();
    let best = plan(&p, Algorithm::Auto).unwrap();
    assert!(
        best.algorithm.starts_with("auto=round-robin:"),
        "{}",
        best.algorithm
    );
    assert!(
        t.elapsed() < std::time::Duration::from_secs(60),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn malformed_json_names_the_document() {
    let err = Pattern::from_json("{\"machine\": ").unwrap_err();
    assert!(
        matches!(
            err,
            SchedError::Json {
                what: "pattern",
                ..
            }
        ),
        "{err}"
    );
    let err = Pattern::from_json("{\"machine\": {}, \"requests\": []}").unwrap_err();
    assert!(err.to_string().contains("missing field"), "{err}");
    let err = Plan::from_json("[1, 2]").unwrap_err();
    assert!(
        matches!(err, SchedError::Json { what: "plan", .. }),
        "{err}"
    );
}

#[test]
fn plans_that_do_not_fit_their_pattern_are_rejected() {
    let p = scale_les3(60, DirectionSet::Ew, Machine::K_COMPUTER).unwrap();
    let good = plan(&p, Algorithm::BottomLeft(4)).unwrap();
    let mut lost = good.clone();
    lost.engines[1].clear();
    assert!(lost
        .validate(&p)
        .unwrap_err()
        .to_string()
        .contains("writes 0 of"));
    let mut twice = good.clone();
    let extra = twice.engines[0][0].clone();
    twice.engines[1].push(extra);
    assert!(twice
        .validate(&p)
        .unwrap_err()
        .to_string()
        .contains("written twice"));
    let mut unknown = good.clone();
    unknown.engines[0][0].id = 99;
    assert!(unknown
        .validate(&p)
        .unwrap_err()
        .to_string()
        .contains("does not have"));
    let mut recv = good.clone();
    recv.engines[0][0].recv_engine = 1;
    assert!(recv
        .validate(&p)
        .unwrap_err()
        .to_string()
        .contains("receive engine 1"));
    let mut shared = good;
    let w = shared.engines[1].remove(0);
    shared.engines[0].push(w);
    shared.engines[0][1].start_us = 0.0; // overlaps the first command
    assert!(shared
        .validate(&p)
        .unwrap_err()
        .to_string()
        .contains("before the previous command ends"));
}

#[test]
fn bad_generator_parameters() {
    let m = Machine::K_COMPUTER;
    assert!(scale_les3(0, DirectionSet::Ew, m).is_err());
    assert!("nsew".parse::<DirectionSet>().is_err());
    let shape = HaloShape {
        size: vec![8, 8],
        halo: 1,
        element_bytes: 8,
        neighbours: 6,
    };
    assert!(halo(&shape, m)
        .unwrap_err()
        .to_string()
        .contains("use one of [4, 8]"));
    let shape = HaloShape {
        size: vec![8],
        halo: 1,
        element_bytes: 8,
        neighbours: 2,
    };
    assert!(halo(&shape, m).is_err());
}

#[test]
fn halo_patterns_have_the_right_sizes() {
    let m = Machine::K_COMPUTER;
    let h2 = halo(
        &HaloShape {
            size: vec![10, 20],
            halo: 2,
            element_bytes: 8,
            neighbours: 8,
        },
        m,
    )
    .unwrap();
    assert_eq!(h2.requests.len(), 8);
    let east = h2.requests.iter().find(|r| r.direction == "x+").unwrap();
    assert_eq!(east.bytes, 2 * 20 * 8);
    let north = h2.requests.iter().find(|r| r.direction == "y+").unwrap();
    assert_eq!(north.bytes, 10 * 2 * 8);
    let corner = h2.requests.iter().find(|r| r.direction == "x+y-").unwrap();
    assert_eq!((corner.bytes, corner.links.len()), (2 * 2 * 8, 2));
    for (n, faces, edges, corners) in [(6, 6, 0, 0), (18, 6, 12, 0), (26, 6, 12, 8)] {
        let h3 = halo(
            &HaloShape {
                size: vec![4, 5, 6],
                halo: 1,
                element_bytes: 4,
                neighbours: n,
            },
            m,
        )
        .unwrap();
        let by_links = |k: usize| h3.requests.iter().filter(|r| r.links.len() == k).count();
        assert_eq!(
            (by_links(1), by_links(2), by_links(3)),
            (faces, edges, corners),
            "{n} neighbours"
        );
        let x_face = h3.requests.iter().find(|r| r.direction == "x-").unwrap();
        assert_eq!(x_face.bytes, 5 * 6 * 4);
        for r in &h3.requests {
            plan(&h3, Algorithm::Auto).unwrap().validate(&h3).unwrap();
            assert!(r.bytes > 0);
        }
    }
}

fn cli(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sode-sched"))
        .args(args)
        .output()
        .expect("run sode-sched");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn command_line_round_trip_and_errors() {
    let dir = std::env::temp_dir().join(format!("sode-sched-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ok, pattern, _) = cli(&[
        "pattern",
        "scale-les3",
        "--k",
        "872",
        "--directions",
        "all8",
    ]);
    assert!(ok);
    let pattern_path = dir.join("p.json");
    std::fs::write(&pattern_path, &pattern).unwrap();
    let pp = pattern_path.to_str().unwrap();
    let (ok, plan_json, err) = cli(&["plan", "--algorithm", "bl:4", pp]);
    assert!(ok, "{err}");
    let parsed: serde_json::Value = serde_json::from_str(&plan_json).unwrap();
    for field in ["algorithm", "makespan_us", "lower_bound_us", "engines"] {
        assert!(parsed.get(field).is_some(), "plan JSON lacks {field}");
    }
    for field in ["id", "recv_engine", "start_us", "end_us"] {
        assert!(
            parsed["engines"][0][0].get(field).is_some(),
            "command JSON lacks {field}"
        );
    }
    let plan_path = dir.join("plan.json");
    std::fs::write(&plan_path, &plan_json).unwrap();
    let (ok, sim, _) = cli(&["simulate", pp, plan_path.to_str().unwrap()]);
    assert!(ok);
    let sim: f64 = sim.trim().parse().unwrap();
    assert!((sim - parsed["simulated_us"].as_f64().unwrap()).abs() < 1e-3);
    let svg = dir.join("g.svg");
    let (ok, _, err) = cli(&[
        "gantt",
        pp,
        "--algorithm",
        "bl:4",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(picture.starts_with("<svg") && picture.matches("<rect").count() >= 14 + 4);
    let (ok, _, err) = cli(&["plan", "--algorithm", "round-robin:9", pp]);
    assert!(!ok && err.contains("wants 9 engines"), "{err}");
    let (ok, _, err) = cli(&["plan", dir.join("missing.json").to_str().unwrap()]);
    assert!(!ok && err.contains("cannot read"), "{err}");
    std::fs::write(dir.join("bad.json"), "{ not json").unwrap();
    let (ok, _, err) = cli(&["plan", dir.join("bad.json").to_str().unwrap()]);
    assert!(!ok && err.contains("malformed pattern JSON"), "{err}");
    let (ok, table, _) = cli(&["table"]);
    assert!(ok && table.lines().filter(|l| l.starts_with("| ")).count() == 1 + 55);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn command_line_alltoall() {
    let (ok, out, err) = cli(&[
        "alltoall",
        "latin-square",
        "--n",
        "3",
        "--k",
        "2",
        "--m",
        "2",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["n"].as_u64(), v["k"].as_u64(), v["m"].as_u64()),
        (Some(3), Some(2), Some(2))
    );
    let phases = v["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 12);
    assert_eq!(phases[0].as_array().unwrap().len(), 12);
    assert_eq!(phases[0][0]["src"]["leaf"], serde_json::json!([0, 0]));
    let (ok, out, _) = cli(&["alltoall", "latin-square", "--n", "2"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["phases"].as_array().unwrap().len(), 21);
    assert_eq!(v["phases"][0][0]["src"]["leaf"], serde_json::json!([]));
    let (ok, out, _) = cli(&["alltoall", "ratio", "--n", "5", "--schedule", "shift"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["throughput_ratio"].as_f64().unwrap() < 0.5);
    let (ok, out, _) = cli(&["alltoall", "ratio", "--n", "5", "--k", "3", "--m", "3"]);
    assert!(ok);
    assert!(out.contains("\"throughput_ratio\": 1"), "{out}");
    let (ok, _, err) = cli(&["alltoall", "ratio", "--n", "9"]);
    assert!(!ok && err.contains("not prime"), "{err}");
    let (ok, _, err) = cli(&[
        "alltoall",
        "ratio",
        "--topology",
        "fat-tree",
        "--schedule",
        "shift",
    ]);
    assert!(!ok && err.contains("--degree"), "{err}");
    let (ok, _, err) = cli(&[
        "alltoall",
        "latin-square",
        "--n",
        "3",
        "--k",
        "4",
        "--m",
        "2",
    ]);
    assert!(!ok && err.contains("m <= k <= n"), "{err}");
}

#[test]
fn command_line_place() {
    let dir = std::env::temp_dir().join(format!("sode-place-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Two pairs of heavy talkers; slots 0-1 and 2-3 are close.
    let t = dir.join("t.json");
    let d = dir.join("d.json");
    std::fs::write(&t, "[[0,0,9,0],[0,0,0,9],[9,0,0,0],[0,9,0,0]]").unwrap();
    std::fs::write(&d, "[[0,1,5,5],[1,0,5,5],[5,5,0,1],[5,5,1,0]]").unwrap();
    let (ok, out, err) = cli(&[
        "place",
        "--traffic",
        t.to_str().unwrap(),
        "--distance",
        d.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let p: Vec<usize> = v["permutation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect();
    assert_eq!(v["cost"].as_f64(), Some(36.0), "{out}");
    assert_eq!(
        p[0] / 2,
        p[2] / 2,
        "ranks 0 and 2 share a close pair of slots: {p:?}"
    );
    std::fs::write(&d, "[[0,1],[1,0]]").unwrap();
    let (ok, _, err) = cli(&[
        "place",
        "--traffic",
        t.to_str().unwrap(),
        "--distance",
        d.to_str().unwrap(),
    ]);
    assert!(
        !ok && err.contains("distance matrix has 2 rows, expected 4"),
        "{err}"
    );
    std::fs::write(&d, "[[0,1],[1]]").unwrap();
    let (ok, _, err) = cli(&[
        "place",
        "--traffic",
        d.to_str().unwrap(),
        "--distance",
        d.to_str().unwrap(),
    ]);
    assert!(!ok && err.contains("must be square"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `f` and fails unless it returns within a second.
fn within_a_second<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let t0 = std::time::Instant::now();
    let out = f();
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(1),
        "{what} took {:?}",
        t0.elapsed()
    );
    out
}

#[test]
fn huge_puts_are_planned_and_simulated_to_the_end() {
    // Three puts of 2^36 bytes: the simulator's clock grows so large that a
    // step can round to nothing; it must still finish every flow.
    let mut p = one_put(Machine::K_COMPUTER);
    p.requests = (0..3)
        .map(|id| sode_scheduler::Request {
            id,
            dest: 1,
            direction: "E".into(),
            links: vec!["E".into()],
            bytes: 1 << 36,
        })
        .collect();
    for alg in ["round-robin:1", "bl:4", "greedy", "auto"] {
        let plan = within_a_second(alg, || plan(&p, alg.parse().unwrap()).unwrap());
        plan.validate(&p).unwrap();
        let sim = within_a_second("simulate", || sode_scheduler::simulate(&p, &plan).unwrap());
        assert!(
            sim.makespan_us.is_finite() && sim.makespan_us > 0.0,
            "{alg}: {sim:?}"
        );
    }
}

#[test]
fn runaway_machines_and_patterns_are_named_errors() {
    let cases: Vec<(&str, Machine)> = vec![
        (
            "command_overhead_us",
            Machine {
                command_overhead_us: 1e308,
                ..Machine::K_COMPUTER
            },
        ),
        (
            "engines",
            Machine {
                engines: 1 << 63,
                ..Machine::K_COMPUTER
            },
        ),
        (
            "engines",
            Machine {
                engines: 10_000,
                ..Machine::K_COMPUTER
            },
        ),
        (
            "node_gbps",
            Machine {
                node_gbps: 1e300,
                ..Machine::K_COMPUTER
            },
        ),
    ];
    for (field, m) in cases {
        let e = within_a_second(field, || plan(&one_put(m), Algorithm::Auto).unwrap_err());
        assert!(
            matches!(&e, SchedError::InvalidMachine { field: f, .. } if *f == field),
            "{field}: {e}"
        );
    }
    let e = scale_les3(u64::MAX, DirectionSet::All8, Machine::K_COMPUTER).unwrap_err();
    assert!(e.to_string().contains("vertical size"), "{e}");
    let e = halo(
        &HaloShape {
            size: vec![1 << 40, 1 << 40, 1 << 40],
            halo: 2,
            element_bytes: 8,
            neighbours: 26,
        },
        Machine::K_COMPUTER,
    )
    .unwrap_err();
    assert!(e.to_string().contains("overflows"), "{e}");
    let mut big = one_put(Machine::K_COMPUTER);
    big.requests[0].bytes = u64::MAX;
    let e = plan(&big, Algorithm::Auto).unwrap_err().to_string();
    assert!(e.contains("at most"), "{e}");
}

#[test]
fn qaplib_sizes_must_be_whole_numbers() {
    for n in ["2.7", "-3", "NaN", "inf", "0", "99999999999"] {
        let text = format!("{n}\n1 2\n3 4\n1 2\n3 4\n");
        let e = sode_scheduler::placement::parse_qaplib(&text)
            .unwrap_err()
            .to_string();
        assert!(e.contains("whole number"), "{n}: {e}");
    }
    let e = sode_scheduler::placement::parse_qaplib("2\n1 2\n3 NaN\n1 2\n3 4\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("finite"), "{e}");
    assert!(sode_scheduler::placement::parse_qaplib("2\n1 2\n3 4\n1 2\n3 4\n").is_ok());
}

#[test]
fn the_gantt_picture_escapes_names_from_its_input() {
    let p = one_put(Machine::K_COMPUTER);
    let mut plan = plan(&p, Algorithm::Auto).unwrap();
    plan.algorithm = "<script>alert(1)</script>&".into();
    let svg = sode_scheduler::gantt_svg(&p, &plan).unwrap();
    assert!(!svg.contains("<script>"), "{svg}");
    assert!(
        svg.contains("&lt;script&gt;alert(1)&lt;/script&gt;&amp;"),
        "{svg}"
    );
}

#[test]
fn command_line_durations_are_checked() {
    let dir = std::env::temp_dir().join(format!("sode-sched-place-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let m = dir.join("m.json");
    std::fs::write(&m, "[[0, 1], [1, 0]]").unwrap();
    let m = m.to_str().unwrap();
    for secs in ["1e300", "-1", "NaN", "inf"] {
        let arg = format!("--seconds={secs}");
        let (ok, _, err) = within_a_second(secs, || {
            cli(&["place", "--traffic", m, "--distance", m, &arg])
        });
        assert!(!ok && err.contains("--seconds"), "{secs}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `sode-sched` with its standard output sent to `stdout`.
fn cli_to(args: &[&str], stdout: std::process::Stdio) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sode-sched"))
        .args(args)
        .stdout(stdout)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run sode-sched");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn sizes_from_outside_are_checked_before_anything_is_allocated() {
    // 2^32 + 1 puts: refused by the limit, not by the allocator.
    let (ok, _, err) = cli(&["pattern", "random", "--n", "4294967297"]);
    assert!(
        !ok && err.contains("4294967297 puts") && err.contains("at most 100000"),
        "{err}"
    );
    // An endless input is read up to a bound, then refused.
    if std::path::Path::new("/dev/zero").exists() {
        let (ok, _, err) = cli(&["plan", "--algorithm", "bl:4", "/dev/zero"]);
        assert!(
            !ok && err.contains("/dev/zero") && err.contains("more than 256 MiB"),
            "{err}"
        );
    }
}

#[test]
fn a_full_disk_or_a_closed_pipe_is_an_error_not_a_panic() {
    if let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") {
        let (ok, err) = cli_to(&["pattern", "random", "--n", "100"], full.into());
        assert!(!ok, "writing to a full disk succeeded");
        assert!(
            err.contains("cannot write the output") && !err.contains("panicked"),
            "{err}"
        );
    }
    // A reader that has gone: the pipe's other end closed before a write.
    let mut child = Command::new(env!("CARGO_BIN_EXE_sode-sched"))
        .args(["pattern", "random", "--n", "100000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run sode-sched");
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && !err.contains("panicked"), "{err}");
}
