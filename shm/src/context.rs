//! Who this process is: its job, its rank, where segments go, what the
//! machine allows, and the measured thresholds.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use sode_job::{LaunchInfo, World};

use crate::caps::ShmCaps;
use crate::error::{Result, ShmError};
use crate::exchange::ShmExchangeBuilder;
use crate::placement;
use crate::probe_file::NodeProbes;
use crate::thresholds::{Measured, Overrides, Thresholds};

/// Per-process state shared by all exchanges of a process.
#[derive(Debug)]
pub struct Context {
    pub(crate) job: String,
    pub(crate) rank: usize,
    pub(crate) local_rank: Option<usize>,
    pub(crate) dir: PathBuf,
    caps: ShmCaps,
    thresholds: Option<Thresholds>,
    /// Set by hand: used for every peer, nothing measured.
    by_hand: Option<Thresholds>,
    /// Probes run so far, one per place measured towards; shared with
    /// the contexts given the same cache.
    probes: ProbeCache,
    pub(crate) next_exchange: u32,
}

/// The threshold probes run so far and the NUMA nodes' CPUs: what makes a
/// context's first exchange slow (a probe takes milliseconds per place
/// measured towards). Clones share one store, so contexts given the same
/// cache ([`Context::with_probe_cache`]) measure each place once, however
/// many exchanges they build. Probes are keyed by the CPUs they ran from
/// and towards, so sharing never gives an exchange another place's numbers.
#[derive(Debug, Clone, Default)]
pub struct ProbeCache {
    store: Arc<Mutex<ProbeStore>>,
}

#[derive(Debug, Default)]
struct ProbeStore {
    probes: Vec<Probed>,
    /// The NUMA nodes' CPUs, read on first use.
    numa_nodes: Option<Vec<Vec<usize>>>,
}

impl ProbeCache {
    /// An empty cache.
    pub fn new() -> ProbeCache {
        ProbeCache::default()
    }

    /// Probes kept so far.
    pub fn len(&self) -> usize {
        self.lock().probes.len()
    }

    /// Whether no probe was kept yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ProbeStore> {
        // The store is only pushed to: a panic elsewhere leaves it whole.
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where to probe towards a peer on `theirs` from `own`.
    fn responder_cpus(&self, theirs: &[usize], own: &[usize]) -> Vec<usize> {
        let mut store = self.lock();
        let nodes = store.numa_nodes.get_or_insert_with(placement::numa_nodes);
        placement::responder_cpus(theirs, own, nodes)
    }

    fn find(&self, own: &[usize], towards: &[usize]) -> Option<Measured> {
        self.lock()
            .probes
            .iter()
            .find(|p| p.own == own && p.towards == towards)
            .map(|p| p.measured)
    }

    fn keep(&self, probe: Probed) {
        self.lock().probes.push(probe);
    }
}

/// One threshold probe: from which CPUs, towards which, what it found.
#[derive(Debug)]
struct Probed {
    own: Vec<usize>,
    towards: Vec<usize>,
    measured: Measured,
}

/// The thresholds for what one peer sends this process, and where they
/// were measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCalibration {
    /// The peer's rank.
    pub peer: usize,
    /// The thresholds its messages to us were given paths by.
    pub thresholds: Thresholds,
    /// The CPUs the probe's responder was placed on to stand in for the
    /// peer: its NUMA node's, less ours where the node has others. Empty
    /// when nothing was measured towards it (thresholds set by hand, in
    /// the environment, or a forced path) or its placement could not be
    /// read (then the responder ran anywhere).
    pub towards: Vec<usize>,
    /// The CPU the responder ended on, when measured.
    pub ran_on: Option<usize>,
    /// Whether an earlier probe towards the same CPUs, from the same ones,
    /// served (probes are kept for the life of the context).
    pub reused: bool,
    /// Whether an earlier job on this node (since its last boot, of the
    /// same user and sode version) measured it, towards the same CPUs from
    /// the same ones: read from the node's probe file, not measured.
    pub from_earlier_job: bool,
}

/// The job directory a [`World`] keeps (in its memo) for its lifetime.
#[derive(Debug, Default)]
struct KeptJobDir(std::sync::Mutex<Option<crate::segment::JobDirHold>>);

