//! TCP with the neighbours no faster channel reaches: one stream per peer
//! (from [`sode_job::World::connect_streams`], each proved to be its rank's),
//! non-blocking; every message is a 16-byte header (iteration and the
//! start's shape, tag, length) and its bytes, written with one vectored write straight from the send
//! buffer. Nothing is allocated per exchange.
//!
//! Ordering: a peer's messages of iteration n precede its messages of n + 1
//! on the stream, and a rank reads from a peer only while it still expects
//! messages of its current iteration from it; so a fast peer's next
//! iteration waits in the socket, never in a buffer the caller still reads.

use std::io::{ErrorKind, IoSlice, IoSliceMut, Read};
use std::net::TcpStream;
use std::time::Instant;

use super::{names, Built, Channel, Locality, Member, Placed, Setup};
use crate::error::{HaloError, Result};

const HEADER: usize = 16;
/// I/O vectors per write: two per message (header, payload).
const MAX_SLICES: usize = 64;
/// Streams one blocking wait polls at once.
const POLL_MAX: usize = 16;
/// The longest sleep in `poll` while every pending stream is polled.
const LONG_NAP: std::time::Duration = std::time::Duration::from_millis(50);
/// The longest sleep while more than [`POLL_MAX`] streams are pending.
const SHORT_NAP: std::time::Duration = std::time::Duration::from_millis(2);

/// A message this rank sends or receives over TCP.
#[derive(Debug, Clone, Copy)]
struct TcpMessage {
    /// The other rank.
    pub peer: usize,
    /// Its tag (unique per peer and direction).
    pub tag: u32,
    /// Bytes per iteration.
    pub len: usize,
}

/// What precedes each message on the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    /// The iteration, below [`SHAPE_SHIFT`] bits (it never reaches them).
    iteration: u64,
    /// What part of the exchange the start moves ([`crate::start_shape`]),
    /// in the iteration word's top byte.
    shape: u8,
    tag: u32,
    /// Checked at build to fit.
    len: u32,
}

/// Where the shape sits in the iteration word.
const SHAPE_SHIFT: u32 = 56;

impl Header {
    fn encode(self) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        let word = self.iteration & ((1 << SHAPE_SHIFT) - 1) | u64::from(self.shape) << SHAPE_SHIFT;
        h[..8].copy_from_slice(&word.to_le_bytes());
        h[8..12].copy_from_slice(&self.tag.to_le_bytes());
        h[12..].copy_from_slice(&self.len.to_le_bytes());
        h
    }

    fn decode(h: &[u8; HEADER]) -> Header {
        let [i0, i1, i2, i3, i4, i5, i6, i7, t0, t1, t2, t3, l0, l1, l2, l3] = *h;
        let word = u64::from_le_bytes([i0, i1, i2, i3, i4, i5, i6, i7]);
        Header {
            iteration: word & ((1 << SHAPE_SHIFT) - 1),
            shape: (word >> SHAPE_SHIFT) as u8,
            tag: u32::from_le_bytes([t0, t1, t2, t3]),
            len: u32::from_le_bytes([l0, l1, l2, l3]),
        }
    }
}

/// A message this rank sends: its bytes, and its header for the current
/// iteration (filled at `start`).
#[derive(Debug)]
struct Outgoing {
    tag: u32,
    buf: Vec<u8>,
    /// Bytes of `buf` each iteration carries (all unless told otherwise).
    carried: usize,
    header: [u8; HEADER],
}

/// A message this rank receives.
#[derive(Debug)]
struct Incoming {
    tag: u32,
    buf: Vec<u8>,
    /// Bytes each iteration carries (all of `buf` unless told otherwise).
    carried: usize,
    /// Arrived in the current iteration.
    arrived: bool,
}

