//! The TCP rendezvous: ranks meet rank 0 at `SODE_ROOT`, learn every rank's
//! listening address, then open direct links between the pairs that need
//! them, so a peer's keys reach only that peer.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::backoff::Backoff;
use crate::error::{JobError, Result};
use crate::launch::LaunchInfo;
use crate::oob::{check_peers, decode, OutOfBand, PeerChannel, PeerLink};

/// Setup messages are at most this long.
const MAX_MESSAGE: usize = 64 << 20;

#[derive(Debug, Serialize, Deserialize)]
struct Hello {
    rank: usize,
    size: usize,
    listen: SocketAddr,
}

/// Rank 0 keeps a link to every rank, the others one to rank 0.
#[derive(Debug)]
enum Star {
    Root(Vec<Option<TcpStream>>),
    Leaf(TcpStream),
}

/// The TCP bootstrap: a star through rank 0 for collectives, direct links
/// between peers for their keys.
#[derive(Debug)]
pub struct TcpRendezvous {
    rank: usize,
    size: usize,
    /// Where this rank accepts peer links.
    listener: TcpListener,
    /// Every rank's peer listener.
    listen: Vec<SocketAddr>,
    star: Star,
}

impl TcpRendezvous {
    /// Meets the other ranks at `launch.root`; collective over the job.
    pub fn join(launch: &LaunchInfo, deadline: Instant) -> Result<TcpRendezvous> {
        let root_name = launch.root.clone().ok_or_else(|| JobError::Launch {
            why: "SODE_ROOT=host:port is not set: it names where the ranks meet".into(),
        })?;
        let root_addr = resolve(&root_name)?;
        if launch.rank == 0 {
            Self::host(launch, &root_name, root_addr, deadline)
        } else {
            Self::visit(launch, &root_name, root_addr, deadline)
        }
    }

    fn host(
        launch: &LaunchInfo,
        root_name: &str,
        root_addr: SocketAddr,
        deadline: Instant,
    ) -> Result<TcpRendezvous> {
        let root = TcpListener::bind(root_addr).map_err(|e| JobError::Bootstrap {
            step: format!("listen on SODE_ROOT={root_name}"),
            whom: "the other ranks".into(),
            source: e,
        })?;
        let listener = bind_peer_listener(root_addr.ip())?;
        let size = launch.size;
        let mut listen = vec![None; size];
        listen[0] = Some(local_addr(&listener)?);
        let mut links: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
        let step = format!("rendezvous at SODE_ROOT={root_name}");
        let missing = |listen: &Vec<Option<SocketAddr>>| ranks_where(listen, Option::is_none);
        accept_until(
            &root,
            deadline,
            &step,
            &mut listen,
            |listen, mut s, from| {
                let h: Hello = recv_typed(&mut s, deadline, &format!("a rank at {from}"))?;
                if h.size != size || h.rank == 0 || h.rank >= size || listen[h.rank].is_some() {
                    let state = if h.rank < size && listen[h.rank].is_some() {
                        "already joined"
                    } else {
                        "is out of range"
                    };
                    return Err(JobError::Protocol {
                    whom: format!("rank {} at {from}", h.rank),
                    why: format!(
                        "it says rank {} of {} but this job has {size} ranks and rank {} {state}: two jobs share SODE_ROOT, or the launcher's ranks are inconsistent",
                        h.rank, h.size, h.rank
                    ),
                });
                }
                listen[h.rank] = Some(h.listen);
                links[h.rank] = Some(s);
                Ok(missing(listen).is_empty())
            },
            |listen| format!("ranks {}", missing(listen)),
            "did they start, with the same SODE_ROOT?",
        )?;
        let listen: Vec<SocketAddr> = listen.into_iter().flatten().collect();
        for (r, link) in links.iter_mut().enumerate().skip(1) {
            let body = serde_json::to_vec(&listen).map_err(protocol_bug)?;
            send_frame(joined(link)?, &body, &format!("rank {r}"))?;
        }
        Ok(TcpRendezvous {
            rank: 0,
            size,
            listener,
            listen,
            star: Star::Root(links),
        })
    }

    fn visit(
        launch: &LaunchInfo,
        root_name: &str,
        root_addr: SocketAddr,
        deadline: Instant,
    ) -> Result<TcpRendezvous> {
        let whom = format!("the root at SODE_ROOT={root_name}");
        let mut s = connect_retry(root_addr, deadline, &whom)?;
        let local_ip = s
            .local_addr()
            .map_err(io_err("local_addr", "the root"))?
            .ip();
        let listener = bind_peer_listener(local_ip)?;
        let hello = Hello {
            rank: launch.rank,
            size: launch.size,
            listen: local_addr(&listener)?,
        };
        let body = serde_json::to_vec(&hello).map_err(protocol_bug)?;
        send_frame(&mut s, &body, "the root")?;
        let listen: Vec<SocketAddr> = recv_typed(&mut s, deadline, "the root")?;
        if listen.len() != launch.size {
            return Err(JobError::Protocol {
                whom: "the root".into(),
                why: "its directory does not list every rank".into(),
            });
        }
        Ok(TcpRendezvous {
            rank: launch.rank,
            size: launch.size,
            listener,
            listen,
            star: Star::Leaf(s),
        })
    }
}

