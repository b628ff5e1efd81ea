//! Running an exchange: `start`, `wait`, and the progress engine.

use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use super::{Exchange, ExchangeReport, OpState, OwnRange, Path, PeerSegment, SendOp, Storage};
use crate::error::{Result, ShmError};
use crate::layout;
use crate::ring::{Record, RecordKind};
use crate::sys::shared::SharedMap;
use sode_job::Backoff;

/// What one pass of progress achieved.
#[derive(Debug, Clone, Copy)]
struct Pass {
    progressed: bool,
    complete: bool,
}

/// The operation `rec` from peer `pi` (rank `rank`) is about, or the
/// protocol error of a record for a tag it never announced.
fn op_for(
    index: &std::collections::HashMap<(usize, u32), usize>,
    pi: usize,
    rec: &Record,
    rank: usize,
    what: &str,
) -> Result<usize> {
    index
        .get(&(pi, rec.tag))
        .copied()
        .ok_or_else(|| ShmError::Protocol {
            peer: rank,
            what: format!("{what} for unknown tag {}", rec.tag),
        })
}

/// Refuses a message whose start `theirs` differs from this rank's
/// `ours` ([`Exchange::set_shape`]): the two ranks started different
/// fields or depths, and the bytes, even of the right length, are not
/// what this rank unpacks.
fn check_shape(peer: usize, tag: u32, theirs: u8, ours: u8) -> Result<()> {
    if theirs == ours {
        return Ok(());
    }
    Err(ShmError::Mismatch {
        peer,
        tag,
        why: format!("a message of shape {theirs}, this rank's start has shape {ours}: the ranks started different parts of the exchange (other fields, or another depth)"),
    })
}

/// Pushes what of send `s`'s eager `data` (iteration `n`, of a start of
/// `shape`) fits into its peer's ring, the last fragment marked as such;
/// whether any went.
fn push_eager(
    s: &mut SendOp,
    link: &mut PeerSegment,
    data: &[u8],
    n: u64,
    shape: u8,
) -> Result<bool> {
    let mut progress = false;
    while !s.pushed_any || s.sent < data.len() {
        let len = (data.len() - s.sent).min(link.tx.max_payload());
        let kind = if s.sent + len == data.len() {
            RecordKind::EagerLast
        } else {
            RecordKind::Eager
        };
        let rec = Record {
            kind,
            tag: s.tag,
            seq: n,
            at: s.sent as u64,
            len: len as u64,
            shape,
        };
        let ok = link
            .tx
            .try_push(&link.map, &rec, &data[s.sent..s.sent + len])
            .map_err(|e| ShmError::Protocol {
                peer: link.rank,
                what: e.0,
            })?;
        if !ok {
            break;
        }
        progress = true;
        link.notify = true;
        s.pushed_any = true;
        s.sent += len;
    }
    if s.pushed_any && s.sent == data.len() {
        s.state = OpState::Done;
    }
    Ok(progress)
}

/// A send buffer's bytes in our own segment.
fn own_bytes(map: &SharedMap, r: OwnRange) -> Result<&[u8]> {
    map.bytes(r.offset, r.len).map_err(|e| ShmError::Io {
        what: "reading a send buffer in our own segment".into(),
        source: std::io::Error::other(e.to_string()),
    })
}

/// An out-of-bounds access to our own segment while doing `what`.
fn own_error(what: &str, e: crate::sys::shared::OutOfBounds) -> ShmError {
    ShmError::Io {
        what: format!("{what} in our own segment"),
        source: std::io::Error::other(e.to_string()),
    }
}

/// Whether `bytes` of neighbour `index`'s `what` (a message of `len`
/// bytes, of runs in the lent sets when `runs`) can be carried.
fn check_carried(
    what: &'static str,
    index: usize,
    bytes: usize,
    len: usize,
    runs: bool,
) -> Result<()> {
    if bytes > len {
        return Err(ShmError::CarryTooLong {
            what,
            index,
            asked: bytes,
            len,
        });
    }
    if runs && bytes != len {
        return Err(ShmError::InPlace {
            op: "carry",
            why: format!(
                "neighbour {index}'s {what} is runs of the lent sets: it is carried whole"
            ),
        });
    }
    Ok(())
}

/// The operation behind neighbour `index`, or which buffer does not exist.
fn op_of(table: &[Option<usize>], index: usize, what: &'static str) -> Result<usize> {
    table
        .get(index)
        .copied()
        .flatten()
        .ok_or(ShmError::NoSuchBuffer {
            what,
            index,
            count: table.len(),
        })
}

/// Copies a message received in place, piece by piece, from set `theirs`
/// of the sender's lent sets into set `ours` of our own. The pieces were
/// checked against both sets' lengths at build and the set numbers here,
/// and the mappings check every range again.
fn copy_in_place(
    own: &mut SharedMap,
    lent: Option<layout::Lent>,
    ours: u64,
    link: &super::PeerSegment,
    r: &mut super::RecvOp,
    theirs: u64,
) -> Result<()> {
    let protocol = |what: String| ShmError::Protocol {
        peer: link.rank,
        what,
    };
    let (Some(mine), Some(their)) = (lent, link.lent) else {
        return Err(protocol(format!(
            "tag {}: in place without lent sets on both sides",
            r.tag
        )));
    };
    let (from, to) = (their.set_at(theirs), mine.set_at(ours));
    for p in &r.pieces {
        let dst = own
            .bytes_mut(to + p.to, p.len as usize)
            .map_err(|e| protocol(format!("tag {}: our set: {e}", r.tag)))?;
        link.map
            .read(from + p.from, dst)
            .map_err(|e| protocol(format!("tag {}: its set: {e}", r.tag)))?;
    }
    r.received = r.len;
    Ok(())
}

