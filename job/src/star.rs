//! Collective steps through rank 0 over the job's own links, for a world
//! that met through a launcher's key-value space (PMIx, PMI-1). The server
//! keeps every round put there, so steps taken through it slow as they add
//! up (2 ranks under Open MPI's `mpirun`: a commit averaged 10 ms over the
//! first hundred, 41 ms over the second, 96 ms over the third). Over
//! links, each step costs the same: rank 0 gathers every rank's block and
//! answers each rank with all of them, or with the ranks it did not hear
//! from.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::error::{JobError, Result};
use crate::oob::PeerLink;
use crate::wire::{decode_step_missed, encode_step_missed, join_blocks, split_blocks};

/// How much longer than its own deadline a rank waits for rank 0's answer:
/// rank 0, which began the step later, names the missing ranks at its own.
const ROOT_VERDICT: Duration = Duration::from_secs(1);

/// A rank's links for the steps: rank 0's to every other rank, or one to
/// rank 0.
#[derive(Debug)]
pub(crate) enum Star {
    Root(BTreeMap<usize, PeerLink>),
    Leaf(Box<PeerLink>),
}

impl Star {
    /// Links rank `rank` of `size` to rank 0 (rank 0 to every rank) through
    /// `connect`, collective over the job.
    ///
    /// # Errors
    ///
    /// `connect`'s.
    pub(crate) fn link(
        rank: usize,
        size: usize,
        connect: impl FnOnce(&BTreeSet<usize>) -> Result<BTreeMap<usize, PeerLink>>,
    ) -> Result<Star> {
        if rank == 0 {
            return connect(&(1..size).collect()).map(Star::Root);
        }
        let mut links = connect(&BTreeSet::from([0]))?;
        links
            .remove(&0)
            .map(|l| Star::Leaf(Box::new(l)))
            .ok_or_else(|| JobError::Protocol {
                whom: "the job's links".into(),
                why: "no link to rank 0 after connecting to it".into(),
            })
    }

    /// Every rank's `mine`, in rank order, by `deadline`: the blocks
    /// travel joined as the TCP rendezvous's do ([`join_blocks`]), and a
    /// step rank 0 gives up is told as the rendezvous tells it
    /// ([`encode_step_missed`]).
    ///
    /// # Errors
    ///
    /// [`JobError::StepMissed`] naming the rank rank 0 did not hear from;
    /// [`JobError::BootstrapTimeout`] when rank 0 did not answer;
    /// [`JobError::Bootstrap`] when a link broke (its rank exited or
    /// died); [`JobError::Protocol`] for an answer that does not read.
    pub(crate) fn allgather(
        &mut self,
        size: usize,
        mine: &[u8],
        deadline: Instant,
    ) -> Result<Vec<Vec<u8>>> {
        let root = match self {
            Star::Root(links) => return gather(links, size, mine, deadline),
            Star::Leaf(root) => root,
        };
        let began = Instant::now();
        root.send_bytes(mine)?;
        let until = deadline.checked_add(ROOT_VERDICT).unwrap_or(deadline);
        let body = root.recv_bytes(until).map_err(|e| match e {
            JobError::BootstrapTimeout { step, .. } => JobError::BootstrapTimeout {
                step,
                whom: "rank 0".into(),
                waited: began.elapsed(),
                hint: "rank 0 gathers each collective step and did not answer: it did not take the step (failed, stopped, or not making the same call), or is still waiting for a rank that did not".into(),
            },
            other => other,
        })?;
        if let Some(missed) = decode_step_missed(&body) {
            return Err(missed);
        }
        split_blocks(&body, size).ok_or_else(|| JobError::Protocol {
            whom: "rank 0".into(),
            why: format!(
                "its answer to a collective step is not one block from each of {size} ranks"
            ),
        })
    }
}

/// Rank 0's part of a step: every other rank's block, then the answer to
/// each. A rank not heard from by `deadline` (or whose link broke) fails
/// the step, and the others are told which.
fn gather(
    links: &mut BTreeMap<usize, PeerLink>,
    size: usize,
    mine: &[u8],
    deadline: Instant,
) -> Result<Vec<Vec<u8>>> {
    let began = Instant::now();
    let mut all = vec![mine.to_vec()];
    for r in 1..size {
        let heard = match links.get_mut(&r) {
            Some(link) => link.recv_bytes(deadline),
            None => Err(JobError::Protocol {
                whom: "the job's links".into(),
                why: format!("rank 0 has no link to rank {r}"),
            }),
        };
        match heard {
            Ok(block) => all.push(block),
            Err(e) => {
                let (missing, waited) = (format!("rank {r}"), began.elapsed());
                answer(links, &encode_step_missed(&missing, waited));
                return Err(match e {
                    JobError::BootstrapTimeout { .. } => JobError::StepMissed { missing, waited },
                    other => other,
                });
            }
        }
    }
    answer(links, &join_blocks(&all)?);
    Ok(all)
}

