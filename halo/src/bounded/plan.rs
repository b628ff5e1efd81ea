//! Which messages travel over which connection in which round, for one
//! rank: computed alike on every rank from the job's messages and the
//! capped bounding graph. No I/O.

use std::collections::{BTreeMap, HashMap};

use sode_scheduler::placement::BoundingGraph;

/// One message of the job, as its sender declared it and its receiver
/// confirmed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Declared {
    pub(crate) from: usize,
    pub(crate) to: usize,
    pub(crate) tag: u32,
    pub(crate) len: usize,
}

/// Where a round's send bytes come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The caller's send buffer of link `link` (the first hop).
    User { link: usize },
    /// What arrived from `peer` in the round before, at `offset` (a hop
    /// forwarded): staged at `staged` of the forwarding buffer first.
    Forward {
        peer: usize,
        offset: usize,
        staged: usize,
    },
}

/// A copy into the send bytes of the connection to `peer`, before a round
/// starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Feed {
    pub(crate) from: Source,
    pub(crate) peer: usize,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

/// A message's last hop: `len` bytes at `offset` of what `peer` sent this
/// round, for the caller's receive buffer of link `link`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Delivery {
    pub(crate) peer: usize,
    pub(crate) offset: usize,
    pub(crate) link: usize,
    pub(crate) len: usize,
}

/// The bytes per round each way on one connection: the largest round's
/// (every round sends the same, pre-built, messages).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Connection {
    pub(crate) send: usize,
    pub(crate) recv: usize,
}

/// A message of this rank's that passes other ranks, or one it forwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    /// The ranks it passes, sender first and receiver last.
    pub(crate) path: Vec<usize>,
    pub(crate) tag: u32,
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path: Vec<String> = self.path.iter().map(usize::to_string).collect();
        write!(f, "{} (tag {})", path.join(" -> "), self.tag)
    }
}

/// This rank's part of the job's plan.
#[derive(Debug, Default)]
pub(crate) struct RankPlan {
    /// Rounds per exchange (the job's longest route, in hops).
    pub(crate) rounds: usize,
    /// The connections this rank makes, by peer.
    pub(crate) connections: BTreeMap<usize, Connection>,
    /// Per round, the copies into the connections' send bytes.
    pub(crate) feeds: Vec<Vec<Feed>>,
    /// Per round, the messages that end here.
    pub(crate) deliveries: Vec<Vec<Delivery>>,
    /// Messages to itself: (send link, receive link, bytes).
    pub(crate) locals: Vec<(usize, usize, usize)>,
    /// Bytes of the forwarding buffer (the largest round's forwarded hops).
    pub(crate) staging: usize,
    /// Messages sent, received or forwarded here that pass another rank.
    pub(crate) routes: Vec<Route>,
}

/// Why a plan could not be made.
pub(crate) type PlanError = String;

/// The path of a message from `from` to `to` over `graph`.
fn path(graph: &BoundingGraph, from: usize, to: usize) -> Result<Vec<usize>, PlanError> {
    let mut path = vec![from];
    while *path.last().unwrap_or(&to) != to {
        let at = path[path.len() - 1];
        match graph.next_hop[at][to] {
            Some(next) if path.len() <= graph.next_hop.len() => path.push(next),
            _ => return Err(format!("no route from rank {from} to rank {to}")),
        }
    }
    Ok(path)
}

/// The plan for rank `me`: `messages` in the job's order, `send_link` and
/// `recv_link` find this rank's links by (peer, tag).
pub(crate) fn plan(
    me: usize,
    messages: &[Declared],
    graph: &BoundingGraph,
    send_link: &HashMap<(usize, u32), usize>,
    recv_link: &HashMap<(usize, u32), usize>,
) -> Result<RankPlan, PlanError> {
    let mut out = RankPlan::default();
    // Bytes so far on each (from, to, round), the same on every rank.
    let mut cursor: HashMap<(usize, usize, usize), usize> = HashMap::new();
    let mut staged = Vec::<usize>::new();
    let overflow = || "the bytes of one round overflow the address space".to_string();
    for m in messages {
        let link = |map: &HashMap<(usize, u32), usize>, peer| {
            map.get(&(peer, m.tag))
                .copied()
                .ok_or_else(|| format!("rank {me} has no link for {m:?}"))
        };
        if m.from == m.to {
            if m.from == me {
                out.locals
                    .push((link(send_link, me)?, link(recv_link, me)?, m.len));
            }
            continue;
        }
        let path = path(graph, m.from, m.to)?;
        let hops = path.len() - 1;
        out.rounds = out.rounds.max(hops);
        if hops > 1 && path.contains(&me) {
            out.routes.push(Route {
                path: path.clone(),
                tag: m.tag,
            });
        }
        let mut before = 0;
        for (round, pair) in path.windows(2).enumerate() {
            let (u, v) = (pair[0], pair[1]);
            let at = cursor.entry((u, v, round)).or_default();
            let offset = *at;
            *at = at.checked_add(m.len).ok_or_else(overflow)?;
            let end = *at;
            if u == me {
                let c = out.connections.entry(v).or_default();
                c.send = c.send.max(end);
                let from = if round == 0 {
                    Source::User {
                        link: link(send_link, m.to)?,
                    }
                } else {
                    staged.resize(staged.len().max(round + 1), 0);
                    let s = staged[round];
                    staged[round] = s.checked_add(m.len).ok_or_else(overflow)?;
                    Source::Forward {
                        peer: path[round - 1],
                        offset: before,
                        staged: s,
                    }
                };
                grow(&mut out.feeds, round).push(Feed {
                    from,
                    peer: v,
                    offset,
                    len: m.len,
                });
            }
            if v == me {
                let c = out.connections.entry(u).or_default();
                c.recv = c.recv.max(end);
                if round + 1 == hops {
                    grow(&mut out.deliveries, round).push(Delivery {
                        peer: u,
                        offset,
                        link: link(recv_link, m.from)?,
                        len: m.len,
                    });
                }
            }
            before = offset;
        }
    }
    out.feeds.resize_with(out.rounds, Vec::new);
    out.deliveries.resize_with(out.rounds, Vec::new);
    out.staging = staged.into_iter().max().unwrap_or(0);
    Ok(out)
}

