//! What C's `sode_exchange *` points to: the exchange, which one call at a
//! time takes. A program's threads may call sode at once on different
//! exchanges and communicators; an overlapping call on one exchange (every
//! OpenMP thread of a parallel region calling `sode_exchange_wait` on it,
//! say), or a collective call overlapping another on the same
//! communicator, is refused with `SODE_ERR_STATE`, where it would race on
//! the exchange's state. Calls take their locks with `try_lock`: a call
//! is never made to wait for another thread's.

use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use crate::error::{CapiError, Result};
use crate::exchange::Exchange;

/// A communicator's collective steps (a commit of any of its exchanges, a
/// reorder), which one call at a time takes.
pub(crate) type Steps = Arc<Mutex<()>>;

/// An exchange, from description to free.
#[derive(Debug)]
pub struct ExchangeHandle {
    exchange: Mutex<Exchange>,
    /// The collective steps of the communicator it was made from, taken
    /// by its commit.
    steps: Steps,
}

impl ExchangeHandle {
    /// A handle for `exchange`, made from a communicator whose collective
    /// steps are `steps`.
    pub(crate) fn new(exchange: Exchange, steps: Steps) -> ExchangeHandle {
        ExchangeHandle {
            exchange: Mutex::new(exchange),
            steps,
        }
    }

    /// The exchange, for call `op`: refused while another call holds it.
    pub(crate) fn hold(&self, op: &'static str) -> Result<MutexGuard<'_, Exchange>> {
        taken(
            self.exchange.try_lock(),
            op,
            "another thread is in a call on this exchange",
        )
    }

    /// The exchange's communicator's collective steps, for call `op` (a
    /// commit): refused while another collective call on it runs.
    pub(crate) fn collective(&self, op: &'static str) -> Result<MutexGuard<'_, ()>> {
        take_steps(&self.steps, op)
    }
}

/// `steps` taken for collective call `op`, or the error that says why not.
pub(crate) fn take_steps<'a>(steps: &'a Mutex<()>, op: &'static str) -> Result<MutexGuard<'a, ()>> {
    taken(
        steps.try_lock(),
        op,
        "another thread is in a collective call on this communicator (a commit, a reorder)",
    )
}

/// What a `try_lock` for call `op` came to. A lock a panicking call left
/// (caught at the C boundary) is taken as it is: the exchange's own state
/// says what it can still do.
fn taken<'a, T>(
    lock: std::result::Result<MutexGuard<'a, T>, TryLockError<MutexGuard<'a, T>>>,
    op: &'static str,
    holder: &str,
) -> Result<MutexGuard<'a, T>> {
    match lock {
        Ok(guard) => Ok(guard),
        Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
        Err(TryLockError::WouldBlock) => Err(CapiError::State {
            op,
            why: format!("{holder}: calls on one exchange, and collective calls on one communicator, must not overlap (as MPI_THREAD_SERIALIZED); make them from one thread (omp master or single), or give each thread its own exchange"),
        }),
    }
}
