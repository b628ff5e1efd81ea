//! Messages read in place: each side keeps its fields in lent sets of its
//! segment, and the receiver copies the sender's runs straight into its
//! own. Two ranks as two threads; every byte that lands is checked, and so
//! is every byte that must not change.

use std::time::Duration;

use sode_shm::{Context, Path, PathPolicy, Peer, ReadMin, Run, ShmError};

/// A C-order array of `rows` x `cols` u32: column messages (one cell per
/// row, strided) and a contiguous row message each way, into halo cells
/// that no message reads.
struct Grid {
    rows: usize,
    cols: usize,
}

impl Grid {
    fn set_len(&self) -> usize {
        self.rows * self.cols * 4
    }
    /// Column `c` over rows 1..=rows-2: one 4-byte run per row.
    fn column(&self, c: usize) -> Vec<Run> {
        (1..self.rows - 1)
            .map(|r| Run {
                offset: (r * self.cols + c) * 4,
                len: 4,
            })
            .collect()
    }
    /// Columns 1..=ROW_CELLS of row `r`, one run.
    fn row(&self, r: usize) -> Vec<Run> {
        vec![Run {
            offset: (r * self.cols + 1) * 4,
            len: ROW_CELLS * 4,
        }]
    }
}

/// Cells of the row message (both grids are wider).
const ROW_CELLS: usize = 11;

fn value(rank: usize, it: u32, set: usize, cell: usize) -> u32 {
    (rank as u32) << 28 | (it & 0xfff) << 16 | (set as u32) << 15 | (cell as u32 & 0x7fff)
}

fn grid(rank: usize) -> Grid {
    // Different widths: the two sides' runs differ in stride.
    Grid {
        rows: 9,
        cols: if rank == 0 { 13 } else { 21 },
    }
}

/// Rank 0 sends its column cols-2 into rank 1's halo column 0; rank 1
/// sends its column 1 into rank 0's halo column cols-1. Each sends row 1
/// into the other's last row.
fn columns(rank: usize) -> (usize, usize) {
    let g = grid(rank);
    if rank == 0 {
        (g.cols - 2, g.cols - 1)
    } else {
        (1, 0)
    }
}

/// What cell `i` of `rank`'s set holds after iteration `it`'s exchange.
fn expected(rank: usize, it: u32, set: usize, i: usize) -> u32 {
    let (g, peer) = (grid(rank), 1 - rank);
    let other = grid(peer);
    let (r, col) = (i / g.cols, i % g.cols);
    if col == columns(rank).1 && (1..g.rows - 1).contains(&r) {
        value(peer, it, set, r * other.cols + columns(peer).0)
    } else if r == g.rows - 1 && (1..=ROW_CELLS).contains(&col) {
        value(peer, it, set, other.cols + col)
    } else {
        value(rank, it, set, i)
    }
}

/// One rank's side: `iters` iterations alternating the two sets, each
/// rank overwriting its set right after every wait (as a solver would),
/// the ranks slow between start and wait on alternate iterations; checks
/// every cell. Returns how many it checked.
fn run_rank(job: &str, rank: usize, iters: u32, read_min: usize, policy: PathPolicy) -> usize {
    let read_min_at = ReadMin {
        bytes: read_min,
        mean_run: 0,
    };
    let (g, peer) = (grid(rank), 1 - rank);
    let (send_col, recv_col) = columns(rank);
    let col_len = (g.rows - 2) * 4;
    let mut c = Context::new(job, rank).unwrap();
    let mut ex = c
        .exchange()
        .lend(2, g.set_len())
        .read_min(read_min_at)
        .path_policy(policy)
        .neighbour(
            Peer::new(peer)
                .send(col_len, 1)
                .recv(col_len, 1)
                .send_in_place(g.column(send_col))
                .recv_in_place(g.column(recv_col)),
        )
        .neighbour(
            Peer::new(peer)
                .send(ROW_CELLS * 4, 2)
                .recv(ROW_CELLS * 4, 2)
                .send_in_place(g.row(1))
                .recv_in_place(g.row(g.rows - 1)),
        )
        .build()
        .unwrap();
    for m in &ex.report().recvs {
        assert_eq!(m.path == Path::Read, m.len >= read_min, "{m:?}");
    }
    assert!(matches!(ex.send_buf_mut(0), Err(ShmError::InPlace { .. })));
    assert!(matches!(ex.recv_buf(1), Err(ShmError::InPlace { .. })));
    let len = g.set_len();
    let mut checked = 0;
    for it in 1..=iters {
        let set = (it % 2) as usize;
        let all = ex.lent_mut().unwrap();
        let s: &mut [u32] = bytemuck::cast_slice_mut(&mut all[set * len..(set + 1) * len]);
        for (i, v) in s.iter_mut().enumerate() {
            *v = value(rank, it, set, i);
        }
        ex.start_set(set).unwrap();
        if (it as usize + rank) % 2 == 1 {
            std::thread::sleep(Duration::from_millis(2));
        }
        ex.wait_for(Duration::from_secs(30)).unwrap();
        let all = ex.lent_mut().unwrap();
        let s: &mut [u32] = bytemuck::cast_slice_mut(&mut all[set * len..(set + 1) * len]);
        for (i, &v) in s.iter().enumerate() {
            let (r, col) = (i / g.cols, i % g.cols);
            let want = expected(rank, it, set, i);
            assert_eq!(
                v, want,
                "rank {rank} iteration {it} set {set} cell ({r}, {col})"
            );
            checked += 1;
        }
        // The peer has read this set: overwrite it at once.
        s.fill(u32::MAX);
    }
    checked
}

