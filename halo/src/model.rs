//! One machine model per job: ranks that plan RDMA writes from different
//! measurements of the same hardware make different plans (two ranks of one
//! run once measured 0.008 and 0.016 GB/s per queue pair, calibrating at
//! the same time on one device). So one rank per node measures, every rank
//! learns every node's measurement through the job's allgather, and every
//! rank takes the same one: the median node by per-queue-pair bandwidth.

use sode_scheduler::Machine;

/// What one rank reported: its node (the lowest rank on it) and, if it
/// measured, its device's model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Report {
    pub rank: usize,
    pub node: usize,
    pub machine: Option<Machine>,
}

/// The model every rank of the job plans from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Agreed {
    pub machine: Machine,
    /// The rank whose measurement it is.
    pub rank: usize,
    /// Nodes that measured.
    pub nodes: usize,
}

impl Agreed {
    /// `calibrated on rank 2, the median of 3 nodes`, for the plan summary.
    pub(crate) fn describe(&self) -> String {
        format!(
            "calibrated on rank {}, the median of {} node{}",
            self.rank,
            self.nodes,
            if self.nodes == 1 { "" } else { "s" }
        )
    }
}

/// Bytes of one rank's record in the job's allgather of measurements.
pub(crate) const RECORD_BYTES: usize = 1 + 8 * 6;

/// One rank's measurement as a record of [`RECORD_BYTES`] whatever it
/// holds (a flag, then the engines and five rates as little-endian 64-bit
/// words), so that the allgather costs each rank the same for any model.
pub(crate) fn encode(machine: Option<Machine>) -> [u8; RECORD_BYTES] {
    let mut out = [0u8; RECORD_BYTES];
    if let Some(m) = machine {
        out[0] = 1;
        let words = [
            m.engines as u64,
            m.engine_gbps.to_bits(),
            m.link_gbps.to_bits(),
            m.node_gbps.to_bits(),
            m.command_overhead_us.to_bits(),
            m.fixed_overhead_us.to_bits(),
        ];
        for (chunk, w) in out[1..].chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
    }
    out
}

/// A record made by [`encode`]; what is wrong with it otherwise.
pub(crate) fn decode(record: &[u8]) -> Result<Option<Machine>, String> {
    if record.len() != RECORD_BYTES {
        return Err(format!(
            "a record of {} bytes, not {RECORD_BYTES}",
            record.len()
        ));
    }
    let mut words = record[1..]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()));
    let mut next = || words.next().unwrap_or_default();
    match record[0] {
        0 => Ok(None),
        1 => Ok(Some(Machine {
            engines: usize::try_from(next()).map_err(|_| "an engine count beyond usize")?,
            engine_gbps: f64::from_bits(next()),
            link_gbps: f64::from_bits(next()),
            node_gbps: f64::from_bits(next()),
            command_overhead_us: f64::from_bits(next()),
            fixed_overhead_us: f64::from_bits(next()),
        })),
        flag => Err(format!("a flag of {flag}, not 0 or 1")),
    }
}

/// Per node, its lowest-ranked measurement; across nodes, the median by
/// per-queue-pair bandwidth (the lower middle for an even count; ties by
/// rank). The same answer from the same reports, in any order. `None` when
/// nobody measured.
pub(crate) fn agree(reports: &[Report]) -> Option<Agreed> {
    let mut per_node: Vec<(usize, usize, Machine)> = Vec::new();
    let mut sorted: Vec<&Report> = reports.iter().collect();
    sorted.sort_by_key(|r| r.rank);
    for r in sorted {
        let Some(m) = r.machine else { continue };
        if !per_node.iter().any(|&(node, _, _)| node == r.node) {
            per_node.push((r.node, r.rank, m));
        }
    }
    per_node.sort_by(|a, b| {
        a.2.engine_gbps
            .total_cmp(&b.2.engine_gbps)
            .then(a.1.cmp(&b.1))
    });
    let nodes = per_node.len();
    let &(_, rank, machine) = per_node.get(nodes.checked_sub(1)? / 2)?;
    Some(Agreed {
        machine,
        rank,
        nodes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_the_same_size_for_any_model_and_reads_back() {
        let m = Machine {
            engines: 3,
            engine_gbps: 0.0123,
            link_gbps: 1e9,
            node_gbps: 2.5,
            command_overhead_us: 1.0 / 3.0,
            fixed_overhead_us: 18.0,
        };
        assert_eq!(decode(&encode(Some(m))), Ok(Some(m)));
        assert_eq!(decode(&encode(None)), Ok(None));
        assert!(decode(&encode(None)[..5]).unwrap_err().contains("5 bytes"));
        let mut bad = encode(Some(m));
        bad[0] = 7;
        assert!(decode(&bad).unwrap_err().contains("flag of 7"));
    }

    fn m(gbps: f64) -> Option<Machine> {
        Some(Machine {
            engine_gbps: gbps,
            ..Machine::K_COMPUTER
        })
    }

    #[test]
    fn one_measurement_per_node_and_the_median_node() {
        let reports = [
            Report {
                rank: 0,
                node: 0,
                machine: m(0.016),
            },
            // A second measurement on node 0 is not counted.
            Report {
                rank: 1,
                node: 0,
                machine: m(9.0),
            },
            Report {
                rank: 2,
                node: 2,
                machine: m(0.008),
            },
            Report {
                rank: 3,
                node: 2,
                machine: None,
            },
            Report {
                rank: 4,
                node: 4,
                machine: m(0.012),
            },
        ];
        let a = agree(&reports).unwrap();
        assert_eq!((a.rank, a.nodes, a.machine.engine_gbps), (4, 3, 0.012));
        assert_eq!(a.describe(), "calibrated on rank 4, the median of 3 nodes");
        // Any order, same answer.
        let mut shuffled = reports;
        shuffled.reverse();
        assert_eq!(agree(&shuffled), Some(a));
    }

    #[test]
    fn even_counts_take_the_lower_middle_and_nobody_is_none() {
        let reports = [
            Report {
                rank: 0,
                node: 0,
                machine: m(2.0),
            },
            Report {
                rank: 1,
                node: 1,
                machine: m(1.0),
            },
        ];
        let a = agree(&reports).unwrap();
        assert_eq!((a.rank, a.machine.engine_gbps), (1, 1.0));
        let none = [Report {
            rank: 0,
            node: 0,
            machine: None,
        }];
        assert_eq!(agree(&none), None);
        assert_eq!(agree(&[]), None);
    }
}
