//! Collective steps over the job's own links, in a tree of the ranks:
//! those of the TCP rendezvous (rank 0 linked to every rank, a tree of one
//! level), and those a world that met through a launcher's key-value space
//! (PMIx, PMI-1) opens to take its steps off the server. The server keeps
//! every round put there, so steps taken through it slow as they add up
//! (2 ranks under Open MPI's `mpirun`: a commit averaged 10 ms over the
//! first hundred, 41 ms over the second, 96 ms over the third). Over
//! links, each step costs the same: each rank passes its block and those
//! of the ranks below it to its parent, and rank 0 answers down the tree
//! with every block, or with the ranks that did not take the step.
//!
//! In a tree of [`FANOUT`] children a rank, no rank holds more than
//! `FANOUT + 1` links for the steps, and no rank sends more than
//! `FANOUT + 1` times a step's size: rank 0 is no hub that every rank
//! dials and that sends every rank every block.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::error::{JobError, Result};
use crate::long_wait::{name_ranks, step_waits_for, step_waits_for_root, LongWait};
use crate::oob::{Combine, PeerLink, RankBlock as Block, Stepped};
use crate::timeout::Deadline;
use crate::wire::{decode_step_missed, encode_step_missed, join_blocks, split_blocks};

/// Children a rank in the tree of steps a world opens links for: 512
/// ranks are 3 levels below rank 0, and a rank's links stay few.
pub(crate) const FANOUT: usize = 8;

/// How much longer than the ranks below it a rank gathers, and a rank
/// waits for its parent's answer beyond its own gathering: a rank that
/// stops gathering at its deadline tells its parent which ranks it missed,
/// and the parent, which waits for that word a level longer, names them
/// to every rank.
const LEVEL_VERDICT: Duration = Duration::from_secs(1);

/// Where a rank sits in a tree of `size` ranks, `fanout` children each
/// (rank 0 the root; rank `r`'s parent `(r - 1) / fanout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    rank: usize,
    size: usize,
    fanout: usize,
}

impl Place {
    /// Rank `rank` of `size` in a tree of `fanout` children (at least 1).
    pub(crate) fn new(rank: usize, size: usize, fanout: usize) -> Place {
        Place {
            rank,
            size,
            fanout: fanout.max(1),
        }
    }

    fn parent(&self) -> Option<usize> {
        self.rank.checked_sub(1).map(|r| r / self.fanout)
    }

    fn children_of(&self, r: usize) -> std::ops::Range<usize> {
        let first = r
            .saturating_mul(self.fanout)
            .saturating_add(1)
            .min(self.size);
        first..first.saturating_add(self.fanout).min(self.size)
    }

    /// The ranks this rank links to: its parent and its children.
    pub(crate) fn peers(&self) -> BTreeSet<usize> {
        self.parent()
            .into_iter()
            .chain(self.children_of(self.rank))
            .collect()
    }

    /// Levels below `r` (0 for a leaf).
    fn height_of(&self, r: usize) -> u32 {
        let mut height = 0;
        let mut first = r;
        while self.children_of(first).next().is_some() {
            height += 1;
            first = self.children_of(first).start;
        }
        height
    }

    /// How many ranks the subtree of `top` holds, `top` included.
    fn subtree_size(&self, top: usize) -> usize {
        let (mut lo, mut hi, mut count) = (top, top, 1usize);
        loop {
            lo = lo.saturating_mul(self.fanout).saturating_add(1);
            hi = hi
                .saturating_mul(self.fanout)
                .saturating_add(self.fanout)
                .min(self.size.saturating_sub(1));
            if lo >= self.size {
                return count;
            }
            count = count.saturating_add(hi - lo + 1);
        }
    }

    /// Levels above `r` (0 for rank 0).
    fn depth_of(&self, mut r: usize) -> u32 {
        let mut depth = 0;
        while r > 0 {
            r = (r - 1) / self.fanout;
            depth += 1;
        }
        depth
    }

    /// Whether `r` is in the subtree of `top`.
    fn below(&self, mut r: usize, top: usize) -> bool {
        loop {
            if r == top {
                return true;
            }
            if r < top || r == 0 {
                return false;
            }
            r = (r - 1) / self.fanout;
        }
    }
}

