//! An owned mapping registered as one memory region.

use std::io;
use std::sync::Arc;

use memmap2::MmapMut;
use sideway::ibverbs::memory_region::{MemoryRegion, RegisterMemoryRegionErrorKind};
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::AccessFlags;

/// Page-aligned anonymous memory and its registration. Field order matters:
/// the registration is dropped (deregistered) before the memory is unmapped,
/// so the device never holds a key to freed memory.
#[derive(Debug)]
pub(crate) struct Region {
    mr: Arc<MemoryRegion>,
    map: MmapMut,
}

impl Region {
    /// Maps `len` zeroed bytes (at least one page) and registers them with
    /// `access`. The error is registration's own, or the mapping's.
    pub(crate) fn new(
        pd: &Arc<ProtectionDomain>,
        len: usize,
        access: AccessFlags,
    ) -> Result<Self, RegionError> {
        // ibv_reg_mr rejects a zero length; a zero-byte buffer still needs a key.
        let map = MmapMut::map_anon(len.max(1)).map_err(RegionError::Map)?;
        // SAFETY: `map` is a live mapping of `map.len()` bytes owned by the
        // returned Region, which drops `mr` (deregisters) before `map`
        // (unmaps), so the registered range outlives its registration. The
        // mapping is never moved or resized (MmapMut's pointer is stable).
        let mr = unsafe { pd.reg_mr(map.as_ptr() as usize, map.len(), access) }.map_err(
            |e| match e.0 {
                RegisterMemoryRegionErrorKind::Ibverbs(io) => RegionError::Register(io),
                other => RegionError::Register(io::Error::other(other.to_string())),
            },
        )?;
        Ok(Region { mr, map })
    }

    /// The first byte's address, as the device sees it.
    pub(crate) fn addr(&self) -> u64 {
        self.map.as_ptr() as u64
    }

    /// The length asked for (the mapping may be longer when it was 0).
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn lkey(&self) -> u32 {
        self.mr.lkey()
    }

    pub(crate) fn rkey(&self) -> u32 {
        self.mr.rkey()
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.map
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.map
    }
}

/// Why a region could not be made.
#[derive(Debug)]
pub(crate) enum RegionError {
    Map(io::Error),
    Register(io::Error),
}
