//! The message sizes at which the data paths cross over, measured on this
//! machine, overridable by the environment or the builder.
//!
//! The measurement runs the channel's own ring and copy code between two
//! threads (so data and flags cross cores as they do between processes),
//! the responder placed where a peer runs when measuring towards one
//! (`Context::calibrate_towards`, at build):
//! for each size, the round-trip time of an eager transfer (fragments pushed
//! through a ring and copied out, then an acknowledgement), a window put
//! (credit, one copy, arrival flag) and a get (receive_request, a copy out
//! of the sender's buffer, receive_done). It takes a few milliseconds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::buffer::PrivateBuf;
use crate::error::{Result, ShmError};
use crate::ring::{Peeked, Record, RecordKind, RingLayout, RingRx, RingTx};
use crate::sys::shared::SharedMap;

/// Crossover sizes used by the automatic path choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Messages up to this many bytes go eager when the receive buffer can be
    /// a window; larger ones are window puts.
    pub eager_max: usize,
    /// Messages of at least this many bytes use the get path when the
    /// receiver keeps its buffer private; smaller ones go eager.
    pub get_min: usize,
    /// Messages in lent sets (in long runs, see `ReadMin`) of at least this
    /// many bytes are read in place; smaller ones are gathered, put and
    /// scattered.
    pub read_min: usize,
    /// True when measured, false when set by hand.
    pub measured: bool,
}

/// The read threshold when none is measured: the crossover measured on
/// this project's machine (`ci/shared-fields.sh`).
pub const READ_MIN_FALLBACK: usize = 4096;

// Up to 256 KiB, which keeps the probe to a few milliseconds.
const SIZES: [usize; 10] = [8, 64, 256, 1024, 4096, 16384, 32768, 65536, 131072, 262144];
const CAP: u64 = 64 * 1024;

#[derive(Clone, Copy, PartialEq)]
enum Probe {
    Eager,
    Window,
    Get,
}

/// Shared state of the two measuring threads.
struct Bench {
    ring: SharedMap,
    back: SharedMap,
    window: SharedMap,
    /// Commands to the responder: (probe, size, reps) encoded; 0 = stop.
    cmd: AtomicU64,
    /// Rounds completed by the responder.
    done: AtomicU64,
    src: PrivateBuf,
    /// Where the responder runs (empty: wherever the scheduler puts it).
    responder_cpus: Vec<usize>,
    /// The CPU the responder ended on, plus one (0: unknown).
    ran_on: AtomicU64,
}

fn layout() -> RingLayout {
    RingLayout {
        base: 0,
        capacity: CAP,
    }
}

fn control(kind: RecordKind, at: u64, len: u64) -> Record {
    Record {
        kind,
        tag: 0,
        seq: 0,
        at,
        len,
        shape: 0,
    }
}

fn spin_until(deadline: Instant, mut f: impl FnMut() -> bool) -> bool {
    // Other ranks may be probing at the same time on few cores: the
    // exchange's own backoff yields to them.
    let mut backoff = sode_job::Backoff::exchange();
    while !f() {
        if backoff.idle_passes() % 256 == 255 && Instant::now() > deadline {
            return false;
        }
        backoff.snooze();
    }
    true
}

/// Waits for the next record of `rx` (None if the probe gives up).
fn next_record(rx: &mut RingRx, map: &SharedMap, give_up: Instant) -> Option<Peeked> {
    let mut p = None;
    spin_until(give_up, || {
        p = rx.peek(map).ok().flatten();
        p.is_some()
    });
    p
}

/// The receiving side: waits for each round's data and acknowledges it.
fn responder(b: &Bench) {
    if !b.responder_cpus.is_empty() && !crate::placement::run_on(&b.responder_cpus) {
        tracing::debug!(
            "threshold probe: cannot move the responder to CPUs {:?}; it runs where it may",
            b.responder_cpus
        );
    }
    respond(b);
    if let Some(cpu) = crate::placement::current_cpu() {
        b.ran_on.store(cpu as u64 + 1, Ordering::Release);
    }
}