impl OutOfBand for TcpRendezvous {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn allgather(&mut self, mine: &[u8], deadline: Instant) -> Result<Vec<Vec<u8>>> {
        match &mut self.star {
            Star::Leaf(root) => {
                send_frame(root, mine, "the root")?;
                let all = recv_frame(root, deadline, "the root")?;
                let all: Vec<Vec<u8>> = decode(&all, "the root")?;
                if all.len() != self.size {
                    return Err(JobError::Protocol {
                        whom: "the root".into(),
                        why: format!(
                            "an allgather of {} ranks in a job of {}",
                            all.len(),
                            self.size
                        ),
                    });
                }
                Ok(all)
            }
            Star::Root(links) => {
                let mut all = vec![mine.to_vec()];
                for (r, link) in links.iter_mut().enumerate().skip(1) {
                    all.push(recv_frame(joined(link)?, deadline, &format!("rank {r}"))?);
                }
                let body = serde_json::to_vec(&all).map_err(protocol_bug)?;
                for (r, link) in links.iter_mut().enumerate().skip(1) {
                    send_frame(joined(link)?, &body, &format!("rank {r}"))?;
                }
                Ok(all)
            }
        }
    }

    fn connect(
        &mut self,
        peers: &BTreeSet<usize>,
        deadline: Instant,
    ) -> Result<BTreeMap<usize, PeerLink>> {
        check_peers(self.rank, self.size, peers)?;
        // The lower rank of a pair connects, the higher accepts.
        let mut links = BTreeMap::new();
        for &p in peers.iter().filter(|&&p| p > self.rank) {
            let mut s = connect_retry(self.listen[p], deadline, &format!("rank {p}"))?;
            send_frame(
                &mut s,
                self.rank.to_string().as_bytes(),
                &format!("rank {p}"),
            )?;
            links.insert(
                p,
                PeerLink::new(p, Box::new(TcpPeer { peer: p, stream: s })),
            );
        }
        let expected: BTreeSet<usize> = peers.iter().copied().filter(|&p| p < self.rank).collect();
        if expected.is_empty() {
            return Ok(links);
        }
        let me = self.rank;
        let step = format!("accepting peer links at rank {me}");
        let missing = |links: &BTreeMap<usize, PeerLink>| {
            let m: Vec<String> = expected
                .iter()
                .filter(|p| !links.contains_key(p))
                .map(|p| p.to_string())
                .collect();
            m.join(", ")
        };
        accept_until(
            &self.listener,
            deadline,
            &step,
            &mut links,
            |links, mut s, from| {
                let who: usize = recv_typed(&mut s, deadline, &format!("a peer at {from}"))?;
                if !expected.contains(&who) || links.contains_key(&who) {
                    return Err(JobError::Protocol {
                    whom: format!("rank {who}"),
                    why: format!(
                        "it connected to rank {me} but is not among its peers {peers:?}: the neighbour lists of the two ranks disagree"
                    ),
                });
                }
                links.insert(
                    who,
                    PeerLink::new(
                        who,
                        Box::new(TcpPeer {
                            peer: who,
                            stream: s,
                        }),
                    ),
                );
                Ok(missing(links).is_empty())
            },
            |links| format!("ranks {}", missing(links)),
            "do they list this rank as a peer?",
        )?;
        Ok(links)
    }
}

/// A direct link to one peer; the kernel closes it when the peer dies.
#[derive(Debug)]
struct TcpPeer {
    peer: usize,
    stream: TcpStream,
}

impl PeerChannel for TcpPeer {
    fn send(&mut self, msg: &[u8]) -> Result<()> {
        send_frame(&mut self.stream, msg, &format!("rank {}", self.peer))
    }

    fn recv(&mut self, deadline: Instant) -> Result<Vec<u8>> {
        recv_frame(&mut self.stream, deadline, &format!("rank {}", self.peer))
    }

    fn closed(&self) -> bool {
        if self.stream.set_nonblocking(true).is_err() {
            return true;
        }
        let mut b = [0u8; 1];
        let closed = match self.stream.peek(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() != ErrorKind::WouldBlock && e.kind() != ErrorKind::Interrupted,
        };
        let _ = self.stream.set_nonblocking(false);
        closed
    }
}

