//! A rank's death reaches every rank of the job, not only its neighbours:
//! four ranks in a chain (0 - 1 - 2 - 3) exchange halos as separate
//! processes; one dies (SIGKILL) or stops (SIGSTOP) mid-run; every survivor's
//! wait fails within a bound, naming the dead rank, although ranks 0 and 1
//! never exchange with rank 3. Survivors keep their processes (and links)
//! alive after reporting, so the news cannot travel by a chain of exits.
//! The health tree (rank 0 parent of 1 and 2, rank 1 of 3) differs from the
//! chain, so most verdicts cross a rank that never exchanges with the dead
//! one.
//!
//! A rank that exits without freeing anything says so at exit: with a
//! failing status it is reported as dead, with status 0 (a program that
//! ends without freeing its communicators) it is not.
//!
//! The ranks are this test executable run again, by the `rank` test below
//! (a no-op unless `SODE_HEALTH_TEST` is set).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sode::{Decomposition, HaloExchange, Stencil, Transport};
use sode_job::World;
mod common;
use common::free_port;

const ROLE: &str = "SODE_HEALTH_TEST";
const SIZE: usize = 4;
/// The iteration the doomed rank dies in.
const DIE_AT: usize = 5;
/// Each wait's deadline: far beyond the bound the test asserts.
const DEADLINE: Duration = Duration::from_secs(20);

/// How the doomed rank goes.
#[derive(Clone, Copy, Debug)]
enum Death {
    /// Killed: its links close at once.
    Kill,
    /// Stopped: its links stay open; only its silence tells.
    Stop,
    /// Exits with status 3 without freeing anything, mid-run.
    FailedExit,
    /// Finishes its iterations and exits with status 0 without freeing
    /// anything (a C `return` from `main`), the others still running.
    Finish,
}

impl Death {
    /// The child's word for it.
    fn kind(self) -> &'static str {
        match self {
            Death::Kill => "kill",
            Death::Stop => "stop",
            Death::FailedExit => "exit3",
            Death::Finish => "finish",
        }
    }
}

/// Iterations of a job whose doomed rank finishes ([`Death::Finish`]).
const FINISH_AFTER: usize = 20;

/// One rank of the job, when run as a child (`ROLE` is
/// `transport,doomed,kill|stop|exit3|finish|poweroff`).
#[test]
fn rank() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let mut it = role.split(',');
    let transport = match it.next() {
        Some("tcp") => Transport::Tcp,
        _ => Transport::Auto,
    };
    let doomed: usize = it.next().unwrap().parse().unwrap();
    let how = it.next().unwrap_or("kill").to_string();
    let w = World::init(Duration::from_secs(30)).unwrap();
    let me = w.rank();
    let d = Decomposition::new(&[64, 8], &[SIZE, 1], &[false, false], 1, Stencil::Full).unwrap();
    let mut halo = HaloExchange::builder(&w, &d)
        .transport(transport)
        .build()
        .unwrap();
    // Idle throughout, for a start once the job has failed.
    let mut spare = HaloExchange::builder(&w, &d)
        .transport(transport)
        .build()
        .unwrap();
    let cells: usize = halo.local_extent().iter().product();
    let mut u = vec![me as f64; cells];
    if how == "finish" {
        for _ in 0..FINISH_AFTER {
            halo.start(&[&u]).unwrap();
            halo.wait(Instant::now() + DEADLINE, &mut [&mut u]).unwrap();
        }
        if me == doomed {
            // Nothing dropped: the World's links close with the process.
            std::process::exit(0);
        }
        // Long enough for the doomed rank's links to close and its tree
        // neighbours to judge it.
        std::thread::sleep(Duration::from_secs(2));
        let failure = w.failure().map_or("none".into(), |f| f.to_string());
        println!("rank {me}: after rank {doomed} finished: failure {failure}");
        return;
    }
    for iteration in 0..100_000 {
        if me == doomed && iteration == DIE_AT {
            go(&how);
        }
        let t0 = Instant::now();
        let step = halo
            .start(&[&u])
            .and_then(|()| halo.wait(Instant::now() + DEADLINE, &mut [&mut u]));
        if let Err(e) = step {
            let spent = t0.elapsed();
            // Once the job is known to have failed, a start is refused, and
            // a wait after it says what failed, not only that nothing is in
            // flight.
            let known = Instant::now() + Duration::from_secs(20);
            while w.failure().is_none() && Instant::now() < known {
                std::thread::sleep(Duration::from_millis(10));
            }
            let said = |r: sode::Result<()>| {
                r.map_or_else(|e| sode_job::diag::chain(&e), |()| "ok".into())
            };
            let start = said(spare.start(&[&u]));
            let wait = said(spare.wait(Instant::now(), &mut [&mut u]));
            println!(
                "rank {me}: failed after {} ms in iteration {iteration}: {}; then a start: {start}; a wait: {wait}",
                spent.as_millis(),
                sode_job::diag::chain(&e)
            );
            // Alive, links open, until the test has read every report.
            std::thread::sleep(Duration::from_secs(3));
            return;
        }
    }
    panic!("rank {me}: no failure in 100000 iterations");
}