impl Exchange {
    /// The exchange's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What `build` decided.
    pub fn report(&self) -> &ExchangeReport {
        &self.report
    }

    /// Completed iterations plus the one in flight.
    pub fn iteration(&self) -> u64 {
        self.iteration
    }

    /// The send buffer of neighbour `index`, to fill before `start`.
    ///
    /// Once the caller fills its sends before every start
    /// ([`fill_sends_each_start`](Self::fill_sends_each_start)), a window
    /// put whose receiver has already granted the next iteration's slot
    /// (with two slots, it did so when it started the current one) hands
    /// out that slot itself: what the caller packs there is what the
    /// receiver reads, one copy fewer than packing here and putting it at
    /// `start`. Calls before the same `start` return the same buffer.
    ///
    /// # Errors
    ///
    /// [`ShmError::NoSuchBuffer`] for an index it does not have;
    /// [`ShmError::State`] while an iteration is in flight.
    pub fn send_buf_mut(&mut self, index: usize) -> Result<&mut [u8]> {
        self.lifecycle.require_idle("send_buf_mut")?;
        let op = op_of(&self.send_of, index, "send")?;
        if self.sends[op].runs.is_some() {
            return Err(ShmError::InPlace {
                op: "send_buf_mut",
                why: format!(
                    "neighbour {index}'s send comes from its runs in the lent set: write it there"
                ),
            });
        }
        if let Some(slot) = self.granted_slot(op)? {
            let s = &self.sends[op];
            let peer = self.peers[s.peer].rank;
            return self.peers[s.peer]
                .map
                .bytes_mut(slot, s.buf.len)
                .map_err(|e| ShmError::Protocol {
                    peer,
                    what: e.to_string(),
                });
        }
        let buf = self.sends[op].buf;
        self.own
            .map
            .bytes_mut(buf.offset, buf.len)
            .map_err(|e| ShmError::Io {
                what: "a send buffer in our own segment".into(),
                source: std::io::Error::other(e.to_string()),
            })
    }

    /// Where send `op` of the next iteration may be packed in the peer's
    /// window: its slot, when the op is a window put whose receiver has
    /// granted that iteration already (recorded, so that the put copies
    /// nothing); `None` when it must be packed in our own segment.
    fn granted_slot(&mut self, op: usize) -> Result<Option<u64>> {
        if !self.fills_each_start {
            return Ok(None);
        }
        let next = self.iteration + 1;
        let s = &mut self.sends[op];
        let (Path::Window, Some((window, entry))) = (s.path, s.window) else {
            return Ok(None);
        };
        let link = &self.peers[s.peer];
        if s.packed_in_window != Some(next) {
            let free = link
                .map
                .atomic(entry + layout::R_FREE_FOR)
                .map_err(|e| ShmError::Protocol {
                    peer: link.rank,
                    what: e.to_string(),
                })?
                .load(Ordering::Acquire);
            if free < next {
                return Ok(None);
            }
            s.packed_in_window = Some(next);
        }
        Ok(Some(layout::window_slot(window, s.buf.len as u64, next)))
    }

    /// Says that the caller has read this iteration's receive buffers, so
    /// that a window of one slot (a message above 128 KiB) takes the next
    /// iteration's data before this process starts it: a sender that
    /// starts first then packs straight into the window, where it would
    /// otherwise pack at home and copy over once this process started.
    /// Until the next start, [`recv_buf`](Self::recv_buf) is refused.
    /// Windows of two slots are granted an iteration ahead anyway.
    ///
    /// # Errors
    ///
    /// [`ShmError::State`] while an iteration is in flight;
    /// [`ShmError::Protocol`] when our own segment is out of reach.
    pub fn receives_read(&mut self) -> Result<()> {
        self.lifecycle.require_idle("receives_read")?;
        if std::mem::replace(&mut self.receives_released, true) {
            return Ok(());
        }
        let next = self.iteration + 1;
        for r in &self.recvs {
            if r.path != Path::Window || layout::window_slots(r.len as u64) != 1 {
                continue;
            }
            self.own
                .map
                .atomic(r.entry + layout::R_FREE_FOR)
                .map_err(|e| ShmError::Protocol {
                    peer: self.peers[r.peer].rank,
                    what: e.to_string(),
                })?
                .store(layout::window_credit(r.len as u64, next), Ordering::Release);
            self.peers[r.peer].notify = true;
        }
        self.ring_doorbells()
    }

    /// Promises that the caller writes the carried bytes of every send
    /// buffer ([`send_buf_mut`](Self::send_buf_mut)) before each `start`,
    /// rather than leaving them from an earlier iteration, so that a send
    /// buffer may be the receiver's window itself. Off by default.
    pub fn fill_sends_each_start(&mut self, fills: bool) {
        self.fills_each_start = fills;
    }

    /// How many sends so far were packed by the caller straight into their
    /// receiver's window ([`fill_sends_each_start`](Self::fill_sends_each_start)),
    /// rather than copied there at start.
    pub fn sends_packed_in_window(&self) -> u64 {
        self.packed_in_window
    }

