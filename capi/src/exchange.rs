//! An exchange handle: described (a Cartesian grid and fields), committed
//! (collectively: checked across the job, channels built), then started
//! and waited for every iteration.

use std::ffi::c_int;
use std::time::{Duration, Instant};

use sode::{HaloError, LinkExchange, LinkExchangeBuilder, Locality, StartMemory, Transport};
use sode_job::{JobError, World};

use sode::field::{ElemType, FieldLayout, MemoryKind, Overlap, Piece};
use sode::pattern::{self, box_fits, BoxMessage, FieldArrays, Grouping, LinkPieces, PlannedLinks};
use sode::zero_copy::{self, ZeroCopy};

use crate::cart::{self, Cart, TileGrid};
use crate::error::{CapiError, Result};
use crate::explicit;
use crate::sys::memory::UserMemory;

/// A field added to an exchange: its description and its memory.
#[derive(Debug)]
pub struct Field {
    /// The description.
    pub spec: FieldLayout,
    /// The user's array (`None`: sode keeps it, in the shared sets).
    pub memory: Option<UserMemory>,
    /// The array given for the exchange in flight in its place
    /// (`sode_exchange_start_arrays`), until the wait that completes it.
    pub call: Option<UserMemory>,
    /// Whether the exchange in flight (or the next) carries it: every
    /// field but for a start on some of them.
    pub started: bool,
    /// Bytes the array spans.
    pub bytes: usize,
    /// Whether some face of it travels in place over RDMA (known at
    /// commit): a start on an array neither its own nor lent is then
    /// staged.
    pub in_place: bool,
    /// Arrays lent for it beyond its own, one per lent set
    /// (`sode_exchange_lend_arrays`): starts on them travel in place too.
    pub lent: Vec<UserMemory>,
}

impl Field {
    /// The array the exchange in flight packs from and unpacks into.
    fn array(&self) -> Option<&UserMemory> {
        self.call.as_ref().or(self.memory.as_ref())
    }
}

/// An element type as the Fortran module names it.
fn fortran_type(ty: ElemType) -> String {
    match ty {
        ElemType::F32 => "real32".into(),
        ElemType::F64 => "real64".into(),
        ElemType::I32 => "int32".into(),
        ElemType::I64 => "int64".into(),
        ElemType::C32 => "complex(real32)".into(),
        ElemType::C64 => "complex(real64)".into(),
        ElemType::Bytes(n) => format!("elements of {n} bytes"),
    }
}

/// What a Fortran program gave for a field, as its messages name it.
#[derive(Debug, Clone, Copy)]
enum Given {
    /// A pointer for sode to point at a field it keeps.
    Pointer,
    /// An array of its own to exchange instead of the field's.
    Array,
}

/// The fields as the pattern packs them: each started field from the
/// array given for this start, or its own.
struct Arrays<'a>(&'a mut [Field]);

impl FieldArrays for Arrays<'_> {
    fn layout(&self, field: usize) -> &FieldLayout {
        &self.0[field].spec
    }

    fn started(&self, field: usize) -> bool {
        self.0[field].started
    }

    fn bytes(&self, field: usize) -> Option<&[u8]> {
        Some(self.0[field].array()?.bytes())
    }

    fn bytes_mut(&mut self, field: usize) -> Option<(&FieldLayout, &mut [u8])> {
        let Field {
            spec, memory, call, ..
        } = &mut self.0[field];
        Some((spec, call.as_mut().or(memory.as_mut())?.bytes_mut()))
    }
}

/// Where the fields sode keeps lie: `sets` sets of `set_len` bytes, field
/// `f` at `bases[f]` in each.
#[derive(Debug, Clone)]
struct SharedLayout {
    sets: usize,
    set_len: usize,
    bases: Vec<usize>,
}

#[derive(Debug)]
enum State {
    Described,
    Committed {
        links: Box<LinkExchange>,
        planned: Vec<LinkPieces>,
        shared: Option<SharedLayout>,
        /// The messages at each depth a start has used, made at its first.
        by_depth: Vec<(usize, Vec<LinkPieces>)>,
    },
    /// Commit failed: the handle can only be freed.
    Broken(String),
}

/// How the exchange's messages are described.
#[derive(Debug)]
enum Layout {
    /// A Cartesian process grid and halo widths.
    Cartesian(Cart),
    /// A grid of domains, several a rank: boxes derived from it at commit.
    Tiles(TileGrid),
    /// Boxes sent to and received from named ranks.
    Explicit {
        ndims: usize,
        sends: Vec<BoxMessage>,
        recvs: Vec<BoxMessage>,
        /// The index of each axis's first cell when boxes are given in the
        /// arrays' own bounds (the Fortran module); `None`: from 0.
        origin: Option<Vec<i64>>,
    },
}

/// An exchange, from description to free.
#[derive(Debug)]
pub struct Exchange {
    world: World,
    timeout: Duration,
    layout: Layout,
    fields: Vec<Field>,
    transport: Transport,
    /// Which faces travel in place (`None`: as `SODE_ZERO_COPY` says).
    zero_copy: Option<ZeroCopy>,
    /// Sets of fields sode keeps (0: the caller's arrays).
    shared: usize,
    /// How its caller counts fields and axes (Fortran from 1), for the
    /// commit's messages.
    counting: cart::Counting,
    /// Whether every message carries every field (else only those of the
    /// last start on some fields or at another depth): a start on all of
    /// them at every layer then sets no lengths.
    carrying_all: bool,
    /// Layers of each halo the next starts move (0: every layer).
    depth: usize,
    state: State,
}

/// The error of `op` on an exchange in `state`, which is not committed.
fn not_committed(op: &'static str, state: &State) -> CapiError {
    CapiError::State {
        op,
        why: match state {
            State::Broken(why) => format!("its commit failed ({why}): free it"),
            _ => "the exchange is not committed: call sode_exchange_commit first".into(),
        },
    }
}

/// Fields a start carries, as the caller numbers them: `ids`, counted from
/// `first` (0 in C, 1 in Fortran) in the order the fields were added.
#[derive(Debug, Clone, Copy)]
pub struct FieldList<'a> {
    /// The fields, each once.
    pub ids: &'a [c_int],
    /// The number of the first field added.
    pub first: c_int,
}

impl FieldList<'_> {
    /// The fields' indices from 0 (after [`select`] checked them).
    fn indices(&self) -> impl Iterator<Item = usize> + '_ {
        let first = i64::from(self.first);
        self.ids
            .iter()
            .map(move |&id| usize::try_from(i64::from(id) - first).unwrap_or(usize::MAX))
    }
}

/// What a start reads and lands in where faces travel in place over RDMA
/// ([`zero_copy::start_memory`]): each such field's array is in set 0
/// when it is the array added (its `call` is none), else in the set it
/// was lent in, if any.
fn start_memory(fields: &[Field], partial: bool) -> StartMemory {
    let set_of = |f: &Field| match &f.call {
        None => Some(0),
        Some(a) => f.lent.iter().position(|l| l.is(a)).map(|k| k + 1),
    };
    let carried = fields.iter().filter(|f| f.in_place);
    zero_copy::start_memory(carried.map(set_of), partial)
}

/// Marks the fields `subset` lists (`None`: every field) as started, the
/// others not; refuses a field listed twice or one the exchange lacks.
fn select(fields: &mut [Field], subset: Option<&FieldList<'_>>, op: &'static str) -> Result<()> {
    let Some(list) = subset else {
        fields.iter_mut().for_each(|f| f.started = true);
        return Ok(());
    };
    fields.iter_mut().for_each(|f| f.started = false);
    let count = fields.len();
    for (&id, f) in list.ids.iter().zip(list.indices()) {
        let Some(field) = fields.get_mut(f) else {
            let last = i64::from(list.first) + count as i64 - 1;
            return Err(CapiError::Invalid {
                op,
                why: match count {
                    0 => format!("field {id}: the exchange has no fields"),
                    _ => format!(
                        "field {id}: the exchange's {count} fields are numbered {}..{last} in the order added",
                        list.first
                    ),
                },
            });
        };
        if std::mem::replace(&mut field.started, true) {
            return Err(CapiError::Invalid {
                op,
                why: format!("field {id} is listed twice: list each field once"),
            });
        }
    }
    Ok(())
}