/// Ends this process as `how` says: `kill` (SIGKILL), `stop` (SIGSTOP), or
/// `poweroff`: the whole node goes at once, its connections neither closed
/// nor reset (run by `ci/softroce/node-death.sh` in a VM, as root).
fn go(how: &str) {
    use nix::sys::signal::{raise, Signal};
    match how {
        "stop" => raise(Signal::SIGSTOP).unwrap(),
        // Nothing dropped: the exit hook tells the tree neighbours.
        "exit3" => std::process::exit(3),
        "poweroff" => {
            println!(
                "rank {}: powering the node off",
                std::env::var("SODE_RANK").unwrap_or_default()
            );
            std::fs::write("/proc/sysrq-trigger", "o").unwrap();
            std::thread::sleep(Duration::from_secs(60));
        }
        _ => raise(Signal::SIGKILL).unwrap(),
    }
}

/// Runs the job with rank `doomed` going by `death`; per survivor, its
/// report line.
fn run_job(transport: &str, doomed: usize, death: Death) -> Vec<String> {
    let marker = match death {
        Death::Finish => "after rank",
        _ => "failed after",
    };
    run_job_for(transport, doomed, death, marker)
}

/// As [`run_job`]: per survivor, its line from `rank R: MARKER` on.
fn run_job_for(transport: &str, doomed: usize, death: Death, marker: &str) -> Vec<String> {
    // One job at a time: four processes each on two cores are enough.
    static ONE_JOB: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_JOB.lock().unwrap_or_else(|p| p.into_inner());
    let port = free_port();
    let secret: String = "7d".repeat(32);
    let job = format!("health{}{doomed}{:?}", std::process::id(), death);
    let kind = death.kind();
    let children: Vec<_> = (0..SIZE)
        .map(|r| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "rank", "--nocapture", "--test-threads=1"])
                .env(ROLE, format!("{transport},{doomed},{kind}"))
                .env("SODE_RANK", r.to_string())
                .env("SODE_SIZE", SIZE.to_string())
                .env("SODE_ROOT", format!("127.0.0.1:{port}"))
                .env("SODE_JOB_SECRET", &secret)
                .env("SODE_JOB_ID", &job)
                .env("SODE_HEALTH_TIMEOUT", "2")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut children: Vec<Option<std::process::Child>> = children.into_iter().map(Some).collect();
    let doomed_child = children[doomed].take().unwrap();
    let survivors: Vec<(usize, String)> = children
        .into_iter()
        .enumerate()
        .filter_map(|(r, c)| c.map(|c| (r, output(c))))
        .collect();
    // A stopped rank is killed now; a killed one is reaped.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(doomed_child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let doomed_text = output(doomed_child);
    let mut reports = Vec::new();
    for (r, text) in survivors {
        println!("rank {r}:\n{text}");
        // The harness's "test rank ... " may precede the report.
        let start = format!("rank {r}: {marker}");
        let line = text
            .lines()
            .find_map(|l| l.find(&start).map(|i| &l[i..]))
            .unwrap_or_else(|| {
                panic!(
                    "rank {r} reported nothing:\n{text}\nthe doomed rank {doomed}:\n{doomed_text}"
                )
            });
        reports.push(line.to_string());
    }
    reports
}