/// Where one peer's stream stands in the current iteration.
#[derive(Debug)]
struct Conn {
    rank: usize,
    stream: TcpStream,
    /// Indices into the channel's sends to this peer, in the order written.
    sends: Vec<usize>,
    /// Indices into the channel's receives from this peer.
    recvs: Vec<usize>,
    /// The send being written (index into `sends`) and bytes of its header
    /// and payload written so far.
    next_send: usize,
    sent: usize,
    /// Messages received from it this iteration.
    received: usize,
    header_in: [u8; HEADER],
    header_got: usize,
    /// The receive whose payload is being read, and its bytes read.
    reading: Option<usize>,
    payload_got: usize,
}

/// Every TCP neighbour's messages, one stream per peer.
#[derive(Debug)]
pub(crate) struct TcpChannel {
    conns: Vec<Conn>,
    sends: Vec<Outgoing>,
    recvs: Vec<Incoming>,
    iteration: u64,
    /// The shape of this rank's starts ([`Channel::set_shape`]).
    shape: u8,
    names: String,
    /// The job, whose verdict on a dead rank wakes a sleeping wait.
    job: sode_job::World,
}

impl TcpChannel {
    /// Sets up TCP streams with `members` (every link to a rank reached
    /// over TCP); collective with each of them.
    pub(crate) fn set_up(setup: &Setup<'_>, members: &[Member<'_>]) -> Result<Built> {
        let (mut out, mut inn) = (Vec::new(), Vec::new());
        let mut placed = Vec::with_capacity(members.len());
        for m in members {
            let mut at = Placed::default();
            let with = |msg: super::Message| TcpMessage {
                peer: m.peer,
                tag: msg.tag,
                len: msg.len,
            };
            if let Some(s) = m.send {
                at.send = Some(out.len());
                out.push(with(s));
            }
            if let Some(r) = m.recv {
                at.recv = Some(inn.len());
                inn.push(with(r));
            }
            placed.push(at);
        }
        let channel = TcpChannel::build(setup.world, out, inn, names(members), setup.timeout)?;
        Ok(Built {
            channel: Box::new(channel),
            placed,
            summary: None,
        })
    }

    /// Connects to every peer of `sends` and `recvs` (message `i` of each is
    /// number `i` on this channel); collective with each of them.
    fn build(
        world: &sode_job::World,
        sends: Vec<TcpMessage>,
        recvs: Vec<TcpMessage>,
        names: String,
        timeout: std::time::Duration,
    ) -> Result<TcpChannel> {
        if let Some(m) = sends
            .iter()
            .chain(&recvs)
            .find(|m| u32::try_from(m.len).is_err())
        {
            return Err(HaloError::Usage {
                op: "build",
                why: format!(
                    "a {}-byte message with rank {}: TCP messages are limited to 4 GiB - 1",
                    m.len, m.peer
                ),
            });
        }
        let peers: std::collections::BTreeSet<usize> =
            sends.iter().chain(&recvs).map(|m| m.peer).collect();
        let streams =
            world
                .connect_streams(&peers, timeout)
                .map_err(|source| HaloError::TcpSetup {
                    neighbours: names.clone(),
                    source: Box::new(source),
                })?;
        let mut conns = Vec::with_capacity(streams.len());
        for (rank, stream) in streams {
            stream
                .set_nonblocking(true)
                .map_err(|source| HaloError::Tcp {
                    neighbours: names.clone(),
                    rank,
                    op: "making the stream non-blocking".into(),
                    source,
                })?;
            let with = |ms: &[TcpMessage]| (0..ms.len()).filter(|&i| ms[i].peer == rank).collect();
            conns.push(Conn {
                rank,
                stream,
                sends: with(&sends),
                recvs: with(&recvs),
                next_send: 0,
                sent: 0,
                received: 0,
                header_in: [0; HEADER],
                header_got: 0,
                reading: None,
                payload_got: 0,
            });
        }
        Ok(TcpChannel {
            job: world.clone(),
            conns,
            sends: sends
                .iter()
                .map(|m| Outgoing {
                    tag: m.tag,
                    buf: vec![0u8; m.len],
                    carried: m.len,
                    header: [0; HEADER],
                })
                .collect(),
            recvs: recvs
                .iter()
                .map(|m| Incoming {
                    tag: m.tag,
                    buf: vec![0u8; m.len],
                    carried: m.len,
                    arrived: false,
                })
                .collect(),
            iteration: 0,
            shape: 0,
            names,
        })
    }

    fn io_error(&self, rank: usize, op: &str, source: std::io::Error) -> HaloError {
        // A peer that ended or died resets its connection: said as its end
        // of stream is.
        let op = match source.kind() {
            ErrorKind::BrokenPipe | ErrorKind::ConnectionReset => {
                format!(
                    "{op} (the peer closed the connection: it freed the exchange, exited or died)"
                )
            }
            _ => op.into(),
        };
        HaloError::Tcp {
            neighbours: self.names.clone(),
            rank,
            op,
            source,
        }
    }

    fn violation(&self, rank: usize, why: String) -> HaloError {
        HaloError::Tcp {
            neighbours: self.names.clone(),
            rank,
            op: "reading a message header".into(),
            source: std::io::Error::new(ErrorKind::InvalidData, why),
        }
    }

    /// Writes as much of conn `c`'s sends as the socket takes: every
    /// header and payload still owed, in one vectored write per call.
    fn progress_sends(&mut self, c: usize) -> Result<bool> {
        let mut moved = false;
        loop {
            let conn = &mut self.conns[c];
            if conn.next_send == conn.sends.len() {
                return Ok(moved);
            }
            let mut slices = [IoSlice::new(&[]); MAX_SLICES];
            let mut used = 0;
            for (k, &s) in conn.sends.iter().enumerate().skip(conn.next_send) {
                if used + 2 > MAX_SLICES {
                    break;
                }
                let skip = if k == conn.next_send { conn.sent } else { 0 };
                let out = &self.sends[s];
                let (head, body) = (&out.header[..], &out.buf[..out.carried]);
                if skip < HEADER {
                    slices[used] = IoSlice::new(&head[skip..]);
                    slices[used + 1] = IoSlice::new(body);
                } else {
                    slices[used + 1] = IoSlice::new(&body[skip - HEADER..]);
                }
                used += 2;
            }
            match send_vectored(&conn.stream, &slices[..used]) {
                Ok(0) => {
                    let rank = conn.rank;
                    return Err(self.io_error(rank, "sending", ErrorKind::WriteZero.into()));
                }
                Ok(mut n) => {
                    moved = true;
                    // Whole messages written, then part of the next.
                    while n > 0 {
                        let s = conn.sends[conn.next_send];
                        let left = HEADER + self.sends[s].carried - conn.sent;
                        if n < left {
                            conn.sent += n;
                            break;
                        }
                        n -= left;
                        conn.next_send += 1;
                        conn.sent = 0;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(moved),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    let rank = conn.rank;
                    return Err(self.io_error(rank, "sending", e));
                }
            }
        }
    }

    /// Reads what conn `c` has of this iteration's messages: a header,
    /// then its payload together with the next header when another
    /// message is due (one system call per message, not two).
    fn progress_recvs(&mut self, c: usize) -> Result<bool> {
        let mut moved = false;
        while self.conns[c].received < self.conns[c].recvs.len() {
            let rank = self.conns[c].rank;
            let read = {
                let conn = &mut self.conns[c];
                match conn.reading {
                    None => conn.stream.read(&mut conn.header_in[conn.header_got..]),
                    Some(r) => {
                        let more = conn.received + 1 < conn.recvs.len();
                        let next = if more {
                            &mut conn.header_in[..]
                        } else {
                            &mut [][..]
                        };
                        let m = &mut self.recvs[r];
                        conn.stream.read_vectored(&mut [
                            IoSliceMut::new(&mut m.buf[conn.payload_got..m.carried]),
                            IoSliceMut::new(next),
                        ])
                    }
                }
            };
            let n = match read {
                Ok(0) => {
                    return Err(self.io_error(
                        rank,
                        "receiving (the peer closed the connection: it freed the exchange, exited or died)",
                        ErrorKind::UnexpectedEof.into(),
                    ))
                }
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(moved),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io_error(rank, "receiving", e)),
            };
            moved = true;
            let spill = match self.conns[c].reading {
                None => n,
                Some(r) => {
                    let want = self.recvs[r].carried - self.conns[c].payload_got;
                    self.conns[c].payload_got += n.min(want);
                    if n >= want {
                        self.finish_recv(c, r);
                    }
                    n.saturating_sub(want)
                }
            };
            // Header bytes: after a header read, or past a payload's end.
            if spill > 0 || self.conns[c].reading.is_none() {
                self.conns[c].header_got += spill;
                if self.conns[c].header_got == HEADER {
                    self.start_payload(c)?;
                }
            }
        }
        Ok(moved)
    }

    /// A full header from conn `c`: which receive it opens, checked.
    fn start_payload(&mut self, c: usize) -> Result<()> {
        let conn = &self.conns[c];
        let Header {
            iteration,
            shape,
            tag,
            len,
        } = Header::decode(&conn.header_in);
        if iteration != self.iteration {
            return Err(self.violation(
                conn.rank,
                format!(
                    "a message of iteration {iteration} while this rank is at {}",
                    self.iteration
                ),
            ));
        }
        let Some(&r) = conn.recvs.iter().find(|&&r| self.recvs[r].tag == tag) else {
            return Err(self.violation(
                conn.rank,
                format!("a message with tag {tag}, which this rank does not receive from it"),
            ));
        };
        if shape != self.shape {
            return Err(self.violation(
                conn.rank,
                format!("a message of shape {shape} (tag {tag}), this rank's start has shape {}: the ranks started different parts of the exchange (other fields, or another depth)", self.shape),
            ));
        }
        let m = &self.recvs[r];
        if m.arrived {
            return Err(self.violation(
                conn.rank,
                format!("tag {tag} twice in iteration {iteration}"),
            ));
        }
        if len as usize != m.carried {
            return Err(self.violation(
                conn.rank,
                format!("{len} bytes for tag {tag}, this rank expects {}", m.carried),
            ));
        }
        let conn = &mut self.conns[c];
        conn.header_got = 0;
        conn.reading = Some(r);
        conn.payload_got = 0;
        if len == 0 {
            self.finish_recv(c, r);
        }
        Ok(())
    }

    fn finish_recv(&mut self, c: usize, r: usize) {
        let conn = &mut self.conns[c];
        conn.reading = None;
        conn.received += 1;
        self.recvs[r].arrived = true;
    }

    fn pass(&mut self) -> Result<bool> {
        let mut complete = true;
        for c in 0..self.conns.len() {
            self.progress_sends(c)?;
            self.progress_recvs(c)?;
            let conn = &self.conns[c];
            complete &= conn.next_send == conn.sends.len() && conn.received == conn.recvs.len();
        }
        Ok(complete)
    }
}

