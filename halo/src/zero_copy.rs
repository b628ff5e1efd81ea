//! Which faces travel in place over RDMA: read by the device straight from
//! the sender's field and written straight into the receiver's halo, with
//! no pack or unpack. A face is a list of contiguous runs of a field; in
//! place, a sender gathers its runs into each write (one gather entry per
//! run) and a receiver takes one write per run, so a face of one run or of
//! a few long runs goes in place and a face of many short runs (a column of
//! a C array) is packed. Each side decides for itself; the sender adapts
//! its writes to the windows the receiver made. `SODE_ZERO_COPY` (or
//! `sode_exchange_set_zero_copy` in C) overrides the choice.

use crate::channel::{Span, StartMemory};
use crate::decomp::face_bit;
use crate::field::{FieldLayout, Piece};
use crate::links::LinkExchange;
use crate::pattern::{self, LinkPieces};

/// `SODE_ZERO_COPY`: when faces travel in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZeroCopy {
    /// Faces of long runs (the default).
    Auto,
    /// Every face over RDMA.
    Always,
    /// None: every face is packed and unpacked.
    Never,
}

/// Shortest mean run, in bytes, of a face of several runs that travels in
/// place. Measured over rxe (`ci/softroce/zerocopy.sh`,
/// docs/results/c-abi.md): a face of one run is faster in place at every size (0.83-0.97x
/// the packed time from 256 B), since it is one write either way; a face of
/// 4 runs costs 4 writes in place against 1 packed, and broke even at runs
/// of 1-4 KiB (1.61x at 256 B, 1.00x at 1 KiB, 0.99x at 4 KiB, 0.84x from
/// 16 KiB).
pub const MIN_MEAN_RUN: usize = 4096;

/// Most runs a face in place may have: each is a write per iteration (or a
/// gather entry) and, on the receiving side, a registration per writer.
pub const MAX_RUNS: usize = 64;

impl ZeroCopy {
    /// The mode `SODE_ZERO_COPY` names (unset or empty: auto).
    ///
    /// # Errors
    /// Another value, named with the three that work.
    pub fn from_env() -> Result<ZeroCopy, String> {
        match std::env::var("SODE_ZERO_COPY") {
            Err(std::env::VarError::NotPresent) => Ok(ZeroCopy::Auto),
            Ok(v) => ZeroCopy::parse(&v),
            Err(std::env::VarError::NotUnicode(v)) => ZeroCopy::parse(&v.to_string_lossy()),
        }
    }

    fn parse(v: &str) -> Result<ZeroCopy, String> {
        match v {
            "" | "auto" => Ok(ZeroCopy::Auto),
            "always" => Ok(ZeroCopy::Always),
            "never" => Ok(ZeroCopy::Never),
            other => Err(format!(
                "SODE_ZERO_COPY is '{other}': use auto (the default), always or never"
            )),
        }
    }

    /// Whether a face of `spans` (on this rank's side) travels in place.
    pub fn in_place(self, spans: &[Span]) -> bool {
        if spans.is_empty() {
            return false;
        }
        match self {
            ZeroCopy::Always => true,
            ZeroCopy::Never => false,
            ZeroCopy::Auto => {
                let bytes: usize = spans.iter().map(|s| s.len).sum();
                spans.len() == 1 || (spans.len() <= MAX_RUNS && bytes / spans.len() >= MIN_MEAN_RUN)
            }
        }
    }
}

/// What a start reads and lands in where messages travel in place over
/// RDMA, from `sets`: for each field carried in place, the lent set that
/// holds the array it was started on (`None`: no set holds it). The device
/// reads and writes lent memory only, and a message in place carries every
/// field's whole faces, so a start on some fields or fewer layers
/// (`partial`), on an array no set holds or on arrays of different sets
/// goes through sode's buffers (staged). Allocates nothing: every start
/// asks.
pub fn start_memory(mut sets: impl Iterator<Item = Option<usize>>, partial: bool) -> StartMemory {
    let Some(first) = sets.next() else {
        return StartMemory::Set(0);
    };
    match first {
        Some(k) if !partial && sets.all(|s| s == Some(k)) => StartMemory::Set(k),
        _ => StartMemory::Staged,
    }
}

