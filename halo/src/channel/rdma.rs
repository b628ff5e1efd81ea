//! RDMA writes with the neighbours on other nodes (`sode-transport`), placed
//! on engines by `sode-scheduler` for the device's calibrated model.

use std::ops::Range;
use std::time::Duration;

use sode_job::World;
use sode_scheduler::{Algorithm, Machine, Pattern, Request};
use sode_transport::{
    BufferId, Device, DeviceSelector, PersistentWrites, RdmaExchangeBuilder, Staged,
    TransportError, Twin, UserMemory, WindowId,
};

use super::{names, Built, Channel, InPlace, Locality, Member, Placed, Setup, Span, StartMemory};
use crate::error::{HaloError, Result};
use crate::plan::{machine_of, plan_pieces, stream_writes, SourcePiece, StreamWrite, TargetWindow};
use crate::settings::{Model, Transport};

// A credit names the set in the transport's bits: the two limits are one.
const _: () = assert!(crate::MAX_LENT_SETS == sode_transport::MAX_LENT_SETS);

/// How the RDMA writes are set up.
#[derive(Debug, Clone)]
pub(crate) struct RdmaSettings {
    /// Queue pairs per neighbour.
    pub engines: usize,
    /// The scheduling algorithm.
    pub algorithm: Algorithm,
    /// The machine model it schedules for.
    pub model: Model,
    /// Where an agreed model came from, for the summary.
    pub model_source: Option<String>,
    /// How long setup may wait for the peers.
    pub timeout: Duration,
}

/// One RDMA message this rank writes: the peer, its bytes, where they come
/// from, and the windows the peer made for it (in the peer's numbering).
#[derive(Debug, Clone)]
pub(crate) struct RdmaSend {
    /// The peer.
    pub peer: usize,
    /// Bytes per exchange.
    pub len: usize,
    /// The peer's index of the first of its windows for it (one window
    /// when the peer unpacks the message, one per run when it receives in
    /// place; numbered consecutively in stream order).
    pub target: usize,
    /// Bytes of each of those windows.
    pub target_runs: Vec<usize>,
    /// The peer's window that a start it stages receives the whole
    /// message in (when it receives in place).
    pub staging: Option<usize>,
    /// The peer's first window in each lent set beyond the first (when it
    /// receives in place), numbered as `target`'s.
    pub twins: Vec<usize>,
    /// Read in place from lent memory (`None`: packed into the channel's
    /// buffer by the caller).
    pub from: Option<Vec<Span>>,
    /// The direction to the peer in the process grid (empty when none).
    pub offset: Vec<i32>,
}

/// One RDMA message this rank receives: windows the peer writes into.
#[derive(Debug, Clone)]
pub(crate) struct RdmaRecv {
    /// The peer allowed to write it.
    pub peer: usize,
    /// Bytes per exchange.
    pub len: usize,
    /// Received in place into lent memory, a window per span (`None`: one
    /// window in the channel's buffer, unpacked by the caller).
    pub into: Option<Vec<Span>>,
}

impl RdmaRecv {
    /// The bytes of each window, in stream order (what the sender learns).
    pub(crate) fn runs(&self) -> Vec<usize> {
        match &self.into {
            Some(spans) => spans.iter().map(|s| s.len).collect(),
            None => vec![self.len],
        }
    }
}

/// A persistent set of scheduled RDMA writes: one buffer holding every
/// packed send region and every unpacked receive window; messages read or
/// received in place use the lent memory instead (the set a start names),
/// and each of them also has a range of the buffer that a staged start
/// (one on arrays no lent set holds) packs or unpacks it through.
#[derive(Debug)]
pub(crate) struct RdmaChannel {
    writes: PersistentWrites,
    buf: BufferId,
    /// Per message: its range of `buf`, or `None` when read in place.
    sends: Vec<Option<Range<usize>>>,
    /// Per received message: its window, or `None` when received in place.
    windows: Vec<Option<WindowId>>,
    /// Per message read in place: its staging range of `buf`.
    staged_sends: Vec<Option<Range<usize>>>,
    /// Per message received in place: its staging window.
    staged_windows: Vec<Option<WindowId>>,
    /// What the starts that follow read and land in.
    memory: StartMemory,
    /// Per message, the writes that carry it from the channel's buffer
    /// (packed, or staged when read in place; empty when read in place
    /// without a staging range: it travels whole), and the bytes they
    /// carry now.
    carriers: Vec<Carriers>,
    names: String,
    summary: String,
}

