//! Data connections between ranks: one TCP stream per pair, each proving
//! it belongs to the job.
//!
//! The lower rank of a pair listens; it sends the higher one, over their
//! setup link (authenticated by whatever bootstrap the job has: the TCP
//! rendezvous's secret, PMIx, an MPI communicator), the addresses it
//! listens on and a fresh random token. The higher rank connects and
//! presents its rank and the token; anything else that connects is
//! dropped. So a stream's peer is the rank it claims, whatever the
//! bootstrap, and nothing else on the network can join.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::backoff::Backoff;
use crate::dial::configure;
use crate::error::{JobError, Result};
use crate::oob::PeerLink;
use crate::routes::Routes;
use crate::tcp_addr::TCP_ADDR_VAR;

const MAGIC: &[u8; 8] = b"SODETCP1";
const TOKEN: usize = 32;
/// Magic, rank (u64 little-endian), token.
const HELLO: usize = 8 + 8 + TOKEN;
/// How long a connection may take to send its hello (a stranger's silent
/// connection is dropped then; a peer's, delayed by lost packets past it,
/// is dialled again), and to take its acknowledgement.
const HELLO_TIMEOUT: Duration = crate::auth::HANDSHAKE_TIMEOUT;

/// Where a lower rank listens for a higher one, and the token it expects.
#[derive(Debug, Serialize, Deserialize)]
struct Offer {
    addrs: Vec<SocketAddr>,
    token: [u8; TOKEN],
}

/// Opens a stream to each of `peers` over `links` (setup links to exactly
/// those peers, as [`crate::World::connect_peers`] returns them); collective
/// among them. Streams are blocking, with `TCP_NODELAY` set.
pub(crate) fn connect_streams(
    me: usize,
    mut links: BTreeMap<usize, PeerLink>,
    peers: &BTreeSet<usize>,
    dialer: &Dialer<'_>,
    deadline: Instant,
) -> Result<BTreeMap<usize, TcpStream>> {
    let higher: Vec<usize> = peers.iter().copied().filter(|&p| p > me).collect();
    let lower: Vec<usize> = peers.iter().copied().filter(|&p| p < me).collect();
    let mut tokens = BTreeMap::new();
    let listener = if higher.is_empty() {
        None
    } else {
        let (listener, addrs) = listen()?;
        for &p in &higher {
            let token = fresh_token()?;
            let link = link_to(&mut links, p)?;
            link.send(&Offer {
                addrs: addrs.clone(),
                token,
            })?;
            tokens.insert(p, token);
        }
        Some(listener)
    };
    let mut streams = BTreeMap::new();
    for &p in &lower {
        let offer: Offer = link_to(&mut links, p)?.recv(deadline)?;
        streams.insert(p, dial(me, p, &offer, dialer, deadline)?);
    }
    if let Some(listener) = listener {
        accept_all(&listener, &mut tokens, &mut streams, deadline)?;
    }
    Ok(streams)
}

/// How a rank reaches another: the job's routes, which speak launch ranks.
pub(crate) struct Dialer<'a> {
    pub(crate) routes: &'a Routes,
    /// A rank's launch rank.
    pub(crate) launch_of: &'a dyn Fn(usize) -> usize,
}

fn link_to(links: &mut BTreeMap<usize, PeerLink>, p: usize) -> Result<&mut PeerLink> {
    links.get_mut(&p).ok_or_else(|| JobError::Protocol {
        whom: format!("rank {p}"),
        why: "no setup link to it".into(),
    })
}

/// A listener on every interface (or `SODE_TCP_ADDR`'s, on a port of
/// `SODE_TCP_PORTS`'s), and the addresses peers should try.
pub(crate) fn listen() -> Result<(TcpListener, Vec<SocketAddr>)> {
    let bind_ip = crate::tcp_addr::chosen()?.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let listener = crate::ports::listen(bind_ip, "data connections")?;
    let port = listener
        .local_addr()
        .map_err(|source| JobError::Bootstrap {
            step: "reading the data listener's port".into(),
            whom: "this host".into(),
            source,
        })?
        .port();
    let ips = if bind_ip.is_unspecified() {
        interface_addresses()
    } else {
        vec![bind_ip]
    };
    Ok((
        listener,
        ips.into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect(),
    ))
}

