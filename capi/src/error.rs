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
    #[error("{op}")]
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
    /// A collective call (a commit, a communicator's creation) failed on
    /// another rank; every rank fails alike.
    #[error("{op} failed on rank {rank}: {message}")]
    OnRank {
        /// The function.
        op: &'static str,
        /// The lowest rank that failed.
        rank: usize,
        /// Its status code.
        status: i32,
        /// Its message.
        message: String,
    },
    /// This rank refused a collective creation, its caller's own argument
    /// being wrong, and took part in it only to tell the other ranks,
    /// whose creation fails alike ([`CapiError::OnRank`]).
    #[error("{message}")]
    Refused {
        /// The status it fails with.
        status: i32,
        /// What was wrong, naming the function.
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
            // A dead rank is a channel's failure, wherever it is met.
            CapiError::Bootstrap {
                source: JobError::JobFailed { .. },
                ..
            } => SODE_ERR_CHANNEL,
            CapiError::Bootstrap { .. } => SODE_ERR_BOOTSTRAP,
            CapiError::Mismatch { .. } => SODE_ERR_MISMATCH,
            CapiError::OnRank { status, .. } | CapiError::Refused { status, .. } => *status,
            CapiError::Internal { .. } => SODE_ERR_INTERNAL,
            CapiError::Exchange { source, .. } => match source {
                HaloError::Timeout { .. } => SODE_ERR_TIMEOUT,
                HaloError::State(_) => SODE_ERR_STATE,
                HaloError::Usage { .. } | HaloError::Decomposition { .. } => SODE_ERR_ARG,
                HaloError::Disagree { .. } => SODE_ERR_MISMATCH,
                HaloError::Barrier { .. } => SODE_ERR_BOOTSTRAP,
                _ => SODE_ERR_CHANNEL,
            },
        }
    }
}

/// `Result` with [`CapiError`].
pub type Result<T, E = CapiError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn step_failed(source: JobError) -> CapiError {
        CapiError::Bootstrap {
            op: "sode_exchange_commit",
            source,
        }
    }

    #[test]
    fn a_rank_found_dead_is_a_channel_failure_wherever_it_is_met() {
        let failure = sode_job::Failure {
            rank: 1,
            launch_rank: 1,
            host: "n1".into(),
            why: "closed its health link without finishing".into(),
        };
        let in_a_step = step_failed(JobError::JobFailed {
            failure: failure.clone(),
        });
        let in_a_channel = CapiError::Exchange {
            op: "sode_exchange_commit",
            source: HaloError::JobFailed {
                failure,
                outstanding: "setting up exchange h0's channels".into(),
            },
        };
        assert_eq!(in_a_step.status(), SODE_ERR_CHANNEL);
        assert_eq!(in_a_channel.status(), in_a_step.status());
        assert_eq!(
            sode_job::diag::chain(&in_a_step),
            "sode_exchange_commit: the job failed: rank 1 (on n1) closed its health link without finishing"
        );
    }

    #[test]
    fn a_step_that_failed_otherwise_is_a_bootstrap_failure_said_once() {
        let closed = step_failed(JobError::Bootstrap {
            step: "receive".into(),
            whom: "rank 1".into(),
            source: std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed"),
        });
        assert_eq!(closed.status(), SODE_ERR_BOOTSTRAP);
        assert_eq!(
            sode_job::diag::chain(&closed),
            "sode_exchange_commit: bootstrap: receive with rank 1: connection closed"
        );
    }
}
