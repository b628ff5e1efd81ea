//! The bootstrap under a PMI-1 wire server: MPICH's `mpirun` (Hydra) and
//! Slurm's `srun --mpi=pmi2` hand each rank a connected socket (`PMI_FD`,
//! or Hydra's `PMI_PORT=host:port`) and speak the PMI-1 text protocol on
//! it: `init`, `get_maxes`, `get_my_kvsname`, `put`, `barrier_in`, `get`,
//! `finalize`. Collectives go through put/barrier/get, as over PMIx; the
//! peer links are [`ExternalOob`]'s authenticated TCP mesh (the shares its
//! secret is made from travel through the launcher's key-value space,
//! which the launcher trusts).
//!
//! [`Client`] is the protocol alone over any `Read + Write`, tested against
//! an in-memory server.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::auth::{hex, unhex};
use crate::error::{JobError, Result};
use crate::external::{AllgatherFn, ExternalOob};
use crate::timeout::Deadline;

/// Longest reply line accepted from the server: a value of the largest
/// `vallen_max` servers use, with room to spare.
const MAX_LINE: usize = 64 << 10;

pub use crate::launch::pmi_available as available;

/// One reply: its `key=value` words.
#[derive(Debug)]
struct Reply(HashMap<String, String>);

impl Reply {
    fn parse(line: &str) -> Reply {
        Reply(
            line.split_whitespace()
                .filter_map(|w| w.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }
}

/// A stream whose reads can be given a timeout: a socket.
pub trait Timed: Read + Write {
    /// How long a read may block (`None`: as long as it takes).
    ///
    /// # Errors
    ///
    /// The system's, for a stream that cannot take it.
    fn set_read_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()>;
}

/// A PMI-1 client on a connected stream: one request, one reply line.
pub struct Client<S: Timed> {
    stream: BufReader<S>,
    kvsname: String,
    /// The server's longest value (`vallen_max`).
    value_max: usize,
    finalized: bool,
    /// Whether the session is this client's to end with `finalize`: not
    /// one on the socket the launcher left the process ([`Client::shared`]).
    owns_session: bool,
    /// How long a whole step (the greeting, an allgather) may take, every
    /// request and reply of it together (`None`: each read as the stream
    /// allows).
    step_timeout: Option<Duration>,
    /// When the step under way must be over (moved on by time this process
    /// was stopped), and how long it was given.
    deadline: Option<(Deadline, Duration)>,
}

impl<S: Timed> std::fmt::Debug for Client<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("kvsname", &self.kvsname)
            .field("value_max", &self.value_max)
            .finish()
    }
}

impl<S: Timed> Client<S> {
    /// Greets the server (`init`), and learns its limits and this job's
    /// key-value space.
    ///
    /// # Errors
    ///
    /// The server's refusal, a reply that does not parse, or the wire's
    /// error (a read timeout among them), as text.
    pub fn init(stream: S) -> std::result::Result<Client<S>, String> {
        Self::init_within(stream, None)
    }

    /// [`init`](Self::init) with every later step (the greeting itself,
    /// each [`allgather`](Self::allgather)) given up after `step_timeout`
    /// in all, however its replies trickle in: a rank that never arrives
    /// at a barrier is reported then, not a reply's timeout per request.
    ///
    /// # Errors
    ///
    /// As [`init`](Self::init), the step's timeout among them.
    pub fn init_within(
        stream: S,
        step_timeout: Option<Duration>,
    ) -> std::result::Result<Client<S>, String> {
        let mut c = Client {
            stream: BufReader::new(stream),
            kvsname: String::new(),
            value_max: 0,
            finalized: false,
            owns_session: true,
            step_timeout,
            deadline: None,
        };
        c.begin_step(None);
        let r = c.request("init pmi_version=1 pmi_subversion=1", "response_to_init")?;
        if r.get("pmi_version") != Some("1") {
            return Err(format!(
                "the server speaks PMI version {}, sode PMI 1",
                r.get("pmi_version").unwrap_or("(none)")
            ));
        }
        let r = c.request("get_maxes", "maxes")?;
        c.value_max = number(&r, "vallen_max")?;
        if c.value_max < 16 {
            return Err(format!(
                "the server's values hold at most {} bytes",
                c.value_max
            ));
        }
        let r = c.request("get_my_kvsname", "my_kvsname")?;
        c.kvsname = r
            .get("kvsname")
            .filter(|k| !k.is_empty())
            .ok_or("the server named no key-value space")?
            .to_string();
        c.end_step();
        Ok(c)
    }

