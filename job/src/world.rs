//! The job as the channels see it: ranks, nodes, and the out-of-band
//! exchange they set up over.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::backoff::WaitPolicy;
use crate::error::{JobError, Result};
use crate::health::{Failure, Health, SetupGivenUp};
use crate::launch::{sanitise_job_id, LaunchInfo};
use crate::memo::Memo;
use crate::node::{NodeId, Nodes};
use crate::oob::{check_peers, OutOfBand, PeerLink};
use crate::relay::{Relay, RelayListener};
use crate::routes::{Reach, Routes};
use crate::tcp::TcpRendezvous;
use crate::wire::{unreadable, Reader, Writer};

/// What each rank tells the others when the world is made, in the few
/// bytes of [`Introduction::encode`]: every rank receives every one.
#[derive(Debug, PartialEq)]
struct Introduction {
    node: NodeId,
    job_id: Option<String>,
    pid: u32,
    /// Random bytes that rank 0 adds to the job id, so names derived from
    /// it (shared-memory segments) cannot be guessed by other users.
    nonce: [u8; 8],
    /// Its networks, and the relay it offers.
    reach: Reach,
}

/// The introduction's format byte.
const INTRODUCTION_FORMAT: u8 = 2;

impl Introduction {
    /// Format, node ([`NodeId::write`]), job id (a flag, then the id), pid,
    /// nonce and reach.
    fn encode(&self) -> Result<Vec<u8>> {
        let mut w = Writer::new(INTRODUCTION_FORMAT);
        self.node.write(&mut w)?;
        match &self.job_id {
            None => w.u8(0),
            // As much as the agreed id keeps ([`agreed_job_id`]).
            Some(id) => w
                .u8(1)
                .short(sanitise_job_id(id).as_bytes(), "the job id")?,
        };
        w.u32(self.pid).bytes(&self.nonce);
        self.reach.write(&mut w)?;
        Ok(w.finish())
    }

    fn decode(record: &[u8], whom: &str) -> Result<Introduction> {
        let read = || {
            let mut r = Reader::new(record, INTRODUCTION_FORMAT)?;
            let node = NodeId::read(&mut r)?;
            let job_id = match r.u8()? {
                0 => None,
                1 => Some(r.text()?),
                _ => return None,
            };
            let (pid, nonce) = (r.u32()?, r.array()?);
            let reach = Reach::read(&mut r)?;
            r.end(Introduction {
                node,
                job_id,
                pid,
                nonce,
                reach,
            })
        };
        read().ok_or_else(|| unreadable(whom, "introduction", record))
    }
}

/// The job: every rank's node, the job id the ranks agreed on, and the
/// out-of-band exchange. A cheap handle: clones share the exchange (its
/// collectives are collective over the job, so calls through two clones
/// never interleave in a correct program).
#[derive(Debug, Clone)]
pub struct World {
    rank: usize,
    size: usize,
    job_id: String,
    nodes: Arc<Nodes>,
    oob: Option<Arc<Mutex<Box<dyn OutOfBand>>>>,
    /// The job's health watcher (none for a job of one).
    health: Option<Arc<Health>>,
    /// When the ranks were renumbered: each rank's launch rank, and back.
    order: Option<Arc<Order>>,
    /// Who reaches whom directly, and the gateways between the others.
    routes: Arc<Routes>,
    /// What the layers above measured once for the whole job.
    memo: Arc<Memo>,
    /// Bytes this rank received from the other ranks through
    /// [`World::allgather`].
    gathered: Arc<AtomicU64>,
    /// The collective steps taken since the world was made.
    steps: Arc<Steps>,
    /// This rank forwarding for others, when it is its node's gateway
    /// (last: dropped after the health watcher, it lingers while
    /// connections through it are open).
    relay: Option<Arc<Relay>>,
}

/// The collective steps a world's ranks took since it was made (shared by
/// its clones and renumberings).
#[derive(Debug, Default)]
struct Steps {
    /// How many: every block carries its step's number, so that a rank out
    /// of step (late past a deadline the others gave up at) is found, not
    /// paired with another step.
    taken: AtomicU32,
    /// Whether this rank's last step failed (a rank missing at its
    /// deadline, the exchange broken, a rank out of step): the ranks may
    /// be out of step, so a [`World::give_up`] takes no step.
    failed: AtomicBool,
}

/// A block of a collective step after the world is made: a kind byte, the
/// step's number (four bytes, little-endian), then the rank's data or its
/// reason for giving up ([`World::give_up`]).
struct Step;

impl Step {
    /// The rank's data follows.
    const DATA: u8 = 0;
    /// Its code (four bytes, little-endian) and its reason (UTF-8) follow.
    const GAVE_UP: u8 = 1;
    /// Nothing follows: the rank took the step (a barrier's block). The
    /// ranks' blocks of one barrier merge into one on their way.
    const MET: u8 = 2;
    /// Lanes of two little-endian `u64`s each follow, the least and the
    /// greatest value of the lane among the ranks the block stands for.
    /// The ranks' blocks of one reduction merge into one on their way.
    const REDUCE: u8 = 3;
    /// The kind and the number.
    const HEADER: usize = 5;

    /// A block of step `number`.
    fn frame(kind: u8, number: u32, body: &[&[u8]]) -> Vec<u8> {
        let mut b = Vec::with_capacity(Self::HEADER + body.iter().map(|p| p.len()).sum::<usize>());
        b.push(kind);
        b.extend_from_slice(&number.to_le_bytes());
        body.iter().for_each(|p| b.extend_from_slice(p));
        b
    }

    /// A block's kind and step number, when it has them.
    fn header(b: &[u8]) -> Option<(u8, u32)> {
        let number = b.get(1..Self::HEADER)?.try_into().ok()?;
        Some((*b.first()?, u32::from_le_bytes(number)))
    }

    /// What a rank passes on of the blocks it holds in a step
    /// ([`OutOfBand::step`]): of the blocks that say only that a rank
    /// took a step, one a step; and of a step a rank gave up in, the
    /// reasons alone, which decide it. A rank at another step keeps its
    /// block, to be named.
    fn combine(blocks: &mut Vec<crate::RankBlock>) {
        let gave_up: BTreeSet<u32> = blocks
            .iter()
            .filter_map(|(_, b)| Self::header(b))
            .filter(|(kind, _)| *kind == Self::GAVE_UP)
            .map(|(_, number)| number)
            .collect();
        let mut met = BTreeSet::new();
        blocks.retain(|(_, b)| match Self::header(b) {
            Some((Self::GAVE_UP, _)) | None => true,
            Some((_, number)) if gave_up.contains(&number) => false,
            Some((Self::MET, number)) => met.insert(number),
            Some(_) => true,
        });
        // Each reduction's blocks into its first (of equal lengths: a
        // block of another length stays, for the step to refuse), in one
        // pass: rank 0 of a rendezvous combines every rank's block.
        let mut first: BTreeMap<u32, usize> = BTreeMap::new();
        let mut merged = vec![false; blocks.len()];
        for i in 0..blocks.len() {
            let Some((Self::REDUCE, number)) = Self::header(&blocks[i].1) else {
                continue;
            };
            match first.get(&number) {
                Some(&into) if blocks[into].1.len() == blocks[i].1.len() => {
                    let (head, tail) = blocks.split_at_mut(i);
                    merge_spreads(
                        &mut head[into].1[Self::HEADER..],
                        &tail[0].1[Self::HEADER..],
                    );
                    merged[i] = true;
                }
                Some(_) => {}
                None => {
                    first.insert(number, i);
                }
            }
        }
        let mut i = 0;
        blocks.retain(|_| {
            i += 1;
            !merged[i - 1]
        });
    }