/// A rank's links for the steps: to its parent (none at rank 0) and to
/// each of its children.
#[derive(Debug)]
pub(crate) struct Tree {
    place: Place,
    parent: Option<Box<PeerLink>>,
    children: BTreeMap<usize, PeerLink>,
}

impl Tree {
    /// Links rank `rank` of `size` to its parent and children in a tree of
    /// `fanout` through `connect`, collective over the job.
    ///
    /// # Errors
    ///
    /// `connect`'s.
    pub(crate) fn link(
        place: Place,
        connect: impl FnOnce(&BTreeSet<usize>) -> Result<BTreeMap<usize, PeerLink>>,
    ) -> Result<Tree> {
        let links = connect(&place.peers())?;
        Tree::of_links(place, links)
    }

    /// The tree of `place` over `links`, one to each of its peers
    /// ([`Place::peers`]); any other link is closed.
    ///
    /// # Errors
    ///
    /// [`JobError::Protocol`] when a peer has no link.
    pub(crate) fn of_links(place: Place, mut links: BTreeMap<usize, PeerLink>) -> Result<Tree> {
        let mut take = |r: usize| {
            links.remove(&r).ok_or_else(|| JobError::Protocol {
                whom: "the job's links".into(),
                why: format!(
                    "rank {} has no link to rank {r} after connecting to it",
                    place.rank
                ),
            })
        };
        let parent = place.parent().map(&mut take).transpose()?.map(Box::new);
        let children = place
            .children_of(place.rank)
            .map(|c| take(c).map(|l| (c, l)))
            .collect::<Result<_>>()?;
        Ok(Tree {
            place,
            parent,
            children,
        })
    }

    /// Every rank's `mine`, in rank order, by `deadline` (moved on by time
    /// this process is found stopped): the blocks travel joined, and a
    /// step rank 0 gives up is told to every rank
    /// ([`encode_step_missed`]). A step that goes on long warns
    /// (`SODE_WAIT_WARN`).
    ///
    /// # Errors
    ///
    /// [`JobError::StepMissed`] naming the ranks not heard from;
    /// [`JobError::BootstrapTimeout`] when this rank's parent did not
    /// answer; [`JobError::Bootstrap`] when a link broke (its rank exited
    /// or died); [`JobError::Protocol`] for an answer that does not read.
    pub(crate) fn allgather(&mut self, mine: &[u8], deadline: Instant) -> Result<Vec<Vec<u8>>> {
        let all = self.step(mine, deadline, &|_| {})?;
        every_block(all.blocks, self.place.size)
    }

    /// One step: `mine` and the blocks of the ranks below this one, as
    /// `combine` leaves them (it may merge several into one: blocks that
    /// only say a rank arrived, or a reduction), passed up; rank 0
    /// combines what reached it and answers every rank with that, each
    /// block with its rank. Otherwise as [`allgather`](Self::allgather).
    ///
    /// # Errors
    ///
    /// As [`allgather`](Self::allgather).
    pub(crate) fn step(
        &mut self,
        mine: &[u8],
        deadline: Instant,
        combine: Combine<'_>,
    ) -> Result<Stepped> {
        let long = LongWait::new(crate::wait_warning().ok().flatten());
        self.step_warning(mine, deadline, combine, long, &mut |m| {
            tracing::warn!("{m}")
        })
    }

    /// [`allgather`](Self::allgather), telling `warn` each warning `long`
    /// makes due.
    #[cfg(test)]
    fn allgather_warning(
        &mut self,
        mine: &[u8],
        deadline: Instant,
        long: Option<LongWait>,
        warn: &mut dyn FnMut(String),
    ) -> Result<Vec<Vec<u8>>> {
        let all = self.step_warning(mine, deadline, &|_| {}, long, warn)?;
        every_block(all.blocks, self.place.size)
    }

