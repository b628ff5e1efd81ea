//! A communicator: the ranks of a job, however they were found.

use std::time::{Duration, Instant};

use sode_job::{AllgatherFn, ExternalOob, LaunchInfo, World};

use crate::error::{CapiError, Result};

/// The ranks of a job and how long collective steps may take.
#[derive(Debug)]
pub struct Comm {
    /// The job.
    pub world: World,
    /// The deadline of setup steps (commit).
    pub timeout: Duration,
}

/// A timeout in seconds from C: positive and finite.
pub fn seconds(op: &'static str, s: f64) -> Result<Duration> {
    if !(s.is_finite() && s > 0.0 && s <= 1e9) {
        return Err(CapiError::Invalid {
            op,
            why: format!("a timeout of {s} s: give a positive number of seconds (at most 1e9)"),
        });
    }
    Ok(Duration::from_secs_f64(s))
}

impl Comm {
    /// From the launcher's environment (`sode-run`, or `SODE_ROOT` with a
    /// launcher's rank variables); a process nothing launched is a job of
    /// one.
    pub fn from_env(timeout: Duration) -> Result<Comm> {
        let op = "sode_comm_create_env";
        let world = World::init(timeout).map_err(|source| CapiError::Bootstrap { op, source })?;
        Ok(Comm { world, timeout })
    }

    /// Over the program's own allgather (an MPI communicator's).
    pub fn over_allgather(
        rank: usize,
        size: usize,
        gather: AllgatherFn,
        timeout: Duration,
    ) -> Result<Comm> {
        let op = "sode_comm_create_allgather";
        let oob = ExternalOob::new(rank, size, gather)
            .map_err(|source| CapiError::Bootstrap { op, source })?;
        let job_id = LaunchInfo::from_env().ok().and_then(|l| l.job_id);
        let world = World::over(Box::new(oob), job_id, Instant::now() + timeout)
            .map_err(|source| CapiError::Bootstrap { op, source })?;
        Ok(Comm { world, timeout })
    }
}
