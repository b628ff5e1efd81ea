//! Proving that a connection belongs to the job: a per-job secret, a mutual
//! challenge-response on every bootstrap connection, and a MAC on every
//! message after it (HMAC-SHA-256 from the RustCrypto `hmac` crate).
//!
//! Handshake, on a fresh TCP connection (`A` accepts, `C` connects):
//!
//! 1. `A` → `C`: a 32-byte random challenge `a`.
//! 2. `C` → `A`: a 32-byte random challenge `c` and
//!    `HMAC(secret, "sode/1 connect" ‖ a ‖ c)`.
//! 3. `A` checks it (in constant time) and answers
//!    `HMAC(secret, "sode/1 accept" ‖ a ‖ c)`, which `C` checks; or, when
//!    the proof is wrong, answers the fixed 32 bytes [`REFUSED`] and
//!    closes, so that a rank given another secret fails at once, naming
//!    it, instead of dialling again until its deadline. (A stranger learns
//!    only that it does not hold the secret, which it knew.)
//!
//! Both sides then derive `k = HMAC(secret, "sode/1 session" ‖ a ‖ c)` and
//! every frame carries `HMAC(k, direction ‖ sequence ‖ body)`, so a frame
//! cannot be forged, replayed, reordered or moved to another connection.
//! Every handshake message has a fixed length: nothing a stranger sends is
//! read as a length. Secrecy of the payload is not provided (the network
//! sees queue-pair numbers and keys); integrity and authenticity are.

use std::fmt;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use crate::timeout::Deadline;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::error::{JobError, Result};

type HmacSha256 = Hmac<Sha256>;

/// The variable that carries the job's secret (64 hex digits).
pub const SECRET_VAR: &str = "SODE_JOB_SECRET";

/// Bytes of a challenge and of a tag.
const NONCE: usize = 32;
const TAG: usize = 32;

/// The bytes of a rank's share of a job's secret ([`Secret::from_shares`]).
pub(crate) const SHARE: usize = 16;

/// The answer to a wrong proof, in place of the acceptor's tag: no
/// HMAC-SHA-256 output is this string but with probability 2^-256.
const REFUSED: [u8; TAG] = *b"sode/1 refused: not this job's!!";

/// How long one connection may take to prove itself: a silent or slow
/// stranger holds the accept loop no longer than this.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Setup messages are at most this long (checked after authentication too).
pub const MAX_MESSAGE: usize = 64 << 20;

/// The job's shared secret: 32 random bytes, known to its ranks only.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret([u8; 32]);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// A fresh random secret, for a launcher to hand its ranks.
    ///
    /// # Errors
    ///
    /// [`JobError::Start`] when the system's random source fails.
    pub fn random() -> Result<Secret> {
        random_bytes("the job secret").map(Secret)
    }

    /// The secret from 64 hex digits (as in `SODE_JOB_SECRET`).
    ///
    /// # Errors
    ///
    /// [`JobError::InvalidSetting`] for anything but 64 hex digits (the
    /// value is not shown).
    pub fn from_hex(text: &str) -> Result<Secret> {
        let bad = || {
            JobError::InvalidSetting {
            name: SECRET_VAR.into(),
            value: "(not shown)".into(),
            why: "expected 64 hex digits (32 bytes), e.g. from `od -An -tx1 -N32 /dev/urandom | tr -d ' \\n'`".into(),
        }
        };
        unhex(text.trim())
            .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
            .map(Secret)
            .ok_or_else(bad)
    }

    /// The secret a job's ranks make together when each adds a random
    /// share and all receive every share (as through a program's
    /// allgather): unguessable while any one share is.
    pub(crate) fn from_shares(shares: &[[u8; SHARE]]) -> Secret {
        let parts: Vec<&[u8]> = shares.iter().map(|s| &s[..]).collect();
        Secret(mac(b"sode/1 job secret", b"from the ranks' shares", &parts))
    }

    /// The secret as 64 hex digits.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    fn mac(&self, label: &[u8], parts: &[&[u8]]) -> [u8; TAG] {
        mac(&self.0, label, parts)
    }
}

