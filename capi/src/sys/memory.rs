//! The caller's memory of a field, as the exchange holds it: raw
//! pointers given through the C ABI, made slices here under the contract
//! the ABI's functions state. A leaf: it uses nothing else of the crate.

/// The user's memory of one field: `len` bytes from `base`.
#[derive(Debug)]
pub struct UserMemory {
    base: *mut u8,
    len: usize,
}

impl UserMemory {
    /// # Safety
    /// `base` must be valid for reads and writes of `len` bytes for as long
    /// as the exchange that holds this exists, and nothing else may access
    /// those bytes while a sode call on that exchange runs, nor, while an
    /// exchange is in flight (from `start` to the end of `wait`), write the
    /// cells it sends or access the halos it receives (the device reads and
    /// writes them in place).
    pub(crate) unsafe fn new(base: *mut u8, len: usize) -> UserMemory {
        UserMemory { base, len }
    }

    /// An array given for one exchange in place of a field's own.
    ///
    /// # Safety
    /// As [`new`](Self::new), from the start it is given to until the wait
    /// or test that completes that exchange returns (sode lets go of it
    /// then). It is never lent to the RDMA channel.
    pub(crate) unsafe fn for_call(base: *mut u8, len: usize) -> UserMemory {
        UserMemory { base, len }
    }

    /// Whether both name the same array.
    pub fn is(&self, other: &UserMemory) -> bool {
        self.base == other.base && self.len == other.len
    }

    /// The field's bytes, for packing.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `new`'s contract: valid for `len` bytes while the
        // exchange exists, and not written by others during this call.
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }

    /// The same memory, lent to the RDMA channel to be read and received in
    /// place.
    #[cfg(feature = "rdma")]
    pub fn lend(&self) -> Option<sode::UserMemory> {
        // SAFETY: `new`'s contract is `sode::UserMemory::new`'s: valid and
        // in place until the exchange (which drops its channels, and their
        // registrations, before it returns from free) is freed, and left
        // alone by the caller where the device works while in flight.
        unsafe { sode::UserMemory::new(self.base, self.len) }
    }

    /// The field's bytes, for unpacking.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `bytes`, and `&mut self` makes this the only view
        // sode holds.
        unsafe { std::slice::from_raw_parts_mut(self.base, self.len) }
    }
}
