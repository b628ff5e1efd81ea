//! The channels behind the halo exchange, one interface: shared memory on
//! the node, RDMA between nodes, TCP between nodes without a common RDMA
//! fabric. GHEX's layering: the
//! pattern (the decomposition's neighbours) is built once, the halo exchange
//! is the communication object that runs it, and each neighbour's messages
//! travel on the channel its locality called for, decided once at build.

#[cfg(test)]
mod conformance;
#[cfg(test)]
mod memory;
mod progress;
pub use progress::PROGRESS_VAR;
pub(crate) use progress::{progress_from_env, Channels};
mod shm;
pub(crate) use shm::ShmChannel;
mod tcp;
pub(crate) use tcp::TcpChannel;

#[cfg(feature = "rdma")]
mod rdma;
#[cfg(feature = "rdma")]
pub(crate) use rdma::{RdmaChannel, RdmaJob};

use std::time::Duration;

use sode_job::World;

use crate::error::Result;
use crate::settings::Transport;

/// The shape of a start that moves the fields `started` marks at `depth`
/// layers (0: every layer): 0 for every field at every layer, else a
/// 7-bit digest of the two that is never 0. Every rank computes it alike,
/// so two ranks that started different parts of an exchange carry
/// different shapes (unless two partial starts' digests collide: 1 in
/// 127).
pub fn start_shape(started: impl IntoIterator<Item = bool>, depth: usize) -> u8 {
    let mut every = depth == 0;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |b: u8| h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    (depth as u64).to_le_bytes().into_iter().for_each(&mut mix);
    for s in started {
        every &= s;
        mix(u8::from(s));
    }
    if every {
        return 0;
    }
    let folded = (0..64).step_by(7).fold(0u64, |f, shift| f ^ (h >> shift)) & 0x7f;
    (folded as u8).max(1)
}

/// Most sets of memory one exchange may lend
/// ([`LinkExchangeBuilder::lend`](crate::LinkExchangeBuilder::lend)): a
/// receiver names the set it receives in within 6 bits of its credit.
pub const MAX_LENT_SETS: usize = 63;

/// What the starts that follow read and land in, where messages travel
/// in place over RDMA ([`LinkExchange::set_memory`](crate::LinkExchange::set_memory)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StartMemory {
    /// Lent set `k`, in the order lent
    /// ([`LinkExchangeBuilder::lend`](crate::LinkExchangeBuilder::lend));
    /// 0, the first, as built.
    Set(usize),
    /// None of the lent sets: the messages in place go through the
    /// channel's buffers, packed and unpacked as any packed message.
    Staged,
}

/// `len` bytes at `offset` of the memory lent as number `memory` (see
/// [`LinkExchangeBuilder::lend`](crate::LinkExchangeBuilder::lend)): a run
/// of a message read or received in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Span {
    /// Which lent memory.
    pub memory: usize,
    /// Where the run starts in it.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

/// One message: bytes per iteration, and a tag that tells it apart from the
/// other messages between the same two ranks (the sender's send tag is the
/// receiver's receive tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    /// Bytes per iteration (at least 1).
    pub len: usize,
    /// The tag.
    pub tag: u32,
}

/// A link's messages in place: the runs of lent memory its send is read
/// from and its receive lands in, in stream order. Honoured on links that
/// travel over RDMA (no copy at either end: the device reads and writes the
/// caller's memory); elsewhere the message is packed as usual.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InPlace {
    /// The send's runs (`None`: packed into [`LinkExchange::send_buf`](crate::LinkExchange::send_buf)).
    pub send: Option<Vec<Span>>,
    /// The receive's runs (`None`: unpacked from [`LinkExchange::recv_buf`](crate::LinkExchange::recv_buf)).
    pub recv: Option<Vec<Span>>,
}

/// One link's runs in a shared set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkRuns {
    /// Where its send is read from.
    pub send: Option<Vec<sode_shm::Run>>,
    /// Where its receive lands.
    pub recv: Option<Vec<sode_shm::Run>>,
}

/// Which sides of a link travel in place (no send or receive buffer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sides {
    /// The send is read straight from lent memory.
    pub send: bool,
    /// The receive lands straight in lent memory.
    pub recv: bool,
}

/// Whether ranks `a` and `b` have RDMA devices on the same fabric.
pub(crate) fn same_fabric(fabrics: &[String], a: usize, b: usize) -> bool {
    match (fabrics.get(a), fabrics.get(b)) {
        (Some(fa), Some(fb)) => !fa.is_empty() && fa == fb,
        _ => false,
    }
}