/// `bytes` as lowercase hex digits, two per byte.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of an even number of hex digits; none for anything else.
pub(crate) fn unhex(text: &str) -> Option<Vec<u8>> {
    // Digits only: from_str_radix alone would take "+f".
    if text.len() % 2 != 0 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Whether `a` and `b` are equal, in time that does not tell how much of
/// them matched (for tokens a stranger sends).
pub(crate) fn same_token(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn keyed(key: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length: this cannot fail.
    <HmacSha256 as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!())
}

fn mac(key: &[u8], label: &[u8], parts: &[&[u8]]) -> [u8; TAG] {
    let mut m = keyed(key);
    m.update(label);
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

fn verify(key: &[u8], label: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
    let mut m = keyed(key);
    m.update(label);
    for p in parts {
        m.update(p);
    }
    m.verify_slice(tag).is_ok()
}

fn nonce() -> Result<[u8; NONCE]> {
    random_bytes("a bootstrap challenge")
}

/// `N` random bytes from the operating system, for `what` (named in the
/// error when there is no randomness).
pub(crate) fn random_bytes<const N: usize>(what: &str) -> Result<[u8; N]> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| JobError::Start {
        why: format!("no randomness for {what}: {e}"),
        source: None,
    })?;
    Ok(b)
}

/// An authenticated connection: every frame carries a MAC under the
/// session key, with a sequence number per direction.
#[derive(Debug)]
pub(crate) struct Session {
    stream: TcpStream,
    key: [u8; TAG],
    /// 0 on the connecting side, 1 on the accepting side.
    direction: u8,
    sent: u64,
    received: u64,
    whom: String,
}

impl Session {
    /// Proves to the acceptor on `stream` that we hold `secret`, and checks
    /// that it does too. Waits until `deadline`: the acceptor may be busy.
    pub(crate) fn connect(
        stream: TcpStream,
        secret: &Secret,
        whom: &str,
        deadline: Instant,
    ) -> Result<Session> {
        let mut s = stream;
        let mut deadline = Deadline::new(deadline);
        let mut a = [0u8; NONCE];
        read_exact_by(&mut s, &mut a, &mut deadline, whom)?;
        let c = nonce()?;
        let proof = secret.mac(b"sode/1 connect", &[&a, &c]);
        write_all(&mut s, &[&c[..], &proof[..]].concat(), whom)?;
        let mut answer = [0u8; TAG];
        read_exact_by(&mut s, &mut answer, &mut deadline, whom)?;
        if answer == REFUSED {
            return Err(JobError::SecretRefused { whom: whom.into() });
        }
        if !verify(&secret.0, b"sode/1 accept", &[&a, &c], &answer) {
            return Err(not_in_job(whom));
        }
        Ok(Session::new(s, secret, &a, &c, 0, whom))
    }

    /// Challenges the connector on `stream`; fails (and the caller drops the
    /// connection) unless it proves it holds `secret`.
    pub(crate) fn accept(stream: TcpStream, secret: &Secret, whom: &str) -> Result<Session> {
        let mut deadline = Deadline::new(Instant::now() + HANDSHAKE_TIMEOUT);
        let mut s = stream;
        let a = nonce()?;
        write_all(&mut s, &a, whom)?;
        let mut reply = [0u8; NONCE + TAG];
        read_exact_by(&mut s, &mut reply, &mut deadline, whom)?;
        let (c, proof) = reply.split_at(NONCE);
        if !verify(&secret.0, b"sode/1 connect", &[&a, c], proof) {
            // Best effort: the connection is dropped either way.
            let _ = s.write_all(&REFUSED);
            return Err(not_in_job(whom));
        }
        let answer = secret.mac(b"sode/1 accept", &[&a, c]);
        write_all(&mut s, &answer, whom)?;
        Ok(Session::new(s, secret, &a, c, 1, whom))
    }

    fn new(
        stream: TcpStream,
        secret: &Secret,
        a: &[u8],
        c: &[u8],
        direction: u8,
        whom: &str,
    ) -> Session {
        Session {
            stream,
            key: secret.mac(b"sode/1 session", &[a, c]),
            direction,
            sent: 0,
            received: 0,
            whom: whom.into(),
        }
    }

