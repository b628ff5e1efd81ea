//! A shared mapping with bounds-checked accessors.
//!
//! The other processes of the job map the same pages. Nothing read from them
//! is trusted: every offset is checked against the mapping's length before it
//! is turned into a pointer, synchronisation words are atomics, and payload
//! bytes are copied out as plain `u8`s, which have no invalid values.

use std::fs::File;
use std::io;
use std::sync::atomic::AtomicU64;

use memmap2::{MmapMut, MmapOptions};

/// An offset range that falls outside the mapping (or a misaligned atomic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OutOfBounds {
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) mapped: u64,
}

impl std::fmt::Display for OutOfBounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "range {}+{} outside the {}-byte mapping",
            self.offset, self.len, self.mapped
        )
    }
}

/// A read-write shared mapping of a sealed segment memfd (or anonymous memory for
/// in-process measurements).
pub(crate) struct SharedMap {
    map: MmapMut,
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; all access goes
// through `&self` methods that use atomics or raw byte copies, so moving the
// owner to another thread is no different from moving a `Vec<u8>`.
unsafe impl Send for SharedMap {}

// SAFETY: every `&self` accessor either uses atomics or copies bytes through
// raw pointers into or out of bounds-checked ranges; sharing the mapping
// between threads is exactly as safe as sharing it between processes, which
// is its purpose. Mutable views need `&mut self`.
unsafe impl Sync for SharedMap {}

impl std::fmt::Debug for SharedMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMap").field("len", &self.len).finish()
    }
}

