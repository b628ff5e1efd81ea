//! Building an exchange: the collective setup with each peer.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Exchange, MessageSpec, Path, PathPolicy, Peer, Run};
use crate::caps::warn_once;
use crate::context::{Context, PeerCalibration};
use crate::error::{Result, ShmError};
use crate::layout::{self, PeerView, RecvSpec, SegmentLayout, SendSpec};
use crate::segment::{open_peer, segment_path, Listing, OwnSegment};
use crate::sys::process::Process;
use sode_job::Backoff;

use crate::sys::shared::SharedMap;
use crate::thresholds::Thresholds;

/// Describes an exchange; [`ShmExchangeBuilder::build`] sets it up.
#[derive(Debug)]
pub struct ShmExchangeBuilder<'a> {
    ctx: &'a mut Context,
    name: Option<String>,
    pub(super) neighbours: Vec<Peer>,
    policy: PathPolicy,
    private_receive: bool,
    ring_capacity: usize,
    setup_timeout: Duration,
    thresholds: Option<Thresholds>,
    pin: bool,
    /// Lent sets: how many, and bytes each.
    lent: Option<(usize, usize)>,
    /// Which messages with runs are read in place (`None`: the default,
    /// or `SODE_SHM_READ_MIN` / `SODE_SHM_READ_RUN_MIN`).
    read_min: Option<ReadMin>,
}

/// Which messages with runs in the lent sets the receiver reads in place:
/// those of at least `bytes` whose runs average at least `mean_run`
/// bytes. The others take a packed path, gathered from the runs by the
/// sender at start and scattered into the runs by the receiver at the
/// end: a read in place costs a second trip (the sender's request, then
/// the receiver's done) where a window put finds its credit waiting, and
/// a face of short runs drags a whole cache line from the owner's core
/// for each. `bytes` is measured per peer at build with the other thresholds
/// ([`Thresholds::read_min`]: the get round trip against a window put with
/// a copy on either side); `mean_run` is a constant. Measured with
/// `ci/shared-fields.sh` (`stencil --exchange-only` on 2 ranks, minima):
/// in place takes 1.3-2.2x the caller's-arrays time up to 2 KiB and
/// 1.3-2.1x for faces of 8-byte runs, against 0.31-0.71x from 16 KiB in
/// long runs (docs/results/stencil.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadMin {
    /// Smallest message read in place.
    pub bytes: usize,
    /// Smallest mean run of a message read in place.
    pub mean_run: usize,
}

impl ReadMin {
    /// 4 KiB (the crossover of a first, hand-set run of `ci/shared-fields.sh`
    /// here; the probe measures 16 KiB), in runs of 256 B on
    /// average: for forced paths and thresholds set by hand.
    pub const DEFAULT: ReadMin = ReadMin {
        bytes: crate::thresholds::READ_MIN_FALLBACK,
        mean_run: 256,
    };

    /// Whether a message of `len` bytes in `runs` is read in place.
    pub fn admits(&self, len: usize, runs: &[Run]) -> bool {
        len >= self.bytes && len / runs.len().max(1) >= self.mean_run
    }
}

/// What `build` decided before any peer is involved.
pub(super) struct Local {
    pub(super) name: String,
    /// Thresholds for every peer, when set (by hand, or as a placeholder
    /// for forced paths); `None`: measured towards each peer at build.
    pub(super) thresholds: Option<Thresholds>,
    /// Each peer once, in the order the neighbours name them.
    pub(super) peer_ranks: Vec<usize>,
    /// Per neighbour: the path of what it sends us (decided once the
    /// peers are mapped, when measured towards each).
    pub(super) recv_paths: Vec<Option<Path>>,
    /// Per neighbour: whether a window is laid out for what it sends us
    /// (every receive that may become a window put, when the thresholds
    /// are measured after the layout).
    pub(super) windows: Vec<bool>,
    /// Per peer: the thresholds its messages were given paths by.
    pub(super) calibrations: Vec<PeerCalibration>,
    /// Fallbacks and decisions worth knowing.
    pub(super) notes: Vec<String>,
}

impl Local {
    /// Records a note once, and warns about it once per process.
    fn note(&mut self, key: &'static str, msg: String) {
        warn_once(key, &msg);
        if !self.notes.contains(&msg) {
            self.notes.push(msg);
        }
    }
}