    /// Names the other side once it has said who it is.
    pub(crate) fn rename(&mut self, whom: String) {
        self.whom = whom;
    }

    /// Sends one frame: length, body, tag.
    pub(crate) fn send(&mut self, body: &[u8]) -> Result<()> {
        let len = u32::try_from(body.len())
            .ok()
            .filter(|&l| l as usize <= MAX_MESSAGE)
            .ok_or_else(|| JobError::Protocol {
                whom: self.whom.clone(),
                why: format!(
                    "a {}-byte setup message (the limit is {MAX_MESSAGE})",
                    body.len()
                ),
            })?;
        let tag = mac(
            &self.key,
            &[self.direction],
            &[&self.sent.to_le_bytes(), body],
        );
        self.sent += 1;
        let frame = [&len.to_le_bytes()[..], body, &tag[..]].concat();
        write_all(&mut self.stream, &frame, &self.whom)
    }

    /// Receives one frame and checks its tag.
    pub(crate) fn recv(&mut self, deadline: Instant) -> Result<Vec<u8>> {
        self.recv_by(&mut Deadline::new(deadline))
    }

    /// [`recv`](Self::recv) before a deadline that several receives share:
    /// time this process is found stopped in one moves it on for the next.
    pub(crate) fn recv_by(&mut self, deadline: &mut Deadline) -> Result<Vec<u8>> {
        let mut len = [0u8; 4];
        read_exact_by(&mut self.stream, &mut len, deadline, &self.whom)?;
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_MESSAGE {
            return Err(JobError::Protocol {
                whom: self.whom.clone(),
                why: format!("a {len}-byte message (the limit is {MAX_MESSAGE})"),
            });
        }
        let mut body = vec![0u8; len + TAG];
        // The frame has begun: its body follows, and is read whole though
        // the deadline passed meanwhile (a verdict sent at it, say).
        let mut rest = if deadline.passed() {
            Deadline::new(Instant::now() + FRAME_REST)
        } else {
            deadline.clone()
        };
        read_exact_by(&mut self.stream, &mut body, &mut rest, &self.whom)?;
        let tag = body.split_off(len);
        let theirs = 1 - self.direction;
        if !verify(
            &self.key,
            &[theirs],
            &[&self.received.to_le_bytes(), &body],
            &tag,
        ) {
            return Err(JobError::Protocol {
                whom: self.whom.clone(),
                why: "a message whose authentication tag is wrong (altered, replayed or injected on the network)".into(),
            });
        }
        self.received += 1;
        Ok(body)
    }

    /// Waits, taking nothing from the link, until a frame has begun to
    /// arrive or the link ended or failed (`true`), or until `until`
    /// (`false`); it looks at least once.
    pub(crate) fn arriving_by(&mut self, until: Instant) -> bool {
        if self.has_arrived() || self.arrives_while_spinning(until) {
            return true;
        }
        loop {
            let left = until
                .saturating_duration_since(Instant::now())
                .min(READ_SLICE);
            if left.is_zero() {
                return false;
            }
            if self.readable_within(left) {
                return true;
            }
        }
    }

    /// Whether a receive would not wait (a frame has begun to arrive, the
    /// link ended or failed), waiting up to `left` (not zero) to see.
    fn readable_within(&mut self, left: Duration) -> bool {
        if self.stream.set_read_timeout(Some(left)).is_err() {
            return true;
        }
        !matches!(
            self.stream.peek(&mut [0u8; 1]),
            Err(e) if matches!(
                e.kind(),
                ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
            )
        )
    }