/// This host's IPv4 addresses on interfaces that are up, loopback last
/// (a peer on another node cannot use it; one on this node can).
fn interface_addresses() -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::new();
    if let Ok(addrs) = nix::ifaddrs::getifaddrs() {
        for a in addrs {
            if !a.flags.contains(nix::net::if_::InterfaceFlags::IFF_UP) {
                continue;
            }
            let Some(sin) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) else {
                continue;
            };
            let ip = IpAddr::V4(sin.ip());
            if !out.contains(&ip) {
                out.push(ip);
            }
        }
    }
    out.sort_by_key(|ip| ip.is_loopback());
    if out.is_empty() {
        out.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    out
}

fn fresh_token() -> Result<[u8; TOKEN]> {
    crate::auth::random_bytes("a data connection's token")
}

/// Connects to the lower rank `p` at one of its addresses (or through the
/// gateways between the two) and presents the token; waits for its
/// acknowledgement. A connection lost before it (packets lost for longer
/// than the peer waits for a hello: it drops the connection) is made again
/// until `deadline`.
fn dial(
    me: usize,
    p: usize,
    offer: &Offer,
    dialer: &Dialer<'_>,
    deadline: Instant,
) -> Result<TcpStream> {
    crate::dial::again_if_lost(
        deadline,
        &format!("the data connection to rank {p}"),
        || dial_once(me, p, offer, dialer, deadline),
    )
}

/// One attempt of [`dial`].
fn dial_once(
    me: usize,
    p: usize,
    offer: &Offer,
    dialer: &Dialer<'_>,
    deadline: Instant,
) -> Result<TcpStream> {
    let whom = format!("rank {p}");
    let (from, to) = ((dialer.launch_of)(me), (dialer.launch_of)(p));
    let mut s = dialer
        .routes
        .dial(from, to, &offer.addrs, deadline, &whom)
        .map_err(|e| match e {
            JobError::Bootstrap { step, whom, source } => JobError::Bootstrap {
                step: format!("{step} for data (set {TCP_ADDR_VAR} to the address to use)"),
                whom,
                source,
            },
            other => other,
        })?;
    let io = |step: &'static str| {
        let whom = whom.clone();
        move |source| JobError::Bootstrap {
            step: format!("{step} data connection"),
            whom,
            source,
        }
    };
    let mut hello = [0u8; HELLO];
    hello[..8].copy_from_slice(MAGIC);
    hello[8..16].copy_from_slice(&(me as u64).to_le_bytes());
    hello[16..].copy_from_slice(&offer.token);
    let left = deadline.saturating_duration_since(Instant::now());
    configure(&s).map_err(io("configuring the"))?;
    s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
        .map_err(io("configuring the"))?;
    s.write_all(&hello).map_err(io("greeting over the"))?;
    let mut ack = [0u8; 1];
    s.read_exact(&mut ack)
        .map_err(io("awaiting the acknowledgement on the"))?;
    s.set_read_timeout(None).map_err(io("configuring the"))?;
    Ok(s)
}

/// Most connections greeted at once: past it, the oldest is dropped. A
/// stranger holding silent connections open then delays no peer: each is
/// read as its bytes come, not in turn.
const MAX_PENDING: usize = 1024;

/// A connection that has not yet proved which rank it is.
struct Pending {
    s: TcpStream,
    from: SocketAddr,
    hello: [u8; HELLO],
    got: usize,
    since: Instant,
}

/// What reading a pending connection came to.
enum Greeting {
    /// Not all of its hello yet.
    Waiting,
    /// Closed, failed, or not a peer of this job: dropped.
    Dropped,
    /// This rank, with its token.
    Proved(usize),
}