    /// What a failed read of the reply to `request` says: the step's
    /// timeout when that is what ran out.
    fn read_error(&self, request: &str, e: &std::io::Error) -> String {
        let timed_out = timed_out(e);
        match &self.deadline {
            Some((_, given)) if timed_out => step_expired(*given, request),
            _ => format!("waiting for the reply to {}: {e}", verb(request)),
        }
    }

    /// Starts a step: its requests share one deadline, `until` or the step
    /// timeout from now.
    fn begin_step(&mut self, until: Option<Instant>) {
        let now = Instant::now();
        self.deadline = until
            .or_else(|| self.step_timeout.map(|t| now + t))
            .map(|at| {
                let given = at.saturating_duration_since(now).as_millis();
                (Deadline::new(at), Duration::from_millis(given as u64))
            });
    }

    /// Ends a step: a request outside one (the farewell) is given a whole
    /// step's time.
    fn end_step(&mut self) {
        self.deadline = None;
        if let Some(t) = self.step_timeout {
            if let Err(e) = self.stream.get_ref().set_read_timeout(Some(t)) {
                tracing::debug!("PMI: resetting the reply timeout: {e}");
            }
        }
    }

    /// Gives the next read what is left of the step's time, at most a
    /// slice of it, so that the deadline is looked at often enough to
    /// find time this process was stopped; an error once none is left.
    fn arm_read(&mut self, request: &str) -> std::result::Result<(), String> {
        let Some((deadline, given)) = &mut self.deadline else {
            return Ok(());
        };
        if deadline.passed() {
            return Err(step_expired(*given, request));
        }
        let left = deadline.at().saturating_duration_since(Instant::now());
        self.stream
            .get_ref()
            .set_read_timeout(Some(left.clamp(Duration::from_millis(1), READ_SLICE)))
            .map_err(|e| format!("setting the reply's timeout: {e}"))
    }