/// The writes that carry one packed message, and how much of it they
/// carry from the next start on.
#[derive(Debug, Default)]
struct Carriers {
    writes: Vec<Carrier>,
    carried: usize,
}

/// One write of a packed message: its command and the bytes of the
/// message it was planned to carry.
#[derive(Debug, Clone, Copy)]
struct Carrier {
    command: usize,
    range_start: usize,
    len: usize,
}

/// What the job asked of RDMA, beside the members.
#[derive(Debug)]
pub(crate) struct RdmaJob<'a> {
    /// The transport asked for.
    pub transport: Transport,
    /// Per rank, the RDMA fabric of its device (gathered under the
    /// automatic choice across nodes).
    pub fabrics: &'a [String],
    /// Queue pairs per neighbour.
    pub engines: usize,
    /// The scheduling algorithm.
    pub algorithm: Algorithm,
    /// The machine model asked for.
    pub model: Model,
    /// The memory the members' spans in place name, per lent set.
    pub lent: Vec<Vec<UserMemory>>,
}

impl RdmaChannel {
    /// Sets up RDMA with `members` (every link to a rank reached over
    /// RDMA; `in_place[i]` says which of member `i`'s runs travel in
    /// place), when any rank of the job uses RDMA: then every rank calls
    /// it, members or not, for the job's model is agreed collectively.
    /// `None` when this rank has no RDMA member.
    pub(crate) fn set_up(
        setup: &Setup<'_>,
        job: RdmaJob<'_>,
        members: &[Member<'_>],
        in_place: &[Option<&InPlace>],
    ) -> Result<Option<Built>> {
        if !job.uses_rdma(setup.world) {
            return Ok(None);
        }
        let how = |i: usize| {
            in_place
                .get(i)
                .copied()
                .flatten()
                .cloned()
                .unwrap_or_default()
        };
        let mut placed = vec![Placed::default(); members.len()];
        let sets = job.lent.len().max(1);
        // Each receiver numbers its windows in the order of its RDMA
        // receives (a message received in place has a window per run) and
        // tells each sender the windows of its messages.
        let mut receives = Vec::new();
        for (i, m) in members.iter().enumerate() {
            let Some(r) = m.recv else { continue };
            placed[i].recv = Some(receives.len());
            placed[i].in_place.recv = how(i).recv.is_some();
            receives.push((
                r.tag,
                RdmaRecv {
                    peer: m.peer,
                    len: r.len,
                    into: how(i).recv,
                },
            ));
        }
        let agreed = job.agree_model(setup)?;
        if members.is_empty() {
            return Ok(None);
        }
        let peers = members.iter().map(|m| m.peer).collect();
        let numbered = crate::windows::number(&incoming(&receives, sets));
        let theirs = crate::windows::swap(setup.world, &peers, &numbered, setup.timeout)?;
        let mut messages = Vec::new();
        for (i, m) in members.iter().enumerate() {
            let Some(s) = m.send else { continue };
            let target = crate::windows::target(
                theirs.get(&m.peer).map_or(&[][..], Vec::as_slice),
                setup.world.rank(),
                m.peer,
                (s.tag, s.len),
                m.name,
            )?;
            placed[i].send = Some(messages.len());
            placed[i].in_place.send = how(i).send.is_some();
            messages.push(RdmaSend {
                peer: m.peer,
                len: s.len,
                target: target.first,
                target_runs: target.runs,
                staging: target.staging,
                twins: target.twins,
                from: how(i).send,
                offset: m.offset.to_vec(),
            });
        }
        let settings = RdmaSettings {
            engines: job.engines,
            algorithm: job.algorithm,
            model: match agreed {
                Some(a) => Model::Given(a.machine),
                None => job.model,
            },
            model_source: agreed.map(|a| a.describe()),
            timeout: setup.timeout,
        };
        let receives: Vec<RdmaRecv> = receives.into_iter().map(|(_, r)| r).collect();
        let channel = RdmaChannel::build(
            setup.world,
            &messages,
            &receives,
            job.lent,
            &settings,
            names(members),
        )?;
        let summary = channel.summary().to_string();
        Ok(Some(Built {
            channel: Box::new(channel),
            placed,
            summary: Some(summary),
        }))
    }
}

/// This rank's RDMA receives (with their tags) as the windows' numbering
/// takes them: one received in place has a window per run in each of the
/// `sets` lent sets.
fn incoming(receives: &[(u32, RdmaRecv)], sets: usize) -> Vec<crate::windows::Incoming> {
    receives
        .iter()
        .map(|(tag, r)| crate::windows::Incoming {
            from: r.peer,
            tag: *tag,
            runs: r.runs(),
            sets: if r.into.is_some() { sets } else { 0 },
        })
        .collect()
}

impl RdmaJob<'_> {
    /// Whether any pair of ranks of the job would talk over RDMA (the same
    /// answer on every rank, so all of them join the window allgather).
    fn uses_rdma(&self, world: &World) -> bool {
        let size = world.size();
        match self.transport {
            Transport::Shm | Transport::Tcp => false,
            Transport::Rdma => size > 1,
            // Two ranks on different nodes whose devices share a fabric.
            Transport::Auto => {
                super::fabric_spans_nodes(&self.fabrics[..self.fabrics.len().min(size)], |r| {
                    world.node_of(r)
                })
            }
        }
    }

