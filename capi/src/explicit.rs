//! An exchange described by its messages, for codes with their own
//! decomposition: each rank lists the boxes it sends to and receives from
//! which ranks, with a tag; a send to rank `q` with tag `t` fills `q`'s
//! receive from this rank with tag `t`. Checked across the whole job at
//! commit, so every rank reaches the same verdict.
//!
//! What is gathered is a `Record` of fixed size per rank, however many
//! boxes it has: digests of what the ranks must describe alike, and of its
//! sends and receives, which add up to the same over the job exactly when
//! every send meets its receive. Only when they do not do the ranks gather
//! their whole descriptions ([`Card`]), to name what differs.

use serde::{Deserialize, Serialize};

use sode::field::FieldCard;

use crate::cart::Counting;
pub use sode::pattern::BoxMessage;

/// What one side of a message tells the other ranks: peer, tag, shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Side {
    /// The peer.
    pub peer: usize,
    /// The tag.
    pub tag: u32,
    /// Cells per axis.
    pub size: Vec<usize>,
    /// The one field it carries (`None`: every field).
    #[serde(default)]
    pub field: Option<usize>,
}

/// What a rank tells the others at commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Card {
    /// Axes of the boxes.
    pub ndims: usize,
    /// Its fields.
    pub fields: Vec<FieldCard>,
    /// What it sends.
    pub sends: Vec<Side>,
    /// What it receives.
    pub recvs: Vec<Side>,
}

/// What the other ranks see of box `m`.
pub fn side(m: &BoxMessage) -> Side {
    Side {
        peer: m.peer,
        tag: m.tag,
        size: m.size.clone(),
        field: m.field,
    }
}

/// Which fields a box carries, for messages.
fn carried(field: Option<usize>, counting: Counting) -> String {
    field.map_or_else(|| "every field".into(), |f| counting.field(f))
}

fn find(sides: &[Side], peer: usize, tag: u32) -> Option<&Side> {
    sides.iter().find(|s| s.peer == peer && s.tag == tag)
}

fn unique(r: usize, sides: &[Side], what: &str) -> Result<(), String> {
    for (i, s) in sides.iter().enumerate() {
        if sides[..i]
            .iter()
            .any(|o| o.peer == s.peer && o.tag == s.tag)
        {
            return Err(format!(
                "rank {r} {what} rank {} twice with tag {}: tags must tell a pair's messages apart",
                s.peer, s.tag
            ));
        }
    }
    Ok(())
}

/// What a rank tells every other at commit, of a fixed size whatever its
/// boxes (`crate::record`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    /// Whether its own lists pass what it can check alone: peers in the
    /// job, no (peer, tag) twice.
    valid: bool,
    /// The transport it chose.
    transport: u8,
    /// A digest of what every rank must describe alike: the boxes' axes;
    /// the fields' types, halo widths, memory orders, overlaps and numbers
    /// of axes.
    common: u64,
    /// The sum of a digest of each send: sender, receiver, tag, cells per
    /// axis, and the sender's extents beyond the boxes' axes.
    sends: u64,
    /// The same sum over its receives (with its own extents beyond the
    /// boxes' axes): over the job, the two sums are equal when every send
    /// meets a receive of its shape between ranks whose fields agree.
    recvs: u64,
    /// How many it sends.
    send_count: u64,
    /// How many it receives.
    recv_count: u64,
}

impl Record {
    /// The record of rank `me`'s `card` in a job of `size` ranks, with
    /// `transport`.
    pub(crate) fn of(card: &Card, me: usize, size: usize, transport: u8) -> Record {
        let valid = unique(me, &card.sends, "").is_ok()
            && unique(me, &card.recvs, "").is_ok()
            && card.sends.iter().chain(&card.recvs).all(|s| s.peer < size);
        let common = crate::record::common_digest(card.ndims, &card.fields);
        let beyond: Vec<&[usize]> = card
            .fields
            .iter()
            .map(|f| f.owned_size.get(card.ndims..).unwrap_or_default())
            .collect();
        let one = |from: usize, to: usize, s: &Side| -> u64 {
            let field = s.field.map_or(0, |f| f + 1);
            let words = [from, to, s.tag as usize, field, s.size.len()]
                .into_iter()
                .chain(s.size.iter().copied())
                .chain(
                    beyond
                        .iter()
                        .flat_map(|b| std::iter::once(b.len()).chain(b.iter().copied())),
                );
            mix(crate::record::digest(
                words.flat_map(|w| (w as u64).to_le_bytes()),
            ))
        };
        let sum = |it: &mut dyn Iterator<Item = u64>| it.fold(0u64, u64::wrapping_add);
        Record {
            valid,
            transport,
            common,
            sends: sum(&mut card.sends.iter().map(|s| one(me, s.peer, s))),
            recvs: sum(&mut card.recvs.iter().map(|r| one(r.peer, me, r))),
            send_count: card.sends.len() as u64,
            recv_count: card.recvs.len() as u64,
        }
    }