    /// The job's key-value space: its name is the job's.
    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }

    /// Sends `cmd=<request>`, reads one line and checks that it is
    /// `cmd=<reply>` with `rc=0` (or no `rc`, as Hydra's `barrier_out`).
    fn request(&mut self, request: &str, reply: &str) -> std::result::Result<Reply, String> {
        let out = self.stream.get_mut();
        out.write_all(format!("cmd={request}\n").as_bytes())
            .and_then(|()| out.flush())
            .map_err(|e| format!("sending {}: {e}", verb(request)))?;
        let mut line = Vec::new();
        loop {
            self.arm_read(request)?;
            // A slice that ran out keeps what it read in `line`.
            let room = MAX_LINE.saturating_sub(line.len()) as u64;
            match (&mut self.stream).take(room).read_until(b'\n', &mut line) {
                Ok(_) => break,
                Err(e) if self.deadline.is_some() && timed_out(&e) => continue,
                Err(e) => return Err(self.read_error(request, &e)),
            }
        }
        if line.is_empty() {
            return Err(format!(
                "the server closed the connection before replying to {}",
                verb(request)
            ));
        }
        if !line.ends_with(b"\n") {
            return Err(format!(
                "the reply to {} is longer than {MAX_LINE} bytes",
                verb(request)
            ));
        }
        let text = String::from_utf8_lossy(&line);
        let r = Reply::parse(&text);
        if r.get("cmd") != Some(reply) {
            return Err(format!(
                "the server answered {} with `{}`, not cmd={reply}",
                verb(request),
                text.trim_end()
            ));
        }
        match r.get("rc") {
            None | Some("0") => Ok(r),
            Some(rc) => Err(format!(
                "the server refused {} (rc={rc}{})",
                verb(request),
                r.get("msg").map(|m| format!(": {m}")).unwrap_or_default()
            )),
        }
    }

    /// Puts `value` (no spaces, at most the server's `vallen_max`) under
    /// `key` in the job's space.
    ///
    /// # Errors
    ///
    /// A value the server cannot hold (too long, spaces), the server's
    /// refusal, or the wire's error, as text.
    pub fn put(&mut self, key: &str, value: &str) -> std::result::Result<(), String> {
        let kvs = self.kvsname.clone();
        self.request(
            &format!("put kvsname={kvs} key={key} value={value}"),
            "put_result",
        )
        .map(drop)
    }

    /// Waits until every rank has called it; puts before it are visible to
    /// every get after it.
    ///
    /// # Errors
    ///
    /// The wire's error, a read timeout among them (a rank that never
    /// arrives), as text.
    pub fn barrier(&mut self) -> std::result::Result<(), String> {
        self.request("barrier_in", "barrier_out").map(drop)
    }

    /// The value under `key` in the job's space.
    ///
    /// # Errors
    ///
    /// No value under `key`, or the wire's error, as text.
    pub fn get(&mut self, key: &str) -> std::result::Result<String, String> {
        let kvs = self.kvsname.clone();
        let r = self.request(&format!("get kvsname={kvs} key={key}"), "get_result")?;
        Ok(r.get("value").unwrap_or_default().to_string())
    }

    /// Says goodbye: the launcher counts a rank that exits without it as
    /// failed.
    ///
    /// # Errors
    ///
    /// The wire's error, as text.
    pub fn finalize(&mut self) -> std::result::Result<(), String> {
        if !self.owns_session {
            return Ok(());
        }
        if !self.finalized {
            self.finalized = true;
            self.request("finalize", "finalize_ack")?;
        }
        Ok(())
    }

    /// The stream the client speaks on.
    pub fn stream(&self) -> &S {
        self.stream.get_ref()
    }

    /// Marks the session as the process's, not this client's: it never
    /// sends `finalize`, after which the server closes the connection. On
    /// the socket the launcher left the process (`PMI_FD`), the MPI
    /// library's own client speaks too (MPICH's, from `MPI_Init` to
    /// `MPI_Finalize`), and each later world of the process greets the
    /// server again on it; the process ends the session at its exit.
    pub fn shared(mut self) -> Self {
        self.owns_session = false;
        self
    }

    /// Longest hex text a value carries here.
    fn hex_chunk(&self) -> usize {
        // Room for the terminating NUL some servers count; even, so a byte
        // never splits.
        (self.value_max - 1) & !1
    }

    /// One round of a fixed-size allgather: `mine` from this rank, every
    /// rank's into `all` (rank r at `r * mine.len()`), `round` distinct
    /// on each call; given up at `until` (or the step timeout from now),
    /// moved on by time this process was stopped.
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put), [`barrier`](Self::barrier) and
    /// [`get`](Self::get), or a rank's block of another length.
    pub fn allgather(
        &mut self,
        round: u64,
        rank: usize,
        size: usize,
        mine: &[u8],
        all: &mut [u8],
        until: Option<Instant>,
    ) -> std::result::Result<(), String> {
        self.begin_step(until);
        let gathered = self.allgather_step(round, rank, size, mine, all);
        self.end_step();
        gathered
    }

    fn allgather_step(
        &mut self,
        round: u64,
        rank: usize,
        size: usize,
        mine: &[u8],
        all: &mut [u8],
    ) -> std::result::Result<(), String> {
        let text = hex(mine);
        let chunk = self.hex_chunk();
        let pieces = text.len().div_ceil(chunk).max(1);
        for p in 0..pieces {
            let piece = &text[(p * chunk).min(text.len())..((p + 1) * chunk).min(text.len())];
            // An empty value is `value=`, which every server keeps.
            self.put(&format!("sode.{round}.{rank}.{p}"), piece)?;
        }
        self.barrier()?;
        let block = mine.len();
        for r in 0..size {
            let mut theirs = String::with_capacity(text.len());
            for p in 0..pieces {
                theirs.push_str(&self.get(&format!("sode.{round}.{r}.{p}"))?);
            }
            let bytes = unhex(&theirs).ok_or_else(|| {
                format!("rank {r}'s block of round {round} is not hex: `{theirs}`")
            })?;
            if bytes.len() != block {
                return Err(format!(
                    "rank {r} put {} bytes in round {round}, this rank {block}",
                    bytes.len()
                ));
            }
            all[r * block..(r + 1) * block].copy_from_slice(&bytes);
        }
        Ok(())
    }
}

