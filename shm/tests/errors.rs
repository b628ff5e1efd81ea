//! Bad input to the public API gets a named error, not a panic or a hang.

use std::time::Duration;

use sode_shm::{Context, Peer, ShmError};

fn ctx(rank: usize) -> Context {
    Context::new(&format!("err{}", std::process::id()), rank).expect("context")
}

#[test]
fn job_ids_that_could_escape_the_directory_are_refused() {
    for bad in ["", "../x", "a/b", "sp ace", &"x".repeat(65)] {
        assert!(matches!(
            Context::new(bad, 0),
            Err(ShmError::InvalidSetting { .. })
        ));
    }
}

#[test]
fn invalid_neighbour_lists_are_named() {
    let mut c = ctx(0);
    let self_peer = c.exchange().neighbour(Peer::new(0).send(8, 0)).build();
    assert!(
        matches!(self_peer, Err(ShmError::InvalidNeighbours { why }) if why.contains("this process"))
    );
    let dup = c
        .exchange()
        .neighbour(Peer::new(1).send(8, 3))
        .neighbour(Peer::new(1).send(8, 3))
        .build();
    assert!(
        matches!(dup, Err(ShmError::InvalidNeighbours { why }) if why.contains("both send tag 3"))
    );
    let empty = c.exchange().neighbour(Peer::new(1)).build();
    assert!(matches!(empty, Err(ShmError::InvalidNeighbours { .. })));
    let ring = c
        .exchange()
        .ring_capacity(5000)
        .neighbour(Peer::new(1).send(8, 0))
        .build();
    assert!(matches!(ring, Err(ShmError::InvalidSetting { .. })));
    let misaligned = c
        .exchange()
        .neighbour(Peer::new(1).send(8, 0).misaligned(64))
        .build();
    assert!(matches!(
        misaligned,
        Err(ShmError::InvalidNeighbours { .. })
    ));
}