/// The one accept loop: hands each connection to `admit`, which records it
/// in `state` and says whether all have arrived, or fails at `deadline`
/// naming who is `missing`.
fn accept_until<S>(
    listener: &TcpListener,
    deadline: Instant,
    step: &str,
    state: &mut S,
    mut admit: impl FnMut(&mut S, TcpStream, SocketAddr) -> Result<bool>,
    missing: impl Fn(&S) -> String,
    hint: &str,
) -> Result<()> {
    let began = Instant::now();
    listener
        .set_nonblocking(true)
        .map_err(io_err("set_nonblocking", "the listener"))?;
    let mut backoff = Backoff::setup(Duration::from_millis(1));
    loop {
        match listener.accept() {
            Ok((s, from)) => {
                s.set_nonblocking(false)
                    .map_err(io_err("set_nonblocking", "a new connection"))?;
                let _ = s.set_nodelay(true);
                if admit(state, s, from)? {
                    return Ok(());
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                if Instant::now() >= deadline {
                    return Err(JobError::BootstrapTimeout {
                        step: step.into(),
                        whom: missing(state),
                        waited: began.elapsed(),
                        hint: format!("they did not connect; {hint}"),
                    });
                }
                backoff.snooze();
            }
            Err(e) => return Err(io_err("accept", step)(e)),
        }
    }
}

fn ranks_where(
    listen: &[Option<SocketAddr>],
    pred: impl Fn(&Option<SocketAddr>) -> bool,
) -> String {
    let r: Vec<String> = (0..listen.len())
        .filter(|&r| pred(&listen[r]))
        .map(|r| r.to_string())
        .collect();
    r.join(", ")
}

fn joined(link: &mut Option<TcpStream>) -> Result<&mut TcpStream> {
    link.as_mut().ok_or_else(|| JobError::Protocol {
        whom: "the rendezvous".into(),
        why: "a rank's link is missing after every rank joined".into(),
    })
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

fn bind_peer_listener(ip: std::net::IpAddr) -> Result<TcpListener> {
    TcpListener::bind((ip, 0)).map_err(|e| JobError::Bootstrap {
        step: format!("listen on {ip}"),
        whom: "peers".into(),
        source: e,
    })
}

fn connect_retry(addr: SocketAddr, deadline: Instant, whom: &str) -> Result<TcpStream> {
    let mut backoff = Backoff::setup(Duration::from_millis(5));
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let attempt = left
            .max(Duration::from_millis(10))
            .min(Duration::from_secs(2));
        match TcpStream::connect_timeout(&addr, attempt) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            // The other side may not listen yet: retry until the deadline.
            Err(_) if Instant::now() < deadline => backoff.snooze(),
            Err(e) => {
                return Err(JobError::Bootstrap {
                    step: format!("connect to {addr}"),
                    whom: whom.into(),
                    source: e,
                })
            }
        }
    }
}

fn io_err<'a>(step: &'a str, whom: &'a str) -> impl Fn(std::io::Error) -> JobError + 'a {
    move |e| JobError::Bootstrap {
        step: step.into(),
        whom: whom.into(),
        source: e,
    }
}

/// Frames are a little-endian u32 length and that many bytes.
fn send_frame(s: &mut TcpStream, body: &[u8], whom: &str) -> Result<()> {
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&l| l as usize <= MAX_MESSAGE)
        .ok_or_else(|| JobError::Protocol {
            whom: whom.into(),
            why: format!(
                "a {}-byte setup message (the limit is {MAX_MESSAGE})",
                body.len()
            ),
        })?;
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(body);
    s.write_all(&frame).map_err(|e| JobError::Bootstrap {
        step: "send".into(),
        whom: whom.into(),
        source: e,
    })
}

fn recv_typed<T: for<'de> Deserialize<'de>>(
    s: &mut TcpStream,
    deadline: Instant,
    whom: &str,
) -> Result<T> {
    let body = recv_frame(s, deadline, whom)?;
    // The peer-link greeting is a bare rank number.
    decode(&body, whom)
}

fn recv_frame(s: &mut TcpStream, deadline: Instant, whom: &str) -> Result<Vec<u8>> {
    let mut len = [0u8; 4];
    read_exact_by(s, &mut len, deadline, whom)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_MESSAGE {
        return Err(JobError::Protocol {
            whom: whom.into(),
            why: format!("a {len}-byte message (the limit is {MAX_MESSAGE})"),
        });
    }
    let mut body = vec![0u8; len];
    read_exact_by(s, &mut body, deadline, whom)?;
    Ok(body)
}

fn read_exact_by(
    s: &mut TcpStream,
    mut buf: &mut [u8],
    deadline: Instant,
    whom: &str,
) -> Result<()> {
    let began = Instant::now();
    while !buf.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(JobError::BootstrapTimeout {
                step: "receive".into(),
                whom: whom.into(),
                waited: began.elapsed(),
                hint: "no message before the deadline".into(),
            });
        }
        s.set_read_timeout(Some(left))
            .map_err(io_err("set_read_timeout", whom))?;
        match s.read(buf) {
            Ok(0) => {
                return Err(JobError::Bootstrap {
                    step: "receive".into(),
                    whom: whom.into(),
                    source: std::io::Error::new(
                        ErrorKind::UnexpectedEof,
                        "connection closed (the process exited or died)",
                    ),
                })
            }
            Ok(n) => buf = &mut buf[n..],
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) => {
                return Err(JobError::Bootstrap {
                    step: "receive".into(),
                    whom: whom.into(),
                    source: e,
                })
            }
        }
    }
    Ok(())
}
