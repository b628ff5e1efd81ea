//! Simulator-guided list scheduling: each put, longest first, goes to the
//! end of the engine list where the flow-level simulator says the exchange
//! (so far) ends soonest.

use crate::instance::{Instance, Piece};
use crate::simulate::run_lists;

/// Places every put, in `order`, by simulation.
pub(crate) fn greedy(instance: &Instance, order: &[usize]) -> Vec<Vec<Piece>> {
    let engines = instance.machine.engines;
    let mut lists: Vec<Vec<Piece>> = vec![Vec::new(); engines];
    for &i in order {
        let mut best: Option<(f64, usize)> = None;
        for e in 0..engines {
            lists[e].push(Piece::whole(instance, i, e));
            let (_, makespan) = run_lists(instance, &lists);
            lists[e].pop();
            if best.is_none_or(|(b, _)| makespan < b - 1e-9) {
                best = Some((makespan, e));
            }
        }
        let (_, e) = best.expect("at least one engine");
        lists[e].push(Piece::whole(instance, i, e));
    }
    lists
}

/// Longest first, then direction (BLbased's order).
pub(crate) fn longest_first(instance: &Instance) -> Vec<usize> {
    super::packing::length_then_direction(instance)
}