    /// The receive buffer of neighbour `index`, valid after `wait` until the
    /// next `start`.
    ///
    /// # Errors
    ///
    /// As [`send_buf_mut`](Self::send_buf_mut).
    pub fn recv_buf(&self, index: usize) -> Result<&[u8]> {
        self.lifecycle.require_idle("recv_buf")?;
        if self.receives_released {
            return Err(sode_job::StateError::Wrong {
                op: "recv_buf",
                why: "the receive buffers were released (receives_read): read them before, or after the next wait",
            }
            .into());
        }
        let r = &self.recvs[op_of(&self.recv_of, index, "receive")?];
        if r.runs.is_some() {
            return Err(ShmError::InPlace {
                op: "recv_buf",
                why: format!(
                    "neighbour {index}'s receive lands in its runs in the lent set: read it there"
                ),
            });
        }
        match &r.storage {
            Storage::Private(b) => Ok(b.as_ref()),
            Storage::InPlace => Err(ShmError::InPlace {
                op: "recv_buf",
                why: format!("neighbour {index}'s receive lands in place in the lent set: it has no receive buffer"),
            }),
            Storage::Window(off) => {
                // The slot of the iteration last completed.
                let slot = layout::window_slot(*off, r.len as u64, self.iteration);
                self.own
                    .map
                    .bytes(slot, r.len)
                    .map_err(|e| ShmError::Protocol {
                        peer: self.peers[r.peer].rank,
                        what: e.to_string(),
                    })
            }
        }
    }

    /// The lent sets, all of them (set `s` at `s * set_len`): the caller's
    /// fields. Borrowing them does not need the exchange to be idle, so a
    /// caller can compute between `start` and `wait`; as with MPI's
    /// buffers, what the peers read in place (the runs of the set in
    /// flight) must not change until `wait` returns, and what lands in
    /// place is there once `wait` (or `test`) has returned true.
    ///
    /// # Errors
    ///
    /// [`ShmError::InPlace`] when the exchange lends no memory.
    pub fn lent_mut(&mut self) -> Result<&mut [u8]> {
        let Some(l) = self.lent else {
            return Err(ShmError::InPlace {
                op: "lent_mut",
                why: "this exchange lends no sets: build it with lend(sets, set_len)".into(),
            });
        };
        self.own
            .map
            .bytes_mut(l.offset, (l.sets * l.set_len) as usize)
            .map_err(|e| ShmError::Io {
                what: "the lent sets in our own segment".into(),
                source: std::io::Error::other(e.to_string()),
            })
    }

    /// [`start`](Exchange::start) exchanging lent set `set`: messages in
    /// place are read from its runs here and land in its runs at the
    /// peers (each names its own set at its own start).
    ///
    /// # Errors
    ///
    /// [`ShmError::InPlace`] for a set it does not lend; as
    /// [`start`](Self::start).
    pub fn start_set(&mut self, set: usize) -> Result<()> {
        let sets = self.lent.map_or(0, |l| l.sets);
        if set as u64 >= sets {
            self.lifecycle.require_idle("start")?;
            return Err(ShmError::InPlace {
                op: "start_set",
                why: format!("set {set} asked for, but the exchange lends {sets}"),
            });
        }
        self.set = set as u64;
        self.start()
    }

    /// From the next start on, carries only the first `bytes` of neighbour
    /// `index`'s send buffer (its whole length: the whole message again).
    /// The peer must expect as many ([`carry_recv`](Self::carry_recv)): a
    /// sender that sends more than its receiver expects is reported as
    /// [`ShmError::Mismatch`]. For a caller that exchanges a part of its
    /// data (some of its fields) through the same exchange.
    ///
    /// # Errors
    ///
    /// [`ShmError::NoSuchBuffer`] for an index that sends nothing;
    /// [`ShmError::CarryTooLong`] beyond the message's length;
    /// [`ShmError::InPlace`] for a message of runs in the lent sets
    /// (always whole); [`ShmError::State`] while an iteration is in flight.
    pub fn carry_send(&mut self, index: usize, bytes: usize) -> Result<()> {
        self.lifecycle.require_idle("carry_send")?;
        let op = op_of(&self.send_of, index, "send")?;
        let s = &mut self.sends[op];
        check_carried("send", index, bytes, s.buf.len, s.runs.is_some())?;
        s.carried = bytes;
        Ok(())
    }

    /// From the next start on, marks every message with `shape`, and
    /// refuses any that does not carry the same
    /// ([`ShmError::Mismatch`]). A caller that starts parts of its data
    /// (some fields, a depth) gives each part its own shape, so that ranks
    /// that start different parts of the same length are told instead of
    /// reading each other's bytes as their own. 0, the default, for the
    /// whole message.
    ///
    /// # Errors
    ///
    /// [`ShmError::State`] while an iteration is in flight.
    pub fn set_shape(&mut self, shape: u8) -> Result<()> {
        self.lifecycle.require_idle("set_shape")?;
        self.shape = shape;
        Ok(())
    }

    /// From the next start on, expects only the first `bytes` of neighbour
    /// `index`'s receive, as its sender carries
    /// ([`carry_send`](Self::carry_send)).
    ///
    /// # Errors
    ///
    /// As [`carry_send`](Self::carry_send), for a receive.
    pub fn carry_recv(&mut self, index: usize, bytes: usize) -> Result<()> {
        self.lifecycle.require_idle("carry_recv")?;
        let op = op_of(&self.recv_of, index, "receive")?;
        let r = &mut self.recvs[op];
        check_carried("receive", index, bytes, r.len, r.runs.is_some())?;
        r.carried = bytes;
        Ok(())
    }

