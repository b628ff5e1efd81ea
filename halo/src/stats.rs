//! What an exchange has done: iterations completed, time spent in its
//! start and in its waits, bytes per neighbour and channel; and, when
//! `SODE_TRACE` names a directory, a trace of every start and wait that
//! Chrome's `about:tracing` and Perfetto open.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::channel::Locality;

/// The variable naming the directory traces are written to.
pub const TRACE_VAR: &str = "SODE_TRACE";

/// Most events one exchange keeps for its trace (about 32 MiB): past it,
/// the trace says how many it dropped.
const MAX_EVENTS: usize = 1 << 20;

/// An exchange's counters since it was built or last reset.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ExchangeStats {
    /// Iterations completed (a `wait` that returned, or a `test` that
    /// found the iteration complete and finished it).
    pub exchanges: u64,
    /// Time spent in `start`: packing, posting, the shared-memory copies.
    pub start_time: Duration,
    /// Time spent in `wait` and `test`: progressing, waiting for the
    /// neighbours, unpacking.
    pub wait_time: Duration,
    /// Bytes sent to other ranks over the completed iterations (as each
    /// carried them: a start on some fields or at a depth counts what it
    /// moved).
    pub bytes_sent: u64,
    /// Bytes received from other ranks over the completed iterations.
    pub bytes_received: u64,
    /// Starts whose messages built to travel in place over RDMA went
    /// through sode's buffers instead, packed and unpacked: starts on
    /// arrays that no lent set holds, or on some fields or fewer layers.
    /// Lending each array a code starts on keeps this at 0.
    pub staged_starts: u64,
    /// Per neighbouring rank, in the order of its first link: the rank,
    /// its channel, and what the next iteration moves to and from it, every
    /// direction together (the last fields and depth set).
    pub neighbours: Vec<NeighbourStats>,
}

/// One neighbouring rank of an exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NeighbourStats {
    /// The peer's rank.
    pub rank: usize,
    /// How it is reached.
    pub channel: Locality,
    /// Bytes sent to it per iteration.
    pub bytes_sent: u64,
    /// Bytes received from it per iteration.
    pub bytes_received: u64,
}

/// Bytes one iteration moves, each way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Moved {
    pub(crate) sent: u64,
    pub(crate) received: u64,
}

/// A start or a wait, for the trace.
#[derive(Debug, Clone, Copy)]
struct Event {
    start: bool,
    at: Duration,
    took: Duration,
}

/// The counters an exchange keeps, and its trace when one was asked for.
#[derive(Debug)]
pub(crate) struct Meter {
    pub(crate) exchanges: u64,
    /// Starts staged where messages were built to travel in place.
    pub(crate) staged_starts: u64,
    /// Bytes moved to and from other ranks over those iterations.
    moved: Moved,
    pub(crate) start_time: Duration,
    pub(crate) wait_time: Duration,
    trace: Option<Trace>,
}

#[derive(Debug)]
struct Trace {
    path: PathBuf,
    rank: usize,
    epoch: Instant,
    events: Vec<Event>,
    dropped: u64,
}

impl Meter {
    /// Counters at zero; a trace when `SODE_TRACE` names a directory, to
    /// be written as `sode-<job>-<exchange>-rank<rank>.json`.
    pub(crate) fn new(job: &str, exchange: &str, rank: usize) -> Meter {
        let trace = std::env::var_os(TRACE_VAR)
            .filter(|d| !d.is_empty())
            .map(|dir| Trace {
                path: PathBuf::from(dir).join(format!("sode-{job}-{exchange}-rank{rank}.json")),
                rank,
                epoch: Instant::now(),
                events: Vec::new(),
                dropped: 0,
            });
        Meter {
            exchanges: 0,
            staged_starts: 0,
            moved: Moved::default(),
            start_time: Duration::ZERO,
            wait_time: Duration::ZERO,
            trace,
        }
    }

    /// Counts a completed iteration that moved `moved` to and from other
    /// ranks.
    pub(crate) fn completed(&mut self, moved: Moved) {
        self.exchanges += 1;
        self.moved.sent = self.moved.sent.saturating_add(moved.sent);
        self.moved.received = self.moved.received.saturating_add(moved.received);
    }

    /// Adds a start that began at `began` and ends now.
    pub(crate) fn started(&mut self, began: Instant) {
        let took = began.elapsed();
        self.start_time += took;
        self.record(true, began, took);
    }

    /// Adds a wait (or test) that began at `began` and ends now.
    pub(crate) fn waited(&mut self, began: Instant) {
        let took = began.elapsed();
        self.wait_time += took;
        self.record(false, began, took);
    }

    fn record(&mut self, start: bool, began: Instant, took: Duration) {
        if let Some(t) = &mut self.trace {
            if t.events.len() < MAX_EVENTS {
                let at = began.saturating_duration_since(t.epoch);
                t.events.push(Event { start, at, took });
            } else {
                t.dropped += 1;
            }
        }
    }

    /// Zero counters; the trace goes on.
    pub(crate) fn reset(&mut self) {
        self.exchanges = 0;
        self.staged_starts = 0;
        self.moved = Moved::default();
        self.start_time = Duration::ZERO;
        self.wait_time = Duration::ZERO;
    }

