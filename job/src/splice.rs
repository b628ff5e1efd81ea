//! One thread that copies bytes both ways between the pairs of connections
//! a gateway forwards, however many there are (a thread per connection
//! would cost a gateway of hundreds of forwarded links as many threads).
//!
//! Each direction of a pair has a buffer: bytes are read from one end while
//! there is room and written to the other while there are bytes; an end's
//! close is passed on (`shutdown(Write)` on the other) once its bytes are
//! through, and a pair is done when both directions are. An error or a
//! hang-up on either end cuts both, so that neither end waits on a pair
//! that can no longer carry its bytes.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;

use nix::poll::{PollFd, PollFlags, PollTimeout};

use crate::error::{JobError, Result};

/// Bytes in flight per direction of a pair.
const BUFFER: usize = 256 << 10;

/// The copying thread; dropping it cuts the pairs left and joins it.
#[derive(Debug)]
pub(crate) struct Splicer {
    handle: Option<SpliceHandle>,
    thread: Option<JoinHandle<()>>,
}

/// Hands pairs to a [`Splicer`]; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct SpliceHandle {
    tx: Sender<[TcpStream; 2]>,
    wake: Arc<UnixStream>,
}

impl Splicer {
    /// Starts the thread; `active` counts the pairs it carries (it takes
    /// one off as each is done).
    pub(crate) fn start(active: Arc<AtomicUsize>) -> Result<Splicer> {
        let fail = |step: &'static str| {
            move |source| JobError::Bootstrap {
                step: step.into(),
                whom: "this rank's relay".into(),
                source,
            }
        };
        let (wake, woken) = UnixStream::pair().map_err(fail("socketpair"))?;
        for s in [&wake, &woken] {
            s.set_nonblocking(true).map_err(fail("set_nonblocking"))?;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("sode-relay-splice".into())
            .spawn(move || run(&rx, &woken, &active))
            .map_err(fail("spawning the relay's copying thread"))?;
        Ok(Splicer {
            handle: Some(SpliceHandle {
                tx,
                wake: Arc::new(wake),
            }),
            thread: Some(thread),
        })
    }

    /// A handle to add pairs with.
    pub(crate) fn handle(&self) -> Option<SpliceHandle> {
        self.handle.clone()
    }
}