    /// The ranks' data in step `number`, by rank; or, when a rank gave up
    /// in it, the lowest such rank's reason; or when a rank is at another
    /// step, that.
    fn read(mut all: Vec<crate::RankBlock>, number: u32) -> Result<Vec<crate::RankBlock>> {
        all.sort_unstable_by_key(|(rank, _)| *rank);
        let mut blocks = Vec::with_capacity(all.len());
        let mut gave_up = None;
        for (rank, mut b) in all {
            match Self::header(&b) {
                Some((_, theirs)) if theirs != number => {
                    return Err(JobError::OutOfStep {
                        rank,
                        theirs,
                        ours: number,
                    })
                }
                Some((Self::DATA, _)) => {
                    b.drain(..Self::HEADER);
                    blocks.push((rank, b));
                }
                Some((Self::MET, _)) => {}
                Some((Self::REDUCE, _)) => {
                    b.drain(..Self::HEADER);
                    blocks.push((rank, b));
                }
                Some((Self::GAVE_UP, _)) => {
                    gave_up = gave_up.or_else(|| Some(crate::refusal::gave_up(rank, &b[Self::HEADER..])));
                }
                _ => {
                    return Err(JobError::Protocol {
                        whom: format!("rank {rank}"),
                        why: format!(
                            "a collective step's block of {} bytes, of no kind this sode knows: is every rank running the same sode?",
                            b.len()
                        ),
                    })
                }
            }
        }
        match gave_up {
            Some(e) => Err(e),
            None => Ok(blocks),
        }
    }

    /// Every one of `size` ranks' data, in rank order: the ranks of an
    /// allgather step.
    fn every_rank(blocks: Vec<crate::RankBlock>, size: usize) -> Result<Vec<Vec<u8>>> {
        if let Some(missing) = (0..size).find(|&r| blocks.get(r).is_none_or(|(q, _)| *q != r)) {
            return Err(JobError::Protocol {
                whom: format!("rank {missing}"),
                why: "it took another collective call (a barrier or a reduction) where this rank took an allgather: every rank makes each collective call in the same order".into(),
            });
        }
        Ok(blocks.into_iter().map(|(_, b)| b).collect())
    }
}

/// Lane by lane, the least and the greatest of both lists of spreads
/// (`into`'s and `from`'s, of equal lengths).
fn merge_spreads(into: &mut [u8], from: &[u8]) {
    for (i, (a, b)) in into
        .chunks_exact_mut(8)
        .zip(from.chunks_exact(8))
        .enumerate()
    {
        let (x, y) = (
            u64::from_le_bytes(a.try_into().unwrap_or_default()),
            u64::from_le_bytes(b.try_into().unwrap_or_default()),
        );
        let v = if i % 2 == 0 { x.min(y) } else { x.max(y) };
        a.copy_from_slice(&v.to_le_bytes());
    }
}

/// Of one lane of a [`World::reduce`]: the least and the greatest value the
/// ranks gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spread {
    /// The least value.
    pub least: u64,
    /// The greatest value.
    pub most: u64,
}

impl Spread {
    /// Whether every rank gave the same value.
    pub fn agreed(&self) -> bool {
        self.least == self.most
    }
}

/// A renumbering of the ranks (see [`World::renumbered`]).
#[derive(Debug)]
struct Order {
    /// `launch[rank]`: the rank's number in launch order.
    launch: Vec<usize>,
    /// `rank[launch_rank]`: its number here.
    rank: Vec<usize>,
}

/// Puts the data path's wait policy for this node's ranks (their
/// processes, `local_pids`) in force (`SODE_WAIT`, auto: block when they
/// outnumber the CPUs they may run on together).
fn adopt_wait_policy(value: Option<&str>, local_pids: &[u32]) -> Result<()> {
    let local_ranks = local_pids.len();
    let cores = crate::cpus::cpus_for(local_pids).unwrap_or_else(crate::backoff::node_cores);
    let policy =
        WaitPolicy::choose(value, local_ranks, cores).map_err(|why| JobError::InvalidSetting {
            name: crate::backoff::WAIT_VAR.into(),
            value: value.unwrap_or_default().into(),
            why,
        })?;
    tracing::debug!(?policy, local_ranks, cores, "data-path wait policy");
    policy.adopt();
    Ok(())
}

/// The settings a world reads on each rank alone (checked before the ranks
/// meet).
struct OwnSettings {
    /// `SODE_HEALTH_TIMEOUT`: how long a rank may stay silent.
    silence: Option<Duration>,
    /// `SODE_WAIT`, a value [`WaitPolicy::choose`] takes.
    wait: Option<String>,
}

impl OwnSettings {
    fn read() -> Result<OwnSettings> {
        let silence =
            crate::health::parse_silence(std::env::var(crate::HEALTH_TIMEOUT_VAR).ok().as_deref())?;
        let wait = std::env::var(crate::backoff::WAIT_VAR).ok();
        // Read where a listener is made; checked now, when a rank may
        // still refuse.
        crate::ports::from_env()?;
        crate::tcp_addr::chosen()?;
        // Read by the first wait that gives no timeout of its own, or the
        // first that goes on long: a typo would otherwise surface there,
        // on this rank alone, maybe hours into the run.
        crate::timeout::default_wait_timeout()?;
        crate::timeout::wait_warning()?;
        // Checked now; chosen once the node's ranks are known.
        WaitPolicy::choose(wait.as_deref(), 1, 1).map_err(|why| JobError::InvalidSetting {
            name: crate::backoff::WAIT_VAR.into(),
            value: wait.clone().unwrap_or_default(),
            why,
        })?;
        Ok(OwnSettings { silence, wait })
    }
}

/// What this rank makes of its own before the ranks meet: its settings,
/// its networks and relay, and its introduction (encoded).
struct OwnPart {
    settings: OwnSettings,
    nets: Vec<crate::nets::Net>,
    relay_listener: Option<RelayListener>,
    introduction: Vec<u8>,
}

impl OwnPart {
    fn prepare(job_id: Option<String>) -> Result<OwnPart> {
        let settings = OwnSettings::read()?;
        let nets = crate::routes::host_nets();
        let relay_listener = RelayListener::bind(&nets)?;
        let introduction = Introduction {
            node: NodeId::local(),
            job_id,
            pid: std::process::id(),
            nonce: crate::auth::random_bytes("the job id's nonce")?,
            reach: Reach::local(
                nets.clone(),
                relay_listener.as_ref().map(|l| l.offer().clone()),
            )?,
        }
        .encode()?;
        Ok(OwnPart {
            settings,
            nets,
            relay_listener,
            introduction,
        })
    }
}

impl World {
    /// Reads the launcher's environment and meets the other ranks (at
    /// `SODE_ROOT`, or through the launcher's PMIx server, or its PMI-1
    /// one); collective over the whole job. A process nothing launched (no
    /// rank variable set) is a job of one.
    ///
    /// # Errors
    ///
    /// [`JobError::Launch`] when the environment gives a rank but no way
    /// to meet (plain `srun`: set `SODE_ROOT` and `SODE_JOB_SECRET`, or use
    /// `--mpi=pmix`); [`JobError::External`] when the PMIx or PMI server
    /// fails; [`JobError::BootstrapTimeout`] when the other ranks do not
    /// arrive within `timeout`, naming them.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// // Not started by a launcher: a job of one.
    /// let world = sode_job::World::init(Duration::from_secs(10))?;
    /// assert_eq!((world.rank(), world.size()), (0, 1));
    /// # Ok::<(), sode_job::JobError>(())
    /// ```
    pub fn init(timeout: Duration) -> Result<World> {
        if !crate::launch::launched() {
            return Ok(Self::single());
        }
        Self::init_with(&LaunchInfo::from_env()?, timeout)
    }

