//! Measuring this device for the scheduler's machine model: the cost of
//! one more command in a chain, the bandwidth of one queue pair, and of
//! several at once. Loopback queue pairs inside this process (each connected
//! to a partner on the same device), so no peer is needed.

use std::time::{Duration, Instant};

use sideway::ibverbs::queue_pair::{BasicQueuePair, QueuePair};

use super::connect::{self, ConnInfo, QpSizes};
use crate::device::Device;
use crate::error::{Result, TransportError};
use crate::verbs::{ChainEntry, CompletionPoller, RegisteredBuffer, WriteChain, WC_SUCCESS};

/// What [`calibrate`] measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    /// Extra time one more command adds to a chain, microseconds.
    pub command_overhead_us: f64,
    /// One queue pair's write bandwidth, GB/s.
    pub qp_gbps: f64,
    /// Bandwidth of `engines` queue pairs writing at once, GB/s.
    pub node_gbps: f64,
    /// One 8-byte write from post to completion, microseconds.
    pub write_latency_us: f64,
    /// Queue pairs measured together.
    pub engines: usize,
}

const SMALL: usize = 8;
const CHAIN: usize = 32;
const LARGE: usize = 1 << 20;
const REPEAT: usize = 3;

struct Loop {
    // Drop order: queue pairs, then buffers.
    senders: Vec<BasicQueuePair>,
    _receivers: Vec<BasicQueuePair>,
    cq: std::sync::Arc<sideway::ibverbs::completion::BasicCompletionQueue>,
    _src: RegisteredBuffer,
    _dst: RegisteredBuffer,
}

