//! The layout of a process's segment: a header, a peer table (one inbound
//! ring per peer), a receive table (one control block per message this
//! process receives), a send table (what it sends, and where its buffer
//! lies), the rings, the receive windows, the send buffers and the lent
//! sets (fields the caller keeps in the segment, read in place by peers).
//!
//! The send buffers live in the segment, which every peer maps, so the get
//! path is a plain copy out of the sender's mapping: no cross-memory attach,
//! no page pinning per call, no ptrace permission.
//!
//! The owner writes the tables before publishing the segment; peers read
//! them through [`SharedMap`]'s bounds checks and validate every offset.

use crate::exchange::Run;
use crate::ring::{RingLayout, RECORD_HEADER, RING_HEADER};
use crate::sys::shared::SharedMap;

pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"SODESHM1");
/// 2: windows of two slots (credits a step ahead); 3: the doorbell; 4: send
/// buffers in the segment; 5: lent sets and messages read in place; 6:
/// carried lengths; 7: the start's shape in records and carried words; 8:
/// rings sized to their peer's messages, from one page with the header; 9:
/// the owner's word that it let go of the exchange.
pub(crate) const VERSION: u64 = 9;

pub(crate) const H_MAGIC: u64 = 0;
pub(crate) const H_VERSION: u64 = 8;
pub(crate) const H_STATE: u64 = 16;
pub(crate) const H_PID: u64 = 24;
pub(crate) const H_RANK: u64 = 32;
pub(crate) const H_MAPPED: u64 = 40;
pub(crate) const H_TOTAL: u64 = 64;
pub(crate) const H_N_PEERS: u64 = 72;
pub(crate) const H_PEERS: u64 = 80;
pub(crate) const H_N_RECV: u64 = 88;
pub(crate) const H_RECV: u64 = 96;
pub(crate) const H_N_SEND: u64 = 104;
pub(crate) const H_SEND: u64 = 112;
/// How many of the owner's waits sleep on its doorbell (a line of its own,
/// away from the fields peers only read).
pub(crate) const H_SLEEPERS: u64 = 128;
/// The owner's doorbell: peers bump it and wake the owner (a futex on its
/// low 32 bits) after an event, when it has sleepers.
pub(crate) const H_DOORBELL: u64 = 136;
/// 1 when the owner may sleep on its doorbell (its wait policy is
/// `block`): only then do peers pay a fence to check for sleepers.
pub(crate) const H_BLOCKS: u64 = 144;
/// Where the lent sets start, how many there are, and the bytes of each
/// (all 0 when nothing is lent).
pub(crate) const H_LENT: u64 = 152;
pub(crate) const H_LENT_SETS: u64 = 160;
pub(crate) const H_LENT_SET_LEN: u64 = 168;
/// 1 once the owner has let go of its side of the exchange (freed it): a
/// peer still waiting for it is told, where the owner's process may live
/// on for long after (its process handle says nothing).
pub(crate) const H_LEFT: u64 = 176;
pub(crate) const HEADER_LEN: u64 = 256;

/// Segment states, in order.
pub(crate) const STATE_LAYOUT: u64 = 1;
pub(crate) const STATE_PATHS: u64 = 2;

pub(crate) const PEER_ENTRY: u64 = 32;
pub(crate) const RECV_ENTRY: u64 = 192;
pub(crate) const SEND_ENTRY: u64 = 48;
/// Offsets inside a send entry.
const S_TO: u64 = 0;
const S_TAG: u64 = 8;
const S_LEN: u64 = 16;
const S_BUFFER: u64 = 24;
/// A send from the lent sets: where its runs are listed, and how many (0:
/// it is packed by the caller).
const S_RUNS: u64 = 32;
const S_N_RUNS: u64 = 40;
/// A run in a run table: offset in the set, then length.
const RUN_ENTRY: u64 = 16;

