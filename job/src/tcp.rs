//! The TCP rendezvous: ranks meet rank 0 at `SODE_ROOT`, learn every rank's
//! listening address, then open direct links between the pairs that need
//! them, so a peer's keys reach only that peer. Every connection proves it
//! belongs to the job before anything is read from it or sent to it
//! ([`crate::auth`]); one that cannot is dropped and the listener goes on.

use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::auth::{Secret, Session, SECRET_VAR};
use crate::backoff::Backoff;
use crate::dial::{again_if_lost, connect_any, connect_retry, keep_alive};
use crate::error::{JobError, Result};
use crate::launch::LaunchInfo;
use crate::nets::Directory;
use crate::oob::{check_peers, decode, OutOfBand, PeerChannel, PeerLink};
use crate::tree::{Place, Tree};
use crate::wire::{decode_directory, encode_directory};

#[derive(Debug, Serialize, Deserialize)]
struct Hello {
    rank: usize,
    size: usize,
    listen: Vec<SocketAddr>,
}

/// The TCP bootstrap: collectives through rank 0 over the rendezvous's
/// connections (a tree of one level), direct links between peers for their
/// keys, every connection authenticated.
#[derive(Debug)]
pub struct TcpRendezvous {
    mesh: Mesh,
    steps: Tree,
}

/// Direct, authenticated TCP links between peers: every rank's listener
/// and the job's secret.
#[derive(Debug)]
pub(crate) struct Mesh {
    pub(crate) rank: usize,
    pub(crate) size: usize,
    pub(crate) secret: Secret,
    /// Where this rank accepts peer links.
    pub(crate) listener: TcpListener,
    /// Every rank's peer listener: the addresses to try, in order.
    pub(crate) listen: Directory,
    /// The job's routes, once known: links between ranks that do not
    /// reach each other go through gateways.
    pub(crate) routes: Option<std::sync::Arc<crate::routes::Routes>>,
}

impl TcpRendezvous {
    /// Meets the other ranks at `launch.root`; collective over the job.
    ///
    /// # Errors
    ///
    /// [`JobError::Launch`] without a root; [`JobError::BootstrapTimeout`]
    /// when the job does not gather by the deadline;
    /// [`JobError::Unauthenticated`] when the root cannot prove it holds
    /// the job's secret; [`JobError::Bootstrap`] when a connection fails.
    pub fn join(launch: &LaunchInfo, deadline: Instant) -> Result<TcpRendezvous> {
        let root_name = launch.root.clone().ok_or_else(|| JobError::Launch {
            why: "SODE_ROOT=host:port is not set: it names where the ranks meet".into(),
        })?;
        let secret = launch.secret.clone().ok_or_else(|| JobError::Launch {
            why: format!("{SECRET_VAR} is not set: the ranks prove to each other with it that they belong to the job; sode-run sets it; by hand, give every rank the same 64 hex digits"),
        })?;
        let root_addr = resolve(&root_name)?;
        // Settings of the listeners every rank makes, checked before any
        // rank waits for another: a value wrong on every node fails every
        // rank at once, rather than rank 0 alone while the others wait
        // for it until the deadline.
        crate::tcp_addr::chosen()?;
        crate::ports::from_env()?;
        if launch.rank == 0 {
            Self::host(launch, secret, &root_name, root_addr, deadline)
        } else {
            Self::visit(launch, secret, &root_name, root_addr, deadline)
        }
    }

