//! The pattern every exchange reduces to: per peer, at most one message sent
//! and one received each iteration. [`LinkExchange`] decides once per link
//! how to reach the peer (a copy within this rank, shared memory on this
//! node, RDMA to another), builds the channels, and runs them through one
//! progress loop. [`HaloExchange`](crate::HaloExchange) packs a Cartesian
//! decomposition's regions into its messages; the C ABI packs the user's
//! fields.

use sode_job::Deadline;
use sode_job::LongWait;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use sode_job::{Backoff, Lifecycle, World};
use sode_scheduler::Algorithm;

use crate::channel::{
    Built, Channel, Channels, Locality, Member, Setup, ShmChannel, StartMemory, TcpChannel,
};
pub use crate::channel::{InPlace, LinkRuns, Message, Sides};
use crate::decomp::{gather_runs, scatter_runs};
use crate::error::{HaloError, Result};
use crate::settings::{Model, SyncMode, Transport};
use crate::stats::{ExchangeStats, Meter, Moved, NeighbourStats};

/// What this rank exchanges with one peer: a message sent, one received, or
/// both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// The peer's rank (this rank itself for a periodic axis of one
    /// process: the message is copied within the rank).
    pub peer: usize,
    /// What this rank sends it.
    pub send: Option<Message>,
    /// What this rank receives from it.
    pub recv: Option<Message>,
    /// The direction to the peer in the process grid, each axis -1, 0 or
    /// +1, when there is one: the RDMA scheduler routes puts by it.
    pub offset: Vec<i32>,
    /// How errors and reports name it (`rank 3 (NE)`).
    pub name: String,
}

/// Where a start's [direct copies](LinkExchange::direct_copies) stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DirectCopies {
    /// The start does not copy directly: those messages use their buffers.
    Off,
    /// It does, and its caller has not copied yet.
    Due,
    /// It does, and its caller has copied.
    Done,
}

/// Where a started field's array lies.
#[derive(Debug, Clone, Copy)]
struct ArraySpan {
    /// Its address.
    at: usize,
    /// Its length in bytes.
    len: usize,
}

/// Whether no two of `spans` share a byte (it sorts them).
fn spans_apart(spans: &mut [ArraySpan]) -> bool {
    spans.sort_unstable_by_key(|s| s.at);
    // An empty array overlaps nothing; the others must each start where
    // the one before them has ended (sorted and apart so far, the last
    // one ends furthest).
    let mut end = 0;
    for s in spans.iter().filter(|s| s.len > 0) {
        if s.at < end {
            return false;
        }
        end = s.at.saturating_add(s.len);
    }
    true
}

/// Fields kept in shared memory: `sets` arrays of `set_len` bytes, each
/// iteration exchanging one ([`LinkExchange::start_set`]), and every
/// link's messages as runs of a set, so the caller packs nothing. A link
/// reached over shared memory travels in place: its receiver copies the
/// sender's runs straight into its own (one copy in all; small messages
/// below `sode_shm`'s read threshold are gathered and scattered around a
/// packed path instead). On other links the exchange gathers the runs
/// into the send buffer at start and scatters the receive buffer at the
/// end of `wait`. Without shared-memory neighbours the sets are private
/// memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SharedSets {
    /// How many sets.
    pub sets: usize,
    /// Bytes of each.
    pub set_len: usize,
    /// Per link (indexed as the links): its send's and receive's runs in
    /// a set, in stream order; every message needs them.
    pub runs: Vec<LinkRuns>,
}

impl SharedSets {
    /// Bytes from one array of `bytes` to the next in a set: whole pages,
    /// plus 17 cache lines so that no two arrays start at the same offset
    /// within a page. Without it a sweep from one set into the other
    /// (`v[i]` from `u[i]`, exactly a set apart) hits 4 KiB aliasing: loads
    /// wait on unrelated stores whose addresses match in their low 12 bits
    /// (10-20 % slower sweeps, measured with `stencil --shared-fields`).
    /// `None` when it overflows.
    pub fn array_stride(bytes: usize) -> Option<usize> {
        bytes.checked_next_multiple_of(4096)?.checked_add(17 * 64)
    }
}

/// Where the shared sets live.
#[derive(Debug)]
enum SharedStore {
    /// In the segment of shared-memory channel `channel`, which lends them.
    Channel { channel: usize },
    /// Private memory (no neighbour on this node), 8-byte aligned.
    Private { memory: Vec<u64>, len: usize },
}

/// A message this rank sends itself (along an axis where it is its own
/// neighbour) that its caller copies straight from link `send`'s cells
/// into link `recv`'s, with no buffer between
/// ([`LinkExchange::copy_directly`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalCopy {
    /// The link whose send is copied.
    pub send: usize,
    /// The link whose receive it fills.
    pub recv: usize,
}

/// Where one side of a link travels.
#[derive(Debug, Clone, Copy)]
enum Route {
    /// Message `message` of channel `channel`.
    Channel { channel: usize, message: usize },
    /// A buffer of this rank: `self_bufs[buffer]`.
    Local { buffer: usize },
}

/// Builds a [`LinkExchange`]; collective over the job.
#[derive(Debug)]
pub struct LinkExchangeBuilder<'w> {
    world: &'w World,
    /// Names its shared-memory segments: its place in the job's sequence
    /// of builders, taken when it is made (a commit that fails on one
    /// rank after making its builder still counts there as elsewhere).
    name: String,
    links: Vec<Link>,
    transport: Transport,
    engines: usize,
    algorithm: Algorithm,
    timeout: Duration,
    sync: SyncMode,
    model: Model,
    /// Per link, what travels in place (empty: nothing).
    in_place: Vec<InPlace>,
    /// Per rank, the RDMA fabric its device is on (empty: it cannot use
    /// RDMA), gathered at build when the automatic choice spans nodes.
    fabrics: Vec<String>,
    /// The transport `fabrics` was settled for (gathered, or found not
    /// needed).
    fabrics_for: Option<Transport>,
    #[cfg(feature = "rdma")]
    lent: Vec<Vec<sode_transport::UserMemory>>,
    shared: Option<SharedSets>,
    /// Whether a failure of this rank's own part tells the job.
    tell_job: bool,
    /// Whether the caller compared every rank's transport already.
    transports_agreed: bool,
}

/// The settings a build reads on this rank: `SODE_PROGRESS` (checked) and
/// after how long a wait warns (`SODE_WAIT_WARN`).
fn settings_from_env() -> Result<Option<Duration>> {
    crate::channel::progress_from_env().map_err(|why| HaloError::Usage { op: "build", why })?;
    sode_job::wait_warning().map_err(|e| HaloError::Usage {
        op: "build",
        why: e.to_string(),
    })
}

/// The code a rank's notice that it gave up its part of a setup carries
/// when [`LinkExchangeBuilder::build`] posts it: none (the Rust API names
/// no status; the C ABI's commit posts its own, with the call's).
const NO_STATUS: i32 = -1;

impl<'w> LinkExchangeBuilder<'w> {
    /// A builder for `links` over the ranks of `world`.
    pub fn new(world: &'w World, links: Vec<Link>) -> Self {
        LinkExchangeBuilder {
            world,
            name: crate::job_memo::JobMemo::of(world).next_exchange_name(),
            links,
            transport: Transport::Auto,
            engines: 2,
            algorithm: Algorithm::Auto,
            timeout: Duration::from_secs(60),
            sync: SyncMode::Pairwise,
            model: Model::Calibrated,
            in_place: Vec::new(),
            fabrics: Vec::new(),
            fabrics_for: None,
            #[cfg(feature = "rdma")]
            lent: Vec::new(),
            shared: None,
            tell_job: true,
            transports_agreed: false,
        }
    }

    /// Says that the caller compares every rank's transport in a
    /// collective step of its own before the channels are set up (the C
    /// ABI's commit does): on one node, where no rank needs another's RDMA
    /// fabric, the build then takes no collective step to compare them.
    pub fn transports_agreed(mut self) -> Self {
        self.transports_agreed = true;
        self
    }

    /// Whether this rank, when its own part of the setup fails once the
    /// job's collective step is taken (its links refused, a segment or a
    /// connection it cannot make, a neighbour it stopped waiting for),
    /// tells the job ([`World::give_up_setup`], with no status: -1), so
    /// that the neighbours waiting for that part stop at once, naming this
    /// rank and why, rather than at their setup timeout. Default: it does.
    /// A caller that tells the job itself, with a status of its own (the
    /// C ABI's commit), turns it off.
    pub fn tell_job_on_failure(mut self, tell: bool) -> Self {
        self.tell_job = tell;
        self
    }

    /// The exchange's name in the job (the same on every rank): what a
    /// rank that gives up its setup names ([`World::give_up_setup`]), so
    /// that its neighbours stop waiting for it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Keeps fields in shared memory; links to this node's ranks with runs
    /// in `shared` travel in place. See [`SharedSets`].
    pub fn shared_sets(mut self, shared: SharedSets) -> Self {
        self.shared = Some(shared);
        self
    }

