//! `SODE_WAIT=block` through the halo exchange: a rank whose neighbours on
//! this node are late sleeps in `wait` (a futex its peers ring) instead of
//! polling, and is woken as soon as their data is there.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::resource::{getrusage, UsageWho};
use sode::{Decomposition, HaloExchange, Stencil, Transport};
mod common;
use common::{free_port, rdma_available, thread_world};

fn thread_cpu() -> Duration {
    let u = getrusage(UsageWho::RUSAGE_THREAD).expect("getrusage");
    let t = |tv: nix::sys::time::TimeVal| {
        Duration::from_secs(tv.tv_sec() as u64) + Duration::from_micros(tv.tv_usec() as u64)
    };
    t(u.user_time()) + t(u.system_time())
}

/// Two ranks over `transport`, rank 1 starting each iteration `LATE`
/// after rank 0 is already waiting: rank 0's CPU time and wall time over
/// the run, and how long after rank 1's start rank 0's wait returned
/// (median).
fn late_peer(transport: Transport, job: String) -> (Duration, Duration, Duration) {
    // Every World of this process reads the policy from the environment;
    // both tests of this binary set the same value.
    std::env::set_var("SODE_WAIT", "block");
    const ITERS: usize = 20;
    const LATE: Duration = Duration::from_millis(10);
    let port = free_port();
    let (started_tx, started) = mpsc::channel::<Instant>();
    let run = move |rank: usize, started_tx: Option<mpsc::Sender<Instant>>| {
        let w = thread_world(rank, 2, port, &job);
        let d = Decomposition::new(&[32, 16], &[2, 1], &[true, true], 1, Stencil::Full).unwrap();
        let mut halo = HaloExchange::builder(&w, &d)
            .transport(transport)
            .build()
            .unwrap();
        let cells: usize = halo.local_extent().iter().product();
        let mut u = vec![0.0f64; cells];
        let mut woken = Vec::new();
        let (cpu0, wall0) = (thread_cpu(), Instant::now());
        for it in 0..ITERS {
            u.iter_mut().for_each(|x| *x = (it * 2 + rank) as f64);
            if let Some(tx) = &started_tx {
                std::thread::sleep(LATE);
                tx.send(Instant::now()).unwrap();
            }
            halo.start(&[&u]).unwrap();
            halo.wait(Instant::now() + Duration::from_secs(30), &mut [&mut u])
                .unwrap();
            woken.push(Instant::now());
            // The peer's cells arrived in the halo.
            let peer = (it * 2 + 1 - rank) as f64;
            assert!(u.contains(&peer), "iteration {it}: nothing from the peer");
        }
        (woken, thread_cpu() - cpu0, wall0.elapsed())
    };
    let late = {
        let run = run.clone();
        std::thread::spawn(move || run(1, Some(started_tx)))
    };
    let (woken, cpu, wall) = run(0, None);
    late.join().unwrap();
    let mut lag: Vec<Duration> = woken
        .iter()
        .map(|w| w.saturating_duration_since(started.recv().unwrap()))
        .collect();
    lag.sort();
    let median = lag[ITERS / 2];
    eprintln!(
        "{transport:?}: waiting rank used {cpu:?} of CPU in {wall:?}; woken {median:?} after the peer started (median)"
    );
    (cpu, wall, median)
}

/// [`late_peer`] until `good` holds of its CPU time, wall time and wake-up
/// lag, at most three times; the last measurement. A rank that polls uses
/// about all the wall time every time, but a sleeper on a 2-core host (or
/// in its emulated guest) now and then shares its core with other work for
/// a whole run.
fn late_peer_quietest(
    transport: Transport,
    job: &str,
    good: impl Fn(Duration, Duration, Duration) -> bool,
) -> (Duration, Duration, Duration) {
    let mut last = late_peer(transport, format!("{job}-0"));
    for attempt in 1..3 {
        if good(last.0, last.1, last.2) {
            break;
        }
        last = late_peer(transport, format!("{job}-{attempt}"));
    }
    last
}

#[test]
fn a_rank_waiting_for_late_shared_memory_neighbours_sleeps_and_is_woken() {
    let (cpu, wall, median) = late_peer_quietest(Transport::Shm, "block-shm", |c, w, m| {
        c < w / 4 && m < Duration::from_micros(500)
    });
    // Polling (spinning or yielding) would use about all the wall time.
    assert!(cpu < wall / 4, "waiting used {cpu:?} of CPU in {wall:?}");
    // Were it not woken, a sleeper would notice only at its 2 ms timeout
    // (1 ms after the peer's start on average).
    assert!(
        median < Duration::from_micros(500),
        "woken {median:?} after the peer started (median): not by its signal"
    );
}

#[test]
fn a_rank_waiting_for_late_rdma_neighbours_sleeps_on_the_completion_channel() {
    if !rdma_available() {
        return;
    }
    let (cpu, wall, median) = late_peer_quietest(Transport::Rdma, "block-rdma", |c, w, m| {
        c < w / 2 && m < Duration::from_millis(5)
    });
    // Measured in the SoftRoCE VM, where rxe's work is charged to the
    // posting thread: 26-28 % of the wall time blocking (with the peer 5 ms
    // late), 97-100 % yielding; woken 0.70-0.73 ms after the peer's start
    // by the completion event, against tens of milliseconds sleeping out
    // the 50 ms nap without it.
    assert!(cpu < wall / 2, "waiting used {cpu:?} of CPU in {wall:?}");
    assert!(
        median < Duration::from_millis(5),
        "woken {median:?} after the peer started (median): not by a completion event"
    );
}

#[test]
fn a_rank_waiting_for_late_tcp_neighbours_sleeps_in_poll() {
    let (cpu, wall, median) = late_peer_quietest(Transport::Tcp, "block-tcp", |c, w, m| {
        c < w / 4 && m < Duration::from_millis(5)
    });
    assert!(cpu < wall / 4, "waiting used {cpu:?} of CPU in {wall:?}");
    // Woken by the data's arrival on the socket, not at the end of the
    // poll's 50 ms nap (29 ms after the peer's start with a plain sleep in
    // place of the poll). Measured: 37-44 us on the host, 0.6 ms in the
    // SoftRoCE guest's emulation.
    assert!(
        median < Duration::from_millis(5),
        "woken {median:?} after the peer started (median)"
    );
}