/// This process's segment, published.
pub(super) struct Segment {
    pub(super) own: OwnSegment,
    pub(super) layout: SegmentLayout,
    pub(super) pinned: bool,
    pub(super) rank: usize,
    /// What [`blocks`] said when the segment was published.
    pub(super) blocks: bool,
    /// RLIMIT_MEMLOCK, for the note when pinning fails.
    memlock_limit: Option<u64>,
}

/// Whether this process's waits may sleep on their doorbell: decided once
/// per exchange, at build, and published to the peers.
pub(super) fn blocks() -> bool {
    sode_job::WaitPolicy::current() == sode_job::WaitPolicy::Block
}

/// A peer whose segment we mapped.
pub(super) struct MappedPeer {
    pub(super) rank: usize,
    pub(super) map: SharedMap,
    pub(super) view: PeerView,
    pub(super) process: Arc<Process>,
}

pub(super) struct Setup<'p> {
    pub(super) rank: usize,
    pub(super) peers: &'p [usize],
    pub(super) deadline: Instant,
    pub(super) timeout: Duration,
    /// Where this rank's segment is listed, listed again while waiting
    /// should a cleanup remove it.
    pub(super) own: Listing,
}

/// How often a wait of the setup makes sure this rank's segment is still
/// listed.
const RELIST_EVERY: Duration = Duration::from_millis(20);

impl Setup<'_> {
    /// Polls `ready` until it yields, the deadline passes, or `pid` exits.
    /// The deadline is a [`sode_job::Deadline`]: time this process is
    /// stopped does not count, and it passes at once when a peer gives up
    /// the exchange (`sode_job::abandon_when`, held by the halo's setup).
    pub(super) fn until<T>(
        &self,
        peer: usize,
        step: &'static str,
        watch: Option<&Process>,
        pid: i32,
        mut ready: impl FnMut() -> Result<Option<T>>,
    ) -> Result<T> {
        let mut backoff = Backoff::setup(Duration::from_millis(2));
        let mut deadline = sode_job::Deadline::new(self.deadline);
        let mut relist_at = Instant::now() + RELIST_EVERY;
        loop {
            if let Some(v) = ready()? {
                return Ok(v);
            }
            if Instant::now() >= relist_at {
                self.own.relist_if_gone()?;
                relist_at = Instant::now() + RELIST_EVERY;
            }
            if let Some(fd) = watch {
                if fd.exited().unwrap_or(false) {
                    return Err(ShmError::PeerDied {
                        peer,
                        pid,
                        during: format!("before it could {step}"),
                    });
                }
            }
            if deadline.passed() {
                return Err(ShmError::SetupTimeout {
                    peer,
                    step,
                    waited: self.timeout,
                });
            }
            backoff.snooze();
        }
    }
}

fn choose(len: usize, policy: PathPolicy, private: bool, t: &Thresholds) -> Path {
    match policy {
        PathPolicy::Force(p) => p,
        PathPolicy::Auto if private => {
            if len >= t.get_min {
                Path::Get
            } else {
                Path::Eager
            }
        }
        PathPolicy::Auto => {
            if len <= t.eager_max {
                Path::Eager
            } else {
                Path::Window
            }
        }
    }
}

impl<'a> ShmExchangeBuilder<'a> {
    pub(crate) fn new(ctx: &'a mut Context) -> Self {
        ShmExchangeBuilder {
            ctx,
            name: None,
            neighbours: Vec::new(),
            policy: PathPolicy::Auto,
            private_receive: false,
            ring_capacity: 64 * 1024,
            setup_timeout: Duration::from_secs(30),
            thresholds: None,
            pin: true,
            lent: None,
            read_min: None,
        }
    }

    /// Which messages with runs are read in place; the others are
    /// gathered and scattered around a packed path (default: the
    /// thresholds' measured `read_min` in runs of [`ReadMin::DEFAULT`]'s
    /// mean, or `SODE_SHM_READ_MIN` and `SODE_SHM_READ_RUN_MIN`, in
    /// bytes).
    pub fn read_min(mut self, read_min: ReadMin) -> Self {
        self.read_min = Some(read_min);
        self
    }

    fn read_min_or_env(&self, t: &Thresholds) -> Result<ReadMin> {
        if let Some(r) = self.read_min {
            return Ok(r);
        }
        let var = |name: &str, default: usize| match std::env::var(name) {
            Ok(v) => v.trim().parse().map_err(|_| ShmError::InvalidSetting {
                name: name.into(),
                value: v,
                why: "expected a size in bytes".into(),
            }),
            Err(_) => Ok(default),
        };
        Ok(ReadMin {
            bytes: var("SODE_SHM_READ_MIN", t.read_min)?,
            mean_run: var("SODE_SHM_READ_RUN_MIN", ReadMin::DEFAULT.mean_run)?,
        })
    }

