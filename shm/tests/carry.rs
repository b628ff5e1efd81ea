//! Carrying part of a message (`Exchange::carry`): on every path, the
//! first bytes arrive intact at each length, from the whole message down to
//! none, and ends that disagree about the length, or that started different
//! parts of their data (`Exchange::set_shape`), are told so.

use std::time::Duration;

use sode_shm::{Context, Path, PathPolicy, Peer, ShmError};

const LEN: usize = 4096;

/// The byte at `i` of iteration `it` from rank `rank`.
fn byte(rank: usize, it: usize, i: usize) -> u8 {
    (rank * 131 + it * 17 + i * 7) as u8
}

/// One rank of two: carries `lens[it]` bytes each way in iteration `it`
/// and checks what arrived; returns the first error, if any, or how many
/// of its sends it packed straight into the peer's window.
fn rank(job: &str, me: usize, path: Path, lens: &[usize], fills: bool) -> Result<u64, ShmError> {
    let other = 1 - me;
    let mut c = Context::new(job, me)?;
    let mut ex = c
        .exchange()
        .path_policy(PathPolicy::Force(path))
        .setup_timeout(Duration::from_secs(20))
        .neighbour(Peer::new(other).send(LEN, 0).recv(LEN, 0))
        .build()?;
    ex.fill_sends_each_start(fills);
    for (it, &n) in lens.iter().enumerate() {
        ex.carry_send(0, n)?;
        ex.carry_recv(0, n)?;
        for (i, b) in ex.send_buf_mut(0)?.iter_mut().enumerate() {
            *b = byte(me, it, i);
        }
        ex.start()?;
        ex.wait_for(Duration::from_secs(20))?;
        let got = &ex.recv_buf(0)?[..n];
        let bad = (0..n).find(|&i| got[i] != byte(other, it, i));
        assert_eq!(
            bad, None,
            "{path:?} (sends filled each start: {fills}), iteration {it}, {n} bytes: first wrong byte"
        );
    }
    Ok(ex.sends_packed_in_window())
}

/// Both ranks, each carrying `lens`; how many sends either packed straight
/// into its peer's window.
fn both(name: &str, path: Path, lens: Vec<usize>, fills: bool) -> u64 {
    let job = format!("carry{name}{}", std::process::id());
    let (j, l) = (job.clone(), lens.clone());
    let peer = std::thread::spawn(move || rank(&j, 1, path, &l, fills));
    let mine = rank(&job, 0, path, &lens, fills).unwrap();
    mine + peer.join().unwrap().unwrap()
}

#[test]
fn every_length_arrives_intact_on_every_path() {
    let lens = vec![LEN, 1000, 0, LEN, 17, 4095, 0, 1];
    for (name, path) in [("e", Path::Eager), ("g", Path::Get), ("w", Path::Window)] {
        assert_eq!(both(name, path, lens.clone(), false), 0, "{path:?}");
    }
}

#[test]
fn sends_filled_each_start_are_packed_in_the_receivers_window() {
    // Lengths that vary, then a run of whole messages: every iteration's
    // bytes, wherever the sender packed them, arrive intact.
    let mut lens = vec![LEN, 1000, 0, LEN, 17, 4095, 0, 1];
    lens.extend([LEN; 40]);
    let packed = both("f", Path::Window, lens.clone(), true);
    // With two slots the receiver grants the next iteration when it
    // starts this one, so most sends find their slot granted.
    assert!(
        packed >= lens.len() as u64,
        "only {packed} of {} sends were packed in the receiver's window",
        2 * lens.len()
    );
    // Eager and get messages have no window: packed at home, as before.
    assert_eq!(both("fe", Path::Eager, lens.clone(), true), 0);
    assert_eq!(both("fg", Path::Get, lens, true), 0);
}

/// What one end of [`disagree`]'s iteration carries.
#[derive(Debug, Clone, Copy)]
struct End {
    sent: usize,
    expected: usize,
    /// Its start's shape (`Exchange::set_shape`).
    shape: u8,
}

impl End {
    /// Sends `sent` bytes and expects `expected`, of a whole start.
    fn carrying(sent: usize, expected: usize) -> End {
        End {
            sent,
            expected,
            shape: 0,
        }
    }
}

