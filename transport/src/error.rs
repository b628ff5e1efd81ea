//! The one error type of sode-transport.

use std::time::Duration;

/// Everything that can go wrong in the RDMA transport. Each variant names the
/// operation, the device, peer or command involved, and what to do where that
/// is known.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// A setting from the environment or a builder is unusable.
    #[error("invalid setting {name}={value:?}: {why}")]
    InvalidSetting {
        /// The variable or option.
        name: String,
        /// The value given.
        value: String,
        /// What is wrong and what is expected.
        why: String,
    },
    /// libibverbs itself could not be loaded.
    #[error("cannot load libibverbs.so.1: install rdma-core's libibverbs1 and a provider package (Debian: apt-get install libibverbs1 ibverbs-providers)")]
    VerbsLibraryMissing {
        /// The system error.
        source: std::io::Error,
    },
    /// No RDMA device is present, or none matches the selection.
    #[error("no RDMA device{wanted}: found {found}; {hint}")]
    NoDevice {
        /// What was asked for (e.g. ` named "mlx5_0"`), or empty.
        wanted: String,
        /// The devices seen, or "none".
        found: String,
        /// What to do.
        hint: String,
    },
    /// The chosen device has no port in the ACTIVE state.
    #[error("RDMA device {device} has no active port ({ports}): bring the link up (for SoftRoCE: ip link set <netdev> up)")]
    NoActivePort {
        /// The device.
        device: String,
        /// Each port and its state.
        ports: String,
    },
    /// No usable GID on the chosen port.
    #[error("RDMA device {device} port {port}: {why}")]
    NoGid {
        /// The device.
        device: String,
        /// The port.
        port: u8,
        /// What is missing and what to do.
        why: String,
    },
    /// A verbs call failed.
    #[error("{op} on {device}")]
    Verbs {
        /// The verbs operation, with its arguments.
        op: String,
        /// The device.
        device: String,
        /// The error libibverbs reported.
        source: std::io::Error,
    },
    /// The device cannot do what the plan needs.
    #[error("RDMA device {device} cannot run this plan: {what} needs {needed} but the device allows {limit}")]
    Capability {
        /// The device.
        device: String,
        /// The capability (queue depth, SGEs, inline size, ...).
        what: String,
        /// What the plan needs.
        needed: u64,
        /// What the device offers.
        limit: u64,
    },
    /// Registering memory would exceed, or did exceed, the locked-memory limit.
    #[error("cannot register {needed} bytes of memory for RDMA: the locked-memory limit (RLIMIT_MEMLOCK) is {limit}; raise it (ulimit -l unlimited; memlock in /etc/security/limits.conf; LimitMEMLOCK=infinity for systemd units; --ulimit memlock=-1 for containers)")]
    MemlockTooLow {
        /// Bytes that would be locked in all.
        needed: u64,
        /// The soft limit, in bytes, as text ("65536 bytes").
        limit: String,
    },
    /// Allocating a buffer failed.
    #[error("cannot allocate a {len}-byte buffer")]
    Allocate {
        /// Its length.
        len: usize,
        /// The system error.
        source: std::io::Error,
    },
    /// Exchanging connection details with the other ranks failed.
    #[error("setting up RDMA with {whom}: {step}")]
    Setup {
        /// The step (connect, send the queue-pair numbers, ...).
        step: &'static str,
        /// The peers concerned.
        whom: String,
        /// What failed in the job layer.
        source: Box<sode_job::JobError>,
    },
    /// A peer broke the exchange's protocol (a credit or data out of step,
    /// or setup details that do not fit).
    #[error("rank {peer} broke the exchange protocol: {why}")]
    Protocol {
        /// The peer.
        peer: usize,
        /// What it did.
        why: String,
    },
    /// The device reported a completion this exchange never asked for.
    #[error("RDMA device {device}: {why}")]
    UnexpectedCompletion {
        /// The device.
        device: String,
        /// What arrived.
        why: String,
    },
    /// A peer named in a plan is not part of the job or not connected.
    #[error("unknown peer rank {peer}: {why}")]
    UnknownPeer {
        /// The rank.
        peer: usize,
        /// Why it cannot be used.
        why: String,
    },
    /// A window cannot be made as asked.
    #[error("invalid window #{window}: {why}")]
    InvalidWindow {
        /// The index it would have had.
        window: usize,
        /// What is wrong.
        why: String,
    },
    /// A plan command is invalid.
    #[error("invalid write command #{command}: {why}")]
    InvalidCommand {
        /// Its index in the plan.
        command: usize,
        /// What is wrong.
        why: String,
    },
    /// A method was called in the wrong state, or after a failure.
    #[error(transparent)]
    State(#[from] sode_job::StateError),
    /// A buffer or window that was never made.
    #[error("{op}: {what} {index} does not exist ({count} made)")]
    NoSuch {
        /// The method.
        op: &'static str,
        /// `buffer` or `window`.
        what: &'static str,
        /// The index asked for.
        index: usize,
        /// How many exist.
        count: usize,
    },
    /// A buffer of the caller's memory was asked for as a slice.
    #[error("{op}: buffer {buffer} is memory the caller lent (RdmaExchangeBuilder::user_buffer): read and write it through the caller's own pointer")]
    LentMemory {
        /// The method.
        op: &'static str,
        /// The buffer.
        buffer: usize,
    },
    /// A work request completed with an error.
    #[error("{what} to rank {peer} on engine {engine} ({bytes} bytes) failed: {status} (verbs status {status_code}, vendor error {vendor_err:#x}){hint}")]
    Completion {
        /// The request: `RDMA write command #3`, or `credit`.
        what: String,
        /// The command's index in the plan, for writes.
        command: Option<usize>,
        /// The destination rank.
        peer: usize,
        /// The engine (queue pair index towards that peer).
        engine: usize,
        /// The command's length.
        bytes: usize,
        /// `ibv_wc_status_str` of the status.
        status: String,
        /// The raw `ibv_wc_status`.
        status_code: u32,
        /// The provider's vendor error.
        vendor_err: u32,
        /// What the status usually means.
        hint: String,
    },
    /// A peer's bootstrap connection closed during an exchange: it freed
    /// the exchange, exited or died.
    #[error("peer rank {peer} closed its connection during the exchange (it freed the exchange, exited or died); outstanding: {outstanding}")]
    PeerDied {
        /// The rank.
        peer: usize,
        /// What was still outstanding when that was noticed.
        outstanding: String,
    },
    /// `wait` reached its deadline.
    #[error("exchange not complete after {waited:?}: {outstanding}")]
    Timeout {
        /// How long `wait` waited.
        waited: Duration,
        /// Everything still outstanding, per peer.
        outstanding: String,
    },
}

/// `Result` with [`TransportError`].
pub type Result<T, E = TransportError> = std::result::Result<T, E>;
