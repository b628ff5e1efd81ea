//! Collective steps through rank 0 over the job's own links: those of the
//! TCP rendezvous, and those a world that met through a launcher's
//! key-value space (PMIx, PMI-1) opens to take its steps off the server.
//! The server keeps every round put there, so steps taken through it slow
//! as they add up (2 ranks under Open MPI's `mpirun`: a commit averaged
//! 10 ms over the first hundred, 41 ms over the second, 96 ms over the
//! third). Over links, each step costs the same: rank 0 gathers every
//! rank's block and answers each rank with all of them, or with the ranks
//! that did not take the step.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::error::{JobError, Result};
use crate::long_wait::{name_ranks, step_waits_for, step_waits_for_root, LongWait};
use crate::oob::PeerLink;
use crate::timeout::Deadline;
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

    /// Every rank's `mine`, in rank order, by `deadline` (moved on by time
    /// this process is found stopped): the blocks travel joined
    /// ([`join_blocks`]), and a step rank 0 gives up is told to every rank
    /// ([`encode_step_missed`]). A step that goes on long warns
    /// (`SODE_WAIT_WARN`).
    ///
    /// # Errors
    ///
    /// [`JobError::StepMissed`] naming the ranks rank 0 did not hear from;
    /// [`JobError::BootstrapTimeout`] when rank 0 did not answer;
    /// [`JobError::Bootstrap`] when a link broke (its rank exited or
    /// died); [`JobError::Protocol`] for an answer that does not read.
    pub(crate) fn allgather(
        &mut self,
        size: usize,
        mine: &[u8],
        deadline: Instant,
    ) -> Result<Vec<Vec<u8>>> {
        let long = LongWait::new(crate::wait_warning().ok().flatten());
        self.allgather_warning(size, mine, deadline, long, &mut |m| tracing::warn!("{m}"))
    }

    /// [`allgather`](Self::allgather), telling `warn` each warning `long`
    /// makes due.
    fn allgather_warning(
        &mut self,
        size: usize,
        mine: &[u8],
        deadline: Instant,
        mut long: Option<LongWait>,
        warn: &mut dyn FnMut(String),
    ) -> Result<Vec<Vec<u8>>> {
        let root = match self {
            Star::Root(links) => {
                let step = Step {
                    size,
                    deadline: Deadline::new(deadline),
                    long,
                    began: Instant::now(),
                };
                return step.gather(links, mine, warn);
            }
            Star::Leaf(root) => root,
        };
        let began = Instant::now();
        root.send_bytes(mine)?;
        // Rank 0 names the missing ranks at its own deadline, later than
        // this rank's when it began the step later: its word is waited for
        // that much longer.
        let mut until = Deadline::new(deadline.checked_add(ROOT_VERDICT).unwrap_or(deadline));
        while let Some(waited) = await_message(root, &mut until, &mut long) {
            warn(step_waits_for_root(waited));
        }
        let waited = began.elapsed().saturating_sub(until.stopped());
        let body = root.recv_bytes(until.at()).map_err(|e| match e {
            JobError::BootstrapTimeout { step, .. } => JobError::BootstrapTimeout {
                step,
                whom: "rank 0".into(),
                waited,
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

/// How often a rank waiting for a step looks at the clock when no warning
/// is due sooner: a longer gap is taken for time this process was stopped.
const LOOK: Duration = Duration::from_millis(100);

/// Waits until `link`'s next message has begun to arrive (or the link
/// ended), or `deadline` passed: `None`; or until `long` is due: how long
/// it has waited, to warn and call again.
fn await_message(
    link: &mut PeerLink,
    deadline: &mut Deadline,
    long: &mut Option<LongWait>,
) -> Option<Duration> {
    while !deadline.passed() {
        let look = long
            .as_ref()
            .map_or_else(|| Instant::now() + LOOK, LongWait::next_look)
            .min(deadline.at());
        if link.arriving_by(look) {
            return None;
        }
        if let Some(waited) = long.as_mut().and_then(LongWait::due) {
            return Some(waited);
        }
    }
    None
}

/// Rank 0's part of one step.
struct Step {
    size: usize,
    deadline: Deadline,
    long: Option<LongWait>,
    began: Instant,
}

impl Step {
    /// Every other rank's block, then the answer to each. A rank not
    /// heard from by the deadline (or whose link broke) fails the step,
    /// and every rank is told which ranks did not take it.
    fn gather(
        mut self,
        links: &mut BTreeMap<usize, PeerLink>,
        mine: &[u8],
        warn: &mut dyn FnMut(String),
    ) -> Result<Vec<Vec<u8>>> {
        let mut all = vec![mine.to_vec()];
        for r in 1..self.size {
            match self.block_of(links, r, warn) {
                Ok(block) => all.push(block),
                Err(e) => {
                    let waited = self.began.elapsed().saturating_sub(self.deadline.stopped());
                    let missing = match e {
                        JobError::BootstrapTimeout { .. } => missing_from(links, r, self.size),
                        _ => format!("rank {r}"),
                    };
                    answer(links, &encode_step_missed(&missing, waited));
                    return Err(match e {
                        JobError::BootstrapTimeout { .. } => {
                            JobError::StepMissed { missing, waited }
                        }
                        other => other,
                    });
                }
            }
        }
        answer(links, &join_blocks(&all)?);
        Ok(all)
    }

    /// Rank `r`'s block, warning while it is awaited long.
    fn block_of(
        &mut self,
        links: &mut BTreeMap<usize, PeerLink>,
        r: usize,
        warn: &mut dyn FnMut(String),
    ) -> Result<Vec<u8>> {
        let no_link = || JobError::Protocol {
            whom: "the job's links".into(),
            why: format!("rank 0 has no link to rank {r}"),
        };
        loop {
            let link = links.get_mut(&r).ok_or_else(no_link)?;
            match await_message(link, &mut self.deadline, &mut self.long) {
                None => return link.recv_bytes(self.deadline.at()),
                Some(waited) => {
                    // The later ranks whose blocks are on their way have
                    // taken the step.
                    let missing: Vec<usize> = std::iter::once(r)
                        .chain((r + 1..self.size).filter(|k| {
                            !links
                                .get_mut(k)
                                .is_some_and(|l| l.arriving_by(Instant::now()))
                        }))
                        .collect();
                    warn(step_waits_for(waited, &missing));
                }
            }
        }
    }
}

/// The ranks missing from a step that rank `first` did not take by its
/// deadline, named: `first`, and every later rank whose block does not
/// arrive within a short grace (one already sent has taken the step).
fn missing_from(links: &mut BTreeMap<usize, PeerLink>, first: usize, size: usize) -> String {
    // Long enough for a block already sent, bounded over a large job.
    const ARRIVING: Duration = Duration::from_millis(2);
    let mut missing = vec![first];
    for r in first + 1..size {
        let arrived = links
            .get_mut(&r)
            .is_some_and(|l| l.recv_bytes(Instant::now() + ARRIVING).is_ok());
        if !arrived {
            missing.push(r);
        }
    }
    name_ranks(&missing)
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
        /// A message taken by a look, not yet received.
        arrived: Option<Vec<u8>>,
    }

    impl PeerChannel for End {
        fn send(&mut self, msg: &[u8]) -> Result<()> {
            let _ = self.to.send(msg.to_vec());
            Ok(())
        }
        fn arriving_by(&mut self, until: Instant) -> bool {
            let left = until.saturating_duration_since(Instant::now());
            match self.from.recv_timeout(left) {
                Ok(msg) => self.arrived = Some(msg),
                Err(RecvTimeoutError::Timeout) => return self.arrived.is_some(),
                Err(RecvTimeoutError::Disconnected) => {}
            }
            true
        }
        fn recv(&mut self, deadline: Instant) -> Result<Vec<u8>> {
            if let Some(msg) = self.arrived.take() {
                return Ok(msg);
            }
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
                arrived: None,
            };
            let at_leaf = End {
                to: to_root,
                from: from_root,
                arrived: None,
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
    fn the_ranks_missing_are_named_to_every_rank_that_took_the_step() {
        let within = Duration::from_millis(300);
        // Rank 3's block waits behind rank 2's: it took the step.
        let outcomes = steps(5, &[0, 1, 3], 1, within);
        for r in [0, 1, 3] {
            match &outcomes[r] {
                (Err(JobError::StepMissed { missing, .. }), took) => {
                    assert_eq!(missing, "ranks 2, 4", "rank {r}");
                    // Told by rank 0 at its deadline, not at their own
                    // deadline and its verdict's time.
                    assert!(*took < within + ROOT_VERDICT / 2, "rank {r}: {took:?}");
                }
                other => panic!("rank {r}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_step_that_goes_on_long_warns_naming_the_ranks_not_arrived() {
        let ms = Duration::from_millis;
        let size = 4;
        let threads: Vec<_> = stars(size)
            .into_iter()
            .enumerate()
            .map(|(r, mut star)| {
                std::thread::spawn(move || {
                    // Rank 3 takes the step at once, rank 2 after 900 ms.
                    if r == 2 {
                        std::thread::sleep(ms(900));
                    }
                    let mut warned = Vec::new();
                    let long = LongWait::new(Some(ms(200)));
                    let deadline = Instant::now() + Duration::from_secs(10);
                    let got = star.allgather_warning(size, &[r as u8], deadline, long, &mut |m| {
                        warned.push(m)
                    });
                    (got.unwrap(), warned)
                })
            })
            .collect();
        let outcomes: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let want: Vec<Vec<u8>> = (0..size as u8).map(|q| vec![q]).collect();
        for (r, (got, _)) in outcomes.iter().enumerate() {
            assert_eq!(*got, want, "rank {r}");
        }
        let root = &outcomes[0].1;
        // At about 200, 400 and 800 ms: rank 2 alone (rank 3's block is
        // on its way), each time the wait has doubled.
        assert!(root.len() >= 2, "rank 0: {root:?}");
        for m in root {
            assert!(m.contains("not taken yet by rank 2:"), "rank 0: {m}");
        }
        let leaf = &outcomes[1].1;
        assert!(!leaf.is_empty(), "rank 1 did not warn");
        assert!(
            leaf[0].contains("for rank 0's answer"),
            "rank 1: {}",
            leaf[0]
        );
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
