//! Bottom-left strip packing with link, diagonal and receive-engine rules:
//! the engine of BLbased and its variants.
//!
//! The strip is the engines (across) by time (down). Each put is a
//! rectangle one engine wide; it goes at the lowest position any engine
//! column allows, the left-most engine on ties, subject to the rules. The
//! receive engine is the sending engine's index: every process runs the same
//! exchange, so receive engine r sees exactly the commands of send engine r,
//! which never overlap.

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

/// The most rectangles among `placed` (filtered) overlapping at any instant of [t, t + d).
fn peak(placed: &[Placed], keep: impl Fn(&Placed) -> bool, t: f64, d: f64) -> usize {
    const EPS: f64 = 1e-9;
    let mut edges: Vec<(f64, i32)> = Vec::new();
    for p in placed.iter().filter(|p| keep(p)) {
        if p.start < t + d - EPS && t < p.end - EPS && p.end > p.start {
            edges.push((p.start.max(t), 1));
            edges.push((p.end.min(t + d), -1));
        }
    }
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, delta) in edges {
        now += delta;
        most = most.max(now);
    }
    most as usize
}

/// Packs the puts in `order` and returns each engine's timed pieces.
pub(crate) fn bottom_left(instance: &Instance, order: &[usize], rules: &Rules) -> Vec<Vec<Timed>> {
    const EPS: f64 = 1e-9;
    let mut top = vec![0.0f64; rules.engines];
    let mut placed: Vec<Placed> = Vec::with_capacity(order.len());
    let mut columns: Vec<Vec<Timed>> = vec![Vec::new(); rules.engines];
    for &i in order {
        let put = &instance.puts[i];
        let d = height(instance, put.bytes, rules);
        let small = rules.small_puts_fill
            && put.bytes as f64 / instance.engine_rate() < instance.machine.command_overhead_us;
        let mut best: Option<(f64, usize)> = None;
        for (e, &column_top) in top.iter().enumerate() {
            let fits = |t: f64| {
                if small {
                    return true;
                }
                let links_ok = peak(&placed, |p| p.links & put.links != 0, t, d) < rules.link_share;
                let diagonal_ok =
                    !put.diagonal || peak(&placed, |p| p.diagonal, t, d) < rules.diagonal_limit;
                links_ok && diagonal_ok
            };
            // The lowest feasible start is the column top or the end of a
            // rectangle that blocks it.
            let mut candidates: Vec<f64> = vec![column_top];
            if !small {
                candidates.extend(
                    placed
                        .iter()
                        .filter(|p| {
                            (p.links & put.links != 0 || (put.diagonal && p.diagonal))
                                && p.end > column_top
                        })
                        .map(|p| p.end),
                );
            }
            candidates.sort_by(f64::total_cmp);
            if let Some(t) = candidates.into_iter().find(|&t| fits(t)) {
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

/// BLbased's order: length descending, then direction.
pub(crate) fn length_then_direction(instance: &Instance) -> Vec<usize> {
    let mut order: Vec<usize> = (0..instance.puts.len()).collect();
    order.sort_by(|&a, &b| {
        let (pa, pb) = (&instance.puts[a], &instance.puts[b]);
        pb.bytes
            .cmp(&pa.bytes)
            .then_with(|| pa.direction.cmp(&pb.direction))
    });
    order
}