    /// This node's model, measured by its lowest rank when the model is
    /// to be calibrated (`None` elsewhere, or when this node has no device
    /// that works: the other nodes' measurements stand for it).
    fn node_model(&self, world: &World) -> Option<Machine> {
        if self.model != Model::Calibrated || world.local_rank() != 0 {
            return None;
        }
        let calibrate = || {
            let measured = DeviceSelector::from_env()
                .and_then(|s| Device::open(&s))
                .and_then(|dev| sode_transport::calibrate(&dev, self.engines));
            match measured {
                Ok(c) => Some(machine_of(&c)),
                Err(e) => {
                    tracing::debug!(error = %e, "this node's device was not calibrated");
                    None
                }
            }
        };
        crate::job_memo::JobMemo::of(world).node_model(self.engines, calibrate)
    }

    /// The job's model, the same on every rank: `None` when it is not to be
    /// calibrated, or when no node measured (each rank then calibrates its
    /// own device, as a last resort). Every rank joins the allgather of
    /// the nodes' measurements (a record of fixed size each, empty from
    /// ranks that did not measure), whatever its setting, so that the
    /// job's collectives stay in step.
    fn agree_model(&self, setup: &Setup<'_>) -> Result<Option<crate::model::Agreed>> {
        let world = setup.world;
        let body = crate::model::encode(self.node_model(world));
        let all = world
            .allgather(&body, setup.timeout)
            .map_err(|source| HaloError::Barrier {
                source: Box::new(source),
            })?;
        if self.model != Model::Calibrated {
            return Ok(None);
        }
        // Each node by its lowest rank.
        let mut first_on = std::collections::HashMap::new();
        let mut reports = Vec::with_capacity(all.len());
        for (rank, b) in all.iter().enumerate() {
            let machine = crate::model::decode(b).map_err(|e| HaloError::Usage {
                op: "build",
                why: format!("rank {rank} sent an unreadable model of its node: {e}"),
            })?;
            reports.push(crate::model::Report {
                rank,
                node: *first_on.entry(world.node_of(rank)).or_insert(rank),
                machine,
            });
        }
        let agreed = crate::model::agree(&reports);
        if agreed.is_none() {
            tracing::warn!("no node calibrated its device: each rank calibrates its own");
        }
        Ok(agreed)
    }
}

