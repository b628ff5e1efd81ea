//! Owned mappings, or memory the caller lends, and the registrations made
//! over them, cached.

use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use memmap2::MmapMut;
use sideway::ibverbs::memory_region::{MemoryRegion, RegisterMemoryRegionErrorKind};
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::AccessFlags;

/// The keys of one registration, and the address of the range asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Keys {
    pub addr: u64,
    pub lkey: u32,
    pub rkey: u32,
}

struct Registration {
    offset: usize,
    len: usize,
    remote_write: bool,
    /// The protection domain it was made in: its keys work only on queue
    /// pairs of that domain.
    pd: Arc<ProtectionDomain>,
    mr: Arc<MemoryRegion>,
}

/// Memory the caller lends an exchange, so that RDMA writes read from it
/// and land in it without a copy (a field and its halo).
#[derive(Debug)]
pub struct UserMemory {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: a `UserMemory` is an address range, not a borrow of anything
// thread-bound; `new`'s contract makes the caller keep it valid for the
// exchange's life and keep its own accesses apart from sode's, from
// whichever thread sode runs on.
unsafe impl Send for UserMemory {}

impl UserMemory {
    /// `len` bytes (at least 1) from `base`; `None` when `base` is null or
    /// `len` is 0.
    ///
    /// # Safety
    /// From this call until every exchange built with it is dropped:
    /// - `base` is valid for reads and writes of `len` bytes, and the
    ///   memory is neither freed nor unmapped, nor remapped (the device keeps
    ///   translating the addresses it registered);
    /// - while an exchange is in flight (from its `start` to the end of its
    ///   `wait`), nothing else writes the bytes its writes read or accesses
    ///   the bytes its windows receive.
    pub unsafe fn new(base: *mut u8, len: usize) -> Option<UserMemory> {
        if len == 0 {
            return None;
        }
        Some(UserMemory {
            base: NonNull::new(base)?,
            len,
        })
    }

    /// Bytes lent.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The address of its first byte: whether an array is the memory lent
    /// is a comparison of addresses.
    pub fn addr(&self) -> usize {
        self.base.as_ptr() as usize
    }

    /// Never: a `UserMemory` has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// The memory a [`RegisteredBuffer`] registers: its own mapping, or the
/// caller's.
enum Memory {
    Owned(MmapMut),
    User(UserMemory),
}

impl Memory {
    fn base(&self) -> *const u8 {
        match self {
            Memory::Owned(m) => m.as_ptr(),
            Memory::User(u) => u.base.as_ptr(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Memory::Owned(m) => m.len(),
            Memory::User(u) => u.len,
        }
    }
}

/// Page-aligned anonymous memory (or memory the caller lent) and every
/// registration over it. The cache
/// is here: the whole buffer is registered once per protection domain for
/// local access however many writes read from it, and each remote-write
/// range once per protection domain however many windows name it. Field order matters: the registrations are dropped
/// (deregistered) before the memory is unmapped, so the device never holds a
/// key to freed memory.
pub(crate) struct RegisteredBuffer {
    regs: Vec<Registration>,
    map: Memory,
}

impl RegisteredBuffer {
    /// Maps `len` zeroed bytes (at least one: a zero-byte buffer still
    /// needs a key).
    pub(crate) fn new(len: usize) -> io::Result<Self> {
        Ok(RegisteredBuffer {
            regs: Vec::new(),
            map: Memory::Owned(MmapMut::map_anon(len.max(1))?),
        })
    }

    /// The caller's memory, registered like an owned buffer.
    pub(crate) fn user(memory: UserMemory) -> Self {
        RegisteredBuffer {
            regs: Vec::new(),
            map: Memory::User(memory),
        }
    }

    /// Keys for reading the whole buffer locally (as a write's source).
    pub(crate) fn local(&mut self, pd: &Arc<ProtectionDomain>) -> Result<Keys, io::Error> {
        if let Some(r) = self
            .regs
            .iter()
            .find(|r| r.offset == 0 && r.len == self.map.len() && Arc::ptr_eq(&r.pd, pd))
        {
            return Ok(self.keys(r, 0));
        }
        let len = self.map.len();
        self.register(pd, 0, len, false)
            .map(|i| self.keys(&self.regs[i], 0))
    }