#[test]
fn an_absent_peer_times_out_and_start_wait_order_is_checked() {
    let mut c = ctx(5);
    let t = std::time::Instant::now();
    let r = c
        .exchange()
        .name("absent")
        .setup_timeout(Duration::from_millis(200))
        .neighbour(Peer::new(6).send(8, 0))
        .build();
    assert!(
        matches!(r, Err(ShmError::SetupTimeout { peer: 6, .. })),
        "{r:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn two_threads_exchange_and_misuse_is_refused() {
    // Two contexts in one process are enough to check call-order errors.
    let job = format!("order{}", std::process::id());
    let j2 = job.clone();
    let peer = std::thread::spawn(move || {
        let mut c = Context::new(&j2, 1).unwrap();
        let mut ex = c
            .exchange()
            .neighbour(Peer::new(0).send(16, 0).recv(16, 0))
            .build()
            .unwrap();
        ex.send_buf_mut(0).unwrap().fill(1);
        ex.start().unwrap();
        ex.wait_for(Duration::from_secs(10)).unwrap();
        ex.recv_buf(0).unwrap().to_vec()
    });
    let mut c = Context::new(&job, 0).unwrap();
    let mut ex = c
        .exchange()
        .neighbour(Peer::new(1).send(16, 0).recv(16, 0))
        .build()
        .unwrap();
    assert!(matches!(
        ex.wait_for(Duration::from_millis(1)),
        Err(ShmError::State { .. })
    ));
    ex.send_buf_mut(0).unwrap().fill(2);
    ex.start().unwrap();
    assert!(matches!(ex.start(), Err(ShmError::State { .. })));
    assert!(matches!(ex.send_buf_mut(0), Err(ShmError::State { .. })));
    assert!(matches!(ex.recv_buf(0), Err(ShmError::State { .. })));
    ex.wait_for(Duration::from_secs(10)).unwrap();
    assert_eq!(ex.recv_buf(0).unwrap(), &[1u8; 16]);
    assert!(matches!(
        ex.recv_buf(7),
        Err(ShmError::NoSuchBuffer { index: 7, .. })
    ));
    assert_eq!(peer.join().unwrap(), vec![2u8; 16]);
}

#[test]
fn a_fast_sender_never_overwrites_a_window_its_receiver_still_reads() {
    fast_sender_slow_receiver("slow", false);
}

#[test]
fn a_fast_sender_packing_in_the_window_never_overwrites_what_its_receiver_reads() {
    fast_sender_slow_receiver("slowp", true);
}

/// One direction only, on the window path: the sender runs as fast as its
/// credits allow (packing straight into the receiver's window when
/// `fills`), the receiver is slow between its wait and its next start,
/// re-reading its buffer after a pause. The credit for iteration n + 1
/// comes with the receiver's start of n (two slots), so the sender may be
/// a full iteration ahead, but never into the slot the receiver still
/// reads.
fn fast_sender_slow_receiver(name: &str, fills: bool) {
    const ITERS: u8 = 40;
    let job = format!("{name}{}", std::process::id());
    let j2 = job.clone();
    let sender = std::thread::spawn(move || {
        let mut c = Context::new(&j2, 1).unwrap();
        let mut ex = c
            .exchange()
            .path_policy(sode_shm::PathPolicy::Force(sode_shm::Path::Window))
            .neighbour(Peer::new(0).send(4096, 0))
            .build()
            .unwrap();
        ex.fill_sends_each_start(fills);
        for it in 1..=ITERS {
            ex.send_buf_mut(0).unwrap().fill(it);
            ex.start().unwrap();
            ex.wait_for(Duration::from_secs(30)).unwrap();
        }
    });
    let mut c = Context::new(&job, 0).unwrap();
    let mut ex = c
        .exchange()
        .path_policy(sode_shm::PathPolicy::Force(sode_shm::Path::Window))
        .neighbour(Peer::new(1).recv(4096, 0))
        .build()
        .unwrap();
    assert_eq!(ex.report().recvs[0].path, sode_shm::Path::Window);
    let mut early = 0;
    for it in 1..=ITERS {
        ex.start().unwrap();
        // Already there the moment this rank starts: the sender wrote it
        // on the credit granted one iteration before.
        if ex.test().unwrap() {
            early += 1;
        } else {
            ex.wait_for(Duration::from_secs(30)).unwrap();
        }
        assert!(
            ex.recv_buf(0).unwrap().iter().all(|&b| b == it),
            "iteration {it} arrived"
        );
        // Slow: meanwhile the sender writes iteration it + 1 (the other
        // slot) and waits for the credit of it + 2.
        std::thread::sleep(Duration::from_millis(3));
        assert!(
            ex.recv_buf(0).unwrap().iter().all(|&b| b == it),
            "iteration {it}'s data was overwritten while the receiver still read it"
        );
    }
    sender.join().unwrap();
    // The credit was off the critical path: the data was waiting.
    assert!(
        early >= ITERS / 2,
        "only {early} of {ITERS} iterations had arrived when the receiver started"
    );
}

#[test]
fn a_peer_that_frees_its_side_is_named_at_once_though_its_process_lives_on() {
    for len in [16, 1 << 20] {
        let job = format!("left{}x{len}", std::process::id());
        let j2 = job.clone();
        let (freed_tx, freed_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        // The peer runs three iterations, frees its side, then lives on
        // (its context too) until the test is done with it.
        let peer = std::thread::spawn(move || {
            let mut c = Context::new(&j2, 1).unwrap();
            let mut ex = c
                .exchange()
                .neighbour(Peer::new(0).send(len, 0).recv(len, 0))
                .build()
                .unwrap();
            for _ in 0..3 {
                ex.start().unwrap();
                ex.wait_for(Duration::from_secs(10)).unwrap();
            }
            drop(ex);
            freed_tx.send(()).unwrap();
            let _ = done_rx.recv_timeout(Duration::from_secs(60));
        });
        let mut c = Context::new(&job, 0).unwrap();
        let mut ex = c
            .exchange()
            .neighbour(Peer::new(1).send(len, 0).recv(len, 0))
            .build()
            .unwrap();
        for _ in 0..3 {
            ex.start().unwrap();
            ex.wait_for(Duration::from_secs(10)).unwrap();
        }
        freed_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let t = std::time::Instant::now();
        let r = ex
            .start()
            .and_then(|_| ex.wait_for(Duration::from_secs(30)));
        let took = t.elapsed();
        done_tx.send(()).unwrap();
        peer.join().unwrap();
        let e = r.expect_err("an exchange with a peer that freed its side");
        assert!(
            matches!(e, ShmError::PeerLeft { peer: 1, .. }),
            "{len} bytes: {e}"
        );
        assert!(
            e.to_string()
                .contains("peer rank 1 freed its side of the exchange during iteration 4"),
            "{e}"
        );
        assert!(
            took < Duration::from_secs(1),
            "{len} bytes: told after {took:?}"
        );
    }
}

/// A cleanup of the shared-memory directory (a site's script, `rm -rf
/// /dev/shm/*`) that removes the job's directory while a rank's segment is
/// listed there, before its peer has looked: the rank lists it again, and
/// the exchange is set up and delivers, where the peer would otherwise wait
/// out its setup timeout for a locator that will not come.
#[test]
fn a_cleanup_of_the_job_directory_during_the_setup_is_survived() {
    let job = format!("cleanup{}", std::process::id());
    let parent =
        std::env::var_os("SODE_SHM_DIR").map_or("/dev/shm".into(), std::path::PathBuf::from);
    let dir = parent.join(format!("sode-{}-{job}", nix::unistd::geteuid()));
    let j2 = job.clone();
    let peer = std::thread::spawn(move || {
        let listed = dir.join("x0-r0");
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while !listed.exists() {
            assert!(
                std::time::Instant::now() < until,
                "rank 0 never listed its segment"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        std::fs::remove_dir_all(&dir).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let mut c = Context::new(&j2, 1).unwrap();
        let mut ex = c
            .exchange()
            .neighbour(Peer::new(0).send(16, 0).recv(16, 0))
            .setup_timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        ex.send_buf_mut(0).unwrap().fill(1);
        ex.start().unwrap();
        ex.wait_for(Duration::from_secs(10)).unwrap();
        ex.recv_buf(0).unwrap().to_vec()
    });
    let mut c = Context::new(&job, 0).unwrap();
    let mut ex = c
        .exchange()
        .neighbour(Peer::new(1).send(16, 0).recv(16, 0))
        .setup_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    ex.send_buf_mut(0).unwrap().fill(2);
    ex.start().unwrap();
    ex.wait_for(Duration::from_secs(10)).unwrap();
    assert_eq!(ex.recv_buf(0).unwrap(), &[1u8; 16]);
    assert_eq!(peer.join().unwrap(), vec![2u8; 16]);
}