    fn host(
        launch: &LaunchInfo,
        secret: Secret,
        root_name: &str,
        root_addr: SocketAddr,
        deadline: Instant,
    ) -> Result<TcpRendezvous> {
        let root = crate::held_ports::take(root_addr)
            .unwrap_or_else(|| TcpListener::bind(root_addr))
            .map_err(|e| JobError::Bootstrap {
                step: format!("listen on SODE_ROOT={root_name}"),
                whom: "the other ranks".into(),
                source: e,
            })?;
        let (listener, mine) = peer_listener(root_addr.ip())?;
        let on_every_interface = local_addr(&listener)?.ip().is_unspecified();
        let size = launch.size;
        let mut joined = Joined {
            listen: vec![None; size],
            links: (0..size).map(|_| None).collect(),
        };
        joined.listen[0] = Some(mine);
        let acceptor = Acceptor {
            listener: &root,
            secret: &secret,
            deadline,
            step: &format!("rendezvous at SODE_ROOT={root_name}"),
            hint: "did they start, with the same SODE_ROOT and SODE_JOB_SECRET?",
            confirmed: false,
        };
        acceptor.run(
            &mut joined,
            |_, _| true,
            |joined, greeted| joined.admit(greeted),
            |joined| format!("ranks {}", joined.missing()),
        )?;
        let listen: Vec<Vec<SocketAddr>> = joined.listen.into_iter().flatten().collect();
        let mut links = BTreeMap::new();
        for (r, link) in joined.links.into_iter().enumerate().skip(1) {
            let mut link = link.ok_or_else(|| JobError::Protocol {
                whom: "the rendezvous".into(),
                why: format!("rank {r}'s link is missing after every rank joined"),
            })?;
            // Tell each rank first the address it reached rank 0 at, which
            // it can route to, then rank 0's others.
            let mut theirs = listen.clone();
            if on_every_interface {
                let here = link
                    .stream()
                    .local_addr()
                    .map_err(io_err("local_addr", "the root"))?;
                prefer(&mut theirs[0], here.ip());
            }
            let body = encode_directory(&theirs)?;
            link.send(&body)
                .map_err(|e| rename(e, &format!("rank {r}")))?;
            links.insert(r, PeerLink::new(r, Box::new(TcpPeer { session: link })));
        }
        Ok(TcpRendezvous {
            mesh: Mesh {
                rank: 0,
                size,
                secret,
                listener,
                listen: Directory::new(listen),
                routes: None,
            },
            steps: Tree::of_links(Place::new(0, size, size.saturating_sub(1)), links)?,
        })
    }

    fn visit(
        launch: &LaunchInfo,
        secret: Secret,
        root_name: &str,
        root_addr: SocketAddr,
        deadline: Instant,
    ) -> Result<TcpRendezvous> {
        let whom = format!("the root at SODE_ROOT={root_name}");
        let (root, listener, listen) = again_if_lost(deadline, "the rendezvous", || {
            Self::greet_root(launch, &secret, root_addr, &whom, deadline)
        })?;
        Ok(TcpRendezvous {
            mesh: Mesh {
                rank: launch.rank,
                size: launch.size,
                secret,
                listener,
                listen: Directory::new(listen),
                routes: None,
            },
            steps: Tree::of_links(
                Place::new(launch.rank, launch.size, launch.size.saturating_sub(1)),
                BTreeMap::from([(0, PeerLink::new(0, Box::new(TcpPeer { session: root })))]),
            )?,
        })
    }

    /// Connects to the root, proves this rank belongs to the job, says
    /// which rank it is and where it listens, and waits for the directory
    /// of every rank's addresses.
    fn greet_root(
        launch: &LaunchInfo,
        secret: &Secret,
        root_addr: SocketAddr,
        whom: &str,
        deadline: Instant,
    ) -> Result<(Session, TcpListener, Vec<Vec<SocketAddr>>)> {
        let s = connect_retry(root_addr, deadline, whom)?;
        let local_ip = s
            .local_addr()
            .map_err(io_err("local_addr", "the root"))?
            .ip();
        keep_alive(&s, true).map_err(io_err("keepalive", whom))?;
        let mut root = Session::connect(s, secret, whom, deadline)?;
        // Authenticated, the root waits for this link until its deadline.
        keep_alive(root.stream(), false).map_err(io_err("keepalive", whom))?;
        let (listener, mine) = peer_listener(local_ip)?;
        let hello = Hello {
            rank: launch.rank,
            size: launch.size,
            listen: mine,
        };
        root.send(&serde_json::to_vec(&hello).map_err(protocol_bug)?)?;
        let listen = decode_directory(&root.recv(deadline)?, launch.size).ok_or_else(|| {
            JobError::Protocol {
                whom: whom.into(),
                why: format!(
                    "its directory does not read as {} ranks' addresses: is every rank running the same sode?",
                    launch.size
                ),
            }
        })?;
        Ok((root, listener, listen))
    }

    /// Where this rank accepts peer links (for tests that knock on it).
    ///
    /// # Errors
    ///
    /// [`JobError::Bootstrap`] when the socket's address cannot be read.
    pub fn peer_listener(&self) -> Result<SocketAddr> {
        local_addr(&self.mesh.listener)
    }
}

/// The ranks that joined the rendezvous so far.
struct Joined {
    listen: Vec<Option<Vec<SocketAddr>>>,
    links: Vec<Option<Session>>,
}

impl Joined {
    fn missing(&self) -> String {
        let r: Vec<String> = (0..self.listen.len())
            .filter(|&r| self.listen[r].is_none())
            .map(|r| r.to_string())
            .collect();
        r.join(", ")
    }

