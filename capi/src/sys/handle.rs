//! What C's `sode_exchange *` points to: the exchange, reached by one call
//! at a time. A program's threads may call sode at once on different
//! exchanges and communicators; an overlapping call on one exchange (every
//! OpenMP thread of a parallel region calling `sode_exchange_wait` on it,
//! say), or a collective call overlapping another on the same
//! communicator, is refused with `SODE_ERR_STATE`, where it would race on
//! the exchange's state.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use crate::error::{CapiError, Result};
use crate::exchange::Exchange;
use crate::in_use::{InUse, Taken};

/// An exchange, from description to free.
#[derive(Debug)]
pub struct ExchangeHandle {
    in_call: InUse,
    /// The collective steps of the communicator it was made from, taken
    /// by its commit.
    steps: Arc<InUse>,
    exchange: UnsafeCell<Exchange>,
}

/// An exchange held by one call: let go when dropped.
#[derive(Debug)]
pub(crate) struct Held<'a> {
    handle: &'a ExchangeHandle,
    _call: Taken<'a>,
}

impl ExchangeHandle {
    /// A handle for `exchange`, made from a communicator whose collective
    /// steps are `steps`.
    pub(crate) fn new(exchange: Exchange, steps: Arc<InUse>) -> ExchangeHandle {
        ExchangeHandle {
            in_call: InUse::default(),
            steps,
            exchange: UnsafeCell::new(exchange),
        }
    }

    /// The exchange, for call `op`: refused while another call holds it.
    pub(crate) fn hold(&self, op: &'static str) -> Result<Held<'_>> {
        // The error is made only when refused: a call allocates nothing.
        let call = self.in_call.take().ok_or_else(|| CapiError::State {
            op,
            why: overlap("another thread is in a call on this exchange"),
        })?;
        Ok(Held {
            handle: self,
            _call: call,
        })
    }

    /// The exchange's communicator's collective steps, for call `op` (a
    /// commit): refused while another collective call on it runs.
    pub(crate) fn collective(&self, op: &'static str) -> Result<Taken<'_>> {
        take_steps(&self.steps, op)
    }
}

/// `steps` taken for collective call `op`, or the error that says why not.
pub(crate) fn take_steps<'a>(steps: &'a InUse, op: &'static str) -> Result<Taken<'a>> {
    steps.take().ok_or_else(|| CapiError::State {
        op,
        why: overlap(
            "another thread is in a collective call on this communicator (a commit, a reorder)",
        ),
    })
}

/// What to do about overlapping calls.
fn overlap(what: &str) -> String {
    format!("{what}: calls on one exchange, and collective calls on one communicator, must not overlap (as MPI_THREAD_SERIALIZED); make them from one thread (omp master or single), or give each thread its own exchange")
}

impl<'a> Held<'a> {
    /// The handle it holds.
    pub(crate) fn handle(&self) -> &'a ExchangeHandle {
        self.handle
    }
}

impl Deref for Held<'_> {
    type Target = Exchange;

    fn deref(&self) -> &Exchange {
        // SAFETY: this call holds `in_call`, so no other reference to the
        // exchange exists until it is dropped.
        unsafe { &*self.handle.exchange.get() }
    }
}

impl DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Exchange {
        // SAFETY: as in `deref`; `&mut self` keeps this one unique.
        unsafe { &mut *self.handle.exchange.get() }
    }
}
