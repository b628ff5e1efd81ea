//! The collective half of building an exchange: agreeing with each mapped
//! peer, and turning the agreed messages into operations.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;

use super::build::{Local, MappedPeer, Segment, Setup};
use super::{
    Exchange, ExchangeReport, Liveness, MessageReport, OpState, OwnRange, Path, Peer, PeerSegment,
    Piece, RecvOp, Run, SendOp, ShmExchangeBuilder, Storage,
};
use crate::buffer::PrivateBuf;
use crate::error::{Result, ShmError};
use crate::layout::{self, TheirRecv};
use crate::ring::{RingRx, RingTx};
use crate::sys::process::Watch;
use crate::sys::shared::CheckedRuns;
use sode_job::Lifecycle;

fn protocol(peer: usize, what: String) -> ShmError {
    ShmError::Protocol { peer, what }
}

fn mismatch(peer: usize, tag: u32, why: String) -> ShmError {
    ShmError::Mismatch { peer, tag, why }
}

impl Segment {
    /// Writes the final receive paths and tells the peers they are there.
    pub(super) fn publish_paths(
        &mut self,
        neighbours: &[Peer],
        paths: &[Option<Path>],
    ) -> Result<()> {
        let rank = self.rank;
        let receives = neighbours
            .iter()
            .zip(paths)
            .filter(|(n, _)| n.recv.is_some());
        for (slot, (_, path)) in receives.enumerate() {
            let entry = self.layout.recvs[slot].entry;
            let code = path.map_or(0, |p| p.code());
            self.own
                .map
                .write_u64(entry + layout::R_PATH, code)
                .map_err(|e| protocol(rank, e.to_string()))?;
        }
        self.own
            .map
            .atomic(layout::H_STATE)
            .map_err(|e| protocol(rank, e.to_string()))?
            .store(layout::STATE_PATHS, Ordering::Release);
        Ok(())
    }

    /// Waits until every peer has mapped us, then removes the name (the
    /// kernel frees the segment when the last mapping goes).
    pub(super) fn wait_mapped(&mut self, setup: &Setup<'_>) -> Result<()> {
        let rank = self.rank;
        let own = &self.own;
        let own_pid = std::process::id() as i32;
        setup
            .until(rank, "be mapped by all its peers", None, own_pid, || {
                let mapped = own
                    .map
                    .atomic(layout::H_MAPPED)
                    .map_err(|e| protocol(rank, e.to_string()))?
                    .load(Ordering::Acquire);
                Ok((mapped >= setup.peers.len() as u64).then_some(()))
            })
            .map_err(|e| match e {
                ShmError::SetupTimeout { waited, .. } => ShmError::SetupTimeout {
                    // Name the first peer that has not mapped us.
                    peer: setup.peers.first().copied().unwrap_or(rank),
                    step: "map our segment",
                    waited,
                },
                other => other,
            })?;
        self.own.unlink();
        Ok(())
    }
}

impl MappedPeer {
    /// Waits (within the setup's deadline, watching the peer's life) until
    /// the peer has published its receive paths; `step` names what it is
    /// doing before that, for the timeout's message.
    pub(super) fn wait_paths(&self, setup: &Setup<'_>, step: &'static str) -> Result<()> {
        setup.until(self.rank, step, Some(&*self.process), self.view.pid, || {
            self.state_reached(layout::STATE_PATHS)
        })
    }

    /// `Some` once the peer's segment has reached `state`.
    pub(super) fn state_reached(&self, state: u64) -> Result<Option<()>> {
        let s = self
            .map
            .atomic(layout::H_STATE)
            .map_err(|e| protocol(self.rank, e.to_string()))?
            .load(Ordering::Acquire);
        Ok((s >= state).then_some(()))
    }

    fn their_recv(&self, tag: u32) -> Option<&TheirRecv> {
        self.view.recvs_from_us.iter().find(|r| r.tag == tag)
    }
}

