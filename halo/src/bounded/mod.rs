//! Bounded connections with forwarding, after MC-MPI: each rank connects
//! to at most `bound` others, and a message for a rank it is not connected
//! to travels along the routes of a capped bounding graph
//! ([`sode_scheduler::placement::capped_graph`]), forwarded by the ranks
//! between.
//!
//! An exchange runs in rounds over one [`LinkExchange`] whose links are
//! the connections some route uses (no connection is made that none
//! does): in round k every message takes its k-th hop. Before a round
//! starts, each rank copies into its connections' send bytes its own
//! messages (round 1) or what arrived for forwarding in the round before,
//! through a forwarding buffer; after it, it hands the messages that end
//! there to the caller. A hop never waits on anything but its previous
//! hop, so the rounds cannot deadlock, whatever the routes.

mod plan;

use sode_job::Deadline;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use sode_job::{Lifecycle, World};
use sode_scheduler::placement::{capped_graph, default_bound};

use crate::distance::{gather, layout_of, measure_round_trips, Numa, RoundTrip};
use crate::error::{HaloError, Result};
use crate::links::{check_links, Link, LinkExchange, Message};
use crate::settings::Transport;
use plan::{Declared, RankPlan, Source};

/// The tag of the messages between connected ranks.
const CONNECTION_TAG: u32 = 0x50de;
/// Largest job planned: the routes are a dense table of ranks squared.
const MAX_RANKS: usize = 1024;
/// What a hop weighs in the routes beside the measured distances (1 inside
/// a NUMA node, about 10 between nodes): more than any path's distances.
const HOP: f64 = 1e6;
/// The seed of the graph's random draws: the same on every rank.
const SEED: u64 = 0x50de;
/// The bound on connections per rank, when set (overridden by
/// [`BoundedExchangeBuilder::bound`]).
pub const BOUND_VAR: &str = "SODE_MAX_CONNECTIONS";
/// Pairs of ranks that may not connect directly, as `1-2,3-7` (added to
/// [`BoundedExchangeBuilder::forbid`]).
pub const FORBID_VAR: &str = "SODE_NO_DIRECT";

/// What every rank tells the job at build.
#[derive(serde::Serialize, serde::Deserialize)]
struct Card {
    sends: Vec<Declared>,
    recvs: Vec<Declared>,
    bound: Option<usize>,
    forbidden: Vec<(usize, usize)>,
    /// What is wrong with this rank's request, found before the allgather.
    problem: Option<String>,
    numa: Numa,
    round_trips: std::result::Result<Vec<RoundTrip>, String>,
}

/// Builds a [`BoundedExchange`]; collective over the job.
#[derive(Debug)]
pub struct BoundedExchangeBuilder<'w> {
    world: &'w World,
    links: Vec<Link>,
    bound: Option<usize>,
    forbidden: Vec<(usize, usize)>,
    /// A setting that did not parse, reported at build.
    bad_setting: Option<String>,
    transport: Transport,
    engines: usize,
    timeout: Duration,
}