    /// [`step`](Self::step), telling `warn` each warning `long` makes due.
    fn step_warning(
        &mut self,
        mine: &[u8],
        deadline: Instant,
        combine: Combine<'_>,
        long: Option<LongWait>,
        warn: &mut dyn FnMut(String),
    ) -> Result<Stepped> {
        let place = self.place;
        let height = place.height_of(place.rank);
        let mut step = Step {
            deadline: Deadline::new(later(deadline, height.saturating_sub(1))),
            long,
            began: Instant::now(),
            received: 0,
        };
        let mut up = Up::Blocks(vec![(place.rank, mine.to_vec())]);
        let mut own_error = None;
        for (&child, link) in self.children.iter_mut() {
            match step.subtree_of(link, child, &place, warn) {
                Ok(theirs) => up.add(theirs),
                Err(e) => {
                    up.add(Up::missing(child, step.waited()));
                    // Later children whose word is on its way took the
                    // step (or tell which ranks below them did not).
                    own_error.get_or_insert(e);
                }
            }
        }
        if let Up::Blocks(blocks) = &mut up {
            combine(blocks);
        }
        let answer = match self.parent.as_deref_mut() {
            None => up.answer()?,
            Some(parent) => {
                // Past rank 0's gathering, and a level later than the
                // parent's own wait, so that a parent whose answer did not
                // come tells its children why before they give up on it.
                let levels = place.height_of(0) + place.depth_of(place.rank) - 1;
                let until = later(deadline, levels);
                let answer = parent
                    .send_bytes(&up.encode()?)
                    .and_then(|()| await_answer(parent, until, &mut step.long, warn));
                match answer {
                    Ok(a) => {
                        step.received += a.len() as u64;
                        a
                    }
                    Err(e) => {
                        let missing = format!("rank {}", parent.peer());
                        let missed = encode_step_missed(&missing, step.waited());
                        answer_children(&mut self.children, &missed);
                        return Err(e);
                    }
                }
            }
        };
        answer_children(&mut self.children, &answer);
        if let Some(e) = own_error.filter(|e| !matches!(e, JobError::BootstrapTimeout { .. })) {
            return Err(e);
        }
        Ok(Stepped {
            blocks: read_answer(&answer, place.size)?,
            received: step.received,
        })
    }
}

/// The blocks of every one of `size` ranks, in rank order.
fn every_block(mut all: Vec<Block>, size: usize) -> Result<Vec<Vec<u8>>> {
    all.sort_unstable_by_key(|(r, _)| *r);
    if all.len() != size || all.iter().enumerate().any(|(i, (r, _))| i != *r) {
        return Err(JobError::Protocol {
            whom: "rank 0".into(),
            why: format!(
                "its answer to a collective step is not one block from each of {size} ranks"
            ),
        });
    }
    Ok(all.into_iter().map(|(_, b)| b).collect())
}

/// `deadline`, `levels` verdicts later.
fn later(deadline: Instant, levels: u32) -> Instant {
    deadline
        .checked_add(LEVEL_VERDICT.saturating_mul(levels))
        .unwrap_or(deadline)
}

/// What a rank passes its parent in a step: every block of its subtree, by
/// rank; or, when some were not heard from, which.
#[derive(Debug)]
enum Up {
    Blocks(Vec<(usize, Vec<u8>)>),
    Missed { ranks: Vec<usize>, waited: Duration },
}

const UP_BLOCKS: u8 = 1;
const UP_MISSED: u8 = 2;

impl Up {
    fn missing(rank: usize, waited: Duration) -> Up {
        Up::Missed {
            ranks: vec![rank],
            waited,
        }
    }

    /// Both: the blocks of both, or the ranks either missed.
    fn add(&mut self, other: Up) {
        match (&mut *self, other) {
            (Up::Blocks(mine), Up::Blocks(theirs)) => mine.extend(theirs),
            (
                Up::Missed { ranks, waited },
                Up::Missed {
                    ranks: more,
                    waited: w,
                },
            ) => {
                ranks.extend(more);
                *waited = (*waited).max(w);
            }
            (Up::Missed { .. }, Up::Blocks(_)) => {}
            (me @ Up::Blocks(_), missed) => *me = missed,
        }
    }

