//! Where this process stands in a job, as its launcher said: the one place
//! that knows the launchers' variables.

use crate::auth::{Secret, SECRET_VAR};
use crate::error::{JobError, Result};

/// One launcher's variables.
#[derive(Debug)]
struct Launcher {
    /// Rank, `0..size`.
    rank: &'static str,
    /// Number of ranks.
    size: &'static str,
    /// Rank among the ranks of this node, when the launcher gives it.
    local_rank: &'static str,
}

/// The launchers sode recognises, in order of precedence. `SODE_*` (set by
/// `sode-run`, or by hand) overrides what a launcher around it set. A
/// launcher started inside another's job sets its own variables beside
/// those its processes inherit: every rank of an `mpirun` (Open MPI's or
/// MPICH's) in a Slurm batch script reads the script's `SLURM_PROCID=0`.
/// So the MPI launchers, which run inside Slurm's jobs, come before Slurm.
const LAUNCHERS: [Launcher; 4] = [
    Launcher {
        rank: "SODE_RANK",
        size: "SODE_SIZE",
        local_rank: "SODE_LOCAL_RANK",
    },
    Launcher {
        rank: "OMPI_COMM_WORLD_RANK",
        size: "OMPI_COMM_WORLD_SIZE",
        local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
    },
    Launcher {
        rank: "PMI_RANK",
        size: "PMI_SIZE",
        local_rank: "MPI_LOCALRANKID",
    },
    SLURM,
];

/// Slurm's variables (`srun`'s tasks; a batch script's own process has
/// them too, with no `SLURM_STEP_ID`).
const SLURM: Launcher = Launcher {
    rank: "SLURM_PROCID",
    size: "SLURM_NTASKS",
    local_rank: "SLURM_LOCALID",
};

/// The variable naming where the ranks meet (rank 0 listens there).
pub const ROOT_VAR: &str = "SODE_ROOT";
/// The variable naming the job (segment names, agreement between ranks).
pub const JOB_ID_VAR: &str = "SODE_JOB_ID";

/// Where this process stands in the job, as the launcher said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchInfo {
    /// This process's rank, `0..size`.
    pub rank: usize,
    /// Number of processes in the job.
    pub size: usize,
    /// Rank among the processes of this node, if the launcher said.
    pub local_rank: Option<usize>,
    /// The job's id (`SODE_JOB_ID`, Slurm's job and step, PMIx's namespace),
    /// if the launcher gave one; the ranks agree on one at bootstrap
    /// otherwise.
    pub job_id: Option<String>,
    /// The rendezvous address (`SODE_ROOT`), needed when `size > 1`.
    pub root: Option<String>,
    /// The job's secret (`SODE_JOB_SECRET`), needed when `size > 1`: every
    /// bootstrap connection proves with it that it belongs to the job.
    pub secret: Option<Secret>,
    /// The variable the rank came from.
    pub source: &'static str,
    /// Whether a PMIx server is there to meet the other ranks through
    /// (`PMIX_NAMESPACE` and a `PMIX_SERVER_URI*`), when `root` is not set.
    pub pmix: bool,
    /// Whether a PMI-1 wire server is there to meet the other ranks
    /// through (`PMI_FD` or `PMI_PORT`, with `PMI_RANK` and `PMI_SIZE`: MPICH's
    /// mpirun, `srun --mpi=pmi2`), when neither `root` nor PMIx is.
    pub pmi: bool,
}

/// Whether this process was started as a rank: a launcher set one of the
/// rank variables [`LaunchInfo`] reads.
pub fn launched() -> bool {
    LAUNCHERS.iter().any(|l| std::env::var_os(l.rank).is_some())
}

fn parse_count(name: &str, value: String) -> Result<usize> {
    value
        .trim()
        .parse::<usize>()
        .map_err(|_| JobError::InvalidSetting {
            name: name.into(),
            value,
            why: "expected a non-negative integer".into(),
        })
}

/// A job id usable in file names: ASCII letters, digits, `.`, `_`, `-`.
pub fn sanitise_job_id(raw: &str) -> String {
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}