impl BoundedExchangeBuilder<'_> {
    /// At most `bound` connections per rank (default: `SODE_MAX_CONNECTIONS`,
    /// else MC-MPI's O(log n), [`default_bound`]). Every rank must give the
    /// same.
    pub fn bound(mut self, bound: usize) -> Self {
        self.bound = Some(bound);
        self
    }

    /// Ranks `a` and `b` may not connect directly (a firewall between
    /// them): their messages are forwarded. Every rank must give the same
    /// pairs.
    pub fn forbid(mut self, a: usize, b: usize) -> Self {
        self.forbidden.push((a.min(b), a.max(b)));
        self
    }

    /// Which channels the connections use (default [`Transport::Auto`]).
    pub fn transport(mut self, t: Transport) -> Self {
        self.transport = t;
        self
    }

    /// RDMA queue pairs per connection (default 1, so that the queue pairs
    /// of a rank are at most the bound).
    pub fn engines(mut self, e: usize) -> Self {
        self.engines = e;
        self
    }

    /// Deadline for setting up (default 60 s).
    pub fn setup_timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// This rank's card: its messages, settings, and what is wrong with
    /// them, if anything (sent even then, so that every rank fails alike).
    fn card(&self) -> Card {
        let me = self.world.rank();
        let n = self.world.size();
        let mut problem = self
            .bad_setting
            .clone()
            .or_else(|| check_links(&self.links, n).err());
        if let Some(&(a, b)) = self.forbidden.iter().find(|&&(a, b)| b >= n || a == b) {
            problem.get_or_insert(format!(
                "the pair {a}-{b} forbidden: name two different ranks of the {n}"
            ));
        }
        let declared = |outgoing: bool| -> Vec<Declared> {
            let side = |l: &Link| if outgoing { l.send } else { l.recv };
            self.links
                .iter()
                .filter_map(|l| {
                    side(l).map(|m| Declared {
                        from: if outgoing { me } else { l.peer },
                        to: if outgoing { l.peer } else { me },
                        tag: m.tag,
                        len: m.len,
                    })
                })
                .collect()
        };
        let mut forbidden = self.forbidden.clone();
        forbidden.sort_unstable();
        forbidden.dedup();
        Card {
            sends: declared(true),
            recvs: declared(false),
            bound: self.bound,
            forbidden,
            problem,
            numa: Numa::local(),
            round_trips: measure_round_trips(self.world, self.timeout)
                .map_err(|e| sode_job::diag::chain(&e).to_string()),
        }
    }

    /// Plans the routes and connects the connections they use; collective.
    ///
    /// # Errors
    ///
    /// On every rank alike: [`HaloError::Usage`] when the ranks' links or
    /// bounds disagree or no plan fits the bound; [`HaloError::Barrier`]
    /// when the job's collectives fail or time out; otherwise as
    /// [`LinkExchangeBuilder::build`](crate::LinkExchangeBuilder::build)
    /// for the connections it keeps.
    pub fn build(self) -> Result<BoundedExchange> {
        let usage = |why: String| HaloError::Usage {
            op: "BoundedExchange::build",
            why,
        };
        let n = self.world.size();
        let me = self.world.rank();
        let cards: Vec<Card> = gather(self.world, &self.card(), self.timeout, "BoundedExchange")?;
        let agreed = agree(&cards).map_err(usage)?;
        let layout = layout_of(
            self.world,
            cards
                .iter()
                .map(|c| (c.numa.clone(), c.round_trips.clone().unwrap_or_default())),
        );
        // Every hop is a round of the whole exchange: routes with the fewest
        // hops first, the nearest (measured) among those.
        let latency: Vec<Vec<f64>> = (layout.matrix().into_iter())
            .map(|row| row.into_iter().map(|d| HOP + d).collect())
            .collect();
        let mut traffic = vec![vec![0.0; n]; n];
        for m in &agreed.messages {
            traffic[m.from][m.to] += m.len as f64;
        }
        let forbidden = &agreed.forbidden;
        let allowed = |a: usize, b: usize| !forbidden.contains(&(a.min(b), a.max(b)));
        let bound = agreed.bound.unwrap_or_else(|| default_bound(n));
        let graph = capped_graph(&latency, &traffic, &allowed, bound, SEED).map_err(|e| {
            usage(format!(
                "no graph of at most {bound} connections per rank: {e}"
            ))
        })?;
        let index = |outgoing: bool| -> HashMap<(usize, u32), usize> {
            let side = |l: &Link| if outgoing { l.send } else { l.recv };
            (self.links.iter().enumerate())
                .filter_map(|(i, l)| side(l).map(|m| ((l.peer, m.tag), i)))
                .collect()
        };
        let plan =
            plan::plan(me, &agreed.messages, &graph, &index(true), &index(false)).map_err(usage)?;
        self.connect(plan, bound)
    }

    /// Builds the exchange of the planned connections.
    fn connect(self, plan: RankPlan, bound: usize) -> Result<BoundedExchange> {
        let mut link_of = HashMap::new();
        let links: Vec<Link> = (plan.connections.iter().enumerate())
            .map(|(i, (&peer, c))| {
                link_of.insert(peer, i);
                let message = |len| {
                    (len > 0).then_some(Message {
                        len,
                        tag: CONNECTION_TAG,
                    })
                };
                Link {
                    peer,
                    send: message(c.send),
                    recv: message(c.recv),
                    offset: Vec::new(),
                    name: format!("rank {peer}"),
                }
            })
            .collect();
        let inner = LinkExchange::builder(self.world, links)
            .transport(self.transport)
            .engines(self.engines)
            .setup_timeout(self.timeout)
            .build()?;
        let buffer = |m: Option<Message>| vec![0u8; m.map_or(0, |m| m.len)];
        Ok(BoundedExchange {
            sends: self.links.iter().map(|l| buffer(l.send)).collect(),
            recvs: self.links.iter().map(|l| buffer(l.recv)).collect(),
            staging: vec![0u8; plan.staging],
            inner,
            link_of,
            plan,
            bound,
            round: 0,
            lifecycle: Lifecycle::Idle,
            job: self.world.clone(),
            links: self.links,
        })
    }
}

