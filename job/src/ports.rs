//! The ports sode's own listeners take (data streams and setup links, the
//! relay, the peer links over a program's allgather): any the kernel
//! gives, or those of `SODE_TCP_PORTS` on a cluster whose firewall opens
//! only some ports between its nodes.

use std::io;
use std::net::{IpAddr, TcpListener};

use crate::error::{JobError, Result};

/// The variable naming the ports sode may listen on: `FIRST-LAST`, or one
/// port.
pub const TCP_PORTS_VAR: &str = "SODE_TCP_PORTS";

/// The ports a listener may take, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PortRange {
    first: u16,
    last: u16,
}

impl PortRange {
    /// What [`TCP_PORTS_VAR`] holds, as the user wrote it.
    fn text(self) -> String {
        format!("{TCP_PORTS_VAR}={}-{}", self.first, self.last)
    }

    /// How many ports.
    fn len(self) -> u32 {
        u32::from(self.last) - u32::from(self.first) + 1
    }
}

/// The range `SODE_TCP_PORTS` names (none when unset or empty).
///
/// # Errors
///
/// [`JobError::InvalidSetting`] for a value that is no port or range of
/// ports from 1 to 65535.
pub(crate) fn from_env() -> Result<Option<PortRange>> {
    let Some(value) = std::env::var(TCP_PORTS_VAR).ok() else {
        return Ok(None);
    };
    parse(&value).map_err(|why| JobError::InvalidSetting {
        name: TCP_PORTS_VAR.into(),
        value,
        why,
    })
}

fn parse(value: &str) -> std::result::Result<Option<PortRange>, String> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    let (first, last) = value.split_once('-').unwrap_or((value, value));
    let port = |p: &str| p.trim().parse::<u16>().ok().filter(|&p| p > 0);
    match (port(first), port(last)) {
        (Some(first), Some(last)) if first <= last => Ok(Some(PortRange { first, last })),
        _ => Err("expected the ports sode may listen on, as FIRST-LAST (60000-60999) or one port, from 1 to 65535, FIRST not above LAST".into()),
    }
}

/// A listener on `ip` for `what`: on a port of `SODE_TCP_PORTS` when it is
/// set, else on any. The ranks of a node try the range's ports from
/// different places (by process id), each taking the first free one.
///
/// # Errors
///
/// [`JobError::InvalidSetting`] for a bad `SODE_TCP_PORTS`;
/// [`JobError::Bootstrap`] when the listener cannot be made, naming the
/// range when every port of it is taken.
pub(crate) fn listen(ip: IpAddr, what: &str) -> Result<TcpListener> {
    listen_in(from_env()?, ip, what)
}

/// [`listen`] on a port of `range`, any port when none.
fn listen_in(range: Option<PortRange>, ip: IpAddr, what: &str) -> Result<TcpListener> {
    let failed = |step: String, source: io::Error| JobError::Bootstrap {
        step,
        whom: "this host".into(),
        source,
    };
    let Some(range) = range else {
        return TcpListener::bind((ip, 0))
            .map_err(|e| failed(format!("listening for {what} on {ip}"), e));
    };
    let start = std::process::id() % range.len();
    for i in 0..range.len() {
        let offset = (start + i) % range.len();
        // Below `range.last`: the offset is less than the range's length.
        let port = range.first.saturating_add(offset as u16);
        match TcpListener::bind((ip, port)) {
            Ok(listener) => return Ok(listener),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(e) => {
                return Err(failed(
                    format!("listening for {what} on {ip}:{port} ({})", range.text()),
                    e,
                ))
            }
        }
    }
    Err(failed(
        format!(
            "listening for {what} on {ip}: every port of {} is taken (a rank holds one or two a communicator, and one more while it sets up TCP channels): widen the range",
            range.text()
        ),
        io::Error::from(io::ErrorKind::AddrInUse),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_reads_as_written_or_is_refused_with_the_form() {
        let r = |first, last| Ok(Some(PortRange { first, last }));
        assert_eq!(parse("60000-60999"), r(60000, 60999));
        assert_eq!(parse(" 61000 "), r(61000, 61000));
        assert_eq!(parse(" 1 - 65535"), r(1, 65535));
        assert_eq!(parse(""), Ok(None));
        for bad in ["0-10", "10-5", "60000-70000", "x", "-", "60000-", "1,2"] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("FIRST-LAST"), "{bad}: {e}");
        }
        assert_eq!(PortRange { first: 5, last: 9 }.len(), 5);
        assert_eq!(
            PortRange {
                first: 1,
                last: 65535
            }
            .len(),
            65535
        );
    }

    #[test]
    fn a_listener_takes_a_free_port_of_the_range_or_names_the_range_taken() {
        let ip = IpAddr::from([127, 0, 0, 1]);
        let taken = TcpListener::bind((ip, 0)).unwrap();
        let port = taken.local_addr().unwrap().port();
        let only = Some(PortRange {
            first: port,
            last: port,
        });
        let e = crate::diag::chain(&listen_in(only, ip, "tests").unwrap_err());
        assert!(
            e.contains(&format!(
                "every port of SODE_TCP_PORTS={port}-{port} is taken"
            )) && e.contains("widen the range"),
            "{e}"
        );
        // Freed, it is taken again; beside the first, a second port goes.
        drop(taken);
        let again = listen_in(only, ip, "tests").unwrap();
        assert_eq!(again.local_addr().unwrap().port(), port);
        if let Some(next) = port.checked_add(1) {
            let two = Some(PortRange {
                first: port,
                last: next,
            });
            if let Ok(other) = listen_in(two, ip, "tests") {
                assert_eq!(other.local_addr().unwrap().port(), next);
            }
        }
    }
}
