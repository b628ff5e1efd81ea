//! Simulator-guided list scheduling: each put, longest first, goes to the
//! end of the engine list where the flow-level simulator says the exchange
//! (so far) ends soonest.

use crate::instance::Piece;
use crate::simulate::Runner;

/// Places every put, in `order`, by simulation.
pub(crate) fn greedy(runner: &mut Runner<'_>, order: &[usize]) -> Vec<Vec<Piece>> {
    let instance = runner.instance();
    let engines = instance.machine.engines;
    let mut lists: Vec<Vec<Piece>> = vec![Vec::new(); engines];
    runner.record(&lists);
    for &i in order {
        // Every candidate is the recorded lists and one piece more at the
        // end of an engine's: each starts where that engine closed.
        let mut best: Option<(f64, usize, usize)> = None;
        for e in 0..engines {
            lists[e].push(Piece::whole(instance, i, e));
            let from = runner.first_change(&[(e, lists[e].len() - 1)]);
            let makespan = runner
                .resume_within(&lists, from, f64::INFINITY)
                .expect("an unbounded run always finishes");
            lists[e].pop();
            if best.is_none_or(|(b, _, _)| makespan < b - 1e-9) {
                best = Some((makespan, e, from));
            }
        }
        let (_, e, from) = best.expect("at least one engine");
        lists[e].push(Piece::whole(instance, i, e));
        runner.record_from(&lists, from);
    }
    lists
}