/// The give-up of another rank that `e` stems from, if any: that rank's
/// commit failed, and this one learnt it in a collective step.
fn gave_up_in(e: &(dyn std::error::Error + 'static)) -> Option<(usize, i32, String)> {
    match JobError::gave_up_in(e)? {
        JobError::GaveUp {
            rank,
            code,
            message,
        } => Some((*rank, *code, message.clone())),
        _ => None,
    }
}

/// The transport `SODE_TRANSPORT` names (`auto`, `shm`, `rdma`, `tcp`;
/// unset or empty: auto), the default of every exchange.
fn transport_from_env(op: &'static str) -> Result<Transport> {
    match std::env::var("SODE_TRANSPORT") {
        Err(_) => Ok(Transport::Auto),
        Ok(v) if v.trim().is_empty() => Ok(Transport::Auto),
        Ok(v) => v.trim().parse().map_err(|why: String| CapiError::Invalid {
            op,
            why: format!("SODE_TRANSPORT: {why}"),
        }),
    }
}

impl Exchange {
    /// An exchange described so far by `layout` alone.
    fn described(
        world: World,
        timeout: Duration,
        layout: Layout,
        transport: Transport,
    ) -> Exchange {
        Exchange {
            world,
            timeout,
            layout,
            fields: Vec::new(),
            transport,
            zero_copy: None,
            shared: 0,
            counting: cart::Counting::C,
            carrying_all: true,
            depth: 0,
            state: State::Described,
        }
    }

    /// A Cartesian exchange over `world`; checked for this rank now, across
    /// the job at commit.
    pub fn cartesian(world: World, timeout: Duration, cart: Cart) -> Result<Exchange> {
        cart.check().map_err(|why| CapiError::Invalid {
            op: "sode_exchange_create_cart",
            why,
        })?;
        let transport = transport_from_env("sode_exchange_create_cart")?;
        Ok(Exchange::described(
            world,
            timeout,
            Layout::Cartesian(cart),
            transport,
        ))
    }

    /// An exchange of a grid of domains, several a rank, over `world`;
    /// checked for this rank now, across the job at commit.
    pub fn tiles(world: World, timeout: Duration, tiles: TileGrid) -> Result<Exchange> {
        let op = "sode_exchange_create_tiles";
        tiles
            .check(world.rank(), world.size())
            .map_err(|why| CapiError::Invalid { op, why })?;
        let transport = transport_from_env(op)?;
        Ok(Exchange::described(
            world,
            timeout,
            Layout::Tiles(tiles),
            transport,
        ))
    }

    /// An exchange of boxes between named ranks, over `world`, in the first
    /// `ndims` axes of its fields: add them with
    /// [`add_box`](Self::add_box).
    pub fn explicit(world: World, timeout: Duration, ndims: usize) -> Result<Exchange> {
        if !(1..=sode::field::MAX_AXES).contains(&ndims) {
            return Err(CapiError::Invalid {
                op: "sode_exchange_create",
                why: format!("ndims is {ndims}: boxes have 1 to 8 axes"),
            });
        }
        let transport = transport_from_env("sode_exchange_create")?;
        Ok(Exchange::described(
            world,
            timeout,
            Layout::Explicit {
                ndims,
                sends: Vec::new(),
                recvs: Vec::new(),
                origin: None,
            },
            transport,
        ))
    }

    /// Axes of the process grid (or of the boxes).
    pub fn dims(&self) -> usize {
        match &self.layout {
            Layout::Cartesian(c) => c.dims.len(),
            Layout::Tiles(t) => t.dims.len(),
            Layout::Explicit { ndims, .. } => *ndims,
        }
    }

    /// The exchange's halo widths (below, above), per axis; none for boxes.
    pub fn halo_widths(&self) -> (Vec<usize>, Vec<usize>) {
        match &self.layout {
            Layout::Cartesian(c) => (c.halo_lo.clone(), c.halo_hi.clone()),
            Layout::Tiles(t) => (t.halo_lo.clone(), t.halo_hi.clone()),
            Layout::Explicit { ndims, .. } => (vec![0; *ndims], vec![0; *ndims]),
        }
    }

    /// Refuses `op` once the exchange is committed: `what` ("add every
    /// field") must come before `sode_exchange_commit`.
    fn before_commit(&self, op: &'static str, what: &str) -> Result<()> {
        if matches!(self.state, State::Described) {
            return Ok(());
        }
        Err(CapiError::State {
            op,
            why: format!("the exchange is committed: {what} before sode_exchange_commit"),
        })
    }

    /// Which channels carry the messages (default: `SODE_TRANSPORT`, else
    /// [`Transport::Auto`]: shared memory inside a node, RDMA or TCP
    /// between); set before commit, the same on every rank.
    pub fn set_transport(&mut self, t: Transport) -> Result<()> {
        self.before_commit("sode_exchange_set_transport", "choose the transport")?;
        self.transport = t;
        Ok(())
    }

    /// Which faces travel in place over RDMA (default: as `SODE_ZERO_COPY`
    /// says, else [`ZeroCopy::Auto`]); before
    /// commit. Ranks may differ.
    pub fn set_zero_copy(&mut self, mode: ZeroCopy) -> Result<()> {
        self.before_commit("sode_exchange_set_zero_copy", "choose the zero-copy mode")?;
        self.zero_copy = Some(mode);
        Ok(())
    }

    /// Keeps the fields in memory sode allocates, `sets` sets of them;
    /// before any field is added (each then with no base) and before
    /// commit, the same on every rank.
    pub fn set_shared_fields(&mut self, sets: usize) -> Result<()> {
        let op = "sode_exchange_set_shared_fields";
        self.before_commit(op, "choose shared fields")?;
        if !self.fields.is_empty() {
            return Err(CapiError::State {
                op,
                why: "fields were added already: choose shared fields before adding any".into(),
            });
        }
        self.shared = sets;
        Ok(())
    }

    /// Adds a box this rank sends (`send`) to, or receives from, `m.peer`.
    pub fn add_box(&mut self, m: BoxMessage, send: bool) -> Result<()> {
        let op = match (send, m.field.is_some()) {
            (true, false) => "sode_exchange_add_send",
            (false, false) => "sode_exchange_add_recv",
            (true, true) => "sode_exchange_add_send_field",
            (false, true) => "sode_exchange_add_recv_field",
        };
        self.before_commit(op, "add every box")?;
        let Layout::Explicit {
            ndims,
            sends,
            recvs,
            origin,
        } = &mut self.layout
        else {
            return Err(CapiError::State {
                op,
                why: "a Cartesian or tiled exchange derives its messages from the grid: make an explicit one with sode_exchange_create".into(),
            });
        };
        if m.lo.len() != *ndims || m.size.len() != *ndims || m.size.contains(&0) {
            return Err(CapiError::Invalid {
                op,
                why: format!(
                    "a box needs {ndims} axes of at least 1 cell, got size {:?}",
                    m.size
                ),
            });
        }
        if m.peer >= self.world.size() {
            return Err(CapiError::Invalid {
                op,
                why: format!("rank {} in a job of {} ranks", m.peer, self.world.size()),
            });
        }
        if let Some(f) = m.field.filter(|&f| f >= self.fields.len()) {
            return Err(CapiError::Invalid {
                op,
                why: format!(
                    "{}: the exchange has {} fields; add the field before its boxes",
                    self.counting.field(f),
                    self.fields.len()
                ),
            });
        }
        let carried = self
            .fields
            .iter()
            .enumerate()
            .filter(|(f, _)| m.carries(*f));
        for (f, field) in carried {
            box_fits(&m, &field.spec, origin.as_deref()).map_err(|why| CapiError::Invalid {
                op,
                why: format!("{}: {why}", self.counting.field(f)),
            })?;
        }
        if send {
            sends.push(m)
        } else {
            recvs.push(m)
        }
        Ok(())
    }

    /// Boxes are given in the arrays' own bounds from here on, each axis
    /// starting at `origin` (the Fortran module's `sode_exchange_create`),
    /// and messages count fields and dimensions from 1.
    pub fn count_boxes_from(&mut self, first: Vec<i64>) {
        if let Layout::Explicit { origin, .. } = &mut self.layout {
            *origin = Some(first);
        }
        self.counting = cart::Counting::Fortran;
    }

    /// The index of each box axis's first cell, when boxes are given in
    /// the arrays' own bounds.
    pub fn box_origin(&self) -> Option<&[i64]> {
        match &self.layout {
            Layout::Explicit { origin, .. } => origin.as_deref(),
            Layout::Cartesian(_) | Layout::Tiles(_) => None,
        }
    }

    /// The boxes of an explicit exchange (none for a Cartesian one).
    fn boxes(&self) -> impl Iterator<Item = &BoxMessage> {
        let (s, r): (&[BoxMessage], &[BoxMessage]) = match &self.layout {
            Layout::Explicit { sends, recvs, .. } => (sends, recvs),
            Layout::Cartesian(_) | Layout::Tiles(_) => (&[], &[]),
        };
        s.iter().chain(r)
    }

    /// Adds a field; its description is checked against the exchange.
    pub fn add_field(
        &mut self,
        spec: FieldLayout,
        memory: impl FnOnce(usize) -> Option<UserMemory>,
    ) -> Result<()> {
        let op = "sode_exchange_add_field";
        self.before_commit(op, "add every field")?;
        let (max_lo, max_hi) = self.halo_widths();
        let span = spec
            .check(self.dims(), &max_lo, &max_hi)
            .map_err(|why| CapiError::Invalid {
                op,
                why: format!("{}: {why}", self.counting.field(self.fields.len())),
            })?;
        if let Layout::Tiles(t) = &self.layout {
            sode::pattern::check_tile_axis(&spec, t.dims.len(), &t.tiles).map_err(|why| {
                CapiError::Invalid {
                    op,
                    why: format!("{}: {why}", self.counting.field(self.fields.len())),
                }
            })?;
        }
        for m in self.boxes().filter(|m| m.carries(self.fields.len())) {
            box_fits(m, &spec, self.box_origin()).map_err(|why| CapiError::Invalid {
                op,
                why: format!("{}: {why}", self.counting.field(self.fields.len())),
            })?;
        }
        let memory = memory(span);
        match (&memory, self.shared) {
            (None, 0) => return Err(CapiError::Null { op, arg: "base" }),
            (Some(_), sets) if sets > 0 => {
                return Err(CapiError::Invalid {
                    op,
                    why: format!("{}: sode keeps the fields (sode_exchange_set_shared_fields): pass NULL as base and get the array with sode_exchange_shared_field after commit", self.counting.field(self.fields.len())),
                })
            }
            _ => {}
        }
        self.fields.push(Field {
            memory,
            call: None,
            started: true,
            in_place: false,
            bytes: span,
            spec,
            lent: Vec::new(),
        });
        Ok(())
    }

    /// Lends one more set of arrays before commit, `array(f, bytes)`
    /// field `f`'s (of its field's bytes): starts on exactly this set's
    /// arrays keep faces in place over RDMA, as starts on the arrays added
    /// do.
    pub fn lend_arrays(
        &mut self,
        op: &'static str,
        given: usize,
        array: impl Fn(usize, usize) -> Option<UserMemory>,
    ) -> Result<()> {
        self.before_commit(op, "lend every set of arrays")?;
        let n = self.fields.len();
        if given != n || n == 0 {
            return Err(CapiError::Invalid {
                op,
                why: format!("nfields is {given}, but {n} fields were added: lend one array per field, after adding them all"),
            });
        }
        let sets = self.fields[0].lent.len() + 1;
        if sets >= sode::MAX_LENT_SETS {
            return Err(CapiError::Invalid {
                op,
                why: format!("{sets} sets lent already: at most {}", sode::MAX_LENT_SETS),
            });
        }
        let mut set = Vec::with_capacity(n);
        for (f, field) in self.fields.iter().enumerate() {
            let what = self.counting.field(f);
            let Some(own) = &field.memory else {
                return Err(CapiError::Invalid {
                    op,
                    why: format!(
                        "{what}: sode keeps the fields (shared fields): there is nothing to lend"
                    ),
                });
            };
            let Some(a) = array(f, field.bytes) else {
                return Err(CapiError::Null { op, arg: "arrays" });
            };
            if own.is(&a) || field.lent.iter().any(|l| l.is(&a)) {
                return Err(CapiError::Invalid {
                    op,
                    why: format!(
                        "{what}: that array was added or lent already: lend each array once"
                    ),
                });
            }
            set.push(a);
        }
        for (field, a) in self.fields.iter_mut().zip(set) {
            field.lent.push(a);
        }
        Ok(())
    }

    /// Its messages count fields and axes as the Fortran module does
    /// (from 1): set by the module's `sode_add_field`.
    pub fn count_as_fortran(&mut self) {
        self.counting = cart::Counting::Fortran;
    }

    /// How many fields were added.
    pub fn field_count(&self) -> usize {
        self.fields.len()
    }

    /// Field `field`, added already.
    fn added_field(&mut self, op: &'static str, field: usize) -> Result<&mut Field> {
        let (count, counting) = (self.fields.len(), self.counting);
        self.fields
            .get_mut(field)
            .ok_or_else(|| CapiError::Invalid {
                op,
                why: format!(
                    "{}: the exchange has {count} fields (numbered from {} in the order added)",
                    counting.field(field),
                    counting.first()
                ),
            })
    }

    /// Says where field `field`'s arrays live (`SODE_MEMORY_HOST`, the
    /// one kind sode exchanges today). Before commit.
    pub fn set_memory_kind(&mut self, field: usize, kind: c_int) -> Result<()> {
        let op = "sode_exchange_set_memory_kind";
        self.before_commit(op, "say where a field lives")?;
        let memory = match kind {
            crate::SODE_MEMORY_HOST => MemoryKind::Host,
            _ => {
                return Err(CapiError::Invalid {
                    op,
                    why: format!(
                        "memory kind {kind}: SODE_MEMORY_HOST ({}) is the one kind sode exchanges; device memory is not supported yet: exchange a host copy",
                        crate::SODE_MEMORY_HOST
                    ),
                })
            }
        };
        self.added_field(op, field)?.spec.memory = memory;
        Ok(())
    }

    /// Sets how many owned cells at each end of field `field` the
    /// neighbour there owns too (a staggered field's edge nodes): they are
    /// never sent. Before commit, on a Cartesian exchange.
    pub fn set_overlap(&mut self, field: usize, overlap: Overlap) -> Result<()> {
        let op = "sode_exchange_set_overlap";
        self.before_commit(op, "set overlaps")?;
        if let Layout::Explicit { .. } = self.layout {
            return Err(CapiError::Invalid {
                op,
                why: "an explicit exchange names every box it sends: an overlap belongs to a Cartesian or tiled exchange".into(),
            });
        }
        let (max_lo, max_hi) = self.halo_widths();
        let (dims, counting) = (self.dims(), self.counting);
        let f = self.added_field(op, field)?;
        let mut spec = f.spec.clone();
        spec.overlap = overlap;
        spec.check(dims, &max_lo, &max_hi)
            .map_err(|why| CapiError::Invalid {
                op,
                why: format!("{}: {why}", counting.field(field)),
            })?;
        f.spec = spec;
        Ok(())
    }

    /// Checks the description across the job and builds the channels;
    /// collective. Every rank returns the same status.
    pub fn commit(&mut self) -> Result<()> {
        // First: every commit takes the job's next exchange name on every
        // rank, whether it fails here or not, so that the names of the
        // exchanges after it still agree.
        // A failed commit tells the job itself, with the call's status
        // (`end_failed_commit`).
        // The description's step compares the ranks' transports.
        let builder = LinkExchange::builder(&self.world, Vec::new())
            .tell_job_on_failure(false)
            .transports_agreed();
        let name = builder.name().to_string();
        let committed = self
            .ready_to_commit()
            .and_then(|()| self.build(builder))
            .and_then(|built| self.agree().map(|()| built));
        match committed {
            Ok((links, planned, shared)) => {
                let in_place = zero_copy::fields_in_place(&links, &planned, self.fields.len());
                for (field, in_place) in self.fields.iter_mut().zip(in_place) {
                    field.in_place = in_place;
                }
                self.state = State::Committed {
                    links: Box::new(links),
                    planned,
                    shared,
                    by_depth: Vec::new(),
                };
                Ok(())
            }
            Err(e) => {
                let e = self.end_failed_commit(e, &name);
                if matches!(self.state, State::Described) {
                    self.state = State::Broken(e.to_string());
                }
                Err(e)
            }
        }
    }

    /// Whether this exchange may be committed: it is described, and not
    /// committed or broken by an earlier commit.
    fn ready_to_commit(&self) -> Result<()> {
        let op = "sode_exchange_commit";
        match &self.state {
            State::Described => Ok(()),
            State::Committed { .. } => Err(CapiError::State {
                op,
                why: "the exchange is already committed".into(),
            }),
            State::Broken(why) => Err(CapiError::State {
                op,
                why: format!(
                    "an earlier commit failed ({why}): free the exchange and create a new one"
                ),
            }),
        }
    }

    /// The commit's last step: whether every rank built its part. A rank
    /// whose commit failed gave up in its place ([`Self::end_failed_commit`]).
    fn agree(&self) -> Result<()> {
        self.world
            .barrier(self.timeout)
            .map_err(|source| CapiError::Bootstrap {
                op: "sode_exchange_commit",
                source,
            })
    }

    /// The error a failed commit of the exchange named `name` returns,
    /// every rank alike.
    ///
    /// - Another rank's failure ended it (it gave up in a step this rank
    ///   took): that rank's, the lowest in the step; or, when it came, the
    ///   notice of the lowest rank that gave up the exchange, which names
    ///   the root cause (a rank that gave up waiting for it names it too).
    /// - It failed here: first told to the job
    ///   ([`sode_job::World::give_up_setup`]), so that the neighbours
    ///   waiting for this rank's channels stop; then this rank gives up in
    ///   the next collective step the others take, whichever it is, so no
    ///   rank is left waiting in a step this one will not take, and the
    ///   communicator's next collective call finds every rank in step. Its
    ///   own error, or, when it stopped waiting for a rank that gave up,
    ///   that rank's.
    fn end_failed_commit(&self, e: CapiError, name: &str) -> CapiError {
        let me = self.world.rank();
        let noticed = || {
            let g = self.world.setup_given_up(name).filter(|g| g.rank != me)?;
            Some(CapiError::OnRank {
                op: "sode_exchange_commit",
                rank: g.rank,
                status: g.code,
                message: g.why,
            })
        };
        if let Some((rank, status, message)) = gave_up_in(&e) {
            // The lowest rank that gave up in the step may have done so
            // waiting for the rank whose notice names the cause.
            return noticed().unwrap_or(CapiError::OnRank {
                op: "sode_exchange_commit",
                rank,
                status,
                message,
            });
        }
        // Told by another rank, or by the job's health watcher that a rank
        // died: that rank's failure is the cause, and every rank hears of
        // it without this one's notice.
        let by_peer = matches!(&e, CapiError::Exchange { source, .. } if source.from_the_job())
            || self.world.failure().is_some();
        if !by_peer {
            // Its neighbours may be waiting for its channels: the notice
            // ends their waits (where none waits, it costs a few messages
            // on the job's health links).
            self.world
                .give_up_setup(name, e.status(), &sode_job::diag::chain(&e));
        }
        // The others may first spend up to a timeout in a step with this
        // rank alone (waiting for its segment or connection) before they
        // reach the step this one gives up in: it waits for them that
        // long, where the job's steps take a deadline (a program's MPI
        // allgather keeps its communicator's timeout).
        let patience = self.timeout.saturating_mul(2).min(sode_job::NO_DEADLINE);
        let told = self
            .world
            .give_up(e.status(), &sode_job::diag::chain(&e), patience);
        if let Err(step) = told {
            tracing::warn!(error = %sode_job::diag::chain(&step), "telling the other ranks that this rank's commit failed");
        }
        if by_peer {
            return noticed().unwrap_or(e);
        }
        e
    }

    /// Every rank's record (`mine` encoded), through the job's allgather,
    /// each read back by `decode`.
    fn gather_records<R>(&self, mine: &[u8], decode: fn(&[u8]) -> Option<R>) -> Result<Vec<R>> {
        let op = "sode_exchange_commit";
        self.world
            .allgather(mine, self.timeout)
            .map_err(|source| CapiError::Bootstrap { op, source })?
            .iter()
            .enumerate()
            .map(|(r, b)| {
                decode(b).ok_or_else(|| unreadable(r, b, mine, format!("{} bytes", b.len())))
            })
            .collect()
    }

    /// Every rank's `mine`, through the job's allgather, with the transport
    /// each chose (which must agree).
    fn gather<T: serde::Serialize + serde::de::DeserializeOwned>(
        &self,
        mine: &T,
    ) -> Result<Vec<T>> {
        let op = "sode_exchange_commit";
        let transport = self.transport as u8;
        let body = serde_json::to_vec(&(transport, mine)).map_err(|e| CapiError::Internal {
            op,
            why: e.to_string(),
        })?;
        let all: Vec<(u8, T)> = self
            .world
            .allgather(&body, self.timeout)
            .map_err(|source| CapiError::Bootstrap { op, source })?
            .iter()
            .enumerate()
            .map(|(r, b)| {
                serde_json::from_slice(b).map_err(|e| unreadable(r, b, &body, e.to_string()))
            })
            .collect::<Result<_>>()?;
        if let Some(r) = all.iter().position(|(t, _)| *t != all[0].0) {
            return Err(CapiError::Mismatch {
                why: format!(
                    "ranks 0 and {r} chose different transports (SODE_TRANSPORT, or sode_exchange_set_transport): give every rank the same"
                ),
            });
        }
        Ok(all.into_iter().map(|(_, card)| card).collect())
    }

    /// The reduction every commit opens with, whatever its kind: the kind
    /// of exchange (`KIND_CARTESIAN`, `KIND_BOXES`), then `lanes` (at most
    /// [`cart::OPENING_LANES`], zeros after them). Their spreads, or
    /// `None` when the ranks commit different kinds: they then gather
    /// their descriptions, which name the kinds.
    fn open_commit(&self, kind: u64, lanes: &[u64]) -> Result<Option<Vec<sode_job::Spread>>> {
        let mut all = vec![0; 1 + cart::OPENING_LANES];
        all[0] = kind;
        for (to, &v) in all[1..].iter_mut().zip(lanes) {
            *to = v;
        }
        let spreads =
            self.world
                .reduce(&all, self.timeout)
                .map_err(|source| CapiError::Bootstrap {
                    op: "sode_exchange_commit",
                    source,
                })?;
        Ok(spreads[0].agreed().then(|| spreads[1..].to_vec()))
    }

    /// This rank's neighbours and their faces packed at both sides (by
    /// rank, 0 for others), found without gathering every rank's record
    /// when every rank describes the same grid and sits where its rank
    /// falls in it: a reduction says so, and whether every rank owns as
    /// many cells (then nothing more travels); else each rank trades
    /// records with its neighbours alone, and a second reduction says
    /// their faces agree. What a rank receives then grows with its
    /// neighbours, not the job. `None` when the ranks must gather (another
    /// order, or something differs: the records gathered name what);
    /// every rank alike.
    fn neighbours_by_trade(
        &self,
        cart: &Cart,
        record: &cart::Record,
    ) -> Result<Option<(Vec<sode::pattern::GridNeighbour>, Vec<u64>)>> {
        let op = "sode_exchange_commit";
        let (me, size) = (self.world.rank(), self.world.size());
        let bootstrap = |source| CapiError::Bootstrap { op, source };
        let lanes = cart::opening_lanes(record, cart, me, size);
        let Some(opening) = self.open_commit(KIND_CARTESIAN, &lanes)? else {
            return Ok(None);
        };
        let opening = cart::Opening::of(&opening);
        if opening == cart::Opening::Gather {
            return Ok(None);
        }
        let neighbours = cart::neighbours_in_order(me, cart);
        if let cart::Opening::Uniform { packed: all } = opening {
            let mut packed = vec![0; size];
            for n in &neighbours {
                packed[n.rank] = all;
            }
            return Ok(Some((neighbours, packed)));
        }
        let mine = record.encode();
        let messages: std::collections::BTreeMap<usize, Vec<u8>> = neighbours
            .iter()
            .filter(|n| n.rank != me)
            .map(|n| (n.rank, mine.clone()))
            .collect();
        let got = self
            .world
            .trade(&messages, self.timeout)
            .map_err(bootstrap)?;
        let theirs = |r: usize| match r == me {
            true => Some(*record),
            false => got.get(&r).and_then(|b| cart::Record::decode(b)),
        };
        let agree = cart::faces_agree(record, &neighbours, theirs);
        let closing = self
            .world
            .reduce(&[u64::from(agree)], self.timeout)
            .map_err(bootstrap)?;
        if closing.first().is_none_or(|s| s.least == 0) {
            return Ok(None);
        }
        let mut packed = vec![0; size];
        for n in &neighbours {
            packed[n.rank] = theirs(n.rank).map_or(0, |t| t.packed);
        }
        Ok(Some((neighbours, packed)))
    }

    /// This rank's neighbours and every rank's faces packed at both sides,
    /// from every rank's record; or, when the ranks disagree (all of them
    /// see it), the error their whole cards give, naming what differs.
    fn neighbours_by_gathering(
        &self,
        cart: &Cart,
        mine: &cart::Card,
        record: &cart::Record,
    ) -> Result<(Vec<sode::pattern::GridNeighbour>, Vec<u64>)> {
        let me = self.world.rank();
        let records = self.gather_records(&record.encode(), cart::Record::decode)?;
        if let Some(n) = cart::neighbours_by_records(me, &records, cart) {
            return Ok((n, records.iter().map(|r| r.packed).collect()));
        }
        let cards = self.gather(mine)?;
        let n = cart::neighbours_of(me, &cards, self.counting)
            .map_err(|why| CapiError::Mismatch { why })?;
        Ok((n, Vec::new()))
    }

    /// The links of a Cartesian exchange, checked across the job.
    fn cartesian_links(
        &self,
        cart: &Cart,
        specs: &[FieldLayout],
        grouped: &[bool],
    ) -> Result<PlannedLinks> {
        let mine = cart::Card {
            cart: cart.clone(),
            fields: specs.iter().map(FieldLayout::card).collect(),
        };
        let my_packed = match cart.check() {
            Ok(()) => zero_copy::packed_faces(specs, cart.dims.len(), self.lent_mode()),
            Err(_) => 0,
        };
        let record = cart::Record::of(&mine, self.transport as u8, my_packed);
        let (neighbours, packed) = match self.neighbours_by_trade(cart, &record)? {
            Some(found) => found,
            None => self.neighbours_by_gathering(cart, &mine, &record)?,
        };
        let grouping = Grouping {
            whole: grouped,
            my_packed,
            packed: &packed,
        };
        Ok(PlannedLinks::cartesian(specs, &neighbours, &grouping))
    }

    /// The zero-copy mode this rank's fields are lent under at commit;
    /// `None` when none are: kept in shared sets, `SODE_ZERO_COPY=never`,
    /// or a mode not valid (which the commit reports when it lends).
    fn lent_mode(&self) -> Option<ZeroCopy> {
        if self.shared > 0 || !cfg!(feature = "rdma") {
            return None;
        }
        let mode = self.zero_copy.map_or_else(ZeroCopy::from_env, Ok).ok()?;
        (mode != ZeroCopy::Never).then_some(mode)
    }

    /// The boxes of a tiled exchange, one per (tile, direction, field),
    /// run as an explicit exchange's: every rank's boxes must pair up with
    /// their peers', checked alike on every rank.
    fn tile_links(
        &self,
        tiles: &TileGrid,
        specs: &[FieldLayout],
        grouped: &[bool],
    ) -> Result<PlannedLinks> {
        let op = "sode_exchange_commit";
        let job = sode::pattern::TileRank {
            rank: self.world.rank(),
            ranks: self.world.size(),
        };
        let boxes = sode::pattern::tile_boxes(specs, &tiles.grid(), &tiles.tiles, job)
            .map_err(|why| CapiError::Invalid { op, why })?;
        let ndims = specs.iter().map(|s| s.extents.len()).max().unwrap_or(0);
        self.explicit_links(ndims, &boxes.sends, &boxes.recvs, specs, grouped)
    }

    /// Per rank of the job, whether every direction (or box) to it
    /// travels as one message each way: unless it is reached over RDMA,
    /// which writes faces in place and spreads them over its engines by
    /// direction (its edges and corners still travel together:
    /// `PlannedLinks::cartesian`). Both ends decide alike: `builder`
    /// answers as it will build. Asked of every rank, this one included, so that every rank
    /// takes the builder's one collective step (the fabrics' gather) here,
    /// before the commit's own gathers.
    fn one_message_per_peer(&self, builder: &mut LinkExchangeBuilder<'_>) -> Result<Vec<bool>> {
        (0..self.world.size())
            .map(|peer| {
                let locality = builder
                    .locality_of(peer)
                    .map_err(|source| CapiError::Exchange {
                        op: "sode_exchange_commit",
                        source,
                    })?;
                Ok(locality != Locality::Rdma)
            })
            .collect()
    }

    /// The links of an explicit exchange (one per box), checked across the
    /// job.
    fn explicit_links(
        &self,
        ndims: usize,
        sends: &[BoxMessage],
        recvs: &[BoxMessage],
        specs: &[FieldLayout],
        grouped: &[bool],
    ) -> Result<PlannedLinks> {
        let mine = explicit::Card {
            ndims,
            fields: specs.iter().map(FieldLayout::card).collect(),
            sends: sends.iter().map(explicit::side).collect(),
            recvs: recvs.iter().map(explicit::side).collect(),
        };
        let record = explicit::Record::of(
            &mine,
            self.world.rank(),
            self.world.size(),
            self.transport as u8,
        );
        // The opening step every commit takes: the boxes are gathered
        // whatever it says.
        self.open_commit(KIND_BOXES, &[])?;
        let records = self.gather_records(&record.encode(), explicit::Record::decode)?;
        if !explicit::records_agree(&records) {
            // The ranks disagree (all of them see it): the whole cards
            // name what differs.
            let cards = self.gather(&mine)?;
            explicit::check(&cards, self.counting).map_err(|why| CapiError::Mismatch { why })?;
        }
        Ok(PlannedLinks::boxes(specs, sends, recvs, grouped))
    }

    /// The shared sets' layout (each field [`SharedSets::array_stride`]
    /// from the last) and every link's runs in a set.
    fn shared_layout(
        &self,
        specs: &[FieldLayout],
        planned: &[LinkPieces],
    ) -> Result<(SharedLayout, sode::SharedSets)> {
        let overflow = || CapiError::Invalid {
            op: "sode_exchange_commit",
            why: format!(
                "{} sets of these fields overflow the address space",
                self.shared
            ),
        };
        let mut bases = Vec::with_capacity(self.fields.len());
        let mut set_len = 0usize;
        for f in &self.fields {
            bases.push(set_len);
            let stride = sode::SharedSets::array_stride(f.bytes).ok_or_else(overflow)?;
            set_len = set_len.checked_add(stride).ok_or_else(overflow)?;
        }
        set_len.checked_mul(self.shared).ok_or_else(overflow)?;
        let runs_of = |pieces: &Option<Vec<Piece>>| {
            let pieces = pieces.as_deref()?;
            Some(
                zero_copy::spans(specs, pieces)
                    .into_iter()
                    .map(|s| sode::Run {
                        offset: bases[s.memory] + s.offset,
                        len: s.len,
                    })
                    .collect(),
            )
        };
        let runs = planned
            .iter()
            .map(|p| sode::LinkRuns {
                send: runs_of(&p.send),
                recv: runs_of(&p.recv),
            })
            .collect();
        let sets = sode::SharedSets {
            sets: self.shared,
            set_len,
            runs,
        };
        let layout = SharedLayout {
            sets: self.shared,
            set_len,
            bases,
        };
        Ok((layout, sets))
    }

    fn build(
        &self,
        builder: LinkExchangeBuilder<'_>,
    ) -> Result<(LinkExchange, Vec<LinkPieces>, Option<SharedLayout>)> {
        let op = "sode_exchange_commit";
        if self.fields.is_empty() {
            // Every message would be empty: say what is missing, not that.
            return Err(CapiError::Invalid {
                op,
                why: "no field was added: add at least one (sode_exchange_add_field) before commit"
                    .into(),
            });
        }
        let specs: Vec<FieldLayout> = self.fields.iter().map(|f| f.spec.clone()).collect();
        let mut builder = builder
            .transport(self.transport)
            .setup_timeout(self.timeout);
        let grouped = self.one_message_per_peer(&mut builder)?;
        let PlannedLinks {
            links,
            pieces: planned,
        } = match &self.layout {
            Layout::Cartesian(cart) => self.cartesian_links(cart, &specs, &grouped)?,
            Layout::Tiles(t) => self.tile_links(t, &specs, &grouped)?,
            Layout::Explicit {
                ndims,
                sends,
                recvs,
                ..
            } => self.explicit_links(*ndims, sends, recvs, &specs, &grouped)?,
        };
        let builder = builder.with_links(links);
        let (builder, shared) = if self.shared > 0 {
            let (layout, sets) = self.shared_layout(&specs, &planned)?;
            (builder.shared_sets(sets), Some(layout))
        } else {
            (self.in_place(builder, &specs, &planned)?, None)
        };
        let mut links = builder
            .build()
            .map_err(|source| CapiError::Exchange { op, source })?;
        // Every start packs what it carries (pattern::pack_and_start), so
        // a face may be packed straight into its receiver's window.
        links
            .fill_sends_each_start()
            .map_err(|source| CapiError::Exchange { op, source })?;
        links.copy_directly(pattern::local_copies(&links, &planned));
        Ok((links, planned, shared))
    }

    /// Lends the fields to the RDMA channel and asks for the faces
    /// `SODE_ZERO_COPY` chooses to travel in place.
    #[cfg(feature = "rdma")]
    fn in_place<'w>(
        &self,
        builder: sode::LinkExchangeBuilder<'w>,
        specs: &[FieldLayout],
        planned: &[LinkPieces],
    ) -> Result<sode::LinkExchangeBuilder<'w>> {
        let op = "sode_exchange_commit";
        let mode = match self.zero_copy {
            Some(m) => m,
            None => ZeroCopy::from_env().map_err(|why| CapiError::Invalid { op, why })?,
        };
        if mode == ZeroCopy::Never {
            return Ok(builder);
        }
        let sets = self.fields.first().map_or(0, |f| f.lent.len()) + 1;
        let lent = (0..sets)
            .map(|k| {
                self.fields
                    .iter()
                    .map(|f| match k {
                        0 => f.memory.as_ref()?.lend(),
                        k => f.lent.get(k - 1)?.lend(),
                    })
                    .collect::<Option<Vec<_>>>()
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| CapiError::Internal {
                op,
                why: "a field without memory".into(),
            })?;
        Ok(zero_copy::lend_in_place(
            builder, specs, planned, lent, mode,
        ))
    }

    #[cfg(not(feature = "rdma"))]
    fn in_place<'w>(
        &self,
        builder: sode::LinkExchangeBuilder<'w>,
        _: &[FieldLayout],
        _: &[LinkPieces],
    ) -> Result<sode::LinkExchangeBuilder<'w>> {
        Ok(builder)
    }

    /// How each link's peer is reached and which sides travel in place,
    /// one line per link.
    pub fn describe(&mut self) -> Result<String> {
        let (links, planned, fields) = self.committed("sode_exchange_describe")?;
        let specs: Vec<FieldLayout> = fields.iter().map(|f| f.spec.clone()).collect();
        let mut text = String::new();
        for (i, (l, locality)) in links.links().iter().zip(links.localities()).enumerate() {
            let sides = links.in_place(i);
            let side = |verb: &str, pieces: &Option<Vec<Piece>>, in_place: bool| {
                let pieces = pieces.as_deref()?;
                let bytes = pattern::message_bytes(&specs, pieces);
                Some(if in_place {
                    let runs = zero_copy::spans(&specs, pieces).len();
                    format!("; {verb} {bytes} bytes in place ({runs} runs)")
                } else {
                    format!("; {verb} {bytes} bytes packed")
                })
            };
            let p = &planned[i];
            text.push_str(&format!(
                "{}: {}{}{}\n",
                l.name,
                locality.name(),
                side("sends", &p.send, sides.send).unwrap_or_default(),
                side("receives", &p.recv, sides.recv).unwrap_or_default(),
            ));
        }
        Ok(text)
    }

    /// As [`committed`](Self::committed), its messages at the depth set
    /// (made the first time a start uses that depth).
    fn committed_at_depth(
        &mut self,
        op: &'static str,
    ) -> Result<(&mut LinkExchange, &[LinkPieces], &mut [Field])> {
        let depth = self.depth;
        match &mut self.state {
            State::Committed {
                links,
                planned,
                by_depth,
                ..
            } => {
                let at: &[LinkPieces] = if depth == 0 {
                    planned
                } else {
                    let i = match by_depth.iter().position(|(d, _)| *d == depth) {
                        Some(i) => i,
                        None => {
                            by_depth
                                .push((depth, planned.iter().map(|p| p.at_depth(depth)).collect()));
                            by_depth.len() - 1
                        }
                    };
                    &by_depth[i].1
                };
                Ok((links, at, &mut self.fields))
            }
            other => Err(not_committed(op, other)),
        }
    }

    fn committed(
        &mut self,
        op: &'static str,
    ) -> Result<(&mut LinkExchange, &[LinkPieces], &mut [Field])> {
        match &mut self.state {
            State::Committed { links, planned, .. } => Ok((links, planned, &mut self.fields)),
            other => Err(not_committed(op, other)),
        }
    }

    /// The fields sode keeps, or the error of `op` on an exchange that
    /// keeps none (or is not committed).
    fn shared(&self, op: &'static str) -> Result<&SharedLayout> {
        match &self.state {
            State::Committed {
                shared: Some(s), ..
            } => Ok(s),
            State::Committed { .. } => Err(CapiError::State {
                op,
                why: "the exchange keeps no fields: call sode_exchange_set_shared_fields before adding them".into(),
            }),
            other => Err(not_committed(op, other)),
        }
    }

    /// As [`shared_field`](Self::shared_field), for a Fortran pointer to
    /// elements of `ty` with `shape` elements per dimension: both must be
    /// the field's as added, or the pointer would read other memory.
    pub fn shared_field_as(
        &mut self,
        set: usize,
        field: usize,
        ty: ElemType,
        shape: &[usize],
    ) -> Result<*mut u8> {
        let op = "sode_exchange_shared_field";
        if let Some(why) = self.unlike_field(field, ty, shape, Given::Pointer) {
            return Err(CapiError::Invalid { op, why });
        }
        self.shared_field(set, field)
    }

    /// Checks an array a Fortran program gives for field `field` (its
    /// `sode_array`) before `op` reads or writes it: of the field's element
    /// type, with `shape` (the field's extents as added), and contiguous.
    pub fn check_array_for(
        &self,
        op: &'static str,
        field: usize,
        ty: ElemType,
        shape: &[usize],
        contiguous: bool,
    ) -> Result<()> {
        // Names made only for a message: a start checks every array.
        let name = || self.counting.field(field);
        let why = if field >= self.fields.len() {
            Some(format!(
                "there is no {} (fields added: {})",
                name(),
                self.fields.len()
            ))
        } else if !contiguous {
            Some(format!(
                "the array given for {} is not contiguous in memory (a section such as u(1:n:2, :) or u(2:5, :) of a larger array, or a pointer to one): give the whole array",
                name()
            ))
        } else {
            self.unlike_field(field, ty, shape, Given::Array)
        };
        why.map_or(Ok(()), |why| Err(CapiError::Invalid { op, why }))
    }

    /// How memory of elements `ty` and `shape` given for field `field`
    /// differs from the field as added, if it does (and the field exists).
    fn unlike_field(
        &self,
        field: usize,
        ty: ElemType,
        shape: &[usize],
        given: Given,
    ) -> Option<String> {
        let counting = self.counting;
        let spec = &self.fields.get(field)?.spec;
        let name = || counting.field(field);
        // What the message calls the memory given, and how to fix it.
        let (holding, noun, extent, fix) = match given {
            Given::Pointer => (
                "the pointer given points to",
                "the pointer given",
                "the bounds given hold",
                "give the bounds it was added with",
            ),
            Given::Array => (
                "the array given holds",
                "the array given",
                "the array given has",
                "give an array of the shape the field was added with",
            ),
        };
        if spec.ty != ty {
            return Some(format!(
                "{} holds {}, {holding} {}",
                name(),
                fortran_type(spec.ty),
                fortran_type(ty)
            ));
        }
        if shape.len() != spec.extents.len() {
            return Some(format!(
                "{} has {} dimensions, {noun} {}",
                name(),
                spec.extents.len(),
                shape.len()
            ));
        }
        let a = (0..shape.len()).find(|&a| shape[a] != spec.extents[a])?;
        Some(format!(
            "{}, {}: {extent} {} elements, the field {}: {fix}",
            name(),
            counting.axis(a),
            shape[a],
            spec.extents[a]
        ))
    }

    /// The address of field `field` of shared set `set` (laid out as the
    /// field was described), valid until the exchange is freed.
    pub fn shared_field(&mut self, set: usize, field: usize) -> Result<*mut u8> {
        let op = "sode_exchange_shared_field";
        let layout = self.shared(op)?;
        let Some(base) = layout.bases.get(field).filter(|_| set < layout.sets) else {
            return Err(CapiError::Invalid {
                op,
                why: format!(
                    "{}, {}: the exchange keeps {} sets of {} fields (numbered from {})",
                    self.counting.set(set),
                    self.counting.field(field),
                    layout.sets,
                    layout.bases.len(),
                    self.counting.first()
                ),
            });
        };
        let at = set * layout.set_len + base;
        let (links, _, _) = self.committed(op)?;
        let sets = links
            .shared_sets_mut()
            .map_err(|source| CapiError::Exchange { op, source })?;
        Ok(sets[at..].as_mut_ptr())
    }

    /// Makes later starts move at most `depth` layers of each halo, those
    /// nearest the owned cells (0: every layer, as committed). Any time but
    /// while an exchange is in flight; every rank alike.
    pub fn set_depth(&mut self, depth: usize) -> Result<()> {
        let op = "sode_exchange_set_depth";
        if depth != 0 {
            if !matches!(self.layout, Layout::Cartesian(_)) {
                return Err(CapiError::Invalid {
                    op,
                    why: format!("depth {depth}: an exchange described by its boxes or tiles moves each box whole; a depth applies to Cartesian exchanges (sode_exchange_create_cart)"),
                });
            }
            if self.shared > 0 {
                return Err(CapiError::Invalid {
                    op,
                    why: format!("depth {depth}: sode moves the halos of the fields it keeps whole (sode_exchange_set_shared_fields)"),
                });
            }
        }
        if let State::Committed { links, .. } = &self.state {
            if links.in_flight() {
                return Err(CapiError::State {
                    op,
                    why: "an exchange is in flight: call sode_exchange_wait first".into(),
                });
            }
        }
        self.depth = depth;
        Ok(())
    }

    /// Starts exchanging shared set `set`: no packing by the caller.
    pub fn start_set(&mut self, set: usize) -> Result<()> {
        let op = "sode_exchange_start_set";
        if self.depth != 0 {
            return Err(CapiError::Invalid {
                op,
                why: format!("the depth is set to {} layers, but sode moves the halos of the fields it keeps whole: call sode_exchange_set_depth(x, 0) first", self.depth),
            });
        }
        let sets = self.shared(op)?.sets;
        if set >= sets {
            return Err(CapiError::Invalid {
                op,
                why: format!(
                    "{}: the exchange keeps {sets} sets (numbered from {})",
                    self.counting.set(set),
                    self.counting.first()
                ),
            });
        }
        let (links, _, _) = self.committed(op)?;
        if links.in_flight() {
            return Err(CapiError::State {
                op,
                why: "the previous exchange is still in flight: call sode_exchange_wait first"
                    .into(),
            });
        }
        links
            .start_set(set)
            .map_err(|source| CapiError::Exchange { op, source })
    }

    /// Packs every field's faces (but those read in place) and starts the
    /// exchange.
    pub fn start(&mut self) -> Result<()> {
        self.start_arrays("sode_exchange_start", 0, |_, _| None)
    }

    /// Starts the exchange on the arrays `array(f, bytes)` gives for each
    /// of `given` fields (`None`: the field's own array), checked against
    /// the committed fields; the wait or test that completes it unpacks
    /// into the same arrays. Runge-Kutta stages and double buffers share
    /// one committed exchange this way.
    pub fn start_arrays(
        &mut self,
        op: &'static str,
        given: usize,
        array: impl Fn(usize, usize) -> Option<UserMemory>,
    ) -> Result<()> {
        self.start_fields(op, None, given, array)
    }

    /// [`start_arrays`](Self::start_arrays) on the fields `subset` lists
    /// only (`None`: every field), `array(k, bytes)` giving the array of
    /// the `k`-th field listed. Each message carries the listed fields'
    /// faces only; the neighbours must start the same fields.
    pub fn start_fields(
        &mut self,
        op: &'static str,
        subset: Option<&FieldList<'_>>,
        given: usize,
        array: impl Fn(usize, usize) -> Option<UserMemory>,
    ) -> Result<()> {
        if let State::Committed {
            shared: Some(_), ..
        } = &self.state
        {
            return Err(CapiError::State {
                op,
                why: "sode keeps the fields: start with sode_exchange_start_set(set)".into(),
            });
        }
        let mut carrying_all = self.carrying_all;
        let every_layer = self.depth == 0;
        let depth = self.depth;
        let (links, planned, fields) = self.committed_at_depth(op)?;
        if links.in_flight() {
            return Err(CapiError::State {
                op,
                why: "the previous exchange is still in flight: call sode_exchange_wait first"
                    .into(),
            });
        }
        let listed = subset.map_or(fields.len(), |l| l.ids.len());
        if given != 0 && given != listed {
            return Err(CapiError::Invalid {
                op,
                why: match subset {
                    None => format!("{given} arrays given for an exchange of {} fields: give one per field, in the order added (NULL for a field's own array)", fields.len()),
                    Some(_) => format!("{given} arrays given for {listed} fields: give one per field listed, in the same order (NULL for a field's own array)"),
                },
            });
        }
        select(fields, subset, op)?;
        let partial = subset.is_some() || !every_layer;
        let bound = Self::bind_arrays(links, fields, (subset, given, partial), array, op)
            .and_then(|()| {
                if subset.is_none() && every_layer && carrying_all {
                    return Ok(());
                }
                // Unknown until every length is set.
                carrying_all = false;
                Self::carry(links, planned, fields, op)?;
                let shape = sode::start_shape(fields.iter().map(|f| f.started), depth);
                links
                    .set_shape(shape)
                    .map_err(|source| CapiError::Exchange { op, source })?;
                carrying_all = subset.is_none() && every_layer;
                Ok(())
            })
            .and_then(|()| Self::pack_and_start(links, planned, fields, op));
        if bound.is_err() {
            for field in fields.iter_mut() {
                field.call = None;
            }
        }
        self.carrying_all = carrying_all;
        bound
    }

    /// Gives each started field the array `array` names for it (the
    /// `k`-th of `subset`, or field `k`), every other field none; and
    /// stages the start where messages travel in place over RDMA but the
    /// start cannot: a field of them given another array, or a `partial`
    /// start (some fields, fewer layers), since a message in place
    /// carries every field's whole faces where the caller's arrays hold
    /// them.
    fn bind_arrays(
        links: &mut LinkExchange,
        fields: &mut [Field],
        (subset, given, partial): (Option<&FieldList<'_>>, usize, bool),
        array: impl Fn(usize, usize) -> Option<UserMemory>,
        op: &'static str,
    ) -> Result<()> {
        // Every field, so that no array of an earlier start that never
        // completed stands in for its own.
        for field in fields.iter_mut() {
            field.call = None;
        }
        let order: &mut dyn Iterator<Item = usize> = match subset {
            Some(list) => &mut list.indices(),
            None => &mut (0..fields.len()),
        };
        for (k, f) in order.enumerate().take(given) {
            let field = &mut fields[f];
            // The field's own array, given again, is no other array.
            field.call =
                array(k, field.bytes).filter(|a| !field.memory.as_ref().is_some_and(|m| m.is(a)));
        }
        links
            .set_memory(start_memory(fields, partial))
            .map_err(|source| CapiError::Exchange { op, source })
    }

    /// Tells every link how many bytes of its messages the started fields
    /// fill, so that its channel moves those only.
    fn carry(
        links: &mut LinkExchange,
        planned: &[LinkPieces],
        fields: &mut [Field],
        op: &'static str,
    ) -> Result<()> {
        pattern::carry(links, planned, &Arrays(fields))
            .map_err(|source| CapiError::Exchange { op, source })
    }

    fn pack_and_start(
        links: &mut LinkExchange,
        planned: &[LinkPieces],
        fields: &mut [Field],
        op: &'static str,
    ) -> Result<()> {
        pattern::pack_and_start(links, planned, &Arrays(fields))
            .map_err(|source| CapiError::Exchange { op, source })
    }

    /// Unpacks every halo (but those received in place) once the exchange
    /// is complete.
    fn unpack(
        links: &mut LinkExchange,
        planned: &[LinkPieces],
        fields: &mut [Field],
        op: &'static str,
    ) -> Result<()> {
        if fields.iter().any(|f| f.memory.is_none()) {
            // Fields sode keeps: the exchange scattered their halos.
            return Ok(());
        }
        pattern::unpack(links, planned, &mut Arrays(fields))
            .map_err(|source| CapiError::Exchange { op, source })?;
        // The exchange is complete: the arrays given for it are let go.
        for f in fields.iter_mut() {
            f.call = None;
        }
        Ok(())
    }

    /// What the exchange has done since its commit or the last reset.
    pub fn stats(&mut self, op: &'static str) -> Result<sode::ExchangeStats> {
        let (links, _, _) = self.committed(op)?;
        Ok(links.stats())
    }

    /// Sets the counters to zero.
    pub fn reset_stats(&mut self) -> Result<()> {
        let (links, _, _) = self.committed("sode_exchange_reset_stats")?;
        links.reset_stats();
        Ok(())
    }

    /// Waits up to `timeout` for every halo, then unpacks them.
    pub fn wait(&mut self, timeout: Duration) -> Result<()> {
        let op = "sode_exchange_wait";
        let (links, planned, fields) = self.committed_at_depth(op)?;
        let deadline = Instant::now() + timeout;
        // In flight only: a start that failed made no copies to itself.
        if links.in_flight() {
            pattern::copy_to_self(links, planned, &mut Arrays(fields))
                .map_err(|source| CapiError::Exchange { op, source })?;
        }
        links
            .wait(deadline)
            .map_err(|source| CapiError::Exchange { op, source })?;
        Self::unpack(links, planned, fields, op)
    }

    /// One pass: true (and the halos unpacked) once complete.
    pub fn test(&mut self) -> Result<bool> {
        let op = "sode_exchange_test";
        let (links, planned, fields) = self.committed_at_depth(op)?;
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

/// The error for rank `r`'s description `theirs`, which this rank (whose
/// own is `mine`) cannot read (`why`): most often another kind of exchange
/// committed at the same step, a rank having skipped or reordered a
/// collective call.
/// The kind of exchange a commit's opening reduction carries first:
/// ranks that commit different kinds all gather their descriptions.
const KIND_CARTESIAN: u64 = 1;
/// As [`KIND_CARTESIAN`], for an exchange of boxes (or tiles).
const KIND_BOXES: u64 = 2;

fn unreadable(r: usize, theirs: &[u8], mine: &[u8], why: String) -> CapiError {
    let why = match (kind_of_description(theirs), kind_of_description(mine)) {
        (Some(t), Some(m)) if t != m => format!(
            "rank {r} commits {t} where this rank commits {m}: every rank of the communicator makes each collective call, in the same order (an exchange among some ranks takes a communicator of those ranks)"
        ),
        _ => format!(
            "rank {r} sent an unreadable description ({why}): is it the same sode, and the same kind of exchange?"
        ),
    };
    CapiError::Mismatch { why }
}

/// What kind of exchange a commit's description is of, by its form: the
/// fixed records of Cartesian exchanges and exchanges of boxes, and the
/// tiled exchanges' JSON.
fn kind_of_description(d: &[u8]) -> Option<&'static str> {
    let record = d.first().is_some_and(|&valid| valid <= 1);
    match d.len() {
        n if record && n == crate::record::bytes(cart::Record::WORDS) => {
            Some("a Cartesian exchange (sode_exchange_create_cart)")
        }
        n if record && n == crate::record::bytes(explicit::Record::WORDS) => {
            Some("an exchange of boxes (sode_exchange_create)")
        }
        _ if d.first() == Some(&b'[') => Some("a tiled exchange (sode_exchange_create_tiles)"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_give_up_is_found_however_deep_it_is_wrapped() {
        let gave_up = || JobError::GaveUp {
            rank: 3,
            code: -2,
            message: "no field was added".into(),
        };
        let direct = CapiError::Bootstrap {
            op: "sode_exchange_commit",
            source: gave_up(),
        };
        let boxed = CapiError::Exchange {
            op: "sode_exchange_commit",
            source: HaloError::Barrier {
                source: Box::new(gave_up()),
            },
        };
        for e in [direct, boxed] {
            assert_eq!(
                gave_up_in(&e),
                Some((3, -2, "no field was added".into())),
                "{e:?}"
            );
        }
        let other = CapiError::Bootstrap {
            op: "sode_exchange_commit",
            source: JobError::Launch { why: "none".into() },
        };
        assert_eq!(gave_up_in(&other), None);
    }
}
