//! The credit protocol as pure state: no verbs, no clocks, no I/O.
//!
//! Each iteration `n` a receiver grants every writer a credit for `n` (its
//! windows are free again); a writer posts its iteration-`n` writes to a
//! peer only once it is itself in iteration `n` and that peer's credit for
//! `n` has arrived; the last write of each chain carries `n`, and the
//! receiver's iteration ends when one such write has arrived from every
//! engine of every writer. [`CreditBook`] keeps that bookkeeping for one
//! rank and checks every event against it, so the ordering argument is
//! testable by driving two books in memory (below), the way quinn-proto
//! tests its connection state.
//!
//! Why a fast writer can never overwrite data its receiver has not
//! consumed: the receiver grants credit `n + 1` only in its `start` of
//! iteration `n + 1`, which follows its `wait` of iteration `n`, by which
//! time it has consumed iteration `n`. A writer's posting of `n + 1` needs
//! that credit. Credits travel on one queue pair in order, so they arrive in
//! order (`n + 1` after `n`, checked); and credit `n + 2` cannot exist before
//! the writer's data of `n + 1` has arrived, so at most one credit is ever
//! early.
//!
//! With two slots per window (a lead of one: [`PeerRole::grant_lead`]),
//! iteration `n` lands in slot `n % 2` and the receiver grants `n + 1` in
//! its `start` of `n`, so the credit is off the critical path: the writer
//! holds it before it needs it. Still safe: writing `n + 1` needs that
//! credit, and by its `start` of `n` the receiver has consumed `n - 1`, the
//! last data of slot `(n + 1) % 2`. The writer's data of `n + 1` may then
//! arrive while the receiver is still in `n`; it is counted for `n + 1`
//! ([`CreditBook::on_data`]). Iteration 1's credit is implied at setup.

/// Bits of an immediate that carry the iteration number (it wraps).
pub const EPOCH_BITS: u32 = 24;
/// The iteration number's bits of an immediate.
pub const EPOCH_MASK: u32 = (1 << EPOCH_BITS) - 1;
/// The bits above the iteration that carry the writer's shape in a data
/// immediate (the top bit marks a credit).
pub const SHAPE_MASK: u32 = 0x7f;

/// A peer that broke the protocol (it or this rank called start and wait
/// out of step, or a message was corrupted).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolViolation {
    /// A credit that is not the next one.
    #[error("credit for iteration {got}, expected {expected}: the ranks' start/wait calls are out of step")]
    CreditOutOfStep {
        /// The credit's iteration.
        got: u32,
        /// The next one expected.
        expected: u32,
    },
    /// Data of another iteration, or while no exchange is in flight.
    #[error("data of iteration {got} arrived during iteration {current}{}", if *.in_flight { "" } else { " (not in flight)" })]
    DataOutOfStep {
        /// The data's iteration.
        got: u32,
        /// This rank's iteration.
        current: u32,
        /// Whether an exchange was in flight.
        in_flight: bool,
    },
    /// The peer's data of this iteration carries another shape than this
    /// rank's start: the two started different parts of the exchange.
    #[error("the peer's writes carry shape {theirs}, this rank's start shape {ours}: the ranks started different parts of the exchange (other fields, or another depth)")]
    ShapeMismatch {
        /// The peer's shape.
        theirs: u8,
        /// This rank's.
        ours: u8,
    },
    /// More chains arrived than the peer announced at setup.
    #[error("{arrived} arrivals in one iteration, {announced} announced")]
    TooManyArrivals {
        /// Arrivals counted.
        arrived: usize,
        /// Arrivals announced.
        announced: usize,
    },
    /// An event names a peer this book does not have.
    #[error("peer index {index} out of {peers}")]
    UnknownPeer {
        /// The index.
        index: usize,
        /// Peers in the book.
        peers: usize,
    },
}

/// What a peer does in the exchange, as agreed at setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerRole {
    /// This rank writes to the peer (so waits for its credits).
    pub we_write: bool,
    /// Chains the peer writes to this rank per iteration (one arrival each).
    pub arrivals_per_iteration: usize,
    /// How far ahead this rank grants the peer: 1 when every window the
    /// peer writes here has two slots (credit `n + 1` at the start of `n`),
    /// else 0.
    pub grant_lead: u32,
    /// How far ahead the peer grants this rank (its `grant_lead` towards
    /// us): 1 makes iteration 1's credit implied at setup.
    pub credit_lead: u32,
}