/// Where one side of every message lives once laid out.
struct Layout {
    /// The channel's own buffer.
    buf: BufferId,
    /// The lent memory as buffers, per set.
    lent: Vec<Vec<BufferId>>,
    sends: Vec<Option<Range<usize>>>,
    windows: Vec<Option<WindowId>>,
    staged_sends: Vec<Option<Range<usize>>>,
    staged_windows: Vec<Option<WindowId>>,
    /// Per message, its stream on this side.
    sources: Vec<Vec<SourcePiece>>,
}

impl RdmaChannel {
    /// Opens the device, lays out the buffer, plans the writes and builds
    /// them; collective with every RDMA neighbour. `lent` is the memory
    /// the messages' spans name.
    pub(crate) fn build(
        world: &World,
        messages: &[RdmaSend],
        receives: &[RdmaRecv],
        lent: Vec<Vec<UserMemory>>,
        settings: &RdmaSettings,
        names: String,
    ) -> Result<RdmaChannel> {
        let wrap = |source: TransportError| HaloError::Rdma {
            neighbours: names.clone(),
            source: Box::new(source),
        };
        let dev = Device::open(&DeviceSelector::from_env().map_err(wrap)?).map_err(wrap)?;
        let max_sge = dev.caps().max_sge.clamp(1, MAX_GATHER) as usize;
        let mut b = RdmaExchangeBuilder::new(&dev).engines(settings.engines);
        // The sets this rank lent, or more where a peer lent more: a
        // writer that packs still lands in whichever set its peer names.
        let sets = messages
            .iter()
            .map(|m| m.twins.len() + 1)
            .fold(lent.len().max(1), usize::max);
        b.sets(sets);
        let layout = lay_out(&mut b, messages, receives, lent).map_err(|e| match e {
            LayoutError::Overflow => HaloError::Usage {
                op: "build",
                why: "the RDMA messages' bytes overflow the address space".into(),
            },
            LayoutError::Transport(t) => wrap(t),
        })?;
        let machine = machine(&dev, settings).map_err(wrap)?;
        let plan = sode_scheduler::plan(&pattern(messages, machine), settings.algorithm)
            .map_err(Box::new)?;
        let summary = format!(
            "{} on {} engines, simulated {:.1} us for a model of {:.3} GB/s per queue pair, {:.1} us per command{}",
            plan.algorithm, settings.engines, plan.simulated_us, machine.engine_gbps, machine.command_overhead_us,
            settings.model_source.as_ref().map(|s| format!(" ({s})")).unwrap_or_default()
        );
        let writes = plan_writes(&plan, messages, &layout.sources, max_sge)?;
        let ranges = SendRanges {
            packed: &layout.sends,
            staged: &layout.staged_sends,
        };
        let carriers = carriers_of(messages, ranges, &writes);
        for (j, w) in writes {
            if w.gather.is_empty() {
                b.write(w.write);
            } else {
                b.write_gather(w.write, &w.gather);
            }
            b.staged(Staged {
                src: layout.staged_sends[j]
                    .as_ref()
                    .map(|r| (layout.buf, r.start + w.at)),
                dst: messages[j].staging.map(|win| (WindowId(win), w.at)),
            });
            b.twins(&twins_of(&w.write, &messages[j], &layout.lent, sets));
        }
        let writes = b.build(world, settings.timeout).map_err(wrap)?;
        tracing::debug!(plan = %summary, "RDMA writes scheduled");
        Ok(RdmaChannel {
            writes,
            buf: layout.buf,
            sends: layout.sends,
            windows: layout.windows,
            staged_sends: layout.staged_sends,
            staged_windows: layout.staged_windows,
            memory: StartMemory::Set(0),
            carriers,
            names,
            summary,
        })
    }

    /// The schedule, for reports.
    pub(crate) fn summary(&self) -> &str {
        &self.summary
    }

    fn wrap(&self, source: TransportError) -> HaloError {
        HaloError::Rdma {
            neighbours: self.names.clone(),
            source: Box::new(source),
        }
    }
}

