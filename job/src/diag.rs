//! Diagnostics: library code reports through `tracing`; programs install
//! the subscriber, filtered by `SODE_LOG` (e.g. `SODE_LOG=debug`,
//! `SODE_LOG=sode_shm=info`; default: warnings and errors).

use std::error::Error;

/// The variable holding the diagnostics filter.
pub const LOG_VAR: &str = "SODE_LOG";

/// Installs the stderr subscriber for a program (once; later calls and a
/// subscriber already installed are left alone).
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_env(LOG_VAR)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .with_target(true)
        .try_init();
}

/// An error and its causes on one line: `what: why: root cause`; when a
/// cause is the process running out of file descriptors, what to do.
pub fn chain(e: &(dyn Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    let mut out_of_descriptors = false;
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        out_of_descriptors |= c
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
            .is_some_and(|n| n == libc::EMFILE || n == libc::ENFILE);
        cause = c.source();
    }
    if out_of_descriptors {
        out.push_str(&descriptor_hint());
    }
    out
}

/// What to do when descriptors run out: each exchange holds a few (a TCP
/// stream per neighbouring rank, shared-memory segments).
fn descriptor_hint() -> String {
    use nix::sys::resource::{getrlimit, Resource};
    let limit = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => format!(" (its limit is {soft}, at most {hard})"),
        Err(_) => String::new(),
    };
    format!(
        " (this process has run out of file descriptors{limit}: free the exchanges it no longer uses, or raise the hard limit, `ulimit -Hn`, for the job)"
    )
}

/// Raises this process's soft limit on open descriptors to its hard limit,
/// once: every exchange holds a few (a TCP stream per neighbouring rank,
/// shared-memory segments), and common soft limits (1,024) lie far below
/// the hard ones. (Go's runtime does the same for every program.)
pub(crate) fn raise_descriptor_limit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(raise_soft_to_hard);
}

fn raise_soft_to_hard() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => tracing::debug!(from = soft, to = hard, "raised the open-descriptor limit"),
            Err(e) => tracing::debug!(error = %e, soft, hard, "the open-descriptor limit stays"),
        },
        Ok(_) => {}
        Err(e) => tracing::debug!(error = %e, "the open-descriptor limit is unknown"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_out_of_descriptors_says_what_to_do() {
        let e = crate::JobError::Bootstrap {
            step: "accepting data connections".into(),
            whom: "the listener".into(),
            source: std::io::Error::from_raw_os_error(libc::EMFILE),
        };
        let text = chain(&e);
        assert!(
            text.contains("run out of file descriptors") && text.contains("its limit is"),
            "{text}"
        );
        let other = crate::JobError::Bootstrap {
            step: "connect".into(),
            whom: "rank 1".into(),
            source: std::io::Error::from_raw_os_error(libc::ECONNREFUSED),
        };
        assert!(!chain(&other).contains("descriptors"));
    }

    #[test]
    fn the_descriptor_limit_is_raised_to_the_hard_one() {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        // A soft limit below the hard one, as common setups have.
        setrlimit(Resource::RLIMIT_NOFILE, hard / 2, hard).unwrap();
        raise_soft_to_hard();
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (hard, hard));
    }
}