fn both_ranks(name: &str, read_min: usize, policy: PathPolicy) {
    let job = format!("{name}{}", std::process::id());
    let j2 = job.clone();
    let peer = std::thread::spawn(move || run_rank(&j2, 1, 60, read_min, policy));
    let mine = run_rank(&job, 0, 60, read_min, policy);
    let theirs = peer.join().unwrap();
    assert_eq!(mine, 60 * 9 * 13);
    assert_eq!(theirs, 60 * 9 * 21);
}

#[test]
fn faces_are_read_in_place_between_sets_of_different_strides() {
    both_ranks("inplace", 0, PathPolicy::Auto);
}

#[test]
fn small_faces_are_gathered_and_scattered_around_a_packed_path() {
    // The column (28 bytes) packed, the row (44 bytes) in place; then both
    // packed.
    both_ranks("inplacemix", 40, PathPolicy::Auto);
    // By the default threshold, both are too small.
    assert!(!ReadMin::DEFAULT.admits(44, &[Run { offset: 0, len: 44 }]));
    // Each packed path: from a private buffer (eager, get) or a window.
    for path in [Path::Eager, Path::Get, Path::Window] {
        both_ranks(
            &format!("inplace{}", path.name()),
            usize::MAX,
            PathPolicy::Force(path),
        );
    }
}

#[test]
fn long_runs_of_large_messages_are_read_in_place() {
    let r = ReadMin::DEFAULT;
    let runs = |n: usize, len: usize| vec![Run { offset: 0, len }; n];
    assert!(r.admits(8192, &runs(1, 8192)));
    assert!(r.admits(32768, &runs(64, 512)));
    // A strided face (a run per cell) and a small one are packed.
    assert!(!r.admits(8192, &runs(1024, 8)));
    assert!(!r.admits(2048, &runs(1, 2048)));
}

#[test]
fn in_place_on_one_side_only_fails_on_both() {
    let job = format!("inplace1s{}", std::process::id());
    let j2 = job.clone();
    let peer = std::thread::spawn(move || {
        let mut c = Context::new(&j2, 1).unwrap();
        c.exchange()
            .lend(1, 64)
            .read_min(ReadMin {
                bytes: 0,
                mean_run: 0,
            })
            .setup_timeout(Duration::from_secs(10))
            .neighbour(
                Peer::new(0)
                    .send(16, 0)
                    .recv(16, 0)
                    .send_in_place(vec![Run { offset: 0, len: 16 }])
                    .recv_in_place(vec![Run {
                        offset: 16,
                        len: 16,
                    }]),
            )
            .build()
            .map(|_| ())
    });
    let mut c = Context::new(&job, 0).unwrap();
    let mine = c
        .exchange()
        .setup_timeout(Duration::from_secs(10))
        .neighbour(Peer::new(1).send(16, 0).recv(16, 0))
        .build()
        .map(|_| ());
    let theirs = peer.join().unwrap();
    for (who, r) in [("rank 0", mine), ("rank 1", theirs)] {
        match r {
            Err(ShmError::Mismatch { why, .. }) => {
                assert!(why.contains("same shared fields"), "{who}: {why}")
            }
            other => panic!("{who}: expected a mismatch, got {other:?}"),
        }
    }
}

#[test]
fn bad_runs_and_sets_are_named() {
    let mut c = Context::new(&format!("inplacebad{}", std::process::id()), 0).unwrap();
    let build = |c: &mut Context, lend: Option<(usize, usize)>, runs: Vec<Run>| {
        let mut b = c.exchange().setup_timeout(Duration::from_millis(50));
        if let Some((s, l)) = lend {
            b = b.lend(s, l);
        }
        b.neighbour(Peer::new(1).send(16, 0).send_in_place(runs))
            .build()
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let one = |offset, len| vec![Run { offset, len }];
    let e = build(&mut c, None, one(0, 16));
    assert!(e.contains("lend(sets, set_len)"), "{e}");
    let e = build(&mut c, Some((1, 20)), one(8, 16));
    assert!(e.contains("outside the 20-byte set"), "{e}");
    let e = build(&mut c, Some((1, 64)), one(0, 8));
    assert!(e.contains("covers 8 bytes of a 16-byte message"), "{e}");
    let e = build(&mut c, Some((1, 64)), Vec::new());
    assert!(e.contains("no runs"), "{e}");
    let e = build(&mut c, Some((usize::MAX, 2)), one(0, 16));
    assert!(e.contains("address space"), "{e}");
}

#[test]
fn sets_out_of_range_and_missing_sets_are_named() {
    let job = format!("inplaceset{}", std::process::id());
    let j2 = job.clone();
    let side = |job: String, rank: usize| {
        let mut c = Context::new(&job, rank).unwrap();
        let mut ex = c
            .exchange()
            .neighbour(Peer::new(1 - rank).send(8, 0).recv(8, 0))
            .build()
            .unwrap();
        let e = ex.lent_mut().unwrap_err().to_string();
        assert!(e.contains("lends no sets"), "{e}");
        let e = ex.start_set(0).unwrap_err().to_string();
        assert!(
            e.contains("set 0 asked for, but the exchange lends 0"),
            "{e}"
        );
        // Still idle and usable.
        ex.start().unwrap();
        ex.wait_for(Duration::from_secs(10)).unwrap();
    };
    let peer = std::thread::spawn(move || side(j2, 1));
    side(job, 0);
    peer.join().unwrap();
}
