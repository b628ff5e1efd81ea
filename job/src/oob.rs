//! The out-of-band exchange every bootstrap provides: what the ranks of a
//! job need to tell each other before any channel exists.
//!
//! [`OutOfBand`] is the seam between the job and whoever started it. The TCP
//! rendezvous ([`crate::TcpRendezvous`]) is one implementation; a PMIx
//! client (put/commit/fence/get) or an MPI communicator (an allgather
//! callback) are others: each provides an allgather, and point-to-point
//! links for the setup messages that must reach one peer only (keys).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::{JobError, Result};

/// An out-of-band exchange among the ranks of one job. Every method but the
/// accessors is collective over the ranks it names.
pub trait OutOfBand: Send + std::fmt::Debug {
    /// This process's rank.
    fn rank(&self) -> usize;

    /// Number of ranks.
    fn size(&self) -> usize;

    /// Every rank's `mine`, indexed by rank; collective over the job.
    ///
    /// # Errors
    ///
    /// [`JobError::BootstrapTimeout`] at the deadline; another error of
    /// the exchange's own (its connection broke, a message did not parse).
    fn allgather(&mut self, mine: &[u8], deadline: Instant) -> Result<Vec<Vec<u8>>>;

    /// One collective step: every rank's `mine` with its rank, as
    /// `combine` leaves them: it may merge blocks into fewer (blocks that
    /// only say a rank arrived; a reduction), and an exchange that gathers
    /// in stages (a tree of the ranks) applies it at each, so what a rank
    /// receives need not grow with the job. The same on every rank; in no
    /// particular order. By default, an [`allgather`](Self::allgather)
    /// combined once.
    ///
    /// # Errors
    ///
    /// As [`allgather`](Self::allgather).
    fn step(&mut self, mine: &[u8], deadline: Instant, combine: Combine<'_>) -> Result<Stepped> {
        let all = self.allgather(mine, deadline)?;
        Ok(Stepped::gathered(all, mine.len(), combine))
    }

    /// Returns once every rank has called it; collective over the job.
    ///
    /// # Errors
    ///
    /// As [`allgather`](Self::allgather).
    fn barrier(&mut self, deadline: Instant) -> Result<()> {
        self.allgather(&[], deadline).map(|_| ())
    }

    /// A link to each of `peers` for setup messages meant for that peer
    /// alone; collective among them (each must name this rank too).
    ///
    /// # Errors
    ///
    /// [`JobError::UnknownPeer`] for a rank not in the job or this one;
    /// [`JobError::BootstrapTimeout`] when a peer does not connect by the
    /// deadline; [`JobError::Unauthenticated`] for a connection that cannot
    /// prove it belongs to the job.
    fn connect(
        &mut self,
        peers: &BTreeSet<usize>,
        deadline: Instant,
    ) -> Result<BTreeMap<usize, PeerLink>>;

    /// Opens the links its collective steps take from now on, where it
    /// takes them over links of its own ([`step`](Self::step)); called
    /// once the world is made and every rank has taken its health links,
    /// so that no rank meets another's link for these while it takes
    /// those. Collective; others need not do anything.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    fn link_steps(&mut self, _deadline: Instant) -> Result<()> {
        Ok(())
    }

    /// Takes the job's routes (known once every rank has reported how it
    /// can be reached): a bootstrap that opens TCP links of its own sends
    /// those between ranks that do not reach each other through the
    /// gateways between them. Others need not do anything.
    fn route_through(&mut self, _routes: std::sync::Arc<crate::Routes>) {}
}

/// A rank's block in a collective step ([`OutOfBand::step`]), with the
/// rank.
pub type RankBlock = (usize, Vec<u8>);

/// What a collective step ([`OutOfBand::step`]) brought a rank.
#[derive(Debug)]
pub struct Stepped {
    /// The blocks, as the step's combining left them.
    pub blocks: Vec<RankBlock>,
    /// The bytes this rank received in the step.
    pub received: u64,
}

impl Stepped {
    /// The step of an allgather that brought `all` (this rank's block,
    /// of `mine` bytes, among them), combined here once.
    pub fn gathered(all: Vec<Vec<u8>>, mine: usize, combine: Combine<'_>) -> Stepped {
        let received = all.iter().map(Vec::len).sum::<usize>().saturating_sub(mine) as u64;
        let mut blocks: Vec<RankBlock> = all.into_iter().enumerate().collect();
        combine(&mut blocks);
        Stepped { blocks, received }
    }
}

/// What a collective step does to the blocks a rank holds before it passes
/// them on ([`OutOfBand::step`]); the same function on every rank.
pub type Combine<'a> = &'a dyn Fn(&mut Vec<RankBlock>);

/// One point-to-point link of an [`OutOfBand`] exchange: whole messages, in
/// order.
pub trait PeerChannel: Send + std::fmt::Debug {
    /// Sends one message.
    ///
    /// # Errors
    ///
    /// [`JobError::Bootstrap`] when the link is broken (the peer exited).
    fn send(&mut self, msg: &[u8]) -> Result<()>;

    /// Receives one message, waiting until `deadline`.
    ///
    /// # Errors
    ///
    /// [`JobError::BootstrapTimeout`] at the deadline;
    /// [`JobError::Bootstrap`] when the link is broken (the peer exited);
    /// [`JobError::Protocol`] for a message that is not one.
    fn recv(&mut self, deadline: Instant) -> Result<Vec<u8>>;

