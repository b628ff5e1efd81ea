//! The job's health: a watcher thread per rank, on links of its own to its
//! parent and children in a tree of the job's ranks, and to the ranks one
//! generation further ([`tree_peers`]: at most eight links a rank, whatever
//! the job's size; no rank is a hub).
//! Each side of a link sends heartbeats; a rank declares a tree neighbour
//! dead when its link closes without a goodbye (the process was killed or
//! crashed; one that exits says goodbye from an exit hook, or with a
//! failing status that it failed), or its node stops answering at the
//! network level (TCP keepalive: a paused process's kernel still
//! answers), and passes the verdict on along every other link, so that it
//! floods the tree: each part the death cut off holds a neighbour of the
//! dead rank, which saw it. Silence alone is not death: a rank paused by a debugger, SIGSTOP or
//! a suspended job is reported, and declared dead only past the deadline
//! `SODE_HEALTH_TIMEOUT` sets. The data path reads the verdict with one
//! atomic load ([`Health::failure`]), so every blocked wait of the job can
//! fail naming the dead rank, not only the dead rank's neighbours.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{JobError, Result};
use crate::node::Nodes;
use crate::oob::PeerLink;

/// Seconds a rank may stay silent before rank 0 declares it dead (and a
/// rank declares rank 0 dead); unset, `off` or `0`: silence is reported
/// but never fatal.
pub const HEALTH_TIMEOUT_VAR: &str = "SODE_HEALTH_TIMEOUT";
/// Silence after which a rank is reported (not declared dead) as paused or
/// hung.
pub const SILENCE_REPORTED: Duration = Duration::from_secs(10);
/// TCP keepalive on health links: a peer's kernel that stops answering for
/// this long (its node went down, or the network between) closes the link.
/// A paused process's kernel still answers, so it is never declared dead
/// this way.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(4);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
const KEEPALIVE_PROBES: u32 = 5;
/// How often each side of a health link sends a heartbeat.
const BEAT: Duration = Duration::from_millis(500);
/// How long a message that `poll` said is there may take to arrive whole.
const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a stopping watcher reads its links to their end (the peers
/// reading its last note and closing theirs), for all links together.
const LAST_NOTE_READ: Duration = Duration::from_millis(500);
/// How long the rest of a note already begun may take then.
const READ_SLICE: Duration = Duration::from_millis(100);
/// How long one note may take to leave, so that a peer that stopped reading
/// does not hold the watcher. Heartbeats are not sent on a link with no
/// room (its peer is paused: a full link is no death), so only a verdict
/// can meet this limit, and its peer is then declared dead.
const SEND_LIMIT: Duration = Duration::from_secs(2);

/// Children per rank in the health tree. Two keeps a rank's links (and the
/// heartbeats it sends and judges) at eight with the grandparent and
/// grandchildren; a verdict crosses at most 2 log2(N) links, each a
/// wake-up and a short write.
const FANOUT: usize = 2;

/// The ranks whose health rank `rank` of a job of `size` watches, and that
/// watch it: in a tree of every rank, its parent `(rank - 1) / FANOUT`
/// and its children, and also its grandparent and grandchildren. The tree
/// alone joins every rank, so a verdict passed along every link reaches
/// every rank; the links that skip a generation keep a rank's children
/// joined to the rest after it finishes early (and says goodbye), so a
/// later death below it still reaches every rank. At most
/// `2 + FANOUT + FANOUT^2` links a rank.
pub(crate) fn tree_peers(rank: usize, size: usize) -> std::collections::BTreeSet<usize> {
    let parent = |r: usize| r.checked_sub(1).map(|r| r / FANOUT);
    let children = |r: usize| {
        let first = r.saturating_mul(FANOUT).saturating_add(1);
        (first..first.saturating_add(FANOUT)).filter(|&c| c < size)
    };
    let grandparent = parent(rank).and_then(parent);
    let grandchildren = children(rank).flat_map(children);
    parent(rank)
        .into_iter()
        .chain(grandparent)
        .chain(children(rank))
        .chain(grandchildren)
        .collect()
}

/// What travels on a health link.
#[derive(Debug, Serialize, Deserialize)]
enum Note {
    /// Still here.
    Beat,
    /// Finished normally: its link closing is not a death.
    Bye,
    /// A tree neighbour passing on that `rank` died.
    Dead { rank: usize, why: String },
    /// `rank` gave up setting up its part of exchange `exchange` (passed
    /// on, like a death, along every other link): its neighbours waiting
    /// for that part stop waiting. Not a death: the job goes on.
    GaveUpSetup {
        exchange: String,
        rank: usize,
        code: i32,
        why: String,
    },
}

/// A rank that gave up setting up its part of an exchange, as its notice
/// reached this rank ([`World::setup_given_up`](crate::World::setup_given_up)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SetupGivenUp {
    /// Its rank (in the numbering of the world that reports it).
    pub rank: usize,
    /// Its rank in launch order.
    pub launch_rank: usize,
    /// The code it gave (the C ABI's status).
    pub code: i32,
    /// Why, in its words.
    pub why: String,
}

/// Exchanges whose given-up setups a rank remembers: the newest, since a
/// notice matters only while its exchange is being set up.
const NOTICES_KEPT: usize = 16;

/// The notices of given-up setups heard so far: for each of the newest
/// [`NOTICES_KEPT`] exchanges, the lowest rank's. Only a notice of a lower
/// rank is news, to pass on: when many ranks give up one exchange, a link
/// carries few of their notices, and every rank ends with the lowest.
#[derive(Debug, Default)]
struct Notices {
    by_exchange: std::collections::VecDeque<(String, SetupGivenUp)>,
}

