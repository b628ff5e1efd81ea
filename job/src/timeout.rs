//! How long waits may take: no deadline unless one is given, and a
//! job-wide default for the waits that give none (`SODE_TIMEOUT`). A rank
//! late by minutes (output, a checkpoint, imbalance) is no error; a dead
//! one is found by the job's health whatever the deadline. Time in which
//! the waiting process itself did not run (a suspended job, SIGSTOP, a
//! debugger's stop) does not count against a deadline ([`Deadline`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::{JobError, Result};

/// The default deadline, in seconds, of waits that give none (a Fortran
/// `sode_wait` without `timeout`, C's `SODE_TIMEOUT_DEFAULT`); unset,
/// `off`, `inf` or `0`: no deadline.
pub const TIMEOUT_VAR: &str = "SODE_TIMEOUT";

/// A timeout that never runs out in practice (about a century): what an
/// infinite timeout becomes, safe to add to `Instant::now()`.
pub const NO_DEADLINE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The default timeout of waits that give none: `SODE_TIMEOUT`, read once
/// per process, or [`NO_DEADLINE`].
///
/// # Errors
///
/// [`JobError::InvalidSetting`] when `SODE_TIMEOUT` is neither a number
/// of seconds nor `off`.
pub fn default_wait_timeout() -> Result<Duration> {
    static DEFAULT: OnceLock<std::result::Result<Duration, String>> = OnceLock::new();
    DEFAULT
        .get_or_init(|| parse_timeout(std::env::var(TIMEOUT_VAR).ok().as_deref()))
        .clone()
        .map_err(|value| JobError::InvalidSetting {
            name: TIMEOUT_VAR.into(),
            value,
            why: "seconds (more than 0), or off / inf for no deadline".into(),
        })
}

/// After how many seconds a wait for an exchange's halos that has not
/// finished says so in a warning (and again each time it has waited twice
/// as long); `off` or `0`: never. Default: [`WAIT_WARN_DEFAULT`].
pub const WAIT_WARN_VAR: &str = "SODE_WAIT_WARN";

/// How long a wait goes on before it warns, unless `SODE_WAIT_WARN` says
/// otherwise: far beyond an exchange's time, short of a job's.
pub const WAIT_WARN_DEFAULT: Duration = Duration::from_secs(60);

/// How long a wait goes on before it warns that it has not finished:
/// `SODE_WAIT_WARN`, read once per process; `None` for never.
///
/// # Errors
///
/// [`JobError::InvalidSetting`] when `SODE_WAIT_WARN` is neither a number
/// of seconds nor `off`.
pub fn wait_warning() -> Result<Option<Duration>> {
    static AFTER: OnceLock<std::result::Result<Option<Duration>, String>> = OnceLock::new();
    AFTER
        .get_or_init(|| parse_wait_warning(std::env::var(WAIT_WARN_VAR).ok().as_deref()))
        .clone()
        .map_err(|value| JobError::InvalidSetting {
            name: WAIT_WARN_VAR.into(),
            value,
            why: "seconds (more than 0), or off / 0 for no warning".into(),
        })
}

/// The warning's delay from the value of `SODE_WAIT_WARN`; the value
/// itself when it is not one.
fn parse_wait_warning(value: Option<&str>) -> std::result::Result<Option<Duration>, String> {
    match value.map(str::trim) {
        None | Some("") => Ok(Some(WAIT_WARN_DEFAULT)),
        Some("off" | "0") => Ok(None),
        Some(v) => match parse_timeout(Some(v)) {
            Ok(d) if d < NO_DEADLINE => Ok(Some(d)),
            _ => Err(v.to_string()),
        },
    }
}

/// A timeout from the value of `SODE_TIMEOUT`; the value itself when it
/// is not one.
fn parse_timeout(value: Option<&str>) -> std::result::Result<Duration, String> {
    let v = match value.map(str::trim) {
        None | Some("" | "off" | "inf" | "infinity" | "0") => return Ok(NO_DEADLINE),
        Some(v) => v,
    };
    match v.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 => Ok(Duration::try_from_secs_f64(s)
            .unwrap_or(NO_DEADLINE)
            .min(NO_DEADLINE)),
        _ => Err(v.to_string()),
    }
}

/// The longest stretch a looping waiter may go between two looks at the
/// clock, beyond the naps it asked for, and still be taken as running. A
/// longer one is time the process was stopped (a suspended job, SIGSTOP,
/// a debugger) or not scheduled at all: its peers may have been stopped
/// alike, so it is not counted against them. A waiter's work between two
/// looks is a pass over its channels, which never blocks.
pub const STOPPED_GAP: Duration = Duration::from_secs(1);

