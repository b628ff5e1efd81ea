//! `HaloExchange::stats`: iterations, time and bytes per neighbour as the
//! exchange ran them, and the Chrome trace `SODE_TRACE` asks for (this
//! test binary sets it: it is the only test in it).

use std::time::{Duration, Instant};

use sode::{Decomposition, HaloExchange, Locality, Stencil, Transport};
mod common;
use common::{free_port, thread_world};

#[test]
fn stats_count_what_was_exchanged_and_the_trace_has_every_call() {
    let dir = std::env::temp_dir().join(format!("sode-stats-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Set before any thread of this binary starts.
    std::env::set_var(sode::TRACE_VAR, &dir);
    let port = free_port();
    let iterations = 5u64;
    let handles: Vec<_> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let w = thread_world(rank, 2, port, "stats-test");
                // 2 x 1 ranks, 12 x 5 cells each, periodic on axis 0 only:
                // the other rank on both sides, none on axis 1; two fields
                // of f64, halo 1. Both sides travel as one message each
                // way.
                let d = Decomposition::new(&[24, 5], &[2, 1], &[true, false], 1, Stencil::Faces)
                    .unwrap();
                let mut ex = HaloExchange::builder(&w, &d)
                    .transport(Transport::Shm)
                    .fields(2)
                    .build()
                    .unwrap();
                let cells: usize = ex.local_extent().iter().product();
                let (mut u, mut v) = (vec![1.0f64; cells], vec![2.0f64; cells]);
                for _ in 0..iterations {
                    ex.start(&[&u, &v]).unwrap();
                    ex.wait(
                        Instant::now() + Duration::from_secs(20),
                        &mut [&mut u, &mut v],
                    )
                    .unwrap();
                }
                let s = ex.stats();
                assert_eq!(s.exchanges, iterations);
                assert_eq!(s.neighbours.len(), 1, "{s:?}");
                // A face across axis 0: a column of 5 cells, two fields.
                let face = 5 * 2 * 8;
                for n in &s.neighbours {
                    assert_eq!((n.rank, n.channel), (1 - rank, Locality::Shm), "{n:?}");
                    assert_eq!((n.bytes_sent, n.bytes_received), (2 * face, 2 * face));
                }
                assert_eq!(s.bytes_sent, 2 * face * iterations);
                assert_eq!(s.bytes_received, 2 * face * iterations);
                assert!(s.start_time > Duration::ZERO && s.wait_time > Duration::ZERO);
                // Starts on one field count its bytes only: half of each
                // face.
                for _ in 0..3 {
                    ex.start_fields(&[1], &[&v]).unwrap();
                    let deadline = Instant::now() + Duration::from_secs(20);
                    ex.wait_fields(deadline, &[1], &mut [&mut v]).unwrap();
                }
                let s = ex.stats();
                assert_eq!(s.exchanges, iterations + 3);
                let moved = 2 * face * iterations + 3 * face;
                assert_eq!((s.bytes_sent, s.bytes_received), (moved, moved));
                let n = &s.neighbours[0];
                assert_eq!((n.bytes_sent, n.bytes_received), (face, face), "{n:?}");
                ex.reset_stats();
                let s = ex.stats();
                assert_eq!(
                    (s.exchanges, s.bytes_sent, s.start_time),
                    (0, 0, Duration::ZERO)
                );
                (w.job_id().to_string(), rank)
            })
        })
        .collect();
    let ranks: Vec<(String, usize)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    // The exchanges are dropped: each rank wrote its trace.
    let traces: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(traces.len(), 2, "{traces:?} for {ranks:?}");
    for t in traces {
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&t).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", t.display()));
        let events = v["traceEvents"].as_array().unwrap();
        let count = |name: &str| events.iter().filter(|e| e["name"] == name).count() as u64;
        // The full starts and the three on one field.
        assert_eq!(
            (count("start"), count("wait")),
            (iterations + 3, iterations + 3),
            "{}",
            t.display()
        );
        assert!(events
            .iter()
            .all(|e| e["ph"] == "X" && e["dur"].as_f64().unwrap() >= 0.0));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
