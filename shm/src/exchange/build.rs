//! Building an exchange: the collective setup with each peer.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{
    Exchange, ExchangeReport, MessageReport, OpState, Path, PathPolicy, Peer, PeerSegment, RecvOp,
    SendOp, Storage,
};
use crate::buffer::PrivateBuf;
use crate::caps::{cma_denied_reason, cma_read, warn_once, Availability};
use crate::context::Context;
use crate::error::{Result, ShmError};
use crate::layout::{self, PeerView, SegmentLayout};
use crate::ring::{RingRx, RingTx};
use crate::segment::{open_peer, segment_path, OwnSegment};
use crate::sys::pidfd::{PidFd, Watch};
use sode_job::{Backoff, Lifecycle};

use super::Liveness;
use crate::sys::shared::SharedMap;
use crate::thresholds::Thresholds;

/// Describes an exchange; [`ShmExchangeBuilder::build`] sets it up.
#[derive(Debug)]
pub struct ShmExchangeBuilder<'a> {
    ctx: &'a mut Context,
    name: Option<String>,
    neighbours: Vec<Peer>,
    policy: PathPolicy,
    private_receive: bool,
    ring_capacity: usize,
    setup_timeout: Duration,
    thresholds: Option<Thresholds>,
    pin: bool,
}

struct Setup<'p> {
    rank: usize,
    peers: &'p [usize],
    deadline: Instant,
    timeout: Duration,
}

