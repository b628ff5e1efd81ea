//! An exact branch-and-bound solver over the simulator's own semantics.
//!
//! Engines run their lists back to back, so every plan is decided at the
//! moments an engine falls idle: it takes one of the remaining puts, or its
//! list ends. The search branches on exactly those decisions, drives the
//! flow-level simulator between them, and prunes with a lower bound on the
//! work still to do. The optimum it returns is optimal for the simulated
//! makespan among plans that keep puts whole.

use crate::error::{Result, SchedError};
use crate::instance::{Instance, Piece};
use crate::simulate::{run_lists, Ran, SimState};

/// Largest pattern the exact solver accepts.
pub const MAX_REQUESTS: usize = 12;
/// Search nodes explored before giving up.
const NODE_BUDGET: u64 = 4_000_000;
/// Marks an engine closed at time zero (symmetry breaking).
const CLOSED: usize = usize::MAX;

/// Puts that are interchangeable: same bytes, links and diagonality.
#[derive(Debug)]
struct Class {
    puts: Vec<usize>,
    bytes: u64,
    links: u64,
}

struct Search<'a> {
    instance: &'a Instance,
    classes: Vec<Class>,
    best: f64,
    best_ran: Option<Vec<Vec<Ran>>>,
    nodes: u64,
}

impl<'a> Search<'a> {
    fn bound(&self, state: &SimState<'_>, remaining: &[usize]) -> f64 {
        let inst = self.instance;
        let m = &inst.machine;
        let mut link_left = vec![0.0f64; inst.link_count];
        let mut node_left = 0.0;
        let mut engine_work = 0.0;
        let mut single = 0.0f64;
        let alone_rate = inst
            .engine_rate()
            .min(inst.link_rate())
            .min(inst.node_rate());
        let mut add_links = |links: u64, bytes: f64| {
            for (l, left) in link_left.iter_mut().enumerate() {
                if links & (1 << l) != 0 {
                    *left += bytes;
                }
            }
        };
        for (_, piece, bytes_left, overhead_left) in state.in_progress() {
            add_links(inst.puts[piece.put].links, bytes_left);
            node_left += bytes_left;
            engine_work += overhead_left + bytes_left / inst.engine_rate();
            single = single.max(overhead_left + bytes_left / alone_rate);
        }
        for (class, &count) in self.classes.iter().zip(remaining) {
            if count == 0 {
                continue;
            }
            let total = (class.bytes * count as u64) as f64;
            add_links(class.links, total);
            node_left += total;
            engine_work +=
                count as f64 * (m.command_overhead_us + class.bytes as f64 / inst.engine_rate());
            single = single.max(inst.alone_us(class.bytes));
        }
        let link = link_left.iter().copied().fold(0.0, f64::max) / inst.link_rate();
        let open = state.open_engines().max(1) as f64;
        state.now
            + link
                .max(node_left / inst.node_rate())
                .max(engine_work / open)
                .max(single)
            + m.fixed_overhead_us
    }

    fn dfs(
        &mut self,
        mut state: SimState<'a>,
        remaining: Vec<usize>,
        mut first: Vec<usize>,
    ) -> Result<()> {
        loop {
            if let Some(e) = state.idle_engine() {
                if remaining.iter().all(|&r| r == 0) {
                    state.close(e);
                    continue;
                }
                if self.bound(&state, &remaining) >= self.best - 1e-9 {
                    return Ok(());
                }
                self.nodes += 1;
                if self.nodes > NODE_BUDGET {
                    return Err(SchedError::ExactBudgetExhausted { nodes: self.nodes });
                }
                // At time zero the engines are identical: engine e's first
                // class is no smaller than engine e-1's, and once one engine
                // stays empty the later ones do too.
                let at_start = state.now == 0.0 && first.len() == e;
                let floor = if at_start && e > 0 { first[e - 1] } else { 0 };
                let can_close = state.open_engines() > 1 && !(at_start && e == 0);
                if floor != CLOSED {
                    for c in floor..self.classes.len() {
                        if remaining[c] == 0 {
                            continue;
                        }
                        let class = &self.classes[c];
                        let put = class.puts[class.puts.len() - remaining[c]];
                        let mut next = state.clone();
                        next.assign(e, Piece::whole(self.instance, put, e));
                        let mut left = remaining.clone();
                        left[c] -= 1;
                        let mut f = first.clone();
                        if at_start {
                            f.push(c);
                        }
                        self.dfs(next, left, f)?;
                    }
                }
                if can_close {
                    if at_start {
                        first.push(CLOSED);
                    }
                    state.close(e);
                    return self.dfs(state, remaining, first);
                }
                return Ok(());
            }
            if !state.advance() {
                if remaining.iter().all(|&r| r == 0) {
                    let makespan = state.makespan();
                    if makespan < self.best - 1e-9 {
                        self.best = makespan;
                        self.best_ran = Some(state.ran);
                    }
                }
                return Ok(());
            }
        }
    }
}

/// The optimal engine lists (puts kept whole) and their simulated makespan.
pub(crate) fn exact(instance: &Instance, incumbent: &[Vec<Piece>]) -> Result<Vec<Vec<Piece>>> {
    let n = instance.puts.len();
    if n > MAX_REQUESTS {
        return Err(SchedError::TooLargeForExact {
            requests: n,
            limit: MAX_REQUESTS,
        });
    }
    let mut classes: Vec<Class> = Vec::new();
    for (i, p) in instance.puts.iter().enumerate() {
        match classes.iter_mut().find(|c| {
            c.bytes == p.bytes
                && c.links == p.links
                && instance.puts[c.puts[0]].diagonal == p.diagonal
        }) {
            Some(c) => c.puts.push(i),
            None => classes.push(Class {
                puts: vec![i],
                bytes: p.bytes,
                links: p.links,
            }),
        }
    }
    // Large classes first: good plans are found early and prune the rest.
    classes.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.puts[0].cmp(&b.puts[0])));
    let (_, incumbent_makespan) = run_lists(instance, incumbent);
    let mut search = Search {
        instance,
        classes,
        best: incumbent_makespan,
        best_ran: None,
        nodes: 0,
    };
    let remaining = search.classes.iter().map(|c| c.puts.len()).collect();
    search.dfs(SimState::new(instance), remaining, Vec::new())?;
    Ok(match search.best_ran {
        Some(ran) => ran
            .into_iter()
            .map(|l| l.into_iter().map(|r| r.piece).collect())
            .collect(),
        None => incumbent.to_vec(),
    })
}