    /// Starts an iteration: hands the receive buffers back to their senders
    /// (credits) and begins sending. Never blocks. Messages in place use
    /// the set of the last [`start_set`](Exchange::start_set) (set 0 at
    /// first).
    ///
    /// # Errors
    ///
    /// [`ShmError::State`] while an iteration is in flight or after a
    /// failure; [`ShmError::PeerDied`] or [`ShmError::Protocol`] when a
    /// peer died or broke the protocol.
    pub fn start(&mut self) -> Result<()> {
        self.lifecycle.require_idle("start")?;
        self.iteration += 1;
        self.receives_released = false;
        let n = self.iteration;
        for r in &mut self.recvs {
            r.state = OpState::Active;
            r.received = 0;
            r.get_from = None;
            if r.path == Path::Window {
                let credit = self
                    .own
                    .map
                    .atomic(r.entry + layout::R_FREE_FOR)
                    .map_err(|e| ShmError::Protocol {
                        peer: self.peers[r.peer].rank,
                        what: e.to_string(),
                    })?;
                // With two slots, iteration n + 1 may be written now, into
                // the slot that held iteration n - 1's data: the caller
                // consumed that before this start (iteration 1 was granted
                // at build). With one, iteration n, as its data is consumed.
                credit.store(layout::window_credit(r.len as u64, n), Ordering::Release);
                self.peers[r.peer].notify = true;
            }
        }
        for s in &mut self.sends {
            s.state = OpState::Active;
            s.sent = 0;
            s.pushed_any = false;
        }
        self.liveness.suspect = false;
        self.lifecycle.start();
        let sent = self
            .gather()
            .and_then(|_| self.progress_sends())
            .and_then(|_| self.ring_doorbells());
        if let Err(e) = sent {
            return Err(self.fail(e));
        }
        Ok(())
    }

    /// Waits until this iteration's messages have arrived and our send
    /// buffers are free again, or `deadline` (an instant, or a timeout from
    /// now) passes ([`ShmError::Timeout`],
    /// after which `wait` may be called again). A peer that dies is reported
    /// as [`ShmError::PeerDied`] as soon as it is noticed.
    ///
    /// # Errors
    ///
    /// [`ShmError::Timeout`] at the deadline; [`ShmError::PeerDied`];
    /// [`ShmError::Protocol`] when a peer broke the protocol;
    /// [`ShmError::State`] without an iteration in flight.
    pub fn wait(&mut self, deadline: impl Into<sode_job::Deadline>) -> Result<()> {
        self.lifecycle.require_in_flight("wait")?;
        let mut backoff = Backoff::exchange();
        // Time this process is stopped (a suspended job) does not count.
        let mut deadline = deadline.into();
        loop {
            let pass = if backoff.blocks() && self.parks {
                self.park_pass(deadline.at())
            } else {
                self.pass()
            };
            let pass = pass.map_err(|e| self.fail(e))?;
            if pass.complete {
                self.lifecycle.complete();
                return Ok(());
            }
            if pass.progressed {
                backoff.reset();
                continue;
            }
            if deadline.passed() {
                return Err(ShmError::Timeout {
                    exchange: self.name.clone(),
                    iteration: self.iteration,
                    pending: self.pending_description(),
                });
            }
            if !(backoff.blocks() && self.parks) {
                backoff.snooze();
            }
        }
    }

    /// [`test`](Exchange::test), but when the pass makes no progress it
    /// sleeps until a peer signals this process (a futex in its segment)
    /// or `until` passes — at most 2 ms at a time, so a dead peer is still
    /// noticed. For callers that progress several channels and have only
    /// this one left to wait for. Returns whether the iteration is
    /// complete. An exchange built while the wait policy was not `block`
    /// ([`parks`](Exchange::parks) false) is never woken: it only passes.
    ///
    /// # Errors
    ///
    /// As [`test`](Self::test).
    pub fn park(&mut self, until: Instant) -> Result<bool> {
        if !self.parks {
            return self.test();
        }
        self.lifecycle.require_in_flight("park")?;
        let pass = self.park_pass(until).map_err(|e| self.fail(e))?;
        if pass.complete {
            self.lifecycle.complete();
        }
        Ok(pass.complete)
    }

    /// Whether [`park`](Exchange::park) sleeps: the wait policy was
    /// `block` (`SODE_WAIT=block`) when the exchange was built, so its
    /// peers ring its doorbell.
    pub fn parks(&self) -> bool {
        self.parks
    }

    /// A pass with our doorbell armed, then a sleep on it if nothing moved.
    ///
    /// Ordering: we count ourselves a sleeper and fence before the pass
    /// reads the peers' data; a peer publishes its data and fences before
    /// it reads our sleeper count (`ring_doorbells`). So either our pass
    /// sees its data or it sees us asleep and rings, and the doorbell value
    /// read before the pass makes the futex return at once if it rang
    /// since.
    fn park_pass(&mut self, until: Instant) -> Result<Pass> {
        let own = |e: crate::sys::shared::OutOfBounds| ShmError::Io {
            what: "reading our own segment's doorbell".into(),
            source: std::io::Error::other(e.to_string()),
        };
        self.own
            .map
            .atomic(layout::H_SLEEPERS)
            .map_err(own)?
            .fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let seen = self
            .own
            .map
            .atomic(layout::H_DOORBELL)
            .map_err(own)?
            .load(Ordering::Acquire);
        let pass = self.pass();
        if let Ok(Pass {
            progressed: false,
            complete: false,
        }) = pass
        {
            let nap = until
                .saturating_duration_since(Instant::now())
                .min(super::LIVENESS_PERIOD);
            if !nap.is_zero() {
                let bell = self.own.map.atomic(layout::H_DOORBELL).map_err(own)?;
                crate::sys::futex::wait(bell, seen, nap).map_err(|e| ShmError::Io {
                    what: "sleeping on our doorbell".into(),
                    source: e,
                })?;
            }
        }
        self.own
            .map
            .atomic(layout::H_SLEEPERS)
            .map_err(own)?
            .fetch_sub(1, Ordering::SeqCst);
        pass
    }