impl Notices {
    /// Records that `rank` gave up `exchange`; whether it is news.
    fn record(&mut self, exchange: &str, rank: usize, code: i32, why: &str) -> bool {
        let notice = SetupGivenUp {
            rank,
            launch_rank: rank,
            code,
            why: why.to_string(),
        };
        match self.by_exchange.iter_mut().find(|(x, _)| x == exchange) {
            Some((_, known)) if known.launch_rank <= rank => false,
            Some((_, known)) => {
                *known = notice;
                true
            }
            None => {
                if self.by_exchange.len() == NOTICES_KEPT {
                    self.by_exchange.pop_front();
                }
                self.by_exchange.push_back((exchange.to_string(), notice));
                true
            }
        }
    }

    /// The lowest rank known to have given up `exchange`.
    fn first(&self, exchange: &str) -> Option<SetupGivenUp> {
        let (_, known) = self.by_exchange.iter().find(|(x, _)| x == exchange)?;
        Some(known.clone())
    }
}

/// A rank of the job found dead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Its rank (in the numbering of the world that reports it).
    pub rank: usize,
    /// Its rank in launch order.
    pub launch_rank: usize,
    /// The host it ran on.
    pub host: String,
    /// How it was found dead.
    pub why: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.rank == self.launch_rank {
            write!(f, "rank {} (on {}) {}", self.rank, self.host, self.why)
        } else {
            write!(
                f,
                "rank {} (launched as rank {}, on {}) {}",
                self.rank, self.launch_rank, self.host, self.why
            )
        }
    }
}

/// What runs once, when the job is first found to have failed.
pub(crate) type FailureHook = Box<dyn FnOnce() + Send>;

/// The hooks waiting for a failure.
#[derive(Default)]
struct FailureHooks(Vec<FailureHook>);

impl std::fmt::Debug for FailureHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} hooks", self.0.len())
    }
}

/// What the watcher thread and the data path share.
#[derive(Debug)]
struct Verdict {
    failure: OnceLock<Failure>,
    /// Set as the first failure is declared, before the hooks run and
    /// `failure` is set: the hooks run before any thread can see it.
    declared: std::sync::atomic::AtomicBool,
    /// What runs once the job has failed ([`Health::when_failed`]).
    when_failed: Mutex<FailureHooks>,
    /// Where each rank runs, to name a dead rank's host.
    nodes: Arc<Nodes>,
    /// Written once, with the verdict: wakes ranks asleep in `poll`.
    ring: UnixStream,
    /// Given-up setups heard of, this rank's own included.
    notices: Mutex<Notices>,
}

impl Verdict {
    /// Records a given-up setup; whether it is news (to pass on).
    fn notice(&self, exchange: &str, rank: usize, code: i32, why: &str) -> bool {
        let news = self
            .notices
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(exchange, rank, code, why);
        if news {
            tracing::info!(exchange, rank, why, "a rank gave up setting up an exchange");
        }
        news
    }

    /// Records the first death seen, and says whether it was the first;
    /// later ones add nothing (the job has already failed).
    fn declare(&self, rank: usize, why: String) -> bool {
        let host = self
            .nodes
            .get(rank)
            .map(|n| n.hostname.clone())
            .unwrap_or_default();
        let failure = Failure {
            rank,
            launch_rank: rank,
            host,
            why,
        };
        if self
            .declared
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return false;
        }
        // Before any thread sees the failure: a program told of it may end
        // at once, through `_exit` (MPI_Abort) that runs no exit hook.
        let hooks =
            std::mem::take(&mut *self.when_failed.lock().unwrap_or_else(|p| p.into_inner()));
        for hook in hooks.0 {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(hook));
        }
        if self.failure.set(failure.clone()).is_err() {
            return false;
        }
        tracing::warn!(%failure, "a rank of the job died");
        // Never read: the other end stays readable, waking every poll that
        // includes it from now on.
        use std::io::Write;
        let _ = (&self.ring).write(&[1]);
        true
    }
}

/// The job's health, as this rank knows it; its watcher thread stops (and
/// says goodbye to its tree neighbours) when this is dropped.
#[derive(Debug)]
pub(crate) struct Health {
    verdict: Arc<Verdict>,
    /// Stops the watcher, which says goodbye: when this is dropped, or
    /// when the process exits without dropping it.
    farewell: Arc<Farewell>,
    /// Readable once a rank is found dead.
    told: UnixStream,
    /// Notes for the watcher to send (this rank's given-up setups), and
    /// the socket that wakes it for them.
    outbox: Arc<Mutex<Vec<Note>>>,
    nudge: UnixStream,
}

/// What stops a watcher, shared with the exit hook.
#[derive(Debug)]
struct Farewell {
    /// Dropped to wake and stop the watcher.
    stop: Mutex<Option<UnixStream>>,
    watcher: Mutex<Option<JoinHandle<()>>>,
    /// A failing exit status, set before the watcher is stopped: it then
    /// tells its tree neighbours that this rank failed, not goodbye.
    failed_exit: Arc<OnceLock<i32>>,
    /// The process the watcher runs in: a child forked from it (which
    /// has no watcher thread) says nothing at its exit.
    pid: u32,
}

impl Farewell {
    /// Stops the watcher and waits until it has said goodbye to its tree
    /// neighbours (each goodbye is bounded by [`SEND_LIMIT`]); once.
    fn say_goodbye(&self) {
        fn take<T>(m: &Mutex<Option<T>>) -> Option<T> {
            m.lock().unwrap_or_else(|p| p.into_inner()).take()
        }
        // Closing our end wakes the watcher, which says goodbye and ends.
        drop(take(&self.stop));
        if let Some(w) = take(&self.watcher) {
            let _ = w.join();
        }
    }
}

/// The watchers of this process that have not said goodbye. A program
/// that exits without freeing its communicators (a C `return` from
/// `main`, Fortran's `end program`) has them say it at exit, so that the
/// ranks still running do not take its closing links for a death.
static LIVE: Mutex<Vec<std::sync::Weak<Farewell>>> = Mutex::new(Vec::new());

