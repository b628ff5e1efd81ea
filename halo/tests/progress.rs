//! Exchanges in flight together progress each other: a rank waiting for
//! one exchange also moves the others it has started, so two ranks that
//! wait for their exchanges in opposite orders both finish (MPI's progress
//! rule). Without it, each rank sits in one exchange while its peer waits
//! for the other: a sender whose faces do not fit the socket buffers (TCP),
//! whose window is not free yet (shared memory) or whose credit has not
//! arrived (RDMA) moves its data only while it progresses that exchange.
//! Exchanges are `Send`, and one started on a thread may be waited for on
//! another.

use std::time::{Duration, Instant};

use sode::{Decomposition, HaloExchange, Stencil, Transport};
mod common;
use common::{free_port, rdma_available, thread_world};

/// Cells along the face: with a halo of 4, a face of 8 MiB, more than
/// loopback TCP buffers hold.
const FACE: usize = 1 << 18;
const HALO: usize = 4;
const ITERATIONS: usize = 3;

/// The value rank `rank` owns in row `row` of exchange `x`, iteration `it`.
fn value(x: usize, it: usize, rank: usize, row: usize) -> f64 {
    (x * 1000 + it * 100 + rank * 10 + row % 7) as f64
}

/// Two ranks, 1 x 2 and periodic along the split axis (axis 1; a row is
/// the cells along axis 0, the fastest in memory), two exchanges
/// (a field each) in flight at once; rank 0 waits for exchange 0 first,
/// rank 1 for exchange 1. With `hand_over`, each rank starts its
/// exchanges on one thread and waits for them on another (one at a time,
/// as `MPI_THREAD_SERIALIZED` allows). Per rank: halo rows wrong, or the
/// error.
fn crossed(transport: Transport, job: &'static str, hand_over: bool) -> Vec<Result<usize, String>> {
    let port = free_port();
    let ranks: Vec<_> = (0..2)
        .map(|rank| std::thread::spawn(move || crossed_rank(rank, port, transport, job, hand_over)))
        .collect();
    ranks.into_iter().map(|r| r.join().unwrap()).collect()
}

fn crossed_rank(
    rank: usize,
    port: u16,
    transport: Transport,
    job: &str,
    hand_over: bool,
) -> Result<usize, String> {
    let w = thread_world(rank, 2, port, job);
    let d = Decomposition::new(
        &[FACE, 2 * 8],
        &[1, 2],
        &[false, true],
        HALO,
        Stencil::Faces,
    )
    .map_err(|e| e.to_string())?;
    let mut xs = Vec::new();
    for _ in 0..2 {
        let x = HaloExchange::builder(&w, &d)
            .transport(transport)
            .build()
            .map_err(|e| sode_job::diag::chain(&e))?;
        xs.push(x);
    }
    let ext = xs[0].local_extent().to_vec();
    let mut fields = vec![vec![0.0f64; ext.iter().product()]; 2];
    let mut wrong = 0;
    for it in 0..ITERATIONS {
        for (x, u) in fields.iter_mut().enumerate() {
            for (row, cells) in u.chunks_mut(ext[0]).enumerate() {
                let owned = (HALO..ext[1] - HALO).contains(&row);
                cells.fill(if owned { value(x, it, rank, row) } else { -1.0 });
            }
        }
        for (x, u) in xs.iter_mut().zip(&fields) {
            x.start(&[u]).map_err(|e| sode_job::diag::chain(&e))?;
        }
        let order = if rank == 0 { [0, 1] } else { [1, 0] };
        let waits = move |mut xs: Vec<HaloExchange>, mut fields: Vec<Vec<f64>>| {
            for x in order {
                let deadline = Instant::now() + Duration::from_secs(20);
                xs[x]
                    .wait(deadline, &mut [&mut fields[x]])
                    .map_err(|e| format!("exchange {x}: {}", sode_job::diag::chain(&e)))?;
            }
            Ok::<_, String>((xs, fields))
        };
        (xs, fields) = if hand_over {
            std::thread::spawn(move || waits(xs, fields))
                .join()
                .map_err(|_| "the waiting thread panicked".to_string())??
        } else {
            waits(xs, fields)?
        };
        let peer = 1 - rank;
        for (x, u) in fields.iter().enumerate() {
            for (row, cells) in u.chunks(ext[0]).enumerate() {
                // Halo rows below the owned ones hold the peer's last rows,
                // those above its first (8 owned rows, periodic).
                let from = match row {
                    r if r < HALO => Some(r + 8),
                    r if r >= ext[1] - HALO => Some(r - 8),
                    _ => None,
                };
                if let Some(from) = from {
                    let want = value(x, it, peer, from);
                    // Along axis 0 (not periodic, one rank) the halo stays.
                    let inner = &cells[HALO..ext[0] - HALO];
                    wrong += usize::from(inner.iter().any(|&c| c != want));
                }
            }
        }
    }
    w.barrier(Duration::from_secs(30))
        .map_err(|e| e.to_string())?;
    Ok(wrong)
}

fn check(transport: Transport, job: &'static str, hand_over: bool) {
    let answers = crossed(transport, job, hand_over);
    for (rank, a) in answers.iter().enumerate() {
        match a {
            Ok(0) => {}
            Ok(wrong) => panic!("rank {rank}: {wrong} halo rows wrong"),
            Err(e) => panic!("rank {rank}: {e}"),
        }
    }
}

#[test]
fn crossed_waits_finish_over_tcp() {
    check(Transport::Tcp, "progress-tcp", false);
}

#[test]
fn crossed_waits_on_another_thread_finish_over_tcp() {
    check(Transport::Tcp, "progress-tcp-threads", true);
}

#[test]
fn crossed_waits_finish_over_shared_memory() {
    check(Transport::Shm, "progress-shm", false);
}

#[test]
fn crossed_waits_finish_over_rdma() {
    if rdma_available() {
        check(Transport::Rdma, "progress-rdma", false);
        check(Transport::Rdma, "progress-rdma-threads", true);
    }
}

fn is_send<T: Send>() {}

/// Exchanges may be handed from thread to thread (one at a time).
#[test]
fn exchanges_move_between_threads() {
    is_send::<HaloExchange>();
    is_send::<sode::FieldExchange>();
    is_send::<sode::LinkExchange>();
}