impl ShmExchangeBuilder<'_> {
    /// Both sides agree on every message between us and `peer`: what we
    /// send it receives with the same tag and length, and the other way.
    /// A message received into runs of the lent sets has runs at the
    /// sender too.
    pub(super) fn check_agreement(&self, peer: &MappedPeer) -> Result<()> {
        let (p, rank) = (peer.rank, peer_rank_of_us(self));
        for n in self.neighbours.iter().filter(|n| n.peer == p) {
            if let Some(m) = n.send {
                let Some(theirs) = peer.their_recv(m.tag) else {
                    return Err(mismatch(p, m.tag, format!("we send {} bytes but it receives nothing with this tag from rank {rank}", m.len)));
                };
                if theirs.len != m.len as u64 {
                    return Err(mismatch(
                        p,
                        m.tag,
                        format!("we send {} bytes, it expects {}", m.len, theirs.len),
                    ));
                }
                if theirs.in_place && n.send_runs.is_none() {
                    return Err(not_in_place(
                        p,
                        m.tag,
                        "we send it from a buffer, but the peer receives it into its runs",
                    ));
                }
            }
            if let Some(m) = n.recv {
                match peer.view.sends_to_us.iter().find(|s| s.tag == m.tag) {
                    None => {
                        return Err(mismatch(
                            p,
                            m.tag,
                            format!(
                            "we expect {} bytes but it sends nothing with this tag to rank {rank}",
                            m.len
                        ),
                        ))
                    }
                    Some(s) if s.len != m.len as u64 => {
                        return Err(mismatch(
                            p,
                            m.tag,
                            format!("we expect {} bytes, it sends {}", m.len, s.len),
                        ))
                    }
                    // Whatever path it takes: both sides fail alike, and a
                    // path measured on one pair cannot decide whether a
                    // job's ranks agree.
                    Some(s) if s.runs.is_none() && n.recv_runs.is_some() => {
                        return Err(not_in_place(
                            p,
                            m.tag,
                            "we receive it into our runs, but the peer sends it from a buffer",
                        ))
                    }
                    Some(_) => {}
                }
            }
        }
        for s in &peer.view.sends_to_us {
            let expected = self
                .neighbours
                .iter()
                .any(|n| n.peer == p && n.recv.is_some_and(|r| r.tag == s.tag));
            if !expected {
                return Err(mismatch(
                    p,
                    s.tag,
                    format!("it sends {} bytes that we do not receive", s.len),
                ));
            }
        }
        Ok(())
    }

    /// The exchange: a ring pair per peer, an operation per message.
    pub(super) fn operations(
        self,
        local: Local,
        segment: Segment,
        mapped: Vec<MappedPeer>,
    ) -> Result<Exchange> {
        let mut peers = Vec::with_capacity(mapped.len());
        let mut theirs = Vec::with_capacity(mapped.len());
        let mut their_sends = Vec::with_capacity(mapped.len());
        for m in mapped {
            let inbound = segment
                .layout
                .peers
                .iter()
                .find(|p| p.0 == m.rank)
                .map(|p| p.1)
                .ok_or_else(|| protocol(m.rank, "no ring for it in our own segment".into()))?;
            // The table read at mapping time; only the path codes in it were
            // written since, and are read when the sends are made.
            theirs.push(m.view.recvs_from_us.clone());
            their_sends.push(m.view.sends_to_us.clone());
            peers.push(PeerSegment {
                rank: m.rank,
                lent: m.view.lent,
                pid: m.view.pid,
                process: m.process,
                tx: RingTx::new(m.view.ring_to_peer),
                rx: RingRx::new(inbound),
                outbox: VecDeque::new(),
                notify: false,
                sleeps: m.view.blocks,
                map: m.map,
            });
        }
        let mut ops = Operations::default();
        let mut slot = 0;
        let mut send_slot = 0;
        for (i, n) in self.neighbours.iter().enumerate() {
            let pi = peers
                .iter()
                .position(|p| p.rank == n.peer)
                .ok_or_else(|| protocol(n.peer, "not mapped".into()))?;
            if let Some(m) = n.send {
                let placed = &segment.layout.sends[send_slot];
                send_slot += 1;
                let send = send_op(&peers[pi], pi, &theirs[pi], n, placed, segment.layout.lent)?;
                ops.report_sends
                    .push(report(i, n.peer, m.tag, m.len, send.path));
                ops.send_of.push(Some(ops.sends.len()));
                ops.sends.push(send);
            } else {
                ops.send_of.push(None);
            }
            if let Some(m) = n.recv {
                let path = local.recv_paths[i].unwrap_or(Path::Eager);
                // Checked against its send table when the peer was mapped.
                let theirs = their_sends[pi]
                    .iter()
                    .find(|s| s.tag == m.tag)
                    .ok_or_else(|| protocol(n.peer, format!("no send of tag {}", m.tag)))?;
                let lent = segment.layout.lent;
                let mut recv =
                    recv_op(&segment.layout.recvs[slot], pi, n, m.tag, m.len, path, lent)?;
                recv.their_buffer = theirs.buffer;
                if let (Some(from), Some(to)) = (&theirs.runs, &n.recv_runs) {
                    recv.pieces = pieces(from, to);
                }
                slot += 1;
                ops.report_recvs.push(report(i, n.peer, m.tag, m.len, path));
                ops.recv_of.push(Some(ops.recvs.len()));
                ops.recvs.push(recv);
            } else {
                ops.recv_of.push(None);
            }
        }
        Ok(ops.into_exchange(local, segment, peers))
    }
}

