//! A paused rank is not a dead one: four ranks (separate processes, a
//! chain 0 - 1 - 2 - 3) run a Jacobi sweep with sode's halo exchange while
//! one of them, or all at once, are stopped (SIGSTOP: what a debugger's
//! breakpoint or Slurm's `scontrol suspend` does) for longer than a
//! heartbeat's silence used to be allowed, then continued. Nothing sets
//! `SODE_HEALTH_TIMEOUT`: silence is reported, not fatal, and the job must
//! finish with every rank's block equal, bit for bit, to a single-process
//! sweep of the whole grid.
//!
//! A whole job suspended for longer than its deadlines (a wait's timeout,
//! `SODE_HEALTH_TIMEOUT`) resumes too: time in which a rank did not run
//! does not count against them.
//!
//! The ranks are this test executable run again, by the `rank` test below
//! (a no-op unless `SODE_PAUSE_TEST` is set).

use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, raise, Signal};
use nix::unistd::Pid;
use sode::{Decomposition, HaloExchange, Stencil};
use sode_job::World;
mod common;
use common::{free_port, outputs_of, spawn_rank};

const ROLE: &str = "SODE_PAUSE_TEST";
/// Seconds each wait of a rank may take (120 unless set).
const WAIT_VAR: &str = "SODE_PAUSE_TEST_WAIT";
const SIZE: usize = 4;
const GLOBAL: [usize; 2] = [40, 9];
const ITERS: usize = 30;
/// The iteration in which the paused ranks stop themselves.
const PAUSE_AT: usize = 5;

fn decomposition() -> Decomposition {
    Decomposition::new(&GLOBAL, &[SIZE, 1], &[false, false], 1, Stencil::Faces).unwrap()
}

/// The starting value of global cell (x, y).
fn initial(x: usize, y: usize) -> f64 {
    ((x * 31 + y * 17) % 23) as f64 + 0.5
}

/// One sweep over the owned cells of an array of extent `ext` (axis 0
/// fastest) whose owned box starts at 1 on both axes.
fn sweep(ext: &[usize], u: &[f64], v: &mut [f64]) {
    for y in 1..ext[1] - 1 {
        for x in 1..ext[0] - 1 {
            let at = |x: usize, y: usize| u[y * ext[0] + x];
            v[y * ext[0] + x] = 0.25 * (at(x - 1, y) + at(x + 1, y) + at(x, y - 1) + at(x, y + 1));
        }
    }
}

/// One rank of the job, when run as a child (`ROLE` names the ranks that
/// pause themselves: a rank, `all`, `job`: all but rank 0, which the test
/// stops as it waits for them, or `setup`: the same as the job starts).
#[test]
fn rank() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    // Warnings to stderr, as a program's would be (the report of silence).
    sode_job::diag::init();
    let wait = std::env::var(WAIT_VAR)
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_secs(120), Duration::from_secs);
    let launch_rank = std::env::var("SODE_RANK").unwrap();
    if role == "setup" && launch_rank != "0" {
        // Suspended as the job starts: rank 0 meets the others alone.
        raise(Signal::SIGSTOP).unwrap();
    }
    let w = World::init(if role == "setup" {
        wait
    } else {
        Duration::from_secs(30)
    })
    .unwrap_or_else(|e| panic!("rank {launch_rank}: {}", sode_job::diag::chain(&e)));
    let me = w.rank();
    let pauses = match role.as_str() {
        "all" => true,
        "job" => me != 0,
        r => r.parse::<usize>().ok() == Some(me),
    };
    let d = decomposition();
    let mut halo = HaloExchange::builder(&w, &d).build().unwrap();
    let ext = halo.local_extent().to_vec();
    let (start, size) = d.block(me);
    let mut u = vec![0.0; ext.iter().product()];
    for y in 0..size[1] {
        for x in 0..size[0] {
            u[(y + 1) * ext[0] + x + 1] = initial(start[0] + x, start[1] + y);
        }
    }
    let mut v = u.clone();
    for it in 0..ITERS {
        if pauses && it == PAUSE_AT {
            raise(Signal::SIGSTOP).unwrap();
        }
        if role == "job" && it == PAUSE_AT + 2 {
            // Suspended again, rank 0 inside a collective step this time.
            if me != 0 {
                raise(Signal::SIGSTOP).unwrap();
            }
            w.barrier(wait)
                .unwrap_or_else(|e| panic!("rank {me}: {}", sode_job::diag::chain(&e)));
        }
        halo.start(&[&u]).unwrap();
        halo.wait(Instant::now() + wait, &mut [&mut u])
            .unwrap_or_else(|e| panic!("rank {me}: {}", sode_job::diag::chain(&e)));
        sweep(&ext, &u, &mut v);
        std::mem::swap(&mut u, &mut v);
    }
    // The whole grid, one process, walls of zero.
    let gext = [GLOBAL[0] + 2, GLOBAL[1] + 2];
    let mut g = vec![0.0; gext[0] * gext[1]];
    for y in 0..GLOBAL[1] {
        for x in 0..GLOBAL[0] {
            g[(y + 1) * gext[0] + x + 1] = initial(x, y);
        }
    }
    let mut h = g.clone();
    for _ in 0..ITERS {
        sweep(&gext, &g, &mut h);
        std::mem::swap(&mut g, &mut h);
    }
    for y in 0..size[1] {
        for x in 0..size[0] {
            let (mine, whole) = (
                u[(y + 1) * ext[0] + x + 1],
                g[(start[1] + y + 1) * gext[0] + start[0] + x + 1],
            );
            assert_eq!(
                mine.to_bits(),
                whole.to_bits(),
                "rank {me}, cell ({x}, {y})"
            );
        }
    }
    println!("rank {me}: {ITERS} iterations, every cell equal to the single-process sweep");
}

