//! How long waits may take: no deadline unless one is given, and a
//! job-wide default for the waits that give none (`SODE_TIMEOUT`). A rank
//! late by minutes (output, a checkpoint, imbalance) is no error; a dead
//! one is found by the job's health whatever the deadline.

use std::sync::OnceLock;
use std::time::Duration;

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

#[cfg(test)]
mod tests {
    use super::*;

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