/// Sends `body` to every rank. One that cannot take it exited or died:
/// the job's health watcher tells every rank so.
fn answer(links: &mut BTreeMap<usize, PeerLink>, body: &[u8]) {
    for (r, link) in links.iter_mut() {
        if let Err(e) = link.send_bytes(body) {
            tracing::debug!(rank = r, error = %crate::diag::chain(&e), "a step's answer could not be sent");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oob::PeerChannel;
    use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};

    /// One end of an in-memory link.
    #[derive(Debug)]
    struct End {
        to: Sender<Vec<u8>>,
        from: Receiver<Vec<u8>>,
    }

    impl PeerChannel for End {
        fn send(&mut self, msg: &[u8]) -> Result<()> {
            let _ = self.to.send(msg.to_vec());
            Ok(())
        }
        fn recv(&mut self, deadline: Instant) -> Result<Vec<u8>> {
            let left = deadline.saturating_duration_since(Instant::now());
            self.from.recv_timeout(left).map_err(|e| match e {
                RecvTimeoutError::Timeout => JobError::BootstrapTimeout {
                    step: "a test step".into(),
                    whom: "a peer".into(),
                    waited: left,
                    hint: String::new(),
                },
                RecvTimeoutError::Disconnected => JobError::Bootstrap {
                    step: "a test step".into(),
                    whom: "a peer".into(),
                    source: std::io::ErrorKind::BrokenPipe.into(),
                },
            })
        }
        fn closed(&self) -> bool {
            false
        }
    }

    /// Each rank's star of a job of `size`.
    fn stars(size: usize) -> Vec<Star> {
        let mut root = BTreeMap::new();
        let mut leaves = Vec::new();
        for r in 1..size {
            let (to_leaf, from_root) = channel();
            let (to_root, from_leaf) = channel();
            let at_root = End {
                to: to_leaf,
                from: from_leaf,
            };
            let at_leaf = End {
                to: to_root,
                from: from_root,
            };
            root.insert(r, PeerLink::new(r, Box::new(at_root)));
            leaves.push(Star::Leaf(Box::new(PeerLink::new(0, Box::new(at_leaf)))));
        }
        std::iter::once(Star::Root(root)).chain(leaves).collect()
    }

    /// Each rank's outcome of steps taken by the ranks `taking` (the
    /// others take none, and stay longer than any would wait for them),
    /// rank r's block `[r, step]`, and how long it took.
    fn steps(
        size: usize,
        taking: &[usize],
        count: u8,
        within: Duration,
    ) -> Vec<(Result<Vec<Vec<u8>>>, Duration)> {
        let threads: Vec<_> = stars(size)
            .into_iter()
            .enumerate()
            .map(|(r, mut star)| {
                let takes = taking.contains(&r);
                std::thread::spawn(move || {
                    let began = Instant::now();
                    if !takes {
                        std::thread::sleep(within * 2 + ROOT_VERDICT * 2);
                        return (Ok(Vec::new()), began.elapsed());
                    }
                    let mut last = Ok(Vec::new());
                    for step in 0..count {
                        last = star.allgather(size, &[r as u8, step], Instant::now() + within);
                        if last.is_err() {
                            break;
                        }
                    }
                    (last, began.elapsed())
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    #[test]
    fn every_rank_gets_every_block_in_rank_order_each_step() {
        let outcomes = steps(4, &[0, 1, 2, 3], 3, Duration::from_secs(5));
        for (r, (got, _)) in outcomes.into_iter().enumerate() {
            let want: Vec<Vec<u8>> = (0..4u8).map(|q| vec![q, 2]).collect();
            assert_eq!(got.unwrap(), want, "rank {r}");
        }
    }

    #[test]
    fn a_rank_missing_is_named_to_every_rank_that_took_the_step() {
        let within = Duration::from_millis(300);
        let outcomes = steps(4, &[0, 1, 3], 1, within);
        for r in [0, 1, 3] {
            match &outcomes[r] {
                (Err(JobError::StepMissed { missing, .. }), took) => {
                    assert_eq!(missing, "rank 2", "rank {r}");
                    // Told by rank 0 at its deadline, not at their own
                    // deadline and its verdict's time.
                    assert!(*took < within + ROOT_VERDICT / 2, "rank {r}: {took:?}");
                }
                other => panic!("rank {r}: {other:?}"),
            }
        }
    }

    #[test]
    fn rank_0_silent_is_named_as_such() {
        let outcomes = steps(3, &[1, 2], 1, Duration::from_millis(200));
        for r in [1, 2] {
            match &outcomes[r] {
                (Err(JobError::BootstrapTimeout { whom, .. }), _) => {
                    assert_eq!(whom, "rank 0", "rank {r}")
                }
                other => panic!("rank {r}: {other:?}"),
            }
        }
    }
}