/// Measures `dev` with `engines` loopback queue pairs. Takes a few tens of
/// milliseconds on hardware (longer under emulation).
pub fn calibrate(dev: &Device, engines: usize) -> Result<Calibration> {
    let engines = engines.max(1);
    let name = dev.caps().device.clone();
    let verr = |op: &str, source: std::io::Error| TransportError::Verbs {
        op: op.into(),
        device: name.clone(),
        source,
    };
    let depth = (CHAIN + 4) as u32;
    let cq = dev.create_cq((depth as usize * engines * 2).max(64) as u32)?;
    let sizes = QpSizes {
        send_wr: depth,
        send_sge: 1,
        recv_wr: 4,
        inline: 0,
    };
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..engines {
        senders.push(connect::create_qp(dev, &cq, &cq, &sizes)?);
        receivers.push(connect::create_qp(dev, &cq, &cq, &sizes)?);
    }
    let caps = dev.caps();
    let info = |qp: &BasicQueuePair, psn: u32| ConnInfo {
        qpns: vec![qp.qp_number()],
        psns: vec![psn],
        gid: caps.gid,
        lid: caps.lid,
        mtu: caps.active_mtu,
        windows: Vec::new(),
        engines_used: Vec::new(),
    };
    for e in 0..engines {
        let (si, ri) = (
            info(&senders[e], 100 + e as u32),
            info(&receivers[e], 200 + e as u32),
        );
        connect::connect_qp(dev, &mut senders[e], 100 + e as u32, &ri, 0)?;
        connect::connect_qp(dev, &mut receivers[e], 200 + e as u32, &si, 0)?;
    }
    let len = LARGE * engines;
    dev.check_memlock(2 * len as u64)?;
    let mut src =
        RegisteredBuffer::new(len).map_err(|source| TransportError::Allocate { len, source })?;
    let mut dst =
        RegisteredBuffer::new(len).map_err(|source| TransportError::Allocate { len, source })?;
    let s = src
        .local(&dev.pd)
        .map_err(|e| verr("ibv_reg_mr(calibration source)", e))?;
    let d = dst
        .window(&dev.pd, 0, len)
        .map_err(|e| verr("ibv_reg_mr(calibration target)", e))?;
    let mut lp = Loop {
        senders,
        _receivers: receivers,
        cq,
        _src: src,
        _dst: dst,
    };
    let entry = |e: usize, k: usize, bytes: usize| ChainEntry {
        wr_id: k as u64,
        local_addr: s.addr + (e * LARGE + k * SMALL) as u64,
        lkey: s.lkey,
        len: bytes as u32,
        remote: Some((d.addr + (e * LARGE + k * SMALL) as u64, d.rkey)),
        inline: false,
        with_imm: false,
        signaled: false,
        gather: Vec::new(),
    };
    let chain_of = |e: usize, n: usize, bytes: usize| {
        let mut v: Vec<ChainEntry> = (0..n).map(|k| entry(e, k, bytes)).collect();
        v.last_mut().expect("n >= 1").signaled = true;
        WriteChain::new(&v)
    };
    let mut poller = CompletionPoller::new(16);
    // Best of REPEAT: the least disturbed run is the device's own cost.
    let mut time = |chains: &mut [(usize, WriteChain)], lp: &mut Loop| -> Result<f64> {
        let mut best = f64::INFINITY;
        for _ in 0..REPEAT {
            let t0 = Instant::now();
            for (e, c) in chains.iter_mut() {
                // SAFETY: sources and targets lie in `lp.src` / `lp.dst`,
                // registered above and dropped after the queue pairs; the
                // chain is reaped below before it is posted again.
                unsafe { c.post(&lp.senders[*e]) }
                    .map_err(|(source, _)| verr("ibv_post_send(calibration)", source))?;
            }
            let mut left = chains.len();
            let deadline = t0 + Duration::from_secs(30);
            while left > 0 {
                let n = poller
                    .poll(&lp.cq)
                    .map_err(|e| verr("ibv_poll_cq(calibration)", e))?;
                for i in 0..n {
                    let c = poller.get(i);
                    if c.status != WC_SUCCESS {
                        return Err(TransportError::Verbs {
                            op: "calibration write".into(),
                            device: name.clone(),
                            source: std::io::Error::other(crate::verbs::status_str(c.status)),
                        });
                    }
                    left -= 1;
                }
                if Instant::now() > deadline {
                    return Err(TransportError::Timeout {
                        waited: Duration::from_secs(30),
                        outstanding: "calibration writes on loopback queue pairs".into(),
                    });
                }
            }
            best = best.min(t0.elapsed().as_secs_f64() * 1e6);
        }
        Ok(best)
    };
    let one = time(&mut [(0, chain_of(0, 1, SMALL))], &mut lp)?;
    let many = time(&mut [(0, chain_of(0, CHAIN, SMALL))], &mut lp)?;
    let big = time(&mut [(0, chain_of(0, 1, LARGE))], &mut lp)?;
    let mut all: Vec<(usize, WriteChain)> =
        (0..engines).map(|e| (e, chain_of(e, 1, LARGE))).collect();
    let together = time(&mut all, &mut lp)?;
    Ok(Calibration {
        command_overhead_us: ((many - one) / (CHAIN - 1) as f64).max(0.001),
        qp_gbps: LARGE as f64 / (big * 1e3),
        node_gbps: (LARGE * engines) as f64 / (together * 1e3),
        write_latency_us: one,
        engines,
    })
}

impl Calibration {
    /// The scheduler's machine model for this device: `engines` queue pairs
    /// at the measured per-queue-pair bandwidth sharing the measured node
    /// bandwidth (one port: no separate link limit), the measured cost per
    /// command, and two write latencies (credit, then data) per exchange.
    pub fn machine(&self) -> sode_scheduler::Machine {
        sode_scheduler::Machine {
            engines: self.engines,
            engine_gbps: self.qp_gbps,
            link_gbps: self.node_gbps.max(self.qp_gbps),
            node_gbps: self.node_gbps.max(self.qp_gbps),
            command_overhead_us: self.command_overhead_us,
            fixed_overhead_us: 2.0 * self.write_latency_us,
        }
    }
}