/// Accepts until every higher peer in `tokens` has connected with its
/// token; drops any other connection. Every connection is greeted at once,
/// without blocking on any: each has [`HELLO_TIMEOUT`] to send its hello.
fn accept_all(
    listener: &TcpListener,
    tokens: &mut BTreeMap<usize, [u8; TOKEN]>,
    streams: &mut BTreeMap<usize, TcpStream>,
    deadline: Instant,
) -> Result<()> {
    let began = Instant::now();
    let io = |source| JobError::Bootstrap {
        step: "accepting data connections".into(),
        whom: "the listener".into(),
        source,
    };
    listener.set_nonblocking(true).map_err(io)?;
    let mut pending: std::collections::VecDeque<Pending> = Default::default();
    let mut backoff = Backoff::setup(Duration::from_millis(5));
    // Time this process is stopped does not count, here or in the steps
    // after that share the instant.
    let mut deadline = crate::timeout::Deadline::new(deadline);
    while !tokens.is_empty() {
        let mut progressed = accept_waiting(listener, &mut pending).map_err(io)?;
        let mut i = 0;
        while i < pending.len() {
            match read_hello(&mut pending[i], tokens) {
                Greeting::Waiting if pending[i].since.elapsed() < HELLO_TIMEOUT => i += 1,
                Greeting::Waiting | Greeting::Dropped => {
                    let p = pending.remove(i).expect("an index below the length");
                    tracing::debug!(from = %p.from, "dropped a data connection without a valid token");
                    progressed = true;
                }
                Greeting::Proved(rank) => {
                    let p = pending.remove(i).expect("an index below the length");
                    if let Some(s) = acknowledge(p.s) {
                        tokens.remove(&rank);
                        streams.insert(rank, s);
                    }
                    progressed = true;
                }
            }
        }
        if tokens.is_empty() {
            break;
        }
        if deadline.passed() {
            let missing: Vec<String> = tokens.keys().map(|p| format!("rank {p}")).collect();
            return Err(JobError::BootstrapTimeout {
                step: "accepting data connections".into(),
                whom: missing.join(", "),
                waited: began.elapsed(),
                hint: "they did not connect: a firewall between the nodes, or an address they cannot reach (set SODE_TCP_ADDR)".into(),
            });
        }
        if progressed {
            backoff.reset();
        } else {
            backoff.snooze();
        }
    }
    Ok(())
}

/// Takes every connection waiting on `listener` into `pending` (the oldest
/// dropped past [`MAX_PENDING`]); whether there were any.
fn accept_waiting(
    listener: &TcpListener,
    pending: &mut std::collections::VecDeque<Pending>,
) -> std::io::Result<bool> {
    let mut any = false;
    loop {
        match listener.accept() {
            Ok((s, from)) => {
                any = true;
                if s.set_nonblocking(true).is_err() {
                    continue;
                }
                if pending.len() == MAX_PENDING {
                    pending.pop_front();
                }
                pending.push_back(Pending {
                    s,
                    from,
                    hello: [0; HELLO],
                    got: 0,
                    since: Instant::now(),
                });
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                return Ok(any)
            }
            Err(e) => return Err(e),
        }
    }
}

/// Reads what `p` has sent of its hello, without blocking, and checks it
/// once whole: the magic, a rank expected here, and that rank's token.
fn read_hello(p: &mut Pending, tokens: &BTreeMap<usize, [u8; TOKEN]>) -> Greeting {
    while p.got < HELLO {
        match p.s.read(&mut p.hello[p.got..]) {
            Ok(0) => return Greeting::Dropped,
            Ok(n) => p.got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Greeting::Waiting,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Greeting::Dropped,
        }
    }
    let hello = &p.hello;
    if &hello[..8] != MAGIC {
        return Greeting::Dropped;
    }
    let Some(rank) = hello[8..16]
        .try_into()
        .ok()
        .and_then(|b| usize::try_from(u64::from_le_bytes(b)).ok())
    else {
        return Greeting::Dropped;
    };
    let Some(expected) = tokens.get(&rank) else {
        return Greeting::Dropped;
    };
    if !crate::auth::same_token(expected, &hello[16..]) {
        return Greeting::Dropped;
    }
    Greeting::Proved(rank)
}