impl SharedMap {
    /// Maps `len` bytes of `file` shared and writable. The file must be
    /// sealed against shrinking and growing (a segment memfd) and at least
    /// `len` bytes long; anything else is refused with `InvalidInput`.
    pub(crate) fn map_sealed(file: &File, len: usize) -> io::Result<Self> {
        use nix::fcntl::{fcntl, FcntlArg, SealFlag};
        let seals = SealFlag::from_bits_truncate(fcntl(file, FcntlArg::F_GET_SEALS)?);
        let fixed = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW;
        if !seals.contains(fixed) || file.metadata()?.len() < len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a memfd sealed against resizing, at least as long as the mapping",
            ));
        }
        // SAFETY: memmap2 requires that nobody truncates the file while it is
        // mapped. The file is sealed against shrinking and growing (checked
        // just above, and seals can only be added), so the kernel refuses
        // every truncation by any process, and it is at least `len` bytes.
        // Concurrent writes by peers are expected and are handled by the
        // accessors below (atomics and byte copies).
        let mut map = unsafe { MmapOptions::new().len(len).map_mut(file)? };
        let base = map.as_mut_ptr();
        Ok(SharedMap { map, base, len })
    }

    /// Anonymous memory with the same accessors, for in-process use.
    pub(crate) fn anonymous(len: usize) -> io::Result<Self> {
        let mut map = MmapOptions::new().len(len.max(1)).map_anon()?;
        let base = map.as_mut_ptr();
        Ok(SharedMap { map, base, len })
    }

    /// The mapping's start address.
    pub(crate) fn address(&self) -> usize {
        self.base as usize
    }

    /// Asks for transparent huge pages (best effort: THP may be off).
    pub(crate) fn advise_huge_pages(&self) {
        let _ = self.map.advise(memmap2::Advice::HugePage);
    }

    /// Pins the pages holding `len` bytes from `offset` (mlock rounds out
    /// to whole pages).
    pub(crate) fn lock_range(&self, offset: u64, len: u64) -> io::Result<()> {
        let start = self
            .check(offset, len)
            .map_err(|e| io::Error::other(e.to_string()))?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: `check` put [start, start + len) inside the mapping,
        // which lives as long as `self`; mlock only pins the pages and
        // reads or writes nothing.
        let r = unsafe { libc::mlock(self.base.add(start).cast(), len as usize) };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    pub(crate) fn check(&self, offset: u64, len: u64) -> Result<usize, OutOfBounds> {
        let err = OutOfBounds {
            offset,
            len,
            mapped: self.len as u64,
        };
        let end = offset.checked_add(len).ok_or(err)?;
        if end > self.len as u64 {
            return Err(err);
        }
        usize::try_from(offset).map_err(|_| err)
    }

    /// The 8-byte atomic at `offset` (must be 8-aligned).
    pub(crate) fn atomic(&self, offset: u64) -> Result<&AtomicU64, OutOfBounds> {
        let at = self.check(offset, 8)?;
        if at % 8 != 0 {
            return Err(OutOfBounds {
                offset,
                len: 8,
                mapped: self.len as u64,
            });
        }
        // SAFETY: `at..at + 8` is inside the mapping (checked above) and
        // 8-aligned (the base is page-aligned); the mapping lives as long as
        // `&self`. AtomicU64 has the size and alignment of u64 and any bit
        // pattern is valid, so concurrent writers in other processes cannot
        // make this reference invalid.
        Ok(unsafe { &*(self.base.add(at) as *const AtomicU64) })
    }

    /// Copies `src` into the mapping at `offset`.
    pub(crate) fn write(&self, offset: u64, src: &[u8]) -> Result<(), OutOfBounds> {
        let at = self.check(offset, src.len() as u64)?;
        // SAFETY: the destination range is inside the mapping (checked) and
        // cannot overlap `src`, which is process-private memory or another
        // mapping; u8 has no invalid values, so racing peer writes can only
        // change bytes, which the protocol's flags rule out for a correct
        // peer.
        unsafe { copy_bytes(self.base.add(at), src.as_ptr(), src.len()) };
        Ok(())
    }

    /// Copies bytes at `offset` out into `dst`.
    pub(crate) fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), OutOfBounds> {
        let at = self.check(offset, dst.len() as u64)?;
        // SAFETY: the source range is inside the mapping (checked) and does
        // not overlap `dst`, which is borrowed mutably from elsewhere.
        unsafe { copy_run(dst.as_mut_ptr(), self.base.add(at), dst.len()) };
        Ok(())
    }

    /// Copies between `runs` of the span at `base` and the contiguous
    /// bytes at `line`, in the runs' order, within the mapping (the two
    /// ranges must not overlap): runs to line (a gather) when `gather`,
    /// else line to runs (a scatter). The runs were checked against their
    /// span once; here only the span and the line are.
    pub(crate) fn copy_runs_within(
        &self,
        base: u64,
        runs: &CheckedRuns,
        line: u64,
        gather: bool,
    ) -> Result<(), OutOfBounds> {
        let set = self.check(base, runs.span)?;
        let at = self.check(line, runs.total as u64)?;
        let span = runs.span as usize;
        if at < set + span && set < at + runs.total && runs.total > 0 {
            return Err(OutOfBounds {
                offset: line,
                len: runs.span,
                mapped: self.len as u64,
            });
        }
        let mut next = at;
        for r in &runs.runs {
            // SAFETY: every run lies within the span (`CheckedRuns`) and
            // the line holds their total, both inside the mapping and apart
            // (checked above); u8 has no invalid values.
            unsafe {
                let (run, contiguous) = (self.base.add(set + r.offset), self.base.add(next));
                if gather {
                    copy_run(contiguous, run, r.len)
                } else {
                    copy_run(run, contiguous, r.len)
                }
            };
            next += r.len;
        }
        Ok(())
    }

    /// `data`, in order, into `runs` of the span at `base` (a scatter from
    /// private memory).
    pub(crate) fn scatter(
        &self,
        data: &[u8],
        base: u64,
        runs: &CheckedRuns,
    ) -> Result<(), OutOfBounds> {
        let to = self.check(base, runs.span)?;
        let Some(data) = data.get(..runs.total) else {
            return Err(OutOfBounds {
                offset: base,
                len: runs.total as u64,
                mapped: data.len() as u64,
            });
        };
        let mut at = 0usize;
        for r in &runs.runs {
            // SAFETY: the run lies inside the span (`CheckedRuns`), which
            // lies inside the mapping (checked above); `data` is a distinct,
            // borrowed slice holding the runs' total.
            unsafe { copy_run(self.base.add(to + r.offset), data.as_ptr().add(at), r.len) };
            at += r.len;
        }
        Ok(())
    }

    /// Reads a little-endian u64 (plain load; used after an acquire).
    pub(crate) fn read_u64(&self, offset: u64) -> Result<u64, OutOfBounds> {
        let mut b = [0u8; 8];
        self.read(offset, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Writes a little-endian u64 (plain store; published by a release).
    pub(crate) fn write_u64(&self, offset: u64, value: u64) -> Result<(), OutOfBounds> {
        self.write(offset, &value.to_le_bytes())
    }

    /// A shared view of `len` bytes at `offset`, for the owner's receive
    /// windows.
    pub(crate) fn bytes(&self, offset: u64, len: usize) -> Result<&[u8], OutOfBounds> {
        let at = self.check(offset, len as u64)?;
        // SAFETY: in bounds (checked) and alive for `&self`. The protocol
        // gives the peer write access to a window only after the owner has
        // granted it a credit in `start()`, which takes `&mut self` on the
        // exchange and so cannot overlap this borrow.
        Ok(unsafe { std::slice::from_raw_parts(self.base.add(at), len) })
    }

    /// A mutable view of `len` bytes at `offset`.
    pub(crate) fn bytes_mut(&mut self, offset: u64, len: usize) -> Result<&mut [u8], OutOfBounds> {
        let at = self.check(offset, len as u64)?;
        // SAFETY: in bounds (checked), alive for `&mut self`, and exclusive
        // within this process because `self` is borrowed mutably.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.base.add(at), len) })
    }
}

/// Runs checked once to lie within a span of `span` bytes, with their
/// total: gathers and scatters with them check only where the span and
/// the line lie, not every run again (a face across the fastest axis is
/// a run per cell, and a second pass over them cost as much as the copy).
#[derive(Debug, Clone)]
pub(crate) struct CheckedRuns {
    runs: Vec<crate::exchange::Run>,
    span: u64,
    total: usize,
}

impl CheckedRuns {
    /// `None` if a run ends past `span` or the total overflows.
    pub(crate) fn new(runs: Vec<crate::exchange::Run>, span: u64) -> Option<CheckedRuns> {
        let mut total = 0usize;
        for r in &runs {
            if r.offset.checked_add(r.len)? as u64 > span {
                return None;
            }
            total = total.checked_add(r.len)?;
        }
        Some(CheckedRuns { runs, span, total })
    }
}

/// One run of a gather or scatter: runs of one cell of 4, 8 or 16 bytes
/// (faces across the fastest axis) by a fixed-size move, longer ones by
/// [`copy_bytes`], as `sode`'s `copy_run` copies slices (a call to
/// `memcpy` per 8-byte cell cost the packed path on such faces 10-30 %).
///
/// # Safety
/// As [`copy_bytes`].
#[inline(always)]
unsafe fn copy_run(dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY (all arms): forwarded from the caller's contract; unaligned
    // reads and writes of byte arrays are allowed.
    unsafe {
        match len {
            8 => dst
                .cast::<[u8; 8]>()
                .write_unaligned(src.cast::<[u8; 8]>().read_unaligned()),
            4 => dst
                .cast::<[u8; 4]>()
                .write_unaligned(src.cast::<[u8; 4]>().read_unaligned()),
            16 => dst
                .cast::<[u8; 16]>()
                .write_unaligned(src.cast::<[u8; 16]>().read_unaligned()),
            _ => copy_bytes(dst, src, len),
        }
    }
}

/// `memcpy`, except where the destination sits 1-63 bytes past the source
/// modulo 4 KiB: there `rep movsb` (which glibc uses from 2 KiB on CPUs with
/// ERMS/FSRM) runs 15-20x slower on AMD Zen, measured on this project's
/// machines, so those copies use 16-byte vector moves instead.
///
/// # Safety
/// `src` must be valid for `len` reads, `dst` for `len` writes, and the two
/// ranges must not overlap.
pub(crate) unsafe fn copy_bytes(dst: *mut u8, src: *const u8, len: usize) {
    let delta = (dst as usize).wrapping_sub(src as usize) & 4095;
    #[cfg(target_arch = "x86_64")]
    if len >= 2048 && delta != 0 && delta < 64 {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
        let mut i = 0;
        while i + 64 <= len {
            // SAFETY: i + 64 <= len keeps all four 16-byte moves inside both
            // ranges (caller's contract); unaligned loads/stores are allowed.
            unsafe {
                let s = src.add(i) as *const __m128i;
                let d = dst.add(i) as *mut __m128i;
                let a = _mm_loadu_si128(s);
                let b = _mm_loadu_si128(s.add(1));
                let c = _mm_loadu_si128(s.add(2));
                let e = _mm_loadu_si128(s.add(3));
                _mm_storeu_si128(d, a);
                _mm_storeu_si128(d.add(1), b);
                _mm_storeu_si128(d.add(2), c);
                _mm_storeu_si128(d.add(3), e);
            }
            i += 64;
        }
        // SAFETY: the remaining len - i bytes are inside both ranges.
        unsafe { std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i) };
        return;
    }
    let _ = delta;
    // SAFETY: forwarded from the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::Run;

    fn run(offset: usize, len: usize) -> Run {
        Run { offset, len }
    }

    #[test]
    fn runs_past_their_span_are_refused_once_and_for_all() {
        assert!(CheckedRuns::new(vec![run(0, 8), run(56, 8)], 64).is_some());
        assert!(CheckedRuns::new(vec![run(0, 8), run(57, 8)], 64).is_none());
        assert!(CheckedRuns::new(vec![run(usize::MAX, 2)], 64).is_none());
    }

    #[test]
    fn gather_and_scatter_move_every_run_of_every_length() {
        let map = SharedMap::anonymous(8192).expect("map");
        let pattern: Vec<u8> = (0..4096).map(|i| (i * 7 % 251) as u8).collect();
        map.write(0, &pattern).expect("fill");
        // Runs of one cell of 4, 8 and 16 bytes (the fixed-size moves) and
        // others, out of order.
        let runs = vec![
            run(100, 8),
            run(0, 4),
            run(300, 16),
            run(1000, 3),
            run(2000, 700),
        ];
        let checked = CheckedRuns::new(runs.clone(), 4096).expect("runs");
        map.copy_runs_within(0, &checked, 4096, true)
            .expect("gather");
        let mut line = vec![0u8; checked.total];
        map.read(4096, &mut line).expect("read");
        let expected: Vec<u8> = runs
            .iter()
            .flat_map(|r| pattern[r.offset..r.offset + r.len].to_vec())
            .collect();
        assert_eq!(line, expected);
        // Back: zero the span, scatter the line into it, from private
        // memory and from within the mapping.
        for from_map in [false, true] {
            map.write(0, &[0u8; 4096]).expect("zero");
            if from_map {
                map.copy_runs_within(0, &checked, 4096, false)
                    .expect("scatter within");
            } else {
                map.scatter(&line, 0, &checked).expect("scatter");
            }
            let mut span = vec![0u8; 4096];
            map.read(0, &mut span).expect("read");
            for r in &runs {
                assert_eq!(
                    span[r.offset..r.offset + r.len],
                    pattern[r.offset..r.offset + r.len]
                );
            }
            assert_eq!(
                span.iter().filter(|&&b| b != 0).count(),
                pattern_nonzero(&pattern, &runs)
            );
        }
        // A line overlapping the span, a line past the mapping, and too
        // little data are refused.
        assert!(map.copy_runs_within(0, &checked, 2048, true).is_err());
        assert!(map.copy_runs_within(0, &checked, 8192 - 10, true).is_err());
        assert!(map.scatter(&line[..10], 0, &checked).is_err());
    }

    fn pattern_nonzero(pattern: &[u8], runs: &[Run]) -> usize {
        runs.iter()
            .map(|r| {
                pattern[r.offset..r.offset + r.len]
                    .iter()
                    .filter(|&&b| b != 0)
                    .count()
            })
            .sum()
    }
}