    /// Whether a frame begins to arrive within [`STEP_SPIN`] (or by
    /// `until`, if sooner), looking without sleeping as the process's
    /// wait policy allows ([`Backoff::exchange`]): spinning, then yielding;
    /// under `SODE_WAIT=block` only 20 yields. Ranks taking a collective
    /// step together (leaving a barrier) are microseconds apart; a read
    /// that sleeps would cost this rank a wake-up (tens of microseconds on
    /// a virtual machine's idle CPU), which its peers would then wait for
    /// in whatever they do next.
    fn arrives_while_spinning(&self, until: Instant) -> bool {
        let end = until.min(Instant::now() + STEP_SPIN);
        let mut backoff = Backoff::exchange();
        while Instant::now() < end && !backoff.blocks() {
            if self.has_arrived() {
                return true;
            }
            backoff.snooze();
        }
        false
    }

    /// Whether a frame has begun to arrive, now.
    fn has_arrived(&self) -> bool {
        use nix::sys::socket::{recv, MsgFlags};
        use std::os::fd::AsRawFd;
        let flags = MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT;
        matches!(recv(self.stream.as_raw_fd(), &mut [0u8; 1], flags), Ok(n) if n > 0)
    }

    /// The connection, for address queries and liveness checks.
    pub(crate) fn stream(&self) -> &TcpStream {
        &self.stream
    }
}

fn not_in_job(whom: &str) -> JobError {
    JobError::Unauthenticated { whom: whom.into() }
}

fn write_all(s: &mut TcpStream, bytes: &[u8], whom: &str) -> Result<()> {
    s.write_all(bytes).map_err(|e| JobError::Bootstrap {
        step: "send".into(),
        whom: whom.into(),
        source: e,
    })
}

/// The longest a read sleeps before it looks at its deadline again: well
/// under [`STOPPED_GAP`](crate::timeout::STOPPED_GAP), so that a stretch
/// longer than that is time this process was stopped, not waited.
const READ_SLICE: Duration = Duration::from_millis(250);

/// How long a rank looks for a step's next message without sleeping
/// before it sleeps on the link ([`Session::arriving_by`]), unless its wait
/// policy blocks sooner.
const STEP_SPIN: Duration = Duration::from_micros(200);

/// How long the rest of a frame whose length arrived by the deadline may
/// take after it.
const FRAME_REST: Duration = Duration::from_secs(5);