/// The job id: `SODE_JOB_ID`, else the id of the launcher that gave the
/// rank. Slurm's is its job and step (`JOB.STEP`). Another launcher's is
/// its PMIx namespace, else the Slurm step it runs in: MPICH's `mpirun`
/// starts its proxies as a step of their own, while Open MPI's in a batch
/// script runs in none, and two of them at once would share
/// `SLURM_JOB_ID`. None when the launcher gives none (the ranks then take
/// the PMI-1 server's name, or make one).
fn job_id(get: &impl Fn(&str) -> Option<String>, launcher: &Launcher) -> Option<String> {
    if let Some(j) = get(JOB_ID_VAR) {
        return Some(j);
    }
    let slurm = get("SLURM_JOB_ID");
    let step = get("SLURM_STEP_ID");
    if launcher.rank == SLURM.rank {
        let step = step.unwrap_or_else(|| "0".into());
        return slurm.map(|j| format!("{j}.{step}"));
    }
    get("PMIX_NAMESPACE")
        .map(|ns| sanitise_job_id(&ns))
        .or_else(|| Some(format!("{}.{}", slurm?, step?)))
}

impl LaunchInfo {
    /// Reads the rank and size from `SODE_RANK`/`SODE_SIZE`, Open MPI
    /// (`OMPI_COMM_WORLD_RANK`/`_SIZE`), PMI (`PMI_RANK`/`PMI_SIZE`) or
    /// Slurm (`SLURM_PROCID`/`SLURM_NTASKS`), the first pair present (an
    /// `mpirun` in a batch script sets its own beside Slurm's), with the
    /// same launcher's local rank; the job id from `SODE_JOB_ID`, else
    /// that launcher's (Slurm's `SLURM_JOB_ID`.`SLURM_STEP_ID`, another's
    /// `PMIX_NAMESPACE`); and the rendezvous from `SODE_ROOT=host:port`.
    ///
    /// # Errors
    ///
    /// [`JobError::InvalidSetting`] naming a variable that does not parse
    /// (a rank or size that is not a number, a rank not below the size);
    /// [`JobError::Launch`] when a launcher gave a rank but no way for the
    /// ranks to meet.
    pub fn from_env() -> Result<LaunchInfo> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// As [`LaunchInfo::from_env`], reading variables through `get`.
    ///
    /// # Errors
    ///
    /// As [`LaunchInfo::from_env`].
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<LaunchInfo> {
        let Some((launcher, rank)) = LAUNCHERS.iter().find_map(|l| get(l.rank).map(|r| (l, r)))
        else {
            return Err(JobError::Launch {
                why: "no rank in the environment (SODE_RANK/SODE_SIZE, SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/_SIZE or PMI_RANK/PMI_SIZE): start the ranks with sode-run -n N or a launcher".into(),
            });
        };
        let (rank_var, size_var) = (launcher.rank, launcher.size);
        let Some(size) = get(size_var) else {
            return Err(JobError::Launch {
                why: format!("{rank_var} is set but {size_var} is not"),
            });
        };
        let (rank, size) = (parse_count(rank_var, rank)?, parse_count(size_var, size)?);
        if size == 0 || rank >= size {
            return Err(JobError::Launch {
                why: format!("{rank_var}={rank} is not below {size_var}={size}"),
            });
        }
        let local_rank = get(launcher.local_rank)
            .map(|v| parse_count(launcher.local_rank, v))
            .transpose()?;
        let root = get(ROOT_VAR).filter(|r| !r.trim().is_empty());
        let pmix = pmix_available(&get);
        let pmi = pmi_available(&get);
        if size > 1 && root.is_none() && !pmix && !pmi {
            if rank_var == SLURM.rank && get("SLURM_STEP_ID").is_none() {
                return Err(JobError::Launch {
                    why: format!("{rank_var}={rank} of {size} is a Slurm batch script's own process, not a task: start the program from the script with srun --mpi=pmix (or pmi2), mpirun or sode-run"),
                });
            }
            return Err(JobError::Launch {
                why: format!("{rank_var}={rank} of {size}, but neither SODE_ROOT=host:port (where the ranks meet; sode-run sets it, with SODE_JOB_SECRET) nor a PMIx server (PMIX_NAMESPACE and PMIX_SERVER_URI*, set by Open MPI's mpirun and srun --mpi=pmix) nor a PMI one (PMI_FD or PMI_PORT, set by MPICH's mpirun and srun --mpi=pmi2) is in the environment: start the job with sode-run -n N, mpirun, srun --mpi=pmix or srun --mpi=pmi2, or set SODE_ROOT and SODE_JOB_SECRET (plain srun gives a rank but no way to meet)"),
            });
        }
        let secret = get(SECRET_VAR).map(|s| Secret::from_hex(&s)).transpose()?;
        if size > 1 && root.is_some() && secret.is_none() {
            return Err(JobError::Launch {
                why: format!("{SECRET_VAR} is not set: the ranks prove to each other with it that they belong to the job; sode-run sets it; by hand, give every rank the same 64 hex digits (export {SECRET_VAR}=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \\n'), and mpirun -x {SECRET_VAR})"),
            });
        }
        Ok(LaunchInfo {
            rank,
            size,
            local_rank,
            job_id: job_id(&get, launcher),
            root,
            secret,
            source: rank_var,
            pmix,
            pmi,
        })
    }

