//! Network topologies and the all-to-all schedules of the Latin-square
//! fat-tree paper: the finite projective plane, the Latin-square fat-tree,
//! a conventional 2-level fat-tree, contention-free schedules, and the
//! route-level contention simulator that scores them.

mod alltoall;
mod contention;
mod fat_tree;
mod latin_square;
mod plane;

pub use alltoall::{PartialRule, Schedule, ScheduleKind};
pub use contention::{throughput_ratio, Route};
pub use fat_tree::FatTree;
pub use latin_square::{LatinSquareFatTree, Server};
pub use plane::{is_prime, Line, Point, ProjectivePlane};