impl Channel for TcpChannel {
    fn locality(&self) -> Locality {
        Locality::Tcp
    }

    fn send_buf(&mut self, msg: usize) -> Result<&mut [u8]> {
        let count = self.sends.len();
        self.sends
            .get_mut(msg)
            .map(|m| &mut m.buf[..])
            .ok_or_else(|| HaloError::Usage {
                op: "send_buf",
                why: format!("no TCP send {msg} (of {count})"),
            })
    }

    fn recv_buf(&self, msg: usize) -> Result<&[u8]> {
        self.recvs
            .get(msg)
            .map(|m| &m.buf[..])
            .ok_or_else(|| HaloError::Usage {
                op: "recv_buf",
                why: format!("no TCP receive {msg} (of {})", self.recvs.len()),
            })
    }

    fn set_shape(&mut self, shape: u8) -> Result<()> {
        self.shape = shape;
        Ok(())
    }

    fn carry_send(&mut self, msg: usize, bytes: usize) -> Result<()> {
        let count = self.sends.len();
        let m = self.sends.get_mut(msg).ok_or_else(|| HaloError::Usage {
            op: "carry_send",
            why: format!("no TCP send {msg} (of {count})"),
        })?;
        m.carried = bytes.min(m.buf.len());
        Ok(())
    }