impl PeerRole {
    /// A peer whose windows have one slot each way (no lead).
    pub fn new(we_write: bool, arrivals_per_iteration: usize) -> PeerRole {
        PeerRole {
            we_write,
            arrivals_per_iteration,
            grant_lead: 0,
            credit_lead: 0,
        }
    }
}

/// What a credit lets the writer do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreditEvent {
    /// The credit is for the iteration in flight: post to this peer now.
    PostNow,
    /// The credit is for the next iteration: post at the next `start`.
    Early,
}

/// What an arrival completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// More chains from this peer are due this iteration.
    Partial,
    /// Every chain from this peer has arrived this iteration.
    PeerComplete,
}

#[derive(Debug, Clone)]
struct PeerBook {
    role: PeerRole,
    /// The last credit the peer granted us.
    credit: u32,
    /// Chains arrived this iteration.
    arrivals: usize,
    /// Chains of the next iteration arrived already (with a lead).
    early: usize,
    /// The shape those early chains carried.
    early_shape: u8,
}

/// One rank's credit and epoch bookkeeping over all its peers.
#[derive(Debug, Clone)]
pub struct CreditBook {
    epoch: u32,
    /// The shape this rank started the iteration with.
    shape: u8,
    in_flight: bool,
    peers: Vec<PeerBook>,
}

impl CreditBook {
    /// A book for peers with these roles (indexed as the caller indexes
    /// its peers), before the first iteration.
    pub fn new(roles: impl IntoIterator<Item = PeerRole>) -> CreditBook {
        CreditBook {
            epoch: 0,
            shape: 0,
            in_flight: false,
            peers: roles
                .into_iter()
                .map(|role| PeerBook {
                    role,
                    credit: role.credit_lead.min(1),
                    arrivals: 0,
                    early: 0,
                    early_shape: 0,
                })
                .collect(),
        }
    }

    /// Begins the next iteration, of `shape` (what part of the exchange
    /// it moves; its writers' data must carry the same), and returns its
    /// number: the credit to grant every writer.
    ///
    /// # Errors
    ///
    /// [`ProtocolViolation::ShapeMismatch`], with the index of the (first)
    /// peer, when data of this iteration that came early carries another
    /// shape; the iteration has begun all the same.
    pub fn start(&mut self, shape: u8) -> Result<u32, (usize, ProtocolViolation)> {
        self.epoch = next(self.epoch);
        self.shape = shape;
        self.in_flight = true;
        let mut mismatch = None;
        // Every peer's early data counted, whatever the verdict: the
        // iteration begins all the same, so that this rank's writes still
        // go out and tell the peer too.
        for (i, p) in self.peers.iter_mut().enumerate() {
            p.arrivals = std::mem::take(&mut p.early);
            if p.arrivals > 0 && p.early_shape != shape && mismatch.is_none() {
                let theirs = p.early_shape;
                mismatch = Some((
                    i,
                    ProtocolViolation::ShapeMismatch {
                        theirs,
                        ours: shape,
                    },
                ));
            }
        }
        match mismatch {
            Some(m) => Err(m),
            None => Ok(self.epoch),
        }
    }

    /// The credit to grant `peer` at this start: the iteration in flight,
    /// or the next one with a lead.
    pub fn grant(&self, peer: usize) -> u32 {
        let lead = self.peers.get(peer).map_or(0, |p| p.role.grant_lead.min(1));
        self.epoch.wrapping_add(lead) & EPOCH_MASK
    }

    /// The iteration in flight (or the last one).
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Whether an iteration is in flight.
    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// Whether this rank may post its writes of this iteration to `peer`.
    pub fn may_post(&self, peer: usize) -> bool {
        self.in_flight
            && self
                .peers
                .get(peer)
                .is_some_and(|p| p.role.we_write && not_behind(p.credit, self.epoch))
    }

    fn peer(&mut self, index: usize) -> Result<&mut PeerBook, ProtocolViolation> {
        let peers = self.peers.len();
        self.peers
            .get_mut(index)
            .ok_or(ProtocolViolation::UnknownPeer { index, peers })
    }