/// One iteration between two ranks over `path`, each end as its `End`
/// says: rank 1 on a thread of its own (returned, not joined: it may wait
/// in vain), rank 0 here; rank 0's outcome and how long its wait took.
fn disagree(
    job: &str,
    path: Path,
    one: End,
    zero: End,
) -> (
    std::thread::JoinHandle<Result<(), ShmError>>,
    Result<(), ShmError>,
    Duration,
) {
    let pair = move |c: &mut Context, peer: usize, end: End| {
        let mut ex = c
            .exchange()
            .path_policy(PathPolicy::Force(path))
            .neighbour(Peer::new(peer).send(LEN, 0).recv(LEN, 0))
            .build()?;
        ex.carry_send(0, end.sent)?;
        ex.carry_recv(0, end.expected)?;
        ex.set_shape(end.shape)?;
        ex.start()?;
        Ok::<_, ShmError>(ex)
    };
    let j = job.to_string();
    let peer = std::thread::spawn(move || {
        let mut c = Context::new(&j, 1)?;
        pair(&mut c, 0, one)?.wait_for(Duration::from_secs(10))
    });
    let mut c = Context::new(job, 0).unwrap();
    let mut ex = pair(&mut c, 1, zero).unwrap();
    let began = std::time::Instant::now();
    let r = ex.wait_for(Duration::from_secs(10));
    (peer, r, began.elapsed())
}

#[test]
fn ends_that_disagree_about_the_length_are_told() {
    // Rank 1 sends 3000 bytes where rank 0 expects 1000: rank 0 sees the
    // mismatch (rank 1 then waits for it in vain, so it is not joined).
    // Through a window the writer leaves its length beside its data.
    for (name, path) in [("me", Path::Eager), ("mg", Path::Get), ("mw", Path::Window)] {
        let job = format!("carry{name}{}", std::process::id());
        let (_, r, _) = disagree(
            &job,
            path,
            End::carrying(3000, 1000),
            End::carrying(1000, 1000),
        );
        assert!(
            matches!(&r, Err(ShmError::Mismatch { peer: 1, .. })),
            "{path:?}: {r:?}"
        );
    }
}

#[test]
fn a_sender_that_carries_less_than_expected_is_told() {
    // Rank 1 sends 1000 bytes where rank 0 expects 3000: told at once on
    // every path (the last eager fragment says where the message ends, a
    // window write and a receive_request carry their length), so no
    // stale bytes are read as the rest.
    for (name, path) in [("le", Path::Eager), ("lg", Path::Get), ("lw", Path::Window)] {
        let job = format!("carry{name}{}", std::process::id());
        let (peer, r, took) = disagree(
            &job,
            path,
            End::carrying(1000, 1000),
            End::carrying(1000, 3000),
        );
        assert!(
            matches!(&r, Err(ShmError::Mismatch { peer: 1, why, .. }) if why.contains("1000")),
            "{path:?}: {r:?}"
        );
        assert!(
            took < Duration::from_secs(5),
            "{path:?}: told only after {took:?}"
        );
        // The get path's sender waits for a receive_done that never comes.
        if path != Path::Get {
            peer.join().unwrap().unwrap();
        }
    }
}

#[test]
fn ends_that_started_different_parts_of_the_same_length_are_told() {
    // Both ends carry 1000 bytes, but rank 1 started another part of its
    // data (shape 5) than rank 0 (shape 9): the bytes are not what rank 0
    // unpacks, and it is told at once on every path, naming rank 1. A
    // whole start (shape 0) against a part is told too.
    let cases = [(5, 9), (0, 9), (5, 0)];
    for (name, path) in [("se", Path::Eager), ("sg", Path::Get), ("sw", Path::Window)] {
        for (k, (theirs, ours)) in cases.into_iter().enumerate() {
            let job = format!("carry{name}{k}{}", std::process::id());
            let one = End {
                shape: theirs,
                ..End::carrying(1000, 1000)
            };
            let zero = End {
                shape: ours,
                ..End::carrying(1000, 1000)
            };
            let (_, r, took) = disagree(&job, path, one, zero);
            assert!(
                matches!(&r, Err(ShmError::Mismatch { peer: 1, why, .. })
                    if why.contains("different parts of the exchange")
                        && why.contains(&format!("shape {theirs}"))),
                "{path:?}, shapes {theirs} and {ours}: {r:?}"
            );
            assert!(
                took < Duration::from_secs(5),
                "{path:?}: told only after {took:?}"
            );
        }
    }
    // Equal shapes of parts pass, the bytes intact.
    for (name, path) in [("pe", Path::Eager), ("pg", Path::Get), ("pw", Path::Window)] {
        let job = format!("carry{name}{}", std::process::id());
        let end = End {
            shape: 77,
            ..End::carrying(1000, 1000)
        };
        let (peer, r, _) = disagree(&job, path, end, end);
        assert!(r.is_ok(), "{path:?}: {r:?}");
        peer.join().unwrap().unwrap();
    }
}