/// How long a waiter that looked at the clock at `last` and napped up to
/// `nap` since did not run, seen at `now`: the stretch beyond the nap when
/// it exceeds [`STOPPED_GAP`], else zero.
pub(crate) fn not_running(last: Instant, nap: Duration, now: Instant) -> Duration {
    let beyond = now.saturating_duration_since(last).saturating_sub(nap);
    if beyond > STOPPED_GAP {
        beyond
    } else {
        Duration::ZERO
    }
}

/// Deadlines this process moved on, by the instant they were given as,
/// and how far: a step handed the same instant after an earlier step
/// found the process stopped (the steps of a setup share one deadline)
/// starts from where that one left it. The newest [`MOVED_KEPT`], each
/// until [`MOVED_FOR`] after its moved deadline.
static MOVED: Mutex<Vec<(Instant, Duration)>> = Mutex::new(Vec::new());
/// Whether [`MOVED`] holds anything: a deadline takes its lock only then
/// (for a minute after a stop), not on every wait.
static ANY_MOVED: AtomicBool = AtomicBool::new(false);
const MOVED_KEPT: usize = 64;
/// How long a moved deadline is remembered after it passed: a step handed
/// it later has timed out anyway.
const MOVED_FOR: Duration = Duration::from_secs(60);

/// The moved deadlines, those past [`MOVED_FOR`] forgotten.
fn moved_deadlines() -> std::sync::MutexGuard<'static, Vec<(Instant, Duration)>> {
    let mut moved = MOVED.lock().unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    moved.retain(|(given, by)| {
        given
            .checked_add(*by)
            .and_then(|d| d.checked_add(MOVED_FOR))
            .is_none_or(|end| end > now)
    });
    ANY_MOVED.store(!moved.is_empty(), Ordering::Relaxed);
    moved
}

/// How far the deadline given as `at` was moved on so far.
fn moved_by(at: Instant) -> Duration {
    if !ANY_MOVED.load(Ordering::Relaxed) {
        return Duration::ZERO;
    }
    moved_deadlines()
        .iter()
        .find(|(given, _)| *given == at)
        .map_or(Duration::ZERO, |(_, by)| *by)
}

/// The deadline given as `at`, moved on as far as a [`Deadline`] made from
/// it found this process stopped: for loops that cannot look often enough
/// to find a stop themselves (a connect may take seconds).
pub(crate) fn as_moved(at: Instant) -> Instant {
    at.checked_add(moved_by(at)).unwrap_or(at)
}

/// Records that the deadline given as `at` now stands `by` later.
fn record_moved(at: Instant, by: Duration) {
    let mut moved = moved_deadlines();
    match moved.iter_mut().find(|(given, _)| *given == at) {
        Some(entry) => entry.1 = entry.1.max(by),
        None => {
            if moved.len() >= MOVED_KEPT {
                moved.remove(0);
            }
            moved.push((at, by));
        }
    }
    ANY_MOVED.store(true, Ordering::Relaxed);
}

/// A deadline that stands still while the process waiting for it does not
/// run. A whole job suspended (Slurm's `scontrol suspend`, gang
/// scheduling) for longer than a wait's timeout then resumes without a
/// timeout: every rank was stopped, and none was late. A waiter looks at
/// it every pass ([`passed`](Self::passed)); a stretch between two looks
/// longer than [`STOPPED_GAP`] moves the deadline on by that stretch, and
/// so does every later `Deadline` made from the same instant (the next
/// step of a setup that shares one).
///
/// Waits take `impl Into<Deadline>`: a timeout (`Duration`), fixed when the
/// wait begins, or an `Instant`, fixed when it was computed, so that time
/// stopped between computing it and the wait counts against it.
#[derive(Debug, Clone)]
pub struct Deadline {
    /// The instant it was made from.
    given: Instant,
    at: Instant,
    looked: Instant,
    stopped: Duration,
}

impl Deadline {
    /// A deadline at `at` (moved on as far as any earlier `Deadline` made
    /// from `at` was), looked at first now.
    pub fn new(at: Instant) -> Deadline {
        Deadline::looked_at(at, Instant::now())
    }

    fn looked_at(given: Instant, now: Instant) -> Deadline {
        let moved = moved_by(given);
        Deadline {
            given,
            at: given.checked_add(moved).unwrap_or(given),
            looked: now,
            stopped: Duration::ZERO,
        }
    }

    /// Whether the deadline has passed; the caller looks at least every
    /// [`STOPPED_GAP`] while it runs (its passes and naps are shorter).
    pub fn passed(&mut self) -> bool {
        self.passed_at(Instant::now(), Duration::ZERO)
    }

