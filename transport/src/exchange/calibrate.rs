//! Measuring this device for the scheduler's machine model: the cost of
//! one more command in a chain, the bandwidth of one queue pair, and of
//! several at once. Loopback queue pairs inside this process (each connected
//! to a partner on the same device), so no peer is needed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sideway::ibverbs::completion::BasicCompletionQueue;
use sideway::ibverbs::queue_pair::QueuePair;

use super::connect::{self, ConnInfo, QpSizes};
use crate::device::Device;
use crate::error::{Result, TransportError};
use crate::verbs::{
    ChainEntry, ChainId, ChainSet, CompletionPoller, Keys, Posting, RegisteredBuffer, WC_SUCCESS,
};

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

/// Loopback queue pairs (senders first, then their partners) over one
/// completion queue, the source and target buffers, and the keys.
struct Loop {
    set: ChainSet,
    cq: Arc<BasicCompletionQueue>,
    poller: CompletionPoller,
    src: Keys,
    dst: Keys,
    device: String,
}

impl Loop {
    fn new(dev: &Device, engines: usize) -> Result<Loop> {
        let device = dev.caps().device.clone();
        let depth = (CHAIN + 4) as u32;
        let cq = dev.create_cq((depth as usize * engines * 2).max(64) as u32)?;
        let sizes = QpSizes {
            send_wr: depth,
            send_sge: 1,
            recv_wr: 4,
            inline: 0,
        };
        let mut qps = Vec::with_capacity(2 * engines);
        for _ in 0..2 * engines {
            qps.push(connect::create_qp(dev, &dev.pd, &cq, &cq, &sizes)?);
        }
        let caps = dev.caps();
        let psn = |i: usize| 100 + i as u32;
        let infos: Vec<ConnInfo> = qps
            .iter()
            .enumerate()
            .map(|(i, qp)| ConnInfo {
                qpns: vec![qp.qp_number()],
                psns: vec![psn(i)],
                gid: caps.gid,
                lid: caps.lid,
                mtu: caps.active_mtu,
                windows: Vec::new(),
                engines_used: Vec::new(),
                lead: 0,
            })
            .collect();
        for (i, qp) in qps.iter_mut().enumerate() {
            // Sender e talks to engines + e, and back.
            let partner = (i + engines) % (2 * engines);
            connect::connect_qp(dev, qp, psn(i), &infos[partner], 0)?;
        }
        let len = LARGE * engines;
        dev.check_memlock(2 * len as u64)?;
        let alloc = |len| {
            RegisteredBuffer::new(len).map_err(|source| TransportError::Allocate { len, source })
        };
        let (mut src, mut dst) = (alloc(len)?, alloc(len)?);
        let verr = |op: &str, source| TransportError::Verbs {
            op: op.into(),
            device: device.clone(),
            source,
        };
        let s = src
            .local(&dev.pd)
            .map_err(|e| verr("ibv_reg_mr(calibration source)", e))?;
        let d = dst
            .window(&dev.pd, 0, len)
            .map_err(|e| verr("ibv_reg_mr(calibration target)", e))?;
        Ok(Loop {
            set: ChainSet::new(qps, vec![src, dst]),
            cq,
            poller: CompletionPoller::new(16),
            src: s,
            dst: d,
            device,
        })
    }

    /// A chain of `n` writes of `bytes` on engine `e`, the last signalled.
    fn chain(&mut self, e: usize, n: usize, bytes: usize) -> Result<ChainId> {
        let entries: Vec<ChainEntry> = (0..n)
            .map(|k| {
                let at = (e * LARGE + k * SMALL) as u64;
                ChainEntry {
                    wr_id: k as u64,
                    local_addr: self.src.addr + at,
                    lkey: self.src.lkey,
                    len: bytes as u32,
                    remote: Some((self.dst.addr + at, self.dst.rkey)),
                    inline: false,
                    with_imm: false,
                    signaled: k + 1 == n,
                    gather: Vec::new(),
                }
            })
            .collect();
        self.set
            .add(&entries)
            .map_err(|why| TransportError::InvalidCommand { command: 0, why })
    }

    fn verr(&self, op: &str, source: std::io::Error) -> TransportError {
        TransportError::Verbs {
            op: op.into(),
            device: self.device.clone(),
            source,
        }
    }

    /// Best of [`REPEAT`] runs of posting `chains` (engine, chain) and
    /// reaping them, in microseconds: the least disturbed run is the
    /// device's own cost.
    fn time(&mut self, chains: &[(usize, ChainId)]) -> Result<f64> {
        let mut best = f64::INFINITY;
        for _ in 0..REPEAT {
            let t0 = Instant::now();
            for &(e, c) in chains {
                self.set
                    .post(c, e, Posting::Chain)
                    .map_err(|(source, _)| self.verr("ibv_post_send(calibration)", source))?;
            }
            self.reap(chains.len(), t0 + Duration::from_secs(30))?;
            best = best.min(t0.elapsed().as_secs_f64() * 1e6);
        }
        Ok(best)
    }

    fn reap(&mut self, mut left: usize, deadline: Instant) -> Result<()> {
        let mut backoff = sode_job::Backoff::exchange();
        while left > 0 {
            let n = self
                .poller
                .poll(&self.cq)
                .map_err(|e| self.verr("ibv_poll_cq(calibration)", e))?;
            for i in 0..n {
                let c = self.poller.get(i);
                if c.status != WC_SUCCESS {
                    let status = crate::verbs::status_str(c.status);
                    return Err(self.verr("calibration write", std::io::Error::other(status)));
                }
                left -= 1;
            }
            if n > 0 {
                backoff.reset();
            } else {
                backoff.snooze();
            }
            if Instant::now() > deadline {
                return Err(TransportError::Timeout {
                    waited: Duration::from_secs(30),
                    outstanding: "calibration writes on loopback queue pairs".into(),
                });
            }
        }
        Ok(())
    }
}

/// Measures `dev` with `engines` loopback queue pairs. Takes a few tens of
/// milliseconds on hardware (longer under emulation).
///
/// # Errors
///
/// [`TransportError::Verbs`](crate::TransportError::Verbs) when the loopback queue pairs cannot be made or a
/// measuring write fails.
pub fn calibrate(dev: &Device, engines: usize) -> Result<Calibration> {
    let engines = engines.max(1);
    let mut lp = Loop::new(dev, engines)?;
    let (one, many, big) = (
        lp.chain(0, 1, SMALL)?,
        lp.chain(0, CHAIN, SMALL)?,
        lp.chain(0, 1, LARGE)?,
    );
    let all: Vec<(usize, ChainId)> = (0..engines)
        .map(|e| lp.chain(e, 1, LARGE).map(|c| (e, c)))
        .collect::<Result<_>>()?;
    let one = lp.time(&[(0, one)])?;
    let many = lp.time(&[(0, many)])?;
    let big = lp.time(&[(0, big)])?;
    let together = lp.time(&all)?;
    Ok(Calibration {
        command_overhead_us: ((many - one) / (CHAIN - 1) as f64).max(0.001),
        qp_gbps: LARGE as f64 / (big * 1e3),
        node_gbps: (LARGE * engines) as f64 / (together * 1e3),
        write_latency_us: one,
        engines,
    })
}