/// A message read in place whose other end keeps no lent sets for it.
fn not_in_place(peer: usize, tag: u32, what: &str) -> ShmError {
    mismatch(
        peer,
        tag,
        format!("{what} (from lent sets): every rank must build with the same shared fields"),
    )
}

/// What to copy for a message received in place: the sender's runs
/// (`from`, in its set) against ours (`to`, in our set), both in stream
/// order and of the same total (checked at build), cut where either run
/// ends.
fn pieces(from: &[Run], to: &[Run]) -> Vec<Piece> {
    let mut out = Vec::new();
    let (mut a, mut b) = (from.iter().copied(), to.iter().copied());
    let (mut x, mut y) = (a.next(), b.next());
    while let (Some(f), Some(t)) = (x, y) {
        let len = f.len.min(t.len);
        out.push(Piece {
            from: f.offset as u64,
            to: t.offset as u64,
            len: len as u64,
        });
        // What is left of a run once `len` of it is copied.
        let rest = |r: Run| {
            (r.len > len).then(|| Run {
                offset: r.offset + len,
                len: r.len - len,
            })
        };
        x = rest(f).or_else(|| a.next());
        y = rest(t).or_else(|| b.next());
    }
    // Adjacent on both sides: one copy.
    let mut merged: Vec<Piece> = Vec::with_capacity(out.len());
    for p in out {
        match merged.last_mut() {
            Some(l) if l.from + l.len == p.from && l.to + l.len == p.to => l.len += p.len,
            _ => merged.push(p),
        }
    }
    merged
}

/// The rank this builder's process has (peers know us by it).
fn peer_rank_of_us(b: &ShmExchangeBuilder<'_>) -> usize {
    b.rank()
}

fn report(neighbour: usize, peer: usize, tag: u32, len: usize, path: Path) -> MessageReport {
    MessageReport {
        neighbour,
        peer,
        tag,
        len,
        path,
    }
}

/// A message's runs, checked once against the lent sets' length (the
/// builder checked them already: failing here is a bug, reported as one).
fn checked_runs(
    runs: Option<&Vec<Run>>,
    lent: Option<layout::Lent>,
    peer: usize,
    tag: u32,
) -> Result<Option<CheckedRuns>> {
    let Some(runs) = runs else {
        return Ok(None);
    };
    lent.and_then(|l| CheckedRuns::new(runs.clone(), l.set_len))
        .map(Some)
        .ok_or_else(|| {
            protocol(
                peer,
                format!("tag {tag}: runs outside our lent sets passed the build's checks"),
            )
        })
}