fn respond(b: &Bench) {
    let mut rx = RingRx::new(layout());
    let mut back = RingTx::new(layout());
    let mut dst = vec![0u8; *SIZES.last().unwrap_or(&0)];
    let give_up = Instant::now() + Duration::from_secs(2);
    loop {
        let mut cmd = 0;
        if !spin_until(give_up, || {
            cmd = b.cmd.load(Ordering::Acquire);
            cmd != 0
        }) {
            return;
        }
        if cmd == u64::MAX {
            return;
        }
        let (probe, size, reps) = (
            cmd >> 60,
            ((cmd >> 24) & 0xF_FFFF_FFFF) as usize,
            cmd & 0xFF_FFFF,
        );
        b.cmd.store(0, Ordering::Release);
        let w_arrived = b.window.atomic(0).ok();
        let w_credit = b.window.atomic(64).ok();
        for round in 1..=reps {
            match probe {
                0 => {
                    let mut got = 0;
                    while got < size || got == 0 && size == 0 {
                        let Some(p) = next_record(&mut rx, &b.ring, give_up) else {
                            return;
                        };
                        let n = p.record.len as usize;
                        let _ = b.ring.read(p.payload_at, &mut dst[got..got + n]);
                        let _ = rx.consume(&b.ring, &p);
                        got += n;
                        if size == 0 {
                            break;
                        }
                    }
                    b.done.store(round, Ordering::Release);
                }
                1 => {
                    let (Some(arrived), Some(credit)) = (w_arrived, w_credit) else {
                        return;
                    };
                    if !spin_until(give_up, || arrived.load(Ordering::Acquire) == round) {
                        return;
                    }
                    credit.store(round, Ordering::Release);
                }
                _ => {
                    let Some(p) = next_record(&mut rx, &b.ring, give_up) else {
                        return;
                    };
                    let (at, len) = (p.record.at as usize, p.record.len as usize);
                    let _ = rx.consume(&b.ring, &p);
                    if let Some(src) = b.src.as_ref().get(at..at + len) {
                        dst[..len].copy_from_slice(src);
                    }
                    let _ = back.try_push(&b.back, &control(RecordKind::ReceiveDone, 0, 0), &[]);
                }
            }
        }
        b.done.store(u64::MAX, Ordering::Release);
    }
}

/// Time per round of `probe` at `size` in one trial, in nanoseconds.
fn measure_one(
    b: &Bench,
    tx: &mut RingTx,
    back_rx: &mut RingRx,
    probe: Probe,
    size: usize,
    give_up: Instant,
) -> Option<f64> {
    let reps: u64 = (170_000 / (size as u64 + 512)).clamp(4, 170);
    let max_frag = layout().max_payload() as usize;
    let code = match probe {
        Probe::Eager => 0u64,
        Probe::Window => 1,
        Probe::Get => 2,
    };
    b.done.store(0, Ordering::Release);
    if let Ok(w) = b.window.atomic(0) {
        w.store(0, Ordering::Release);
    }
    if let Ok(w) = b.window.atomic(64) {
        w.store(0, Ordering::Release);
    }
    b.cmd.store(
        (code << 60) | ((size as u64) << 24) | reps,
        Ordering::Release,
    );
    if !spin_until(give_up, || b.cmd.load(Ordering::Acquire) == 0) {
        return None;
    }
    let t = Instant::now();
    for round in 1..=reps {
        match probe {
            Probe::Eager => {
                let mut off = 0;
                loop {
                    let n = (size - off).min(max_frag);
                    let rec = control(RecordKind::Eager, off as u64, n as u64);
                    if !spin_until(give_up, || {
                        matches!(
                            tx.try_push(&b.ring, &rec, &b.src.as_ref()[off..off + n]),
                            Ok(true)
                        )
                    }) {
                        return None;
                    }
                    off += n;
                    if off >= size {
                        break;
                    }
                }
                if !spin_until(give_up, || b.done.load(Ordering::Acquire) >= round) {
                    return None;
                }
            }
            Probe::Window => {
                let (Ok(arrived), Ok(credit)) = (b.window.atomic(0), b.window.atomic(64)) else {
                    return None;
                };
                if !spin_until(give_up, || credit.load(Ordering::Acquire) == round - 1) {
                    return None;
                }
                let _ = b.window.write(128, &b.src.as_ref()[..size]);
                arrived.store(round, Ordering::Release);
            }
            Probe::Get => {
                let rec = control(RecordKind::ReceiveRequest, 0, size as u64);
                if !spin_until(give_up, || {
                    matches!(tx.try_push(&b.ring, &rec, &[]), Ok(true))
                }) {
                    return None;
                }
                let mut seen = false;
                if !spin_until(give_up, || {
                    if let Ok(Some(p)) = back_rx.peek(&b.back) {
                        let _ = back_rx.consume(&b.back, &p);
                        seen = true;
                    }
                    seen
                }) {
                    return None;
                }
            }
        }
    }
    if probe == Probe::Window {
        let credit = b.window.atomic(64).ok()?;
        spin_until(give_up, || credit.load(Ordering::Acquire) == reps);
    }
    let per_round = t.elapsed().as_nanos() as f64 / reps as f64;
    spin_until(give_up, || b.done.load(Ordering::Acquire) == u64::MAX);
    Some(per_round)
}