    /// Wakes each peer that something happened for since its last check
    /// and that sleeps on its doorbell: a fence and a read of a line the
    /// peer rarely writes, a system call only when it sleeps.
    fn ring_doorbells(&mut self) -> Result<()> {
        if !self.peers.iter().any(|p| p.notify && p.sleeps) {
            return Ok(());
        }
        // Pairs with the fence in `park_pass`.
        fence(Ordering::SeqCst);
        for p in &mut self.peers {
            if !std::mem::take(&mut p.notify) || !p.sleeps {
                continue;
            }
            let rank = p.rank;
            let protocol = move |e: crate::sys::shared::OutOfBounds| ShmError::Protocol {
                peer: rank,
                what: e.to_string(),
            };
            if p.map
                .atomic(layout::H_SLEEPERS)
                .map_err(protocol)?
                .load(Ordering::Relaxed)
                == 0
            {
                continue;
            }
            let bell = p.map.atomic(layout::H_DOORBELL).map_err(protocol)?;
            bell.fetch_add(1, Ordering::Release);
            crate::sys::futex::wake(bell).map_err(|e| ShmError::Io {
                what: format!("waking rank {rank}"),
                source: e,
            })?;
        }
        Ok(())
    }

    /// One non-blocking pass of [`wait`](Exchange::wait): moves every
    /// message as far as it can go and returns whether the iteration is
    /// complete (then it is no longer in flight). For progressing several
    /// channels at once; allocates nothing and makes no system call unless
    /// a get path copies or a peer check is due (every 2 ms).
    ///
    /// # Errors
    ///
    /// As [`wait`](Self::wait), but never [`ShmError::Timeout`].
    pub fn test(&mut self) -> Result<bool> {
        self.lifecycle.require_in_flight("test")?;
        let pass = self.pass().map_err(|e| self.fail(e))?;
        if pass.complete {
            self.lifecycle.complete();
        }
        Ok(pass.complete)
    }

    /// What is still outstanding, for callers that progress with
    /// [`test`](Exchange::test) and report their own timeout.
    pub fn outstanding_report(&self) -> String {
        self.pending_description()
    }

    /// `wait` with a deadline `timeout` from now.
    ///
    /// # Errors
    ///
    /// As [`wait`](Self::wait).
    pub fn wait_for(&mut self, timeout: Duration) -> Result<()> {
        self.wait(Instant::now() + timeout)
    }

    /// Whether an earlier error failed the exchange.
    pub fn failed(&self) -> bool {
        self.lifecycle.is_failed()
    }

    fn fail(&mut self, e: ShmError) -> ShmError {
        self.lifecycle.fail(&e);
        e
    }

    fn complete(&self) -> bool {
        self.sends.iter().all(|s| s.state == OpState::Done)
            && self.recvs.iter().all(|r| r.state == OpState::Done)
            && self.peers.iter().all(|p| p.outbox.is_empty())
    }

    fn peer_pending(&self, p: usize) -> bool {
        self.sends
            .iter()
            .any(|s| s.peer == p && s.state != OpState::Done)
            || self
                .recvs
                .iter()
                .any(|r| r.peer == p && r.state != OpState::Done)
            || !self.peers[p].outbox.is_empty()
    }

    /// One pass over every message, then the peers' liveness when due.
    fn pass(&mut self) -> Result<Pass> {
        let mut progressed = self.flush_outboxes()?;
        progressed |= self.progress_sends()?;
        progressed |= self.drain_rings()?;
        progressed |= self.progress_gets()?;
        progressed |= self.check_windows()?;
        self.ring_doorbells()?;
        let complete = self.complete();
        if complete {
            self.scatter()?;
        }
        if !complete && !progressed {
            self.check_liveness()?;
        }
        Ok(Pass {
            progressed,
            complete,
        })
    }

    /// A peer with work outstanding whose process exited is dead, and one
    /// that freed its side of the exchange gone, once a further full pass
    /// did not finish that work (what it wrote before is read first).
    fn check_liveness(&mut self) -> Result<()> {
        let now = Instant::now();
        if !self.liveness.suspect && now < self.liveness.next_check {
            return Ok(());
        }
        self.liveness.next_check = now + super::LIVENESS_PERIOD;
        self.liveness.watch.poll().map_err(|e| ShmError::Io {
            what: "polling peer processes".into(),
            source: e,
        })?;
        let gone = (0..self.peers.len()).find(|&p| {
            (self.liveness.watch.exited(p) || self.peer_left(p)) && self.peer_pending(p)
        });
        let Some(p) = gone else {
            self.liveness.suspect = false;
            return Ok(());
        };
        if !self.liveness.suspect {
            self.liveness.suspect = true;
            return Ok(());
        }
        let (peer, pid) = (self.peers[p].rank, self.peers[p].pid);
        let during = format!(
            "during iteration {} of exchange {} (outstanding: {})",
            self.iteration,
            self.name,
            self.pending_description()
        );
        if self.liveness.watch.exited(p) {
            self.own.job_failed();
            Err(ShmError::PeerDied { peer, pid, during })
        } else {
            Err(ShmError::PeerLeft { peer, during })
        }
    }