    /// Takes a connection that proved it belongs to the job and said which
    /// rank it is; true once every rank has joined.
    fn admit(&mut self, greeted: Greeted) -> Result<bool> {
        let Greeted {
            mut session,
            first,
            from,
        } = greeted;
        let whom = format!("a rank at {from}");
        let h: Hello = decode(&first, &whom)?;
        let size = self.listen.len();
        let known = h.size == size && h.rank > 0 && h.rank < size;
        if known
            && self.links[h.rank]
                .as_ref()
                .is_some_and(|s| gone(s.stream()))
        {
            // Its first link broke before the directory came, and it
            // joined again (`again_if_lost`): the new link stands.
            tracing::debug!(
                "rank {} joined again from {from}: its first link was lost",
                h.rank
            );
            self.listen[h.rank] = None;
        }
        if !known || self.listen[h.rank].is_some() {
            let state = if h.rank < size && self.listen[h.rank].is_some() {
                "already joined"
            } else {
                "is out of range"
            };
            return Err(JobError::Protocol {
                whom: format!("rank {} at {from}", h.rank),
                why: format!(
                    "it says rank {} of {} but this job has {size} ranks and rank {} {state}: the launcher's ranks are inconsistent",
                    h.rank, h.size, h.rank
                ),
            });
        }
        session.rename(format!("rank {}", h.rank));
        self.listen[h.rank] = Some(h.listen);
        self.links[h.rank] = Some(session);
        Ok(self.missing().is_empty())
    }
}

impl OutOfBand for TcpRendezvous {
    fn rank(&self) -> usize {
        self.mesh.rank
    }

    fn size(&self) -> usize {
        self.mesh.size
    }

    fn allgather(&mut self, mine: &[u8], deadline: Instant) -> Result<Vec<Vec<u8>>> {
        self.steps.allgather(mine, deadline)
    }

    fn step(
        &mut self,
        mine: &[u8],
        deadline: Instant,
        combine: crate::oob::Combine<'_>,
    ) -> Result<crate::oob::Stepped> {
        self.steps.step(mine, deadline, combine)
    }

    fn connect(
        &mut self,
        peers: &BTreeSet<usize>,
        deadline: Instant,
    ) -> Result<BTreeMap<usize, PeerLink>> {
        self.mesh.connect(peers, deadline)
    }

    fn route_through(&mut self, routes: std::sync::Arc<crate::Routes>) {
        self.mesh.routes = Some(routes);
    }
}

impl Mesh {
    pub(crate) fn connect(
        &mut self,
        peers: &BTreeSet<usize>,
        deadline: Instant,
    ) -> Result<BTreeMap<usize, PeerLink>> {
        check_peers(self.rank, self.size, peers)?;
        // The lower rank of a pair connects, the higher accepts.
        let mut links = BTreeMap::new();
        for &p in peers.iter().filter(|&&p| p > self.rank) {
            let what = format!("the link to rank {p}");
            let session = again_if_lost(deadline, &what, || self.dial_peer(p, deadline))?;
            links.insert(p, PeerLink::new(p, Box::new(TcpPeer { session })));
        }
        let expected: BTreeSet<usize> = peers.iter().copied().filter(|&p| p < self.rank).collect();
        if expected.is_empty() {
            return Ok(links);
        }
        let me = self.rank;
        let missing = |links: &BTreeMap<usize, PeerLink>| {
            let m: Vec<String> = expected
                .iter()
                .filter(|p| !links.contains_key(p))
                .map(|p| p.to_string())
                .collect();
            m.join(", ")
        };
        let acceptor = Acceptor {
            listener: &self.listener,
            secret: &self.secret,
            deadline,
            step: &format!("accepting peer links at rank {me}"),
            hint: "do they list this rank as a peer?",
            confirmed: true,
        };
        // A link from a rank this call does not wait for (or has taken
        // already) is another call's: a rank may be a call ahead (dialling
        // its links for the job's steps while this one still takes its
        // health links). Dropped unaccepted, it is dialled again, and the
        // call that names that rank takes it; a rank that never names it
        // leaves its dialler asking whether it is listed.
        let wanted = |links: &BTreeMap<usize, PeerLink>, greeted: &Greeted| match decode::<usize>(
            &greeted.first,
            "a peer",
        ) {
            Ok(who) => expected.contains(&who) && !links.contains_key(&who),
            Err(_) => true,
        };
        acceptor.run(
            &mut links,
            wanted,
            |links, greeted| {
                let Greeted {
                    mut session,
                    first,
                    from,
                } = greeted;
                let who: usize = decode(&first, &format!("a peer at {from}"))?;
                session.rename(format!("rank {who}"));
                links.insert(who, PeerLink::new(who, Box::new(TcpPeer { session })));
                Ok(missing(links).is_empty())
            },
            |links| format!("ranks {}", missing(links)),
        )?;
        Ok(links)
    }
}