impl Context {
    /// A context for `rank` of job `job`. The job id names the segments, so
    /// two jobs on one node must use different ids; it may contain ASCII
    /// letters, digits, `.`, `_` and `-`. Segment locators go to
    /// `SODE_SHM_DIR`, or `/dev/shm`.
    ///
    /// # Errors
    ///
    /// [`ShmError::InvalidSetting`] for a job id that is empty, longer
    /// than 64 characters or has other characters.
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
            by_hand: None,
            probes: ProbeCache::new(),
            next_exchange: 0,
        })
    }

    /// A context for this rank of `world`, under the job id its ranks
    /// agreed on, with its node-local rank.
    ///
    /// The job's segment directory is kept from here until the last
    /// handle of `world` is dropped, not only while segments live: between
    /// two exchanges no other user can make a directory of its name.
    ///
    /// # Errors
    ///
    /// As [`Context::new`], and [`ShmError::CreateSegment`] or
    /// [`ShmError::UnsafeSegment`] when the job's directory cannot be made
    /// or is not ours (a symlink, another user's, another mode).
    pub fn from_world(world: &World) -> Result<Context> {
        let mut ctx = Context::new(world.job_id(), world.rank())?;
        ctx.local_rank = Some(world.local_rank());
        let kept = world.memo(KeptJobDir::default);
        let mut kept = kept
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept.is_none() {
            let hold = crate::segment::hold_job_dir(&crate::segment::job_dir(&ctx.dir, &ctx.job))?;
            hold.release_when_failed(world);
            *kept = Some(hold);
        }
        Ok(ctx)
    }

    /// A context from what the launcher said (see
    /// [`LaunchInfo`](sode_job::LaunchInfo)): its job id, rank and local
    /// rank. The job id must be given (`SODE_JOB_ID`, Slurm's job, PMIx's
    /// namespace); [`Context::from_world`] works without one.
    ///
    /// # Errors
    ///
    /// [`ShmError::InvalidSetting`] without a job id, or as
    /// [`Context::new`].
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
    ///
    /// # Errors
    ///
    /// As [`Context::from_launch`], and [`ShmError::InvalidSetting`] when
    /// the launcher's variables do not parse.
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

    /// The crossover sizes between two threads of this process wherever
    /// they run: measured on first use (a few milliseconds), with
    /// `SODE_SHM_EAGER_MAX` / `SODE_SHM_GET_MIN` / `SODE_SHM_READ_MIN`
    /// applied. Exchanges do not use these: each measures towards every
    /// peer where it runs, at build ([`PeerCalibration`]), unless
    /// thresholds were set by hand.
    ///
    /// # Errors
    ///
    /// [`ShmError::InvalidSetting`] when a `SODE_SHM_*` threshold is not
    /// a number of bytes.
    pub fn thresholds(&mut self) -> Result<Thresholds> {
        if let Some(t) = self.by_hand.or(self.thresholds) {
            return Ok(t);
        }
        let t = Thresholds::from_env_or_measure()?;
        self.thresholds = Some(t);
        Ok(t)
    }

    /// Keeps this context's threshold probes in `cache`, shared with every
    /// other context given it (clones of one cache): a place measured by
    /// any of them is not measured again. `sode` gives every exchange on
    /// one job the same cache, so only the first commit probes.
    pub fn with_probe_cache(mut self, cache: ProbeCache) -> Context {
        self.probes = cache;
        self
    }

    /// The cache this context's probes are kept in.
    pub fn probe_cache(&self) -> &ProbeCache {
        &self.probes
    }

    /// Sets the thresholds for every peer of the exchanges built from now
    /// on: nothing is measured.
    pub fn set_thresholds(&mut self, thresholds: Thresholds) {
        self.by_hand = Some(thresholds);
    }

    /// Thresholds set by hand, if any.
    pub(crate) fn thresholds_by_hand(&self) -> Option<Thresholds> {
        self.by_hand
    }

    /// The thresholds for messages from `peer` (process `pid`), measured
    /// with the probe's responder where the peer runs (see
    /// `placement`), once per place, with the environment's settings on
    /// top. `before_probe` runs before a new probe (not before one reused).
    pub(crate) fn calibrate_towards(
        &mut self,
        peer: usize,
        pid: i32,
        before_probe: impl FnOnce() -> Result<()>,
    ) -> Result<PeerCalibration> {
        let set = Overrides::from_env()?;
        if let Some(thresholds) = set.complete() {
            return Ok(PeerCalibration {
                peer,
                thresholds,
                towards: Vec::new(),
                ran_on: None,
                reused: false,
                from_earlier_job: false,
            });
        }
        let own = placement::affinity(0).unwrap_or_default();
        let towards = placement::affinity(pid)
            .map(|theirs| self.probes.responder_cpus(&theirs, &own))
            .unwrap_or_default();
        // Not locked while probing: the probe waits for peers first.
        let known = self.probes.find(&own, &towards);
        let (measured, reused, from_earlier_job) = match known {
            Some(measured) => (measured, true, false),
            None => {
                let node = NodeProbes::at(&self.dir);
                let kept = node.as_ref().and_then(|n| n.find(&own, &towards));
                let measured = match kept {
                    Some(measured) => measured,
                    None => {
                        before_probe()?;
                        let measured = Thresholds::measure_towards(&towards);
                        tracing::debug!(
                            "thresholds towards rank {peer} (pid {pid}) on CPUs {towards:?}, from {own:?}: {:?}",
                            measured
                        );
                        if let Some(n) = &node {
                            n.keep(&own, &towards, &measured);
                        }
                        measured
                    }
                };
                self.probes.keep(Probed {
                    own,
                    towards: towards.clone(),
                    measured,
                });
                (measured, false, kept.is_some())
            }
        };
        Ok(PeerCalibration {
            peer,
            thresholds: set.apply(measured.thresholds),
            towards,
            ran_on: measured.ran_on,
            reused,
            from_earlier_job,
        })
    }

    /// Starts describing an exchange. Building it is collective: every
    /// process named as a neighbour must build its side, in the same order
    /// of exchanges (or with the same explicit name).
    pub fn exchange(&mut self) -> ShmExchangeBuilder<'_> {
        ShmExchangeBuilder::new(self)
    }
}
