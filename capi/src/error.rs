//! The one error type of the C ABI, and the status code each maps to.

use sode::HaloError;
use sode_job::JobError;

/// Status codes returned by every C function (`SODE_OK` is 0).
pub mod status {
    /// Success.
    pub const OK: i32 = 0;
    /// A required pointer argument was null.
    pub const ERR_NULL: i32 = 1;
    /// An argument is invalid (a value out of range, an unknown type, a
    /// field that does not fit the exchange).
    pub const ERR_ARG: i32 = 2;
    /// The call is not allowed now (commit twice, start before commit,
    /// wait without start, free while in flight, after a failure).
    pub const ERR_STATE: i32 = 3;
    /// `wait` reached its timeout; it may be called again.
    pub const ERR_TIMEOUT: i32 = 4;
    /// Finding or meeting the other ranks failed.
    pub const ERR_BOOTSTRAP: i32 = 5;
    /// The ranks described different exchanges (collective calls fail on
    /// every rank with this code).
    pub const ERR_MISMATCH: i32 = 6;
    /// A channel failed: a peer died, the device or shared memory failed.
    pub const ERR_CHANNEL: i32 = 7;
    /// A bug in sode (a caught panic): please report it with the message.
    pub const ERR_INTERNAL: i32 = 8;
}

/// What went wrong in a C call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CapiError {
    /// A required pointer was null.
    #[error("{op}: `{arg}` is a null pointer")]
    Null {
        /// The function.
        op: &'static str,
        /// The argument.
        arg: &'static str,
    },
    /// An invalid argument.
    #[error("{op}: {why}")]
    Invalid {
        /// The function.
        op: &'static str,
        /// What is wrong and what to do.
        why: String,
    },
    /// A call in the wrong state.
    #[error("{op}: {why}")]
    State {
        /// The function.
        op: &'static str,
        /// What state it needs.
        why: String,
    },
    /// Meeting the other ranks failed.
    #[error("{op}: bootstrap")]
    Bootstrap {
        /// The function.
        op: &'static str,
        /// What failed.
        source: JobError,
    },
    /// The ranks described different exchanges.
    #[error("commit: the ranks disagree: {why}")]
    Mismatch {
        /// What differs, and between which ranks.
        why: String,
    },
    /// The exchange failed on another rank; every rank fails alike.
    #[error("commit failed on rank {rank}: {message}")]
    OnRank {
        /// The lowest rank that failed.
        rank: usize,
        /// Its status code.
        status: i32,
        /// Its message.
        message: String,
    },
    /// The exchange itself failed.
    #[error("{op}")]
    Exchange {
        /// The function.
        op: &'static str,
        /// What failed.
        source: HaloError,
    },
    /// A panic, caught at the boundary.
    #[error("internal error in {op} (a bug in sode, please report it): {why}")]
    Internal {
        /// The function.
        op: &'static str,
        /// The panic's message.
        why: String,
    },
}

impl CapiError {
    /// The status code the C caller sees.
    pub fn status(&self) -> i32 {
        match self {
            CapiError::Null { .. } => status::ERR_NULL,
            CapiError::Invalid { .. } => status::ERR_ARG,
            CapiError::State { .. } => status::ERR_STATE,
            CapiError::Bootstrap { .. } => status::ERR_BOOTSTRAP,
            CapiError::Mismatch { .. } => status::ERR_MISMATCH,
            CapiError::OnRank { status, .. } => *status,
            CapiError::Internal { .. } => status::ERR_INTERNAL,
            CapiError::Exchange { source, .. } => match source {
                HaloError::Timeout { .. } => status::ERR_TIMEOUT,
                HaloError::State(_) => status::ERR_STATE,
                HaloError::Usage { .. } | HaloError::Decomposition { .. } => status::ERR_ARG,
                HaloError::Barrier { .. } => status::ERR_BOOTSTRAP,
                _ => status::ERR_CHANNEL,
            },
        }
    }
}

/// `Result` with [`CapiError`].
pub type Result<T, E = CapiError> = std::result::Result<T, E>;
