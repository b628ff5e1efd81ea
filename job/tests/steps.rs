//! The job's collective steps over its own links, in worlds made over a
//! program's allgather (as an MPI communicator lends one): a barrier and a
//! reduction bring each rank bytes that do not grow with the job (its
//! children's and its parent's word in a tree of 8 children a rank), an
//! allgather every rank's block; a trade reaches the peers named alone;
//! a rank that gives up in a reduction is named to every rank.

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use sode_job::{AllgatherFn, ExternalOob, JobError, World};

const STEP: Duration = Duration::from_secs(30);

/// An allgather across threads, standing in for MPI's.
fn thread_gathers(size: usize) -> Vec<AllgatherFn> {
    let slots = Arc::new(Mutex::new(vec![Vec::new(); size]));
    let barrier = Arc::new(Barrier::new(size));
    (0..size)
        .map(|r| {
            let (slots, barrier) = (slots.clone(), barrier.clone());
            Box::new(move |mine: &[u8], all: &mut [u8], _: Instant| {
                slots.lock().unwrap()[r] = mine.to_vec();
                barrier.wait();
                let got: Vec<u8> = slots.lock().unwrap().concat();
                barrier.wait();
                if got.len() != all.len() {
                    return Err(format!("blocks of {} bytes, not {}", got.len(), all.len()));
                }
                all.copy_from_slice(&got);
                Ok(())
            }) as AllgatherFn
        })
        .collect()
}

/// `rank(world)` on each of `size` ranks, each a world over the threads'
/// allgather; the outcomes by rank.
fn on_ranks<T: Send + 'static>(
    size: usize,
    rank: impl Fn(&World) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let rank = Arc::new(rank);
    let threads: Vec<_> = thread_gathers(size)
        .into_iter()
        .enumerate()
        .map(|(r, gather)| {
            let rank = rank.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + STEP;
                let oob = ExternalOob::new(r, size, gather, deadline).unwrap();
                let world = World::over(Box::new(oob), Some("steps".into()), deadline).unwrap();
                rank(&world)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// What a rank received in a barrier, a reduction of 3 lanes and an
/// allgather of 8 bytes a rank; and the reduction's spreads.
#[derive(Debug, Clone, PartialEq)]
struct Received {
    barrier: u64,
    reduce: u64,
    allgather: u64,
}

fn steps_of(world: &World) -> (Received, Vec<sode_job::Spread>) {
    // The first step links the tree: not counted.
    world.barrier(STEP).unwrap();
    let bytes = || world.gathered_bytes();
    let at = bytes();
    world.barrier(STEP).unwrap();
    let barrier = bytes() - at;
    let at = bytes();
    let rank = world.rank() as u64;
    let spreads = world.reduce(&[rank, 7, u64::MAX - rank], STEP).unwrap();
    let reduce = bytes() - at;
    let at = bytes();
    let all = world.allgather(&rank.to_le_bytes(), STEP).unwrap();
    let allgather = bytes() - at;
    let want: Vec<Vec<u8>> = (0..world.size() as u64)
        .map(|r| r.to_le_bytes().to_vec())
        .collect();
    assert_eq!(all, want, "rank {rank}: the allgather");
    (
        Received {
            barrier,
            reduce,
            allgather,
        },
        spreads,
    )
}

#[test]
fn a_barrier_and_a_reduction_bring_a_rank_the_same_bytes_in_a_job_of_20_and_of_80() {
    let mut most = Vec::new();
    // From 17 ranks on, some rank has a parent and 8 children (the most
    // links a rank takes steps over).
    for size in [20, 80] {
        let outcomes = on_ranks(size, steps_of);
        let n = size as u64;
        for (r, (received, spreads)) in outcomes.iter().enumerate() {
            assert_eq!(spreads[0].least, 0, "rank {r}");
            assert_eq!(spreads[0].most, n - 1, "rank {r}");
            assert!(
                spreads[1].agreed() && spreads[1].least == 7,
                "rank {r}: {spreads:?}"
            );
            assert_eq!(spreads[2].least, u64::MAX - (n - 1), "rank {r}");
            // Every rank's block, but its own, in the allgather.
            assert!(received.allgather >= 8 * (n - 1), "rank {r}: {received:?}");
        }
        let worst = |f: fn(&Received) -> u64| outcomes.iter().map(|(x, _)| f(x)).max().unwrap();
        most.push((
            worst(|x| x.barrier),
            worst(|x| x.reduce),
            worst(|x| x.allgather),
        ));
    }
    println!(
        "most bytes a rank received (barrier, reduction, allgather): 20 ranks {:?}, 80 ranks {:?}",
        most[0], most[1]
    );
    assert_eq!((most[0].0, most[0].1), (most[1].0, most[1].1), "{most:?}");
    // At most 9 messages of a reduction of 3 lanes (48 bytes) each.
    assert!(most[1].1 <= 9 * 80, "{most:?}");
    assert!(most[1].2 >= 3 * most[0].2, "{most:?}");
}

#[test]
fn a_trade_reaches_the_peers_named_and_no_other() {
    let size = 7;
    let outcomes = on_ranks(size, move |w| {
        let me = w.rank();
        let (next, prev) = ((me + 1) % size, (me + size - 1) % size);
        let messages: BTreeMap<usize, Vec<u8>> = [next, prev]
            .into_iter()
            .map(|p| (p, format!("{me} to {p}").into_bytes()))
            .collect();
        let at = w.gathered_bytes();
        let got = w.trade(&messages, STEP).unwrap();
        (got, w.gathered_bytes() - at)
    });
    for (me, (got, bytes)) in outcomes.into_iter().enumerate() {
        let (next, prev) = ((me + 1) % size, (me + size - 1) % size);
        let want: BTreeMap<usize, Vec<u8>> = [next, prev]
            .into_iter()
            .map(|p| (p, format!("{p} to {me}").into_bytes()))
            .collect();
        assert_eq!(got, want, "rank {me}");
        assert_eq!(bytes, want.values().map(|m| m.len() as u64).sum::<u64>());
    }
}

#[test]
fn a_rank_that_gives_up_in_a_reduction_is_named_to_every_rank() {
    let outcomes = on_ranks(12, |w| {
        w.barrier(STEP).unwrap();
        if w.rank() == 9 {
            w.give_up(-3, "rank 9's reason", STEP).unwrap();
            return None;
        }
        Some(w.reduce(&[1, 2], STEP))
    });
    for (r, o) in outcomes.into_iter().enumerate() {
        match o {
            None => assert_eq!(r, 9),
            Some(Err(JobError::GaveUp {
                rank: 9,
                code: -3,
                message,
            })) => assert_eq!(message, "rank 9's reason"),
            Some(other) => panic!("rank {r}: {other:?}"),
        }
    }
}
