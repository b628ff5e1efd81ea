//! The persistent exchange: built once from (peer, send, receive) triples,
//! then `start()` / `wait(deadline)` every iteration.

mod build;
mod connect;
mod run;

use std::collections::{HashMap, VecDeque};

use crate::buffer::PrivateBuf;
use crate::ring::{Record, RingRx, RingTx};
use crate::segment::OwnSegment;
use crate::sys::process::{Process, Watch};
use sode_job::Lifecycle;
use std::time::{Duration, Instant};

/// How often a waiting exchange checks that its peers are alive.
const LIVENESS_PERIOD: Duration = Duration::from_millis(2);

/// Watching the peers' processes, a poll every [`LIVENESS_PERIOD`] at most.
#[derive(Debug)]
struct Liveness {
    watch: Watch,
    next_check: Instant,
    /// A peer with work outstanding was seen dead: one more full pass
    /// first (it may have finished its part just before exiting).
    suspect: bool,
}

impl Liveness {
    fn new(watch: Watch) -> Liveness {
        Liveness {
            watch,
            next_check: Instant::now(),
            suspect: false,
        }
    }
}
use crate::sys::shared::{CheckedRuns, SharedMap};
use crate::thresholds::Thresholds;

pub use build::{ReadMin, ShmExchangeBuilder};

/// How a message travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Path {
    /// Copied into the control ring by the sender and out by the receiver
    /// (two copies, no handshake before sending; pipelined in fragments for
    /// large messages).
    Eager,
    /// The sender posts a receive_request naming its buffer, which lies in
    /// its segment (mapped by the receiver at build); the receiver copies
    /// straight out of it and answers receive_done (one copy, no system
    /// call).
    Get,
    /// The receiver's buffer lives in its segment, mapped by the sender,
    /// which copies its data straight in once the receiver has granted a
    /// credit (one copy, no system call). Windows up to 128 KiB have two
    /// slots, and the receiver grants iteration `n + 1` when it starts `n`,
    /// so a sender rarely waits for the credit.
    Window,
    /// In place: both sides keep their fields in lent sets of their
    /// segments ([`ShmExchangeBuilder::lend`]). The sender posts a
    /// receive_request naming the set it exchanges; the receiver copies
    /// the sender's runs straight into its own runs and answers
    /// receive_done (one copy, and no pack or unpack around it).
    Read,
}

impl Path {
    /// Lower-case name.
    pub fn name(&self) -> &'static str {
        match self {
            Path::Eager => "eager",
            Path::Get => "get",
            Path::Window => "window",
            Path::Read => "in place",
        }
    }

    pub(crate) fn code(&self) -> u64 {
        match self {
            Path::Eager => 1,
            Path::Get => 2,
            Path::Window => 3,
            Path::Read => 4,
        }
    }

    pub(crate) fn from_code(c: u64) -> Option<Path> {
        Some(match c {
            1 => Path::Eager,
            2 => Path::Get,
            3 => Path::Window,
            4 => Path::Read,
            _ => return None,
        })
    }
}

impl std::str::FromStr for Path {
    type Err = String;
    fn from_str(s: &str) -> Result<Path, String> {
        match s {
            "eager" => Ok(Path::Eager),
            "get" => Ok(Path::Get),
            "window" => Ok(Path::Window),
            other => Err(format!("unknown path {other:?} (eager, get, window)")),
        }
    }
}

/// How the receiver picks a message's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PathPolicy {
    /// By size against the measured [`Thresholds`]: eager up to `eager_max`,
    /// then window puts; with private receive buffers, eager below `get_min`
    /// and get from there.
    #[default]
    Auto,
    /// Always this path (get falls back to eager when cross-memory attach is
    /// denied).
    Force(Path),
}

/// One message of a [`Peer`], each iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MessageSpec {
    pub(crate) len: usize,
    pub(crate) tag: u32,
}

/// `len` bytes at `offset` of a lent set: a run of a message read or
/// received in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Where the run starts in the set.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