    fn carry_recv(&mut self, msg: usize, bytes: usize) -> Result<()> {
        let count = self.recvs.len();
        let m = self.recvs.get_mut(msg).ok_or_else(|| HaloError::Usage {
            op: "carry_recv",
            why: format!("no TCP receive {msg} (of {count})"),
        })?;
        m.carried = bytes.min(m.buf.len());
        Ok(())
    }

    fn start(&mut self) -> Result<()> {
        self.iteration += 1;
        self.recvs.iter_mut().for_each(|m| m.arrived = false);
        for m in &mut self.sends {
            m.header = Header {
                iteration: self.iteration,
                shape: self.shape,
                tag: m.tag,
                len: m.carried as u32,
            }
            .encode();
        }
        for conn in &mut self.conns {
            conn.next_send = 0;
            conn.sent = 0;
            conn.received = 0;
        }
        // Hand the kernel what it takes now; the rest goes in `test`.
        for c in 0..self.conns.len() {
            self.progress_sends(c)?;
        }
        Ok(())
    }

    fn test(&mut self) -> Result<bool> {
        self.pass()
    }

    fn park(&mut self, until: Instant) -> Option<Result<bool>> {
        if sode_job::WaitPolicy::current() != sode_job::WaitPolicy::Block {
            return None;
        }
        Some(self.park_on_sockets(until))
    }