    /// Meets the other ranks as `launch` says: at `SODE_ROOT` (TCP
    /// rendezvous) when it is set, else through the launcher's PMIx server,
    /// else its PMI-1 one; collective.
    ///
    /// # Errors
    ///
    /// As [`World::init`].
    pub fn init_with(launch: &LaunchInfo, timeout: Duration) -> Result<World> {
        if launch.size == 1 {
            let mut w = Self::single();
            if let Some(j) = &launch.job_id {
                w.job_id = sanitise_job_id(j);
            }
            return Ok(w);
        }
        let deadline = Instant::now() + timeout;
        let (oob, job_id) = Self::meet(launch, timeout, deadline)?;
        Self::over(oob, job_id, deadline)
    }

    /// Takes part in meeting the other ranks as [`World::init`] does, only
    /// to make that meeting fail on every rank: each of the others fails
    /// with [`JobError::GaveUp`] naming this rank, `code` and `message`.
    /// For a rank that cannot make its world (its caller's own argument is
    /// wrong), so that the others are not left waiting for it. Returns once
    /// the others have been told; a job of one has no one to tell.
    ///
    /// # Errors
    ///
    /// As [`World::init`], when the ranks cannot meet.
    pub fn refuse_init(code: i32, message: &str, timeout: Duration) -> Result<()> {
        if !crate::launch::launched() {
            return Ok(());
        }
        let launch = LaunchInfo::from_env()?;
        if launch.size == 1 {
            return Ok(());
        }
        let deadline = Instant::now() + timeout;
        let (oob, _) = Self::meet(&launch, timeout, deadline)?;
        Self::refuse(oob, code, message, deadline)
    }

    /// Takes part in [`World::over`] on `oob` only to make it fail on every
    /// rank, as [`World::refuse_init`] does.
    ///
    /// # Errors
    ///
    /// The exchange's errors ([`JobError::BootstrapTimeout`] past
    /// `deadline`).
    pub fn refuse(
        mut oob: Box<dyn OutOfBand>,
        code: i32,
        message: &str,
        deadline: Instant,
    ) -> Result<()> {
        oob.allgather(&crate::refusal::record(code, message), deadline)
            .map(|_| ())
    }

    /// The out-of-band exchange `launch` names, and the job id the ranks
    /// start from.
    fn meet(
        launch: &LaunchInfo,
        timeout: Duration,
        deadline: Instant,
    ) -> Result<(Box<dyn OutOfBand>, Option<String>)> {
        if launch.root.is_none() && launch.pmix {
            let (oob, namespace) = crate::pmix::join(deadline)?;
            // The server is the one of the launcher that started this
            // process (each launcher points its processes at its own):
            // its numbers hold where variables inherited from a launcher
            // around it say otherwise.
            if (oob.rank(), oob.size()) != (launch.rank, launch.size) {
                tracing::info!(
                    "{} says rank {} of {}, the PMIx server rank {} of {}: the server's are taken",
                    launch.source,
                    launch.rank,
                    launch.size,
                    oob.rank(),
                    oob.size()
                );
            }
            let job_id = launch.job_id.clone().or(Some(namespace));
            return Ok((Box::new(oob), job_id));
        }
        if launch.root.is_none() && launch.pmi {
            let env = |k: &str| std::env::var(k).ok();
            let (oob, kvsname) =
                crate::pmi::join(&env, launch.rank, launch.size, timeout, deadline)?;
            let job_id = launch.job_id.clone().or(Some(sanitise_job_id(&kvsname)));
            return Ok((Box::new(oob), job_id));
        }
        let oob = TcpRendezvous::join(launch, deadline)?;
        Ok((Box::new(oob), launch.job_id.clone()))
    }

    /// A world over any out-of-band exchange (TCP, PMIx, an MPI
    /// communicator); collective. The ranks adopt rank 0's job id (`job_id`,
    /// or one made from its process id when it has none).
    ///
    /// # Errors
    ///
    /// The exchange's errors ([`JobError::BootstrapTimeout`] past
    /// `deadline`); [`JobError::GaveUp`] when a rank took part only to
    /// refuse ([`World::refuse`]); [`JobError::Health`] when the health
    /// watcher cannot start.
    pub fn over(
        mut oob: Box<dyn OutOfBand>,
        job_id: Option<String>,
        deadline: Instant,
    ) -> Result<World> {
        let (rank, size) = (oob.rank(), oob.size());
        crate::diag::raise_descriptor_limit();
        // What can fail on this rank alone fails before the ranks meet, and
        // then fails the meeting on every rank (a refusal in its first
        // step), rather than leave the others waiting for this one in a
        // later step (forever, without a deadline).
        let own = match OwnPart::prepare(job_id) {
            Ok(own) => own,
            Err(e) => {
                return Err(crate::refusal::refused_after(e, |refusal| {
                    oob.allgather(refusal, deadline).map(|_| ())
                }))
            }
        };
        let OwnPart {
            settings,
            nets,
            relay_listener,
            introduction: mine,
        } = own;
        let all = oob.allgather(&mine, deadline)?;
        if let Some(refused) = crate::refusal::first_in(&all) {
            return Err(refused);
        }
        let intros: Vec<Introduction> = all
            .iter()
            .enumerate()
            .map(|(r, b)| Introduction::decode(b, &format!("rank {r}")))
            .collect::<Result<_>>()?;
        let job_id = agreed_job_id(&intros[0]);
        let local_pids: Vec<u32> = intros
            .iter()
            .filter(|i| i.node == intros[rank].node)
            .map(|i| i.pid)
            .collect();
        tracing::debug!(rank, size, job_id, "joined the job");
        // Once a process, not at each communicator's creation.
        static SPLIT_TOLD: AtomicBool = AtomicBool::new(false);
        if let Some(why) = split_machine(&intros, rank) {
            if !SPLIT_TOLD.swap(true, Ordering::Relaxed) {
                tracing::warn!("{why}");
            }
        }
        let (nodes, reach): (Vec<NodeId>, Vec<Reach>) =
            intros.into_iter().map(|i| (i.node, i.reach)).unzip();
        let nodes = Arc::new(Nodes::new(nodes));
        let routes = Arc::new(Routes::new(reach, &nodes));
        let relay = match relay_listener {
            Some(l) if routes.forwards(rank) => Some(Arc::new(Relay::start(l, nets)?)),
            _ => None,
        };
        oob.route_through(routes.clone());
        let health = Self::watch_health(oob.as_mut(), nodes.clone(), settings.silence, deadline)?;
        let world = World {
            rank,
            size,
            job_id,
            nodes,
            oob: Some(Arc::new(Mutex::new(oob))),
            health: Some(Arc::new(health)),
            order: None,
            routes,
            memo: Arc::default(),
            gathered: Arc::default(),
            steps: Arc::default(),
            relay,
        };
        adopt_wait_policy(settings.wait.as_deref(), &local_pids)?;
        if rank == 0 {
            // Once for the job, not from every rank alike.
            crate::settings::warn_misspelt();
        }
        Ok(world)
    }

    /// Opens the health links (each rank to its parent and children in the
    /// health tree) and starts this rank's watcher; collective.
    fn watch_health(
        oob: &mut dyn OutOfBand,
        nodes: Arc<Nodes>,
        silence: Option<Duration>,
        deadline: Instant,
    ) -> Result<Health> {
        let (rank, size) = (oob.rank(), oob.size());
        let peers = crate::health::tree_peers(rank, size);
        let links = oob.connect(&peers, deadline)?;
        // No rank opens other links before every health link is accepted:
        // a rank's listener would otherwise meet a neighbour's link while
        // it expects only its tree neighbours'.
        oob.barrier(deadline)?;
        let health = Health::start(rank, links, nodes, silence)?;
        // Every rank has its health links: the links for the job's steps
        // meet no other call's.
        oob.link_steps(deadline)?;
        Ok(health)
    }