/// Reads exactly `buf.len()` bytes before `deadline` (which time this
/// process is stopped does not bring nearer: a job suspended in a
/// collective step resumes).
pub(crate) fn read_exact_by(
    s: &mut TcpStream,
    mut buf: &mut [u8],
    deadline: &mut Deadline,
    whom: &str,
) -> Result<()> {
    let began = Instant::now();
    let stopped_before = deadline.stopped();
    while !buf.is_empty() {
        let passed = deadline.passed();
        let left = deadline
            .at()
            .saturating_duration_since(Instant::now())
            .min(READ_SLICE);
        if passed || left.is_zero() {
            return Err(JobError::BootstrapTimeout {
                step: "receive".into(),
                whom: whom.into(),
                waited: began
                    .elapsed()
                    .saturating_sub(deadline.stopped() - stopped_before),
                hint: "no message before the deadline".into(),
            });
        }
        s.set_read_timeout(Some(left))
            .map_err(|e| JobError::Bootstrap {
                step: "set_read_timeout".into(),
                whom: whom.into(),
                source: e,
            })?;
        match s.read(buf) {
            Ok(0) => {
                return Err(JobError::Bootstrap {
                    step: "receive".into(),
                    whom: whom.into(),
                    source: std::io::Error::new(
                        ErrorKind::UnexpectedEof,
                        "connection closed (the process freed its communicator or World, exited or died)",
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair(secret_c: Secret, secret_a: Secret) -> (Result<Session>, Result<Session>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            Session::accept(s, &secret_a, "connector")
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        let c = Session::connect(
            TcpStream::connect(addr).unwrap(),
            &secret_c,
            "acceptor",
            deadline,
        );
        (c, t.join().unwrap())
    }

    #[test]
    fn the_same_secret_authenticates_both_ways_and_frames_carry_tags() {
        let s = Secret::random().unwrap();
        let (c, a) = pair(s.clone(), s);
        let (mut c, mut a) = (c.unwrap(), a.unwrap());
        c.send(b"hello").unwrap();
        c.send(b"").unwrap();
        let d = Instant::now() + Duration::from_secs(5);
        assert_eq!(a.recv(d).unwrap(), b"hello");
        assert_eq!(a.recv(d).unwrap(), b"");
        a.send(b"back").unwrap();
        assert_eq!(c.recv(d).unwrap(), b"back");
    }

    #[test]
    fn arriving_by_sees_a_frame_sent_while_it_looks_and_keeps_its_deadline() {
        let s = Secret::random().unwrap();
        let (c, a) = pair(s.clone(), s);
        let (mut c, mut a) = (c.unwrap(), a.unwrap());
        // Nothing sent: a deadline shorter than the look without sleeping
        // ends it, and a longer one is kept too.
        for wait in [Duration::from_micros(50), Duration::from_millis(20)] {
            let t = Instant::now();
            assert!(!a.arriving_by(t + wait));
            let took = t.elapsed();
            assert!(
                took >= wait && took < wait + Duration::from_millis(500),
                "{took:?}"
            );
        }
        // Sent during the look, and sent once the receiver sleeps on the
        // socket: both are seen, and the frame is still there to take.
        for delay in [Duration::from_micros(20), STEP_SPIN * 5] {
            let sender = std::thread::spawn(move || {
                std::thread::sleep(delay);
                c.send(b"late").unwrap();
                c
            });
            assert!(a.arriving_by(Instant::now() + Duration::from_secs(5)));
            c = sender.join().unwrap();
            let d = Instant::now() + Duration::from_secs(5);
            assert_eq!(a.recv(d).unwrap(), b"late");
        }
    }

    #[test]
    fn a_wrong_secret_is_refused_on_both_sides() {
        let (c, a) = pair(Secret::random().unwrap(), Secret::random().unwrap());
        let e = a.unwrap_err().to_string();
        assert!(e.contains("does not belong to this job"), "{e}");
        // Told, not left to guess: a lost connection would be dialled again.
        let e = c.unwrap_err();
        assert!(
            matches!(e, JobError::SecretRefused { .. })
                && e.to_string().contains("SODE_JOB_SECRET"),
            "{e}"
        );
    }

    #[test]
    fn an_altered_or_replayed_frame_is_refused() {
        let s = Secret::random().unwrap();
        let (c, a) = pair(s.clone(), s.clone());
        let (mut c, mut a) = (c.unwrap(), a.unwrap());
        // A frame whose body was changed on the way.
        let tag = mac(&c.key, &[0], &[&0u64.to_le_bytes(), b"abc"]);
        let forged = [&3u32.to_le_bytes()[..], b"abd", &tag[..]].concat();
        c.stream.write_all(&forged).unwrap();
        let e = a
            .recv(Instant::now() + Duration::from_secs(5))
            .unwrap_err()
            .to_string();
        assert!(e.contains("authentication tag"), "{e}");
        // A genuine frame sent again (replay): its sequence number is stale.
        let (c2, a2) = pair(s.clone(), s);
        let (mut c2, mut a2) = (c2.unwrap(), a2.unwrap());
        let tag = mac(&c2.key, &[0], &[&0u64.to_le_bytes(), b"x"]);
        let frame = [&1u32.to_le_bytes()[..], b"x", &tag[..]].concat();
        c2.stream.write_all(&frame).unwrap();
        c2.stream.write_all(&frame).unwrap();
        let d = Instant::now() + Duration::from_secs(5);
        assert_eq!(a2.recv(d).unwrap(), b"x");
        assert!(a2.recv(d).is_err(), "a replayed frame is refused");
    }

    #[test]
    fn secrets_parse_from_hex_only() {
        let s = Secret::random().unwrap();
        assert_eq!(Secret::from_hex(&s.to_hex()).unwrap(), s);
        for bad in ["", "abc", &"g".repeat(64), &"0".repeat(63)] {
            let e = Secret::from_hex(bad).unwrap_err().to_string();
            assert!(
                e.contains("SODE_JOB_SECRET") && !e.contains(&s.to_hex()),
                "{e}"
            );
        }
        assert_eq!(format!("{s:?}"), "Secret(..)");
    }
}