    /// Keeps `sets` arrays of `set_len` bytes each in this process's
    /// segment, for the caller's fields ([`Exchange::lent_mut`]). Messages
    /// with runs there ([`Peer::send_in_place`], [`Peer::recv_in_place`])
    /// need no packing by the caller: where [`read_min`](Self::read_min)
    /// admits them, the receiver copies the sender's runs straight into
    /// its own (one copy in all); elsewhere the exchange gathers and
    /// scatters them around a packed path. Each iteration exchanges one
    /// set, named at [`Exchange::start_set`] (for double buffering).
    pub fn lend(mut self, sets: usize, set_len: usize) -> Self {
        self.lent = Some((sets, set_len));
        self
    }

    /// Names the exchange (default: `x` and a per-context counter). Peers
    /// must use the same name.
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Adds a neighbour; its index in this list addresses its buffers.
    pub fn neighbour(mut self, n: Peer) -> Self {
        self.neighbours.push(n);
        self
    }

    /// Adds several neighbours.
    pub fn neighbours(mut self, ns: impl IntoIterator<Item = Peer>) -> Self {
        self.neighbours.extend(ns);
        self
    }

    /// How this process picks the path of each message it receives.
    pub fn path_policy(mut self, policy: PathPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Keep receive buffers in private memory (eager or get paths) instead
    /// of windows in the shared segment.
    pub fn private_receive(mut self, private: bool) -> Self {
        self.private_receive = private;
        self
    }

    /// Bytes of the largest inbound control ring (a power of two, at least
    /// 4 KiB; default 64 KiB). Each peer's ring is sized to what it sends
    /// (two iterations of its messages, its largest in one fragment), from
    /// one page with the ring's header up to this. Eager fragments are at
    /// most a quarter of a ring.
    pub fn ring_capacity(mut self, bytes: usize) -> Self {
        self.ring_capacity = bytes;
        self
    }

    /// How long `build` waits for peers (default 30 s).
    pub fn setup_timeout(mut self, timeout: Duration) -> Self {
        self.setup_timeout = timeout;
        self
    }

    /// Overrides the context's thresholds for this exchange.
    pub fn thresholds(mut self, t: Thresholds) -> Self {
        self.thresholds = Some(t);
        self
    }

    /// Whether to try to pin the segment with mlock (default true).
    pub fn pin(mut self, pin: bool) -> Self {
        self.pin = pin;
        self
    }

    /// This process's rank.
    pub(super) fn rank(&self) -> usize {
        self.ctx.rank
    }

    fn validate(&self) -> Result<()> {
        let bad = |why: String| Err(ShmError::InvalidNeighbours { why });
        if !self.ring_capacity.is_power_of_two() || self.ring_capacity < 4096 {
            return Err(ShmError::InvalidSetting {
                name: "ring_capacity".into(),
                value: self.ring_capacity.to_string(),
                why: "must be a power of two of at least 4096".into(),
            });
        }
        let mut sends = HashMap::new();
        let mut recvs = HashMap::new();
        for (i, n) in self.neighbours.iter().enumerate() {
            if n.peer == self.ctx.rank {
                return bad(format!(
                    "neighbour {i} is this process (rank {}): copy locally instead",
                    n.peer
                ));
            }
            if n.misalign >= 64 {
                return bad(format!(
                    "neighbour {i}: misalignment {} must be below 64",
                    n.misalign
                ));
            }
            if let Some(MessageSpec { tag, .. }) = n.send {
                if let Some(j) = sends.insert((n.peer, tag), i) {
                    return bad(format!(
                        "neighbours {j} and {i} both send tag {tag} to rank {}",
                        n.peer
                    ));
                }
            }
            if let Some(MessageSpec { tag, .. }) = n.recv {
                if let Some(j) = recvs.insert((n.peer, tag), i) {
                    return bad(format!(
                        "neighbours {j} and {i} both receive tag {tag} from rank {}",
                        n.peer
                    ));
                }
            }
            self.validate_runs(i, n)?;
            if n.send.is_none() && n.recv.is_none() {
                return bad(format!(
                    "neighbour {i} (rank {}) neither sends nor receives",
                    n.peer
                ));
            }
        }
        Ok(())
    }

    /// The lent sets fit in memory, and each message in place has runs
    /// inside a set that cover it.
    fn validate_lent(&self) -> Result<()> {
        let Some((sets, set_len)) = self.lent else {
            return Ok(());
        };
        if sets == 0
            || set_len == 0
            || sets
                .checked_mul(set_len)
                .is_none_or(|b| b > isize::MAX as usize)
        {
            return Err(ShmError::InvalidSetting {
                name: "lend".into(),
                value: format!("{sets} sets of {set_len} bytes"),
                why:
                    "lend at least one set of at least one byte, in all less than the address space"
                        .into(),
            });
        }
        Ok(())
    }

    fn validate_runs(&self, i: usize, n: &Peer) -> Result<()> {
        let sides = [
            ("send", &n.send_runs, n.send),
            ("receive", &n.recv_runs, n.recv),
        ];
        for (side, runs, message) in sides {
            let Some(runs) = runs else { continue };
            let bad = |why: String| {
                Err(ShmError::InvalidNeighbours {
                    why: format!("neighbour {i} (rank {}): its {side} in place {why}", n.peer),
                })
            };
            let Some((_, set_len)) = self.lent else {
                return bad("needs lent sets: call lend(sets, set_len) first".into());
            };
            let Some(m) = message else {
                return bad("has runs, but no such message".into());
            };
            if runs.is_empty() {
                return bad("has no runs (a message of 0 bytes cannot travel in place)".into());
            }
            let mut total = 0usize;
            for r in runs {
                if r.len == 0 || r.offset.checked_add(r.len).is_none_or(|end| end > set_len) {
                    return bad(format!(
                        "has a run {}+{} outside the {set_len}-byte set (or empty)",
                        r.offset, r.len
                    ));
                }
                total = total.saturating_add(r.len);
            }
            if total != m.len {
                return bad(format!("covers {total} bytes of a {}-byte message", m.len));
            }
        }
        Ok(())
    }

    /// Sets the exchange up with every neighbour. Collective: each peer must
    /// call `build` with matching messages (our sends are its receives, with
    /// the same tags and lengths) before `setup_timeout`.
    ///
    /// # Errors
    ///
    /// [`ShmError::InvalidNeighbours`] for a bad neighbour list;
    /// [`ShmError::CreateSegment`], [`ShmError::UnsafeSegment`] or
    /// [`ShmError::SegmentCollision`] for this process's segment;
    /// [`ShmError::MapPeer`] when a peer's cannot be mapped;
    /// [`ShmError::SetupTimeout`] when a peer does not appear in time;
    /// [`ShmError::Mismatch`] when a peer's messages differ from ours.
    pub fn build(mut self) -> Result<Exchange> {
        self.validate_lent()?;
        self.validate()?;
        let mut local = self.decide()?;
        let mut segment = self.publish(&mut local)?;
        let peer_ranks = local.peer_ranks.clone();
        let setup = Setup {
            rank: self.ctx.rank,
            peers: &peer_ranks,
            deadline: Instant::now() + self.setup_timeout,
            timeout: self.setup_timeout,
            own: segment.own.listing(),
        };
        let mapped = self.map_peers(&setup, &local.name)?;
        self.choose_paths(&setup, &mapped, &mut local)?;
        segment.settle(&self.neighbours, &mut local, self.pin)?;
        segment.publish_paths(&self.neighbours, &local.recv_paths)?;
        for peer in &mapped {
            peer.wait_paths(&setup, "decide its receive paths")?;
            self.check_agreement(peer)?;
        }
        segment.wait_mapped(&setup)?;
        self.operations(local, segment, mapped)
    }

    /// What this process decides alone: the exchange's name, thresholds,
    /// peers and receive paths.
    fn decide(&mut self) -> Result<Local> {
        let name = match &self.name {
            Some(n) => n.clone(),
            None => format!("x{}", self.ctx.next_exchange),
        };
        self.ctx.next_exchange += 1;
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(ShmError::InvalidSetting {
                name: "exchange name".into(),
                value: name,
                why: "use ASCII letters, digits and '_'".into(),
            });
        }
        let thresholds = match (self.thresholds, self.policy) {
            (Some(t), _) => Some(t),
            // Forced paths do not need a measurement.
            (None, PathPolicy::Force(_)) => Some(Thresholds {
                eager_max: 0,
                get_min: 0,
                read_min: crate::thresholds::READ_MIN_FALLBACK,
                measured: false,
            }),
            (None, PathPolicy::Auto) => self.ctx.thresholds_by_hand(),
        };
        let mut peer_ranks: Vec<usize> = Vec::new();
        for n in &self.neighbours {
            if !peer_ranks.contains(&n.peer) {
                peer_ranks.push(n.peer);
            }
        }
        let mut local = Local {
            name,
            thresholds,
            peer_ranks,
            recv_paths: vec![None; self.neighbours.len()],
            windows: Vec::new(),
            calibrations: Vec::new(),
            notes: Vec::new(),
        };
        match thresholds {
            Some(t) => {
                for (i, n) in self.neighbours.iter().enumerate() {
                    local.recv_paths[i] = self.recv_path(n, &t)?;
                }
                local.windows = local
                    .recv_paths
                    .iter()
                    .map(|p| *p == Some(Path::Window))
                    .collect();
            }
            // Measured once the peers are mapped (their placement is known
            // then): a window for any receive that may take one.
            None => {
                local.windows = self
                    .neighbours
                    .iter()
                    .map(|n| n.recv.is_some() && !self.private_receive)
                    .collect();
            }
        }
        Ok(local)
    }

