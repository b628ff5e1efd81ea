//! The control channel: a single-producer single-consumer byte ring that
//! lives in the receiver's segment.
//!
//! Layout at `base`: the producer's `tail` (bytes ever written) on one cache
//! line, the consumer's `head` (bytes ever consumed) on the next, then
//! `capacity` bytes of records. A record is a 32-byte header followed by its
//! payload padded to 8 bytes; a record never wraps: when it does not fit
//! before the end, the producer writes a WRAP marker (or, with fewer than 32
//! bytes left, nothing) and starts again at offset 0.
//!
//! Both counters are kept privately by their owner and only published to the
//! other side, so a peer that scribbles over them cannot move our position;
//! everything read from shared memory is checked before use.

use std::sync::atomic::Ordering;

use crate::sys::shared::SharedMap;

/// Bytes before the data area (two cache lines).
pub(crate) const RING_HEADER: u64 = 128;
/// Size of a record header.
pub(crate) const RECORD_HEADER: u64 = 32;

/// Record kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum RecordKind {
    /// Marker: the rest of the lap is unused.
    Wrap = 1,
    /// An eager fragment: `at` = offset in the message, `len` = payload length.
    Eager = 2,
    /// Get protocol receive_request: `at` = sender address, `len` = length.
    ReceiveRequest = 3,
    /// Get protocol receive_done for the receiver's `tag`/`seq`.
    ReceiveDone = 4,
    /// A message's last eager fragment (as [`RecordKind::Eager`]): the
    /// receiver learns where the message ends, so a message shorter than
    /// it expects is told at once.
    EagerLast = 5,
}

impl RecordKind {
    fn from_u32(v: u32) -> Option<RecordKind> {
        Some(match v {
            1 => RecordKind::Wrap,
            2 => RecordKind::Eager,
            3 => RecordKind::ReceiveRequest,
            4 => RecordKind::ReceiveDone,
            5 => RecordKind::EagerLast,
            _ => return None,
        })
    }
}

/// Where a record's shape sits in its kind word.
const SHAPE_SHIFT: u32 = 24;

/// A record's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) kind: RecordKind,
    pub(crate) tag: u32,
    pub(crate) seq: u64,
    /// Where: an eager fragment's offset in its message, or the sender's
    /// buffer address of a receive_request.
    pub(crate) at: u64,
    /// Bytes: an eager fragment's payload, or a receive_request's message.
    pub(crate) len: u64,
    /// The shape of the sender's start ([`Exchange::set_shape`]) on data
    /// and receive_request records; 0 on the others. It travels in the top
    /// byte of the kind word.
    ///
    /// [`Exchange::set_shape`]: crate::Exchange::set_shape
    pub(crate) shape: u8,
}

impl Record {
    fn payload_len(&self) -> u64 {
        if matches!(self.kind, RecordKind::Eager | RecordKind::EagerLast) {
            self.len
        } else {
            0
        }
    }
}

/// Where a ring lives inside a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RingLayout {
    pub(crate) base: u64,
    pub(crate) capacity: u64,
}

impl RingLayout {
    fn tail(&self) -> u64 {
        self.base
    }
    fn head(&self) -> u64 {
        self.base + 64
    }
    fn data(&self) -> u64 {
        self.base + RING_HEADER
    }
    /// Total bytes the ring occupies.
    pub(crate) fn footprint(capacity: u64) -> u64 {
        RING_HEADER + capacity
    }
    /// Largest eager payload that fits in one record.
    pub(crate) fn max_payload(&self) -> u64 {
        self.capacity / 4 - RECORD_HEADER
    }
}

/// Why a ring operation failed: the other side broke the ring's invariants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RingCorrupt(pub(crate) String);

fn pad8(n: u64) -> u64 {
    (n + 7) & !7
}

/// The producer's end.
#[derive(Debug)]
pub(crate) struct RingTx {
    layout: RingLayout,
    tail: u64,
}

impl RingTx {
    pub(crate) fn new(layout: RingLayout) -> RingTx {
        RingTx { layout, tail: 0 }
    }

    /// Largest eager payload this ring (sized by its consumer) takes.
    pub(crate) fn max_payload(&self) -> usize {
        self.layout.max_payload() as usize
    }