impl Setup<'_> {
    /// Polls `ready` until it yields, the deadline passes, or `pid` exits.
    fn until<T>(
        &self,
        peer: usize,
        step: &'static str,
        watch: Option<&PidFd>,
        pid: i32,
        mut ready: impl FnMut() -> Result<Option<T>>,
    ) -> Result<T> {
        let mut backoff = Backoff::setup(Duration::from_millis(2));
        loop {
            if let Some(v) = ready()? {
                return Ok(v);
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
            if Instant::now() >= self.deadline {
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
        }
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

    /// Bytes of each inbound control ring (a power of two, at least 4 KiB;
    /// default 64 KiB). Eager fragments are at most a quarter of it.
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
            if let Some((_, tag)) = n.send {
                if let Some(j) = sends.insert((n.peer, tag), i) {
                    return bad(format!(
                        "neighbours {j} and {i} both send tag {tag} to rank {}",
                        n.peer
                    ));
                }
            }
            if let Some((_, tag)) = n.recv {
                if let Some(j) = recvs.insert((n.peer, tag), i) {
                    return bad(format!(
                        "neighbours {j} and {i} both receive tag {tag} from rank {}",
                        n.peer
                    ));
                }
            }
            if n.send.is_none() && n.recv.is_none() {
                return bad(format!(
                    "neighbour {i} (rank {}) neither sends nor receives",
                    n.peer
                ));
            }
        }
        Ok(())
    }

    /// Sets the exchange up with every neighbour. Collective: each peer must
    /// call `build` with matching messages (our sends are its receives, with
    /// the same tags and lengths) before `setup_timeout`.
    pub fn build(self) -> Result<Exchange> {
        self.validate()?;
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
            (Some(t), _) => t,
            // Forced paths do not need the (start-up) measurement.
            (None, PathPolicy::Force(_)) => Thresholds {
                eager_max: 0,
                get_min: 0,
                measured: false,
            },
            (None, PathPolicy::Auto) => self.ctx.thresholds()?,
        };
        let rank = self.ctx.rank;
        let mut notes = Vec::new();
        let local_cma = self.ctx.capabilities().cross_memory_attach.clone();

        let mut peer_ranks: Vec<usize> = Vec::new();
        for n in &self.neighbours {
            if !peer_ranks.contains(&n.peer) {
                peer_ranks.push(n.peer);
            }
        }
        // Receive paths, decided by us (the receiver) before the segment is
        // sized; only get can still change (to eager) after the probe.
        let mut recv_paths: Vec<Option<Path>> = Vec::new();
        for n in &self.neighbours {
            recv_paths.push(n.recv.map(|(len, _)| {
                let p = choose(len, self.policy, self.private_receive, &thresholds);
                if p == Path::Get {
                    if let Availability::Unavailable(why) = &local_cma {
                        let msg = format!(
                            "cross-memory attach unavailable ({why}); the get path falls back to eager"
                        );
                        warn_once("cma-local", &msg);
                        if !notes.contains(&msg) {
                            notes.push(msg);
                        }
                        return Path::Eager;
                    }
                }
                p
            }));
        }
        let recv_specs: Vec<(usize, u32, u64, bool, u64)> = self
            .neighbours
            .iter()
            .zip(&recv_paths)
            .filter_map(|(n, p)| {
                n.recv.map(|(len, tag)| {
                    (
                        n.peer,
                        tag,
                        len as u64,
                        *p == Some(Path::Window),
                        n.misalign as u64,
                    )
                })
            })
            .collect();
        let send_specs: Vec<(usize, u32, u64)> = self
            .neighbours
            .iter()
            .filter_map(|n| n.send.map(|(len, tag)| (n.peer, tag, len as u64)))
            .collect();
        let layout = SegmentLayout::plan(
            &peer_ranks,
            self.ring_capacity as u64,
            &recv_specs,
            &send_specs,
        );

        let probe = Box::new(std::process::id() as u64 ^ 0x50de_5eed_0000_0000);
        let path = segment_path(&self.ctx.dir, &self.ctx.job, &name, rank);
        let mut own = OwnSegment::create(path, layout.total)?;
        let oob = |e: crate::sys::shared::OutOfBounds| ShmError::Io {
            what: "writing own segment".into(),
            source: std::io::Error::other(e.to_string()),
        };
        layout
            .write(&own.map, rank, (&*probe as *const u64 as u64, *probe))
            .map_err(oob)?;
        let pinned = self.pin
            && {
                match own.map.lock() {
                    Ok(()) => true,
                    Err(e) => {
                        let limit = match self.ctx.capabilities().memlock_limit {
                            Some(l) => format!("{} KiB", l / 1024),
                            None => "unlimited".into(),
                        };
                        let msg = format!(
                        "cannot pin the {} KiB segment ({e}; RLIMIT_MEMLOCK is {limit}): raise it with `ulimit -l unlimited` or a memlock line in /etc/security/limits.conf; continuing unpinned",
                        layout.total / 1024
                    );
                        warn_once("mlock", &msg);
                        notes.push(msg);
                        false
                    }
                }
            };
        // Fault the pages in here, on this process's NUMA node.
        let mut page = 0;
        while page < layout.total {
            own.map.atomic(page).map_err(oob)?.load(Ordering::Relaxed);
            page += 4096;
        }
        own.map
            .atomic(layout::H_STATE)
            .map_err(oob)?
            .store(layout::STATE_LAYOUT, Ordering::Release);
        own.publish()?;

        let setup = Setup {
            rank,
            peers: &peer_ranks,
            deadline: Instant::now() + self.setup_timeout,
            timeout: self.setup_timeout,
        };
        self.connect(
            &setup,
            &name,
            own,
            &layout,
            &recv_paths,
            notes,
            thresholds,
            pinned,
            probe,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn connect(
        &self,
        setup: &Setup<'_>,
        name: &str,
        mut own: OwnSegment,
        layout: &SegmentLayout,
        recv_paths: &[Option<Path>],
        mut notes: Vec<String>,
        thresholds: Thresholds,
        pinned: bool,
        probe: Box<u64>,
    ) -> Result<Exchange> {
        let rank = setup.rank;
        let protocol = |peer: usize, what: String| ShmError::Protocol { peer, what };
        // Map every peer's segment, read its tables, tell it we mapped it.
        let mut maps: Vec<(usize, SharedMap, PeerView, PidFd)> = Vec::new();
        for &peer in setup.peers {
            let path = segment_path(&self.ctx.dir, &self.ctx.job, name, peer);
            let map = setup.until(peer, "create its segment", None, 0, || {
                open_peer(&path, peer)
            })?;
            let view = layout::read_peer(&map, peer, rank).map_err(|w| protocol(peer, w))?;
            let fd = PidFd::open(view.pid).map_err(|_| ShmError::PeerDied {
                peer,
                pid: view.pid,
                during: "before we could map its segment".into(),
            })?;
            map.atomic(layout::H_MAPPED)
                .map_err(|e| protocol(peer, e.to_string()))?
                .fetch_add(1, Ordering::AcqRel);
            maps.push((peer, map, view, fd));
        }
        // Probe cross-memory attach towards each peer we get from, then
        // publish our final receive paths.
        let mut cma_by_peer = HashMap::new();
        let mut final_recv: Vec<Option<Path>> = recv_paths.to_vec();
        for (i, n) in self.neighbours.iter().enumerate() {
            if final_recv[i] != Some(Path::Get) {
                continue;
            }
            let (_, _, view, _) = maps
                .iter()
                .find(|m| m.0 == n.peer)
                .expect("every peer mapped");
            let ok = cma_by_peer.entry(n.peer).or_insert_with(|| {
                let mut got = [0u8; 8];
                match cma_read(view.pid, view.probe.0, &mut got) {
                    Ok(8) if u64::from_ne_bytes(got) == view.probe.1 => Availability::Available,
                    Ok(_) => Availability::Unavailable("the probe word read back wrong".into()),
                    Err(e) => Availability::Unavailable(cma_denied_reason(
                        e,
                        &format!("rank {} (pid {})", n.peer, view.pid),
                    )),
                }
            });
            if let Availability::Unavailable(why) = ok {
                let msg = format!("{why}; the get path falls back to eager");
                warn_once("cma-peer", &msg);
                if !notes.contains(&msg) {
                    notes.push(msg);
                }
                final_recv[i] = Some(Path::Eager);
            }
        }
        let mut slot = 0;
        for (i, n) in self.neighbours.iter().enumerate() {
            if n.recv.is_some() {
                let entry = layout.recvs[slot].entry;
                let path = final_recv[i].expect("receive has a path");
                own.map
                    .write_u64(entry + layout::R_PATH, path.code())
                    .map_err(|e| protocol(rank, e.to_string()))?;
                slot += 1;
            }
        }
        own.map
            .atomic(layout::H_STATE)
            .map_err(|e| protocol(rank, e.to_string()))?
            .store(layout::STATE_PATHS, Ordering::Release);

        // Wait for each peer's paths and check both sides agree.
        for (peer, map, view, fd) in &maps {
            setup.until(
                *peer,
                "decide its receive paths",
                Some(fd),
                view.pid,
                || {
                    let s = map
                        .atomic(layout::H_STATE)
                        .map_err(|e| protocol(*peer, e.to_string()))?
                        .load(Ordering::Acquire);
                    Ok((s >= layout::STATE_PATHS).then_some(()))
                },
            )?;
            for n in self.neighbours.iter().filter(|n| n.peer == *peer) {
                if let Some((len, tag)) = n.send {
                    let found = view.recvs_from_us.iter().find(|r| r.0 == tag);
                    let Some(&(_, their_len, _, _)) = found else {
                        return Err(ShmError::Mismatch {
                            peer: *peer,
                            tag,
                            why: format!("we send {len} bytes but it receives nothing with this tag from rank {rank}"),
                        });
                    };
                    if their_len != len as u64 {
                        return Err(ShmError::Mismatch {
                            peer: *peer,
                            tag,
                            why: format!("we send {len} bytes, it expects {their_len}"),
                        });
                    }
                }
                if let Some((len, tag)) = n.recv {
                    match view.sends_to_us.iter().find(|s| s.0 == tag) {
                        None => {
                            return Err(ShmError::Mismatch {
                                peer: *peer,
                                tag,
                                why: format!("we expect {len} bytes but it sends nothing with this tag to rank {rank}"),
                            })
                        }
                        Some(&(_, l)) if l != len as u64 => {
                            return Err(ShmError::Mismatch {
                                peer: *peer,
                                tag,
                                why: format!("we expect {len} bytes, it sends {l}"),
                            })
                        }
                        Some(_) => {}
                    }
                }
            }
            for &(tag, len) in &view.sends_to_us {
                let expected = self
                    .neighbours
                    .iter()
                    .any(|n| n.peer == *peer && n.recv.is_some_and(|r| r.1 == tag));
                if !expected {
                    return Err(ShmError::Mismatch {
                        peer: *peer,
                        tag,
                        why: format!("it sends {len} bytes that we do not receive"),
                    });
                }
            }
        }
        // Every peer has mapped us: the name can go.
        let own_pid = std::process::id() as i32;
        setup
            .until(rank, "be mapped by all its peers", None, own_pid, || {
                let mapped = own
                    .map
                    .atomic(layout::H_MAPPED)
                    .map_err(|e| protocol(rank, e.to_string()))?
                    .load(Ordering::Acquire);
                Ok((mapped >= setup.peers.len() as u64).then_some(()))
            })
            .map_err(|e| match e {
                ShmError::SetupTimeout { waited, .. } => {
                    // Name the first peer that has not mapped us.
                    ShmError::SetupTimeout {
                        peer: setup.peers.first().copied().unwrap_or(rank),
                        step: "map our segment",
                        waited,
                    }
                }
                other => other,
            })?;
        own.unlink();

        // Operations.
        let mut peers = Vec::new();
        let mut peer_index = HashMap::new();
        let mut windows_of = HashMap::new();
        for (peer, map, view, fd) in maps {
            let inbound = layout
                .peers
                .iter()
                .find(|p| p.0 == peer)
                .map(|p| p.1)
                .expect("ring for every peer");
            peer_index.insert(peer, peers.len());
            peers.push(PeerSegment {
                rank: peer,
                pid: view.pid,
                pidfd: fd,
                tx: RingTx::new(view.ring_to_peer),
                rx: RingRx::new(inbound),
                outbox: VecDeque::new(),
                map,
            });
            // The table read at mapping time; only the path codes in it were
            // written since, and are read below.
            windows_of.insert(peer, view.recvs_from_us);
        }
        let io = |what: &str, e: std::io::Error| ShmError::Io {
            what: what.into(),
            source: e,
        };
        let mut sends = Vec::new();
        let mut recvs = Vec::new();
        let mut send_of = vec![None; self.neighbours.len()];
        let mut recv_of = vec![None; self.neighbours.len()];
        let mut report_sends = Vec::new();
        let mut report_recvs = Vec::new();
        let mut slot = 0;
        for (i, n) in self.neighbours.iter().enumerate() {
            let pi = peer_index[&n.peer];
            if let Some((len, tag)) = n.send {
                let link = &peers[pi];
                let &(_, _, entry, window) = windows_of[&n.peer]
                    .iter()
                    .find(|r| r.0 == tag)
                    .expect("checked above");
                let code = link
                    .map
                    .read_u64(entry + layout::R_PATH)
                    .map_err(|e| protocol(n.peer, e.to_string()))?;
                let path = Path::from_code(code).ok_or_else(|| {
                    protocol(n.peer, format!("unknown path code {code} for tag {tag}"))
                })?;
                let window = match (path, window) {
                    (Path::Window, Some(w)) => Some((w, entry)),
                    (Path::Window, None) => {
                        return Err(protocol(
                            n.peer,
                            format!("window path for tag {tag} without a window"),
                        ))
                    }
                    _ => None,
                };
                send_of[i] = Some(sends.len());
                report_sends.push(MessageReport {
                    neighbour: i,
                    peer: n.peer,
                    tag,
                    len,
                    path,
                });
                sends.push(SendOp {
                    peer: pi,
                    tag,
                    buf: PrivateBuf::new(len, n.misalign)
                        .map_err(|e| io("allocating a send buffer", e))?,
                    path,
                    window,
                    state: OpState::Idle,
                    sent: 0,
                    pushed_any: false,
                });
            }
            if let Some((len, tag)) = n.recv {
                let s = &layout.recvs[slot];
                slot += 1;
                let path = final_recv[i].expect("receive has a path");
                let storage = match (path, s.window) {
                    (Path::Window, Some(w)) => Storage::Window(w),
                    _ => Storage::Private(
                        PrivateBuf::new(len, n.misalign)
                            .map_err(|e| io("allocating a receive buffer", e))?,
                    ),
                };
                recv_of[i] = Some(recvs.len());
                report_recvs.push(MessageReport {
                    neighbour: i,
                    peer: n.peer,
                    tag,
                    len,
                    path,
                });
                recvs.push(RecvOp {
                    peer: pi,
                    tag,
                    len,
                    path,
                    storage,
                    entry: s.entry,
                    state: OpState::Idle,
                    received: 0,
                    get_from: None,
                });
            }
        }
        let recv_index = recvs
            .iter()
            .enumerate()
            .map(|(k, r)| ((r.peer, r.tag), k))
            .collect();
        let send_index = sends
            .iter()
            .enumerate()
            .map(|(k, s)| ((s.peer, s.tag), k))
            .collect();
        let report = ExchangeReport {
            name: name.into(),
            sends: report_sends,
            recvs: report_recvs,
            thresholds,
            segment_bytes: layout.total,
            pinned,
            notes,
        };
        let watch = Watch::new(peers.iter().map(|p| &p.pidfd));
        Ok(Exchange {
            name: name.into(),
            own,
            peers,
            sends,
            recvs,
            send_of,
            recv_of,
            recv_index,
            send_index,
            iteration: 0,
            lifecycle: Lifecycle::Idle,
            liveness: Liveness::new(watch),
            get_chunk: 1 << 20,
            report,
            _probe: probe,
        })
    }
}