/// A measurement towards one place: the thresholds, and the CPU its
/// responder ended on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Measured {
    pub(crate) thresholds: Thresholds,
    pub(crate) ran_on: Option<usize>,
}

impl Thresholds {
    /// The thresholds used when a probe cannot run: marked as not measured.
    pub(crate) const FALLBACK: Thresholds = Thresholds {
        eager_max: 64,
        get_min: 32 * 1024,
        read_min: READ_MIN_FALLBACK,
        measured: false,
    };

    /// Measures the crossovers between two threads of this process (see the
    /// module documentation). Falls back to fixed values, marked as not
    /// measured, if a thread cannot be started or the probe stalls.
    pub fn measure() -> Thresholds {
        Thresholds::measure_towards(&[]).thresholds
    }

    /// Measures with the responder thread on `cpus` (empty: anywhere), as
    /// [`measure`](Self::measure) does.
    pub(crate) fn measure_towards(cpus: &[usize]) -> Measured {
        Thresholds::try_measure(cpus).unwrap_or(Measured {
            thresholds: Thresholds::FALLBACK,
            ran_on: None,
        })
    }

    /// `None` only if the probe could not start; a probe that gave up
    /// still says where its responder ran.
    fn try_measure(cpus: &[usize]) -> Option<Measured> {
        let largest = *SIZES.last()?;
        let bench = Arc::new(Bench {
            ring: SharedMap::anonymous(RingLayout::footprint(CAP) as usize).ok()?,
            back: SharedMap::anonymous(RingLayout::footprint(CAP) as usize).ok()?,
            window: SharedMap::anonymous(largest + 4096).ok()?,
            cmd: AtomicU64::new(0),
            done: AtomicU64::new(0),
            src: {
                let mut b = PrivateBuf::new(largest, 0).ok()?;
                b.as_mut()
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, x)| *x = i as u8);
                b
            },
            responder_cpus: cpus.to_vec(),
            ran_on: AtomicU64::new(0),
        });
        let peer = Arc::clone(&bench);
        let thread = std::thread::Builder::new()
            .name("sode-shm-thresholds".into())
            .spawn(move || responder(&peer))
            .ok()?;
        let rows = probe_rows(&bench);
        bench.cmd.store(u64::MAX, Ordering::Release);
        let _ = thread.join();
        let ran_on = bench.ran_on.load(Ordering::Acquire).checked_sub(1);
        let ran_on = ran_on.map(|c| c as usize);
        let Some(rows) = rows else {
            return Some(Measured {
                thresholds: Thresholds::FALLBACK,
                ran_on,
            });
        };
        for r in &rows {
            tracing::debug!(
                "threshold probe towards {cpus:?}: {:>7} B  eager {:>9.0} ns  window {:>9.0} ns  get {:>9.0} ns  copy {:>9.0} ns",
                r.size, r.eager, r.window, r.get, r.copy
            );
        }
        Some(Measured {
            thresholds: crossovers(&rows, largest),
            ran_on,
        })
    }
}