/// A proved connection, acknowledged and made a blocking data stream.
fn acknowledge(mut s: TcpStream) -> Option<TcpStream> {
    s.set_nonblocking(false).ok()?;
    s.set_write_timeout(Some(HELLO_TIMEOUT)).ok()?;
    s.write_all(&[1]).ok()?;
    s.set_write_timeout(None).ok()?;
    configure(&s).ok()?;
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_fresh_and_offers_carry_them_whole() {
        let (a, b) = (fresh_token().unwrap(), fresh_token().unwrap());
        assert_ne!(a, b);
        let offer = Offer {
            addrs: Vec::new(),
            token: a,
        };
        let back: Offer = serde_json::from_slice(&serde_json::to_vec(&offer).unwrap()).unwrap();
        assert_eq!(back.token, a);
        // A token of the wrong length does not decode.
        assert!(serde_json::from_str::<Offer>(r#"{"addrs":[],"token":[1,2]}"#).is_err());
        assert!(!interface_addresses().is_empty());
    }

    /// A stranger holding 300 silent connections (each would have cost
    /// its 2 s in turn: 10 minutes) does not delay the peer behind them.
    #[test]
    fn silent_connections_do_not_delay_the_peer() {
        let (listener, addrs) = listen().unwrap();
        let token = fresh_token().unwrap();
        let mut tokens = BTreeMap::from([(3usize, token)]);
        let addr = *addrs.iter().find(|a| a.ip().is_loopback()).unwrap();
        // Opened while the listener accepts (its backlog holds fewer).
        let (opened, silent_open) = std::sync::mpsc::channel();
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let stranger = std::thread::spawn(move || {
            let silent: Vec<TcpStream> = (0..300)
                .map(|_| TcpStream::connect(addr).unwrap())
                .collect();
            opened.send(()).unwrap();
            finished.recv().ok();
            drop(silent);
        });
        let peer = std::thread::spawn(move || {
            silent_open.recv().unwrap();
            let mut s = TcpStream::connect(addr).unwrap();
            let mut hello = [0u8; HELLO];
            hello[..8].copy_from_slice(MAGIC);
            hello[8..16].copy_from_slice(&3u64.to_le_bytes());
            hello[16..].copy_from_slice(&token);
            // Its hello in two parts, as a slow network would deliver it.
            s.write_all(&hello[..20]).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            s.write_all(&hello[20..]).unwrap();
            let mut ack = [0u8; 1];
            s.read_exact(&mut ack).unwrap();
            ack[0]
        });
        let began = Instant::now();
        let mut streams = BTreeMap::new();
        accept_all(
            &listener,
            &mut tokens,
            &mut streams,
            Instant::now() + Duration::from_secs(20),
        )
        .unwrap();
        assert!(streams.contains_key(&3));
        assert_eq!(peer.join().unwrap(), 1);
        let waited = began.elapsed();
        done.send(()).unwrap();
        stranger.join().unwrap();
        // The 300 connections take well under a second to open here; the
        // peer then waits for none of them.
        assert!(
            waited < Duration::from_secs(5),
            "the peer waited {waited:?} behind silent connections"
        );
    }

    #[test]
    fn a_connection_without_the_token_is_dropped_and_the_right_one_accepted() {
        let (listener, addrs) = listen().unwrap();
        let token = fresh_token().unwrap();
        let mut tokens = BTreeMap::from([(5usize, token)]);
        let addr = *addrs.iter().find(|a| a.ip().is_loopback()).unwrap();
        let intruder = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            let mut hello = [0u8; HELLO];
            hello[..8].copy_from_slice(MAGIC);
            hello[8..16].copy_from_slice(&5u64.to_le_bytes());
            // A wrong token: dropped without an acknowledgement.
            s.write_all(&hello).unwrap();
            let mut ack = [0u8; 1];
            assert!(s.read_exact(&mut ack).is_err());
            let offer = Offer {
                addrs: vec![addr],
                token,
            };
            let node = crate::node::NodeId::local();
            let routes = Routes::new(
                vec![Default::default(); 6],
                &crate::node::Nodes::new(vec![node; 6]),
            );
            let dialer = Dialer {
                routes: &routes,
                launch_of: &|r| r,
            };
            dial(
                5,
                0,
                &offer,
                &dialer,
                Instant::now() + Duration::from_secs(10),
            )
            .unwrap()
        });
        let mut streams = BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        accept_all(&listener, &mut tokens, &mut streams, deadline).unwrap();
        let mut theirs = intruder.join().unwrap();
        assert!(streams.contains_key(&5));
        // Both ends watch for a vanished peer.
        use nix::sys::socket::{getsockopt, sockopt};
        for s in [&theirs, &streams[&5]] {
            assert!(getsockopt(s, sockopt::KeepAlive).unwrap());
            assert_eq!(getsockopt(s, sockopt::TcpKeepCount).unwrap(), 4);
            assert_eq!(getsockopt(s, sockopt::TcpKeepIdle).unwrap(), 2);
            assert!(getsockopt(s, sockopt::TcpNoDelay).unwrap());
        }
        theirs.write_all(b"x").unwrap();
        let mut got = [0u8; 1];
        streams.get_mut(&5).unwrap().read_exact(&mut got).unwrap();
        assert_eq!(&got, b"x");
    }
}