/// Largest unpacked window with two slots (as in `sode-shm`): with two,
/// the receiver grants each writer iteration `n + 1` when it starts `n`, so
/// the credit is off the critical path; above, the second slot's memory
/// costs more than the credit saves. Windows received in place (the
/// caller's halo) have one.
const TWO_SLOTS_MAX: usize = 128 << 10;

fn window_slots(len: usize) -> usize {
    if len <= TWO_SLOTS_MAX {
        2
    } else {
        1
    }
}

/// Most gather entries one write reads (fewer when the device allows
/// fewer): a longer list only moves the cost into the device's fetches.
const MAX_GATHER: u32 = 16;

enum LayoutError {
    Overflow,
    Transport(TransportError),
}

impl From<TransportError> for LayoutError {
    fn from(e: TransportError) -> Self {
        LayoutError::Transport(e)
    }
}

/// The channel's buffer (packed and staged sends first, then unpacked and
/// staging windows), the lent memory as buffers, the in-place windows over
/// it, and each message's stream on this side.
fn lay_out(
    b: &mut RdmaExchangeBuilder<'_>,
    messages: &[RdmaSend],
    receives: &[RdmaRecv],
    lent: Vec<Vec<UserMemory>>,
) -> std::result::Result<Layout, LayoutError> {
    // A message in place has its staging range too, of one slot.
    let packed = messages
        .iter()
        .map(|m| Some(m.len))
        .chain(receives.iter().map(|r| match r.into {
            Some(_) => Some(r.len),
            None => r.len.checked_mul(window_slots(r.len)),
        }))
        .try_fold(0usize, |total, len| total.checked_add(len?))
        .ok_or(LayoutError::Overflow)?;
    let buf = b.buffer(packed)?;
    let lent: Vec<Vec<BufferId>> = lent
        .into_iter()
        .map(|set| set.into_iter().map(|m| b.user_buffer(m)).collect())
        .collect();
    let first = lent.first().map_or(&[][..], Vec::as_slice);
    let mut at = 0;
    let mut sends = Vec::with_capacity(messages.len());
    let mut staged_sends = Vec::with_capacity(messages.len());
    let mut sources = Vec::with_capacity(messages.len());
    for m in messages {
        match &m.from {
            Some(spans) => {
                sends.push(None);
                staged_sends.push(Some(at..at + m.len));
                at += m.len;
                sources.push(
                    spans
                        .iter()
                        .map(|s| SourcePiece {
                            buffer: first[s.memory],
                            offset: s.offset,
                            len: s.len,
                        })
                        .collect(),
                );
            }
            None => {
                sends.push(Some(at..at + m.len));
                staged_sends.push(None);
                sources.push(vec![SourcePiece {
                    buffer: buf,
                    offset: at,
                    len: m.len,
                }]);
                at += m.len;
            }
        }
    }
    // Windows in the order `crate::windows::number` gives their numbers.
    let mut windows = Vec::with_capacity(receives.len());
    let mut staged_windows = Vec::with_capacity(receives.len());
    for r in receives {
        match &r.into {
            Some(spans) => {
                for s in spans {
                    b.window_in(first[s.memory], s.offset, s.len, &[r.peer])?;
                }
                windows.push(None);
                staged_windows.push(Some(b.window_in(buf, at, r.len, &[r.peer])?));
                at += r.len;
                for set in lent.iter().skip(1) {
                    for s in spans {
                        b.window_in(set[s.memory], s.offset, s.len, &[r.peer])?;
                    }
                }
            }
            None => {
                let slots = window_slots(r.len);
                windows.push(Some(b.window_in_slots(buf, at, r.len, slots, &[r.peer])?));
                staged_windows.push(None);
                at += r.len * slots;
            }
        }
    }
    Ok(Layout {
        buf,
        lent,
        sends,
        windows,
        staged_sends,
        staged_windows,
        sources,
    })
}

