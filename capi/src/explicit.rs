//! An exchange described by its messages, for codes with their own
//! decomposition: each rank lists the boxes it sends to and receives from
//! which ranks, with a tag; a send to rank `q` with tag `t` fills `q`'s
//! receive from this rank with tag `t`. Checked across the whole job at
//! commit, so every rank reaches the same verdict.

use serde::{Deserialize, Serialize};

use crate::field::FieldCard;

/// One box sent to, or received from, a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoxMessage {
    /// The peer's rank.
    pub peer: usize,
    /// The tag pairing it with the peer's receive (or send).
    pub tag: u32,
    /// First index per axis, in the fields' index space (0-based).
    pub lo: Vec<usize>,
    /// Cells per axis.
    pub size: Vec<usize>,
}

/// What one side of a message tells the other ranks: peer, tag, shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Side {
    /// The peer.
    pub peer: usize,
    /// The tag.
    pub tag: u32,
    /// Cells per axis.
    pub size: Vec<usize>,
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

impl BoxMessage {
    /// What the other ranks see of it.
    pub fn side(&self) -> Side {
        Side {
            peer: self.peer,
            tag: self.tag,
            size: self.size.clone(),
        }
    }
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

/// Checks every rank's messages against its peers': each send met by a
/// receive of the same shape, each receive by a send, fields alike.
pub fn check(cards: &[Card]) -> Result<(), String> {
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
    use crate::field::ElemType;

    fn card(sends: &[(usize, u32, [usize; 2])], recvs: &[(usize, u32, [usize; 2])]) -> Card {
        let side = |&(peer, tag, size): &(usize, u32, [usize; 2])| Side {
            peer,
            tag,
            size: size.to_vec(),
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
        assert_eq!(check(&good), Ok(()));
        let mut bad = good.clone();
        bad[1].recvs[0].size = vec![8, 1];
        assert!(check(&bad).unwrap_err().contains("which receives [8, 1]"));
        let mut bad = good.clone();
        bad[1].recvs.clear();
        assert!(check(&bad).unwrap_err().contains("receives none"));
        let mut bad = good.clone();
        bad[0].recvs[0].tag = 3;
        assert!(check(&bad).unwrap_err().contains("sends none"));
        let mut bad = good.clone();
        let again = bad[0].sends[0].clone();
        bad[0].sends.push(again);
        assert!(check(&bad).unwrap_err().contains("twice"));
        let mut bad = good;
        bad[0].sends[0].peer = 5;
        assert!(check(&bad).unwrap_err().contains("the job has 2 ranks"));
    }
}
