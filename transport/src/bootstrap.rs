//! Bootstrap over TCP: rank and size from the launcher's environment, a
//! rendezvous at `SODE_ROOT`, then direct connections between neighbours.
//!
//! The root only learns each rank's node identity and listening address.
//! Queue-pair numbers and rkeys travel over the direct connection between
//! the two ranks concerned, so a window's rkey reaches only the peers that
//! write into it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Result, TransportError};

/// Where this process stands in the job, as the launcher said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchInfo {
    /// This process's rank, `0..size`.
    pub rank: usize,
    /// Number of processes in the job.
    pub size: usize,
    /// The rendezvous address (`SODE_ROOT`), needed when `size > 1`.
    pub root: Option<String>,
    /// The variables the rank and size came from.
    pub source: &'static str,
}

const RANK_VARS: [(&str, &str); 4] = [
    ("SODE_RANK", "SODE_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
];

impl LaunchInfo {
    /// Reads the rank and size from `SODE_RANK`/`SODE_SIZE`, Slurm
    /// (`SLURM_PROCID`/`SLURM_NTASKS`), Open MPI
    /// (`OMPI_COMM_WORLD_RANK`/`_SIZE`) or PMI (`PMI_RANK`/`PMI_SIZE`), the
    /// first pair present, and the rendezvous from `SODE_ROOT=host:port`.
    pub fn from_env() -> Result<LaunchInfo> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// As [`LaunchInfo::from_env`], reading variables through `get`.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<LaunchInfo> {
        let parse = |name: &str, v: String| {
            v.trim()
                .parse::<usize>()
                .map_err(|_| TransportError::InvalidSetting {
                    name: name.into(),
                    value: v,
                    why: "expected a non-negative integer".into(),
                })
        };
        for (rank_var, size_var) in RANK_VARS {
            let Some(rank) = get(rank_var) else { continue };
            let Some(size) = get(size_var) else {
                return Err(TransportError::Launch {
                    why: format!("{rank_var} is set but {size_var} is not"),
                });
            };
            let (rank, size) = (parse(rank_var, rank)?, parse(size_var, size)?);
            if size == 0 || rank >= size {
                return Err(TransportError::Launch {
                    why: format!("{rank_var}={rank} is not below {size_var}={size}"),
                });
            }
            let root = get("SODE_ROOT").filter(|r| !r.trim().is_empty());
            if size > 1 && root.is_none() {
                return Err(TransportError::Launch {
                    why: "SODE_ROOT=host:port is not set: it names where the ranks meet (rank 0 listens there); sode-run sets it".into(),
                });
            }
            return Ok(LaunchInfo {
                rank,
                size,
                root,
                source: rank_var,
            });
        }
        Err(TransportError::Launch {
            why: "no rank in the environment (SODE_RANK/SODE_SIZE, SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/_SIZE or PMI_RANK/PMI_SIZE): start the ranks with sode-run -n N or a launcher".into(),
        })
    }
}

/// Which machine a rank runs on: ranks with equal identities share memory.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeId {
    /// The host name.
    pub hostname: String,
    /// The kernel's boot id (tells apart containers or VMs with one name).
    pub boot_id: String,
}