/// Where `write` (of message `m`) reads and lands in a start on each of
/// `sets` lent sets beyond the first: the same piece of this rank's set
/// (as built where it lent fewer, or packs), the same run's window of the
/// peer's set (as built where the peer unpacks).
fn twins_of(
    write: &sode_transport::Write,
    m: &RdmaSend,
    lent: &[Vec<BufferId>],
    sets: usize,
) -> Vec<Twin> {
    let first = lent.first().map_or(&[][..], Vec::as_slice);
    let piece = first.iter().position(|&b| b == write.src);
    let run = write.window.0.checked_sub(m.target);
    (1..sets)
        .map(|k| Twin {
            src: piece.and_then(|p| Some(*lent.get(k)?.get(p)?)),
            dst: m
                .twins
                .get(k - 1)
                .zip(run)
                .map(|(&first, run)| WindowId(first + run)),
        })
        .collect()
}

/// Where each message's bytes lie in the channel's buffer: packed, or
/// staged (read in place, but for a staged start); `None` where not.
#[derive(Clone, Copy)]
struct SendRanges<'a> {
    packed: &'a [Option<Range<usize>>],
    staged: &'a [Option<Range<usize>>],
}

/// Per message, the writes (numbered as commands in the order given) that
/// carry it from the channel's buffer at `sends`, or, for a message read
/// in place, from its staging range in a staged start (`staged_sends`;
/// only a staged start moves part of such a message).
fn carriers_of(
    messages: &[RdmaSend],
    sends: SendRanges<'_>,
    writes: &[(usize, StreamWrite)],
) -> Vec<Carriers> {
    let SendRanges {
        packed: sends,
        staged: staged_sends,
    } = sends;
    let mut carriers: Vec<Carriers> = messages
        .iter()
        .map(|m| Carriers {
            writes: Vec::new(),
            carried: m.len,
        })
        .collect();
    for (command, (j, w)) in writes.iter().enumerate() {
        let range_start = match (&sends[*j], &staged_sends[*j]) {
            (Some(range), _) if w.gather.is_empty() => w.write.src_offset - range.start,
            (None, Some(_)) => w.at,
            _ => continue,
        };
        carriers[*j].writes.push(Carrier {
            command,
            range_start,
            len: w.write.len,
        });
    }
    carriers
}

impl Carriers {
    /// Each write's bytes when the message carries its first `bytes`.
    fn lens(&self, bytes: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.writes
            .iter()
            .map(move |w| (w.command, bytes.saturating_sub(w.range_start).min(w.len)))
    }
}

/// Every write of the plan, with the message it carries: each piece of
/// each put becomes the writes that carry that range of the message's
/// stream into the peer's windows.
fn plan_writes(
    plan: &sode_scheduler::Plan,
    messages: &[RdmaSend],
    sources: &[Vec<SourcePiece>],
    max_sge: usize,
) -> Result<Vec<(usize, StreamWrite)>> {
    let pieces = plan_pieces(plan, |id| messages.get(id as usize).map(|m| m.len))?;
    let mut out = Vec::new();
    for p in pieces {
        let j = p.put as usize;
        let m = &messages[j];
        let targets: Vec<TargetWindow> = m
            .target_runs
            .iter()
            .enumerate()
            .map(|(k, &len)| TargetWindow {
                window: WindowId(m.target + k),
                len,
            })
            .collect();
        let writes = stream_writes(m.peer, p.engine, &sources[j], &targets, p.range, max_sge)
            .ok_or_else(|| HaloError::Plan {
                why: format!(
                    "message {j} to rank {} has {} bytes, but its pieces or the peer's windows do not cover them",
                    m.peer, m.len
                ),
            })?;
        out.extend(writes.into_iter().map(|w| (j, w)));
    }
    Ok(out)
}

/// The model the writes are scheduled for.
fn machine(dev: &Device, s: &RdmaSettings) -> sode_transport::Result<Machine> {
    Ok(match s.model {
        Model::Calibrated => machine_of(&sode_transport::calibrate(dev, s.engines)?),
        Model::KComputer => Machine {
            engines: s.engines,
            ..Machine::K_COMPUTER
        },
        Model::Given(m) => Machine {
            engines: s.engines,
            ..m
        },
    })
}

