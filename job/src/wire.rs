//! The binary records ranks gather while a job is set up. Every rank
//! receives every other's, so a record's size multiplies with the job:
//! they are a few dozen bytes of fixed layout, not JSON with its field
//! names. A format byte leads each, so ranks of different sode builds
//! fail with a message rather than misread each other.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::error::{JobError, Result};

/// Builds a record.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    out: Vec<u8>,
}

impl Writer {
    /// A record beginning with its `format` byte.
    pub(crate) fn new(format: u8) -> Writer {
        Writer { out: vec![format] }
    }

    pub(crate) fn u8(&mut self, v: u8) -> &mut Writer {
        self.out.push(v);
        self
    }

    pub(crate) fn u16(&mut self, v: u16) -> &mut Writer {
        self.bytes(&v.to_le_bytes())
    }

    pub(crate) fn u32(&mut self, v: u32) -> &mut Writer {
        self.bytes(&v.to_le_bytes())
    }

    /// `v` as is: the reader knows its length.
    pub(crate) fn bytes(&mut self, v: &[u8]) -> &mut Writer {
        self.out.extend_from_slice(v);
        self
    }

    /// `v` after its length in one byte; `what` names it in the error when
    /// it is longer than 255 bytes.
    pub(crate) fn short(&mut self, v: &[u8], what: &str) -> Result<&mut Writer> {
        let len = u8::try_from(v.len()).map_err(|_| JobError::Protocol {
            whom: "this rank".into(),
            why: format!("{what} is {} bytes long, more than sode's 255", v.len()),
        })?;
        Ok(self.u8(len).bytes(v))
    }

    /// A count of at most 255 items, `what` named as in [`Writer::short`].
    pub(crate) fn count(&mut self, n: usize, what: &str) -> Result<&mut Writer> {
        let n = u8::try_from(n).map_err(|_| JobError::Protocol {
            whom: "this rank".into(),
            why: format!("{n} {what}, more than sode's 255"),
        })?;
        Ok(self.u8(n))
    }

    /// An IPv4 or IPv6 address with its port.
    pub(crate) fn addr(&mut self, a: &SocketAddr) -> &mut Writer {
        match a.ip() {
            IpAddr::V4(ip) => self.u8(4).bytes(&ip.octets()),
            IpAddr::V6(ip) => self.u8(6).bytes(&ip.octets()),
        };
        self.u16(a.port())
    }

    pub(crate) fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }
}

/// Reads a record; every read is `None` past its end or on a value the
/// writer cannot have written.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader of `record`, or `None` when it does not begin with
    /// `format`.
    pub(crate) fn new(record: &'a [u8], format: u8) -> Option<Reader<'a>> {
        match record.split_first() {
            Some((&f, rest)) if f == format => Some(Reader { rest }),
            _ => None,
        }
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.rest.len() {
            return None;
        }
        let (v, rest) = self.rest.split_at(n);
        self.rest = rest;
        Some(v)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N)?.try_into().ok()
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.array::<1>().map(|[v]| v)
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }

    /// What [`Writer::short`] wrote.
    pub(crate) fn short(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.bytes(usize::from(n))
    }

    /// What [`Writer::short`] wrote of a string.
    pub(crate) fn text(&mut self) -> Option<String> {
        String::from_utf8(self.short()?.to_vec()).ok()
    }

    /// What [`Writer::addr`] wrote.
    pub(crate) fn addr(&mut self) -> Option<SocketAddr> {
        let ip = match self.u8()? {
            4 => IpAddr::V4(Ipv4Addr::from(self.array::<4>()?)),
            6 => IpAddr::V6(Ipv6Addr::from(self.array::<16>()?)),
            _ => return None,
        };
        Some(SocketAddr::new(ip, self.u16()?))
    }

    /// `value` when the record ends here (nothing left over).
    pub(crate) fn end<T>(self, value: T) -> Option<T> {
        self.rest.is_empty().then_some(value)
    }
}

/// The error for a record of `whom` that does not read as `what`.
pub(crate) fn unreadable(whom: &str, what: &str, record: &[u8]) -> JobError {
    JobError::Protocol {
        whom: whom.into(),
        why: format!(
            "its {what} ({} bytes) does not read: is every rank running the same sode?",
            record.len()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back_and_nothing_more() {
        let v6: SocketAddr = "[fe80::1]:9".parse().unwrap();
        let v4: SocketAddr = "10.1.2.3:65535".parse().unwrap();
        let mut w = Writer::new(7);
        w.u8(1)
            .u16(513)
            .u32(70_000)
            .bytes(b"xy")
            .addr(&v4)
            .addr(&v6);
        w.short(b"host", "a name").unwrap();
        let rec = w.finish();
        let mut r = Reader::new(&rec, 7).unwrap();
        assert_eq!(r.u8(), Some(1));
        assert_eq!(r.u16(), Some(513));
        assert_eq!(r.u32(), Some(70_000));
        assert_eq!(r.array::<2>(), Some(*b"xy"));
        assert_eq!(r.addr(), Some(v4));
        assert_eq!(r.addr(), Some(v6));
        assert_eq!(r.text().as_deref(), Some("host"));
        assert_eq!(r.end(()), Some(()));
        // Another format, a cut record, a byte too many.
        assert!(Reader::new(&rec, 8).is_none());
        let mut cut = Reader::new(&rec[..rec.len() - 1], 7).unwrap();
        cut.bytes(rec.len() - 6);
        assert_eq!(cut.text(), None);
        let mut long = Reader::new(&rec, 7).unwrap();
        long.bytes(rec.len() - 2);
        assert_eq!(long.end(()), None);
    }

    #[test]
    fn values_too_long_for_their_byte_are_named() {
        let e = Writer::new(0)
            .short(&[0; 256], "the host name")
            .unwrap_err();
        assert!(e.to_string().contains("the host name is 256 bytes"), "{e}");
        let e = Writer::new(0).count(300, "networks").unwrap_err();
        assert!(e.to_string().contains("300 networks"), "{e}");
    }
}
