//! # sode-shm
//!
//! The intra-node channel of sode: a one-copy path between processes of one
//! node (the receiver reads the sender's memory with cross-memory attach),
//! direct puts into peer-mapped halo buffers, and an eager path for small
//! messages. Not built yet: this crate holds its place in the workspace.
#![deny(missing_docs)]
