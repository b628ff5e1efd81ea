//! The machine model: what one node can inject and how fast.

use crate::error::{Result, SchedError};
use serde::{Deserialize, Serialize};

/// Most RDMA engines a machine model may have.
pub const MAX_ENGINES: usize = 256;

/// One node's RDMA resources, as the scheduler and the simulator see them.
///
/// Bandwidths are in GB/s (1e9 bytes/s), which is conveniently the same
/// number as kilobytes per microsecond: `bytes / (gbps * 1e3)` is microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// RDMA engines per node (each can send one command at a time; the node
    /// has as many receive engines).
    pub engines: usize,
    /// Injection bandwidth of one engine, GB/s.
    pub engine_gbps: f64,
    /// Bandwidth of one network link per direction, GB/s.
    pub link_gbps: f64,
    /// Total injection bandwidth of the node, GB/s.
    pub node_gbps: f64,
    /// Time an engine spends on a command before data flows, microseconds.
    pub command_overhead_us: f64,
    /// Fixed cost of one exchange (start, completion, synchronisation), microseconds.
    pub fixed_overhead_us: f64,
}

impl Machine {
    /// The K computer's Tofu node, calibrated to the RSched paper's
    /// measurements: 4 engines at 4.15 GB/s, 5.0 GB/s links, 14.2 GB/s per
    /// node, about 1 us per command queue write, 18 us fixed per exchange.
    pub const K_COMPUTER: Machine = Machine {
        engines: 4,
        engine_gbps: 4.15,
        link_gbps: 5.0,
        node_gbps: 14.2,
        command_overhead_us: 1.0,
        fixed_overhead_us: 18.0,
    };

    /// Fugaku's TofuD node: 6 engines, 6.8 GB/s links and engines, 40.8 GB/s
    /// per node. The overheads are nominal (not calibrated against a
    /// measurement): 0.5 us per command, 10 us fixed.
    pub const TOFU_D: Machine = Machine {
        engines: 6,
        engine_gbps: 6.8,
        link_gbps: 6.8,
        node_gbps: 40.8,
        command_overhead_us: 0.5,
        fixed_overhead_us: 10.0,
    };

    /// Looks up a preset by its command-line name (`k` or `tofud`).
    pub fn preset(name: &str) -> Option<Machine> {
        match name.to_ascii_lowercase().as_str() {
            "k" | "k-computer" | "tofu" => Some(Self::K_COMPUTER),
            "tofud" | "tofu-d" | "fugaku" => Some(Self::TOFU_D),
            _ => None,
        }
    }

    /// Checks that every parameter is usable.
    ///
    /// # Errors
    ///
    /// [`SchedError::InvalidMachine`](crate::SchedError::InvalidMachine) naming the parameter that is out of
    /// range.
    pub fn validate(&self) -> Result<()> {
        if self.engines == 0 || self.engines > MAX_ENGINES {
            return Err(SchedError::InvalidMachine {
                field: "engines",
                value: self.engines as f64,
                reason: "a node has 1 to 256 RDMA engines",
            });
        }
        for (field, value) in [
            ("engine_gbps", self.engine_gbps),
            ("link_gbps", self.link_gbps),
            ("node_gbps", self.node_gbps),
        ] {
            if !(value.is_finite() && (1e-9..=1e6).contains(&value)) {
                return Err(SchedError::InvalidMachine {
                    field,
                    value,
                    reason: "a bandwidth must be between 1e-9 and 1e6 GB/s",
                });
            }
        }
        for (field, value) in [
            ("command_overhead_us", self.command_overhead_us),
            ("fixed_overhead_us", self.fixed_overhead_us),
        ] {
            if !(value.is_finite() && (0.0..=1e9).contains(&value)) {
                return Err(SchedError::InvalidMachine {
                    field,
                    value,
                    reason: "an overhead must be between 0 and 1e9 microseconds (1000 s)",
                });
            }
        }
        Ok(())
    }

    /// Microseconds to move `bytes` at `gbps`.
    pub fn transfer_us(bytes: u64, gbps: f64) -> f64 {
        bytes as f64 / (gbps * 1e3)
    }

    /// How many puts must share a link before they can fill it: the
    /// smallest c with c engines >= one link (1 when one engine fills it).
    pub fn link_fill_count(&self) -> usize {
        let c = (self.link_gbps / self.engine_gbps - 1e-9).ceil().max(1.0) as usize;
        c.min(self.engines)
    }
}