/// Offsets inside a receive entry.
pub(crate) const R_FROM: u64 = 0;
pub(crate) const R_TAG: u64 = 8;
pub(crate) const R_LEN: u64 = 16;
pub(crate) const R_PATH: u64 = 24;
pub(crate) const R_WINDOW: u64 = 32;
/// 1 when the owner receives the message in place (into its lent sets).
pub(crate) const R_IN_PLACE: u64 = 40;
/// The owner's credit: the last iteration the window may be written for.
pub(crate) const R_FREE_FOR: u64 = 64;
/// The writer's notice: the last iteration whose data is in the window.
pub(crate) const R_ARRIVED: u64 = 128;
/// The writer's bytes in each slot (slot `k` at `R_CARRIED + 8 * k`),
/// stored before its notice: the owner checks them against what it
/// expects, so ends that disagree about a message's length are told, not
/// read as stale bytes. Its top byte holds the writer's start shape
/// ([`carried_word`]).
pub(crate) const R_CARRIED: u64 = 136;

/// Where a carried word keeps the writer's start shape.
const CARRIED_SHAPE_SHIFT: u32 = 56;

/// What a window's carried word for `len` bytes of a start of `shape`
/// holds (a window is far shorter than 2^56 bytes).
pub(crate) fn carried_word(len: u64, shape: u8) -> u64 {
    len | u64::from(shape) << CARRIED_SHAPE_SHIFT
}

/// A carried word's bytes and shape ([`carried_word`]).
pub(crate) fn carried_of(word: u64) -> (u64, u8) {
    let len = word & ((1 << CARRIED_SHAPE_SHIFT) - 1);
    (len, (word >> CARRIED_SHAPE_SHIFT) as u8)
}

fn align(n: u64, to: u64) -> u64 {
    n.div_ceil(to) * to
}

/// The smallest ring: with its header, one page; its quarter carries a
/// fragment of 960 bytes.
pub(crate) const RING_MIN: u64 = PAGE - RING_HEADER;

const PAGE: u64 = 4096;

/// Bytes of the ring in which `peer` writes to this process: room for two
/// iterations of every record it may write there (each of its messages to
/// us eager, whatever path it takes, and a receive_done for each of ours
/// to it) and for its largest message in one record (a quarter of the
/// ring), with its header in whole pages, from [`RING_MIN`] to `most`. A
/// larger message still travels, in fragments. An exchange of small
/// faces thus keeps a page a peer, not `most` (64 KiB by default): a code
/// holding a hundred exchanges to 26 neighbours would fault in 183 MiB of
/// rings a rank at 64 KiB (72 KiB with the header, in whole pages), and
/// holds 10 MiB.
pub(crate) fn ring_capacity(peer: usize, recvs: &[RecvSpec], sends: &[SendSpec], most: u64) -> u64 {
    let mut iteration = 0u64;
    let mut largest = 0u64;
    for r in recvs.iter().filter(|r| r.from == peer) {
        let record = RECORD_HEADER.saturating_add(r.len.saturating_add(7) & !7);
        iteration = iteration.saturating_add(record);
        largest = largest.max(record);
    }
    let receipts = sends.iter().filter(|s| s.to == peer).count() as u64;
    iteration = iteration.saturating_add(RECORD_HEADER.saturating_mul(receipts));
    let need = iteration.saturating_mul(2).max(largest.saturating_mul(4));
    let pages = need.saturating_add(RING_HEADER).div_ceil(PAGE);
    (pages.saturating_mul(PAGE) - RING_HEADER).clamp(RING_MIN, most.max(RING_MIN))
}

/// Largest window with two slots. A window of two slots, iteration `n`
/// using slot `n % 2`, lets the owner grant iteration `n + 1` while it
/// still reads iteration `n`'s data: the credit is off the critical path
/// (see `exchange::run`). Above this size the second slot costs more in
/// cache than the credit saves (measured with `examples/shm_paths`: a
/// 1 MiB stream fell from 0.95-0.99x to 0.71-0.73x memcpy with two slots,
/// while 4 KiB rose from 0.22 to 0.37x), so larger windows keep one slot
/// and the credit of the iteration itself.
pub(crate) const TWO_SLOTS_MAX: u64 = 128 << 10;