    /// Rank `rank` of a job of `size` ranks that meet at `port` on this
    /// machine's loopback, proving themselves with `secret`: ranks run as
    /// threads of one process (tests, benchmarks) or started by hand. Rank
    /// 0 listens there (see [`free_port`]); set `job_id` to name the job.
    pub fn loopback(rank: usize, size: usize, port: u16, secret: Secret) -> LaunchInfo {
        LaunchInfo {
            rank,
            size,
            local_rank: None,
            job_id: None,
            root: Some(format!("127.0.0.1:{port}")),
            secret: Some(secret),
            source: "loopback",
            pmix: false,
            pmi: false,
        }
    }

    /// A job of one process, as when nothing launched it.
    pub fn single() -> LaunchInfo {
        LaunchInfo {
            rank: 0,
            size: 1,
            local_rank: Some(0),
            job_id: None,
            root: None,
            secret: None,
            source: "single process",
            pmix: false,
            pmi: false,
        }
    }
}

/// Whether the environment names a PMIx server to connect to (checked
/// here, where the launcher is told apart, and re-exported as
/// [`pmix::available`](crate::pmix::available)).
pub fn pmix_available(get: &impl Fn(&str) -> Option<String>) -> bool {
    get("PMIX_NAMESPACE").is_some()
        && [
            "PMIX_SERVER_URI41",
            "PMIX_SERVER_URI4",
            "PMIX_SERVER_URI3",
            "PMIX_SERVER_URI21",
            "PMIX_SERVER_URI2",
        ]
        .iter()
        .any(|v| get(v).is_some())
}

/// Whether the environment names a PMI-1 wire server to talk to (as
/// [`pmi::available`](crate::pmi::available)).
pub fn pmi_available(get: &impl Fn(&str) -> Option<String>) -> bool {
    (get("PMI_FD").is_some() || get("PMI_PORT").is_some())
        && get("PMI_RANK").is_some()
        && get("PMI_SIZE").is_some()
}

