//! Shared memory with the neighbours on this node (`sode-shm`).

use super::{names, Built, Channel, LinkRuns, Locality, Member, Placed, Setup};
use crate::error::{HaloError, Result};

/// A `sode-shm` exchange carrying one message per shared-memory neighbour.
#[derive(Debug)]
pub(crate) struct ShmChannel {
    exchange: sode_shm::Exchange,
    /// The neighbours, as errors name them.
    names: String,
    /// The lent set the next start exchanges, when it lends sets.
    set: Option<usize>,
}

impl ShmChannel {
    /// Sets up shared memory with `members` (every link to a rank on this
    /// node), in the segment `name`; collective with each of them. A
    /// member with `runs` (in the shared sets that `lend` asks the
    /// segment to hold: how many, of how many bytes) travels in place.
    pub(crate) fn set_up(
        setup: &Setup<'_>,
        name: &str,
        members: &[Member<'_>],
        runs: &[Option<&LinkRuns>],
        lend: Option<(usize, usize)>,
    ) -> Result<Built> {
        let mut placed = Vec::with_capacity(members.len());
        let mut peers = Vec::with_capacity(members.len());
        for (i, m) in members.iter().enumerate() {
            let runs = runs.get(i).copied().flatten();
            let mut p = sode_shm::Peer::new(m.peer);
            // Message i of each side is member i's.
            let mut at = Placed::default();
            if let Some(s) = m.send {
                p = p.send(s.len, s.tag);
                at.send = Some(i);
                if let Some(r) = runs.and_then(|r| r.send.clone()) {
                    p = p.send_in_place(r);
                    at.in_place.send = true;
                }
            }
            if let Some(r) = m.recv {
                p = p.recv(r.len, r.tag);
                at.recv = Some(i);
                if let Some(r) = runs.and_then(|r| r.recv.clone()) {
                    p = p.recv_in_place(r);
                    at.in_place.recv = true;
                }
            }
            placed.push(at);
            peers.push(p);
        }
        let names = names(members);
        // The probes are the job's, measured by its first exchange.
        let probes = crate::job_memo::JobMemo::of(setup.world).shm_probes.clone();
        let mut ctx = sode_shm::Context::from_world(setup.world)
            .map_err(|source| HaloError::Shm {
                neighbours: names.clone(),
                source: Box::new(source),
            })?
            .with_probe_cache(probes);
        let builder = ctx.exchange().name(name);
        let channel = ShmChannel::build(builder, peers, names, setup.timeout, lend)?;
        Ok(Built {
            channel: Box::new(channel),
            placed,
            summary: None,
        })
    }

    /// Builds the exchange `builder` describes (its name, in its context)
    /// with `peers` (message `i` is `peers[i]`); collective with each of
    /// them.
    fn build(
        builder: sode_shm::ShmExchangeBuilder<'_>,
        peers: Vec<sode_shm::Peer>,
        names: String,
        timeout: std::time::Duration,
        lend: Option<(usize, usize)>,
    ) -> Result<ShmChannel> {
        let wrap = |source| HaloError::Shm {
            neighbours: names.clone(),
            source: Box::new(source),
        };
        let mut builder = builder.neighbours(peers).setup_timeout(timeout);
        if let Some((sets, set_len)) = lend {
            builder = builder.lend(sets, set_len);
        }
        let exchange = builder.build().map_err(wrap)?;
        Ok(ShmChannel {
            exchange,
            names,
            set: lend.map(|_| 0),
        })
    }

    fn wrap(&self, source: sode_shm::ShmError) -> HaloError {
        HaloError::Shm {
            neighbours: self.names.clone(),
            source: Box::new(source),
        }
    }
}

impl Channel for ShmChannel {
    fn locality(&self) -> Locality {
        Locality::Shm
    }

    fn send_buf(&mut self, msg: usize) -> Result<&mut [u8]> {
        match self.exchange.send_buf_mut(msg) {
            Ok(b) => Ok(b),
            Err(e) => Err(HaloError::Shm {
                neighbours: self.names.clone(),
                source: Box::new(e),
            }),
        }
    }

    fn recv_buf(&self, msg: usize) -> Result<&[u8]> {
        self.exchange.recv_buf(msg).map_err(|e| self.wrap(e))
    }

    fn fill_sends_each_start(&mut self) {
        // Packing straight into the receiver's window: one copy fewer.
        self.exchange.fill_sends_each_start(true);
    }

    fn receives_read(&mut self) -> Result<()> {
        // A window of one slot taken before our next start: the sender
        // then packs into it rather than at home.
        self.exchange.receives_read().map_err(|e| self.wrap(e))
    }

    fn carry_send(&mut self, msg: usize, bytes: usize) -> Result<()> {
        self.exchange
            .carry_send(msg, bytes)
            .map_err(|e| self.wrap(e))
    }

    fn carry_recv(&mut self, msg: usize, bytes: usize) -> Result<()> {
        self.exchange
            .carry_recv(msg, bytes)
            .map_err(|e| self.wrap(e))
    }

    fn set_shape(&mut self, shape: u8) -> Result<()> {
        self.exchange.set_shape(shape).map_err(|e| self.wrap(e))
    }

    fn start(&mut self) -> Result<()> {
        let started = match self.set {
            Some(set) => self.exchange.start_set(set),
            None => self.exchange.start(),
        };
        started.map_err(|e| self.wrap(e))
    }

    fn lent_mut(&mut self) -> Option<Result<&mut [u8]>> {
        self.set?;
        Some(match self.exchange.lent_mut() {
            Ok(b) => Ok(b),
            Err(e) => Err(HaloError::Shm {
                neighbours: self.names.clone(),
                source: Box::new(e),
            }),
        })
    }

    fn received_in_place(&self, msg: usize) -> bool {
        self.exchange
            .report()
            .recvs
            .iter()
            .any(|m| m.neighbour == msg && m.path == sode_shm::Path::Read)
    }

    fn calibrations(&self) -> &[sode_shm::PeerCalibration] {
        &self.exchange.report().calibrations
    }

    fn use_set(&mut self, set: usize) {
        if self.set.is_some() {
            self.set = Some(set);
        }
    }

    fn test(&mut self) -> Result<bool> {
        self.exchange.test().map_err(|e| self.wrap(e))
    }

    fn park(&mut self, until: std::time::Instant) -> Option<Result<bool>> {
        if !self.exchange.parks() {
            return None;
        }
        Some(self.exchange.park(until).map_err(|e| self.wrap(e)))
    }

    fn outstanding(&self) -> String {
        format!(
            "shared memory with {}: {}",
            self.names,
            self.exchange.outstanding_report()
        )
    }
}