    /// How many words its record holds.
    pub(crate) const WORDS: usize = 5;

    /// Its bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let words = [
            self.common,
            self.sends,
            self.recvs,
            self.send_count,
            self.recv_count,
        ];
        crate::record::encode(self.valid, self.transport, &words)
    }

    /// The record `bytes` encode; `None` for bytes no [`Record::encode`]
    /// made.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Record> {
        let (valid, transport, w) = crate::record::decode::<{ Record::WORDS }>(bytes)?;
        Some(Record {
            valid,
            transport,
            common: w[0],
            sends: w[1],
            recvs: w[2],
            send_count: w[3],
            recv_count: w[4],
        })
    }
}

/// Whether every rank's record (`records`) says the job agrees: each rank's
/// lists valid, one transport and description, and every send met by a
/// receive. When not, the ranks compare their whole cards ([`check`]),
/// which names what differs. Every rank answers alike.
pub(crate) fn records_agree(records: &[Record]) -> bool {
    let Some(first) = records.first() else {
        return false;
    };
    let total = |f: fn(&Record) -> u64| records.iter().map(f).fold(0u64, u64::wrapping_add);
    records
        .iter()
        .all(|r| r.valid && r.transport == first.transport && r.common == first.common)
        && total(|r| r.sends) == total(|r| r.recvs)
        && total(|r| r.send_count) == total(|r| r.recv_count)
}