    /// Appends a record; `Ok(false)` when the ring has no room now.
    pub(crate) fn try_push(
        &mut self,
        map: &SharedMap,
        rec: &Record,
        payload: &[u8],
    ) -> Result<bool, RingCorrupt> {
        let cap = self.layout.capacity;
        debug_assert_eq!(payload.len() as u64, rec.payload_len());
        let need = RECORD_HEADER + pad8(payload.len() as u64);
        if need > cap / 4 + RECORD_HEADER {
            return Err(RingCorrupt(format!(
                "record of {need} bytes exceeds the ring's limit"
            )));
        }
        let head = map
            .atomic(self.layout.head())
            .map_err(|e| RingCorrupt(e.to_string()))?
            .load(Ordering::Acquire);
        let used = self.tail.wrapping_sub(head);
        if used > cap {
            return Err(RingCorrupt(format!(
                "consumer head {head} is ahead of tail {} or behind by more than the capacity",
                self.tail
            )));
        }
        let free = cap - used;
        let off = self.tail % cap;
        let to_end = cap - off;
        let skip = if need > to_end { to_end } else { 0 };
        if skip + need > free {
            return Ok(false);
        }
        let io = |e: crate::sys::shared::OutOfBounds| RingCorrupt(e.to_string());
        if skip > 0 {
            if skip >= RECORD_HEADER {
                self.write_header(
                    map,
                    off,
                    &Record {
                        kind: RecordKind::Wrap,
                        tag: 0,
                        seq: 0,
                        at: 0,
                        len: 0,
                        shape: 0,
                    },
                )
                .map_err(io)?;
            }
            self.tail += skip;
        }
        let off = self.tail % cap;
        self.write_header(map, off, rec).map_err(io)?;
        map.write(self.layout.data() + off + RECORD_HEADER, payload)
            .map_err(io)?;
        self.tail += need;
        map.atomic(self.layout.tail())
            .map_err(io)?
            .store(self.tail, Ordering::Release);
        Ok(true)
    }

    fn write_header(
        &self,
        map: &SharedMap,
        off: u64,
        rec: &Record,
    ) -> Result<(), crate::sys::shared::OutOfBounds> {
        let mut h = [0u8; RECORD_HEADER as usize];
        let kind_word = rec.kind as u32 | u32::from(rec.shape) << SHAPE_SHIFT;
        h[0..4].copy_from_slice(&kind_word.to_le_bytes());
        h[4..8].copy_from_slice(&rec.tag.to_le_bytes());
        h[8..16].copy_from_slice(&rec.seq.to_le_bytes());
        h[16..24].copy_from_slice(&rec.at.to_le_bytes());
        h[24..32].copy_from_slice(&rec.len.to_le_bytes());
        map.write(self.layout.data() + off, &h)
    }
}

/// A record seen by the consumer, not yet consumed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peeked {
    pub(crate) record: Record,
    /// Offset of the payload in the mapping (already bounds-checked).
    pub(crate) payload_at: u64,
    size: u64,
}

/// The consumer's end.
#[derive(Debug)]
pub(crate) struct RingRx {
    layout: RingLayout,
    head: u64,
}

impl RingRx {
    pub(crate) fn new(layout: RingLayout) -> RingRx {
        RingRx { layout, head: 0 }
    }