/// Every size's round trips (`None` if the probe gave up).
fn probe_rows(bench: &Bench) -> Option<Vec<Row>> {
    let mut tx = RingTx::new(layout());
    let mut back_rx = RingRx::new(layout());
    // The whole probe gives up after a second (an oversubscribed node),
    // falling back to fixed values marked as not measured.
    let give_up = Instant::now() + Duration::from_secs(1);
    let mut rows: Vec<Row> = SIZES
        .iter()
        .map(|&size| Row {
            size,
            eager: f64::INFINITY,
            window: f64::INFINITY,
            get: f64::INFINITY,
            copy: copy_ns(&bench.src, size),
        })
        .collect();
    for _ in 0..PASSES {
        for row in &mut rows {
            let mut one = |p| measure_one(bench, &mut tx, &mut back_rx, p, row.size, give_up);
            row.eager = row.eager.min(one(Probe::Eager)?);
            row.window = row.window.min(one(Probe::Window)?);
            row.get = row.get.min(one(Probe::Get)?);
        }
    }
    Some(rows)
}

/// Trials of each size and path, each point keeping its best. A point's
/// trials are spread over the whole probe (one pass over every point,
/// then the next), not run back to back: a busy process beside the probe
/// takes the responder's core for milliseconds at a time, which would
/// slow every trial of the points it lands on and move the crossovers
/// for as long as the node keeps the probe (`probe_file`). The same
/// rounds in all as three trials back to back; `ci/probe-load.sh`
/// measures the difference beside a busy loop (docs/results/shm.md).
const PASSES: usize = 7;

/// One size's round trips (and a plain copy), in nanoseconds.
#[derive(Debug, Clone, Copy)]
struct Row {
    size: usize,
    eager: f64,
    window: f64,
    get: f64,
    copy: f64,
}

/// The thresholds the rows call for. Eager up to the end of the sizes
/// where it is no slower than a window put; get from the start of the
/// sizes where it is faster than eager; read in place from the start of
/// the sizes where a get is faster than a window put with a copy on
/// either side. Each is the step that fits the rows best
/// ([`step_from`]), so one size measured badly (a busy process took the
/// responder's core through all its trials) does not move it.
fn crossovers(rows: &[Row], largest: usize) -> Thresholds {
    let never = largest * 2;
    // Eager below the first size where it stops being no slower.
    let eager_from = step_from(rows, never, &|r| r.eager > r.window);
    let eager_max = rows
        .iter()
        .map(|r| r.size)
        .filter(|&s| s < eager_from)
        .max()
        .unwrap_or(0);
    Thresholds {
        eager_max,
        get_min: step_from(rows, never, &|r| r.get < r.eager),
        read_min: step_from(rows, never, &|r| r.get < r.window + 2.0 * r.copy),
        measured: true,
    }
}

/// Where a path becomes `better`: the size from which `better` holds and
/// below which it does not that the fewest rows contradict (`never` when
/// no size is), the larger of two that tie. On rows that cross once it
/// is the crossing; a lone row against its neighbours is outvoted.
fn step_from(rows: &[Row], never: usize, better: &dyn Fn(&Row) -> bool) -> usize {
    // Starting at `never`, every row that is better contradicts.
    let mut cost = rows.iter().filter(|r| better(r)).count();
    let (mut best, mut best_cost) = (never, cost);
    for r in rows.iter().rev() {
        // Moving the step below `r` makes it agree if better, else not.
        if better(r) {
            cost -= 1;
        } else {
            cost += 1;
        }
        if cost < best_cost {
            (best, best_cost) = (r.size, cost);
        }
    }
    best
}

/// A plain copy of `size` bytes out of `src`, in nanoseconds (best of a
/// few, warm): what a gather or a scatter around a packed path costs.
fn copy_ns(src: &PrivateBuf, size: usize) -> f64 {
    let Some(from) = src.as_ref().get(..size) else {
        return 0.0;
    };
    let mut to = vec![0u8; size];
    let reps = (400_000 / (size + 512)).clamp(8, 400);
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = Instant::now();
        for _ in 0..reps {
            to.copy_from_slice(from);
            std::hint::black_box(&mut to);
        }
        best = best.min(t.elapsed().as_nanos() as f64 / reps as f64);
    }
    best
}