    /// True once the peer is known to be gone (it exited or died), without
    /// blocking; false where the bootstrap cannot tell.
    fn closed(&self) -> bool;

    /// Waits, taking nothing from the link, until a message has begun to
    /// arrive or the link ended (`true`: a [`recv`](PeerChannel::recv)
    /// would not wait for the peer), or until `until` (`false`); it looks
    /// at least once. A link that cannot tell answers `true` at once: its
    /// receives then wait alone, and a long wait on it is not reported.
    fn arriving_by(&mut self, until: Instant) -> bool {
        let _ = until;
        true
    }

    /// A descriptor that `poll` reports (`POLLRDHUP`, `POLLHUP` or
    /// `POLLERR`) when the peer goes, so a sleeping rank can wake for it;
    /// `None` where only [`closed`](PeerChannel::closed) can tell.
    fn liveness_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }

    /// Bounds how long one [`send`](PeerChannel::send) may block on a peer
    /// that does not read (none: as long as it takes); a send that runs
    /// out fails, and the link is unusable after it. Links that never
    /// block need not do anything.
    ///
    /// # Errors
    ///
    /// [`JobError::Bootstrap`] when the link cannot be configured.
    fn bound_sends(&mut self, _limit: Option<std::time::Duration>) -> Result<()> {
        Ok(())
    }
}

/// A setup link to one peer, carrying typed messages (JSON).
#[derive(Debug)]
pub struct PeerLink {
    peer: usize,
    channel: Box<dyn PeerChannel>,
}

impl PeerLink {
    /// A link to `peer` over `channel`.
    pub fn new(peer: usize, channel: Box<dyn PeerChannel>) -> PeerLink {
        PeerLink { peer, channel }
    }

    /// The peer's rank.
    pub fn peer(&self) -> usize {
        self.peer
    }

    /// The same link, its peer called `peer` (in a renumbered world).
    pub fn renumbered(self, peer: usize) -> PeerLink {
        PeerLink { peer, ..self }
    }

    /// Sends one message.
    ///
    /// # Errors
    ///
    /// As [`PeerChannel::send`], and [`JobError::Protocol`] for a message
    /// that does not serialise.
    pub fn send<T: Serialize>(&mut self, msg: &T) -> Result<()> {
        let body = encode(msg, self.peer)?;
        self.channel.send(&body)
    }

    /// Receives one message, waiting until `deadline`.
    ///
    /// # Errors
    ///
    /// As [`PeerChannel::recv`], and [`JobError::Protocol`] for a message
    /// that is not a `T`.
    pub fn recv<T: for<'de> Deserialize<'de>>(&mut self, deadline: Instant) -> Result<T> {
        let body = self.channel.recv(deadline)?;
        decode(&body, &format!("rank {}", self.peer))
    }

    /// Sends `body` as it is, for messages that are bytes already.
    ///
    /// # Errors
    ///
    /// As [`PeerChannel::send`].
    pub(crate) fn send_bytes(&mut self, body: &[u8]) -> Result<()> {
        self.channel.send(body)
    }

    /// Receives one message as it came, waiting until `deadline`.
    ///
    /// # Errors
    ///
    /// As [`PeerChannel::recv`].
    pub(crate) fn recv_bytes(&mut self, deadline: Instant) -> Result<Vec<u8>> {
        self.channel.recv(deadline)
    }

    /// Whether a message has begun to arrive or the link ended, waiting
    /// until `until` (see [`PeerChannel::arriving_by`]).
    pub(crate) fn arriving_by(&mut self, until: Instant) -> bool {
        self.channel.arriving_by(until)
    }

    /// True once the peer has gone (exited or died), without blocking.
    pub fn closed(&self) -> bool {
        self.channel.closed()
    }

    /// A descriptor to `poll` for the peer's going, where the link has one
    /// (see [`PeerChannel::liveness_fd`]).
    pub fn liveness_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.channel.liveness_fd()
    }

    /// Bounds how long one send may block (see [`PeerChannel::bound_sends`]).
    ///
    /// # Errors
    ///
    /// As [`PeerChannel::bound_sends`].
    pub fn bound_sends(&mut self, limit: Option<std::time::Duration>) -> Result<()> {
        self.channel.bound_sends(limit)
    }
}

/// A typed message as the bytes an [`OutOfBand`] exchange carries.
///
/// # Errors
///
/// [`JobError::Protocol`] when it does not serialise.
pub fn encode<T: Serialize>(msg: &T, peer: usize) -> Result<Vec<u8>> {
    serde_json::to_vec(msg).map_err(|e| JobError::Protocol {
        whom: format!("rank {peer}"),
        why: format!("a setup message for it does not serialise: {e}"),
    })
}

/// A typed message from the bytes `whom` sent.
///
/// # Errors
///
/// [`JobError::Protocol`] naming `whom` when they are not a `T`.
pub fn decode<T: for<'de> Deserialize<'de>>(body: &[u8], whom: &str) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| JobError::Protocol {
        whom: whom.into(),
        why: e.to_string(),
    })
}

/// Fails unless every one of `peers` is a rank of the job other than `me`.
pub(crate) fn check_peers(me: usize, size: usize, peers: &BTreeSet<usize>) -> Result<()> {
    match peers.iter().find(|&&p| p >= size || p == me) {
        None => Ok(()),
        Some(&p) => Err(JobError::UnknownPeer {
            peer: p,
            why: if p == me {
                "a rank cannot be its own peer".into()
            } else {
                format!("the job has ranks 0..{size}")
            },
        }),
    }
}