/// Every message as a put, routed in dimension order: a link per axis it
/// crosses.
fn pattern(messages: &[RdmaSend], machine: Machine) -> Pattern {
    Pattern {
        machine,
        requests: messages
            .iter()
            .enumerate()
            .map(|(j, m)| {
                let mut links: Vec<String> = m
                    .offset
                    .iter()
                    .enumerate()
                    .filter(|(_, &o)| o != 0)
                    .map(|(a, &o)| {
                        format!("{}{}", ['x', 'y', 'z'][a], if o > 0 { '+' } else { '-' })
                    })
                    .collect();
                if links.is_empty() {
                    // No direction (an all-to-all, links given without
                    // offsets).
                    links.push(UNDIRECTED_LINK.into());
                }
                Request {
                    id: j as u32,
                    dest: m.peer as u32,
                    direction: direction_of(&m.offset),
                    links,
                    bytes: m.len as u64,
                }
            })
            .collect(),
    }
}

/// The link that puts with no direction in a process grid all count as
/// taking: the scheduler then assumes they share one link, the
/// conservative guess.
const UNDIRECTED_LINK: &str = "x+";

/// The scheduler's name for a direction (`x+y-`), [`UNDIRECTED_LINK`] for
/// none.
fn direction_of(offset: &[i32]) -> String {
    let s = crate::decomp::axes_name(offset);
    if s.is_empty() {
        UNDIRECTED_LINK.into()
    } else {
        s
    }
}

impl Channel for RdmaChannel {
    fn locality(&self) -> Locality {
        Locality::Rdma
    }

    fn send_buf(&mut self, msg: usize) -> Result<&mut [u8]> {
        let range = match (&self.sends[msg], &self.staged_sends[msg]) {
            (Some(range), _) => range.clone(),
            (None, Some(range)) if self.memory == StartMemory::Staged => range.clone(),
            _ => return Err(in_place("send_buf", "read in place from lent memory")),
        };
        match self.writes.buffer_mut(self.buf) {
            Ok(all) => Ok(&mut all[range]),
            Err(e) => Err(HaloError::Rdma {
                neighbours: self.names.clone(),
                source: Box::new(e),
            }),
        }
    }

    fn recv_buf(&self, msg: usize) -> Result<&[u8]> {
        let window = match (self.windows[msg], self.staged_windows[msg]) {
            (Some(window), _) => window,
            (None, Some(window)) if self.memory == StartMemory::Staged => window,
            _ => return Err(in_place("recv_buf", "received in place into lent memory")),
        };
        self.writes.window(window).map_err(|e| self.wrap(e))
    }

    /// Shortens the writes of a packed message to its first `bytes` (each
    /// write keeps its place; those past the end write nothing but still
    /// carry their chain's immediate). A message read in place is cut in
    /// its staged writes only: until it is carried whole again, only
    /// staged starts may go (the transport refuses the others).
    fn carry_send(&mut self, msg: usize, bytes: usize) -> Result<()> {
        let Some(c) = self.carriers.get_mut(msg) else {
            return Ok(());
        };
        if c.carried == bytes || c.writes.is_empty() {
            return Ok(());
        }
        for (command, len) in c.lens(bytes) {
            if let Err(e) = self.writes.carry(command, len) {
                return Err(HaloError::Rdma {
                    neighbours: self.names.clone(),
                    source: Box::new(e),
                });
            }
        }
        c.carried = bytes;
        Ok(())
    }

    fn set_shape(&mut self, shape: u8) -> Result<()> {
        self.writes.set_shape(shape).map_err(|e| self.wrap(e))
    }

    fn set_memory(&mut self, memory: StartMemory) -> Result<()> {
        let on = match memory {
            StartMemory::Set(k) => sode_transport::StartMemory::Set(k),
            StartMemory::Staged => sode_transport::StartMemory::Staged,
        };
        self.writes.set_memory(on).map_err(|e| self.wrap(e))?;
        self.memory = memory;
        Ok(())
    }