    /// Lends a set of memory that links may read from and receive into in
    /// place ([`in_place`](Self::in_place)), numbered from 0 in the order
    /// given. Each call lends one more set, of as many pieces, each at
    /// least as long as the first set's piece of its number: a start names
    /// the set its arrays are in ([`LinkExchange::set_memory`]), so that a
    /// Runge-Kutta stage's arrays travel in place as the solution's do.
    /// The promises that make this safe were made when each
    /// [`UserMemory`](sode_transport::UserMemory) was created.
    #[cfg(feature = "rdma")]
    pub fn lend(mut self, memory: Vec<sode_transport::UserMemory>) -> Self {
        self.lent.push(memory);
        self
    }

    /// Link `link`'s messages read and received in place, where it travels
    /// over RDMA; see [`LinkExchange::in_place`] for what was honoured.
    pub fn in_place(mut self, link: usize, how: InPlace) -> Self {
        if self.in_place.len() <= link {
            self.in_place.resize(link + 1, InPlace::default());
        }
        self.in_place[link] = how;
        self
    }

    /// Replaces the links: for a builder configured (and asked
    /// [`locality_of`](Self::locality_of) its peers) before its links are
    /// known.
    pub fn with_links(mut self, links: Vec<Link>) -> Self {
        self.links = links;
        self
    }

    /// The machine model for scheduling (default: calibrated on this device).
    pub fn model(mut self, m: Model) -> Self {
        self.model = m;
        self
    }

    /// Pairwise credits (default) or pseudo-collective barriers.
    pub fn sync(mut self, s: SyncMode) -> Self {
        self.sync = s;
        self
    }

    /// Which channels (default [`Transport::Auto`]).
    pub fn transport(mut self, t: Transport) -> Self {
        self.transport = t;
        self
    }

    /// RDMA queue pairs per peer (default 2).
    pub fn engines(mut self, e: usize) -> Self {
        self.engines = e;
        self
    }

    /// The scheduling algorithm for the RDMA writes (default `auto`).
    pub fn algorithm(mut self, a: Algorithm) -> Self {
        self.algorithm = a;
        self
    }

    /// How long setup may wait for the other ranks (default 60 s).
    pub fn setup_timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// How rank `a` reaches rank `b`: the same answer on every rank.
    fn locality(&self, a: usize, b: usize) -> Locality {
        crate::channel::locality(self.world, self.transport, &self.fabrics, a, b)
    }

    /// How this rank will reach `peer`, decided as [`build`](Self::build)
    /// decides it (with the transport set so far), so that links can be
    /// shaped by their channel before they are given: every direction to a
    /// peer reached by a copy, shared memory or TCP can travel as one
    /// message. Collective the first time, as `build` is: under the
    /// automatic choice across nodes it gathers every rank's RDMA fabric.
    ///
    /// # Errors
    ///
    /// [`HaloError::Barrier`] when another rank does not arrive within the
    /// setup timeout.
    pub fn locality_of(&mut self, peer: usize) -> Result<Locality> {
        self.gather_fabrics()?;
        Ok(self.locality(self.world.rank(), peer))
    }

    /// Every rank's transport and, under the automatic choice across
    /// nodes, the RDMA fabric of each rank's device (none without a device
    /// that opens, or without the `rdma` feature): every rank's answer,
    /// reduced when all are alike, else gathered, so that both ends of a
    /// link choose alike. Every rank takes
    /// this step whatever its transport, so that ranks given different ones
    /// (`SODE_TRANSPORT` set on some ranks only) are told so here, rather
    /// than read one another's next step as this one across nodes, or
    /// wait for one another's segment and connection on one node. On one
    /// node a caller that compared the transports itself
    /// ([`transports_agreed`](Self::transports_agreed)) skips it.
    fn gather_fabrics(&mut self) -> Result<()> {
        // Settled once per transport: `locality_of` asks for every peer.
        if self.fabrics_for == Some(self.transport) {
            return Ok(());
        }
        let size = self.world.size();
        let spans_nodes = (1..size).any(|r| self.world.node_of(r) != self.world.node_of(0));
        if size == 1 || self.fabrics.len() == size || (!spans_nodes && self.transports_agreed) {
            self.fabrics_for = Some(self.transport);
            return Ok(());
        }
        let mut mine = vec![self.transport as u8];
        if spans_nodes && self.transport == Transport::Auto {
            mine.extend_from_slice(own_fabric().as_bytes());
        }
        let barrier = |source| HaloError::Barrier {
            source: Box::new(source),
        };
        // Where every rank answers alike (one transport; one fabric, or
        // none), a reduction says so, and what a rank receives does not
        // grow with the job; else every rank's answer, gathered, names
        // the rank that differs.
        let lanes = [u64::from(mine[0]), digest_of(&mine[1..])];
        let spreads = self.world.reduce(&lanes, self.timeout).map_err(barrier)?;
        let all = if spreads.iter().all(sode_job::Spread::agreed) {
            vec![mine.clone(); size]
        } else {
            self.world.allgather(&mine, self.timeout).map_err(barrier)?
        };
        if let Some(r) = all.iter().position(|b| b.first() != Some(&mine[0])) {
            let theirs = all[r].first().map_or("none", |&t| Transport::name_of(t));
            return Err(HaloError::Disagree {
                why: format!(
                    "rank {r} chose the {theirs} transport, this rank (rank {}) the {} transport (SODE_TRANSPORT, or sode_exchange_set_transport in C): give every rank the same",
                    self.world.rank(),
                    Transport::name_of(mine[0])
                ),
            });
        }
        if spans_nodes {
            self.fabrics = all
                .iter()
                .map(|b| String::from_utf8_lossy(&b[1..]).into_owned())
                .collect();
        }
        self.fabrics_for = Some(self.transport);
        Ok(())
    }

    fn check(&self) -> Result<()> {
        let me = self.world.rank();
        let size = self.world.size();
        check_links(&self.links, size).map_err(|why| HaloError::Usage { op: "build", why })?;
        #[cfg(feature = "rdma")]
        let lent = self.lent_lens()?;
        #[cfg(not(feature = "rdma"))]
        let lent: Vec<usize> = Vec::new();
        for (i, l) in self.links.iter().enumerate() {
            self.check_in_place(i, l, &lent)?;
            self.check_shared(i, l)?;
            if l.peer == me {
                continue;
            }
            if self.transport == Transport::Shm && !self.world.same_node(l.peer) {
                return Err(HaloError::Locality {
                    rank: l.peer,
                    direction: l.name.clone(),
                    why: format!(
                        "it runs {}, and the transport is shm: use auto, rdma or tcp",
                        self.elsewhere(l.peer)
                    ),
                });
            }
            if cfg!(not(feature = "rdma")) && self.locality(me, l.peer) == Locality::Rdma {
                return Err(HaloError::Locality {
                    rank: l.peer,
                    direction: l.name.clone(),
                    why: "it needs RDMA, and this sode was built without the rdma feature: run the job on one node, or build with --features rdma".into(),
                });
            }
        }
        Ok(())
    }