/// The job's messages and settings, once every rank's card agrees.
struct Agreed {
    messages: Vec<Declared>,
    bound: Option<usize>,
    forbidden: Vec<(usize, usize)>,
}

/// Checks the cards alike on every rank: no rank's problem, the same
/// settings everywhere, every message sent received as declared.
fn agree(cards: &[Card]) -> std::result::Result<Agreed, String> {
    let n = cards.len();
    if n > MAX_RANKS {
        return Err(format!(
            "{n} ranks: bounded connections are planned for up to {MAX_RANKS} (the routes are a table of ranks squared)"
        ));
    }
    for (r, c) in cards.iter().enumerate() {
        if let Some(p) = &c.problem {
            return Err(format!("rank {r}: {p}"));
        }
        if let Err(e) = &c.round_trips {
            return Err(format!(
                "rank {r} could not measure its node's round trips: {e}"
            ));
        }
        if (c.bound, &c.forbidden) != (cards[0].bound, &cards[0].forbidden) {
            return Err(format!(
                "rank {r} asked for a bound of {:?} and forbade {:?}, rank 0 for {:?} and {:?}: every rank must give the same",
                c.bound, c.forbidden, cards[0].bound, cards[0].forbidden
            ));
        }
    }
    let mut expected: HashMap<(usize, usize, u32), usize> = HashMap::new();
    for m in cards.iter().flat_map(|c| &c.recvs) {
        expected.insert((m.from, m.to, m.tag), m.len);
    }
    let mut messages = Vec::new();
    for m in cards.iter().flat_map(|c| &c.sends) {
        match expected.remove(&(m.from, m.to, m.tag)) {
            Some(len) if len == m.len => messages.push(*m),
            Some(len) => {
                return Err(format!(
                    "rank {} sends rank {} {} bytes with tag {}, which expects {len}",
                    m.from, m.to, m.len, m.tag
                ))
            }
            None => {
                return Err(format!(
                    "rank {} sends rank {} tag {}, which receives no such message",
                    m.from, m.to, m.tag
                ))
            }
        }
    }
    if let Some((&(from, to, tag), _)) = expected.iter().min() {
        return Err(format!(
            "rank {to} expects tag {tag} from rank {from}, which sends no such message"
        ));
    }
    Ok(Agreed {
        messages,
        bound: cards[0].bound,
        forbidden: cards[0].forbidden.clone(),
    })
}

/// The bound and forbidden pairs the environment sets, and what of it
/// does not parse.
struct Settings {
    bound: Option<usize>,
    forbidden: Vec<(usize, usize)>,
    bad: Option<String>,
}

/// Reads the settings through `var` (the environment's, in use).
fn settings(var: impl Fn(&str) -> Option<String>) -> Settings {
    let mut bad = None;
    let bound = var(BOUND_VAR).and_then(|v| match v.trim().parse() {
        Ok(b) => Some(b),
        Err(_) => {
            bad = Some(format!(
                "{BOUND_VAR}={v}: give a number of connections per rank, such as 3"
            ));
            None
        }
    });
    let mut forbidden = Vec::new();
    let text = var(FORBID_VAR).unwrap_or_default();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let parsed = pair
            .split_once('-')
            .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)));
        match parsed {
            Some((a, b)) => forbidden.push((usize::min(a, b), usize::max(a, b))),
            None => {
                bad.get_or_insert(format!(
                    "{FORBID_VAR}: {pair:?} is not a pair of ranks: give pairs as 1-2,3-7"
                ));
            }
        }
    }
    Settings {
        bound,
        forbidden,
        bad,
    }
}