    fn outstanding(&self) -> String {
        let mut out = Vec::new();
        for conn in &self.conns {
            let sends = conn.sends.len() - conn.next_send;
            let recvs = conn.recvs.len() - conn.received;
            if sends + recvs > 0 {
                out.push(format!(
                    "rank {}: {sends} sends not yet written, {recvs} receives not arrived",
                    conn.rank
                ));
            }
        }
        format!("TCP with {}: {}", self.names, out.join("; "))
    }
}

impl TcpChannel {
    /// A pass, then, if incomplete, a `poll` on the streams that still owe
    /// or are owed bytes, until one is ready or `until` (at most [`LONG_NAP`]).
    fn park_on_sockets(&mut self, until: Instant) -> Result<bool> {
        use std::os::fd::AsFd;
        if self.pass()? {
            return Ok(true);
        }
        // The streams still owing or owed bytes, the first POLL_MAX of them
        // in an array on the stack: parking allocates nothing.
        let wants = |conn: &Conn| {
            let mut flags = nix::poll::PollFlags::empty();
            if conn.next_send < conn.sends.len() {
                flags |= nix::poll::PollFlags::POLLOUT;
            }
            if conn.received < conn.recvs.len() {
                flags |= nix::poll::PollFlags::POLLIN;
            }
            flags
        };
        let mut pending = self.conns.iter().filter(|c| !wants(c).is_empty());
        let Some(first) = pending.next() else {
            return Ok(false);
        };
        let mut count = 1;
        // One slot more than streams: the job's verdict.
        let mut polled: [nix::poll::PollFd<'_>; POLL_MAX + 1] = std::array::from_fn(|i| {
            // Unused slots repeat the first stream with no events asked.
            let conn = match i {
                0 => Some(first),
                _ if i < POLL_MAX => pending.next(),
                _ => None,
            };
            match conn {
                Some(c) => {
                    count += usize::from(i > 0);
                    nix::poll::PollFd::new(c.stream.as_fd(), wants(c))
                }
                None => nix::poll::PollFd::new(first.stream.as_fd(), nix::poll::PollFlags::empty()),
            }
        });
        // A rank found dead anywhere in the job wakes it too.
        if let Some(fd) = self.job.failure_fd() {
            polled[count] = nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN);
            count += 1;
        }
        let polled = &mut polled[..count];
        // A peer's data, its death (end of stream), a vanished node
        // (keepalive) and the job's verdict all wake the poll, so with every
        // pending stream in it the nap can be long; streams left out are
        // served by the next pass.
        let cap = if pending.next().is_some() {
            SHORT_NAP
        } else {
            LONG_NAP
        };
        let nap = until.saturating_duration_since(Instant::now()).min(cap);
        let ms = u16::try_from(nap.as_millis().max(1)).unwrap_or(u16::MAX);
        match nix::poll::poll(polled, nix::poll::PollTimeout::from(ms)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(false),
            Err(e) => Err(HaloError::Tcp {
                neighbours: self.names.clone(),
                rank: self.conns.first().map_or(0, |c| c.rank),
                op: "waiting on the streams".into(),
                source: e.into(),
            }),
        }
    }
}