    /// Where `peer`, not on this rank's node, runs: on another machine, or
    /// on this one in another shared-memory domain (a container of its
    /// own, or a process that is not dumpable), which cannot map this
    /// rank's segments.
    fn elsewhere(&self, peer: usize) -> &'static str {
        let (me, them) = (
            self.world.node_of(self.world.rank()),
            self.world.node_of(peer),
        );
        match (me, them) {
            (Some(a), Some(b)) if a.same_machine(b) => {
                "on this machine but in another PID namespace or shared-memory directory (a container of its own), or one of the two is not dumpable"
            }
            _ => "on another node",
        }
    }

    /// With shared sets, link `i` has runs for each message it has (and
    /// only those), inside a set, covering the message.
    fn check_shared(&self, i: usize, l: &Link) -> Result<()> {
        let Some(shared) = &self.shared else {
            return Ok(());
        };
        if shared.sets == 0 || shared.set_len == 0 {
            return Err(HaloError::Usage {
                op: "build",
                why: format!(
                    "{} shared sets of {} bytes: keep at least one set of at least one byte",
                    shared.sets, shared.set_len
                ),
            });
        }
        let none = LinkRuns::default();
        let runs = shared.runs.get(i).unwrap_or(&none);
        for (side, runs, message) in [
            ("send", &runs.send, l.send),
            ("receive", &runs.recv, l.recv),
        ] {
            let usage = |why: String| HaloError::Usage {
                op: "build",
                why: format!("link {i} ({}): its {side} in the shared sets {why}", l.name),
            };
            let (runs, m) = match (runs, message) {
                (None, None) => continue,
                (Some(_), None) => {
                    return Err(usage("has runs, but the link has no such message".into()))
                }
                (None, Some(_)) => {
                    return Err(usage("has no runs: give every message its runs".into()))
                }
                (Some(r), Some(m)) => (r, m),
            };
            let mut total = 0usize;
            for r in runs {
                if r.len == 0
                    || r.offset
                        .checked_add(r.len)
                        .is_none_or(|end| end > shared.set_len)
                {
                    return Err(usage(format!(
                        "has a run {}+{} outside the {}-byte set (or empty)",
                        r.offset, r.len, shared.set_len
                    )));
                }
                total = total.saturating_add(r.len);
            }
            if total != m.len {
                return Err(usage(format!(
                    "covers {total} bytes of a {}-byte message",
                    m.len
                )));
            }
        }
        Ok(())
    }

    /// Per piece of lent memory, its bytes in every set (the shortest);
    /// sets of other numbers of pieces are refused.
    #[cfg(feature = "rdma")]
    fn lent_lens(&self) -> Result<Vec<usize>> {
        let Some(first) = self.lent.first() else {
            return Ok(Vec::new());
        };
        let mut lens: Vec<usize> = first.iter().map(|m| m.len()).collect();
        for (k, set) in self.lent.iter().enumerate().skip(1) {
            if set.len() != lens.len() {
                return Err(HaloError::Usage {
                    op: "build",
                    why: format!(
                        "lent set {k} has {} pieces of memory, set 0 has {}: lend as many in every set, in the same order",
                        set.len(),
                        lens.len()
                    ),
                });
            }
            for (len, m) in lens.iter_mut().zip(set) {
                *len = (*len).min(m.len());
            }
        }
        Ok(lens)
    }

    /// Link `i`'s runs in place: only for a message it has, covering its
    /// bytes exactly, inside memory that was lent (`lent`: each piece's
    /// bytes in every set).
    fn check_in_place(&self, i: usize, l: &Link, lent: &[usize]) -> Result<()> {
        let Some(how) = self.in_place.get(i) else {
            return Ok(());
        };
        for (side, spans, message) in [("send", &how.send, l.send), ("receive", &how.recv, l.recv)]
        {
            let Some(spans) = spans else { continue };
            let usage = |why: String| HaloError::Usage {
                op: "build",
                why: format!("link {i} ({}): its {side} in place {why}", l.name),
            };
            let Some(m) = message else {
                return Err(usage("names runs, but the link has no such message".into()));
            };
            let mut total = 0usize;
            for s in spans {
                let Some(&len) = lent.get(s.memory) else {
                    return Err(usage(format!(
                        "names lent memory {}, but {} were lent",
                        s.memory,
                        lent.len()
                    )));
                };
                if s.len == 0 || s.offset.checked_add(s.len).is_none_or(|end| end > len) {
                    return Err(usage(format!(
                        "has a run {}..{}+{} outside lent memory {} of {len} bytes (or empty)",
                        s.offset, s.offset, s.len, s.memory
                    )));
                }
                total = total
                    .checked_add(s.len)
                    .ok_or_else(|| usage("overflows".into()))?;
            }
            if total != m.len {
                return Err(usage(format!(
                    "covers {total} bytes, but the message has {}",
                    m.len
                )));
            }
        }
        Ok(())
    }

    /// Routes the links that stay within this rank: each receive to the
    /// buffer of the send with its tag.
    fn local_routes(
        &self,
        sends: &mut [Option<Route>],
        recvs: &mut [Option<Route>],
    ) -> Result<usize> {
        let me = self.world.rank();
        let mut buffers = 0;
        let mut by_tag = HashMap::new();
        for (i, l) in self.links.iter().enumerate().filter(|(_, l)| l.peer == me) {
            if let Some(m) = l.send {
                by_tag.insert(m.tag, (buffers, m.len));
                sends[i] = Some(Route::Local { buffer: buffers });
                buffers += 1;
            }
        }
        for (i, l) in self.links.iter().enumerate().filter(|(_, l)| l.peer == me) {
            if let Some(m) = l.recv {
                match by_tag.get(&m.tag) {
                    Some(&(buffer, len)) if len == m.len => recvs[i] = Some(Route::Local { buffer }),
                    found => {
                        return Err(HaloError::Usage {
                            op: "build",
                            why: format!(
                                "link {i} ({}) receives {} bytes with tag {} from this rank itself, but this rank sends {}",
                                l.name,
                                m.len,
                                m.tag,
                                found.map_or("no message with that tag".into(), |f| format!("{} bytes with it", f.1))
                            ),
                        })
                    }
                }
            }
        }
        Ok(buffers)
    }

    /// Decides each link's channel, sets up shared memory with the peers on
    /// this node and RDMA (device, keys, scheduled chains) with the others.
    /// Collective: every rank of the job calls it.
    ///
    /// # Errors
    ///
    /// On every rank alike where the ranks' links disagree
    /// ([`HaloError::Usage`]: a send without its receive, different
    /// lengths); [`HaloError::Locality`] when a peer cannot be reached
    /// over the transport asked for; [`HaloError::Shm`],
    /// [`HaloError::Rdma`] or [`HaloError::TcpSetup`] when a channel
    /// cannot be set up; [`HaloError::Barrier`] when the job's collectives
    /// fail or time out; [`HaloError::Usage`] for a value
    /// [`PROGRESS_VAR`](crate::PROGRESS_VAR) or `SODE_WAIT_WARN` does not
    /// take on this rank, after the collective step, its neighbours told
    /// as of its other failures ([`tell_job_on_failure`](Self::tell_job_on_failure)).
    pub fn build(mut self) -> Result<LinkExchange> {
        self.gather_fabrics()?;
        let (world, name, tell) = (self.world, self.name.clone(), self.tell_job);
        // Settings read on this rank alone fail after the collective step,
        // as its other failures do: its neighbours are told.
        let built = settings_from_env().and_then(|warn_after| self.build_gathered(warn_after));
        if let Err(e) = &built {
            // Unless the failure came from the job: a rank that gave up,
            // or died, is the cause, and every rank hears of it anyway.
            let by_job = e.from_the_job() || world.failure().is_some();
            if tell && !by_job {
                world.give_up_setup(&name, NO_STATUS, &sode_job::diag::chain(e));
            }
        }
        built
    }

    /// [`build`](Self::build) once the fabrics are gathered.
    fn build_gathered(mut self, warn_after: Option<Duration>) -> Result<LinkExchange> {
        self.check()?;
        let n = self.links.len();
        let (mut sends, mut recvs) = (vec![None; n], vec![None; n]);
        let locals = self.local_routes(&mut sends, &mut recvs)?;
        let mut self_bufs = vec![Vec::new(); locals];
        for (l, r) in self.links.iter().zip(&sends) {
            if let (Some(Route::Local { buffer }), Some(m)) = (r, l.send) {
                self_bufs[*buffer] = zeroed(m.len, || {
                    format!(
                        "the {} bytes of {} (a copy within this rank)",
                        m.len, l.name
                    )
                })?;
            }
        }
        let mut placing = Placing {
            sends,
            recvs,
            in_place: vec![Sides::default(); n],
            channels: Vec::new(),
        };
        let (store, summary) = self.set_up_channels(&mut placing)?;
        let Placing {
            sends,
            recvs,
            in_place,
            channels,
        } = placing;
        let shared = self.shared.take();
        Ok(LinkExchange {
            in_place,
            memory: StartMemory::Set(0),
            shared,
            set: None,
            store,
            rank: self.world.rank(),
            sends,
            recvs,
            self_bufs,
            direct: Vec::new(),
            direct_now: DirectCopies::Off,
            spans: Vec::new(),
            receives_released: false,
            channels: Channels::new(channels),
            others_pending: false,
            lifecycle: Lifecycle::Idle,
            plan_summary: summary,
            pseudo_collective: self.sync == SyncMode::PseudoCollective,
            meter: Meter::new(self.world.job_id(), &self.name, self.world.rank()),
            job: self.world.clone(),
            timeout: self.timeout,
            name: self.name,
            warn_after,
            started: 0,
            polled: None,
            carried: self
                .links
                .iter()
                .map(|l| Moved {
                    sent: l.send.map_or(0, |m| m.len as u64),
                    received: l.recv.map_or(0, |m| m.len as u64),
                })
                .collect(),
            links: self.links,
        })
    }

    /// Every channel of this rank, placing the links on them: where the
    /// shared sets live, and the RDMA plan's summary. Collective with the
    /// neighbours. A rank that gives its part up tells the job
    /// ([`World::give_up_setup`]: [`build`](Self::build) does, or the C
    /// ABI's commit), and its neighbours' waits end then, rather than at
    /// the timeout; so do they
    /// when the job's health watcher finds a rank dead (a rank killed
    /// before it made its part tells no one).
    fn set_up_channels(
        &mut self,
        placing: &mut Placing,
    ) -> Result<(Option<SharedStore>, Option<String>)> {
        let setup = Setup {
            world: self.world,
            timeout: self.timeout,
        };
        let (job, name) = (self.world.clone(), self.name.clone());
        let me = job.rank();
        let given_up = move || job.setup_given_up(&name).filter(|g| g.rank != me);
        let watch = {
            let (given_up, job) = (given_up.clone(), self.world.clone());
            sode_job::abandon_when(move || given_up().is_some() || job.failure().is_some())
        };
        let built = (|| {
            let store = self.set_up_shm(&setup, placing)?;
            let summary = self.set_up_rdma(&setup, placing)?;
            let (tcp, members) = self.members(Locality::Tcp);
            if !tcp.is_empty() {
                placing.add(&tcp, TcpChannel::set_up(&setup, &members)?);
            }
            Ok((store, summary))
        })();
        drop(watch);
        built.map_err(|e| {
            // A collective step of the setup (the RDMA models' allgather)
            // that ended in a give-up keeps its error: the caller learns
            // from it that it took the step the others gave up in.
            if sode_job::JobError::gave_up_in(&e).is_some() {
                return e;
            }
            // A rank that gave up says why; a dead one is the cause of
            // whatever this rank's waits for it then met (a segment gone,
            // a connection closed, a deadline cut short).
            match (given_up(), self.world.failure()) {
                (Some(g), _) => HaloError::PeerGaveUp {
                    rank: g.rank,
                    why: g.why,
                },
                (None, Some(failure)) => HaloError::JobFailed {
                    failure,
                    outstanding: format!("setting up exchange {}'s channels", self.name),
                },
                (None, None) => e,
            }
        })
    }

    /// The shared-memory channel, if this rank has neighbours on its
    /// node, and where the shared sets live (if any were asked for).
    fn set_up_shm(&self, setup: &Setup<'_>, placing: &mut Placing) -> Result<Option<SharedStore>> {
        let (links, members) = self.members(Locality::Shm);
        if links.is_empty() {
            return self.shared.as_ref().map(private_sets).transpose();
        }
        let runs: Vec<Option<&LinkRuns>> = links
            .iter()
            .map(|&i| self.shared.as_ref().and_then(|s| s.runs.get(i)))
            .collect();
        let lend = self.shared.as_ref().map(|s| (s.sets, s.set_len));
        let built = ShmChannel::set_up(setup, &self.name, &members, &runs, lend)?;
        let channel = placing.add(&links, built);
        Ok(lend.map(|_| SharedStore::Channel { channel }))
    }

    /// The RDMA channel, if any rank of the job needs one; its plan's
    /// summary.
    #[cfg(feature = "rdma")]
    fn set_up_rdma(&mut self, setup: &Setup<'_>, placing: &mut Placing) -> Result<Option<String>> {
        let lent = std::mem::take(&mut self.lent);
        let (links, members) = self.members(Locality::Rdma);
        let in_place: Vec<Option<&InPlace>> = links.iter().map(|&i| self.in_place.get(i)).collect();
        let job = crate::channel::RdmaJob {
            transport: self.transport,
            fabrics: &self.fabrics,
            engines: self.engines,
            algorithm: self.algorithm,
            model: self.model,
            lent,
        };
        let built = crate::channel::RdmaChannel::set_up(setup, job, &members, &in_place)?;
        Ok(built.and_then(|mut b| {
            let summary = b.summary.take();
            placing.add(&links, b);
            summary
        }))
    }

    #[cfg(not(feature = "rdma"))]
    fn set_up_rdma(&mut self, _: &Setup<'_>, _: &mut Placing) -> Result<Option<String>> {
        Ok(None)
    }

    /// The links whose peer the locality `l` reaches, and each as its
    /// channel's setup sees it.
    fn members(&self, l: Locality) -> (Vec<usize>, Vec<Member<'_>>) {
        let me = self.world.rank();
        let links: Vec<usize> = (0..self.links.len())
            .filter(|&i| self.links[i].peer != me && self.locality(me, self.links[i].peer) == l)
            .collect();
        let members = links
            .iter()
            .map(|&i| {
                let l = &self.links[i];
                Member {
                    peer: l.peer,
                    send: l.send,
                    recv: l.recv,
                    name: &l.name,
                    offset: &l.offset,
                }
            })
            .collect();
        (links, members)
    }
}

