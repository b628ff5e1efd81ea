//! Forwarding between ranks that cannot reach each other: a gateway rank,
//! on a node of two networks, splices a connection from one to a
//! connection to the other (MPI/SP's gateway nodes), below whatever the
//! two ends then say to each other. So the ends still prove to each other
//! who they are (the setup links' secret, the data streams' tokens), and a
//! gateway sees only bytes it passes on.
//!
//! A connection to a relay presents the relay's token (every rank of the
//! job learns it at start-up, nothing else does), then asks for the rest of
//! its route: further relays, then the addresses where the far end
//! listens. The relay connects onward (asking the next relay in turn),
//! answers whether that worked, and from then on its one copying thread
//! ([`crate::splice`]) carries bytes both ways until both sides close.

use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::auth::HANDSHAKE_TIMEOUT;
use crate::dial::{configure, connect_any};
use crate::error::{JobError, Result};
use crate::nets::{usable_order, Net};
use crate::splice::{SpliceHandle, Splicer};
use crate::wire::{Reader, Writer};

const MAGIC: &[u8; 8] = b"SODERLY1";
const TOKEN: usize = 32;
/// A route request is a few addresses: anything longer is not one.
const MAX_REQUEST: usize = 64 << 10;
/// How long a gateway that finished keeps forwarding for connections still
/// open through it (its neighbours across it may be an iteration behind).
const LINGER: Duration = Duration::from_secs(60);

/// Where a gateway relays, and the token that proves a connection to it
/// comes from the job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RelayOffer {
    pub(crate) addrs: Vec<SocketAddr>,
    pub(crate) token: [u8; TOKEN],
}

impl RelayOffer {
    /// Writes this offer into a setup record ([`crate::wire`]).
    pub(crate) fn write(&self, w: &mut Writer) -> Result<()> {
        w.addrs(&self.addrs, "relay addresses")?.bytes(&self.token);
        Ok(())
    }

    /// What [`RelayOffer::write`] wrote.
    pub(crate) fn read(r: &mut Reader<'_>) -> Option<RelayOffer> {
        Some(RelayOffer {
            addrs: r.addrs()?,
            token: r.array()?,
        })
    }
}

/// The rest of a route, sent to a relay after its token.
#[derive(Debug, Serialize, Deserialize)]
struct Request {
    /// Relays still to pass, in order.
    hops: Vec<RelayOffer>,
    /// Where the far end listens.
    target: Vec<SocketAddr>,
    /// The time left to the initiator's deadline.
    millis_left: u64,
}

/// A relay's answer: the connection onward is open, or why not.
#[derive(Debug, Serialize, Deserialize)]
struct Reply {
    error: Option<String>,
}

/// A relay's listener, bound before the job knows whether this rank will
/// forward (its address and token go out with the rank's report).
#[derive(Debug)]
pub(crate) struct RelayListener {
    /// One on each network's address, in the offer's order.
    listeners: Vec<TcpListener>,
    offer: RelayOffer,
}

impl RelayListener {
    /// A listener on this host's address on each of `nets` when it is on
    /// more than one (a host that could join two networks); none
    /// otherwise. Only the addresses offered listen: not every interface.
    pub(crate) fn bind(nets: &[Net]) -> Result<Option<RelayListener>> {
        if nets.len() < 2 {
            return Ok(None);
        }
        let mut listeners = Vec::with_capacity(nets.len());
        let mut addrs = Vec::with_capacity(nets.len());
        for n in nets {
            let listener = crate::ports::listen(n.addr.into(), "relayed connections")?;
            let addr = listener
                .local_addr()
                .map_err(|source| JobError::Bootstrap {
                    step: "local_addr".into(),
                    whom: "this rank's relay".into(),
                    source,
                })?;
            listeners.push(listener);
            addrs.push(addr);
        }
        let token = crate::auth::random_bytes("a relay's token")?;
        Ok(Some(RelayListener {
            listeners,
            offer: RelayOffer { addrs, token },
        }))
    }

    /// What the other ranks need to use this relay.
    pub(crate) fn offer(&self) -> &RelayOffer {
        &self.offer
    }
}