/// One vectored write to `stream`, as `sendmsg` with `MSG_NOSIGNAL`: a
/// peer that reset the connection fails it with `EPIPE`. `writev` (std's
/// `write_vectored`) would also raise `SIGPIPE`, which ends a C program
/// (only Rust's own `main` ignores the signal).
fn send_vectored(stream: &TcpStream, slices: &[IoSlice<'_>]) -> std::io::Result<usize> {
    use nix::sys::socket::{sendmsg, MsgFlags, SockaddrStorage};
    use std::os::fd::AsRawFd;
    sendmsg::<SockaddrStorage>(
        stream.as_raw_fd(),
        slices,
        &[],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_little_endian() {
        let h = Header {
            iteration: 0x0002_0304_0506_0708,
            shape: 0x7f,
            tag: 0x0a0b_0c0d,
            len: 4096,
        };
        let bytes = h.encode();
        assert_eq!(bytes[0], 0x08, "little-endian on the wire");
        assert_eq!(bytes[7], 0x7f, "the shape in the iteration word's top byte");
        assert_eq!(bytes[8], 0x0d);
        assert_eq!(Header::decode(&bytes), h);
    }

    /// A connection whose peer closed it with bytes unread: the peer's
    /// kernel answered with a reset.
    fn reset_connection() -> TcpStream {
        use std::io::Write;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ours = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (theirs, _) = listener.accept().unwrap();
        (&ours).write_all(b"never read").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop(theirs);
        std::thread::sleep(std::time::Duration::from_millis(20));
        ours
    }

    type Send = fn(&TcpStream, &[IoSlice<'_>]) -> std::io::Result<usize>;

    /// Whether three sends by `send` to a reset connection raised SIGPIPE,
    /// and how they failed. The sending thread blocks the signal, so one
    /// raised stays pending there (even while the test harness ignores it),
    /// where a signalfd reads it.
    fn sigpipe_of(send: Send) -> (bool, Vec<ErrorKind>) {
        use nix::sys::signal::{SigSet, Signal};
        use nix::sys::signalfd::{SfdFlags, SignalFd};
        std::thread::spawn(move || {
            let mut pipe = SigSet::empty();
            pipe.add(Signal::SIGPIPE);
            pipe.thread_block().unwrap();
            let pending = SignalFd::with_flags(&pipe, SfdFlags::SFD_NONBLOCK).unwrap();
            let ours = reset_connection();
            let failed = (0..3)
                .filter_map(|_| send(&ours, &[IoSlice::new(b"halo")]).err())
                .map(|e| e.kind())
                .collect();
            (pending.read_signal().unwrap().is_some(), failed)
        })
        .join()
        .unwrap()
    }

    /// A C program keeps SIGPIPE's default action, which ends the process:
    /// a send to a neighbour whose connection was reset (it died) must
    /// fail instead. `writev` raises the signal there, so the check can
    /// tell.
    #[test]
    fn a_send_to_a_reset_connection_fails_without_raising_sigpipe() {
        #[allow(clippy::disallowed_methods)]
        let by_writev: Send = |s, b| std::io::Write::write_vectored(&mut &*s, b);
        let (raised, _) = sigpipe_of(by_writev);
        assert!(
            raised,
            "writev to a reset connection raised no SIGPIPE: the check cannot tell"
        );
        let (raised, failed) = sigpipe_of(send_vectored);
        assert!(!raised, "send_vectored raised SIGPIPE");
        assert_eq!(
            failed,
            [
                ErrorKind::ConnectionReset,
                ErrorKind::BrokenPipe,
                ErrorKind::BrokenPipe
            ]
        );
    }
}
