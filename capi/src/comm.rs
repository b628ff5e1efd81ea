//! A communicator: the ranks of a job, however they were found.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sode_job::{AllgatherFn, ExternalOob, LaunchInfo, World};

use crate::error::{CapiError, Result};
use crate::handle::Steps;

/// The ranks of a job and how long collective steps may take.
#[derive(Debug)]
pub struct Comm {
    /// The job.
    pub world: World,
    /// The deadline of setup steps (commit).
    pub timeout: Duration,
    /// Its collective steps, which one call at a time takes (a commit of
    /// any of its exchanges, a reorder).
    steps: Steps,
}

/// A timeout in seconds from C: positive, or `INFINITY` for no deadline
/// ([`sode_job::NO_DEADLINE`]), or [`SODE_TIMEOUT_DEFAULT`](crate::SODE_TIMEOUT_DEFAULT)
/// for the job's default (`SODE_TIMEOUT`).
pub fn seconds(op: &'static str, s: f64) -> Result<Duration> {
    if s == crate::SODE_TIMEOUT_DEFAULT {
        return sode_job::default_wait_timeout().map_err(|e| CapiError::Invalid {
            op,
            why: e.to_string(),
        });
    }
    if s == f64::INFINITY {
        return Ok(sode_job::NO_DEADLINE);
    }
    if !(s.is_finite() && s > 0.0) {
        return Err(CapiError::Invalid {
            op,
            why: format!("a timeout of {s} s: give a positive number of seconds, INFINITY for no deadline, or SODE_TIMEOUT_DEFAULT for the job's (SODE_TIMEOUT)"),
        });
    }
    Ok(Duration::try_from_secs_f64(s)
        .unwrap_or(sode_job::NO_DEADLINE)
        .min(sode_job::NO_DEADLINE))
}

impl Comm {
    /// The communicator of `world`, whose setup steps take `timeout`.
    pub fn new(world: World, timeout: Duration) -> Comm {
        Comm {
            world,
            timeout,
            steps: Arc::default(),
        }
    }

    /// Its collective steps, shared with its exchanges.
    pub(crate) fn steps(&self) -> &Steps {
        &self.steps
    }

    /// A communicator of the same job with its ranks renumbered
    /// (`world`): it takes the same collective steps, so it shares their
    /// turn.
    pub(crate) fn renumbered(&self, world: World) -> Comm {
        Comm {
            world,
            timeout: self.timeout,
            steps: self.steps.clone(),
        }
    }

    /// From the launcher's environment (`sode-run`, or `SODE_ROOT` with a
    /// launcher's rank variables); a process nothing launched is a job of
    /// one.
    pub fn from_env(timeout: Duration) -> Result<Comm> {
        let op = "sode_comm_create_env";
        let world = World::init(timeout).map_err(|source| met_failed(op, source))?;
        Ok(Comm::new(world, timeout))
    }

    /// Takes part in the creation [`Comm::from_env`] makes on the other
    /// ranks, within the job's default timeout, only to make it fail there
    /// with `refusal`, which it returns: the other ranks fail at once,
    /// naming this rank, rather than wait for it.
    pub fn refuse_env(refusal: CapiError) -> CapiError {
        let timeout = sode_job::default_wait_timeout().unwrap_or(sode_job::NO_DEADLINE);
        refused(refusal, |status, message| {
            World::refuse_init(status, message, timeout)
        })
    }

    /// Takes part in the creation [`Comm::over_allgather`] makes on the
    /// other ranks, within `timeout`, only to make it fail there with
    /// `refusal`, as [`Comm::refuse_env`].
    pub fn refuse_over_allgather(
        rank: usize,
        size: usize,
        gather: AllgatherFn,
        refusal: CapiError,
        timeout: Duration,
    ) -> CapiError {
        refused(refusal, |status, message| {
            let deadline = Instant::now() + timeout;
            let oob = ExternalOob::new(rank, size, gather, deadline)?;
            World::refuse(Box::new(oob), status, message, deadline)
        })
    }

    /// Over the program's own allgather (an MPI communicator's).
    pub fn over_allgather(
        rank: usize,
        size: usize,
        gather: AllgatherFn,
        timeout: Duration,
    ) -> Result<Comm> {
        let op = "sode_comm_create_allgather";
        // The program's allgather is bounded by its own runtime (MPI's by
        // the communicator's timeout); sode's steps after it get `timeout`
        // from when the ranks have met in it.
        // A rank whose card fails (its own setting) refuses in the first
        // step: the others are told as of a refusal in the meeting.
        let oob = ExternalOob::new(rank, size, gather, Instant::now() + timeout)
            .map_err(|source| met_failed(op, source))?;
        let job_id = LaunchInfo::from_env().ok().and_then(|l| l.job_id);
        let world = World::over(Box::new(oob), job_id, Instant::now() + timeout)
            .map_err(|source| met_failed(op, source))?;
        Ok(Comm::new(world, timeout))
    }
}

/// The error of creation `op` when meeting the other ranks failed: when a
/// rank refused it (its caller's argument, or its own settings, were
/// wrong), that rank's status and message, as every rank of a failed
/// commit returns; else the meeting's own.
fn met_failed(op: &'static str, source: sode_job::JobError) -> CapiError {
    match source {
        sode_job::JobError::GaveUp {
            rank,
            code,
            message,
        } => CapiError::OnRank {
            op,
            rank,
            // A rank whose own part of the meeting failed (a setting of
            // its own) carries no status: it returned SODE_ERR_BOOTSTRAP.
            status: if code > 0 {
                code
            } else {
                crate::SODE_ERR_BOOTSTRAP
            },
            message,
        },
        source => CapiError::Bootstrap { op, source },
    }
}

/// A collective creation refused on this rank, its caller's own argument
/// being wrong (`refusal`: a null out pointer, a bad timeout). `tell`
/// takes part in the creation the other ranks make, with this rank's
/// status and message, so that theirs fails at once, naming this rank,
/// where it would otherwise wait for it (forever, without a deadline).
/// This rank returns its own error.
fn refused(refusal: CapiError, tell: impl FnOnce(i32, &str) -> sode_job::Result<()>) -> CapiError {
    let (status, message) = (refusal.status(), sode_job::diag::chain(&refusal));
    if let Err(e) = tell(status, &message) {
        tracing::warn!(
            "{message}; and the other ranks could not be told: {}",
            sode_job::diag::chain(&e)
        );
    }
    CapiError::Refused { status, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_from_c() {
        assert_eq!(seconds("t", 2.5).unwrap(), Duration::from_millis(2500));
        assert_eq!(seconds("t", f64::INFINITY).unwrap(), sode_job::NO_DEADLINE);
        assert_eq!(seconds("t", 1e300).unwrap(), sode_job::NO_DEADLINE);
        for bad in [0.0, -2.0, f64::NAN, f64::NEG_INFINITY] {
            let e = seconds("t", bad).unwrap_err().to_string();
            assert!(e.contains("INFINITY for no deadline"), "{e}");
        }
        // SODE_TIMEOUT is not set in the test environment (or set well).
        if std::env::var_os(sode_job::TIMEOUT_VAR).is_none() {
            assert_eq!(
                seconds("t", crate::SODE_TIMEOUT_DEFAULT).unwrap(),
                sode_job::NO_DEADLINE
            );
        }
    }
}