    /// The path of what `n` sends us, by thresholds `t` (we, the receiver,
    /// decide it).
    fn recv_path(&self, n: &Peer, t: &Thresholds) -> Result<Option<Path>> {
        let read_min = self.read_min_or_env(t)?;
        Ok(n.recv.map(|m| {
            if n.recv_runs
                .as_ref()
                .is_some_and(|r| read_min.admits(m.len, r))
            {
                Path::Read
            } else {
                choose(m.len, self.policy, self.private_receive, t)
            }
        }))
    }

    /// Gives every receive its path: by the thresholds set for every peer,
    /// or by those measured towards its sender, where the sender runs.
    ///
    /// A probe spins two threads, so two ranks probing at once on few
    /// cores measure each other: before its first probe, a rank waits
    /// until every lower-ranked peer has decided its paths (all its probes
    /// done). The lowest rank waits for no one, so the waits end.
    fn choose_paths(
        &mut self,
        setup: &Setup<'_>,
        mapped: &[MappedPeer],
        local: &mut Local,
    ) -> Result<()> {
        let rank = self.ctx.rank;
        let mut lower_done = false;
        for peer in mapped {
            let calibration = match local.thresholds {
                Some(thresholds) => PeerCalibration {
                    peer: peer.rank,
                    thresholds,
                    towards: Vec::new(),
                    ran_on: None,
                    reused: false,
                    from_earlier_job: false,
                },
                None => {
                    let before_probe = || {
                        if !lower_done {
                            for lower in mapped.iter().filter(|p| p.rank < rank) {
                                lower.wait_paths(setup, "measure its thresholds")?;
                            }
                        }
                        lower_done = true;
                        Ok(())
                    };
                    let c = self
                        .ctx
                        .calibrate_towards(peer.rank, peer.view.pid, before_probe)?;
                    for (i, n) in self.neighbours.iter().enumerate() {
                        if n.peer == peer.rank {
                            local.recv_paths[i] = self.recv_path(n, &c.thresholds)?;
                        }
                    }
                    c
                }
            };
            local.calibrations.push(calibration);
        }
        Ok(())
    }