    fn start(&mut self) -> Result<()> {
        self.writes.start().map_err(|e| self.wrap(e))
    }

    fn test(&mut self) -> Result<bool> {
        self.writes.test().map_err(|e| self.wrap(e))
    }

    fn park(&mut self, until: std::time::Instant) -> Option<Result<bool>> {
        if !self.writes.parks() {
            return None;
        }
        Some(self.writes.park(until).map_err(|e| self.wrap(e)))
    }

    fn queue_pairs(&self) -> usize {
        self.writes.queue_pairs()
    }

    fn outstanding(&self) -> String {
        format!(
            "RDMA with {}: {}",
            self.names,
            self.writes.outstanding_report()
        )
    }
}

fn in_place(op: &'static str, how: &str) -> HaloError {
    HaloError::Usage {
        op,
        why: format!("this message is {how}: it has no buffer of its own"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sode_transport::Write;

    fn send(len: usize, from: Option<Vec<Span>>) -> RdmaSend {
        RdmaSend {
            peer: 1,
            len,
            target: 0,
            target_runs: vec![len],
            staging: None,
            twins: Vec::new(),
            from,
            offset: Vec::new(),
        }
    }

    fn write(
        j: usize,
        src_offset: usize,
        len: usize,
        gather: Vec<(usize, usize)>,
    ) -> (usize, StreamWrite) {
        let write = Write {
            peer: 1,
            engine: 0,
            src: BufferId(0),
            src_offset,
            window: WindowId(0),
            dst_offset: 0,
            len,
        };
        let at = 0;
        (j, StreamWrite { write, gather, at })
    }

    #[test]
    fn a_packed_or_staged_message_is_cut_write_by_write_and_one_read_in_place_is_not() {
        // Message 0: 100 bytes at 50 of the buffer, in two writes (on two
        // engines); message 1: read in place (a gather); message 2: 30
        // bytes at 150, one write.
        let in_place = vec![Span {
            memory: 0,
            offset: 0,
            len: 40,
        }];
        // Message 3: read in place in two writes (one per run), with a
        // staging range for staged starts.
        let messages = [
            send(100, None),
            send(40, Some(in_place.clone())),
            send(30, None),
            send(40, Some(in_place)),
        ];
        let sends = [Some(50..150), None, Some(150..180), None];
        let staged_sends = [None, None, None, Some(180..220)];
        let (mut first_run, mut second_run) =
            (write(3, 0, 20, Vec::new()), write(3, 100, 20, Vec::new()));
        (first_run.1.at, second_run.1.at) = (0, 20);
        let writes = [
            write(0, 50, 60, Vec::new()),
            write(1, 0, 40, vec![(0, 20), (100, 20)]),
            write(0, 110, 40, Vec::new()),
            write(2, 150, 30, Vec::new()),
            first_run,
            second_run,
        ];
        let ranges = SendRanges {
            packed: &sends,
            staged: &staged_sends,
        };
        let c = carriers_of(&messages, ranges, &writes);
        let lens = |m: usize, bytes: usize| c[m].lens(bytes).collect::<Vec<_>>();
        assert_eq!(lens(0, 100), [(0, 60), (2, 40)], "whole");
        assert_eq!(lens(0, 70), [(0, 60), (2, 10)]);
        assert_eq!(lens(0, 60), [(0, 60), (2, 0)]);
        assert_eq!(lens(0, 5), [(0, 5), (2, 0)]);
        assert_eq!(lens(0, 0), [(0, 0), (2, 0)]);
        assert!(c[1].writes.is_empty(), "read in place, never staged: whole");
        assert_eq!(lens(2, 12), [(3, 12)]);
        assert_eq!(c[2].carried, 30);
        // Staged, cut by each write's place in the stream.
        assert_eq!(lens(3, 40), [(4, 20), (5, 20)]);
        assert_eq!(lens(3, 25), [(4, 20), (5, 5)]);
        assert_eq!(lens(3, 8), [(4, 8), (5, 0)]);
    }
}