    /// `peer` granted credit `epoch`.
    ///
    /// # Errors
    ///
    /// [`ProtocolViolation::CreditOutOfStep`] when `epoch` is not the credit
    /// `peer` owes next (a peer out of step, or not of this job).
    pub fn on_credit(&mut self, peer: usize, epoch: u32) -> Result<CreditEvent, ProtocolViolation> {
        let (mine, in_flight) = (self.epoch, self.in_flight);
        let p = self.peer(peer)?;
        let expected = next(p.credit);
        if epoch != expected {
            return Err(ProtocolViolation::CreditOutOfStep {
                got: epoch,
                expected,
            });
        }
        p.credit = epoch;
        Ok(if in_flight && epoch == mine {
            CreditEvent::PostNow
        } else {
            CreditEvent::Early
        })
    }

    /// The last chain of `peer`'s writes of iteration `epoch`, carrying
    /// `shape`, arrived.
    ///
    /// # Errors
    ///
    /// [`ProtocolViolation::TooManyArrivals`] or
    /// [`ProtocolViolation::DataOutOfStep`] when `peer`'s data does not belong
    /// to the iteration expected of it; [`ProtocolViolation::ShapeMismatch`]
    /// when its shape is not this rank's for the iteration.
    pub fn on_data(
        &mut self,
        peer: usize,
        epoch: u32,
        shape: u8,
    ) -> Result<Arrival, ProtocolViolation> {
        let (current, in_flight, ours) = (self.epoch, self.in_flight, self.shape);
        let p = self.peer(peer)?;
        let announced = p.role.arrivals_per_iteration;
        // With a lead, the next iteration's data may come before this
        // rank's start of it: counted for then, its shape checked then.
        if p.role.grant_lead > 0 && epoch == next(current) {
            if p.early > 0 && p.early_shape != shape {
                return Err(ProtocolViolation::ShapeMismatch {
                    theirs: shape,
                    ours: p.early_shape,
                });
            }
            p.early_shape = shape;
            p.early += 1;
            if p.early > announced {
                return Err(ProtocolViolation::TooManyArrivals {
                    arrived: p.early,
                    announced,
                });
            }
            return Ok(Arrival::Partial);
        }
        if epoch != current || !in_flight {
            return Err(ProtocolViolation::DataOutOfStep {
                got: epoch,
                current,
                in_flight,
            });
        }
        if shape != ours {
            return Err(ProtocolViolation::ShapeMismatch {
                theirs: shape,
                ours,
            });
        }
        p.arrivals += 1;
        match p.arrivals.cmp(&announced) {
            std::cmp::Ordering::Less => Ok(Arrival::Partial),
            std::cmp::Ordering::Equal => Ok(Arrival::PeerComplete),
            std::cmp::Ordering::Greater => Err(ProtocolViolation::TooManyArrivals {
                arrived: p.arrivals,
                announced,
            }),
        }
    }

    /// Chains still due from `peer` this iteration.
    pub fn arrivals_missing(&self, peer: usize) -> usize {
        self.peers.get(peer).map_or(0, |p| {
            p.role.arrivals_per_iteration.saturating_sub(p.arrivals)
        })
    }

    /// Whether every writer's chains of this iteration have arrived.
    pub fn arrivals_complete(&self) -> bool {
        self.peers
            .iter()
            .all(|p| p.arrivals == p.role.arrivals_per_iteration)
    }

    /// The iteration is over (its posts and arrivals are done).
    pub fn finish(&mut self) {
        self.in_flight = false;
    }
}

fn next(epoch: u32) -> u32 {
    epoch.wrapping_add(1) & EPOCH_MASK
}