    /// A job of one process (no network).
    pub fn single() -> World {
        crate::settings::warn_misspelt();
        let nodes = Nodes::new([NodeId::local()]);
        World {
            rank: 0,
            size: 1,
            job_id: format!("single{}", std::process::id()),
            routes: Arc::new(Routes::new(vec![Reach::default()], &nodes)),
            nodes: Arc::new(nodes),
            oob: None,
            health: None,
            order: None,
            memo: Arc::default(),
            gathered: Arc::default(),
            steps: Arc::default(),
            relay: None,
        }
    }

    /// The first rank of the job found dead, if any (one atomic load; each
    /// rank watches its neighbours in a tree of the job's ranks, and a
    /// verdict floods the tree).
    pub fn failure(&self) -> Option<Failure> {
        let f = self.health.as_ref().and_then(|h| h.failure())?;
        let mut f = f.clone();
        f.rank = self.rank_of_launch(f.launch_rank);
        Some(f)
    }

    /// Runs `hook` once, when a rank of the job is first found dead,
    /// before [`failure`](World::failure) says so on any thread (at once
    /// if it has; never for a job of one). What a layer keeps for new
    /// exchanges only, which a failed job makes no more of, can be let go
    /// there, before the program, told of the failure, ends by a path that
    /// runs no exit hook (`MPI_Abort`).
    pub fn when_failed(&self, hook: impl FnOnce() + Send + 'static) {
        if let Some(h) = &self.health {
            h.when_failed(Box::new(hook));
        }
    }

    /// Tells every rank of the job that this one gave up setting up its
    /// part of the exchange named `exchange` (a channel it could not make),
    /// with `code` (the C ABI's status) and `why`: the notice travels the
    /// health tree, as a death does, and its neighbours waiting for that
    /// part ([`setup_given_up`]) stop waiting. Nothing for a job of one.
    ///
    /// [`setup_given_up`]: World::setup_given_up
    pub fn give_up_setup(&self, exchange: &str, code: i32, why: &str) {
        if let Some(h) = &self.health {
            h.give_up_setup(exchange, self.launch_rank(), code, crate::refusal::cut(why));
        }
    }

    /// The lowest rank whose notice that it gave up setting up `exchange`
    /// ([`give_up_setup`](World::give_up_setup)) has reached this rank, if
    /// any: a wait for that exchange's setup may end with it.
    pub fn setup_given_up(&self, exchange: &str) -> Option<SetupGivenUp> {
        let mut g = self.health.as_ref()?.setup_given_up(exchange)?;
        g.rank = self.rank_of_launch(g.launch_rank);
        Some(g)
    }

