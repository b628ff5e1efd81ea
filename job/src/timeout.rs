//! How long waits may take: no deadline unless one is given, and a
//! job-wide default for the waits that give none (`SODE_TIMEOUT`). A rank
//! late by minutes (output, a checkpoint, imbalance) is no error; a dead
//! one is found by the job's health whatever the deadline. Time in which
//! the waiting process itself did not run (a suspended job, SIGSTOP, a
//! debugger's stop) does not count against a deadline ([`Deadline`]).

use std::sync::OnceLock;
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

/// A deadline that stands still while the process waiting for it does not
/// run. A whole job suspended (Slurm's `scontrol suspend`, gang
/// scheduling) for longer than a wait's timeout then resumes without a
/// timeout: every rank was stopped, and none was late. A waiter looks at
/// it every pass ([`passed`](Self::passed)); a stretch between two looks
/// longer than [`STOPPED_GAP`] moves the deadline on by that stretch.
#[derive(Debug, Clone)]
pub struct Deadline {
    at: Instant,
    looked: Instant,
    stopped: Duration,
}

impl Deadline {
    /// A deadline at `at`, looked at first now.
    pub fn new(at: Instant) -> Deadline {
        Deadline::looked_at(at, Instant::now())
    }

    fn looked_at(at: Instant, now: Instant) -> Deadline {
        Deadline {
            at,
            looked: now,
            stopped: Duration::ZERO,
        }
    }

    /// Whether the deadline has passed; the caller looks at least every
    /// [`STOPPED_GAP`] while it runs (its passes and naps are shorter).
    pub fn passed(&mut self) -> bool {
        self.passed_at(Instant::now())
    }

    fn passed_at(&mut self, now: Instant) -> bool {
        let stopped = not_running(self.looked, Duration::ZERO, now);
        if !stopped.is_zero() {
            // Far deadlines (no deadline at all) stay where they are.
            self.at = self.at.checked_add(stopped).unwrap_or(self.at);
            self.stopped += stopped;
            tracing::debug!(
                seconds = stopped.as_secs_f64(),
                "this process did not run (stopped, suspended or not scheduled): the wait's deadline moves on as much"
            );
        }
        self.looked = now;
        now >= self.at
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_stands_still_while_its_process_is_stopped() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut d = Deadline::looked_at(t0 + s(4), t0);
        // Running, looking every few milliseconds: passes on time.
        let mut now = t0;
        while now < t0 + s(3) {
            now += Duration::from_millis(3);
            assert!(!d.passed_at(now));
        }
        // Stopped for 60 s: the deadline moves on by as much.
        now += s(60);
        assert!(!d.passed_at(now), "a stop does not count");
        assert_eq!(d.stopped(), s(60));
        assert_eq!(d.at(), t0 + s(64));
        now += Duration::from_millis(500);
        assert!(!d.passed_at(now));
        now += Duration::from_millis(600);
        assert!(d.passed_at(now), "running again, it passes");
        // A waiter looking every second at most is never taken as stopped.
        let mut e = Deadline::looked_at(t0 + s(5), t0);
        let mut now = t0;
        for _ in 0..4 {
            now += STOPPED_GAP;
            assert!(!e.passed_at(now));
        }
        now += STOPPED_GAP;
        assert!(e.passed_at(now));
        assert_eq!(e.stopped(), Duration::ZERO);
        // No deadline stays none.
        let mut never = Deadline::looked_at(t0 + NO_DEADLINE, t0);
        assert!(!never.passed_at(t0 + s(3600)));
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
}
