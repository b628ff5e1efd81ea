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

/// An error and its causes on one line: `what: why: root cause`.
pub fn chain(e: &(dyn Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}