/// What an accepting rank answers a peer link it took.
const ACCEPTED: &[u8] = b"accepted";
/// What the dialling rank answers the acceptance: only then does the
/// acceptor count the link, so a link lost before the dialler heard the
/// acceptance (which it then dials again) is never counted in its place.
const CONFIRMED: &[u8] = b"confirmed";

impl Mesh {
    /// Dials rank `p`, proves this rank belongs to the job, says which
    /// rank it is, and waits until `p` has taken the link.
    fn dial_peer(&self, p: usize, deadline: Instant) -> Result<Session> {
        let whom = format!("rank {p}");
        let s = match &self.routes {
            Some(routes) => routes.dial(self.rank, p, &self.listen.addrs(p), deadline, &whom)?,
            None => connect_any(&self.listen.addrs(p), deadline, &whom)?,
        };
        keep_alive(&s, true).map_err(io_err("keepalive", &whom))?;
        let untaken = |e| self.untaken(e, p);
        let mut session = Session::connect(s, &self.secret, &whom, deadline).map_err(untaken)?;
        // Authenticated, `p` waits for this link until its deadline.
        keep_alive(session.stream(), false).map_err(io_err("keepalive", &whom))?;
        session.send(self.rank.to_string().as_bytes())?;
        if session.recv(deadline).map_err(untaken)? != ACCEPTED {
            return Err(JobError::Protocol {
                whom,
                why: "it answered the link with something else than its acceptance".into(),
            });
        }
        session.send(CONFIRMED)?;
        Ok(session)
    }

    /// A dial of rank `p` that reached its listener but that `p` never
    /// answered, with what it likely means: `p` took every link it
    /// expects and takes no more.
    fn untaken(&self, e: JobError, p: usize) -> JobError {
        match e {
            JobError::BootstrapTimeout {
                step, whom, waited, ..
            } => JobError::BootstrapTimeout {
                step,
                whom,
                waited,
                hint: format!(
                    "rank {p} did not take this link: does it list rank {} as a peer? (the two ranks' neighbour lists must agree: every link is named by both its ranks) Else it is stopped, or not making the same call",
                    self.rank
                ),
            },
            other => other,
        }
    }
}

/// A direct, authenticated link to one peer; the kernel closes it when the
/// peer dies.
#[derive(Debug)]
struct TcpPeer {
    session: Session,
}

impl PeerChannel for TcpPeer {
    fn send(&mut self, msg: &[u8]) -> Result<()> {
        self.session.send(msg)
    }

    fn recv(&mut self, deadline: Instant) -> Result<Vec<u8>> {
        self.session.recv(deadline)
    }

    fn closed(&self) -> bool {
        closed(self.session.stream())
    }

    fn arriving_by(&mut self, until: Instant) -> bool {
        closed(self.session.stream()) || self.session.arriving_by(until)
    }

    fn liveness_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        Some(self.session.stream().as_fd())
    }

    fn bound_sends(&mut self, limit: Option<Duration>) -> Result<()> {
        self.session
            .stream()
            .set_write_timeout(limit)
            .map_err(io_err("set_write_timeout", "a peer link"))
    }
}

/// Whether the other end of `stream` closed it or the connection broke.
fn closed(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return true;
    }
    let mut b = [0u8; 1];
    let closed = match stream.peek(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != ErrorKind::WouldBlock && e.kind() != ErrorKind::Interrupted,
    };
    let _ = stream.set_nonblocking(false);
    closed
}

/// How long a rank that joins the rendezvous a second time may take to
/// show its first link closed: its close may still be on the way.
const REJOIN_GRACE: Duration = Duration::from_millis(500);

/// Whether `stream`, the link of a rank that joined again, is closed, or
/// closes within [`REJOIN_GRACE`]: then the rank lost it and dialled
/// again; else two processes claim one rank.
fn gone(stream: &TcpStream) -> bool {
    let until = Instant::now() + REJOIN_GRACE;
    let mut backoff = Backoff::setup(Duration::from_millis(1));
    while !closed(stream) {
        if Instant::now() >= until {
            return false;
        }
        backoff.snooze();
    }
    true
}

/// A connection that proved it belongs to the job, with its first message.
struct Greeted {
    session: Session,
    first: Vec<u8>,
    from: SocketAddr,
}

