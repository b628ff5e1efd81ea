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

    /// A count of items in two bytes (a host may have hundreds of
    /// addresses), `what` named in the error past 65,535.
    pub(crate) fn count(&mut self, n: usize, what: &str) -> Result<&mut Writer> {
        let n = u16::try_from(n).map_err(|_| JobError::Protocol {
            whom: "this rank".into(),
            why: format!("{n} {what}, more than sode's 65535"),
        })?;
        Ok(self.u16(n))
    }

    /// An IPv4 or IPv6 address with its port.
    pub(crate) fn addr(&mut self, a: &SocketAddr) -> &mut Writer {
        match a.ip() {
            IpAddr::V4(ip) => self.u8(4).bytes(&ip.octets()),
            IpAddr::V6(ip) => self.u8(6).bytes(&ip.octets()),
        };
        self.u16(a.port())
    }

    /// A list of addresses: its count ([`Writer::count`]), then each.
    pub(crate) fn addrs(&mut self, list: &[SocketAddr], what: &str) -> Result<&mut Writer> {
        self.count(list.len(), what)?;
        for a in list {
            self.addr(a);
        }
        Ok(self)
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

    /// What [`Writer::count`] wrote.
    pub(crate) fn count(&mut self) -> Option<u16> {
        self.u16()
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

    /// What [`Writer::addrs`] wrote.
    pub(crate) fn addrs(&mut self) -> Option<Vec<SocketAddr>> {
        (0..self.count()?).map(|_| self.addr()).collect()
    }

    /// `value` when the record ends here (nothing left over).
    pub(crate) fn end<T>(self, value: T) -> Option<T> {
        self.rest.is_empty().then_some(value)
    }
}

/// Blocks of any lengths as one message: each block's length in four
/// bytes, then the block (what a rank that gathers for others sends back).
pub(crate) fn join_blocks(blocks: &[Vec<u8>]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(blocks.iter().map(|b| 4 + b.len()).sum());
    for b in blocks {
        let len = u32::try_from(b.len()).map_err(|_| JobError::Protocol {
            whom: "this rank".into(),
            why: format!("a block of {} bytes to gather", b.len()),
        })?;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(b);
    }
    Ok(out)
}

/// What [`join_blocks`] made of exactly `n` blocks; `None` for anything
/// else.
pub(crate) fn split_blocks(message: &[u8], n: usize) -> Option<Vec<Vec<u8>>> {
    let mut rest = message;
    let mut blocks = Vec::new();
    while let Some((len, tail)) = rest.split_first_chunk::<4>() {
        let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
        if len > tail.len() || blocks.len() == n {
            return None;
        }
        let (block, tail) = tail.split_at(len);
        blocks.push(block.to_vec());
        rest = tail;
    }
    (rest.is_empty() && blocks.len() == n).then_some(blocks)
}

/// What rank 0 sends the ranks that took a collective step in place of
/// the gathered blocks when others did not ([`JobError::StepMissed`]): a
/// first length no [`join_blocks`] message has (blocks are far shorter
/// than 4 GiB), the milliseconds it waited, then the missing ranks.
pub(crate) fn encode_step_missed(missing: &str, waited: std::time::Duration) -> Vec<u8> {
    let ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
    let mut out = STEP_MISSED.to_vec();
    out.extend_from_slice(&ms.to_le_bytes());
    out.extend_from_slice(missing.as_bytes());
    out
}

/// The error [`encode_step_missed`] carried, if `message` is one.
pub(crate) fn decode_step_missed(message: &[u8]) -> Option<JobError> {
    let rest = message.strip_prefix(&STEP_MISSED[..])?;
    let (ms, missing) = rest.split_first_chunk::<8>()?;
    Some(JobError::StepMissed {
        missing: String::from_utf8_lossy(missing).into_owned(),
        waited: std::time::Duration::from_millis(u64::from_le_bytes(*ms)),
    })
}

const STEP_MISSED: [u8; 4] = [0xff; 4];

/// The directory of where every rank listens, as rank 0 sends it to each
/// rank at the rendezvous: the ranks' count, then each rank's addresses.
pub(crate) fn encode_directory(listen: &[Vec<SocketAddr>]) -> Result<Vec<u8>> {
    let ranks = u32::try_from(listen.len()).map_err(|_| JobError::Protocol {
        whom: "this rank".into(),
        why: format!("a directory of {} ranks", listen.len()),
    })?;
    let mut w = Writer::new(DIRECTORY_FORMAT);
    w.u32(ranks);
    for addrs in listen {
        w.addrs(addrs, "listening addresses")?;
    }
    Ok(w.finish())
}

/// What [`encode_directory`] made of `ranks` ranks' addresses.
pub(crate) fn decode_directory(message: &[u8], ranks: usize) -> Option<Vec<Vec<SocketAddr>>> {
    let mut r = Reader::new(message, DIRECTORY_FORMAT)?;
    if usize::try_from(r.u32()?).ok()? != ranks {
        return None;
    }
    let mut listen = Vec::new();
    for _ in 0..ranks {
        listen.push(r.addrs()?);
    }
    r.end(listen)
}

const DIRECTORY_FORMAT: u8 = 1;

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
    fn a_missed_step_reads_back_and_no_gathered_blocks_read_as_one() {
        let m = encode_step_missed("ranks 2, 3", std::time::Duration::from_millis(1500));
        let e = decode_step_missed(&m).unwrap().to_string();
        assert!(
            e.starts_with("ranks 2, 3 did not take a collective step within 1.5 s"),
            "{e}"
        );
        // Gathered blocks begin with a length of at most MAX_MESSAGE.
        let blocks = join_blocks(&[vec![0xff; 8], vec![]]).unwrap();
        assert!(decode_step_missed(&blocks).is_none());
        assert!(crate::auth::MAX_MESSAGE < u32::MAX as usize);
    }

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
    fn gathered_blocks_split_back_into_as_many_as_were_joined() {
        let blocks = vec![b"abc".to_vec(), Vec::new(), vec![0; 300]];
        let msg = join_blocks(&blocks).unwrap();
        assert_eq!(msg.len(), 3 * 4 + 303);
        assert_eq!(split_blocks(&msg, 3), Some(blocks.clone()));
        assert_eq!(split_blocks(&msg, 2), None, "one block too many");
        assert_eq!(split_blocks(&msg, 4), None, "one block missing");
        assert_eq!(split_blocks(&msg[..msg.len() - 1], 3), None, "cut");
        assert_eq!(
            split_blocks(&[&msg[..], &[0]].concat(), 3),
            None,
            "a stray byte"
        );
        assert_eq!(split_blocks(&[], 0), Some(Vec::new()));
    }

    #[test]
    fn a_directory_reads_back_for_its_own_count_of_ranks_only() {
        let listen: Vec<Vec<SocketAddr>> = vec![
            vec![
                "10.0.0.1:5".parse().unwrap(),
                "127.0.0.1:5".parse().unwrap(),
            ],
            Vec::new(),
            vec!["[::1]:7".parse().unwrap()],
        ];
        let msg = encode_directory(&listen).unwrap();
        assert_eq!(decode_directory(&msg, 3), Some(listen));
        assert_eq!(decode_directory(&msg, 2), None);
        assert_eq!(decode_directory(&msg[..msg.len() - 1], 3), None);
    }

    #[test]
    fn values_too_long_for_their_byte_are_named() {
        let e = Writer::new(0)
            .short(&[0; 256], "the host name")
            .unwrap_err();
        assert!(e.to_string().contains("the host name is 256 bytes"), "{e}");
        let e = Writer::new(0).count(70_000, "networks").unwrap_err();
        assert!(e.to_string().contains("70000 networks"), "{e}");
        let mut w = Writer::new(0);
        w.count(300, "addresses").unwrap();
        assert_eq!(Reader::new(&w.finish(), 0).unwrap().count(), Some(300));
    }

    proptest::proptest! {
        #[test]
        fn no_bytes_make_the_gathered_blocks_or_the_directory_panic(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            n in 0usize..6,
        ) {
            let _ = split_blocks(&bytes, n);
            let _ = decode_directory(&bytes, n);
            let mut with_format = vec![DIRECTORY_FORMAT];
            with_format.extend_from_slice(&bytes);
            let _ = decode_directory(&with_format, n);
        }
    }
}