    /// Creates this process's segment, writes its tables, pins and faults
    /// it in, and publishes it under its name.
    fn publish(&self, local: &mut Local) -> Result<Segment> {
        let rank = self.ctx.rank;
        let recvs: Vec<RecvSpec> = self
            .neighbours
            .iter()
            .zip(&local.windows)
            .filter_map(|(n, &window)| {
                n.recv.map(|m| RecvSpec {
                    from: n.peer,
                    tag: m.tag,
                    len: m.len as u64,
                    window,
                    in_place: n.recv_runs.is_some(),
                    misalign: n.misalign as u64,
                })
            })
            .collect();
        let sends: Vec<SendSpec> = self
            .neighbours
            .iter()
            .filter_map(|n| {
                n.send.map(|m| SendSpec {
                    to: n.peer,
                    tag: m.tag,
                    len: m.len as u64,
                    misalign: n.misalign as u64,
                    runs: n.send_runs.clone(),
                })
            })
            .collect();
        let lent = self.lent.map(|(sets, len)| (sets as u64, len as u64));
        let layout = SegmentLayout::plan(
            &local.peer_ranks,
            self.ring_capacity as u64,
            &recvs,
            &sends,
            lent,
        );
        let path = segment_path(&self.ctx.dir, &self.ctx.job, &local.name, rank);
        let mut own = OwnSegment::create(path, layout.total)?;
        let blocks = blocks();
        layout.write(&own.map, rank, blocks).map_err(own_bounds)?;
        own.map
            .atomic(layout::H_STATE)
            .map_err(own_bounds)?
            .store(layout::STATE_LAYOUT, Ordering::Release);
        own.publish()?;
        Ok(Segment {
            own,
            layout,
            pinned: false,
            rank,
            blocks,
            memlock_limit: self.ctx.capabilities().memlock_limit,
        })
    }