    /// A descriptor that `poll` reports readable once a rank of the job is
    /// found dead (none for a job of one): a rank that sleeps in `poll`
    /// includes it to wake for [`failure`](World::failure).
    pub fn failure_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.health.as_ref().map(|h| h.verdict_fd())
    }

    /// The same job with its ranks renumbered: the rank launched as
    /// `order[r]` is rank `r` of the returned world (its channels, nodes,
    /// collectives and setup links all speak the new numbers). Local: every
    /// rank must pass the same order (see `sode::reorder`, which has rank
    /// 0 choose it). Renumbering a renumbered world composes.
    ///
    /// # Errors
    ///
    /// [`JobError::Renumbering`] when `order` is not a permutation of the
    /// job's ranks.
    pub fn renumbered(&self, order: &[usize]) -> Result<World> {
        let mut seen = vec![false; self.size];
        let bad = order.len() != self.size
            || order
                .iter()
                .any(|&r| r >= self.size || std::mem::replace(&mut seen[r], true));
        if bad {
            return Err(JobError::Renumbering {
                why: format!(
                    "{order:?} is not an order of the {} ranks 0..{}: each must appear once",
                    self.size, self.size
                ),
            });
        }
        let launch: Vec<usize> = order.iter().map(|&r| self.launch_of(r)).collect();
        let mut rank = vec![0; self.size];
        for (new, &l) in launch.iter().enumerate() {
            rank[l] = new;
        }
        let me = rank[self.launch_of(self.rank)];
        Ok(World {
            rank: me,
            size: self.size,
            job_id: self.job_id.clone(),
            nodes: Arc::new(self.nodes.renumbered(order)),
            oob: self.oob.clone(),
            health: self.health.clone(),
            order: Some(Arc::new(Order { launch, rank })),
            routes: self.routes.clone(),
            memo: self.memo.clone(),
            gathered: self.gathered.clone(),
            steps: self.steps.clone(),
            relay: self.relay.clone(),
        })
    }

    /// This world's rank `rank` in launch order (the out-of-band exchange's
    /// numbering).
    fn launch_of(&self, rank: usize) -> usize {
        self.order.as_ref().map_or(rank, |o| o.launch[rank])
    }

    /// The launch rank `launch` in this world's numbering.
    fn rank_of_launch(&self, launch: usize) -> usize {
        self.order
            .as_ref()
            .map_or(launch, |o| o.rank.get(launch).copied().unwrap_or(launch))
    }

    /// The gateway ranks a connection from this rank to `peer` passes
    /// through, in order: none when the two reach each other directly (on
    /// one node, one network, or as named in [`crate::GROUPS_VAR`]).
    pub fn gateways_to(&self, peer: usize) -> Vec<usize> {
        self.gateways_between(self.rank, peer)
    }

    /// The gateway ranks a connection from rank `from` to rank `to` passes
    /// through, in order, as [`World::gateways_to`] says on rank `from`:
    /// what every rank can tell about any pair, for placing ranks.
    pub fn gateways_between(&self, from: usize, to: usize) -> Vec<usize> {
        if from >= self.size || to >= self.size {
            return Vec::new();
        }
        self.routes
            .gateways(self.launch_of(from), self.launch_of(to))
            .into_iter()
            .map(|g| self.rank_of_launch(g))
            .collect()
    }

    /// This rank's number in launch order.
    pub fn launch_rank(&self) -> usize {
        self.launch_of(self.rank)
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// A value kept for the whole job, made by `init` on first use: one
    /// per type `T`, shared by this world's clones and renumberings (so it
    /// must not depend on rank numbers). The layers above keep their
    /// measurements here (shared-memory thresholds, the RDMA model), so
    /// that only the first exchange built on a job takes them. `init` runs
    /// under a lock: make an empty cache there, not a measurement.
    pub fn memo<T: std::any::Any + Send + Sync>(&self, init: impl FnOnce() -> T) -> Arc<T> {
        self.memo.get_or_init(init)
    }

    /// The id every rank of the job agreed on (names shared-memory segments).
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// The node `rank` runs on.
    pub fn node_of(&self, rank: usize) -> Option<&NodeId> {
        self.nodes.get(rank)
    }

    /// Whether `rank` runs on this process's node (shares memory with it).
    pub fn same_node(&self, rank: usize) -> bool {
        self.nodes.index(rank).is_some() && self.nodes.index(rank) == self.nodes.index(self.rank)
    }

    /// This rank's place among the ranks of its node (by rank order).
    pub fn local_rank(&self) -> usize {
        (0..self.rank).filter(|&r| self.same_node(r)).count()
    }

    /// Ranks on this node.
    pub fn local_size(&self) -> usize {
        (0..self.size).filter(|&r| self.same_node(r)).count()
    }

    fn exchange(&self) -> Option<MutexGuard<'_, Box<dyn OutOfBand>>> {
        // A panic while holding the lock left no half-done collective that
        // a later call could mistake: the job fails at its next deadline.
        self.oob
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Blocks until every rank has called `barrier`, or `timeout` passes.
    ///
    /// # Errors
    ///
    /// [`JobError::BootstrapTimeout`] when `timeout` passes first; the
    /// exchange's error when a rank's link breaks; [`JobError::GaveUp`]
    /// when a rank gave up in this step ([`give_up`](Self::give_up));
    /// [`JobError::JobFailed`] when a rank of the job was found dead
    /// before it ([`failure`](Self::failure)).
    pub fn barrier(&self, timeout: Duration) -> Result<()> {
        self.take_step(Step::MET, &[], timeout).map(drop)
    }

    /// Every rank's `mine`, indexed by rank; collective.
    ///
    /// # Errors
    ///
    /// As [`barrier`](Self::barrier) (a give-up names the lowest rank
    /// that gave up in the step: every rank that takes the step sees it,
    /// so all stop alike); [`JobError::Protocol`] for a block above the
    /// exchange's limit.
    pub fn allgather(&self, mine: &[u8], timeout: Duration) -> Result<Vec<Vec<u8>>> {
        let blocks = self.take_step(Step::DATA, mine, timeout)?;
        Step::every_rank(blocks, self.size)
    }

    /// Every rank's `lanes`, reduced: lane by lane, the least and the
    /// greatest value the ranks gave (every rank gives as many);
    /// collective. What a rank receives does not grow with the job: over
    /// the job's links the ranks' values merge on their way. For what
    /// every rank must agree on (a digest, a choice), whether all ranks
    /// said yes (a 0 among 1s), or a count's largest.
    ///
    /// # Errors
    ///
    /// As [`allgather`](Self::allgather); [`JobError::Protocol`] when a
    /// rank gave another number of lanes.
    pub fn reduce(&self, lanes: &[u64], timeout: Duration) -> Result<Vec<Spread>> {
        let mine: Vec<u8> = lanes
            .iter()
            .flat_map(|v| v.to_le_bytes().into_iter().chain(v.to_le_bytes()))
            .collect();
        let blocks = self.take_step(Step::REDUCE, &mine, timeout)?;
        // Merged on their way, the blocks are one, unless a rank gave
        // another number of lanes (or took another call).
        let reduced = match blocks.as_slice() {
            [(_, reduced)] if reduced.len() == mine.len() => reduced,
            _ => {
                let odd = blocks
                    .iter()
                    .find(|(_, b)| b.len() != mine.len())
                    .or(blocks.get(1))
                    .map_or(0, |(rank, _)| *rank);
                return Err(JobError::Protocol {
                    whom: format!("rank {odd}"),
                    why: format!("its part of a reduction of {} lanes is not one: every rank makes each collective call in the same order, with as many values", lanes.len()),
                });
            }
        };
        Ok(reduced
            .chunks_exact(16)
            .map(|c| Spread {
                least: u64::from_le_bytes(c[..8].try_into().unwrap_or_default()),
                most: u64::from_le_bytes(c[8..].try_into().unwrap_or_default()),
            })
            .collect())
    }

    /// Sends each peer named in `messages` its message, and receives one
    /// from each; collective among them (each must name this rank too).
    /// What a rank sends and receives grows with its peers, not the job.
    ///
    /// # Errors
    ///
    /// As [`connect_peers`](Self::connect_peers); a broken link's, or
    /// [`JobError::BootstrapTimeout`] when a peer's message does not come
    /// in time.
    pub fn trade(
        &self,
        messages: &BTreeMap<usize, Vec<u8>>,
        timeout: Duration,
    ) -> Result<BTreeMap<usize, Vec<u8>>> {
        let deadline = Instant::now() + timeout;
        let peers: BTreeSet<usize> = messages.keys().copied().collect();
        let mut links = self.connect_peers(&peers, timeout)?;
        for (peer, message) in messages {
            if let Some(link) = links.get_mut(peer) {
                link.send_bytes(message)?;
            }
        }
        let mut got = BTreeMap::new();
        for (peer, link) in &mut links {
            let message = link.recv_bytes(deadline)?;
            self.gathered
                .fetch_add(message.len() as u64, Ordering::Relaxed);
            got.insert(*peer, message);
        }
        Ok(got)
    }

    /// The job's next collective step, `mine` a block of `kind`: every
    /// rank's data, by rank.
    fn take_step(&self, kind: u8, mine: &[u8], timeout: Duration) -> Result<Vec<crate::RankBlock>> {
        let number = self.next_step();
        let all = self.step(&Step::frame(kind, number, &[mine]), timeout)?;
        let read = Step::read(all, number);
        if let Err(JobError::OutOfStep { .. }) = read {
            self.steps.failed.store(true, Ordering::Relaxed);
        }
        read
    }

    /// Takes the job's next collective step (an [`allgather`] or
    /// [`barrier`] the other ranks are taking) with `message` in place of
    /// this rank's data, and ends there: every rank that takes that step
    /// fails with [`JobError::GaveUp`] naming the lowest rank that gave up
    /// in it, and so takes no further step of the operation either. A
    /// rank calls it once, when an operation of collective steps (an
    /// exchange's commit) fails on it alone partway, so that the others
    /// are not left in a step it will never take; `code` travels with the
    /// message (the C ABI's status).
    ///
    /// [`allgather`]: Self::allgather
    /// [`barrier`]: Self::barrier
    ///
    /// When this rank's last step failed (a rank missing at its deadline,
    /// the exchange broken), the ranks may no longer be in step, and when
    /// a rank of the job is dead no step completes: it takes none, and
    /// returns at once.
    ///
    /// # Errors
    ///
    /// As [`barrier`](Self::barrier), when the step itself fails.
    pub fn give_up(&self, code: i32, message: &str, timeout: Duration) -> Result<()> {
        if self.steps.failed.load(Ordering::Relaxed) || self.failure().is_some() {
            return Ok(());
        }
        let body: [&[u8]; 2] = [&code.to_le_bytes(), crate::refusal::cut(message).as_bytes()];
        let number = self.next_step();
        self.step(&Step::frame(Step::GAVE_UP, number, &body), timeout)
            .map(|_| ())
    }

    /// The number of the step this rank takes next.
    fn next_step(&self) -> u32 {
        self.steps.taken.fetch_add(1, Ordering::Relaxed)
    }

    /// One collective step of framed blocks, in this world's numbering.
    fn step(&self, mine: &[u8], timeout: Duration) -> Result<Vec<crate::RankBlock>> {
        if let Some(failure) = self.failure() {
            // The dead rank will not take it: failing here spares the
            // others a wait for it (over a program's MPI allgather, its
            // communicator's timeout, or forever).
            self.steps.failed.store(true, Ordering::Relaxed);
            return Err(JobError::JobFailed { failure });
        }
        // Not cut short by a given-up setup (`abandon_when`): a rank that
        // gave up takes this step too, with its reason, and ending it
        // early would leave this rank out of step.
        let _whole = crate::timeout::abandon_when(|| false);
        let stepped = match self.exchange() {
            Some(mut oob) => oob.step(mine, Instant::now() + timeout, &Step::combine),
            None => Ok(crate::oob::Stepped {
                blocks: vec![(self.launch_of(self.rank), mine.to_vec())],
                received: 0,
            }),
        };
        self.steps.failed.store(stepped.is_err(), Ordering::Relaxed);
        let stepped = stepped?;
        self.gathered.fetch_add(stepped.received, Ordering::Relaxed);
        let mut all = stepped.blocks;
        // Launch order to ours.
        for (rank, _) in &mut all {
            *rank = self.rank_of_launch(*rank);
        }
        Ok(all)
    }

    /// Bytes this rank has received from the other ranks in the job's
    /// collective steps ([`allgather`](Self::allgather),
    /// [`barrier`](Self::barrier), [`reduce`](Self::reduce), each as it
    /// travelled) and [`trade`](Self::trade)s so far, shared with its
    /// renumbered copies. An allgather's grow with the job's size, since
    /// every rank receives every rank's block; the others' do not.
    pub fn gathered_bytes(&self) -> u64 {
        self.gathered.load(Ordering::Relaxed)
    }

    /// Opens a data connection (a TCP stream, `TCP_NODELAY`, blocking) to
    /// each of `peers`, each proved to be that rank's by a token sent over
    /// the setup link; collective among them (each must name this rank
    /// too). See [`crate::TCP_ADDR_VAR`] for the address used.
    ///
    /// # Errors
    ///
    /// [`JobError::UnknownPeer`] for a rank not in the job or this one;
    /// [`JobError::BootstrapTimeout`] when a peer does not connect in time;
    /// [`JobError::Bootstrap`] when a connection fails.
    pub fn connect_streams(
        &self,
        peers: &BTreeSet<usize>,
        timeout: Duration,
    ) -> Result<BTreeMap<usize, std::net::TcpStream>> {
        let deadline = Instant::now() + timeout;
        let links = self.connect_peers(peers, timeout)?;
        let dialer = crate::streams::Dialer {
            routes: &self.routes,
            launch_of: &|r| self.launch_of(r),
        };
        crate::streams::connect_streams(self.rank, links, peers, &dialer, deadline)
    }

    /// Opens a setup link to each of `peers` (collective among them: each
    /// must name this rank too).
    ///
    /// # Errors
    ///
    /// As [`connect_streams`](Self::connect_streams).
    pub fn connect_peers(
        &self,
        peers: &BTreeSet<usize>,
        timeout: Duration,
    ) -> Result<BTreeMap<usize, PeerLink>> {
        check_peers(self.rank, self.size, peers)?;
        let launch: BTreeSet<usize> = peers.iter().map(|&p| self.launch_of(p)).collect();
        let links = match self.exchange() {
            Some(mut oob) => oob.connect(&launch, Instant::now() + timeout)?,
            None => BTreeMap::new(),
        };
        Ok(links
            .into_values()
            .map(|link| {
                let p = self.rank_of_launch(link.peer());
                (p, link.renumbered(p))
            })
            .collect())
    }
}

