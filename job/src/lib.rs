//! # sode-job
//!
//! The bottom layer of sode: who the ranks of a job are and how they first
//! talk, before any channel exists. Nothing else in sode reads a launcher's
//! variables.
//!
//! - [`LaunchInfo`]: rank, size, local rank, job id and rendezvous, from
//!   `sode-run`, Slurm, Open MPI or PMI variables (one table of launchers).
//! - [`OutOfBand`]: the bootstrap behind one trait, an allgather plus
//!   point-to-point [`PeerLink`]s for setup messages meant for one peer;
//!   [`TcpRendezvous`] (ranks meet at `SODE_ROOT`) is one implementation,
//!   [`ExternalOob`] (the allgather of a runtime the program already runs,
//!   such as an MPI communicator) another.
//! - [`World`]: the job as the channels see it (ranks, nodes, the agreed job
//!   id, barriers, setup links).
//! - Health: heartbeats between neighbours in a tree of the ranks; a rank
//!   whose link closes without a goodbye or whose node stops answering is
//!   declared dead by its tree neighbours, and the verdict floods the tree;
//!   silence is reported, fatal only past `SODE_HEALTH_TIMEOUT`.
//! - [`launcher`]: `sode-run`'s engine, and [`launcher::main_or_relaunch`]
//!   for programs that start their own ranks.
//! - [`Backoff`] and [`Lifecycle`]: the one way every channel waits, and the
//!   one lifecycle every persistent exchange keeps.
//! - [`diag`]: diagnostics through `tracing`, filtered by `SODE_LOG`.
//!
//! ## Quick start
//!
//! ```no_run
//! use std::time::Duration;
//! use sode_job::World;
//!
//! # fn main() -> Result<(), sode_job::JobError> {
//! // Started by `sode-run -n 2 ...` (or srun, mpirun with SODE_ROOT set).
//! let world = World::init(Duration::from_secs(30))?;
//! let peer = 1 - world.rank();
//! let mut links = world.connect_peers(&[peer].into(), Duration::from_secs(30))?;
//! let link = links.get_mut(&peer).expect("connected");
//! link.send(&format!("hello from {}", world.rank()))?;
//! let _hello: String = link.recv(std::time::Instant::now() + Duration::from_secs(30))?;
//! world.barrier(Duration::from_secs(30))?;
//! # Ok(()) }
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![warn(clippy::missing_errors_doc)]

mod auth;
mod backoff;
mod cpus;
pub mod diag;
mod dial;
mod error;
mod external;
mod health;
mod held_ports;
mod launch;
pub mod launcher;
mod lifecycle;
mod long_wait;
mod memo;
mod nets;
mod node;
mod oob;
pub mod pmi;
pub mod pmix;
mod ports;
mod refusal;
mod relay;
mod routes;
mod settings;
mod splice;
mod streams;
#[allow(unsafe_code)]
mod sys;
mod tcp;
mod tcp_addr;
mod timeout;
mod tree;
mod wire;
mod world;

pub use auth::{Secret, HANDSHAKE_TIMEOUT, SECRET_VAR};
pub use backoff::{node_cores, Backoff, WaitPolicy, WAIT_VAR};
pub use error::{JobError, Result};
pub use external::{AllgatherFn, ExternalOob};
pub use health::{Failure, SetupGivenUp, HEALTH_TIMEOUT_VAR, SILENCE_REPORTED};
pub use launch::{free_port, launched, sanitise_job_id, LaunchInfo, JOB_ID_VAR, ROOT_VAR};
pub use lifecycle::{Lifecycle, StateError};
pub use long_wait::LongWait;
pub use node::NodeId;
pub use oob::{decode, encode, Combine, OutOfBand, PeerChannel, PeerLink, RankBlock, Stepped};
pub use ports::TCP_PORTS_VAR;
pub use routes::{Routes, GROUPS_VAR};
pub use sys::at_exit::run_at_exit;
pub use tcp::TcpRendezvous;
pub use tcp_addr::TCP_ADDR_VAR;
pub use timeout::{
    abandon_when, default_wait_timeout, wait_warning, AbandonGuard, Deadline, NO_DEADLINE,
    STOPPED_GAP, TIMEOUT_VAR, WAIT_WARN_DEFAULT, WAIT_WARN_VAR,
};
pub use world::{Spread, World};