/// A finaliser (splitmix64's) that spreads a digest's bits, so that sums of
/// digests of different messages do not cancel.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Checks every rank's messages against its peers': each send met by a
/// receive of the same shape and field, each receive by a send, fields
/// alike; fields named as `counting` says.
pub fn check(cards: &[Card], counting: Counting) -> Result<(), String> {
    let n = cards.len();
    let first = cards.first().ok_or("an empty job")?;
    for (r, c) in cards.iter().enumerate() {
        if c.ndims != first.ndims {
            return Err(format!(
                "ranks 0 and {r} describe boxes of {} and {} axes",
                first.ndims, c.ndims
            ));
        }
        crate::cart::check_same_fields(&first.fields, &c.fields, r)?;
        unique(r, &c.sends, "sends to")?;
        unique(r, &c.recvs, "receives from")?;
        for s in &c.sends {
            let theirs = cards.get(s.peer).ok_or_else(|| {
                format!(
                    "rank {r} sends to rank {}, but the job has {n} ranks",
                    s.peer
                )
            })?;
            match find(&theirs.recvs, r, s.tag) {
                None => {
                    return Err(format!(
                        "rank {r} sends a box with tag {} to rank {}, which receives none from it with that tag",
                        s.tag, s.peer
                    ))
                }
                Some(m) if m.size != s.size => {
                    return Err(format!(
                        "rank {r} sends a box of {:?} cells with tag {} to rank {}, which receives {:?}",
                        s.size, s.tag, s.peer, m.size
                    ))
                }
                Some(m) if m.field != s.field => {
                    return Err(format!(
                        "rank {r} sends a box of {} with tag {} to rank {}, which receives it into {}",
                        carried(s.field, counting), s.tag, s.peer, carried(m.field, counting)
                    ))
                }
                Some(_) => {}
            }
            for (f, (mine, other)) in c.fields.iter().zip(&theirs.fields).enumerate() {
                if mine.owned_size[c.ndims..] != other.owned_size[c.ndims..] {
                    return Err(format!(
                        "field {f}: ranks {r} and {} own different extents along the axes beyond the boxes' ({:?} vs {:?})",
                        s.peer,
                        &mine.owned_size[c.ndims..],
                        &other.owned_size[c.ndims..]
                    ));
                }
            }
        }
        for m in &c.recvs {
            let theirs = cards.get(m.peer).ok_or_else(|| {
                format!(
                    "rank {r} receives from rank {}, but the job has {n} ranks",
                    m.peer
                )
            })?;
            if find(&theirs.sends, r, m.tag).is_none() {
                return Err(format!(
                    "rank {r} receives a box with tag {} from rank {}, which sends none to it with that tag",
                    m.tag, m.peer
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sode::field::ElemType;

    fn card(sends: &[(usize, u32, [usize; 2])], recvs: &[(usize, u32, [usize; 2])]) -> Card {
        let side = |&(peer, tag, size): &(usize, u32, [usize; 2])| Side {
            peer,
            tag,
            size: size.to_vec(),
            field: None,
        };
        Card {
            ndims: 2,
            fields: vec![FieldCard {
                ty: ElemType::F64,
                owned_size: vec![8, 8],
                halo_lo: vec![0, 0],
                halo_hi: vec![0, 0],
                order: vec![1, 0],
                overlap: Default::default(),
            }],
            sends: sends.iter().map(side).collect(),
            recvs: recvs.iter().map(side).collect(),
        }
    }

    #[test]
    fn every_send_needs_its_receive_of_the_same_shape() {
        let good = vec![
            card(&[(1, 7, [1, 8])], &[(1, 9, [2, 8])]),
            card(&[(0, 9, [2, 8])], &[(0, 7, [1, 8])]),
        ];
        assert_eq!(check(&good, Counting::C), Ok(()));
        let mut bad = good.clone();
        bad[1].recvs[0].size = vec![8, 1];
        assert!(check(&bad, Counting::C)
            .unwrap_err()
            .contains("which receives [8, 1]"));
        let mut bad = good.clone();
        bad[1].recvs.clear();
        assert!(check(&bad, Counting::C)
            .unwrap_err()
            .contains("receives none"));
        let mut bad = good.clone();
        bad[0].recvs[0].tag = 3;
        assert!(check(&bad, Counting::C).unwrap_err().contains("sends none"));
        let mut bad = good.clone();
        let again = bad[0].sends[0].clone();
        bad[0].sends.push(again);
        assert!(check(&bad, Counting::C).unwrap_err().contains("twice"));
        let mut bad = good.clone();
        bad[0].sends[0].peer = 5;
        assert!(check(&bad, Counting::C)
            .unwrap_err()
            .contains("the job has 2 ranks"));
        // A box of one field must land in the same field.
        let mut one = good;
        one[0].sends[0].field = Some(0);
        let told = check(&one, Counting::Fortran).unwrap_err();
        assert!(
            told.contains(
                "a box of field 1 with tag 7 to rank 1, which receives it into every field"
            ),
            "{told}"
        );
        one[1].recvs[0].field = Some(0);
        assert_eq!(check(&one, Counting::C), Ok(()));
        let (mine, theirs) = (Record::of(&one[0], 0, 2, 0), Record::of(&one[1], 1, 2, 0));
        assert!(records_agree(&[mine, theirs]));
        one[1].recvs[0].field = None;
        let theirs = Record::of(&one[1], 1, 2, 0);
        assert!(
            !records_agree(&[mine, theirs]),
            "the records tell the fields apart"
        );
    }

    /// Whether the records agree exactly when the whole cards do.
    fn records_match_cards(cards: &[Card]) {
        let records: Vec<Record> = cards
            .iter()
            .enumerate()
            .map(|(r, c)| Record::decode(&Record::of(c, r, cards.len(), 0).encode()).unwrap())
            .collect();
        assert_eq!(
            records_agree(&records),
            check(cards, Counting::C).is_ok(),
            "{cards:?}: {:?}",
            check(cards, Counting::C)
        );
    }

    #[test]
    fn records_agree_exactly_when_the_whole_cards_do() {
        // A ring of 5 ranks, each sending two boxes to the next and
        // receiving them from the previous.
        let ring = || -> Vec<Card> {
            (0..5)
                .map(|r| {
                    let (next, prev) = ((r + 1) % 5, (r + 4) % 5);
                    card(
                        &[(next, 1, [1, 8]), (next, 2, [8, 2])],
                        &[(prev, 1, [1, 8]), (prev, 2, [8, 2])],
                    )
                })
                .collect()
        };
        records_match_cards(&ring());
        let mut faults: Vec<Vec<Card>> = Vec::new();
        // Shapes swapped between two boxes: the counts and tags still
        // match, the shapes do not.
        let mut c = ring();
        c[2].recvs[0].size = vec![8, 2];
        c[2].recvs[1].size = vec![1, 8];
        faults.push(c);
        // A send to the wrong rank, its receive left waiting.
        let mut c = ring();
        c[0].sends[1].peer = 2;
        faults.push(c);
        // Two ranks' receives from each other's senders swapped.
        let mut c = ring();
        c[3].recvs[0].peer = 1;
        faults.push(c);
        let mut c = ring();
        c[4].recvs.pop();
        faults.push(c);
        let mut c = ring();
        c[1].fields[0].ty = ElemType::F32;
        faults.push(c);
        let mut c = ring();
        c[1].fields[0].owned_size = vec![8, 8, 3];
        faults.push(c);
        let mut c = ring();
        c[1].ndims = 3;
        faults.push(c);
        let mut c = ring();
        c[0].sends[0].peer = 9;
        faults.push(c);
        for cards in &faults {
            assert!(check(cards, Counting::C).is_err(), "{cards:?}");
            records_match_cards(cards);
        }
        // Extents beyond the boxes' axes: alike between the ranks that
        // exchange, or a fault.
        let mut c = ring();
        for card in &mut c {
            card.fields[0].owned_size = vec![8, 8, 4];
            card.fields[0].halo_lo.push(0);
            card.fields[0].halo_hi.push(0);
            card.fields[0].order = vec![2, 1, 0];
        }
        records_match_cards(&c);
        assert!(check(&c, Counting::C).is_ok());
        c[3].fields[0].owned_size[2] = 5;
        assert!(check(&c, Counting::C).is_err());
        records_match_cards(&c);
    }
}
