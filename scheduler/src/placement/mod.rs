//! Rank placement and connection management from MC-MPI: latency-matrix
//! estimation, the bounding graph with its routes and spanning tree, and
//! rank placement as a Quadratic Assignment Problem.

mod bounding;
mod latency;
mod qap;
mod stencil;

pub use bounding::{
    bounding_graph, capped_graph, default_bound, is_connected, select_connections, BoundingGraph,
    SHORTCUTS_UP_TO,
};
pub use latency::{estimate_latencies, four_sites, multi_cluster_latencies, Estimate};
pub use qap::{
    parse_qaplib, Matrix, Placement, Qap, SolverOptions, EXHAUSTIVE_UP_TO, SEARCH_BUDGET,
};
pub use stencil::{hostname_placement, stencil_traffic, topology_distance, Locality};