    /// Writes the trace, if one was asked for (once: when the exchange
    /// is dropped).
    pub(crate) fn write_trace(&mut self) {
        let Some(t) = self.trace.take() else {
            return;
        };
        let mut json = String::from("{\"traceEvents\":[\n");
        for (i, e) in t.events.iter().enumerate() {
            let _ = write!(
                json,
                "{}{{\"name\":\"{}\",\"ph\":\"X\",\"pid\":{},\"tid\":0,\"ts\":{:.3},\"dur\":{:.3}}}",
                if i == 0 { "" } else { ",\n" },
                if e.start { "start" } else { "wait" },
                t.rank,
                e.at.as_secs_f64() * 1e6,
                e.took.as_secs_f64() * 1e6,
            );
        }
        let _ = write!(
            json,
            "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"rank\":{},\"dropped\":{}}}}}\n",
            t.rank, t.dropped
        );
        match std::fs::write(&t.path, json) {
            Ok(()) => tracing::debug!(path = %t.path.display(), "exchange trace written"),
            Err(e) => tracing::warn!("{TRACE_VAR}: cannot write {}: {e}", t.path.display()),
        }
    }
}

/// The stats of an exchange whose links are `links` (peer, channel, bytes
/// the next iteration sends and receives): one neighbour per rank, its
/// links' bytes added (over RDMA a rank has a link per face, and one for
/// the edges and corners).
pub(crate) fn stats(meter: &Meter, links: Vec<NeighbourStats>) -> ExchangeStats {
    // A rank's channel is one, decided once per neighbour.
    let mut at: std::collections::HashMap<usize, usize> = Default::default();
    let mut neighbours: Vec<NeighbourStats> = Vec::with_capacity(links.len());
    for l in links {
        match at.get(&l.rank) {
            Some(&i) => {
                neighbours[i].bytes_sent += l.bytes_sent;
                neighbours[i].bytes_received += l.bytes_received;
            }
            None => {
                at.insert(l.rank, neighbours.len());
                neighbours.push(l);
            }
        }
    }
    ExchangeStats {
        exchanges: meter.exchanges,
        start_time: meter.start_time,
        wait_time: meter.wait_time,
        bytes_sent: meter.moved.sent,
        bytes_received: meter.moved.received,
        staged_starts: meter.staged_starts,
        neighbours,
    }
}

impl NeighbourStats {
    pub(crate) fn new(rank: usize, channel: Locality, sent: usize, received: usize) -> Self {
        NeighbourStats {
            rank,
            channel,
            bytes_sent: sent as u64,
            bytes_received: received as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_what_each_iteration_moved() {
        let mut m = Meter::new("j", "h0", 0);
        let moved = |sent, received| Moved { sent, received };
        m.completed(moved(110, 100));
        m.completed(moved(110, 100));
        m.completed(moved(30, 20)); // a start on some fields
        let links = vec![NeighbourStats::new(1, Locality::Shm, 30, 20)];
        let s = stats(&m, links.clone());
        assert_eq!((s.exchanges, s.bytes_sent, s.bytes_received), (3, 250, 220));
        assert_eq!(s.neighbours, links);
        m.reset();
        let s = stats(&m, links);
        assert_eq!((s.exchanges, s.bytes_sent, s.bytes_received), (0, 0, 0));
    }

    #[test]
    fn a_rank_with_a_link_per_direction_is_one_neighbour() {
        let m = Meter::new("j", "h0", 0);
        // Over RDMA, rank 3 to the west and to the east, rank 5 to the
        // north; rank 0 is this one (a copy).
        let links = vec![
            NeighbourStats::new(3, Locality::Rdma, 40, 48),
            NeighbourStats::new(5, Locality::Rdma, 16, 16),
            NeighbourStats::new(0, Locality::SelfCopy, 8, 8),
            NeighbourStats::new(3, Locality::Rdma, 40, 32),
        ];
        let s = stats(&m, links);
        assert_eq!(
            s.neighbours,
            vec![
                NeighbourStats::new(3, Locality::Rdma, 80, 80),
                NeighbourStats::new(5, Locality::Rdma, 16, 16),
                NeighbourStats::new(0, Locality::SelfCopy, 8, 8),
            ]
        );
    }

    #[test]
    fn a_trace_is_chrome_json() {
        let dir = std::env::temp_dir().join(format!("sode-trace-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut m = Meter::new("j", "h0", 2);
        m.trace = Some(Trace {
            path: dir.join("t.json"),
            rank: 2,
            epoch: Instant::now(),
            events: Vec::new(),
            dropped: 0,
        });
        let t0 = Instant::now();
        m.started(t0);
        m.waited(Instant::now());
        m.exchanges += 1;
        m.write_trace();
        let text = std::fs::read_to_string(dir.join("t.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0]["name"], "start");
        assert_eq!(events[1]["name"], "wait");
        assert_eq!(events[1]["pid"], 2);
        assert_eq!(events[0]["ph"], "X");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
