//! An exchange handle: described (a Cartesian grid and fields), committed
//! (collectively: checked across the job, channels built), then started
//! and waited for every iteration.

use std::time::{Duration, Instant};

use sode::{HaloError, Link, LinkExchange, Message, Region};
use sode_job::World;

use crate::cart::{self, Card, Cart};
use crate::error::{CapiError, Result};
use crate::field::FieldSpec;
use crate::sys::UserMemory;
use crate::SODE_OK;

/// A field added to an exchange: its description and its memory.
#[derive(Debug)]
pub struct Field {
    /// The description.
    pub spec: FieldSpec,
    /// The user's array.
    pub memory: UserMemory,
}

/// One neighbour's link: each field's region sent to it and received from
/// it (computed once, at commit).
#[derive(Debug)]
struct Planned {
    send: Vec<Region>,
    recv: Vec<Region>,
    sends: bool,
    recvs: bool,
}

#[derive(Debug)]
enum State {
    Described,
    Committed {
        links: Box<LinkExchange>,
        planned: Vec<Planned>,
    },
    /// Commit failed: the handle can only be freed.
    Broken(String),
}

/// An exchange, from description to free.
#[derive(Debug)]
pub struct Exchange {
    world: World,
    timeout: Duration,
    cart: Cart,
    fields: Vec<Field>,
    state: State,
}

/// The status and message a rank reports to the others after commit.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Verdict {
    status: i32,
    message: String,
}

impl Exchange {
    /// A Cartesian exchange over `world`; checked for this rank now, across
    /// the job at commit.
    pub fn cartesian(world: World, timeout: Duration, cart: Cart) -> Result<Exchange> {
        cart.check().map_err(|why| CapiError::Invalid {
            op: "sode_exchange_create_cart",
            why,
        })?;
        Ok(Exchange {
            world,
            timeout,
            cart,
            fields: Vec::new(),
            state: State::Described,
        })
    }

    /// Process-grid axes.
    pub fn dims(&self) -> usize {
        self.cart.dims.len()
    }

    /// The exchange's halo widths (below, above), per axis.
    pub fn halo_widths(&self) -> (&[usize], &[usize]) {
        (&self.cart.halo_lo, &self.cart.halo_hi)
    }

    /// Adds a field; its description is checked against the exchange.
    pub fn add_field(
        &mut self,
        spec: FieldSpec,
        memory: impl FnOnce(usize) -> UserMemory,
    ) -> Result<()> {
        let op = "sode_exchange_add_field";
        if !matches!(self.state, State::Described) {
            return Err(CapiError::State {
                op,
                why: "the exchange is committed: add every field before sode_exchange_commit"
                    .into(),
            });
        }
        let span = spec
            .check(self.dims(), &self.cart.halo_lo, &self.cart.halo_hi)
            .map_err(|why| CapiError::Invalid {
                op,
                why: format!("field {}: {why}", self.fields.len()),
            })?;
        self.fields.push(Field {
            memory: memory(span),
            spec,
        });
        Ok(())
    }

    /// Checks the description across the job and builds the channels;
    /// collective. Every rank returns the same status.
    pub fn commit(&mut self) -> Result<()> {
        let op = "sode_exchange_commit";
        match &self.state {
            State::Described => {}
            State::Committed { .. } => {
                return Err(CapiError::State {
                    op,
                    why: "the exchange is already committed".into(),
                })
            }
            State::Broken(why) => {
                return Err(CapiError::State {
                    op,
                    why: format!(
                        "an earlier commit failed ({why}): free the exchange and create a new one"
                    ),
                })
            }
        }
        let built = self.build();
        let verdict = match &built {
            Ok(_) => Verdict {
                status: SODE_OK,
                message: String::new(),
            },
            Err(e) => Verdict {
                status: e.status(),
                message: sode_job::diag::chain(e),
            },
        };
        let agreed = self.agree(&verdict);
        match (built, agreed) {
            (Ok((links, planned)), Ok(())) => {
                self.state = State::Committed {
                    links: Box::new(links),
                    planned,
                };
                Ok(())
            }
            (Err(e), _) | (Ok(_), Err(e)) => {
                self.state = State::Broken(e.to_string());
                Err(e)
            }
        }
    }

    /// Every rank's verdict: an error naming the lowest failing rank when
    /// any failed (this rank's own error when it failed itself).
    fn agree(&self, mine: &Verdict) -> Result<()> {
        let op = "sode_exchange_commit";
        let body = serde_json::to_vec(mine).map_err(|e| CapiError::Internal {
            op,
            why: e.to_string(),
        })?;
        let all = self
            .world
            .allgather(&body, self.timeout)
            .map_err(|source| CapiError::Bootstrap { op, source })?;
        for (rank, b) in all.iter().enumerate() {
            let v: Verdict = serde_json::from_slice(b).map_err(|e| CapiError::Internal {
                op,
                why: format!("rank {rank}'s verdict: {e}"),
            })?;
            if v.status != SODE_OK {
                return Err(CapiError::OnRank {
                    rank,
                    status: v.status,
                    message: v.message,
                });
            }
        }
        Ok(())
    }

