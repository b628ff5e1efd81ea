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

/// Whether a connection attempt failed for want of this process's or
/// this node's resources (descriptors, socket buffers, memory): another
/// attempt fails alike, so it is reported at once, where the neighbours
/// can learn of it, rather than retried until the deadline.
fn out_of_resources(e: &std::io::Error) -> bool {
    e.raw_os_error()
        .is_some_and(|n| [libc::EMFILE, libc::ENFILE, libc::ENOBUFS, libc::ENOMEM].contains(&n))
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
            // The other side may not listen yet: retry until the deadline
            // (but not what waiting cannot mend).
            Err(e) if !passed && !out_of_resources(&e) => backoff.snooze(),
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
            Some((addr, e)) if passed || out_of_resources(&e) => {
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

#[cfg(test)]
mod tests {
    use super::*;

    const WITHOUT_DESCRIPTORS: &str = "SODE_DIAL_TEST_WITHOUT_DESCRIPTORS";

    /// A rank out of descriptors cannot make a socket, and will not by
    /// waiting: its connection attempt fails at once, saying so, rather
    /// than at the deadline (or never, without one) while its neighbours
    /// wait for it. Run in a child process (this test executable again),
    /// which takes every descriptor it may open first.
    #[test]
    fn a_connection_attempt_without_descriptors_fails_at_once() {
        if std::env::var_os(WITHOUT_DESCRIPTORS).is_some() {
            let mut held = Vec::new();
            while let Ok(f) = std::fs::File::open("/dev/null") {
                held.push(f);
            }
            let began = Instant::now();
            let nobody = SocketAddr::from(([127, 0, 0, 1], 9));
            let tried = connect_retry(nobody, Instant::now() + Duration::from_secs(30), "rank 1");
            let took = began.elapsed();
            drop(held);
            match tried {
                Ok(_) => println!("outcome: connected"),
                Err(e) => println!(
                    "outcome: {} ms: {}",
                    took.as_millis(),
                    crate::diag::chain(&e)
                ),
            }
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "dial::tests::a_connection_attempt_without_descriptors_fails_at_once",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(WITHOUT_DESCRIPTORS, "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let outcome = text
            .lines()
            .find_map(|l| l.split_once("outcome: ").map(|(_, o)| o))
            .unwrap_or_else(|| panic!("the child said nothing:\n{text}"));
        let (ms, why) = outcome.split_once(" ms: ").expect(outcome);
        let ms: u64 = ms.parse().unwrap();
        assert!(
            ms < 1_000,
            "an attempt without descriptors took {ms} ms: {why}"
        );
        assert!(why.contains("run out of file descriptors"), "{why}");
    }
}