impl NodeId {
    /// This machine's identity.
    pub fn local() -> NodeId {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let hostname = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| read("/proc/sys/kernel/hostname"));
        NodeId {
            hostname,
            boot_id: read("/proc/sys/kernel/random/boot_id"),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Hello {
    rank: usize,
    size: usize,
    node: NodeId,
    listen: SocketAddr,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Directory {
    nodes: Vec<NodeId>,
    listen: Vec<SocketAddr>,
}

/// The job: every rank's node and bootstrap address, and the connection to
/// the root used for barriers.
#[derive(Debug)]
pub struct World {
    rank: usize,
    size: usize,
    dir: Directory,
    listener: Option<TcpListener>,
    /// Rank 0: one stream per other rank (index = rank). Others: the root.
    root_links: Vec<Option<TcpStream>>,
}

impl World {
    /// Reads the launcher's environment and meets the other ranks at
    /// `SODE_ROOT`; collective over the whole job.
    pub fn init(timeout: Duration) -> Result<World> {
        Self::init_with(&LaunchInfo::from_env()?, timeout)
    }

    /// A job of one process (no network).
    pub fn single() -> World {
        World {
            rank: 0,
            size: 1,
            dir: Directory {
                nodes: vec![NodeId::local()],
                listen: vec![SocketAddr::from(([127, 0, 0, 1], 0))],
            },
            listener: None,
            root_links: Vec::new(),
        }
    }

    /// Meets the other ranks as `launch` says; collective.
    pub fn init_with(launch: &LaunchInfo, timeout: Duration) -> Result<World> {
        if launch.size == 1 {
            return Ok(Self::single());
        }
        let deadline = Instant::now() + timeout;
        let root_name = launch.root.clone().expect("checked in LaunchInfo");
        let root_addr = resolve(&root_name)?;
        let node = NodeId::local();
        if launch.rank == 0 {
            let root = TcpListener::bind(root_addr).map_err(|e| TransportError::Bootstrap {
                step: format!("listen on SODE_ROOT={root_name}"),
                whom: "the other ranks".into(),
                source: e,
            })?;
            let listener = bind_peer_listener(root_addr.ip())?;
            let mine = Hello {
                rank: 0,
                size: launch.size,
                node,
                listen: listener
                    .local_addr()
                    .map_err(io_err("local_addr", "self"))?,
            };
            let mut links: Vec<Option<TcpStream>> = (0..launch.size).map(|_| None).collect();
            let mut hellos: Vec<Option<Hello>> = (0..launch.size).map(|_| None).collect();
            hellos[0] = Some(mine);
            root.set_nonblocking(true)
                .map_err(io_err("set_nonblocking", "root"))?;
            let mut joined = 1;
            while joined < launch.size {
                match root.accept() {
                    Ok((mut s, from)) => {
                        s.set_nonblocking(false)
                            .map_err(io_err("set_nonblocking", "a rank"))?;
                        let h: Hello = recv_msg(&mut s, deadline, &format!("a rank at {from}"))?;
                        if h.size != launch.size
                            || h.rank == 0
                            || h.rank >= launch.size
                            || hellos[h.rank].is_some()
                        {
                            return Err(TransportError::Protocol {
                                whom: format!("rank {} at {from}", h.rank),
                                why: format!(
                                    "it says rank {} of {} but this job has {} ranks and rank {} {}: two jobs share SODE_ROOT, or the launcher's ranks are inconsistent",
                                    h.rank,
                                    h.size,
                                    launch.size,
                                    h.rank,
                                    if h.rank < launch.size && hellos[h.rank].is_some() { "already joined" } else { "is out of range" }
                                ),
                            });
                        }
                        let r = h.rank;
                        links[r] = Some(s);
                        hellos[r] = Some(h);
                        joined += 1;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        if Instant::now() >= deadline {
                            let missing: Vec<String> = (0..launch.size)
                                .filter(|&r| hellos[r].is_none())
                                .map(|r| r.to_string())
                                .collect();
                            return Err(TransportError::Bootstrap {
                                step: format!("rendezvous at {root_name} within {timeout:?}"),
                                whom: format!("ranks {}", missing.join(", ")),
                                source: std::io::Error::new(ErrorKind::TimedOut, "they did not connect; did they start, with the same SODE_ROOT?"),
                            });
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(e) => return Err(io_err("accept", "the other ranks")(e)),
                }
            }
            let hellos: Vec<Hello> = hellos.into_iter().map(|h| h.expect("all joined")).collect();
            let dir = Directory {
                nodes: hellos.iter().map(|h| h.node.clone()).collect(),
                listen: hellos.iter().map(|h| h.listen).collect(),
            };
            for (r, link) in links.iter_mut().enumerate().skip(1) {
                send_msg(link.as_mut().expect("joined"), &dir, &format!("rank {r}"))?;
            }
            Ok(World {
                rank: 0,
                size: launch.size,
                dir,
                listener: Some(listener),
                root_links: links,
            })
        } else {
            let mut s = connect_retry(
                root_addr,
                deadline,
                &format!("the root at SODE_ROOT={root_name}"),
            )?;
            let local_ip = s.local_addr().map_err(io_err("local_addr", "root"))?.ip();
            let listener = bind_peer_listener(local_ip)?;
            let hello = Hello {
                rank: launch.rank,
                size: launch.size,
                node,
                listen: listener
                    .local_addr()
                    .map_err(io_err("local_addr", "self"))?,
            };
            send_msg(&mut s, &hello, "the root")?;
            let dir: Directory = recv_msg(&mut s, deadline, "the root")?;
            if dir.nodes.len() != launch.size || dir.listen.len() != launch.size {
                return Err(TransportError::Protocol {
                    whom: "the root".into(),
                    why: "its directory does not list every rank".into(),
                });
            }
            Ok(World {
                rank: launch.rank,
                size: launch.size,
                dir,
                listener: Some(listener),
                root_links: vec![Some(s)],
            })
        }
    }

    /// A second handle on the same job, sharing this one's connections (for
    /// an object that runs barriers of its own). Barriers are collective, so
    /// calls through the two handles never interleave in a correct program.
    pub fn try_clone(&self) -> Result<World> {
        let err = io_err("clone a bootstrap socket", "self");
        Ok(World {
            rank: self.rank,
            size: self.size,
            dir: self.dir.clone(),
            listener: self
                .listener
                .as_ref()
                .map(|l| l.try_clone())
                .transpose()
                .map_err(&err)?,
            root_links: self
                .root_links
                .iter()
                .map(|l| l.as_ref().map(|s| s.try_clone()).transpose())
                .collect::<std::io::Result<_>>()
                .map_err(&err)?,
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The node `rank` runs on.
    pub fn node_of(&self, rank: usize) -> Option<&NodeId> {
        self.dir.nodes.get(rank)
    }

    /// Whether `rank` runs on this process's node (shares memory with it).
    pub fn same_node(&self, rank: usize) -> bool {
        self.node_of(rank) == self.node_of(self.rank)
    }

    /// Blocks until every rank has called `barrier`, or `timeout` passes.
    pub fn barrier(&mut self, timeout: Duration) -> Result<()> {
        if self.size == 1 {
            return Ok(());
        }
        let deadline = Instant::now() + timeout;
        if self.rank == 0 {
            for (r, link) in self.root_links.iter_mut().enumerate().skip(1) {
                let _: u8 = recv_msg(
                    link.as_mut().expect("joined"),
                    deadline,
                    &format!("rank {r} (barrier)"),
                )?;
            }
            for (r, link) in self.root_links.iter_mut().enumerate().skip(1) {
                send_msg(
                    link.as_mut().expect("joined"),
                    &1u8,
                    &format!("rank {r} (barrier)"),
                )?;
            }
        } else {
            let link = self.root_links[0].as_mut().expect("root link");
            send_msg(link, &1u8, "the root (barrier)")?;
            let _: u8 = recv_msg(link, deadline, "the root (barrier)")?;
        }
        Ok(())
    }

    /// Opens a direct connection to each of `peers` (collective among
    /// them: each must name this rank too). The lower rank of a pair
    /// connects, the higher accepts.
    pub fn connect_peers(
        &mut self,
        peers: &BTreeSet<usize>,
        timeout: Duration,
    ) -> Result<BTreeMap<usize, PeerLink>> {
        let deadline = Instant::now() + timeout;
        for &p in peers {
            if p >= self.size || p == self.rank {
                return Err(TransportError::UnknownPeer {
                    peer: p,
                    why: if p == self.rank {
                        "a rank cannot be its own peer over RDMA".into()
                    } else {
                        format!("the job has ranks 0..{}", self.size)
                    },
                });
            }
        }
        let mut links = BTreeMap::new();
        for &p in peers.iter().filter(|&&p| p > self.rank) {
            let mut s = connect_retry(self.dir.listen[p], deadline, &format!("rank {p}"))?;
            send_msg(&mut s, &self.rank, &format!("rank {p}"))?;
            links.insert(p, PeerLink { peer: p, stream: s });
        }
        let expected: BTreeSet<usize> = peers.iter().copied().filter(|&p| p < self.rank).collect();
        let listener = self
            .listener
            .as_ref()
            .expect("multi-rank world has a listener");
        listener
            .set_nonblocking(true)
            .map_err(io_err("set_nonblocking", "self"))?;
        while links.len() < peers.len() {
            match listener.accept() {
                Ok((mut s, from)) => {
                    s.set_nonblocking(false)
                        .map_err(io_err("set_nonblocking", "a peer"))?;
                    let who: usize = recv_msg(&mut s, deadline, &format!("a peer at {from}"))?;
                    if !expected.contains(&who) || links.contains_key(&who) {
                        return Err(TransportError::Protocol {
                            whom: format!("rank {who}"),
                            why: format!(
                                "it connected to rank {} but is not among its peers {:?}: the neighbour lists of the two ranks disagree",
                                self.rank, peers
                            ),
                        });
                    }
                    links.insert(
                        who,
                        PeerLink {
                            peer: who,
                            stream: s,
                        },
                    );
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        let missing: Vec<String> = expected
                            .iter()
                            .filter(|p| !links.contains_key(p))
                            .map(|p| p.to_string())
                            .collect();
                        return Err(TransportError::Bootstrap {
                            step: format!("accept within {timeout:?}"),
                            whom: format!("ranks {}", missing.join(", ")),
                            source: std::io::Error::new(
                                ErrorKind::TimedOut,
                                "they did not connect: do they list this rank as a peer?",
                            ),
                        });
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Err(io_err("accept", "peers")(e)),
            }
        }
        Ok(links)
    }
}

/// A direct bootstrap connection to one peer: carries its queue-pair numbers
/// and keys, and tells when the peer dies (the kernel closes it).
#[derive(Debug)]
pub struct PeerLink {
    peer: usize,
    stream: TcpStream,
}

impl PeerLink {
    /// The peer's rank.
    pub fn peer(&self) -> usize {
        self.peer
    }

    /// Sends one message.
    pub fn send<T: Serialize>(&mut self, msg: &T) -> Result<()> {
        send_msg(&mut self.stream, msg, &format!("rank {}", self.peer))
    }

    /// Receives one message, waiting until `deadline`.
    pub fn recv<T: for<'de> Deserialize<'de>>(&mut self, deadline: Instant) -> Result<T> {
        recv_msg(&mut self.stream, deadline, &format!("rank {}", self.peer))
    }

    /// True once the peer has closed its end (exited or died), without
    /// blocking.
    pub fn closed(&self) -> bool {
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

fn resolve(name: &str) -> Result<SocketAddr> {
    name.to_socket_addrs()
        .map_err(|e| TransportError::InvalidSetting {
            name: "SODE_ROOT".into(),
            value: name.into(),
            why: format!("expected host:port ({e})"),
        })?
        .next()
        .ok_or_else(|| TransportError::InvalidSetting {
            name: "SODE_ROOT".into(),
            value: name.into(),
            why: "the host name resolves to no address".into(),
        })
}

fn bind_peer_listener(ip: std::net::IpAddr) -> Result<TcpListener> {
    TcpListener::bind((ip, 0)).map_err(|e| TransportError::Bootstrap {
        step: format!("listen on {ip}"),
        whom: "peers".into(),
        source: e,
    })
}

fn connect_retry(addr: SocketAddr, deadline: Instant, whom: &str) -> Result<TcpStream> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(
            &addr,
            left.max(Duration::from_millis(10))
                .min(Duration::from_secs(2)),
        ) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            // The other side may not listen yet: retry until the deadline.
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => {
                return Err(TransportError::Bootstrap {
                    step: format!("connect to {addr}"),
                    whom: whom.into(),
                    source: e,
                })
            }
        }
    }
}

fn io_err<'a>(step: &'a str, whom: &'a str) -> impl Fn(std::io::Error) -> TransportError + 'a {
    move |e| TransportError::Bootstrap {
        step: step.into(),
        whom: whom.into(),
        source: e,
    }
}

/// Messages are a little-endian u32 length and that many bytes of JSON.
fn send_msg<T: Serialize>(s: &mut TcpStream, msg: &T, whom: &str) -> Result<()> {
    let body = serde_json::to_vec(msg).expect("bootstrap messages serialise");
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    s.write_all(&frame).map_err(|e| TransportError::Bootstrap {
        step: "send".into(),
        whom: whom.into(),
        source: e,
    })
}

const MAX_MESSAGE: usize = 64 << 20;

fn recv_msg<T: for<'de> Deserialize<'de>>(
    s: &mut TcpStream,
    deadline: Instant,
    whom: &str,
) -> Result<T> {
    let mut len = [0u8; 4];
    read_exact_by(s, &mut len, deadline, whom)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_MESSAGE {
        return Err(TransportError::Protocol {
            whom: whom.into(),
            why: format!("a {len}-byte message (the limit is {MAX_MESSAGE})"),
        });
    }
    let mut body = vec![0u8; len];
    read_exact_by(s, &mut body, deadline, whom)?;
    serde_json::from_slice(&body).map_err(|e| TransportError::Protocol {
        whom: whom.into(),
        why: e.to_string(),
    })
}

fn read_exact_by(
    s: &mut TcpStream,
    mut buf: &mut [u8],
    deadline: Instant,
    whom: &str,
) -> Result<()> {
    while !buf.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(TransportError::Bootstrap {
                step: "receive".into(),
                whom: whom.into(),
                source: std::io::Error::new(ErrorKind::TimedOut, "no message before the deadline"),
            });
        }
        s.set_read_timeout(Some(left))
            .map_err(io_err("set_read_timeout", whom))?;
        match s.read(buf) {
            Ok(0) => {
                return Err(TransportError::Bootstrap {
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
                return Err(TransportError::Bootstrap {
                    step: "receive".into(),
                    whom: whom.into(),
                    source: e,
                })
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn launchers_are_recognised_in_order() {
        let l = LaunchInfo::from_vars(vars(&[
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "4"),
            ("SODE_ROOT", "h:1"),
        ]))
        .unwrap();
        assert_eq!((l.rank, l.size, l.source), (3, 4, "SLURM_PROCID"));
        let l = LaunchInfo::from_vars(vars(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("SODE_ROOT", "h:1"),
        ]))
        .unwrap();
        assert_eq!((l.rank, l.size), (1, 2));
        let l = LaunchInfo::from_vars(vars(&[("PMI_RANK", "0"), ("PMI_SIZE", "1")])).unwrap();
        assert_eq!((l.rank, l.size, l.root), (0, 1, None));
        let l = LaunchInfo::from_vars(vars(&[
            ("SODE_RANK", "1"),
            ("SODE_SIZE", "2"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "9"),
            ("SODE_ROOT", "h:1"),
        ]))
        .unwrap();
        assert_eq!((l.rank, l.size), (1, 2), "SODE_* overrides the launcher");
    }

    #[test]
    fn bad_launch_environments_are_named() {
        let e = LaunchInfo::from_vars(vars(&[])).unwrap_err().to_string();
        assert!(e.contains("sode-run"), "{e}");
        let e = LaunchInfo::from_vars(vars(&[
            ("SODE_RANK", "2"),
            ("SODE_SIZE", "2"),
            ("SODE_ROOT", "h:1"),
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
    }

    #[test]
    fn ranks_meet_barrier_and_pair_up_over_loopback() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let size = 3;
        let handles: Vec<_> = (0..size)
            .map(|rank| {
                std::thread::spawn(move || {
                    let launch = LaunchInfo {
                        rank,
                        size,
                        root: Some(format!("127.0.0.1:{port}")),
                        source: "test",
                    };
                    let mut w = World::init_with(&launch, Duration::from_secs(10)).unwrap();
                    assert!(w.same_node((rank + 1) % size));
                    w.barrier(Duration::from_secs(10)).unwrap();
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
                    w.barrier(Duration::from_secs(10)).unwrap();
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
    fn a_missing_rank_times_out_with_its_name() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let launch = LaunchInfo {
            rank: 0,
            size: 2,
            root: Some(format!("127.0.0.1:{port}")),
            source: "test",
        };
        let e = World::init_with(&launch, Duration::from_millis(200))
            .unwrap_err()
            .to_string();
        assert!(e.contains("ranks 1") && e.contains("SODE_ROOT"), "{e}");
    }
}