/// Most handshakes under way at once. A stranger costs a thread and a
/// socket for at most [`HANDSHAKE_TIMEOUT`](crate::auth::HANDSHAKE_TIMEOUT);
/// past this many, each new connection evicts the oldest under way, so the
/// accept loop never stops and a flood of silent connections cannot keep a
/// rank of the job, whose handshake takes a few round trips, from being
/// heard.
const MAX_HANDSHAKES: usize = 1024;

/// Stack of a handshake's thread: the handshake and the first message's
/// parse need little (the message itself is on the heap).
const HANDSHAKE_STACK: usize = 256 << 10;

/// A handshake under way: its number, and the connection, to cut short.
struct UnderWay {
    id: u64,
    stream: TcpStream,
}

/// The one accept loop of the bootstrap.
struct Acceptor<'a> {
    listener: &'a TcpListener,
    secret: &'a Secret,
    deadline: Instant,
    step: &'a str,
    hint: &'a str,
    /// Whether each connection, once it sent its first message, is
    /// answered [`ACCEPTED`] and must answer [`CONFIRMED`] before it is
    /// admitted (peer links), all on its handshake's thread.
    confirmed: bool,
}

impl Acceptor<'_> {
    /// Accepts connections and runs each handshake on a thread of its own,
    /// so a silent or slow stranger delays nobody; drops unaccepted each
    /// connection that proved itself (with its first message) but is not
    /// `wanted` now, and hands the others to `admit`, which records
    /// it in `state` and says whether all have arrived. Fails at the
    /// deadline naming who is `missing`.
    fn run<S>(
        &self,
        state: &mut S,
        wanted: impl Fn(&S, &Greeted) -> bool,
        mut admit: impl FnMut(&mut S, Greeted) -> Result<bool>,
        missing: impl Fn(&S) -> String,
    ) -> Result<()> {
        let began = Instant::now();
        self.listener
            .set_nonblocking(true)
            .map_err(io_err("set_nonblocking", "the listener"))?;
        let (done_tx, done_rx) = std::sync::mpsc::channel::<(u64, Option<Greeted>)>();
        let mut under_way: std::collections::VecDeque<UnderWay> = Default::default();
        let mut next_id = 0u64;
        let mut backoff = Backoff::setup(Duration::from_millis(1));
        // It looks every millisecond or so: time stopped does not count.
        let mut deadline = crate::timeout::Deadline::new(self.deadline);
        loop {
            while let Ok((id, result)) = done_rx.try_recv() {
                under_way.retain(|u| u.id != id);
                backoff.reset();
                let Some(greeted) = result.filter(|g| {
                    let want = wanted(state, g);
                    if !want {
                        tracing::debug!("a link from {} for another call: dropped unaccepted, to be dialled again", g.from);
                    }
                    want
                }) else {
                    continue;
                };
                let Some(greeted) = self.accepted(greeted) else {
                    continue;
                };
                if admit(state, greeted)? {
                    // Connections greeted meanwhile are dropped unaccepted:
                    // their diallers, told nothing, dial again, and a
                    // later acceptor takes them (the same peer's next link,
                    // say, dialled as soon as this one was accepted).
                    return Ok(());
                }
            }
            if let Some((s, from)) = self.accept_one()? {
                if under_way.len() >= MAX_HANDSHAKES {
                    if let Some(oldest) = under_way.pop_front() {
                        // Its thread's read fails at once and it ends.
                        let _ = oldest.stream.shutdown(std::net::Shutdown::Both);
                    }
                }
                next_id += 1;
                self.start_handshake(next_id, s, from, &done_tx, &mut under_way);
                continue;
            }
            if deadline.passed() {
                return Err(JobError::BootstrapTimeout {
                    step: self.step.into(),
                    whom: missing(state),
                    waited: began.elapsed().saturating_sub(deadline.stopped()),
                    hint: format!("they did not connect; {}", self.hint),
                });
            }
            backoff.snooze();
        }
    }

    /// Runs connection `id`'s handshake on a thread of its own, reporting
    /// on `done`; a connection that cannot get a thread is dropped.
    fn start_handshake(
        &self,
        id: u64,
        s: TcpStream,
        from: SocketAddr,
        done: &std::sync::mpsc::Sender<(u64, Option<Greeted>)>,
        under_way: &mut std::collections::VecDeque<UnderWay>,
    ) {
        let Ok(stream) = s.try_clone() else {
            tracing::warn!("dropped a connection from {from}: its socket could not be shared");
            return;
        };
        let (secret, tx, deadline) = (self.secret.clone(), done.clone(), self.deadline);
        let spawned = std::thread::Builder::new()
            .name("sode-handshake".into())
            .stack_size(HANDSHAKE_STACK)
            // The receiver is gone once every rank arrived.
            .spawn(move || drop(tx.send((id, greet(s, from, &secret, deadline)))));
        match spawned {
            Ok(_) => under_way.push_back(UnderWay { id, stream }),
            Err(e) => tracing::warn!(
                "dropped a connection from {from}: no thread for its handshake ({e})"
            ),
        }
    }

    /// `greeted`, its link accepted when the acceptor confirms links: only
    /// a link about to be counted is, so that a dialler never holds one
    /// that no acceptor took. `None` (said once) when the dialler does not
    /// confirm by the deadline.
    fn accepted(&self, mut greeted: Greeted) -> Option<Greeted> {
        if !self.confirmed {
            return Some(greeted);
        }
        let whom = format!("a connection from {}", greeted.from);
        let confirmed = greeted.session.send(ACCEPTED).and_then(|()| {
            match greeted.session.recv(self.deadline)? {
                c if c == CONFIRMED => Ok(()),
                _ => Err(JobError::Protocol {
                    whom,
                    why: "it answered the acceptance with something else than its confirmation"
                        .into(),
                }),
            }
        });
        match confirmed {
            Ok(()) => Some(greeted),
            Err(e) => {
                tracing::warn!("dropped: {}", crate::diag::chain(&e));
                None
            }
        }
    }

    /// One connection if one is waiting.
    fn accept_one(&self) -> Result<Option<(TcpStream, SocketAddr)>> {
        match self.listener.accept() {
            Ok((s, from)) => {
                s.set_nonblocking(false)
                    .map_err(io_err("set_nonblocking", "a new connection"))?;
                let _ = s.set_nodelay(true);
                Ok(Some((s, from)))
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                Ok(None)
            }
            // Reset before it was accepted: nothing to do.
            Err(e) if e.kind() == ErrorKind::ConnectionAborted => Ok(None),
            Err(e) => Err(io_err("accept", self.step)(e)),
        }
    }
}

