//! RDMA writes with the neighbours on other nodes (`sode-transport`), placed
//! on engines by `sode-scheduler` for the device's calibrated model.

use std::ops::Range;
use std::time::Duration;

use sode_job::World;
use sode_scheduler::{Algorithm, Machine, Pattern, Request};
use sode_transport::{
    BufferId, Device, DeviceSelector, PersistentWrites, RdmaExchangeBuilder, TransportError,
    WindowId, Write,
};

use super::{Channel, Locality};
use crate::error::{HaloError, Result};
use crate::exchange::Model;
use crate::plan::{machine_of, writes_from_plan};

/// How the RDMA writes are set up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RdmaSettings {
    /// Queue pairs per neighbour.
    pub engines: usize,
    /// The scheduling algorithm.
    pub algorithm: Algorithm,
    /// The machine model it schedules for.
    pub model: Model,
    /// How long setup may wait for the peers.
    pub timeout: Duration,
}

/// One RDMA message this rank writes: the peer, its bytes, and the index
/// of the window the peer made for it in the peer's numbering.
#[derive(Debug, Clone)]
pub(crate) struct RdmaSend {
    /// The peer.
    pub peer: usize,
    /// Bytes per exchange.
    pub len: usize,
    /// Index of the peer's window for it.
    pub target: usize,
    /// The direction to the peer in the process grid (empty when none).
    pub offset: Vec<i32>,
}

/// One RDMA message this rank receives: a window the peer writes into.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RdmaRecv {
    /// The peer allowed to write it.
    pub peer: usize,
    /// Bytes per exchange.
    pub len: usize,
}

/// A persistent set of scheduled RDMA writes: one buffer holding every send
/// region and every receive window.
#[derive(Debug)]
pub(crate) struct RdmaChannel {
    writes: PersistentWrites,
    buf: BufferId,
    sends: Vec<Range<usize>>,
    windows: Vec<WindowId>,
    names: String,
    summary: String,
}

impl RdmaChannel {
    /// Opens the device, lays out the buffer, plans the writes and builds
    /// them; collective with every RDMA neighbour.
    pub(crate) fn build(
        world: &World,
        messages: &[RdmaSend],
        receives: &[RdmaRecv],
        settings: &RdmaSettings,
        names: String,
    ) -> Result<RdmaChannel> {
        let wrap = |source: TransportError| HaloError::Rdma {
            neighbours: names.clone(),
            source: Box::new(source),
        };
        let dev = Device::open(&DeviceSelector::from_env().map_err(wrap)?).map_err(wrap)?;
        let mut b = RdmaExchangeBuilder::new(&dev).engines(settings.engines);
        let overflow = || HaloError::Usage {
            op: "build",
            why: "the RDMA messages' bytes overflow the address space".into(),
        };
        let total = messages
            .iter()
            .map(|m| m.len)
            .chain(receives.iter().map(|r| r.len))
            .try_fold(0usize, usize::checked_add)
            .ok_or_else(overflow)?;
        // Sends first, then the windows.
        let buf = b.buffer(total).map_err(wrap)?;
        let mut sends = Vec::with_capacity(messages.len());
        let mut at = 0;
        for m in messages {
            sends.push(at..at + m.len);
            at += m.len;
        }
        let mut windows = Vec::with_capacity(receives.len());
        for r in receives {
            windows.push(b.window_in(buf, at, r.len, &[r.peer]).map_err(wrap)?);
            at += r.len;
        }
        let machine = machine(&dev, settings).map_err(wrap)?;
        let plan = sode_scheduler::plan(&pattern(messages, machine), settings.algorithm)
            .map_err(Box::new)?;
        let summary = format!(
            "{} on {} engines, simulated {:.1} us for a model of {:.3} GB/s per queue pair, {:.1} us per command",
            plan.algorithm, settings.engines, plan.simulated_us, machine.engine_gbps, machine.command_overhead_us
        );
        let writes = writes_from_plan(&plan, |id| {
            let j = id as usize;
            let m = messages.get(j)?;
            Some(Write {
                peer: m.peer,
                engine: 0,
                src: buf,
                src_offset: sends[j].start,
                window: WindowId(m.target),
                dst_offset: 0,
                len: m.len,
            })
        })?;
        for w in writes {
            b.write(w);
        }
        let writes = b.build(world, settings.timeout).map_err(wrap)?;
        tracing::debug!(plan = %summary, "RDMA writes scheduled");
        Ok(RdmaChannel {
            writes,
            buf,
            sends,
            windows,
            names,
            summary,
        })
    }

    /// The schedule, for reports.
    pub(crate) fn summary(&self) -> &str {
        &self.summary
    }

    fn wrap(&self, source: TransportError) -> HaloError {
        HaloError::Rdma {
            neighbours: self.names.clone(),
            source: Box::new(source),
        }
    }
}

/// The model the writes are scheduled for.
fn machine(dev: &Device, s: &RdmaSettings) -> sode_transport::Result<Machine> {
    Ok(match s.model {
        Model::Calibrated => machine_of(&sode_transport::calibrate(dev, s.engines)?),
        Model::KComputer => Machine {
            engines: s.engines,
            ..Machine::K_COMPUTER
        },
        Model::Given(m) => Machine {
            engines: s.engines,
            ..m
        },
    })
}

/// Every message as a put, routed in dimension order: a link per axis it
/// crosses.
fn pattern(messages: &[RdmaSend], machine: Machine) -> Pattern {
    Pattern {
        machine,
        requests: messages
            .iter()
            .enumerate()
            .map(|(j, m)| Request {
                id: j as u32,
                dest: m.peer as u32,
                direction: direction_of(&m.offset),
                links: m
                    .offset
                    .iter()
                    .enumerate()
                    .filter(|(_, &o)| o != 0)
                    .map(|(a, &o)| {
                        format!("{}{}", ['x', 'y', 'z'][a], if o > 0 { '+' } else { '-' })
                    })
                    .collect(),
                bytes: m.len as u64,
            })
            .collect(),
    }
}

/// The scheduler's name for a direction (`x+y-`). Links with no direction
/// in a process grid all count as `x+`: the scheduler then assumes they share
/// one link, the conservative guess.
fn direction_of(offset: &[i32]) -> String {
    let s = crate::decomp::axes_name(offset);
    if s.is_empty() {
        "x+".into()
    } else {
        s
    }
}

impl Channel for RdmaChannel {
    fn locality(&self) -> Locality {
        Locality::Rdma
    }

    fn send_buf(&mut self, msg: usize) -> Result<&mut [u8]> {
        let range = self.sends[msg].clone();
        match self.writes.buffer_mut(self.buf) {
            Ok(all) => Ok(&mut all[range]),
            Err(e) => Err(HaloError::Rdma {
                neighbours: self.names.clone(),
                source: Box::new(e),
            }),
        }
    }

    fn recv_buf(&self, msg: usize) -> Result<&[u8]> {
        self.writes
            .window(self.windows[msg])
            .map_err(|e| self.wrap(e))
    }

    fn start(&mut self) -> Result<()> {
        self.writes.start().map_err(|e| self.wrap(e))
    }

    fn test(&mut self) -> Result<bool> {
        self.writes.test().map_err(|e| self.wrap(e))
    }

    fn outstanding(&self) -> String {
        format!(
            "RDMA with {}: {}",
            self.names,
            self.writes.outstanding_report()
        )
    }
}