/// A port on 127.0.0.1 for a job's rendezvous (rank 0 listens on it:
/// `SODE_ROOT`). The port stays bound by this process until a rank 0 of
/// this process listens on it, so no one else takes it in between; a rank
/// 0 in another process (a launcher's child) can bind it too. It is taken
/// below the kernel's ephemeral range when it can be, where no outgoing
/// connection is given it; successive calls name different ports.
///
/// # Errors
///
/// [`JobError::Start`] when no port can be bound at all.
pub fn free_port() -> Result<u16> {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let below = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    if below > 20_000 {
        let span = u64::from(below - 10_000);
        // Random per process; a step of a prime apart per call.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        let base = h.finish();
        for _ in 0..64 {
            let call = CALLS.fetch_add(1, Ordering::Relaxed);
            let port = 10_000 + (base.wrapping_add(call.wrapping_mul(7_919)) % span) as u16;
            if let Ok(port) = crate::held_ports::hold(port) {
                return Ok(port);
            }
        }
    }
    crate::held_ports::hold(0).map_err(|e| JobError::Start {
        why: "cannot find a free port for SODE_ROOT".into(),
        source: Some(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_bindable_distinct_and_below_the_ephemeral_range() {
        let below: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|r| r.split_whitespace().next()?.parse().ok())
            .unwrap_or(32768);
        let ports: Vec<u16> = (0..20).map(|_| free_port().unwrap()).collect();
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        for &p in &ports {
            assert!(
                below <= 20_000 || p < below,
                "{p} is in the ephemeral range from {below}"
            );
            std::net::TcpListener::bind(("127.0.0.1", p)).unwrap();
        }
    }

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    const SECRET: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    #[test]
    fn launchers_are_recognised_in_order() {
        let l = LaunchInfo::from_vars(vars(&[
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_JOB_ID", "77"),
            ("SODE_ROOT", "h:1"),
            ("SODE_JOB_SECRET", SECRET),
        ]))
        .unwrap();
        assert_eq!((l.rank, l.size, l.source), (3, 4, "SLURM_PROCID"));
        assert_eq!(l.local_rank, Some(1));
        assert_eq!(l.job_id.as_deref(), Some("77.0"));
        let l = LaunchInfo::from_vars(vars(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("PMIX_NAMESPACE", "prterun-h-1@1"),
            ("SODE_ROOT", "h:1"),
            ("SODE_JOB_SECRET", SECRET),
        ]))
        .unwrap();
        assert_eq!((l.rank, l.size), (1, 2));
        assert_eq!(l.job_id.as_deref(), Some("prterun-h-1_1"));
        let l = LaunchInfo::from_vars(vars(&[("PMI_RANK", "0"), ("PMI_SIZE", "1")])).unwrap();
        assert_eq!((l.rank, l.size, l.root), (0, 1, None));
        let l = LaunchInfo::from_vars(vars(&[
            ("SODE_RANK", "1"),
            ("SODE_SIZE", "2"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "9"),
            ("SODE_ROOT", "h:1"),
            ("SODE_JOB_SECRET", SECRET),
        ]))
        .unwrap();
        assert_eq!((l.rank, l.size), (1, 2), "SODE_* overrides the launcher");
    }

    /// What every rank of `mpirun -n 2` in `sbatch -n 2`'s script reads,
    /// besides its launcher's own variables.
    const BATCH_SCRIPT: [(&str, &str); 5] = [
        ("SLURM_JOB_ID", "77"),
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_NODEID", "0"),
    ];

    #[test]
    fn an_mpirun_in_a_batch_script_is_believed_over_the_script() {
        let open_mpi = [
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("PMIX_NAMESPACE", "1283457025"),
            ("PMIX_SERVER_URI41", "u"),
        ];
        let env: Vec<_> = BATCH_SCRIPT.iter().chain(&open_mpi).copied().collect();
        let l = LaunchInfo::from_vars(vars(&env)).unwrap();
        assert_eq!((l.rank, l.size, l.local_rank), (1, 2, Some(1)));
        assert_eq!(l.source, "OMPI_COMM_WORLD_RANK");
        // Not the script's job: another mpirun beside it has that too.
        assert_eq!(l.job_id.as_deref(), Some("1283457025"));
        assert!(l.pmix);
        // MPICH's starts its proxies with srun, as a step of their own.
        let mpich = [
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "2"),
            ("PMI_FD", "6"),
            ("MPI_LOCALRANKID", "1"),
            ("SLURM_STEP_ID", "3"),
        ];
        let env: Vec<_> = BATCH_SCRIPT.iter().chain(&mpich).copied().collect();
        let l = LaunchInfo::from_vars(vars(&env)).unwrap();
        assert_eq!((l.rank, l.size, l.local_rank), (1, 2, Some(1)));
        assert_eq!(l.job_id.as_deref(), Some("77.3"));
        assert!(l.pmi);
        // The script's own process is no rank of a job of 2.
        let e = LaunchInfo::from_vars(vars(&BATCH_SCRIPT))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("SLURM_PROCID=0 of 2") && e.contains("batch script") && e.contains("srun"),
            "{e}"
        );
    }

    #[test]
    fn bad_launch_environments_are_named() {
        let e = LaunchInfo::from_vars(vars(&[])).unwrap_err().to_string();
        assert!(e.contains("sode-run"), "{e}");
        let e = LaunchInfo::from_vars(vars(&[
            ("SODE_RANK", "2"),
            ("SODE_SIZE", "2"),
            ("SODE_ROOT", "h:1"),
            ("SODE_JOB_SECRET", SECRET),
        ]))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("SODE_RANK=2") && e.contains("SODE_SIZE=2"),
            "{e}"
        );
        let e = LaunchInfo::from_vars(vars(&[("SODE_RANK", "0"), ("SODE_SIZE", "2")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("SODE_ROOT"), "{e}");
        let e = LaunchInfo::from_vars(vars(&[("SODE_RANK", "x"), ("SODE_SIZE", "2")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("SODE_RANK") && e.contains("\"x\""), "{e}");
        let e = LaunchInfo::from_vars(vars(&[("PMI_RANK", "0")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("PMI_SIZE"), "{e}");
        let e = LaunchInfo::from_vars(vars(&[
            ("SODE_RANK", "0"),
            ("SODE_SIZE", "1"),
            ("SODE_LOCAL_RANK", "-1"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.contains("SODE_LOCAL_RANK"), "{e}");
        let e = LaunchInfo::from_vars(vars(&[
            ("SODE_RANK", "0"),
            ("SODE_SIZE", "2"),
            ("SODE_ROOT", "h:1"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.contains("SODE_JOB_SECRET is not set"), "{e}");
        let e = LaunchInfo::from_vars(vars(&[
            ("SODE_RANK", "0"),
            ("SODE_SIZE", "2"),
            ("SODE_ROOT", "h:1"),
            ("SODE_JOB_SECRET", "not hex"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("SODE_JOB_SECRET") && e.contains("64 hex digits"),
            "{e}"
        );
    }
}
