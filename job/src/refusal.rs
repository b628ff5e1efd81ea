//! A rank's refusal to take part in a meeting of the ranks (a world's
//! creation): the record it sends in place of its own in the meeting's
//! first step, so that every rank fails there, naming it, rather than
//! wait for it in a later step.

use crate::error::JobError;

/// The first byte of a refusal: no format of a record sent in its place
/// (an introduction, a card) takes it.
const REFUSAL: u8 = 0xff;

/// The most of a reason that travels, in bytes.
pub(crate) const MESSAGE_MAX: usize = 4096;

/// The code of a refusal that carries no status of the caller's: the
/// rank's own part of the meeting failed.
pub(crate) const NO_STATUS: i32 = -1;

/// As much of `message` as travels: its first [`MESSAGE_MAX`] bytes, cut
/// on a character boundary.
pub(crate) fn cut(message: &str) -> &str {
    let mut end = message.len().min(MESSAGE_MAX);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

/// The record of a refusal with `code` and `message`.
pub(crate) fn record(code: i32, message: &str) -> Vec<u8> {
    let message = cut(message);
    let mut r = Vec::with_capacity(5 + message.len());
    r.push(REFUSAL);
    r.extend_from_slice(&code.to_le_bytes());
    r.extend_from_slice(message.as_bytes());
    r
}

/// `failed`, this rank's own part of a meeting, after `send` has taken the
/// meeting's first step with its refusal (no status), so that every other
/// rank fails there too; a refusal that cannot be sent is logged.
pub(crate) fn refused_after(
    failed: JobError,
    send: impl FnOnce(&[u8]) -> crate::error::Result<()>,
) -> JobError {
    if let Err(told) = send(&record(NO_STATUS, &crate::diag::chain(&failed))) {
        tracing::warn!(
            "the other ranks could not be told that this rank cannot join: {}",
            crate::diag::chain(&told)
        );
    }
    failed
}

/// The error rank `rank`'s reason (a code, then UTF-8) stands for.
pub(crate) fn gave_up(rank: usize, body: &[u8]) -> JobError {
    let (code, message) = match body.split_first_chunk::<4>() {
        Some((code, message)) => (
            i32::from_le_bytes(*code),
            String::from_utf8_lossy(message).into_owned(),
        ),
        None => (0, String::from("(its reason did not arrive whole)")),
    };
    JobError::GaveUp {
        rank,
        code,
        message,
    }
}

/// The refusal of the lowest rank that sent one in a step's records, if
/// any did.
pub(crate) fn first_in(all: &[Vec<u8>]) -> Option<JobError> {
    all.iter()
        .enumerate()
        .find_map(|(rank, b)| match b.split_first() {
            Some((&REFUSAL, body)) => Some(gave_up(rank, body)),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_refusal_is_read_back_whole() {
        let all = vec![
            vec![2, 0, 0],
            record(5, "rank 1's reason"),
            record(7, &"é".repeat(3000)),
        ];
        match first_in(&all) {
            Some(JobError::GaveUp {
                rank: 1,
                code: 5,
                message,
            }) => assert_eq!(message, "rank 1's reason"),
            other => panic!("{other:?}"),
        }
        // Cut on a character boundary, at most MESSAGE_MAX bytes.
        match first_in(&all[2..]) {
            Some(JobError::GaveUp { message, .. }) => {
                assert_eq!(message.len(), 4096);
                assert!(message.chars().all(|c| c == 'é'));
            }
            other => panic!("{other:?}"),
        }
        assert!(first_in(&all[..1]).is_none());
    }
}