    /// Maps every peer's segment, reads its tables, tells it we mapped it.
    fn map_peers(&self, setup: &Setup<'_>, name: &str) -> Result<Vec<MappedPeer>> {
        let mut mapped = Vec::with_capacity(setup.peers.len());
        for &peer in setup.peers {
            let path = segment_path(&self.ctx.dir, &self.ctx.job, name, peer);
            let map = setup.until(peer, "create its segment", None, 0, || {
                open_peer(&path, peer)
            })?;
            let view = layout::read_peer(&map, peer, setup.rank).map_err(|w| protocol(peer, w))?;
            let process = Process::shared(view.pid).map_err(|_| ShmError::PeerDied {
                peer,
                pid: view.pid,
                during: "before we could map its segment".into(),
            })?;
            map.atomic(layout::H_MAPPED)
                .map_err(|e| protocol(peer, e.to_string()))?
                .fetch_add(1, Ordering::AcqRel);
            mapped.push(MappedPeer {
                rank: peer,
                map,
                view,
                process,
            });
        }
        Ok(mapped)
    }
}

const PAGE: u64 = 4096;

impl Segment {
    /// Pins (when `pin`) and faults in the segment's pages, except those
    /// of windows laid out for receives that took another path: never
    /// touched, they cost no memory. Faulting here, before any peer may
    /// write (it waits for our paths), puts the pages on this process's
    /// NUMA node.
    pub(super) fn settle(
        &mut self,
        neighbours: &[Peer],
        local: &mut Local,
        pin: bool,
    ) -> Result<()> {
        let receives = neighbours
            .iter()
            .zip(&local.recv_paths)
            .filter(|(n, _)| n.recv.is_some());
        let mut idle: Vec<(u64, u64)> = receives
            .zip(&self.layout.recvs)
            .filter_map(|((_, path), slot)| {
                let w = slot.window.filter(|_| *path != Some(Path::Window))?;
                let end = w + layout::window_slots(slot.len) * layout::window_stride(slot.len);
                let (start, end) = (w.div_ceil(PAGE) * PAGE, end / PAGE * PAGE);
                (start < end).then_some((start, end))
            })
            .collect();
        idle.sort_unstable();
        let mut used = Vec::new();
        let mut at = 0;
        for (start, end) in idle {
            if start > at {
                used.push((at, start));
            }
            at = at.max(end);
        }
        if at < self.layout.total {
            used.push((at, self.layout.total));
        }
        let mut refused = None;
        for &(start, end) in &used {
            if pin {
                if let Err(e) = self.own.map.lock_range(start, end - start) {
                    refused.get_or_insert(e);
                }
            }
            let mut page = start;
            while page < end {
                self.own
                    .map
                    .atomic(page)
                    .map_err(own_bounds)?
                    .load(Ordering::Relaxed);
                page += PAGE;
            }
        }
        self.pinned = pin && refused.is_none();
        if let Some(e) = refused {
            let limit = match self.memlock_limit {
                Some(l) => format!("{} KiB", l / 1024),
                None => "unlimited".into(),
            };
            let bytes: u64 = used.iter().map(|(a, b)| b - a).sum();
            local.note("mlock", format!(
                "cannot pin the {} KiB segment ({e}; RLIMIT_MEMLOCK is {limit}): raise it with `ulimit -l unlimited` or a memlock line in /etc/security/limits.conf; continuing unpinned",
                bytes / 1024
            ));
        }
        Ok(())
    }
}

/// A segment's out-of-bounds access while this process writes its own.
fn own_bounds(e: crate::sys::shared::OutOfBounds) -> ShmError {
    ShmError::Io {
        what: "writing own segment".into(),
        source: std::io::Error::other(e.to_string()),
    }
}

fn protocol(peer: usize, what: String) -> ShmError {
    ShmError::Protocol { peer, what }
}