/// The runs of a message made of `pieces` (field `f` lent as memory `f`),
/// in message order, adjacent runs merged.
pub fn spans(specs: &[FieldLayout], pieces: &[Piece]) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::new();
    for piece in pieces {
        let (memory, f) = (piece.field, &specs[piece.field]);
        let e = f.ty.size();
        f.runs(&piece.region, |at, n| {
            let (offset, len) = (at * e, n * e);
            match out.last_mut() {
                Some(last) if last.memory == memory && last.offset + last.len == offset => {
                    last.len += len
                }
                _ => out.push(Span {
                    memory,
                    offset,
                    len,
                }),
            }
        });
    }
    out
}

/// This rank's faces (of a grid of `axes` axes) packed at both of its
/// sides: neither its send toward the face nor its receive from it
/// travels in place under `mode` (`None`: nothing is lent, so every face
/// is packed). A mask: bit `2a` for the face below axis `a`, `2a + 1` for
/// the one above (axes up to 31). Each rank tells the others at commit,
/// and a face packed at both ends joins the one message to its rank
/// ([`Grouping`](crate::pattern::Grouping)).
pub fn packed_faces(layouts: &[FieldLayout], axes: usize, mode: Option<ZeroCopy>) -> u64 {
    let in_place = |pieces: &Option<Vec<Piece>>| match (mode, pieces) {
        (Some(mode), Some(pieces)) => mode.in_place(&spans(layouts, pieces)),
        _ => false,
    };
    let mut mask = 0;
    for axis in 0..axes.min(32) {
        for side in [-1, 1] {
            let mut offset = vec![0; axes];
            offset[axis] = side;
            let face = pattern::direction_pieces(layouts, &offset);
            if !in_place(&face.send) && !in_place(&face.recv) {
                mask |= face_bit(&offset).unwrap_or(0);
            }
        }
    }
    mask
}

/// Lends `lent` (per set, each field's memory in field order) to the RDMA
/// channel and asks that each planned link's sides whose runs `mode` takes
/// travel in place. `mode` [`ZeroCopy::Never`] lends nothing.
#[cfg(feature = "rdma")]
pub fn lend_in_place<'w>(
    mut builder: crate::links::LinkExchangeBuilder<'w>,
    layouts: &[FieldLayout],
    planned: &[LinkPieces],
    lent: Vec<Vec<sode_transport::UserMemory>>,
    mode: ZeroCopy,
) -> crate::links::LinkExchangeBuilder<'w> {
    if mode == ZeroCopy::Never {
        return builder;
    }
    for set in lent {
        builder = builder.lend(set);
    }
    for (i, p) in planned.iter().enumerate() {
        let side = |pieces: &Option<Vec<Piece>>| {
            let spans = spans(layouts, pieces.as_deref()?);
            mode.in_place(&spans).then_some(spans)
        };
        let how = crate::InPlace {
            send: side(&p.send),
            recv: side(&p.recv),
        };
        if how != crate::InPlace::default() {
            builder = builder.in_place(i, how);
        }
    }
    builder
}