    /// [`passed`](Self::passed), for a caller whose step since its last
    /// look may itself have taken up to `step` while it ran (a connect
    /// given that long): only time beyond it can be time stopped. A
    /// shorter stop is missed here, so it also takes up how far another
    /// `Deadline` made from the same instant moved on (a step of the same
    /// setup in another thread).
    pub fn passed_after(&mut self, step: Duration) -> bool {
        self.at = self.at.max(as_moved(self.given));
        self.passed_at(Instant::now(), step)
    }

    fn passed_at(&mut self, now: Instant, step: Duration) -> bool {
        let stopped = not_running(self.looked, step, now);
        if !stopped.is_zero() {
            // Far deadlines (no deadline at all) stay where they are.
            self.at = self.at.checked_add(stopped).unwrap_or(self.at);
            self.stopped += stopped;
            record_moved(self.given, self.at.saturating_duration_since(self.given));
            tracing::debug!(
                seconds = stopped.as_secs_f64(),
                "this process did not run (stopped, suspended or not scheduled): the wait's deadline moves on as much"
            );
        }
        self.looked = now;
        now >= self.at || abandoned()
    }

    /// When it passes, as it stands (moved on by the time not running).
    pub fn at(&self) -> Instant {
        self.at
    }

    /// How long the process was found not running while it waited.
    pub fn stopped(&self) -> Duration {
        self.stopped
    }
}

thread_local! {
    /// What ends this thread's waits early ([`abandon_when`]).
    static ABANDON: std::cell::RefCell<Option<Box<dyn Fn() -> bool>>> =
        const { std::cell::RefCell::new(None) };
}

/// Whether this thread's waits are to end now ([`abandon_when`]).
fn abandoned() -> bool {
    ABANDON.with(|a| {
        a.try_borrow()
            .is_ok_and(|a| a.as_ref().is_some_and(|f| f()))
    })
}

/// Until the returned guard is dropped, every wait of this thread on a
/// [`Deadline`] ends as if its deadline had passed once `given_up()` says
/// so: a rank setting up an exchange stops waiting for a peer that gave
/// its part up, which will never come
/// ([`World::give_up_setup`](crate::World::give_up_setup)). The waiter
/// then reports a timeout, which its caller replaces with the reason.
#[must_use = "the waits end early only while the guard lives"]
pub fn abandon_when(given_up: impl Fn() -> bool + 'static) -> AbandonGuard {
    let before = ABANDON.with(|a| a.replace(Some(Box::new(given_up))));
    AbandonGuard { before }
}

/// Keeps [`abandon_when`]'s check; dropped, puts back the one before.
pub struct AbandonGuard {
    before: Option<Box<dyn Fn() -> bool>>,
}

impl std::fmt::Debug for AbandonGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AbandonGuard").finish_non_exhaustive()
    }
}

impl Drop for AbandonGuard {
    fn drop(&mut self) {
        let before = self.before.take();
        ABANDON.with(|a| {
            if let Ok(mut a) = a.try_borrow_mut() {
                *a = before;
            }
        });
    }
}

/// A deadline at an instant: time stopped before the wait that takes it
/// counts, as the instant was fixed when it was computed.
impl From<Instant> for Deadline {
    fn from(at: Instant) -> Deadline {
        Deadline::new(at)
    }
}

