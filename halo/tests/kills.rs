//! A rank killed at any moment leaves nothing in the shared-memory
//! directory: 50 jobs of two ranks (processes: this test executable run
//! again) exchange halos over shared memory, and the test kills one of
//! them with SIGKILL at a random time from its start, during the
//! bootstrap, the commit or the exchanges. The survivor must end within
//! a bound (it fails, naming the dead rank, or finishes), and once it has
//! ended no file or directory of the job may be left in the ranks'
//! `SODE_SHM_DIR` (a directory of the test's own, so that other jobs on
//! the node do not count) but the user's kept shared-memory thresholds
//! (`sode-probes-UID`, meant to outlive jobs). The times and the rank
//! killed come from a seed printed with every failure (`SODE_KILLS_SEED`
//! replays it).
//!
//! Nor does a job whose ranks exit without freeing their exchanges and
//! `World` (as a C or Fortran program that ends with them alive does):
//! the last of a node's processes to exit removes the job's directory.
//!
//! Nor does a job whose survivor ends through `_exit` (as `MPI_Abort`
//! does, running no exit hook) once its exchange fails for a rank killed.
//!
//! Nor does a job whose ranks are all ended at once by SIGTERM, SIGINT or
//! SIGHUP (a batch system's time limit or cancel, `mpirun` stopped, a
//! terminal closed), whose ranks still end by that signal; a rank that
//! ignores SIGTERM goes on.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{SigHandler, Signal};
use sode::{Decomposition, HaloExchange, Stencil, Transport};
use sode_job::World;
mod common;
use common::{free_port, spawn_rank};

const ROLE: &str = "SODE_KILLS_TEST";
const JOBS: usize = 50;
/// Kills land from 0 to this after the ranks are spawned: a job's
/// bootstrap, commit and first exchanges take 50-300 ms here.
const KILL_WITHIN: Duration = Duration::from_millis(600);
/// How long a rank exchanges before it ends by itself: beyond any kill.
const RUN_FOR: Duration = Duration::from_secs(2);
/// How long the survivor may take to end once its peer is dead.
const SURVIVOR_ENDS_WITHIN: Duration = Duration::from_secs(20);

/// Set for a rank that exits holding its exchange and world: the
/// milliseconds it waits after the job's last barrier before it exits.
const EXIT_AFTER: &str = "SODE_KILLS_EXIT_AFTER_MS";

/// Set for a rank that ends through `_exit` as soon as an exchange fails,
/// as a program that calls `MPI_Abort` on an error does.
const EXIT_ON_FAILURE: &str = "SODE_KILLS_EXIT_ON_FAILURE";

/// Set for a rank that ignores SIGTERM, as a program may choose to.
const IGNORE_TERM: &str = "SODE_KILLS_IGNORE_TERM";

/// One rank of a job, when run as a child: exchanges for [`RUN_FOR`]
/// (or, with [`EXIT_AFTER`], 50 times, then exits holding everything).
#[test]
fn rank() {
    if std::env::var_os(ROLE).is_none() {
        return;
    }
    // A batch system starts its tasks with the default actions; a shell
    // that ran this test in the background (`&`, `nohup`, as CI may) left
    // SIGINT and SIGHUP ignored, and so inherited here.
    let term = if std::env::var_os(IGNORE_TERM).is_some() {
        SigHandler::SigIgn
    } else {
        SigHandler::SigDfl
    };
    for (sig, action) in [
        (Signal::SIGTERM, term),
        (Signal::SIGINT, SigHandler::SigDfl),
        (Signal::SIGHUP, SigHandler::SigDfl),
    ] {
        // SAFETY: no handler is installed; the action is only set.
        #[allow(unsafe_code)]
        unsafe {
            nix::sys::signal::signal(sig, action).unwrap();
        }
    }
    if let Some(ms) = std::env::var(EXIT_AFTER).ok().and_then(|v| v.parse().ok()) {
        exit_holding_everything(Duration::from_millis(ms));
    }
    let mut r = ShmRank::join();
    let until = Instant::now() + RUN_FOR;
    if std::env::var_os(IGNORE_TERM).is_some() {
        // Both live to the end: they agree on the last iteration, so
        // that neither frees its exchange while the other runs it.
        loop {
            for _ in 0..1000 {
                r.exchange();
            }
            let over = [u8::from(Instant::now() >= until)];
            let said = r.world.allgather(&over, Duration::from_secs(10)).unwrap();
            if said.iter().any(|s| s == &[1]) {
                return;
            }
        }
    }
    if std::env::var_os(EXIT_ON_FAILURE).is_some() {
        while Instant::now() < until {
            r.halo.start(&[&r.u]).unwrap();
            if r.halo
                .wait(Duration::from_secs(10), &mut [&mut r.u])
                .is_err()
            {
                // As MPI_Abort ends a rank: no exit hook runs.
                // SAFETY: `_exit` ends the process; it takes no memory.
                #[allow(unsafe_code)]
                unsafe {
                    nix::libc::_exit(0)
                };
            }
        }
        return;
    }
    while Instant::now() < until {
        r.exchange();
    }
}

