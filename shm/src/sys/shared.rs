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

/// A read-write shared mapping of a segment file (or anonymous memory for
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

impl std::fmt::Debug for SharedMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMap").field("len", &self.len).finish()
    }
}

impl SharedMap {
    /// Maps `len` bytes of `file` shared and writable.
    pub(crate) fn map_file(file: &File, len: usize) -> io::Result<Self> {
        // SAFETY: memmap2 requires that nobody truncates the file while it is
        // mapped. The file is a 0600 segment of this job whose size is fixed
        // before it is published under its final name; peers of the same job
        // only map it. Concurrent writes by peers are expected and are
        // handled by the accessors below (atomics and byte copies).
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

    /// Pins the pages (mlock).
    pub(crate) fn lock(&self) -> io::Result<()> {
        self.map.lock()
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
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.add(at), src.len()) };
        Ok(())
    }

    /// Copies bytes at `offset` out into `dst`.
    pub(crate) fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), OutOfBounds> {
        let at = self.check(offset, dst.len() as u64)?;
        // SAFETY: the source range is inside the mapping (checked) and does
        // not overlap `dst`, which is borrowed mutably from elsewhere.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(at), dst.as_mut_ptr(), dst.len()) };
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
