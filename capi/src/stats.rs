//! The counters an exchange reports to C (`sode_exchange_stats`,
//! `sode_exchange_neighbour_stats`).

use std::ffi::{c_char, c_int, CStr};

use sode::Locality;

/// What an exchange has done since its commit or
/// `sode_exchange_reset_stats`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    /// Iterations completed (a wait that returned `SODE_OK`, or a test
    /// that found the iteration complete).
    pub exchanges: u64,
    /// Seconds spent in start calls: packing, posting, shared-memory copies.
    pub start_seconds: f64,
    /// Seconds spent in wait and test calls: progressing, waiting for the
    /// neighbours, unpacking.
    pub wait_seconds: f64,
    /// Bytes sent to other ranks over the completed iterations (a start on
    /// some fields or at a depth counts what it moved).
    pub bytes_sent: u64,
    /// Bytes received from other ranks over the completed iterations.
    pub bytes_received: u64,
    /// Neighbouring ranks (this rank itself among them where a periodic
    /// axis wraps onto it), for `sode_exchange_neighbour_stats`.
    pub neighbours: c_int,
}

/// One neighbour of an exchange.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NeighbourStats {
    /// Its rank.
    pub rank: c_int,
    /// How it is reached: `"shm"`, `"rdma"`, `"tcp"`, or `"local"` (this
    /// rank itself, a copy); a static string.
    pub channel: *const c_char,
    /// Bytes sent to it per iteration (the fields and depth of the last
    /// start).
    pub bytes_sent: u64,
    /// Bytes received from it per iteration.
    pub bytes_received: u64,
}

impl Default for NeighbourStats {
    fn default() -> Self {
        NeighbourStats {
            rank: -1,
            channel: c"".as_ptr(),
            bytes_sent: 0,
            bytes_received: 0,
        }
    }
}

/// The channel's name as a static C string.
pub fn channel_name(l: Locality) -> &'static CStr {
    match l {
        Locality::SelfCopy => c"local",
        Locality::Shm => c"shm",
        Locality::Rdma => c"rdma",
        Locality::Tcp => c"tcp",
    }
}

impl Stats {
    /// The C view of `s`.
    pub fn of(s: &sode::ExchangeStats) -> Stats {
        Stats {
            exchanges: s.exchanges,
            start_seconds: s.start_time.as_secs_f64(),
            wait_seconds: s.wait_time.as_secs_f64(),
            bytes_sent: s.bytes_sent,
            bytes_received: s.bytes_received,
            neighbours: c_int::try_from(s.neighbours.len()).unwrap_or(c_int::MAX),
        }
    }
}

impl NeighbourStats {
    /// The C view of `n`.
    pub fn of(n: &sode::NeighbourStats) -> NeighbourStats {
        NeighbourStats {
            rank: c_int::try_from(n.rank).unwrap_or(c_int::MAX),
            channel: channel_name(n.channel).as_ptr(),
            bytes_sent: n.bytes_sent,
            bytes_received: n.bytes_received,
        }
    }
}