impl<S: Timed> Drop for Client<S> {
    fn drop(&mut self) {
        if let Err(e) = self.finalize() {
            tracing::debug!("PMI finalize: {e}");
        }
    }
}

/// Whether a read ended because its timeout ran out.
fn timed_out(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// Longest a read blocks within a step: the step's deadline is looked at
/// between reads.
const READ_SLICE: Duration = Duration::from_millis(250);

/// The error of a step that did not finish within `timeout`, at `request`.
fn step_expired(timeout: Duration, request: &str) -> String {
    format!(
        "the step did not finish within {timeout:?} (at {}: is every rank running and reaching it?)",
        verb(request)
    )
}

fn verb(request: &str) -> &str {
    request.split_whitespace().next().unwrap_or(request)
}

fn number(r: &Reply, key: &str) -> std::result::Result<usize, String> {
    r.get(key)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("the server gave no number {key}"))
}

/// The connection to the server: the socket the launcher left open
/// (`PMI_FD`), or Hydra's `PMI_PORT`.
#[derive(Debug)]
enum Wire {
    Inherited(std::os::unix::net::UnixStream),
    Tcp(std::net::TcpStream),
}

impl Wire {
    fn connect(get: &impl Fn(&str) -> Option<String>) -> std::result::Result<Wire, String> {
        if let Some(fd) = get("PMI_FD") {
            let fd: i32 = fd
                .trim()
                .parse()
                .map_err(|_| format!("PMI_FD={fd} is not a file descriptor"))?;
            return crate::sys::inherited::socket(fd).map(Wire::Inherited);
        }
        let port = get("PMI_PORT").ok_or("neither PMI_FD nor PMI_PORT is set")?;
        std::net::TcpStream::connect(port.trim())
            .map(Wire::Tcp)
            .map_err(|e| format!("PMI_PORT={port}: {e}"))
    }
}

impl Timed for Wire {
    fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Wire::Inherited(s) => s.set_read_timeout(t),
            Wire::Tcp(s) => s.set_read_timeout(t),
        }
    }
}