    /// The next record, if any, without consuming it.
    pub(crate) fn peek(&mut self, map: &SharedMap) -> Result<Option<Peeked>, RingCorrupt> {
        let cap = self.layout.capacity;
        let io = |e: crate::sys::shared::OutOfBounds| RingCorrupt(e.to_string());
        loop {
            let tail = map
                .atomic(self.layout.tail())
                .map_err(io)?
                .load(Ordering::Acquire);
            let avail = tail.wrapping_sub(self.head);
            if avail == 0 {
                return Ok(None);
            }
            if avail > cap || avail % 8 != 0 {
                return Err(RingCorrupt(format!(
                    "producer tail {tail} inconsistent with head {} (capacity {cap})",
                    self.head
                )));
            }
            let off = self.head % cap;
            let to_end = cap - off;
            if to_end < RECORD_HEADER {
                self.skip(map, to_end, avail)?;
                continue;
            }
            if avail < RECORD_HEADER {
                return Err(RingCorrupt(format!(
                    "{avail} bytes published, less than a record header"
                )));
            }
            let mut h = [0u8; RECORD_HEADER as usize];
            map.read(self.layout.data() + off, &mut h).map_err(io)?;
            let word = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().expect("8 bytes"));
            let kind_word = u32::from_le_bytes(h[0..4].try_into().expect("4 bytes"));
            let kind_raw = kind_word & ((1 << SHAPE_SHIFT) - 1);
            let kind = RecordKind::from_u32(kind_raw)
                .ok_or_else(|| RingCorrupt(format!("unknown record kind {kind_raw}")))?;
            if kind == RecordKind::Wrap {
                self.skip(map, to_end, avail)?;
                continue;
            }
            let record = Record {
                kind,
                tag: u32::from_le_bytes(h[4..8].try_into().expect("4 bytes")),
                seq: word(8),
                at: word(16),
                len: word(24),
                shape: (kind_word >> SHAPE_SHIFT) as u8,
            };
            let payload = record.payload_len();
            if payload > self.layout.max_payload() {
                return Err(RingCorrupt(format!(
                    "eager payload of {payload} bytes exceeds the ring's {} limit",
                    self.layout.max_payload()
                )));
            }
            let size = RECORD_HEADER + pad8(payload);
            if size > to_end || size > avail {
                return Err(RingCorrupt(format!(
                    "record of {size} bytes runs past the published data"
                )));
            }
            return Ok(Some(Peeked {
                record,
                payload_at: self.layout.data() + off + RECORD_HEADER,
                size,
            }));
        }
    }

    fn skip(&mut self, map: &SharedMap, to_end: u64, avail: u64) -> Result<(), RingCorrupt> {
        if to_end > avail {
            return Err(RingCorrupt(format!(
                "wrap of {to_end} bytes with only {avail} published"
            )));
        }
        self.head += to_end;
        self.publish(map)
    }

    /// Consumes the record last returned by `peek`.
    pub(crate) fn consume(&mut self, map: &SharedMap, peeked: &Peeked) -> Result<(), RingCorrupt> {
        self.head += peeked.size;
        self.publish(map)
    }

    fn publish(&self, map: &SharedMap) -> Result<(), RingCorrupt> {
        map.atomic(self.layout.head())
            .map_err(|e| RingCorrupt(e.to_string()))?
            .store(self.head, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(cap: u64) -> (SharedMap, RingTx, RingRx) {
        let map = SharedMap::anonymous(RingLayout::footprint(cap) as usize).unwrap();
        let layout = RingLayout {
            base: 0,
            capacity: cap,
        };
        (map, RingTx::new(layout), RingRx::new(layout))
    }

    fn eager(seq: u64, len: usize) -> Record {
        Record {
            kind: RecordKind::Eager,
            tag: 7,
            seq,
            at: 0,
            len: len as u64,
            shape: 0,
        }
    }

    #[test]
    fn records_round_trip_across_many_wraps() {
        let (map, mut tx, mut rx) = ring(4096);
        let mut next_read = 0u64;
        let mut sent = 0u64;
        // Odd sizes force every wrap case, including tails under 32 bytes.
        for round in 0..5000u64 {
            let len = ((round * 37) % 900) as usize;
            let payload: Vec<u8> = (0..len).map(|i| (i as u64 ^ round) as u8).collect();
            while !tx.try_push(&map, &eager(round, len), &payload).unwrap() {
                let p = rx.peek(&map).unwrap().expect("full ring has a record");
                assert_eq!(p.record.seq, next_read);
                rx.consume(&map, &p).unwrap();
                next_read += 1;
            }
            sent += 1;
        }
        while let Some(p) = rx.peek(&map).unwrap() {
            let mut got = vec![0u8; p.record.len as usize];
            map.read(p.payload_at, &mut got).unwrap();
            let want: Vec<u8> = (0..got.len())
                .map(|i| (i as u64 ^ p.record.seq) as u8)
                .collect();
            assert_eq!(got, want);
            assert_eq!(p.record.seq, next_read);
            rx.consume(&map, &p).unwrap();
            next_read += 1;
        }
        assert_eq!(next_read, sent);
    }

    #[test]
    fn corrupt_tail_and_kind_are_reported_not_followed() {
        let (map, mut tx, mut rx) = ring(4096);
        assert!(tx.try_push(&map, &eager(0, 8), &[1; 8]).unwrap());
        // A hostile producer claims more than the capacity.
        map.atomic(0).unwrap().store(1 << 40, Ordering::Release);
        assert!(rx.peek(&map).is_err());
        map.atomic(0).unwrap().store(40, Ordering::Release);
        // Unknown kind.
        map.write(RING_HEADER, &99u32.to_le_bytes()).unwrap();
        assert!(rx.peek(&map).is_err());
        // An eager length that runs past the data.
        map.write(RING_HEADER, &2u32.to_le_bytes()).unwrap();
        map.write(RING_HEADER + 24, &1000u64.to_le_bytes()).unwrap();
        assert!(rx.peek(&map).is_err());
    }

    #[test]
    fn oversized_payload_is_refused_by_the_producer() {
        let (map, mut tx, _) = ring(4096);
        let big = vec![0u8; 2048];
        assert!(tx.try_push(&map, &eager(0, big.len()), &big).is_err());
    }
}