    /// Keys for remote writes into exactly `offset..offset + len` (a
    /// window): the rkey grants no byte outside it.
    pub(crate) fn window(
        &mut self,
        pd: &Arc<ProtectionDomain>,
        offset: usize,
        len: usize,
    ) -> Result<Keys, io::Error> {
        assert!(
            offset + len.max(1) <= self.map.len(),
            "window bounds are checked by the caller"
        );
        if let Some(r) = self.regs.iter().find(|r| {
            r.remote_write && r.offset == offset && r.len == len.max(1) && Arc::ptr_eq(&r.pd, pd)
        }) {
            return Ok(self.keys(r, offset));
        }
        self.register(pd, offset, len.max(1), true)
            .map(|i| self.keys(&self.regs[i], offset))
    }

    fn keys(&self, r: &Registration, offset: usize) -> Keys {
        Keys {
            addr: self.map.base() as u64 + offset as u64,
            lkey: r.mr.lkey(),
            rkey: r.mr.rkey(),
        }
    }

    fn register(
        &mut self,
        pd: &Arc<ProtectionDomain>,
        offset: usize,
        len: usize,
        remote_write: bool,
    ) -> Result<usize, io::Error> {
        let access = if remote_write {
            AccessFlags::LocalWrite | AccessFlags::RemoteWrite
        } else {
            AccessFlags::LocalWrite
        };
        // SAFETY: offset + len <= map.len() (checked by the callers), so the
        // range lies in `map`: either a live mapping owned by this struct,
        // which drops every registration (`regs`, declared first) before
        // `map`, and is never moved or resized (MmapMut's pointer is
        // stable); or the caller's memory, which `UserMemory::new`'s
        // contract keeps valid and in place until the exchange (and so this
        // registration) is dropped. Either way the registered range
        // outlives its registration.
        let mr =
            unsafe { pd.reg_mr(self.map.base() as usize + offset, len, access) }.map_err(|e| {
                match e.0 {
                    RegisterMemoryRegionErrorKind::Ibverbs(io) => io,
                    other => io::Error::other(other.to_string()),
                }
            })?;
        self.regs.push(Registration {
            offset,
            len,
            remote_write,
            pd: Arc::clone(pd),
            mr,
        });
        Ok(self.regs.len() - 1)
    }

    /// Whether `len` bytes at `addr` lie in this buffer and, unless the
    /// data is copied at post time (`inline`), under a registration of it
    /// whose local key is `lkey`.
    pub(crate) fn reads_under(&self, addr: u64, len: u64, lkey: u32, inline: bool) -> bool {
        let base = self.map.base() as u64;
        let Some(offset) = addr.checked_sub(base) else {
            return false;
        };
        let Some(end) = offset.checked_add(len) else {
            return false;
        };
        if end > self.map.len() as u64 {
            return false;
        }
        inline
            || self.regs.iter().any(|r| {
                r.mr.lkey() == lkey && offset >= r.offset as u64 && end <= (r.offset + r.len) as u64
            })
    }

    /// Registrations made over this buffer.
    pub(crate) fn registrations(&self) -> usize {
        self.regs.len()
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The bytes of an owned buffer (`None` for the caller's memory).
    pub(crate) fn as_slice(&self) -> Option<&[u8]> {
        match &self.map {
            Memory::Owned(m) => Some(m),
            Memory::User(_) => None,
        }
    }

    /// The bytes of an owned buffer, writable (`None` for the caller's).
    pub(crate) fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        match &mut self.map {
            Memory::Owned(m) => Some(m),
            Memory::User(_) => None,
        }
    }
}

impl std::fmt::Debug for RegisteredBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredBuffer")
            .field("len", &self.map.len())
            .field("user", &matches!(self.map, Memory::User(_)))
            .field("registrations", &self.regs.len())
            .finish()
    }
}
