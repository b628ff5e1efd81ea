//! Bottom-left strip packing with link, diagonal and receive-engine rules:
//! the engine of BLbased and its variants.
//!
//! The strip is the engines (across) by time (down). Each put is a
//! rectangle one engine wide; it goes at the lowest position any engine
//! column allows, the left-most engine on ties, subject to the rules. The
//! receive engine is the sending engine's index: every process runs the same
//! exchange, so receive engine r sees exactly the commands of send engine r,
//! which never overlap.

use std::collections::HashMap;

use crate::instance::{Instance, Piece};
use crate::plan::Timed;

/// The rules one variant packs by.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// Engines the packer may use.
    pub engines: usize,
    /// At most this many rectangles on one link at once (for puts that obey links).
    pub link_share: usize,
    /// At most this many diagonal rectangles at once.
    pub diagonal_limit: usize,
    /// Rectangle height includes the command overhead.
    pub with_overhead: bool,
    /// Rectangle height assumes the link is shared this many ways (1: alone).
    pub assumed_sharing: usize,
    /// Puts whose transfer time is below the command overhead ignore the
    /// link rule and go on the least-loaded engine (overhead-aware packing).
    pub small_puts_fill: bool,
}

#[derive(Debug, Clone, Copy)]
struct Placed {
    start: f64,
    end: f64,
    links: u64,
    diagonal: bool,
}

/// The height of a put's rectangle.
pub(crate) fn height(instance: &Instance, bytes: u64, rules: &Rules) -> f64 {
    let rate = instance
        .engine_rate()
        .min(instance.link_rate() / rules.assumed_sharing as f64);
    let overhead = if rules.with_overhead {
        instance.machine.command_overhead_us
    } else {
        0.0
    };
    overhead + bytes as f64 / rate
}

/// Rectangles sorted by start with the running maximum of their ends: the
/// question "does any overlap [t, t + d)?" in O(log n), for the rules that
/// allow no overlap at all (BLbased's links and bl:1's diagonals).
#[derive(Debug, Default)]
struct Sorted {
    starts: Vec<f64>,
    max_end: Vec<f64>,
    /// (start, end) pairs being sorted, kept to avoid allocating per put.
    pairs: Vec<(f64, f64)>,
}

impl Sorted {
    /// Sorts `rects` into `self`, replacing what it held.
    fn fill(&mut self, rects: &[Placed]) {
        self.pairs.clear();
        self.pairs.extend(
            rects
                .iter()
                .filter(|p| p.end > p.start)
                .map(|p| (p.start, p.end)),
        );
        self.pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut most = f64::NEG_INFINITY;
        self.max_end.clear();
        self.max_end.extend(self.pairs.iter().map(|&(_, end)| {
            most = most.max(end);
            most
        }));
        self.starts.clear();
        self.starts
            .extend(self.pairs.iter().map(|&(start, _)| start));
    }

    /// What `below(rects, 1, t, d)` says: no rectangle starts before
    /// t + d (less EPS) and ends after t (plus EPS). Rounding is monotone,
    /// so the largest end stands for them all.
    fn none_overlap(&self, t: f64, d: f64) -> bool {
        const EPS: f64 = 1e-9;
        let bound = t + d - EPS;
        let k = self.starts.partition_point(|&s| s < bound);
        // (Times are finite: not less is at least.)
        k == 0 || t >= self.max_end[k - 1] - EPS
    }
}

/// Whether fewer than `limit` of `rects` overlap at every instant of
/// [t, t + d).
fn below(rects: &[Placed], limit: usize, t: f64, d: f64, edges: &mut Vec<(f64, i32)>) -> bool {
    const EPS: f64 = 1e-9;
    let overlaps = |p: &Placed| p.start < t + d - EPS && t < p.end - EPS && p.end > p.start;
    if limit == 1 {
        // The common case (BLbased): no rectangle may overlap at all.
        return !rects.iter().any(overlaps);
    }
    edges.clear();
    for p in rects.iter().filter(|p| overlaps(p)) {
        edges.push((p.start.max(t), 1));
        edges.push((p.end.min(t + d), -1));
    }
    if edges.len() < 2 * limit {
        return true;
    }
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut now = 0i32;
    for &(_, delta) in edges.iter() {
        now += delta;
        if now as usize >= limit {
            return false;
        }
    }
    true
}