/// What to tell the user when ranks of this rank's machine are in another
/// shared-memory domain ([`NodeId::local`]): said once, by the lowest rank
/// of the machine, naming the first rank of each other domain.
fn split_machine(intros: &[Introduction], rank: usize) -> Option<String> {
    let me = &intros[rank].node;
    let mut domains: Vec<(u64, usize)> = Vec::new();
    for (r, i) in intros
        .iter()
        .enumerate()
        .filter(|(_, i)| me.same_machine(&i.node))
    {
        if !domains.iter().any(|&(d, _)| d == i.node.shm_domain) {
            domains.push((i.node.shm_domain, r));
        }
    }
    let firsts: Vec<String> = domains.iter().map(|(_, r)| r.to_string()).collect();
    (domains.len() > 1 && domains[0].1 == rank).then(|| {
        format!(
            "the ranks on {} run in {} shared-memory domains (PID namespaces, shared-memory directories, or processes not dumpable), whose first ranks are {} (a container started for each rank? a program its user may not read?): those in different ones reach each other by network, not shared memory",
            me.hostname,
            domains.len(),
            firsts.join(", ")
        )
    })
}

/// The job id every rank adopts: rank 0's (or one made from its process),
/// with its nonce.
fn agreed_job_id(root: &Introduction) -> String {
    let base = match &root.job_id {
        Some(j) => j.clone(),
        None => format!("job{}-{}", root.pid, short_hash(&root.node.boot_id)),
    };
    // The nonce last, where truncation to 64 characters cannot cut it.
    let nonce = crate::auth::hex(&root.nonce);
    let keep = 64usize.saturating_sub(nonce.len() + 1);
    let base: String = sanitise_job_id(&base).chars().take(keep).collect();
    sanitise_job_id(&format!("{base}-{nonce}"))
}