/// Slots of a window of `len` bytes: 2 up to [`TWO_SLOTS_MAX`], else 1.
pub(crate) fn window_slots(len: u64) -> u64 {
    if len <= TWO_SLOTS_MAX {
        2
    } else {
        1
    }
}

/// Bytes from one slot of a window of `len` bytes to the next.
pub(crate) fn window_stride(len: u64) -> u64 {
    align(len.max(1), 64)
}

/// Where iteration `n`'s data lies in the window at `window`.
pub(crate) fn window_slot(window: u64, len: u64, n: u64) -> u64 {
    window + (n % window_slots(len)) * window_stride(len)
}

/// Where the writer leaves the bytes it carried for iteration `n` in the
/// receive entry at `entry` of a window of `len` bytes.
pub(crate) fn window_carried(entry: u64, len: u64, n: u64) -> u64 {
    entry + R_CARRIED + 8 * (n % window_slots(len))
}

/// The last iteration a writer may write for while the owner is in
/// iteration `n` (or, for `n = 0`, before its first start): `n + 1` with
/// two slots, `n` with one.
pub(crate) fn window_credit(len: u64, n: u64) -> u64 {
    n + window_slots(len) - 1
}

/// One message this process receives.
#[derive(Debug, Clone)]
pub(crate) struct RecvSlot {
    pub(crate) from: usize,
    pub(crate) tag: u32,
    pub(crate) len: u64,
    pub(crate) window: Option<u64>,
    pub(crate) entry: u64,
    pub(crate) in_place: bool,
}

/// A message this process will receive, as the layout needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecvSpec {
    pub(crate) from: usize,
    pub(crate) tag: u32,
    pub(crate) len: u64,
    /// Whether it lands in a window of the segment.
    pub(crate) window: bool,
    /// Whether it is received into runs of the lent sets (read there in
    /// place, or scattered there from a packed path).
    pub(crate) in_place: bool,
    /// Bytes past a cache-line boundary the window starts.
    pub(crate) misalign: u64,
}

/// A message this process will send.
#[derive(Debug, Clone)]
pub(crate) struct SendSpec {
    pub(crate) to: usize,
    pub(crate) tag: u32,
    pub(crate) len: u64,
    /// Bytes past a page boundary the buffer starts.
    pub(crate) misalign: u64,
    /// Its runs in the lent sets: read there in place by the receiver, or
    /// gathered into the buffer at start.
    pub(crate) runs: Option<Vec<Run>>,
}

/// A message this process sends, placed: its buffer's offset, and its run
/// table's.
#[derive(Debug, Clone)]
pub(crate) struct SendSlot {
    pub(crate) to: usize,
    pub(crate) tag: u32,
    pub(crate) len: u64,
    pub(crate) buffer: u64,
    pub(crate) runs: Option<(u64, Vec<Run>)>,
}

/// The lent sets of a segment: `sets` arrays of `set_len` bytes each from
/// `offset`, which the owner reads and writes as its fields and peers read
/// in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lent {
    pub(crate) offset: u64,
    pub(crate) sets: u64,
    pub(crate) set_len: u64,
}

impl Lent {
    /// Where set `set` starts.
    pub(crate) fn set_at(&self, set: u64) -> u64 {
        self.offset + set * self.set_len
    }
}

/// A peer's receive entry for a message from us.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TheirRecv {
    pub(crate) tag: u32,
    pub(crate) len: u64,
    /// Offset of the entry in the peer's segment.
    pub(crate) entry: u64,
    /// Offset of its window, if it has one.
    pub(crate) window: Option<u64>,
    /// Whether it receives in place.
    pub(crate) in_place: bool,
}

/// A peer's send to us.
#[derive(Debug, Clone)]
pub(crate) struct TheirSend {
    pub(crate) tag: u32,
    pub(crate) len: u64,
    /// Offset of its buffer in the peer's segment (checked to lie inside).
    pub(crate) buffer: u64,
    /// From the lent sets: its runs in each of the peer's sets (checked to
    /// lie inside a set and to cover `len`).
    pub(crate) runs: Option<Vec<Run>>,
}