/// Thresholds set in the environment: `SODE_SHM_EAGER_MAX`,
/// `SODE_SHM_GET_MIN` and `SODE_SHM_READ_MIN` (bytes).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Overrides {
    eager_max: Option<usize>,
    get_min: Option<usize>,
    read_min: Option<usize>,
}

impl Overrides {
    pub(crate) fn from_env() -> Result<Overrides> {
        let parse = |name: &str| -> Result<Option<usize>> {
            match std::env::var(name) {
                Ok(v) => v
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| ShmError::InvalidSetting {
                        name: name.into(),
                        value: v,
                        why: "expected a size in bytes".into(),
                    }),
                Err(_) => Ok(None),
            }
        };
        Ok(Overrides {
            eager_max: parse("SODE_SHM_EAGER_MAX")?,
            get_min: parse("SODE_SHM_GET_MIN")?,
            read_min: parse("SODE_SHM_READ_MIN")?,
        })
    }

    /// Every threshold set: nothing left to measure.
    pub(crate) fn complete(&self) -> Option<Thresholds> {
        Some(Thresholds {
            eager_max: self.eager_max?,
            get_min: self.get_min?,
            read_min: self.read_min?,
            measured: false,
        })
    }

    /// `t` with the thresholds set here put in its place.
    pub(crate) fn apply(&self, mut t: Thresholds) -> Thresholds {
        for (set, field) in [
            (self.eager_max, &mut t.eager_max),
            (self.get_min, &mut t.get_min),
            (self.read_min, &mut t.read_min),
        ] {
            if let Some(v) = set {
                *field = v;
                t.measured = false;
            }
        }
        t
    }
}

impl Thresholds {
    /// Measured thresholds with `SODE_SHM_EAGER_MAX`, `SODE_SHM_GET_MIN` and
    /// `SODE_SHM_READ_MIN` (bytes) applied on top.
    ///
    /// # Errors
    ///
    /// [`ShmError::InvalidSetting`] when one of them is not a number of
    /// bytes.
    pub fn from_env_or_measure() -> Result<Thresholds> {
        let set = Overrides::from_env()?;
        Ok(set
            .complete()
            .unwrap_or_else(|| set.apply(Thresholds::measure())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows over [`SIZES`] where get beats eager at the sizes `get_wins`
    /// marks, and eager never beats a window put past 64 bytes.
    fn rows(get_wins: [bool; 10]) -> Vec<Row> {
        SIZES
            .iter()
            .zip(get_wins)
            .map(|(&size, wins)| Row {
                size,
                eager: 100.0,
                window: if size <= 64 { 200.0 } else { 50.0 },
                get: if wins { 80.0 } else { 120.0 },
                copy: 1000.0,
            })
            .collect()
    }

    const LARGEST: usize = 262_144;

    #[test]
    fn rows_that_cross_once_give_the_crossing() {
        let t = crossovers(
            &rows([
                false, false, false, true, true, true, true, true, true, true,
            ]),
            LARGEST,
        );
        assert_eq!((t.eager_max, t.get_min, t.read_min), (64, 1024, 8));
        let never = crossovers(&rows([false; 10]), LARGEST);
        assert_eq!(never.get_min, 2 * LARGEST, "get never better: never chosen");
        let always = crossovers(&rows([true; 10]), LARGEST);
        assert_eq!(always.get_min, 8);
    }

    #[test]
    fn one_size_measured_badly_does_not_move_a_threshold() {
        // The largest size slow in every trial: before, this read "never".
        let top = rows([
            false, false, false, true, true, true, true, true, true, false,
        ]);
        assert_eq!(crossovers(&top, LARGEST).get_min, 1024);
        // One size in the middle either way.
        let dip = rows([
            false, false, false, true, true, false, true, true, true, true,
        ]);
        assert_eq!(crossovers(&dip, LARGEST).get_min, 1024);
        let blip = rows([
            false, true, false, false, false, false, true, true, true, true,
        ]);
        assert_eq!(crossovers(&blip, LARGEST).get_min, 32768);
    }

    #[test]
    fn a_tie_takes_the_larger_size() {
        // From 4096 or from 32768, one row contradicts either way.
        let tie = rows([
            false, false, false, false, true, false, true, true, true, true,
        ]);
        assert_eq!(crossovers(&tie, LARGEST).get_min, 32768);
    }
}