/// Run at exit with the exit status (`None`: not known): every live
/// watcher of the process says goodbye, or, for a failing status, that
/// this rank failed, which its tree neighbours pass on as a death.
fn goodbye_at_exit(status: Option<i32>) {
    // Never wait at exit: the lock is held for microseconds at a time,
    // or forever in a child forked while another thread held it.
    let mut guard = match LIVE.try_lock() {
        Ok(guard) => guard,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    let live = std::mem::take(&mut *guard);
    drop(guard);
    let me = std::process::id();
    let ours = live.iter().filter_map(std::sync::Weak::upgrade);
    for farewell in ours.filter(|f| f.pid == me) {
        if let Some(failed) = status.filter(|&s| s != 0) {
            let _ = farewell.failed_exit.set(failed);
        }
        farewell.say_goodbye();
    }
}

impl Health {
    /// Starts watching over `links` (to this rank's [`tree_peers`]),
    /// declaring a rank dead after `silence` without a heartbeat (`None`:
    /// never for silence alone).
    pub(crate) fn start(
        rank: usize,
        links: BTreeMap<usize, PeerLink>,
        nodes: Arc<Nodes>,
        silence: Option<Duration>,
    ) -> Result<Health> {
        let (ring, told) = UnixStream::pair().map_err(|source| JobError::Health {
            step: "creating its verdict socket",
            source,
        })?;
        ring.set_nonblocking(true)
            .map_err(|source| JobError::Health {
                step: "configuring its verdict socket",
                source,
            })?;
        let verdict = Arc::new(Verdict {
            failure: OnceLock::new(),
            declared: std::sync::atomic::AtomicBool::new(false),
            when_failed: Mutex::default(),
            nodes,
            ring,
            notices: Mutex::new(Notices::default()),
        });
        let (stop, stopped) = UnixStream::pair().map_err(|source| JobError::Health {
            step: "creating its stop socket",
            source,
        })?;
        let (nudge, nudged) = UnixStream::pair()
            .and_then(|(a, b)| {
                a.set_nonblocking(true)?;
                b.set_nonblocking(true)?;
                Ok((a, b))
            })
            .map_err(|source| JobError::Health {
                step: "creating its outbox socket",
                source,
            })?;
        let outbox = Arc::new(Mutex::new(Vec::new()));
        let mut watched = Vec::with_capacity(links.len());
        for mut link in links.into_values() {
            // A peer that stops reading fills its link in time (a heartbeat
            // is tens of bytes: about half an hour with common buffers);
            // then a send must not hold the watcher, which would neither
            // judge silences nor let `Drop` finish.
            link.bound_sends(Some(SEND_LIMIT))?;
            if let Some(fd) = link.liveness_fd() {
                keep_alive(fd, link.peer());
            }
            watched.push(Watched {
                link,
                heard: Instant::now(),
                reported: false,
            });
        }
        let failed_exit = Arc::new(OnceLock::new());
        let watch = Watch {
            rank,
            failed_exit: Arc::clone(&failed_exit),
            links: watched,
            verdict: Arc::clone(&verdict),
            stopped,
            outbox: Arc::clone(&outbox),
            nudged,
            silence,
            beats: 0,
            looked: Instant::now(),
        };
        let watcher = std::thread::Builder::new()
            .name(format!("sode-health-{rank}"))
            .spawn(move || watch.run())
            .map_err(|source| JobError::Health {
                step: "spawning its thread",
                source,
            })?;
        let farewell = Arc::new(Farewell {
            stop: Mutex::new(Some(stop)),
            watcher: Mutex::new(Some(watcher)),
            failed_exit,
            pid: std::process::id(),
        });
        {
            let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
            live.retain(|f| f.strong_count() > 0);
            live.push(Arc::downgrade(&farewell));
        }
        if !crate::sys::at_exit::run_at_exit(goodbye_at_exit) {
            tracing::debug!("no exit hook: a process that exits without freeing its communicators is reported dead by its tree neighbours");
        }
        Ok(Health {
            verdict,
            farewell,
            told,
            outbox,
            nudge,
        })
    }

    /// Tells every rank that this one (`rank`, in launch order) gave up
    /// setting up its part of `exchange`, with `code`, and why: the
    /// watcher passes it along the tree, as it does a death.
    pub(crate) fn give_up_setup(&self, exchange: &str, rank: usize, code: i32, why: &str) {
        if !self.verdict.notice(exchange, rank, code, why) {
            return;
        }
        self.outbox
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Note::GaveUpSetup {
                exchange: exchange.to_string(),
                rank,
                code,
                why: why.to_string(),
            });
        use std::io::Write;
        // Full, it is already nudged.
        let _ = (&self.nudge).write(&[1]);
    }

    /// The lowest rank whose notice that it gave up setting up `exchange`
    /// reached this rank.
    pub(crate) fn setup_given_up(&self, exchange: &str) -> Option<SetupGivenUp> {
        self.verdict
            .notices
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .first(exchange)
    }

    /// A descriptor that `poll` reports readable once a rank is found
    /// dead, so that a rank asleep in `poll` wakes for the verdict.
    pub(crate) fn verdict_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.told.as_fd()
    }

    /// The first rank found dead, if any: one atomic load.
    pub fn failure(&self) -> Option<&Failure> {
        self.verdict.failure.get()
    }

    /// Runs `hook` when the job is first found to have failed, before
    /// [`failure`](Self::failure) says so; at once if it has.
    pub(crate) fn when_failed(&self, hook: FailureHook) {
        let mut hooks = self
            .verdict
            .when_failed
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if self
            .verdict
            .declared
            .load(std::sync::atomic::Ordering::Acquire)
        {
            drop(hooks);
            hook();
        } else {
            hooks.0.push(hook);
        }
    }
}

impl Drop for Health {
    fn drop(&mut self) {
        self.farewell.say_goodbye();
    }
}