/// Offsets of everything in a segment about to be created.
#[derive(Debug, Clone)]
pub(crate) struct SegmentLayout {
    pub(crate) total: u64,
    pub(crate) peers: Vec<(usize, RingLayout)>,
    pub(crate) recvs: Vec<RecvSlot>,
    pub(crate) sends: Vec<SendSlot>,
    pub(crate) lent: Option<Lent>,
    peers_off: u64,
    recv_off: u64,
    send_off: u64,
}

impl SegmentLayout {
    /// Places everything; `lent` is the lent sets' count and bytes each,
    /// `ring_max` the largest inbound ring (see [`ring_capacity`]).
    /// The caller has checked that the sizes fit in memory.
    pub(crate) fn plan(
        peers: &[usize],
        ring_max: u64,
        recvs: &[RecvSpec],
        sends: &[SendSpec],
        lent: Option<(u64, u64)>,
    ) -> SegmentLayout {
        let peers_off = HEADER_LEN;
        let recv_off = align(peers_off + PEER_ENTRY * peers.len() as u64, 64);
        let send_off = recv_off + RECV_ENTRY * recvs.len() as u64;
        let mut at = send_off + SEND_ENTRY * sends.len() as u64;
        let mut run_tables = Vec::with_capacity(sends.len());
        for s in sends {
            run_tables.push(s.runs.as_ref().map(|r| {
                let table = at;
                at += RUN_ENTRY * r.len() as u64;
                (table, r.clone())
            }));
        }
        at = align(at, 4096);
        let mut rings = Vec::new();
        for &p in peers {
            let capacity = ring_capacity(p, recvs, sends, ring_max);
            rings.push((p, RingLayout { base: at, capacity }));
            at = align(at + RingLayout::footprint(capacity), 4096);
        }
        let mut slots = Vec::new();
        for (i, r) in recvs.iter().enumerate() {
            let window = if r.window {
                let w = at + r.misalign;
                at = align(w + window_slots(r.len) * window_stride(r.len), 64);
                Some(w)
            } else {
                None
            };
            slots.push(RecvSlot {
                from: r.from,
                tag: r.tag,
                len: r.len,
                window,
                entry: recv_off + RECV_ENTRY * i as u64,
                in_place: r.in_place,
            });
        }
        let mut placed = Vec::with_capacity(sends.len());
        for (s, runs) in sends.iter().zip(run_tables) {
            // A send with runs keeps its buffer too: the receiver may take
            // it on a packed path, gathered from the runs at start.
            let buffer = align(at, 4096) + s.misalign;
            at = buffer + s.len;
            placed.push(SendSlot {
                to: s.to,
                tag: s.tag,
                len: s.len,
                buffer,
                runs,
            });
        }
        let lent = lent.map(|(sets, set_len)| {
            let offset = align(at, 4096);
            at = offset + sets * set_len;
            Lent {
                offset,
                sets,
                set_len,
            }
        });
        SegmentLayout {
            total: align(at, 4096),
            peers: rings,
            recvs: slots,
            sends: placed,
            lent,
            peers_off,
            recv_off,
            send_off,
        }
    }

