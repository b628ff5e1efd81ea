//! Ranks that start different parts of one exchange (other fields of the
//! same length, or another depth) are told over TCP and shared memory:
//! each message carries the shape of its start (in the TCP header; in the
//! shared-memory record or window word), and the receiver compares it with
//! its own. (Over RDMA: `rdma_carry.rs`, in the SoftRoCE guest.) Two ranks
//! as two threads of this process.

use sode::Transport;

mod common;

#[test]
fn over_tcp_ranks_that_start_other_fields_or_depths_are_told() {
    common::told_apart(Transport::Tcp);
}

#[test]
fn over_shared_memory_ranks_that_start_other_fields_or_depths_are_told() {
    common::told_apart(Transport::Shm);
}
