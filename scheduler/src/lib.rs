//! # sode-scheduler
//!
//! Pure scheduling for the RDMA puts of a halo exchange: given every put of
//! an exchange at once (a persistent or neighbourhood collective), decide
//! which RDMA engine posts which put, in which order, so that the whole
//! exchange ends soonest. No I/O, no clocks, no `unsafe`: a [`Plan`] is a
//! pure function of a [`Pattern`] (the puts and the [`Machine`]) and an
//! [`Algorithm`].
//!
//! It reproduces RSched (Hatanaka, Hori, Ishikawa: RoundRobin and BLbased on
//! the K computer's Tofu network) and goes beyond it: overhead-aware and
//! link-capacity-aware packing, simulator-guided placement with splitting,
//! an exact branch-and-bound solver, and `auto`. A deterministic flow-level
//! simulator ([`simulate()`]) and a [`lower_bound`] judge them all.
//!
//! ## Quick start
//! ```
//! use sode_scheduler::{patterns, plan, Algorithm, Machine};
//!
//! let pattern = patterns::scale_les3(872, patterns::DirectionSet::All8, Machine::K_COMPUTER)?;
//! let paper = plan(&pattern, Algorithm::BottomLeft(4))?;
//! let best = plan(&pattern, Algorithm::Auto)?;
//! paper.validate(&pattern)?;
//! best.validate(&pattern)?;
//! assert!(best.simulated_us <= paper.simulated_us);
//! assert!(best.simulated_us >= best.lower_bound_us - 1e-9);
//! # Ok::<(), sode_scheduler::SchedError>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(clippy::missing_errors_doc)]

mod algorithms;
mod bound;
mod error;
mod gantt;
mod instance;
mod machine;
mod pattern;
pub mod patterns;
pub mod placement;
mod plan;
mod simulate;
mod table;
pub mod topology;

pub use algorithms::{
    plan, Algorithm, AUTO_SIMULATED_CANDIDATES_MAX, EXACT_MAX_REQUESTS, QUADRATIC_MAX_PUTS,
};
pub use bound::{lower_bound, LowerBound};
pub use error::{Result, SchedError};
pub use gantt::gantt_svg;
pub use machine::Machine;
pub use pattern::{Pattern, Request};
pub use plan::{Command, Constraints, Plan};
pub use simulate::{simulate, Simulation};
pub use table::{table, Row, Table};