    /// Writes header and tables (state stays 0 until published).
    pub(crate) fn write(
        &self,
        map: &SharedMap,
        rank: usize,
        blocks: bool,
    ) -> Result<(), crate::sys::shared::OutOfBounds> {
        let w = |off: u64, v: u64| map.write_u64(off, v);
        w(H_MAGIC, MAGIC)?;
        w(H_VERSION, VERSION)?;
        w(H_PID, std::process::id() as u64)?;
        w(H_RANK, rank as u64)?;
        w(H_BLOCKS, u64::from(blocks))?;
        w(H_TOTAL, self.total)?;
        w(H_N_PEERS, self.peers.len() as u64)?;
        w(H_PEERS, self.peers_off)?;
        w(H_N_RECV, self.recvs.len() as u64)?;
        w(H_RECV, self.recv_off)?;
        w(H_N_SEND, self.sends.len() as u64)?;
        w(H_SEND, self.send_off)?;
        let lent = self.lent.unwrap_or(Lent {
            offset: 0,
            sets: 0,
            set_len: 0,
        });
        w(H_LENT, lent.offset)?;
        w(H_LENT_SETS, lent.sets)?;
        w(H_LENT_SET_LEN, lent.set_len)?;
        for (i, (peer, ring)) in self.peers.iter().enumerate() {
            let e = self.peers_off + PEER_ENTRY * i as u64;
            w(e, *peer as u64)?;
            w(e + 8, ring.base)?;
            w(e + 16, ring.capacity)?;
        }
        for r in &self.recvs {
            w(r.entry + R_FROM, r.from as u64)?;
            w(r.entry + R_TAG, r.tag as u64)?;
            w(r.entry + R_LEN, r.len)?;
            w(r.entry + R_PATH, 0)?;
            w(r.entry + R_WINDOW, r.window.unwrap_or(u64::MAX))?;
            w(r.entry + R_IN_PLACE, u64::from(r.in_place))?;
            // With two slots, iteration 1 may be written at once.
            if r.window.is_some() {
                w(r.entry + R_FREE_FOR, window_credit(r.len, 0))?;
            }
        }
        for (i, s) in self.sends.iter().enumerate() {
            let e = self.send_off + SEND_ENTRY * i as u64;
            w(e + S_TO, s.to as u64)?;
            w(e + S_TAG, s.tag as u64)?;
            w(e + S_LEN, s.len)?;
            w(e + S_BUFFER, s.buffer)?;
            let (table, runs) = s.runs.as_ref().map_or((0, &[][..]), |(t, r)| (*t, &r[..]));
            w(e + S_RUNS, table)?;
            w(e + S_N_RUNS, runs.len() as u64)?;
            for (k, run) in runs.iter().enumerate() {
                let at = table + RUN_ENTRY * k as u64;
                w(at, run.offset as u64)?;
                w(at + 8, run.len as u64)?;
            }
        }
        Ok(())
    }
}

/// What a peer's segment says, read and validated.
#[derive(Debug, Clone)]
pub(crate) struct PeerView {
    pub(crate) pid: i32,
    /// Whether it may sleep on its doorbell, to be rung after events.
    pub(crate) blocks: bool,
    /// The ring in the peer's segment that carries our records to it.
    pub(crate) ring_to_peer: RingLayout,
    /// The peer's receive entries for messages from us.
    pub(crate) recvs_from_us: Vec<TheirRecv>,
    /// The peer's sends to us.
    pub(crate) sends_to_us: Vec<TheirSend>,
    /// Its lent sets, checked to lie inside its segment.
    pub(crate) lent: Option<Lent>,
}

