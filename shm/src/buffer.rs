//! Process-private receive buffers (eager and get paths): page-aligned
//! anonymous memory, with the message starting `misalign` bytes in (tests
//! use it to check unaligned copies).

use crate::sys::shared::SharedMap;

const HUGE: usize = 2 << 20;
const HUGE_FROM: usize = 1 << 20;

/// A private buffer holding one message.
#[derive(Debug)]
pub(crate) struct PrivateBuf {
    map: SharedMap,
    offset: u64,
    len: usize,
}

impl PrivateBuf {
    pub(crate) fn new(len: usize, misalign: usize) -> std::io::Result<PrivateBuf> {
        // Large buffers start on a 2 MiB boundary and ask for transparent
        // huge pages: copies into them miss the TLB less.
        let huge = len >= HUGE_FROM;
        let extra = if huge { HUGE } else { 0 };
        let map = SharedMap::anonymous(len + misalign + extra)?;
        let start = if huge {
            let base = map.address();
            map.advise_huge_pages();
            ((HUGE - base % HUGE) % HUGE) as u64
        } else {
            0
        };
        let mut buf = PrivateBuf {
            map,
            offset: start + misalign as u64,
            len,
        };
        // Touch every page now so first use does not pay page faults and the
        // pages land on this process's NUMA node.
        buf.as_mut().fill(0);
        Ok(buf)
    }

    pub(crate) fn as_ref(&self) -> &[u8] {
        self.map
            .bytes(self.offset, self.len)
            .expect("buffer range is inside its own mapping")
    }

    pub(crate) fn as_mut(&mut self) -> &mut [u8] {
        self.map
            .bytes_mut(self.offset, self.len)
            .expect("buffer range is inside its own mapping")
    }
}