/// A timeout from now: the deadline is fixed when the wait that takes it
/// begins, so time stopped before it (a job suspended while it computed)
/// does not count. [`NO_DEADLINE`] or longer waits without one.
impl From<Duration> for Deadline {
    fn from(timeout: Duration) -> Deadline {
        let now = Instant::now();
        let at = now.checked_add(timeout.min(NO_DEADLINE)).unwrap_or(now);
        Deadline::looked_at(at, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_that_may_take_long_is_not_taken_for_a_stop() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        // Given as an instant no other test uses: moves are recorded by
        // the instant, for the whole process.
        let given = t0 + s(6) + Duration::from_nanos(7);
        let mut d = Deadline::looked_at(given, t0);
        // A connect given 2 s that took them, and a little more.
        assert!(!d.passed_at(t0 + Duration::from_millis(2500), s(2)));
        assert_eq!(d.stopped(), Duration::ZERO);
        // One that took 10 s: stopped for 8 of them.
        assert!(!d.passed_at(t0 + Duration::from_millis(12500), s(2)));
        assert_eq!(d.stopped(), s(8));
        assert_eq!(d.at(), given + s(8));
    }

    #[test]
    fn a_timeout_is_counted_from_when_it_becomes_a_deadline() {
        let before = Instant::now();
        let d = Deadline::from(Duration::from_secs(3));
        let after = Instant::now();
        assert!(d.at() >= before + Duration::from_secs(3));
        assert!(d.at() <= after + Duration::from_secs(3));
        // No deadline at all, and longer, do not overflow.
        for far in [NO_DEADLINE, Duration::MAX] {
            let d = Deadline::from(far);
            assert!(d.at() >= before + NO_DEADLINE, "{far:?}");
        }
        let at = before + Duration::from_millis(5);
        assert_eq!(Deadline::from(at).at(), at);
    }

    #[test]
    fn a_deadline_stands_still_while_its_process_is_stopped() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut d = Deadline::looked_at(t0 + s(4), t0);
        // Running, looking every few milliseconds: passes on time.
        let mut now = t0;
        while now < t0 + s(3) {
            now += Duration::from_millis(3);
            assert!(!d.passed_at(now, Duration::ZERO));
        }
        // Stopped for 60 s: the deadline moves on by as much.
        now += s(60);
        assert!(!d.passed_at(now, Duration::ZERO), "a stop does not count");
        assert_eq!(d.stopped(), s(60));
        assert_eq!(d.at(), t0 + s(64));
        now += Duration::from_millis(500);
        assert!(!d.passed_at(now, Duration::ZERO));
        now += Duration::from_millis(600);
        assert!(d.passed_at(now, Duration::ZERO), "running again, it passes");
        // A waiter looking every second at most is never taken as stopped.
        let mut e = Deadline::looked_at(t0 + s(5), t0);
        let mut now = t0;
        for _ in 0..4 {
            now += STOPPED_GAP;
            assert!(!e.passed_at(now, Duration::ZERO));
        }
        now += STOPPED_GAP;
        assert!(e.passed_at(now, Duration::ZERO));
        assert_eq!(e.stopped(), Duration::ZERO);
        // No deadline stays none.
        let mut never = Deadline::looked_at(t0 + NO_DEADLINE, t0);
        assert!(!never.passed_at(t0 + s(3600), Duration::ZERO));
    }

    #[test]
    fn a_later_step_handed_the_same_deadline_starts_where_it_was_moved() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let given = t0 + s(4) + Duration::from_nanos(7);
        let mut first = Deadline::looked_at(given, t0);
        assert!(
            !first.passed_at(t0 + s(30), Duration::ZERO),
            "stopped for 30 s"
        );
        // The next step, given the same instant, after the first ended.
        let mut next = Deadline::looked_at(given, t0 + s(31));
        assert_eq!(next.at(), given + s(30));
        // Running, looking every half second: it passes 30 s late.
        let mut now = t0 + s(31);
        while now < given + s(30) {
            assert!(!next.passed_at(now, Duration::ZERO));
            now += Duration::from_millis(500);
        }
        assert!(next.passed_at(now, Duration::ZERO));
        // Another deadline is not moved.
        assert_eq!(Deadline::looked_at(given + s(1), t0).at(), given + s(1));
    }

    #[test]
    fn only_the_stretch_beyond_a_nap_is_not_running() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(not_running(t0, ms(500), t0 + ms(1400)), Duration::ZERO);
        assert_eq!(not_running(t0, ms(500), t0 + ms(9500)), ms(9000));
        assert_eq!(not_running(t0 + ms(5), ms(0), t0), Duration::ZERO);
    }

    #[test]
    fn timeouts_are_seconds_or_none() {
        for none in [None, Some("off"), Some(" inf "), Some("0"), Some("")] {
            assert_eq!(parse_timeout(none), Ok(NO_DEADLINE), "{none:?}");
        }
        assert_eq!(parse_timeout(Some("90")), Ok(Duration::from_secs(90)));
        assert_eq!(parse_timeout(Some("0.5")), Ok(Duration::from_millis(500)));
        assert_eq!(parse_timeout(Some("1e300")), Ok(NO_DEADLINE));
        for bad in ["-1", "nan", "ten"] {
            assert_eq!(parse_timeout(Some(bad)), Err(bad.to_string()));
        }
        let later = std::time::Instant::now().checked_add(NO_DEADLINE);
        assert!(later.is_some(), "NO_DEADLINE can be added to now");
    }

    #[test]
    fn a_wait_warns_after_seconds_by_default_60_or_never() {
        assert_eq!(parse_wait_warning(None), Ok(Some(WAIT_WARN_DEFAULT)));
        assert_eq!(parse_wait_warning(Some(" ")), Ok(Some(WAIT_WARN_DEFAULT)));
        for never in ["off", "0"] {
            assert_eq!(parse_wait_warning(Some(never)), Ok(None), "{never}");
        }
        assert_eq!(
            parse_wait_warning(Some("2.5")),
            Ok(Some(Duration::from_millis(2500)))
        );
        for bad in ["-1", "nan", "ten", "inf", "1e300"] {
            assert_eq!(parse_wait_warning(Some(bad)), Err(bad.to_string()));
        }
    }
}