/// Our send of `tag` to peer `pi`, on the path its receiver chose.
fn send_op(
    link: &PeerSegment,
    pi: usize,
    theirs: &[TheirRecv],
    n: &Peer,
    placed: &layout::SendSlot,
    lent: Option<layout::Lent>,
) -> Result<SendOp> {
    let tag = placed.tag;
    let buf = OwnRange {
        offset: placed.buffer,
        len: placed.len as usize,
    };
    let entry = theirs
        .iter()
        .find(|r| r.tag == tag)
        .ok_or_else(|| mismatch(n.peer, tag, "it receives nothing with this tag".into()))?;
    let code = link
        .map
        .read_u64(entry.entry + layout::R_PATH)
        .map_err(|e| protocol(n.peer, e.to_string()))?;
    let path = Path::from_code(code)
        .ok_or_else(|| protocol(n.peer, format!("unknown path code {code} for tag {tag}")))?;
    if path == Path::Read && n.send_runs.is_none() {
        return Err(protocol(
            n.peer,
            format!("it reads tag {tag} in place, but we offered no runs"),
        ));
    }
    let window = match (path, entry.window) {
        (Path::Window, Some(w)) => Some((w, entry.entry)),
        (Path::Window, None) => {
            return Err(protocol(
                n.peer,
                format!("window path for tag {tag} without a window"),
            ))
        }
        _ => None,
    };
    Ok(SendOp {
        peer: pi,
        tag,
        buf,
        path,
        window,
        state: OpState::Idle,
        carried: buf.len,
        sent: 0,
        pushed_any: false,
        packed_in_window: None,
        runs: checked_runs(n.send_runs.as_ref(), lent, n.peer, tag)?,
    })
}

/// Our receive of `tag` from peer `pi`, in its window or a private buffer.
fn recv_op(
    slot: &layout::RecvSlot,
    pi: usize,
    n: &Peer,
    tag: u32,
    len: usize,
    path: Path,
    lent: Option<layout::Lent>,
) -> Result<RecvOp> {
    let storage = match (path, slot.window) {
        (Path::Window, Some(w)) => Storage::Window(w),
        (Path::Read, _) => Storage::InPlace,
        _ => Storage::Private(PrivateBuf::new(len, n.misalign).map_err(|e| ShmError::Io {
            what: "allocating a receive buffer".into(),
            source: e,
        })?),
    };
    Ok(RecvOp {
        peer: pi,
        tag,
        len,
        path,
        storage,
        entry: slot.entry,
        state: OpState::Idle,
        carried: len,
        received: 0,
        get_from: None,
        their_buffer: 0,
        pieces: Vec::new(),
        runs: checked_runs(n.recv_runs.as_ref(), lent, n.peer, tag)?,
    })
}

/// The operations as they are made, per neighbour.
#[derive(Default)]
struct Operations {
    sends: Vec<SendOp>,
    recvs: Vec<RecvOp>,
    send_of: Vec<Option<usize>>,
    recv_of: Vec<Option<usize>>,
    report_sends: Vec<MessageReport>,
    report_recvs: Vec<MessageReport>,
}

impl Operations {
    fn into_exchange(self, local: Local, segment: Segment, peers: Vec<PeerSegment>) -> Exchange {
        let recv_index: HashMap<(usize, u32), usize> = self
            .recvs
            .iter()
            .enumerate()
            .map(|(k, r)| ((r.peer, r.tag), k))
            .collect();
        let send_index = self
            .sends
            .iter()
            .enumerate()
            .map(|(k, s)| ((s.peer, s.tag), k))
            .collect();
        let report = ExchangeReport {
            name: local.name.clone(),
            sends: self.report_sends,
            recvs: self.report_recvs,
            thresholds: local.thresholds,
            calibrations: local.calibrations,
            segment_bytes: segment.layout.total,
            pinned: segment.pinned,
            notes: local.notes,
        };
        let watch = Watch::new(peers.iter().map(|p| &*p.process));
        Exchange {
            name: local.name,
            own: segment.own,
            peers,
            sends: self.sends,
            recvs: self.recvs,
            send_of: self.send_of,
            recv_of: self.recv_of,
            recv_index,
            send_index,
            iteration: 0,
            lifecycle: Lifecycle::Idle,
            liveness: Liveness::new(watch),
            get_chunk: 1 << 20,
            parks: segment.blocks,
            lent: segment.layout.lent,
            set: 0,
            shape: 0,
            fills_each_start: false,
            receives_released: false,
            packed_in_window: 0,
            report,
        }
    }
}