/// Whether two ranks on different nodes (`node_of` of each rank) have
/// RDMA devices on the same fabric: one pass over the ranks, where
/// comparing every pair would take minutes at 100,000 ranks.
#[cfg_attr(not(feature = "rdma"), allow(dead_code))]
pub(crate) fn fabric_spans_nodes<N: PartialEq>(
    fabrics: &[String],
    node_of: impl Fn(usize) -> N,
) -> bool {
    let mut first: std::collections::HashMap<&str, N> = std::collections::HashMap::new();
    fabrics.iter().enumerate().any(|(rank, fabric)| {
        if fabric.is_empty() {
            return false;
        }
        let node = node_of(rank);
        match first.get(fabric.as_str()) {
            Some(seen) => *seen != node,
            None => {
                first.insert(fabric, node);
                false
            }
        }
    })
}

/// How rank `a` reaches rank `b` under `transport`, given each rank's RDMA
/// fabric (`fabrics`, gathered under the automatic choice).
pub(crate) fn locality(
    world: &World,
    transport: Transport,
    fabrics: &[String],
    a: usize,
    b: usize,
) -> Locality {
    if a == b {
        return Locality::SelfCopy;
    }
    match transport {
        Transport::Shm => Locality::Shm,
        Transport::Rdma => Locality::Rdma,
        Transport::Tcp => Locality::Tcp,
        Transport::Auto if world.node_of(a) == world.node_of(b) => Locality::Shm,
        Transport::Auto if same_fabric(fabrics, a, b) => Locality::Rdma,
        Transport::Auto => Locality::Tcp,
    }
}

/// One link as a channel's setup sees it: the peer, the messages each
/// way and how errors name it; what every channel needs of the
/// exchange's links, and no more.
#[derive(Debug, Clone)]
pub(crate) struct Member<'a> {
    /// The peer's rank.
    pub peer: usize,
    /// What this rank sends it.
    pub send: Option<Message>,
    /// What this rank receives from it.
    pub recv: Option<Message>,
    /// `rank 3 (NE)`.
    pub name: &'a str,
    /// The direction to the peer in the process grid (empty when none).
    #[cfg_attr(not(feature = "rdma"), allow(dead_code))]
    pub offset: &'a [i32],
}

/// `rank 1 (E), rank 3 (N)`: the members a channel carries, for errors.
pub(crate) fn names(members: &[Member<'_>]) -> String {
    members
        .iter()
        .map(|m| m.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What every channel's setup is given beside its members.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Setup<'w> {
    /// The job.
    pub world: &'w World,
    /// How long setup may wait for the peers.
    pub timeout: Duration,
}

/// Where one member's messages travel in the channel set up for it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Placed {
    /// Its send's number among the channel's messages.
    pub send: Option<usize>,
    /// Its receive's number among the channel's messages.
    pub recv: Option<usize>,
    /// Which sides travel in place.
    pub in_place: Sides,
}

/// A channel set up for its members.
#[derive(Debug)]
pub(crate) struct Built {
    /// The channel.
    pub channel: Box<dyn Channel>,
    /// Per member, in the order the members were given.
    pub placed: Vec<Placed>,
    /// What its plan says of itself (RDMA's scheduled writes).
    #[cfg_attr(not(feature = "rdma"), allow(dead_code))]
    pub summary: Option<String>,
}

/// How a neighbour is reached, decided once per neighbour at build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locality {
    /// This rank is its own neighbour (a periodic axis of one process): the
    /// halo is a copy within the rank.
    SelfCopy,
    /// Shared memory: the neighbour runs on this node.
    Shm,
    /// RDMA writes: the neighbour runs on another node (or RDMA was asked for).
    Rdma,
    /// TCP: the neighbour runs on another node and the two cannot both use
    /// RDMA (or TCP was asked for).
    Tcp,
}

impl Locality {
    /// `local`, `shm`, `rdma` or `tcp`.
    pub fn name(self) -> &'static str {
        match self {
            Locality::SelfCopy => "local",
            Locality::Shm => "shm",
            Locality::Rdma => "rdma",
            Locality::Tcp => "tcp",
        }
    }
}

/// One channel of a halo exchange, carrying the messages of the neighbours
/// whose locality chose it, numbered `0..` in the exchange's order. Each
/// implementation wraps its own errors with the neighbours concerned.
pub(crate) trait Channel: std::fmt::Debug + Send {
    /// Which locality it serves.
    fn locality(&self) -> Locality;

    /// Message `msg`'s send buffer, to pack into before `start`.
    fn send_buf(&mut self, msg: usize) -> Result<&mut [u8]>;