/// Reads a peer's segment, checking every offset against the mapping.
pub(crate) fn read_peer(map: &SharedMap, peer: usize, me: usize) -> Result<PeerView, String> {
    let r = |off: u64| map.read_u64(off).map_err(|e| e.to_string());
    if r(H_MAGIC)? != MAGIC || r(H_VERSION)? != VERSION {
        return Err("not a sode-shm segment of this version".into());
    }
    if r(H_RANK)? != peer as u64 {
        return Err(format!("segment claims rank {}", r(H_RANK)?));
    }
    let pid = i32::try_from(r(H_PID)?).map_err(|_| "pid out of range".to_string())?;
    let table = |n_at: u64, off_at: u64, entry: u64| -> Result<(u64, u64), String> {
        let n = r(n_at)?;
        let off = r(off_at)?;
        let bytes = n
            .checked_mul(entry)
            .and_then(|b| b.checked_add(off))
            .ok_or("table size overflows")?;
        map.check(off, bytes - off).map_err(|e| e.to_string())?;
        Ok((n, off))
    };
    let (n_peers, peers_off) = table(H_N_PEERS, H_PEERS, PEER_ENTRY)?;
    let mut ring = None;
    for i in 0..n_peers {
        let e = peers_off + PEER_ENTRY * i;
        if r(e)? == me as u64 {
            let layout = RingLayout {
                base: r(e + 8)?,
                capacity: r(e + 16)?,
            };
            if layout.capacity < RING_MIN || layout.capacity % 64 != 0 || layout.base % 64 != 0 {
                return Err(format!("ring capacity {} is not valid", layout.capacity));
            }
            map.check(layout.base, RingLayout::footprint(layout.capacity))
                .map_err(|e| format!("ring: {e}"))?;
            ring = Some(layout);
        }
    }
    let ring_to_peer =
        ring.ok_or("its segment has no ring for us: are we in its neighbour list?")?;
    let (n_recv, recv_off) = table(H_N_RECV, H_RECV, RECV_ENTRY)?;
    let mut recvs_from_us = Vec::new();
    for i in 0..n_recv {
        let e = recv_off + RECV_ENTRY * i;
        if r(e + R_FROM)? != me as u64 {
            continue;
        }
        let tag = u32::try_from(r(e + R_TAG)?).map_err(|_| "tag out of range".to_string())?;
        let len = r(e + R_LEN)?;
        let window = match r(e + R_WINDOW)? {
            u64::MAX => None,
            w => {
                // Every slot: a stride each but the last.
                let span = len
                    .max(1)
                    .checked_next_multiple_of(64)
                    .and_then(|stride| stride.checked_mul(window_slots(len) - 1))
                    .and_then(|before| before.checked_add(len))
                    .ok_or_else(|| format!("window of tag {tag}: {len} bytes overflow"))?;
                map.check(w, span).map_err(|e| {
                    format!("window of tag {tag} ({} slots): {e}", window_slots(len))
                })?;
                Some(w)
            }
        };
        recvs_from_us.push(TheirRecv {
            tag,
            len,
            entry: e,
            window,
            in_place: r(e + R_IN_PLACE)? == 1,
        });
    }
    let lent = read_lent(map)?;
    let (n_send, send_off) = table(H_N_SEND, H_SEND, SEND_ENTRY)?;
    let mut sends_to_us = Vec::new();
    for i in 0..n_send {
        let e = send_off + SEND_ENTRY * i;
        if r(e + S_TO)? == me as u64 {
            sends_to_us.push(read_send(map, e, lent)?);
        }
    }
    Ok(PeerView {
        pid,
        blocks: r(H_BLOCKS)? == 1,
        ring_to_peer,
        recvs_from_us,
        sends_to_us,
        lent,
    })
}

/// A peer's lent sets, checked to lie inside its segment.
fn read_lent(map: &SharedMap) -> Result<Option<Lent>, String> {
    let r = |off: u64| map.read_u64(off).map_err(|e| e.to_string());
    let (offset, sets, set_len) = (r(H_LENT)?, r(H_LENT_SETS)?, r(H_LENT_SET_LEN)?);
    if sets == 0 {
        return Ok(None);
    }
    let bytes = sets.checked_mul(set_len).ok_or("its lent sets overflow")?;
    map.check(offset, bytes)
        .map_err(|e| format!("lent sets: {e}"))?;
    Ok(Some(Lent {
        offset,
        sets,
        set_len,
    }))
}

