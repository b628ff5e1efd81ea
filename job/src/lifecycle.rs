//! The one lifecycle of a persistent exchange: idle, in flight, or failed
//! for good. Every exchange (shared memory, RDMA, the halo exchange) keeps
//! its state in a [`Lifecycle`] and reports a call in the wrong state with
//! the same [`StateError`].

/// Where a persistent exchange stands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Lifecycle {
    /// Built, or the last exchange completed: buffers may be used.
    #[default]
    Idle,
    /// Started and not yet complete: the channel owns the buffers.
    InFlight,
    /// An error ended it; the first error, as text.
    Failed(String),
}

/// A call made in a state that does not allow it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The call needs the other of idle / in flight.
    #[error("{op}: {why}")]
    Wrong {
        /// The call.
        op: &'static str,
        /// What state it needs and what to do.
        why: &'static str,
    },
    /// An earlier error failed the exchange for good.
    #[error("{op}: the exchange failed earlier ({first}); build a new one")]
    Failed {
        /// The call.
        op: &'static str,
        /// The first error.
        first: String,
    },
}

impl Lifecycle {
    /// Fails unless idle (start, lending buffers).
    ///
    /// # Errors
    ///
    /// [`StateError`] naming `op` and why: in flight, or failed earlier.
    pub fn require_idle(&self, op: &'static str) -> Result<(), StateError> {
        match self {
            Lifecycle::Idle => Ok(()),
            Lifecycle::InFlight => Err(StateError::Wrong {
                op,
                why: "the previous exchange is still in flight: call wait first",
            }),
            Lifecycle::Failed(first) => Err(StateError::Failed {
                op,
                first: first.clone(),
            }),
        }
    }

    /// Fails unless an exchange is in flight (wait, test).
    ///
    /// # Errors
    ///
    /// [`StateError`] naming `op` and why: nothing started, or failed
    /// earlier.
    pub fn require_in_flight(&self, op: &'static str) -> Result<(), StateError> {
        match self {
            Lifecycle::InFlight => Ok(()),
            Lifecycle::Idle => Err(StateError::Wrong {
                op,
                why: "no exchange in flight: call start first",
            }),
            Lifecycle::Failed(first) => Err(StateError::Failed {
                op,
                first: first.clone(),
            }),
        }
    }

    /// Idle → in flight.
    pub fn start(&mut self) {
        debug_assert_eq!(*self, Lifecycle::Idle);
        *self = Lifecycle::InFlight;
    }

    /// In flight → idle.
    pub fn complete(&mut self) {
        if *self == Lifecycle::InFlight {
            *self = Lifecycle::Idle;
        }
    }

    /// Records the first error; later ones do not replace it. Returns
    /// whether this call was the one that failed it.
    pub fn fail(&mut self, error: &dyn std::fmt::Display) -> bool {
        if self.is_failed() {
            return false;
        }
        *self = Lifecycle::Failed(error.to_string());
        true
    }

    /// Whether an error ended it.
    pub fn is_failed(&self) -> bool {
        matches!(self, Lifecycle::Failed(_))
    }

    /// Whether an exchange is in flight.
    pub fn in_flight(&self) -> bool {
        *self == Lifecycle::InFlight
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_lifecycle() {
        let mut l = Lifecycle::default();
        assert!(l.require_idle("start").is_ok());
        let e = l.require_in_flight("wait").unwrap_err().to_string();
        assert!(e.contains("wait") && e.contains("call start first"), "{e}");
        l.start();
        let e = l.require_idle("start").unwrap_err().to_string();
        assert!(e.contains("call wait first"), "{e}");
        l.complete();
        assert_eq!(l, Lifecycle::Idle);
        assert!(l.fail(&"peer 3 died"));
        assert!(!l.fail(&"a later error"));
        let e = l.require_idle("start").unwrap_err().to_string();
        assert!(e.contains("peer 3 died") && !e.contains("later"), "{e}");
        assert!(l.require_in_flight("wait").is_err());
    }
}
