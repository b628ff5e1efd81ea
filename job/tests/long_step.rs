//! A collective step over the job's own links that goes on without
//! deadline says so: with `SODE_WAIT_WARN=1`, a barrier that rank 2 of 3
//! takes 2.5 s late warns on rank 0 (after 1 s and 2 s), naming rank 2,
//! and on rank 1, pointing to rank 0; then it completes on every rank.
//! A file of its own: the setting is read once a process.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sode_job::{LaunchInfo, Secret, World, NO_DEADLINE};

/// Every line the test's subscriber was given.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_collective_step_without_deadline_warns_naming_the_rank_it_waits_for() {
    std::env::set_var("SODE_WAIT_WARN", "1");
    let lines = Lines::default();
    let writer = lines.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .init();
    let (port, secret) = (sode_job::free_port().unwrap(), Secret::random().unwrap());
    let worlds: Vec<World> = (0..3)
        .map(|r| {
            let l = LaunchInfo {
                job_id: Some("long-step".into()),
                ..LaunchInfo::loopback(r, 3, port, secret.clone())
            };
            std::thread::spawn(move || World::init_with(&l, Duration::from_secs(60)))
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap().unwrap())
        .collect();
    std::thread::scope(|s| {
        for w in &worlds {
            s.spawn(move || {
                if w.rank() == 2 {
                    std::thread::sleep(Duration::from_millis(2500));
                }
                w.barrier(NO_DEADLINE).unwrap();
            });
        }
    });
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    println!("{text}");
    for want in [
        "a collective step has waited 1 s and goes on waiting; not taken yet by rank 2:",
        "a collective step has waited 2 s and goes on waiting; not taken yet by rank 2:",
        "a collective step has waited 1 s for rank 0's answer and goes on waiting",
    ] {
        assert!(text.contains(want), "no warning \"{want}\" in:\n{text}");
    }
}