#[test]
fn lengths_beyond_the_message_are_refused() {
    let job = format!("carryx{}", std::process::id());
    let j = job.clone();
    let peer = std::thread::spawn(move || {
        let mut c = Context::new(&j, 1).unwrap();
        c.exchange()
            .neighbour(Peer::new(0).send(LEN, 0).recv(LEN, 0))
            .build()
            .map(|_| ())
    });
    let mut c = Context::new(&job, 0).unwrap();
    let mut ex = c
        .exchange()
        .neighbour(Peer::new(1).send(LEN, 0).recv(LEN, 0))
        .build()
        .unwrap();
    let r = ex.carry_send(0, LEN + 1);
    assert!(
        matches!(r, Err(ShmError::CarryTooLong { what: "send", asked, len: LEN, .. }) if asked == LEN + 1),
        "{r:?}"
    );
    assert!(matches!(
        ex.carry_recv(3, 0),
        Err(ShmError::NoSuchBuffer { index: 3, .. })
    ));
    peer.join().unwrap().unwrap();
}

/// Bytes of a message whose window has one slot (above 128 KiB).
const BIG: usize = 256 << 10;

/// One rank of two exchanging `BIG` bytes each way through windows, its
/// sends filled each start: each iteration it sleeps `before_start`,
/// fills and starts, waits, checks every byte received, then releases
/// its receive buffers (`Exchange::receives_read`), after which reading
/// them is refused. Returns how many of its sends it packed straight into
/// the peer's window.
fn released_rank(
    job: &str,
    me: usize,
    iters: usize,
    before_start: Duration,
) -> Result<u64, ShmError> {
    let other = 1 - me;
    let mut c = Context::new(job, me)?;
    let mut ex = c
        .exchange()
        .path_policy(PathPolicy::Force(Path::Window))
        .setup_timeout(Duration::from_secs(20))
        .neighbour(Peer::new(other).send(BIG, 0).recv(BIG, 0))
        .build()?;
    ex.fill_sends_each_start(true);
    for it in 0..iters {
        std::thread::sleep(before_start);
        for (i, b) in ex.send_buf_mut(0)?.iter_mut().enumerate() {
            *b = byte(me, it, i);
        }
        ex.start()?;
        ex.wait_for(Duration::from_secs(20))?;
        let got = ex.recv_buf(0)?;
        let bad = (0..BIG).find(|&i| got[i] != byte(other, it, i));
        assert_eq!(bad, None, "rank {me}, iteration {it}: first wrong byte");
        ex.receives_read()?;
        let refused = ex.recv_buf(0).map(|_| ()).unwrap_err().to_string();
        assert!(refused.contains("released"), "{refused}");
    }
    Ok(ex.sends_packed_in_window())
}

#[test]
fn a_window_of_one_slot_released_takes_the_next_iteration_before_its_owner_starts() {
    let job = format!("carryr{}", std::process::id());
    let iters = 8;
    // Rank 1 starts each iteration well after rank 0, which finds its
    // slot granted only if rank 1 released it when it had read it.
    let j = job.clone();
    let late = std::thread::spawn(move || released_rank(&j, 1, iters, Duration::from_millis(30)));
    let first = released_rank(&job, 0, iters, Duration::from_millis(5)).unwrap();
    late.join().unwrap().unwrap();
    // Its first send found no grant (none is given before the first read).
    assert!(
        first >= iters as u64 - 1,
        "rank 0 packed {first} of {iters} sends in rank 1's window"
    );
}
