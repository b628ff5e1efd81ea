//! A channel between thread ranks of one process, through a hub in memory:
//! the plainest thing that keeps the [`Channel`] contract, and the first
//! the conformance suite (`conformance.rs`) runs against before shared
//! memory, TCP and RDMA. Each start posts a copy of every send (its
//! iteration, its shape and the bytes carried) to the hub; a receive takes
//! the next letter of its (sender, receiver, tag) and checks it as the
//! real channels check theirs.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use super::{names, Built, Channel, Locality, Member, Placed};
use crate::error::{HaloError, Result};

/// Where the letters of one job wait for their receivers.
#[derive(Debug, Default)]
pub(crate) struct Hub {
    letters: Mutex<HashMap<Address, VecDeque<Letter>>>,
}

/// Who a letter goes from and to, and its tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Address {
    from: usize,
    to: usize,
    tag: u32,
}

/// One message of one iteration.
#[derive(Debug)]
struct Letter {
    iteration: u64,
    shape: u8,
    bytes: Vec<u8>,
}

/// One side of a message: its peer and tag, its buffer, the bytes it
/// carries and, for a receive, whether this iteration's letter came.
#[derive(Debug)]
struct Slot {
    peer: usize,
    tag: u32,
    buf: Vec<u8>,
    carried: usize,
    arrived: bool,
}

/// Thread ranks' messages through a [`Hub`].
#[derive(Debug)]
pub(crate) struct MemoryChannel {
    hub: Arc<Hub>,
    rank: usize,
    sends: Vec<Slot>,
    recvs: Vec<Slot>,
    iteration: u64,
    shape: u8,
    names: String,
}

impl MemoryChannel {
    /// Rank `rank`'s channel with `members` through `hub`; nothing to wait
    /// for (the hub is there before any rank starts).
    pub(crate) fn set_up(hub: &Arc<Hub>, rank: usize, members: &[Member<'_>]) -> Built {
        let (mut sends, mut recvs) = (Vec::new(), Vec::new());
        let slot = |peer, m: super::Message| Slot {
            peer,
            tag: m.tag,
            buf: vec![0; m.len],
            carried: m.len,
            arrived: false,
        };
        let placed = members
            .iter()
            .map(|m| {
                let mut at = Placed::default();
                if let Some(s) = m.send {
                    at.send = Some(sends.len());
                    sends.push(slot(m.peer, s));
                }
                if let Some(r) = m.recv {
                    at.recv = Some(recvs.len());
                    recvs.push(slot(m.peer, r));
                }
                at
            })
            .collect();
        let channel = MemoryChannel {
            hub: hub.clone(),
            rank,
            sends,
            recvs,
            iteration: 0,
            shape: 0,
            names: names(members),
        };
        Built {
            channel: Box::new(channel),
            placed,
            summary: None,
        }
    }

    fn error(&self, peer: usize, why: String) -> HaloError {
        HaloError::Usage {
            op: "memory channel",
            why: format!("{}: rank {peer}: {why}", self.names),
        }
    }

    /// Takes receive `r`'s letter if it came, checked.
    fn take(&mut self, r: usize) -> Result<()> {
        let slot = &self.recvs[r];
        let at = Address {
            from: slot.peer,
            to: self.rank,
            tag: slot.tag,
        };
        let letter = {
            let mut letters = self.hub.letters.lock().unwrap_or_else(|p| p.into_inner());
            letters.get_mut(&at).and_then(VecDeque::pop_front)
        };
        let Some(letter) = letter else { return Ok(()) };
        let (peer, tag, expected) = (slot.peer, slot.tag, slot.carried);
        if letter.iteration != self.iteration {
            return Err(self.error(
                peer,
                format!(
                    "a message of iteration {} while this rank is at {}",
                    letter.iteration, self.iteration
                ),
            ));
        }
        if letter.shape != self.shape {
            return Err(self.error(peer, format!("a message of shape {} (tag {tag}), this rank's start has shape {}: the ranks started different parts of the exchange", letter.shape, self.shape)));
        }
        if letter.bytes.len() != expected {
            return Err(self.error(
                peer,
                format!(
                    "{} bytes for tag {tag}, this rank expects {expected}",
                    letter.bytes.len()
                ),
            ));
        }
        let slot = &mut self.recvs[r];
        slot.buf[..expected].copy_from_slice(&letter.bytes);
        slot.arrived = true;
        Ok(())
    }
}

/// Message `msg` of `slots`, or an error naming what there is.
fn slot_of<'s>(slots: &'s mut [Slot], msg: usize, side: &str) -> Result<&'s mut Slot> {
    let count = slots.len();
    slots.get_mut(msg).ok_or_else(|| HaloError::Usage {
        op: "memory channel",
        why: format!("{side} {msg} of {count}"),
    })
}

impl Channel for MemoryChannel {
    fn locality(&self) -> Locality {
        // Never inside a `LinkExchange`, which is all a locality is for.
        Locality::SelfCopy
    }

    fn send_buf(&mut self, msg: usize) -> Result<&mut [u8]> {
        Ok(&mut slot_of(&mut self.sends, msg, "send")?.buf)
    }

    fn recv_buf(&self, msg: usize) -> Result<&[u8]> {
        let count = self.recvs.len();
        self.recvs
            .get(msg)
            .map(|s| &s.buf[..])
            .ok_or_else(|| HaloError::Usage {
                op: "memory channel",
                why: format!("receive {msg} of {count}"),
            })
    }

    fn carry_send(&mut self, msg: usize, bytes: usize) -> Result<()> {
        slot_of(&mut self.sends, msg, "send")?.carried = bytes;
        Ok(())
    }

    fn carry_recv(&mut self, msg: usize, bytes: usize) -> Result<()> {
        slot_of(&mut self.recvs, msg, "receive")?.carried = bytes;
        Ok(())
    }

    fn set_shape(&mut self, shape: u8) -> Result<()> {
        self.shape = shape;
        Ok(())
    }

    fn start(&mut self) -> Result<()> {
        self.iteration += 1;
        let mut letters = self.hub.letters.lock().unwrap_or_else(|p| p.into_inner());
        for s in &self.sends {
            let at = Address {
                from: self.rank,
                to: s.peer,
                tag: s.tag,
            };
            letters.entry(at).or_default().push_back(Letter {
                iteration: self.iteration,
                shape: self.shape,
                bytes: s.buf[..s.carried].to_vec(),
            });
        }
        for r in &mut self.recvs {
            r.arrived = false;
        }
        Ok(())
    }

    fn test(&mut self) -> Result<bool> {
        for r in 0..self.recvs.len() {
            if !self.recvs[r].arrived {
                self.take(r)?;
            }
        }
        Ok(self.recvs.iter().all(|r| r.arrived))
    }

    fn outstanding(&self) -> String {
        let missing: Vec<String> = self
            .recvs
            .iter()
            .filter(|r| !r.arrived)
            .map(|r| format!("receive tag {} from rank {}", r.tag, r.peer))
            .collect();
        format!("memory with {}: {}", self.names, missing.join("; "))
    }
}