/// A running relay; dropping it stops accepting and waits (up to
/// [`LINGER`]) for the connections it forwards to close.
#[derive(Debug)]
pub(crate) struct Relay {
    /// Dropped to wake and stop the acceptor.
    stop: Option<UnixStream>,
    acceptor: Option<JoinHandle<()>>,
    /// Connections being set up or forwarded.
    active: Arc<AtomicUsize>,
    /// The one thread that copies for every forwarded connection.
    splicer: Option<Splicer>,
}

/// What serving one connection needs.
#[derive(Debug, Clone)]
struct Serving {
    token: [u8; TOKEN],
    /// This host's networks, to choose the far end's address by.
    nets: Arc<Vec<Net>>,
    splice: SpliceHandle,
    active: Arc<AtomicUsize>,
}

impl Relay {
    /// Starts forwarding on `listener`, connecting onward from a host on
    /// `nets`.
    pub(crate) fn start(listener: RelayListener, nets: Vec<Net>) -> Result<Relay> {
        let fail = |step: &str| {
            let step = step.to_string();
            move |source| JobError::Bootstrap {
                step,
                whom: "this rank's relay".into(),
                source,
            }
        };
        let (stop, stopped) = UnixStream::pair().map_err(fail("socketpair"))?;
        for l in &listener.listeners {
            l.set_nonblocking(true).map_err(fail("set_nonblocking"))?;
        }
        let active = Arc::new(AtomicUsize::new(0));
        let splicer = Splicer::start(active.clone())?;
        let serving = Serving {
            token: listener.offer.token,
            nets: Arc::new(nets),
            splice: splicer.handle().ok_or_else(|| JobError::Protocol {
                whom: "this rank's relay".into(),
                why: "its copying thread has no handle".into(),
            })?,
            active: active.clone(),
        };
        let acceptor = std::thread::Builder::new()
            .name("sode-relay".into())
            .spawn(move || accept_loop(&listener, &stopped, &serving))
            .map_err(fail("spawning the relay thread"))?;
        tracing::debug!("forwarding for ranks on networks that do not meet");
        Ok(Relay {
            stop: Some(stop),
            acceptor: Some(acceptor),
            active,
            splicer: Some(splicer),
        })
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        let until = Instant::now() + LINGER;
        let mut backoff = crate::backoff::Backoff::setup(Duration::from_millis(20));
        while self.active.load(Ordering::Acquire) > 0 && Instant::now() < until {
            backoff.snooze();
        }
        let cut = self.active.load(Ordering::Acquire);
        if cut > 0 {
            tracing::warn!(
                cut,
                "this gateway ended while it still forwarded connections; they are cut"
            );
        }
        drop(self.splicer.take());
    }
}