/// A digest of `bytes` the same on every rank of a job (one build of
/// sode).
fn digest_of(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// The RDMA fabric of this rank's device, or none (without a device that
/// opens, or without the `rdma` feature).
fn own_fabric() -> String {
    #[cfg(feature = "rdma")]
    match sode_transport::DeviceSelector::from_env().and_then(|s| sode_transport::Device::open(&s))
    {
        Ok(dev) => {
            let caps = dev.caps();
            crate::fabric::fabric_of(caps.link_layer, caps.gid, &crate::fabric::host_networks())
        }
        Err(e) => {
            tracing::info!(error = %e, "no RDMA here: neighbours on other nodes use TCP");
            String::new()
        }
    }
    #[cfg(not(feature = "rdma"))]
    String::new()
}

/// Shared sets in private memory (no neighbour on this node).
fn private_sets(s: &SharedSets) -> Result<SharedStore> {
    let len = s
        .sets
        .checked_mul(s.set_len)
        .ok_or_else(|| HaloError::Usage {
            op: "build",
            why: format!(
                "{} shared sets of {} bytes overflow the address space",
                s.sets, s.set_len
            ),
        })?;
    let memory = zeroed(len.div_ceil(8), || {
        format!(
            "{} shared sets of {} bytes ({len} bytes in all)",
            s.sets, s.set_len
        )
    })?;
    Ok(SharedStore::Private { memory, len })
}

/// The channels set up so far, and where each link's sides travel.
struct Placing {
    sends: Vec<Option<Route>>,
    recvs: Vec<Option<Route>>,
    in_place: Vec<Sides>,
    channels: Vec<Box<dyn Channel>>,
}

impl Placing {
    /// Routes the sides of `links` (the members `built` was set up for, in
    /// order) to its channel; the channel's number.
    fn add(&mut self, links: &[usize], built: Built) -> usize {
        let channel = self.channels.len();
        for (&i, at) in links.iter().zip(&built.placed) {
            if let Some(message) = at.send {
                self.sends[i] = Some(Route::Channel { channel, message });
            }
            if let Some(message) = at.recv {
                self.recvs[i] = Some(Route::Channel { channel, message });
            }
            self.in_place[i] = at.in_place;
        }
        self.channels.push(built.channel);
        channel
    }
}

/// `n` zeroed values, or an error naming `what` when the memory is not
/// there: sizes come from the caller, and a failed allocation must not
/// abort the program.
fn zeroed<T: Clone + Default>(n: usize, what: impl FnOnce() -> String) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|e| HaloError::Usage {
        op: "build",
        why: format!(
            "{} cannot be allocated ({e}): use smaller fields or fewer of them",
            what()
        ),
    })?;
    v.resize(n, T::default());
    Ok(v)
}

/// Whether ranks `a` and `b` have RDMA devices on one fabric.
/// What every exchange of links asks of them: peers in the job of `size`
/// ranks, messages of at least a byte, at most one send and one receive
/// per (peer, tag); what is wrong, naming the link.
pub(crate) fn check_links(links: &[Link], size: usize) -> std::result::Result<(), String> {
    let (mut sends, mut recvs) = (HashMap::new(), HashMap::new());
    for (i, l) in links.iter().enumerate() {
        if l.peer >= size {
            return Err(format!(
                "link {i} ({}) names rank {}, but the job has {size} ranks",
                l.name, l.peer
            ));
        }
        if l.send.is_none() && l.recv.is_none() {
            return Err(format!("link {i} ({}) neither sends nor receives", l.name));
        }
        if l.send.iter().chain(&l.recv).any(|m| m.len == 0) {
            return Err(format!("link {i} ({}) has a message of 0 bytes", l.name));
        }
        let sides = [
            (&mut sends, l.send, "send", "to"),
            (&mut recvs, l.recv, "receive", "from"),
        ];
        for (map, m, verb, way) in sides {
            if let Some(m) = m {
                if let Some(j) = map.insert((l.peer, m.tag), i) {
                    return Err(format!(
                        "links {j} and {i} both {verb} tag {} {way} rank {}",
                        m.tag, l.peer
                    ));
                }
            }
        }
    }
    Ok(())
}

/// A persistent exchange of messages: fill [`send_buf`](Self::send_buf)s,
/// [`start`](Self::start), [`wait`](Self::wait) (or poll
/// [`test`](Self::test)), then read the [`recv_buf`](Self::recv_buf)s.
#[derive(Debug)]
pub struct LinkExchange {
    rank: usize,
    /// Per link, which sides travel in place.
    in_place: Vec<Sides>,
    /// What the starts that follow read and land in over RDMA: a lent
    /// set, or staged through buffers ([`set_memory`](Self::set_memory)).
    memory: StartMemory,
    /// The shared sets asked for (with each link's runs in them), where
    /// they are, and the set in flight.
    shared: Option<SharedSets>,
    store: Option<SharedStore>,
    set: Option<usize>,
    links: Vec<Link>,
    sends: Vec<Option<Route>>,
    recvs: Vec<Option<Route>>,
    self_bufs: Vec<Vec<u8>>,
    /// The messages to itself its caller copies directly, and whether the
    /// start in flight does (its caller decided at the start) and has yet to.
    direct: Vec<LocalCopy>,
    direct_now: DirectCopies,
    /// The started arrays' spans, sorted to find two that overlap
    /// ([`arrays_apart`](Self::arrays_apart)); kept so that a start
    /// allocates nothing once one with as many fields has run.
    spans: Vec<ArraySpan>,
    /// The caller released this iteration's receive buffers
    /// ([`receives_read`](Self::receives_read)); cleared at the next start.
    receives_released: bool,
    /// Its channels, each with whether it completed this iteration;
    /// enlisted in flight for the passes of this thread's other exchanges.
    channels: Channels,
    /// Whether the last poll found another exchange of this thread with
    /// a channel still in flight.
    others_pending: bool,
    lifecycle: Lifecycle,
    plan_summary: Option<String>,
    /// Whether every iteration ends in a barrier over `job`.
    pseudo_collective: bool,
    /// The job, whose health it watches (a rank dead anywhere fails this
    /// exchange) and whose barriers the pseudo-collective mode takes.
    job: World,
    timeout: Duration,
    /// Its name in the job (`h0`, ...), for what it reports.
    name: String,
    /// After how long a wait warns that it goes on (`SODE_WAIT_WARN`).
    warn_after: Option<Duration>,
    /// Iterations started, for what it reports.
    started: u64,
    /// Since when a program polling [`test`](Self::test) has found this
    /// iteration incomplete, and when that next warns; cleared at start.
    polled: Option<PolledWait>,
    /// What it has done, and its trace.
    meter: Meter,
    /// Per link, the bytes each way the next iteration moves (as carried).
    carried: Vec<Moved>,
}

