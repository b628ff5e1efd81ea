//! Who this process is: its job, its rank, where segments go, what the
//! machine allows, and the measured thresholds.

use std::path::PathBuf;

use sode_job::{LaunchInfo, World};

use crate::caps::ShmCaps;
use crate::error::{Result, ShmError};
use crate::exchange::ShmExchangeBuilder;
use crate::thresholds::Thresholds;

/// Per-process state shared by all exchanges of a process.
#[derive(Debug)]
pub struct Context {
    pub(crate) job: String,
    pub(crate) rank: usize,
    pub(crate) local_rank: Option<usize>,
    pub(crate) dir: PathBuf,
    caps: ShmCaps,
    thresholds: Option<Thresholds>,
    pub(crate) next_exchange: u32,
}

impl Context {
    /// A context for `rank` of job `job`. The job id names the segments, so
    /// two jobs on one node must use different ids; it may contain ASCII
    /// letters, digits, `.`, `_` and `-`. Segment locators go to
    /// `SODE_SHM_DIR`, or `/dev/shm`.
    pub fn new(job: &str, rank: usize) -> Result<Context> {
        if job.is_empty()
            || job.len() > 64
            || !job
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(ShmError::InvalidSetting {
                name: "job id".into(),
                value: job.into(),
                why: "use 1-64 ASCII letters, digits, '.', '_' or '-'".into(),
            });
        }
        let dir = std::env::var_os("SODE_SHM_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/dev/shm"));
        Ok(Context {
            job: job.into(),
            rank,
            local_rank: None,
            dir,
            caps: ShmCaps::probe(),
            thresholds: None,
            next_exchange: 0,
        })
    }

    /// A context for this rank of `world`, under the job id its ranks
    /// agreed on, with its node-local rank.
    pub fn from_world(world: &World) -> Result<Context> {
        let mut ctx = Context::new(world.job_id(), world.rank())?;
        ctx.local_rank = Some(world.local_rank());
        Ok(ctx)
    }

    /// A context from what the launcher said (see
    /// [`LaunchInfo`](sode_job::LaunchInfo)): its job id, rank and local
    /// rank. The job id must be given (`SODE_JOB_ID`, Slurm's job, PMIx's
    /// namespace); [`Context::from_world`] works without one.
    pub fn from_launch(launch: &LaunchInfo) -> Result<Context> {
        let Some(job) = &launch.job_id else {
            return Err(ShmError::InvalidSetting {
                name: sode_job::JOB_ID_VAR.into(),
                value: String::new(),
                why: "no job id in the environment (SODE_JOB_ID, SLURM_JOB_ID or PMIX_NAMESPACE): start the ranks with sode-run or a launcher, set SODE_JOB_ID, or use Context::from_world".into(),
            });
        };
        let mut ctx = Context::new(&sode_job::sanitise_job_id(job), launch.rank)?;
        ctx.local_rank = launch.local_rank;
        Ok(ctx)
    }

    /// [`Context::from_launch`] with the launcher's environment.
    pub fn from_env() -> Result<Context> {
        let launch = LaunchInfo::from_env().map_err(|e| ShmError::InvalidSetting {
            name: "launch environment".into(),
            value: String::new(),
            why: e.to_string(),
        })?;
        Self::from_launch(&launch)
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The job id.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The node-local rank, if the launcher gave one.
    pub fn local_rank(&self) -> Option<usize> {
        self.local_rank
    }

    /// What the machine allows.
    pub fn capabilities(&self) -> &ShmCaps {
        &self.caps
    }

    /// The crossover sizes: measured on first use (a few milliseconds), with
    /// `SODE_SHM_EAGER_MAX` / `SODE_SHM_GET_MIN` applied.
    pub fn thresholds(&mut self) -> Result<Thresholds> {
        if let Some(t) = self.thresholds {
            return Ok(t);
        }
        let t = Thresholds::from_env_or_measure()?;
        self.thresholds = Some(t);
        Ok(t)
    }

    /// Replaces the thresholds for exchanges built from now on.
    pub fn set_thresholds(&mut self, thresholds: Thresholds) {
        self.thresholds = Some(thresholds);
    }

    /// Starts describing an exchange. Building it is collective: every
    /// process named as a neighbour must build its side, in the same order
    /// of exchanges (or with the same explicit name).
    pub fn exchange(&mut self) -> ShmExchangeBuilder<'_> {
        ShmExchangeBuilder::new(self)
    }
}