/// A peer's send entry at `e`: its buffer inside the segment and, for a
/// send from the lent sets, its runs inside each set, covering the
/// message.
fn read_send(map: &SharedMap, e: u64, lent: Option<Lent>) -> Result<TheirSend, String> {
    let r = |off: u64| map.read_u64(off).map_err(|e| e.to_string());
    let tag = u32::try_from(r(e + S_TAG)?).map_err(|_| "tag out of range".to_string())?;
    let (len, buffer, n_runs) = (r(e + S_LEN)?, r(e + S_BUFFER)?, r(e + S_N_RUNS)?);
    map.check(buffer, len)
        .map_err(|e| format!("send buffer of tag {tag}: {e}"))?;
    if n_runs == 0 {
        return Ok(TheirSend {
            tag,
            len,
            buffer,
            runs: None,
        });
    }
    let bad = |why: String| format!("send of tag {tag} in place: {why}");
    let lent = lent.ok_or_else(|| bad("it lends no sets".into()))?;
    // Each run holds at least a byte.
    if n_runs > len {
        return Err(bad(format!("{n_runs} runs for {len} bytes")));
    }
    let table = r(e + S_RUNS)?;
    map.check(table, n_runs * RUN_ENTRY)
        .map_err(|e| bad(format!("run table: {e}")))?;
    let mut runs = Vec::with_capacity(n_runs as usize);
    let mut total = 0u64;
    for k in 0..n_runs {
        let (offset, run_len) = (r(table + RUN_ENTRY * k)?, r(table + RUN_ENTRY * k + 8)?);
        if run_len == 0
            || offset
                .checked_add(run_len)
                .is_none_or(|end| end > lent.set_len)
        {
            return Err(bad(format!(
                "run {offset}+{run_len} outside its {}-byte sets",
                lent.set_len
            )));
        }
        total = total
            .checked_add(run_len)
            .ok_or_else(|| bad("its runs overflow".into()))?;
        runs.push(Run {
            offset: offset as usize,
            len: run_len as usize,
        });
    }
    if total != len {
        return Err(bad(format!(
            "runs of {total} bytes for a {len}-byte message"
        )));
    }
    Ok(TheirSend {
        tag,
        len,
        buffer,
        runs: Some(runs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recv(from: usize, len: u64) -> RecvSpec {
        RecvSpec {
            from,
            tag: 0,
            len,
            window: true,
            in_place: false,
            misalign: 0,
        }
    }

    fn send(to: usize) -> SendSpec {
        SendSpec {
            to,
            tag: 0,
            len: 8,
            misalign: 0,
            runs: None,
        }
    }

    #[test]
    fn a_ring_is_as_large_as_its_peers_messages_need() {
        const MOST: u64 = 64 << 10;
        // Faces of 32 doubles and corners of one: the smallest ring.
        let small = [recv(1, 256), recv(1, 8), recv(2, 256)];
        let sends = [send(1), send(1), send(2)];
        assert_eq!(ring_capacity(1, &small, &sends, MOST), RING_MIN);
        // A message of 3 KiB fits a quarter of a ring of four pages in one
        // fragment; two iterations of it need only 6 KiB.
        let face = [recv(1, 3 << 10)];
        let cap = ring_capacity(1, &face, &[], MOST);
        assert_eq!(cap, (16 << 10) - RING_HEADER);
        assert!(
            RingLayout {
                base: 0,
                capacity: cap
            }
            .max_payload()
                >= 3 << 10
        );
        // Many small messages: two iterations of all of them (60 records
        // of 288 bytes and 10 receipts, 17,600 bytes, twice) in 9 pages.
        let many: Vec<RecvSpec> = (0..60).map(|_| recv(3, 256)).collect();
        let receipts: Vec<SendSpec> = (0..10).map(|_| send(3)).collect();
        assert_eq!(
            ring_capacity(3, &many, &receipts, MOST),
            9 * 4096 - RING_HEADER
        );
        // Beyond the largest allowed, and a peer that sends nothing.
        let huge = [recv(1, 1 << 20), recv(1, u64::MAX)];
        assert_eq!(ring_capacity(1, &huge, &[], MOST), MOST);
        assert_eq!(ring_capacity(4, &small, &sends, MOST), RING_MIN);
        assert_eq!(ring_capacity(1, &small, &sends, 0), RING_MIN);
    }

    #[test]
    fn each_peer_ring_is_placed_at_its_own_size() {
        let recvs = [recv(1, 256), recv(2, 3 << 10)];
        let layout = SegmentLayout::plan(&[1, 2], 64 << 10, &recvs, &[send(1)], None);
        let (p1, r1) = layout.peers[0];
        let (p2, r2) = layout.peers[1];
        assert_eq!((p1, r1.capacity), (1, RING_MIN));
        assert_eq!((p2, r2.capacity), (2, (16 << 10) - RING_HEADER));
        assert!(r2.base >= r1.base + RingLayout::footprint(r1.capacity));
        assert!(layout.total >= r2.base + RingLayout::footprint(r2.capacity));
    }
}
