//! # sode-transport
//!
//! The inter-node transport of sode: each RDMA engine is a reliable-connected
//! queue pair; a persistent plan from `sode-scheduler` becomes pre-built
//! work-request chains, posted once per engine per exchange. Not built yet:
//! this crate holds its place in the workspace.
#![deny(missing_docs)]
