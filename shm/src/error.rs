//! The one error type of sode-shm.

use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong in the intra-node channel. Each variant names
/// the operation, the peer or file involved, and what to do where that is
/// known.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShmError {
    /// A setting from the environment or the builder is unusable.
    #[error("invalid setting {name}={value:?}: {why}")]
    InvalidSetting {
        /// The variable or option.
        name: String,
        /// The value given.
        value: String,
        /// What is wrong and what is expected.
        why: String,
    },
    /// The neighbour list is not a valid exchange.
    #[error("invalid neighbour list: {why}")]
    InvalidNeighbours {
        /// What is wrong.
        why: String,
    },
    /// Creating this process's segment failed.
    #[error("cannot create shared-memory segment {path}{hint}")]
    CreateSegment {
        /// The segment's locator file.
        path: PathBuf,
        /// The system error.
        source: std::io::Error,
        /// What to do about it (may be empty).
        hint: String,
    },
    /// A segment of the same name belongs to a live process: two jobs share a
    /// job id.
    #[error("segment {path} already belongs to live process {pid}: two jobs use the same job id; set SODE_JOB_ID to something unique")]
    SegmentCollision {
        /// The segment's locator file.
        path: PathBuf,
        /// Its owner.
        pid: u64,
    },
    /// A segment, its locator or the job's segment directory is not what
    /// this job made: another user's, a symlink, the wrong type, mode or
    /// size, or memory that could be resized under a mapping.
    #[error("{path}: {why}; refusing to use it")]
    UnsafeSegment {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The kernel refused to open a peer's segment through `/proc`.
    #[error("the kernel refused to open the segment of peer rank {peer} through /proc/{pid}/fd: a process that is not dumpable (it runs a binary its user may not read, gained privileges, or called prctl(PR_SET_DUMPABLE, 0) after sode started) lets only peers with CAP_SYS_PTRACE open its files; make the program readable by its user (chmod u+r), or set SODE_TRANSPORT=tcp")]
    PeerClosed {
        /// The peer's rank.
        peer: usize,
        /// Its process.
        pid: i32,
        /// The system error.
        source: std::io::Error,
    },
    /// Opening or mapping a peer's segment failed.
    #[error("cannot map the segment of peer rank {peer} ({path})")]
    MapPeer {
        /// The peer's rank.
        peer: usize,
        /// The segment's locator file.
        path: PathBuf,
        /// The system error.
        source: std::io::Error,
    },
    /// A peer did not reach a setup step in time.
    #[error("peer rank {peer} did not {step} within {waited:?}: is it running, with the same job id and a matching neighbour list?")]
    SetupTimeout {
        /// The peer's rank.
        peer: usize,
        /// The step it did not reach.
        step: &'static str,
        /// How long we waited.
        waited: Duration,
    },
    /// Two sides disagree about a message.
    #[error("peer rank {peer}, tag {tag}: {why}")]
    Mismatch {
        /// The peer's rank.
        peer: usize,
        /// The message tag.
        tag: u32,
        /// The disagreement.
        why: String,
    },
    /// A peer wrote something into shared memory that breaks the protocol
    /// (out-of-bounds offset, unknown record, wrong sequence number). Nothing
    /// was read or written outside our buffers.
    #[error("protocol violation by peer rank {peer}: {what}")]
    Protocol {
        /// The peer's rank.
        peer: usize,
        /// What was wrong.
        what: String,
    },
    /// A peer process exited.
    #[error("peer rank {peer} (pid {pid}) died {during}")]
    PeerDied {
        /// The peer's rank.
        peer: usize,
        /// Its process id.
        pid: i32,
        /// What we were doing.
        during: String,
    },
    /// A peer freed its side of the exchange while this process still
    /// waited for it.
    #[error("peer rank {peer} freed its side of the exchange {during}: free an exchange on every rank after the same iteration")]
    PeerLeft {
        /// The peer's rank.
        peer: usize,
        /// What we were doing.
        during: String,
    },
    /// `wait` reached its deadline before the exchange completed.
    #[error("exchange {exchange} iteration {iteration} not complete at its deadline; still waiting for: {pending}")]
    Timeout {
        /// The exchange's name.
        exchange: String,
        /// The iteration (1-based).
        iteration: u64,
        /// What is outstanding, by peer and tag.
        pending: String,
    },
    /// `start` and `wait` were called out of order, a buffer was touched
    /// while the exchange was in flight, or an earlier error failed it.
    #[error(transparent)]
    State(#[from] sode_job::StateError),
    /// An index passed to an accessor does not name a neighbour with that
    /// buffer.
    #[error("no {what} buffer for neighbour index {index} (the exchange has {count} neighbours)")]
    NoSuchBuffer {
        /// "send" or "receive".
        what: &'static str,
        /// The index given.
        index: usize,
        /// How many neighbours there are.
        count: usize,
    },
    /// More bytes to carry than a message holds.
    #[error("neighbour index {index}: {asked} bytes to carry, but its {what} holds {len}")]
    CarryTooLong {
        /// "send" or "receive".
        what: &'static str,
        /// The neighbour's index.
        index: usize,
        /// The bytes asked for.
        asked: usize,
        /// The message's bytes.
        len: usize,
    },
    /// A call that needs lent sets, or a buffer of a message that travels
    /// in place (it has none: its bytes are in the lent set).
    #[error("{op}: {why}")]
    InPlace {
        /// The call.
        op: &'static str,
        /// What was wrong, and what to do.
        why: String,
    },
    /// hwloc could not load the topology or bind.
    #[error("topology: {what}")]
    Topology {
        /// What failed.
        what: String,
    },
    /// Another system call failed.
    #[error("{what}")]
    Io {
        /// The operation.
        what: String,
        /// The system error.
        source: std::io::Error,
    },
}

/// Result alias for sode-shm.
pub type Result<T, E = ShmError> = std::result::Result<T, E>;