/// Per field (of `fields`), whether some side of a link of `links` carries
/// it in place: a start on another array than the one lent, or on part of
/// the message, must then be staged.
pub fn fields_in_place(links: &LinkExchange, planned: &[LinkPieces], fields: usize) -> Vec<bool> {
    let mut in_place = vec![false; fields];
    for (i, p) in planned.iter().enumerate() {
        let s = links.in_place(i);
        let moved = [(s.send, &p.send), (s.recv, &p.recv)];
        for (_, pieces) in moved.into_iter().filter(|(moved, _)| *moved) {
            for piece in pieces.iter().flatten() {
                if let Some(f) = in_place.get_mut(piece.field) {
                    *f = true;
                }
            }
        }
    }
    in_place
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decomp::Region;
    use crate::field::{ElemType, Order};

    /// Field 0's `region`, the only piece.
    fn one(region: Region) -> [Piece; 1] {
        [Piece {
            field: 0,
            region,
            toward: Vec::new(),
        }]
    }

    /// A C-order 2-D f64 field, `rows` x `cols` owned, halo `h` all round.
    fn field(rows: usize, cols: usize, h: usize) -> FieldLayout {
        FieldLayout::with_halo(ElemType::F64, &[rows, cols], &[h, h], Order::C)
    }

    #[test]
    fn a_start_travels_in_the_one_set_that_holds_every_array_it_carries_in_place() {
        let memory = |sets: &[Option<usize>], partial| start_memory(sets.iter().copied(), partial);
        assert_eq!(memory(&[], false), StartMemory::Set(0), "nothing in place");
        assert_eq!(memory(&[], true), StartMemory::Set(0));
        assert_eq!(memory(&[Some(2), Some(2)], false), StartMemory::Set(2));
        assert_eq!(
            memory(&[Some(2), Some(1)], false),
            StartMemory::Staged,
            "two sets"
        );
        assert_eq!(
            memory(&[Some(0), None], false),
            StartMemory::Staged,
            "an array not lent"
        );
        assert_eq!(
            memory(&[Some(1)], true),
            StartMemory::Staged,
            "part of the messages"
        );
    }

    #[test]
    fn rows_go_in_place_and_columns_are_packed() {
        let f = field(64, 1024, 2);
        let rows = spans(std::slice::from_ref(&f), &one(f.recv_region(&[1, 0])));
        // Two rows of 1024 doubles, apart (the halo columns between them).
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|s| s.len == 8192 && s.memory == 0));
        assert_eq!(rows[1].offset - rows[0].offset, 1028 * 8);
        assert!(ZeroCopy::Auto.in_place(&rows));
        let cols = spans(std::slice::from_ref(&f), &one(f.send_region(&[0, 1])));
        assert_eq!(cols.len(), 64);
        assert!(!ZeroCopy::Auto.in_place(&cols));
        assert!(ZeroCopy::Always.in_place(&cols) && !ZeroCopy::Never.in_place(&rows));
        // One run goes in place whatever its length (one write either way);
        // several short ones are packed.
        let f = field(64, 32, 1);
        let row = spans(std::slice::from_ref(&f), &one(f.recv_region(&[1, 0])));
        assert_eq!((row.len(), row[0].len), (1, 256));
        assert!(ZeroCopy::Auto.in_place(&row));
        let f = field(64, 32, 4);
        let rows = spans(std::slice::from_ref(&f), &one(f.recv_region(&[1, 0])));
        assert!(rows.len() == 4 && !ZeroCopy::Auto.in_place(&rows));
    }

    #[test]
    fn a_face_spanning_whole_rows_is_one_run_and_fields_stay_apart() {
        // No halo along the fast axis: the face's rows touch, one run.
        let f = FieldLayout {
            extents: vec![68, 1024],
            strides: vec![1024, 1],
            owned_lo: vec![2, 0],
            owned_size: vec![64, 1024],
            halo_lo: vec![2, 0],
            halo_hi: vec![2, 0],
            ..field(64, 1024, 2)
        };
        let two = [f.clone(), f.clone()];
        let r = f.send_region(&[-1, 0]);
        let s = spans(&two, &Piece::per_field(vec![r.clone(), r]));
        assert_eq!(s.len(), 2, "{s:?}");
        assert_eq!((s[0].memory, s[0].len), (0, 2 * 1024 * 8));
        assert_eq!((s[1].memory, s[1].offset), (1, s[0].offset));
    }

    #[test]
    fn a_rank_tells_the_faces_it_packs_at_both_sides() {
        // Rows of 1024 doubles go in place under auto (axis 0's faces,
        // bits 0 and 1), columns are packed (axis 1's, bits 2 and 3).
        let f = [field(64, 1024, 2)];
        assert_eq!(packed_faces(&f, 2, Some(ZeroCopy::Auto)), 0b1100);
        assert_eq!(packed_faces(&f, 2, Some(ZeroCopy::Always)), 0);
        assert_eq!(packed_faces(&f, 2, Some(ZeroCopy::Never)), 0b1111);
        assert_eq!(packed_faces(&f, 2, None), 0b1111, "nothing lent");
        // A face of which one side would go in place is not packed at
        // both: with a halo of 1 below axis 0 and 4 above, each face of
        // axis 0 sends or receives one row (in place) and 4 rows of 32
        // doubles (packed) the other way.
        let f = [FieldLayout::new(ElemType::F64, &[69, 34], Order::C)
            .owned(&[1, 1], &[64, 32])
            .halo(&[1, 1], &[4, 1])];
        let faces = packed_faces(&f, 2, Some(ZeroCopy::Auto));
        assert_eq!(faces, 0b1100, "{faces:#b}");
        // Fewer grid axes than the fields': only those faces.
        assert_eq!(packed_faces(&f, 1, None), 0b11);
    }

    #[test]
    fn the_variable_is_checked() {
        assert_eq!(ZeroCopy::parse(""), Ok(ZeroCopy::Auto));
        assert_eq!(ZeroCopy::parse("never"), Ok(ZeroCopy::Never));
        assert!(ZeroCopy::parse("yes")
            .unwrap_err()
            .contains("always or never"));
    }
}
