//! `SODE_WAIT=block`: a waiting rank sleeps on its doorbell (a futex in its
//! segment) and its peer wakes it, so a long wait costs little CPU and
//! still ends as soon as the data is there.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::resource::{getrusage, UsageWho};
use sode_job::WaitPolicy;
use sode_shm::{Context, Path, PathPolicy, Peer};

fn thread_cpu() -> Duration {
    let u = getrusage(UsageWho::RUSAGE_THREAD).expect("getrusage");
    let t = |tv: nix::sys::time::TimeVal| {
        Duration::from_secs(tv.tv_sec() as u64) + Duration::from_micros(tv.tv_usec() as u64)
    };
    t(u.user_time()) + t(u.system_time())
}

#[test]
fn a_blocked_wait_sleeps_and_is_woken_by_its_peer() {
    WaitPolicy::Block.adopt();
    const ITERS: usize = 20;
    const LATE: Duration = Duration::from_millis(5);
    for path in [Path::Window, Path::Eager] {
        let job = format!("block{}{}", std::process::id(), path.name());
        let j2 = job.clone();
        let (started_tx, started) = mpsc::channel::<Instant>();
        // Rank 1 starts each iteration late; rank 0 waits for it.
        let late = std::thread::spawn(move || {
            let mut c = Context::new(&j2, 1).unwrap();
            let mut ex = c
                .exchange()
                .path_policy(PathPolicy::Force(path))
                .neighbour(Peer::new(0).send(4096, 0).recv(4096, 0))
                .build()
                .unwrap();
            for it in 1..=ITERS {
                std::thread::sleep(LATE);
                ex.send_buf_mut(0).unwrap().fill(it as u8);
                started_tx.send(Instant::now()).unwrap();
                ex.start().unwrap();
                ex.wait_for(Duration::from_secs(30)).unwrap();
            }
        });
        let mut c = Context::new(&job, 0).unwrap();
        let mut ex = c
            .exchange()
            .path_policy(PathPolicy::Force(path))
            .neighbour(Peer::new(1).send(4096, 0).recv(4096, 0))
            .build()
            .unwrap();
        let mut woken = Vec::new();
        let (cpu0, wall0) = (thread_cpu(), Instant::now());
        for it in 1..=ITERS {
            ex.send_buf_mut(0).unwrap().fill(!(it as u8));
            ex.start().unwrap();
            ex.wait_for(Duration::from_secs(30)).unwrap();
            let done = Instant::now();
            assert!(ex.recv_buf(0).unwrap().iter().all(|&b| b == it as u8));
            woken.push(done.saturating_duration_since(started.recv().unwrap()));
        }
        let (cpu, wall) = (thread_cpu() - cpu0, wall0.elapsed());
        late.join().unwrap();
        woken.sort();
        let median = woken[ITERS / 2];
        eprintln!(
            "{}: cpu {cpu:?} of {wall:?}; woken after {median:?} (median)",
            path.name()
        );
        // Spinning or yielding would use about all of the wall time.
        assert!(
            cpu < wall / 4,
            "{}: waiting used {cpu:?} of CPU in {wall:?}",
            path.name()
        );
        // Without the peer's wake a sleeper would only notice on its 2 ms
        // timeout (1 ms on average).
        assert!(
            median < Duration::from_micros(500),
            "{}: woken {median:?} after the peer started (median)",
            path.name()
        );
    }
}