    fn build(&self) -> Result<(LinkExchange, Vec<Planned>)> {
        let op = "sode_exchange_commit";
        let mine = Card {
            cart: self.cart.clone(),
            fields: self.fields.iter().map(|f| f.spec.card()).collect(),
        };
        let body = serde_json::to_vec(&mine).map_err(|e| CapiError::Internal {
            op,
            why: e.to_string(),
        })?;
        let cards: Vec<Card> = self
            .world
            .allgather(&body, self.timeout)
            .map_err(|source| CapiError::Bootstrap { op, source })?
            .iter()
            .enumerate()
            .map(|(r, b)| {
                serde_json::from_slice(b).map_err(|e| CapiError::Mismatch {
                    why: format!(
                        "rank {r} sent an unreadable description ({e}): is it the same sode?"
                    ),
                })
            })
            .collect::<Result<_>>()?;
        let neighbours = cart::neighbours_of(self.world.rank(), &cards)
            .map_err(|why| CapiError::Mismatch { why })?;
        let specs: Vec<FieldSpec> = self.fields.iter().map(|f| f.spec.clone()).collect();
        let mut links = Vec::new();
        let mut planned = Vec::new();
        for n in neighbours {
            let back: Vec<i32> = n.offset.iter().map(|o| -o).collect();
            let message = |len: usize, tag: u32| (len > 0).then_some(Message { len, tag });
            let send = message(
                cart::message_len(&specs, &n.offset, true),
                cart::tag(&n.offset),
            );
            let recv = message(
                cart::message_len(&specs, &n.offset, false),
                cart::tag(&back),
            );
            if send.is_none() && recv.is_none() {
                continue;
            }
            planned.push(Planned {
                send: specs.iter().map(|f| f.send_region(&n.offset)).collect(),
                recv: specs.iter().map(|f| f.recv_region(&n.offset)).collect(),
                sends: send.is_some(),
                recvs: recv.is_some(),
            });
            links.push(Link {
                peer: n.rank,
                send,
                recv,
                name: format!("rank {} ({})", n.rank, cart::direction(&n.offset)),
                offset: n.offset,
            });
        }
        let links = LinkExchange::builder(&self.world, links)
            .setup_timeout(self.timeout)
            .build()
            .map_err(|source| CapiError::Exchange { op, source })?;
        Ok((links, planned))
    }

    fn committed(
        &mut self,
        op: &'static str,
    ) -> Result<(&mut LinkExchange, &[Planned], &mut [Field])> {
        match &mut self.state {
            State::Committed { links, planned } => Ok((links, planned, &mut self.fields)),
            State::Described => Err(CapiError::State {
                op,
                why: "the exchange is not committed: call sode_exchange_commit first".into(),
            }),
            State::Broken(why) => Err(CapiError::State {
                op,
                why: format!("its commit failed ({why}): free it"),
            }),
        }
    }

    /// Packs every field's faces and starts the exchange.
    pub fn start(&mut self) -> Result<()> {
        let op = "sode_exchange_start";
        let (links, planned, fields) = self.committed(op)?;
        let exchange = |source| CapiError::Exchange { op, source };
        if links.in_flight() {
            return Err(CapiError::State {
                op,
                why: "the previous exchange is still in flight: call sode_exchange_wait first"
                    .into(),
            });
        }
        for (i, p) in planned.iter().enumerate().filter(|(_, p)| p.sends) {
            let out = links.send_buf(i).map_err(exchange)?;
            let mut at = 0;
            for (f, r) in fields.iter().zip(&p.send) {
                let n = r.cells() * f.spec.ty.size();
                f.spec.pack(f.memory.bytes(), r, &mut out[at..at + n]);
                at += n;
            }
        }
        links.start().map_err(exchange)
    }

    /// Unpacks every halo once the exchange is complete.
    fn unpack(
        links: &LinkExchange,
        planned: &[Planned],
        fields: &mut [Field],
        op: &'static str,
    ) -> Result<()> {
        for (i, p) in planned.iter().enumerate().filter(|(_, p)| p.recvs) {
            let data = links
                .recv_buf(i)
                .map_err(|source| CapiError::Exchange { op, source })?;
            let mut at = 0;
            for (f, r) in fields.iter_mut().zip(&p.recv) {
                let n = r.cells() * f.spec.ty.size();
                f.spec.unpack(&data[at..at + n], r, f.memory.bytes_mut());
                at += n;
            }
        }
        Ok(())
    }

    /// Waits up to `timeout` for every halo, then unpacks them.
    pub fn wait(&mut self, timeout: Duration) -> Result<()> {
        let op = "sode_exchange_wait";
        let (links, planned, fields) = self.committed(op)?;
        links
            .wait(Instant::now() + timeout)
            .map_err(|source| CapiError::Exchange { op, source })?;
        Self::unpack(links, planned, fields, op)
    }

    /// One pass: true (and the halos unpacked) once complete.
    pub fn test(&mut self) -> Result<bool> {
        let op = "sode_exchange_test";
        let (links, planned, fields) = self.committed(op)?;
        let exchange = |source: HaloError| CapiError::Exchange { op, source };
        if !links.test().map_err(exchange)? {
            return Ok(false);
        }
        links.wait(Instant::now()).map_err(exchange)?;
        Self::unpack(links, planned, fields, op)?;
        Ok(true)
    }

    /// Whether the handle may be freed: not while an exchange is in flight
    /// (peers or the device may still write into its buffers).
    pub fn check_free(&self) -> Result<()> {
        if let State::Committed { links, .. } = &self.state {
            if links.in_flight() {
                return Err(CapiError::State {
                    op: "sode_exchange_free",
                    why: "an exchange is in flight: call sode_exchange_wait first (the handle is not freed)".into(),
                });
            }
        }
        Ok(())
    }
}
