//! The settings every layer of an exchange shares: which channel, which
//! machine model the RDMA writes are scheduled for, and how the ranks keep
//! in step. A leaf module: the builders, the channels and the link
//! exchange all read it, and it reads none of them.

use sode_scheduler::Machine;

/// Which channel carries the messages between ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// Shared memory with ranks on this node; RDMA with ranks on other
    /// nodes where both nodes have a working RDMA device, TCP otherwise.
    #[default]
    Auto,
    /// Shared memory only (every neighbour must be on this node).
    Shm,
    /// RDMA with every other rank, on this node too.
    Rdma,
    /// TCP with every other rank, on this node too.
    Tcp,
}

impl Transport {
    /// The name `SODE_TRANSPORT` gives the transport whose discriminant is
    /// `t` (as a setup step carries it); "unknown" for none.
    pub(crate) fn name_of(t: u8) -> &'static str {
        match t {
            t if t == Transport::Auto as u8 => "auto",
            t if t == Transport::Shm as u8 => "shm",
            t if t == Transport::Rdma as u8 => "rdma",
            t if t == Transport::Tcp as u8 => "tcp",
            _ => "unknown",
        }
    }
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(Transport::Auto),
            "shm" => Ok(Transport::Shm),
            "rdma" => Ok(Transport::Rdma),
            "tcp" => Ok(Transport::Tcp),
            o => Err(format!("unknown transport {o:?} (auto, shm, rdma, tcp)")),
        }
    }
}

/// The machine model the RDMA writes are scheduled for.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Model {
    /// Measured on this device at build time (`sode_transport::calibrate`):
    /// per-command overhead, per-queue-pair and node bandwidth (the default).
    #[default]
    Calibrated,
    /// The K computer, as the RSched paper measured it.
    KComputer,
    /// Given.
    Given(Machine),
}

/// How the ranks of an exchange keep in step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// Pairwise: each neighbour grants the other a credit when its halo is
    /// free again; no global barrier (the default).
    #[default]
    Pairwise,
    /// The RSched paper's pseudo-collective mode: a barrier of the whole job
    /// at the start of `start` and at the end of `wait`, as well.
    PseudoCollective,
}

impl std::str::FromStr for SyncMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "pairwise" => Ok(SyncMode::Pairwise),
            "pseudo-collective" => Ok(SyncMode::PseudoCollective),
            o => Err(format!(
                "unknown synchronisation {o:?} (pairwise, pseudo-collective)"
            )),
        }
    }
}
