//! One call at a time where calls must not overlap: on an exchange, and
//! in the collective steps of a communicator (as `MPI_THREAD_SERIALIZED`
//! asks of MPI objects). A call that finds the flag taken is refused
//! rather than left to race with the other thread's.

use std::sync::atomic::{AtomicBool, Ordering};

/// Taken by one call at a time.
#[derive(Debug, Default)]
pub struct InUse(AtomicBool);

/// An [`InUse`] taken: given back when dropped (a panic caught at the C
/// boundary included).
#[derive(Debug)]
pub struct Taken<'a>(&'a InUse);

impl InUse {
    /// Takes it, unless another call holds it.
    pub fn take(&self) -> Option<Taken<'_>> {
        // Made only when taken: a `Taken` dropped gives the flag back.
        let was_taken = self.0.swap(true, Ordering::Acquire);
        (!was_taken).then(|| Taken(self))
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        self.0 .0.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time() {
        let flag = InUse::default();
        let first = flag.take().expect("free at first");
        // A call refused leaves it with its holder.
        assert!(flag.take().is_none(), "taken twice");
        assert!(flag.take().is_none(), "a refused call gave it back");
        drop(first);
        assert!(flag.take().is_some(), "given back when dropped");
    }
}