    /// Whether peer `p` has freed its side of the exchange
    /// ([`layout::H_LEFT`]).
    fn peer_left(&self, p: usize) -> bool {
        self.peers[p]
            .map
            .atomic(layout::H_LEFT)
            .is_ok_and(|w| w.load(Ordering::Acquire) != 0)
    }

    /// Tells the peers that this process let go of the exchange, and wakes
    /// those asleep on their doorbells to see it.
    pub(super) fn leave(&mut self) {
        if let Ok(w) = self.own.map.atomic(layout::H_LEFT) {
            w.store(1, Ordering::Release);
        }
        for p in &mut self.peers {
            p.notify = true;
        }
        let _ = self.ring_doorbells();
    }

    fn pending_description(&self) -> String {
        let mut out = Vec::new();
        for s in &self.sends {
            if s.state != OpState::Done {
                let what = match (s.path, s.state) {
                    (Path::Window, _) => "waiting for the receiver's credit",
                    (Path::Get, OpState::AwaitingDone) => "waiting for receive_done",
                    _ => "waiting for ring space",
                };
                out.push(format!(
                    "send tag {} to rank {} ({}, {what})",
                    s.tag,
                    self.peers[s.peer].rank,
                    s.path.name()
                ));
            }
        }
        for r in &self.recvs {
            if r.state != OpState::Done {
                out.push(format!(
                    "receive tag {} from rank {} ({}, {}/{} bytes)",
                    r.tag,
                    self.peers[r.peer].rank,
                    r.path.name(),
                    r.received,
                    r.len
                ));
            }
        }
        for p in &self.peers {
            if !p.outbox.is_empty() {
                out.push(format!(
                    "{} control records to rank {}",
                    p.outbox.len(),
                    p.rank
                ));
            }
        }
        out.join("; ")
    }

    /// Our lent set this iteration exchanges: where it starts.
    fn set_at(&self) -> Result<u64> {
        self.lent
            .map(|l| l.set_at(self.set))
            .ok_or_else(|| ShmError::InPlace {
                op: "start",
                why: "a message has runs, but the exchange lends no sets".into(),
            })
    }

    /// Sends with runs on a packed path: their runs of this iteration's
    /// set, gathered into their buffers.
    fn gather(&mut self) -> Result<()> {
        for s in &self.sends {
            let Some(runs) = s.runs.as_ref().filter(|_| s.path != Path::Read) else {
                continue;
            };
            let set = self.set_at()?;
            self.own
                .map
                .copy_runs_within(set, runs, s.buf.offset, true)
                .map_err(|e| own_error("gathering a send from the lent set", e))?;
        }
        Ok(())
    }

    /// Receives with runs on a packed path, all arrived: scattered from
    /// their buffers into their runs of this iteration's set.
    fn scatter(&mut self) -> Result<()> {
        for r in &self.recvs {
            let Some(runs) = r.runs.as_ref().filter(|_| r.path != Path::Read) else {
                continue;
            };
            let set = self.set_at()?;
            let copied = match &r.storage {
                Storage::Private(b) => self.own.map.scatter(b.as_ref(), set, runs),
                Storage::Window(w) => {
                    let slot = layout::window_slot(*w, r.len as u64, self.iteration);
                    self.own.map.copy_runs_within(set, runs, slot, false)
                }
                Storage::InPlace => Ok(()),
            };
            copied.map_err(|e| own_error("scattering a receive into the lent set", e))?;
        }
        Ok(())
    }

    fn flush_outboxes(&mut self) -> Result<bool> {
        let mut progress = false;
        for p in &mut self.peers {
            while let Some(rec) = p.outbox.front() {
                let ok =
                    p.tx.try_push(&p.map, rec, &[])
                        .map_err(|e| ShmError::Protocol {
                            peer: p.rank,
                            what: e.0,
                        })?;
                if !ok {
                    break;
                }
                p.outbox.pop_front();
                p.notify = true;
                progress = true;
            }
        }
        Ok(progress)
    }