/// `v[i]`, growing `v` to hold it.
fn grow<T>(v: &mut Vec<Vec<T>>, i: usize) -> &mut Vec<T> {
    if v.len() <= i {
        v.resize_with(i + 1, Vec::new);
    }
    &mut v[i]
}

#[cfg(test)]
mod tests {
    use super::*;
    use sode_scheduler::placement::capped_graph;

    /// Runs the plans of every rank of a job in memory, round by round,
    /// moving bytes as the connections would: every message must arrive
    /// whole at its receiver.
    fn simulate(n: usize, bound: usize, messages: &[Declared]) -> Vec<RankPlan> {
        let latency = vec![vec![1.0; n]; n];
        let mut traffic = vec![vec![0.0; n]; n];
        for m in messages {
            traffic[m.from][m.to] += m.len as f64;
        }
        let g = capped_graph(&latency, &traffic, &|_, _| true, bound, 7).unwrap();
        let links = |me: usize, outgoing: bool| -> HashMap<(usize, u32), usize> {
            messages
                .iter()
                .filter(|m| if outgoing { m.from == me } else { m.to == me })
                .enumerate()
                .map(|(i, m)| ((if outgoing { m.to } else { m.from }, m.tag), i))
                .collect()
        };
        let plans: Vec<RankPlan> = (0..n)
            .map(|me| plan(me, messages, &g, &links(me, true), &links(me, false)).unwrap())
            .collect();
        // The user's bytes: message i is filled with byte i + 1.
        let sent: Vec<Vec<Vec<u8>>> = (0..n)
            .map(|me| {
                let mine: Vec<&Declared> = messages.iter().filter(|m| m.from == me).collect();
                mine.iter()
                    .map(|m| {
                        let i = messages.iter().position(|x| x == *m).unwrap();
                        vec![(i % 251) as u8 + 1; m.len]
                    })
                    .collect()
            })
            .collect();
        let mut got: Vec<Vec<Vec<u8>>> = (0..n)
            .map(|me| {
                let k = messages.iter().filter(|m| m.to == me).count();
                vec![Vec::new(); k]
            })
            .collect();
        // wire[(u, v)]: what u sent v in the last round.
        let mut wire: HashMap<(usize, usize), Vec<u8>> = HashMap::new();
        let rounds = plans[0].rounds;
        for round in 0..rounds {
            let mut next = HashMap::new();
            for (me, p) in plans.iter().enumerate() {
                assert_eq!(p.rounds, rounds);
                for (&peer, c) in &p.connections {
                    next.insert((me, peer), vec![0u8; c.send]);
                }
                for f in &p.feeds[round] {
                    let bytes = match f.from {
                        Source::User { link } => sent[me][link].clone(),
                        Source::Forward { peer, offset, .. } => {
                            wire[&(peer, me)][offset..offset + f.len].to_vec()
                        }
                    };
                    next.get_mut(&(me, f.peer)).unwrap()[f.offset..f.offset + f.len]
                        .copy_from_slice(&bytes);
                }
            }
            wire = next;
            for (me, p) in plans.iter().enumerate() {
                for d in &p.deliveries[round] {
                    got[me][d.link] = wire[&(d.peer, me)][d.offset..d.offset + d.len].to_vec();
                }
            }
        }
        for (me, p) in plans.iter().enumerate() {
            for &(s, r, _) in &p.locals {
                got[me][r] = sent[me][s].clone();
            }
        }
        for (i, m) in messages.iter().enumerate() {
            let k = messages[..i].iter().filter(|x| x.to == m.to).count();
            assert_eq!(
                got[m.to][k],
                vec![(i % 251) as u8 + 1; m.len],
                "message {m:?}"
            );
        }
        plans
    }

    #[test]
    fn every_message_arrives_over_a_bounded_all_to_all() {
        for (n, bound) in [(8, 2), (16, 2), (16, 3), (5, 1 + 3)] {
            let mut messages = Vec::new();
            for from in 0..n {
                for k in 0..n {
                    let to = (from + k) % n;
                    messages.push(Declared {
                        from,
                        to,
                        tag: 1,
                        len: 3 + (from + to) % 5,
                    });
                }
            }
            let plans = simulate(n, bound, &messages);
            for p in &plans {
                assert!(p.connections.len() <= bound, "{:?}", p.connections);
            }
            if bound == 2 {
                assert!(
                    plans[0].rounds >= n / 2,
                    "a ring of {n}: {} rounds",
                    plans[0].rounds
                );
                assert!(plans.iter().any(|p| p.staging > 0));
            }
        }
    }

    #[test]
    fn a_sparse_pattern_connects_only_the_pairs_its_routes_use() {
        let n = 16;
        let messages: Vec<Declared> = (0..n)
            .map(|from| Declared {
                from,
                to: (from * 5 + 3) % n,
                tag: 9,
                len: 100,
            })
            .collect();
        let plans = simulate(n, 3, &messages);
        let used: usize = plans.iter().map(|p| p.connections.len()).sum();
        assert!(used <= n * 3, "{used}");
        // Each rank sends one message and receives one: two connections at
        // most are direct, and none is made that no route uses.
        assert_eq!(plans.iter().map(|p| p.rounds).max(), Some(1));
    }
}