/// A persistent exchange over at most a bound of connections per rank,
/// the other messages forwarded: fill [`send_buf`](Self::send_buf)s,
/// [`start`](Self::start), [`wait`](Self::wait), read
/// [`recv_buf`](Self::recv_buf)s. Forwarding ranks forward inside their
/// own `wait` (or [`test`](Self::test)), so every rank of the job runs
/// every exchange.
#[derive(Debug)]
pub struct BoundedExchange {
    links: Vec<Link>,
    sends: Vec<Vec<u8>>,
    recvs: Vec<Vec<u8>>,
    /// The forwarding buffer: one round's forwarded hops, between the
    /// round that brought them and the round that takes them on.
    staging: Vec<u8>,
    inner: LinkExchange,
    /// The inner link of each connected peer.
    link_of: HashMap<usize, usize>,
    plan: RankPlan,
    bound: usize,
    /// Rounds of this exchange complete.
    round: usize,
    lifecycle: Lifecycle,
    job: World,
}

impl BoundedExchange {
    /// A builder for `links` (as for [`LinkExchange`]) over the ranks of
    /// `world`.
    pub fn builder(world: &World, links: Vec<Link>) -> BoundedExchangeBuilder<'_> {
        let set = settings(|name| std::env::var(name).ok());
        BoundedExchangeBuilder {
            world,
            links,
            bound: set.bound,
            forbidden: set.forbidden,
            bad_setting: set.bad,
            transport: Transport::Auto,
            engines: 1,
            timeout: Duration::from_secs(60),
        }
    }

    /// The links, in the order they were given.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.job.rank()
    }

    /// The bound on connections per rank the job planned for.
    pub fn bound(&self) -> usize {
        self.bound
    }

    /// The ranks this rank is connected to, and the channel of each.
    pub fn connections(&self) -> BTreeMap<usize, &'static str> {
        let by_link = self.inner.localities();
        (self.inner.links().iter().zip(by_link))
            .map(|(l, loc)| (l.peer, loc.name()))
            .collect()
    }

    /// RDMA queue pairs this rank holds, counted on its RDMA channel.
    pub fn queue_pairs(&self) -> usize {
        self.inner.queue_pairs()
    }

    /// Rounds per exchange: the longest route of the job, in hops.
    pub fn rounds(&self) -> usize {
        self.plan.rounds
    }

    /// The routes, through other ranks, of the messages this rank sends,
    /// receives or forwards (`3 -> 5 -> 7 (tag 1)`).
    pub fn routes(&self) -> Vec<String> {
        self.plan.routes.iter().map(ToString::to_string).collect()
    }

    fn no_message(&self, op: &'static str, link: usize, what: &str) -> HaloError {
        HaloError::Usage {
            op,
            why: match self.links.get(link) {
                Some(l) => format!("link {link} ({}) {what}", l.name),
                None => format!("there is no link {link} ({} links)", self.links.len()),
            },
        }
    }

    /// Link `link`'s send buffer, to fill before [`start`](Self::start).
    ///
    /// # Errors
    ///
    /// [`HaloError::Usage`] for a link that does not exist or sends
    /// nothing; [`HaloError::State`] while an exchange is in flight or
    /// after a failure.
    pub fn send_buf(&mut self, link: usize) -> Result<&mut [u8]> {
        self.lifecycle.require_idle("send_buf")?;
        match self.links.get(link).and_then(|l| l.send) {
            Some(_) => Ok(&mut self.sends[link]),
            None => Err(self.no_message("send_buf", link, "sends nothing")),
        }
    }

    /// Link `link`'s receive buffer, complete after [`wait`](Self::wait).
    ///
    /// # Errors
    ///
    /// [`HaloError::Usage`] for a link that does not exist or receives
    /// nothing; [`HaloError::State`] while an exchange is in flight or
    /// after a failure.
    pub fn recv_buf(&self, link: usize) -> Result<&[u8]> {
        self.lifecycle.require_idle("recv_buf")?;
        match self.links.get(link).and_then(|l| l.recv) {
            Some(_) => Ok(&self.recvs[link]),
            None => Err(self.no_message("recv_buf", link, "receives nothing")),
        }
    }

    /// Starts an exchange: its first round; never blocks.
    ///
    /// # Errors
    ///
    /// [`HaloError::State`] while an exchange is in flight or after a
    /// failure; [`HaloError::Forwarding`] when the first round cannot
    /// start.
    pub fn start(&mut self) -> Result<()> {
        self.lifecycle.require_idle("start")?;
        self.round = 0;
        self.lifecycle.start();
        if self.plan.rounds > 0 {
            self.start_round()?;
        }
        Ok(())
    }

    /// Fills the connections' send bytes for the round `self.round` and
    /// starts it.
    fn start_round(&mut self) -> Result<()> {
        let r = self.round;
        // Forwarded hops leave the receive bytes for the forwarding buffer
        // first: the round's sends may share their memory.
        for f in &self.plan.feeds[r] {
            if let Source::Forward {
                peer,
                offset,
                staged,
            } = f.from
            {
                let from = self.inner.recv_buf(self.link_of[&peer])?;
                self.staging[staged..staged + f.len].copy_from_slice(&from[offset..offset + f.len]);
            }
        }
        for f in &self.plan.feeds[r] {
            let bytes = match f.from {
                Source::User { link } => &self.sends[link][..],
                Source::Forward { staged, .. } => &self.staging[staged..staged + f.len],
            };
            let to = self.inner.send_buf(self.link_of[&f.peer])?;
            to[f.offset..f.offset + f.len].copy_from_slice(bytes);
        }
        let started = self.inner.start();
        started.map_err(|e| self.broken(e))
    }

    /// Hands over the messages that ended in the round just complete, and
    /// starts the next, if any; true when the exchange is complete.
    fn finish_round(&mut self) -> Result<bool> {
        for d in self.plan.deliveries.get(self.round).into_iter().flatten() {
            let from = self.inner.recv_buf(self.link_of[&d.peer])?;
            self.recvs[d.link].copy_from_slice(&from[d.offset..d.offset + d.len]);
        }
        self.round += 1;
        if self.round < self.plan.rounds {
            self.start_round()?;
            return Ok(false);
        }
        for &(s, r, len) in &self.plan.locals {
            let (sends, recvs) = (&self.sends, &mut self.recvs);
            recvs[r][..len].copy_from_slice(&sends[s][..len]);
        }
        self.lifecycle.complete();
        Ok(true)
    }

    /// Progresses without blocking (forwarding what arrived); true once
    /// every message has arrived.
    ///
    /// # Errors
    ///
    /// As [`wait`](Self::wait), but never a timeout.
    pub fn test(&mut self) -> Result<bool> {
        self.lifecycle.require_in_flight("test")?;
        if self.plan.rounds == 0 {
            return self.finish_round();
        }
        loop {
            let done = self.inner.test().map_err(|e| self.broken(e))?;
            if !done {
                return Ok(false);
            }
            // Complete: the inner wait returns at once and frees its buffers.
            let waited = self.inner.wait(Instant::now() + Duration::from_secs(1));
            waited.map_err(|e| self.broken(e))?;
            if self.finish_round()? {
                return Ok(true);
            }
        }
    }

    /// Runs every round (forwarding for other ranks) until every message
    /// has arrived, or `deadline` ([`HaloError::Forwarding`] with a
    /// timeout, after which `wait` may be called again).
    ///
    /// `deadline` is a timeout (a `Duration`, from when the wait begins) or
    /// an `Instant`; time this process is stopped does not count against it
    /// ([`Deadline`]).
    ///
    /// # Errors
    ///
    /// [`HaloError::Forwarding`] naming the round and what broke (a
    /// timeout among them, after which `wait` may be called again);
    /// [`HaloError::State`] without an exchange in flight.
    pub fn wait(&mut self, deadline: impl Into<Deadline>) -> Result<()> {
        let mut deadline = deadline.into();
        self.lifecycle.require_in_flight("wait")?;
        if self.plan.rounds == 0 {
            self.finish_round()?;
            return Ok(());
        }
        loop {
            let waited = self.inner.wait_by(&mut deadline);
            waited.map_err(|e| self.broken(e))?;
            if self.finish_round()? {
                return Ok(());
            }
        }
    }

    /// `e` in its round, naming the routes through a rank that died.
    fn broken(&mut self, e: HaloError) -> HaloError {
        let dead = dead_rank(&e).or_else(|| self.job.failure().map(|f| f.rank));
        let routes: Vec<String> = (self.plan.routes.iter())
            .filter(|r| dead.is_some_and(|d| r.path[1..r.path.len() - 1].contains(&d)))
            .map(ToString::to_string)
            .collect();
        let broken = match dead {
            Some(d) if !routes.is_empty() => {
                format!(": rank {d}, which died, forwarded {}", routes.join(", "))
            }
            Some(d) => format!(": rank {d} died (it forwarded no message of this rank's)"),
            None => String::new(),
        };
        if !matches!(e, HaloError::Timeout { .. }) {
            self.lifecycle.fail(&e);
        }
        HaloError::Forwarding {
            round: self.round + 1,
            rounds: self.plan.rounds,
            broken,
            source: Box::new(e),
        }
    }
}

