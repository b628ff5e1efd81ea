//! Who this process is: its job, its rank, where segments go, what the
//! machine allows, and the measured thresholds.

use std::path::PathBuf;

use crate::caps::Capabilities;
use crate::error::{Result, ShmError};
use crate::exchange::ExchangeBuilder;
use crate::thresholds::Thresholds;

/// Per-process state shared by all exchanges of a process.
#[derive(Debug)]
pub struct Context {
    pub(crate) job: String,
    pub(crate) rank: usize,
    pub(crate) local_rank: Option<usize>,
    pub(crate) dir: PathBuf,
    caps: Capabilities,
    thresholds: Option<Thresholds>,
    pub(crate) next_exchange: u32,
}

fn env_first(names: &[&str]) -> Option<(String, String)> {
    names
        .iter()
        .find_map(|n| std::env::var(n).ok().map(|v| (n.to_string(), v)))
}

fn parse_rank(name: &str, value: &str) -> Result<usize> {
    value.trim().parse().map_err(|_| ShmError::InvalidSetting {
        name: name.into(),
        value: value.into(),
        why: "expected a non-negative integer".into(),
    })
}

impl Context {
    /// A context for `rank` of job `job`. The job id names the segments, so
    /// two jobs on one node must use different ids; it may contain ASCII
    /// letters, digits, `.`, `_` and `-`. Segments go to `SODE_SHM_DIR`, or
    /// `/dev/shm`.
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
            caps: Capabilities::probe(),
            thresholds: None,
            next_exchange: 0,
        })
    }

    /// A context from the launcher's environment: the job id from
    /// `SODE_JOB_ID` (or Slurm's `SLURM_JOB_ID`.`SLURM_STEP_ID`, or PMIx's
    /// `PMIX_NAMESPACE`), the rank from `SODE_RANK`, `SLURM_PROCID`,
    /// `OMPI_COMM_WORLD_RANK` or `PMI_RANK`, and the node-local rank from
    /// `SODE_LOCAL_RANK`, `SLURM_LOCALID` or `OMPI_COMM_WORLD_LOCAL_RANK`.
    pub fn from_env() -> Result<Context> {
        let job = if let Ok(j) = std::env::var("SODE_JOB_ID") {
            j
        } else if let Ok(j) = std::env::var("SLURM_JOB_ID") {
            format!(
                "{j}.{}",
                std::env::var("SLURM_STEP_ID").unwrap_or_else(|_| "0".into())
            )
        } else if let Ok(ns) = std::env::var("PMIX_NAMESPACE") {
            ns.chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect()
        } else {
            return Err(ShmError::InvalidSetting {
                name: "SODE_JOB_ID".into(),
                value: String::new(),
                why: "no job id in the environment (SODE_JOB_ID, SLURM_JOB_ID or PMIX_NAMESPACE): start the ranks with sode-run or a launcher, or set SODE_JOB_ID".into(),
            });
        };
        let (name, value) = env_first(&["SODE_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"])
            .ok_or_else(|| ShmError::InvalidSetting {
                name: "SODE_RANK".into(),
                value: String::new(),
                why: "no rank in the environment (SODE_RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMI_RANK)".into(),
            })?;
        let mut ctx = Context::new(&job, parse_rank(&name, &value)?)?;
        if let Some((name, value)) = env_first(&[
            "SODE_LOCAL_RANK",
            "SLURM_LOCALID",
            "OMPI_COMM_WORLD_LOCAL_RANK",
        ]) {
            ctx.local_rank = Some(parse_rank(&name, &value)?);
        }
        Ok(ctx)
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
    pub fn capabilities(&self) -> &Capabilities {
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
    pub fn exchange(&mut self) -> ExchangeBuilder<'_> {
        ExchangeBuilder::new(self)
    }
}