/// Whether credit `credit` covers iteration `epoch` (it is that iteration
/// or a later one, in wrapping order: a credit is never far ahead).
fn not_behind(credit: u32, epoch: u32) -> bool {
    credit.wrapping_sub(epoch) & EPOCH_MASK < 1 << (EPOCH_BITS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// What travels between two ranks: credits on one queue pair (in
    /// order), data on `engines` queue pairs (in order per engine, in any
    /// order across engines).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Msg {
        Credit(u32),
        Data { epoch: u32 },
    }

    /// One rank of a pair, with the iteration whose data each slot of its
    /// receive window holds (two slots with a lead, else one) and the
    /// iterations it consumed.
    struct Rank {
        book: CreditBook,
        slots: Vec<Option<u32>>,
        consumed: Vec<u32>,
        posted: bool,
        /// Queues towards the peer, one per engine (engine 0 carries credits).
        out: Vec<VecDeque<Msg>>,
        engines: usize,
    }

    impl Rank {
        fn new(engines: usize) -> Rank {
            Rank::with_lead(engines, 0)
        }

        fn with_lead(engines: usize, lead: u32) -> Rank {
            Rank {
                book: CreditBook::new([PeerRole {
                    grant_lead: lead,
                    credit_lead: lead,
                    ..PeerRole::new(true, engines)
                }]),
                slots: vec![None; 1 + lead as usize],
                consumed: Vec::new(),
                posted: false,
                out: vec![VecDeque::new(); engines],
                engines,
            }
        }

        fn slot(&self, epoch: u32) -> usize {
            epoch as usize % self.slots.len()
        }

        fn start(&mut self) {
            self.book.start(0).unwrap();
            self.posted = false;
            self.out[0].push_back(Msg::Credit(self.book.grant(0)));
            self.try_post();
        }

        fn try_post(&mut self) {
            if !self.posted && self.book.may_post(0) {
                let epoch = self.book.epoch();
                for e in 0..self.engines {
                    self.out[e].push_back(Msg::Data { epoch });
                }
                self.posted = true;
            }
        }

        /// Delivers one message from the peer; panics where a real rank
        /// would overwrite data it has not consumed.
        fn deliver(&mut self, m: Msg) -> Result<(), ProtocolViolation> {
            match m {
                Msg::Credit(n) => {
                    if self.book.on_credit(0, n)? == CreditEvent::PostNow {
                        self.try_post();
                    }
                }
                Msg::Data { epoch } => {
                    self.book.on_data(0, epoch, 0)?;
                    let slot = self.slot(epoch);
                    if let Some(held) = self.slots[slot].filter(|&w| w != epoch) {
                        assert!(
                            self.consumed.contains(&held),
                            "data of iteration {epoch} overwrote unconsumed iteration {held}"
                        );
                    }
                    self.slots[slot] = Some(epoch);
                }
            }
            Ok(())
        }

        fn done(&self) -> bool {
            self.book.in_flight() && self.posted && self.book.arrivals_complete()
        }

        /// `wait` returned: consume what arrived.
        fn finish(&mut self) {
            self.book.finish();
            let epoch = self.book.epoch();
            let held = self.slots[self.slot(epoch)].expect("data arrived");
            assert_eq!(held, epoch, "the slot of this iteration holds its data");
            self.consumed.push(held);
        }
    }

    /// A tiny deterministic generator, so reorderings are reproducible.
    struct Lcg(u64);
    impl Lcg {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((self.0 >> 33) % n as u64) as usize
        }
    }

    /// Runs two ranks for `iters` iterations. Each step delivers one message
    /// from a random non-empty queue (reordering across engines) or lets a
    /// random rank finish its iteration if it can; rank `slow` gets its turn
    /// only one time in `lag`.
    fn drive(engines: usize, iters: usize, seed: u64, slow: usize, lag: usize) {
        drive_with(engines, 0, iters, seed, slow, lag);
    }

    fn drive_with(engines: usize, lead: u32, iters: usize, seed: u64, slow: usize, lag: usize) {
        let mut ranks = [
            Rank::with_lead(engines, lead),
            Rank::with_lead(engines, lead),
        ];
        ranks.iter_mut().for_each(Rank::start);
        let mut rng = Lcg(seed);
        let mut steps = 0;
        while ranks.iter().any(|r| r.consumed.len() < iters) {
            steps += 1;
            assert!(steps < 1_000_000, "no progress: a deadlock");
            let from = rng.below(2);
            let queues: Vec<usize> = (0..engines)
                .filter(|&e| !ranks[from].out[e].is_empty())
                .collect();
            if !queues.is_empty() && rng.below(3) > 0 {
                let e = queues[rng.below(queues.len())];
                let m = ranks[from].out[e].pop_front().expect("non-empty");
                ranks[1 - from].deliver(m).expect("the protocol holds");
                continue;
            }
            let r = rng.below(2);
            if (r == slow && rng.below(lag) != 0) || !ranks[r].done() {
                continue;
            }
            ranks[r].finish();
            if ranks[r].consumed.len() < iters {
                ranks[r].start();
            }
        }
        let want: Vec<u32> = (1..=iters as u32).collect();
        for (r, rank) in ranks.iter().enumerate() {
            assert_eq!(
                rank.consumed, want,
                "rank {r} consumed each iteration once, in order"
            );
        }
    }

    #[test]
    fn two_peers_in_step_with_reordering_across_engines() {
        for seed in 0..50 {
            drive(1, 30, seed, 2, 1);
            drive(3, 30, seed, 2, 1);
        }
    }

    #[test]
    fn a_fast_writer_never_overwrites_what_a_slow_receiver_has_not_consumed() {
        for seed in 0..50 {
            drive(2, 40, seed, 1, 20);
            drive(2, 40, seed, 0, 50);
        }
    }

    #[test]
    fn with_two_slots_a_fast_writer_runs_ahead_but_never_overwrites() {
        for seed in 0..50 {
            drive_with(1, 1, 40, seed, 2, 1);
            drive_with(3, 1, 40, seed, 2, 1);
            drive_with(2, 1, 40, seed, 1, 20);
            drive_with(2, 1, 40, seed, 0, 50);
        }
    }

    #[test]
    fn with_a_lead_the_first_credit_is_implied_and_data_may_come_early() {
        let mut a = Rank::with_lead(1, 1);
        let mut b = Rank::with_lead(1, 1);
        a.start();
        assert!(a.posted, "iteration 1 needs no credit message");
        assert_eq!(
            a.out[0].front(),
            Some(&Msg::Credit(2)),
            "a grants 2 at its start of 1"
        );
        b.start();
        // b's data of 1 reaches a, which finishes 1 and starts 2 ...
        let Some(Msg::Data { epoch: 1 }) = b.out[0].pop_back() else {
            panic!("b posted 1 at once: {:?}", b.out[0]);
        };
        a.deliver(Msg::Data { epoch: 1 }).unwrap();
        // ... while a's credit of 2 reaches b, still in iteration 1: b
        // posts 2 at its next start, and a may see that data early.
        assert_eq!(b.book.on_credit(0, 2), Ok(CreditEvent::Early));
        assert_eq!(
            a.book.on_data(0, 2, 0),
            Ok(Arrival::Partial),
            "counted for 2"
        );
        a.finish();
        a.start();
        assert!(
            a.book.arrivals_complete(),
            "2's early data counts at 2's start"
        );
    }

    #[test]
    fn a_peer_that_stops_holds_the_writer_back_and_is_named() {
        let mut a = Rank::new(2);
        let mut b = Rank::new(2);
        a.start();
        b.start();
        // b's credit reaches a; a's never reaches b (b stopped granting).
        let credit = b.out[0].pop_front().unwrap();
        a.deliver(credit).unwrap();
        assert!(a.posted, "a posts once b's credit is in");
        assert!(!b.posted && !b.book.may_post(0), "b has no credit from a");
        // a's data reaches b; b completes its arrivals but not its posts.
        for e in 0..2 {
            while let Some(m) = a.out[e].pop_front() {
                if matches!(m, Msg::Data { .. }) {
                    b.deliver(m).unwrap();
                }
            }
        }
        assert!(b.book.arrivals_complete() && !b.done());
        assert_eq!(
            a.book.arrivals_missing(0),
            2,
            "a still waits for b's two chains"
        );
    }

    #[test]
    fn out_of_step_events_are_violations() {
        let role = PeerRole::new(true, 1);
        let mut book = CreditBook::new([role]);
        assert_eq!(
            book.on_data(0, 1, 0),
            Err(ProtocolViolation::DataOutOfStep {
                got: 1,
                current: 0,
                in_flight: false
            })
        );
        assert_eq!(book.on_credit(0, 1), Ok(CreditEvent::Early));
        assert_eq!(
            book.on_credit(0, 3),
            Err(ProtocolViolation::CreditOutOfStep {
                got: 3,
                expected: 2
            })
        );
        assert_eq!(book.start(0), Ok(1));
        assert!(
            book.may_post(0),
            "the early credit lets the first start post"
        );
        assert_eq!(book.on_data(0, 1, 0), Ok(Arrival::PeerComplete));
        assert!(matches!(
            book.on_data(0, 1, 0),
            Err(ProtocolViolation::TooManyArrivals {
                arrived: 2,
                announced: 1
            })
        ));
        assert!(book.on_data(0, 2, 0).is_err(), "data from the future");
        assert!(book.on_credit(4, 1).is_err(), "unknown peer");
        let msg = ProtocolViolation::CreditOutOfStep {
            got: 3,
            expected: 2,
        }
        .to_string();
        assert!(msg.contains("out of step"), "{msg}");
    }

    #[test]
    fn iteration_numbers_wrap_in_24_bits() {
        let mut book = CreditBook::new([PeerRole::new(true, 1)]);
        book.epoch = EPOCH_MASK;
        book.peers[0].credit = EPOCH_MASK;
        assert_eq!(book.start(0), Ok(0));
        assert_eq!(book.on_credit(0, 0), Ok(CreditEvent::PostNow));
        assert_eq!(book.on_data(0, 0, 0), Ok(Arrival::PeerComplete));
    }

    #[test]
    fn data_of_another_shape_is_a_violation_on_time_or_early() {
        let mismatch = |theirs, ours| Err(ProtocolViolation::ShapeMismatch { theirs, ours });
        let mut book = CreditBook::new([PeerRole::new(true, 2)]);
        assert_eq!(book.start(5), Ok(1));
        assert_eq!(book.on_data(0, 1, 5), Ok(Arrival::Partial));
        assert_eq!(book.on_data(0, 1, 6), mismatch(6, 5));
        // With a lead: early data keeps its shape until this rank's start
        // of its iteration says which it should have been.
        let role = PeerRole {
            grant_lead: 1,
            credit_lead: 1,
            ..PeerRole::new(true, 2)
        };
        let mut book = CreditBook::new([role]);
        assert_eq!(book.start(3), Ok(1));
        assert_eq!(book.on_data(0, 2, 4), Ok(Arrival::Partial));
        assert_eq!(
            book.on_data(0, 2, 3),
            mismatch(3, 4),
            "early chains disagree"
        );
        let mut book = CreditBook::new([role]);
        assert_eq!(book.start(3), Ok(1));
        assert_eq!(book.on_data(0, 1, 3), Ok(Arrival::Partial));
        assert_eq!(book.on_data(0, 2, 4), Ok(Arrival::Partial));
        assert_eq!(book.on_data(0, 1, 3), Ok(Arrival::PeerComplete));
        book.finish();
        let told = Err((0, ProtocolViolation::ShapeMismatch { theirs: 4, ours: 3 }));
        assert_eq!(book.start(3), told, "told at the start of 2");
        let msg = ProtocolViolation::ShapeMismatch { theirs: 4, ours: 3 }.to_string();
        assert!(msg.contains("different parts of the exchange"), "{msg}");
    }

    #[test]
    fn an_iteration_told_of_another_shape_at_start_begins_all_the_same() {
        // Two peers with a lead; both send their next iteration early, the
        // first with another shape.
        let role = PeerRole {
            grant_lead: 1,
            credit_lead: 1,
            ..PeerRole::new(true, 1)
        };
        let mut book = CreditBook::new([role, role]);
        assert_eq!(book.start(3), Ok(1));
        assert_eq!(book.on_data(0, 1, 3), Ok(Arrival::PeerComplete));
        assert_eq!(book.on_data(1, 1, 3), Ok(Arrival::PeerComplete));
        assert_eq!(book.on_data(0, 2, 4), Ok(Arrival::Partial));
        assert_eq!(book.on_data(1, 2, 3), Ok(Arrival::Partial));
        for peer in 0..2 {
            assert_eq!(book.on_credit(peer, 2), Ok(CreditEvent::Early));
        }
        book.finish();
        let told = Err((0, ProtocolViolation::ShapeMismatch { theirs: 4, ours: 3 }));
        assert_eq!(book.start(3), told);
        // In flight, with the second peer's early data counted: this rank
        // still posts its writes, which tell the first peer in turn.
        assert!(book.in_flight() && book.may_post(0) && book.may_post(1));
        assert_eq!(book.arrivals_missing(1), 0, "the second peer's early chain");
    }
}