/// The rank `e` says died: the job's verdict, or a channel that saw its
/// peer's process or connection go before the verdict came.
fn dead_rank(e: &HaloError) -> Option<usize> {
    use std::io::ErrorKind;
    match e {
        HaloError::JobFailed { failure, .. } => Some(failure.rank),
        HaloError::Shm { source, .. } => match **source {
            sode_shm::ShmError::PeerDied { peer, .. } => Some(peer),
            _ => None,
        },
        #[cfg(feature = "rdma")]
        HaloError::Rdma { source, .. } => match **source {
            sode_transport::TransportError::PeerDied { peer, .. } => Some(peer),
            _ => None,
        },
        HaloError::Tcp { rank, source, .. } => matches!(
            source.kind(),
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe
        )
        .then_some(*rank),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bound: &str, pairs: &str) -> Settings {
        let (bound, pairs) = (bound.to_string(), pairs.to_string());
        settings(move |name| match name {
            BOUND_VAR => Some(bound.clone()),
            FORBID_VAR => Some(pairs.clone()),
            _ => None,
        })
    }

    #[test]
    fn settings_parse_and_name_what_does_not() {
        let s = read(" 3 ", "1-2, 7-3,");
        assert_eq!(
            (s.bound, s.forbidden, s.bad),
            (Some(3), vec![(1, 2), (3, 7)], None)
        );
        let s = read("three", "");
        assert!(s
            .bad
            .unwrap()
            .contains("SODE_MAX_CONNECTIONS=three: give a number"));
        let s = read("2", "1-2,4");
        assert!(s.bad.unwrap().contains("\"4\" is not a pair of ranks"));
        let s = settings(|_| None);
        assert_eq!((s.bound, s.forbidden.len(), s.bad), (None, 0, None));
    }

    #[test]
    fn cards_that_disagree_fail_alike() {
        let card = |sends: Vec<Declared>, recvs: Vec<Declared>| Card {
            sends,
            recvs,
            bound: Some(2),
            forbidden: Vec::new(),
            problem: None,
            numa: Numa::default(),
            round_trips: Ok(Vec::new()),
        };
        let m = |from, to, len| Declared {
            from,
            to,
            tag: 4,
            len,
        };
        let ok = [
            card(vec![m(0, 1, 8)], vec![]),
            card(vec![], vec![m(0, 1, 8)]),
        ];
        assert_eq!(agree(&ok).unwrap().messages, vec![m(0, 1, 8)]);
        let unreceived = [card(vec![m(0, 1, 8)], vec![]), card(vec![], vec![])];
        let e = agree(&unreceived).err().unwrap();
        assert!(
            e.contains("rank 0 sends rank 1 tag 4, which receives no such message"),
            "{e}"
        );
        let unsent = [card(vec![], vec![]), card(vec![], vec![m(0, 1, 8)])];
        let e = agree(&unsent).err().unwrap();
        assert!(
            e.contains("rank 1 expects tag 4 from rank 0, which sends no such message"),
            "{e}"
        );
    }
}