/// One neighbour of an exchange: a peer rank, what we send it, and what we
/// receive from it. A message sent with tag `t` lands in the peer's receive
/// with tag `t` from us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub(crate) peer: usize,
    pub(crate) send: Option<MessageSpec>,
    pub(crate) recv: Option<MessageSpec>,
    pub(crate) misalign: usize,
    /// The send, read in place by the peer from these runs of our set.
    pub(crate) send_runs: Option<Vec<Run>>,
    /// The receive, copied in place by us into these runs of our set.
    pub(crate) recv_runs: Option<Vec<Run>>,
}

impl Peer {
    /// A neighbour with nothing to send or receive yet.
    pub fn new(peer: usize) -> Peer {
        Peer {
            peer,
            send: None,
            recv: None,
            misalign: 0,
            send_runs: None,
            recv_runs: None,
        }
    }

    /// The send is read in place by the peer, from `runs` (in stream
    /// order) of the set this process exchanges ([`Exchange::start_set`]);
    /// the peer must receive it in place too. Needs
    /// [`ShmExchangeBuilder::lend`].
    pub fn send_in_place(mut self, runs: Vec<Run>) -> Peer {
        self.send_runs = Some(runs);
        self
    }

    /// The receive lands in place, in `runs` (in stream order) of the set
    /// this process exchanges; the peer must send it in place too.
    pub fn recv_in_place(mut self, runs: Vec<Run>) -> Peer {
        self.recv_runs = Some(runs);
        self
    }

    /// Sends `len` bytes with `tag` every iteration.
    pub fn send(mut self, len: usize, tag: u32) -> Peer {
        self.send = Some(MessageSpec { len, tag });
        self
    }

    /// Receives `len` bytes with `tag` every iteration.
    pub fn recv(mut self, len: usize, tag: u32) -> Peer {
        self.recv = Some(MessageSpec { len, tag });
        self
    }

    /// Starts both buffers `bytes` (< 64) past a cache-line boundary.
    pub fn misaligned(mut self, bytes: usize) -> Peer {
        self.misalign = bytes;
        self
    }
}

/// One message as built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageReport {
    /// Index of the neighbour in the builder's list.
    pub neighbour: usize,
    /// The peer's rank.
    pub peer: usize,
    /// The tag.
    pub tag: u32,
    /// Bytes per iteration.
    pub len: usize,
    /// The path chosen (by the receiver).
    pub path: Path,
}

/// What `build` decided, for logs and tests.
#[derive(Debug, Clone)]
pub struct ExchangeReport {
    /// The exchange's name (also in its segment names).
    pub name: String,
    /// Messages this process sends.
    pub sends: Vec<MessageReport>,
    /// Messages this process receives.
    pub recvs: Vec<MessageReport>,
    /// The thresholds used for every peer, when they were set (by hand, in
    /// the builder or the context, or as a placeholder for a forced path);
    /// `None` when they were measured towards each peer
    /// ([`calibrations`](Self::calibrations)).
    pub thresholds: Option<Thresholds>,
    /// Per peer: the thresholds its messages to us were given paths by,
    /// and where they were measured.
    pub calibrations: Vec<crate::PeerCalibration>,
    /// Bytes of this process's segment.
    pub segment_bytes: u64,
    /// Whether the segment is pinned in memory.
    pub pinned: bool,
    /// Fallbacks and other decisions worth knowing (also printed once).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpState {
    Idle,
    Active,
    AwaitingDone,
    Done,
}

#[derive(Debug)]
struct PeerSegment {
    rank: usize,
    /// Its lent sets, if it lends any (checked at build).
    lent: Option<crate::layout::Lent>,
    pid: i32,
    process: std::sync::Arc<Process>,
    map: SharedMap,
    tx: RingTx,
    rx: RingRx,
    outbox: VecDeque<Record>,
    /// Something this peer may wait for happened since its doorbell was
    /// last checked (data, a record, a credit, ring space).
    notify: bool,
    /// Whether it may sleep on its doorbell, so that events must ring it.
    sleeps: bool,
}