    fn progress_sends(&mut self) -> Result<bool> {
        let n = self.iteration;
        let mut progress = false;
        for s in &mut self.sends {
            if s.state != OpState::Active {
                continue;
            }
            let link = &mut self.peers[s.peer];
            let protocol = |what: String| ShmError::Protocol {
                peer: link.rank,
                what,
            };
            match s.path {
                Path::Eager => {
                    let data = own_bytes(&self.own.map, s.carried_range())?;
                    progress |= push_eager(s, link, data, n, self.shape)?;
                }
                Path::Get | Path::Read => {
                    // In place, the request names the set we exchange.
                    let at = if s.path == Path::Read {
                        self.set
                    } else {
                        s.buf.offset
                    };
                    let rec = Record {
                        kind: RecordKind::ReceiveRequest,
                        tag: s.tag,
                        seq: n,
                        at,
                        len: s.carried as u64,
                        shape: self.shape,
                    };
                    if link
                        .tx
                        .try_push(&link.map, &rec, &[])
                        .map_err(|e| protocol(e.0))?
                    {
                        s.state = OpState::AwaitingDone;
                        link.notify = true;
                        progress = true;
                    }
                }
                Path::Window => {
                    let (window, entry) =
                        s.window.ok_or_else(|| protocol("window missing".into()))?;
                    let free = link
                        .map
                        .atomic(entry + layout::R_FREE_FOR)
                        .map_err(|e| protocol(e.to_string()))?
                        .load(Ordering::Acquire);
                    // The receiver grants at most one slot ahead: a credit
                    // further ahead means the ranks are out of step.
                    if free > layout::window_credit(s.buf.len as u64, n) {
                        return Err(protocol(format!(
                            "credit for iteration {free} while we are at {n}"
                        )));
                    }
                    if free >= n {
                        let carried = s.carried;
                        // Packed there already by the caller, or copied now.
                        if s.packed_in_window == Some(n) {
                            self.packed_in_window += 1;
                        } else {
                            let data = own_bytes(&self.own.map, s.carried_range())?;
                            // Slots are laid out by the whole message's length.
                            let slot = layout::window_slot(window, s.buf.len as u64, n);
                            link.map
                                .write(slot, data)
                                .map_err(|e| protocol(e.to_string()))?;
                        }
                        // Published by the notice's release below.
                        link.map
                            .atomic(layout::window_carried(entry, s.buf.len as u64, n))
                            .map_err(|e| protocol(e.to_string()))?
                            .store(
                                layout::carried_word(carried as u64, self.shape),
                                Ordering::Relaxed,
                            );
                        link.map
                            .atomic(entry + layout::R_ARRIVED)
                            .map_err(|e| protocol(e.to_string()))?
                            .store(n, Ordering::Release);
                        s.state = OpState::Done;
                        link.notify = true;
                        progress = true;
                    }
                }
            }
        }
        Ok(progress)
    }

    fn drain_rings(&mut self) -> Result<bool> {
        let mut progress = false;
        for pi in 0..self.peers.len() {
            while self.take_record(pi)? {
                progress = true;
            }
        }
        Ok(progress)
    }

    /// Handles the next record from peer `pi`, if one is due in this
    /// iteration; whether one was.
    fn take_record(&mut self, pi: usize) -> Result<bool> {
        let n = self.iteration;
        let rank = self.peers[pi].rank;
        let protocol = |what: String| ShmError::Protocol { peer: rank, what };
        let peeked = self.peers[pi]
            .rx
            .peek(&self.own.map)
            .map_err(|e| protocol(e.0))?;
        let Some(p) = peeked else { return Ok(false) };
        let rec = p.record;
        if rec.seq == n + 1 && rec.kind != RecordKind::ReceiveDone {
            // The peer is already one iteration ahead; this waits for our
            // next start.
            return Ok(false);
        }
        if rec.seq != n {
            return Err(protocol(format!(
                "{:?} record for iteration {} while we are at {n}",
                rec.kind, rec.seq
            )));
        }
        match rec.kind {
            RecordKind::Eager | RecordKind::EagerLast => self.on_eager(pi, &rec, p.payload_at)?,
            RecordKind::ReceiveRequest => self.on_receive_request(pi, &rec)?,
            RecordKind::ReceiveDone => self.on_receive_done(pi, &rec)?,
            RecordKind::Wrap => return Err(protocol("stray wrap record".into())),
        }
        self.peers[pi]
            .rx
            .consume(&self.own.map, &p)
            .map_err(|e| protocol(e.0))?;
        // Ring space: the peer may be waiting for it.
        self.peers[pi].notify = true;
        Ok(true)
    }

    /// An eager fragment: copied out of the ring into its receive buffer.
    fn on_eager(&mut self, pi: usize, rec: &Record, payload_at: u64) -> Result<()> {
        let rank = self.peers[pi].rank;
        let protocol = |what: String| ShmError::Protocol { peer: rank, what };
        let k = op_for(&self.recv_index, pi, rec, rank, "eager data")?;
        let r = &mut self.recvs[k];
        let (off, len) = (rec.at, rec.len);
        if r.path != Path::Eager || r.state != OpState::Active {
            return Err(protocol(format!(
                "eager data for tag {} which is {} and {:?}",
                rec.tag,
                r.path.name(),
                r.state
            )));
        }
        check_shape(rank, rec.tag, rec.shape, self.shape)?;
        let Some(end) = off.checked_add(len).filter(|&e| e <= r.len as u64) else {
            return Err(protocol(format!(
                "eager fragment {off}+{len} outside the {}-byte message of tag {}",
                r.len, rec.tag
            )));
        };
        if end > r.carried as u64 {
            return Err(ShmError::Mismatch {
                peer: rank,
                tag: rec.tag,
                why: format!(
                    "at least {end} bytes sent, this rank expects {} this iteration",
                    r.carried
                ),
            });
        }
        if r.received as u64 + len > r.carried as u64 {
            return Err(protocol(format!(
                "more eager bytes than the message holds (tag {})",
                rec.tag
            )));
        }
        let Storage::Private(buf) = &mut r.storage else {
            return Err(protocol("eager receive without a private buffer".into()));
        };
        self.own
            .map
            .read(payload_at, &mut buf.as_mut()[off as usize..end as usize])
            .map_err(|e| protocol(e.to_string()))?;
        r.received += len as usize;
        if rec.kind == RecordKind::EagerLast && r.received != r.carried {
            return Err(ShmError::Mismatch {
                peer: rank,
                tag: rec.tag,
                why: format!(
                    "{} bytes sent, this rank expects {} this iteration",
                    r.received, r.carried
                ),
            });
        }
        if r.received == r.carried {
            r.state = OpState::Done;
        }
        Ok(())
    }