/// How long a program polling `test` has found an iteration incomplete.
#[derive(Debug)]
struct PolledWait {
    /// The first test that found it so.
    since: Instant,
    /// How long after `since` the next warning comes.
    next: Duration,
}

/// Which call a long-wait warning comes from.
#[derive(Debug, Clone, Copy)]
enum Waiter {
    Wait,
    Test,
}

impl Drop for LinkExchange {
    fn drop(&mut self) {
        self.meter.write_trace();
    }
}

impl LinkExchange {
    /// A builder for `links` over the ranks of `world`.
    pub fn builder(world: &World, links: Vec<Link>) -> LinkExchangeBuilder<'_> {
        LinkExchangeBuilder::new(world, links)
    }

    /// The links, in the order they were given.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How each link's peer is reached, in the links' order, as text: the
    /// channel, and for TCP the gateway ranks it passes (`tcp via rank 2`).
    pub fn paths(&self) -> Vec<String> {
        self.localities()
            .into_iter()
            .zip(&self.links)
            .map(|(l, link)| {
                let via = self.job.gateways_to(link.peer);
                if l != Locality::Tcp || via.is_empty() {
                    return l.name().to_string();
                }
                let via: Vec<String> = via.iter().map(|g| format!("rank {g}")).collect();
                format!("tcp via {}", via.join(", "))
            })
            .collect()
    }

    /// How each link's peer is reached, in the links' order.
    pub fn localities(&self) -> Vec<Locality> {
        self.sends
            .iter()
            .zip(&self.recvs)
            .map(|(s, r)| match s.or(*r) {
                Some(Route::Channel { channel, .. }) => self
                    .channels
                    .with(channel, |c| c.locality())
                    .unwrap_or(Locality::SelfCopy),
                _ => Locality::SelfCopy,
            })
            .collect()
    }

    /// Which sides of link `link` travel in place: asked for with
    /// [`LinkExchangeBuilder::in_place`] and honoured because the link is
    /// reached over RDMA, or in the shared sets
    /// ([`LinkExchangeBuilder::shared_sets`]) on a link reached over
    /// shared memory. Those have no send or receive buffer.
    pub fn in_place(&self, link: usize) -> Sides {
        self.in_place.get(link).copied().unwrap_or_default()
    }

    /// Which sides of link `link` travel in place in the starts that
    /// follow: [`in_place`](Self::in_place)'s, but none over RDMA while
    /// the starts are [staged](Self::set_memory); the sides that do not
    /// travel in place have a send or receive buffer.
    pub fn in_place_now(&self, link: usize) -> Sides {
        let over_rdma = |route: Option<&Option<Route>>| match route.copied().flatten() {
            Some(Route::Channel { channel, .. }) => self
                .channels
                .with(channel, |c| c.locality() == Locality::Rdma)
                .unwrap_or(false),
            _ => false,
        };
        let mut sides = self.in_place(link);
        if self.memory == StartMemory::Staged {
            sides.send &= !over_rdma(self.sends.get(link));
            sides.recv &= !over_rdma(self.recvs.get(link));
        }
        sides
    }

    /// From the next start on, the messages that travel in place over
    /// RDMA read and land in `memory`: lent set `k`
    /// ([`LinkExchangeBuilder::lend`], in the order lent; 0 as built) for
    /// a start on the arrays of that set (Runge-Kutta stages, double
    /// buffers, each lent at build), or [`StartMemory::Staged`] for a
    /// start on memory no set holds: those messages then go through the
    /// channel's buffers, packed and unpacked by the caller as any packed
    /// message, and the device keeps reading and writing only the memory
    /// it was given. Each side is chosen by its own rank; a receiver tells
    /// each writer in its credit.
    ///
    /// # Errors
    ///
    /// [`HaloError::State`] while an iteration is in flight or after a
    /// failure; [`HaloError::Usage`] for a set that was not lent (over
    /// RDMA).
    pub fn set_memory(&mut self, memory: StartMemory) -> Result<()> {
        self.lifecycle.require_idle("set_memory")?;
        if self.memory == memory {
            return Ok(());
        }
        self.channels
            .for_each_mut("set_memory", |c| c.set_memory(memory))?;
        self.memory = memory;
        Ok(())
    }

    /// Whether link `link`'s receive is read straight from the sender's
    /// shared set (see [`SharedSets`]), rather than packed.
    pub fn read_in_place(&self, link: usize) -> bool {
        match self.recvs.get(link).copied().flatten() {
            Some(Route::Channel { channel, message }) => self
                .channels
                .with(channel, |c| c.received_in_place(message))
                .unwrap_or(false),
            _ => false,
        }
    }

    /// Per shared-memory peer, the thresholds its messages were given
    /// paths by, where they were measured, and whether an earlier
    /// exchange's probe on this job served (only the first exchange built
    /// on a [`World`] measures each place).
    pub fn calibrations(&self) -> Vec<sode_shm::PeerCalibration> {
        self.channels
            .each(|c| c.calibrations().to_vec())
            .into_iter()
            .flatten()
            .collect()
    }

    /// RDMA queue pairs this exchange holds (engines times RDMA peers).
    pub fn queue_pairs(&self) -> usize {
        self.channels.each(|c| c.queue_pairs()).into_iter().sum()
    }

    /// The RDMA schedule, if any link is reached over RDMA.
    pub fn plan_summary(&self) -> Option<&str> {
        self.plan_summary.as_deref()
    }

    fn no_message(&self, op: &'static str, link: usize, what: &str) -> HaloError {
        HaloError::Usage {
            op,
            why: match self.links.get(link) {
                Some(l) => format!("link {link} ({}) {what}", l.name),
                None => format!("there is no link {link} ({} links)", self.links.len()),
            },
        }
    }

    /// Link `link`'s send buffer, to fill before [`start`](Self::start).
    ///
    /// # Errors
    ///
    /// [`HaloError::Usage`] for a link that does not exist or sends
    /// nothing; [`HaloError::State`] while an iteration is in flight or
    /// after a failure.
    pub fn send_buf(&mut self, link: usize) -> Result<&mut [u8]> {
        self.lifecycle.require_idle("send_buf")?;
        match self.sends.get(link).copied().flatten() {
            Some(Route::Local { buffer }) => Ok(&mut self.self_bufs[buffer]),
            Some(Route::Channel { channel, message }) => self
                .channels
                .get_mut("send_buf", channel)?
                .send_buf(message),
            None => Err(self.no_message("send_buf", link, "sends nothing")),
        }
    }

    /// The messages this rank sends itself: each local send with the
    /// receive that shares its buffer.
    pub fn local_pairs(&self) -> impl Iterator<Item = LocalCopy> + '_ {
        self.sends.iter().enumerate().filter_map(|(send, route)| {
            let Some(Route::Local { buffer }) = route else {
                return None;
            };
            let recv = self
                .recvs
                .iter()
                .position(|r| matches!(r, Some(Route::Local { buffer: b }) if b == buffer))?;
            Some(LocalCopy { send, recv })
        })
    }

    /// From the next start on, the caller copies each of `pairs` itself,
    /// straight from the send's cells into the receive's, and neither
    /// packs the send nor unpacks the receive: their buffer goes unused.
    /// Pairs that are not [local pairs](Self::local_pairs) are left out.
    pub fn copy_directly(&mut self, mut pairs: Vec<LocalCopy>) {
        let local: Vec<LocalCopy> = self.local_pairs().collect();
        pairs.retain(|p| local.contains(p));
        self.direct = pairs;
    }

    /// The messages to itself the caller copies directly
    /// ([`copy_directly`](Self::copy_directly)).
    pub fn direct_copies(&self) -> &[LocalCopy] {
        &self.direct
    }

    /// Says whether the start about to be made copies the
    /// [direct copies](Self::direct_copies) itself (else they go through
    /// their buffer); its wait reads it back
    /// ([`take_direct_copies`](Self::take_direct_copies),
    /// [`copying_directly`](Self::copying_directly)).
    pub fn set_copying_directly(&mut self, direct: bool) {
        self.direct_now = if direct && !self.direct.is_empty() {
            DirectCopies::Due
        } else {
            DirectCopies::Off
        };
    }

    /// Whether no two of `spans` (each an array's address and length in
    /// bytes, as [`FieldArrays::span`](crate::pattern::FieldArrays::span)
    /// gives it) share a byte; a `None` among them counts as a clash.
    /// Sorted, so any number of fields costs one pass, not every pair.
    pub fn arrays_apart(&mut self, spans: impl Iterator<Item = Option<(usize, usize)>>) -> bool {
        self.spans.clear();
        for span in spans {
            let Some((at, len)) = span else {
                return false;
            };
            self.spans.push(ArraySpan { at, len });
        }
        spans_apart(&mut self.spans)
    }

    /// What the last [`set_copying_directly`](Self::set_copying_directly)
    /// said.
    pub fn copying_directly(&self) -> bool {
        self.direct_now != DirectCopies::Off
    }

    /// Whether the start in flight copies directly and the caller has not
    /// made those copies yet; true once per start (the caller then makes
    /// them).
    pub fn take_direct_copies(&mut self) -> bool {
        let due = self.direct_now == DirectCopies::Due;
        if due {
            self.direct_now = DirectCopies::Done;
        }
        due
    }

    /// Link `link`'s receive buffer, complete after [`wait`](Self::wait).
    ///
    /// # Errors
    ///
    /// [`HaloError::Usage`] for a link that does not exist or receives
    /// nothing, or once the buffers were released
    /// ([`receives_read`](Self::receives_read)); [`HaloError::State`] while an iteration is in flight or
    /// after a failure.
    pub fn recv_buf(&mut self, link: usize) -> Result<&[u8]> {
        self.lifecycle.require_idle("recv_buf")?;
        if self.receives_released {
            return Err(HaloError::Usage {
                op: "recv_buf",
                why: "the receive buffers were released (receives_read): read them before, or after the next wait".into(),
            });
        }
        match self.recvs.get(link).copied().flatten() {
            Some(Route::Local { buffer }) => Ok(&self.self_bufs[buffer]),
            Some(Route::Channel { channel, message }) => self
                .channels
                .get_mut("recv_buf", channel)?
                .recv_buf(message),
            None => Err(self.no_message("recv_buf", link, "receives nothing")),
        }
    }

    /// From the next start on, link `link` carries only the first `bytes`
    /// of its send buffer (its message's length: the whole message again);
    /// its peer must expect as many ([`carry_recv`](Self::carry_recv)).
    /// For a start on part of the data (some fields, fewer layers): every
    /// channel then moves only those bytes (RDMA shortens its scheduled
    /// writes); a message read in place over RDMA is cut only in a
    /// [staged](Self::set_memory) start, and a start that is not staged
    /// fails until the message is carried whole again.
    ///
    /// # Errors
    ///
    /// [`HaloError::Usage`] for a link that does not exist or sends
    /// nothing, or more bytes than its message holds; [`HaloError::State`]
    /// while an iteration is in flight or after a failure.
    pub fn carry_send(&mut self, link: usize, bytes: usize) -> Result<()> {
        self.lifecycle.require_idle("carry_send")?;
        let len = self.links.get(link).and_then(|l| l.send).map(|m| m.len);
        match (self.sends.get(link).copied().flatten(), len) {
            (Some(_), Some(len)) if bytes > len => Err(self.no_message(
                "carry_send",
                link,
                &format!("sends {len} bytes: {bytes} cannot be carried"),
            )),
            (Some(Route::Local { .. }), _) => {
                self.carried[link].sent = bytes as u64;
                Ok(())
            }
            (Some(Route::Channel { channel, message }), _) => {
                self.channels
                    .get_mut("carry_send", channel)?
                    .carry_send(message, bytes)?;
                self.carried[link].sent = bytes as u64;
                Ok(())
            }
            (None, _) => Err(self.no_message("carry_send", link, "sends nothing")),
        }
    }

    /// From the next start on, link `link` expects only the first `bytes`
    /// of its receive, as its peer carries
    /// ([`carry_send`](Self::carry_send)).
    ///
    /// # Errors
    ///
    /// As [`carry_send`](Self::carry_send), for the receive.
    pub fn carry_recv(&mut self, link: usize, bytes: usize) -> Result<()> {
        self.lifecycle.require_idle("carry_recv")?;
        let len = self.links.get(link).and_then(|l| l.recv).map(|m| m.len);
        match (self.recvs.get(link).copied().flatten(), len) {
            (Some(_), Some(len)) if bytes > len => Err(self.no_message(
                "carry_recv",
                link,
                &format!("receives {len} bytes: {bytes} cannot be expected"),
            )),
            (Some(Route::Local { .. }), _) => {
                self.carried[link].received = bytes as u64;
                Ok(())
            }
            (Some(Route::Channel { channel, message }), _) => {
                self.channels
                    .get_mut("carry_recv", channel)?
                    .carry_recv(message, bytes)?;
                self.carried[link].received = bytes as u64;
                Ok(())
            }
            (None, _) => Err(self.no_message("carry_recv", link, "receives nothing")),
        }
    }

    /// From the next start on, every message carries `shape`: what part
    /// of the exchange the starts move ([`start_shape`](crate::start_shape)
    /// of the fields and depth), alike on every rank. Over shared memory,
    /// TCP and RDMA a receiver whose own shape differs fails the wait,
    /// naming the writer, rather than unpack data laid out otherwise.
    ///
    /// # Errors
    ///
    /// [`HaloError::State`] while an iteration is in flight or after a
    /// failure.
    pub fn set_shape(&mut self, shape: u8) -> Result<()> {
        self.lifecycle.require_idle("set_shape")?;
        self.channels
            .for_each_mut("set_shape", |c| c.set_shape(shape))
    }

    /// Says that the caller has read every [`recv_buf`](Self::recv_buf)
    /// of the iteration just completed: a channel may then let the next
    /// iteration's data land there before this rank starts it (over
    /// shared memory, a sender that starts first packs straight into its
    /// receiver's window). Until the next start, `recv_buf` is refused,
    /// over every channel. [`pattern::unpack`](crate::pattern::unpack)
    /// says it once it has unpacked.
    ///
    /// # Errors
    ///
    /// [`HaloError::State`] while an iteration is in flight or after a
    /// failure; a channel's error.
    pub fn receives_read(&mut self) -> Result<()> {
        self.lifecycle.require_idle("receives_read")?;
        self.receives_released = true;
        self.channels
            .for_each_mut("receives_read", |c| c.receives_read())
    }

    /// Promises that every start packs each send it carries afresh (the
    /// halo exchanges do, [`pattern::pack_and_start`](crate::pattern::pack_and_start)
    /// among them; a caller of [`send_buf`](Self::send_buf) need not),
    /// which lets a channel hand out the receiver's memory as the send
    /// buffer: over shared memory, a face packed there is the one copy
    /// before the receiver's unpack.
    ///
    /// # Errors
    ///
    /// [`HaloError::Usage`] for a channel out of reach.
    pub fn fill_sends_each_start(&mut self) -> Result<()> {
        self.channels.for_each_mut("fill_sends_each_start", |c| {
            c.fill_sends_each_start();
            Ok(())
        })
    }

    fn job_barrier(&mut self) -> Result<()> {
        if self.pseudo_collective {
            self.job
                .barrier(self.timeout)
                .map_err(|source| HaloError::Barrier {
                    source: Box::new(source),
                })?;
        }
        Ok(())
    }

    /// The shared sets, all of them (set `s` at `s * set_len`), in the
    /// shared-memory channel's segment (private memory without neighbours
    /// on this node). Usable while an iteration is in flight, for
    /// computing then: the runs of the set in flight that peers read in
    /// place must not change, nor its halos be read, until `wait` returns.
    ///
    /// # Errors
    ///
    /// [`HaloError::Usage`] when the exchange keeps no shared sets.
    pub fn shared_sets_mut(&mut self) -> Result<&mut [u8]> {
        match &mut self.store {
            None => Err(HaloError::Usage {
                op: "shared_sets_mut",
                why: "the exchange keeps no shared sets: build it with shared_sets".into(),
            }),
            Some(SharedStore::Private { memory, len }) => {
                Ok(&mut bytemuck::cast_slice_mut(memory.as_mut_slice())[..*len])
            }
            Some(SharedStore::Channel { channel }) => {
                match self
                    .channels
                    .get_mut("shared_sets_mut", *channel)?
                    .lent_mut()
                {
                    Some(r) => r,
                    None => Err(HaloError::Usage {
                        op: "shared_sets_mut",
                        why: "its channel lends no memory".into(),
                    }),
                }
            }
        }
    }

    /// [`start`](Self::start) exchanging shared set `set`: links in place
    /// are read from its runs here and land in its runs at the peers.
    ///
    /// # Errors
    ///
    /// [`HaloError::Usage`] for a set it does not keep;
    /// [`HaloError::State`] while an iteration is in flight or after a
    /// failure; a channel's error, or [`HaloError::JobFailed`] when a peer
    /// failed or died.
    pub fn start_set(&mut self, set: usize) -> Result<()> {
        self.lifecycle.require_idle("start")?;
        let sets = self.shared.as_ref().map_or(0, |s| s.sets);
        if set >= sets {
            return Err(HaloError::Usage {
                op: "start_set",
                why: format!("set {set} asked for, but the exchange keeps {sets} shared sets"),
            });
        }
        self.channels.for_each_mut("start_set", |c| {
            c.use_set(set);
            Ok(())
        })?;
        self.gather(set)?;
        self.set = Some(set);
        self.start_channels()
    }

    /// The links not in place: their send runs of set `set` gathered into
    /// their send buffers.
    fn gather(&mut self, set: usize) -> Result<()> {
        let Some(shared) = &self.shared else {
            return Ok(());
        };
        let span = set * shared.set_len..(set + 1) * shared.set_len;
        for (i, runs) in shared.runs.iter().enumerate() {
            let (Some(route), Some(runs)) = (self.sends.get(i).copied().flatten(), &runs.send)
            else {
                continue;
            };
            if self.in_place[i].send {
                continue;
            }
            let SetsBeside { sets, channel } =
                split_shared(&mut self.store, &mut self.channels, route)?;
            let out: &mut [u8] = match (route, channel) {
                (Route::Local { buffer }, _) => &mut self.self_bufs[buffer],
                (Route::Channel { message, .. }, Some(c)) => c.send_buf(message)?,
                (Route::Channel { .. }, None) => return Err(no_channel(i)),
            };
            gather_runs(&sets[span.clone()], runs, out);
        }
        Ok(())
    }

    /// The links not in place: their receive buffers scattered into their
    /// runs of the set in flight.
    fn scatter(&mut self) -> Result<()> {
        let (Some(shared), Some(set)) = (&self.shared, self.set.take()) else {
            return Ok(());
        };
        let span = set * shared.set_len..(set + 1) * shared.set_len;
        for (i, runs) in shared.runs.iter().enumerate() {
            let (Some(route), Some(runs)) = (self.recvs.get(i).copied().flatten(), &runs.recv)
            else {
                continue;
            };
            if self.in_place[i].recv {
                continue;
            }
            let SetsBeside { sets, channel } =
                split_shared(&mut self.store, &mut self.channels, route)?;
            let data: &[u8] = match (route, channel) {
                (Route::Local { buffer }, _) => &self.self_bufs[buffer],
                (Route::Channel { message, .. }, Some(c)) => c.recv_buf(message)?,
                (Route::Channel { .. }, None) => return Err(no_channel(i)),
            };
            scatter_runs(data, runs, &mut sets[span.clone()]);
        }
        Ok(())
    }

    /// Starts an iteration on every channel; never blocks (but for the
    /// barrier of the pseudo-collective mode). With shared sets, use
    /// [`start_set`](Self::start_set).
    ///
    /// # Errors
    ///
    /// [`HaloError::Usage`] when it keeps shared sets;
    /// [`HaloError::State`] while an iteration is in flight or after a
    /// failure; a channel's error, or [`HaloError::JobFailed`] when a peer
    /// failed or died (later calls then fail with [`HaloError::State`]).
    pub fn start(&mut self) -> Result<()> {
        self.lifecycle.require_idle("start")?;
        if self.shared.is_some() {
            return Err(HaloError::Usage {
                op: "start",
                why: "the exchange keeps shared sets: start it with start_set(set)".into(),
            });
        }
        self.start_channels()
    }

    fn start_channels(&mut self) -> Result<()> {
        self.receives_released = false;
        let began = Instant::now();
        let started = self.post_channels();
        self.meter.started(began);
        if started.is_ok() && self.memory == StartMemory::Staged {
            self.meter.staged_starts += 1;
        }
        started
    }

    fn post_channels(&mut self) -> Result<()> {
        self.check_health(false)?;
        self.job_barrier()?;
        // The device's channels first (two passes, no allocation): their
        // writes are in flight while this rank's CPU does the
        // shared-memory copies.
        let n = self.channels.len();
        let order = [true, false]
            .into_iter()
            .flat_map(|device| (0..n).map(move |c| (device, c)));
        for (device, c) in order {
            let started = self.channels.get_mut("start", c).and_then(|channel| {
                if (channel.locality() == Locality::Rdma) != device {
                    return Ok(());
                }
                channel.start()
            });
            if let Err(e) = started {
                self.lifecycle.fail(&e);
                return Err(e);
            }
        }
        self.channels.enlist();
        self.lifecycle.start();
        self.started += 1;
        self.polled = None;
        Ok(())
    }

    /// One non-blocking pass over every channel: true once every message
    /// has arrived. Allocates nothing unless it fails. Found incomplete
    /// for `SODE_WAIT_WARN`, it warns as [`wait`](Self::wait) does.
    ///
    /// # Errors
    ///
    /// As [`wait`](Self::wait), but never [`HaloError::Timeout`].
    pub fn test(&mut self) -> Result<bool> {
        let began = Instant::now();
        let done = self.poll();
        self.meter.waited(began);
        if let Ok(false) = done {
            self.note_polled(began);
        }
        done
    }

    /// A program that polls [`test`](Self::test) between its own work
    /// waits too, and is told as [`wait`](Self::wait) tells: once the
    /// iteration has been found incomplete for `SODE_WAIT_WARN`, and
    /// again each time that has doubled. Counted in wall time from the
    /// first test that found it so, since the program's work between two
    /// tests is no stop.
    fn note_polled(&mut self, now: Instant) {
        let Some(after) = self.warn_after else {
            return;
        };
        let polled = self.polled.get_or_insert(PolledWait {
            since: now,
            next: after,
        });
        let waited = now.saturating_duration_since(polled.since);
        if waited < polled.next {
            return;
        }
        polled.next = waited.max(Duration::from_millis(1)) * 2;
        self.warn_long_wait(waited, Waiter::Test);
    }

    /// [`test`](Self::test) without the accounting, for `wait`'s loop.
    fn poll(&mut self) -> Result<bool> {
        self.lifecycle.require_in_flight("test")?;
        let mut all = true;
        for c in 0..self.channels.len() {
            match self.channels.test(c) {
                Ok(done) => all &= done,
                Err(e) => {
                    self.channels.withdraw();
                    self.lifecycle.fail(&e);
                    return Err(e);
                }
            }
        }
        if all {
            self.channels.withdraw();
        } else {
            // A peer may wait for this rank in another exchange.
            self.others_pending = self.channels.progress_others();
            self.check_health(true)?;
        }
        Ok(all)
    }

    /// Fails (the object too, when `in_flight`) once the job's health
    /// watcher has found a rank dead: one atomic load when none is.
    fn check_health(&mut self, in_flight: bool) -> Result<()> {
        let Some(failure) = self.job.failure() else {
            return Ok(());
        };
        let e = HaloError::JobFailed {
            failure,
            outstanding: if in_flight {
                self.outstanding()
            } else {
                "nothing (between iterations)".into()
            },
        };
        if in_flight {
            self.channels.withdraw();
            self.lifecycle.fail(&e);
        }
        Err(e)
    }

    /// What the channels not yet complete still wait for, per neighbour.
    fn outstanding(&self) -> String {
        let outstanding: Vec<String> = self
            .channels
            .pending()
            .filter_map(|c| self.channels.with(c, |c| c.outstanding()))
            .collect();
        outstanding.join("; ")
    }

    /// Progresses every channel until every message has arrived (or
    /// `deadline` passes: [`HaloError::Timeout`], after which `wait` may be
    /// called again).
    ///
    /// `deadline` is a timeout (a `Duration`, from when the wait begins) or
    /// an `Instant`; time this process is stopped does not count against it
    /// ([`Deadline`]).
    ///
    /// # Errors
    ///
    /// [`HaloError::Timeout`] at the deadline, naming each link still
    /// outstanding (the iteration stays in flight); [`HaloError::State`]
    /// without one in flight; a channel's error, or
    /// [`HaloError::JobFailed`] when a peer failed or died (later calls
    /// then fail with [`HaloError::State`]).
    pub fn wait(&mut self, deadline: impl Into<Deadline>) -> Result<()> {
        self.wait_by(&mut deadline.into())
    }

    /// [`wait`](Self::wait) against a deadline shared with later waits (a
    /// stop found here moves it on for them too).
    pub(crate) fn wait_by(&mut self, deadline: &mut Deadline) -> Result<()> {
        let began = Instant::now();
        let waited = self.complete(deadline);
        self.meter.waited(began);
        waited
    }

    fn complete(&mut self, deadline: &mut Deadline) -> Result<()> {
        if let Err(e) = self.lifecycle.require_in_flight("wait") {
            // A start refused because the job had failed: the wait says so
            // again, rather than only that nothing is in flight.
            if self.lifecycle == Lifecycle::Idle {
                self.check_health(false)?;
            }
            return Err(e.into());
        }
        // Every channel progresses in one loop: a rank never sits in one
        // while a peer waits for it in another.
        let mut backoff = Backoff::exchange();
        // Counted from the first pass that did not finish: a wait that
        // finishes at once pays nothing for it.
        let (mut long, warn_after) = (None, self.warn_after);
        // Time this process is stopped (a suspended job) does not count:
        // `passed` looks for it on every pass.
        while !self.poll()? {
            if deadline.passed() {
                return Err(HaloError::Timeout {
                    outstanding: self.outstanding(),
                });
            }
            let long = long.get_or_insert_with(|| LongWait::new(warn_after));
            if let Some(waited) = long.as_mut().and_then(LongWait::due) {
                self.warn_long_wait(waited, Waiter::Wait);
            }
            let until = long
                .as_ref()
                .map_or(deadline.at(), |l| l.at().min(deadline.at()));
            if !(backoff.blocks() && self.park_on_last(until)?) {
                backoff.snooze();
            }
        }
        self.lifecycle.complete();
        let moved = self.moved();
        self.meter.completed(moved);
        self.scatter()?;
        self.job_barrier()
    }

    /// Says that this wait has gone on for `waited`, and for what.
    fn warn_long_wait(&self, waited: Duration, waiter: Waiter) {
        let how = match waiter {
            Waiter::Wait => "and goes on waiting",
            Waiter::Test => "(polled by test, incomplete each time)",
        };
        tracing::warn!(
            "exchange {} has waited {:.0} s for iteration {} {how}; outstanding: {}. A neighbour that is stopped, blocked in another call (a collective waiting for this rank, say) or that skipped this exchange never sends ({} sets when this warns)",
            self.name,
            waited.as_secs_f64(),
            self.started,
            self.outstanding(),
            sode_job::WAIT_WARN_VAR,
        );
    }

    /// What it has done since it was built or [`reset_stats`](Self::reset_stats):
    /// iterations, time in start and in wait, bytes moved (as carried),
    /// and per neighbouring rank what the next iteration moves.
    pub fn stats(&self) -> ExchangeStats {
        let links = self
            .links
            .iter()
            .zip(self.localities())
            .zip(&self.carried)
            .map(|((l, channel), c)| {
                NeighbourStats::new(l.peer, channel, c.sent as usize, c.received as usize)
            })
            .collect();
        crate::stats::stats(&self.meter, links)
    }

    /// What one iteration moves to and from other ranks (copies within
    /// this rank left out), as the links carry now.
    fn moved(&self) -> Moved {
        let remote = |route: &Option<Route>| matches!(route, Some(Route::Channel { .. }));
        let mut moved = Moved::default();
        for (i, c) in self.carried.iter().enumerate() {
            if remote(&self.sends[i]) {
                moved.sent += c.sent;
            }
            if remote(&self.recvs[i]) {
                moved.received += c.received;
            }
        }
        moved
    }

    /// Sets the counters of [`stats`](Self::stats) to zero (after a
    /// warm-up, say).
    pub fn reset_stats(&mut self) {
        self.meter.reset();
    }

    /// Adds time a layer above spent packing for a start (counted in
    /// [`ExchangeStats::start_time`]).
    pub fn add_start_time(&mut self, spent: Duration) {
        self.meter.start_time += spent;
    }

    /// Adds time a layer above spent unpacking after a wait (counted in
    /// [`ExchangeStats::wait_time`]).
    pub fn add_wait_time(&mut self, spent: Duration) {
        self.meter.wait_time += spent;
    }

    /// When a single channel is still pending and it can block, blocks on
    /// it (until a peer signals or `until`) and says so; with several
    /// pending, no one signal covers them all, and the caller polls.
    fn park_on_last(&mut self, until: Instant) -> Result<bool> {
        if self.others_pending {
            // Asleep on this channel, this rank would move no other.
            return Ok(false);
        }
        let mut pending = self.channels.pending();
        let (Some(c), None) = (pending.next(), pending.next()) else {
            return Ok(false);
        };
        match self.channels.park(c, until) {
            None => Ok(false),
            Some(Ok(_)) => Ok(true),
            Some(Err(e)) => {
                self.channels.withdraw();
                self.lifecycle.fail(&e);
                Err(e)
            }
        }
    }

    /// Whether an iteration is in flight (started, not yet waited for).
    pub fn in_flight(&self) -> bool {
        matches!(self.lifecycle, Lifecycle::InFlight)
    }
}