/// A send buffer: bytes of this process's own segment, which the peers map
/// (the get path copies straight out of it).
#[derive(Debug, Clone, Copy)]
struct OwnRange {
    offset: u64,
    len: usize,
}

#[derive(Debug)]
struct SendOp {
    peer: usize,
    tag: u32,
    buf: OwnRange,
    path: Path,
    /// Window data offset and receive-entry offset in the peer's segment.
    window: Option<(u64, u64)>,
    state: OpState,
    /// Bytes each iteration carries: the first `carried` of `buf` (all of
    /// it unless the caller carries less, see `Exchange::carry`).
    carried: usize,
    sent: usize,
    pushed_any: bool,
    /// The iteration whose data the caller packed straight into the
    /// peer's window slot ([`Exchange::send_buf_mut`] with the credit
    /// already granted), so that the put has nothing left to copy.
    packed_in_window: Option<u64>,
    /// Its runs in our lent sets: read there in place, or gathered into
    /// `buf` at start on a packed path.
    runs: Option<CheckedRuns>,
}

impl SendOp {
    /// The bytes of its buffer each iteration carries.
    fn carried_range(&self) -> OwnRange {
        OwnRange {
            len: self.carried,
            ..self.buf
        }
    }
}

#[derive(Debug)]
enum Storage {
    Private(PrivateBuf),
    Window(u64),
    /// Copied straight into our lent set.
    InPlace,
}

#[derive(Debug)]
struct RecvOp {
    peer: usize,
    tag: u32,
    len: usize,
    path: Path,
    storage: Storage,
    entry: u64,
    state: OpState,
    /// Bytes each iteration carries (at most `len`, see `Exchange::carry`).
    carried: usize,
    received: usize,
    get_from: Option<u64>,
    /// Where the sender's buffer lies in its segment (from its send
    /// table): the only place a receive_request may name.
    their_buffer: u64,
    /// Received in place: what to copy from the sender's set into ours.
    pieces: Vec<Piece>,
    /// Its runs in our lent sets: copied into in place, or scattered into
    /// from the buffer once it has arrived on a packed path.
    runs: Option<CheckedRuns>,
}

/// A piece of a message received in place: `len` bytes from `from` in the
/// sender's set to `to` in ours (both checked at build against the sets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece {
    from: u64,
    to: u64,
    len: u64,
}

/// A persistent halo exchange with intra-node neighbours.
///
/// Every iteration: fill the send buffers ([`Exchange::send_buf_mut`]), call
/// [`Exchange::start`], overlap computation, call [`Exchange::wait`], read
/// the receive buffers ([`Exchange::recv_buf`]). A receive buffer stays
/// valid until the next `start`, which hands it back to the sender.
#[derive(Debug)]
pub struct Exchange {
    name: String,
    own: OwnSegment,
    peers: Vec<PeerSegment>,
    sends: Vec<SendOp>,
    recvs: Vec<RecvOp>,
    send_of: Vec<Option<usize>>,
    recv_of: Vec<Option<usize>>,
    recv_index: HashMap<(usize, u32), usize>,
    send_index: HashMap<(usize, u32), usize>,
    iteration: u64,
    lifecycle: Lifecycle,
    liveness: Liveness,
    get_chunk: usize,
    /// Whether waits may sleep on our doorbell (peers ring it only then).
    parks: bool,
    /// Our lent sets, and the one this iteration exchanges.
    lent: Option<crate::layout::Lent>,
    set: u64,
    /// What every message of this iteration carries and must come with
    /// ([`Exchange::set_shape`]).
    shape: u8,
    /// The caller writes every send buffer it sends before each start
    /// ([`Exchange::fill_sends_each_start`]).
    fills_each_start: bool,
    /// Sends packed straight into their receiver's window, so far.
    packed_in_window: u64,
    /// The caller has read this iteration's receive buffers and released
    /// them ([`Exchange::receives_read`]); until the next start they are
    /// the next iteration's.
    receives_released: bool,
    report: ExchangeReport,
}

impl Drop for Exchange {
    fn drop(&mut self) {
        self.leave();
    }
}