/// A child's stdout and stderr, once it has ended.
fn output(child: std::process::Child) -> String {
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
}

/// At least one report says `what` (how the rank was found dead).
fn some_says(reports: &[String], what: &str) {
    assert!(reports.iter().any(|l| l.contains(what)), "{reports:?}");
}

/// Every report names rank `doomed` and came within `bound`.
fn check(reports: &[String], doomed: usize, bound: Duration) {
    assert_eq!(reports.len(), SIZE - 1, "{reports:?}");
    // The job's verdict, or a neighbour's own channel naming it.
    let names = |text: &str| {
        text.contains(&format!("rank {doomed} (on "))
            || text.contains(&format!("with rank {doomed}"))
            || text.contains(&format!("peer rank {doomed} "))
    };
    for line in reports {
        let (first, rest) = line.split_once("; then a start: ").unwrap_or((line, ""));
        let (start, wait) = rest.split_once("; a wait: ").unwrap_or((rest, ""));
        assert!(
            names(first),
            "a survivor does not name the dead rank {doomed}: {line}"
        );
        assert!(
            names(start),
            "a start after it does not name the dead rank {doomed}: {line}"
        );
        assert!(
            names(wait),
            "the wait after that does not name the dead rank {doomed}: {line}"
        );
        let ms: u64 = line
            .split("failed after ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert!(
            Duration::from_millis(ms) < bound,
            "reported after {ms} ms (bound {bound:?}): {line}"
        );
    }
}

#[test]
fn a_killed_rank_is_reported_by_every_rank_over_shared_memory() {
    check(&run_job("auto", 3, Death::Kill), 3, Duration::from_secs(2));
}

#[test]
fn a_killed_rank_is_reported_by_every_rank_over_tcp() {
    check(&run_job("tcp", 2, Death::Kill), 2, Duration::from_secs(2));
}

#[test]
fn a_killed_rank_0_is_reported_by_every_rank() {
    // Rank 0 is the health tree's root (children 1 and 2; rank 3 is rank
    // 1's child).
    check(&run_job("tcp", 0, Death::Kill), 0, Duration::from_secs(2));
}

#[test]
fn a_killed_inner_rank_is_reported_by_every_rank() {
    // Rank 1 sits between the root and rank 3 in the health tree: rank 2
    // hears of it through rank 0 alone.
    check(&run_job("auto", 1, Death::Kill), 1, Duration::from_secs(2));
}

#[test]
fn a_stopped_rank_is_declared_dead_after_its_silence() {
    // SODE_HEALTH_TIMEOUT=2: two seconds without a heartbeat, then the news.
    let reports = run_job("auto", 3, Death::Stop);
    check(&reports, 3, Duration::from_secs(6));
    some_says(&reports, "no heartbeat");
}

#[test]
fn a_rank_that_exits_with_a_failing_status_is_reported_by_every_rank() {
    // Rank 1 calls exit(3) mid-run, freeing nothing: its exit hook tells
    // its tree neighbours it failed, and the news floods the tree.
    let reports = run_job("auto", 1, Death::FailedExit);
    check(&reports, 1, Duration::from_secs(2));
    some_says(&reports, "exited with status 3");
}

#[test]
fn a_rank_that_finishes_without_freeing_is_not_taken_for_dead() {
    // Rank 1 (between rank 0 and rank 3 in the health tree) ends its
    // program after its last exchange without dropping its World, as a C
    // program returns from main: its exit hook says goodbye, so the ranks
    // still running record no failure.
    let reports = run_job("auto", 1, Death::Finish);
    assert_eq!(reports.len(), SIZE - 1, "{reports:?}");
    for line in &reports {
        assert!(line.ends_with("failure none"), "{line}");
    }
}