/// A rank of a job: its world, an exchange over shared memory with the
/// other rank, and its field.
struct ShmRank {
    world: World,
    halo: HaloExchange,
    u: Vec<f64>,
}

impl ShmRank {
    fn join() -> ShmRank {
        let world = World::init(Duration::from_secs(10)).unwrap();
        let d = Decomposition::new(&[64, 16], &[2, 1], &[true, true], 1, Stencil::Full).unwrap();
        let halo = HaloExchange::builder(&world, &d)
            .transport(Transport::Shm)
            .build()
            .unwrap();
        let u = vec![world.rank() as f64; halo.local_extent().iter().product()];
        ShmRank { world, halo, u }
    }

    fn exchange(&mut self) {
        self.halo.start(&[&self.u]).unwrap();
        self.halo
            .wait(Duration::from_secs(10), &mut [&mut self.u])
            .unwrap();
    }
}

/// Builds an exchange over shared memory, runs it 50 times, takes a
/// barrier, waits `after` and exits through `exit` with the exchange and
/// the world alive: no destructor runs.
fn exit_holding_everything(after: Duration) -> ! {
    let mut r = ShmRank::join();
    for _ in 0..50 {
        r.exchange();
    }
    r.world.barrier(Duration::from_secs(10)).unwrap();
    let fork = std::env::var(FORK)
        .ok()
        .filter(|how| r.world.rank() == 0 && !how.is_empty());
    let forks = fork.is_some();
    if let Some(how) = fork {
        fork_a_child_that_ends(&how);
    }
    std::thread::sleep(after);
    if forks && job_dirs() == 0 {
        // The child's exit must not have released this process's hold.
        eprintln!("rank 0 is alive, and its job directory is gone");
        std::process::exit(3);
    }
    std::process::exit(0)
}

/// Set for rank 0 to fork a child that ends at once, sharing (as a
/// forked child does) the rank's lock on the job's directory: through
/// `exit` (`exit`), or by SIGTERM (`term`).
const FORK: &str = "SODE_KILLS_FORK";

/// Forks a child that ends as `how` says, and waits for it.
#[allow(unsafe_code)]
fn fork_a_child_that_ends(how: &str) {
    // SAFETY: the child calls only `raise` and `exit`, whose handlers
    // (sode's) take no lock another thread of the parent could have held
    // at the fork.
    match unsafe { nix::unistd::fork() }.unwrap() {
        nix::unistd::ForkResult::Child => {
            if how == "term" {
                let _ = nix::sys::signal::raise(Signal::SIGTERM);
            }
            std::process::exit(0)
        }
        nix::unistd::ForkResult::Parent { child } => {
            nix::sys::wait::waitpid(child, None).unwrap();
        }
    }
}

/// How many job directories there are in this rank's `SODE_SHM_DIR`.
fn job_dirs() -> usize {
    let dir = std::env::var_os("SODE_SHM_DIR").unwrap();
    let prefix = format!("sode-{}-", nix::unistd::geteuid());
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .count()
}

/// The seed of the kill times: `SODE_KILLS_SEED`, or the clock's.
fn seed() -> u64 {
    std::env::var("SODE_KILLS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64 | 1)
        })
}

/// A small generator for the kill times (xorshift64*), from a seed.
struct Draws(u64);

