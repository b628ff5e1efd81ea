//! # sode — the halo exchange of stencil codes
//!
//! A stencil code describes its halo exchange once, as a Cartesian
//! [`Decomposition`]; [`HaloExchange::builder`] decides once per neighbour
//! how to reach it (shared memory through `sode-shm` on the same node, RDMA
//! through `sode-transport` on another, the RDMA writes placed on engines by
//! `sode-scheduler`), and the exchange then runs every iteration with
//! [`HaloExchange::start`] and [`HaloExchange::wait`] (MPI_Startall /
//! MPI_Waitall), progressing every channel in one loop. Errors from every
//! layer arrive as one [`HaloError`] naming the neighbours concerned, with
//! the layer's own error as its source.
//!
//! Built without the default `rdma` feature, sode is shared memory only and
//! needs neither libibverbs nor cmake or clang.
//!
//! ## Quick start
//!
//! ```no_run
//! use std::time::Duration;
//! use sode::{Decomposition, HaloExchange, Stencil};
//! use sode_job::World;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Started by `sode-run -n 4 ...`: a 2 x 2 process grid.
//! let world = World::init(Duration::from_secs(30))?;
//! let d = Decomposition::new(&[512, 512], &[2, 2], &[true, false], 1, Stencil::Full)?;
//! let mut halo = HaloExchange::builder(&world, &d).build()?; // collective
//! let cells: usize = halo.local_extent().iter().product();
//! let mut u = vec![0.0f64; cells];
//! for _ in 0..100 {
//!     halo.start(&[&u])?;
//!     halo.wait(Duration::from_secs(10), &mut [&mut u])?;
//!     // ... update the interior of u from its neighbours ...
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![warn(clippy::missing_errors_doc)]

mod alltoall;
mod bounded;
mod channel;
mod decomp;
mod distance;
mod error;
mod exchange;
#[cfg(feature = "rdma")]
mod fabric;
pub mod field;
mod field_exchange;
mod job_memo;
mod links;
#[cfg(feature = "rdma")]
mod model;
pub mod pattern;
#[cfg(feature = "rdma")]
pub mod plan;
mod reorder;
mod settings;
mod stats;
#[cfg(feature = "rdma")]
mod windows;
pub mod zero_copy;

pub use alltoall::{AllToAll, AllToAllBuilder};
pub use bounded::{BoundedExchange, BoundedExchangeBuilder, BOUND_VAR, FORBID_VAR};
pub use channel::{start_shape, Locality, Span, StartMemory, MAX_LENT_SETS, PROGRESS_VAR};
pub use decomp::{
    axes_name, copy_run, direction_tag, pack, stencil_offsets, unpack, Decomposition, Neighbour,
    Region, Stencil, PEER_TAG,
};
pub use error::{HaloError, Result};
pub use exchange::{HaloExchange, HaloExchangeBuilder};
pub use field_exchange::{Array, ArrayMut, Element, FieldExchange, FieldExchangeBuilder};
pub use links::{
    InPlace, Link, LinkExchange, LinkExchangeBuilder, LinkRuns, LocalCopy, Message, SharedSets,
    Sides,
};
pub use reorder::{reorder, Reordered};
pub use settings::{Model, SyncMode, Transport};
pub use sode_job::Deadline;
pub use sode_shm::{PeerCalibration, Run};
#[cfg(feature = "rdma")]
pub use sode_transport::UserMemory;
pub use stats::{ExchangeStats, NeighbourStats, TRACE_VAR};