/// The handshake and first message of a connection the listener took, or
/// `None` (the connection dropped, and why said once) when it does not
/// belong to the job, sends garbage, stays silent or goes away.
///
/// A stranger has [`HANDSHAKE_TIMEOUT`](crate::auth::HANDSHAKE_TIMEOUT) to
/// prove itself. A connection that has is a rank of the job, whose first
/// message is waited for until `deadline`: dropping it sooner, its
/// messages delayed by lost packets, would make its dialler start over.
fn greet(s: TcpStream, from: SocketAddr, secret: &Secret, deadline: Instant) -> Option<Greeted> {
    let whom = format!("a connection from {from}");
    let result = Session::accept(s, secret, &whom).and_then(|mut session| {
        let first = session.recv(deadline)?;
        Ok(Greeted {
            session,
            first,
            from,
        })
    });
    match result {
        Ok(g) => Some(g),
        Err(e) => {
            tracing::warn!("dropped: {}", crate::diag::chain(&e));
            None
        }
    }
}

fn rename(e: JobError, whom: &str) -> JobError {
    match e {
        JobError::Bootstrap { step, source, .. } => JobError::Bootstrap {
            step,
            whom: whom.into(),
            source,
        },
        other => other,
    }
}

fn protocol_bug(e: serde_json::Error) -> JobError {
    JobError::Protocol {
        whom: "this rank".into(),
        why: format!("a setup message does not serialise: {e}"),
    }
}

fn local_addr(l: &TcpListener) -> Result<SocketAddr> {
    l.local_addr().map_err(io_err("local_addr", "this rank"))
}

fn resolve(name: &str) -> Result<SocketAddr> {
    name.to_socket_addrs()
        .map_err(|e| JobError::InvalidSetting {
            name: "SODE_ROOT".into(),
            value: name.into(),
            why: format!("expected host:port ({e})"),
        })?
        .next()
        .ok_or_else(|| JobError::InvalidSetting {
            name: "SODE_ROOT".into(),
            value: name.into(),
            why: "the host name resolves to no address".into(),
        })
}

/// The listener for peer links, on every interface (or the address in
/// `SODE_TCP_ADDR`), and the addresses to advertise: `reached` (the address
/// this rank reached rank 0 from) first.
fn peer_listener(reached: IpAddr) -> Result<(TcpListener, Vec<SocketAddr>)> {
    let (listener, mut addrs) = crate::streams::listen()?;
    if local_addr(&listener)?.ip().is_unspecified() {
        prefer(&mut addrs, reached);
    }
    Ok((listener, addrs))
}