/// A link being watched, when it was last heard from, and whether its
/// silence was reported.
#[derive(Debug)]
struct Watched {
    link: PeerLink,
    heard: Instant,
    reported: bool,
}

/// Turns on TCP keepalive (and a matching user timeout) on a health link,
/// so that a node that vanishes closes it within about ten seconds while a
/// paused process, whose kernel answers, keeps it. Links that are not TCP
/// sockets are left as they are.
fn keep_alive(fd: std::os::fd::BorrowedFd<'_>, peer: usize) {
    use nix::sys::socket::{setsockopt, sockopt};
    let idle = KEEPALIVE_IDLE.as_secs() as u32;
    let interval = KEEPALIVE_INTERVAL.as_secs() as u32;
    let user_timeout = (idle + interval * KEEPALIVE_PROBES) * 1000;
    let set = setsockopt(&fd, sockopt::KeepAlive, &true)
        .and_then(|()| setsockopt(&fd, sockopt::TcpKeepIdle, &idle))
        .and_then(|()| setsockopt(&fd, sockopt::TcpKeepInterval, &interval))
        .and_then(|()| setsockopt(&fd, sockopt::TcpKeepCount, &KEEPALIVE_PROBES))
        .and_then(|()| setsockopt(&fd, sockopt::TcpUserTimeout, &user_timeout));
    if let Err(e) = set {
        tracing::debug!(peer, error = %e, "no TCP keepalive on the health link (not a TCP socket?)");
    }
}

/// Whether a note can be written to `link` without waiting: its peer has
/// read what was sent before (or the link is closed, which a write then
/// reports). A link without a descriptor is taken to have room.
fn has_room(link: &PeerLink) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    let Some(fd) = link.liveness_fd() else {
        return true;
    };
    let mut fds = [PollFd::new(fd, PollFlags::POLLOUT)];
    match nix::poll::poll(&mut fds, PollTimeout::ZERO) {
        Ok(_) => fds[0].revents().is_some_and(|r| !r.is_empty()),
        Err(_) => true,
    }
}

/// The watcher thread's state.
struct Watch {
    /// This rank, as its tree neighbours number it.
    rank: usize,
    /// Set when the process exits with a failing status.
    failed_exit: Arc<OnceLock<i32>>,
    links: Vec<Watched>,
    verdict: Arc<Verdict>,
    stopped: UnixStream,
    /// This rank's notes to send, and the socket that says there are some.
    outbox: Arc<Mutex<Vec<Note>>>,
    nudged: UnixStream,
    silence: Option<Duration>,
    /// Heartbeat rounds so far.
    beats: u64,
    /// When the watcher last looked at the clock, to tell the time this
    /// process did not run (see [`Watch::look`]).
    looked: Instant,
}

impl Watch {
    fn run(mut self) {
        let mut next_beat = Instant::now();
        loop {
            let now = Instant::now();
            if now >= next_beat {
                self.beat();
                next_beat = now + BEAT;
            }
            let nap = next_beat.saturating_duration_since(now);
            let ready = match self.poll(nap) {
                Some(ready) => ready,
                None => break,
            };
            self.look(nap);
            self.send_outbox();
            for i in ready.into_iter().rev() {
                self.read(i);
            }
            self.check_silence();
        }
        // Notes recorded since the last pass (a rank that gave up its part
        // of a setup, then left at once) go before the last one: its
        // neighbours waiting for that part would otherwise wait on.
        self.send_outbox();
        let last = match self.failed_exit.get() {
            Some(status) => Note::Dead {
                rank: self.rank,
                why: format!("exited with status {status} while the job ran on"),
            },
            None => Note::Bye,
        };
        for w in &mut self.links {
            let _ = w.link.send(&last);
            // The peer reads the last note, then sees the end.
            if let Some(fd) = w.link.liveness_fd() {
                let _ =
                    nix::sys::socket::shutdown(fd.as_raw_fd(), nix::sys::socket::Shutdown::Write);
            }
        }
        // A socket closed with notes unread in it is reset, and a reset
        // drops a last note not yet delivered (a lost packet being sent
        // again): the peer would take the close for a death. So each link
        // is read to its end (the peer, told, closes its side), within
        // one bound for all.
        let until = Instant::now() + LAST_NOTE_READ;
        for i in 0..self.links.len() {
            self.read_to_end(i, until);
        }
    }

    /// Reads and drops what link `i` brings until its end, or `until`.
    fn read_to_end(&mut self, i: usize, until: Instant) {
        use nix::poll::{PollFd, PollFlags, PollTimeout};
        let w = &mut self.links[i];
        loop {
            let Some(fd) = w.link.liveness_fd() else {
                return;
            };
            let left = until.saturating_duration_since(Instant::now());
            let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
            let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
            let readable = nix::poll::poll(&mut fds, PollTimeout::from(ms)).is_ok_and(|n| n > 0);
            if !readable
                || w.link
                    .recv::<Note>(until.max(Instant::now() + READ_SLICE))
                    .is_err()
            {
                return;
            }
        }
    }

    /// Sends a heartbeat on every link, and on those whose peer is silent
    /// only every [`SILENCE_REPORTED`] (a paused peer reads nothing: beats
    /// every half second would fill its link in hours; one now and then
    /// keeps two peers that both fell silent from never beating again).
    /// A link with no room is skipped: its peer has not read for long (at
    /// one beat every 10 s, a link of autotuned loopback buffers, about
    /// 4 MB, fills in days; one of 128 KiB in hours: a breakpoint left
    /// overnight), and is paused, not dead. One
    /// that fails to be written to is a dead peer.
    fn beat(&mut self) {
        self.beats = self.beats.wrapping_add(1);
        let sparse = SILENCE_REPORTED.as_millis() / BEAT.as_millis();
        let quiet_turn = u128::from(self.beats) % sparse.max(1) == 0;
        let mut i = 0;
        while i < self.links.len() {
            if (self.links[i].reported && !quiet_turn) || !has_room(&self.links[i].link) {
                i += 1;
                continue;
            }
            match self.links[i].link.send(&Note::Beat) {
                Ok(()) => i += 1,
                // A peer that finished said goodbye and closed its end: the
                // goodbye may wait unread behind a failed heartbeat.
                Err(_) if self.said_goodbye(i) => {
                    self.links.swap_remove(i);
                }
                Err(e) => self.lost(i, format!("could not be sent a heartbeat: {e}")),
            }
        }
    }

