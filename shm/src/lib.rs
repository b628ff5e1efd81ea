//! # sode-shm
//!
//! The intra-node channel of sode. Processes of one node exchange halos
//! through a per-process shared segment (a memfd sealed against resizing,
//! found through a 0600 locator file under `/dev/shm` that is removed as
//! soon as every peer has mapped it) over three data paths,
//! chosen per message by the receiver:
//!
//! - **eager**: copied through a lock-free single-producer single-consumer
//!   ring in the receiver's segment (two copies, no handshake; large
//!   messages are pipelined in fragments);
//! - **get**: the sender posts a receive_request naming its buffer, which
//!   lives in its own segment (mapped by the receiver since build); the
//!   receiver copies straight out of it in chunks and answers receive_done
//!   (one copy, the MPICH-PM/CLUMP get protocol, with no system call, no
//!   page pinning and no ptrace permission: cross-memory attach is not
//!   used);
//! - **window**: the receive buffer lives in the receiver's segment and the
//!   sender copies into it once the receiver has granted a credit (one copy,
//!   no system call).
//!
//! The crossover sizes are measured per peer at build, from where the peer
//! runs ([`Thresholds`], [`PeerCalibration`]), the machine's capabilities
//! probed ([`ShmCaps`]), and a peer
//! that dies is reported by [`Exchange::wait`] within its deadline.
//!
//! ## Quick start
//!
//! ```no_run
//! use std::time::Duration;
//! use sode_shm::{Context, Peer};
//!
//! # fn main() -> Result<(), sode_shm::ShmError> {
//! // SODE_JOB_ID and SODE_RANK come from the launcher.
//! let mut ctx = Context::from_env()?;
//! let right = (ctx.rank() + 1) % 2;
//! let mut halo = ctx
//!     .exchange()
//!     .neighbour(Peer::new(right).send(4096, 0).recv(4096, 0))
//!     .build()?; // collective with rank `right`
//! for _ in 0..100 {
//!     halo.send_buf_mut(0)?.fill(7);
//!     halo.start()?;
//!     halo.wait_for(Duration::from_secs(10))?;
//!     assert!(halo.recv_buf(0)?.iter().all(|&b| b == 7));
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]
#![warn(clippy::missing_errors_doc)]
#![deny(unsafe_code)]

mod buffer;
mod caps;
mod context;
mod error;
mod exchange;
mod layout;
mod placement;
mod probe_file;
mod ring;
mod segment;
#[allow(unsafe_code)]
pub mod sys;
mod thresholds;
#[cfg(feature = "hwloc")]
pub mod topology;

pub use caps::ShmCaps;
pub use context::{Context, PeerCalibration, ProbeCache};
pub use error::{Result, ShmError};
pub use exchange::{
    Exchange, ExchangeReport, MessageReport, Path, PathPolicy, Peer, ReadMin, Run,
    ShmExchangeBuilder,
};
pub use thresholds::{Thresholds, READ_MIN_FALLBACK};
