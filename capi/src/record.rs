//! The records ranks gather at commit to check each other: a fixed size
//! whatever the exchange (a flag, the transport chosen and some 64-bit
//! words), so that what a commit brings each rank grows with the job by a
//! constant per rank, not with the fields or boxes. What the words hold is
//! each kind of exchange's own (`cart::Record`, `explicit::Record`).

pub(crate) use sode::field::{common_digest, digest};

/// The bytes of a record of `words` words.
pub(crate) fn bytes(words: usize) -> usize {
    2 + 8 * words
}

/// A record: whether its rank's description passed the checks it can make
/// alone, its transport, and `words`, little-endian.
pub(crate) fn encode(valid: bool, transport: u8, words: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes(words.len()));
    out.push(u8::from(valid));
    out.push(transport);
    for w in words {
        out.extend_from_slice(&w.to_le_bytes());
    }
    out
}

/// What [`encode`] made of `N` words; `None` for anything else.
pub(crate) fn decode<const N: usize>(record: &[u8]) -> Option<(bool, u8, [u64; N])> {
    if record.len() != bytes(N) || record[0] > 1 {
        return None;
    }
    let mut words = [0u64; N];
    for (w, chunk) in words.iter_mut().zip(record[2..].chunks_exact(8)) {
        *w = u64::from_le_bytes(chunk.try_into().ok()?);
    }
    Some((record[0] == 1, record[1], words))
}

/// `x` as eight little-endian bytes (`usize::MAX` for none), for digests.
pub(crate) fn word(x: Option<&usize>) -> [u8; 8] {
    (x.copied().unwrap_or(usize::MAX) as u64).to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_and_nothing_else_does() {
        let r = encode(true, 3, &[1, u64::MAX, 7]);
        assert_eq!(r.len(), bytes(3));
        assert_eq!(decode::<3>(&r), Some((true, 3, [1, u64::MAX, 7])));
        assert_eq!(decode::<2>(&r), None);
        let mut bad = r.clone();
        bad[0] = 2;
        assert_eq!(decode::<3>(&bad), None);
        assert_ne!(digest([1, 2]), digest([2, 1]));
    }
}
