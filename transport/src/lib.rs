//! # sode-transport
//!
//! The inter-node transport of sode: RDMA writes over reliable-connected
//! queue pairs, through `sideway` (libibverbs loaded at run time).
//!
//! - [`Device`]: device, port and GID selection (`SODE_DEVICE`, `SODE_PORT`,
//!   `SODE_GID_INDEX`), with its [`Capabilities`] probed up front and clear
//!   errors for no device, no active port, no usable GID or a memlock limit
//!   too low.
//! - [`World`]: the bootstrap. Rank and size come from the launcher
//!   (`SODE_RANK`/`SODE_SIZE`, Slurm, Open MPI or PMI), the ranks meet at
//!   `SODE_ROOT=host:port`, then neighbours connect directly so keys travel
//!   only between the two ranks concerned. `sode-run -n N PROGRAM` starts N
//!   ranks on this machine.
//! - [`PersistentWrites`]: a plan of RDMA writes over E queue pairs (engines)
//!   per peer, whose work-request chains are built once; each
//!   [`start`](PersistentWrites::start) posts every engine's chain with one
//!   call, the last write of each chain carries an immediate, and
//!   [`wait`](PersistentWrites::wait) drains completions until a deadline.
//!   Receivers grant writers a credit per iteration, so windows are never
//!   overwritten before they are read and no global barrier is needed.
//!
//! ## Quick start
//!
//! ```no_run
//! use std::time::Duration;
//! use sode_transport::{Device, DeviceSelector, ExchangeBuilder, World, Write, WindowId};
//!
//! # fn main() -> Result<(), sode_transport::TransportError> {
//! // Started by `sode-run -n 2 ...` (or srun, mpirun).
//! let mut world = World::init(Duration::from_secs(30))?;
//! let dev = Device::open(&DeviceSelector::from_env()?)?;
//! let peer = 1 - world.rank();
//! let mut b = ExchangeBuilder::new(&dev).engines(2);
//! let src = b.buffer(1 << 20)?;
//! let win = b.window(1 << 20, &[peer])?; // only `peer` gets its rkey
//! for half in 0..2 {
//!     let len = 1 << 19;
//!     b.write(Write { peer, engine: half, src, src_offset: half * len, window: WindowId(0), dst_offset: half * len, len });
//! }
//! let mut x = b.build(&mut world, Duration::from_secs(30))?; // collective
//! for i in 0..100u8 {
//!     x.buffer_mut(src)?.fill(i);
//!     x.start()?;
//!     x.wait_for(Duration::from_secs(10))?;
//!     assert!(x.window(win)?.iter().all(|&b| b == i));
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod bootstrap;
mod device;
mod error;
mod exchange;
pub mod launch;
mod verbs;

pub use bootstrap::{LaunchInfo, NodeId, PeerLink, World};
pub use device::{Capabilities, Device, DeviceSelector};
pub use error::{Result, TransportError};
pub use exchange::{
    calibrate, writes_from_plan, BufferId, Calibration, CqLayout, ExchangeBuilder, ExchangeStats,
    PersistentWrites, PostMode, WindowId, Write, MAX_WRITE,
};