/// A link routed to a channel that does not exist.
fn no_channel(link: usize) -> HaloError {
    HaloError::Usage {
        op: "start_set",
        why: format!("link {link} is routed to no channel"),
    }
}

/// The shared sets, and the channel of a link outside the lender.
struct SetsBeside<'a> {
    sets: &'a mut [u8],
    channel: Option<&'a mut Box<dyn Channel>>,
}

/// The shared sets and, at once, the channel a link travels on (`None`
/// for a link within this rank), which is never the one lending the sets
/// (whose links travel in place).
fn split_shared<'a>(
    store: &'a mut Option<SharedStore>,
    channels: &'a mut Channels,
    route: Route,
) -> Result<SetsBeside<'a>> {
    let misrouted = |why: &str| HaloError::Usage {
        op: "start_set",
        why: format!("a link outside the shared-memory channel {why}"),
    };
    let on = match route {
        Route::Channel { channel, .. } => Some(channel),
        Route::Local { .. } => None,
    };
    match store {
        None => Err(misrouted("has runs, but there are no shared sets")),
        Some(SharedStore::Private { memory, len }) => Ok(SetsBeside {
            sets: &mut bytemuck::cast_slice_mut(memory.as_mut_slice())[..*len],
            channel: match on {
                Some(c) => Some(channels.get_mut("start_set", c)?),
                None => None,
            },
        }),
        Some(SharedStore::Channel { channel: lender }) => {
            let lender = *lender;
            let (lending, other) = match on {
                Some(c) if c == lender => return Err(misrouted("is routed to it")),
                Some(c) => match channels.pair_mut(lender, c) {
                    Some(pair) => (pair.lender, Some(pair.other)),
                    None => return Err(misrouted("found the lending channel gone")),
                },
                None => (channels.get_mut("start_set", lender)?, None),
            };
            match lending.lent_mut() {
                Some(sets) => Ok(SetsBeside {
                    sets: sets?,
                    channel: other,
                }),
                None => Err(misrouted("found that it lends no memory")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        /// The sorted check finds an overlap exactly when some pair of
        /// arrays shares a byte, for any number of arrays (a code may
        /// start many fields at once).
        #[test]
        fn spans_apart_agrees_with_every_pair(
            spans in proptest::collection::vec((0usize..400, 0usize..40), 0..40)
        ) {
            let mut spans: Vec<ArraySpan> =
                spans.into_iter().map(|(at, len)| ArraySpan { at, len }).collect();
            let pairwise = spans.iter().enumerate().all(|(i, a)| {
                // Two share a byte when each starts before the other ends.
                spans[..i].iter().all(|b| !(a.at < b.at + b.len && b.at < a.at + a.len
                    && a.len > 0 && b.len > 0))
            });
            prop_assert_eq!(spans_apart(&mut spans), pairwise);
        }

        /// Up to 200 arrays laid end to end (as a code's tracers are, in
        /// any order) are apart; moving one back a byte onto the one
        /// before it is an overlap.
        #[test]
        fn arrays_end_to_end_are_apart_until_one_moves_back(
            lens in proptest::collection::vec(1usize..64, 2..200),
            gaps in proptest::collection::vec(0usize..3, 200),
            moved in any::<proptest::sample::Index>(),
            order in any::<u64>(),
        ) {
            let mut at = 4096;
            let mut spans: Vec<ArraySpan> = lens.iter().zip(&gaps).map(|(&len, &gap)| {
                at += gap;
                let s = ArraySpan { at, len };
                at += len;
                s
            }).collect();
            let k = 1 + moved.index(spans.len() - 1);
            let mut shuffled = spans.clone();
            shuffled.rotate_left((order % spans.len() as u64) as usize);
            shuffled.reverse();
            prop_assert!(spans_apart(&mut shuffled));
            spans[k].at = spans[k - 1].at + spans[k - 1].len - 1;
            prop_assert!(!spans_apart(&mut spans));
        }
    }

    use super::*;
    use crate::channel::Span;

    fn self_link() -> Link {
        Link {
            peer: 0,
            send: Some(Message { len: 64, tag: 1 }),
            recv: Some(Message { len: 64, tag: 1 }),
            offset: vec![1, 0],
            name: "rank 0 (x+)".into(),
        }
    }

    fn build_error(how: InPlace) -> String {
        let world = World::single();
        let e = LinkExchange::builder(&world, vec![self_link()])
            .in_place(0, how)
            .build()
            .unwrap_err();
        e.to_string()
    }

    #[test]
    fn memory_that_is_not_there_is_an_error_not_an_abort() {
        // 2^20 x 2^20 doubles a set: 8 TiB, more than any machine here.
        let world = World::single();
        let d = crate::Decomposition::new(
            &[1 << 20, 1 << 20],
            &[1, 1],
            &[false, false],
            1,
            crate::Stencil::Full,
        )
        .unwrap();
        let e = crate::HaloExchange::builder(&world, &d)
            .shared_fields(2)
            .build()
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot be allocated"), "{e}");
        let huge = Link {
            send: Some(Message {
                len: 1 << 46,
                tag: 1,
            }),
            recv: Some(Message {
                len: 1 << 46,
                tag: 1,
            }),
            ..self_link()
        };
        let e = LinkExchange::builder(&world, vec![huge])
            .build()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a copy within this rank") && e.contains("cannot be allocated"),
            "{e}"
        );
    }

    #[test]
    fn runs_in_place_are_checked_before_anything_is_built() {
        let span = Span {
            memory: 0,
            offset: 0,
            len: 64,
        };
        let e = build_error(InPlace {
            send: Some(vec![span]),
            recv: None,
        });
        assert!(
            e.contains(
                "link 0 (rank 0 (x+)): its send in place names lent memory 0, but 0 were lent"
            ),
            "{e}"
        );
        let world = World::single();
        let mut only_send = self_link();
        only_send.recv = None;
        let e = LinkExchange::builder(&world, vec![only_send])
            .in_place(
                0,
                InPlace {
                    send: None,
                    recv: Some(vec![span]),
                },
            )
            .build()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("its receive in place names runs, but the link has no such message"),
            "{e}"
        );
    }
}