    fn encode(&self) -> Result<Vec<u8>> {
        let too_many = |n: usize| JobError::Protocol {
            whom: "this rank".into(),
            why: format!("{n} blocks or ranks in a collective step"),
        };
        let u32_of = |n: usize, of: usize| u32::try_from(n).map_err(|_| too_many(of));
        let mut out = Vec::new();
        match self {
            Up::Blocks(blocks) => {
                out.push(UP_BLOCKS);
                out.extend_from_slice(&u32_of(blocks.len(), blocks.len())?.to_le_bytes());
                for (r, _) in blocks {
                    out.extend_from_slice(&u32_of(*r, blocks.len())?.to_le_bytes());
                }
                let bodies: Vec<Vec<u8>> = blocks.iter().map(|(_, b)| b.clone()).collect();
                out.extend(join_blocks(&bodies)?);
            }
            Up::Missed { ranks, waited } => {
                out.push(UP_MISSED);
                let ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
                out.extend_from_slice(&ms.to_le_bytes());
                for r in ranks {
                    out.extend_from_slice(&u32_of(*r, ranks.len())?.to_le_bytes());
                }
            }
        }
        Ok(out)
    }

    /// What a message holds: at most `most` blocks or ranks, each of a
    /// rank `ours` accepts, none twice; `None` for anything else.
    fn decode(message: &[u8], most: usize, ours: impl Fn(usize) -> bool) -> Option<Up> {
        let (&kind, rest) = message.split_first()?;
        let rank_of = |c: &[u8]| Some(u32::from_le_bytes(c.try_into().ok()?) as usize);
        let up = match kind {
            UP_BLOCKS => {
                let (count, rest) = rest.split_first_chunk::<4>()?;
                let count = u32::from_le_bytes(*count) as usize;
                if count > most {
                    return None;
                }
                let (ranks, bodies) = rest.split_at_checked(count * 4)?;
                let ranks: Vec<usize> = ranks.chunks(4).map(rank_of).collect::<Option<_>>()?;
                let bodies = split_blocks(bodies, count)?;
                Up::Blocks(ranks.into_iter().zip(bodies).collect())
            }
            UP_MISSED => {
                let (ms, list) = rest.split_first_chunk::<8>()?;
                let ranks: Vec<usize> = list.chunks(4).map(rank_of).collect::<Option<_>>()?;
                if ranks.is_empty() || ranks.len() > most {
                    return None;
                }
                Up::Missed {
                    ranks,
                    waited: Duration::from_millis(u64::from_le_bytes(*ms)),
                }
            }
            _ => return None,
        };
        let ranks: Vec<usize> = match &up {
            Up::Blocks(b) => b.iter().map(|(r, _)| *r).collect(),
            Up::Missed { ranks, .. } => ranks.clone(),
        };
        let distinct: BTreeSet<usize> = ranks.iter().copied().collect();
        (distinct.len() == ranks.len() && ranks.iter().all(|&r| ours(r))).then_some(up)
    }

    /// Rank 0's answer to every rank: the blocks in rank order, or the
    /// ranks missed.
    fn answer(self) -> Result<Vec<u8>> {
        match self {
            Up::Blocks(mut blocks) => {
                blocks.sort_unstable_by_key(|(r, _)| *r);
                Up::Blocks(blocks).encode()
            }
            Up::Missed { mut ranks, waited } => {
                ranks.sort_unstable();
                ranks.dedup();
                Ok(encode_step_missed(&name_ranks(&ranks), waited))
            }
        }
    }
}

/// The blocks, or the missed ranks, `answer` (rank 0's) carries.
fn read_answer(answer: &[u8], size: usize) -> Result<Vec<Block>> {
    if let Some(missed) = decode_step_missed(answer) {
        return Err(missed);
    }
    match Up::decode(answer, size, |r| r < size) {
        Some(Up::Blocks(blocks)) => Ok(blocks),
        _ => Err(JobError::Protocol {
            whom: "rank 0".into(),
            why: "its answer to a collective step does not read as blocks of the job's ranks"
                .into(),
        }),
    }
}