    /// Whether link `i` holds a goodbye not read yet; the notes before it
    /// are taken as [`read`](Self::read) takes them.
    fn said_goodbye(&mut self, i: usize) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout};
        loop {
            let w = &mut self.links[i];
            let Some(fd) = w.link.liveness_fd() else {
                return false;
            };
            let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
            let readable = nix::poll::poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n > 0);
            if !readable {
                return false;
            }
            match w.link.recv::<Note>(Instant::now() + READ_TIMEOUT) {
                Ok(Note::Bye) => return true,
                Ok(Note::Beat) => w.heard = Instant::now(),
                Ok(Note::Dead { rank, why }) => self.spread(Some(i), rank, why),
                Ok(note @ Note::GaveUpSetup { .. }) => self.pass_on(Some(i), note),
                Err(_) => return false,
            }
        }
    }

    /// Waits up to `nap` for a message or a closed link; the links that
    /// have something (in order), or None when the watcher is to stop.
    fn poll(&mut self, nap: Duration) -> Option<Vec<usize>> {
        use nix::poll::{PollFd, PollFlags, PollTimeout};
        let mut fds = vec![
            PollFd::new(self.stopped.as_fd(), PollFlags::POLLIN),
            PollFd::new(self.nudged.as_fd(), PollFlags::POLLIN),
        ];
        // The links without a descriptor are only beaten and timed.
        let watched: Vec<usize> = (0..self.links.len())
            .filter(|&i| self.links[i].link.liveness_fd().is_some())
            .collect();
        for &i in &watched {
            if let Some(fd) = self.links[i].link.liveness_fd() {
                fds.push(PollFd::new(fd, PollFlags::POLLIN));
            }
        }
        let ms = u16::try_from(nap.as_millis().max(1)).unwrap_or(u16::MAX);
        if nix::poll::poll(&mut fds, PollTimeout::from(ms)).is_err() {
            return Some(Vec::new());
        }
        let has = |fd: &PollFd<'_>| fd.revents().is_some_and(|r| !r.is_empty());
        // Nothing writes to the stop socket: it reports only its other
        // end's closing.
        if has(&fds[0]) {
            return None;
        }
        Some(
            watched
                .into_iter()
                .zip(&fds[2..])
                .filter(|(_, fd)| has(fd))
                .map(|(i, _)| i)
                .collect(),
        )
    }

    /// Takes one message from link `i`.
    fn read(&mut self, i: usize) {
        let w = &mut self.links[i];
        match w.link.recv::<Note>(Instant::now() + READ_TIMEOUT) {
            Ok(Note::Beat) => {
                if std::mem::take(&mut w.reported) {
                    tracing::warn!(
                        "rank {} is heard again after {:.1} s of silence",
                        w.link.peer(),
                        w.heard.elapsed().as_secs_f64()
                    );
                }
                w.heard = Instant::now();
            }
            Ok(Note::Bye) => {
                // It finished: no longer watched.
                self.links.swap_remove(i);
            }
            Ok(Note::Dead { rank, why }) => {
                w.heard = Instant::now();
                self.spread(Some(i), rank, why);
            }
            Ok(note @ Note::GaveUpSetup { .. }) => {
                w.heard = Instant::now();
                self.pass_on(Some(i), note);
            }
            Err(e) => {
                tracing::debug!(error = %crate::diag::chain(&e), "health link lost");
                self.lost(
                    i,
                    "closed its health link without finishing (it exited, was killed or its node went down)".into(),
                );
            }
        }
    }

    /// Looks at the clock, `nap` after the last look plus the work since:
    /// a longer stretch is time this process did not run (a suspended
    /// job, SIGSTOP, a debugger), in which it heard nobody and nobody
    /// could be heard; the silence of every link is counted from its end.
    /// A whole job suspended for longer than `SODE_HEALTH_TIMEOUT` then
    /// resumes, while a rank silent as its watchers ran is still judged.
    fn look(&mut self, nap: Duration) {
        let now = Instant::now();
        let stopped = crate::timeout::not_running(self.looked, nap, now);
        self.looked = now;
        if stopped.is_zero() {
            return;
        }
        tracing::info!(
            "this process did not run for {:.1} s (stopped, suspended or not scheduled): its peers' silence in that time is not counted",
            stopped.as_secs_f64()
        );
        for w in &mut self.links {
            w.heard = w.heard.checked_add(stopped).map_or(now, |h| h.min(now));
        }
    }

    /// Reports links silent for [`SILENCE_REPORTED`]; declares one dead
    /// past the fatal silence, when one is set.
    fn check_silence(&mut self) {
        self.look(Duration::ZERO);
        let now = Instant::now();
        for w in self.links.iter_mut().filter(|w| !w.reported) {
            if now.duration_since(w.heard) > SILENCE_REPORTED {
                w.reported = true;
                tracing::warn!(
                    "rank {} has sent no heartbeat for {SILENCE_REPORTED:?}: paused (a debugger, SIGSTOP, a suspended job) or hung; its link is open, so it is not declared dead ({HEALTH_TIMEOUT_VAR}=SECONDS makes silence fatal)",
                    w.link.peer()
                );
            }
        }
        let Some(silence) = self.silence else {
            return;
        };
        if let Some(i) = self
            .links
            .iter()
            .position(|w| now.duration_since(w.heard) > silence)
        {
            self.lost(i, format!("sent no heartbeat for {silence:?}"));
        }
    }

    /// Link `i`'s rank is dead: declared here, and passed on along every
    /// other link.
    fn lost(&mut self, i: usize, why: String) {
        let gone = self.links.swap_remove(i);
        let rank = gone.link.peer();
        self.spread(None, rank, why);
    }

    /// Declares `rank` dead and, the first time, passes it on along every
    /// link but `from`'s: the verdict reaches every rank joined to this
    /// one, and ends, since each rank passes it on once.
    fn spread(&mut self, from: Option<usize>, rank: usize, why: String) {
        if self.verdict.declare(rank, why.clone()) {
            self.tell(from, rank, &why);
        }
    }

    /// Passes on that `rank` died along every link but `from`'s.
    fn tell(&mut self, from: Option<usize>, rank: usize, why: &str) {
        let note = Note::Dead {
            rank,
            why: why.to_string(),
        };
        self.send_on(from, &note);
    }

    /// Sends `note` along every link but `from`'s. A link that cannot take
    /// it is left to its own watcher's judgement.
    fn send_on(&mut self, from: Option<usize>, note: &Note) {
        for (j, w) in self.links.iter_mut().enumerate() {
            if Some(j) == from {
                continue;
            }
            if let Err(e) = w.link.send(note) {
                tracing::debug!(peer = w.link.peer(), error = %crate::diag::chain(&e), "a note could not be passed on");
            }
        }
    }

    /// A given-up setup heard on link `from`: recorded and, the first
    /// time, passed on along every other link, so that it floods the tree
    /// and ends.
    fn pass_on(&mut self, from: Option<usize>, note: Note) {
        if let Note::GaveUpSetup {
            exchange,
            rank,
            code,
            why,
        } = &note
        {
            if self.verdict.notice(exchange, *rank, *code, why) {
                self.send_on(from, &note);
            }
        }
    }

    /// Sends this rank's own notes (recorded already by
    /// [`Health::give_up_setup`]) along every link.
    fn send_outbox(&mut self) {
        use std::io::Read;
        let mut drain = [0u8; 64];
        while matches!((&self.nudged).read(&mut drain), Ok(n) if n > 0) {}
        let notes = std::mem::take(&mut *self.outbox.lock().unwrap_or_else(|p| p.into_inner()));
        for note in &notes {
            self.send_on(None, note);
        }
    }
}