/// Whether process `pid` is stopped.
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|t| t.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

/// Runs the job with `who` pausing (a rank, `all`, `job`: the whole job,
/// rank 0 stopped by the test inside its wait, then again for as long
/// inside a barrier, or `setup`: the whole job, rank 0 stopped as it waits
/// for the others to meet) for `pause`, then continued, each rank with
/// `env` set; each rank's output, after all have ended well.
fn run_job(who: &str, pause: Duration, env: &[(&str, &str)]) -> Vec<String> {
    static ONE_JOB: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_JOB.lock().unwrap_or_else(|p| p.into_inner());
    let port = free_port();
    let job = format!("pause{}{who}", std::process::id());
    // Nothing sets SODE_HEALTH_TIMEOUT: the ranks run as a user's would.
    let children: Vec<Child> = (0..SIZE)
        .map(|r| spawn_rank(r, SIZE, port, &job, (ROLE, who), env))
        .collect();
    let pids: Vec<u32> = children.iter().map(Child::id).collect();
    let whole_job = who == "job" || who == "setup";
    let paused: Vec<u32> = match who.parse::<usize>() {
        Ok(r) => vec![pids[r]],
        Err(_) if whole_job => pids[1..].to_vec(),
        Err(_) => pids.clone(),
    };
    let rounds = if who == "job" { 2 } else { 1 };
    for _ in 0..rounds {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !paused.iter().all(|&p| stopped(p)) {
            assert!(
                Instant::now() < deadline,
                "the ranks did not stop themselves"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let paused = if whole_job {
            // Rank 0 waits for rank 1 (its face, then its part of the
            // barrier), which will not come while rank 1 is stopped: the
            // suspension catches it inside its wait.
            std::thread::sleep(Duration::from_millis(300));
            kill(Pid::from_raw(pids[0] as i32), Signal::SIGSTOP).unwrap();
            pids.clone()
        } else {
            paused.clone()
        };
        std::thread::sleep(pause);
        for &p in &paused {
            kill(Pid::from_raw(p as i32), Signal::SIGCONT).unwrap();
        }
        // Running again before the next round looks for stopped ranks.
        std::thread::sleep(Duration::from_millis(200));
    }
    outputs_of(children)
}

fn check(outputs: &[String]) {
    for (r, text) in outputs.iter().enumerate() {
        assert!(
            text.contains(&format!(
                "rank {r}: {ITERS} iterations, every cell equal to the single-process sweep"
            )),
            "rank {r} did not finish its check:\n{text}"
        );
    }
}

#[test]
fn rank_0_paused_for_15_s_is_waited_for() {
    // Rank 0 holds every other rank's health link.
    let outputs = run_job("0", Duration::from_secs(15), &[]);
    check(&outputs);
    assert!(
        outputs[1..]
            .iter()
            .any(|t| t.contains("rank 0 has sent no heartbeat")),
        "the silence is reported: {outputs:?}"
    );
}

#[test]
fn a_whole_job_suspended_for_12_s_resumes() {
    check(&run_job("all", Duration::from_secs(12), &[]));
}

#[test]
fn a_job_suspended_as_it_starts_past_its_setup_timeout_meets() {
    // Ranks 1-3 stopped before they meet; rank 0 stopped as it waits for
    // them in the rendezvous, for 6 s, with a setup timeout of 4 s.
    let outputs = run_job("setup", Duration::from_secs(6), &[(WAIT_VAR, "4")]);
    check(&outputs);
}

#[test]
fn a_whole_job_suspended_past_its_deadlines_resumes() {
    // Slurm's `scontrol suspend` or gang scheduling: every rank stopped
    // for 6 s, rank 0 inside a wait whose timeout is 4 s, with silence
    // fatal after 4 s; then again, rank 0 inside a barrier (a collective
    // step over the job's TCP links) with the same timeout. Every rank
    // was stopped; none was late.
    let outputs = run_job(
        "job",
        Duration::from_secs(6),
        &[
            ("SODE_HEALTH_TIMEOUT", "4"),
            (WAIT_VAR, "4"),
            ("SODE_LOG", "sode_job=info"),
        ],
    );
    check(&outputs);
    assert!(
        outputs[0].contains("this process did not run for"),
        "rank 0's watcher saw its own stop: {}",
        outputs[0]
    );
}