/// Accepts until `stopped` closes; sets up each connection on a thread of
/// its own (its handshake and connection onward may take a while), then
/// hands it to the splicer.
fn accept_loop(relay: &RelayListener, stopped: &UnixStream, serving: &Serving) {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    loop {
        let mut fds: Vec<PollFd<'_>> = std::iter::once(stopped.as_fd())
            .chain(relay.listeners.iter().map(AsFd::as_fd))
            .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
            .collect();
        if let Err(e) = nix::poll::poll(&mut fds, PollTimeout::NONE) {
            if e == nix::errno::Errno::EINTR {
                continue;
            }
            tracing::warn!("the relay stops: poll failed: {e}");
            return;
        }
        if fds[0].revents().is_some_and(|r| !r.is_empty()) {
            return;
        }
        let ready: Vec<bool> = fds[1..]
            .iter()
            .map(|fd| fd.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        for (listener, _) in relay.listeners.iter().zip(ready).filter(|(_, r)| *r) {
            accept_waiting(listener, serving);
        }
    }
}

/// Takes every connection waiting on `listener`, each served on a thread
/// of its own.
fn accept_waiting(listener: &TcpListener, serving: &Serving) {
    loop {
        match listener.accept() {
            Ok((conn, from)) => {
                let serving = serving.clone();
                serving.active.fetch_add(1, Ordering::AcqRel);
                let count = serving.active.clone();
                let spawned = std::thread::Builder::new()
                    .name("sode-relay-conn".into())
                    .spawn(move || {
                        // Handed to the splicer, the connection is
                        // counted off there when it closes.
                        if let Err(e) = serve(conn, &serving) {
                            tracing::warn!(%from, "relay: {}", crate::diag::chain(&e));
                            serving.active.fetch_sub(1, Ordering::AcqRel);
                        }
                    });
                if spawned.is_err() {
                    count.fetch_sub(1, Ordering::AcqRel);
                    tracing::warn!(%from, "relay: no thread for a connection; dropped");
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::Interrupted | ErrorKind::ConnectionAborted
                ) => {}
            Err(e) => {
                tracing::warn!("relay: accept failed: {e}");
                return;
            }
        }
    }
}

/// One forwarded connection: checks the token, connects onward, answers,
/// then hands the two to the splicer.
fn serve(mut conn: TcpStream, serving: &Serving) -> Result<()> {
    let (token, nets) = (&serving.token, &serving.nets[..]);
    let whom = format!(
        "a connection from {}",
        conn.peer_addr().map_or("?".into(), |a| a.to_string())
    );
    conn.set_nonblocking(false)
        .map_err(io_at("configure", &whom))?;
    let mut deadline = crate::timeout::Deadline::new(Instant::now() + HANDSHAKE_TIMEOUT);
    let mut hello = [0u8; 8 + TOKEN];
    crate::auth::read_exact_by(&mut conn, &mut hello, &mut deadline, &whom)?;
    let proved = crate::auth::same_token(token, &hello[8..]);
    if &hello[..8] != MAGIC || !proved {
        return Err(JobError::Unauthenticated { whom });
    }
    let request: Request = read_frame(&mut conn, deadline.at(), &whom)?;
    let onward_deadline = Instant::now() + Duration::from_millis(request.millis_left);
    let onward = if request.hops.is_empty() {
        let ordered = usable_order(nets, false, &request.target);
        connect_any(&ordered, onward_deadline, "the far end")
    } else {
        through(
            nets,
            &request.hops,
            &request.target,
            onward_deadline,
            "the far end",
        )
    };
    let reply = Reply {
        error: onward
            .as_ref()
            .err()
            .map(|e| crate::diag::chain(e).to_string()),
    };
    write_frame(&mut conn, &reply, &whom)?;
    let onward = onward?;
    for s in [&conn, &onward] {
        configure(s).map_err(io_at("configure", &whom))?;
    }
    serving
        .splice
        .add(conn, onward)
        .map_err(io_at("hand to the relay's copying thread", &whom))
}

/// Connects through `hops` (relays, in order) to `target`, from a host on
/// `nets`; the stream returned reaches the far end.
pub(crate) fn through(
    nets: &[Net],
    hops: &[impl AsOffer],
    target: &[SocketAddr],
    deadline: Instant,
    whom: &str,
) -> Result<TcpStream> {
    let (first, rest) = hops.split_first().ok_or_else(|| JobError::Protocol {
        whom: whom.into(),
        why: "a route through no relay".into(),
    })?;
    let (gateway, offer) = first.offer();
    let at = format!("{whom} through {gateway}");
    let ordered = usable_order(nets, false, &offer.addrs);
    let mut s = connect_any(&ordered, deadline, &at)?;
    let mut hello = [0u8; 8 + TOKEN];
    hello[..8].copy_from_slice(MAGIC);
    hello[8..].copy_from_slice(&offer.token);
    s.write_all(&hello).map_err(io_at("greet the relay", &at))?;
    let request = Request {
        hops: rest.iter().map(|h| h.offer().1.clone()).collect(),
        target: target.to_vec(),
        millis_left: deadline
            .saturating_duration_since(Instant::now())
            .as_millis()
            .min(u128::from(u64::MAX)) as u64,
    };
    write_frame(&mut s, &request, &at)?;
    // The relay answers once its own connection onward is made, which it
    // tries until our deadline: allow it that and a little more.
    let reply: Reply = read_frame(&mut s, deadline + HANDSHAKE_TIMEOUT, &at)?;
    if let Some(why) = reply.error {
        return Err(JobError::Bootstrap {
            step: format!("connect through {gateway}"),
            whom: whom.into(),
            source: std::io::Error::other(why),
        });
    }
    Ok(s)
}

/// A hop of a route: the gateway's name for messages, and its relay.
pub(crate) trait AsOffer {
    /// The gateway's name and relay.
    fn offer(&self) -> (String, &RelayOffer);
}

impl AsOffer for (usize, RelayOffer) {
    fn offer(&self) -> (String, &RelayOffer) {
        (format!("gateway rank {}", self.0), &self.1)
    }
}

impl AsOffer for RelayOffer {
    fn offer(&self) -> (String, &RelayOffer) {
        (format!("the relay at {:?}", self.addrs), self)
    }
}

fn write_frame<T: Serialize>(s: &mut TcpStream, msg: &T, whom: &str) -> Result<()> {
    let body = serde_json::to_vec(msg).map_err(|e| JobError::Protocol {
        whom: whom.into(),
        why: format!("a relay message does not serialise: {e}"),
    })?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&l| (l as usize) <= MAX_REQUEST)
        .ok_or_else(|| JobError::Protocol {
            whom: whom.into(),
            why: format!("a route of {} bytes (at most {MAX_REQUEST})", body.len()),
        })?;
    let mut frame = len.to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    s.write_all(&frame)
        .map_err(io_at("send to the relay", whom))
}

fn read_frame<T: for<'de> Deserialize<'de>>(
    s: &mut TcpStream,
    deadline: Instant,
    whom: &str,
) -> Result<T> {
    let mut deadline = crate::timeout::Deadline::new(deadline);
    let mut len = [0u8; 4];
    crate::auth::read_exact_by(s, &mut len, &mut deadline, whom)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_REQUEST {
        return Err(JobError::Protocol {
            whom: whom.into(),
            why: format!("a relay message of {len} bytes (at most {MAX_REQUEST})"),
        });
    }
    let mut body = vec![0u8; len];
    crate::auth::read_exact_by(s, &mut body, &mut deadline, whom)?;
    s.set_read_timeout(None).map_err(io_at("configure", whom))?;
    crate::oob::decode(&body, whom)
}

fn io_at<'a>(step: &'a str, whom: &'a str) -> impl Fn(std::io::Error) -> JobError + 'a {
    move |source| JobError::Bootstrap {
        step: step.into(),
        whom: whom.into(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::Shutdown;

    fn nets() -> Vec<Net> {
        // Two networks, so that the listener binds; both this host's
        // loopback in effect (the relay connects onward to 127.0.0.1).
        vec![
            Net {
                addr: "127.0.0.1".parse().unwrap(),
                prefix: 8,
            },
            Net {
                addr: "127.0.0.2".parse().unwrap(),
                prefix: 8,
            },
        ]
    }

    /// A relay on loopback, and its offer.
    fn relay() -> (Relay, RelayOffer) {
        let l = RelayListener::bind(&nets()).unwrap().unwrap();
        let mut offer = l.offer().clone();
        let port = offer.addrs[0].port();
        offer.addrs = vec![SocketAddr::from(([127, 0, 0, 1], port))];
        (Relay::start(l, Vec::new()).unwrap(), offer)
    }

    fn deadline() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    #[test]
    fn a_relay_listens_on_the_addresses_it_offers_only() {
        let l = RelayListener::bind(&nets()).unwrap().unwrap();
        let offered = l.offer().addrs.clone();
        assert_eq!(offered.len(), 2, "{offered:?}");
        for (a, net) in offered.iter().zip(nets()) {
            assert_eq!(a.ip(), std::net::IpAddr::V4(net.addr), "{offered:?}");
            assert!(TcpStream::connect(a).is_ok(), "offered {a}");
        }
        // Another address of the same interface: nothing listens there.
        let elsewhere = SocketAddr::from(([127, 0, 0, 3], offered[0].port()));
        assert!(
            TcpStream::connect(elsewhere).is_err(),
            "the relay also listens on {elsewhere}"
        );
    }

    #[test]
    fn bytes_cross_one_relay_and_two_both_ways_and_ends_pass_on() {
        let far = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = vec![far.local_addr().unwrap()];
        let (r1, o1) = relay();
        let (r2, o2) = relay();
        for hops in [
            vec![(1, o1.clone())],
            vec![(1, o1.clone()), (2, o2.clone())],
        ] {
            let mut near = through(&[], &hops, &target, deadline(), "the far end").unwrap();
            let (mut end, _) = far.accept().unwrap();
            // A relay that lost a close fails the test, not hangs it.
            for s in [&near, &end] {
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            }
            let big: Vec<u8> = (0..1 << 20).map(|i| (i * 7 % 251) as u8).collect();
            let sent = big.clone();
            let writer = std::thread::spawn(move || {
                near.write_all(&sent).unwrap();
                near.shutdown(Shutdown::Write).unwrap();
                let mut back = Vec::new();
                near.read_to_end(&mut back).unwrap();
                back
            });
            let mut got = Vec::new();
            end.read_to_end(&mut got).unwrap();
            assert!(
                got == big,
                "{} hops: the far end got other bytes",
                hops.len()
            );
            end.write_all(b"and back").unwrap();
            drop(end);
            assert_eq!(writer.join().unwrap(), b"and back");
        }
        drop((r1, r2));
    }

    #[test]
    fn one_relay_carries_many_connections_at_once_and_counts_them_off() {
        let far = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = vec![far.local_addr().unwrap()];
        let (relay, offer) = relay();
        const N: usize = 40;
        let echo = std::thread::spawn(move || {
            // The far end echoes every connection, each on its own thread.
            let mut threads = Vec::new();
            for _ in 0..N {
                let (mut s, _) = far.accept().unwrap();
                // A relay that lost a close fails the test, not hangs it.
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                threads.push(std::thread::spawn(move || {
                    let mut got = Vec::new();
                    s.read_to_end(&mut got).unwrap();
                    s.write_all(&got).unwrap();
                }));
            }
            threads.into_iter().for_each(|t| t.join().unwrap());
        });
        let clients: Vec<_> = (0..N)
            .map(|i| {
                let hops = vec![(1, offer.clone())];
                let mut s = through(&[], &hops, &target, deadline(), "the far end").unwrap();
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                std::thread::spawn(move || {
                    let sent: Vec<u8> = (0..100_000).map(|k| ((k * 31 + i) % 256) as u8).collect();
                    s.write_all(&sent).unwrap();
                    s.shutdown(Shutdown::Write).unwrap();
                    let mut back = Vec::new();
                    s.read_to_end(&mut back).unwrap();
                    back == sent
                })
            })
            .collect();
        let same = clients
            .into_iter()
            .filter(|_| true)
            .map(|c| c.join().unwrap());
        assert_eq!(
            same.filter(|&ok| ok).count(),
            N,
            "every echo came back whole"
        );
        echo.join().unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        while relay.active.load(Ordering::Acquire) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            relay.active.load(Ordering::Acquire),
            0,
            "closed pairs counted off"
        );
    }

    #[test]
    fn a_wrong_token_is_refused_and_a_dead_end_is_named() {
        let (_r, mut offer) = relay();
        let closed = TcpListener::bind("127.0.0.1:0").unwrap();
        let nowhere = vec![closed.local_addr().unwrap()];
        drop(closed);
        let soon = Instant::now() + Duration::from_millis(300);
        let e = through(&[], &[(4, offer.clone())], &nowhere, soon, "rank 9").unwrap_err();
        let text = crate::diag::chain(&e).to_string();
        assert!(
            text.contains("through gateway rank 4") && text.contains("rank 9"),
            "{text}"
        );
        offer.token[0] ^= 1;
        let e = through(&[], &[(4, offer)], &nowhere, deadline(), "rank 9").unwrap_err();
        let text = crate::diag::chain(&e).to_string();
        assert!(text.contains("gateway rank 4"), "{text}");
    }
}