/// The silence after which a rank is declared dead, from the value of
/// `SODE_HEALTH_TIMEOUT` (seconds): `None` (silence is never fatal) when
/// unset, empty, `off` or `0`.
pub(crate) fn parse_silence(value: Option<&str>) -> Result<Option<Duration>> {
    let v = match value.map(str::trim) {
        None | Some("" | "off" | "0") => return Ok(None),
        Some(v) => v,
    };
    v.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 1.0 && *s <= 86_400.0)
        .map(|s| Some(Duration::from_secs_f64(s)))
        .ok_or_else(|| JobError::InvalidSetting {
            name: HEALTH_TIMEOUT_VAR.into(),
            value: v.into(),
            why: "seconds from 1 to 86400 that a rank may stay silent before the job declares it dead, or off (the default: silence is reported, never fatal)".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oob::PeerChannel;
    use std::collections::BTreeSet;
    use std::io::{Read, Write};

    #[test]
    fn the_tree_joins_every_rank_with_few_links_each() {
        for size in 1..=600 {
            let peers: Vec<BTreeSet<usize>> = (0..size).map(|r| tree_peers(r, size)).collect();
            let mut edges = 0;
            for (r, p) in peers.iter().enumerate() {
                assert!(
                    p.len() <= 2 + FANOUT + FANOUT * FANOUT,
                    "rank {r} of {size}: {p:?}"
                );
                for &q in p {
                    assert!(q < size && q != r, "rank {r} of {size}: {p:?}");
                    assert!(peers[q].contains(&r), "{r} - {q} of {size} is one-sided");
                    edges += 1;
                }
            }
            // Symmetric: a link to each rank's parent (all but rank 0) and
            // grandparent (all but the first 1 + FANOUT), and connected.
            let grand = size.saturating_sub(1 + FANOUT);
            assert_eq!(edges, 2 * (size - 1 + grand), "size {size}");
            let mut seen = vec![false; size];
            let mut todo = vec![0];
            seen[0] = true;
            while let Some(r) = todo.pop() {
                for &q in &peers[r] {
                    if !std::mem::replace(&mut seen[q], true) {
                        todo.push(q);
                    }
                }
            }
            assert!(seen.iter().all(|&s| s), "size {size} is not connected");
        }
    }

    /// A health link over a Unix socket pair: length-prefixed messages.
    #[derive(Debug)]
    struct Pipe<S = UnixStream>(S);

    /// The streams a [`Pipe`] runs over: a Unix socket pair, or TCP.
    trait Stream: Read + Write + AsFd + std::fmt::Debug + Send + 'static {
        fn read_timeout(&self, t: Option<Duration>) -> std::io::Result<()>;
        fn write_timeout(&self, t: Option<Duration>) -> std::io::Result<()>;
    }

    impl Stream for UnixStream {
        fn read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
            self.set_read_timeout(t)
        }
        fn write_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
            self.set_write_timeout(t)
        }
    }

    impl Stream for std::net::TcpStream {
        fn read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
            self.set_read_timeout(t)
        }
        fn write_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
            self.set_write_timeout(t)
        }
    }

    /// Reads one length-prefixed message from `s`.
    fn read_frame(s: &mut impl Read) -> std::io::Result<Vec<u8>> {
        let mut len = [0; 4];
        s.read_exact(&mut len)?;
        let mut body = vec![0; u32::from_le_bytes(len) as usize];
        s.read_exact(&mut body)?;
        Ok(body)
    }

    impl<S: Stream> PeerChannel for Pipe<S> {
        fn send(&mut self, msg: &[u8]) -> Result<()> {
            let len = u32::try_from(msg.len()).unwrap().to_le_bytes();
            self.0
                .write_all(&len)
                .and_then(|()| self.0.write_all(msg))
                .map_err(|source| JobError::Bootstrap {
                    step: "sending".into(),
                    whom: "a test peer".into(),
                    source,
                })
        }

        fn recv(&mut self, deadline: Instant) -> Result<Vec<u8>> {
            let left = deadline.saturating_duration_since(Instant::now());
            let read = |s: &mut S| -> std::io::Result<Vec<u8>> {
                s.read_timeout(Some(left.max(Duration::from_millis(1))))?;
                read_frame(s)
            };
            read(&mut self.0).map_err(|source| JobError::Bootstrap {
                step: "receiving".into(),
                whom: "a test peer".into(),
                source,
            })
        }

        fn closed(&self) -> bool {
            false
        }

        fn liveness_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
            Some(self.0.as_fd())
        }

        fn bound_sends(&mut self, limit: Option<Duration>) -> Result<()> {
            self.0
                .write_timeout(limit)
                .map_err(|source| JobError::Bootstrap {
                    step: "configuring".into(),
                    whom: "a test peer".into(),
                    source,
                })
        }
    }

    /// Every rank's tree links, as socket pairs.
    fn tree_links(size: usize) -> Vec<BTreeMap<usize, PeerLink>> {
        let mut links: Vec<BTreeMap<usize, PeerLink>> =
            (0..size).map(|_| BTreeMap::new()).collect();
        for r in 0..size {
            for q in tree_peers(r, size).into_iter().filter(|&q| q > r) {
                let (a, b) = UnixStream::pair().unwrap();
                links[r].insert(q, PeerLink::new(q, Box::new(Pipe(a))));
                links[q].insert(r, PeerLink::new(r, Box::new(Pipe(b))));
            }
        }
        links
    }

    /// Starts every rank's watcher but `doomed`'s, whose links are
    /// returned unwatched (dropping them is its death; holding them
    /// silent, its pause).
    fn job_without(
        size: usize,
        doomed: usize,
        silence: Option<Duration>,
    ) -> (Vec<Option<Health>>, BTreeMap<usize, PeerLink>) {
        let nodes = Arc::new(Nodes::new(vec![crate::NodeId::local(); size]));
        let mut held = BTreeMap::new();
        let job = tree_links(size)
            .into_iter()
            .enumerate()
            .map(|(r, links)| {
                if r == doomed {
                    held = links;
                    return None;
                }
                Some(Health::start(r, links, nodes.clone(), silence).unwrap())
            })
            .collect();
        (job, held)
    }

    /// Waits up to `bound` for every watching rank to name `doomed` dead,
    /// and returns each one's reason.
    fn verdicts(job: &[Option<Health>], doomed: usize, bound: Duration) -> Vec<String> {
        let end = Instant::now() + bound;
        loop {
            let seen: Vec<Option<&Failure>> = job.iter().flatten().map(|h| h.failure()).collect();
            if seen.iter().all(Option::is_some) {
                return seen
                    .into_iter()
                    .flatten()
                    .map(|f| {
                        assert_eq!(f.rank, doomed, "{f}");
                        f.why.clone()
                    })
                    .collect();
            }
            let missing = seen.iter().filter(|f| f.is_none()).count();
            assert!(
                Instant::now() < end,
                "{missing} ranks heard nothing within {bound:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_death_inside_the_tree_reaches_every_rank() {
        // Rank 1 of 15: its parent (rank 0) and children (3, 4) see its
        // links close; the other eleven ranks hear it through them.
        let (job, held) = job_without(15, 1, None);
        std::thread::sleep(Duration::from_millis(100));
        drop(held);
        let why = verdicts(&job, 1, Duration::from_secs(2));
        assert!(
            why.iter().all(|w| w.contains("closed its health link")),
            "{why:?}"
        );
    }

    #[test]
    fn a_silent_rank_is_declared_dead_past_its_deadline_by_every_rank() {
        // Rank 2 of 12 holds its links open and says nothing.
        let (job, held) = job_without(12, 2, Some(Duration::from_secs(1)));
        let t0 = Instant::now();
        let why = verdicts(&job, 2, Duration::from_secs(4));
        assert!(
            t0.elapsed() >= Duration::from_millis(900),
            "{:?}",
            t0.elapsed()
        );
        assert!(why.iter().all(|w| w.contains("no heartbeat")), "{why:?}");
        drop(held);
    }

    #[test]
    fn a_death_below_a_rank_that_finished_early_reaches_every_rank() {
        // Rank 1 of 15 finishes (says goodbye); then its child, rank 3,
        // dies. Rank 3's grandparent (rank 0) and its sibling's link to
        // rank 0 keep the part below rank 1 joined: all 13 other ranks
        // hear, not only rank 3's children (7, 8).
        let (mut job, held) = job_without(15, 3, None);
        drop(job[1].take());
        std::thread::sleep(Duration::from_millis(200));
        drop(held);
        let why = verdicts(&job, 3, Duration::from_secs(2));
        assert_eq!(why.len(), 13);
    }

    #[test]
    fn a_paused_rank_whose_links_are_full_is_not_declared_dead() {
        // Rank 2 of 3 has not read its links for hours (a breakpoint):
        // the beats sent to it fill them. Nothing sets a fatal silence.
        let nodes = Arc::new(Nodes::new(vec![crate::NodeId::local(); 3]));
        let mut links = tree_links(3);
        let paused = std::mem::take(&mut links[2]);
        // Rank 0 is its parent: the one link to it.
        let full = links[0].get_mut(&2).unwrap();
        full.bound_sends(Some(Duration::from_millis(1))).unwrap();
        while full.send(&"a heartbeat it did not read").is_ok() {}
        assert!(!has_room(full), "rank 0's link to rank 2 is full");
        let job: Vec<Health> = links
            .into_iter()
            .take(2)
            .enumerate()
            .map(|(r, links)| Health::start(r, links, nodes.clone(), None).unwrap())
            .collect();
        // Beats every half second: several would have met the full link.
        std::thread::sleep(SEND_LIMIT + 3 * BEAT);
        for (r, h) in job.iter().enumerate() {
            assert_eq!(h.failure(), None, "rank {r}");
        }
        drop(paused);
    }

    #[test]
    fn a_goodbye_is_followed_by_the_links_end_not_a_reset() {
        // Over TCP a socket closed with data unread in it is reset, and a
        // reset drops a goodbye that a lost packet still held: the peer
        // would take the close for a death. Here the peer sends heartbeats
        // every 100 us until it reads the goodbye, then must see the
        // link's end, not a reset, every time.
        use std::sync::atomic::{AtomicBool, Ordering};
        let nodes = Arc::new(Nodes::new(vec![crate::NodeId::local(); 2]));
        let beat = crate::oob::encode(&Note::Beat, 0).unwrap();
        let frame = [&(beat.len() as u32).to_le_bytes()[..], &beat].concat();
        for round in 0..20 {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let ours = listener.accept().unwrap().0;
            let links = BTreeMap::from([(1, PeerLink::new(1, Box::new(Pipe(ours))))]);
            let health = Health::start(0, links, nodes.clone(), None).unwrap();
            let told = Arc::new(AtomicBool::new(false));
            let mut beats = peer.try_clone().unwrap();
            let (told2, frame2) = (told.clone(), frame.clone());
            let beating = std::thread::spawn(move || {
                while !told2.load(Ordering::Relaxed) && beats.write_all(&frame2).is_ok() {
                    std::thread::sleep(Duration::from_micros(100));
                }
            });
            std::thread::sleep(Duration::from_millis(20));
            let leaving = std::thread::spawn(move || drop(health));
            peer.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            loop {
                let note: Note =
                    crate::oob::decode(&read_frame(&mut peer).unwrap(), "rank 0").unwrap();
                if matches!(note, Note::Bye) {
                    break;
                }
            }
            told.store(true, Ordering::Relaxed);
            beating.join().unwrap();
            let mut rest = [0u8; 64];
            let end = peer.read(&mut rest);
            assert!(
                matches!(end, Ok(0)),
                "round {round}: after the goodbye, {end:?}"
            );
            drop(peer);
            leaving.join().unwrap();
        }
    }

    #[test]
    fn goodbyes_are_not_deaths() {
        let nodes = Arc::new(Nodes::new(vec![crate::NodeId::local(); 7]));
        let mut job: Vec<Health> = tree_links(7)
            .into_iter()
            .enumerate()
            .map(|(r, links)| Health::start(r, links, nodes.clone(), None).unwrap())
            .collect();
        // An inner rank and a leaf finish first: their links close after
        // a goodbye (a close without one is a death, silence or not).
        drop(job.remove(4));
        drop(job.remove(1));
        std::thread::sleep(Duration::from_millis(500));
        for h in &job {
            assert_eq!(h.failure(), None);
        }
    }

    #[test]
    fn a_given_up_setup_reaches_every_rank_naming_the_lowest_and_kills_no_one() {
        let size = 13;
        let nodes = Arc::new(Nodes::new(vec![crate::NodeId::local(); size]));
        let job: Vec<Health> = tree_links(size)
            .into_iter()
            .enumerate()
            .map(|(r, links)| Health::start(r, links, nodes.clone(), None).unwrap())
            .collect();
        // A leaf, then an inner rank, give up the same exchange; a third
        // rank gives up another. Each is told once and passed on once.
        job[11].give_up_setup("h3", 11, 7, "no segment");
        job[4].give_up_setup("h3", 4, 5, "no memory");
        job[9].give_up_setup("h4", 9, 2, "other");
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let h3: Vec<Option<SetupGivenUp>> =
                job.iter().map(|h| h.setup_given_up("h3")).collect();
            let h4: Vec<Option<SetupGivenUp>> =
                job.iter().map(|h| h.setup_given_up("h4")).collect();
            let lowest =
                |g: &Option<SetupGivenUp>, rank| g.as_ref().is_some_and(|g| g.rank == rank);
            if h3.iter().all(|g| lowest(g, 4)) && h4.iter().all(|g| lowest(g, 9)) {
                let g = h3[0].clone().unwrap();
                assert_eq!((g.launch_rank, g.code, g.why.as_str()), (4, 5, "no memory"));
                break;
            }
            assert!(
                Instant::now() < end,
                "not every rank heard: h3 {h3:?}, h4 {h4:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(job.iter().all(|h| h.setup_given_up("h5").is_none()));
        // Heartbeats go on after the notices (a link left with half a
        // note would be judged lost), and no rank is dead.
        std::thread::sleep(Duration::from_millis(1200));
        for h in &job {
            assert_eq!(h.failure(), None);
        }
    }

    #[test]
    fn a_rank_remembers_the_notices_of_its_newest_exchanges() {
        let mut n = Notices::default();
        assert!(n.record("h0", 3, 1, "a"));
        assert!(!n.record("h0", 3, 1, "a"), "told twice is not news");
        assert!(n.record("h0", 1, 2, "b"));
        assert!(!n.record("h0", 2, 4, "c"), "a higher rank is not news");
        assert_eq!(n.first("h0").map(|g| (g.rank, g.code)), Some((1, 2)));
        for x in 1..=NOTICES_KEPT {
            assert!(n.record(&format!("h{x}"), 0, 0, ""));
        }
        assert_eq!(n.by_exchange.len(), NOTICES_KEPT);
        assert!(n.first("h0").is_none(), "the oldest is forgotten");
        assert!(n.first(&format!("h{NOTICES_KEPT}")).is_some());
    }
}