    /// A receive_request: where to get the message from.
    fn on_receive_request(&mut self, pi: usize, rec: &Record) -> Result<()> {
        let rank = self.peers[pi].rank;
        let protocol = |what: String| ShmError::Protocol { peer: rank, what };
        let k = op_for(&self.recv_index, pi, rec, rank, "receive_request")?;
        let r = &mut self.recvs[k];
        let path_ok = matches!(r.path, Path::Get | Path::Read);
        if !path_ok || r.state != OpState::Active || r.get_from.is_some() {
            return Err(protocol(format!(
                "unexpected receive_request for tag {}",
                rec.tag
            )));
        }
        if r.path == Path::Read {
            let sets = self.peers[pi].lent.map_or(0, |l| l.sets);
            if rec.at >= sets {
                return Err(protocol(format!(
                    "receive_request for tag {} names set {} of its {sets}",
                    rec.tag, rec.at
                )));
            }
        } else if rec.at != r.their_buffer {
            return Err(protocol(format!(
                "receive_request for tag {} names offset {:#x}; its send table says {:#x}",
                rec.tag, rec.at, r.their_buffer
            )));
        }
        check_shape(rank, rec.tag, rec.shape, self.shape)?;
        if rec.len != r.carried as u64 {
            return Err(ShmError::Mismatch {
                peer: rank,
                tag: rec.tag,
                why: format!(
                    "receive_request of {} bytes, we expect {}",
                    rec.len, r.carried
                ),
            });
        }
        r.get_from = Some(rec.at);
        Ok(())
    }

    /// A receive_done: the receiver has copied our buffer.
    fn on_receive_done(&mut self, pi: usize, rec: &Record) -> Result<()> {
        let rank = self.peers[pi].rank;
        let protocol = |what: String| ShmError::Protocol { peer: rank, what };
        let k = op_for(&self.send_index, pi, rec, rank, "receive_done")?;
        let s = &mut self.sends[k];
        if !matches!(s.path, Path::Get | Path::Read) || s.state != OpState::AwaitingDone {
            return Err(protocol(format!(
                "unexpected receive_done for tag {}",
                rec.tag
            )));
        }
        s.state = OpState::Done;
        Ok(())
    }

    fn progress_gets(&mut self) -> Result<bool> {
        let n = self.iteration;
        let mut progress = false;
        for r in &mut self.recvs {
            let Some(addr) = r.get_from else { continue };
            if r.state != OpState::Active {
                continue;
            }
            let link = &mut self.peers[r.peer];
            if r.path == Path::Read && r.received < r.len {
                copy_in_place(&mut self.own.map, self.lent, self.set, link, r, addr)?;
                progress = true;
            }
            if r.received < r.carried {
                let chunk = (r.carried - r.received).min(self.get_chunk);
                let Storage::Private(buf) = &mut r.storage else {
                    return Err(ShmError::Protocol {
                        peer: link.rank,
                        what: "get receive without a private buffer".into(),
                    });
                };
                let dst = &mut buf.as_mut()[r.received..r.received + chunk];
                // Out of the sender's segment, mapped here since build: the
                // mapping's bounds check is the only trust needed.
                link.map
                    .read(addr + r.received as u64, dst)
                    .map_err(|e| ShmError::Protocol {
                        peer: link.rank,
                        what: format!(
                            "tag {}: its receive_request names bytes outside its segment ({e})",
                            r.tag
                        ),
                    })?;
                r.received += chunk;
                progress = true;
            }
            if r.received == r.carried {
                r.state = OpState::Done;
                link.outbox.push_back(Record {
                    kind: RecordKind::ReceiveDone,
                    tag: r.tag,
                    seq: n,
                    at: 0,
                    len: 0,
                    shape: 0,
                });
                progress = true;
            }
        }
        Ok(progress)
    }

    fn check_windows(&mut self) -> Result<bool> {
        let n = self.iteration;
        let mut progress = false;
        for r in &mut self.recvs {
            if r.path != Path::Window || r.state != OpState::Active {
                continue;
            }
            let rank = self.peers[r.peer].rank;
            let arrived = self
                .own
                .map
                .atomic(r.entry + layout::R_ARRIVED)
                .map_err(|e| ShmError::Protocol {
                    peer: rank,
                    what: e.to_string(),
                })?
                .load(Ordering::Acquire);
            // With two slots the writer may be one iteration ahead (its
            // data in the other slot); its iterations land in order, so
            // arrived >= n means iteration n's data is in place.
            if arrived > layout::window_credit(r.len as u64, n) {
                return Err(ShmError::Protocol {
                    peer: rank,
                    what: format!(
                        "window of tag {} marked for iteration {arrived} while we are at {n}",
                        r.tag
                    ),
                });
            }
            if arrived >= n {
                let word = self
                    .own
                    .map
                    .atomic(layout::window_carried(r.entry, r.len as u64, n))
                    .map_err(|e| ShmError::Protocol {
                        peer: rank,
                        what: e.to_string(),
                    })?
                    .load(Ordering::Relaxed);
                let (carried, shape) = layout::carried_of(word);
                check_shape(rank, r.tag, shape, self.shape)?;
                if carried != r.carried as u64 {
                    return Err(ShmError::Mismatch {
                        peer: rank,
                        tag: r.tag,
                        why: format!(
                            "{carried} bytes sent, this rank expects {} this iteration",
                            r.carried
                        ),
                    });
                }
                r.state = OpState::Done;
                progress = true;
            }
        }
        Ok(progress)
    }
}