    /// Message `msg`'s receive buffer, to unpack after completion.
    fn recv_buf(&self, msg: usize) -> Result<&[u8]>;

    /// From the next start on, carries only the first `bytes` of message
    /// `msg`'s send buffer (at most its length, checked by the caller; the
    /// receiver expects as many). A channel that cannot shorten a message
    /// carries it whole: the default (RDMA shortens its scheduled writes;
    /// a message read in place there is cut in staged starts only).
    fn carry_send(&mut self, msg: usize, bytes: usize) -> Result<()> {
        let _ = (msg, bytes);
        Ok(())
    }

    /// From the next start on, expects only the first `bytes` of message
    /// `msg`'s receive, as its sender carries.
    fn carry_recv(&mut self, msg: usize, bytes: usize) -> Result<()> {
        let _ = (msg, bytes);
        Ok(())
    }

    /// Told that the caller has read every receive buffer of the
    /// iteration just completed, so that their memory may take the next
    /// iteration's data before this rank starts it. The default ignores
    /// it.
    fn receives_read(&mut self) -> Result<()> {
        Ok(())
    }

    /// Told that the caller packs every send it carries before each start
    /// (the halo exchanges do), so that a send buffer need not keep its
    /// bytes from one iteration to the next and may be where the message
    /// lands. The default ignores it.
    fn fill_sends_each_start(&mut self) {}

    /// From the next start on, marks every message with `shape`, what part
    /// of the exchange a start moves ([`start_shape`]); a channel between
    /// ranks (shared memory, TCP, RDMA) fails a receive of another shape.
    /// The default does nothing: within a rank both ends are one start.
    fn set_shape(&mut self, shape: u8) -> Result<()> {
        let _ = shape;
        Ok(())
    }

    /// From the next start on, messages that travel in place (the
    /// caller's arrays, over RDMA) read and land in `memory`: a lent set,
    /// or, staged, the channel's own buffers, which the caller packs
    /// through [`send_buf`](Self::send_buf) and unpacks from
    /// [`recv_buf`](Self::recv_buf) as for any packed message. The
    /// default does nothing: only RDMA moves messages in place.
    fn set_memory(&mut self, memory: StartMemory) -> Result<()> {
        let _ = memory;
        Ok(())
    }

    /// Starts an iteration; never blocks.
    fn start(&mut self) -> Result<()>;

    /// One non-blocking pass: true once the iteration is complete.
    /// Allocates nothing unless it fails.
    fn test(&mut self) -> Result<bool>;

    /// What is outstanding, for a timeout.
    fn outstanding(&self) -> String;

    /// For a channel that can block (shared memory: a futex its peers
    /// ring): a pass, then, if nothing moved, a sleep until a peer signals
    /// or `until`; whether the iteration is complete. `None` for a channel
    /// that cannot block, whose caller keeps polling.
    fn park(&mut self, until: std::time::Instant) -> Option<Result<bool>> {
        let _ = until;
        None
    }

    /// The memory it lends for messages in place (shared memory's sets).
    fn lent_mut(&mut self) -> Option<Result<&mut [u8]>> {
        None
    }

    /// Whether message `msg` is received by reading the sender's memory in
    /// place (shared memory's read path).
    fn received_in_place(&self, msg: usize) -> bool {
        let _ = msg;
        false
    }

    /// The lent set the next `start` exchanges.
    fn use_set(&mut self, set: usize) {
        let _ = set;
    }

    /// RDMA queue pairs it holds (none but on RDMA).
    fn queue_pairs(&self) -> usize {
        0
    }

    /// Per peer, the shared-memory thresholds its messages were given
    /// paths by, and where they were measured (none but on shared memory).
    fn calibrations(&self) -> &[sode_shm::PeerCalibration] {
        &[]
    }
}

#[cfg(test)]
mod fabric_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn one_pass_finds_a_fabric_on_two_nodes_as_every_pair_would(
            ranks in proptest::collection::vec((0u8..4, 0u8..3), 0..40),
        ) {
            // Fabric 0 stands for a rank without a device.
            let fabrics: Vec<String> = ranks
                .iter()
                .map(|&(_, f)| if f == 0 { String::new() } else { format!("f{f}") })
                .collect();
            let node = |r: usize| ranks[r].0;
            let pairs = (0..ranks.len()).any(|a| {
                (a + 1..ranks.len()).any(|b| node(a) != node(b) && same_fabric(&fabrics, a, b))
            });
            prop_assert_eq!(fabric_spans_nodes(&fabrics, node), pairs);
        }
    }
}