/// A few hex digits that tell boots apart in a made-up job id.
fn short_hash(s: &str) -> String {
    let h = s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("{:08x}", h as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free_port() -> u16 {
        crate::free_port().unwrap()
    }

    fn secret() -> crate::Secret {
        crate::Secret::from_hex(&"5a".repeat(32)).unwrap()
    }

    fn launch_info(rank: usize, size: usize, port: u16) -> LaunchInfo {
        LaunchInfo {
            job_id: (rank == 0).then(|| "t-job".to_string()),
            ..LaunchInfo::loopback(rank, size, port, secret())
        }
    }

    /// Runs `rank(world, its rank)` on each of `size` ranks meeting over
    /// loopback, each a thread (a world made within 10 s); their results
    /// by rank.
    fn on_ranks<T: Send + 'static>(
        size: usize,
        rank: impl Fn(World, usize) -> T + Send + Sync + 'static,
    ) -> Vec<T> {
        let (port, rank) = (free_port(), Arc::new(rank));
        let handles: Vec<_> = (0..size)
            .map(|r| {
                let rank = rank.clone();
                std::thread::spawn(move || {
                    let launch = launch_info(r, size, port);
                    rank(
                        World::init_with(&launch, Duration::from_secs(10)).unwrap(),
                        r,
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn ranks_meet_barrier_and_pair_up_over_loopback() {
        let port = free_port();
        let size = 3;
        let handles: Vec<_> = (0..size)
            .map(|rank| {
                std::thread::spawn(move || {
                    let w =
                        World::init_with(&launch_info(rank, size, port), Duration::from_secs(10))
                            .unwrap();
                    assert!(w.same_node((rank + 1) % size));
                    assert!(w.job_id().starts_with("t-job-"), "rank 0's job id wins");
                    assert_eq!(w.job_id().len(), "t-job-".len() + 16, "with rank 0's nonce");
                    assert_eq!((w.local_rank(), w.local_size()), (rank, size));
                    w.barrier(Duration::from_secs(10)).unwrap();
                    let all = w
                        .allgather(&[rank as u8; 3], Duration::from_secs(10))
                        .unwrap();
                    assert_eq!(all, (0..size).map(|r| vec![r as u8; 3]).collect::<Vec<_>>());
                    // A ring: each talks to its two neighbours only.
                    let peers: BTreeSet<usize> =
                        [(rank + 1) % size, (rank + size - 1) % size].into();
                    let mut links = w.connect_peers(&peers, Duration::from_secs(10)).unwrap();
                    for (p, l) in links.iter_mut() {
                        l.send(&(rank * 100 + p)).unwrap();
                    }
                    for (p, l) in links.iter_mut() {
                        let got: usize = l.recv(Instant::now() + Duration::from_secs(10)).unwrap();
                        assert_eq!(got, p * 100 + rank);
                        assert!(!l.closed());
                    }
                    w.clone().barrier(Duration::from_secs(10)).unwrap();
                    links
                })
            })
            .collect();
        let mut all: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        // Rank 2 goes away: its peers see the connection close.
        drop(all.pop());
        std::thread::sleep(Duration::from_millis(50));
        assert!(all[0][&2].closed());
        assert!(!all[0][&1].closed());
    }

    #[test]
    fn a_rank_that_finishes_early_is_not_a_death() {
        let port = free_port();
        let size = 3;
        let handles: Vec<_> = (0..size)
            .map(|rank| {
                std::thread::spawn(move || {
                    let w =
                        World::init_with(&launch_info(rank, size, port), Duration::from_secs(10))
                            .unwrap();
                    assert!(w.failure().is_none());
                    // Rank 2 leaves at once (saying goodbye); rank 0, its
                    // parent in the health tree, and rank 1 stay for three
                    // heartbeats.
                    let stay = if rank == 2 { 10 } else { 1500 };
                    std::thread::sleep(Duration::from_millis(stay));
                    let failure = w.failure();
                    drop(w);
                    failure
                })
            })
            .collect();
        for (rank, h) in handles.into_iter().enumerate() {
            assert_eq!(h.join().unwrap(), None, "rank {rank} saw a death");
        }
    }

    #[test]
    fn a_rank_that_gives_up_ends_the_step_on_every_rank_and_the_next_step_is_in_time() {
        let size = 4;
        let t = Duration::from_secs(10);
        let outcomes = on_ranks(size, move |w, rank| {
            // Step 1: ranks 1 and 3 give up (rank 3 with a reason longer
            // than travels), the others gather.
            let long = "é".repeat(crate::refusal::MESSAGE_MAX);
            let first = match rank {
                1 => w.give_up(-7, "no field was added", t).map(|()| None),
                3 => w.give_up(-2, &long, t).map(|()| None),
                _ => w.allgather(b"data", t).map(Some),
            };
            // Step 2: a barrier, rank 2 giving up.
            let second = match rank {
                2 => w.give_up(-3, "late", t),
                _ => w.barrier(t),
            };
            // Step 3: every rank's data arrives, in step.
            let third = w.allgather(&[rank as u8], t).unwrap();
            (rank, first, second, third)
        });
        for (rank, first, second, third) in outcomes {
            match (rank, first) {
                (1 | 3, Ok(None)) => {}
                (
                    0 | 2,
                    Err(JobError::GaveUp {
                        rank: 1,
                        code: -7,
                        message,
                    }),
                ) => {
                    assert_eq!(message, "no field was added")
                }
                (r, other) => panic!("rank {r}, the first step: {other:?}"),
            }
            match (rank, second) {
                (2, Ok(())) => {}
                (
                    _,
                    Err(JobError::GaveUp {
                        rank: 2, code: -3, ..
                    }),
                ) => {}
                (r, other) => panic!("rank {r}, the second step: {other:?}"),
            }
            assert_eq!(third, (0..size).map(|r| vec![r as u8]).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_step_reads_every_ranks_data_or_names_the_rank_out_of_step_or_giving_up() {
        let data = |n: u32, d: &[u8]| Step::frame(Step::DATA, n, &[d]);
        let gave_up = |n: u32, why: &str| {
            Step::frame(Step::GAVE_UP, n, &[&(-4i32).to_le_bytes(), why.as_bytes()])
        };
        let read = |blocks: Vec<Vec<u8>>| {
            let mut ranked: Vec<crate::RankBlock> = blocks.into_iter().enumerate().collect();
            // In no particular order, and combined on their way.
            ranked.reverse();
            Step::combine(&mut ranked);
            Step::read(ranked, 7)
        };
        let all = read(vec![data(7, b"a"), data(7, b""), data(7, b"cc")]).unwrap();
        assert_eq!(
            Step::every_rank(all, 3).unwrap(),
            vec![b"a".to_vec(), Vec::new(), b"cc".to_vec()]
        );
        // A rank a step behind (late past the others' deadline) is named,
        // before any give-up of the step.
        match read(vec![gave_up(7, "x"), data(6, b"old"), data(7, b"c")]) {
            Err(JobError::OutOfStep {
                rank: 1,
                theirs: 6,
                ours: 7,
            }) => {}
            other => panic!("{other:?}"),
        }
        match read(vec![
            data(7, b"a"),
            gave_up(7, "second"),
            gave_up(7, "third"),
        ]) {
            Err(JobError::GaveUp {
                rank: 1,
                code: -4,
                message,
            }) => assert_eq!(message, "second"),
            other => panic!("{other:?}"),
        }
        for bad in [Vec::new(), vec![Step::DATA, 7, 0], vec![9, 7, 0, 0, 0]] {
            match read(vec![data(7, b"a"), bad.clone()]) {
                Err(JobError::Protocol { whom, .. }) => assert_eq!(whom, "rank 1"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_steps_blocks_merge_on_their_way_where_only_arriving_or_giving_up_counts() {
        let met = |n: u32| Step::frame(Step::MET, n, &[]);
        let data = |n: u32, d: &[u8]| Step::frame(Step::DATA, n, &[d]);
        let gave_up = |n: u32, why: &str| {
            Step::frame(Step::GAVE_UP, n, &[&7i32.to_le_bytes(), why.as_bytes()])
        };
        let combined = |blocks: Vec<Vec<u8>>| {
            let mut ranked: Vec<crate::RankBlock> = blocks.into_iter().enumerate().collect();
            Step::combine(&mut ranked);
            ranked.into_iter().map(|(r, _)| r).collect::<Vec<_>>()
        };
        // A barrier of any size passes one block on.
        assert_eq!(combined((0..100).map(|_| met(3)).collect()), vec![0]);
        // An allgather passes every block on.
        assert_eq!(
            combined((0..4).map(|r| data(3, &[r])).collect()),
            vec![0, 1, 2, 3]
        );
        // Where a rank gave up, its reason decides the step: the others'
        // blocks are not needed.
        let mut blocks: Vec<Vec<u8>> = (0..6).map(|_| met(3)).collect();
        blocks[4] = gave_up(3, "why");
        assert_eq!(combined(blocks), vec![4]);
        // A rank at another step is kept, to be named.
        let mut blocks: Vec<Vec<u8>> = (0..6).map(|_| met(3)).collect();
        blocks[5] = met(2);
        assert_eq!(combined(blocks), vec![0, 5]);
        // Merged, a barrier's blocks still read as the step taken, and an
        // allgather that met a barrier names the rank that took it.
        let mut ranked: Vec<crate::RankBlock> = (0..3).map(|r| (r, met(4))).collect();
        Step::combine(&mut ranked);
        assert_eq!(Step::read(ranked, 4).unwrap(), Vec::new());
        let mut ranked = vec![(0, data(4, b"a")), (1, met(4)), (2, data(4, b"c"))];
        Step::combine(&mut ranked);
        match Step::every_rank(Step::read(ranked, 4).unwrap(), 3) {
            Err(JobError::Protocol { whom, .. }) => assert_eq!(whom, "rank 1"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_rank_late_past_the_others_deadline_is_never_paired_with_their_next_step() {
        let size = 3;
        let outcomes = on_ranks(size, |w, rank| {
            w.barrier(Duration::from_secs(10)).unwrap();
            // Rank 2 comes 2.5 s late to a step the others give up after
            // 1 s; then every rank takes another step.
            if rank == 2 {
                std::thread::sleep(Duration::from_millis(2500));
            }
            let one = w.allgather(format!("one-{rank}").as_bytes(), Duration::from_secs(1));
            let two = w.allgather(format!("two-{rank}").as_bytes(), Duration::from_secs(4));
            (rank, one, two)
        });
        for (rank, one, two) in outcomes {
            if rank == 0 {
                // Rank 0 meets the others' blocks first: it finds rank 2
                // at step 1 (0 was the barrier) in its step 2.
                assert!(
                    matches!(
                        two,
                        Err(JobError::OutOfStep {
                            rank: 2,
                            theirs: 1,
                            ours: 2
                        })
                    ),
                    "{two:?}"
                );
            }
            for (step, got) in [("one", one), ("two", two)] {
                if let Ok(blocks) = got {
                    let want: Vec<Vec<u8>> = (0..size)
                        .map(|r| format!("{step}-{r}").into_bytes())
                        .collect();
                    assert_eq!(
                        blocks, want,
                        "rank {rank}'s step {step} was paired with another"
                    );
                }
            }
        }
    }

    #[test]
    fn a_reason_is_cut_on_a_character_and_read_back_whatever_arrives() {
        // Cut: no panic inside a two-byte character.
        let w = World::single();
        let long = "é".repeat(crate::refusal::MESSAGE_MAX);
        w.give_up(5, &long, Duration::from_secs(1)).unwrap();
        match crate::refusal::gave_up(4, &[1, 0]) {
            JobError::GaveUp {
                rank: 4,
                code: 0,
                message,
            } => assert!(message.contains("whole")),
            other => panic!("{other:?}"),
        }
        match crate::refusal::gave_up(2, &[9, 0, 0, 0, 0xff, b'x']) {
            JobError::GaveUp {
                rank: 2,
                code: 9,
                message,
            } => assert_eq!(message, "\u{fffd}x"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_renumbered_world_speaks_the_new_numbers() {
        let port = free_port();
        let size = 3;
        // Launch rank 2 becomes rank 0, launch 0 rank 1, launch 1 rank 2.
        let order = [2, 0, 1];
        let handles: Vec<_> = (0..size)
            .map(|launch| {
                std::thread::spawn(move || {
                    let w =
                        World::init_with(&launch_info(launch, size, port), Duration::from_secs(10))
                            .unwrap();
                    let r = w.renumbered(&order).unwrap();
                    assert_eq!(r.launch_rank(), launch);
                    assert_eq!(order[r.rank()], launch);
                    let me = r.rank();
                    let all = r.allgather(&[me as u8], Duration::from_secs(10)).unwrap();
                    assert_eq!(
                        all,
                        vec![vec![0], vec![1], vec![2]],
                        "gathered in the new order"
                    );
                    // A chain in the new numbering: 0 - 1 - 2.
                    let peers: BTreeSet<usize> = [me.wrapping_sub(1), me + 1]
                        .into_iter()
                        .filter(|&p| p < size)
                        .collect();
                    let mut links = r.connect_peers(&peers, Duration::from_secs(10)).unwrap();
                    assert_eq!(links.keys().copied().collect::<BTreeSet<_>>(), peers);
                    for (p, l) in links.iter_mut() {
                        assert_eq!(l.peer(), *p);
                        l.send(&(me * 10 + p)).unwrap();
                    }
                    for (p, l) in links.iter_mut() {
                        let got: usize = l.recv(Instant::now() + Duration::from_secs(10)).unwrap();
                        assert_eq!(got, p * 10 + me, "from new rank {p}");
                    }
                    // Composes: undoing the order gives launch order back.
                    let back = r.renumbered(&[1, 2, 0]).unwrap();
                    assert_eq!(back.rank(), launch);
                    r.barrier(Duration::from_secs(10)).unwrap();
                    for bad in [&[0, 1][..], &[0, 0, 1], &[0, 1, 3]] {
                        let e = r.renumbered(bad).unwrap_err().to_string();
                        assert!(e.contains("each must appear once"), "{e}");
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn the_health_timeout_is_checked() {
        use crate::health::parse_silence;
        for bad in ["0.5", "-3", "nan", "1e9", "ten"] {
            let e = parse_silence(Some(bad)).unwrap_err().to_string();
            assert!(
                e.contains("SODE_HEALTH_TIMEOUT") && e.contains("from 1 to 86400"),
                "{e}"
            );
        }
        assert_eq!(
            parse_silence(Some(" 3 ")).unwrap(),
            Some(Duration::from_secs(3))
        );
        for off in [None, Some("off"), Some("0"), Some(" ")] {
            assert_eq!(parse_silence(off).unwrap(), None, "{off:?}");
        }
    }

    #[test]
    fn a_missing_rank_times_out_with_its_name() {
        let e = World::init_with(&launch_info(0, 2, free_port()), Duration::from_millis(200))
            .unwrap_err()
            .to_string();
        assert!(e.contains("ranks 1") && e.contains("SODE_ROOT"), "{e}");
    }

    #[test]
    fn peers_outside_the_job_are_refused() {
        let w = World::single();
        let e = w
            .connect_peers(&[0].into(), Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("own peer"), "{e}");
        let e = w
            .connect_peers(&[5].into(), Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("0..1"), "{e}");
    }

    #[test]
    fn an_introduction_reads_back_whatever_it_carries() {
        let offer = crate::relay::RelayOffer {
            addrs: vec![
                "10.1.0.1:99".parse().unwrap(),
                "[fe80::2]:98".parse().unwrap(),
            ],
            token: [9; 32],
        };
        let plain = Introduction {
            node: NodeId::local(),
            job_id: None,
            pid: 4_000_000,
            nonce: [5; 8],
            reach: Reach::default(),
        };
        let full = Introduction {
            job_id: Some("slurm-123".into()),
            reach: Reach {
                nets: crate::routes::host_nets(),
                groups: Some(vec!["site-a".into(), "site-b".into()]),
                relay: Some(offer),
            },
            ..Introduction::decode(&plain.encode().unwrap(), "rank 0").unwrap()
        };
        for intro in [plain, full] {
            let rec = intro.encode().unwrap();
            assert_eq!(Introduction::decode(&rec, "rank 2").unwrap(), intro);
            let mut other = rec.clone();
            other[0] += 1;
            let e = Introduction::decode(&other, "rank 2").unwrap_err();
            assert!(e.to_string().contains("same sode"), "{e}");
        }
        let id = agreed_job_id(
            &Introduction::decode(
                &Introduction {
                    node: NodeId::local(),
                    job_id: Some("t-job".into()),
                    pid: 1,
                    nonce: [0xab; 8],
                    reach: Reach::default(),
                }
                .encode()
                .unwrap(),
                "rank 0",
            )
            .unwrap(),
        );
        assert_eq!(id, "t-job-abababababababab");
        // A launcher's job id of any length: what is agreed is the same.
        let long = Introduction {
            node: NodeId::local(),
            job_id: Some("x/".repeat(300)),
            pid: 1,
            nonce: [0xab; 8],
            reach: Reach::default(),
        };
        let back = Introduction::decode(&long.encode().unwrap(), "rank 0").unwrap();
        assert_eq!(agreed_job_id(&back), agreed_job_id(&long));
    }

    /// Ranks of one machine in several shared-memory domains are named
    /// once, by the machine's lowest rank; other machines, and a machine in
    /// one domain, say nothing.
    #[test]
    fn a_machine_split_into_shared_memory_domains_is_told_once() {
        let on = |host: &str, shm_domain: u64| Introduction {
            node: NodeId {
                hostname: host.into(),
                boot_id: "b".into(),
                shm_domain,
            },
            job_id: None,
            pid: 1,
            nonce: [0; 8],
            reach: Reach::default(),
        };
        let job = [
            on("a", 1),
            on("b", 1),
            on("a", 1),
            on("a", 2),
            on("b", 1),
            on("a", 3),
        ];
        let told: Vec<Option<String>> = (0..job.len()).map(|r| split_machine(&job, r)).collect();
        assert_eq!(
            told[0].as_deref(),
            Some("the ranks on a run in 3 shared-memory domains (PID namespaces, shared-memory directories, or processes not dumpable), whose first ranks are 0, 3, 5 (a container started for each rank? a program its user may not read?): those in different ones reach each other by network, not shared memory")
        );
        assert!(told[1..].iter().all(Option::is_none), "{told:?}");
    }

    proptest::proptest! {
        #[test]
        fn a_damaged_introduction_is_an_error_or_another_introduction_never_a_panic(
            at in proptest::collection::vec((0usize..200, proptest::num::u8::ANY), 1..4),
            cut in 0usize..200,
        ) {
            let intro = Introduction {
                node: NodeId::local(),
                job_id: Some("j".into()),
                pid: 7,
                nonce: [1; 8],
                reach: Reach {
                    nets: crate::routes::host_nets(),
                    groups: Some(vec!["g".into()]),
                    relay: Some(crate::relay::RelayOffer {
                        addrs: vec!["10.0.0.1:5".parse().unwrap()],
                        token: [2; 32],
                    }),
                },
            };
            let mut rec = intro.encode().unwrap();
            for &(i, b) in &at {
                let n = rec.len();
                rec[i % n] = b;
            }
            rec.truncate(cut.max(1));
            let _ = Introduction::decode(&rec, "rank 1");
        }
    }
}
