//! `SODE_PROGRESS=thread`: a thread of the process moves the exchanges in
//! flight while the rank computes. Two ranks (separate processes: thread
//! ranks of one process move each other's exchanges anyway) exchange a
//! face larger than loopback TCP buffers hold. Rank 0 starts while rank 1
//! is not reading yet, then computes (sleeps) for two seconds before its
//! wait; rank 1 starts after rank 0's start has returned, and waits.
//! Without the thread the rest of rank 0's face leaves only when rank 0
//! calls sode again, two seconds later; with it, at once. Both runs are
//! made, so the test shows the difference, not only one side of it. Then,
//! with nothing in flight, the thread must cost next to no CPU.
//!
//! The ranks are this test executable run again, by the `rank` test below
//! (a no-op unless `SODE_PROGRESS_TEST` is set).

use std::time::{Duration, Instant};

use sode::{Decomposition, HaloExchange, Stencil, Transport};
use sode_job::World;
mod common;
use common::{free_port, outputs_of, spawn_rank};

const ROLE: &str = "SODE_PROGRESS_TEST";
/// Cells along the face: with a halo of 4, 64 MiB (loopback TCP buffers
/// hold about 36 MiB: 32 received, 4 to send).
const FACE: usize = 1 << 21;
const HALO: usize = 4;
const COMPUTE: Duration = Duration::from_secs(2);

#[test]
fn rank() {
    if std::env::var_os(ROLE).is_none() {
        return;
    }
    let w = World::init(Duration::from_secs(30)).unwrap();
    let me = w.rank();
    let d = Decomposition::new(&[FACE, 16], &[1, 2], &[false, true], HALO, Stencil::Faces).unwrap();
    let mut x = HaloExchange::builder(&w, &d)
        .transport(Transport::Tcp)
        .build()
        .unwrap();
    let mut u = vec![me as f64; x.local_extent().iter().product()];
    w.barrier(Duration::from_secs(30)).unwrap();
    if me == 0 {
        x.start(&[&u]).unwrap();
        w.barrier(Duration::from_secs(30)).unwrap();
        std::thread::sleep(COMPUTE);
    } else {
        // Rank 0's start has returned, its socket buffers full.
        w.barrier(Duration::from_secs(30)).unwrap();
        x.start(&[&u]).unwrap();
    }
    let began = Instant::now();
    x.wait(Instant::now() + Duration::from_secs(30), &mut [&mut u])
        .unwrap();
    let waited = began.elapsed();
    let peer = (1 - me) as f64;
    assert!(u.contains(&peer), "rank {me}: nothing from the peer");
    w.barrier(Duration::from_secs(30)).unwrap();
    println!("rank {me} waited_ms {}", waited.as_millis());
    // Nothing in flight now: what the process burns meanwhile.
    let before = process_cpu();
    std::thread::sleep(IDLE);
    println!(
        "rank {me} idle_cpu_us {}",
        (process_cpu() - before).as_micros()
    );
}

/// How long this process sits between exchanges in the idle measure.
const IDLE: Duration = Duration::from_secs(1);

/// CPU time of this process so far, all its threads.
fn process_cpu() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_SELF).unwrap();
    let t =
        |v: nix::sys::time::TimeVal| Duration::new(v.tv_sec() as u64, v.tv_usec() as u32 * 1000);
    t(u.user_time()) + t(u.system_time())
}

/// What the two ranks of one run measured.
struct Measured {
    /// How long rank 1's wait took.
    waited: Duration,
    /// CPU time rank 1's process took in [`IDLE`] with nothing in flight.
    idle_cpu: Duration,
}

/// Runs the two ranks with `SODE_PROGRESS=progress`.
fn run_ranks(progress: &str) -> Measured {
    let port = free_port();
    let job = format!("progress{}{}", std::process::id(), progress.len());
    let env = [(sode::PROGRESS_VAR, progress)];
    let children: Vec<_> = (0..2)
        .map(|r| spawn_rank(r, 2, port, &job, (ROLE, "1"), &env))
        .collect();
    let outputs = outputs_of(children);
    let printed = |key: &str| -> u64 {
        outputs[1]
            .lines()
            .find_map(|l| l.split(&format!("rank 1 {key} ")).nth(1))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("rank 1 printed no {key}:\n{}", outputs[1]))
    };
    Measured {
        waited: Duration::from_millis(printed("waited_ms")),
        idle_cpu: Duration::from_micros(printed("idle_cpu_us")),
    }
}

#[test]
fn a_progress_thread_moves_an_exchange_while_its_rank_computes() {
    let off = run_ranks("off");
    let on = run_ranks("thread:50");
    let (without, with) = (off.waited, on.waited);
    eprintln!(
        "rank 1's wait while rank 0 computed {COMPUTE:?}: {without:?} without a progress thread, {with:?} with one; \
         its process's CPU time in {IDLE:?} with nothing in flight: {:?} without, {:?} with",
        off.idle_cpu, on.idle_cpu
    );
    assert!(
        without > COMPUTE / 2,
        "without a progress thread rank 1 waited only {without:?}: the face fitted the socket buffers, and this test shows nothing"
    );
    assert!(
        with < COMPUTE / 2,
        "with a progress thread rank 1 still waited {with:?}: rank 0's face left only when it called sode again"
    );
    // Idle, the thread sleeps: at most 2 % of a core (looking every 50 us
    // took 17 %).
    assert!(
        on.idle_cpu < IDLE / 50,
        "with nothing in flight the process with a progress thread took {:?} of CPU in {IDLE:?}",
        on.idle_cpu
    );
}