impl Drop for Splicer {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            // The last sender gone: the thread cuts what is left and ends.
            let wake = h.wake.clone();
            drop(h);
            let _ = (&*wake).write(&[1]);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl SpliceHandle {
    /// Copies between `a` and `b` from now on, both ways.
    pub(crate) fn add(&self, a: TcpStream, b: TcpStream) -> std::io::Result<()> {
        a.set_nonblocking(true)?;
        b.set_nonblocking(true)?;
        self.tx
            .send([a, b])
            .map_err(|_| std::io::Error::other("the relay is stopping"))?;
        match (&*self.wake).write(&[1]) {
            // Full: the thread has wake-ups pending anyway.
            Err(e) if e.kind() != ErrorKind::WouldBlock => Err(e),
            _ => Ok(()),
        }
    }
}

/// One direction of a pair: bytes read from one end, not yet written to
/// the other.
struct Way {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// The source end closed its side.
    eof: bool,
    /// The close passed on to the other end.
    shut: bool,
}

struct Pair {
    ends: [TcpStream; 2],
    /// `ways[w]` carries `ends[w]` to `ends[1 - w]`.
    ways: [Way; 2],
}

impl Pair {
    fn new(ends: [TcpStream; 2]) -> Pair {
        let way = || Way {
            buf: vec![0u8; BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
            eof: false,
            shut: false,
        };
        Pair {
            ends,
            ways: [way(), way()],
        }
    }

    /// What `poll` should watch on end `e`.
    fn interest(&self, e: usize) -> PollFlags {
        let mut f = PollFlags::empty();
        let reading = &self.ways[e];
        if !reading.eof && reading.end < reading.buf.len() {
            f |= PollFlags::POLLIN;
        }
        let writing = &self.ways[1 - e];
        if writing.end > writing.start {
            f |= PollFlags::POLLOUT;
        }
        f
    }

    /// Moves what can move without blocking; true once the pair is done.
    fn progress(&mut self) -> bool {
        for w in 0..2 {
            if self.step(w).is_err() {
                self.cut();
                return true;
            }
        }
        self.ways.iter().all(|w| w.shut)
    }

    fn step(&mut self, w: usize) -> std::io::Result<()> {
        let (from, to) = (&self.ends[w], &self.ends[1 - w]);
        let way = &mut self.ways[w];
        loop {
            if way.start > 0 && way.end == way.buf.len() {
                way.buf.copy_within(way.start..way.end, 0);
                way.end -= way.start;
                way.start = 0;
            }
            let mut moved = false;
            if !way.eof && way.end < way.buf.len() {
                match (&*from).read(&mut way.buf[way.end..]) {
                    Ok(0) => way.eof = true,
                    Ok(n) => {
                        way.end += n;
                        moved = true;
                    }
                    Err(e) if would_block(&e) => {}
                    Err(e) => return Err(e),
                }
            }
            while way.start < way.end {
                match (&*to).write(&way.buf[way.start..way.end]) {
                    Ok(n) => way.start += n,
                    Err(e) if would_block(&e) => break,
                    Err(e) => return Err(e),
                }
            }
            if way.start == way.end {
                (way.start, way.end) = (0, 0);
            }
            if !moved {
                break;
            }
        }
        if way.eof && way.start == way.end && !way.shut {
            to.shutdown(Shutdown::Write)?;
            way.shut = true;
        }
        Ok(())
    }

    fn cut(&mut self) {
        for e in &self.ends {
            let _ = e.shutdown(Shutdown::Both);
        }
    }
}

fn would_block(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted)
}

/// The thread: takes new pairs, polls every end for what its pair can do,
/// moves bytes; ends when every handle is gone (cutting what is left).
fn run(rx: &Receiver<[TcpStream; 2]>, woken: &UnixStream, active: &AtomicUsize) {
    let mut pairs: Vec<Pair> = Vec::new();
    loop {
        loop {
            match rx.try_recv() {
                Ok(ends) => pairs.push(Pair::new(ends)),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    for mut p in pairs.drain(..) {
                        p.cut();
                        active.fetch_sub(1, Ordering::AcqRel);
                    }
                    return;
                }
            }
        }
        let hangs = PollFlags::POLLERR | PollFlags::POLLHUP;
        let revents: Vec<PollFlags> = {
            let mut fds = vec![PollFd::new(woken.as_fd(), PollFlags::POLLIN)];
            for p in &pairs {
                for e in 0..2 {
                    fds.push(PollFd::new(p.ends[e].as_fd(), p.interest(e)));
                }
            }
            match nix::poll::poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => fds
                    .iter()
                    .map(|f| f.revents().unwrap_or(PollFlags::empty()))
                    .collect(),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    tracing::warn!("the relay's copying stops: poll failed: {e}");
                    return;
                }
            }
        };
        if !revents[0].is_empty() {
            let mut sink = [0u8; 64];
            while matches!((&*woken).read(&mut sink), Ok(n) if n > 0) {}
        }
        let mut done = vec![false; pairs.len()];
        for (i, p) in pairs.iter_mut().enumerate() {
            let (ra, rb) = (revents[1 + 2 * i], revents[2 + 2 * i]);
            if ra.is_empty() && rb.is_empty() {
                continue;
            }
            done[i] = p.progress();
            if !done[i] && (ra | rb).intersects(hangs) {
                p.cut();
                done[i] = true;
            }
        }
        let before = pairs.len();
        let mut finished = done.into_iter();
        pairs.retain(|_| !finished.next().unwrap_or(false));
        active.fetch_sub(before - pairs.len(), Ordering::AcqRel);
    }
}