/// Moves (or adds) `ip`, with the port of the others, to the front of
/// `addrs` unless it names no one address (unspecified).
fn prefer(addrs: &mut Vec<SocketAddr>, ip: IpAddr) {
    let Some(port) = addrs.first().map(SocketAddr::port) else {
        return;
    };
    if ip.is_unspecified() {
        return;
    }
    let a = SocketAddr::new(ip, port);
    addrs.retain(|&x| x != a);
    addrs.insert(0, a);
}

fn io_err<'a>(step: &'a str, whom: &'a str) -> impl Fn(std::io::Error) -> JobError + 'a {
    move |e| JobError::Bootstrap {
        step: step.into(),
        whom: whom.into(),
        source: e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_send_to_a_peer_that_never_reads_fails_in_time() {
        let secret = Secret::random().unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let theirs = secret.clone();
        let acceptor = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            Session::accept(s, &theirs, "connector").unwrap()
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        let s = TcpStream::connect(addr).unwrap();
        let session = Session::connect(s, &secret, "acceptor", deadline).unwrap();
        // The other end is kept open and never read.
        let _silent = acceptor.join().unwrap();
        let mut link = PeerLink::new(1, Box::new(TcpPeer { session }));
        link.bound_sends(Some(Duration::from_millis(200))).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let block = vec![7u8; 64 << 10];
            let mut sent = 0usize;
            let began = Instant::now();
            let result = loop {
                let t0 = Instant::now();
                match link.send(&block) {
                    Ok(()) => sent += 1,
                    Err(e) => break (sent, t0.elapsed(), e.to_string()),
                }
                if began.elapsed() > Duration::from_secs(30) {
                    break (sent, Duration::ZERO, "never blocked".into());
                }
            };
            let _ = tx.send(result);
        });
        let (sent, last, why) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("a send blocked past its bound");
        assert!(sent > 0 && why != "never blocked", "{sent} sent: {why}");
        assert!(
            last >= Duration::from_millis(150) && last < Duration::from_secs(5),
            "the failing send took {last:?}: {why}"
        );
    }

    /// Rank `rank` of two whose peer listeners are `listeners`.
    fn mesh(rank: usize, listeners: &[&TcpListener], secret: &Secret) -> Mesh {
        Mesh {
            rank,
            size: 2,
            secret: secret.clone(),
            listener: listeners[rank].try_clone().unwrap(),
            listen: Directory::new(listeners.iter().map(|l| vec![l.local_addr().unwrap()])),
            routes: None,
        }
    }

    #[test]
    fn a_peer_link_lost_before_its_acceptance_is_dialled_again_and_taken() {
        let secret = Secret::random().unwrap();
        let ls = [0, 1].map(|_| TcpListener::bind("127.0.0.1:0").unwrap());
        let listeners = [&ls[0], &ls[1]];
        let (mut m0, mut m1) = (mesh(0, &listeners, &secret), mesh(1, &listeners, &secret));
        let deadline = Instant::now() + Duration::from_secs(10);
        let acceptor = std::thread::spawn(move || {
            let mut links = m1.connect(&BTreeSet::from([0]), deadline)?;
            let link = links.get_mut(&0).expect("a link to rank 0");
            link.send(&"from 1")?;
            link.recv::<String>(deadline)
        });
        // Rank 0's first link says who it is, then goes away before it
        // hears the acceptance: a link lost on the way.
        let s = TcpStream::connect(ls[1].local_addr().unwrap()).unwrap();
        let mut lost = Session::connect(s, &secret, "rank 1", deadline).unwrap();
        lost.send(b"0").unwrap();
        drop(lost);
        // Then it dials again, as `again_if_lost` does.
        let mut links = m0.connect(&BTreeSet::from([1]), deadline).unwrap();
        let link = links.get_mut(&1).expect("a link to rank 1");
        assert_eq!(link.recv::<String>(deadline).unwrap(), "from 1");
        link.send(&"from 0").unwrap();
        let got = acceptor.join().unwrap();
        assert_eq!(
            got.unwrap(),
            "from 0",
            "rank 1 took the lost link in place of the second"
        );
    }

    #[test]
    fn a_peer_link_slower_than_a_stranger_may_be_is_still_taken() {
        use crate::auth::HANDSHAKE_TIMEOUT;
        // A link that proved it belongs to the job but whose next message
        // comes after HANDSHAKE_TIMEOUT (packets lost and sent again on a
        // lossy network) is a rank of the job: dropping it then could
        // leave the dialler with a link the acceptor does not count.
        let secret = Secret::random().unwrap();
        let ls = [0, 1].map(|_| TcpListener::bind("127.0.0.1:0").unwrap());
        let listeners = [&ls[0], &ls[1]];
        let mut m1 = mesh(1, &listeners, &secret);
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT * 3;
        let acceptor = std::thread::spawn(move || {
            let mut links = m1.connect(&BTreeSet::from([0]), deadline)?;
            let link = links.get_mut(&0).expect("a link to rank 0");
            link.recv::<String>(deadline)
        });
        let s = TcpStream::connect(ls[1].local_addr().unwrap()).unwrap();
        let mut slow = Session::connect(s, &secret, "rank 1", deadline).unwrap();
        std::thread::sleep(HANDSHAKE_TIMEOUT + Duration::from_millis(500));
        slow.send(b"0").unwrap();
        let answer = slow.recv(deadline);
        assert!(
            matches!(&answer, Ok(a) if a == ACCEPTED),
            "the slow link was not accepted: {answer:?}"
        );
        slow.send(CONFIRMED).unwrap();
        let mut link = PeerLink::new(1, Box::new(TcpPeer { session: slow }));
        link.send(&"from 0").unwrap();
        let got = acceptor.join().unwrap();
        assert_eq!(got.unwrap(), "from 0");
    }

    #[test]
    fn a_rank_whose_rendezvous_link_broke_joins_again() {
        let port = crate::free_port().unwrap();
        let secret = Secret::from_hex(&"4e".repeat(32)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let join = |rank: usize| {
            let launch = LaunchInfo::loopback(rank, 3, port, secret.clone());
            std::thread::spawn(move || TcpRendezvous::join(&launch, deadline).map(|r| r.mesh.rank))
        };
        let root = join(0);
        // Rank 1's first link says hello, then breaks before the
        // directory comes (rank 2 has not joined yet).
        let s = connect_retry(SocketAddr::from(([127, 0, 0, 1], port)), deadline, "root").unwrap();
        let mut first = Session::connect(s, &secret, "the root", deadline).unwrap();
        let hello = Hello {
            rank: 1,
            size: 3,
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 9))],
        };
        first.send(&serde_json::to_vec(&hello).unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        drop(first);
        let one = join(1);
        // Rank 2 comes last, so the root still waits when rank 1 joins
        // again (a link lost once every rank is in is not covered).
        std::thread::sleep(Duration::from_secs(1));
        let two = join(2);
        for (rank, h) in [root, one, two].into_iter().enumerate() {
            let got = h.join().unwrap();
            assert!(matches!(got, Ok(r) if r == rank), "rank {rank}: {got:?}");
        }
    }

    #[test]
    fn two_processes_that_claim_one_rank_are_still_named() {
        let port = crate::free_port().unwrap();
        let secret = Secret::from_hex(&"4f".repeat(32)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let launch = LaunchInfo::loopback(0, 3, port, secret.clone());
        let root = std::thread::spawn(move || TcpRendezvous::join(&launch, deadline).err());
        let twins: Vec<_> = (0..2)
            .map(|_| {
                let launch = LaunchInfo::loopback(1, 3, port, secret.clone());
                std::thread::spawn(move || {
                    let _ = TcpRendezvous::join(&launch, Instant::now() + Duration::from_secs(5));
                })
            })
            .collect();
        let told = root
            .join()
            .unwrap()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(told.contains("rank 1 already joined"), "{told:?}");
        for t in twins {
            t.join().unwrap();
        }
    }

    #[test]
    fn a_root_bound_to_every_interface_is_advertised_at_a_routable_address() {
        let port = crate::free_port().unwrap();
        let secret = Secret::from_hex(&"3c".repeat(32)).unwrap();
        let ranks: Vec<_> = (0..3)
            .map(|rank| {
                let host = if rank == 0 { "0.0.0.0" } else { "127.0.0.1" };
                let launch = LaunchInfo {
                    root: Some(format!("{host}:{port}")),
                    ..LaunchInfo::loopback(rank, 3, port, secret.clone())
                };
                std::thread::spawn(move || {
                    TcpRendezvous::join(&launch, Instant::now() + Duration::from_secs(20)).unwrap()
                })
            })
            .collect();
        for (rank, h) in ranks.into_iter().enumerate() {
            let r = h.join().unwrap();
            if rank > 0 {
                assert_eq!(
                    r.mesh.listen.addrs(0)[0].ip(),
                    IpAddr::from([127, 0, 0, 1]),
                    "rank {rank}"
                );
            }
        }
    }
}
