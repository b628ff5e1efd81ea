//! The one error type of the C ABI, and the status code each maps to.

use sode::HaloError;
use sode_job::JobError;

use crate::{
    SODE_ERR_ARG, SODE_ERR_BOOTSTRAP, SODE_ERR_CHANNEL, SODE_ERR_INTERNAL, SODE_ERR_MISMATCH,
    SODE_ERR_NULL, SODE_ERR_STATE, SODE_ERR_TIMEOUT,
};

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
    #[error("sode_exchange_commit: the ranks disagree: {why}")]
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
            CapiError::Null { .. } => SODE_ERR_NULL,
            CapiError::Invalid { .. } => SODE_ERR_ARG,
            CapiError::State { .. } => SODE_ERR_STATE,
            CapiError::Bootstrap { .. } => SODE_ERR_BOOTSTRAP,
            CapiError::Mismatch { .. } => SODE_ERR_MISMATCH,
            CapiError::OnRank { status, .. } => *status,
            CapiError::Internal { .. } => SODE_ERR_INTERNAL,
            CapiError::Exchange { source, .. } => match source {
                HaloError::Timeout { .. } => SODE_ERR_TIMEOUT,
                HaloError::State(_) => SODE_ERR_STATE,
                HaloError::Usage { .. } | HaloError::Decomposition { .. } => SODE_ERR_ARG,
                HaloError::Barrier { .. } => SODE_ERR_BOOTSTRAP,
                _ => SODE_ERR_CHANNEL,
            },
        }
    }
}

/// `Result` with [`CapiError`].
pub type Result<T, E = CapiError> = std::result::Result<T, E>;
