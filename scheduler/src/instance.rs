//! A validated pattern compiled for the algorithms: links interned to bit
//! masks, directions ranked for sorting.

use crate::error::{Result, SchedError};
use crate::machine::Machine;
use crate::pattern::{direction_axes, Pattern};

/// One request, as the algorithms see it.
#[derive(Debug, Clone)]
pub(crate) struct Put {
    /// The request's id in the pattern.
    pub id: u32,
    pub bytes: u64,
    /// Bit i set: the put occupies link i.
    pub links: u64,
    /// True for directions that cross more than one axis.
    pub diagonal: bool,
    /// The direction's name, the secondary sort key of BLbased.
    pub direction: String,
}

/// A pattern ready for planning.
#[derive(Debug, Clone)]
pub(crate) struct Instance {
    pub machine: Machine,
    pub puts: Vec<Put>,
    pub link_count: usize,
    /// BLbased's order of the puts: length descending, then direction
    /// (sorted once: every packer and `greedy` start from it).
    pub longest_first: Vec<usize>,
}

/// A piece of a put placed on an engine: the whole put, or a part of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Piece {
    /// Index into `Instance::puts`.
    pub put: usize,
    pub offset: u64,
    pub bytes: u64,
    pub recv_engine: usize,
}

impl Piece {
    pub fn whole(instance: &Instance, put: usize, recv_engine: usize) -> Piece {
        Piece {
            put,
            offset: 0,
            bytes: instance.puts[put].bytes,
            recv_engine,
        }
    }
}

impl Instance {
    pub fn new(pattern: &Pattern) -> Result<Instance> {
        pattern.validate()?;
        let mut names: Vec<&str> = Vec::new();
        let mut puts = Vec::with_capacity(pattern.requests.len());
        for r in &pattern.requests {
            let mut mask = 0u64;
            for link in &r.links {
                let index = match names.iter().position(|n| n == link) {
                    Some(i) => i,
                    None => {
                        if names.len() == 64 {
                            return Err(SchedError::InvalidRequest {
                                id: r.id,
                                reason: "the pattern names more than 64 distinct links; a node has far fewer".into(),
                            });
                        }
                        names.push(link);
                        names.len() - 1
                    }
                };
                mask |= 1 << index;
            }
            puts.push(Put {
                id: r.id,
                bytes: r.bytes,
                links: mask,
                diagonal: direction_axes(&r.direction)?.len() > 1,
                direction: r.direction.clone(),
            });
        }
        let mut order: Vec<usize> = (0..puts.len()).collect();
        order.sort_by(|&a, &b| {
            let (pa, pb) = (&puts[a], &puts[b]);
            pb.bytes
                .cmp(&pa.bytes)
                .then_with(|| pa.direction.cmp(&pb.direction))
        });
        Ok(Instance {
            machine: pattern.machine,
            puts,
            link_count: names.len(),
            longest_first: order,
        })
    }

    /// Bytes per microsecond of one engine.
    pub fn engine_rate(&self) -> f64 {
        self.machine.engine_gbps * 1e3
    }
    pub fn link_rate(&self) -> f64 {
        self.machine.link_gbps * 1e3
    }
    pub fn node_rate(&self) -> f64 {
        self.machine.node_gbps * 1e3
    }
    /// The fastest a flow ever runs: alone on an idle machine (every put
    /// crosses an engine, at least one link and the node).
    pub fn alone_rate(&self) -> f64 {
        self.engine_rate()
            .min(self.link_rate())
            .min(self.node_rate())
    }
    /// Time of a piece alone on an idle machine, overhead included.
    pub fn alone_us(&self, bytes: u64) -> f64 {
        self.machine.command_overhead_us + bytes as f64 / self.alone_rate()
    }
}