/// The buffers of one packing, reused from put to put.
#[derive(Debug, Default)]
struct Scratch {
    /// The placed rectangles that share a link with the put being placed.
    on_links: Vec<Placed>,
    /// The placed diagonal rectangles, when the put is diagonal.
    diagonals: Vec<Placed>,
    /// The ends of both, sorted: the candidate start times.
    ends: Vec<f64>,
    links_sorted: Sorted,
    diagonals_sorted: Sorted,
    /// Answers of the general check by start time, per rule.
    known: [HashMap<u64, bool>; 2],
    edges: Vec<(f64, i32)>,
}

/// Packs the puts in `order` and returns each engine's timed pieces.
pub(crate) fn bottom_left(instance: &Instance, order: &[usize], rules: &Rules) -> Vec<Vec<Timed>> {
    const EPS: f64 = 1e-9;
    let mut top = vec![0.0f64; rules.engines];
    let mut placed: Vec<Placed> = Vec::with_capacity(order.len());
    let mut columns: Vec<Vec<Timed>> = vec![Vec::new(); rules.engines];
    let mut x = Scratch::default();
    for &i in order {
        let put = &instance.puts[i];
        let d = height(instance, put.bytes, rules);
        let small = rules.small_puts_fill
            && put.bytes as f64 / instance.engine_rate() < instance.machine.command_overhead_us;
        // The rectangles that can block this one: on a shared link, or
        // diagonal when it is. Feasibility does not depend on the engine,
        // so it is computed once per start time and reused across engines.
        x.on_links.clear();
        x.diagonals.clear();
        if !small {
            x.on_links
                .extend(placed.iter().filter(|p| p.links & put.links != 0));
            if put.diagonal {
                x.diagonals.extend(placed.iter().filter(|p| p.diagonal));
            }
        }
        x.ends.clear();
        x.ends
            .extend(x.on_links.iter().chain(&x.diagonals).map(|p| p.end));
        x.ends.sort_by(f64::total_cmp);
        let links_sorted = rules.link_share == 1;
        let diagonals_sorted = rules.diagonal_limit == 1;
        if links_sorted {
            x.links_sorted.fill(&x.on_links);
        }
        if diagonals_sorted {
            x.diagonals_sorted.fill(&x.diagonals);
        }
        x.known.iter_mut().for_each(HashMap::clear);
        let Scratch {
            on_links,
            diagonals,
            ends,
            links_sorted: by_links,
            diagonals_sorted: by_diagonals,
            known,
            edges,
        } = &mut x;
        let mut fits = |t: f64| {
            if small {
                return true;
            }
            let mut check =
                |rule: usize, sorted: Option<&Sorted>, rects: &[Placed], limit| match sorted {
                    Some(s) => s.none_overlap(t, d),
                    None => *known[rule]
                        .entry(t.to_bits())
                        .or_insert_with(|| below(rects, limit, t, d, edges)),
                };
            check(
                0,
                links_sorted.then_some(&*by_links),
                on_links,
                rules.link_share,
            ) && (!put.diagonal
                || check(
                    1,
                    diagonals_sorted.then_some(&*by_diagonals),
                    diagonals,
                    rules.diagonal_limit,
                ))
        };
        let mut best: Option<(f64, usize)> = None;
        for (e, &column_top) in top.iter().enumerate() {
            // The lowest feasible start is the column top or the end of a
            // rectangle that blocks it.
            let first_end = ends.partition_point(|&x| x <= column_top);
            let found = std::iter::once(column_top)
                .chain(ends[first_end..].iter().copied())
                .find(|&t| fits(t));
            if let Some(t) = found {
                if best.is_none_or(|(bt, _)| t < bt - EPS) {
                    best = Some((t, e));
                }
            }
        }
        // A feasible start always exists: after every placed rectangle.
        let (t, e) = best.unwrap_or_else(|| {
            let end = placed.iter().map(|p| p.end).fold(0.0, f64::max);
            (end.max(top[0]), 0)
        });
        placed.push(Placed {
            start: t,
            end: t + d,
            links: put.links,
            diagonal: put.diagonal,
        });
        top[e] = t + d;
        columns[e].push((Piece::whole(instance, i, e), t, t + d));
    }
    columns
}