impl Draws {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// The `SODE_SHM_DIR` of a test's jobs, its own (so that other jobs on
/// the node do not count); `None` in a rank, which runs no such test.
fn scratch(name: &str) -> Option<PathBuf> {
    if std::env::var_os(ROLE).is_some() {
        return None;
    }
    Some(std::env::temp_dir().join(format!("sode-{name}-{}", std::process::id())))
}

/// What is in `dir`, recursively, as paths relative to it, but the
/// user's kept thresholds.
fn contents(dir: &Path) -> Vec<String> {
    let kept = format!("sode-probes-{}", nix::unistd::geteuid());
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if d == dir && e.file_name().to_str() == Some(kept.as_str()) {
                continue;
            }
            found.push(p.strip_prefix(dir).unwrap_or(&p).display().to_string());
            if p.is_dir() {
                pending.push(p);
            }
        }
    }
    found
}

/// Waits for `child` to end within `bound`; kills it and says so if not.
fn ended_within(child: &mut std::process::Child, bound: Duration) -> bool {
    let until = Instant::now() + bound;
    loop {
        if child.try_wait().unwrap().is_some() {
            return true;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One job: rank `doomed` killed `after` its spawning; what the job left
/// in `dir` (empty when nothing), or why the survivor is a failure.
fn one_job(dir: &Path, job: &str, doomed: usize, after: Duration) -> Result<Vec<String>, String> {
    let port = free_port();
    let shm_dir = dir.display().to_string();
    let env = [("SODE_SHM_DIR", shm_dir.as_str())];
    let mut ranks: Vec<_> = (0..2)
        .map(|r| spawn_rank(r, 2, port, job, (ROLE, "1"), &env))
        .collect();
    std::thread::sleep(after);
    let _ = ranks[doomed].kill();
    let _ = ranks[doomed].wait();
    let survivor = &mut ranks[1 - doomed];
    if !ended_within(survivor, SURVIVOR_ENDS_WITHIN) {
        return Err(format!(
            "the survivor, rank {}, did not end within {SURVIVOR_ENDS_WITHIN:?}",
            1 - doomed
        ));
    }
    Ok(contents(dir))
}

#[test]
fn a_rank_killed_at_any_moment_leaves_nothing_behind() {
    if std::env::var_os(ROLE).is_some() {
        return;
    }
    let seed = seed();
    let mut draws = Draws(seed);
    let dir: PathBuf = std::env::temp_dir().join(format!("sode-kills-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut left = Vec::new();
    for n in 0..JOBS {
        let doomed = (draws.next() % 2) as usize;
        let after = Duration::from_micros(draws.next() % KILL_WITHIN.as_micros() as u64);
        let job = format!("kills{}x{n}", std::process::id());
        match one_job(&dir, &job, doomed, after) {
            Ok(found) if found.is_empty() => {}
            Ok(found) => left.push(format!(
                "job {n} (rank {doomed} killed after {after:?}) left {found:?}"
            )),
            Err(why) => left.push(format!(
                "job {n} (rank {doomed} killed after {after:?}): {why}"
            )),
        }
        // What one job left must not be taken for the next one's.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        left.is_empty(),
        "seed {seed} (SODE_KILLS_SEED={seed} replays it): {} of {JOBS} jobs:\n{}",
        left.len(),
        left.join("\n")
    );
}

#[test]
fn ranks_that_exit_without_freeing_leave_nothing_behind() {
    let Some(dir) = scratch("exits") else {
        return;
    };
    let shm_dir = dir.display().to_string();
    let mut left = Vec::new();
    // Both at once (each may find the other still holding the directory),
    // each rank after the other, and rank 0 last after a child of it,
    // forked after the barrier, exited (or ended by SIGTERM) before rank 1.
    let orders = [
        [0, 0],
        [0, 0],
        [0, 0],
        [0, 0],
        [0, 300],
        [300, 0],
        [300, 0],
        [300, 0],
    ];
    for (n, delays) in orders.iter().enumerate() {
        let fork = match orders.len() - n {
            2 => "exit",
            1 => "term",
            _ => "",
        };
        std::fs::create_dir_all(&dir).unwrap();
        let (port, job) = (free_port(), format!("exits{}x{n}", std::process::id()));
        let ranks: Vec<_> = delays
            .iter()
            .enumerate()
            .map(|(r, ms)| {
                let ms = ms.to_string();
                let env = [
                    ("SODE_SHM_DIR", shm_dir.as_str()),
                    (EXIT_AFTER, ms.as_str()),
                    (FORK, fork),
                ];
                spawn_rank(r, 2, port, &job, (ROLE, "1"), &env)
            })
            .collect();
        for (r, child) in ranks.into_iter().enumerate() {
            let (ok, out) = common::output_of(child);
            assert!(ok, "job {n}, rank {r} failed:\n{out}");
        }
        let found = contents(&dir);
        if !found.is_empty() {
            left.push(format!(
                "job {n} (exits {delays:?} ms after the barrier) left {found:?}"
            ));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(left.is_empty(), "{}", left.join("\n"));
}

/// Jobs ended by a signal, each of its two ranks sent it at once.
const SIGNALLED_JOBS: usize = 12;

#[test]
fn a_job_ended_by_a_signal_leaves_nothing_behind() {
    use std::os::unix::process::ExitStatusExt;
    let seed = seed();
    let mut draws = Draws(seed);
    let Some(dir) = scratch("signals") else {
        return;
    };
    let shm_dir = dir.display().to_string();
    let signals = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP];
    let mut failed = Vec::new();
    // The last job's ranks ignore SIGTERM: sode leaves that choice alone.
    for n in 0..=SIGNALLED_JOBS {
        let ignored = n == SIGNALLED_JOBS;
        let sig = if ignored {
            Signal::SIGTERM
        } else {
            signals[n % 3]
        };
        let after = Duration::from_micros(draws.next() % KILL_WITHIN.as_micros() as u64);
        std::fs::create_dir_all(&dir).unwrap();
        let (port, job) = (free_port(), format!("signals{}x{n}", std::process::id()));
        let env: &[(&str, &str)] = if ignored {
            &[("SODE_SHM_DIR", &shm_dir), (IGNORE_TERM, "1")]
        } else {
            &[("SODE_SHM_DIR", &shm_dir)]
        };
        let mut ranks: Vec<_> = (0..2)
            .map(|r| spawn_rank(r, 2, port, &job, (ROLE, "1"), env))
            .collect();
        std::thread::sleep(after);
        for r in &ranks {
            let pid = nix::unistd::Pid::from_raw(r.id() as i32);
            let _ = nix::sys::signal::kill(pid, sig);
        }
        let what = format!("job {n} ({sig:?} after {after:?})");
        for (r, child) in ranks.iter_mut().enumerate() {
            if !ended_within(child, SURVIVOR_ENDS_WITHIN) {
                failed.push(format!("{what}: rank {r} did not end"));
                continue;
            }
            let status = child.wait().unwrap();
            let mut out = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut out);
            }
            let expected = if ignored {
                status.success()
            } else {
                status.signal() == Some(sig as i32)
            };
            if !expected {
                failed.push(format!("{what}: rank {r} ended {status}:\n{out}"));
            }
        }
        let found = contents(&dir);
        if !found.is_empty() {
            failed.push(format!("{what} left {found:?}"));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(
        failed.is_empty(),
        "seed {seed} (SODE_KILLS_SEED={seed} replays it):\n{}",
        failed.join("\n")
    );
}

#[test]
fn a_survivor_that_ends_at_once_without_exit_hooks_leaves_nothing_behind() {
    let Some(dir) = scratch("aborts") else {
        return;
    };
    let shm_dir = dir.display().to_string();
    let mut failed = Vec::new();
    for n in 0..8 {
        std::fs::create_dir_all(&dir).unwrap();
        let (port, job) = (free_port(), format!("aborts{}x{n}", std::process::id()));
        let env = [("SODE_SHM_DIR", shm_dir.as_str()), (EXIT_ON_FAILURE, "1")];
        let mut ranks: Vec<_> = (0..2)
            .map(|r| spawn_rank(r, 2, port, &job, (ROLE, "1"), &env))
            .collect();
        // Past the setup: the ranks exchange.
        std::thread::sleep(Duration::from_millis(400 + 20 * n));
        let doomed = n as usize % 2;
        let _ = ranks[doomed].kill();
        let _ = ranks[doomed].wait();
        let survivor = &mut ranks[1 - doomed];
        if !ended_within(survivor, SURVIVOR_ENDS_WITHIN) {
            failed.push(format!("job {n}: the survivor did not end"));
        }
        let found = contents(&dir);
        if !found.is_empty() {
            failed.push(format!("job {n} (rank {doomed} killed) left {found:?}"));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
