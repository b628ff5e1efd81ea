//! The socket leaves of setup: dialling an address (or the first of
//! several that answers) until a deadline, dialling again a connection the
//! other side gave up on, and configuring a data stream. They use no other
//! module of the crate's networking, so the mesh, the routes, the relays
//! and the data streams can all use them.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use crate::error::{JobError, Result};
use crate::timeout::Deadline;

/// A peer whose node vanished (no FIN, no reset) while this rank waits for
/// it is declared gone after about this long: keepalive probes every 2 s
/// after 2 s idle, 4 unanswered. A busy peer's kernel still answers, so
/// only a dead node or a cut network trips it. (No `TCP_USER_TIMEOUT`: it
/// would also close a stream whose peer computes for longer without
/// reading, its window full.)
pub(crate) const DEAD_AFTER: Duration = Duration::from_secs(10);

/// `attempt`, made again while it fails as a connection the other side
/// gave up on does ([`lost`]) and `deadline` has not passed.
pub(crate) fn again_if_lost<T>(
    deadline: Instant,
    what: &str,
    mut attempt: impl FnMut() -> Result<T>,
) -> Result<T> {
    let mut backoff = Backoff::setup(Duration::from_millis(20));
    loop {
        match attempt() {
            Err(e) if Instant::now() < crate::timeout::as_moved(deadline) && lost(&e) => {
                tracing::debug!(
                    "{what} was lost ({}): connecting again",
                    crate::diag::chain(&e)
                );
                backoff.snooze();
            }
            done => return done,
        }
    }
}

/// Whether a setup connection failed as one the other side gave up on
/// does (its handshake took longer than it waits, packets being lost):
/// reset, closed or cut short, to be made again.
fn lost(e: &JobError) -> bool {
    use std::error::Error;
    let mut source: Option<&(dyn Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::UnexpectedEof
                    | ErrorKind::BrokenPipe
            );
        }
        source = s.source();
    }
    false
}

pub(crate) fn connect_retry(addr: SocketAddr, deadline: Instant, whom: &str) -> Result<TcpStream> {
    let mut backoff = Backoff::setup(Duration::from_millis(5));
    // A stop found by another step of the same setup counts here too, and
    // one found here in the next steps.
    let mut deadline = Deadline::new(deadline);
    loop {
        let left = deadline.at().saturating_duration_since(Instant::now());
        let attempt = left
            .max(Duration::from_millis(10))
            .min(Duration::from_secs(2));
        let connected = TcpStream::connect_timeout(&addr, attempt);
        // A connect returns within `attempt` while this process runs.
        let passed = deadline.passed_after(attempt);
        match connected {
            // Connecting to a local port nobody listens on yet, the kernel
            // may pick that very port as ours and connect the socket to
            // itself, keeping the listener from binding: drop it and retry.
            Ok(s) if s.local_addr().ok() == Some(addr) => {
                drop(s);
                if passed {
                    return Err(JobError::Bootstrap {
                        step: format!("connect to {addr}"),
                        whom: whom.into(),
                        source: std::io::Error::other(
                            "nothing listens there (the connection reached itself)",
                        ),
                    });
                }
                backoff.snooze();
            }
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            // The other side may not listen yet: retry until the deadline.
            Err(_) if !passed => backoff.snooze(),
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

/// How long [`connect_any`] tries each address in a round.
const ATTEMPT_OF_MANY: Duration = Duration::from_millis(500);

/// Connects to the first of `addrs` that answers, trying them in turn
/// until `deadline`.
pub(crate) fn connect_any(
    addrs: &[SocketAddr],
    deadline: Instant,
    whom: &str,
) -> Result<TcpStream> {
    if let [one] = addrs {
        return connect_retry(*one, deadline, whom);
    }
    let mut backoff = Backoff::setup(Duration::from_millis(5));
    let mut deadline = Deadline::new(deadline);
    loop {
        let mut last = None;
        let mut passed = false;
        for addr in addrs {
            let connected = TcpStream::connect_timeout(addr, ATTEMPT_OF_MANY);
            passed = deadline.passed_after(ATTEMPT_OF_MANY);
            match connected {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Err(e) => last = Some((addr, e)),
            }
        }
        match last {
            Some((addr, e)) if passed => {
                return Err(JobError::Bootstrap {
                    step: format!("connect to {addr} (or any of {addrs:?})"),
                    whom: whom.into(),
                    source: e,
                })
            }
            None => {
                return Err(JobError::Protocol {
                    whom: whom.into(),
                    why: "it advertised no address to connect to".into(),
                })
            }
            Some(_) => backoff.snooze(),
        }
    }
}

/// `TCP_NODELAY` (halos are latency-bound), and keepalive so that a
/// vanished peer is an error within [`DEAD_AFTER`], not a silence until
/// the caller's deadline.
pub(crate) fn configure(s: &TcpStream) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    keep_alive(s, true)
}

/// Turns keepalive (probes every 2 s after 2 s idle, 4 unanswered: about
/// [`DEAD_AFTER`]) on or off. A dialling rank keeps it on until the other
/// side has authenticated the connection: an acceptor that gave up on the
/// handshake first may close with a reset, which is sent once and can be
/// lost; a probe then meets the closed port, is answered with another
/// reset, and the dialler dials again instead of waiting for its deadline.
pub(crate) fn keep_alive(s: &TcpStream, on: bool) -> std::io::Result<()> {
    use nix::sys::socket::{setsockopt, sockopt};
    setsockopt(s, sockopt::KeepAlive, &on)?;
    if on {
        let probe = (DEAD_AFTER.as_secs() / 5).max(1) as u32;
        setsockopt(s, sockopt::TcpKeepIdle, &probe)?;
        setsockopt(s, sockopt::TcpKeepInterval, &probe)?;
        setsockopt(s, sockopt::TcpKeepCount, &4)?;
    }
    Ok(())
}
