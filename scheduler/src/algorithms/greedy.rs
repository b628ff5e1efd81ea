//! Simulator-guided list scheduling: each put, longest first, goes where the
//! flow-level simulator says the exchange ends soonest, optionally split
//! into equal pieces over several engines.

use crate::instance::{Instance, Piece};
use crate::simulate::run_lists;

/// Pieces are cut at multiples of this many bytes (a cache line), so a
/// split never tears an element.
const SPLIT_ALIGN: u64 = 64;

/// Splits `bytes` into `parts` aligned pieces (fewer if the put is small).
fn cut(bytes: u64, parts: usize) -> Vec<(u64, u64)> {
    let units = bytes.div_ceil(SPLIT_ALIGN);
    let parts = (parts as u64).min(units).max(1);
    let mut out = Vec::new();
    let mut offset = 0;
    for i in 0..parts {
        let units_here = units / parts + u64::from(i < units % parts);
        let len = (units_here * SPLIT_ALIGN).min(bytes - offset);
        out.push((offset, len));
        offset += len;
    }
    out
}

/// Places every put by simulation. With `allow_split`, a put may also be cut
/// into 2..=engines pieces on the least-loaded engines.
pub(crate) fn greedy(instance: &Instance, order: &[usize], allow_split: bool) -> Vec<Vec<Piece>> {
    let engines = instance.machine.engines;
    let mut lists: Vec<Vec<Piece>> = vec![Vec::new(); engines];
    let mut load = vec![0.0f64; engines];
    for &i in order {
        let bytes = instance.puts[i].bytes;
        let mut best: Option<(f64, Vec<Vec<Piece>>, Vec<f64>)> = None;
        let mut consider = |candidate: Vec<Vec<Piece>>, new_load: Vec<f64>| {
            let (_, makespan) = run_lists(instance, &candidate);
            if best.as_ref().is_none_or(|(b, _, _)| makespan < b - 1e-9) {
                best = Some((makespan, candidate, new_load));
            }
        };
        for e in 0..engines {
            let mut candidate = lists.clone();
            candidate[e].push(Piece::whole(instance, i, e));
            let mut new_load = load.clone();
            new_load[e] += instance.alone_us(bytes);
            consider(candidate, new_load);
        }
        if allow_split {
            let mut by_load: Vec<usize> = (0..engines).collect();
            by_load.sort_by(|&a, &b| load[a].total_cmp(&load[b]).then(a.cmp(&b)));
            for parts in 2..=engines {
                let pieces = cut(bytes, parts);
                if pieces.len() < parts {
                    break;
                }
                let mut candidate = lists.clone();
                let mut new_load = load.clone();
                for (&e, &(offset, len)) in by_load.iter().zip(&pieces) {
                    candidate[e].push(Piece { put: i, offset, bytes: len, recv_engine: e });
                    new_load[e] += instance.alone_us(len);
                }
                consider(candidate, new_load);
            }
        }
        let (_, chosen, new_load) = best.expect("at least one engine");
        lists = chosen;
        load = new_load;
    }
    lists
}

/// Longest alone-time first, then direction (deterministic).
pub(crate) fn longest_first(instance: &Instance) -> Vec<usize> {
    super::packing::length_then_direction(instance)
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn cut_tiles_the_put_in_aligned_pieces() {
        for bytes in [1u64, 63, 64, 65, 1000, 224_256] {
            for parts in 1..=6 {
                let pieces = cut(bytes, parts);
                let mut next = 0;
                for &(offset, len) in &pieces {
                    assert_eq!(offset, next);
                    assert!(len > 0);
                    assert_eq!(offset % 64, 0);
                    next += len;
                }
                assert_eq!(next, bytes);
                assert!(pieces.len() <= parts);
            }
        }
    }
}