impl Read for Wire {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Wire::Inherited(s) => s.read(buf),
            Wire::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Wire {
    /// As `send` with `MSG_NOSIGNAL`: a server gone is an error here, not
    /// a SIGPIPE that ends a C or Fortran program.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        use nix::sys::socket::{send, MsgFlags};
        use std::os::fd::AsRawFd;
        let fd = match self {
            Wire::Inherited(s) => s.as_raw_fd(),
            Wire::Tcp(s) => s.as_raw_fd(),
        };
        send(fd, buf, MsgFlags::MSG_NOSIGNAL).map_err(std::io::Error::from)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn failed(step: &'static str) -> impl Fn(String) -> JobError {
    move |why| JobError::External {
        step: format!("PMI {step}"),
        why,
    }
}

/// The process's session with the server on the socket the launcher left
/// it (`PMI_FD`): every world of the process greets the server on it, and
/// `finalize` ends it for the whole process at its exit, after which the
/// server closes the connection (Hydra ends a job one of whose processes
/// exits without it).
mod session {
    use std::io::{BufRead, BufReader};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::sync::Mutex;
    use std::time::Duration;

    /// A duplicate of the socket, once a world greeted the server on it.
    static SOCKET: Mutex<Option<UnixStream>> = Mutex::new(None);

    /// Keeps `socket`'s session for the process, to end at exit.
    pub(super) fn keep(socket: &UnixStream) {
        let mut kept = SOCKET.lock().unwrap_or_else(|p| p.into_inner());
        if kept.is_none() {
            *kept = socket.try_clone().ok();
            if kept.is_some() && !crate::sys::at_exit::run_at_exit(end) {
                tracing::debug!("no exit hook: the PMI session is not finalized, and the launcher may take the exit for a failure");
            }
        }
    }

    /// At exit: `finalize`, unless the process's MPI library was
    /// initialized (it says it, at `MPI_Finalize`, on the same socket).
    /// A world still greeting or gathering on another thread keeps the
    /// socket: the exit does not wait for it.
    fn end(_status: Option<i32>) {
        if crate::sys::mpi_state::query().is_some_and(|m| m.initialized) {
            return;
        }
        let Some(socket) = SOCKET.try_lock().ok().and_then(|mut s| s.take()) else {
            return;
        };
        let sent = nix::sys::socket::send(
            socket.as_raw_fd(),
            b"cmd=finalize\n",
            nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
        );
        if sent.is_ok()
            && socket
                .set_read_timeout(Some(Duration::from_secs(2)))
                .is_ok()
        {
            // The acknowledgement, or whatever the server says.
            let _ = BufReader::new(&socket).read_line(&mut String::new());
        }
    }
}

/// Connects to the PMI server the environment names: this rank's
/// out-of-band exchange over it, and the job's key-value space name.
/// Each step (the greeting, each allgather) is given up after `timeout`,
/// every request and reply of it together (a barrier waits for the
/// slowest rank).
///
/// # Errors
///
/// [`JobError::External`] naming the step (connect, init, the first
/// allgather) and the server's or the wire's error.
pub fn join(
    get: &impl Fn(&str) -> Option<String>,
    rank: usize,
    size: usize,
    timeout: Duration,
    deadline: Instant,
) -> Result<(ExternalOob, String)> {
    // One client at a time speaks on the process's socket: worlds made on
    // several threads take turns, a greeting or an allgather each.
    static WIRE: Mutex<()> = Mutex::new(());
    // Each world of the process (the same on every rank: they are made
    // collectively) puts keys of its own, above the last world's.
    static WORLDS: AtomicU64 = AtomicU64::new(0);
    let world = WORLDS.fetch_add(1, Ordering::Relaxed);
    // Slurm's PMI plugin (it alone sets PMI_JOBID) takes one protocol a
    // connection, and an MPI library initialized here spoke PMI-2 on the
    // socket: sode's PMI-1 greeting would go unanswered until the timeout.
    let mpi_running = crate::sys::mpi_state::query().is_some_and(|m| m.running());
    if get("PMI_JOBID").is_some() && get("PMI_FD").is_some() && mpi_running {
        return Err(failed("connect")(
            "this process's MPI library is initialized and speaks to srun --mpi=pmi2 on the launcher's socket (PMI_FD), which takes no second client: create the communicator from MPI (sode_comm_create_mpi; in Rust, World::over an ExternalOob of MPI's allgather), or launch with srun --mpi=pmix".into(),
        ));
    }
    let stream = Wire::connect(get).map_err(failed("connect"))?;
    let started = Instant::now();
    let step = Some(timeout.max(Duration::from_millis(1)));
    let mut client = {
        let _turn = WIRE.lock().unwrap_or_else(|p| p.into_inner());
        Client::init_within(stream, step).map_err(failed("init"))?
    };
    if let Wire::Inherited(socket) = client.stream() {
        session::keep(socket);
        client = client.shared();
    }
    let kvsname = client.kvsname().to_string();
    tracing::debug!(rank, size, kvsname, world, elapsed = ?started.elapsed(), "joined through PMI");
    let mut round = world << 32;
    let gather: AllgatherFn = Box::new(move |mine: &[u8], all: &mut [u8], deadline| {
        round += 1;
        let _turn = WIRE.lock().unwrap_or_else(|p| p.into_inner());
        client.allgather(round, rank, size, mine, all, Some(deadline))
    });
    let oob = ExternalOob::new(rank, size, gather, deadline)?;
    Ok((oob, kvsname))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier, Mutex};

    /// A PMI-1 server for `size` ranks in memory, each rank's stream a pair
    /// of byte queues; replies as Slurm's pmi2 plugin does, or with the
    /// quirks given.
    #[derive(Clone)]
    struct Server {
        kvs: Arc<Mutex<HashMap<String, String>>>,
        barrier: Arc<Barrier>,
        value_max: usize,
    }

    /// One rank's end: what it wrote is served when it reads.
    struct Stream {
        server: Server,
        pending: Vec<u8>,
        replies: std::collections::VecDeque<u8>,
        /// Reads alternate between running out of time and one byte, as a
        /// slow server's replies meet a reader's short timeouts.
        stutter: bool,
        reads: usize,
    }

    impl Write for Stream {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.pending.extend_from_slice(buf);
            while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                let reply = self.server.answer(std::str::from_utf8(&line).unwrap());
                self.replies.extend(reply.bytes());
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Timed for Stream {
        fn set_read_timeout(&self, _: Option<Duration>) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Read for Stream {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.reads += 1;
            if self.stutter && self.reads % 2 == 1 {
                return Err(ErrorKind::WouldBlock.into());
            }
            let most = if self.stutter { 1 } else { buf.len() };
            let n = most.min(self.replies.len());
            for b in buf.iter_mut().take(n) {
                *b = self.replies.pop_front().unwrap();
            }
            Ok(n)
        }
    }

    impl Server {
        fn new(size: usize, value_max: usize) -> Server {
            Server {
                kvs: Arc::default(),
                barrier: Arc::new(Barrier::new(size)),
                value_max,
            }
        }

        fn stream(&self) -> Stream {
            Stream {
                server: self.clone(),
                pending: Vec::new(),
                replies: Default::default(),
                stutter: false,
                reads: 0,
            }
        }

        fn answer(&self, line: &str) -> String {
            let r = Reply::parse(line);
            match r.get("cmd").unwrap() {
                "init" => "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n".into(),
                "get_maxes" => format!(
                    "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max={}\n",
                    self.value_max
                ),
                "get_my_kvsname" => "cmd=my_kvsname rc=0 kvsname=7.0\n".into(),
                "put" => {
                    let value = r.get("value").unwrap();
                    if value.len() > self.value_max - 1 {
                        return "cmd=put_result rc=-1 msg=value_too_long\n".into();
                    }
                    let key = r.get("key").unwrap().to_string();
                    self.kvs.lock().unwrap().insert(key, value.into());
                    "cmd=put_result rc=0\n".into()
                }
                "barrier_in" => {
                    self.barrier.wait();
                    // Hydra's has no rc.
                    "cmd=barrier_out\n".into()
                }
                "get" => match self.kvs.lock().unwrap().get(r.get("key").unwrap()) {
                    Some(v) => format!("cmd=get_result rc=0 msg=success value={v}\n"),
                    None => "cmd=get_result rc=-1 msg=key_not_found\n".into(),
                },
                "finalize" => "cmd=finalize_ack rc=0\n".into(),
                other => format!("cmd={other}_unknown rc=-1\n"),
            }
        }
    }

    #[test]
    fn a_reply_that_spans_read_timeouts_is_read_whole() {
        // Each read of a step runs for at most a slice of it; a slice that
        // runs out in the middle of a reply keeps what it read.
        let server = Server::new(1, 1024);
        let mut stream = server.stream();
        stream.stutter = true;
        let mut c = Client::init_within(stream, Some(Duration::from_secs(20))).unwrap();
        assert_eq!(c.kvsname(), "7.0");
        let mut all = [0u8; 5];
        c.allgather(1, 0, 1, b"piece", &mut all, None).unwrap();
        assert_eq!(&all, b"piece");
        assert!(
            c.stream.get_ref().reads > 100,
            "the replies came a byte a read"
        );
    }

    #[test]
    fn ranks_gather_blocks_longer_than_a_value() {
        let size = 3;
        // 40-byte blocks are 80 hex digits: 3 values of at most 30.
        let server = Server::new(size, 31);
        let handles: Vec<_> = (0..size)
            .map(|rank| {
                let stream = server.stream();
                std::thread::spawn(move || {
                    let mut c = Client::init(stream).unwrap();
                    assert_eq!(c.kvsname(), "7.0");
                    for round in 1..=2u64 {
                        let mine: Vec<u8> = (0..40)
                            .map(|i| (rank * 50 + i) as u8 ^ round as u8)
                            .collect();
                        let mut all = vec![0u8; 40 * size];
                        c.allgather(round, rank, size, &mine, &mut all, None)
                            .unwrap();
                        for r in 0..size {
                            let want: Vec<u8> =
                                (0..40).map(|i| (r * 50 + i) as u8 ^ round as u8).collect();
                            assert_eq!(
                                &all[r * 40..(r + 1) * 40],
                                &want[..],
                                "round {round} rank {r}"
                            );
                        }
                    }
                    c.finalize().unwrap();
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn empty_blocks_gather() {
        let server = Server::new(1, 1024);
        let mut c = Client::init(server.stream()).unwrap();
        let mut all = [];
        c.allgather(1, 0, 1, &[], &mut all, None).unwrap();
    }

    #[test]
    fn refusals_and_garbage_are_named() {
        let server = Server::new(1, 1024);
        let mut c = Client::init(server.stream()).unwrap();
        let e = c.get("nobody.put.this").unwrap_err();
        assert!(
            e.contains("refused get") && e.contains("key_not_found"),
            "{e}"
        );

        // A server that answers with the wrong command, or hangs up.
        struct Canned(std::io::Cursor<Vec<u8>>);
        impl Read for Canned {
            fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
                self.0.read(b)
            }
        }
        impl Timed for Canned {
            fn set_read_timeout(&self, _: Option<Duration>) -> std::io::Result<()> {
                Ok(())
            }
        }
        impl Write for Canned {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let canned = |text: &str| Canned(std::io::Cursor::new(text.as_bytes().to_vec()));
        let e = Client::init(canned("cmd=maxes rc=0\n")).unwrap_err();
        assert!(e.contains("answered init with `cmd=maxes rc=0`"), "{e}");
        let e = Client::init(canned("")).unwrap_err();
        assert!(
            e.contains("closed the connection before replying to init"),
            "{e}"
        );
        let e = Client::init(canned("cmd=response_to_init rc=0 pmi_version=2\n")).unwrap_err();
        assert!(e.contains("PMI version 2"), "{e}");
        let long = format!("cmd=response_to_init {}", "x".repeat(MAX_LINE));
        let e = Client::init(canned(&long)).unwrap_err();
        assert!(e.contains("longer than"), "{e}");
    }

    /// A server on a real socket that answers every request after `delay`
    /// (a slow server, or a barrier some rank is late to).
    fn slow_server(delay: Duration) -> Wire {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        std::thread::spawn(move || {
            let server = Server::new(1, 64);
            let mut lines = std::io::BufReader::new(theirs.try_clone().unwrap());
            let mut out = theirs;
            let mut line = String::new();
            while lines.read_line(&mut line).is_ok_and(|n| n > 0) {
                std::thread::sleep(delay);
                if out.write_all(server.answer(&line).as_bytes()).is_err() {
                    return;
                }
                line.clear();
            }
        });
        Wire::Inherited(ours)
    }

    #[test]
    fn a_step_is_given_up_after_its_timeout_however_its_replies_trickle() {
        // Each reply comes in 150 ms, within the 400 ms timeout, but the
        // greeting's three take 450 ms: given up.
        let t = Instant::now();
        let e = Client::init_within(
            slow_server(Duration::from_millis(150)),
            Some(Duration::from_millis(400)),
        )
        .unwrap_err();
        assert!(e.contains("did not finish within 400ms"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        // With time enough, the greeting and an allgather (put, barrier,
        // get: 3 replies) finish, each step on its own clock.
        let mut c = Client::init_within(
            slow_server(Duration::from_millis(20)),
            Some(Duration::from_millis(400)),
        )
        .unwrap();
        let mut all = [0u8; 3];
        c.allgather(1, 0, 1, b"abc", &mut all, None).unwrap();
        assert_eq!(&all, b"abc");
    }

    #[test]
    fn hex_round_trips() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(unhex(&hex(&bytes)).unwrap(), bytes);
        assert!(unhex("abc").is_none());
        assert!(unhex("zz").is_none());
        assert!(unhex("+f").is_none(), "a sign is not a digit");
    }

    #[test]
    fn the_environment_names_the_server() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(available(&env(&[
            ("PMI_FD", "5"),
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "2")
        ])));
        assert!(available(&env(&[
            ("PMI_PORT", "h:1"),
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "2")
        ])));
        assert!(!available(&env(&[("PMI_RANK", "0"), ("PMI_SIZE", "2")])));
    }
}