/// The parent's answer by `until` (moved on by time stopped), warning
/// while it is awaited long.
fn await_answer(
    parent: &mut PeerLink,
    until: Instant,
    long: &mut Option<LongWait>,
    warn: &mut dyn FnMut(String),
) -> Result<Vec<u8>> {
    let began = Instant::now();
    let mut until = Deadline::new(until);
    while let Some(waited) = await_message(parent, &mut until, long) {
        warn(step_waits_for_root(waited));
    }
    let waited = began.elapsed().saturating_sub(until.stopped());
    let whom = format!("rank {}", parent.peer());
    parent.recv_bytes(until.at()).map_err(|e| match e {
        JobError::BootstrapTimeout { step, .. } => JobError::BootstrapTimeout {
            step,
            whom,
            waited,
            hint: "rank 0 answers each collective step down the tree of the ranks, and it did not come: a rank above this one did not take the step (failed, stopped, or not making the same call), or is still waiting for a rank that did not".into(),
        },
        other => other,
    })
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

/// How long a rank waits for a child's word already on its way once the
/// step's deadline has passed: bounded over a large job.
const ARRIVING: Duration = Duration::from_millis(2);

/// A rank's gathering in one step.
struct Step {
    deadline: Deadline,
    long: Option<LongWait>,
    began: Instant,
    /// The bytes received so far.
    received: u64,
}

impl Step {
    /// How long the step has waited, less time this process was stopped.
    fn waited(&self) -> Duration {
        self.began.elapsed().saturating_sub(self.deadline.stopped())
    }

    /// What `child` passes up for its subtree, warning while it is
    /// awaited long.
    fn subtree_of(
        &mut self,
        link: &mut PeerLink,
        child: usize,
        place: &Place,
        warn: &mut dyn FnMut(String),
    ) -> Result<Up> {
        while let Some(waited) = await_message(link, &mut self.deadline, &mut self.long) {
            warn(step_waits_for(waited, &[child]));
        }
        // Past the deadline (another child missed it), a word already on
        // its way is still taken.
        let until = self.deadline.at().max(Instant::now() + ARRIVING);
        let message = link.recv_bytes(until)?;
        self.received += message.len() as u64;
        let most = place.subtree_size(child);
        Up::decode(&message, most, |r| place.below(r, child)).ok_or_else(|| JobError::Protocol {
            whom: format!("rank {child}"),
            why:
                "its part of a collective step is not its subtree's blocks, nor the ranks it missed"
                    .into(),
        })
    }
}

/// Sends `body` to every child. One that cannot take it exited or died:
/// the job's health watcher tells every rank so.
fn answer_children(children: &mut BTreeMap<usize, PeerLink>, body: &[u8]) {
    for (r, link) in children.iter_mut() {
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

    /// The two ends of an in-memory link between `a` and `b`: `a`'s, then
    /// `b`'s.
    fn pair(a: usize, b: usize) -> (PeerLink, PeerLink) {
        let (to_b, from_a) = channel();
        let (to_a, from_b) = channel();
        let at_a = End {
            to: to_b,
            from: from_b,
            arrived: None,
        };
        let at_b = End {
            to: to_a,
            from: from_a,
            arrived: None,
        };
        (
            PeerLink::new(b, Box::new(at_a)),
            PeerLink::new(a, Box::new(at_b)),
        )
    }

    /// Each rank's tree of a job of `size`, `fanout` children a rank.
    fn trees(size: usize, fanout: usize) -> Vec<Tree> {
        let mut links: Vec<BTreeMap<usize, PeerLink>> =
            (0..size).map(|_| BTreeMap::new()).collect();
        for child in 1..size {
            let parent = (child - 1) / fanout;
            let (at_parent, at_child) = pair(parent, child);
            links[parent].insert(child, at_parent);
            links[child].insert(parent, at_child);
        }
        links
            .into_iter()
            .enumerate()
            .map(|(r, l)| Tree::of_links(Place::new(r, size, fanout), l).unwrap())
            .collect()
    }

    /// Each rank's star of a job of `size`: a tree of one level.
    fn stars(size: usize) -> Vec<Tree> {
        trees(size, size - 1)
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
        steps_in(stars(size), taking, count, within)
    }

    /// [`steps`] in `trees`.
    fn steps_in(
        trees: Vec<Tree>,
        taking: &[usize],
        count: u8,
        within: Duration,
    ) -> Vec<(Result<Vec<Vec<u8>>>, Duration)> {
        let threads: Vec<_> = trees
            .into_iter()
            .enumerate()
            .map(|(r, mut tree)| {
                let takes = taking.contains(&r);
                std::thread::spawn(move || {
                    let began = Instant::now();
                    if !takes {
                        std::thread::sleep(within * 2 + LEVEL_VERDICT * 8);
                        return (Ok(Vec::new()), began.elapsed());
                    }
                    let mut last = Ok(Vec::new());
                    for step in 0..count {
                        last = tree.allgather(&[r as u8, step], Instant::now() + within);
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
                    assert!(*took < within + LEVEL_VERDICT / 2, "rank {r}: {took:?}");
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
            .map(|(r, mut tree)| {
                std::thread::spawn(move || {
                    // Rank 3 takes the step at once, rank 2 after 900 ms.
                    if r == 2 {
                        std::thread::sleep(ms(900));
                    }
                    let mut warned = Vec::new();
                    let long = LongWait::new(Some(ms(200)));
                    let deadline = Instant::now() + Duration::from_secs(10);
                    let got =
                        tree.allgather_warning(&[r as u8], deadline, long, &mut |m| warned.push(m));
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
    fn in_a_tree_of_levels_every_rank_gets_every_block_in_rank_order_each_step() {
        for (size, fanout) in [(13, 2), (40, 3), (73, 8)] {
            let all: Vec<usize> = (0..size).collect();
            let outcomes = steps_in(trees(size, fanout), &all, 3, Duration::from_secs(20));
            for (r, (got, _)) in outcomes.into_iter().enumerate() {
                let want: Vec<Vec<u8>> = (0..size as u8).map(|q| vec![q, 2]).collect();
                assert_eq!(
                    got.unwrap(),
                    want,
                    "{size} ranks, fanout {fanout}: rank {r}"
                );
            }
        }
    }

    #[test]
    fn a_rank_deep_in_the_tree_that_misses_a_step_is_named_to_every_other_rank_at_once() {
        let within = Duration::from_millis(300);
        // 13 ranks, 2 children each: rank 11 hangs below 5, 2 and 0.
        let taking: Vec<usize> = (0..13).filter(|&r| r != 11).collect();
        let outcomes = steps_in(trees(13, 2), &taking, 1, within);
        for &r in &taking {
            match &outcomes[r] {
                (Err(JobError::StepMissed { missing, .. }), took) => {
                    assert_eq!(missing, "rank 11", "rank {r}");
                    // Its parent's word goes up at once: nobody waits a
                    // level longer.
                    assert!(*took < within + LEVEL_VERDICT / 2, "rank {r}: {took:?}");
                }
                other => panic!("rank {r}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_rank_inside_the_tree_that_misses_a_step_is_named_to_every_other_rank() {
        let within = Duration::from_millis(300);
        // 13 ranks, 2 children each: rank 2's subtree is 5, 6, 11 and 12.
        let taking: Vec<usize> = (0..13).filter(|&r| r != 2).collect();
        let outcomes = steps_in(trees(13, 2), &taking, 1, within);
        for &r in &taking {
            match (&outcomes[r].0, r) {
                (Err(JobError::StepMissed { missing, .. }), _) => {
                    assert_eq!(missing, "rank 2", "rank {r}")
                }
                // Its children waited for it, and tell theirs.
                (Err(JobError::BootstrapTimeout { whom, .. }), 5 | 6) => {
                    assert_eq!(whom, "rank 2", "rank {r}")
                }
                other => panic!("rank {r}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_rank_links_to_its_parent_and_children_only() {
        for (size, fanout) in [(1, 8), (2, 8), (9, 8), (512, 8), (100, 1)] {
            let places: Vec<Place> = (0..size).map(|r| Place::new(r, size, fanout)).collect();
            let mut below = vec![0usize; size];
            for p in &places {
                let peers = p.peers();
                assert!(peers.len() <= fanout + 1, "rank {}: {peers:?}", p.rank);
                for &q in &peers {
                    assert!(places[q].peers().contains(&p.rank), "{} and {q}", p.rank);
                }
                for (r, n) in below.iter_mut().enumerate() {
                    *n += usize::from(p.below(r, p.rank));
                }
                let count = (0..size).filter(|&r| p.below(r, p.rank)).count();
                assert_eq!(p.subtree_size(p.rank), count, "rank {} of {size}", p.rank);
            }
            // Each rank is below itself and each of its ancestors.
            for (r, n) in below.iter().enumerate() {
                assert_eq!(*n as u32, places[r].depth_of(r) + 1, "rank {r} of {size}");
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
