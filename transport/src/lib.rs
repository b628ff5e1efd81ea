//! # sode-transport
//!
//! The inter-node transport of sode: RDMA writes over reliable-connected
//! queue pairs, through `sideway` (libibverbs loaded at run time).
//!
//! - [`Device`]: device, port and GID selection (`SODE_DEVICE`, `SODE_PORT`,
//!   `SODE_GID_INDEX`), with its [`DeviceCaps`] probed up front and clear
//!   errors for no device, no active port, no usable GID or a memlock limit
//!   too low.
//! - The job comes from `sode-job`'s [`World`](sode_job::World): queue-pair
//!   numbers and keys travel over its point-to-point setup links, so a
//!   window's key reaches only the ranks that write into it.
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
//! use sode_job::World;
//! use sode_transport::{Device, DeviceSelector, RdmaExchangeBuilder, Write, WindowId};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Started by `sode-run -n 2 ...` (or srun, mpirun).
//! let world = World::init(Duration::from_secs(30))?;
//! let dev = Device::open(&DeviceSelector::from_env()?)?;
//! let peer = 1 - world.rank();
//! let mut b = RdmaExchangeBuilder::new(&dev).engines(2);
//! let src = b.buffer(1 << 20)?;
//! let win = b.window(1 << 20, &[peer])?; // only `peer` gets its rkey
//! for half in 0..2 {
//!     let len = 1 << 19;
//!     b.write(Write { peer, engine: half, src, src_offset: half * len, window: WindowId(0), dst_offset: half * len, len });
//! }
//! let mut x = b.build(&world, Duration::from_secs(30))?; // collective
//! for i in 0..100u8 {
//!     x.buffer_mut(src)?.fill(i);
//!     x.start()?;
//!     x.wait_for(Duration::from_secs(10))?;
//!     assert!(x.window(win)?.iter().all(|&b| b == i));
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]
#![warn(clippy::missing_errors_doc)]
#![deny(unsafe_code)]

mod credit;
mod device;
mod error;
mod exchange;
#[allow(unsafe_code)]
mod verbs;

pub use credit::{Arrival, CreditBook, CreditEvent, ProtocolViolation};
pub use device::{Device, DeviceCaps, DeviceSelector};
pub use error::{Result, TransportError};
pub use exchange::{
    calibrate, BufferId, Calibration, CqLayout, ExchangeStats, PersistentWrites, PostMode,
    RdmaExchangeBuilder, Staged, StartMemory, Twin, WindowId, Write, MAX_LENT_SETS, MAX_WRITE,
};
pub use verbs::UserMemory;
